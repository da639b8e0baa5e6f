//! The executor: the only code in predictio that prefetches.
//!
//! [`Executor::submit`] validates a [`Request`] and puts it on a bounded
//! queue; it never blocks and never waits for I/O. When the queue is full
//! the request is dropped and counted. A worker thread takes requests off
//! the queue (or, with [`ExecutorConfig::issue_in_caller`], the submitting
//! thread itself, where nothing would wait) and runs them through the
//! [`engine::Engine`]: clamp to EOF, skip holes,
//! skip resident pages (`cachestat`, then `mincore` where a range is partly
//! resident), skip pages in flight, coalesce, and issue through the chosen
//! [`BackendKind`] within the I/O-depth and in-flight bounds. Under memory
//! pressure speculative requests are shed, counted.
//!
//! Invariant: nothing here changes what an application reads. Prefetch only
//! fills the page cache; a dropped or failed prefetch costs only overlap.

pub mod backend;
pub mod engine;
pub mod inflight;
pub mod kernel;
pub mod meta;
pub mod plan;
pub mod stream;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

pub use backend::{Backend, BackendKind, Issued};
pub use engine::{Engine, Limits};
pub use kernel::{LinuxPageCache, PageCache};

use crate::accounting::{Accounting, Counters, Stats};
use crate::file::FileId;
use crate::page::{PAGE_SIZE, PageRange};
use crate::policy::PolicyId;
use crate::pressure::{PressureConfig, PressureGuard};
use crate::request::{MetaRequest, Request};

/// Largest page index a request may name: the last page of the largest file
/// offset Linux allows (`i64::MAX`).
pub const MAX_PAGE: u64 = (i64::MAX as u64) / PAGE_SIZE;

/// Executor settings. Every bound is counted when hit.
#[derive(Clone, Debug, PartialEq)]
pub struct ExecutorConfig {
    /// The backend to issue through (falls back to fadvise where it cannot
    /// run).
    pub backend: BackendKind,
    /// Requests waiting for the worker; a submit beyond it is dropped.
    pub queue_capacity: usize,
    /// Ranges one request may carry; more is refused at submit.
    pub max_ranges_per_request: usize,
    /// Pages, I/O size, in-flight bounds and hit tracking.
    pub limits: Limits,
    /// I/Os in flight at once (the `uring` backend's queue depth).
    pub io_depth: u32,
    /// The memory-pressure guard's thresholds.
    pub pressure: PressureConfig,
    /// How long a prefetched page may stay untouched before it counts as
    /// waste (with hit tracking on).
    pub hit_timeout: Duration,
    /// Threads listing the directories of metadata requests (0: metadata
    /// requests are dropped, counted).
    pub meta_threads: usize,
    /// Directories waiting for a metadata thread; more are dropped.
    pub meta_queue_capacity: usize,
    /// Whether the metadata threads' reads go in the real-time I/O class
    /// (`ioprio_set`; needs `CAP_SYS_ADMIN`, else they stay best-effort), so
    /// that mq-deadline dispatches a directory block ahead of queued data
    /// prefetch. Off by default: while any real-time read is in flight,
    /// mq-deadline holds every best-effort one back — the program's own
    /// reads included — and dispatches it only when something next runs the
    /// queue. Traced in the launch bench, a program's exec sat 3–4 ms with
    /// its directory block held in the scheduler and the device idle, until
    /// the executor's first data read ran the queue (see
    /// `docs/notes/2026-12-06-launch-and-executor-findings.md`). For a device whose scheduler does not hold classes back
    /// (`none`, `kyber`) it costs nothing and may help.
    pub meta_realtime_io: bool,
    /// How long data prefetch waits, at most, for the execs a metadata
    /// request names to be resolved ([`meta::ExecGate`]): long enough for an
    /// exec's lookups and first pages on this device, so that they do not
    /// queue behind a replay's data; every millisecond of it delays the
    /// replay's first data read when they take longer.
    pub exec_gate_max: Duration,
    /// Requests of at most this many ranges are looked up in the page cache
    /// by the submitting thread (`cachestat`, stopping at the first range
    /// not wholly cached): one whose pages are all cached already is counted
    /// as skipped and never queued, so the worker is not woken for it. 0
    /// (the default): every request is queued. For adapters inside a
    /// program whose data is mostly cached: waking the worker is a
    /// cross-CPU wake-up per request, which on a warm cache cost a
    /// single-threaded SQLite program more than the policy itself (see
    /// `docs/notes/2026-12-06-btree-scan-findings.md`). Off without `cachestat`.
    pub screen_resident_ranges: usize,
    /// Whether sequential requests get the stream thread (true, the
    /// default); without it they are issued like any other.
    pub stream_thread: bool,
    /// Whether the submitting thread runs a request through the engine
    /// itself when it can without waiting: the queue is empty, the engine
    /// is not in use (`try_lock`), and issuing would not wait
    /// ([`Engine::issues_without_waiting`]); otherwise the request is queued
    /// for the worker as usual. Only with backends that finish at issue
    /// (`fadvise`, `readahead`, `madvise`): with `uring` every request is
    /// queued. Off by default. For adapters inside a program
    /// ([`Self::embedded`]): on a 2-CPU machine the kernel woke the worker on
    /// the program's own CPU (where the device's interrupts also land), so
    /// each request cost the program two context switches and the wait for
    /// its turn, and the reads it had just asked for started late. Issuing
    /// is a few microseconds of `posix_fadvise` per I/O, which the program's
    /// CPU was paying anyway.
    pub issue_in_caller: bool,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Fadvise,
            queue_capacity: 4096,
            max_ranges_per_request: 1 << 16,
            limits: Limits::default(),
            io_depth: 64,
            pressure: PressureConfig::default(),
            hit_timeout: Duration::from_secs(30),
            meta_threads: 4,
            meta_queue_capacity: 4096,
            meta_realtime_io: false,
            exec_gate_max: Duration::from_millis(5),
            screen_resident_ranges: 0,
            stream_thread: true,
            issue_in_caller: false,
        }
    }
}

