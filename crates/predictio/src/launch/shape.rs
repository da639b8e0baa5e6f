//! Command shapes: which launches of one executable share a profile.
//!
//! One executable can be many programs. A multi-call binary (rustup's
//! proxies, busybox) dispatches on its name and arguments; an interpreter
//! is a different program per script. One profile per executable merges
//! them all, and a replay of the merged profile reads what every one of
//! them reads: measured on the launch bench, a rustup profile that had
//! learned `rustc --version` and `rustc hello.rs` made a cold
//! `rustc --version` 431–542 ms against 247–292 without predictio (its own
//! profile: 226–236 ms). So a profile is keyed by the executable and the
//! *shape* of its command line ([`of_argv`]):
//!
//! - the name it was run by (`argv[0]`'s last component);
//! - its options in order, at most [`MAX_OPTIONS`]: a long option up to its
//!   `=` (`--edition=`), a short one by its letter (`-c`, `-O`, `-I`), so
//!   option values (`-O2`, `-I/some/dir`, `--password=...`) are not kept;
//! - its first positional argument — the script of an interpreter, the
//!   source of a compiler, the `-c` code, the subcommand of a driver —
//!   verbatim when it looks like a file name (it holds a `/` or a `.`, and
//!   only name characters), else as a hash (`#` and 12 hex digits), so no
//!   inline code, URL or secret is stored; later positionals are not kept.
//!
//! `env` (a `#!/usr/bin/env python3` script) is shaped by the command it
//! runs: `env python3 /path/script.py`.
//!
//! `python3 -c 'import json'` and `python3 -c 'import sqlite3'` get two
//! profiles; `clang -O2 -c a.c` and `clang -O0 -c a.c` one. Only the first
//! [`ARGV_BYTES`] bytes of the command line count, whoever reads it (the
//! eBPF exec record holds that many), so `predictio run`, `record` and the
//! daemon agree on a shape. Pure.

/// Bytes of the command line (NUL-separated arguments) a shape is made of.
pub const ARGV_BYTES: usize = 256;

/// Options a shape keeps at most.
pub const MAX_OPTIONS: usize = 16;

/// Bytes of one kept token at most (a longer one is hashed).
const MAX_TOKEN: usize = 64;

/// The shape of the command line `argv`: its arguments, each followed by a
/// NUL, as `/proc/PID/cmdline` and the kernel's argument area hold them
/// (only the first [`ARGV_BYTES`] count). Empty for an empty command line.
pub fn of_argv(argv: &[u8]) -> String {
    let argv = &argv[..argv.len().min(ARGV_BYTES)];
    let argv = argv.strip_suffix(&[0]).unwrap_or(argv);
    if argv.is_empty() {
        return String::new();
    }
    let mut args = argv.split(|&b| b == 0);
    let arg0 = args.next().unwrap_or_default();
    let name = arg0.rsplit(|&b| b == b'/').next().unwrap_or_default();
    if name == b"env" {
        return env_shape(args.collect());
    }
    let mut out = token(name, |t| t.iter().all(|&b| name_byte(b)));
    let (mut options, mut positional, mut only_positional) = (0, false, false);
    for arg in args {
        if !only_positional && arg == b"--" {
            only_positional = true;
        } else if !only_positional && arg.len() > 1 && arg[0] == b'-' {
            if options < MAX_OPTIONS {
                options += 1;
                let kept = if arg[1] == b'-' {
                    arg.iter().position(|&b| b == b'=').map_or(arg, |eq| &arg[..=eq])
                } else {
                    &arg[..2]
                };
                out.push(' ');
                out.push_str(&token(kept, |t| t.iter().all(|&b| name_byte(b) || b == b'=')));
            }
        } else if !positional {
            positional = true;
            out.push(' ');
            out.push_str(&token(arg, |t| t.iter().any(|&b| b == b'/' || b == b'.') && t.iter().all(|&b| name_byte(b))));
        }
    }
    out
}

/// `env [options] [NAME=value…] command…` (a `#!/usr/bin/env python3`
/// script, as the kernel runs it): `env` and the shape of its command, so
/// every such script is told apart by its path as any other. `-S` (split
/// one argument into several, for `#!` lines with options) is honoured;
/// other options and the assignments are left out.
fn env_shape(args: Vec<&[u8]>) -> String {
    let mut command: Vec<u8> = Vec::new();
    let mut rest = args.into_iter().peekable();
    while let Some(arg) = rest.peek() {
        if let Some(split) = arg.strip_prefix(b"-S") {
            let split = split.to_vec();
            rest.next();
            for word in split.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()) {
                command.extend_from_slice(word);
                command.push(0);
            }
            break;
        } else if arg.starts_with(b"-") || arg.contains(&b'=') {
            rest.next();
        } else {
            break;
        }
    }
    for arg in rest {
        command.extend_from_slice(arg);
        command.push(0);
    }
    let inner = of_argv(&command);
    if inner.is_empty() { "env".to_owned() } else { format!("env {inner}") }
}

