//! `predictio doctor` on this machine: its JSON names every check with a
//! status, and what it says agrees with the kernel (a 6.5+ kernel has
//! cachestat, a mounted tracefs is found; as root, the BTF and the filemap
//! tracepoints the observer attaches to are there on a 6.11+ kernel).

mod common;
use common::{bin, ok};

use predictio::testing::{is_root, skip};
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Every check `doctor` makes, by group.
const CHECKS: &[(&str, &[&str])] = &[
    (
        "observation",
        &[
            "tracefs",
            "BTF",
            "BPF object",
            "sched:sched_process_fork",
            "sched:sched_process_exit",
            "sched:sched_process_exec",
            "filemap:mm_filemap_get_pages",
            "filemap:mm_filemap_fault",
            "filemap:mm_filemap_map_pages",
            "filemap:mm_filemap_add_to_page_cache",
            "filemap:mm_filemap_delete_from_page_cache",
            "syscalls:sys_enter_*",
            "eBPF observer",
            "perf tracepoints",
        ],
    ),
    (
        "calls",
        &[
            "cachestat(2)",
            "cachestat on read-only files",
            "preadv2(RWF_NOWAIT)",
            "io_uring",
            "PROCMAP_QUERY",
            "fanotify",
        ],
    ),
    (
        "privileges",
        &[
            "euid",
            "CAP_BPF",
            "CAP_PERFMON",
            "CAP_SYS_ADMIN",
            "CAP_DAC_READ_SEARCH",
            "CAP_SYS_PTRACE",
            "kernel.unprivileged_bpf_disabled",
            "kernel.perf_event_paranoid",
        ],
    ),
    ("resources", &["RLIMIT_MEMLOCK", "page size"]),
    ("cgroups", &["hierarchy", "memory controller", "PSI"]),
    ("daemon", &["configuration", "daemon", "observation source"]),
];

const CAPABILITIES: &[&str] =
    &["launch learning + replay", "B-tree observation", "tensor observation", "residency checks", "pressure guard"];

/// `predictio doctor --json`, parsed. A control socket nobody serves keeps
/// the test from depending on a daemon running here.
fn doctor_json() -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("predictio.toml");
    let socket = dir.path().join("control.sock");
    std::fs::write(&config, format!("[control]\nsocket = \"{}\"\n", socket.display())).expect("write config");
    doctor_json_with(&config)
}

/// `predictio doctor --json --config CONFIG`, parsed.
fn doctor_json_with(config: &Path) -> Value {
    let out =
        Command::new(bin()).args(["doctor", "--json", "--config"]).arg(config).output().expect("run predictio doctor");
    let text = ok(&out);
    serde_json::from_str(&text).unwrap_or_else(|err| panic!("doctor --json is not JSON ({err}):\n{text}"))
}

/// The check named `name`.
#[track_caller]
fn check<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks is an array")
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name:?} in {report:#}"))
}

#[track_caller]
fn assert_ok(report: &Value, name: &str) {
    let c = check(report, name);
    assert_eq!(c["status"], "ok", "{name}: {c:#}");
}

/// (major, minor) of the running kernel.
fn kernel() -> (u32, u32) {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("osrelease");
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().expect("a number"));
    (parts.next().expect("major"), parts.next().expect("minor"))
}

#[test]
fn doctor_json_names_every_check_with_a_status_and_a_fix_where_it_fails() {
    let report = doctor_json();
    assert!(report["kernel"].as_str().is_some_and(|k| !k.is_empty()), "{report:#}");
    let checks = report["checks"].as_array().expect("checks");
    let total: usize = CHECKS.iter().map(|(_, names)| names.len()).sum();
    assert_eq!(checks.len(), total, "checks: {:?}", checks.iter().map(|c| &c["name"]).collect::<Vec<_>>());
    for (group, names) in CHECKS {
        for name in *names {
            let c = check(&report, name);
            assert_eq!(c["group"], *group, "{c:#}");
            let status = c["status"].as_str().expect("status");
            assert!(["ok", "degraded", "missing"].contains(&status), "{c:#}");
            assert!(c["detail"].as_str().is_some_and(|d| !d.is_empty()), "{c:#}");
            if status == "ok" {
                assert!(c["fix"].is_null(), "an ok check has no fix: {c:#}");
            }
        }
    }
    for c in checks.iter().filter(|c| c["status"] == "missing") {
        assert!(c["fix"].as_str().is_some_and(|f| !f.is_empty()), "a missing check says its fix: {c:#}");
    }
    let capabilities: Vec<&str> =
        report["capabilities"].as_array().expect("capabilities").iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(capabilities, CAPABILITIES);
    // The control socket in the configuration has no server.
    assert_eq!(check(&report, "daemon")["status"], "missing");
}

