//! `columns`: a Parquet reader's next row groups, fetched a bounded distance
//! ahead of it, the columns it reads and no others (seed 003's DuckDB
//! workload).
//!
//! A query over a Parquet file reads the footer, then, row group after row
//! group, the chunks of the columns it needs — often a few of many, so the
//! file is read in holes and the kernel's readahead, which follows one
//! sequential stream, helps little. The dispatcher parses the footer once
//! the reader has read it ([`crate::parquet`]) and sends a
//! [`Event::ColumnLayout`]. From then on this policy learns from the
//! reader's own accesses:
//!
//! - **which columns**: a column becomes wanted when the reader touches a
//!   chunk of it;
//! - **how far**: the *frontier* is the furthest row group the reader has
//!   touched (a parallel reader, DuckDB's threads, works on several at
//!   once, in row-group order).
//!
//! It asks for the wanted columns' chunks of the row groups past the
//! frontier, in row-group order, while the bytes asked for past the frontier
//! stay within [`ColumnsConfig::ahead_bytes`] per file and
//! [`ColumnsConfig::max_outstanding_bytes`] over all files. A chunk is asked
//! for once. Row groups at or behind the frontier are never asked for: the
//! reader is at them already, or skipped them (a filter on row-group
//! statistics), so asking would only compete with its own reads. A column
//! first touched late is asked for from the frontier on. A chunk the reader
//! skips costs at most the window.
//!
//! Requests are [`Urgency::Speculative`]: learned, not said.
//!
//! State is bounded: at most [`ColumnsConfig::max_files`] tables, holding
//! at most [`ColumnsConfig::max_chunks`] chunks in all (a new table replaces
//! the least recently active until it fits). The policy never issues I/O,
//! never reads file data, never blocks and never looks at the clock.

use std::collections::{BTreeMap, HashMap};

use crate::event::{Event, EventKind, EventKinds};
use crate::executor::MAX_PAGE;
use crate::file::FileId;
use crate::page::{PAGE_SIZE, PageRange, push_merged};
use crate::parquet::ColumnChunk;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// The `columns` policy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnsConfig {
    /// Bytes asked for past the reader's frontier, per file. A chunk larger
    /// than the window is asked for alone when nothing else is ahead.
    pub ahead_bytes: u64,
    /// Bytes asked for past their readers' frontiers, over all files.
    pub max_outstanding_bytes: u64,
    /// The executor's pacing window for these requests
    /// ([`crate::request::Request::window_pages`]): the reads of them that
    /// may be in flight at once. Wider than the daemon's own (4 MiB, for
    /// launch replays), since the reader reads exactly these pages next:
    /// a Parquet reader's own reads keep only a few MiB in flight.
    pub pacing_bytes: u64,
    /// Tables kept; a new one replaces the least recently active.
    pub max_files: usize,
    /// Column chunks kept over all tables (about 40 bytes each): a new
    /// table replaces the least recently active ones until it fits, and one
    /// larger than this is not followed (counted).
    pub max_chunks: usize,
}

impl Default for ColumnsConfig {
    /// 64 MiB ahead per file, 512 MiB in all, 32 MiB in flight, 16
    /// tables. In `model-load`'s DuckDB queries, a window of 128 MiB, or
    /// the daemon's 4 MiB in flight, slowed the query of 4 columns and the
    /// one of half the row groups, which DuckDB's own eight reading
    /// threads keep the device busy for.
    fn default() -> Self {
        Self {
            ahead_bytes: 64 << 20,
            max_outstanding_bytes: 512 << 20,
            pacing_bytes: 32 << 20,
            max_files: 16,
            max_chunks: crate::parquet::MAX_CHUNKS,
        }
    }
}

/// Why a [`ColumnsConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ColumnsConfigError {
    /// A bound is zero.
    #[error("columns: {0} must be at least 1")]
    Zero(&'static str),
}

impl ColumnsConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ColumnsConfigError> {
        for (name, value) in [
            ("ahead_bytes", self.ahead_bytes),
            ("max_outstanding_bytes", self.max_outstanding_bytes),
            ("pacing_bytes", self.pacing_bytes / PAGE_SIZE),
            ("max_files", self.max_files as u64),
            ("max_chunks", self.max_chunks as u64),
        ] {
            if value == 0 {
                return Err(ColumnsConfigError::Zero(name));
            }
        }
        Ok(())
    }
}

