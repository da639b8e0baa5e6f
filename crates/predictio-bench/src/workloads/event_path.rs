//! The event path's share of `control-path` (issue 3): how many eBPF events
//! per second reach the runtime with nothing lost, how much slower a traced
//! reader runs, how long an event waits before the runtime sees it, and how
//! many hints per second pass through the socket.
//!
//! Readers are threads of this process, which the observer follows (it
//! filters by thread group); they read a warm file 4 KiB at a time, one
//! `filemap:mm_filemap_get_pages` record per read.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use predictio::event::{Event, EventKind, EventKinds};
use predictio::executor::ExecutorConfig;
use predictio::hints::{HintConfig, HintServer};
use predictio::pipeline::Pipeline;
use predictio::policy::{Policy, PolicyContext};
use predictio::{Executor, FileId, PAGE_SIZE};
use predictio_bpf::{Observer, ObserverConfig};
use predictio_client::Client;

use crate::harness::{BenchError, IoContext};
use crate::report::{Case, median, percentile};

fn bpf(err: predictio_bpf::BpfError) -> BenchError {
    BenchError::Options(format!("eBPF observer: {err}"))
}

/// Counts PageAccess events: the cheapest real subscriber.
struct Counter(u64);

impl Policy for Counter {
    fn name(&self) -> &str {
        "counter"
    }
    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::PageAccess])
    }
    fn on_event(&mut self, _: &Event, _: &mut PolicyContext<'_>) {
        self.0 += 1;
    }
}

fn read_loop(file: &File, pages: u64, stop: &AtomicBool, reads: &AtomicU64) {
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut i: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            let _ = file.read_at(&mut buf, (i % pages) * PAGE_SIZE);
            i = i.wrapping_add(7);
        }
        reads.fetch_add(256, Ordering::Relaxed);
    }
}

type Readers = (Arc<AtomicBool>, Arc<AtomicU64>, Vec<std::thread::JoinHandle<()>>);

/// Starts `n` reader threads over `path` until the returned flag is set.
fn spawn_readers(path: &Path, pages: u64, n: usize) -> Result<Readers, BenchError> {
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..n {
        let file = File::open(path).doing(|| "open".into())?;
        let (stop, reads) = (Arc::clone(&stop), Arc::clone(&reads));
        threads.push(std::thread::spawn(move || read_loop(&file, pages, &stop, &reads)));
    }
    Ok((stop, reads, threads))
}

/// eBPF → pipeline throughput with `readers` reader threads for `seconds`.
/// Returns (events/s delivered to the runtime, records lost in the kernel,
/// events dropped by the pipeline, reads/s).
pub fn ebpf_throughput(path: &Path, readers: usize, seconds: f64) -> Result<(f64, u64, u64, f64), BenchError> {
    let pages = std::fs::metadata(path).doing(|| "stat".into())?.len() / PAGE_SIZE;
    let mut observer = Observer::load(ObserverConfig::default()).map_err(bpf)?;
    let executor = Arc::new(Executor::new(ExecutorConfig::default())?);
    let pipeline = Pipeline::start(executor, vec![Box::new(Counter(0))], 1 << 20).doing(|| "pipeline".into())?;
    let sender = pipeline.sender();
    let me = std::process::id();
    observer.follow(me).map_err(bpf)?;
    let (stop, reads, threads) = spawn_readers(path, pages, readers)?;
    let start = Instant::now();
    let before = observer.stats();
    let mut forward = |event: Event| {
        sender.send(event, None);
    };
    while start.elapsed().as_secs_f64() < seconds {
        observer.poll(observer.poll_interval(), &mut forward).map_err(bpf)?;
    }
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    observer.poll(Duration::from_millis(5), &mut forward).map_err(bpf)?;
    let elapsed = start.elapsed().as_secs_f64();
    let _ = observer.unfollow(me);
    pipeline.flush(Duration::from_secs(5));
    let after = observer.stats();
    let stats = pipeline.stats();
    Ok((
        (after.events - before.events) as f64 / elapsed,
        after.lost - before.lost,
        stats.dropped,
        reads.load(Ordering::Relaxed) as f64 / elapsed,
    ))
}

