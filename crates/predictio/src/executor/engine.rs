//! The executor's synchronous core: one request in, bounded I/O out.
//!
//! [`Engine::execute`] applies the rules in order — bound, memory pressure,
//! clamp to EOF, skip holes, skip resident pages, skip pages in flight,
//! coalesce, cut to the memory headroom, issue — and records what each rule
//! did. It is driven by the executor's worker thread; benchmarks and tests
//! drive it directly with a fake [`PageCache`] or a counting [`Backend`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::backend::{Backend, Issued};
use super::inflight::InFlight;
use super::kernel::PageCache;
use super::plan::{Coalescer, absent_runs, clamp_to_eof};
use super::stream::Streamer;
use crate::accounting::{Accounting, Counters};
use crate::file::{FileId, FileRef};
use crate::page::{PAGE_SIZE, PageRange};
use crate::policy::PolicyId;
use crate::pressure::{Admission, PressureGuard, clamp_runs};
use crate::request::{Request, Urgency};
use crate::sys::uring::Completion;

/// The engine's bounds.
#[derive(Clone, Debug, PartialEq)]
pub struct Limits {
    /// Pages one request may ask for; the rest is dropped and counted.
    pub max_pages_per_request: u64,
    /// Largest single I/O, in pages.
    pub max_io_pages: u64,
    /// Pages in flight at once (asynchronous backends); over it the engine
    /// waits for completions before issuing more.
    pub max_inflight_pages: u64,
    /// Whether issued pages are remembered for hit and waste accounting.
    pub track_hits: bool,
    /// How long a file's size and hole map are trusted.
    pub size_ttl: Duration,
    /// Pages issued through a backend that reports no completion (`fadvise`,
    /// `readahead`) that may still be in flight; over it the engine waits
    /// until enough such I/Os settle (the last page of each of the
    /// [`Limits::settle_scan`] oldest probed without waiting, see
    /// [`PageCache::read_settled`]) before issuing more. The
    /// kernel queues such reads as deep as the block layer lets it (hundreds
    /// of requests, tens of MiB), and a program's own read — a directory
    /// block on its exec path, a page no profile predicted — waits behind
    /// all of it; a window of a few MiB keeps the device busy and that wait
    /// short. 0: unbounded.
    pub max_unsettled_pages: u64,
    /// How long one unsettled I/O is waited for at most before it leaves
    /// the window regardless (a read that never settles never stalls the
    /// executor).
    pub settle_timeout: Duration,
    /// Pages of streamed requests waiting for the stream thread; more is
    /// dropped and counted.
    pub max_stream_queued_pages: u64,
    /// Largest run handed to the stream thread at once, in pages.
    pub max_stream_run_pages: u64,
    /// Unsettled reads probed per round, oldest first. The block layer
    /// completes reads out of order (the scheduler sorts them by sector), so
    /// releasing only the oldest would leave the window full of settled
    /// reads; probing more finds room sooner on a device that reorders
    /// deeply, at more probes. At least 1.
    pub settle_scan: usize,
    /// A paced read issued less than this long ago that is not readable yet
    /// is taken to be in flight ([`PageCache::read_settled`]'s `recent`),
    /// saving the probe that asks whether its page was ever cached; an older
    /// one that was never cached (dropped under memory pressure) is let go.
    /// About the device's slowest ordinary read.
    pub settle_recent: Duration,
    /// The sleep between rounds of probes that found nothing settled:
    /// shorter lets go of a settled read sooner, at more wake-ups. A
    /// fraction of the device's read latency.
    pub pace_sleep: Duration,
    /// A read found in flight is probed again after a quarter of its age,
    /// at least this long after (which bounds the probes' CPU)...
    pub min_probe_interval: Duration,
    /// ...and at most this long after (which bounds how late a settled read
    /// leaves the window). About the device's read latency; not less than
    /// [`Limits::min_probe_interval`].
    pub max_probe_interval: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_pages_per_request: 1 << 18,
            max_io_pages: 64,
            max_inflight_pages: 1 << 14,
            track_hits: false,
            size_ttl: Duration::from_millis(50),
            max_unsettled_pages: 0,
            settle_timeout: Duration::from_millis(200),
            max_stream_queued_pages: 1 << 18,
            max_stream_run_pages: 1 << 12,
            settle_scan: 64,
            settle_recent: Duration::from_millis(20),
            pace_sleep: Duration::from_micros(200),
            min_probe_interval: Duration::from_micros(50),
            max_probe_interval: Duration::from_millis(2),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct FileState {
    size: u64,
    holes: bool,
    checked: Instant,
}

/// How often an idle worker looks at the reads still unsettled
/// ([`Engine::release_idle`]): they leave by [`Limits::settle_timeout`]
/// at the latest, so a burst costs at most a few dozen such wake-ups.
const IDLE_SETTLE_PROBE: Duration = Duration::from_millis(5);

/// A read issued through a backend that reports no completion, until it
/// settles.
#[derive(Debug)]
struct Unsettled {
    file: FileRef,
    /// The read's last page: it settles when that page is readable.
    last: u64,
    pages: u64,
    issued: Instant,
    /// Not probed again before this ([`probe_interval`]).
    next_probe: Instant,
}

#[derive(Debug)]
struct PendingIo {
    file: FileRef,
    range: PageRange,
    origin: PolicyId,
}

/// Neighbouring segments closer than this share one residency probe: a
/// `cachestat` call costs about as much as walking this many resident pages.
pub const GROUP_GAP_PAGES: u64 = 128;

/// How long after a probe that found it in flight a read of age `age` is
/// probed again: a quarter of its age, within
/// [`Limits::min_probe_interval`] and [`Limits::max_probe_interval`]. A
/// read is then let go at most a quarter of its age late, and each read let
/// go does not make the next issue probe all the oldest again.
pub(crate) fn probe_interval(age: Duration, limits: &Limits) -> Duration {
    (age / 4).clamp(limits.min_probe_interval, limits.max_probe_interval.max(limits.min_probe_interval))
}

/// Files whose size is cached before the cache is cleared.
const MAX_FILE_STATES: usize = 4096;

/// The executor's core.
pub struct Engine {
    limits: Limits,
    cache: Box<dyn PageCache>,
    backend: Box<dyn Backend>,
    pressure: PressureGuard,
    accounting: Arc<Accounting>,
    streamer: Option<Arc<Streamer>>,
    inflight: InFlight,
    pending: HashMap<u64, PendingIo>,
    /// I/Os issued through a backend without completions, oldest first.
    unsettled: VecDeque<Unsettled>,
    unsettled_pages: u64,
    files: HashMap<FileId, FileState>,
    next_token: u64,
    // Scratch space reused across requests.
    segments: Vec<PageRange>,
    absent: Vec<PageRange>,
    not_inflight: Vec<PageRange>,
    chunks: Vec<PageRange>,
    residency: Vec<u8>,
    completions: Vec<Completion>,
    classes: Vec<Residency>,
    order: Vec<(u64, u32)>,
    stack: Vec<(usize, usize)>,
    /// How long a prefetched page may stay untouched before it counts as
    /// waste, and when that was last looked at (with hit tracking).
    hit_timeout: Duration,
    last_sweep: Instant,
}

/// What `cachestat` says of a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Residency {
    Resident,
    Absent,
    Partial,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("limits", &self.limits)
            .field("backend", &self.backend.kind())
            .field("inflight_pages", &self.inflight.pages())
            .finish()
    }
}