/// Counters of the `columns` policy. Books balance:
/// `bytes_requested = bytes_passed + abandoned_bytes + outstanding_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ColumnsStats {
    /// Layouts taken.
    pub layouts: u64,
    /// Layouts for files the runtime holds no descriptor for (ignored).
    pub no_descriptor: u64,
    /// Layouts of more chunks than [`ColumnsConfig::max_chunks`] (ignored).
    pub too_large: u64,
    /// Columns that became wanted.
    pub columns_wanted: u64,
    /// Requests emitted.
    pub requests: u64,
    /// Chunks asked for.
    pub chunks_requested: u64,
    /// Bytes those chunks hold.
    pub bytes_requested: u64,
    /// Requested bytes whose row group the reader's frontier then reached.
    pub bytes_passed: u64,
    /// Requested bytes past the frontier when their table was forgotten,
    /// or its reader started over.
    pub abandoned_bytes: u64,
    /// Readers that started over: read the file's last bytes (where the
    /// footer's length is), or began a chunk already begun.
    pub restarts: u64,
    /// Releases held back by [`ColumnsConfig::max_outstanding_bytes`].
    pub budget_holds: u64,
    /// Requested bytes past their frontiers now, over all files.
    pub outstanding_bytes: u64,
    /// Tables now.
    pub files: u64,
}

/// One Parquet file as the policy follows it.
#[derive(Debug)]
struct Table {
    /// Chunks by row group then column (as the footer lists them).
    chunks: Vec<ColumnChunk>,
    /// Indices into `chunks` by offset.
    by_offset: Vec<u32>,
    /// Index of each row group's first chunk in `chunks`; one more entry,
    /// the number of chunks.
    group_start: Vec<u32>,
    /// The reader's pass over the file (a query): the marks below count
    /// only when they carry it, so that starting over costs nothing
    /// however large the table.
    pass: u32,
    /// Per column: the pass in which the reader touched it.
    wanted: Vec<u32>,
    /// Per chunk: the pass in which it was asked for.
    asked: Vec<u32>,
    /// Per chunk: the pass in which the reader began a read at its first
    /// page.
    begun: Vec<u32>,
    /// Bytes asked for per row group past the frontier (only those with
    /// some): the frontier's advance takes each group out once.
    ahead_by_group: BTreeMap<u32, u64>,
    /// The furthest row group the reader touched.
    frontier: Option<u32>,
    /// The first chunk (in row-group order) a release looks at: every
    /// wanted chunk before it, past the frontier, is asked for.
    scan_at: usize,
    /// Bytes asked for in row groups past the frontier.
    ahead: u64,
    /// When the table last saw an access (the policy's event count).
    last_active: u64,
    /// The file's length: a read of its last bytes is a reader opening it.
    file_len: u64,
}

impl Table {
    fn new(chunks: &[ColumnChunk], file_len: u64) -> Self {
        let mut chunks: Vec<ColumnChunk> = chunks.to_vec();
        chunks.sort_by_key(|c| (c.row_group, c.column));
        let groups = chunks.last().map_or(0, |c| c.row_group as usize + 1);
        let columns = chunks.iter().map(|c| c.column as usize + 1).max().unwrap_or(0);
        let mut group_start = vec![0u32; groups + 1];
        for c in &chunks {
            group_start[c.row_group as usize + 1] += 1;
        }
        for g in 0..groups {
            group_start[g + 1] += group_start[g];
        }
        let mut by_offset: Vec<u32> = (0..chunks.len() as u32).collect();
        by_offset.sort_by_key(|&i| chunks[i as usize].offset);
        Self {
            pass: 1,
            asked: vec![0; chunks.len()],
            begun: vec![0; chunks.len()],
            ahead_by_group: BTreeMap::new(),
            wanted: vec![0; columns],
            chunks,
            by_offset,
            group_start,
            frontier: None,
            scan_at: 0,
            ahead: 0,
            last_active: 0,
            file_len,
        }
    }