/// The consumer side's capacity: readers fill a large ring buffer while
/// nobody drains it, then the ring is drained into the pipeline and
/// dispatched; events over the time from the first drained record to the
/// last dispatched one. Returns (events/s, events, lost records).
pub fn ebpf_drain_capacity(path: &Path, fill: Duration) -> Result<(f64, u64, u64), BenchError> {
    let pages = std::fs::metadata(path).doing(|| "stat".into())?.len() / PAGE_SIZE;
    let config = ObserverConfig { ring_bytes: 128 << 20, wakeup_bytes: u64::MAX, ..ObserverConfig::default() };
    let mut observer = Observer::load(config).map_err(bpf)?;
    let executor = Arc::new(Executor::new(ExecutorConfig::default())?);
    let pipeline = Pipeline::start(executor, vec![Box::new(Counter(0))], 1 << 22).doing(|| "pipeline".into())?;
    let sender = pipeline.sender();
    let me = std::process::id();
    observer.follow(me).map_err(bpf)?;
    let (stop, _reads, threads) = spawn_readers(path, pages, 2)?;
    std::thread::sleep(fill);
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let _ = observer.unfollow(me);
    let start = Instant::now();
    let mut forward = |event: Event| {
        sender.send(event, None);
    };
    let events = observer.drain(&mut forward) as u64;
    pipeline.flush(Duration::from_secs(30));
    let elapsed = start.elapsed().as_secs_f64();
    let lost = observer.stats().lost;
    let dropped = pipeline.stats().dropped;
    if dropped > 0 {
        return Err(BenchError::Options(format!("pipeline dropped {dropped} events while draining")));
    }
    Ok((events as f64 / elapsed, events, lost))
}

fn timed_reads(file: &File, pages: u64, n: u64) -> f64 {
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let start = Instant::now();
    for i in 0..n {
        let _ = file.read_at(&mut buf, ((i * 7) % pages) * PAGE_SIZE);
    }
    start.elapsed().as_secs_f64()
}

/// Interleaved pairs of a reader untraced and traced (followed, with a
/// consumer draining): per-pair time ratios traced/untraced.
pub fn traced_slowdown(path: &Path, pairs: usize, reads: u64) -> Result<(Vec<f64>, Vec<f64>), BenchError> {
    let pages = std::fs::metadata(path).doing(|| "stat".into())?.len() / PAGE_SIZE;
    let file = Arc::new(File::open(path).doing(|| "open".into())?);
    let mut observer = Observer::load(ObserverConfig::default()).map_err(bpf)?;
    let me = std::process::id();
    let (mut plain, mut traced) = (Vec::new(), Vec::new());
    let mut sink = |_: Event| {};
    for _ in 0..pairs {
        plain.push(timed_reads(&file, pages, reads));
        observer.follow(me).map_err(bpf)?;
        let f = Arc::clone(&file);
        let reader = std::thread::spawn(move || timed_reads(&f, pages, reads));
        while !reader.is_finished() {
            observer.poll(observer.poll_interval(), &mut sink).map_err(bpf)?;
        }
        traced.push(reader.join().map_err(|_| BenchError::Options("reader panicked".into()))?);
        let _ = observer.unfollow(me);
        observer.drain(&mut sink);
    }
    Ok((plain, traced))
}

fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Notification latency: a reader reading one page every `gap`; for each of
/// its events, the time from the kernel's record to the consumer. Returns
/// latencies in µs.
pub fn notification_latency(
    path: &Path,
    events: usize,
    gap: Duration,
    config: ObserverConfig,
) -> Result<Vec<f64>, BenchError> {
    let pages = std::fs::metadata(path).doing(|| "stat".into())?.len() / PAGE_SIZE;
    let target = {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).doing(|| "stat".into())?;
        FileId { dev: m.dev(), ino: m.ino() }
    };
    let file = File::open(path).doing(|| "open".into())?;
    let mut observer = Observer::load(config).map_err(bpf)?;
    let me = std::process::id();
    observer.follow(me).map_err(bpf)?;
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; PAGE_SIZE as usize];
        for i in 0..events as u64 {
            let _ = file.read_at(&mut buf, ((i * 13) % pages) * PAGE_SIZE);
            std::thread::sleep(gap);
        }
    });
    let mut latencies = Vec::with_capacity(events);
    let mut note = |event: Event| {
        if let Event::PageAccess { file, time_ns, .. } = event
            && file == target
        {
            latencies.push(monotonic_ns().saturating_sub(time_ns) as f64 / 1e3);
        }
    };
    while !reader.is_finished() {
        observer.poll(observer.poll_interval(), &mut note).map_err(bpf)?;
    }
    observer.poll(Duration::from_millis(5), &mut note).map_err(bpf)?;
    let _ = observer.unfollow(me);
    Ok(latencies)
}

