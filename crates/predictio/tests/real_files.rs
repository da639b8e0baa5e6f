//! Integration tests on real files and the real kernel: evict, prefetch
//! through every backend, check residency with `cachestat`/`mincore`, and
//! check that prefetching never changes a byte that is read.
//!
//! Most of these need no privilege. The ones that drop the whole page cache
//! need root; outside CI they skip with a message, under `CI=true` a skip is a
//! failure.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use predictio::executor::{BackendKind, ExecutorConfig, Limits, SubmitError};
use predictio::testing::{is_root, skip};
use predictio::{Executor, FileRef, PAGE_SIZE, PageRange, Request, Urgency, cache};
use proptest::prelude::*;

/// Tests that look at page-cache state must not overlap one that drops the
/// whole cache.
static CACHE: Mutex<()> = Mutex::new(());

fn cache_lock() -> MutexGuard<'static, ()> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A file of `pages` pages of deterministic bytes on a real disk (not tmpfs:
/// /var/tmp), returned with its contents.
fn data_file(dir: &Path, name: &str, pages: u64, seed: u8) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.join(name);
    let mut data = vec![0u8; (pages * PAGE_SIZE) as usize];
    let mut x: u32 = 0x9E37_79B9 ^ seed as u32;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let mut f = File::create(&path).expect("create data file");
    f.write_all(&data).expect("write data file");
    f.sync_all().expect("sync data file");
    (path, data)
}

fn disk_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/var/tmp").ok();
    tempfile::Builder::new().prefix("predictio-test").tempdir_in("/var/tmp").expect("temp dir on disk")
}

fn executor(backend: BackendKind) -> Executor {
    let config = ExecutorConfig {
        backend,
        io_depth: 32,
        limits: Limits { max_pages_per_request: u64::MAX, ..Limits::default() },
        ..ExecutorConfig::default()
    };
    Executor::new(config).expect("executor starts")
}

fn read_bytes_of_this_process() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("read_bytes:").map(|v| v.trim().parse().unwrap_or(0))))
        .unwrap_or(0)
}

#[test]
fn evict_then_prefetch_makes_file_resident_with_every_backend() {
    let _lock = cache_lock();
    let dir = disk_dir();
    let (path, _) = data_file(dir.path(), "f", 4096, 1);
    let file = FileRef::open(&path).expect("open");
    for backend in BackendKind::ALL {
        cache::evict(&file).expect("evict");
        let before = cache::residency(&file).expect("residency");
        assert!(before.fraction() < 0.05, "{backend}: evicted file still {:.1}% resident", before.fraction() * 100.0);

        let exec = executor(backend);
        assert_eq!(exec.backend(), backend, "no fallback expected on this kernel: {:?}", exec.fallback_reason());
        let origin = exec.register_origin("test");
        exec.submit(Request::new(file.clone(), vec![PageRange::new(0, 4096)], origin)).expect("accepted");
        assert!(exec.wait_idle(Duration::from_secs(120)), "{backend}: executor did not go idle");
        let up = cache::wait_resident(&file, &[PageRange::new(0, 4096)], Duration::from_secs(120)).expect("mincore");
        assert_eq!(up, 4096, "{backend}: not every page became resident");
        let after = cache::residency(&file).expect("residency");
        assert!(after.fraction() > 0.99, "{backend}: cachestat says {:.1}%", after.fraction() * 100.0);
        let c = exec.stats().total;
        assert_eq!(c.issued_pages, 4096, "{backend}");
        assert_eq!(c.errors, 0, "{backend}");
    }
}

