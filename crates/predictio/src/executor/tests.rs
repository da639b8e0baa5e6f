//! Unit tests of the executor's rules through a fake kernel: no root, no
//! real I/O. Each test names the rule it pins.

use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::engine::GROUP_GAP_PAGES;
use super::*;
use crate::file::FileRef;
use crate::pressure::MemoryState;
use crate::request::Urgency;
use crate::sys::uring::Completion;

#[derive(Default)]
struct FakeState {
    size: u64,
    resident: BTreeSet<u64>,
    holes: Vec<PageRange>,
    probes: u64,
    /// `read_settled` answers "still in flight" this many more times.
    unsettled_answers: u64,
    /// `read_settled` calls.
    settle_probes: u64,
    /// Pages whose read never settles.
    stuck: BTreeSet<u64>,
    /// `read_settled` calls for a page of `stuck`.
    stuck_probes: u64,
}

#[derive(Clone, Default)]
struct FakeCache(Arc<Mutex<FakeState>>);

impl PageCache for FakeCache {
    fn size(&mut self, _: &FileRef) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().size)
    }
    fn has_holes(&mut self, _: &FileRef, _: u64) -> io::Result<bool> {
        Ok(!self.0.lock().unwrap().holes.is_empty())
    }
    fn data_segments(&mut self, _: &FileRef, range: PageRange, out: &mut Vec<PageRange>) -> io::Result<u64> {
        let state = self.0.lock().unwrap();
        let mut cursor = range.start;
        let mut holes = 0;
        for hole in &state.holes {
            let h = hole.intersect(&range);
            if h.is_empty() {
                continue;
            }
            if cursor < h.start {
                out.push(PageRange::new(cursor, h.start));
            }
            holes += h.len();
            cursor = h.end;
        }
        if cursor < range.end {
            out.push(PageRange::new(cursor, range.end));
        }
        Ok(holes)
    }
    fn resident_pages(&mut self, _: &FileRef, range: PageRange) -> io::Result<u64> {
        let mut state = self.0.lock().unwrap();
        state.probes += 1;
        Ok(state.resident.range(range.start..range.end).count() as u64)
    }
    fn residency(&mut self, _: &FileRef, _: u64, range: PageRange, out: &mut Vec<u8>) -> io::Result<()> {
        let state = self.0.lock().unwrap();
        out.clear();
        out.extend((range.start..range.end).map(|p| state.resident.contains(&p) as u8));
        Ok(())
    }
    fn read_settled(&mut self, _: &FileRef, page: u64, _: bool) -> bool {
        let mut state = self.0.lock().unwrap();
        state.settle_probes += 1;
        if state.stuck.contains(&page) {
            state.stuck_probes += 1;
            return false;
        }
        if state.unsettled_answers > 0 {
            state.unsettled_answers -= 1;
            false
        } else {
            true
        }
    }
}

#[derive(Default)]
struct FakeIo {
    issued: Vec<PageRange>,
    pending: VecDeque<u64>,
    max_seen_in_flight: u32,
}

/// A backend that records I/Os; asynchronous with a depth when `depth` is
/// set, in which case `wait` completes the oldest I/O.
#[derive(Clone, Default)]
struct FakeBackend {
    io: Arc<Mutex<FakeIo>>,
    depth: Option<u32>,
    delay: Duration,
}

impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Fadvise
    }
    fn issue(&mut self, _: &FileRef, range: PageRange, token: u64) -> io::Result<Issued> {
        std::thread::sleep(self.delay);
        let mut io = self.io.lock().unwrap();
        io.issued.push(range);
        match self.depth {
            None => Ok(Issued::Done),
            Some(depth) => {
                assert!((io.pending.len() as u32) < depth, "issue called with the ring full");
                io.pending.push_back(token);
                io.max_seen_in_flight = io.max_seen_in_flight.max(io.pending.len() as u32);
                Ok(Issued::Pending)
            }
        }
    }
    fn in_flight(&self) -> u32 {
        self.io.lock().unwrap().pending.len() as u32
    }
    fn depth(&self) -> u32 {
        self.depth.unwrap_or(u32::MAX)
    }
    fn wait(&mut self, min: u32, out: &mut Vec<Completion>) -> io::Result<()> {
        let mut io = self.io.lock().unwrap();
        for _ in 0..min.max(1) {
            if let Some(token) = io.pending.pop_front() {
                out.push(Completion { user_data: token, result: Ok(4096) });
            }
        }
        Ok(())
    }
}