impl ExecutorConfig {
    /// The defaults for an executor that replays launches (the daemon,
    /// `predictio run` with a profile): fadvise and readahead reads are
    /// paced in a window of [`Limits::max_unsettled_pages`] = 1,024 pages
    /// (4 MiB), deep enough to keep the device busy on a replay of small
    /// scattered reads, shallow enough that a read of the program's own the
    /// replay does not cover waits behind little of it (see
    /// [`crate::launch::pacing`]).
    pub fn replaying() -> Self {
        Self { limits: Limits { max_unsettled_pages: 1024, ..Limits::default() }, ..Self::default() }
    }

    /// The defaults for an executor inside an application (a database
    /// adapter's embedded runtime): requests of up to 1,024 ranges whose pages
    /// are all cached are settled in the submitting thread
    /// ([`Self::screen_resident_ranges`]), and neither metadata threads
    /// nor the stream thread are started (adapters prefetch pages of their
    /// trees, not directories or streams). Requests that need I/O are
    /// issued by the submitting thread too where it need not wait
    /// ([`Self::issue_in_caller`]). With the worker started only when a
    /// request is first queued, a program whose data is all cached, or
    /// whose requests its own thread issued, runs with no thread of ours:
    /// merely having a second thread cost a
    /// single-threaded SQLite program ~10 % on cached range scans (glibc's
    /// locks take their atomic path once a process has two threads).
    pub fn embedded() -> Self {
        Self {
            screen_resident_ranges: 1024,
            meta_threads: 0,
            stream_thread: false,
            issue_in_caller: true,
            ..Self::default()
        }
    }
}

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The kernel's page size is not the one predictio works in.
    #[error("kernel page size is {0} bytes; predictio supports 4096-byte pages only")]
    PageSize(u64),
    /// A setting is out of range.
    #[error("invalid executor setting: {0}")]
    Config(&'static str),
    /// A thread the executor starts with it (the stream thread, a metadata
    /// thread) could not be started. (The worker starts with the first
    /// request queued; if it cannot, that submit is refused with
    /// [`SubmitError::NoWorker`].)
    #[error("cannot start an executor thread: {0}")]
    Spawn(std::io::Error),
}

