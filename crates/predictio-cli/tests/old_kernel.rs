//! The daemon as it runs on kernels before Linux 6.11 (RHEL 9, Ubuntu
//! 22.04 and 24.04, Debian 12), which lack the page-access tracepoints
//! (`mm_filemap_get_pages`, `_fault`, `_map_pages`): the real kernel with
//! them assumed missing (`[observe] assume_missing = ["filemap_access"]`).
//! eBPF observation must still run, say what it runs without, and learn a
//! real program's launches from page-cache misses and the process tree
//! alone, then replay them. Needs root (eBPF, drop_caches): outside CI it
//! skips with a message, under `CI=true` it must run.

mod common;
use common::{Daemon, bin, launch_requested_pages, ok, start_launch_daemon};

use predictio::testing::{is_root, skip};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

/// A launch that reads a few MiB cold: above the default learning floor.
const HEAVY: [&str; 2] = ["-c", "import decimal, email.mime.multipart, http.client, sqlite3; print(7)"];

fn predictio(store: &Path, args: &[&str]) -> Output {
    Command::new(bin()).arg(args[0]).arg("--store").arg(store).args(&args[1..]).output().expect("predictio runs")
}

fn drop_caches() {
    let _ = Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop_caches (root)");
}

/// Starts the daemon on eBPF without the page-access hooks, learning and
/// replaying only `exe`; returns once its control socket is up.
fn start_daemon(dir: &Path, store: &Path, exe: &str) -> Daemon {
    start_launch_daemon(dir, store, &[exe], "assume_missing = [\"filemap_access\"]", "")
}

fn status(dir: &Path) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["stat", "--json", "--control"])
        .arg(dir.join("control.sock"))
        .output()
        .expect("stat runs");
    serde_json::from_str(&ok(&out)).expect("stat --json")
}

fn stored_runs(store: &Path, exe: &str) -> u64 {
    let out = predictio(store, &["profile", "list", "--json"]);
    let list: serde_json::Value = serde_json::from_str(&ok(&out)).expect("list --json");
    list.as_array().into_iter().flatten().find(|e| e["exe"] == exe).and_then(|e| e["runs"].as_u64()).unwrap_or(0)
}

fn cold_launch() {
    drop_caches();
    let out = Command::new(PYTHON).args(HEAVY).output().expect("python runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn without_page_access_tracepoints_the_daemon_learns_and_replays_launches_from_misses() {
    if !is_root() {
        skip("needs root (eBPF, drop_caches)");
        return;
    }
    if let Err(why) = predictio_bpf::available() {
        skip(&format!("needs eBPF: {why}"));
        return;
    }
    let exe = std::fs::canonicalize(PYTHON).expect("python path").display().to_string();
    let dir = common::disk_dir("predictio-old-kernel");
    let store = dir.path().join("store");
    let daemon = start_daemon(dir.path(), &store, &exe);

    let before = status(dir.path());
    assert_eq!(before["source"], "ebpf", "{before}");
    let note = before["source_note"].as_str().unwrap_or_default();
    for hook in ["filemap:mm_filemap_get_pages", "filemap:mm_filemap_fault", "filemap:mm_filemap_map_pages"] {
        assert!(note.contains(hook), "the status names {hook} missing: {note:?}");
    }

    // A command is stored from its second launch.
    cold_launch();
    cold_launch();
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored_runs(&store, &exe) < 2 {
        assert!(Instant::now() < deadline, "the daemon did not learn two launches of {exe} from misses");
        std::thread::sleep(Duration::from_millis(100));
    }
    let shown: serde_json::Value =
        serde_json::from_str(&ok(&predictio(&store, &["profile", "show", "--json", PYTHON]))).expect("show --json");
    let files = shown["files"].as_array().map_or(0, Vec::len);
    assert!(files > 1, "the launch's files are learned: {shown}");

    // The next cold launch is replayed.
    let replayed_before = launch_requested_pages(&status(dir.path()));
    cold_launch();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut after = status(dir.path());
    while launch_requested_pages(&after) <= replayed_before {
        assert!(Instant::now() < deadline, "the third launch was not replayed: {after}");
        std::thread::sleep(Duration::from_millis(100));
        after = status(dir.path());
    }
    // No hit was observed: the programs that report them are not attached.
    for counter in ["reads", "faults", "map_pages"] {
        assert_eq!(after["observer"][counter].as_u64().unwrap_or(0), 0, "{counter}: {}", after["observer"]);
    }
    drop(daemon);
}