fn calm() -> PressureGuard {
    PressureGuard::with_source(PressureConfig::default(), || {
        Ok(MemoryState { some_avg10: 0.0, available: 1 << 40, total: 1 << 40 })
    })
}

fn stressed() -> PressureGuard {
    PressureGuard::with_source(PressureConfig::default(), || {
        Ok(MemoryState { some_avg10: 90.0, available: 1 << 20, total: 1 << 40 })
    })
}

fn any_file() -> FileRef {
    FileRef::open("/proc/self/exe").expect("own executable opens")
}

fn engine(cache: &FakeCache, backend: &FakeBackend, limits: Limits, pressure: PressureGuard) -> Engine {
    Engine::new(limits, Box::new(cache.clone()), Box::new(backend.clone()), pressure, Arc::new(Accounting::new()))
}

fn cache_of(size_pages: u64, resident: impl IntoIterator<Item = u64>) -> FakeCache {
    let cache = FakeCache::default();
    {
        let mut s = cache.0.lock().unwrap();
        s.size = size_pages * PAGE_SIZE;
        s.resident = resident.into_iter().collect();
    }
    cache
}

fn req(ranges: &[(u64, u64)]) -> Request {
    Request::new(any_file(), ranges.iter().map(|&(s, e)| PageRange::new(s, e)).collect(), PolicyId(0))
}

#[test]
fn resident_pages_cause_no_io() {
    let cache = cache_of(100, 0..100);
    let backend = FakeBackend::default();
    let d = engine(&cache, &backend, Limits::default(), calm()).execute(req(&[(0, 100)]));
    assert_eq!(d.skipped_resident_pages, 100);
    assert_eq!(d.issued_pages, 0);
    assert!(backend.io.lock().unwrap().issued.is_empty());
}

#[test]
fn partly_resident_issues_only_absent_runs_coalesced() {
    let cache = cache_of(100, [2, 3, 7]);
    let backend = FakeBackend::default();
    let d = engine(&cache, &backend, Limits::default(), calm()).execute(req(&[(0, 10)]));
    assert_eq!(d.skipped_resident_pages, 3);
    assert_eq!(d.issued_pages, 7);
    assert_eq!(
        backend.io.lock().unwrap().issued,
        vec![PageRange::new(0, 2), PageRange::new(4, 7), PageRange::new(8, 10)]
    );
}

#[test]
fn clamps_to_eof_and_skips_holes() {
    let cache = cache_of(50, []);
    cache.0.lock().unwrap().holes = vec![PageRange::new(10, 20)];
    let backend = FakeBackend::default();
    let d = engine(&cache, &backend, Limits::default(), calm()).execute(req(&[(0, 30), (45, 80)]));
    assert_eq!(d.beyond_eof_pages, 30);
    assert_eq!(d.hole_pages, 10);
    assert_eq!(d.issued_pages, 10 + 10 + 5);
    let issued = backend.io.lock().unwrap().issued.clone();
    assert!(issued.iter().all(|r| r.end <= 50), "nothing past EOF: {issued:?}");
    assert!(issued.iter().all(|r| r.intersect(&PageRange::new(10, 20)).is_empty()), "nothing in the hole");
}

#[test]
fn coalesces_neighbours_up_to_max_io() {
    let cache = cache_of(1000, []);
    let backend = FakeBackend::default();
    let limits = Limits { max_io_pages: 16, ..Limits::default() };
    let ranges: Vec<(u64, u64)> = (0..40).map(|p| (p, p + 1)).collect();
    let d = engine(&cache, &backend, limits, calm()).execute(req(&ranges));
    assert_eq!(d.issued_ios, 3);
    assert_eq!(
        backend.io.lock().unwrap().issued,
        vec![PageRange::new(0, 16), PageRange::new(16, 32), PageRange::new(32, 40)]
    );
}

#[test]
fn in_flight_pages_are_not_issued_twice() {
    let cache = cache_of(1000, []);
    let backend = FakeBackend { depth: Some(64), ..FakeBackend::default() };
    let mut e = engine(&cache, &backend, Limits::default(), calm());
    let first = e.execute(req(&[(0, 32)]));
    assert_eq!(first.issued_pages, 32);
    let second = e.execute(req(&[(16, 48)]));
    assert_eq!(second.skipped_inflight_pages, 16);
    assert_eq!(second.issued_pages, 16);
    e.drain();
    assert_eq!(e.inflight_pages(), 0);
    // Once complete, the pages may be asked again (residency decides).
    let third = e.execute(req(&[(0, 8)]));
    assert_eq!(third.skipped_inflight_pages, 0);
}

