//! The no-change mode: B-tree traversals of unmodified programs, seen from
//! the daemon.
//!
//! Where kernel observation reports that a program accessed pages of a held
//! file, [`DbWatcher`] recognises SQLite and LMDB files by their first bytes
//! and, for every database page the program touched, reads that page from
//! the page cache (it is there: the program just read it), parses it with
//! the engine's parser and feeds the same [`Traversal`] the adapters use, so
//! descents become `TreeChildEnter` events for the `btree` policy.
//!
//! ```text
//!  PageAccess (eBPF: read or mmap fault) ─ DbWatcher::on_access ─ header seen? (SQLite magic / LMDB meta)
//!                                              └ each DB page touched ─ pread_resident ─ parse_page ─ Traversal ─ TreeChildEnter
//!                                                                                     └ RowidLookahead (SQLite) ─ Pages
//! ```
//!
//! For SQLite the same pages also feed a [`RowidLookahead`]: an index
//! scan's rowid lookups are followed and the table leaves of the rowids
//! ahead asked for, as `Pages` events for the `hints` policy (a table leaf
//! not cached yet when its read is reported is placed by its page number).
//!
//! Looking never causes I/O: every read is `preadv2(RWF_NOWAIT)`
//! ([`crate::sys::pread_resident`]), which returns nothing for a page that is
//! not cached. The read tracepoint can fire while a cold read is still in
//! flight, so a page not cached yet is still reported to the traversal
//! (which needs no bytes to place a child) and looked at again on the file's
//! next access, when the program has its bytes ([`MAX_PENDING`] per file).
//! The header is looked at once per file, once its first page is cached.
//! A SQLite file is often recognised after the program has opened it and
//! descended its trees (observation attached late, or its descriptor was
//! found on a later scan of the process), and SQLite reads those upper pages
//! once and keeps them: so when it recognises one, the watcher first learns
//! the upper pages of its trees that are cached, from the schema's root
//! pages down ([`CATCH_UP_PAGES`] at most, nothing reported).
//! Pages are untrusted input as everywhere in [`crate::btree`]. State is
//! bounded: [`MAX_DATABASES`] files watched (least recently used let go),
//! [`MAX_PAGES_PER_ACCESS`] database pages looked at per access (a long
//! sequential read is not a traversal), and the set of files found not to
//! be databases is cleared past [`MAX_CHECKED_FILES`].

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::rowid::{Lookahead, RowidConfig, RowidLookahead};
use super::{DbPageLayout, Engine, Traversal, lmdb, sqlite};
use crate::event::Event;
use crate::file::{FileId, FileRef, IdMap, IdSet};
use crate::page::{PAGE_SIZE, PageRange};

/// Database files watched at once.
pub const MAX_DATABASES: usize = 64;

/// Database pages looked at per observed access.
pub const MAX_PAGES_PER_ACCESS: u64 = 16;

/// Files remembered as checked (databases or not) before the memory is
/// cleared.
pub const MAX_CHECKED_FILES: usize = 1 << 16;

/// Pages of a SQLite file looked at in the page cache when it is
/// recognised, its trees' roots first (what a program read before it was
/// seen): a 1 M-row table's root and the level below it are ~60 pages, and
/// a cached page costs a few microseconds to look at.
pub const CATCH_UP_PAGES: usize = 128;

/// Interior pages remembered per file (a tree's depth plus a few cursors).
const TRAVERSAL_CAPACITY: usize = 32;

/// How long to wait before looking again at a file whose first page was
/// not cached yet.
const RETRY: Duration = Duration::from_millis(100);

/// Counters of the [`DbWatcher`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WatcherStats {
    /// SQLite files recognised.
    pub sqlite_files: u64,
    /// LMDB files recognised.
    pub lmdb_files: u64,
    /// Database pages read from the cache and parsed.
    pub pages_parsed: u64,
    /// Of those, valid interior pages.
    pub interior_pages: u64,
    /// Pages not looked at: not cached (any more) when we came to them.
    pub not_resident: u64,
    /// Pages not looked at: beyond [`MAX_PAGES_PER_ACCESS`] in one access.
    pub skipped: u64,
    /// Descents reported (`TreeChildEnter` events).
    pub descents: u64,
    /// Table pages asked for ahead of index scans' rowid lookups (`Pages`
    /// events; see [`RowidLookahead`]).
    #[serde(default)]
    pub rowid_pages: u64,
    /// Interior pages learnt from the page cache when a SQLite file was
    /// recognised (the upper pages of its trees a program read unseen).
    #[serde(default)]
    pub caught_up: u64,
}

