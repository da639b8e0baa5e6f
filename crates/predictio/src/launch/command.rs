//! Which profile a command line will launch under, worked out before it
//! runs, the way the kernel will see it: `predictio record` and `run` (and
//! the launch bench) key a command by this, the daemon by what the eBPF
//! exec record reports, and the two must agree for a profile recorded by
//! hand to be the one the daemon replays.
//!
//! The program is found as `execvp` finds it (a name with a `/` as given,
//! else the first executable match on `PATH`). A `#!` script is run by its
//! interpreter (`binfmt_script`): the executable is the interpreter and the
//! command line becomes `interpreter [its one argument] script args…` with
//! the script's path as found, recursively (at most [`MAX_INTERPRETERS`]
//! levels, the kernel's limit). Does I/O (stat, and the first line of a
//! script); never called on the event path.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::profile::FileIdentity;

/// Interpreters of interpreters followed at most (the kernel's too).
pub const MAX_INTERPRETERS: usize = 4;

/// Why a command cannot be keyed.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command line is empty.
    #[error("empty command")]
    Empty,
    /// No such program.
    #[error("{0}: command not found on PATH")]
    NotFound(String),
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Scripts nested deeper than the kernel runs.
    #[error("{0}: more than {MAX_INTERPRETERS} levels of #! interpreters")]
    TooDeep(String),
}

/// What a command launches as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// The executable the kernel runs (the interpreter, for a script),
    /// its path resolved.
    pub exe: FileIdentity,
    /// The command line the kernel hands it.
    pub argv: Vec<OsString>,
    /// Its shape ([`super::shape`]).
    pub shape: String,
}

/// The program `name` runs, found as `execvp` finds it; not resolved (the
/// kernel's command line for a script holds this path).
pub fn find_program(name: &OsStr) -> Result<PathBuf, CommandError> {
    let shown = || name.to_string_lossy().into_owned();
    if name.as_bytes().contains(&b'/') {
        let path = PathBuf::from(name);
        return if path.is_file() { Ok(path) } else { Err(CommandError::NotFound(shown())) };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
        .ok_or_else(|| CommandError::NotFound(shown()))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The interpreter line of the file at `path`, if it starts with `#!`:
/// the interpreter and its optional single argument, as the kernel splits
/// them (the rest of the line after the interpreter, trimmed, is one
/// argument).
fn shebang(path: &Path) -> Result<Option<(OsString, Option<OsString>)>, CommandError> {
    use std::io::Read;
    let io = |source| CommandError::Io { path: path.display().to_string(), source };
    let mut head = Vec::with_capacity(crate::exec_image::SHEBANG_BYTES);
    std::fs::File::open(path)
        .map_err(io)?
        .take(crate::exec_image::SHEBANG_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    Ok(crate::exec_image::shebang(&head).map(|(interpreter, arg)| {
        (OsString::from_vec(interpreter.to_vec()), arg.map(|a| OsString::from_vec(a.to_vec())))
    }))
}

/// What `command` (the program and its arguments) launches as.
pub fn launch_of<S: AsRef<OsStr>>(command: &[S]) -> Result<Launch, CommandError> {
    let first = command.first().ok_or(CommandError::Empty)?;
    let mut file = find_program(first.as_ref())?;
    let mut argv: Vec<OsString> = command.iter().map(|a| a.as_ref().to_owned()).collect();
    for _ in 0..=MAX_INTERPRETERS {
        let Some((interpreter, arg)) = shebang(&file)? else {
            let resolved =
                file.canonicalize().map_err(|source| CommandError::Io { path: file.display().to_string(), source })?;
            let exe = FileIdentity::of_path(&resolved)
                .map_err(|source| CommandError::Io { path: resolved.display().to_string(), source })?;
            let shape = super::shape::of_args(&argv);
            return Ok(Launch { exe, argv, shape });
        };
        // binfmt_script: argv[0] goes, the interpreter (and its argument)
        // and the script's path as it was exec'd come first.
        let mut next = vec![interpreter.clone()];
        next.extend(arg);
        next.push(file.into_os_string());
        next.extend(argv.into_iter().skip(1));
        argv = next;
        file = PathBuf::from(&interpreter);
    }
    Err(CommandError::TooDeep(first.as_ref().to_string_lossy().into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binary_is_itself_and_a_script_its_interpreter() {
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let binary = launch_of(&["/bin/sh", "-c", "true"]).unwrap();
        assert_eq!(binary.exe.path, sh.display().to_string());
        assert_eq!(binary.shape, super::super::shape::of_args(&["/bin/sh", "-c", "true"]));

        let dir = tempfile::tempdir().unwrap();
        let path = crate::testing::executable_script(dir.path(), "tool.sh", "#!/bin/sh -e\necho hi\n");
        let launch = launch_of(&[path.as_os_str(), OsStr::new("--fast")]).unwrap();
        assert_eq!(launch.exe.path, sh.display().to_string(), "the interpreter runs");
        let want: Vec<OsString> =
            ["/bin/sh", "-e", path.to_str().unwrap(), "--fast"].iter().map(OsString::from).collect();
        assert_eq!(launch.argv, want, "as binfmt_script rewrites it");
        assert_eq!(launch.shape, format!("sh -e {} --fast", path.display()));
    }

    #[test]
    fn env_scripts_nesting_and_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let env = crate::testing::executable_script(dir.path(), "a.py", "#!/usr/bin/env python3\nprint(1)\n");
        let launch = launch_of(&[env.as_os_str()]).unwrap();
        assert!(launch.exe.path.ends_with("/env"), "{}", launch.exe.path);
        assert_eq!(launch.shape, format!("env python3 {}", env.display()), "env's command counts, not env");
        // A script whose interpreter is a script.
        let inner = crate::testing::executable_script(dir.path(), "inner", "#!/bin/sh\n");
        let outer = crate::testing::executable_script(dir.path(), "outer", &format!("#!{}\n", inner.display()));
        let launch = launch_of(&[outer.as_os_str()]).unwrap();
        assert_eq!(launch.exe.path, std::fs::canonicalize("/bin/sh").unwrap().display().to_string());
        assert_eq!(launch.argv.len(), 3);
        // Loops stop with an error, missing programs too.
        let looped =
            crate::testing::executable_script(dir.path(), "loop", &format!("#!{}/loop\n", dir.path().display()));
        assert!(matches!(launch_of(&[looped.as_os_str()]), Err(CommandError::TooDeep(_))));
        assert!(matches!(launch_of(&["/no/such/program"]), Err(CommandError::NotFound(_))));
        assert!(matches!(launch_of(&["no-such-program-predictio"]), Err(CommandError::NotFound(_))));
        assert!(matches!(launch_of::<&str>(&[]), Err(CommandError::Empty)));
    }
}
