//! `stream`: finds readers that walk a file sequentially or at a constant
//! stride and keeps a prefetch window ahead of each (seeds 002 and 004).
//!
//! It owns a small table of streams, one per reader and file: a process seen
//! by kernel observation (`PageAccess` of kind `Read`, keyed by pid) or the
//! programs that send `StreamRead` hints (keyed together, since hints carry
//! no pid). The table has [`StreamConfig::max_streams`] entries; a new stream
//! replaces the least recently used one, and a process's streams go when it
//! exits. Nothing else grows.
//!
//! How a stream is followed:
//!
//! - **Confirmation.** Each read is compared with the previous one of the
//!   same stream: it *continues* it sequentially (starts inside or right at
//!   the end of the previous read and goes further), continues a constant
//!   *stride* (starts the same number of pages after the previous start as
//!   the previous read did after its own predecessor), repeats pages already
//!   read (ignored), or *breaks* the pattern. Only after
//!   [`StreamConfig::confirm_after`] consecutive continuations of one pattern
//!   does the stream get its first request, so random readers get none.
//! - **Proof by consumption.** A sequential run must also have read
//!   [`StreamConfig::min_run_pages`] pages before its first window opens:
//!   however many reads it took, a run shorter than that is not a stream
//!   yet: a scan that reads a few neighbouring pages at one random place
//!   after another gets nothing. With `min_run_pages` at least
//!   [`StreamConfig::initial_window_pages`], a first window of the initial
//!   size is never more than the run has already read.
//! - **Adaptive confirmation** (seed 002's lesson: a fixed trigger either
//!   waits too long or fires on noise). A confirmed stream that jumps away
//!   while its first window is still unread — a short run that only looked
//!   like a stream — doubles the continuations this reader needs before its
//!   next confirmation (up to [`MAX_CONFIRM`]); a stream that reads past its
//!   first window brings it back to [`StreamConfig::confirm_after`]. A
//!   reader of short random runs so pays for one wasted window, not one per
//!   run; a real stream is unaffected.
//! - **Window.** A confirmed stream has a window of pages to keep fetched
//!   ahead of the reader: [`StreamConfig::initial_window_pages`] at first,
//!   never less than twice the reader's last read (so one read never
//!   swallows it), at most [`StreamConfig::max_window_pages`]. When the pages
//!   fetched but not yet read fall below half the window, the window is
//!   topped up; every top-up after the first means the reader consumed what
//!   was fetched, so the window doubles first.
//! - **High-water mark.** Each stream remembers the end of what it has
//!   requested, and a top-up asks only for pages beyond it: a stream never
//!   asks twice for the same pages while it keeps going.
//! - **Waste.** Pages requested and then passed over (the reader skips
//!   forward inside the window) or left behind (the reader jumps elsewhere)
//!   are counted as wasted and halve the window. A stream that wastes at the
//!   smallest window, or jumps, loses its confirmation and must prove itself
//!   again before it gets another request.
//!
//! Strided streams fetch the next records (the reader's read length at each
//! stride) instead of a contiguous range, a bounded number per request.
//! Backward streams are not followed.
//!
//! Requests are [`Urgency::Speculative`] and go through
//! [`PolicyContext::request`], so only files the runtime holds a descriptor
//! for can be requested. `StreamRead` hints come with one. Kernel observation
//! carries a [`FileId`] only: the daemon and `predictio run` resolve such a
//! file through the process that touched it ([`crate::resolve`]: its
//! `/proc/PID/fd` and `map_files`, bounded and rate-limited) before the event
//! is dispatched. When that fails (the process already closed the file, the
//! negative cache or the scan rate limit says no) or the pipeline runs
//! without a resolver, the policy still follows the stream but emits
//! nothing: each top-up it would have made is counted in
//! [`StreamStats::no_descriptor`], and the next read tries again, so a
//! descriptor held later is used from then on.
//!
//! The policy never issues I/O, never reads file data, never blocks and
//! never looks at the clock: the same events give the same requests.

use std::collections::HashMap;

use crate::event::{AccessKind, Event, EventKind, EventKinds};
use crate::executor::MAX_PAGE;
use crate::file::FileId;
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// The most continuations adaptive confirmation asks of a reader whose
/// earlier streams kept dying within their first window.
pub const MAX_CONFIRM: u32 = 64;

/// The `stream` policy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamConfig {
    /// Streams followed at once; a new one replaces the least recently used.
    pub max_streams: usize,
    /// Consecutive continuations of one pattern (sequential, or one stride)
    /// before a stream gets its first request.
    pub confirm_after: u32,
    /// Pages a sequential run must have read (from its first read's start
    /// to its last read's end) before it is confirmed, whatever
    /// `confirm_after` says; 0 leaves confirmation to `confirm_after` alone.
    /// Strided runs are not held to it (equal strides are rare by chance),
    /// but always need two continuations, whatever `confirm_after` says.
    pub min_run_pages: u64,
    /// The window a newly confirmed stream starts with, in pages.
    pub initial_window_pages: u64,
    /// The largest window, in pages.
    pub max_window_pages: u64,
    /// The largest stride followed, in pages (0 follows sequential streams
    /// only).
    pub max_stride_pages: u64,
    /// Records one request of a strided stream may ask for.
    pub max_records_per_request: u64,
}

impl Default for StreamConfig {
    /// 64 streams, three continuations (no run length asked), a window from
    /// 256 KiB to 32 MiB, strides up to 64 MiB, 256 records per request.
    fn default() -> Self {
        Self {
            max_streams: 64,
            confirm_after: 3,
            min_run_pages: 0,
            initial_window_pages: 64,
            max_window_pages: 8192,
            max_stride_pages: 16384,
            max_records_per_request: 256,
        }
    }
}