impl Engine {
    /// An engine over `cache` and `backend`, recording into `accounting`.
    pub fn new(
        limits: Limits,
        cache: Box<dyn PageCache>,
        backend: Box<dyn Backend>,
        pressure: PressureGuard,
        accounting: Arc<Accounting>,
    ) -> Self {
        Self {
            limits,
            cache,
            backend,
            pressure,
            accounting,
            streamer: None,
            inflight: InFlight::default(),
            pending: HashMap::new(),
            unsettled: VecDeque::new(),
            unsettled_pages: 0,
            files: HashMap::new(),
            next_token: 1,
            segments: Vec::new(),
            absent: Vec::new(),
            not_inflight: Vec::new(),
            chunks: Vec::new(),
            residency: Vec::new(),
            completions: Vec::new(),
            classes: Vec::new(),
            order: Vec::new(),
            stack: Vec::new(),
            hit_timeout: Duration::from_secs(30),
            last_sweep: Instant::now(),
        }
    }

    /// Counts prefetched pages left untouched for `timeout` as waste (with
    /// [`Limits::track_hits`]; 30 s unless set).
    pub fn with_hit_timeout(mut self, timeout: Duration) -> Self {
        self.hit_timeout = timeout;
        self
    }

    /// With hit tracking, at most once a second: counts the prefetched
    /// pages untouched for the hit timeout as waste.
    pub fn expire_hits(&mut self, now: Instant) {
        if self.limits.track_hits && now.duration_since(self.last_sweep) >= Duration::from_secs(1) {
            self.accounting.expire(now, self.hit_timeout);
            self.last_sweep = now;
        }
    }

