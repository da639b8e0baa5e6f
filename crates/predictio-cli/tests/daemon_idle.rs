//! Idle means idle: a daemon with the default policies, eBPF observation
//! (`auto`), hints and launch learning on, left alone, wakes at most a
//! couple of times a second in all its threads and spends well under a
//! millisecond of CPU a second. Every thread sleeps on its source and its
//! stop; none wakes on a timer. Counted from `/proc/PID/task/*`: voluntary
//! context switches (each one a sleep, so each wake-up one) and CPU time
//! (`schedstat`), per thread, so that a failure names the thread.
//!
//! The machine is not idle itself: every exec on it wakes the eBPF
//! observer at once (launch replay starts there), and the dispatcher and
//! the learner after it. Those are events, not timers: the bound grows by
//! [`PER_EXEC_WAKES`] and [`PER_EXEC_CPU_MS`] for each exec the observer
//! counted over the watch (its `execs`, read from the control socket
//! before and after), and with none it is the bare bound. Other page-cache
//! activity on the machine (a miss, an eviction) is an event too: each
//! record the observer took may cost its wake-up, its paced look for more
//! and the dispatcher's ([`PER_RECORD_WAKES`]); and one drain of the ring
//! wakes the dispatcher once, however many records it held, so the
//! dispatcher never wakes more often than the observer (execs aside).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Daemon, bin, disk_dir};
use predictio::testing::{is_root, skip};

/// Wake-ups a second the idle daemon may take, all threads together.
const MAX_WAKES_PER_S: f64 = 2.0;
/// CPU the idle daemon may spend, in ms a second.
const MAX_CPU_MS_PER_S: f64 = 0.5;
/// How long the daemon is watched, idle.
const WATCH: Duration = Duration::from_secs(10);
/// Wake-ups one exec elsewhere on the machine may cost the daemon: its
/// start and its exec records wake the observer, the events the dispatcher,
/// the launch window the learner (measured: about 5).
const PER_EXEC_WAKES: f64 = 8.0;
/// CPU one exec elsewhere may cost the daemon, in ms (measured: about 0.4).
const PER_EXEC_CPU_MS: f64 = 1.0;
/// Wake-ups one observed record (another process's page-cache miss or
/// eviction) may cost when it comes alone: the observer's, its paced look
/// for more, and the dispatcher's.
const PER_RECORD_WAKES: f64 = 3.0;

/// What the daemon's observer has counted: its execs and its records
/// (which include the execs), asked on its control socket directly
/// (`predictio stat` would be an exec itself).
fn observed(control: &std::path::Path) -> (u64, u64) {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(control).unwrap();
    stream.write_all(b"status\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status: serde_json::Value = serde_json::from_str(&answer).unwrap();
    let count =
        |what: &str| status["observer"][what].as_u64().unwrap_or_else(|| panic!("no observer {what} count: {answer}"));
    (count("execs"), count("records"))
}

/// One thread's counters: its name, voluntary context switches and CPU
/// time in ns.
#[derive(Debug, Clone)]
struct Thread {
    name: String,
    wakes: u64,
    cpu_ns: u64,
}

/// Every thread of `pid`, by thread id.
fn threads(pid: u32) -> BTreeMap<u32, Thread> {
    let mut out = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else { continue };
        let read = |file: &str| std::fs::read_to_string(task.path().join(file)).unwrap_or_default();
        let wakes = read("status")
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        let cpu_ns = read("schedstat").split_whitespace().next().and_then(|v| v.parse().ok()).unwrap_or(0);
        out.insert(tid, Thread { name: read("comm").trim().to_owned(), wakes, cpu_ns });
    }
    out
}