/// Streamed requests (bulk data such as model tensors) are read by the
/// stream thread through the kernel's own readahead: the pages become
/// resident, only the absent ones are issued, and the bytes read afterwards
/// are the file's.
#[test]
fn streamed_requests_make_ranges_resident() {
    let _lock = cache_lock();
    let dir = disk_dir();
    let (path, data) = data_file(dir.path(), "streamed", 6144, 7);
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    // A quarter already resident: skipped, not streamed again.
    let mut warm = vec![0u8; (1024 * PAGE_SIZE) as usize];
    file.file().read_exact_at(&mut warm, 1024 * PAGE_SIZE).expect("read");
    let exec = executor(BackendKind::Fadvise);
    let origin = exec.register_origin("test");
    let ranges = vec![PageRange::new(4096, 6144), PageRange::new(0, 3000)];
    let request = Request::new(file.clone(), ranges.clone(), origin).with_urgency(Urgency::Imminent).streamed();
    assert!(request.sequential);
    exec.submit(request).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(120)), "stream thread did not go idle");
    let up = cache::wait_resident(&file, &ranges, Duration::from_secs(120)).expect("mincore");
    assert_eq!(up, 2048 + 3000, "every streamed page resident");
    let c = exec.stats().total;
    assert_eq!(c.skipped_resident_pages, 1024, "{c:?}");
    assert_eq!(c.issued_pages, 2048 + 3000 - 1024, "{c:?}");
    assert_eq!(c.issued_ios, 3, "runs 4096..6144, 0..1024, 2048..3000: {c:?}");
    assert_eq!(c.errors, 0, "{c:?}");
    assert_eq!(std::fs::read(&path).expect("read"), data, "prefetching changed no byte");
}

#[test]
fn resident_pages_cause_no_io() {
    let _lock = cache_lock();
    let dir = disk_dir();
    let (path, data) = data_file(dir.path(), "warm", 2048, 2);
    // Make it resident by reading it.
    assert_eq!(std::fs::read(&path).expect("read"), data);
    let file = FileRef::open(&path).expect("open");
    assert!(cache::residency(&file).expect("residency").fraction() > 0.99);
    let exec = executor(BackendKind::Uring);
    let origin = exec.register_origin("test");
    let io_before = read_bytes_of_this_process();
    for _ in 0..10 {
        exec.submit(Request::new(file.clone(), vec![PageRange::new(0, 2048)], origin)).expect("accepted");
    }
    assert!(exec.wait_idle(Duration::from_secs(60)));
    let c = exec.stats().total;
    assert_eq!(c.skipped_resident_pages, 10 * 2048);
    assert_eq!(c.issued_pages, 0);
    assert_eq!(c.issued_ios, 0);
    assert_eq!(read_bytes_of_this_process() - io_before, 0, "the kernel reports block reads for resident pages");
}

#[test]
fn cold_prefetch_reads_from_the_device_and_counts_it() {
    let _lock = cache_lock();
    let dir = disk_dir();
    let (path, _) = data_file(dir.path(), "cold", 1024, 3);
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let exec = executor(BackendKind::Uring);
    let origin = exec.register_origin("test");
    let io_before = read_bytes_of_this_process();
    exec.submit(Request::new(file.clone(), vec![PageRange::new(0, 1024)], origin)).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(60)));
    let c = exec.stats().total;
    assert_eq!(c.issued_pages, 1024);
    assert_eq!(c.completed_pages, 1024);
    assert!(read_bytes_of_this_process() - io_before >= 1024 * PAGE_SIZE, "block reads were accounted to us");
}

#[test]
fn a_flood_on_the_real_executor_is_dropped_and_counted() {
    let dir = disk_dir();
    let (path, _) = data_file(dir.path(), "flood", 256, 4);
    let file = FileRef::open(&path).expect("open");
    let config = ExecutorConfig { queue_capacity: 4, ..ExecutorConfig::default() };
    let exec = Arc::new(Executor::new(config).expect("starts"));
    let origin = exec.register_origin("flood");
    let start = Instant::now();
    let mut refused = 0u64;
    let mut slowest = Duration::ZERO;
    for i in 0..200_000u64 {
        let t = Instant::now();
        let r = exec.submit(Request::new(file.clone(), vec![PageRange::page(i % 256)], origin));
        slowest = slowest.max(t.elapsed());
        if matches!(r, Err(SubmitError::QueueFull { .. })) {
            refused += 1;
        }
    }
    assert!(start.elapsed() < Duration::from_secs(5), "200k submits took {:?}", start.elapsed());
    assert!(slowest < Duration::from_millis(50), "one submit blocked for {slowest:?}");
    assert!(refused > 0, "a 4-deep queue under a flood must drop");
    assert!(exec.wait_idle(Duration::from_secs(60)));
    let c = exec.stats().origins[origin.0 as usize].counters;
    assert_eq!(c.dropped_requests, refused);
    assert_eq!(c.requests + refused, 200_000, "every submit was either executed or counted as dropped");
}