    /// Streams requests marked [`Request::sequential`] through `streamer`
    /// (without one they go through the backend like any other).
    pub fn with_streamer(mut self, streamer: Arc<Streamer>) -> Self {
        self.streamer = Some(streamer);
        self
    }

    /// The backend in use.
    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Pages in flight now.
    pub fn inflight_pages(&self) -> u64 {
        self.inflight.pages()
    }

    /// I/Os in flight now.
    pub fn inflight_ios(&self) -> u32 {
        self.backend.in_flight()
    }

    fn file_state(&mut self, file: &FileRef, now: Instant) -> std::io::Result<FileState> {
        if let Some(state) = self.files.get(&file.id())
            && now.duration_since(state.checked) < self.limits.size_ttl
        {
            return Ok(*state);
        }
        let size = self.cache.size(file)?;
        let holes = self.cache.has_holes(file, size)?;
        if self.files.len() >= MAX_FILE_STATES {
            self.files.clear();
        }
        let state = FileState { size, holes, checked: now };
        self.files.insert(file.id(), state);
        Ok(state)
    }

    /// Runs one request through every rule and issues what is left. Returns
    /// the request's counters (also recorded in the accounting).
    pub fn execute(&mut self, request: Request) -> Counters {
        let now = Instant::now();
        let mut d = Counters { requests: 1, ..Counters::default() };
        let file = request.file;
        let id = file.id();
        let asked = request.ranges.iter().map(PageRange::len).sum::<u64>();
        d.requested_pages = asked;
        let window = self.window(request.window_pages);

        // Pages this request may issue (memory headroom; imminent requests
        // are not bounded by it).
        let mut allowance = u64::MAX;
        if request.urgency == Urgency::Speculative {
            match self.pressure.admit(now, request.target_pid) {
                Admission::Shed(_) => {
                    d.dropped_requests = 1;
                    d.dropped_pages = asked;
                    d.pressure_dropped_pages = asked;
                    self.accounting.record(request.origin, Some(id), &d);
                    return d;
                }
                Admission::Issue { max_pages } => allowance = max_pages,
            }
        }

        let state = match self.file_state(&file, now) {
            Ok(state) => state,
            Err(err) => {
                tracing::debug!(file = %id, %err, "cannot stat file; request dropped");
                d.errors = 1;
                d.dropped_pages = asked;
                self.accounting.record(request.origin, Some(id), &d);
                return d;
            }
        };
        let size_pages = state.size.div_ceil(PAGE_SIZE);

        // 1. Bound, clamp to EOF and cut out holes, keeping the order of need.
        let mut budget = self.limits.max_pages_per_request;
        self.segments.clear();
        for &range in &request.ranges {
            let kept = PageRange::new(range.start, range.start.saturating_add(range.len().min(budget)));
            d.dropped_pages += range.len() - kept.len();
            budget -= kept.len();
            let (kept, beyond) = clamp_to_eof(kept, size_pages);
            d.beyond_eof_pages += beyond;
            if kept.is_empty() {
                continue;
            }
            if state.holes {
                match self.cache.data_segments(&file, kept, &mut self.segments) {
                    Ok(holes) => d.hole_pages += holes,
                    Err(_) => {
                        d.errors += 1;
                        self.segments.push(kept);
                    }
                }
            } else {
                self.segments.push(kept);
            }
        }

        // 2. Residency of every segment, with as few syscalls as the cache's
        //    state allows (see `classify`).
        let segments = std::mem::take(&mut self.segments);
        self.classify(&file, &segments, &mut d);

        // 3. Absent pages, minus those in flight, coalesced in order of need
        //    (streamed runs in longer pieces: the stream thread reads them
        //    front to back).
        let streamed = request.sequential && self.streamer.is_some();
        let max_io = if streamed { self.limits.max_stream_run_pages.max(1) } else { self.limits.max_io_pages };
        let mut coalescer = Coalescer::new(max_io);
        self.chunks.clear();
        for (i, &segment) in segments.iter().enumerate() {
            self.absent.clear();
            match self.classes[i] {
                Residency::Resident => {
                    d.skipped_resident_pages += segment.len();
                    continue;
                }
                Residency::Absent => self.absent.push(segment),
                Residency::Partial => match self.cache.residency(&file, state.size, segment, &mut self.residency) {
                    Ok(()) => d.skipped_resident_pages += absent_runs(segment, &self.residency, &mut self.absent),
                    Err(_) => {
                        d.errors += 1;
                        self.absent.push(segment);
                    }
                },
            }
            for &run in &self.absent {
                self.not_inflight.clear();
                d.skipped_inflight_pages += self.inflight.subtract(id, run, &mut self.not_inflight);
                for &part in &self.not_inflight {
                    coalescer.push(part, &mut self.chunks);
                }
            }
        }
        self.segments = segments;
        coalescer.finish(&mut self.chunks);
        let clamped = clamp_runs(&mut self.chunks, allowance);
        d.dropped_pages += clamped;
        d.pressure_dropped_pages += clamped;
        d.pressure_clamped_pages += clamped;

        let chunks = std::mem::take(&mut self.chunks);
        if streamed && let Some(streamer) = &self.streamer {
            for &chunk in &chunks {
                self.remember_issued(id, chunk, request.origin, now);
                if streamer.push(&file, chunk, request.origin) {
                    self.count_issued(&mut d, chunk);
                    d.completed_pages += chunk.len();
                } else {
                    self.forget_issued(id, chunk);
                    d.dropped_pages += chunk.len();
                }
            }
            self.chunks = chunks;
            self.pressure.note_issued(request.target_pid, d.issued_pages);
            self.accounting.record(request.origin, Some(id), &d);
            return d;
        }
        for &chunk in &chunks {
            self.make_room(chunk.len());
            d.paced_waits += self.pace(chunk.len(), window);
            let token = self.next_token;
            self.next_token = self.next_token.wrapping_add(1);
            // Remembered before the read is issued: the program may touch
            // the pages while the call is still submitting them (a hit).
            self.remember_issued(id, chunk, request.origin, now);
            match self.backend.issue(&file, chunk, token) {
                Ok(issued) => {
                    self.count_issued(&mut d, chunk);
                    match issued {
                        Issued::Done => {
                            d.completed_pages += chunk.len();
                            if self.limits.max_unsettled_pages > 0 {
                                let issued = Instant::now();
                                self.unsettled.push_back(Unsettled {
                                    file: file.clone(),
                                    last: chunk.end - 1,
                                    pages: chunk.len(),
                                    issued,
                                    next_probe: issued,
                                });
                                self.unsettled_pages += chunk.len();
                            }
                        }
                        Issued::Pending => {
                            self.inflight.insert(id, chunk);
                            self.pending
                                .insert(token, PendingIo { file: file.clone(), range: chunk, origin: request.origin });
                        }
                    }
                }
                Err(err) => {
                    tracing::debug!(file = %id, %chunk, %err, "prefetch I/O failed");
                    self.forget_issued(id, chunk);
                    d.errors += 1;
                }
            }
        }
        self.chunks = chunks;
        if let Err(err) = self.backend.flush() {
            tracing::debug!(%err, "backend flush failed");
            d.errors += 1;
        }
        self.pressure.note_issued(request.target_pid, d.issued_pages);
        self.accounting.record(request.origin, Some(id), &d);
        d
    }

