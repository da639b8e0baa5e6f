//! `readplan`: programs that know which segments of a file they will read
//! next say so (`ReadPlan`); this policy fetches those segments in plan order,
//! a bounded distance ahead of the reader (seed 004's read-plan strategy).
//!
//! It owns, per planned file, the segments not yet read: those requested and
//! those still held back. Plan segments are cut into chunks of at most
//! [`ReadPlanConfig::chunk_pages`], and pages already planned for the file are
//! left out, so a program that reports the same segments twice gets them
//! fetched once. The reader's progress comes from `PageAccess` (any pid, any
//! kind) and `StreamRead` events on the same file: a read inside a planned
//! segment consumes that segment up to the read's end, and passes over every
//! segment planned before it (the reader goes in plan order, so those are
//! done, read or skipped).
//!
//! Three bounds keep read-plan work from crowding out demand reads. Until
//! the reader first reads inside its plan, only the plan's first
//! [`ReadPlanConfig::opening_segments`] segments are requested: a plan
//! announced as a file is opened is followed at once by the read of its
//! first segment, which would otherwise wait behind the whole window queued
//! on the device with it (the window's later I/O goes out when that read is
//! done, while the reader works on what it read).
//! [`ReadPlanConfig::max_ahead_pages_per_file`] of requested-but-unread pages
//! per file, and [`ReadPlanConfig::max_ahead_pages_total`] over every file and
//! client (Riffle's semaphore). A file held back by the shared bound waits in
//! a first-come queue and is released when any reader frees room. A file
//! whose reader stops reading holds its share; after
//! [`ReadPlanConfig::stale_after_events`] events without activity, while
//! another file waits, its share is reclaimed. At most
//! [`ReadPlanConfig::max_files`] files and
//! [`ReadPlanConfig::max_segments_per_file`] chunks per file are kept.
//!
//! Requests are [`Urgency::Imminent`]: the program said so. The policy runs
//! alongside `hints` only if `hints` does not also forward read plans, or the
//! same segments would be asked for twice (the executor skips what is
//! resident or in flight either way).
//!
//! The policy never issues I/O, never reads file data, never blocks and
//! never looks at the clock (staleness is counted in events): the same events
//! give the same requests.

use std::collections::{BTreeMap, HashMap, VecDeque};

use crate::event::{Event, EventKind, EventKinds};
use crate::executor::MAX_PAGE;
use crate::file::FileId;
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// The `readplan` policy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlanConfig {
    /// Requested-but-unread pages allowed per file.
    pub max_ahead_pages_per_file: u64,
    /// Requested-but-unread pages allowed over all files.
    pub max_ahead_pages_total: u64,
    /// Plan segments are cut into chunks of at most this many pages, so that
    /// a reader's progress inside a large segment releases more.
    pub chunk_pages: u64,
    /// Planned files kept; a new one replaces the least recently active.
    pub max_files: usize,
    /// Chunks kept per file; further planned pages are dropped (counted).
    pub max_segments_per_file: usize,
    /// Events without activity after which a file's unread pages may be
    /// reclaimed for a file that waits.
    pub stale_after_events: u64,
    /// Planned segments requested before the reader's first read inside the
    /// plan (0: the whole window at once).
    pub opening_segments: u64,
}

impl Default for ReadPlanConfig {
    /// 64 MiB ahead per file, 256 MiB in all, 4 MiB chunks, 256 files of up
    /// to 4,096 chunks, staleness after 65,536 events, one segment requested
    /// before the first read.
    fn default() -> Self {
        Self {
            max_ahead_pages_per_file: 16384,
            max_ahead_pages_total: 65536,
            chunk_pages: 1024,
            max_files: 256,
            max_segments_per_file: 4096,
            stale_after_events: 1 << 16,
            opening_segments: 1,
        }
    }
}

/// Why a [`ReadPlanConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReadPlanConfigError {
    /// A bound is zero.
    #[error("readplan: {0} must be at least 1")]
    Zero(&'static str),
    /// A chunk would not fit the per-file bound, so it could never be
    /// requested.
    #[error("readplan: chunk_pages ({chunk}) is above max_ahead_pages_per_file ({per_file})")]
    ChunkAboveFileBound {
        /// `chunk_pages`.
        chunk: u64,
        /// `max_ahead_pages_per_file`.
        per_file: u64,
    },
    /// The per-file bound is above the shared one.
    #[error("readplan: max_ahead_pages_per_file ({per_file}) is above max_ahead_pages_total ({total})")]
    FileBoundAboveTotal {
        /// `max_ahead_pages_per_file`.
        per_file: u64,
        /// `max_ahead_pages_total`.
        total: u64,
    },
}