    /// Starts over for a new reader: nothing wanted, asked for or reached.
    /// Returns the bytes that were asked for past the old frontier.
    fn restart(&mut self) -> u64 {
        self.pass = self.pass.wrapping_add(1);
        if self.pass == 0 {
            // Once in 2^32 passes: clear the marks for real.
            self.wanted.fill(0);
            self.asked.fill(0);
            self.begun.fill(0);
            self.pass = 1;
        }
        self.ahead_by_group.clear();
        self.frontier = None;
        self.scan_at = 0;
        std::mem::take(&mut self.ahead)
    }

    fn is_wanted(&self, column: u32) -> bool {
        self.wanted.get(column as usize).is_some_and(|&p| p == self.pass)
    }

    /// The first chunk of the row group after the frontier.
    fn past_frontier(&self) -> usize {
        let next = self.frontier.map_or(0, |f| f as usize + 1);
        self.group_start.get(next).map_or(self.chunks.len(), |&i| i as usize)
    }

    /// The first chunk (by offset) that begins on the page at byte `at`
    /// and goes on past `at`.
    fn begins_at(&self, at: u64) -> Option<usize> {
        let page = at / PAGE_SIZE * PAGE_SIZE;
        let first = self.by_offset.partition_point(|&i| self.chunks[i as usize].offset < page);
        let i = *self.by_offset.get(first)? as usize;
        (self.chunks[i].offset < page + PAGE_SIZE && self.chunks[i].end() > at).then_some(i)
    }

    /// The chunks `[start, end)` touches, by index: at most
    /// [`MAX_TOUCHED`], the first by offset (a read's events name the rest
    /// of the read, which may span a whole file of tiny chunks).
    fn touched(&self, start: u64, end: u64) -> impl Iterator<Item = usize> + '_ {
        // The first chunk (by offset) that ends after `start`; chunks may
        // overlap in a malformed footer, so look a little behind.
        let first = self.by_offset.partition_point(|&i| self.chunks[i as usize].offset <= start).saturating_sub(1);
        self.by_offset[first..]
            .iter()
            .map(|&i| i as usize)
            .take_while(move |&i| self.chunks[i].offset < end)
            .filter(move |&i| self.chunks[i].end() > start)
            .take(MAX_TOUCHED)
    }
}

/// Chunks one access is attributed to, at most.
const MAX_TOUCHED: usize = 64;

/// Chunks one release looks at, at most (the next access goes on).
const MAX_EXAMINED: usize = 4096;

/// The `columns` policy (see the module docs).
#[derive(Debug)]
pub struct ColumnsPolicy {
    config: ColumnsConfig,
    files: HashMap<FileId, Table>,
    /// Bytes asked for past their frontiers, over all files.
    outstanding: u64,
    /// Chunks held over all tables.
    chunks: usize,
    events: u64,
    stats: ColumnsStats,
}

impl Default for ColumnsPolicy {
    fn default() -> Self {
        Self::new(ColumnsConfig::default()).unwrap_or_else(|_| unreachable!("the default configuration is valid"))
    }
}

impl ColumnsPolicy {
    /// A policy with `config`, checked.
    pub fn new(config: ColumnsConfig) -> Result<Self, ColumnsConfigError> {
        config.validate()?;
        Ok(Self { config, files: HashMap::new(), outstanding: 0, chunks: 0, events: 0, stats: ColumnsStats::default() })
    }

    /// The counters.
    pub fn stats(&self) -> ColumnsStats {
        ColumnsStats { outstanding_bytes: self.outstanding, files: self.files.len() as u64, ..self.stats }
    }

    fn on_layout(&mut self, file: FileId, file_len: u64, chunks: &[ColumnChunk], ctx: &PolicyContext<'_>) {
        if ctx.file(file).is_none() {
            self.stats.no_descriptor += 1;
            return;
        }
        self.stats.layouts += 1;
        self.forget(file);
        if chunks.len() > self.config.max_chunks {
            self.stats.too_large += 1;
            return;
        }
        while self.files.len() >= self.config.max_files || self.chunks + chunks.len() > self.config.max_chunks {
            let Some(oldest) = self.files.iter().min_by_key(|(_, t)| t.last_active).map(|(id, _)| *id) else { break };
            self.forget(oldest);
        }
        self.chunks += chunks.len();
        let mut table = Table::new(chunks, file_len);
        table.last_active = self.events;
        self.files.insert(file, table);
    }