/// Why a request was not accepted. Nothing was queued; the drop is counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubmitError {
    /// The queue is full: the request was dropped.
    #[error("executor queue full ({capacity} requests); request dropped")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The request names no page.
    #[error("request names no page")]
    Empty,
    /// A range ends before it starts.
    #[error("range {start}..{end} ends before it starts")]
    Inverted {
        /// Start page.
        start: u64,
        /// End page.
        end: u64,
    },
    /// A range lies beyond any possible file offset.
    #[error("range {start}..{end} lies beyond the largest file offset")]
    OutOfBounds {
        /// Start page.
        start: u64,
        /// End page.
        end: u64,
    },
    /// The request carries more ranges than allowed.
    #[error("request has {count} ranges; at most {max} are allowed")]
    TooManyRanges {
        /// Ranges in the request.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// The executor is shutting down.
    #[error("executor is shutting down")]
    ShuttingDown,
    /// The worker thread could not be started (it starts with the first
    /// request queued); nothing will be prefetched.
    #[error("the executor's worker thread could not be started; request dropped")]
    NoWorker,
    /// This sink does not take metadata requests.
    #[error("metadata requests are not supported here")]
    Unsupported,
}

/// Why [`Executor::fetch_and_wait`] did not bring every page in.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// The request was refused.
    #[error(transparent)]
    Submit(#[from] SubmitError),
    /// Residency could not be checked.
    #[error("checking residency: {0}")]
    Residency(#[from] std::io::Error),
    /// Time ran out first.
    #[error("only {resident} of {wanted} pages became resident in time")]
    Timeout {
        /// Pages resident and up to date at the end.
        resident: u64,
        /// Pages asked for (within the file).
        wanted: u64,
    },
}

/// Where requests go: the executor, or a test's sink.
pub trait RequestSink: Send + Sync {
    /// Hands over one request without blocking.
    fn submit(&self, request: Request) -> Result<(), SubmitError>;

    /// Hands over one metadata request without blocking. Sinks that cannot
    /// list directories refuse it.
    fn submit_meta(&self, request: MetaRequest) -> Result<(), SubmitError> {
        let _ = request;
        Err(SubmitError::Unsupported)
    }
}

struct Shared {
    queue: ArrayQueue<Request>,
    accounting: Arc<Accounting>,
    stop: AtomicBool,
    parking: Parking,
    submitted: AtomicU64,
    processed: AtomicU64,
    inflight_ios: AtomicU64,
    idle_lock: Mutex<()>,
    idle: Condvar,
    max_ranges: usize,
}

/// The bounded, page-cache-aware prefetch executor. Cheap to share behind an
/// `Arc`; `submit` may be called from any thread.
pub struct Executor {
    shared: Arc<Shared>,
    meta: meta::MetaPool,
    /// The worker's loop, with its engine, until the worker thread starts:
    /// with the first request queued, not before (see
    /// [`ExecutorConfig::embedded`]).
    pending: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    worker: Mutex<Option<JoinHandle<()>>>,
    worker_thread: OnceLock<Thread>,
    backend: BackendKind,
    fallback: Option<String>,
    /// The stream thread (shared with the engine), for `is_idle`.
    streamer: Option<Arc<stream::Streamer>>,
    /// [`ExecutorConfig::screen_resident_ranges`], 0 where `cachestat` is
    /// missing or the parts are not the real kernel's.
    screen_resident_ranges: usize,
    /// The engine, shared by the worker and (with
    /// [`ExecutorConfig::issue_in_caller`]) the submitting threads.
    engine: Arc<Mutex<Engine>>,
    /// [`ExecutorConfig::issue_in_caller`], where the backend finishes at
    /// issue.
    caller_runs: bool,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("backend", &self.backend).field("fallback", &self.fallback).finish()
    }
}

