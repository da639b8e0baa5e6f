//! What the shell tests share: the extension of this very build and the
//! `sqlite3` shell.

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `libpredictio_sqlite.so` of this very build. Cargo builds the library
/// unit with all its crate types into `<target>/<profile>/deps/`, next to
/// this test binary; only `cargo build` copies it up a level, so `deps/` is
/// the one that is never stale.
pub fn extension() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    let lib = deps.join("libpredictio_sqlite.so");
    assert!(lib.exists(), "{} not found: the crate's cdylib crate type produces it", lib.display());
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