    /// Classifies every segment as resident, absent or partly resident.
    ///
    /// Segments are taken in file order and grouped while the gap between
    /// neighbours is small (a `cachestat` call costs about as much as walking
    /// [`GROUP_GAP_PAGES`] resident pages). One `cachestat` over a group's span
    /// settles the whole group when the span is entirely absent or entirely
    /// resident, the common cases of a cold or a warm file; only mixed groups
    /// are split in two and asked again. A request for thousands of scattered
    /// pages of a cold file costs one syscall, not thousands.
    fn classify(&mut self, file: &FileRef, segments: &[PageRange], d: &mut Counters) {
        self.classes.clear();
        self.classes.resize(segments.len(), Residency::Partial);
        self.order.clear();
        self.order.extend(segments.iter().enumerate().map(|(i, s)| (s.start, i as u32)));
        if !segments.windows(2).all(|w| w[0].start <= w[1].start) {
            self.order.sort_unstable();
        }
        let mut stack = std::mem::take(&mut self.stack);
        stack.clear();
        let mut group_start = 0;
        let mut group_end: u64 = 0;
        for (k, &(start, i)) in self.order.iter().enumerate() {
            if k > group_start && start > group_end.saturating_add(GROUP_GAP_PAGES) {
                stack.push((group_start, k));
                group_start = k;
            }
            group_end =
                if k == group_start { segments[i as usize].end } else { group_end.max(segments[i as usize].end) };
        }
        if !segments.is_empty() {
            stack.push((group_start, segments.len()));
        }
        while let Some((lo, hi)) = stack.pop() {
            let idx = &self.order[lo..hi];
            let start = idx[0].0;
            let end = idx.iter().map(|&(_, i)| segments[i as usize].end).max().unwrap_or(start);
            let span = PageRange::new(start, end);
            let class = match self.cache.resident_pages(file, span) {
                Ok(0) => Residency::Absent,
                Ok(n) if n >= span.len() => Residency::Resident,
                Ok(_) => Residency::Partial,
                Err(_) => {
                    d.errors += 1;
                    Residency::Absent
                }
            };
            if class != Residency::Partial || hi - lo == 1 {
                for &(_, i) in idx {
                    self.classes[i as usize] = class;
                }
            } else {
                let mid = lo + (hi - lo) / 2;
                stack.push((mid, hi));
                stack.push((lo, mid));
            }
        }
        self.stack = stack;
    }