#[test]
fn doctor_finds_cachestat_tracefs_and_a_page_size_it_supports() {
    let report = doctor_json();
    if kernel() >= (6, 5) {
        assert_ok(&report, "cachestat(2)");
        assert_ne!(report["capabilities"][3]["status"], "missing", "residency checks: {report:#}");
    } else {
        assert_eq!(check(&report, "cachestat(2)")["status"], "missing");
    }
    let mounted = std::fs::read_to_string("/proc/self/mounts").expect("mounts").contains(" tracefs ");
    if mounted && is_root() {
        assert_ok(&report, "tracefs");
    } else if mounted {
        assert_ne!(check(&report, "tracefs")["status"], "missing", "tracefs is mounted");
    } else if skip("tracefs is not mounted") {
        return;
    }
    assert_ok(&report, "page size");
    assert_ok(&report, "preadv2(RWF_NOWAIT)");
}

#[test]
fn doctor_as_root_finds_the_btf_and_the_observers_tracepoints() {
    if !is_root() && skip("needs root (tracefs and the observer's probes)") {
        return;
    }
    let report = doctor_json();
    assert_ok(&report, "euid");
    assert_ok(&report, "BTF");
    for name in ["filemap:mm_filemap_add_to_page_cache", "filemap:mm_filemap_delete_from_page_cache"] {
        assert_ok(&report, name);
    }
    let newer = ["filemap:mm_filemap_get_pages", "filemap:mm_filemap_fault", "filemap:mm_filemap_map_pages"];
    if kernel() >= (6, 11) {
        for name in newer {
            assert_ok(&report, name);
        }
    } else {
        for name in newer {
            let c = check(&report, name);
            assert_eq!(c["status"], "missing", "{c:#}");
            assert!(c["fix"].as_str().is_some_and(|f| f.contains("6.11")), "{c:#}");
        }
    }
    for name in ["sched:sched_process_exec", "sched:sched_process_exit", "sched:sched_process_fork"] {
        assert_ok(&report, name);
    }
    // The observer's load agrees with its parts: it loads exactly when
    // everything it needs is there.
    let parts = ["BTF", "BPF object"]
        .into_iter()
        .chain(CHECKS[0].1.iter().copied().filter(|n| n.contains(':') && !n.starts_with("syscalls")))
        .all(|n| check(&report, n)["status"] == "ok");
    let loaded = check(&report, "eBPF observer")["status"] == "ok";
    assert_eq!(loaded, parts, "eBPF observer vs its parts: {report:#}");
}

#[test]
fn doctor_text_groups_the_checks_and_summarises() {
    let out = Command::new(bin()).args(["doctor"]).output().expect("run predictio doctor");
    let text = ok(&out);
    let mut at = 0;
    for title in ["Observation", "Calls", "Privileges", "Resources", "Cgroups", "Daemon", "What works here"] {
        let found = text[at..].find(&format!("\n{title}\n")).unwrap_or_else(|| panic!("no {title} section:\n{text}"));
        at += found + 1;
    }
    for capability in CAPABILITIES {
        assert!(text.contains(capability), "{capability} not summarised:\n{text}");
    }
}

/// Kills the daemon a test started.
struct Daemon(Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn doctor_finds_a_running_daemon_through_its_control_socket() {
    let dir = common::disk_dir("predictio-doctor");
    let d = dir.path().display();
    let config = dir.path().join("predictio.toml");
    std::fs::write(
        &config,
        format!(
            "[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n[observe]\nsource = \"none\"\n[launch]\nlearn = false\nreplay = false\nstore = \"{d}/store\"\n"
        ),
    )
    .expect("config");
    let daemon = Daemon(
        Command::new(bin())
            .args(["daemon", "--config"])
            .arg(&config)
            .args(["--exit-after", "60"])
            .stderr(Stdio::null())
            .spawn()
            .expect("daemon starts"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !dir.path().join("control.sock").exists() {
        assert!(Instant::now() < deadline, "the daemon did not open its control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = doctor_json_with(&config);
    let found = check(&report, "daemon");
    assert_eq!(found["status"], "ok", "{found:#}");
    let detail = found["detail"].as_str().expect("detail");
    assert!(detail.contains(&format!("(pid {})", daemon.0.id())), "{detail}");
    assert!(detail.contains("observation none"), "{detail}");
    let source = check(&report, "observation source");
    assert_eq!(source["status"], "degraded", "observation turned off: {source:#}");
    assert!(source["detail"].as_str().is_some_and(|d| d.contains("configured none")), "{source:#}");
}