#[test]
fn io_depth_is_never_exceeded() {
    let cache = cache_of(10_000, []);
    let backend = FakeBackend { depth: Some(4), ..FakeBackend::default() };
    let limits = Limits { max_io_pages: 1, ..Limits::default() };
    let ranges: Vec<(u64, u64)> = (0..100).map(|p| (p * 3, p * 3 + 1)).collect();
    let d = engine(&cache, &backend, limits, calm()).execute(req(&ranges));
    assert_eq!(d.issued_ios, 100);
    assert!(backend.io.lock().unwrap().max_seen_in_flight <= 4);
}

#[test]
fn in_flight_page_bound_is_kept() {
    let cache = cache_of(10_000, []);
    let backend = FakeBackend { depth: Some(1000), ..FakeBackend::default() };
    let limits = Limits { max_io_pages: 8, max_inflight_pages: 32, ..Limits::default() };
    let mut e = engine(&cache, &backend, limits, calm());
    e.execute(req(&[(0, 1000)]));
    assert!(backend.io.lock().unwrap().max_seen_in_flight <= 4, "32 pages / 8 per I/O");
}

#[test]
fn unsettled_window_paces_backends_without_completions() {
    let cache = cache_of(10_000, []);
    cache.0.lock().unwrap().unsettled_answers = 3;
    let backend = FakeBackend::default(); // completes nothing: like fadvise
    let limits = Limits { max_io_pages: 8, max_unsettled_pages: 16, ..Limits::default() };
    let d = engine(&cache, &backend, limits, calm()).execute(req(&[(0, 64)]));
    assert_eq!(d.issued_ios, 8, "every I/O is issued, paced");
    // Two I/Os fit the window. For the third, the first round of probes
    // found both in flight (one sleep); in the second the newer had settled
    // and left. Every later I/O found the oldest settled at its first probe.
    assert_eq!(d.paced_waits, 1);
    assert_eq!(cache.0.lock().unwrap().settle_probes, 2 + 2 + 5);

    let unbounded = cache_of(10_000, []);
    unbounded.0.lock().unwrap().unsettled_answers = u64::MAX;
    let d =
        engine(&unbounded, &backend, Limits { max_io_pages: 8, ..Limits::default() }, calm()).execute(req(&[(0, 64)]));
    assert_eq!((d.issued_ios, d.paced_waits), (8, 0), "no window: no probe");
    assert_eq!(unbounded.0.lock().unwrap().settle_probes, 0);
}

#[test]
fn a_request_paces_its_reads_in_its_own_window() {
    let run = |executor_window: u64, request_window: u64| {
        let cache = cache_of(10_000, []);
        cache.0.lock().unwrap().unsettled_answers = 3;
        let backend = FakeBackend::default();
        let limits = Limits { max_io_pages: 8, max_unsettled_pages: executor_window, ..Limits::default() };
        let d = engine(&cache, &backend, limits, calm()).execute(req(&[(0, 64)]).paced(request_window));
        (d.issued_ios, d.paced_waits)
    };
    assert_eq!(run(64, 0), (8, 0), "all 64 pages fit the executor's window");
    assert_eq!(run(64, 16), (8, 1), "paced as in a 16-page window");
    assert_eq!(run(16, 1000), (8, 0), "a wider window of its own: all 64 pages fit");
    assert_eq!(run(16, 0), (8, 1), "paced as in the executor's 16-page window");
    assert_eq!(run(0, 16), (8, 0), "an unbounded executor tracks nothing to pace by");
}

