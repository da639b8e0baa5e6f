//! A prefetching file reader for servers that hand a file out in batches
//! (seed 004, Riffle's shuffle server): the `stream` and `readplan` policies
//! run in-process, with Riffle's accounting.
//!
//! [`PrefetchingReader`] wraps a [`File`] that a server reads with
//! positioned reads ([`PrefetchingReader::read_at`]). Each read is handed,
//! once it is done, to a private [`Runtime`] as a `StreamRead` event (so
//! the I/O it starts neither competes with the read for the device nor with
//! its copy for the CPU; a window kept ahead is still ahead of the next
//! read):
//!
//! - the speculative policy ([`Speculation`]: `stream` by default, or
//!   `learned`, or none) finds sequential or strided readers and keeps a
//!   window fetched ahead of them; a random reader gets nothing;
//! - the `readplan` policy takes the segments a client announced with
//!   [`PrefetchingReader::plan`] and fetches them in plan order, a bounded
//!   distance ahead of the reader.
//!
//! Their requests go to an [`Executor`]: one the reader starts for itself, or
//! one shared by every reader of a server ([`PrefetchingReader::with_executor`]),
//! which bounds all prefetch work together. The reader never waits for a
//! prefetch; a read costs one `mincore(2)` check (when
//! [`ReaderConfig::check_residency`] is on) plus the dispatch of one event.
//!
//! Accounting ([`ReaderStats`]), as Riffle exposes it:
//!
//! - **hits and misses** are checked, not inferred: before each read the
//!   reader asks the kernel (`mincore`, through
//!   [`crate::cache::uptodate_pages`]) which of the read's pages are resident
//!   and up to date. A read whose pages all are is a hit; otherwise a miss.
//!   Pages are counted too.
//! - **bytes** read, and operation **latency** (total, max, and a log2
//!   histogram from which [`ReaderStats::median_latency`] is taken).
//! - **prefetched** and **wasted** bytes come from the executor's hit and
//!   waste ledger (the reader's executor tracks hits; a shared one must have
//!   [`crate::executor::Limits::track_hits`] on). Every read is noted as an
//!   access. Prefetched pages the reader passes over — a forward skip of a
//!   sequential reader, planned segments before the one being read — and
//!   everything still unread when the reader finishes or is dropped count as
//!   waste.
//!
//! Nothing here changes what a read returns: prefetching only fills the page
//! cache.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::event::Event;
use crate::executor::{Executor, ExecutorConfig, ExecutorError, Limits, MAX_PAGE};
use crate::file::{FileError, FileId, FileRef};
use crate::page::{ByteRange, PAGE_SIZE, PageRange};
use crate::policies::learned::{LearnedConfig, LearnedConfigError, LearnedPolicy};
use crate::policies::readplan::{ReadPlanConfig, ReadPlanConfigError, ReadPlanPolicy};
use crate::policies::stream::{StreamConfig, StreamConfigError, StreamPolicy};
use crate::runtime::Runtime;

/// Which speculative policy follows the reader's own reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Speculation {
    /// None: only read plans are prefetched.
    Off,
    /// The `stream` policy (sequential and strided readers).
    Stream(StreamConfig),
    /// The `learned` policy (delta correlation).
    Learned(LearnedConfig),
}

/// The reader's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReaderConfig {
    /// The policy that follows reads.
    pub speculation: Speculation,
    /// The `readplan` policy's bounds.
    pub readplan: ReadPlanConfig,
    /// Whether each read is preceded by a residency check (`mincore`) that
    /// tells hits from misses. Off, hits and misses stay 0.
    pub check_residency: bool,
    /// The settings of the executor [`PrefetchingReader::new`] starts (a
    /// shared executor passed to [`PrefetchingReader::with_executor`] keeps
    /// its own).
    pub executor: ExecutorConfig,
}

impl Default for ReaderConfig {
    /// `stream` tuned for a server's batch reader: a sequential stream is
    /// confirmed by its first continuation once its run has read 256 KiB
    /// (as much as the first window asks for: a handle given out for
    /// batches is a reader of its own, so the run's length is the proof, and
    /// runs of a few pages at random places get nothing; a stride must
    /// repeat), with a window of up to 64 MiB; the default `readplan`
    /// bounds; residency checked; an
    /// executor that tracks hits and issues I/Os of up to 2 MiB (a batch
    /// reader's windows are long runs).
    fn default() -> Self {
        Self {
            speculation: Speculation::Stream(StreamConfig {
                confirm_after: 1,
                min_run_pages: 64,
                max_window_pages: 16384,
                ..StreamConfig::default()
            }),
            readplan: ReadPlanConfig::default(),
            check_residency: true,
            executor: ExecutorConfig {
                limits: Limits { track_hits: true, max_io_pages: 512, ..Limits::default() },
                ..ExecutorConfig::default()
            },
        }
    }
}