impl ReadPlanConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ReadPlanConfigError> {
        let zero = [
            ("max_ahead_pages_per_file", self.max_ahead_pages_per_file == 0),
            ("max_ahead_pages_total", self.max_ahead_pages_total == 0),
            ("chunk_pages", self.chunk_pages == 0),
            ("max_files", self.max_files == 0),
            ("max_segments_per_file", self.max_segments_per_file == 0),
            ("stale_after_events", self.stale_after_events == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
            return Err(ReadPlanConfigError::Zero(name));
        }
        if self.chunk_pages > self.max_ahead_pages_per_file {
            return Err(ReadPlanConfigError::ChunkAboveFileBound {
                chunk: self.chunk_pages,
                per_file: self.max_ahead_pages_per_file,
            });
        }
        if self.max_ahead_pages_per_file > self.max_ahead_pages_total {
            return Err(ReadPlanConfigError::FileBoundAboveTotal {
                per_file: self.max_ahead_pages_per_file,
                total: self.max_ahead_pages_total,
            });
        }
        Ok(())
    }
}

/// Counters of the `readplan` policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReadPlanStats {
    /// Plans taken.
    pub plans: u64,
    /// Plans for files the runtime holds no descriptor for (ignored), and
    /// releases not made because the descriptor is gone.
    pub no_descriptor: u64,
    /// Pages planned (new to the file's plan).
    pub planned_pages: u64,
    /// Pages planned again while still in the plan (left out).
    pub replanned_pages: u64,
    /// Pages dropped because the file's plan was full.
    pub dropped_pages: u64,
    /// Requests emitted.
    pub requests: u64,
    /// Pages those requests asked for.
    pub pages_requested: u64,
    /// Requested pages the reader then read.
    pub pages_consumed: u64,
    /// Requested pages the reader passed over.
    pub skipped_pages: u64,
    /// Planned pages the reader reached before they were requested.
    pub overtaken_pages: u64,
    /// Requested pages not yet read when their file was forgotten (replaced,
    /// or reclaimed as stale).
    pub abandoned_pages: u64,
    /// Times a release was held back by the shared bound.
    pub global_holds: u64,
    /// Requested-but-unread pages now, over all files.
    pub ahead_pages: u64,
    /// Planned files now.
    pub files: u64,
}

/// One chunk of a plan.
#[derive(Clone, Copy, Debug)]
struct Segment {
    start: u64,
    end: u64,
    /// Position in the file's plan.
    seq: u64,
    /// Pages before this one count as read.
    read_to: u64,
}

impl Segment {
    fn unread(&self) -> u64 {
        self.end - self.read_to
    }
}

#[derive(Debug, Default)]
struct PlannedFile {
    /// Every kept chunk by first page, for finding the chunk a read lands in:
    /// chunk start → (end, seq). Chunks never overlap.
    by_start: BTreeMap<u64, (u64, u64)>,
    /// Requested chunks, in plan order; then the held-back ones. Sequence
    /// numbers run without gaps from `requested` into `held`.
    requested: VecDeque<Segment>,
    held: VecDeque<Segment>,
    next_seq: u64,
    /// Requested-but-unread pages.
    ahead: u64,
    /// Last activity (plan or read), in events.
    active: u64,
    /// Whether the file is in the queue for the shared bound.
    waiting: bool,
    /// Whether the reader has read inside the plan.
    reading: bool,
    /// Before the first read, chunks from this sequence number on are held
    /// back (the opening segments end here).
    opening_end: Option<u64>,
}

impl PlannedFile {
    /// The kept chunk with sequence number `seq`.
    fn segment_mut(&mut self, seq: u64) -> Option<&mut Segment> {
        let first = self.requested.front().or(self.held.front())?.seq;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        let requested = self.requested.len();
        if index < requested { self.requested.get_mut(index) } else { self.held.get_mut(index - requested) }
    }

    /// The newest (in plan order) chunk that `pages` touches.
    fn newest_touched(&self, pages: PageRange) -> Option<u64> {
        let mut newest = None;
        for (_, &(end, seq)) in self.by_start.range(..pages.end).rev() {
            if end <= pages.start {
                break;
            }
            newest = newest.max(Some(seq));
        }
        newest
    }

