//! The daemon and the commands around it, end to end: hints through the
//! socket become prefetches; `stat`, `top` and the metrics endpoint report
//! them; `run` follows a command tree with eBPF; `trace` prints its events.
//! eBPF needs root: outside CI those parts skip with a message, under
//! `CI=true` they must run.

mod common;
use common::{bin, ok};

use predictio::testing::{is_root, skip};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn data(path: &Path, mib: usize) {
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i % 253) as u8).collect();
    let mut f = std::fs::File::create(path).expect("create");
    for _ in 0..mib {
        f.write_all(&chunk).expect("write");
    }
    f.sync_all().expect("sync");
}

struct Daemon {
    child: Child,
    control: std::path::PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A metrics port for test `k` (0, 1 or 2) of this process: distinct for
/// every test of the binary, which run at once, and for other runs of it.
fn metrics_port(k: u16) -> u16 {
    20000 + (std::process::id() % 10000) as u16 * 3 + k
}

fn start_daemon(dir: &Path, port: u16, source: &str) -> Daemon {
    start_daemon_with(dir, port, source, "")
}

/// [`start_daemon`], with `hints` added to its `[hints]` table.
fn start_daemon_with(dir: &Path, port: u16, source: &str, hints: &str) -> Daemon {
    let config = dir.join("predictio.toml");
    std::fs::write(
        &config,
        format!(
            "[hints]\n{hints}\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n[observe]\nsource = \"{source}\"\n[launch]\nstore = \"{d}/store\"\n",
            d = dir.display()
        ),
    )
    .expect("config");
    let child = Command::new(bin())
        .args(["daemon", "--config", config.to_str().expect("utf8")])
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    let control = dir.join("control.sock");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !control.exists() {
        assert!(Instant::now() < deadline, "daemon did not open its control socket");
        std::thread::sleep(Duration::from_millis(20));
    }
    Daemon { child, control }
}

fn status(d: &Daemon) -> serde_json::Value {
    let out = Command::new(bin())
        .args(["stat", "--json", "--control", d.control.to_str().expect("utf8")])
        .output()
        .expect("stat runs");
    serde_json::from_str(&ok(&out)).expect("stat --json is JSON")
}

#[test]
fn hints_through_the_daemon_become_prefetches_and_are_reported() {
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 16);
    let port = metrics_port(0);
    let source = if is_root() { "auto" } else { "none" };
    let mut daemon = start_daemon(dir.path(), port, source);
    let f = file.to_str().expect("utf8");
    ok(&Command::new(bin()).args(["evict", "-q", f]).output().expect("evict"));
    let hint_sock = dir.path().join("hint.sock");
    ok(&Command::new(bin())
        .args(["hint", f, "--range", "0..4M", "--socket", hint_sock.to_str().expect("utf8")])
        .output()
        .expect("hint"));
    // The hint is handled asynchronously: poll the status until it shows.
    let deadline = Instant::now() + Duration::from_secs(10);
    let hints = loop {
        let s = status(&daemon);
        let origin = s["executor"]["origins"].as_array().and_then(|o| o.iter().find(|o| o["name"] == "hints")).cloned();
        if let Some(o) = origin.filter(|o| o["counters"]["issued_pages"].as_u64() == Some(1024)) {
            break (s, o);
        }
        assert!(Instant::now() < deadline, "the hint never became a prefetch: {s}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let (s, _) = hints;
    assert_eq!(s["hints"]["hints"], 1, "{s}");
    if is_root() {
        assert_eq!(s["source"], "ebpf", "root with eBPF built in observes with eBPF: {s}");
    }
    let res: serde_json::Value =
        serde_json::from_str(&ok(&Command::new(bin()).args(["residency", "--json", f]).output().expect("residency")))
            .expect("json");
    assert!(res[0]["fraction"].as_f64().expect("fraction") >= 0.24, "4 of 16 MiB resident: {res}");

    let top = ok(&Command::new(bin())
        .args(["top", "--once", "--interval", "0.2", "--control", daemon.control.to_str().expect("utf8")])
        .output()
        .expect("top"));
    assert!(top.contains("POLICY") && top.contains("hints"), "{top}");

    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics endpoint");
    conn.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").expect("request");
    let mut body = String::new();
    conn.read_to_string(&mut body).expect("response");
    assert!(body.contains("predictio_pages_total{origin=\"hints\",outcome=\"issued\"} 1024"), "{body}");
    assert!(!body.contains(&format!("{}", std::fs::metadata(&file).expect("stat").ino())), "metrics never name files");

    // SIGTERM: a clean stop that removes the control socket.
    Command::new("kill").args(["-TERM", &daemon.child.id().to_string()]).status().expect("kill");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = daemon.child.try_wait().expect("wait") {
            assert!(status.success(), "daemon exit: {status}");
            break;
        }
        assert!(Instant::now() < deadline, "daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!daemon.control.exists(), "control socket removed on exit");
}

/// The hint socket is one-way, so `hint` asks the daemon what it took: a
/// hint the daemon refuses (here, over a 1 MiB/s byte budget) is an error,
/// not a silent success.
#[test]
fn a_hint_the_daemon_refuses_is_an_error() {
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 8);
    let _daemon = start_daemon_with(dir.path(), metrics_port(2), "none", "mib_per_sec = 1");
    let hint = |range: &str| {
        Command::new(bin())
            .args(["hint", file.to_str().expect("utf8"), "--range", range])
            .args(["--socket", dir.path().join("hint.sock").to_str().expect("utf8")])
            .output()
            .expect("hint")
    };
    let out = hint("0..8M");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "8 MiB over a 1 MiB/s budget was taken? {stderr}");
    assert!(stderr.contains("refused 1 of 2 frames (0 invalid or not allowed, 1 over this user's budget)"), "{stderr}");
    // Within the budget, the same command succeeds.
    ok(&hint("0..64K"));
}

#[test]
fn hint_without_a_daemon_says_so() {
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 1);
    let out = Command::new(bin())
        .args(["hint", file.to_str().expect("utf8"), "--socket", dir.path().join("nope.sock").to_str().expect("utf8")])
        .output()
        .expect("hint");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no predictio daemon"));
}