/// Appends a `Pages` event for the pages `ahead` names, if any.
fn push_pages(stats: &mut WatcherStats, file: FileId, traversal: &Traversal, ahead: &Lookahead, out: &mut Vec<Event>) {
    if let Some(event) = ahead.event(file, traversal.layout()) {
        if let Event::Pages { ranges, .. } = &event {
            stats.rowid_pages += ranges.len() as u64;
        }
        out.push(event);
    }
}

/// What looking at one page found.
enum Looked {
    /// Read from the cache: an interior page, or not one.
    Parsed(Option<super::InteriorPage>),
    /// Not in the cache (not yet, or no longer).
    NotResident,
}

/// The engine's number of database page `index` (counted from 0).
fn page_no(format: Format, index: u64) -> u64 {
    match format {
        Format::Sqlite(_) => index + 1,
        Format::Lmdb(_) => index,
    }
}

/// How the pages of a recognised file are parsed.
#[derive(Clone, Copy, Debug)]
enum Format {
    Sqlite(sqlite::Geometry),
    Lmdb(lmdb::Geometry),
}

#[derive(Debug)]
struct Watched {
    format: Format,
    traversal: Traversal,
    /// SQLite files: the rowid lookups of index scans.
    rowids: Option<Box<RowidLookahead>>,
    last_used: u64,
    /// Pages whose read was reported before their bytes were in the cache
    /// (the tracepoint fires while a cold read is still in flight), looked
    /// at again on the file's next access, oldest first.
    pending: std::collections::VecDeque<u64>,
}

/// Pages per file waiting to be looked at again.
pub const MAX_PENDING: usize = 8;

/// Times a file's first page is looked for at once before backing off to
/// one look per [`RETRY`].
const EAGER_TRIES: u32 = 64;

/// Recognises B-tree database files among observed files and turns the page
/// accesses of unmodified programs into `TreeChildEnter` events.
#[derive(Debug, Default)]
pub struct DbWatcher {
    watched: IdMap<FileId, Watched>,
    not_databases: IdSet<FileId>,
    /// Files whose first page was not cached yet: tries so far, and when to
    /// look again once past [`EAGER_TRIES`].
    later: IdMap<FileId, (u32, Instant)>,
    buf: Vec<u8>,
    clock: u64,
    stats: WatcherStats,
}

impl DbWatcher {
    /// A watcher with nothing recognised yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters.
    pub fn stats(&self) -> WatcherStats {
        self.stats
    }

    /// Files being watched now.
    pub fn watched(&self) -> usize {
        self.watched.len()
    }

    /// Whether `file`'s first bytes were looked at and are no database's.
    pub fn is_not_database(&self, file: FileId) -> bool {
        self.not_databases.contains(&file)
    }