#[test]
fn a_newer_io_that_settled_leaves_the_window_while_the_oldest_is_in_flight() {
    // The block layer completes reads out of order: a window released only
    // oldest first would sit full of settled reads, issuing nothing, until
    // the oldest settled or timed out. And the oldest, found in flight, is
    // not probed again before each later I/O (that was most of the
    // executor's syscalls on a real replay).
    let cache = cache_of(10_000, []);
    cache.0.lock().unwrap().stuck.insert(7); // the last page of the first I/O
    let backend = FakeBackend::default();
    let limits = Limits {
        max_io_pages: 8,
        max_unsettled_pages: 16,
        settle_timeout: Duration::from_secs(30),
        ..Limits::default()
    };
    let min_probe = limits.min_probe_interval;
    let started = Instant::now();
    let d = engine(&cache, &backend, limits, calm()).execute(req(&[(0, 1600)]));
    let elapsed = started.elapsed();
    assert_eq!(d.issued_ios, 200);
    assert_eq!(d.paced_waits, 0, "each I/O found room left by a newer settled one");
    assert!(elapsed < Duration::from_secs(5));
    let stuck = cache.0.lock().unwrap().stuck_probes;
    let allowed = 1 + (elapsed.as_micros() / min_probe.as_micros()) as u64;
    assert!(stuck <= allowed, "the stuck read was probed {stuck} times in {elapsed:?} (at most {allowed})");
}

#[test]
fn probes_of_a_read_in_flight_back_off_with_its_age() {
    use super::engine::probe_interval;
    let limits = Limits::default();
    assert_eq!(probe_interval(Duration::ZERO, &limits), limits.min_probe_interval);
    assert_eq!(probe_interval(Duration::from_millis(2), &limits), Duration::from_micros(500));
    assert_eq!(probe_interval(Duration::from_secs(1), &limits), limits.max_probe_interval);
    // The bounds are settings: a slower device's reads are probed less often.
    let slow = Limits { max_probe_interval: Duration::from_millis(20), ..Limits::default() };
    assert_eq!(probe_interval(Duration::from_millis(40), &slow), Duration::from_millis(10));
    assert_eq!(probe_interval(Duration::from_secs(1), &slow), Duration::from_millis(20));
    // Bounds given the wrong way round never panic: the minimum wins.
    let inverted =
        Limits { min_probe_interval: Duration::from_millis(3), max_probe_interval: Duration::ZERO, ..limits };
    assert_eq!(probe_interval(Duration::from_secs(1), &inverted), Duration::from_millis(3));
}