/// Why a [`StreamConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StreamConfigError {
    /// `max_streams` is 0.
    #[error("stream: max_streams must be at least 1")]
    NoStreams,
    /// `confirm_after` is 0, which would prefetch after any single read.
    #[error("stream: confirm_after must be at least 1")]
    NoConfirmation,
    /// `initial_window_pages` is 0.
    #[error("stream: initial_window_pages must be at least 1")]
    EmptyWindow,
    /// `max_window_pages` is below `initial_window_pages`.
    #[error("stream: max_window_pages ({max}) is below initial_window_pages ({initial})")]
    WindowCap {
        /// The initial window.
        initial: u64,
        /// The cap.
        max: u64,
    },
    /// `max_records_per_request` is 0.
    #[error("stream: max_records_per_request must be at least 1")]
    NoRecords,
    /// `max_records_per_request` is above [`MAX_RECORDS_PER_REQUEST`].
    #[error("stream: max_records_per_request ({0}) is above {MAX_RECORDS_PER_REQUEST}")]
    TooManyRecords(u64),
}

/// The most records a strided request may carry: the executor's default
/// bound on ranges per request.
pub const MAX_RECORDS_PER_REQUEST: u64 = 1 << 16;

impl StreamConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), StreamConfigError> {
        if self.max_streams == 0 {
            return Err(StreamConfigError::NoStreams);
        }
        if self.confirm_after == 0 {
            return Err(StreamConfigError::NoConfirmation);
        }
        if self.initial_window_pages == 0 {
            return Err(StreamConfigError::EmptyWindow);
        }
        if self.max_window_pages < self.initial_window_pages {
            return Err(StreamConfigError::WindowCap {
                initial: self.initial_window_pages,
                max: self.max_window_pages,
            });
        }
        if self.max_records_per_request == 0 {
            return Err(StreamConfigError::NoRecords);
        }
        if self.max_records_per_request > MAX_RECORDS_PER_REQUEST {
            return Err(StreamConfigError::TooManyRecords(self.max_records_per_request));
        }
        Ok(())
    }
}

/// Counters of the `stream` policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StreamStats {
    /// Reads considered (observed buffered reads and `StreamRead` hints).
    pub reads: u64,
    /// Events ignored: page faults and mapped pages (mmap readers have the
    /// kernel's fault-around), empty reads.
    pub ignored: u64,
    /// Times a stream was confirmed.
    pub streams_detected: u64,
    /// Times a confirmed stream lost its confirmation (it jumped, or wasted
    /// pages at the smallest window).
    pub streams_stopped: u64,
    /// Streams replaced because the table was full.
    pub streams_evicted: u64,
    /// Streams followed now.
    pub streams: u64,
    /// Requests emitted.
    pub requests: u64,
    /// Pages those requests asked for.
    pub pages_requested: u64,
    /// Times a window grew.
    pub windows_grown: u64,
    /// Times a window shrank.
    pub windows_shrunk: u64,
    /// Requested pages the reader passed over or jumped away from.
    pub wasted_pages: u64,
    /// Requested pages not yet read when their stream was forgotten (replaced
    /// in the table, or its process exited).
    pub abandoned_pages: u64,
    /// Top-ups not made because the runtime holds no descriptor for the file.
    pub no_descriptor: u64,
    /// Times a stream that died within its first window made its reader's
    /// next confirmation harder.
    #[serde(default)]
    pub confirmations_raised: u64,
}

/// Who reads: an observed process, or the programs that send hints.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Reader {
    Process(u32),
    Hints,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct StreamKey {
    reader: Reader,
    file: FileId,
}

/// The shape of a stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Pattern {
    /// Each read starts inside or at the end of the previous one.
    Sequential,
    /// Each read starts `stride` pages after the previous one's start.
    Strided { stride: u64 },
}

/// How one read relates to the previous read of its stream.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Step {
    /// Pages already read.
    Repeat,
    /// It continues a pattern.
    Follows(Pattern),
    /// It fits no pattern (backward, or too far).
    Breaks,
}

#[derive(Clone, Debug)]
struct Stream {
    /// The previous read.
    last: PageRange,
    /// The pattern being confirmed or followed.
    pattern: Option<Pattern>,
    /// Consecutive continuations of `pattern`.
    run: u32,
    /// The first page of the current run (its first read's start).
    run_start: u64,
    /// The largest read of the current run: a strided stream's record length.
    record_pages: u64,
    /// Whether the stream has earned requests.
    confirmed: bool,
    /// Continuations needed for the next confirmation (adaptive).
    confirm_needed: u32,
    /// Pages to keep fetched ahead.
    window: u64,
    /// The high-water mark: for a sequential stream the first page not
    /// requested; for a strided one the first record not requested.
    requested_to: u64,
    /// Requests since the stream was confirmed.
    batches: u64,
    /// LRU stamp.
    used: u64,
}

impl Stream {
    fn new(access: PageRange, window: u64, confirm_needed: u32, used: u64) -> Self {
        Self {
            last: access,
            pattern: None,
            run: 0,
            run_start: access.start,
            record_pages: access.len(),
            confirmed: false,
            confirm_needed,
            window,
            requested_to: access.end,
            batches: 0,
            used,
        }
    }