#[test]
fn an_idle_daemon_sleeps_and_stops_at_once_when_told() {
    if !is_root() {
        skip("the daemon's eBPF observation needs root");
        return;
    }
    let dir = disk_dir("predictio-idle");
    let d = dir.path();
    let config = d.join("predictio.toml");
    // The default policies; launches learned only under `d`, so that the
    // machine's other launches (a build next door) are not work for it.
    std::fs::write(
        &config,
        format!(
            "[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n\
             [observe]\nsource = \"auto\"\n[launch]\nstore = \"{d}/store\"\nallow = [\"{d}\"]\n",
            d = d.display()
        ),
    )
    .unwrap();
    let mut daemon = Daemon(
        std::process::Command::new(bin())
            .args(["daemon", "--config", config.to_str().unwrap()])
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("the daemon starts"),
    );
    daemon.wait_ready(d);
    // Start-up done (the self-check, the store, the first polls).
    std::thread::sleep(Duration::from_secs(3));
    let pid = daemon.0.id();
    let control = d.join("control.sock");
    let (execs_before, records_before) = observed(&control);
    // Its answer to the control socket done before the count starts.
    std::thread::sleep(Duration::from_millis(100));
    let before = threads(pid);
    let started = Instant::now();
    std::thread::sleep(WATCH);
    let after = threads(pid);
    let secs = started.elapsed().as_secs_f64();
    let (execs_after, records_after) = observed(&control);
    let (execs, records) = (execs_after - execs_before, records_after - records_before);

    let mut report = String::new();
    let (mut wakes, mut cpu_ns) = (0u64, 0u64);
    let mut by_name = BTreeMap::<String, u64>::new();
    for (tid, now) in &after {
        let then = before.get(tid).map_or((0, 0), |t| (t.wakes, t.cpu_ns));
        let (w, c) = (now.wakes - then.0, now.cpu_ns - then.1);
        wakes += w;
        cpu_ns += c;
        *by_name.entry(now.name.clone()).or_default() += w;
        report.push_str(&format!(
            "  {tid:>7} {:<20} {:>6.2} wake-ups/s {:>8.3} ms CPU/s\n",
            now.name,
            w as f64 / secs,
            c as f64 / 1e6 / secs
        ));
    }
    let (wakes_per_s, cpu_ms_per_s) = (wakes as f64 / secs, cpu_ns as f64 / 1e6 / secs);
    // The execs' own records are paid for by PER_EXEC_WAKES.
    let other_records = records.saturating_sub(execs);
    let max_wakes = MAX_WAKES_PER_S + (PER_EXEC_WAKES * execs as f64 + PER_RECORD_WAKES * other_records as f64) / secs;
    let max_cpu_ms = MAX_CPU_MS_PER_S + PER_EXEC_CPU_MS * execs as f64 / secs;
    let summary = format!(
        "idle daemon over {secs:.1} s, {execs} execs and {other_records} other records elsewhere: {wakes_per_s:.2} wake-ups/s (at most {max_wakes:.2}), \
         {cpu_ms_per_s:.3} ms CPU/s (at most {max_cpu_ms:.3})\n{report}"
    );
    eprintln!("{summary}");
    assert!(wakes_per_s <= max_wakes, "the idle daemon woke too often: {summary}");
    // Thread names are cut to 15 bytes by the kernel.
    let woke = |name: &str| by_name.get(name).copied().unwrap_or(0) as f64;
    assert!(
        woke("predictio-dispa") <= woke("predictio-obser") + PER_EXEC_WAKES * execs as f64,
        "the dispatcher woke more often than the observer that feeds it: {summary}"
    );
    assert!(cpu_ms_per_s <= max_cpu_ms, "the idle daemon spent too much CPU: {summary}");

    // Asleep without timers, it still stops at once on SIGTERM, cleanly.
    let told = Instant::now();
    rustix::process::kill_process(rustix::process::Pid::from_raw(pid as i32).unwrap(), rustix::process::Signal::TERM)
        .unwrap();
    let status = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(told.elapsed() < Duration::from_secs(10), "the daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = told.elapsed();
    eprintln!("stopped {took:?} after SIGTERM");
    assert!(status.success(), "{status}");
    // The observer's programs detach as it closes (an RCU grace period
    // each): the bound leaves room for that on a loaded machine.
    assert!(took < Duration::from_secs(2), "the daemon took {took:?} to stop");
    assert!(!d.join("control.sock").exists(), "the control socket is removed");
    assert!(!d.join("hint.sock").exists(), "the hint socket is removed");
}