impl Executor {
    /// Starts an executor on the real kernel: probes the page size,
    /// `cachestat` and the backend (falling back with a logged reason), and
    /// starts the stream and metadata threads it is configured with (the
    /// worker starts with the first request queued).
    pub fn new(config: ExecutorConfig) -> Result<Self, ExecutorError> {
        let page_size = crate::sys::page_size();
        if page_size != PAGE_SIZE {
            return Err(ExecutorError::PageSize(page_size));
        }
        let (backend, fallback) = backend::open_backend(config.backend, config.io_depth, config.limits.max_io_pages);
        let pressure = PressureGuard::new(config.pressure.clone());
        let screen = if config.screen_resident_ranges > 0 && kernel::probe_cachestat() {
            config.screen_resident_ranges
        } else {
            0
        };
        let stream = config.stream_thread;
        let mut executor = Self::start(config, Box::new(LinuxPageCache::new()), backend, pressure, fallback, stream)?;
        executor.screen_resident_ranges = screen;
        Ok(executor)
    }

    /// Starts an executor over the given parts (tests, benchmarks).
    pub fn with_parts(
        config: ExecutorConfig,
        cache: Box<dyn PageCache>,
        backend: Box<dyn Backend>,
        pressure: PressureGuard,
        fallback: Option<String>,
    ) -> Result<Self, ExecutorError> {
        Self::start(config, cache, backend, pressure, fallback, false)
    }