    /// The parts of `pages` no kept chunk covers.
    fn uncovered(&self, pages: PageRange) -> Vec<PageRange> {
        let mut covered: Vec<PageRange> = Vec::new();
        for (&start, &(end, _)) in self.by_start.range(..pages.end).rev() {
            if end <= pages.start {
                break;
            }
            covered.push(PageRange::new(start, end));
        }
        covered.reverse();
        let mut gaps = Vec::new();
        let mut cursor = pages.start;
        for range in covered {
            if range.start > cursor {
                gaps.push(PageRange::new(cursor, range.start));
            }
            cursor = cursor.max(range.end);
        }
        if cursor < pages.end {
            gaps.push(PageRange::new(cursor, pages.end));
        }
        gaps
    }
}

/// Fetches reported read-plan segments in order, a bounded distance ahead
/// of the reader.
#[derive(Debug, Default)]
pub struct ReadPlanPolicy {
    config: ReadPlanConfig,
    files: HashMap<FileId, PlannedFile>,
    /// Files held back by the shared bound, first come first served.
    waiting: VecDeque<FileId>,
    /// Requested-but-unread pages over all files.
    ahead_total: u64,
    tick: u64,
    next_reclaim: u64,
    stats: ReadPlanStats,
}

/// What a release did.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Release {
    /// Released what the bounds allow (perhaps nothing).
    Done,
    /// Stopped at the shared bound.
    HeldGlobally,
}

impl ReadPlanPolicy {
    /// A policy with these settings.
    pub fn new(config: ReadPlanConfig) -> Result<Self, ReadPlanConfigError> {
        config.validate()?;
        Ok(Self { config, ..Self::default() })
    }

    /// The settings.
    pub fn config(&self) -> &ReadPlanConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> ReadPlanStats {
        ReadPlanStats { ahead_pages: self.ahead_total, files: self.files.len() as u64, ..self.stats }
    }

    /// Requested-but-unread pages of `file`.
    pub fn ahead_pages(&self, file: FileId) -> u64 {
        self.files.get(&file).map_or(0, |f| f.ahead)
    }

    fn on_plan(&mut self, file: FileId, pages: impl Iterator<Item = PageRange>, ctx: &mut PolicyContext<'_>) {
        if ctx.file(file).is_none() {
            self.stats.no_descriptor += 1;
            return;
        }
        self.stats.plans += 1;
        if !self.files.contains_key(&file) {
            self.make_room();
        }
        let tick = self.tick;
        let (chunk, max_segments) = (self.config.chunk_pages, self.config.max_segments_per_file);
        let opening = self.config.opening_segments;
        let stats = &mut self.stats;
        let planned = self.files.entry(file).or_default();
        planned.active = tick;
        let mut kept_segments = 0;
        for segment in pages {
            let segment = PageRange::new(segment.start.min(MAX_PAGE), segment.end.min(MAX_PAGE));
            if segment.is_empty() {
                continue;
            }
            if !planned.reading && planned.opening_end.is_none() && opening > 0 && kept_segments == opening {
                planned.opening_end = Some(planned.next_seq);
            }
            let gaps = planned.uncovered(segment);
            let new: u64 = gaps.iter().map(PageRange::len).sum();
            stats.replanned_pages += segment.len() - new;
            for gap in gaps {
                let mut start = gap.start;
                while start < gap.end {
                    if planned.by_start.len() >= max_segments {
                        stats.dropped_pages += gap.end - start;
                        break;
                    }
                    let end = gap.end.min(start.saturating_add(chunk));
                    let seq = planned.next_seq;
                    planned.next_seq += 1;
                    planned.by_start.insert(start, (end, seq));
                    planned.held.push_back(Segment { start, end, seq, read_to: start });
                    stats.planned_pages += end - start;
                    start = end;
                }
            }
            kept_segments += 1;
        }
        self.release_in_turn(file, ctx);
    }