#[test]
fn bad_configuration_is_a_clear_error() {
    let dir = common::disk_dir("predictio-daemon");
    let config = dir.path().join("bad.toml");
    std::fs::write(&config, "[executor]\nbackend = \"magic\"\n").expect("write");
    let out = Command::new(bin()).args(["daemon", "--config", config.to_str().expect("utf8")]).output().expect("run");
    common::fails_with(
        &out,
        "line 2: [executor] backend = \"magic\": expected one of fadvise, readahead, uring, madvise",
    );
    std::fs::write(&config, "[executor]\nbakend = \"uring\"\n").expect("write");
    let out = Command::new(bin()).args(["daemon", "--config", config.to_str().expect("utf8")]).output().expect("run");
    common::fails_with(&out, "[executor] bakend = \"uring\": unknown key");
}

/// `daemon --check`: the shipped configuration is valid and the report says
/// what would run here; an invalid one fails naming its key, in text and in
/// JSON; nothing is bound or created.
#[test]
fn check_accepts_the_shipped_configuration_and_rejects_a_bad_one() {
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dist/predictio.toml");
    let text = ok(&Command::new(bin()).args(["daemon", "--check", "--config", shipped]).output().expect("check"));
    for line in
        ["(valid)", "executor backend: fadvise", "observation: ", "[control] socket: /run/predictio/control.sock"]
    {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let out = Command::new(bin()).args(["daemon", "--check", "--json", "--config", shipped]).output().expect("check");
    let report: serde_json::Value = serde_json::from_str(&ok(&out)).expect("--check --json is JSON");
    assert_eq!(report["valid"], true, "{report}");
    assert_eq!(report["backend"]["effective"], "fadvise", "{report}");
    assert_eq!(report["observation"]["configured"], "auto", "{report}");
    if is_root() && predictio_bpf::available().is_ok() {
        assert_eq!(report["observation"]["effective"], "ebpf", "root with eBPF built in observes with eBPF: {report}");
        assert_eq!(report["would_start"], true, "{report}");
    } else {
        let why = format!("the eBPF assertion: root: {}, eBPF built in: {:?}", is_root(), predictio_bpf::available());
        assert!(report["observation"]["note"].is_string(), "a fallback says why: {report}");
        skip(&why);
    }

    // Sockets and store in a directory of our own: --check creates none.
    let dir = common::disk_dir("predictio-check");
    let config = dir.path().join("predictio.toml");
    let sockets = format!(
        "[hints]\nsocket = \"{d}/run/hint.sock\"\n[control]\nsocket = \"{d}/run/control.sock\"\n[observe]\nsource = \"none\"\n[launch]\nstore = \"{d}/store\"\n",
        d = dir.path().display()
    );
    std::fs::write(&config, &sockets).expect("write");
    let c = config.to_str().expect("utf8");
    let text = ok(&Command::new(bin()).args(["daemon", "--check", "--config", c]).output().expect("check"));
    assert!(text.contains("observation: none"), "{text}");
    assert!(text.contains("will be created in"), "the socket directory does not exist yet: {text}");
    assert!(!dir.path().join("run").exists() && !dir.path().join("store").exists(), "--check created something");

    // Invalid: the key, the value and what is allowed, and a failure.
    std::fs::write(&config, format!("{sockets}[executor]\nqueue_capacity = 9223372036854775807\n")).expect("write");
    let out = Command::new(bin()).args(["daemon", "--check", "--config", c]).output().expect("check");
    common::fails_with(&out, "[executor] queue_capacity = 9223372036854775807: out of range: expected 1 to 1048576");
    std::fs::write(&config, "[observe]\nsource = \"bpf\"\n").expect("write");
    let out = Command::new(bin()).args(["daemon", "--check", "--json", "--config", c]).output().expect("check");
    assert!(!out.status.success(), "an invalid configuration fails --check --json too");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("--check --json is JSON");
    assert_eq!(report["valid"], false, "{report}");
    let error = report["error"].as_str().expect("error");
    assert!(error.contains("[observe] source = \"bpf\": expected one of auto, ebpf, perf, fanotify, none"), "{error}");
}

#[test]
fn run_follows_the_command_tree_and_keeps_its_exit_code() {
    if !is_root() && skip("needs root for eBPF observation") {
        return;
    }
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 8);
    let f = file.to_str().expect("utf8");
    // The command starts at once and observation, loaded beside it, follows
    // what it has forked by then: the subshell, forked at once, reads the
    // file a second later through a cat it forks then.
    let out = Command::new(bin())
        .args(["run", "--json", "--", "sh", "-c", &format!("(sleep 1; cat {f} > /dev/null) & wait")])
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let json: serde_json::Value = serde_json::from_str(stderr.trim()).expect("run --json prints the status");
    assert_eq!(json["source"], "ebpf", "{json}");
    assert!(json["observer"]["reads"].as_u64().expect("reads") > 0, "the grandchild's reads were seen: {json}");
    assert!(json["observer"]["execs"].as_u64().expect("execs") >= 1, "cat: {json}");
    assert_eq!(json["observer"]["lost"], 0);
    // Asked to, it observes from the command's first instruction: sh's own
    // exec, and cat's at once.
    ok(&Command::new(bin()).args(["evict", "-q", f]).output().expect("evict"));
    let out = Command::new(bin())
        .args(["run", "--json", "--observe-from-start", "--", "sh", "-c", &format!("cat {f} > /dev/null")])
        .output()
        .expect("run");
    let json: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).expect("status json");
    assert_eq!(json["source"], "ebpf", "{json}");
    assert!(json["observer"]["reads"].as_u64().expect("reads") > 0, "the child's reads were seen: {json}");
    assert!(json["observer"]["execs"].as_u64().expect("execs") >= 2, "sh and cat: {json}");
    // A command that ends before observation is ready never waits for it.
    let out = Command::new(bin()).args(["run", "--json", "--", "true"]).output().expect("run");
    let json: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).expect("status json");
    assert_eq!(json["source"], "none", "{json}");
    assert!(json["source_note"].as_str().is_some_and(|n| n.contains("before eBPF observation was ready")), "{json}");
    // Hints from inside the tree reach the private socket.
    ok(&Command::new(bin()).args(["evict", "-q", f]).output().expect("evict"));
    let out =
        Command::new(bin()).args(["run", "--json", "--", bin(), "hint", f, "--range", "0..2M"]).output().expect("run");
    let json: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stderr).trim()).expect("status json");
    assert_eq!(json["executor"]["total"]["issued_pages"], 512, "{json}");
    let code = Command::new(bin()).args(["run", "-q", "--", "sh", "-c", "exit 3"]).status().expect("run");
    assert_eq!(code.code(), Some(3));
}