    /// Requested pages the reader has not reached yet.
    fn ahead_pages(&self) -> u64 {
        if !self.confirmed {
            return 0;
        }
        match self.pattern {
            Some(Pattern::Strided { stride }) => {
                let next = self.last.start.saturating_add(stride);
                self.requested_to.saturating_sub(next) / stride.max(1) * self.record_pages
            }
            _ => self.requested_to.saturating_sub(self.last.end),
        }
    }
}

/// Detects sequential and strided readers and prefetches ahead of them.
#[derive(Debug, Default)]
pub struct StreamPolicy {
    config: StreamConfig,
    streams: HashMap<StreamKey, Stream>,
    tick: u64,
    stats: StreamStats,
}

impl StreamPolicy {
    /// A policy with these settings.
    pub fn new(config: StreamConfig) -> Result<Self, StreamConfigError> {
        config.validate()?;
        Ok(Self { config, ..Self::default() })
    }

    /// The settings.
    pub fn config(&self) -> &StreamConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> StreamStats {
        StreamStats { streams: self.streams.len() as u64, ..self.stats }
    }

    fn on_read(&mut self, key: StreamKey, access: PageRange, ctx: &mut PolicyContext<'_>) {
        if access.is_empty() {
            self.stats.ignored += 1;
            return;
        }
        self.stats.reads += 1;
        self.tick += 1;
        let tick = self.tick;
        if !self.streams.contains_key(&key) {
            self.insert(key, access);
            return;
        }
        let config = &self.config;
        let stats = &mut self.stats;
        let Some(stream) = self.streams.get_mut(&key) else { return };
        stream.used = tick;
        let step = classify(stream, access, config.max_stride_pages);
        if step == Step::Repeat {
            return;
        }
        if stream.confirmed {
            match (stream.pattern, step) {
                (Some(followed), Step::Follows(pattern)) if followed == pattern => {
                    stream.last = access;
                    stream.record_pages = stream.record_pages.max(access.len());
                    top_up(stream, key.file, config, stats, ctx);
                    if stream.batches >= 2 {
                        // It read into a second window: a real stream.
                        stream.confirm_needed = config.confirm_after;
                    }
                    return;
                }
                (Some(Pattern::Sequential), Step::Follows(Pattern::Strided { .. }))
                    if access.start < stream.requested_to =>
                {
                    // A skip inside the window: the pages in between were
                    // fetched for nothing.
                    let wasted = access.start.min(stream.requested_to).saturating_sub(stream.last.end);
                    stats.wasted_pages += wasted;
                    if shrink(stream, config, stats) {
                        stream.last = access;
                        top_up(stream, key.file, config, stats, ctx);
                        return;
                    }
                    // Waste at the smallest window: stop, and let this read
                    // start a new run (perhaps of a stride).
                    stop(stream, stats);
                }
                _ => {
                    // A jump: what was fetched ahead is left behind.
                    let wasted = stream.ahead_pages();
                    stats.wasted_pages += wasted;
                    if wasted > 0 {
                        shrink(stream, config, stats);
                        if stream.batches <= 1 {
                            // It died within its first window: this reader's
                            // runs only look like streams.
                            stream.confirm_needed = stream.confirm_needed.saturating_mul(2).min(MAX_CONFIRM);
                            stats.confirmations_raised += 1;
                        }
                    }
                    stop(stream, stats);
                }
            }
        }
        match step {
            Step::Follows(pattern) if stream.pattern == Some(pattern) && stream.run > 0 => {
                stream.run += 1;
                stream.record_pages = stream.record_pages.max(access.len());
            }
            Step::Follows(pattern) => {
                stream.pattern = Some(pattern);
                stream.run = 1;
                stream.run_start = stream.last.start;
                stream.record_pages = stream.last.len().max(access.len());
            }
            Step::Breaks | Step::Repeat => {
                stream.pattern = None;
                stream.run = 0;
                stream.run_start = access.start;
                stream.record_pages = access.len();
            }
        }
        stream.last = access;
        if stream.run >= stream.confirm_needed && proven(stream, config) {
            stream.confirmed = true;
            stream.batches = 0;
            stream.requested_to = match stream.pattern {
                Some(Pattern::Strided { stride }) => access.start.saturating_add(stride),
                _ => access.end,
            };
            stats.streams_detected += 1;
            top_up(stream, key.file, config, stats, ctx);
        }
    }

    /// Starts following a new stream, replacing the least recently used one
    /// when the table is full.
    fn insert(&mut self, key: StreamKey, access: PageRange) {
        if self.streams.len() >= self.config.max_streams {
            let oldest = self.streams.iter().min_by_key(|(_, s)| s.used).map(|(k, _)| *k);
            if let Some(stream) = oldest.and_then(|k| self.streams.remove(&k)) {
                self.stats.streams_evicted += 1;
                self.stats.abandoned_pages += stream.ahead_pages();
            }
        }
        let config = &self.config;
        self.streams.insert(key, Stream::new(access, config.initial_window_pages, config.confirm_after, self.tick));
    }

    /// Forgets the streams of an exited process.
    fn forget_process(&mut self, pid: u32) {
        let stats = &mut self.stats;
        self.streams.retain(|key, stream| {
            let keep = key.reader != Reader::Process(pid);
            if !keep {
                stats.abandoned_pages += stream.ahead_pages();
            }
            keep
        });
    }
}

/// Whether a run has shown enough to be followed: a sequential run must
/// have covered [`StreamConfig::min_run_pages`]; a stride must have been
/// seen twice (any forward jump is a stride once).
fn proven(stream: &Stream, config: &StreamConfig) -> bool {
    match stream.pattern {
        Some(Pattern::Sequential) => stream.last.end.saturating_sub(stream.run_start) >= config.min_run_pages,
        Some(Pattern::Strided { .. }) => stream.run >= 2,
        None => false,
    }
}