#[test]
fn holes_and_eof_are_skipped_on_a_sparse_file() {
    let _lock = cache_lock();
    let dir = disk_dir();
    let path = dir.path().join("sparse");
    let f = File::create(&path).expect("create");
    // Data at pages 0..16 and 1000..1016; a hole between; 2048 pages long.
    f.write_all_at(&vec![7u8; 16 * PAGE_SIZE as usize], 0).expect("write");
    f.write_all_at(&vec![9u8; 16 * PAGE_SIZE as usize], 1000 * PAGE_SIZE).expect("write");
    f.set_len(2048 * PAGE_SIZE).expect("set_len");
    f.sync_all().expect("sync");
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let exec = executor(BackendKind::Fadvise);
    let origin = exec.register_origin("test");
    exec.submit(Request::new(file.clone(), vec![PageRange::new(0, 5000)], origin)).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(60)));
    let c = exec.stats().total;
    assert_eq!(c.beyond_eof_pages, 5000 - 2048);
    assert!(c.hole_pages >= 2048 - 32 - 64, "hole pages counted: {}", c.hole_pages);
    assert!(c.issued_pages <= 32 + 64, "only data pages issued: {}", c.issued_pages);
    assert_eq!(c.errors, 0);
}

#[test]
fn memory_pressure_guard_reads_this_machine() {
    let state = predictio::pressure::MemoryState::read().expect("procfs");
    assert!(state.total > 0 && state.available > 0 && state.available <= state.total);
}

#[test]
fn drop_caches_then_prefetch_as_root() {
    if !is_root() && skip("needs root to drop the page cache") {
        return;
    }
    let _lock = cache_lock();
    let dir = disk_dir();
    let (path, _) = data_file(dir.path(), "root", 8192, 5);
    let file = FileRef::open(&path).expect("open");
    std::process::Command::new("sync").status().expect("sync");
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").expect("drop_caches");
    assert!(cache::residency(&file).expect("residency").fraction() < 0.01);
    let exec = executor(BackendKind::Uring);
    let origin = exec.register_origin("test");
    exec.submit(Request::new(file.clone(), vec![PageRange::new(0, 8192)], origin).with_urgency(Urgency::Imminent))
        .expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(120)));
    assert!(cache::residency(&file).expect("residency").fraction() > 0.99);
}