/// Why a reader could not be made or a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ReaderError {
    /// The file could not be wrapped (not a regular file, `fstat` failed).
    #[error(transparent)]
    File(#[from] FileError),
    /// The reader's own executor could not start.
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The `stream` settings are invalid.
    #[error(transparent)]
    Stream(#[from] StreamConfigError),
    /// The `learned` settings are invalid.
    #[error(transparent)]
    Learned(#[from] LearnedConfigError),
    /// The `readplan` settings are invalid.
    #[error(transparent)]
    ReadPlan(#[from] ReadPlanConfigError),
    /// A read or a residency check failed.
    #[error("reading at offset {offset}: {source}")]
    Io {
        /// The read's offset.
        offset: u64,
        /// Why.
        source: std::io::Error,
    },
}

/// Buckets of the latency histogram: bucket `i` holds operations of
/// `[2^i, 2^(i+1))` ns (bucket 0 also holds 0 ns).
pub const LATENCY_BUCKETS: usize = 40;

/// What a reader did, Riffle's metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReaderStats {
    /// Reads done.
    pub reads: u64,
    /// Reads whose pages were all resident and up to date before the read.
    pub hits: u64,
    /// Reads that found at least one page absent (or still being read).
    pub misses: u64,
    /// Bytes returned.
    pub bytes: u64,
    /// Bytes of hit reads.
    pub hit_bytes: u64,
    /// Pages the reads covered.
    pub pages_read: u64,
    /// Of those, pages resident and up to date before the read.
    pub pages_resident: u64,
    /// Read plans taken, and the bytes they named.
    pub plans: u64,
    /// Bytes named by read plans.
    pub planned_bytes: u64,
    /// Bytes the executor issued for this file (prefetch I/O).
    pub prefetched_bytes: u64,
    /// Prefetched bytes that were then read (the executor's ledger).
    pub prefetch_read_bytes: u64,
    /// Prefetched bytes never read: passed over, or unread at the end (the
    /// executor's ledger; final after [`PrefetchingReader::finish`]).
    pub wasted_bytes: u64,
    /// Total time in reads (the check, the dispatch and the read), ns.
    pub latency_total_ns: u64,
    /// The slowest read, ns.
    pub latency_max_ns: u64,
    /// Log2 histogram of read latencies (see [`LATENCY_BUCKETS`]).
    pub latency_log2_ns: Vec<u64>,
}

impl ReaderStats {
    /// The share of reads that were hits (0 with no reads).
    pub fn hit_rate(&self) -> f64 {
        if self.reads == 0 { 0.0 } else { self.hits as f64 / self.reads as f64 }
    }

    /// The median read latency, as the upper edge of its histogram bucket
    /// (within 2×).
    pub fn median_latency(&self) -> Duration {
        let half = self.reads.div_ceil(2);
        let mut seen = 0;
        for (i, n) in self.latency_log2_ns.iter().enumerate() {
            seen += n;
            if seen >= half && seen > 0 {
                return Duration::from_nanos(1u64 << (i + 1).min(63));
            }
        }
        Duration::ZERO
    }
}

/// A file read in batches, with prefetching ahead of the reads.
pub struct PrefetchingReader {
    file: FileRef,
    executor: Arc<Executor>,
    runtime: Runtime,
    config: ReaderConfig,
    /// Planned segments not yet passed, in plan order.
    plan: VecDeque<ByteRange>,
    /// End of the previous read, bytes.
    last_end: Option<u64>,
    stats: ReaderStats,
    settled: bool,
}

impl std::fmt::Debug for PrefetchingReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrefetchingReader")
            .field("file", &self.file.id())
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl PrefetchingReader {
    /// A reader of `file` with its own executor ([`ReaderConfig::executor`]).
    pub fn new(file: File, config: ReaderConfig) -> Result<Self, ReaderError> {
        let executor = Executor::new(config.executor.clone())?;
        Self::with_executor(file, config, Arc::new(executor))
    }

    /// A reader of `file` whose prefetches go to a shared `executor` (which
    /// should track hits for the waste figures).
    pub fn with_executor(file: File, config: ReaderConfig, executor: Arc<Executor>) -> Result<Self, ReaderError> {
        let file = FileRef::from_file(file)?;
        let mut runtime = Runtime::new(Arc::clone(&executor));
        match &config.speculation {
            Speculation::Off => {}
            Speculation::Stream(c) => {
                runtime.add_policy(Box::new(StreamPolicy::new(c.clone())?));
            }
            Speculation::Learned(c) => {
                runtime.add_policy(Box::new(LearnedPolicy::new(c.clone())?));
            }
        }
        runtime.add_policy(Box::new(ReadPlanPolicy::new(config.readplan.clone())?));
        runtime.hold_file(file.clone());
        Ok(Self {
            file,
            executor,
            runtime,
            config,
            plan: VecDeque::new(),
            last_end: None,
            stats: ReaderStats { latency_log2_ns: vec![0; LATENCY_BUCKETS], ..ReaderStats::default() },
            settled: false,
        })
    }

    /// The file.
    pub fn file(&self) -> &File {
        self.file.file()
    }

    /// The file's identity.
    pub fn file_id(&self) -> FileId {
        self.file.id()
    }

    /// The executor prefetches go to.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Announces the segments `(offset, len)` the reader will read next, in
    /// order; the `readplan` policy fetches them a bounded distance ahead.
    /// Empty segments are ignored.
    pub fn plan(&mut self, segments: &[(u64, u64)]) {
        let segments: Vec<ByteRange> = segments
            .iter()
            .filter(|(_, len)| *len > 0)
            .map(|&(offset, len)| ByteRange { offset, len: len.min(u64::MAX - offset) })
            .collect();
        if segments.is_empty() {
            return;
        }
        self.stats.plans += 1;
        self.stats.planned_bytes += segments.iter().map(|s| s.len).sum::<u64>();
        self.plan.extend(segments.iter().copied());
        let event = Event::ReadPlan { file: self.file.id(), segments: segments.into() };
        self.runtime.dispatch(&event);
    }

    /// Reads up to `buf.len()` bytes at `offset` (one `pread`, like
    /// [`FileExt::read_at`]); returns the bytes read (0 at the end of the
    /// file).
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize, ReaderError> {
        self.timed(buf, offset, |file, buf, offset| file.read_at(buf, offset))
    }

    /// Fills `buf` from `offset`, or fails (`UnexpectedEof` past the end of
    /// the file), like [`FileExt::read_exact_at`].
    pub fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), ReaderError> {
        self.timed(buf, offset, |file, buf, offset| file.read_exact_at(buf, offset).map(|()| buf.len())).map(|_| ())
    }

    fn timed(
        &mut self,
        buf: &mut [u8],
        offset: u64,
        read: impl FnOnce(&File, &mut [u8], u64) -> std::io::Result<usize>,
    ) -> Result<usize, ReaderError> {
        let start = Instant::now();
        let len = buf.len() as u64;
        let pages = PageRange::covering_bytes(offset, len);
        let pages = PageRange::new(pages.start.min(MAX_PAGE), pages.end.min(MAX_PAGE));
        let resident = if self.config.check_residency && !pages.is_empty() {
            Some(
                crate::cache::uptodate_pages(&self.file, &[pages])
                    .map_err(|source| ReaderError::Io { offset, source })?,
            )
        } else {
            None
        };
        self.settle_passed(offset);
        let n = read(self.file.file(), buf, offset).map_err(|source| ReaderError::Io { offset, source })?;
        let n64 = n as u64;
        let read_pages = PageRange::covering_bytes(offset, n64);
        if !read_pages.is_empty() {
            self.executor.note_access(self.file.id(), read_pages);
        }
        // The policies see the read once it is done: the next window's I/O
        // then neither competes with this read for the device nor with its
        // copy for the CPU, and a window kept ahead of the reader is still
        // ahead of its next read.
        if len > 0 {
            self.runtime.dispatch(&Event::StreamRead { file: self.file.id(), offset, len });
        }
        self.last_end = Some(offset.saturating_add(n64));
        self.consume_plan(offset, offset.saturating_add(n64));
        let elapsed = start.elapsed().as_nanos().min(u64::MAX as u128) as u64;
        let s = &mut self.stats;
        s.reads += 1;
        s.bytes += n64;
        s.pages_read += read_pages.len();
        if let Some(resident) = resident {
            // Only the pages actually returned count; a read past the end
            // asks for pages the file does not have.
            let resident = resident.min(read_pages.len());
            s.pages_resident += resident;
            if resident >= read_pages.len() {
                s.hits += 1;
                s.hit_bytes += n64;
            } else {
                s.misses += 1;
            }
        }
        s.latency_total_ns += elapsed;
        s.latency_max_ns = s.latency_max_ns.max(elapsed);
        let bucket = (63 - elapsed.max(1).leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        s.latency_log2_ns[bucket] += 1;
        Ok(n)
    }

    /// Counts as waste what the window moved past before a read at `offset`:
    /// the pages a sequential reader skipped over, and planned segments
    /// before the one being read.
    fn settle_passed(&mut self, offset: u64) {
        let id = self.file.id();
        if let Some(i) = self.plan.iter().position(|s| contains(s, offset)) {
            for passed in self.plan.drain(..i) {
                self.executor
                    .note_eviction(id, interior_pages(passed.offset, passed.offset.saturating_add(passed.len)));
            }
        } else if self.plan.is_empty()
            && let Some(last_end) = self.last_end
            && offset > last_end
        {
            // A forward skip of a reader without a plan (with one, the pages
            // skipped may be planned for later).
            self.executor.note_eviction(id, interior_pages(last_end, offset));
        }
    }

    /// Drops the planned segment being read once the read reaches its end.
    fn consume_plan(&mut self, offset: u64, end: u64) {
        if let Some(front) = self.plan.front()
            && contains(front, offset)
            && end >= front.offset.saturating_add(front.len)
        {
            self.plan.pop_front();
        }
    }

    /// The counters so far. Prefetched and wasted bytes are the executor's
    /// ledger for this file (per-file accounting of the executor's 4,096
    /// most active files).
    pub fn stats(&self) -> ReaderStats {
        let mut s = self.stats.clone();
        let id = self.file.id();
        if let Some(f) = self.executor.stats().files.into_iter().find(|f| f.file == id) {
            s.prefetched_bytes = f.counters.issued_bytes;
            s.prefetch_read_bytes = f.counters.hit_pages * PAGE_SIZE;
            s.wasted_bytes = f.counters.wasted_pages * PAGE_SIZE;
        }
        s
    }

    /// Ends the reader: waits briefly for queued prefetches to be issued,
    /// counts every prefetched page never read as waste, and returns the
    /// final counters.
    pub fn finish(mut self) -> ReaderStats {
        self.settle();
        self.stats()
    }

    fn settle(&mut self) {
        if self.settled {
            return;
        }
        self.settled = true;
        self.executor.wait_idle(Duration::from_millis(200));
        self.executor.note_eviction(self.file.id(), PageRange::new(0, MAX_PAGE));
    }
}

impl Drop for PrefetchingReader {
    fn drop(&mut self) {
        self.settle();
    }
}

/// Whether `offset` lies inside `segment`.
fn contains(segment: &ByteRange, offset: u64) -> bool {
    offset >= segment.offset && offset < segment.offset.saturating_add(segment.len)
}

/// The pages wholly inside bytes `start..end`.
fn interior_pages(start: u64, end: u64) -> PageRange {
    PageRange::new(start.div_ceil(PAGE_SIZE).min(MAX_PAGE), (end / PAGE_SIZE).min(MAX_PAGE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interior_pages_round_inward() {
        assert_eq!(interior_pages(0, 8192), PageRange::new(0, 2));
        assert_eq!(interior_pages(1, 8192), PageRange::new(1, 2));
        assert!(interior_pages(100, 4000).is_empty());
    }

    #[test]
    fn median_latency_from_histogram() {
        let mut s = ReaderStats { latency_log2_ns: vec![0; LATENCY_BUCKETS], ..ReaderStats::default() };
        s.reads = 3;
        s.latency_log2_ns[10] = 2;
        s.latency_log2_ns[20] = 1;
        assert_eq!(s.median_latency(), Duration::from_nanos(1 << 11));
        assert_eq!(ReaderStats::default().median_latency(), Duration::ZERO);
    }
}