    /// Counts `chunk` as one issued I/O.
    fn count_issued(&self, d: &mut Counters, chunk: PageRange) {
        d.issued_pages += chunk.len();
        d.issued_bytes += chunk.byte_len();
        d.issued_ios += 1;
    }

    /// With hit tracking, remembers `chunk` as prefetched, just before it is
    /// issued: an access while the call submits it or while the read is in
    /// flight counts as a (late) hit. (Remembered after the call, pages the
    /// program touched during a call of a few hundred µs were counted as
    /// never used.)
    fn remember_issued(&self, id: FileId, chunk: PageRange, origin: PolicyId, now: Instant) {
        if self.limits.track_hits {
            self.accounting.note_issued(id, chunk, origin, now);
        }
    }

    /// Takes back [`Self::remember_issued`] for a chunk that was not issued
    /// after all: neither a hit nor waste.
    fn forget_issued(&self, id: FileId, chunk: PageRange) {
        if self.limits.track_hits {
            self.accounting.forget_issued(id, chunk);
        }
    }

    /// Whether a request of `pages` pages would be issued without this
    /// thread waiting for anything: no I/O of a completing backend is in
    /// flight (its completions are the worker's to collect), and pacing
    /// ([`Limits::max_unsettled_pages`]) has room once the reads already
    /// settled are let go (looked up, never waited for). What
    /// [`super::Executor::submit`] asks before running a request in the
    /// caller's thread.
    pub fn issues_without_waiting(&mut self, pages: u64, window_pages: u64) -> bool {
        if self.backend.in_flight() > 0 {
            return false;
        }
        let limit = self.window(window_pages);
        if limit == 0 {
            return true;
        }
        while self.unsettled_pages + pages > limit && self.release_settled() {}
        self.unsettled_pages + pages <= limit
    }

    /// The pacing window for a request asking for `window_pages` (see
    /// [`Request::window_pages`]): the executor's, or the request's own
    /// when it names one; unbounded only when the executor's is.
    fn window(&self, window_pages: u64) -> u64 {
        match (self.limits.max_unsettled_pages, window_pages) {
            (0, _) => 0,
            (limit, 0) => limit,
            (_, asked) => asked,
        }
    }