    /// Reports that a program accessed `pages` (4 KiB page indices) of
    /// `file`; appends the descents this completes to `out`. Returns
    /// whether `file` is a database being watched.
    pub fn on_access(&mut self, file: &FileRef, pages: PageRange, out: &mut Vec<Event>) -> bool {
        let id = file.id();
        if self.not_databases.contains(&id) {
            return false;
        }
        self.clock += 1;
        if !self.watched.contains_key(&id) && !self.recognise(file) {
            return false;
        }
        let Some(watched) = self.watched.get_mut(&id) else { return false };
        watched.last_used = self.clock;
        let page_size = u64::from(watched.traversal.layout().page_size());
        let first = pages.start.saturating_mul(PAGE_SIZE) / page_size;
        let end = pages.end.saturating_mul(PAGE_SIZE).div_ceil(page_size);
        if end.saturating_sub(first) > MAX_PAGES_PER_ACCESS {
            self.stats.skipped += end - first - MAX_PAGES_PER_ACCESS;
        }
        let end = end.min(first.saturating_add(MAX_PAGES_PER_ACCESS));
        self.buf.resize(page_size as usize, 0);
        // Pages reported earlier while still being read: their bytes are in
        // by now, most likely (the program has moved on). Interior pages
        // only matter for what comes after, so they are parsed, not reported.
        for _ in 0..watched.pending.len() {
            let Some(index) = watched.pending.pop_front() else { break };
            match Self::look(file, index, page_size, watched.format, &mut self.buf, &mut self.stats) {
                Looked::Parsed(parsed) => {
                    // Its read was reported already (a table leaf's lookup
                    // followed then); only what the bytes teach is taken.
                    if let Some(rowids) = watched.rowids.as_mut()
                        && let Ok(no) = u32::try_from(page_no(watched.format, index))
                        && self.buf.first().is_some_and(|&kind| kind != sqlite::LEAF_TABLE)
                    {
                        let ahead = rowids.on_page(no, &self.buf);
                        push_pages(&mut self.stats, id, &watched.traversal, &ahead, out);
                    }
                    if let Some(interior) = parsed {
                        watched.traversal.learn(page_no(watched.format, index), interior);
                    }
                }
                Looked::NotResident => self.stats.not_resident += 1,
            }
        }
        for index in first..end {
            let no = u32::try_from(page_no(watched.format, index)).ok();
            let parsed = match Self::look(file, index, page_size, watched.format, &mut self.buf, &mut self.stats) {
                Looked::Parsed(parsed) => {
                    if let Some(rowids) = watched.rowids.as_mut()
                        && let Some(no) = no
                    {
                        let ahead = rowids.on_page(no, &self.buf);
                        push_pages(&mut self.stats, id, &watched.traversal, &ahead, out);
                    }
                    parsed
                }
                Looked::NotResident => {
                    if let Some(rowids) = watched.rowids.as_mut()
                        && let Some(no) = no
                    {
                        let ahead = rowids.on_page_number(no);
                        push_pages(&mut self.stats, id, &watched.traversal, &ahead, out);
                    }
                    if watched.pending.len() >= MAX_PENDING {
                        watched.pending.pop_front();
                        self.stats.not_resident += 1;
                    }
                    watched.pending.push_back(index);
                    None
                }
            };
            if let Some(event) = watched.traversal.on_read(page_no(watched.format, index), parsed) {
                self.stats.descents += 1;
                out.push(event);
            }
        }
        // Table interior pages the rowid lookahead asked for, taken in as
        // soon as their prefetch brought them into the cache.
        if let Some(rowids) = watched.rowids.as_mut() {
            let ahead = rowids.take_in_waiting(&mut self.buf, |no, buf| {
                let offset = u64::from(no.saturating_sub(1)).saturating_mul(page_size);
                matches!(crate::sys::pread_resident(file.as_fd(), buf, offset), Ok(Some(n)) if n == buf.len())
            });
            push_pages(&mut self.stats, id, &watched.traversal, &ahead, out);
        }
        true
    }

    /// Reads database page `index` (from 0) if it is cached and parses it.
    fn look(
        file: &FileRef,
        index: u64,
        page_size: u64,
        format: Format,
        buf: &mut [u8],
        stats: &mut WatcherStats,
    ) -> Looked {
        match crate::sys::pread_resident(file.as_fd(), buf, index.saturating_mul(page_size)) {
            Ok(Some(n)) if n == buf.len() => {}
            _ => return Looked::NotResident,
        }
        stats.pages_parsed += 1;
        let no = page_no(format, index);
        let parsed = match format {
            Format::Sqlite(geometry) => {
                u32::try_from(no).ok().and_then(|no| sqlite::parse_page(buf, no, &geometry).ok())
            }
            Format::Lmdb(geometry) => lmdb::parse_page(buf, no, &geometry).ok(),
        };
        if parsed.is_some() {
            stats.interior_pages += 1;
        }
        Looked::Parsed(parsed)
    }