    /// Drops `file`'s table; what it had asked for past its frontier is
    /// abandoned.
    fn forget(&mut self, file: FileId) {
        if let Some(table) = self.files.remove(&file) {
            self.chunks -= table.chunks.len();
            self.outstanding -= table.ahead;
            self.stats.abandoned_bytes += table.ahead;
        }
    }

    /// An access to bytes `[start, end)` of `file`. `exact`: the bytes are
    /// the reader's own (a `StreamRead`); otherwise they are whole pages
    /// around them, and a page at either end may hold only a neighbouring
    /// chunk's tail or head, which the reader did not read.
    fn on_access(&mut self, file: FileId, start: u64, end: u64, exact: bool, ctx: &mut PolicyContext<'_>) {
        let Some(table) = self.files.get_mut(&file) else { return };
        table.last_active = self.events;
        // A new query, whose columns and row groups are its own: a reader
        // reads the footer's length first, and one that kept the footer
        // (DuckDB in one process) begins a chunk it already began.
        let footer = end > table.file_len.saturating_sub(8);
        let begun = if footer { None } else { table.begins_at(start) };
        if footer || begun.is_some_and(|i| table.begun[i] == table.pass) {
            let ahead = table.restart();
            self.outstanding -= ahead;
            self.stats.abandoned_bytes += ahead;
            self.stats.restarts += 1;
        }
        if footer {
            return;
        }
        if let Some(i) = begun {
            table.begun[i] = table.pass;
        }
        // The bytes the reader surely read: all but the first and last page
        // but one byte, since its read began somewhere in the first page and
        // ended somewhere in the last.
        let (start, end) = if exact || end - start <= 2 * PAGE_SIZE {
            (start, end)
        } else {
            (start + PAGE_SIZE - 1, end - (PAGE_SIZE - 1))
        };
        let mut new_column = false;
        let mut furthest = table.frontier;
        let pass = table.pass;
        for i in table.touched(start, end).collect::<Vec<_>>() {
            let chunk = table.chunks[i];
            if let Some(wanted) = table.wanted.get_mut(chunk.column as usize)
                && *wanted != pass
            {
                *wanted = pass;
                new_column = true;
                self.stats.columns_wanted += 1;
            }
            furthest = furthest.max(Some(chunk.row_group));
        }
        if let Some(to) = furthest
            && furthest > table.frontier
        {
            while let Some(entry) = table.ahead_by_group.first_entry() {
                if *entry.key() > to {
                    break;
                }
                let passed = entry.remove();
                table.ahead -= passed;
                self.outstanding -= passed;
                self.stats.bytes_passed += passed;
            }
            table.frontier = furthest;
        }
        let past = table.past_frontier();
        if new_column || table.scan_at < past {
            table.scan_at = past;
        }
        self.release(file, ctx);
    }

    /// Asks for the wanted chunks past the frontier that fit the window.
    fn release(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) {
        let Some(table) = self.files.get_mut(&file) else { return };
        if table.frontier.is_none() {
            return;
        }
        let mut ranges: Vec<PageRange> = Vec::new();
        let mut i = table.scan_at;
        let stop = table.chunks.len().min(i.saturating_add(MAX_EXAMINED));
        while i < stop {
            let chunk = table.chunks[i];
            if table.asked[i] == table.pass || !table.is_wanted(chunk.column) {
                i += 1;
                continue;
            }
            let fits_file = table.ahead == 0 || table.ahead + chunk.len <= self.config.ahead_bytes;
            if !fits_file {
                break;
            }
            if self.outstanding > 0 && self.outstanding + chunk.len > self.config.max_outstanding_bytes {
                self.stats.budget_holds += 1;
                break;
            }
            table.asked[i] = table.pass;
            table.ahead += chunk.len;
            *table.ahead_by_group.entry(chunk.row_group).or_insert(0) += chunk.len;
            self.outstanding += chunk.len;
            self.stats.chunks_requested += 1;
            self.stats.bytes_requested += chunk.len;
            let pages = PageRange::covering_bytes(chunk.offset, chunk.len);
            push_merged(&mut ranges, PageRange::new(pages.start, pages.end.min(MAX_PAGE)));
            i += 1;
        }
        table.scan_at = i;
        if !ranges.is_empty() {
            self.stats.requests += 1;
            if !ctx.request_paced(file, ranges, Urgency::Speculative, self.config.pacing_bytes / PAGE_SIZE) {
                self.stats.no_descriptor += 1;
            }
        }
    }
}