    /// Starts the worker over the given parts, with the stream thread for
    /// sequential requests when `stream` is set.
    fn start(
        config: ExecutorConfig,
        cache: Box<dyn PageCache>,
        backend: Box<dyn Backend>,
        pressure: PressureGuard,
        fallback: Option<String>,
        stream: bool,
    ) -> Result<Self, ExecutorError> {
        if config.queue_capacity == 0 {
            return Err(ExecutorError::Config("queue_capacity must be at least 1"));
        }
        if config.limits.max_io_pages == 0 || config.limits.max_io_pages > (1 << 16) {
            return Err(ExecutorError::Config("max_io_pages must be 1..=65536"));
        }
        if config.limits.max_inflight_pages < config.limits.max_io_pages {
            return Err(ExecutorError::Config("max_inflight_pages must be at least max_io_pages"));
        }
        if config.limits.settle_scan == 0 {
            return Err(ExecutorError::Config("settle_scan must be at least 1"));
        }
        if config.limits.min_probe_interval > config.limits.max_probe_interval {
            return Err(ExecutorError::Config("min_probe_interval must not exceed max_probe_interval"));
        }
        let accounting = Arc::new(Accounting::new());
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(config.queue_capacity),
            accounting: Arc::clone(&accounting),
            stop: AtomicBool::new(false),
            parking: Parking::default(),
            submitted: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            inflight_ios: AtomicU64::new(0),
            idle_lock: Mutex::new(()),
            idle: Condvar::new(),
            max_ranges: config.max_ranges_per_request,
        });
        let kind = backend.kind();
        let mut engine = Engine::new(config.limits.clone(), cache, backend, pressure, Arc::clone(&accounting))
            .with_hit_timeout(config.hit_timeout);
        let streamer = if stream {
            let streamer = stream::Streamer::new(config.limits.max_stream_queued_pages, Arc::clone(&accounting))
                .map_err(ExecutorError::Spawn)?;
            let streamer = Arc::new(streamer);
            engine = engine.with_streamer(Arc::clone(&streamer));
            Some(streamer)
        } else {
            None
        };
        let engine = Arc::new(Mutex::new(engine));
        let meta = meta::MetaPool::new(
            config.meta_threads,
            config.meta_queue_capacity,
            config.meta_realtime_io,
            config.exec_gate_max,
            Arc::clone(&shared.accounting),
        )
        .map_err(ExecutorError::Spawn)?;
        let worker_shared = Arc::clone(&shared);
        let worker_engine = Arc::clone(&engine);
        let gate = Arc::clone(meta.gate());
        let worker_loop = move || worker_loop(worker_shared, worker_engine, &gate);
        Ok(Self {
            shared,
            meta,
            pending: Mutex::new(Some(Box::new(worker_loop))),
            worker: Mutex::new(None),
            worker_thread: OnceLock::new(),
            backend: kind,
            fallback,
            streamer,
            screen_resident_ranges: 0,
            engine,
            caller_runs: config.issue_in_caller && kind != BackendKind::Uring,
        })
    }

    /// The backend in use.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Why the configured backend was replaced, if it was.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Registers an origin (a policy or tool) for accounting.
    pub fn register_origin(&self, name: &str) -> PolicyId {
        self.shared.accounting.register(name)
    }

    /// Validates `request` and queues it; never blocks. Nonsense is refused
    /// with a typed error; a full queue drops the request. Both are counted.
    /// With [`ExecutorConfig::screen_resident_ranges`] a request whose pages
    /// are all cached is settled here; with
    /// [`ExecutorConfig::issue_in_caller`] one the engine can issue without
    /// waiting is issued here (asynchronous reads: `posix_fadvise` returns
    /// once they are submitted).
    pub fn submit(&self, request: Request) -> Result<(), SubmitError> {
        if let Err(err) = validate(&request, self.shared.max_ranges) {
            let d = Counters { rejected_requests: 1, ..Counters::default() };
            self.shared.accounting.record(request.origin, Some(request.file.id()), &d);
            return Err(err);
        }
        if self.shared.stop.load(Ordering::Relaxed) {
            return Err(SubmitError::ShuttingDown);
        }
        let (origin, file, pages) = (request.origin, request.file.id(), request.pages());
        if self.all_cached(&request) {
            let d =
                Counters { requests: 1, requested_pages: pages, skipped_resident_pages: pages, ..Counters::default() };
            self.shared.accounting.record(origin, Some(file), &d);
            return Ok(());
        }
        let request = match self.run_in_caller(request) {
            Some(request) => request,
            None => return Ok(()),
        };
        if self.shared.queue.push(request).is_err() {
            let d = Counters { dropped_requests: 1, dropped_pages: pages, ..Counters::default() };
            self.shared.accounting.record(origin, Some(file), &d);
            return Err(SubmitError::QueueFull { capacity: self.shared.queue.capacity() });
        }
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        match self.worker() {
            Some(worker) => {
                self.shared.parking.wake(worker);
                Ok(())
            }
            None => {
                // No worker will ever take it: count everything queued as
                // dropped (only this executor's submits fill the queue).
                while let Some(request) = self.shared.queue.pop() {
                    let d = Counters { dropped_requests: 1, dropped_pages: request.pages(), ..Counters::default() };
                    self.shared.accounting.record(request.origin, Some(request.file.id()), &d);
                    self.shared.processed.fetch_add(1, Ordering::SeqCst);
                }
                Err(SubmitError::NoWorker)
            }
        }
    }

    /// The worker thread, started on first use. `None` if it could not be
    /// started (logged once; never retried).
    fn worker(&self) -> Option<&Thread> {
        if let Some(thread) = self.worker_thread.get() {
            return Some(thread);
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(thread) = self.worker_thread.get() {
            return Some(thread);
        }
        let body = pending.take()?;
        match thread::Builder::new().name("predictio-exec".into()).spawn(body) {
            Ok(handle) => {
                let thread = handle.thread().clone();
                *self.worker.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
                Some(self.worker_thread.get_or_init(|| thread))
            }
            Err(err) => {
                tracing::error!(%err, "cannot start the executor's worker thread; nothing will be prefetched");
                None
            }
        }
    }

    /// Runs `request` through the engine in this thread if
    /// [`ExecutorConfig::issue_in_caller`] allows it and nothing would wait:
    /// nothing is queued ahead of it, the engine is free, and issuing it
    /// would not wait. Gives the request back otherwise (to be queued).
    fn run_in_caller(&self, request: Request) -> Option<Request> {
        if !self.caller_runs || !self.shared.queue.is_empty() || self.meta.gate().is_closed() {
            return Some(request);
        }
        let Ok(mut engine) = self.engine.try_lock() else { return Some(request) };
        if !engine.issues_without_waiting(request.pages(), request.window_pages) {
            return Some(request);
        }
        self.shared.submitted.fetch_add(1, Ordering::SeqCst);
        engine.execute(request);
        engine.expire_hits(Instant::now());
        self.shared.processed.fetch_add(1, Ordering::SeqCst);
        let unsettled = engine.has_unsettled();
        drop(engine);
        // The reads it left unsettled are the worker's to let go as they
        // settle (`Engine::release_idle`): a parked worker would hold them,
        // and their descriptors, until the next request.
        if unsettled && let Some(worker) = self.worker() {
            self.shared.parking.wake(worker);
        }
        None
    }

    /// Whether screening is on for `request` and finds every page of it in
    /// the page cache ([`ExecutorConfig::screen_resident_ranges`]). Any
    /// doubt (an error, a range not wholly cached) says no: the worker
    /// decides.
    fn all_cached(&self, request: &Request) -> bool {
        if request.ranges.is_empty() || request.ranges.len() > self.screen_resident_ranges {
            return false;
        }
        let fd = request.file.as_fd();
        request.ranges.iter().all(|range| {
            crate::sys::cachestat(fd, range.byte_offset(), range.byte_len())
                .is_ok_and(|stat| stat.nr_cache >= range.len())
        })
    }

    /// Whether the worker thread has been started (it starts with the first
    /// request queued).
    pub fn worker_started(&self) -> bool {
        self.worker_thread.get().is_some()
    }

    /// Requests that went to the engine so far (those [`Self::submit`]
    /// accepted and did not settle as all cached: queued for the worker or
    /// run by the submitting thread). One atomic load:
    /// an adapter can tell from it, cheaply, whether its policy's requests
    /// still cause any work.
    pub fn queued_requests(&self) -> u64 {
        self.shared.submitted.load(Ordering::Relaxed)
    }

    /// Waits until every accepted request was processed and no I/O is in
    /// flight, or `timeout` passes. True when idle.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut guard = self.shared.idle_lock.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.is_idle() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            if let Some(worker) = self.worker_thread.get() {
                worker.unpark();
            }
            let wait = (deadline - now).min(Duration::from_millis(5));
            guard = match self.shared.idle.wait_timeout(guard, wait) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }

    fn is_idle(&self) -> bool {
        self.shared.processed.load(Ordering::SeqCst) == self.shared.submitted.load(Ordering::SeqCst)
            && self.shared.inflight_ios.load(Ordering::SeqCst) == 0
            && self.meta.is_idle()
            && self.streamer.as_ref().is_none_or(|s| s.is_idle())
    }

    /// Queues the directories of a metadata request for the metadata
    /// threads; never blocks. Directories beyond the queue's room are
    /// dropped, counted ([`Counters::meta_dirs_dropped`]); an empty request
    /// is refused.
    pub fn submit_meta(&self, request: MetaRequest) -> Result<(), SubmitError> {
        if request.execs.is_empty() && request.dirs.is_empty() && request.lookups.is_empty() {
            return Err(SubmitError::Empty);
        }
        if self.shared.stop.load(Ordering::Relaxed) {
            return Err(SubmitError::ShuttingDown);
        }
        let wanted = request.execs.len() + request.dirs.len() + request.lookups.len();
        if self.meta.submit(request) == 0 {
            return Err(SubmitError::QueueFull { capacity: wanted });
        }
        Ok(())
    }

    /// Threads listing directories for metadata requests.
    pub fn meta_threads(&self) -> usize {
        self.meta.threads()
    }

    /// Submits `ranges` of `file` as imminent and waits until every page is
    /// resident and up to date (`mincore`), or `timeout` passes. Where
    /// progress stalls, what is still missing is submitted again (the kernel
    /// may skip readahead under allocation pressure); pages already resident
    /// are skipped by the executor as always. For tools, benchmarks and
    /// tests; policies never wait.
    pub fn fetch_and_wait(
        &self,
        file: &crate::file::FileRef,
        ranges: &[PageRange],
        origin: PolicyId,
        timeout: Duration,
    ) -> Result<u64, FetchError> {
        let deadline = Instant::now() + timeout;
        let size_pages = file.file().metadata()?.len().div_ceil(PAGE_SIZE);
        // Only pages that hold data: the executor skips holes, so a hole
        // would never become resident and the wait would submit it again
        // until the timeout.
        let mut data = Vec::new();
        for r in ranges {
            let clamped = PageRange::new(r.start.min(size_pages), r.end.min(size_pages));
            if clamped.is_empty() {
                continue;
            }
            match kernel::data_segments(file, clamped, &mut data) {
                Ok(_) => {}
                // A filesystem without SEEK_HOLE: the range is dense.
                Err(err) if err.raw_os_error() == Some(libc::EINVAL) => data.push(clamped),
                Err(err) => return Err(err.into()),
            }
        }
        let ranges = data.as_slice();
        let wanted: u64 = ranges.iter().map(PageRange::len).sum();
        let submit = || {
            let request = Request::new(file.clone(), ranges.to_vec(), origin);
            self.submit(request.with_urgency(crate::request::Urgency::Imminent))
        };
        submit()?;
        let mut best = 0;
        let mut stalled_since = Instant::now();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            self.wait_idle(left);
            let resident = crate::cache::wait_resident(file, ranges, left.min(Duration::from_millis(20)))?;
            if resident >= wanted {
                return Ok(resident);
            }
            if Instant::now() >= deadline {
                return Err(FetchError::Timeout { resident, wanted });
            }
            if resident > best {
                best = resident;
                stalled_since = Instant::now();
            } else if stalled_since.elapsed() >= Duration::from_millis(100) {
                tracing::info!(resident, wanted, "prefetch stalled; submitting the missing pages again");
                submit()?;
                stalled_since = Instant::now();
            }
        }
    }

    /// A snapshot of the accounting.
    pub fn stats(&self) -> Stats {
        self.shared.accounting.snapshot()
    }

    /// The accounting itself (for observers that feed hits and evictions).
    pub fn accounting(&self) -> &Arc<Accounting> {
        &self.shared.accounting
    }

    /// Feeds an observed access (hit accounting; needs `track_hits`).
    pub fn note_access(&self, file: FileId, pages: PageRange) {
        self.shared.accounting.note_access(file, pages);
    }

    /// Feeds an observed eviction (waste accounting; needs `track_hits`).
    pub fn note_eviction(&self, file: FileId, pages: PageRange) {
        self.shared.accounting.note_eviction(file, pages);
    }
}