/// The shape of a command given as its arguments (`argv[0]` first), as
/// [`of_argv`] makes it of the same command line read from the kernel.
pub fn of_args<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut argv = Vec::new();
    for arg in args {
        if argv.len() >= ARGV_BYTES {
            break;
        }
        argv.extend_from_slice(arg.as_ref().as_bytes());
        argv.push(0);
    }
    of_argv(&argv)
}

/// Characters kept verbatim.
fn name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+' | b'/' | b',' | b'~')
}

/// `bytes` verbatim when `keep` says so and it is short, else its hash.
fn token(bytes: &[u8], keep: impl Fn(&[u8]) -> bool) -> String {
    if !bytes.is_empty() && bytes.len() <= MAX_TOKEN && keep(bytes) {
        // Only ASCII name bytes pass `keep`.
        String::from_utf8_lossy(bytes).into_owned()
    } else {
        format!("#{:012x}", fnv1a(bytes) & 0xffff_ffff_ffff)
    }
}

/// FNV-1a, 64 bits: stable across builds and machines (profiles are
/// exported and imported), unlike the standard library's hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(args: &[&str]) -> String {
        of_args(args)
    }

    #[test]
    fn name_options_and_first_positional() {
        assert_eq!(shape(&["rustc", "--version"]), "rustc --version");
        assert_eq!(shape(&["/root/.cargo/bin/rustc", "hello.rs", "-o", "/tmp/x"]), "rustc hello.rs -o");
        assert_eq!(shape(&["clang", "-O2", "-c", "small.c", "-o", "small.o"]), "clang -O -c small.c -o");
        assert_eq!(shape(&["clang", "-O0", "-c", "small.c"]), shape(&["clang", "-O2", "-c", "small.c"]));
        assert_eq!(shape(&["/usr/bin/python3", "/usr/bin/ipython3", "-c", "1"]), "python3 /usr/bin/ipython3 -c");
        assert!(shape(&["gdb", "--batch", "--ex=info", "x"]).starts_with("gdb --batch --ex= #"));
        assert_eq!(shape(&["true"]), "true");
        assert_eq!(of_argv(b""), "");
    }

    #[test]
    fn code_and_words_are_hashed_and_told_apart() {
        let a = shape(&["python3", "-c", "import json"]);
        let b = shape(&["python3", "-c", "import sqlite3"]);
        assert!(a.starts_with("python3 -c #") && a.len() == "python3 -c #".len() + 12, "{a}");
        assert_ne!(a, b);
        // A secret given as an option's value or in a URL is not kept.
        assert!(!shape(&["mysql", "-phunter2", "db"]).contains("hunter2"));
        assert!(!shape(&["tool", "--password=hunter2"]).contains("hunter2"));
        assert!(!shape(&["curl", "https://user:hunter2@host/x"]).contains("hunter2"));
        assert!(!shape(&["tool", "hunter2"]).contains("hunter2"));
        // Later positionals do not count.
        assert_eq!(shape(&["cp", "a.txt", "b.txt"]), shape(&["cp", "a.txt", "c.txt"]));
    }

    #[test]
    fn env_is_shaped_by_its_command() {
        assert_eq!(shape(&["/usr/bin/env", "python3", "/opt/tool.py", "-v"]), "env python3 /opt/tool.py -v");
        assert_ne!(shape(&["/usr/bin/env", "python3", "/opt/a.py"]), shape(&["/usr/bin/env", "python3", "/opt/b.py"]));
        assert_eq!(shape(&["env", "-i", "FOO=1", "cc", "-c", "x.c"]), "env cc -c x.c");
        assert_eq!(shape(&["/usr/bin/env", "-S python3 -u", "/opt/t.py"]), "env python3 -u /opt/t.py");
        assert_eq!(shape(&["env"]), "env");
    }

    #[test]
    fn double_dash_ends_the_options() {
        assert_eq!(shape(&["prog", "--", "-x.sh"]), "prog -x.sh");
        assert!(shape(&["prog", "-", "x.sh"]).starts_with("prog #"), "a lone - is a positional");
    }

    #[test]
    fn the_kernel_form_and_the_argument_form_agree_also_when_cut() {
        let long: Vec<String> = (0..100).map(|i| format!("--opt{i}=v")).collect();
        let mut args = vec!["prog".to_owned(), "run.py".to_owned()];
        args.extend(long);
        let mut argv = Vec::new();
        for a in &args {
            argv.extend_from_slice(a.as_bytes());
            argv.push(0);
        }
        assert_eq!(of_args(&args), of_argv(&argv));
        assert_eq!(of_args(&args).split(' ').count(), 2 + MAX_OPTIONS);
        // Without the trailing NUL (a command line cut by the reader).
        assert_eq!(of_argv(b"rustc\0--version"), "rustc --version");
        // Non-UTF-8 and odd bytes are hashed, never lost or panicked on.
        assert!(of_argv(b"\xff\xfe\0-\xc3\xa9\0").starts_with('#'));
    }
}