    /// Looks at `file`'s first bytes (once they are cached); true when it is
    /// now watched.
    fn recognise(&mut self, file: &FileRef) -> bool {
        let id = file.id();
        let now = Instant::now();
        if self.later.get(&id).is_some_and(|(tries, at)| *tries >= EAGER_TRIES && now < *at) {
            return false;
        }
        if self.not_databases.len() + self.later.len() >= MAX_CHECKED_FILES {
            self.not_databases.clear();
            self.later.clear();
        }
        let mut head = [0u8; 152];
        let n = match crate::sys::pread_resident(file.as_fd(), &mut head, 0) {
            Ok(Some(n)) => n,
            Ok(None) => {
                let tries = self.later.get(&id).map_or(0, |(tries, _)| *tries);
                self.later.insert(id, (tries.saturating_add(1), now + RETRY));
                return false;
            }
            Err(_) => {
                self.not_databases.insert(id);
                return false;
            }
        };
        self.later.remove(&id);
        let Some((format, layout)) = Self::format_of(&head[..n]) else {
            self.not_databases.insert(id);
            return false;
        };
        match format {
            Format::Sqlite(_) => self.stats.sqlite_files += 1,
            Format::Lmdb(_) => self.stats.lmdb_files += 1,
        }
        if self.watched.len() >= MAX_DATABASES
            && let Some(oldest) = self.watched.iter().min_by_key(|(_, w)| w.last_used).map(|(id, _)| *id)
        {
            self.watched.remove(&oldest);
        }
        let traversal = Traversal::new(id, layout, TRAVERSAL_CAPACITY);
        let rowids = match format {
            Format::Sqlite(geometry) => Some(Box::new(RowidLookahead::new(geometry, RowidConfig::default()))),
            Format::Lmdb(_) => None,
        };
        let mut watched = Watched { format, traversal, rowids, last_used: self.clock, pending: Default::default() };
        if let Format::Sqlite(geometry) = format {
            Self::catch_up(file, &mut watched, geometry, &mut self.buf, &mut self.stats);
        }
        self.watched.insert(id, watched);
        true
    }

    /// Learns the upper pages of a SQLite file's trees that are in the page
    /// cache, from its schema down, as if they had been seen read: a file
    /// is recognised at its first observed access, and by then the program
    /// may have opened it and descended its trees already (observation
    /// attached late, or the process's descriptors found only on a later
    /// scan), and SQLite reads those pages once and keeps them. Without
    /// them an index scan's rowids cannot be mapped to table leaves, nor
    /// its next index leaf placed, until the program happens to read them
    /// again. Only cached pages are looked at, at most [`CATCH_UP_PAGES`],
    /// roots first; interior pages are learnt, nothing is reported.
    fn catch_up(
        file: &FileRef,
        watched: &mut Watched,
        geometry: sqlite::Geometry,
        buf: &mut Vec<u8>,
        stats: &mut WatcherStats,
    ) {
        let page_size = u64::from(geometry.page_size);
        buf.resize(page_size as usize, 0);
        if !matches!(crate::sys::pread_resident(file.as_fd(), buf, 0), Ok(Some(n)) if n == buf.len()) {
            return;
        }
        let Ok(roots) = sqlite::schema_roots(buf, &geometry) else { return };
        let mut queue: std::collections::VecDeque<u64> = roots.into_iter().map(u64::from).collect();
        let mut looked = 0;
        while let Some(no) = queue.pop_front()
            && looked < CATCH_UP_PAGES
        {
            looked += 1;
            // Counted as caught up only, not as pages the program read.
            let mut looking = WatcherStats::default();
            let Looked::Parsed(Some(interior)) = Self::look(file, no - 1, page_size, watched.format, buf, &mut looking)
            else {
                continue;
            };
            stats.caught_up += 1;
            if let (Some(rowids), Ok(no)) = (watched.rowids.as_mut(), u32::try_from(no)) {
                rowids.on_page(no, buf);
            }
            for &child in &interior.children {
                if looked + queue.len() >= CATCH_UP_PAGES {
                    break;
                }
                queue.push_back(child);
            }
            watched.traversal.learn(no, interior);
        }
    }