/// Hints per second through the socket into a server, for `seconds`, with
/// the client buffering (many frames per datagram) or not. Returns (hints/s
/// delivered, hints dropped by the client).
pub fn hint_rate(dir: &Path, file: &Path, buffered: bool, seconds: f64) -> Result<(f64, u64), BenchError> {
    let socket = dir.join(format!("bench-hint-{}.sock", std::process::id()));
    let mut server = HintServer::bind(HintConfig::at(&socket).unlimited())
        .map_err(|e| BenchError::Options(format!("hint server: {e}")))?;
    let stop = Arc::new(AtomicBool::new(false));
    let delivered = Arc::new(AtomicU64::new(0));
    let (flag, count) = (Arc::clone(&stop), Arc::clone(&delivered));
    let receiver = std::thread::spawn(move || {
        let mut n = 0u64;
        let mut on = |_: predictio::hints::Hint| n += 1;
        while !flag.load(Ordering::Relaxed) {
            if server.recv(Some(Duration::from_millis(10)), &mut on).is_err() {
                break;
            }
        }
        let _ = server.recv(Some(Duration::from_millis(50)), &mut on);
        count.store(n, Ordering::Relaxed);
    });
    let client = Client::connect(&socket).map_err(|e| BenchError::Options(format!("client: {e}")))?;
    let f = File::open(file).doing(|| "open".into())?;
    let handle = client.register(&f).map_err(|e| BenchError::Options(format!("register: {e}")))?;
    let _ = client.set_buffering(buffered);
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        for _ in 0..1024 {
            let _ = client.pages(handle, &[(i % 4096, i % 4096 + 1)]);
            i += 1;
        }
    }
    let _ = client.flush();
    let elapsed = start.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let _ = receiver.join();
    let _ = std::fs::remove_file(&socket);
    Ok((delivered.load(Ordering::Relaxed) as f64 / elapsed, client.stats().dropped))
}