impl RequestSink for Executor {
    fn submit(&self, request: Request) -> Result<(), SubmitError> {
        Executor::submit(self, request)
    }

    fn submit_meta(&self, request: MetaRequest) -> Result<(), SubmitError> {
        Executor::submit_meta(self, request)
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        let worker = self.worker.get_mut().unwrap_or_else(|e| e.into_inner()).take();
        stop_threads(&self.shared.stop, worker, "executor worker");
    }
}

/// The park/wake handshake between the producers of a queue and the one
/// worker thread that drains it (the executor's worker, the stream thread).
/// A producer that pushed wakes the worker only when it is parked or about
/// to park; the worker says it is about to park before looking at the queue
/// one last time, so no push is missed, and it parks without a timeout
/// unless it has a deadline of its own: an idle worker never wakes.
#[derive(Debug, Default)]
pub(crate) struct Parking {
    sleeping: AtomicBool,
}

impl Parking {
    /// After a push: wakes `worker` if it is parked or about to park.
    pub(crate) fn wake(&self, worker: &Thread) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            worker.unpark();
        }
    }

    /// In the worker, with nothing left to do: parks until woken, or for
    /// `timeout` at most (a deadline of the worker's), unless `ready` (work
    /// queued, or shutdown asked) says otherwise once the worker has said it
    /// is parking.
    pub(crate) fn park_unless(&self, timeout: Option<Duration>, ready: impl Fn() -> bool) {
        self.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !ready() {
            match timeout {
                Some(timeout) => thread::park_timeout(timeout),
                None => thread::park(),
            }
        }
        self.sleeping.store(false, Ordering::SeqCst);
    }
}