    /// The format of a file starting with `head`, if it is a database.
    fn format_of(head: &[u8]) -> Option<(Format, DbPageLayout)> {
        if let Ok(header) = sqlite::Header::parse(head) {
            // The header's page count may be stale by the time pages are
            // read (the file grows): do not bound children by it.
            let geometry = sqlite::Geometry::new(header.page_size, header.reserved, None).ok()?;
            let layout = DbPageLayout::new(Engine::Sqlite, header.page_size).ok()?;
            return Some((Format::Sqlite(geometry), layout));
        }
        if let Ok(meta) = lmdb::Meta::parse(head) {
            let geometry = lmdb::Geometry::new(meta.page_size, None).ok()?;
            return Some((Format::Lmdb(geometry), meta.layout().ok()?));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    use crate::testing::scattered_sqlite_db as real_db;

    #[test]
    fn a_real_sqlite_scan_read_from_the_cache_yields_descents() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(db) = real_db(dir.path()) else {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        };
        let file = FileRef::open(&db).expect("open");
        // The whole file is cached (just written): read every page in order
        // of a full scan, as SQLite would, by walking the tree ourselves.
        let bytes = std::fs::read(&db).expect("read");
        let page_size = 4096usize;
        let geometry = sqlite::Geometry::new(4096, 0, None).expect("geometry");
        // Root of table t is page 2.
        let mut order = Vec::new();
        let mut stack = vec![2u64];
        while let Some(page) = stack.pop() {
            order.push(page);
            let image = &bytes[(page as usize - 1) * page_size..page as usize * page_size];
            if let Ok(interior) = sqlite::parse_page(image, page as u32, &geometry) {
                stack.extend(interior.children.iter().rev());
            }
        }
        assert!(order.len() > 100, "{} pages", order.len());
        let mut watcher = DbWatcher::new();
        let mut events = Vec::new();
        // The header is read first, as SQLite does on open.
        watcher.on_access(&file, PageRange::new(0, 1), &mut events);
        for page in &order {
            watcher.on_access(&file, PageRange::new(page - 1, *page), &mut events);
        }
        let stats = watcher.stats();
        assert_eq!(stats.sqlite_files, 1);
        assert!(stats.interior_pages >= 3, "a root over interior pages: {stats:?}");
        // Every page but the root is entered from a parent.
        assert_eq!(events.len(), order.len() - 1, "{stats:?}");
        for (event, page) in events.iter().zip(&order[1..]) {
            let Event::TreeChildEnter { children, position, .. } = event else { panic!("{event:?}") };
            assert_eq!(children[*position as usize], page - 1, "child as a 4 KiB page index");
        }
    }

    /// A page an index scan reads (see [`index_scan`]).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum ScanRead {
        /// An index page (interior or leaf).
        Index(u32),
        /// A table page read for the first time (interior or leaf).
        Table(u32),
    }

    /// A rowid table with an index, built by the sqlite3 shell in `dir`,
    /// and the pages a scan of the index from its start reads, in order,
    /// through its first `index_pages` index pages: each index page, then
    /// the table pages each of its rowids' lookups reads for the first time
    /// (SQLite keeps what it read in its own cache). `None` without the
    /// shell.
    fn index_scan(dir: &std::path::Path, index_pages: usize) -> Option<(std::path::PathBuf, Vec<ScanRead>)> {
        let db = dir.join("i.db");
        let sql = "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);\
                   CREATE INDEX t_k ON t(k);\
                   WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE i < 10000)\
                   INSERT INTO t(k, v) SELECT hex(randomblob(8)), randomblob(300) FROM c;";
        let built = std::process::Command::new("sqlite3").arg(&db).arg(sql).output();
        if !built.is_ok_and(|out| out.status.success()) {
            return None;
        }
        let root = |name: &str| -> u32 {
            let sql = format!("SELECT rootpage FROM sqlite_schema WHERE name = '{name}';");
            let out = std::process::Command::new("sqlite3").arg(&db).arg(sql).output().expect("sqlite3");
            String::from_utf8_lossy(&out.stdout).trim().parse().expect("root page")
        };
        let (table_root, index_root) = (root("t"), root("t_k"));
        let bytes = std::fs::read(&db).expect("read");
        let geometry = sqlite::Geometry::new(4096, 0, None).expect("geometry");
        let page = |n: u32| &bytes[(n as usize - 1) * 4096..n as usize * 4096];
        // The index's pages in key order (interior pages before their
        // children), as a scan from its start reads them.
        let mut index_order = Vec::new();
        let mut stack = vec![index_root];
        while let Some(n) = stack.pop() {
            index_order.push(n);
            if let Ok(interior) = sqlite::parse_page(page(n), n, &geometry) {
                stack.extend(interior.children.iter().rev().map(|&c| c as u32));
            }
        }
        let mut seen = HashSet::new();
        let mut reads = Vec::new();
        for &n in index_order.iter().take(index_pages) {
            reads.push(ScanRead::Index(n));
            let Ok(rowids) = sqlite::index_leaf_rowids(page(n), n, &geometry) else { continue };
            for rowid in rowids.into_iter().flatten() {
                let mut at = table_root;
                loop {
                    if seen.insert(at) {
                        reads.push(ScanRead::Table(at));
                    }
                    match sqlite::parse_table_interior(page(at), at, &geometry) {
                        Ok(interior) => at = interior.child_for(rowid).expect("child"),
                        Err(_) => break,
                    }
                }
            }
        }
        Some((db, reads))
    }