    /// Lets go of unsettled reads that have settled (or are past
    /// [`Limits::settle_timeout`]): the oldest if it has, else any of the
    /// next [`Limits::settle_scan`] that have. A read found in flight is not
    /// probed again for a while ([`probe_interval`]). False when none has (or
    /// there is none). Looks, never waits.
    fn release_settled(&mut self) -> bool {
        let mut released = false;
        let mut i = 0;
        let now = Instant::now();
        while i < self.unsettled.len().min(self.limits.settle_scan.max(1)) {
            let read = &mut self.unsettled[i];
            let age = now.saturating_duration_since(read.issued);
            if age < self.limits.settle_timeout {
                if now < read.next_probe {
                    i += 1;
                    continue;
                }
                if !self.cache.read_settled(&read.file, read.last, age < self.limits.settle_recent) {
                    read.next_probe = now + probe_interval(age, &self.limits);
                    i += 1;
                    continue;
                }
            }
            self.unsettled_pages -= read.pages;
            self.unsettled.remove(i);
            released = true;
            if i == 0 {
                // The oldest: the common case, one probe.
                return true;
            }
        }
        released
    }

    /// Waits until an I/O of `pages` more pages fits a window of `limit`
    /// pages ([`Self::window`]; 0: unbounded): settled I/Os leave it (see
    /// [`Self::release_settled`]); one that has not settled within
    /// [`Limits::settle_timeout`] leaves it anyway. Returns the rounds of
    /// probes that found nothing settled (each followed by a short sleep).
    fn pace(&mut self, pages: u64, limit: u64) -> u64 {
        let mut waits = 0;
        while limit > 0 && self.unsettled_pages + pages > limit && !self.unsettled.is_empty() {
            if !self.release_settled() {
                waits += 1;
                std::thread::sleep(self.limits.pace_sleep);
            }
        }
        waits
    }

    /// Waits for completions until the backend can take another I/O of
    /// `pages` pages within the depth and in-flight bounds.
    fn make_room(&mut self, pages: u64) {
        while self.backend.in_flight() > 0
            && (self.backend.in_flight() >= self.backend.depth()
                || self.inflight.pages() + pages > self.limits.max_inflight_pages)
        {
            if !self.wait_completions(1) {
                break;
            }
        }
    }

    /// Collects finished I/Os without waiting.
    pub fn poll(&mut self) {
        let mut done = std::mem::take(&mut self.completions);
        self.backend.reap(&mut done);
        self.finish(&mut done);
        self.completions = done;
    }

    /// Waits for at least `min` I/Os to finish. False when the backend
    /// failed to wait (it is then treated as idle).
    pub fn wait_completions(&mut self, min: u32) -> bool {
        let mut done = std::mem::take(&mut self.completions);
        let ok = match self.backend.wait(min, &mut done) {
            Ok(()) => true,
            Err(err) => {
                tracing::warn!(%err, "waiting for prefetch I/O failed");
                false
            }
        };
        self.finish(&mut done);
        self.completions = done;
        ok
    }

    /// Whether reads issued without a completion are still watched until
    /// they settle (each holding its file's descriptor).
    pub fn has_unsettled(&self) -> bool {
        !self.unsettled.is_empty()
    }

    /// With nothing queued: lets go of the unsettled reads that have
    /// settled (or are past [`Limits::settle_timeout`]), and says how soon
    /// to look again while some have not. Each holds its file's descriptor:
    /// without this the last reads of a burst kept theirs until the next
    /// request came, however long that took.
    pub fn release_idle(&mut self) -> Option<Duration> {
        while self.release_settled() {}
        (!self.unsettled.is_empty()).then_some(IDLE_SETTLE_PROBE)
    }

    /// Waits for every I/O in flight.
    pub fn drain(&mut self) {
        while self.backend.in_flight() > 0 {
            let n = self.backend.in_flight();
            if !self.wait_completions(n) {
                break;
            }
        }
    }

    fn finish(&mut self, done: &mut Vec<Completion>) {
        for completion in done.drain(..) {
            let Some(io) = self.pending.remove(&completion.user_data) else { continue };
            self.inflight.remove(io.file.id(), io.range);
            let mut d = Counters::default();
            match completion.result {
                Ok(_) => d.completed_pages = io.range.len(),
                Err(errno) => {
                    tracing::debug!(file = %io.file.id(), range = %io.range, errno, "prefetch read failed");
                    d.errors = 1;
                }
            }
            self.accounting.record(io.origin, Some(io.file.id()), &d);
        }
    }
}
