//! Helpers for predictio's own tests across its crates: knowing whether the
//! test runs as root, and skipping a test that needs more than it has —
//! with a message outside CI, and as a failure under `CI=true`, where every
//! test must run for real.

/// Whether this process runs as root (real uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Skips a test for `reason`: prints it and returns true, or panics under
/// `CI=true`. Use as `if !is_root() && skip("needs root") { return; }`.
#[track_caller]
pub fn skip(reason: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("under CI=true this test must run, but: {reason}");
    }
    eprintln!("skipping: {reason}");
    true
}
