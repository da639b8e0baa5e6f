//! Never slower, kept by the daemon itself, on a real daemon: in shadow
//! mode a profile is learned and its replays scored while nothing at all
//! is prefetched; and a profile whose replayed pages its launches never
//! use is retired, says so in `stat` and `profile list`, and is replayed no
//! more. The program is a shell script that reads the file `$DATA` names:
//! one command shape whose launches read what the test chooses. Needs root
//! (eBPF, drop_caches): outside CI it skips with a message, under `CI=true`
//! it must run. It drops caches: run it under `flock /tmp/bench.lock`.

mod common;
use common::{bin, daemon_status, drop_caches, launch_requested_pages, ok, start_launch_daemon};

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests drop caches and run a daemon on eBPF each: one at a time.
static MACHINE: Mutex<()> = Mutex::new(());

/// Each data file: 64 MiB, so that a replay of one is mostly its pages
/// (the shell's and `cat`'s are a few hundred KiB).
const DATA_MIB: usize = 64;

/// The script, and the two data files it may read, in `dir`.
fn program(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let script = predictio::testing::executable_script(dir, "reader.sh", "#!/bin/sh\ncat \"$DATA\" > /dev/null\n");
    let data = |name: &str, byte: u8| {
        let path = dir.join(name);
        std::fs::write(&path, vec![byte; DATA_MIB << 20]).expect("data file");
        path
    };
    (script, data("a.dat", 1), data("b.dat", 2))
}

/// Runs the script reading `data`, cold (caches dropped first) or not.
/// After a pause: a launch of the same command within 200 ms of the last
/// one is not replayed again (its replay is the last one's).
fn launch(script: &Path, data: &Path, cold: bool) {
    std::thread::sleep(Duration::from_millis(300));
    if cold {
        drop_caches();
    }
    let out = Command::new(script).env("DATA", data).output().expect("the script runs");
    ok(&out);
}

/// The daemon's allow list: the script's shell (the executable a script's
/// launch is of) and the script's directory.
fn allowed(dir: &Path) -> Vec<String> {
    let sh = std::fs::canonicalize("/bin/sh").expect("/bin/sh");
    vec![sh.display().to_string(), dir.display().to_string()]
}

/// The stored profile of the script (the one whose shape names it), as
/// `profile list --json` gives it.
fn stored(store: &Path, script: &Path) -> Option<serde_json::Value> {
    let out = Command::new(bin()).args(["profile", "list", "--json", "--store"]).arg(store).output().expect("runs");
    let list: serde_json::Value = serde_json::from_str(&ok(&out)).expect("list --json");
    let name = script.file_name().and_then(|n| n.to_str()).expect("name");
    list.as_array()?.iter().find(|e| e["shape"].as_str().is_some_and(|s| s.contains(name))).cloned()
}

/// The script's line in the daemon's status (`launch.profiles`).
fn scored(status: &serde_json::Value, script: &Path) -> Option<serde_json::Value> {
    let name = script.file_name().and_then(|n| n.to_str()).expect("name");
    status["launch"]["profiles"]
        .as_array()?
        .iter()
        .find(|p| p["shape"].as_str().is_some_and(|s| s.contains(name)))
        .cloned()
}