/// Stops parked worker threads: raises `stop`, wakes each thread and joins
/// it, logging (not propagating) a thread that panicked. The one shutdown
/// of the executor's worker, its stream and metadata threads and the
/// pipeline's dispatcher.
pub(crate) fn stop_threads(stop: &AtomicBool, threads: impl IntoIterator<Item = JoinHandle<()>>, name: &str) {
    stop.store(true, Ordering::SeqCst);
    for handle in threads {
        handle.thread().unpark();
        if handle.join().is_err() {
            tracing::error!("{name} thread panicked");
        }
    }
}

/// Refuses nonsense: no pages, inverted or impossible ranges, too many
/// ranges.
pub fn validate(request: &Request, max_ranges: usize) -> Result<(), SubmitError> {
    if request.ranges.len() > max_ranges {
        return Err(SubmitError::TooManyRanges { count: request.ranges.len(), max: max_ranges });
    }
    let mut any = false;
    for r in &request.ranges {
        if r.end < r.start {
            return Err(SubmitError::Inverted { start: r.start, end: r.end });
        }
        if r.end > MAX_PAGE {
            return Err(SubmitError::OutOfBounds { start: r.start, end: r.end });
        }
        any |= !r.is_empty();
    }
    if any { Ok(()) } else { Err(SubmitError::Empty) }
}