#[test]
fn an_io_that_never_settles_leaves_the_window_after_the_timeout() {
    let cache = cache_of(10_000, []);
    cache.0.lock().unwrap().unsettled_answers = u64::MAX;
    let backend = FakeBackend::default();
    let limits = Limits {
        max_io_pages: 8,
        max_unsettled_pages: 8,
        settle_timeout: Duration::from_millis(2),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let d = engine(&cache, &backend, limits, calm()).execute(req(&[(0, 32)]));
    assert_eq!(d.issued_ios, 4);
    assert!(d.paced_waits > 0);
    assert!(started.elapsed() < Duration::from_secs(1), "bounded by the timeout per I/O");
}

#[test]
fn pages_per_request_bound_drops_and_counts() {
    let cache = cache_of(10_000, []);
    let backend = FakeBackend::default();
    let limits = Limits { max_pages_per_request: 100, ..Limits::default() };
    let d = engine(&cache, &backend, limits, calm()).execute(req(&[(0, 80), (1000, 1080)]));
    assert_eq!(d.issued_pages, 100);
    assert_eq!(d.dropped_pages, 60);
}

#[test]
fn memory_pressure_sheds_speculative_not_imminent() {
    let cache = cache_of(100, []);
    let backend = FakeBackend::default();
    let mut e = engine(&cache, &backend, Limits::default(), stressed());
    let d = e.execute(req(&[(0, 10)]));
    assert_eq!((d.dropped_requests, d.pressure_dropped_pages, d.issued_pages), (1, 10, 0));
    let d = e.execute(req(&[(0, 10)]).with_urgency(Urgency::Imminent));
    assert_eq!(d.issued_pages, 10);
}

#[test]
fn a_speculative_request_issues_at_most_a_quarter_of_the_headroom() {
    // 2 GiB available (of 4): a quarter is 512 MiB, 131,072 pages. The
    // absent pages are cut in order of need; resident ones cost nothing.
    let tight = || {
        PressureGuard::with_source(PressureConfig::default(), || {
            Ok(MemoryState { some_avg10: 0.0, available: 2 << 30, total: 4 << 30 })
        })
    };
    let cache = cache_of(300_000, 0..50_000);
    let backend = FakeBackend::default();
    let mut e = engine(&cache, &backend, Limits::default(), tight());
    let d = e.execute(req(&[(0, 250_000)]));
    assert_eq!((d.skipped_resident_pages, d.issued_pages), (50_000, 131_072));
    assert_eq!((d.pressure_clamped_pages, d.pressure_dropped_pages, d.dropped_pages), (68_928, 68_928, 68_928));
    assert_eq!(backend.io.lock().unwrap().issued.last().map(|r| r.end), Some(50_000 + 131_072));
    let backend = FakeBackend::default();
    let d = engine(&cache, &backend, Limits::default(), tight())
        .execute(req(&[(0, 250_000)]).with_urgency(Urgency::Imminent));
    assert_eq!((d.issued_pages, d.pressure_clamped_pages), (200_000, 0), "imminent requests are not cut");
}

#[test]
fn validation_rejects_nonsense() {
    let file = any_file();
    let r = |ranges: Vec<PageRange>| Request::new(file.clone(), ranges, PolicyId(0));
    assert_eq!(validate(&r(vec![]), 10), Err(SubmitError::Empty));
    assert_eq!(validate(&r(vec![PageRange::new(3, 3)]), 10), Err(SubmitError::Empty));
    assert_eq!(validate(&r(vec![PageRange { start: 9, end: 2 }]), 10), Err(SubmitError::Inverted { start: 9, end: 2 }));
    assert!(matches!(validate(&r(vec![PageRange::new(0, u64::MAX)]), 10), Err(SubmitError::OutOfBounds { .. })));
    assert!(matches!(
        validate(&r(vec![PageRange::new(0, 1); 11]), 10),
        Err(SubmitError::TooManyRanges { count: 11, max: 10 })
    ));
    assert_eq!(validate(&r(vec![PageRange::new(0, 1)]), 10), Ok(()));
}

#[test]
fn a_flood_is_dropped_and_counted_never_blocking() {
    let cache = cache_of(1 << 20, []);
    // A slow backend: the worker falls behind at once.
    let backend = FakeBackend { delay: Duration::from_millis(20), ..FakeBackend::default() };
    let config = ExecutorConfig { queue_capacity: 8, ..ExecutorConfig::default() };
    let exec = Executor::with_parts(config, Box::new(cache), Box::new(backend), calm(), None).expect("starts");
    let origin = exec.register_origin("flood");
    let start = Instant::now();
    let mut refused = 0;
    for i in 0..10_000u64 {
        let r = Request::new(any_file(), vec![PageRange::new(i * 2, i * 2 + 1)], origin);
        if let Err(SubmitError::QueueFull { .. }) = exec.submit(r) {
            refused += 1;
        }
    }
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_secs(2), "submit must not block: 10k submits took {elapsed:?}");
    assert!(refused >= 10_000 - 8 - 10, "most were dropped: {refused}");
    let stats = exec.stats();
    let flood = &stats.origins[origin.0 as usize];
    assert_eq!(flood.name, "flood");
    assert_eq!(flood.counters.dropped_requests, refused);
}

#[test]
fn executor_processes_and_goes_idle() {
    let cache = cache_of(1000, 0..10);
    let backend = FakeBackend { depth: Some(8), ..FakeBackend::default() };
    let exec =
        Executor::with_parts(ExecutorConfig::default(), Box::new(cache), Box::new(backend.clone()), calm(), None)
            .expect("starts");
    let origin = exec.register_origin("t");
    exec.submit(Request::new(any_file(), vec![PageRange::new(0, 100)], origin)).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(5)));
    let c = exec.stats().origins[origin.0 as usize].counters;
    assert_eq!((c.requests, c.skipped_resident_pages, c.issued_pages, c.completed_pages), (1, 10, 90, 90));
}

#[test]
fn scattered_pages_of_a_cold_or_warm_file_cost_one_probe() {
    // 4,096 single pages, one in every 8, in shuffled order.
    let mut pages: Vec<u64> = (0..4096).map(|i| i * 8).collect();
    pages.reverse();
    pages.swap(10, 3000);
    let ranges: Vec<(u64, u64)> = pages.iter().map(|&p| (p, p + 1)).collect();
    for warm in [false, true] {
        let cache = cache_of(40_000, if warm { 0..40_000 } else { 0..0 });
        let backend = FakeBackend::default();
        let d = engine(&cache, &backend, Limits::default(), calm()).execute(req(&ranges));
        assert_eq!(cache.0.lock().unwrap().probes, 1, "warm={warm}");
        assert_eq!(if warm { d.skipped_resident_pages } else { d.issued_pages }, 4096);
    }
}