fn classify(stream: &Stream, access: PageRange, max_stride: u64) -> Step {
    let last = stream.last;
    if access.start >= last.start && access.end <= last.end {
        return Step::Repeat;
    }
    if access.start < last.start {
        return Step::Breaks;
    }
    let delta = access.start - last.start;
    // A stride continues even when a record happens to touch its neighbour
    // (unaligned records cover one page more or less).
    if let Some(Pattern::Strided { stride }) = stream.pattern
        && delta == stride
    {
        return Step::Follows(Pattern::Strided { stride });
    }
    if access.start <= last.end {
        return Step::Follows(Pattern::Sequential);
    }
    if delta <= max_stride {
        return Step::Follows(Pattern::Strided { stride: delta });
    }
    Step::Breaks
}

/// Halves the window; false when it already was the smallest.
fn shrink(stream: &mut Stream, config: &StreamConfig, stats: &mut StreamStats) -> bool {
    if stream.window <= config.initial_window_pages {
        return false;
    }
    stream.window = (stream.window / 2).max(config.initial_window_pages);
    stats.windows_shrunk += 1;
    true
}

/// Takes a stream's confirmation away: it must prove itself again.
fn stop(stream: &mut Stream, stats: &mut StreamStats) {
    stream.confirmed = false;
    stream.pattern = None;
    stream.run = 0;
    stats.streams_stopped += 1;
}

fn grow(stream: &mut Stream, to: u64, stats: &mut StreamStats) {
    if to > stream.window {
        stream.window = to;
        stats.windows_grown += 1;
    }
}

/// Tops a confirmed stream's window up when less than half of it is
/// fetched ahead of the reader.
fn top_up(
    stream: &mut Stream,
    file: FileId,
    config: &StreamConfig,
    stats: &mut StreamStats,
    ctx: &mut PolicyContext<'_>,
) {
    grow(stream, stream.last.len().saturating_mul(2).min(config.max_window_pages), stats);
    match stream.pattern {
        Some(Pattern::Strided { stride }) => top_up_strided(stream, stride, file, config, stats, ctx),
        _ => top_up_sequential(stream, file, config, stats, ctx),
    }
}

fn top_up_sequential(
    stream: &mut Stream,
    file: FileId,
    config: &StreamConfig,
    stats: &mut StreamStats,
    ctx: &mut PolicyContext<'_>,
) {
    let position = stream.last.end;
    // A reader that overtook the window read those pages itself.
    stream.requested_to = stream.requested_to.max(position);
    let ahead = stream.requested_to - position;
    if ahead.saturating_mul(2) >= stream.window {
        return;
    }
    if ctx.file(file).is_none() {
        stats.no_descriptor += 1;
        return;
    }
    if stream.batches > 0 {
        grow(stream, stream.window.saturating_mul(2).min(config.max_window_pages), stats);
    }
    let end = position.saturating_add(stream.window).min(MAX_PAGE);
    if end <= stream.requested_to {
        return;
    }
    let range = PageRange::new(stream.requested_to, end);
    if ctx.request(file, vec![range], Urgency::Speculative) {
        stream.requested_to = end;
        stream.batches += 1;
        stats.requests += 1;
        stats.pages_requested += range.len();
    } else {
        stats.no_descriptor += 1;
    }
}

fn top_up_strided(
    stream: &mut Stream,
    stride: u64,
    file: FileId,
    config: &StreamConfig,
    stats: &mut StreamStats,
    ctx: &mut PolicyContext<'_>,
) {
    let stride = stride.max(1);
    let next = stream.last.start.saturating_add(stride);
    // Records at or behind the reader are done; keep the mark on the grid.
    stream.requested_to = stream.requested_to.max(next);
    let record = stream.record_pages.max(1);
    let window_records = |window: u64| (window / record).clamp(1, config.max_records_per_request);
    let ahead = (stream.requested_to - next) / stride;
    if ahead.saturating_mul(2) >= window_records(stream.window) {
        return;
    }
    if ctx.file(file).is_none() {
        stats.no_descriptor += 1;
        return;
    }
    if stream.batches > 0 {
        grow(stream, stream.window.saturating_mul(2).min(config.max_window_pages), stats);
    }
    let wanted = window_records(stream.window).saturating_sub(ahead);
    let mut ranges = Vec::with_capacity(wanted.min(1024) as usize);
    let mut start = stream.requested_to;
    for _ in 0..wanted {
        if start >= MAX_PAGE {
            break;
        }
        ranges.push(PageRange::new(start, start.saturating_add(record).min(MAX_PAGE)));
        start = start.saturating_add(stride);
    }
    if ranges.is_empty() {
        return;
    }
    let pages: u64 = ranges.iter().map(PageRange::len).sum();
    if ctx.request(file, ranges, Urgency::Speculative) {
        stream.requested_to = start;
        stream.batches += 1;
        stats.requests += 1;
        stats.pages_requested += pages;
    } else {
        stats.no_descriptor += 1;
    }
}