fn worker_loop(shared: Arc<Shared>, engine: Arc<Mutex<Engine>>, gate: &meta::ExecGate) {
    loop {
        // Held while working; a submitting thread that finds it taken
        // queues its request instead (`Executor::run_in_caller`).
        let mut engine = engine.lock().unwrap_or_else(|e| e.into_inner());
        let mut did_work = false;
        while let Some(request) = shared.queue.pop() {
            // Execs being resolved go first ([`meta::ExecGate`]); the wait
            // is bounded.
            gate.wait();
            engine.execute(request);
            shared.processed.fetch_add(1, Ordering::SeqCst);
            shared.inflight_ios.store(engine.inflight_ios() as u64, Ordering::SeqCst);
            engine.poll();
            did_work = true;
        }
        if engine.inflight_ios() > 0 {
            if shared.queue.is_empty() {
                engine.wait_completions(1);
            } else {
                engine.poll();
            }
            shared.inflight_ios.store(engine.inflight_ios() as u64, Ordering::SeqCst);
            continue;
        }
        shared.inflight_ios.store(0, Ordering::SeqCst);
        engine.expire_hits(Instant::now());
        if did_work {
            let _guard = shared.idle_lock.lock().unwrap_or_else(|e| e.into_inner());
            shared.idle.notify_all();
        }
        if shared.stop.load(Ordering::SeqCst) {
            if shared.queue.is_empty() {
                engine.drain();
                break;
            }
            continue;
        }
        let settling = engine.release_idle();
        drop(engine);
        // The deadlines while idle: reads still unsettled are let go (with
        // their descriptors) as they settle, looked at every few ms until
        // none is left; prefetched pages not hit yet expire into waste
        // (`Engine::expire_hits`, swept once a second), so the worker looks
        // again in a second while some are outstanding. With neither it
        // sleeps until woken.
        let expiring = (shared.accounting.outstanding_pages() > 0).then_some(Duration::from_secs(1));
        let deadline = settling.into_iter().chain(expiring).min();
        shared.parking.park_unless(deadline, || !shared.queue.is_empty() || shared.stop.load(Ordering::SeqCst));
    }
}

#[cfg(test)]
mod tests;