    /// Feeds `reads` to a new watcher as accesses of `db` (after page 1,
    /// when `header`) and returns how many of the table pages read were
    /// asked for ahead, of how many, and the watcher's counters.
    fn watch_scan(db: &std::path::Path, reads: &[ScanRead], header: bool) -> (usize, usize, WatcherStats) {
        let file = FileRef::open(db).expect("open");
        let mut watcher = DbWatcher::new();
        let mut events = Vec::new();
        let mut read = |n: u32, events: &mut Vec<Event>| {
            watcher.on_access(&file, PageRange::new(u64::from(n) - 1, u64::from(n)), events);
        };
        if header {
            read(1, &mut events);
        }
        let mut table_reads = Vec::new();
        for r in reads {
            match *r {
                ScanRead::Index(n) => read(n, &mut events),
                ScanRead::Table(n) => {
                    table_reads.push(n);
                    read(n, &mut events);
                }
            }
        }
        let asked: HashSet<u64> = events
            .iter()
            .filter_map(|e| match e {
                Event::Pages { ranges, .. } => Some(ranges.iter().map(|r| r.start).collect::<Vec<_>>()),
                _ => None,
            })
            .flatten()
            .collect();
        let covered = table_reads.iter().filter(|&&n| asked.contains(&(u64::from(n) - 1))).count();
        (covered, table_reads.len(), watcher.stats())
    }