/// `run` starts its command before its runtime (the front, `predictio`,
/// does it): a command that ends at once is not waited for; one that runs
/// on is handed to the runtime (`predictio-full`), which serves the hints
/// sent before and after the hand-over, passes signals on, keeps the exit
/// code and removes the private socket's directory.
#[test]
fn run_starts_its_command_before_its_runtime() {
    let dir = common::disk_dir("predictio-front");
    let (file, tmp) = (dir.path().join("data"), dir.path().join("tmp"));
    std::fs::create_dir(&tmp).expect("tmp");
    data(&file, 8);
    let f = file.to_str().expect("utf8");
    let run = |script: &str| {
        Command::new(bin()).env("TMPDIR", &tmp).args(["run", "--no-daemon", "--", "sh", "-c", script]).output()
    };
    let out = run("exit 4").expect("run");
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("before predictio's runtime started"), "{stderr}");
    // A hint at once (queued on the socket before the hand-over, or served
    // after it) and one later: both ranges are read in.
    ok(&Command::new(bin()).args(["evict", "-q", f]).output().expect("evict"));
    let b = bin();
    let script = format!("{b} hint {f} --range 0..1M; sleep 0.3; {b} hint {f} --range 4M..5M; sleep 0.2; exit 5");
    let out = run(&script).expect("run");
    assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("predictio run: sh finished in"), "the runtime's report: {stderr}");
    let residency = ok(&Command::new(bin()).args(["residency", "--json", f]).output().expect("residency"));
    let residency: serde_json::Value = serde_json::from_str(&residency).expect("residency --json");
    // Both hinted MiB were read in. A prefetched page nobody touched is the
    // kernel's first to let go (it sits on the inactive list): one let go
    // before the check is counted evicted by `cachestat` (once, in CI, 3 of
    // the 512).
    let count = |key: &str| residency[0][key].as_u64().unwrap_or(0);
    let (resident, evicted) = (count("resident"), count("evicted"));
    assert!(resident <= 512 && resident + evicted >= 512, "both hinted MiB: {residency}");
    // SIGTERM to run reaches the command; run reports it killed.
    let child = Command::new(bin())
        .env("TMPDIR", &tmp)
        .args(["run", "-q", "--no-daemon", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("run");
    std::thread::sleep(Duration::from_millis(500));
    let term = rustix::process::Signal::from_named_raw(15).expect("SIGTERM");
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, term).expect("kill");
    let started = Instant::now();
    let out = child.wait_with_output().expect("wait");
    assert!(started.elapsed() < Duration::from_secs(10), "sleep was not stopped");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sleep was killed") && stderr.contains("SIGTERM"), "{stderr}");
    let left: Vec<_> = std::fs::read_dir(&tmp).expect("tmp").collect();
    assert!(left.is_empty(), "the private socket directories are removed: {left:?}");
    // The hand-over is refused for a process that is not run's child.
    let full = Path::new(bin()).with_file_name("predictio-full");
    let out = Command::new(full)
        .args(["run", "--adopt", "1", "--hint-fd", "3", "--hint-dir", "/nonexistent", "--started-ns", "0", "--"])
        .arg("true")
        .output()
        .expect("predictio-full");
    common::fails_with(&out, "not a child of this process");
}