#[test]
fn mixed_residency_is_split_until_settled() {
    // Every other 64-page block resident: the probe splits down to blocks.
    let resident = (0..64).filter(|b| b % 2 == 0).flat_map(|b| b * 64..b * 64 + 64);
    let cache = cache_of(4096, resident);
    let backend = FakeBackend::default();
    let ranges: Vec<(u64, u64)> = (0..64).map(|b| (b * 64, b * 64 + 64)).collect();
    let d = engine(&cache, &backend, Limits::default(), calm()).execute(req(&ranges));
    assert_eq!(d.skipped_resident_pages, 32 * 64);
    assert_eq!(d.issued_pages, 32 * 64);
    let issued = backend.io.lock().unwrap().issued.clone();
    assert!(issued.iter().all(|r| (r.start / 64) % 2 == 1), "only absent blocks issued");
}

#[test]
fn far_apart_segments_are_probed_separately() {
    let cache = cache_of(1 << 20, []);
    let backend = FakeBackend::default();
    let gap = GROUP_GAP_PAGES * 4;
    let ranges: Vec<(u64, u64)> = (0..10).map(|i| (i * gap, i * gap + 4)).collect();
    engine(&cache, &backend, Limits::default(), calm()).execute(req(&ranges));
    assert_eq!(cache.0.lock().unwrap().probes, 10);
}

/// Rule: a metadata request's directories are listed by the metadata
/// threads (all of each, counted); the executor is idle only after.
#[test]
fn metadata_requests_list_their_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    for i in 0..25 {
        std::fs::write(dir.path().join(format!("f{i}")), b"x").expect("write");
    }
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let exec = Executor::with_parts(
        ExecutorConfig::default(),
        Box::new(FakeCache::default()),
        Box::new(FakeBackend::default()),
        calm(),
        None,
    )
    .expect("starts");
    let origin = exec.register_origin("t");
    let dirs = vec![
        crate::request::MetaDir::open(dir.path()).expect("dir opens"),
        crate::request::MetaDir::open(dir.path().join("sub")).expect("dir opens"),
    ];
    exec.submit_meta(MetaRequest { execs: Vec::new(), lookups: Vec::new(), dirs, origin }).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(5)));
    let c = exec.stats().total;
    assert_eq!((c.meta_dirs_requested, c.meta_dirs_listed, c.meta_dirs_dropped), (2, 2, 0));
    // 25 files and `sub` in the first, nothing in the second (`.` and `..`
    // are not entries).
    assert_eq!(c.meta_entries, 26);
    assert!(crate::request::MetaDir::open(dir.path().join("f0")).is_err(), "a file is not a directory");
    assert_eq!(
        exec.submit_meta(MetaRequest { execs: Vec::new(), lookups: Vec::new(), dirs: Vec::new(), origin }),
        Err(SubmitError::Empty)
    );
}

#[test]
fn metadata_threads_look_names_up_in_jobs_of_bounded_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("here"), b"x").expect("write");
    let exec = Executor::with_parts(
        ExecutorConfig::default(),
        Box::new(FakeCache::default()),
        Box::new(FakeBackend::default()),
        calm(),
        None,
    )
    .expect("starts");
    let origin = exec.register_origin("t");
    let mut names: Vec<Box<str>> = (0..70).map(|i| format!("missing{i}").into()).collect();
    names.push("here".into());
    let held = crate::request::MetaDir::open(dir.path()).expect("dir opens");
    let lookups = vec![crate::request::MetaLookup { dir: held.clone(), names: names.into() }];
    exec.submit_meta(MetaRequest { execs: Vec::new(), lookups, dirs: vec![held], origin }).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(5)));
    let c = exec.stats().total;
    // 71 names (three jobs of at most 32) and one listing.
    assert_eq!((c.meta_lookups, c.meta_lookups_dropped, c.meta_dirs_listed, c.meta_entries), (71, 0, 1, 1));
    assert!(crate::sys::look_up(crate::request::MetaDir::open(dir.path()).unwrap().as_fd(), "here"));
    assert!(!crate::sys::look_up(crate::request::MetaDir::open(dir.path()).unwrap().as_fd(), "missing0"));
}