    /// An unmodified program's index scan over a rowid table, seen as page
    /// accesses: the watcher follows its rowid lookups and asks, as `Pages`
    /// events, for the table leaves it then reads.
    #[test]
    fn an_index_scans_rowid_lookups_are_asked_for_ahead() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((db, reads)) = index_scan(dir.path(), 8) else {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        };
        let (covered, table_reads, stats) = watch_scan(&db, &reads, true);
        assert!(table_reads > 200, "{table_reads} table pages read");
        assert!(covered * 10 >= table_reads * 8, "{covered} of {table_reads} table pages asked ahead: {stats:?}");
        assert!(stats.rowid_pages as usize >= covered);
    }

    /// The same scan seen from its second index leaf on, as when
    /// observation attached late or the program's descriptor was found
    /// late: the database's header, its trees' upper pages and the first
    /// leaf's lookups were read unseen, and SQLite never reads those upper
    /// pages again. The watcher learns them from the page cache when it
    /// recognises the file and still asks for the table leaves ahead.
    #[test]
    fn a_scan_seen_from_its_middle_is_still_asked_for_ahead() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some((db, reads)) = index_scan(dir.path(), 10) else {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        };
        // Unseen: everything up to the second index leaf.
        let leaves: Vec<usize> = reads
            .iter()
            .enumerate()
            .filter(|(i, r)| {
                matches!(r, ScanRead::Index(_)) && reads.get(i + 1).is_some_and(|n| matches!(n, ScanRead::Table(_)))
            })
            .map(|(i, _)| i)
            .collect();
        assert!(leaves.len() >= 5, "{leaves:?}");
        let seen = &reads[leaves[1]..];
        assert!(seen.iter().all(|r| match r {
            ScanRead::Table(n) => *n > 1,
            ScanRead::Index(_) => true,
        }));
        let (covered, table_reads, stats) = watch_scan(&db, seen, false);
        assert!(stats.caught_up >= 3, "the roots and the levels below them: {stats:?}");
        assert!(table_reads > 200, "{table_reads} table pages read");
        assert!(covered * 10 >= table_reads * 8, "{covered} of {table_reads} table pages asked ahead: {stats:?}");
    }

    #[test]
    fn an_uncached_page_is_never_read_and_is_looked_at_again_later() {
        let dir = tempfile::tempdir().expect("tempdir");
        let Some(db) = real_db(dir.path()) else {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        };
        let file = FileRef::open(&db).expect("open");
        let mut watcher = DbWatcher::new();
        let mut events = Vec::new();
        watcher.on_access(&file, PageRange::new(0, 1), &mut events);
        assert_eq!(watcher.watched(), 1);
        // Evict everything, then report a read of the root (page 2).
        crate::cache::evict(&file).expect("evict");
        let resident = |range: PageRange| crate::cache::uptodate_pages(&file, &[range]).expect("mincore");
        if resident(PageRange::new(1, 2)) != 0 {
            crate::testing::skip("the page cache kept the file's pages after fadvise(DONTNEED)");
            return;
        }
        watcher.on_access(&file, PageRange::new(1, 2), &mut events);
        assert_eq!(resident(PageRange::new(1, 2)), 0, "looking must not read the page in");
        assert_eq!(watcher.stats().interior_pages, 0);
        // The program gets its bytes; the next access looks at the root again
        // and then places a read of one of its children.
        let mut root = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(file.file(), &mut root, 4096).expect("read root");
        let geometry = sqlite::Geometry::new(4096, 0, None).expect("geometry");
        let children = sqlite::parse_page(&root, 2, &geometry).expect("root is interior").children;
        watcher.on_access(&file, PageRange::new(children[1] - 1, children[1]), &mut events);
        assert_eq!(watcher.stats().interior_pages, 1, "{:?}", watcher.stats());
        let Some(Event::TreeChildEnter { position, .. }) = events.last() else { panic!("no descent: {events:?}") };
        assert_eq!(*position, 1);
    }

    /// An LMDB data file laid out as LMDB lays it out (two meta pages, a
    /// branch page, leaves), written here: LMDB reads through a mapping, so
    /// its signal is faults, reported like reads.
    #[test]
    fn an_lmdb_file_is_recognised_by_its_meta_page() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("data.mdb");
        let leaves: Vec<u64> = vec![9, 4, 7, 3, 8, 5];
        let mut image = Vec::new();
        image.extend(lmdb::tests::meta(4096, 9, 2));
        image.extend(lmdb::tests::meta(4096, 9, 2));
        image.extend(lmdb::tests::branch(4096, 2, &leaves));
        for page in 3..=9u64 {
            let mut leaf = vec![0u8; 4096];
            leaf[..8].copy_from_slice(&page.to_le_bytes());
            leaf[10..12].copy_from_slice(&lmdb::P_LEAF.to_le_bytes());
            image.extend(leaf);
        }
        std::fs::write(&path, &image).expect("write");
        let file = FileRef::open(&path).expect("open");
        let mut watcher = DbWatcher::new();
        let mut events = Vec::new();
        watcher.on_access(&file, PageRange::new(0, 1), &mut events);
        assert_eq!(watcher.stats().lmdb_files, 1);
        watcher.on_access(&file, PageRange::new(2, 3), &mut events);
        for &leaf in &leaves {
            watcher.on_access(&file, PageRange::new(leaf, leaf + 1), &mut events);
        }
        assert_eq!(events.len(), leaves.len());
        for (i, event) in events.iter().enumerate() {
            let Event::TreeChildEnter { parent, children, position, .. } = event else { panic!("{event:?}") };
            // LMDB numbers pages from 0: page N is 4 KiB page N.
            assert_eq!((*parent, &children[..], *position as usize), (2, &leaves[..], i));
        }
    }

    #[test]
    fn other_files_and_uncached_pages_are_passed_over() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("plain");
        std::fs::write(&path, vec![7u8; 8192]).expect("write");
        let file = FileRef::open(&path).expect("open");
        let mut watcher = DbWatcher::new();
        let mut events = Vec::new();
        watcher.on_access(&file, PageRange::new(0, 2), &mut events);
        assert!(events.is_empty());
        assert_eq!(watcher.watched(), 0);
        assert!(watcher.not_databases.contains(&file.id()));

        let Some(db) = real_db(dir.path()) else {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        };
        let file = FileRef::open(&db).expect("open");
        watcher.on_access(&file, PageRange::new(0, 1), &mut events);
        assert_eq!(watcher.watched(), 1);
        // A huge access is bounded.
        watcher.on_access(&file, PageRange::new(0, 1000), &mut events);
        assert!(watcher.stats().skipped > 0);
        assert!(watcher.stats().pages_parsed <= 1 + MAX_PAGES_PER_ACCESS);
    }
}
