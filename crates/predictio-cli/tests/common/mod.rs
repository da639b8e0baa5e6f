//! What the CLI's end-to-end tests share: the binary, success and failure
//! checks that print the program's stderr, and temporary directories on the
//! disk (not tmpfs, so the page cache and eBPF see real files).
#![allow(dead_code)] // each test crate uses its own subset

use std::process::Output;

/// The `predictio` binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_predictio")
}

/// Asserts `out` succeeded; returns its stdout.
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert!(out.status.success(), "failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts `out` failed with `needle` in its stderr.
#[track_caller]
pub fn fails_with(out: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, got success; stderr: {stderr}");
    assert!(stderr.contains(needle), "stderr {stderr:?} does not say {needle:?}");
}

/// A temporary directory under /var/tmp named `prefix…`.
pub fn disk_dir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir_in("/var/tmp").expect("temp dir on disk")
}