/// Rule: metadata beyond the queue's room is dropped and counted, never
/// waited for.
#[test]
fn metadata_beyond_the_queue_is_dropped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ExecutorConfig { meta_threads: 0, ..ExecutorConfig::default() };
    let exec =
        Executor::with_parts(config, Box::new(FakeCache::default()), Box::new(FakeBackend::default()), calm(), None)
            .expect("starts");
    let origin = exec.register_origin("t");
    let dirs = vec![crate::request::MetaDir::open(dir.path()).expect("dir opens"); 3];
    let names: Vec<Box<str>> = vec!["a".into(), "b".into()];
    let lookups = vec![crate::request::MetaLookup { dir: dirs[0].clone(), names: names.into() }];
    assert!(exec.submit_meta(MetaRequest { execs: Vec::new(), lookups, dirs, origin }).is_err());
    assert!(exec.wait_idle(Duration::from_secs(1)));
    let c = exec.stats().total;
    assert_eq!((c.meta_dirs_requested, c.meta_dirs_dropped, c.meta_dirs_listed), (3, 3, 0));
    assert_eq!((c.meta_lookups_dropped, c.meta_lookups), (2, 0));
}

/// An executor over a 4-page file none of which is cached, with its fake
/// backend.
fn executor_of_four_pages() -> (Executor, FakeBackend) {
    let backend = FakeBackend::default();
    let exec = Executor::with_parts(
        ExecutorConfig::default(),
        Box::new(cache_of(4, [])),
        Box::new(backend.clone()),
        calm(),
        None,
    )
    .expect("starts");
    (exec, backend)
}

/// An exec's path is resolved (with its interpreters) on the metadata
/// threads, counted as lookups, and the data requests after it still run.
#[test]
fn metadata_requests_resolve_the_execs_they_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = crate::testing::executable_script(dir.path(), "tool", "#!/bin/sh\n");
    let (exec, backend) = executor_of_four_pages();
    let origin = exec.register_origin("t");
    let path: Arc<str> = script.to_str().expect("utf-8").into();
    exec.submit_meta(MetaRequest { execs: vec![path], lookups: Vec::new(), dirs: Vec::new(), origin })
        .expect("accepted");
    exec.submit(Request::new(any_file(), vec![PageRange::new(0, 4)], origin)).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(5)));
    let c = exec.stats().total;
    // The script, /bin/sh, and the loader /bin/sh names.
    assert_eq!((c.meta_lookups, c.meta_lookups_dropped), (3, 0));
    assert_eq!(backend.io.lock().unwrap().issued, vec![PageRange::new(0, 4)]);
}

/// Rule: while an exec is being resolved the worker holds data back, for
/// [`ExecutorConfig::exec_gate_max`] at most; the submitter never waits.
#[test]
fn data_waits_for_the_exec_being_resolved_for_a_bounded_time() {
    let (exec, backend) = executor_of_four_pages();
    let origin = exec.register_origin("t");
    let start = Instant::now();
    exec.meta.gate().close(1);
    exec.submit(Request::new(any_file(), vec![PageRange::new(0, 4)], origin)).expect("accepted");
    let gate_max = ExecutorConfig::default().exec_gate_max;
    assert!(start.elapsed() < gate_max, "the submitter did not wait");
    assert!(exec.wait_idle(Duration::from_secs(5)));
    assert!(start.elapsed() >= gate_max, "issued after {:?}", start.elapsed());
    assert_eq!(backend.io.lock().unwrap().issued, vec![PageRange::new(0, 4)], "then issued all the same");
}

#[test]
fn settling_bounds_that_cannot_work_are_refused_at_start() {
    let start = |limits: Limits| {
        let config = ExecutorConfig { limits, ..ExecutorConfig::default() };
        Executor::with_parts(config, Box::new(cache_of(4, [])), Box::new(FakeBackend::default()), calm(), None)
    };
    let no_scan = start(Limits { settle_scan: 0, ..Limits::default() });
    assert!(matches!(no_scan, Err(ExecutorError::Config(_))), "no read would ever leave the window");
    let inverted = Limits {
        min_probe_interval: Duration::from_millis(3),
        max_probe_interval: Duration::ZERO,
        ..Limits::default()
    };
    assert!(matches!(start(inverted), Err(ExecutorError::Config(_))));
    assert!(start(Limits::default()).is_ok());
}
