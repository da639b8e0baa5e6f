//! What the CLI's end-to-end tests share: the binary, success and failure
//! checks that print the program's stderr, and temporary directories on the
//! disk (not tmpfs, so the page cache and eBPF see real files).
#![allow(dead_code)] // each test crate uses its own subset

use std::process::Output;
use std::time::{Duration, Instant};

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

/// Drops the page cache (root): `sync`, then `drop_caches`.
pub fn drop_caches() {
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop_caches (root)");
}

/// The status document (`stat --json`) of the daemon whose control socket
/// is `dir/control.sock`.
pub fn daemon_status(dir: &std::path::Path) -> serde_json::Value {
    let out = std::process::Command::new(bin())
        .args(["stat", "--json", "--control"])
        .arg(dir.join("control.sock"))
        .output()
        .expect("stat runs");
    serde_json::from_str(&ok(&out)).expect("stat --json")
}

/// Runs the store at `store` holds for the executable `exe` (0: none).
pub fn stored_runs(store: &std::path::Path, exe: &str) -> u64 {
    let out = std::process::Command::new(bin())
        .args(["profile", "list", "--json", "--store"])
        .arg(store)
        .output()
        .expect("profile list runs");
    let list: serde_json::Value = serde_json::from_str(&ok(&out)).expect("list --json");
    list.as_array().into_iter().flatten().find(|e| e["exe"] == exe).and_then(|e| e["runs"].as_u64()).unwrap_or(0)
}

/// Whether this test can run the daemon on eBPF: as root, with the BPF
/// object built in. Otherwise it says why and the test returns (under
/// `CI=true` that is a failure).
pub fn root_with_ebpf() -> bool {
    if !predictio::testing::is_root() {
        predictio::testing::skip("needs root (eBPF, drop_caches)");
        return false;
    }
    if let Err(why) = predictio_bpf::available() {
        predictio::testing::skip(&format!("needs eBPF: {why}"));
        return false;
    }
    true
}

/// A daemon process, killed when dropped.
pub struct Daemon(pub std::process::Child);

impl Daemon {
    /// Waits (up to 20 s) until the daemon has bound its control socket in
    /// `dir`: it is ready. Fails if it exits first.
    #[track_caller]
    pub fn wait_ready(&mut self, dir: &std::path::Path) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !dir.join("control.sock").exists() {
            assert!(Instant::now() < deadline, "the daemon did not open its control socket");
            assert!(self.0.try_wait().ok().flatten().is_none(), "the daemon exited at start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the daemon on eBPF (unless `observe_extra` names the source)
/// with a config in `dir` that learns and
/// replays only the executables under any of `allow`, its `[observe]`
/// section ending with `observe_extra` and its `[launch]` section with
/// `launch_extra`; returns once its control socket is up.
pub fn start_launch_daemon(
    dir: &std::path::Path,
    store: &std::path::Path,
    allow: &[&str],
    observe_extra: &str,
    launch_extra: &str,
) -> Daemon {
    let config = dir.join("predictio.toml");
    // A daemon killed before leaves its socket: wait for this one's.
    let _ = std::fs::remove_file(dir.join("control.sock"));
    let allow: Vec<String> = allow.iter().map(|p| format!("{p:?}")).collect();
    std::fs::write(
        &config,
        format!(
            "policies = [\"hints\"]\n[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n\
             [observe]\n{source}{observe_extra}\n[launch]\nstore = \"{s}\"\nallow = [{allow}]\n{launch_extra}",
            // eBPF unless the caller names the source.
            source = if observe_extra.contains("source =") { "" } else { "source = \"ebpf\"\n" },
            d = dir.display(),
            s = store.display(),
            allow = allow.join(", ")
        ),
    )
    .expect("config");
    let mut daemon = Daemon(
        std::process::Command::new(bin())
            .args(["daemon", "--config", config.to_str().expect("utf8")])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("daemon starts"),
    );
    daemon.wait_ready(dir);
    daemon
}

/// Pages the `launch` policy asked for, from a status document (`run
/// --json`, `stat --json`).
pub fn launch_requested_pages(status: &serde_json::Value) -> u64 {
    status["executor"]["origins"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["name"] == "launch")
        .and_then(|o| o["counters"]["requested_pages"].as_u64())
        .unwrap_or(0)
}
