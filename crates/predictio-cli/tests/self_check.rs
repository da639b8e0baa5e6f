//! The daemon's start-up self-check of kernel observation, end to end: a
//! real daemon on `[observe] source = "auto"` opens eBPF, proves it on its
//! probe read, and runs on it (the status says `ebpf`, with no refusal in
//! its note); the probe file is gone and nothing of it is held. The refusal
//! path is tested in `predictio-daemon`'s `sources` tests (a probe that
//! expects a page the read did not touch) and `predictio-bpf`'s
//! `tests/self_check.rs`. Needs root (eBPF): outside CI it skips with a
//! message, under `CI=true` it must run.

mod common;
use common::{Daemon, bin, daemon_status, disk_dir};

use std::process::Command;

#[test]
fn a_daemon_start_passes_the_self_check_and_runs_on_ebpf() {
    if !common::root_with_ebpf() {
        return;
    }
    let dir = disk_dir("predictio-self-check");
    // The probe file goes to the launch store first: made here, so that it
    // exists when the daemon checks its observer.
    let store = dir.path().join("store");
    std::fs::create_dir(&store).expect("store");
    let config = dir.path().join("predictio.toml");
    std::fs::write(
        &config,
        format!(
            "policies = [\"hints\"]\n[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n\
             [observe]\nsource = \"auto\"\n[launch]\nstore = \"{s}\"\n",
            d = dir.path().display(),
            s = store.display(),
        ),
    )
    .expect("config");
    let mut daemon = Daemon(
        Command::new(bin())
            .args(["daemon", "--config"])
            .arg(&config)
            .env("RUST_LOG", "predictio_daemon=debug")
            .stderr(std::fs::File::create(dir.path().join("daemon.log")).expect("log file"))
            .spawn()
            .expect("daemon starts"),
    );
    daemon.wait_ready(dir.path());
    let status = daemon_status(dir.path());
    assert_eq!(status["source"], "ebpf", "{status}");
    let note = status["source_note"].as_str().unwrap_or_default();
    assert!(!note.contains("self-check"), "no refusal: {note:?}");
    // The check ran (a probe that cannot be made would skip it).
    let log = std::fs::read_to_string(dir.path().join("daemon.log")).expect("log");
    assert!(log.contains("observation self-check passed") && log.contains("ebpf"), "{log}");
    eprintln!("{}", log.lines().find(|l| l.contains("self-check")).unwrap_or_default());

    // Nothing of the probe is left: no name in the store, no descriptor of a
    // deleted file held by the daemon.
    let names: Vec<String> = std::fs::read_dir(&store)
        .expect("ls store")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("self-check"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
    let pid = daemon.0.id();
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("the daemon's descriptors")
        .filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .map(|target| target.display().to_string())
        .filter(|target| target.ends_with("(deleted)") && !target.starts_with("/memfd:"))
        .collect();
    assert!(held.is_empty(), "the daemon holds deleted files: {held:?}");
    drop(daemon);
}