impl Policy for ColumnsPolicy {
    fn name(&self) -> &str {
        "columns"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::ColumnLayout, EventKind::PageAccess, EventKind::StreamRead])
    }

    /// Accesses pace a Parquet file's reads only: no other file is requested.
    fn wants_observed_file(&self, file: FileId) -> bool {
        self.files.contains_key(&file)
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        self.events += 1;
        match event {
            Event::ColumnLayout { file, file_len, chunks } => self.on_layout(*file, *file_len, chunks, ctx),
            Event::PageAccess { file, pages, .. } => {
                let (start, end) = (pages.start.saturating_mul(PAGE_SIZE), pages.end.saturating_mul(PAGE_SIZE));
                self.on_access(*file, start, end, false, ctx);
            }
            Event::StreamRead { file, offset, len } => {
                self.on_access(*file, *offset, offset.saturating_add(*len), true, ctx)
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AccessKind;
    use crate::policy::PolicyId;
    use crate::policy::test_support::HeldFiles;
    use crate::request::Request;

    const MIB: u64 = 1 << 20;

    /// `groups` row groups of `columns` columns of `len` bytes each, back
    /// to back from byte 4096.
    fn chunks(groups: u32, columns: u32, len: u64) -> Vec<ColumnChunk> {
        let mut out = Vec::new();
        for row_group in 0..groups {
            for column in 0..columns {
                let offset = 4096 + u64::from(row_group * columns + column) * len;
                out.push(ColumnChunk { row_group, column, offset, len });
            }
        }
        out
    }

    struct Bench {
        policy: ColumnsPolicy,
        held: HeldFiles,
        chunks: Vec<ColumnChunk>,
    }

    impl Bench {
        fn new(ahead_mib: u64, total_mib: u64, groups: u32, columns: u32) -> Self {
            Self::sized(ahead_mib * MIB, total_mib * MIB, chunks(groups, columns, MIB))
        }

        /// Layouts of `chunks` for files 0, 1 and 2, two kept (1 and 2).
        fn sized(ahead_bytes: u64, max_outstanding_bytes: u64, chunks: Vec<ColumnChunk>) -> Self {
            Self::bounded(ahead_bytes, max_outstanding_bytes, chunks, 1000)
        }

        /// [`Bench::sized`] with room for `max_chunks` chunks in all.
        fn bounded(ahead_bytes: u64, max_outstanding_bytes: u64, chunks: Vec<ColumnChunk>, max_chunks: usize) -> Self {
            let config =
                ColumnsConfig { ahead_bytes, max_outstanding_bytes, pacing_bytes: MIB, max_files: 2, max_chunks };
            let mut bench =
                Self { policy: ColumnsPolicy::new(config).expect("valid"), held: HeldFiles::distinct(3), chunks };
            for file in 0..3 {
                let event = bench.layout(file);
                assert!(bench.feed(event).is_empty(), "a layout alone asks for nothing");
            }
            bench
        }

        /// The file's length: 1 MiB of footer after the last chunk.
        fn file_len(&self) -> u64 {
            self.chunks.iter().map(ColumnChunk::end).max().unwrap_or(0) + MIB
        }

        fn layout(&self, file: usize) -> Event {
            Event::ColumnLayout {
                file: self.held.ids[file],
                file_len: self.file_len(),
                chunks: self.chunks.clone().into(),
            }
        }

        /// A read of pages `[first, end)` of `file`; the requests' ranges.
        fn pages(&mut self, file: usize, first: u64, end: u64) -> Vec<PageRange> {
            let pages = PageRange::new(first, end);
            let event =
                Event::PageAccess { pid: 7, file: self.held.ids[file], pages, kind: AccessKind::Read, time_ns: 0 };
            self.feed(event).into_iter().flat_map(|r| r.ranges).collect()
        }

        fn feed(&mut self, event: Event) -> Vec<Request> {
            let requests = self.held.feed(&mut self.policy, &event, PolicyId(9));
            for r in &requests {
                assert_eq!(r.urgency, Urgency::Speculative);
            }
            self.check();
            requests
        }

        /// The reader reads a page inside chunk (row group, column) of
        /// `file`; the (row group, column) chunks asked for.
        fn read(&mut self, file: usize, row_group: u32, column: u32) -> Vec<(u32, u32)> {
            let chunk = self.chunks.iter().find(|c| (c.row_group, c.column) == (row_group, column)).expect("chunk");
            let page = chunk.offset / PAGE_SIZE + 3;
            let event = Event::PageAccess {
                pid: 7,
                file: self.held.ids[file],
                pages: PageRange::new(page, page + 1),
                kind: AccessKind::Read,
                time_ns: 0,
            };
            let mut asked = Vec::new();
            for request in self.feed(event) {
                for range in request.ranges {
                    for c in &self.chunks {
                        let pages = c.offset / PAGE_SIZE..c.end().div_ceil(PAGE_SIZE);
                        if range.start <= pages.start && pages.end <= range.end {
                            asked.push((c.row_group, c.column));
                        }
                    }
                }
            }
            asked
        }

        fn check(&self) {
            let mut sum = 0;
            for table in self.policy.files.values() {
                let largest = table.chunks.iter().map(|c| c.len).max().unwrap_or(0);
                assert!(table.ahead <= self.policy.config.ahead_bytes.max(largest));
                assert!(table.ahead_by_group.keys().all(|g| table.frontier.is_none_or(|f| *g > f)));
                let past: u64 = table.ahead_by_group.values().sum();
                assert_eq!(past, table.ahead);
                sum += table.ahead;
            }
            assert_eq!(sum, self.policy.outstanding);
            assert!(self.policy.outstanding <= self.policy.config.max_outstanding_bytes);
            let s = self.policy.stats();
            assert_eq!(s.bytes_requested, s.bytes_passed + s.abandoned_bytes + s.outstanding_bytes);
        }
    }

    #[test]
    fn the_columns_read_are_fetched_ahead_of_the_frontier_and_no_others() {
        let mut b = Bench::new(4, 64, 10, 4);
        // Column 1 of row group 0: row groups 1..=4 of column 1 (4 MiB).
        assert_eq!(b.read(1, 0, 1), vec![(1, 1), (2, 1), (3, 1), (4, 1)]);
        // Column 3 too: from row group 1 on, in row-group order, within the
        // window (4 MiB already ahead: nothing fits).
        assert_eq!(b.read(1, 0, 3), vec![]);
        // The reader reaches row group 2: 2 MiB passed, room for 2 more.
        // Row groups at or behind it are not asked for: the reader is there.
        assert_eq!(b.read(1, 2, 1), vec![(3, 3), (4, 3)]);
        assert_eq!(b.read(1, 3, 1), vec![(5, 1), (5, 3)]);
        assert_eq!(b.read(1, 4, 1), vec![(6, 1), (6, 3)]);
        // Nothing is asked for twice, and nothing of columns 0 and 2.
        let mut all = Vec::new();
        for g in 5..10 {
            all.extend(b.read(1, g, 1));
            all.extend(b.read(1, g, 3));
        }
        let mut seen = std::collections::BTreeSet::new();
        assert!(all.iter().all(|c| seen.insert(*c) && c.1 % 2 == 1), "{all:?}");
        assert!(b.policy.stats().bytes_requested >= 15 * MIB);
    }

    #[test]
    fn a_reader_that_starts_in_the_middle_is_not_fetched_behind() {
        let mut b = Bench::new(3, 64, 10, 2);
        // A filter on statistics skipped row groups 0..6.
        assert_eq!(b.read(1, 6, 0), vec![(7, 0), (8, 0), (9, 0)]);
        assert_eq!(b.read(1, 9, 0), vec![]);
        assert_eq!(b.policy.stats().outstanding_bytes, 0);
    }

    #[test]
    fn all_files_share_one_budget() {
        let mut b = Bench::new(8, 10, 20, 1);
        assert_eq!(b.read(1, 0, 0).len(), 8);
        // 8 MiB outstanding: file 2 may take 2.
        assert_eq!(b.read(2, 0, 0).len(), 2);
        assert!(b.policy.stats().budget_holds > 0);
        // File 1's reader moves on and frees room for both.
        b.read(1, 8, 0);
        assert!(!b.read(2, 1, 0).is_empty());
    }

    #[test]
    fn a_new_table_replaces_the_least_recently_active() {
        let mut b = Bench::new(4, 64, 10, 1);
        // Layouts of files 0, 1, 2 with room for two: file 0 was replaced.
        assert!(b.read(0, 0, 0).is_empty());
        assert_eq!(b.read(1, 0, 0).len(), 4);
        b.read(2, 0, 0);
        let event = b.layout(0);
        b.feed(event);
        // File 1 was less recently active than file 2: its window abandoned.
        assert!(b.read(1, 1, 0).is_empty());
        assert_eq!(b.policy.stats().abandoned_bytes, 4 * MIB);
    }

    #[test]
    fn a_chunk_larger_than_the_window_is_asked_for_alone() {
        let mut b = Bench::sized(MIB, 64 * MIB, chunks(4, 1, 3 * MIB));
        assert_eq!(b.read(1, 0, 0), vec![(1, 0)]);
        assert_eq!(b.read(1, 1, 0), vec![(2, 0)]);
    }

    #[test]
    fn the_pages_a_read_shares_with_neighbouring_chunks_do_not_make_them_wanted() {
        // Chunks of 10 pages and a half: each shares a page with the next.
        let len = 10 * PAGE_SIZE + PAGE_SIZE / 2;
        let mut b = Bench::sized(4 * len, 64 * MIB, chunks(8, 3, len));
        // The reader reads chunk (0, 1) whole: the pages it lies on hold the
        // tail of (0, 0) and the head of (0, 2).
        let chunk = b.chunks[1];
        let ranges = b.pages(1, chunk.offset / PAGE_SIZE, chunk.end().div_ceil(PAGE_SIZE));
        let table = &b.policy.files[&b.held.ids[1]];
        assert_eq!([0, 1, 2].map(|c| table.is_wanted(c)), [false, true, false]);
        let want: Vec<u64> = (1..5).map(|g| b.chunks[g * 3 + 1].offset).collect();
        let got: Vec<u64> = ranges.iter().map(|r| r.start * PAGE_SIZE).collect();
        assert_eq!(got.len(), 4, "{ranges:?}");
        for (want, got) in want.iter().zip(&got) {
            assert_eq!(want / PAGE_SIZE * PAGE_SIZE, *got);
        }
    }

    #[test]
    fn a_reader_reading_the_footer_length_starts_over() {
        let mut b = Bench::new(4, 64, 10, 2);
        assert_eq!(b.read(1, 0, 0).len(), 4);
        assert_eq!(b.read(1, 5, 0).len(), 4);
        // A new query: it reads the last 8 bytes, then column 1 from the start.
        let last = b.file_len() / PAGE_SIZE;
        assert!(b.pages(1, last - 1, last).is_empty());
        assert_eq!(b.policy.stats().restarts, 1);
        assert_eq!(b.policy.stats().outstanding_bytes, 0);
        assert_eq!(b.read(1, 0, 1), vec![(1, 1), (2, 1), (3, 1), (4, 1)]);
        // Column 0 is no longer wanted: this query has not read it.
        let table = &b.policy.files[&b.held.ids[1]];
        assert_eq!([0, 1].map(|c| table.is_wanted(c)), [false, true]);
    }

    #[test]
    fn a_reader_beginning_a_chunk_again_starts_over() {
        let mut b = Bench::new(4, 64, 10, 2);
        let begin = |b: &mut Bench, g: usize, c: usize| {
            let chunk = b.chunks[g * 2 + c];
            b.pages(1, chunk.offset / PAGE_SIZE, chunk.end().div_ceil(PAGE_SIZE))
        };
        assert!(!begin(&mut b, 0, 0).is_empty());
        // Later pages of the same chunk, and another chunk: the same query.
        let chunk = b.chunks[0];
        assert!(b.pages(1, chunk.offset / PAGE_SIZE + 10, chunk.offset / PAGE_SIZE + 11).is_empty());
        begin(&mut b, 1, 0);
        assert_eq!(b.policy.stats().restarts, 0);
        // The same process queries again, its footer kept: it begins row
        // group 0's chunk of column 1, then of column 0 once more.
        begin(&mut b, 0, 1);
        assert_eq!(b.policy.stats().restarts, 0, "column 1's chunk was not begun before");
        let again = begin(&mut b, 0, 0);
        assert_eq!(b.policy.stats().restarts, 1);
        assert!(!again.is_empty(), "the window is asked for again");
    }

    #[test]
    fn the_chunks_held_over_all_tables_are_bounded() {
        // 3 layouts of 10 x 40 = 400 chunks, 1,000 at most: two fit.
        let mut b = Bench::new(4, 64, 10, 40);
        assert_eq!(b.policy.stats().files, 2);
        // One of 1,200 chunks is not followed; one of 600 replaces the
        // older table.
        b.chunks = chunks(30, 40, MIB);
        b.feed(b.layout(0));
        assert_eq!((b.policy.stats().too_large, b.policy.stats().files), (1, 2));
        b.chunks = chunks(15, 40, MIB);
        b.feed(b.layout(0));
        assert_eq!((b.policy.stats().files, b.policy.chunks), (2, 1000));
        // 700 more: both older tables go.
        b.chunks = chunks(35, 20, MIB);
        b.feed(b.layout(1));
        assert_eq!((b.policy.stats().files, b.policy.chunks), (1, 700));
    }

    /// A hostile file's tiny chunks bound what one event costs: one access
    /// spanning thousands of chunks is attributed to the first
    /// [`MAX_TOUCHED`], and one release looks at [`MAX_EXAMINED`] chunks,
    /// the next access going on from there.
    #[test]
    fn one_event_does_bounded_work_however_many_chunks() {
        const TINY: u64 = 64;
        let mut b = Bench::bounded(MIB, 64 * MIB, chunks(3, 5000, TINY), 1 << 16);
        // One read over the whole of row group 0: 5,000 chunks.
        let group = 5000 * TINY;
        b.pages(1, 1, (PAGE_SIZE + group).div_ceil(PAGE_SIZE));
        let table = &b.policy.files[&b.held.ids[1]];
        let wanted = (0..5000).filter(|&c| table.is_wanted(c)).count();
        assert!(wanted <= MAX_TOUCHED, "{wanted} columns wanted by one access");
        // Column 4,999 of row group 0 alone: the release from row group 1
        // on looks at 4,096 chunks an event, so it reaches (1, 4999) on the
        // second event.
        let mut b = Bench::bounded(MIB, 64 * MIB, chunks(3, 5000, TINY), 1 << 16);
        let chunk = b.chunks[4999];
        let page = chunk.offset / PAGE_SIZE;
        let event = |b: &Bench| Event::StreamRead { file: b.held.ids[1], offset: chunk.offset, len: chunk.len };
        assert!(b.feed(event(&b)).is_empty(), "not reached in one release");
        let asked: Vec<PageRange> = b.feed(event(&b)).into_iter().flat_map(|r| r.ranges).collect();
        let next = b.chunks[5000 + 4999];
        assert_eq!(asked.first().map(|r| r.start), Some(next.offset / PAGE_SIZE), "{asked:?} (read at page {page})");
    }

    #[test]
    fn a_config_with_a_zero_bound_is_refused() {
        let config = ColumnsConfig { ahead_bytes: 0, ..ColumnsConfig::default() };
        assert_eq!(config.validate(), Err(ColumnsConfigError::Zero("ahead_bytes")));
    }
}
