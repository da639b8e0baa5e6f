//! A restarted daemon knows what it learned before it stopped: a launch of
//! a profile stored minutes ago that its replay (or a warm cache) served is
//! not learned again, as it would not be without the restart. Needs root
//! (eBPF, drop_caches): outside CI it skips with a message, under `CI=true`
//! it must run.

mod common;
use common::{drop_caches, start_launch_daemon, stored_runs};

use std::process::Command;
use std::time::{Duration, Instant};

const PYTHON: &str = "/usr/bin/python3";

/// A launch that reads a few MiB cold: above the default learning floor.
const HEAVY: [&str; 2] = ["-c", "import decimal, email.mime.multipart, http.client, sqlite3; print(7)"];

fn launch(cold: bool) {
    if cold {
        drop_caches();
    }
    let out = Command::new(PYTHON).args(HEAVY).output().expect("python runs");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "7");
}

#[test]
fn a_restarted_daemon_does_not_learn_again_a_launch_it_already_has() {
    if !common::root_with_ebpf() {
        return;
    }
    let exe = std::fs::canonicalize(PYTHON).expect("python path").display().to_string();
    let dir = common::disk_dir("predictio-restart");
    let store = dir.path().join("store");

    // Learned: stored from the second cold launch.
    let daemon = start_launch_daemon(dir.path(), &store, &[&exe], "", "");
    launch(true);
    launch(true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored_runs(&store, &exe) < 2 {
        assert!(Instant::now() < deadline, "the daemon did not learn two launches of {exe}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let runs = stored_runs(&store, &exe);
    drop(daemon);

    // Restarted, as at boot: warm launches, which read nothing themselves,
    // teach the profile nothing and are not merged into it.
    let daemon = start_launch_daemon(dir.path(), &store, &[&exe], "", "");
    launch(false);
    for _ in 0..3 {
        launch(false);
    }
    // The learner takes a launch after its exit; give it time to store one.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(stored_runs(&store, &exe), runs, "the restarted daemon learned a warm launch of {exe} again");
    drop(daemon);
}