#[test]
fn trace_prints_a_commands_reads() {
    if !is_root() && skip("needs root for eBPF observation") {
        return;
    }
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 2);
    let ino = std::fs::metadata(&file).expect("stat").ino();
    let out = Command::new(bin())
        .args(["trace", "--json", "--kind", "read", "--kind", "exec", "--", "cat", file.to_str().expect("utf8")])
        .stdout(Stdio::piped())
        .output()
        .expect("trace");
    let text = ok(&out);
    let events: Vec<serde_json::Value> =
        text.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert!(events.iter().any(|e| e["kind"] == "exec"), "exec seen");
    let reads: Vec<_> = events.iter().filter(|e| e["kind"] == "read" && e["ino"] == ino).collect();
    assert!(!reads.is_empty(), "reads of the file seen: {text:.2000}");
    let top = reads.iter().filter_map(|e| e["end"].as_u64()).max().expect("end");
    assert!(top >= 512, "reads reach the end of the 2 MiB file (page {top})");
}

#[test]
fn the_daemon_runs_on_fanotify_when_asked_and_says_so() {
    if !is_root() && skip("needs root for fanotify") {
        return;
    }
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 1);
    let port = metrics_port(1);
    let daemon = start_daemon(dir.path(), port, "fanotify");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::fs::read(&file).expect("read");
        let s = status(&daemon);
        assert_eq!(s["source"], "fanotify", "{s}");
        // No default policy wants FileOpen yet: the events reach the
        // pipeline and are let go there (filtered), not queued.
        let reached =
            s["pipeline"]["dispatched"].as_u64().unwrap_or(0) + s["pipeline"]["filtered"].as_u64().unwrap_or(0);
        if s["observer"]["opens"].as_u64().unwrap_or(0) > 0 && reached > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no open events reached the pipeline: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_daemon_runs_on_perf_tracepoints_when_asked_and_sees_reads() {
    if !is_root() && skip("needs root for perf tracepoint events") {
        return;
    }
    let dir = common::disk_dir("predictio-daemon");
    let file = dir.path().join("data");
    data(&file, 1);
    let port = metrics_port(2);
    let daemon = start_daemon(dir.path(), port, "perf");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        std::fs::read(&file).expect("read");
        let s = status(&daemon);
        assert_eq!(s["source"], "perf", "{s}");
        if s["observer"]["reads"].as_u64().unwrap_or(0) > 0 && s["pipeline"]["dispatched"].as_u64().unwrap_or(0) > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "no reads observed through perf: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Under systemd's `Type=notify` the daemon says READY=1 on
/// `$NOTIFY_SOCKET` once its sockets are bound (so that what is ordered
/// after it finds them), and STOPPING=1 on its way out.
#[test]
fn the_daemon_notifies_readiness_once_its_sockets_exist() {
    let dir = common::disk_dir("predictio-notify");
    let d = dir.path().display();
    let config = dir.path().join("predictio.toml");
    std::fs::write(
        &config,
        format!(
            "[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n[observe]\nsource = \"none\"\n[launch]\nlearn = false\nreplay = false\nstore = \"{d}/store\"\n"
        ),
    )
    .expect("config");
    let notify = dir.path().join("notify.sock");
    let listener = std::os::unix::net::UnixDatagram::bind(&notify).expect("bind the notify socket");
    listener.set_read_timeout(Some(Duration::from_secs(20))).expect("timeout");
    let mut child = Command::new(bin())
        .args(["daemon", "--config", config.to_str().expect("utf8"), "--exit-after", "2"])
        .env("NOTIFY_SOCKET", &notify)
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts");
    let mut buf = [0u8; 256];
    let n = listener.recv(&mut buf).expect("READY=1 within 20 s");
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.lines().any(|l| l == "READY=1"), "{ready:?}");
    assert!(dir.path().join("hint.sock").exists() && dir.path().join("control.sock").exists(), "ready before bound");
    let n = listener.recv(&mut buf).expect("STOPPING=1 when it stops");
    assert!(String::from_utf8_lossy(&buf[..n]).lines().any(|l| l == "STOPPING=1"));
    let status = child.wait().expect("wait");
    assert!(status.success(), "{status}");
}