impl Policy for StreamPolicy {
    fn name(&self) -> &str {
        "stream"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::PageAccess, EventKind::StreamRead, EventKind::Exit])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        match event {
            Event::PageAccess { pid, file, pages, kind: AccessKind::Read, .. } => {
                self.on_read(StreamKey { reader: Reader::Process(*pid), file: *file }, *pages, ctx);
            }
            Event::PageAccess { .. } => self.stats.ignored += 1,
            Event::StreamRead { file, offset, len } => {
                let pages = PageRange::covering_bytes(*offset, *len);
                self.on_read(StreamKey { reader: Reader::Hints, file: *file }, pages, ctx);
            }
            Event::Exit { pid, .. } => self.forget_process(*pid),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::FileRef;
    use crate::policy::PolicyId;
    use crate::policy::test_support::HeldFiles;
    use crate::request::Request;

    struct Bench {
        policy: StreamPolicy,
        held: HeldFiles,
        file: FileId,
        time: u64,
    }

    impl Bench {
        fn new(config: StreamConfig) -> Self {
            let held = HeldFiles::own_exe();
            let file = held.id();
            Self { policy: StreamPolicy::new(config).expect("valid config"), held, file, time: 0 }
        }

        fn held() -> Self {
            Self::new(StreamConfig::default())
        }

        fn feed(&mut self, event: Event) -> Vec<Request> {
            self.held.feed(&mut self.policy, &event, PolicyId(7))
        }

        fn read_by(&mut self, pid: u32, file: FileId, pages: PageRange) -> Vec<Request> {
            self.time += 1000;
            self.feed(Event::PageAccess { pid, file, pages, kind: AccessKind::Read, time_ns: self.time })
        }

        fn read(&mut self, pages: PageRange) -> Vec<Request> {
            self.read_by(1, self.file, pages)
        }

        /// Reads `count` runs of `len` pages from `start` on; returns every
        /// range requested, in order.
        fn read_sequentially(&mut self, start: u64, len: u64, count: u64) -> Vec<PageRange> {
            (0..count)
                .flat_map(|i| self.read(PageRange::new(start + i * len, start + (i + 1) * len)))
                .flat_map(|r| r.ranges)
                .collect()
        }
    }

    #[test]
    fn registered_by_name() {
        let policy = crate::policies::by_name("stream").expect("registered");
        assert_eq!(policy.name(), "stream");
        assert_eq!(
            policy.interests(),
            EventKinds::of(&[EventKind::PageAccess, EventKind::StreamRead, EventKind::Exit])
        );
        assert!(crate::policies::NAMES.contains(&"stream"));
    }

    #[test]
    fn config_is_checked() {
        let bad = |edit: fn(&mut StreamConfig)| {
            let mut config = StreamConfig::default();
            edit(&mut config);
            StreamPolicy::new(config).err()
        };
        assert_eq!(bad(|c| c.max_streams = 0), Some(StreamConfigError::NoStreams));
        assert_eq!(bad(|c| c.confirm_after = 0), Some(StreamConfigError::NoConfirmation));
        assert_eq!(bad(|c| c.initial_window_pages = 0), Some(StreamConfigError::EmptyWindow));
        assert_eq!(bad(|c| c.max_window_pages = 1), Some(StreamConfigError::WindowCap { initial: 64, max: 1 }));
        assert_eq!(bad(|c| c.max_records_per_request = 0), Some(StreamConfigError::NoRecords));
        assert_eq!(bad(|c| c.max_records_per_request = 1 << 20), Some(StreamConfigError::TooManyRecords(1 << 20)));
        assert!(StreamPolicy::new(StreamConfig::default()).is_ok());
    }

    #[test]
    fn a_sequential_reader_is_confirmed_before_its_first_request() {
        let mut bench = Bench::held();
        // The first read opens the stream; three continuations confirm it.
        for i in 0..3 {
            assert!(bench.read(PageRange::new(i * 16, (i + 1) * 16)).is_empty(), "read {i} must not prefetch");
        }
        let out = bench.read(PageRange::new(48, 64));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ranges, vec![PageRange::new(64, 128)], "the initial 256 KiB window after the read");
        assert_eq!(out[0].urgency, Urgency::Speculative);
        assert_eq!(out[0].origin, PolicyId(7));
        let stats = bench.policy.stats();
        assert_eq!((stats.streams_detected, stats.requests, stats.pages_requested), (1, 1, 64));
    }

    #[test]
    fn the_window_grows_while_the_reader_consumes_and_never_repeats_a_page() {
        let mut bench = Bench::held();
        let ranges = bench.read_sequentially(0, 16, 20_000);
        // Requests are contiguous and strictly beyond each other: the high-water mark.
        for pair in ranges.windows(2) {
            assert_eq!(pair[0].end, pair[1].start, "requests {:?} then {:?}", pair[0], pair[1]);
        }
        let largest = ranges.iter().map(PageRange::len).max().unwrap_or(0);
        assert!(largest <= 8192, "a request never exceeds the window cap: {largest}");
        let stream = bench.policy.streams.values().next().expect("one stream");
        assert_eq!(stream.window, 8192, "the window reached its cap");
        let stats = bench.policy.stats();
        assert_eq!(stats.windows_grown, 7, "64 → 8192 pages is seven doublings");
        assert_eq!((stats.windows_shrunk, stats.wasted_pages), (0, 0));
        // Everything the reader went on to read was requested, and no more
        // than one window beyond its last read.
        let last_read = 20_000 * 16;
        let requested_to = ranges.last().map_or(0, |r| r.end);
        assert!(requested_to > last_read && requested_to <= last_read + 8192, "{requested_to}");
        assert_eq!(stats.pages_requested, requested_to - 64);
    }

    #[test]
    fn requests_are_batched_not_one_per_read() {
        let mut bench = Bench::held();
        bench.read_sequentially(0, 1, 100_000);
        let stats = bench.policy.stats();
        assert!(stats.requests < 100, "{} requests for 100,000 one-page reads", stats.requests);
    }

    #[test]
    fn random_reads_get_no_request() {
        let mut bench = Bench::held();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..100_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let page = seed % (1 << 18);
            assert!(bench.read(PageRange::new(page, page + 1 + seed % 4)).is_empty());
        }
        let stats = bench.policy.stats();
        assert_eq!((stats.streams_detected, stats.requests), (0, 0));
    }

    #[test]
    fn interleaved_readers_of_one_file_are_separate_streams() {
        let mut bench = Bench::held();
        let file = bench.file;
        let mut requested = Vec::new();
        for i in 0..8 {
            requested.extend(bench.read_by(10, file, PageRange::new(i * 8, i * 8 + 8)));
            requested.extend(bench.read_by(11, file, PageRange::new(100_000 + i * 8, 100_000 + i * 8 + 8)));
        }
        assert_eq!(bench.policy.stats().streams_detected, 2);
        assert!(requested.iter().any(|r| r.ranges[0].start < 100_000));
        assert!(requested.iter().any(|r| r.ranges[0].start >= 100_000));
    }

    #[test]
    fn a_strided_reader_gets_its_next_records() {
        let mut bench = Bench::held();
        // 4-page records every 32 pages.
        let mut requests = Vec::new();
        for i in 0..4 {
            requests.extend(bench.read(PageRange::new(i * 32, i * 32 + 4)));
        }
        assert_eq!(requests.len(), 1, "confirmed after three equal strides");
        let ranges = &requests[0].ranges;
        // A 64-page window holds 16 records of 4 pages.
        assert_eq!(ranges.len(), 16);
        assert_eq!(ranges[0], PageRange::new(128, 132));
        assert_eq!(ranges[15], PageRange::new(128 + 15 * 32, 132 + 15 * 32));
        // Following the stride further never asks for a record twice.
        let mut later: Vec<PageRange> = Vec::new();
        for i in 4..400 {
            later.extend(bench.read(PageRange::new(i * 32, i * 32 + 4)).into_iter().flat_map(|r| r.ranges));
        }
        let mut all: Vec<PageRange> = ranges.iter().copied().chain(later).collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "no record requested twice");
        assert!(all.iter().all(|r| r.start.is_multiple_of(32) && r.len() == 4));
        assert!(bench.policy.stats().windows_grown > 0);
    }

    #[test]
    fn unaligned_records_still_follow_their_stride() {
        let mut bench = Bench::held();
        // 5-page stride, records of 4 or 5 pages (unaligned byte records).
        let mut requested = 0;
        for i in 0..6 {
            let len = if i % 2 == 0 { 5 } else { 4 };
            requested += bench.read(PageRange::new(i * 5, i * 5 + len)).len();
        }
        assert!(requested > 0, "a stride of touching records is still a stream");
    }

    #[test]
    fn a_jump_wastes_what_was_ahead_and_needs_new_confirmation() {
        let mut bench = Bench::held();
        bench.read_sequentially(0, 16, 200);
        let before = bench.policy.stats();
        let window = bench.policy.streams.values().next().map(|s| s.window).unwrap_or(0);
        let stream = bench.policy.streams.values().next().expect("stream");
        let ahead = stream.ahead_pages();
        assert!(ahead > 0);
        // Jump far away: nothing requested until the new run is confirmed.
        for i in 0..3 {
            assert!(bench.read(PageRange::new(1_000_000 + i * 16, 1_000_016 + i * 16)).is_empty());
        }
        let stats = bench.policy.stats();
        assert_eq!(stats.wasted_pages, before.wasted_pages + ahead);
        assert_eq!(stats.streams_stopped, 1);
        assert_eq!(stats.windows_shrunk, before.windows_shrunk + 1);
        let stream = bench.policy.streams.values().next().expect("stream");
        assert_eq!(stream.window, window / 2);
        let out = bench.read(PageRange::new(1_000_048, 1_000_064));
        assert_eq!(out.len(), 1, "confirmed again");
        assert_eq!(out[0].ranges[0].start, 1_000_064);
    }

    #[test]
    fn short_runs_that_die_in_their_first_window_raise_the_confirmation() {
        let mut bench = Bench::held();
        // Runs of 4 reads (3 continuations) at random places: the first is
        // confirmed and wastes its window; later ones need more proof.
        let mut requests = 0;
        for run in 0..50u64 {
            let start = 1_000 + run * 7_919 % 500_000 * 64;
            for i in 0..4 {
                requests += bench.read(PageRange::new(start + i, start + i + 1)).len();
            }
        }
        let stats = bench.policy.stats();
        assert_eq!(requests, 1, "one wasted window, not one per run");
        assert_eq!(stats.streams_detected, 1);
        assert_eq!(stats.confirmations_raised, 1);
        // A real stream afterwards: confirmed after 6 continuations (twice
        // the 3), then its second window brings the bar back down.
        let out = bench.read_sequentially(40_000_000, 16, 40);
        assert!(!out.is_empty());
        let stream = bench.policy.streams.values().next().expect("stream");
        assert!(stream.confirmed);
        assert_eq!(stream.confirm_needed, StreamConfig::default().confirm_after);
    }

    /// The batch reader's settings (`ReaderConfig::default()`): one
    /// continuation and 64 pages of run.
    fn proof_by_consumption() -> StreamConfig {
        match crate::reader::ReaderConfig::default().speculation {
            crate::reader::Speculation::Stream(config) => config,
            other => panic!("the reader's default speculation is {other:?}"),
        }
    }

    #[test]
    fn short_runs_at_random_places_get_nothing_when_runs_must_be_consumed() {
        // no-structure's jumpy scan: runs of 1 to 4 consecutive pages, each
        // at a random page of a 1 GiB file. Without a run length three reads
        // confirm a stream; with one, nothing is ever requested.
        let trace = |bench: &mut Bench| {
            let mut rng = crate::testing::Rng(0x9E37_79B9_7F4A_7C15);
            let mut requested = 0;
            for _ in 0..5_000 {
                let run = 1 + rng.below(4u64);
                let start = rng.below(262_144 - run);
                for p in start..start + run {
                    requested += bench.read(PageRange::new(p, p + 1)).iter().map(Request::pages).sum::<u64>();
                }
            }
            requested
        };
        let counted = StreamConfig { confirm_after: 2, ..StreamConfig::default() };
        assert!(trace(&mut Bench::new(counted)) > 0, "continuations alone confirm a run of three reads");
        let mut bench = Bench::new(proof_by_consumption());
        assert_eq!(trace(&mut bench), 0);
        assert_eq!(bench.policy.stats().streams_detected, 0);
    }

    #[test]
    fn a_run_is_confirmed_once_it_has_read_min_run_pages() {
        // 4 KiB reads: the request comes with the read that completes 64
        // pages, not one read earlier, and starts right after it.
        let mut bench = Bench::new(proof_by_consumption());
        for p in 0..63 {
            assert!(bench.read(PageRange::new(p, p + 1)).is_empty(), "read {p}");
        }
        let out = bench.read(PageRange::new(63, 64));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ranges[0].start, 64);
        // The first window is no larger than what the run has read.
        assert!(out[0].pages() <= 64);
        // 64 KiB reads (seq-read): the fourth read proves 64 pages.
        let mut bench = Bench::new(proof_by_consumption());
        let firsts: Vec<usize> = (0..8u64).map(|i| bench.read(PageRange::new(i * 16, (i + 1) * 16)).len()).collect();
        assert_eq!(firsts[..3], [0, 0, 0]);
        assert_eq!(firsts[3], 1);
        // 14 MiB batches: one read is longer than the run asked for, so the
        // first continuation confirms: the second batch asks for what
        // follows it.
        let mut bench = Bench::new(proof_by_consumption());
        assert!(bench.read(PageRange::new(0, 3584)).is_empty());
        let out = bench.read(PageRange::new(3584, 2 * 3584));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ranges[0].start, 2 * 3584);
    }

    #[test]
    fn a_stride_must_repeat_even_with_one_continuation() {
        // With confirm_after 1 a single forward jump would be a stride: it
        // needs a second equal one.
        let mut bench = Bench::new(proof_by_consumption());
        assert!(bench.read(PageRange::new(0, 1)).is_empty());
        assert!(bench.read(PageRange::new(100, 101)).is_empty(), "one jump is no stride");
        let out = bench.read(PageRange::new(200, 201));
        assert_eq!(out.len(), 1, "the stride repeated");
        assert_eq!(out[0].ranges[0], PageRange::new(300, 301));
    }

    #[test]
    fn a_skip_inside_the_window_counts_waste_and_shrinks() {
        let mut bench = Bench::held();
        bench.read_sequentially(0, 16, 200);
        let window = bench.policy.streams.values().next().map(|s| s.window).unwrap_or(0);
        assert!(window > 64);
        // Skip 8 pages forward, still inside what was fetched.
        let position = 200 * 16;
        bench.read(PageRange::new(position + 8, position + 24));
        let stats = bench.policy.stats();
        assert_eq!(stats.wasted_pages, 8);
        assert_eq!(stats.windows_shrunk, 1);
        assert_eq!(stats.streams_stopped, 0, "still a stream");
        let stream = bench.policy.streams.values().next().expect("stream");
        assert!(stream.confirmed);
        assert_eq!(stream.window, window / 2);
    }

    #[test]
    fn a_reader_that_keeps_skipping_is_stopped() {
        let mut bench = Bench::held();
        // Sequential at first, then 8-page reads with 24-page gaps: each skip
        // wastes pages; at the smallest window the stream stops.
        let mut position = 0;
        for _ in 0..4 {
            bench.read(PageRange::new(position, position + 8));
            position += 8;
        }
        assert_eq!(bench.policy.stats().streams_detected, 1);
        for _ in 0..2 {
            position += 24;
            bench.read(PageRange::new(position, position + 8));
            position += 8;
        }
        let stats = bench.policy.stats();
        assert_eq!(stats.streams_stopped, 1);
        assert!(stats.wasted_pages > 0);
        // It is now a stride (32 pages) and is confirmed as such.
        for _ in 0..3 {
            position += 24;
            bench.read(PageRange::new(position, position + 8));
            position += 8;
        }
        let stream = bench.policy.streams.values().next().expect("stream");
        assert_eq!(stream.pattern, Some(Pattern::Strided { stride: 32 }));
        assert!(stream.confirmed);
    }

    #[test]
    fn large_reads_get_a_window_of_at_least_two_reads() {
        let mut bench = Bench::held();
        // 14 MB batches as in seed 004: 3584 pages each.
        let ranges = bench.read_sequentially(0, 3584, 6);
        assert_eq!(ranges[0], PageRange::new(4 * 3584, 6 * 3584), "two reads ahead at once");
        let stream = bench.policy.streams.values().next().expect("stream");
        assert!(stream.window >= 7168);
    }

    #[test]
    fn repeated_small_reads_of_one_page_do_not_break_a_stream() {
        let mut bench = Bench::held();
        let mut requested = 0;
        // 1 KiB reads: four per page.
        for i in 0..64u64 {
            requested += bench.feed(Event::StreamRead { file: bench.file, offset: i * 1024, len: 1024 }).len();
        }
        assert_eq!(bench.policy.stats().streams_detected, 1);
        assert_eq!(requested, 1);
    }

    #[test]
    fn stream_read_hints_are_followed() {
        let mut bench = Bench::held();
        let mut ranges = Vec::new();
        for i in 0..8u64 {
            let event = Event::StreamRead { file: bench.file, offset: i * 65536, len: 65536 };
            ranges.extend(bench.feed(event).into_iter().flat_map(|r| r.ranges));
        }
        assert_eq!(ranges.first(), Some(&PageRange::new(64, 128)));
    }

    #[test]
    fn without_a_descriptor_streams_are_followed_but_nothing_is_requested() {
        let mut bench = Bench::held();
        let stranger = FileId { dev: 99, ino: 99 };
        for i in 0..100 {
            assert!(bench.read_by(5, stranger, PageRange::new(i * 16, i * 16 + 16)).is_empty());
        }
        let stats = bench.policy.stats();
        assert_eq!(stats.streams_detected, 1);
        assert_eq!(stats.requests, 0);
        assert_eq!(stats.no_descriptor, 97, "one per read after confirmation");
        // Once a descriptor is held, the next read gets the window.
        let file = FileRef::open("/proc/self/exe").expect("open");
        let held = file.id();
        bench.held.files.insert(file);
        for i in 0..3 {
            bench.read_by(6, held, PageRange::new(i * 16, i * 16 + 16));
        }
        assert_eq!(bench.read_by(6, held, PageRange::new(48, 64)).len(), 1);
    }

    #[test]
    fn faults_are_ignored() {
        let mut bench = Bench::held();
        for i in 0..10u64 {
            let event = Event::PageAccess {
                pid: 1,
                file: bench.file,
                pages: PageRange::new(i * 16, i * 16 + 16),
                kind: AccessKind::Fault,
                time_ns: i,
            };
            assert!(bench.feed(event).is_empty());
        }
        assert_eq!(bench.policy.stats().ignored, 10);
        assert_eq!(bench.policy.stats().streams, 0);
    }

    #[test]
    fn the_table_is_bounded_and_replaces_the_least_recently_used() {
        let config = StreamConfig { max_streams: 4, ..StreamConfig::default() };
        let mut bench = Bench::new(config);
        let file = bench.file;
        bench.read_sequentially(0, 16, 10);
        for pid in 100..1100 {
            bench.read_by(pid, file, PageRange::new(0, 1));
        }
        let stats = bench.policy.stats();
        assert_eq!(stats.streams, 4);
        assert_eq!(stats.streams_evicted, 997);
        assert!(stats.abandoned_pages > 0, "the first stream had pages ahead");
        // The most recent readers are the ones kept.
        assert!(bench.policy.streams.keys().all(|k| matches!(k.reader, Reader::Process(pid) if pid >= 1096)));
    }

    #[test]
    fn an_exit_forgets_the_process_streams() {
        let mut bench = Bench::held();
        let file = bench.file;
        bench.read_sequentially(0, 16, 10);
        bench.read_by(2, file, PageRange::new(0, 16));
        bench.feed(Event::Exit { pid: 1, time_ns: 0 });
        let stats = bench.policy.stats();
        assert_eq!(stats.streams, 1);
        assert!(stats.abandoned_pages > 0);
    }

    #[test]
    fn backward_readers_get_nothing() {
        let mut bench = Bench::held();
        for i in (0..1000u64).rev() {
            assert!(bench.read(PageRange::new(i * 4, i * 4 + 4)).is_empty());
        }
        assert_eq!(bench.policy.stats().streams_detected, 0);
    }

    #[test]
    fn offsets_at_the_end_of_the_address_space_do_not_overflow() {
        let mut bench = Bench::held();
        for i in 0..10u64 {
            let offset = u64::MAX - 10 * 65536 + i * 65536;
            for request in bench.feed(Event::StreamRead { file: bench.file, offset, len: 65536 }) {
                assert!(request.ranges.iter().all(|r| r.end <= MAX_PAGE && !r.is_empty()));
            }
        }
        let mut bench = Bench::new(StreamConfig { max_stride_pages: u64::MAX, ..StreamConfig::default() });
        for page in [0, u64::MAX / 4, u64::MAX / 2, u64::MAX / 4 * 3, u64::MAX - 1] {
            for request in bench.read(PageRange::new(page, page.saturating_add(1))) {
                assert!(request.ranges.iter().all(|r| r.end <= MAX_PAGE && !r.is_empty()));
            }
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        proptest! {
            /// Whatever the reads, requests are well formed and the table
            /// stays within its bound.
            #[test]
            fn any_reads_give_bounded_well_formed_requests(
                reads in proptest::collection::vec((0u32..6, 0u64..4096, 1u64..64), 1..400),
            ) {
                let mut bench = Bench::new(StreamConfig { max_streams: 4, ..StreamConfig::default() });
                let file = bench.file;
                for (pid, start, len) in reads {
                    for request in bench.read_by(pid, file, PageRange::new(start, start + len)) {
                        prop_assert!(!request.ranges.is_empty());
                        for r in &request.ranges {
                            prop_assert!(!r.is_empty() && r.len() <= 8192);
                        }
                    }
                    prop_assert!(bench.policy.stats().streams <= 4);
                }
            }
        }
    }
}