/// Waits up to 20 s for `what` of the daemon's status in `dir`.
fn wait_for(dir: &Path, what: &str, until: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = daemon_status(dir);
        if until(&status) {
            return status;
        }
        assert!(Instant::now() < deadline, "{what}; status: {status}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Learns the script reading `learned` from two cold launches; returns
/// once the profile is stored (and so booked).
fn learn(store: &Path, script: &Path, learned: &Path) {
    launch(script, learned, true);
    launch(script, learned, true);
    let deadline = Instant::now() + Duration::from_secs(20);
    while stored(store, script).is_none_or(|p| p["runs"].as_u64() < Some(2)) {
        assert!(Instant::now() < deadline, "the daemon did not learn {}", script.display());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn shadow_mode_scores_replays_and_prefetches_nothing() {
    if !common::root_with_ebpf() {
        return;
    }
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::disk_dir("predictio-score");
    let store = dir.path().join("store");
    let (script, a, _) = program(dir.path());
    let allow = allowed(dir.path());
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let _daemon = start_launch_daemon(dir.path(), &store, &allow, "", "shadow = true\n");
    learn(&store, &script, &a);
    // Replayed in shadow: the same file, cold, so a replay would have had
    // everything to win.
    for _ in 0..3 {
        launch(&script, &a, true);
    }
    let status = wait_for(dir.path(), "three shadow replays were not scored", |s| {
        scored(s, &script).is_some_and(|p| p["replays_scored"].as_u64() >= Some(3))
    });
    let launch_status = &status["launch"];
    assert_eq!(launch_status["shadow"], true, "{launch_status}");
    let replayer = &launch_status["replayer"];
    assert!(replayer["shadowed"].as_u64() >= Some(3), "the replays were handed over: {replayer}");
    assert_eq!(
        (&replayer["opened"], &replayer["requests"], &replayer["dirs"]),
        (&0.into(), &0.into(), &0.into()),
        "a shadow replayer opens and requests nothing: {replayer}"
    );
    assert_eq!(launch_requested_pages(&status), 0, "the launch policy requested pages: {status}");
    let total = &status["executor"]["total"];
    assert_eq!((&total["requested_pages"], &total["issued_pages"]), (&0.into(), &0.into()), "{total}");
    // Scored as a replay would have been used: the launches read the
    // learned file whole.
    let profile = scored(&status, &script).expect("scored");
    eprintln!("shadow: {profile}");
    let used = profile["used_share"].as_f64().expect("used share known with page-access events");
    assert!(used > 0.5, "the launches used the pages a replay would have fetched: {profile}");
    assert!(profile["retired"].is_null(), "{profile}");
    // The human status says so too.
    let text = ok(&Command::new(bin())
        .args(["stat", "--control"])
        .arg(dir.path().join("control.sock"))
        .output()
        .expect("stat"));
    assert!(text.contains("shadow mode") && text.contains("replays scored"), "{text}");
}

#[test]
fn a_profile_whose_replayed_pages_go_unused_is_retired() {
    if !common::root_with_ebpf() {
        return;
    }
    let _machine = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
    let dir = common::disk_dir("predictio-score");
    let store = dir.path().join("store");
    let (script, a, b) = program(dir.path());
    let allow = allowed(dir.path());
    let allow: Vec<&str> = allow.iter().map(String::as_str).collect();
    let config = "retire_after_replays = 3\nretire_min_used_pct = 20\n";
    let daemon = start_launch_daemon(dir.path(), &store, &allow, "", config);
    // Learned reading A; from then on it reads B: the replay of A's 64 MiB
    // is never used.
    learn(&store, &script, &a);
    let mut replayed = launch_requested_pages(&daemon_status(dir.path()));
    for n in 1..=3 {
        launch(&script, &b, false);
        let status = wait_for(dir.path(), "a replayed launch was not scored", |s| {
            scored(s, &script).is_some_and(|p| p["replays_scored"].as_u64() >= Some(n))
        });
        let now = launch_requested_pages(&status);
        assert!(now > replayed, "launch {n} was replayed");
        replayed = now;
    }
    let status = wait_for(dir.path(), "the profile was not retired", |s| {
        scored(s, &script).is_some_and(|p| p["retired"].is_string())
    });
    let profile = scored(&status, &script).expect("scored");
    eprintln!("retired: {profile}");
    let (used, wasted) = (profile["used_share"].as_f64(), profile["wasted_share"].as_f64());
    assert!(used.is_some_and(|u| u < 0.2) && wasted.is_some_and(|w| w > 0.5), "{profile}");
    assert!(profile["retired"].as_str().is_some_and(|why| why.contains("used")), "{profile}");
    // Retired: no longer replayed.
    launch(&script, &b, false);
    launch(&script, &a, false);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(launch_requested_pages(&daemon_status(dir.path())), replayed, "a retired profile was replayed");
    let text = ok(&Command::new(bin())
        .args(["stat", "--control"])
        .arg(dir.path().join("control.sock"))
        .output()
        .expect("stat"));
    assert!(text.contains("RETIRED"), "{text}");
    // The store keeps it, marked retired with why, across a restart.
    drop(daemon);
    let listed = stored(&store, &script).expect("the retired profile stays in the store");
    assert!(listed["benefit"]["retired"].as_str().is_some_and(|why| why.contains("used")), "{listed}");
    let text = ok(&Command::new(bin()).args(["profile", "list", "--store"]).arg(&store).output().expect("list"));
    assert!(text.contains("RETIRED"), "{text}");
    let _daemon = start_launch_daemon(dir.path(), &store, &allow, "", config);
    launch(&script, &a, false);
    std::thread::sleep(Duration::from_secs(1));
    let status = daemon_status(dir.path());
    assert_eq!(launch_requested_pages(&status), 0, "booked again after a restart: {status}");
    assert!(scored(&status, &script).is_some_and(|p| p["retired"].is_string()), "{status}");
}
