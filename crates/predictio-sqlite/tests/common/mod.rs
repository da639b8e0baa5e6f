//! What the shell tests share: the extension of this very build and the
//! `sqlite3` shell.
//!
//! The shell runs with `PREDICTIO_SQLITE_RUNTIME=eager` (the runtime loaded
//! at `.load`) unless a test asks for the default, lazy mode
//! ([`run_in`]): the tests of what the runtime does on small databases
//! would otherwise depend on whether their reads waited long enough to
//! load it.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// The loader `libpredictio_sqlite.so` of this very build, beside the
/// runtime library it loads. Cargo builds the library unit with all its
/// crate types into `<target>/<profile>/deps/`, next to this test binary
/// (and the build script writes the loader there too); only `cargo build`
/// copies the runtime up a level, so `deps/` is the one that is never
/// stale.
pub fn extension() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    let lib = deps.join("libpredictio_sqlite.so");
    assert!(lib.exists(), "{} not found: the crate's build script builds it", lib.display());
    let runtime = deps.join("libpredictio_sqlite_runtime.so");
    assert!(runtime.exists(), "{} not found: the crate's cdylib crate type produces it", runtime.display());
    lib
}

/// Whether the `sqlite3` shell is there; outside CI a missing shell skips
/// the test with a message, under `CI=true` it fails.
#[track_caller]
pub fn have_sqlite3() -> bool {
    let found = Command::new("sqlite3").arg("-version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !found {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "sqlite3 shell missing under CI (scripts/deps.sh)");
        eprintln!("skipping: needs the sqlite3 shell (apt install sqlite3)");
    }
    found
}

/// Seconds a shell run may take before it counts as a hang (`timeout` then
/// ends it and exits with [`HUNG`]).
pub const HANG_SECONDS: &str = "120";
/// `timeout(1)`'s exit code when it had to end the command.
#[allow(dead_code)]
pub const HUNG: i32 = 124;

/// How the loader loads the runtime (`PREDICTIO_SQLITE_RUNTIME`).
#[derive(Clone, Copy, Debug)]
pub enum Runtime {
    /// At `.load`.
    Eager,
    /// The default: once the reads have waited long enough.
    #[allow(dead_code)]
    Lazy,
    /// Never: the shim only forwards.
    #[allow(dead_code)]
    Off,
}

impl Runtime {
    pub fn env(self) -> &'static str {
        match self {
            Runtime::Eager => "eager",
            Runtime::Lazy => "lazy",
            Runtime::Off => "off",
        }
    }
}

/// Runs the `sqlite3` shell with `args` and `script` on stdin, the runtime
/// loaded eagerly, ended as hung after [`HANG_SECONDS`].
#[track_caller]
pub fn run(args: &[&str], script: &str) -> Output {
    run_in(Runtime::Eager, args, script)
}

/// [`run`] with the runtime loaded as `runtime` says.
#[track_caller]
pub fn run_in(runtime: Runtime, args: &[&str], script: &str) -> Output {
    let mut child = Command::new("timeout")
        .env("PREDICTIO_SQLITE_RUNTIME", runtime.env())
        .args([HANG_SECONDS, "sqlite3"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sqlite3");
    let mut stdin = child.stdin.take().expect("stdin");
    // Written from a thread: a long script and a long answer would
    // otherwise wait on each other's pipes.
    let script = script.to_owned();
    let writer = std::thread::spawn(move || stdin.write_all(script.as_bytes()));
    let out = child.wait_with_output().expect("sqlite3 output");
    writer.join().expect("script writer").expect("write script");
    out
}