fn backend_strategy() -> impl Strategy<Value = BackendKind> {
    prop_oneof![
        Just(BackendKind::Fadvise),
        Just(BackendKind::Readahead),
        Just(BackendKind::Uring),
        Just(BackendKind::Madvise)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Prefetched or not, through any backend, the bytes read are the bytes
    /// written.
    #[test]
    fn prefetching_never_changes_what_is_read(
        pages in 1u64..600,
        seed in any::<u8>(),
        backend in backend_strategy(),
        ranges in proptest::collection::vec((0u64..700, 1u64..64), 0..12),
    ) {
        let _lock = cache_lock();
        let dir = disk_dir();
        let (path, data) = data_file(dir.path(), "prop", pages, seed);
        let file = FileRef::open(&path).expect("open");
        cache::evict(&file).expect("evict");
        let plain = std::fs::read(&path).expect("read");
        prop_assert_eq!(&plain, &data);

        cache::evict(&file).expect("evict");
        let exec = executor(backend);
        let origin = exec.register_origin("prop");
        let ranges: Vec<PageRange> = ranges.iter().map(|&(s, n)| PageRange::new(s, s + n)).collect();
        if !ranges.is_empty() {
            exec.submit(Request::new(file.clone(), ranges, origin)).expect("accepted");
        }
        // Read while the prefetch may still be running, then again after.
        let racing = std::fs::read(&path).expect("read");
        prop_assert!(exec.wait_idle(Duration::from_secs(60)));
        let after = std::fs::read(&path).expect("read");
        prop_assert_eq!(&racing, &data);
        prop_assert_eq!(&after, &data);
        prop_assert_eq!(exec.stats().total.errors, 0);
    }
}

#[test]
fn embedded_requests_for_cached_pages_are_settled_at_submit_without_a_worker() {
    let _cache = cache_lock();
    if !predictio::executor::kernel::probe_cachestat() {
        skip("cachestat(2) is not available on this kernel; the screen is off without it");
        return;
    }
    let dir = disk_dir();
    let (path, data) = data_file(dir.path(), "warm", 64, 9);
    let file = FileRef::open(&path).expect("open");
    // Cached: read every page once.
    let mut buf = vec![0u8; data.len()];
    file.file().read_exact_at(&mut buf, 0).expect("read");
    assert_eq!(buf, data);
    let exec = Executor::new(ExecutorConfig::embedded()).expect("executor starts");
    let origin = exec.register_origin("test");
    let scattered: Vec<PageRange> = (0..64).step_by(4).map(|p| PageRange::new(p, p + 1)).collect();
    exec.submit(Request::new(file.clone(), scattered.clone(), origin).with_urgency(Urgency::Imminent))
        .expect("accepted");
    assert_eq!(exec.queued_requests(), 0, "a request for cached pages is not queued");
    assert!(!exec.worker_started(), "nothing to do: no thread");
    let total = exec.stats().total;
    assert_eq!((total.requests, total.requested_pages, total.skipped_resident_pages), (1, 16, 16));
    assert_eq!(total.issued_pages, 0);

    // Evicted, the same request goes to the engine: issued by this thread
    // (`issue_in_caller`), still without a worker.
    cache::evict(&file).expect("evict");
    exec.submit(Request::new(file.clone(), scattered.clone(), origin).with_urgency(Urgency::Imminent))
        .expect("accepted");
    assert_eq!(exec.queued_requests(), 1);
    assert!(!exec.worker_started(), "issued by the submitting thread");
    assert!(exec.wait_idle(Duration::from_secs(10)));
    let resident = cache::wait_resident(&file, &scattered, Duration::from_secs(10)).expect("cachestat");
    assert_eq!(resident, 16, "the caller prefetched the evicted pages");
    assert_eq!(exec.stats().total.issued_pages, 16);
}

#[test]
fn a_request_the_caller_would_wait_for_goes_to_the_worker() {
    let _cache = cache_lock();
    let dir = disk_dir();
    let (path, _) = data_file(dir.path(), "paced", 64, 10);
    let file = FileRef::open(&path).expect("open");
    let scattered: Vec<PageRange> = (0..64).step_by(4).map(|p| PageRange::new(p, p + 1)).collect();
    // Without `issue_in_caller`, and with it where pacing (at most 8 pages
    // unsettled) would make the caller wait for a 16-page request: queued,
    // and the worker reads it.
    let paced =
        ExecutorConfig { limits: Limits { max_unsettled_pages: 8, ..Limits::default() }, ..ExecutorConfig::embedded() };
    for config in [ExecutorConfig { issue_in_caller: false, ..ExecutorConfig::embedded() }, paced] {
        cache::evict(&file).expect("evict");
        let exec = Executor::new(config).expect("executor starts");
        let origin = exec.register_origin("test");
        exec.submit(Request::new(file.clone(), scattered.clone(), origin).with_urgency(Urgency::Imminent))
            .expect("accepted");
        assert!(exec.worker_started(), "queued for the worker");
        assert!(exec.wait_idle(Duration::from_secs(10)));
        let resident = cache::wait_resident(&file, &scattered, Duration::from_secs(10)).expect("cachestat");
        assert_eq!(resident, 16, "the worker prefetched the evicted pages");
    }
}

/// A sparse file's holes never become resident (the executor skips them):
/// waiting for them re-submitted the holes until the timeout ("173 GiB
/// requested" for a 1 GiB file). Only the data is waited for.
#[test]
fn fetch_and_wait_of_a_sparse_file_waits_for_its_data_only() {
    let _guard = cache_lock();
    let dir = disk_dir();
    let path = dir.path().join("sparse");
    let file = File::create(&path).expect("create");
    file.set_len(64 << 20).expect("64 MiB of hole");
    file.write_all_at(&vec![7u8; 1 << 20], 32 << 20).expect("1 MiB of data in the middle");
    file.sync_all().expect("sync");
    drop(file);
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let executor = executor(BackendKind::Fadvise);
    let origin = executor.register_origin("test");
    let start = Instant::now();
    let resident = executor
        .fetch_and_wait(&file, &[PageRange::new(0, (64 << 20) / PAGE_SIZE)], origin, Duration::from_secs(20))
        .expect("the data becomes resident before the timeout");
    assert_eq!(resident, (1 << 20) / PAGE_SIZE, "the data pages, not the holes");
    assert!(start.elapsed() < Duration::from_secs(5), "took {:?}", start.elapsed());
    let requested = executor.stats().origins[origin.0 as usize].counters.requested_pages;
    assert!(requested <= 2 * (1 << 20) / PAGE_SIZE, "holes were requested again: {requested} pages");
}