/// Beside a running daemon, `run -q` hands the command to it: the command
/// is run's own process (exec'd, its parent run's), gets the daemon's hint
/// socket and keeps its exit code. `--no-daemon`, or a daemon that is gone
/// (its socket file left behind), keeps the runtime in `run`, with a
/// private hint socket.
#[test]
fn run_quiet_hands_the_command_to_a_running_daemon() {
    if !is_root() && skip("needs root to run the daemon") {
        return;
    }
    let dir = common::disk_dir("predictio-handoff");
    let store = dir.path().join("store");
    let daemon = common::start_launch_daemon(dir.path(), &store, &[], "source = \"none\"\n", "");
    let config = dir.path().join("predictio.toml");
    let config = config.to_str().expect("utf8");
    let show = "echo \"$PREDICTIO_HINT_SOCK $PPID\"";
    let run = |extra: &[&str], script: &str| {
        Command::new(bin())
            .args(["run", "-q", "--config", config])
            .args(extra)
            .args(["--", "sh", "-c", script])
            .output()
    };
    let handed = ok(&run(&[], show).expect("run"));
    let daemon_socket = dir.path().join("hint.sock");
    assert_eq!(
        handed.trim(),
        format!("{} {}", daemon_socket.display(), std::process::id()),
        "the command runs in run's place, with the daemon's hint socket"
    );
    let code = run(&[], "exit 7").expect("run").status.code();
    assert_eq!(code, Some(7), "the command's exit code");
    let own = ok(&run(&["--no-daemon"], show).expect("run"));
    assert!(own.contains("predictio-run"), "--no-daemon: a private hint socket, got {own:?}");
    drop(daemon);
    assert!(dir.path().join("control.sock").exists(), "a killed daemon leaves its socket file");
    let alone = ok(&run(&[], show).expect("run"));
    assert!(alone.contains("predictio-run"), "no daemon answers: run's own runtime, got {alone:?}");
}