    fn on_read(&mut self, file: FileId, pages: PageRange, ctx: &mut PolicyContext<'_>) {
        let tick = self.tick;
        let Some(planned) = self.files.get_mut(&file) else { return };
        planned.active = tick;
        let Some(newest) = planned.newest_touched(pages) else { return };
        planned.reading = true;
        let stats = &mut self.stats;
        // Everything planned before the chunk read is done: read or skipped.
        while let Some(front) = planned.requested.front().copied() {
            if front.seq >= newest {
                break;
            }
            planned.requested.pop_front();
            planned.by_start.remove(&front.start);
            stats.skipped_pages += front.unread();
            planned.ahead -= front.unread();
            self.ahead_total -= front.unread();
        }
        while let Some(front) = planned.held.front().copied() {
            if front.seq >= newest {
                break;
            }
            planned.held.pop_front();
            planned.by_start.remove(&front.start);
            stats.overtaken_pages += front.unread();
        }
        let was_requested = planned.requested.front().is_some_and(|s| s.seq == newest);
        if let Some(segment) = planned.segment_mut(newest) {
            let read_to = pages.end.clamp(segment.read_to, segment.end);
            let consumed = read_to - segment.read_to;
            segment.read_to = read_to;
            let (done, start) = (segment.read_to >= segment.end, segment.start);
            if was_requested {
                stats.pages_consumed += consumed;
                planned.ahead -= consumed;
                self.ahead_total -= consumed;
                if done {
                    planned.requested.pop_front();
                }
            } else {
                stats.overtaken_pages += consumed;
                if done {
                    planned.held.pop_front();
                }
            }
            if done {
                planned.by_start.remove(&start);
            }
        }
        self.release_in_turn(file, ctx);
    }

    /// Releases the waiting files first, then `file` unless it waits its
    /// turn behind them.
    fn release_in_turn(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) {
        self.release_waiting(ctx);
        if !self.files.get(&file).is_some_and(|f| f.waiting) {
            self.release_or_wait(file, ctx);
        }
    }

    /// Releases `file`'s next chunks; queues it when the shared bound holds
    /// it back.
    fn release_or_wait(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) {
        if self.release(file, ctx) == Release::HeldGlobally
            && let Some(planned) = self.files.get_mut(&file)
            && !planned.waiting
        {
            planned.waiting = true;
            self.waiting.push_back(file);
        }
    }

    /// Releases waiting files in the order they started waiting, until one
    /// is still held back.
    fn release_waiting(&mut self, ctx: &mut PolicyContext<'_>) {
        while let Some(&file) = self.waiting.front() {
            if !self.files.get(&file).is_some_and(|f| f.waiting) {
                // Forgotten or replaced since it queued.
                self.waiting.pop_front();
                continue;
            }
            if self.release(file, ctx) == Release::HeldGlobally {
                return;
            }
            self.waiting.pop_front();
            if let Some(planned) = self.files.get_mut(&file) {
                planned.waiting = false;
            }
        }
    }

    /// Requests `file`'s held-back chunks, in order, while both bounds allow.
    fn release(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) -> Release {
        let (per_file, total) = (self.config.max_ahead_pages_per_file, self.config.max_ahead_pages_total);
        let Some(planned) = self.files.get_mut(&file) else { return Release::Done };
        if planned.held.is_empty() {
            return Release::Done;
        }
        if ctx.file(file).is_none() {
            self.stats.no_descriptor += 1;
            return Release::Done;
        }
        let mut ranges = Vec::new();
        let mut pages = 0;
        let mut outcome = Release::Done;
        while let Some(next) = planned.held.front().copied() {
            if !planned.reading && planned.opening_end.is_some_and(|end| next.seq >= end) {
                break;
            }
            let unread = next.unread();
            if planned.ahead + unread > per_file {
                break;
            }
            if self.ahead_total + unread > total {
                self.stats.global_holds += 1;
                outcome = Release::HeldGlobally;
                break;
            }
            planned.held.pop_front();
            planned.requested.push_back(next);
            planned.ahead += unread;
            self.ahead_total += unread;
            ranges.push(PageRange::new(next.read_to, next.end));
            pages += unread;
        }
        if !ranges.is_empty() {
            // The descriptor was checked above and the context does not change
            // while one event is handled.
            ctx.request(file, ranges, Urgency::Imminent);
            self.stats.requests += 1;
            self.stats.pages_requested += pages;
        }
        outcome
    }

    /// Makes room for one more file by forgetting the least recently active.
    fn make_room(&mut self) {
        if self.files.len() < self.config.max_files {
            return;
        }
        let oldest = self.files.iter().min_by_key(|(id, f)| (f.active, **id)).map(|(id, _)| *id);
        if let Some(id) = oldest {
            self.forget(id);
        }
    }