/// All event-path cases, or a note on why they could not run.
pub fn cases(dir: &Path, path: &Path, reps: usize, quick: bool) -> (Vec<Case>, Vec<String>) {
    let mut cases = Vec::new();
    let mut notes = Vec::new();
    let secs = if quick { 0.5 } else { 2.0 };

    match (0..reps).map(|_| ebpf_throughput(path, 2, secs)).collect::<Result<Vec<_>, _>>() {
        Ok(runs) => {
            let rates: Vec<f64> = runs.iter().map(|r| r.0 / 1e6).collect();
            let lost: u64 = runs.iter().map(|r| r.1).sum();
            let dropped: u64 = runs.iter().map(|r| r.2).sum();
            let rate = median(&rates);
            let mut c = Case::metric(
                "eBPF events into the runtime (2 readers)",
                rate,
                "M events/s",
                "~5 M events/s (seed 000 §6.1)",
                Some((">= 2, no loss", rate >= 2.0 && lost == 0 && dropped == 0)),
            );
            c.extra.insert("samples".into(), rates.into());
            c.extra.insert("lost_records".into(), lost.into());
            c.extra.insert("pipeline_dropped".into(), dropped.into());
            c.extra.insert("reads_per_s".into(), median(&runs.iter().map(|r| r.3).collect::<Vec<_>>()).into());
            cases.push(c);
            notes.push("eBPF events/s: every event is one 4 KiB buffered read by a followed reader thread (get_pages record), drained from the ring buffer into the pipeline and dispatched to a counting policy; readers, consumer and dispatcher share the 2 cores, so the rate is bounded by how fast the readers can read".into());
        }
        Err(err) => notes.push(format!("eBPF cases not run: {err}")),
    }

    match (0..reps).map(|_| ebpf_drain_capacity(path, Duration::from_millis(300))).collect::<Result<Vec<_>, _>>() {
        Ok(runs) => {
            let rates: Vec<f64> = runs.iter().map(|r| r.0 / 1e6).collect();
            let lost: u64 = runs.iter().map(|r| r.2).sum();
            let rate = median(&rates);
            let mut c = Case::metric(
                "eBPF ring -> runtime drain capacity",
                rate,
                "M events/s",
                "~5 M events/s (seed 000 §6.1)",
                Some((">= 2, no loss", rate >= 2.0 && lost == 0)),
            );
            c.extra.insert("samples".into(), rates.into());
            c.extra.insert("events_per_run".into(), runs.iter().map(|r| r.1).collect::<Vec<_>>().into());
            c.extra.insert("lost_records".into(), lost.into());
            cases.push(c);
            notes.push("drain capacity: two reader threads fill a 128 MiB ring for 0.3 s while nobody drains it; then one thread drains it into the pipeline, which dispatches every event to a policy; rate = events / time until the last one is dispatched. It is the consumer side's ceiling; the live figure above is bounded by the readers".into());
        }
        Err(err) => notes.push(format!("drain-capacity case not run: {err}")),
    }

    let reads = if quick { 100_000 } else { 400_000 };
    match traced_slowdown(path, reps, reads) {
        Ok((plain, traced)) => {
            let ratios: Vec<f64> = plain.iter().zip(&traced).map(|(p, t)| t / p).collect();
            let ratio = median(&ratios);
            let mut c = Case::metric(
                "traced reader slowdown (4 KiB reads, warm)",
                ratio,
                "x",
                "-",
                Some(("<= 1.25", ratio <= 1.25)),
            );
            c.extra.insert("samples".into(), ratios.into());
            c.extra.insert("untraced_ns_per_read".into(), (median(&plain) * 1e9 / reads as f64).into());
            c.extra.insert("traced_ns_per_read".into(), (median(&traced) * 1e9 / reads as f64).into());
            cases.push(c);
        }
        Err(err) => notes.push(format!("traced-reader case not run: {err}")),
    }

    let n = if quick { 500 } else { 3000 };
    let modes = [
        ("batched wake-ups", ObserverConfig::default()),
        ("wake on every record", ObserverConfig { wakeup_bytes: 0, ..ObserverConfig::default() }),
    ];
    for (mode, config) in modes {
        match notification_latency(path, n, Duration::from_micros(200), config) {
            Ok(lat) if !lat.is_empty() => {
                for p in [50.0, 99.0] {
                    let v = percentile(&lat, p);
                    let mut c = Case::metric(format!("notification latency p{p:.0}, {mode}"), v, "µs", "-", None);
                    c.extra.insert("events".into(), lat.len().into());
                    cases.push(c);
                }
            }
            Ok(_) => notes.push(format!("notification latency ({mode}): no events arrived")),
            Err(err) => notes.push(format!("latency cases ({mode}) not run: {err}")),
        }
    }
    notes.push("notification latency: kernel record time (bpf_ktime_get_ns) to the consumer's callback, one read every 200 µs. Batched wake-ups (the default): records below the ring's fill threshold are submitted without a wake-up and found by the consumer's 1 ms poll, so latency is bounded by the poll interval; waking on every record gives µs-scale latency at the cost of a slower traced reader (the trade-off ObserverConfig::wakeup_bytes sets)".into());

    for buffered in [true, false] {
        let name = if buffered {
            "hints/s through the socket (client buffering)"
        } else {
            "hints/s through the socket (one per datagram)"
        };
        match (0..reps.min(3)).map(|_| hint_rate(dir, path, buffered, secs)).collect::<Result<Vec<_>, _>>() {
            Ok(runs) => {
                let rates: Vec<f64> = runs.iter().map(|r| r.0 / 1e6).collect();
                let rate = median(&rates);
                let mut c =
                    Case::metric(name, rate, "M hints/s", "300-500 K/s (seed 000 §6.1)", Some((">= 1", rate >= 1.0)));
                c.extra.insert("samples".into(), rates.into());
                c.extra.insert("client_dropped".into(), runs.iter().map(|r| r.1).sum::<u64>().into());
                cases.push(c);
            }
            Err(err) => notes.push(format!("{name} not run: {err}")),
        }
    }
    notes.push("hints: one Pages frame per hint; with buffering the client packs frames into 64 KiB datagrams (flushed when full or on flush()); without, each hint is a datagram of its own and the kernel's datagram queue (net.unix.max_dgram_qlen) and a wake-up per datagram bound the rate".into());
    (cases, notes)
}
