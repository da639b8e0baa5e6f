//! Measures what observation costs a traced reader and how many records per
//! second reach user space.
//!
//! ```text
//! cargo run --release -p predictio-bpf --example overhead -- [DIR] [MIB]
//! ```
//!
//! A cached file of MIB MiB (default 256) in DIR (default /var/tmp, must be a
//! disk file system) is read by `dd bs=4096` (one `read()`, so one record, per
//! page) untraced (before any observer is loaded), loaded but not following the
//! reader, traced with the default notification scheme (no wake-up
//! below the fill threshold, 1 ms poll), and traced waking on every record.
//! Runs are interleaved (observers loaded afresh each round); medians and
//! minimums are printed (the minimum is the run least disturbed by other work).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use predictio_bpf::{Observer, ObserverConfig};

fn reader(path: &str) -> std::process::Child {
    Command::new("sh")
        .arg("-c")
        .arg("read _ && exec dd \"if=$0\" of=/dev/null bs=4096 status=none")
        .arg(path)
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn dd")
}

/// Runs the reader, traced by `observer` if given; returns (seconds, events).
fn run(path: &str, observer: Option<&mut Observer>) -> (f64, u64) {
    let mut child = reader(path);
    let mut events = 0u64;
    let start;
    match observer {
        Some(observer) => {
            observer.follow(child.id()).expect("follow");
            start = Instant::now();
            child.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
            let interval = observer.poll_interval();
            while child.try_wait().expect("wait").is_none() {
                events += observer.poll(interval, &mut |_| {}).expect("poll") as u64;
            }
            let elapsed = start.elapsed().as_secs_f64();
            events += observer.poll(Duration::from_millis(2), &mut |_| {}).expect("poll") as u64;
            return (elapsed, events);
        }
        None => {
            start = Instant::now();
            child.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
            child.wait().expect("wait");
        }
    }
    (start.elapsed().as_secs_f64(), events)
}

/// Rounds of each measurement.
const ROUNDS: usize = 11;

/// The minimum (the run least disturbed by anything else on the machine).
fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Two traced readers at once (one per core on a 2-core machine) and the
/// consumer: how many records per second reach user space, and how many are
/// lost.
fn parallel_readers(path: &str) {
    let mut observer = Observer::load(ObserverConfig::default()).expect("load");
    let mut children: Vec<_> = (0..2).map(|_| reader(path)).collect();
    for child in &children {
        observer.follow(child.id()).expect("follow");
    }
    let start = Instant::now();
    for child in &mut children {
        child.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
    }
    let mut events = 0u64;
    let interval = observer.poll_interval();
    while children.iter_mut().any(|c| c.try_wait().expect("wait").is_none()) {
        events += observer.poll(interval, &mut |_| {}).expect("poll") as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    events += observer.poll(Duration::from_millis(2), &mut |_| {}).expect("poll") as u64;
    let stats = observer.stats();
    println!(
        "two traced readers: {events} records in {:.1} ms = {:.2} M/s delivered, {} lost",
        secs * 1e3,
        events as f64 / secs / 1e6,
        stats.lost
    );
}

/// Notification latency of a trickle of records (far below the wake-up
/// threshold): delivery time minus the record's kernel timestamp, with the
/// default 1 ms poll timeout.
fn latency(path: &str) {
    let mut observer = Observer::load(ObserverConfig::default()).expect("load");
    let script = "read _; i=0; while [ $i -lt 300 ]; do dd \"if=$0\" of=/dev/null bs=4096 count=1 status=none; sleep 0.002; i=$((i+1)); done";
    let mut child = Command::new("sh").arg("-c").arg(script).arg(path).stdin(Stdio::piped()).spawn().expect("spawn");
    observer.follow(child.id()).expect("follow");
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
    let mut delays = Vec::new();
    let interval = observer.poll_interval();
    while child.try_wait().expect("wait").is_none() {
        observer
            .poll(interval, &mut |event| {
                if let predictio::Event::PageAccess { time_ns, .. } = event {
                    delays.push(predictio_bpf::monotonic_now_ns().saturating_sub(time_ns) as f64 / 1e3);
                }
            })
            .expect("poll");
    }
    delays.sort_by(f64::total_cmp);
    let at = |q: f64| delays[((delays.len() - 1) as f64 * q) as usize];
    println!(
        "notification latency, {} read records, poll timeout {:?}: p50 {:.0} us, p99 {:.0} us, max {:.0} us",
        delays.len(),
        interval,
        at(0.5),
        at(0.99),
        at(1.0)
    );
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "/var/tmp".into()));
    let mib: u64 = args.next().map(|s| s.parse().expect("MIB")).unwrap_or(256);
    let path = dir.join("predictio-overhead.dat");
    std::fs::write(&path, vec![1u8; (mib << 20) as usize]).expect("write");
    std::fs::read(&path).expect("warm the cache");
    let shown = path.to_str().expect("utf-8").to_owned();

    let (mut plain, mut t_unrelated, mut t_batched, mut t_every) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut rates = Vec::new();
    let (mut batched_stats, mut every_stats) = (None, None);
    for _ in 0..ROUNDS {
        // No observer loaded.
        plain.push(run(&shown, None).0);
        {
            // One observer at a time: it detaches when it goes out of scope.
            let mut batched = Observer::load(ObserverConfig::default()).expect("load");
            // Loaded, following something else.
            t_unrelated.push(run(&shown, None).0);
            let (secs, events) = run(&shown, Some(&mut batched));
            t_batched.push(secs);
            rates.push(events as f64 / secs);
            batched_stats = Some(batched.stats());
        }
        let mut every = Observer::load(ObserverConfig { wakeup_bytes: 0, ..ObserverConfig::default() }).expect("load");
        t_every.push(run(&shown, Some(&mut every)).0);
        every_stats = Some(every.stats());
    }
    println!("reader: dd bs=4096 over {mib} MiB cached ({} reads); {ROUNDS} rounds", mib * 256);
    println!("{:<28}{:>12}{:>8}{:>12}{:>8}", "", "median ms", "ratio", "best ms", "ratio");
    let (base_median, base_best) = (median(plain.clone()), best(&plain));
    for (name, times) in [
        ("untraced", &plain),
        ("loaded, not followed", &t_unrelated),
        ("traced, batched wake-ups", &t_batched),
        ("traced, wake every record", &t_every),
    ] {
        let (m, b) = (median(times.clone()), best(times));
        println!("{name:<28}{:>12.1}{:>7.2}x{:>12.1}{:>7.2}x", m * 1e3, m / base_median, b * 1e3, b / base_best);
    }
    println!("records delivered (batched): median {:.2} M/s", median(rates) / 1e6);
    println!("batched stats (last round): {batched_stats:?}");
    println!("every-record stats (last round): {every_stats:?}");
    parallel_readers(&shown);
    latency(&shown);
    let _ = std::fs::remove_file(&path);
}