    /// Drops a file's plan, returning its unread pages to the shared bound.
    fn forget(&mut self, file: FileId) {
        if let Some(planned) = self.files.remove(&file) {
            self.stats.abandoned_pages += planned.ahead;
            self.ahead_total -= planned.ahead;
        }
    }

    /// While some file waits, reclaims the shares of files idle for
    /// [`ReadPlanConfig::stale_after_events`] (checked every eighth of that).
    fn reclaim_stale(&mut self, ctx: &mut PolicyContext<'_>) {
        if self.waiting.is_empty() || self.tick < self.next_reclaim {
            return;
        }
        let stale_after = self.config.stale_after_events;
        self.next_reclaim = self.tick.saturating_add((stale_after / 8).max(1));
        let tick = self.tick;
        let mut stale: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, f)| f.ahead > 0 && f.active.saturating_add(stale_after) <= tick)
            .map(|(id, _)| *id)
            .collect();
        stale.sort();
        for file in stale {
            self.forget(file);
        }
        self.release_waiting(ctx);
    }
}

impl Policy for ReadPlanPolicy {
    fn name(&self) -> &str {
        "readplan"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::ReadPlan, EventKind::PageAccess, EventKind::StreamRead])
    }

    /// Reads of a file follow its plan only: no other file is requested.
    fn wants_observed_file(&self, file: FileId) -> bool {
        self.files.contains_key(&file)
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        self.tick += 1;
        self.reclaim_stale(ctx);
        match event {
            Event::ReadPlan { file, segments } => self.on_plan(*file, segments.iter().map(|s| s.pages()), ctx),
            Event::PageAccess { file, pages, .. } => self.on_read(*file, *pages, ctx),
            Event::StreamRead { file, offset, len } => {
                self.on_read(*file, PageRange::covering_bytes(*offset, *len), ctx);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AccessKind;
    use crate::page::{ByteRange, PAGE_SIZE};
    use crate::policy::PolicyId;
    use crate::policy::test_support::HeldFiles;
    use crate::request::Request;

    fn small() -> ReadPlanConfig {
        ReadPlanConfig {
            max_ahead_pages_per_file: 64,
            max_ahead_pages_total: 96,
            chunk_pages: 16,
            max_files: 8,
            max_segments_per_file: 1000,
            stale_after_events: 1000,
            opening_segments: 0,
        }
    }

    struct Bench {
        policy: ReadPlanPolicy,
        held: HeldFiles,
        ids: Vec<FileId>,
    }

    impl Bench {
        fn new(config: ReadPlanConfig) -> Self {
            let held = HeldFiles::distinct(2);
            let ids = held.ids.clone();
            Self { policy: ReadPlanPolicy::new(config).expect("valid config"), held, ids }
        }

        fn feed(&mut self, event: Event) -> Vec<Request> {
            self.held.feed(&mut self.policy, &event, PolicyId(4))
        }

        fn plan(&mut self, file: usize, segments: &[(u64, u64)]) -> Vec<PageRange> {
            let segments: Vec<ByteRange> =
                segments.iter().map(|&(page, pages)| ByteRange::new(page * PAGE_SIZE, pages * PAGE_SIZE)).collect();
            let event = Event::ReadPlan { file: self.ids[file], segments: segments.into() };
            ranges(self.feed(event))
        }

        fn read(&mut self, file: usize, pages: PageRange) -> Vec<PageRange> {
            let event = Event::PageAccess { pid: 3, file: self.ids[file], pages, kind: AccessKind::Read, time_ns: 0 };
            ranges(self.feed(event))
        }

        fn check_bounds(&self) {
            let config = &self.policy.config;
            let mut sum = 0;
            for planned in self.policy.files.values() {
                let unread: u64 = planned.requested.iter().map(Segment::unread).sum();
                assert_eq!(planned.ahead, unread);
                assert!(planned.ahead <= config.max_ahead_pages_per_file);
                assert_eq!(planned.by_start.len(), planned.requested.len() + planned.held.len());
                sum += planned.ahead;
            }
            assert_eq!(sum, self.policy.ahead_total);
            assert!(self.policy.ahead_total <= config.max_ahead_pages_total);
        }
    }

    fn ranges(requests: Vec<Request>) -> Vec<PageRange> {
        for request in &requests {
            assert_eq!(request.urgency, Urgency::Imminent);
            assert_eq!(request.origin, PolicyId(4));
        }
        requests.into_iter().flat_map(|r| r.ranges).collect()
    }

    #[test]
    fn registered_by_name() {
        let policy = crate::policies::by_name("readplan").expect("registered");
        assert_eq!(policy.name(), "readplan");
        assert_eq!(
            policy.interests(),
            EventKinds::of(&[EventKind::ReadPlan, EventKind::PageAccess, EventKind::StreamRead])
        );
        assert!(crate::policies::NAMES.contains(&"readplan"));
    }

    /// Only a planned file's descriptor is wanted from observation: the
    /// dispatcher is not sent through `/proc` for every file read.
    #[test]
    fn only_planned_files_are_wanted_from_observation() {
        let mut b = Bench::new(ReadPlanConfig::default());
        assert!(!b.policy.wants_observed_file(b.ids[0]));
        b.plan(0, &[(0, 4)]);
        assert!(b.policy.wants_observed_file(b.ids[0]));
        assert!(!b.policy.wants_observed_file(b.ids[1]));
    }

    #[test]
    fn config_is_checked() {
        let bad = |edit: fn(&mut ReadPlanConfig)| {
            let mut config = ReadPlanConfig::default();
            edit(&mut config);
            ReadPlanPolicy::new(config).err()
        };
        assert_eq!(bad(|c| c.chunk_pages = 0), Some(ReadPlanConfigError::Zero("chunk_pages")));
        assert_eq!(bad(|c| c.max_files = 0), Some(ReadPlanConfigError::Zero("max_files")));
        assert_eq!(
            bad(|c| c.chunk_pages = 1 << 20),
            Some(ReadPlanConfigError::ChunkAboveFileBound { chunk: 1 << 20, per_file: 16384 })
        );
        assert_eq!(
            bad(|c| c.max_ahead_pages_total = 1),
            Some(ReadPlanConfigError::FileBoundAboveTotal { per_file: 16384, total: 1 })
        );
        assert!(ReadPlanPolicy::new(ReadPlanConfig::default()).is_ok());
    }

    #[test]
    fn a_plan_is_fetched_a_bounded_distance_ahead_of_the_reader() {
        let mut bench = Bench::new(small());
        // One 200-page segment: 13 chunks of 16 (the last of 8).
        let first = bench.plan(0, &[(1000, 200)]);
        assert_eq!(first, (0..4).map(|i| PageRange::new(1000 + i * 16, 1016 + i * 16)).collect::<Vec<_>>());
        assert_eq!(bench.policy.ahead_pages(bench.ids[0]), 64);
        let mut requested = first;
        // The reader goes through in 8-page reads; each finished chunk
        // releases the next.
        for page in (1000..1200).step_by(8) {
            requested.extend(bench.read(0, PageRange::new(page, page + 8)));
            bench.check_bounds();
            assert!(bench.policy.ahead_pages(bench.ids[0]) <= 64);
        }
        let mut expected = Vec::new();
        let mut start = 1000;
        while start < 1200 {
            expected.push(PageRange::new(start, (start + 16).min(1200)));
            start += 16;
        }
        assert_eq!(requested, expected, "every chunk once, in order");
        let stats = bench.policy.stats();
        assert_eq!((stats.pages_requested, stats.pages_consumed, stats.skipped_pages), (200, 200, 0));
        assert_eq!((stats.ahead_pages, stats.overtaken_pages), (0, 0));
    }

    #[test]
    fn before_the_first_read_only_the_opening_segments_are_requested() {
        let mut bench = Bench::new(ReadPlanConfig { opening_segments: 1, ..small() });
        // Two 20-page segments: the first (chunks of 16 and 4) is requested
        // at once; the second waits for the reader.
        assert_eq!(bench.plan(0, &[(100, 20), (200, 20)]), vec![PageRange::new(100, 116), PageRange::new(116, 120)]);
        assert_eq!(bench.policy.ahead_pages(bench.ids[0]), 20);
        // A plan announced again before the read adds nothing to the opening.
        assert!(bench.plan(0, &[(300, 16)]).is_empty());
        assert!(bench.read(0, PageRange::new(0, 8)).is_empty(), "a read outside the plan is not the reader's start");
        // The first read inside the plan releases the rest, up to the bound.
        assert_eq!(
            bench.read(0, PageRange::new(100, 104)),
            vec![PageRange::new(200, 216), PageRange::new(216, 220), PageRange::new(300, 316)]
        );
        bench.check_bounds();
        // Once reading, a new plan goes out at once (within the bound: 52
        // pages are ahead).
        assert_eq!(bench.plan(0, &[(400, 8)]), vec![PageRange::new(400, 408)]);
        let mut opening_two = Bench::new(ReadPlanConfig { opening_segments: 2, ..small() });
        assert_eq!(opening_two.plan(0, &[(0, 16), (50, 16), (100, 16)]).len(), 2);
    }

    #[test]
    fn segments_are_fetched_in_plan_order_not_file_order() {
        let mut bench = Bench::new(small());
        let requested = bench.plan(0, &[(900, 16), (100, 16), (500, 16), (0, 16), (300, 16)]);
        assert_eq!(
            requested,
            vec![PageRange::new(900, 916), PageRange::new(100, 116), PageRange::new(500, 516), PageRange::new(0, 16)]
        );
        // Reading the first planned segment releases the fifth.
        assert_eq!(bench.read(0, PageRange::new(900, 916)), vec![PageRange::new(300, 316)]);
    }

    #[test]
    fn reading_further_in_the_plan_passes_over_what_came_before() {
        let mut bench = Bench::new(small());
        bench.plan(0, &[(0, 16), (100, 16), (200, 16), (300, 16), (400, 16), (500, 16)]);
        // The reader goes straight to the third segment.
        let released = bench.read(0, PageRange::new(200, 216));
        assert_eq!(released, vec![PageRange::new(400, 416), PageRange::new(500, 516)]);
        let stats = bench.policy.stats();
        assert_eq!(stats.skipped_pages, 32, "two requested segments passed over");
        assert_eq!(stats.pages_consumed, 16);
        assert_eq!(bench.policy.ahead_pages(bench.ids[0]), 48);
        bench.check_bounds();
    }

    #[test]
    fn a_reader_ahead_of_the_plan_overtakes_it() {
        let mut bench = Bench::new(small());
        bench.plan(0, &[(0, 160)]);
        // Read the seventh chunk (pages 96..112), not yet requested.
        let released = bench.read(0, PageRange::new(96, 112));
        let stats = bench.policy.stats();
        assert_eq!(stats.skipped_pages, 64, "four requested chunks passed over");
        assert_eq!(stats.overtaken_pages, 32 + 16, "two held chunks passed, one read before its request");
        assert_eq!(released, (0..3).map(|i| PageRange::new(112 + i * 16, 128 + i * 16)).collect::<Vec<_>>());
        bench.check_bounds();
    }

    #[test]
    fn planning_the_same_pages_again_fetches_them_once() {
        let mut bench = Bench::new(small());
        let first = bench.plan(0, &[(0, 32)]);
        assert_eq!(first.len(), 2);
        let again = bench.plan(0, &[(0, 32), (16, 40)]);
        assert_eq!(again, vec![PageRange::new(32, 48), PageRange::new(48, 56)]);
        let stats = bench.policy.stats();
        assert_eq!(stats.replanned_pages, 32 + 16);
        assert_eq!(stats.planned_pages, 56);
    }

    #[test]
    fn the_shared_bound_holds_files_back_first_come_first_served() {
        let mut config = small();
        config.max_ahead_pages_total = 64;
        let mut bench = Bench::new(config);
        assert_eq!(bench.plan(0, &[(0, 128)]).len(), 4, "the first file takes the whole shared bound");
        assert!(bench.plan(1, &[(0, 128)]).is_empty(), "the second waits");
        assert_eq!(bench.policy.stats().global_holds, 1);
        // The first reader finishes a chunk: the room goes to the waiting
        // file, not back to the reader.
        let mut out = Vec::new();
        let event = Event::PageAccess {
            pid: 1,
            file: bench.ids[0],
            pages: PageRange::new(0, 16),
            kind: AccessKind::Read,
            time_ns: 0,
        };
        bench.policy.on_event(&event, &mut PolicyContext::new(&bench.held.files, &mut out, PolicyId(4)));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].file.id(), bench.ids[1]);
        assert_eq!(out[0].ranges, vec![PageRange::new(0, 16)]);
        bench.check_bounds();
    }

    #[test]
    fn an_idle_file_loses_its_share_to_a_waiting_one() {
        let mut config = small();
        config.max_ahead_pages_total = 64;
        config.stale_after_events = 100;
        let mut bench = Bench::new(config);
        bench.plan(0, &[(0, 64)]);
        assert!(bench.plan(1, &[(0, 64)]).is_empty());
        // Unrelated events pass; the first file's reader never comes.
        let mut released = Vec::new();
        for i in 0..200 {
            released.extend(bench.read(1, PageRange::new(10_000 + i, 10_001 + i)));
        }
        assert_eq!(released.len(), 4, "the waiting file got the room");
        let stats = bench.policy.stats();
        assert_eq!(stats.abandoned_pages, 64);
        assert_eq!(stats.files, 1);
        bench.check_bounds();
    }

    #[test]
    fn files_and_segments_are_bounded() {
        let mut config = small();
        config.max_files = 1;
        config.max_segments_per_file = 3;
        let mut bench = Bench::new(config);
        assert_eq!(bench.plan(0, &[(0, 100)]).len(), 3);
        assert_eq!(bench.policy.stats().dropped_pages, 100 - 48);
        bench.plan(1, &[(0, 16)]);
        let stats = bench.policy.stats();
        assert_eq!((stats.files, stats.abandoned_pages), (1, 48));
        bench.check_bounds();
    }

    #[test]
    fn plans_for_files_without_a_descriptor_are_ignored() {
        let mut bench = Bench::new(small());
        let event =
            Event::ReadPlan { file: FileId { dev: 77, ino: 77 }, segments: vec![ByteRange::new(0, 1 << 20)].into() };
        assert!(bench.feed(event).is_empty());
        let stats = bench.policy.stats();
        assert_eq!((stats.no_descriptor, stats.plans, stats.files), (1, 0, 0));
    }

    #[test]
    fn stream_read_hints_advance_the_reader() {
        let mut bench = Bench::new(small());
        bench.plan(0, &[(0, 100)]);
        let event = Event::StreamRead { file: bench.ids[0], offset: 0, len: 16 * PAGE_SIZE };
        assert_eq!(ranges(bench.feed(event)), vec![PageRange::new(64, 80)]);
    }

    #[test]
    fn reads_outside_the_plan_change_nothing() {
        let mut bench = Bench::new(small());
        bench.plan(0, &[(100, 100)]);
        let before = bench.policy.stats();
        assert!(bench.read(0, PageRange::new(0, 100)).is_empty());
        assert!(bench.read(0, PageRange::new(1000, 2000)).is_empty());
        assert!(bench.read(1, PageRange::new(100, 200)).is_empty(), "another file");
        let after = bench.policy.stats();
        assert_eq!(before.ahead_pages, after.ahead_pages);
        assert_eq!(after.pages_consumed, 0);
    }

    #[test]
    fn huge_offsets_do_not_overflow() {
        let mut bench = Bench::new(ReadPlanConfig::default());
        let event = Event::ReadPlan {
            file: bench.ids[0],
            segments: vec![
                ByteRange::new(u64::MAX - 5, 100),
                ByteRange::new(u64::MAX / 2, u64::MAX),
                ByteRange::new((MAX_PAGE - 10) * PAGE_SIZE, 1 << 30),
            ]
            .into(),
        };
        let requested = ranges(bench.feed(event));
        assert_eq!(requested, vec![PageRange::new(MAX_PAGE - 10, MAX_PAGE)]);
        bench.check_bounds();
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Plan(usize, Vec<(u64, u64)>),
            Read(usize, u64, u64),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0usize..2, proptest::collection::vec((0u64..512, 1u64..80), 1..6)).prop_map(|(f, s)| Op::Plan(f, s)),
                (0usize..2, 0u64..600, 1u64..40).prop_map(|(f, p, n)| Op::Read(f, p, n)),
            ]
        }

        proptest! {
            /// Whatever the plans and reads, both bounds hold and the books
            /// balance.
            #[test]
            fn bounds_hold(ops in proptest::collection::vec(op(), 1..200)) {
                let mut bench = Bench::new(small());
                for op in ops {
                    match op {
                        Op::Plan(file, segments) => { bench.plan(file, &segments); }
                        Op::Read(file, page, len) => { bench.read(file, PageRange::new(page, page + len)); }
                    }
                    bench.check_bounds();
                }
                let stats = bench.policy.stats();
                prop_assert_eq!(
                    stats.pages_requested,
                    stats.pages_consumed + stats.skipped_pages + stats.abandoned_pages + stats.ahead_pages
                );
            }
        }
    }
}
