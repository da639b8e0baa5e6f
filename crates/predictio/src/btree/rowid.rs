//! Rowid lookups ahead of a SQLite index scan.
//!
//! A query such as `SELECT v FROM t WHERE k >= ? ORDER BY k LIMIT 1000`
//! over a rowid table with an index on `k` walks the index's leaves in key
//! order and, for each entry, looks its rowid up in the table's B-tree: a
//! read of a table leaf at a random place in the file, one after another.
//! Prefetching the index's next leaves (the `btree` policy) saves a few of
//! those reads; the rowid lookups are most of them. But the rows to be
//! fetched next are written in the index leaf just read: each index cell
//! ends with its rowid. [`RowidLookahead`] takes the pages an observer
//! (the SQLite adapter) sees read and answers with the table leaves those
//! rowids live in, in scan order, ahead of the scan:
//!
//! ```text
//!  table interior page read ─ parse_table_interior ─ keys and children kept (bounded)
//!  index leaf read ──────────── index_leaf_rowids ── the cells' rowids, in key order
//!  table leaf read ─ where the scan is: the next rowid of the index leaf whose leaf it is
//!                    └ after `confirm` lookups in order, the leaves of the next `window`
//!                      rowids (mapped through the kept interior pages), window doubling
//! ```
//!
//! - **Only a confirmed scan costs anything.** An index leaf read while no
//!   scan is followed is kept unparsed until a second table leaf is read
//!   after it: a point read through an index reads one, so its leaf's
//!   cells are never parsed (that parse made cold point reads through an
//!   index ~5 % slower). A point read and a covering index (no table reads)
//!   request nothing; the window opens once [`RowidConfig::confirm`] lookups in a
//!   row were each of the next rowid of the index leaf (or [`SKIP`] more),
//!   so a `LIMIT 1` wastes nothing, nor do point reads that land anywhere
//!   in a cached index leaf. A scan goes on into the next index leaf only
//!   from the end of the one before.
//! - **The window grows** ([`RowidConfig::first_window`], doubling each time the
//!   scan has used half of it, up to [`RowidConfig::max_window`] rowids ahead) and carries
//!   over to the next index leaf of the scan, so that a long scan keeps the
//!   device's queue full and a scan that stops wastes at most about as many
//!   leaves as it read.
//! - **A rowid whose path goes through a table interior page not seen yet**
//!   asks for that interior page instead (the lookup needs it too); the
//!   rowid is mapped once the page has been read.
//! - **Which table an index's rowids belong to** is learnt from the first
//!   table leaf read after one of its leaves: the table is the tree (top
//!   page) that leaf hangs from.
//!
//! Everything here is parsed from bytes the engine itself read; a page that
//! does not parse is passed over, and a stale or forged page costs at most
//! one window of wasted prefetch, never a wrong answer. Pure logic, bounded
//! memory ([`MAX_TABLE_PAGES`] interior pages, [`MAX_PARENTS`] parent
//! links), no I/O.

use std::collections::HashMap;

use super::DbPageLayout;
use super::sqlite::{self, Geometry};
use crate::event::Event;
use crate::file::FileId;
use crate::page::PageRange;

/// How far ahead a [`RowidLookahead`] asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowidConfig {
    /// Lookups that must follow the index leaf's order before anything is
    /// requested (3: two point reads from one cached index leaf land a few
    /// cells apart now and then; three in a row almost never do).
    pub confirm: u32,
    /// Rowids looked up ahead once a scan is confirmed (8).
    pub first_window: usize,
    /// Most rowids looked up ahead (256).
    pub max_window: usize,
}

impl Default for RowidConfig {
    fn default() -> Self {
        Self { confirm: 3, first_window: 8, max_window: 256 }
    }
}
/// Table interior pages kept at most (their keys and children): a 1 M-row
/// table of 8 KiB pages has about 30.
pub const MAX_TABLE_PAGES: usize = 4096;
/// Rowids a continuing scan may have looked up without a read (their table
/// leaf was in SQLite's own cache) between two lookups it is seen making.
pub const SKIP: usize = 2;
/// Waiting table interior pages looked for in the cache per
/// [`RowidLookahead::take_in_waiting`].
pub const WAITING_LOOKS: usize = 8;
/// Table interior pages remembered as asked for and not seen yet.
pub const MAX_WAITING: usize = 64;
/// Child-to-parent links kept at most (one per child of every interior page
/// seen, table or index).
pub const MAX_PARENTS: usize = 1 << 20;

/// Interior pages kept unlinked at most, before the first scan through an index.
pub const MAX_UNLINKED: usize = MAX_PARENTS / 64;

/// Bytes of table interior pages kept unparsed at most, before the first
/// scan through an index (past them, pages are parsed as they come).
pub const MAX_UNPARSED_BYTES: usize = 2 << 20;

/// Maps keyed by database page number with a multiplicative hash: page
/// numbers are not chosen by an adversary who gains by colliding them (a
/// crafted file costs at most its own lookups some speed), and SipHash made
/// linking the ~700 children of each table interior page a point read
/// brings in cost more than the read's own parsing.
type PageMap<V> = HashMap<u32, V, std::hash::BuildHasherDefault<PageHasher>>;

/// The hasher of [`PageMap`] (Fibonacci hashing of one integer).
#[derive(Default)]
struct PageHasher(u64);

impl std::hash::Hasher for PageHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = (u64::from(n) ^ self.0).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// A table interior page: child `i` holds the rowids up to `keys[i]`, the
/// last child those above the last key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableInterior {
    /// Keys in order, one per cell.
    pub keys: Vec<i64>,
    /// Children (database page numbers), one more than the keys.
    pub children: Vec<u32>,
}

impl TableInterior {
    /// The child holding `rowid`.
    pub fn child_for(&self, rowid: i64) -> Option<u32> {
        let i = self.keys.partition_point(|&key| key < rowid);
        self.children.get(i).copied()
    }
}

/// What [`RowidLookahead`] wants fetched: database page numbers, in the
/// order the scan will read them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Lookahead {
    /// Table leaves of the rowids ahead.
    pub leaves: Vec<u32>,
    /// Table interior pages the next rowids' paths need and that were not
    /// seen yet.
    pub interiors: Vec<u32>,
    /// The rest of the table's level below its top, not seen yet, asked for
    /// once, after the leaves (see [`MAX_LEVEL_BYTES`]).
    pub level: Vec<u32>,
}

impl Lookahead {
    /// Nothing to fetch.
    pub fn is_empty(&self) -> bool {
        self.leaves.is_empty() && self.interiors.is_empty() && self.level.is_empty()
    }

    /// The 4 KiB pages of `file` (laid out as `layout`) that this names, as
    /// one `Pages` event for the `hints` policy; `None` when it names
    /// nothing.
    pub fn event(&self, file: FileId, layout: &DbPageLayout) -> Option<Event> {
        let ranges: Vec<PageRange> = self
            .interiors
            .iter()
            .chain(&self.leaves)
            .chain(&self.level)
            .filter_map(|&page| layout.page_range(u64::from(page)))
            .collect();
        (!ranges.is_empty()).then(|| Event::Pages { file, ranges: ranges.into() })
    }
}

/// Counters of a [`RowidLookahead`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowidStats {
    /// Index leaves whose rowids were read.
    pub index_leaves: u64,
    /// Rowid lookups the scan was seen to make in index order.
    pub followed: u64,
    /// Table leaves asked for ahead of the scan.
    pub leaves_ahead: u64,
    /// Table interior pages asked for because a path needed them.
    pub interiors_ahead: u64,
    /// Table interior pages asked for as the rest of their level.
    pub level_ahead: u64,
}

/// Most bytes of a table's level below its top asked for at once. A scan
/// through an index looks its rowids up all over the table, so the first
/// path that needs a page of that level not seen yet will be followed by
/// paths through most of the others: the rest of the level is asked for
/// then, in one burst after the leaves of the window, rather than a page
/// at a time, each a round trip to the device the rowids behind it wait
/// for. A table whose level is larger is left to the paths.
pub const MAX_LEVEL_BYTES: u64 = 1 << 20;

/// Scans through an index whose lengths (lookups followed) are remembered,
/// to bound how far ahead the next one asks.
pub const SCAN_HISTORY: usize = 8;

/// Table leaf reads after an unparsed index leaf that make it a scan's
/// (see [`Deferred`]).
const DEFER_LOOKUPS: usize = 2;

/// An index leaf read while no scan was followed, with the table leaves
/// read since: parsed (and those lookups followed) only at the
/// [`DEFER_LOOKUPS`]th, which a point read never makes.
#[derive(Debug)]
struct Deferred {
    page_no: u32,
    bytes: Box<[u8]>,
    table_leaves: Vec<u32>,
}

/// The index leaf a scan is in, and where in it.
#[derive(Debug)]
struct IndexLeaf {
    /// The top page of its index tree.
    index_top: u32,
    rowids: Vec<Option<i64>>,
    /// The cell whose rowid was looked up last.
    position: Option<usize>,
    /// Cells up to which the leaves were asked for.
    asked_to: usize,
    /// Which cells' leaves were asked for.
    asked: Vec<bool>,
    /// Some cell before `asked_to` waits for an interior page.
    pending: bool,
}

/// Follows a SQLite index scan's rowid lookups and predicts the next ones
/// (see the module docs). One per database file.
#[derive(Debug)]
pub struct RowidLookahead {
    config: RowidConfig,
    geometry: Geometry,
    tables: PageMap<TableInterior>,
    /// Each child page's parent, for table and index interior pages seen
    /// (from the first scan through an index on: see [`Self::link`]).
    parents: PageMap<u32>,
    /// Interior pages seen before any scan through an index, with their
    /// children, not linked yet: a file read only through its rowids, or
    /// through an index one row at a time, never needs the links, and
    /// making one per child of every interior page a point read brings in
    /// cost more than the rest of following it.
    unlinked: Vec<(u32, Box<[u32]>)>,
    /// Children in [`Self::unlinked`], held to [`MAX_PARENTS`] with the links.
    unlinked_children: usize,
    /// Table interior pages seen before any scan through an index, as
    /// read (at most [`MAX_UNPARSED_BYTES`]): parsed, kept in
    /// [`Self::tables`] and linked when the first scan starts. Point reads
    /// through an index bring in a new table interior page with most
    /// lookups for a while, and parsing each one's few hundred cells cost
    /// more than the rest of following them.
    unparsed: Vec<(u32, Box<[u8]>)>,
    /// Bytes in [`Self::unparsed`].
    unparsed_bytes: usize,
    /// A scan through an index was seen (or may be starting, for an
    /// observer that reports reads by page number): links are made as
    /// pages come.
    linking: bool,
    /// Index tree (top page) → table tree (top page).
    tables_of: HashMap<u32, u32>,
    /// Per table tree: how many levels of interior pages lie above its
    /// leaves (1: the top's children are leaves).
    depth: HashMap<u32, u32>,
    leaf: Option<IndexLeaf>,
    /// An index leaf not parsed yet (see [`Deferred`]).
    deferred: Option<Deferred>,
    /// Table interior pages asked for and not seen yet (at most
    /// [`MAX_WAITING`]).
    waiting: Vec<u32>,
    /// One of them was seen since the last [`Self::resume`].
    taken_in: bool,
    /// Table trees (top pages) whose level below the top was asked for.
    level_asked: Vec<u32>,
    /// In-order lookups seen in the current scan.
    confirmed: u32,
    window: usize,
    /// Rows the current scan has looked up (cells of its index leaves it
    /// passed, those SQLite found cached included).
    scan_rows: usize,
    /// Rows the last [`SCAN_HISTORY`] scans looked up, most recent last: a
    /// scan asks no further ahead than the longest of them reached (a
    /// program's `LIMIT 100` pages each read 100 rows), until it is longer.
    lengths: std::collections::VecDeque<usize>,
    stats: RowidStats,
}

impl RowidLookahead {
    /// Follows a file of this geometry.
    pub fn new(geometry: Geometry, config: RowidConfig) -> Self {
        Self {
            config: RowidConfig { confirm: config.confirm.max(1), first_window: config.first_window.max(1), ..config },
            geometry,
            tables: PageMap::default(),
            parents: PageMap::default(),
            unlinked: Vec::new(),
            unlinked_children: 0,
            unparsed: Vec::new(),
            unparsed_bytes: 0,
            linking: false,
            tables_of: HashMap::new(),
            depth: HashMap::new(),
            leaf: None,
            deferred: None,
            waiting: Vec::new(),
            taken_in: false,
            level_asked: Vec::new(),
            confirmed: 0,
            window: 0,
            scan_rows: 0,
            lengths: std::collections::VecDeque::new(),
            stats: RowidStats::default(),
        }
    }

    /// Takes the file's geometry anew (its page count changed; the page
    /// size is the same, or the caller starts a new lookahead).
    pub fn set_geometry(&mut self, geometry: Geometry) {
        self.geometry = geometry;
    }

    /// Counters.
    pub fn stats(&self) -> RowidStats {
        self.stats
    }

    /// Takes database page `page_no`, just read, with its bytes (one whole
    /// page); returns what to fetch ahead of the scan, if anything.
    pub fn on_page(&mut self, page_no: u32, bytes: &[u8]) -> Lookahead {
        let header = if page_no == 1 { sqlite::HEADER_SIZE } else { 0 };
        match bytes.get(header).copied() {
            Some(sqlite::INTERIOR_TABLE) => {
                if let Some(i) = self.waiting.iter().position(|&w| w == page_no) {
                    self.waiting.swap_remove(i);
                    self.taken_in = true;
                }
                if self.linking || !self.keep_unparsed(page_no, bytes) {
                    self.take_table_interior(page_no, bytes);
                }
                Lookahead::default()
            }
            Some(sqlite::INTERIOR_INDEX) => {
                // A descent through an index: the unparsed leaf's query is
                // over (a scan in its leaf reads no index interior page).
                self.deferred = None;
                if let Ok(interior) = sqlite::parse_page(bytes, page_no, &self.geometry) {
                    let children: Vec<u32> = interior.children.iter().filter_map(|&c| u32::try_from(c).ok()).collect();
                    self.link(page_no, &children);
                }
                Lookahead::default()
            }
            Some(sqlite::LEAF_INDEX) => self.on_index_leaf(page_no, bytes),
            Some(sqlite::LEAF_TABLE) => self.on_table_leaf(page_no),
            _ => Lookahead::default(),
        }
    }

    /// Takes the end of the reader's transaction (SQLite's connection let
    /// go of its lock on the file): the scan followed, if any, and the index
    /// leaf not parsed yet are over, so that the lookups of the next
    /// statement (point reads through an index whose leaf SQLite had
    /// cached, each reading one table leaf) are not taken for a scan's.
    /// What was learnt of the trees is kept.
    pub fn end_of_transaction(&mut self) {
        self.deferred = None;
        self.leaf = None;
        self.end_scan();
    }

    /// Ends the scan followed, if any: its length is remembered (when it was
    /// one, confirmed) and the next starts from nothing.
    fn end_scan(&mut self) {
        if self.confirmed >= self.config.confirm && self.scan_rows > 0 {
            if self.lengths.len() >= SCAN_HISTORY {
                self.lengths.pop_front();
            }
            self.lengths.push_back(self.scan_rows);
        }
        self.confirmed = 0;
        self.window = 0;
        self.scan_rows = 0;
    }

    /// How many rowids past the scan's current row it may ask for: as many
    /// as the longest recent scan read beyond it (with an eighth to spare),
    /// or any number once it is longer than they were or none is known.
    fn rows_left(&self) -> usize {
        match self.lengths.iter().max() {
            Some(&longest) => {
                let cap = longest + longest / 8 + SKIP;
                if self.scan_rows < cap { cap - self.scan_rows } else { usize::MAX }
            }
            None => usize::MAX,
        }
    }

    /// Takes a read of database page `page_no` whose bytes are not at hand
    /// (an observer that sees the read before the page is cached): a page
    /// known to be a leaf of a learnt table tree (its path and the tree's
    /// depth say so) is taken as [`Self::on_page`] takes a table leaf;
    /// anything else is passed over.
    pub fn on_page_number(&mut self, page_no: u32) -> Lookahead {
        if self.deferred.is_some() {
            // Which page this is, only the links can say: a scan may be
            // starting after the unparsed index leaf.
            self.start_linking();
        }
        let (top, levels) = self.top_of(page_no);
        let under_table = self.parents.get(&page_no).is_some_and(|parent| self.tables.contains_key(parent));
        if levels > 0 && under_table && self.depth.get(&top) == Some(&levels) {
            return self.on_table_leaf(page_no);
        }
        Lookahead::default()
    }

    /// Table interior pages this asked for and has not seen yet: an
    /// observer that can look at cached pages without waiting hands their
    /// bytes to [`Self::on_page`] once the prefetch brought them in, and
    /// then [`Self::resume`]s, so that the rowids waiting for them are
    /// mapped before the scan reaches them rather than as it does.
    pub fn waiting(&self) -> &[u32] {
        &self.waiting
    }

    /// Takes in up to [`WAITING_LOOKS`] of the [`Self::waiting`] pages that
    /// `read_cached(page, buf)` finds in the page cache (it fills `buf`, one
    /// database page, and says whether it could without waiting: it must
    /// never read from storage), then [`Self::resume`]s.
    pub fn take_in_waiting(
        &mut self,
        buf: &mut [u8],
        mut read_cached: impl FnMut(u32, &mut [u8]) -> bool,
    ) -> Lookahead {
        if self.waiting.is_empty() {
            return Lookahead::default();
        }
        let waiting: Vec<u32> = self.waiting.iter().take(WAITING_LOOKS).copied().collect();
        for page in waiting {
            if read_cached(page, buf) {
                self.on_page(page, buf);
            }
        }
        self.resume()
    }

    /// Asks again for the rowids ahead of the scan that waited for interior
    /// pages (after [`Self::waiting`] pages were taken in).
    pub fn resume(&mut self) -> Lookahead {
        if !std::mem::take(&mut self.taken_in) {
            return Lookahead::default();
        }
        let Some(leaf) = self.leaf.as_ref() else { return Lookahead::default() };
        if !leaf.pending || self.confirmed < self.config.confirm {
            return Lookahead::default();
        }
        let position = leaf.position;
        self.ask_ahead(position)
    }

    fn link(&mut self, parent: u32, children: &[u32]) {
        if !self.linking {
            if self.parents.len() + self.unlinked_children + children.len() <= MAX_PARENTS
                && self.unlinked.len() < MAX_UNLINKED
            {
                self.unlinked_children += children.len();
                self.unlinked.push((parent, children.into()));
            }
            return;
        }
        for &child in children {
            if self.parents.len() >= MAX_PARENTS && !self.parents.contains_key(&child) {
                return;
            }
            self.parents.insert(child, parent);
        }
    }

    /// The top of the tree `page` hangs from, and how many levels above it
    /// that is (0: `page` is a top).
    fn top_of(&self, page: u32) -> (u32, u32) {
        let (mut at, mut levels) = (page, 0);
        // A corrupt file's parent links may loop: trees are shallow.
        while let Some(&parent) = self.parents.get(&at)
            && levels < 16
        {
            at = parent;
            levels += 1;
        }
        (at, levels)
    }

    /// Parses table interior page `page_no` (its `bytes`), keeps it (up to
    /// [`MAX_TABLE_PAGES`]) and links its children.
    fn take_table_interior(&mut self, page_no: u32, bytes: &[u8]) {
        if let Ok(interior) = sqlite::parse_table_interior(bytes, page_no, &self.geometry) {
            self.link(page_no, &interior.children);
            if self.tables.len() < MAX_TABLE_PAGES || self.tables.contains_key(&page_no) {
                self.tables.insert(page_no, interior);
            }
        }
    }

    /// Keeps table interior page `page_no` as read, to be parsed when the
    /// first scan starts ([`Self::start_linking`]); false when there is no
    /// room left (the caller parses it now).
    fn keep_unparsed(&mut self, page_no: u32, bytes: &[u8]) -> bool {
        if let Some((_, kept)) = self.unparsed.iter_mut().find(|(p, _)| *p == page_no)
            && kept.len() == bytes.len()
        {
            kept.copy_from_slice(bytes);
            return true;
        }
        if self.unparsed_bytes.saturating_add(bytes.len()) > MAX_UNPARSED_BYTES {
            return false;
        }
        self.unparsed_bytes += bytes.len();
        self.unparsed.push((page_no, bytes.into()));
        true
    }

    /// Links the interior pages kept unlinked and parses those kept
    /// unparsed, and from now on each as it comes: a scan through an index
    /// is to be followed (its leaves' and table leaves' places in their
    /// trees, and the table's keys, are needed).
    fn start_linking(&mut self) {
        if self.linking {
            return;
        }
        self.linking = true;
        self.unlinked_children = 0;
        for (parent, children) in std::mem::take(&mut self.unlinked) {
            self.link(parent, &children);
        }
        self.unparsed_bytes = 0;
        for (page_no, bytes) in std::mem::take(&mut self.unparsed) {
            self.take_table_interior(page_no, &bytes);
        }
    }

    fn on_index_leaf(&mut self, page_no: u32, bytes: &[u8]) -> Lookahead {
        if self.confirmed < self.config.confirm {
            // No scan followed that could go on into it: a point read, or
            // a scan starting; the table leaves read next say which.
            self.deferred = Some(Deferred { page_no, bytes: bytes.into(), table_leaves: Vec::new() });
            self.leaf = None;
            self.end_scan();
            return Lookahead::default();
        }
        self.deferred = None;
        self.parse_index_leaf(page_no, bytes)
    }

    /// Takes in index leaf `page_no`, parsing its rowids (see
    /// [`Self::on_index_leaf`]).
    fn parse_index_leaf(&mut self, page_no: u32, bytes: &[u8]) -> Lookahead {
        self.start_linking();
        let Ok(rowids) = sqlite::index_leaf_rowids(bytes, page_no, &self.geometry) else {
            self.leaf = None;
            return Lookahead::default();
        };
        self.stats.index_leaves += 1;
        let (index_top, _) = self.top_of(page_no);
        // The next leaf of the same index while a scan is confirmed and was
        // at the end of its leaf: the scan goes on into it (a point read
        // lands anywhere in a leaf).
        let continues = self.confirmed >= self.config.confirm
            && self.leaf.as_ref().is_some_and(|l| {
                l.index_top == index_top && l.position.is_some_and(|p| p + 1 + SKIP >= l.rowids.len())
            });
        let asked = vec![false; rowids.len()];
        self.leaf = Some(IndexLeaf { index_top, rowids, position: None, asked_to: 0, asked, pending: false });
        if !continues {
            self.end_scan();
            return Lookahead::default();
        }
        self.ask_ahead(None)
    }

    fn on_table_leaf(&mut self, page_no: u32) -> Lookahead {
        let Some(deferred) = self.deferred.as_mut() else { return self.follow_table_leaf(page_no) };
        deferred.table_leaves.push(page_no);
        if deferred.table_leaves.len() < DEFER_LOOKUPS {
            return Lookahead::default();
        }
        // A scan: its leaf is parsed now and its lookups so far followed.
        let Some(Deferred { page_no: leaf_no, bytes, table_leaves }) = self.deferred.take() else {
            return Lookahead::default();
        };
        let mut ahead = self.parse_index_leaf(leaf_no, &bytes);
        for leaf in table_leaves {
            let more = self.follow_table_leaf(leaf);
            ahead.leaves.extend(more.leaves);
            for interior in more.interiors {
                if !ahead.interiors.contains(&interior) {
                    ahead.interiors.push(interior);
                }
            }
            ahead.level.extend(more.level);
        }
        ahead
    }

    /// A table leaf read: where the scan of the current index leaf is.
    fn follow_table_leaf(&mut self, page_no: u32) -> Lookahead {
        let (table_top, levels) = self.top_of(page_no);
        if levels > 0 {
            self.depth.insert(table_top, levels);
        }
        let Some(leaf) = self.leaf.as_ref() else { return Lookahead::default() };
        let index_top = leaf.index_top;
        if self.tables_of.get(&index_top) != Some(&table_top) {
            self.tables_of.insert(index_top, table_top);
        }
        // The lookup is of the next rowid (after the last one placed) whose
        // path leads to this leaf; rowids mapped to a cached leaf SQLite
        // found in its own cache are skipped over.
        let from = leaf.position.map_or(0, |p| p + 1);
        let rest = &leaf.rowids[from.min(leaf.rowids.len())..];
        // The leaf's key range, from its parent's cell: a comparison per
        // rowid instead of a descent (a point read's rowid is anywhere in
        // its index leaf).
        let found = match self.key_range(page_no) {
            Some((above, upto)) => rest.iter().position(|r| r.is_some_and(|r| r > above && r <= upto)),
            None => rest.iter().position(|r| r.and_then(|r| self.leaf_of(table_top, r).ok()) == Some(page_no)),
        }
        .map(|i| from + i);
        let Some(position) = found else {
            // The scan at the end of its index leaf looks up the entry the
            // parent index page holds between this leaf and the next (an
            // index B-tree keeps one in each interior cell): that is still
            // the scan.
            if leaf.position.is_some_and(|p| p + 1 >= leaf.rowids.len()) {
                return Lookahead::default();
            }
            // Otherwise not this index leaf's lookup: another cursor, or a
            // table scan. The scan is not followed until it is seen again.
            self.end_scan();
            return Lookahead::default();
        };
        self.stats.followed += 1;
        // A continuation is the next rowid, or one a little further (rowids
        // whose leaf SQLite had in its own cache are not read); a lookup
        // further on in the leaf is a point read, or a new scan starting
        // there.
        if position <= from + SKIP && self.confirmed > 0 {
            self.confirmed = self.confirmed.saturating_add(1);
            self.scan_rows += position + 1 - from;
        } else {
            self.end_scan();
            self.confirmed = 1;
            self.scan_rows = 1;
        }
        if let Some(leaf) = self.leaf.as_mut() {
            leaf.position = Some(position);
        }
        if self.confirmed < self.config.confirm {
            return Lookahead::default();
        }
        self.ask_ahead(Some(position))
    }

    /// Asks for the leaves of the rowids after `position` (the start of the
    /// leaf without one), up to the window; grows the window once the scan
    /// has used half of what was asked. Rowids whose path needs a table
    /// interior page not seen yet ask for that page, and are asked for at
    /// the following lookups until it has been read.
    fn ask_ahead(&mut self, position: Option<usize>) -> Lookahead {
        let mut ahead = Lookahead::default();
        let Some(mut leaf) = self.leaf.take() else { return ahead };
        if let Some(&table_top) = self.tables_of.get(&leaf.index_top) {
            self.ask_leaf(&mut leaf, table_top, position.map_or(0, |p| p + 1), &mut ahead);
        }
        self.leaf = Some(leaf);
        self.stats.leaves_ahead += ahead.leaves.len() as u64;
        self.stats.interiors_ahead += ahead.interiors.len() as u64;
        self.stats.level_ahead += ahead.level.len() as u64;
        ahead
    }

    fn ask_leaf(&mut self, leaf: &mut IndexLeaf, table_top: u32, next: usize, ahead: &mut Lookahead) {
        if self.window == 0 {
            self.window = self.config.first_window;
        }
        let len = leaf.rowids.len();
        // More than half a window still asked ahead, or all of the leaf:
        // nothing to do yet.
        if !leaf.pending && (leaf.asked_to.saturating_sub(next) > self.window / 2 || leaf.asked_to >= len) {
            return;
        }
        if leaf.asked_to > 0 && !leaf.pending {
            // The scan used half of what this leaf asked for: it goes on
            // (the window grows even where recent scans bound what it asks
            // for: the queue stays deep up to the bound).
            self.window = (self.window * 2).min(self.config.max_window.max(self.config.first_window));
        }
        let to = (next + self.window.min(self.rows_left())).min(len);
        let mut pending = false;
        for i in next..to {
            if leaf.asked.get(i).copied().unwrap_or(true) {
                continue;
            }
            match leaf.rowids[i].map(|r| self.leaf_of(table_top, r)) {
                Some(Ok(page)) => {
                    leaf.asked[i] = true;
                    if ahead.leaves.last() != Some(&page) {
                        ahead.leaves.push(page);
                    }
                }
                Some(Err(Some(interior))) => {
                    pending = true;
                    if !ahead.interiors.contains(&interior) {
                        ahead.interiors.push(interior);
                        if !self.waiting.contains(&interior) && self.waiting.len() < MAX_WAITING {
                            self.waiting.push(interior);
                        }
                    }
                    self.ask_level(table_top, interior, ahead);
                }
                // An overflowing cell, or a tree whose depth is not known.
                Some(Err(None)) | None => leaf.asked[i] = true,
            }
        }
        leaf.asked_to = leaf.asked_to.max(to);
        leaf.pending = pending;
        // A page of the level a later rowid's path needed is asked for with
        // the interiors, first.
        let mut level = std::mem::take(&mut ahead.level);
        level.retain(|page| !ahead.interiors.contains(page));
        ahead.level = level;
    }

    /// Once per table: when `missing` is a child of the table's top and the
    /// top's children are interior pages, asks for those not seen yet (the
    /// whole level, if it is at most [`MAX_LEVEL_BYTES`]).
    fn ask_level(&mut self, table_top: u32, missing: u32, ahead: &mut Lookahead) {
        if self.level_asked.contains(&table_top) || self.depth.get(&table_top).is_none_or(|&depth| depth < 2) {
            return;
        }
        let Some(top) = self.tables.get(&table_top) else { return };
        if !top.children.contains(&missing) {
            return;
        }
        self.level_asked.push(table_top);
        if top.children.len() as u64 * u64::from(self.geometry.page_size) > MAX_LEVEL_BYTES {
            return;
        }
        let rest: Vec<u32> = top
            .children
            .iter()
            .copied()
            .filter(|child| !self.tables.contains_key(child) && !ahead.interiors.contains(child))
            .collect();
        ahead.level.extend(rest);
    }

    /// The rowids table page `page` holds, `(above, upto]`: the cells that
    /// name it and its ancestors, up to the top, narrowed level by level;
    /// `None` if its parent was not seen.
    fn key_range(&self, page: u32) -> Option<(i64, i64)> {
        let (mut above, mut upto) = (i64::MIN, i64::MAX);
        let mut at = page;
        let mut seen = false;
        // A corrupt file's parent links may loop: trees are shallow.
        for _ in 0..16 {
            let Some(parent) = self.parents.get(&at).and_then(|p| Some((*p, self.tables.get(p)?))) else { break };
            let (parent_no, interior) = parent;
            let i = interior.children.iter().position(|&c| c == at)?;
            if i > 0 {
                above = above.max(*interior.keys.get(i - 1)?);
            }
            if let Some(&key) = interior.keys.get(i) {
                upto = upto.min(key);
            }
            seen = true;
            at = parent_no;
        }
        seen.then_some((above, upto))
    }

    /// The table leaf holding `rowid` in the tree whose top is `top`; or the
    /// interior page on its path not seen yet (`Err(Some)`), or `Err(None)`
    /// when the tree's depth is not known yet.
    fn leaf_of(&self, top: u32, rowid: i64) -> Result<u32, Option<u32>> {
        let depth = *self.depth.get(&top).ok_or(None)?;
        let mut page = top;
        for _ in 0..depth {
            let interior = self.tables.get(&page).ok_or(Some(page))?;
            page = interior.child_for(rowid).ok_or(None)?;
        }
        Ok(page)
    }
}

/// Reads a SQLite varint (1 to 9 bytes, big endian, 7 bits a byte, the
/// ninth byte whole) at `at`: its value and length.
pub(crate) fn varint(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for i in 0..9 {
        let byte = *bytes.get(at.checked_add(i)?)?;
        if i == 8 {
            return Some(((value << 8) | u64::from(byte), 9));
        }
        value = (value << 7) | u64::from(byte & 0x7f);
        if byte & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btree::sqlite::tests::interior;

    const PAGE: usize = 4096;

    /// The mechanism's tests confirm a scan at its second lookup.
    fn two() -> RowidConfig {
        RowidConfig { confirm: 2, ..RowidConfig::default() }
    }

    fn geometry() -> Geometry {
        Geometry::new(PAGE as u32, 0, None).expect("geometry")
    }

    /// A table interior page with `(child, key)` cells and a right-most
    /// child.
    pub(crate) fn table_interior(page_no: u32, cells: &[(u32, i64)], right: u32) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        let mut content = PAGE;
        for (i, (child, key)) in cells.iter().enumerate() {
            let mut cell = child.to_be_bytes().to_vec();
            cell.extend(encode_varint(*key as u64));
            content -= cell.len();
            page[content..content + cell.len()].copy_from_slice(&cell);
            page[12 + 2 * i..14 + 2 * i].copy_from_slice(&(content as u16).to_be_bytes());
        }
        let _ = page_no;
        page[0] = sqlite::INTERIOR_TABLE;
        page[3..5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
        page[5..7].copy_from_slice(&(content as u16).to_be_bytes());
        page[8..12].copy_from_slice(&right.to_be_bytes());
        page
    }

    /// An index leaf page whose cells are records (k TEXT, rowid INTEGER).
    pub(crate) fn index_leaf(rowids: &[i64]) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        let mut content = PAGE;
        for (i, rowid) in rowids.iter().enumerate() {
            // Record: header (size 3: serial types 13+2*2 = text of 2
            // bytes, 6 = 8-byte integer), body "ab" + rowid.
            let mut record = vec![3, 17, 6, b'a', b'b'];
            record.extend(rowid.to_be_bytes());
            let mut cell = encode_varint(record.len() as u64);
            cell.extend(record);
            content -= cell.len();
            page[content..content + cell.len()].copy_from_slice(&cell);
            page[8 + 2 * i..10 + 2 * i].copy_from_slice(&(content as u16).to_be_bytes());
        }
        page[0] = sqlite::LEAF_INDEX;
        page[3..5].copy_from_slice(&(rowids.len() as u16).to_be_bytes());
        page[5..7].copy_from_slice(&(content as u16).to_be_bytes());
        page
    }

    fn table_leaf() -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        page[0] = sqlite::LEAF_TABLE;
        page[5..7].copy_from_slice(&(PAGE as u16).to_be_bytes());
        page
    }

    pub(crate) fn encode_varint(mut v: u64) -> Vec<u8> {
        if v > 0x00ff_ffff_ffff_ffff {
            let mut out = Vec::new();
            let last = (v & 0xff) as u8;
            v >>= 8;
            for _ in 0..8 {
                out.push(((v & 0x7f) as u8) | 0x80);
                v >>= 7;
            }
            out.reverse();
            out.push(last);
            return out;
        }
        let mut out = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v > 0 {
            out.push(((v & 0x7f) as u8) | 0x80);
            v >>= 7;
        }
        out.reverse();
        out
    }

    #[test]
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 16383, 16384, 1 << 40, u64::MAX, 0x00ff_ffff_ffff_ffff, 1 << 56] {
            let bytes = encode_varint(v);
            assert_eq!(varint(&bytes, 0), Some((v, bytes.len())), "{v}");
        }
        assert_eq!(varint(&[0x81], 0), None, "cut short");
    }

    /// A table of 3 levels: top 2 → interiors 3 (rowids ≤ 1000) and 4
    /// (above); 3 → leaves 10..=19 of 100 rowids each, 4 → leaves 20..=29.
    fn table(look: &mut RowidLookahead) {
        top_and_left(look);
        right(look);
    }

    /// The table's top and its left interior page (3), not the right (4).
    fn top_and_left(look: &mut RowidLookahead) {
        look.on_page(2, &table_interior(2, &[(3, 1000)], 4));
        let cells: Vec<(u32, i64)> = (0..9).map(|i| (10 + i, 100 * (i as i64 + 1))).collect();
        look.on_page(3, &table_interior(3, &cells, 19));
    }

    /// The table's right interior page (4).
    fn right(look: &mut RowidLookahead) {
        let cells: Vec<(u32, i64)> = (0..9).map(|i| (20 + i, 1000 + 100 * (i as i64 + 1))).collect();
        look.on_page(4, &table_interior(4, &cells, 29));
    }

    /// A lookahead (confirming at the second lookup) that has seen the
    /// index's top and the table, all of it or its top and left interior
    /// page only.
    fn ready(whole_table: bool) -> RowidLookahead {
        let mut look = RowidLookahead::new(geometry(), two());
        if whole_table {
            table(&mut look);
        } else {
            top_and_left(&mut look);
        }
        index(&mut look);
        look
    }

    /// The index: top 40 → leaves 41, 42.
    fn index(look: &mut RowidLookahead) {
        look.on_page(40, &interior(PAGE, 40, sqlite::INTERIOR_INDEX, &[41, 42]));
    }

    #[test]
    fn a_confirmed_index_scan_asks_for_the_leaves_of_the_rowids_ahead() {
        let mut look = ready(true);
        // Rowids in index order, scattered over the table's leaves.
        let rowids: Vec<i64> = vec![150, 1950, 420, 1230, 777, 1099, 5, 1999, 333, 1500, 650, 1820];
        assert!(look.on_page(41, &index_leaf(&rowids)).is_empty(), "no scan yet");
        // First lookup: rowid 150 in leaf 11. Learns the table, the depth.
        assert!(look.on_page(11, &table_leaf()).is_empty());
        // Second, in order: rowid 1950 in leaf 29: confirmed.
        let ahead = look.on_page(29, &table_leaf());
        assert_eq!(ahead.leaves, vec![14, 22, 17, 20, 10, 29, 13, 24], "the next 8 rowids' leaves");
        assert!(ahead.interiors.is_empty());
        assert_eq!(look.stats().followed, 2);
        // The scan goes on; nothing more until half the window is used.
        assert!(look.on_page(14, &table_leaf()).is_empty());
        assert!(look.on_page(22, &table_leaf()).is_empty());
        assert!(look.on_page(17, &table_leaf()).is_empty());
        let more = look.on_page(20, &table_leaf());
        assert_eq!(more.leaves, vec![16, 28], "the rest of the leaf, window grown");
        for leaf in [10, 29, 13, 24, 16, 28] {
            look.on_page(leaf, &table_leaf());
        }
        // The next index leaf of the scan that reached the end of its leaf:
        // asked at once.
        let next = look.on_page(42, &index_leaf(&[1001, 2]));
        assert_eq!(next.leaves, vec![20, 10]);
    }

    /// Scans of the same length, each its own statement: once one is known,
    /// the next asks no further ahead than that length (and an eighth); a
    /// longer scan asks on once it has passed it.
    #[test]
    fn a_scan_asks_no_further_than_recent_scans_read() {
        let mut look = ready(true);
        // 40 rowids in index order, each in another table leaf than the one
        // before (leaves 10..=19 hold rowids up to 1000, 20..=29 the rest).
        let rowid = |i: usize| if i % 20 < 10 { 50 + 100 * (i % 20) as i64 } else { 1050 + 100 * (i % 20 - 10) as i64 };
        let leaf = |i: usize| if i % 20 < 10 { 10 + (i % 20) as u32 } else { 20 + (i % 20 - 10) as u32 };
        let rowids: Vec<i64> = (0..40).map(rowid).collect();
        let scan = |look: &mut RowidLookahead, rows: usize| {
            look.on_page(41, &index_leaf(&rowids));
            for i in 0..rows {
                look.on_page(leaf(i), &table_leaf());
            }
            let asked = look.leaf.as_ref().map_or(0, |l| l.asked_to);
            look.end_of_transaction();
            asked
        };
        let unbounded = scan(&mut look, 10);
        assert!(unbounded >= 20, "the first scan's window ran to cell {unbounded}");
        assert_eq!(look.lengths.back(), Some(&10));
        let bounded = scan(&mut look, 10);
        assert!(bounded <= 10 + 1 + SKIP, "a scan like the last asked up to cell {bounded}");
        let longer = scan(&mut look, 30);
        assert_eq!(longer, 40, "a longer scan asks on past the length of the last");
        assert_eq!(look.lengths.back(), Some(&30));
    }

    /// Between two index leaves the scan looks up the entry of the parent
    /// index page's cell: a table leaf none of the leaf's rowids is in,
    /// which does not stop the scan being followed.
    #[test]
    fn the_entry_between_two_index_leaves_does_not_end_the_scan() {
        let mut look = ready(true);
        look.on_page(41, &index_leaf(&[150, 1950, 420]));
        look.on_page(11, &table_leaf());
        look.on_page(29, &table_leaf());
        look.on_page(14, &table_leaf());
        // The parent's entry: rowid 850 in leaf 18.
        assert!(look.on_page(18, &table_leaf()).is_empty());
        let next = look.on_page(42, &index_leaf(&[1001, 2]));
        assert_eq!(next.leaves, vec![20, 10], "the scan goes on into the next leaf");
    }

    #[test]
    fn a_point_read_and_a_covering_index_ask_for_nothing() {
        let mut look = ready(true);
        assert!(look.on_page(41, &index_leaf(&[150, 1950, 420])).is_empty());
        assert!(look.on_page(11, &table_leaf()).is_empty(), "one lookup");
        // The next query: another index leaf, covering (no table reads).
        assert!(look.on_page(42, &index_leaf(&[1001, 2])).is_empty(), "not a confirmed scan");
        assert_eq!(look.stats().leaves_ahead, 0);
    }

    #[test]
    fn a_lookup_out_of_order_closes_the_window() {
        let mut look = ready(true);
        look.on_page(41, &index_leaf(&[150, 1950, 420, 1230]));
        look.on_page(11, &table_leaf());
        assert!(!look.on_page(29, &table_leaf()).is_empty());
        // A leaf none of the next rowids lives in: another cursor.
        assert!(look.on_page(18, &table_leaf()).is_empty());
        assert!(look.on_page(42, &index_leaf(&[1001, 2])).is_empty(), "the scan must confirm again");
    }

    #[test]
    fn an_unseen_interior_page_on_the_path_is_asked_for_first() {
        // Interior 4 not seen yet.
        let mut look = ready(false);
        look.on_page(41, &index_leaf(&[150, 420, 1500, 650]));
        look.on_page(11, &table_leaf());
        let ahead = look.on_page(14, &table_leaf());
        assert_eq!(ahead.interiors, vec![4], "the path of 1500");
        assert_eq!(ahead.leaves, vec![16], "the leaf of 650, whose path is known");
        // Interior 4 read (the lookup of 1500 reads it): the rowid waiting
        // for it is asked for at the next lookup, nothing twice.
        right(&mut look);
        look.on_page(24, &table_leaf());
        assert_eq!(look.stats().leaves_ahead, 1, "1500's own leaf was just read: nothing left to ask");
        let mut look = ready(false);
        look.on_page(41, &index_leaf(&[150, 420, 650, 1500, 1700]));
        look.on_page(11, &table_leaf());
        assert_eq!(look.on_page(14, &table_leaf()).interiors, vec![4]);
        right(&mut look);
        let ahead = look.on_page(16, &table_leaf());
        assert_eq!(ahead.leaves, vec![24, 26], "the rowids that waited for interior 4");
    }

    /// The interior pages a window waits for, once taken in ahead of the
    /// scan (an observer reads them from the cache after their prefetch),
    /// let the waiting rowids be asked for at once.
    #[test]
    fn the_first_missing_page_below_the_top_asks_for_the_rest_of_its_level() {
        let scan = |look: &mut RowidLookahead| {
            index(look);
            look.on_page(41, &index_leaf(&[150, 420, 1500, 650, 2500]));
            look.on_page(11, &table_leaf());
            look.on_page(14, &table_leaf())
        };
        // Top 2 over interiors 3, 4, 5, 6 (rowids up to 1000, 2000, 3000,
        // then above); only 3 seen.
        let mut look = RowidLookahead::new(geometry(), two());
        look.on_page(2, &table_interior(2, &[(3, 1000), (4, 2000), (5, 3000)], 6));
        let cells: Vec<(u32, i64)> = (0..9).map(|i| (10 + i, 100 * (i as i64 + 1))).collect();
        look.on_page(3, &table_interior(3, &cells, 19));
        let ahead = scan(&mut look);
        assert_eq!(ahead.interiors, vec![4, 5], "the paths of 1500 and 2500");
        assert_eq!(ahead.level, vec![6], "the rest of the level, once");
        assert_eq!(look.stats().level_ahead, 1);
        let later = look.on_page(16, &table_leaf());
        assert!(later.level.is_empty(), "asked once per table: {later:?}");

        // A level larger than MAX_LEVEL_BYTES is left to the paths.
        let wide = (MAX_LEVEL_BYTES / PAGE as u64) as u32 + 1;
        let cells: Vec<(u32, i64)> = (0..wide).map(|i| (100 + i, 1000 * (i64::from(i) + 1))).collect();
        let mut look = RowidLookahead::new(geometry(), two());
        look.on_page(2, &table_interior(2, &cells, 100 + wide));
        let cells: Vec<(u32, i64)> = (0..9).map(|i| (10 + i, 100 * (i as i64 + 1))).collect();
        look.on_page(100, &table_interior(100, &cells, 19));
        let ahead = scan(&mut look);
        assert_eq!(ahead.interiors, vec![101, 102]);
        assert!(ahead.level.is_empty(), "{} pages: too wide to ask for whole", wide);
    }

    #[test]
    fn rowids_waiting_for_an_interior_page_resume_once_it_is_taken_in() {
        let mut look = ready(false);
        look.on_page(41, &index_leaf(&[150, 420, 650, 1500, 1700]));
        look.on_page(11, &table_leaf());
        assert_eq!(look.on_page(14, &table_leaf()).interiors, vec![4]);
        assert_eq!(look.waiting(), &[4]);
        assert!(look.resume().is_empty(), "nothing new to map yet");
        right(&mut look);
        assert!(look.waiting().is_empty());
        assert_eq!(look.resume().leaves, vec![24, 26], "mapped before the scan gets there");
        assert!(look.resume().is_empty(), "and asked once");
    }

    /// Point reads through an index, one after another, each reading an
    /// index leaf and one table leaf: nothing is asked for.
    #[test]
    fn point_reads_through_an_index_ask_for_nothing() {
        let mut look = RowidLookahead::new(geometry(), RowidConfig::default());
        // A table of 400 leaves (pages 1000-1399) of 100 rowids under one
        // top page, and an index over it.
        let cells: Vec<(u32, i64)> = (0..399).map(|i| (1000 + i, 100 * (i as i64 + 1))).collect();
        look.on_page(2, &table_interior(2, &cells, 1399));
        index(&mut look);
        // Two index leaves of 200 rowids, each in a table leaf of its own
        // (a real index leaf of 300 over 55,000 table leaves hardly ever
        // has two in one).
        let mut rng = crate::testing::Rng(7);
        let mut order: Vec<i64> = (0..400).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let a: Vec<i64> = order[..200].iter().map(|k| 100 * k + 50).collect();
        let b: Vec<i64> = order[200..].iter().map(|k| 100 * k + 50).collect();
        let leaf_of = |rowid: i64| 1000 + ((rowid - 1) / 100) as u32;
        let (ia, ib) = (index_leaf(&a), index_leaf(&b));
        let mut asked = 0;
        for round in 0..1000 {
            // Each point read lands anywhere in its leaf; five in a row use
            // one leaf, which SQLite keeps in its own cache after the first.
            let (rowids, page, image) = if round / 5 % 2 == 0 { (&a, 41, &ia) } else { (&b, 42, &ib) };
            if round % 5 == 0 {
                asked += look.on_page(page, image).leaves.len();
            }
            let rowid = rowids[rng.below(rowids.len())];
            asked += look.on_page(leaf_of(rowid), &table_leaf()).leaves.len();
        }
        assert_eq!(asked, 0, "{:?}", look.stats());
    }

    /// A point read through an index reads its index leaf and one table
    /// leaf: the index leaf is never parsed. A scan from such a leaf is
    /// still followed, from its first lookup on.
    #[test]
    fn a_point_read_leaves_its_index_leaf_unparsed() {
        let mut look = ready(true);
        let rowids: Vec<i64> = vec![150, 1950, 420, 1230, 777, 1099, 5, 1999, 333, 1500, 650, 1820];
        for _ in 0..10 {
            assert!(look.on_page(41, &index_leaf(&rowids)).is_empty());
            assert!(look.on_page(22, &table_leaf()).is_empty(), "rowid 1230's lookup");
        }
        assert_eq!(look.stats().index_leaves, 0, "no point read parsed its index leaf");
        // A scan: rowid 150, then 1950 (confirmed at its second lookup here).
        look.on_page(41, &index_leaf(&rowids));
        assert!(look.on_page(11, &table_leaf()).is_empty());
        let ahead = look.on_page(29, &table_leaf());
        assert_eq!(ahead.leaves, vec![14, 22, 17, 20, 10, 29, 13, 24], "the next 8 rowids' leaves");
        assert_eq!((look.stats().index_leaves, look.stats().followed), (1, 2));
    }

    /// Point reads through an index, each its own transaction: one reads
    /// its index leaf and a table leaf, the next finds its index leaf in
    /// SQLite's cache and reads only a table leaf. The end of the first
    /// transaction says the second lookup is not the first's scan going
    /// on: nothing is parsed or linked.
    #[test]
    fn the_end_of_a_transaction_ends_what_it_read() {
        let mut look = RowidLookahead::new(geometry(), two());
        look.on_page(2, &table_interior(2, &[(10, 100), (11, 200)], 12));
        look.on_page(20, &index_leaf(&[150, 250]));
        look.on_page(11, &table_leaf());
        look.end_of_transaction();
        look.on_page(10, &table_leaf());
        assert_eq!(look.stats().index_leaves, 0, "no index leaf parsed");
        assert!(look.parents.is_empty() && look.tables.is_empty(), "nothing linked or parsed");
        // Without the end in between, the second lookup is taken for a scan's.
        look.on_page(20, &index_leaf(&[150, 250]));
        look.on_page(11, &table_leaf());
        look.on_page(10, &table_leaf());
        assert_eq!(look.stats().index_leaves, 1);
    }

    #[test]
    fn pages_are_linked_from_the_first_scan_through_an_index_on() {
        let mut look = RowidLookahead::new(geometry(), two());
        look.on_page(2, &table_interior(2, &[(10, 100), (11, 200)], 12));
        look.on_page(10, &table_leaf());
        assert!(look.parents.is_empty(), "a table read by rowid links nothing");
        assert!(look.tables.is_empty(), "nor parses its interior pages");
        assert_eq!(look.unparsed.len(), 1);
        // A point read through an index: an index leaf, one table leaf.
        look.on_page(20, &index_leaf(&[150, 250]));
        look.on_page(11, &table_leaf());
        assert!(look.parents.is_empty(), "a point read through an index links nothing");
        // A second lookup after the index leaf: a scan.
        look.on_page(21, &index_leaf(&[150, 250]));
        look.on_page(11, &table_leaf());
        look.on_page(12, &table_leaf());
        assert_eq!(look.parents.len(), 3, "the first scan links what was seen");
        assert!(look.tables.contains_key(&2), "and parses it");
        assert!(look.unlinked.is_empty() && look.unlinked_children == 0);
        assert!(look.unparsed.is_empty() && look.unparsed_bytes == 0);
        look.on_page(3, &table_interior(3, &[(30, 100)], 31));
        assert_eq!(look.parents.get(&31), Some(&3), "and later pages as they come");
    }

    /// An observer that reports reads by page number (the bytes not cached
    /// yet) links at its first read after an unparsed index leaf: only the
    /// links can tell a table leaf there.
    #[test]
    fn a_read_by_page_number_after_an_index_leaf_links() {
        let mut look = RowidLookahead::new(geometry(), two());
        look.on_page(2, &table_interior(2, &[(10, 100), (11, 200)], 12));
        look.on_page(20, &index_leaf(&[150, 250]));
        assert!(look.parents.is_empty());
        look.on_page_number(11);
        assert_eq!(look.parents.get(&11), Some(&2));
    }

    #[test]
    fn memory_is_bounded() {
        let mut look = RowidLookahead::new(geometry(), two());
        for page in 2..(MAX_TABLE_PAGES as u32 + 100) {
            look.on_page(page, &table_interior(page, &[(page + 100_000, 5)], page + 200_000));
        }
        assert_eq!(look.unparsed.len(), MAX_UNPARSED_BYTES / PAGE, "kept as read up to their bound");
        assert_eq!(look.unparsed.iter().map(|(_, b)| b.len()).sum::<usize>(), look.unparsed_bytes);
        assert_eq!(look.tables.len(), MAX_TABLE_PAGES + 98 - look.unparsed.len(), "the rest parsed as they came");
        assert!(look.parents.len() + look.unlinked_children <= MAX_PARENTS);
        assert_eq!(look.unlinked.iter().map(|(_, c)| c.len()).sum::<usize>(), look.unlinked_children);
        look.start_linking();
        assert_eq!(look.tables.len(), MAX_TABLE_PAGES, "parsed when a scan starts, up to their bound");
        assert!(look.unparsed.is_empty());
        assert!(look.parents.len() <= MAX_PARENTS);
    }

    #[test]
    fn garbage_never_panics() {
        let mut look = RowidLookahead::new(geometry(), two());
        let mut page = vec![0u8; PAGE];
        for kind in [sqlite::INTERIOR_TABLE, sqlite::INTERIOR_INDEX, sqlite::LEAF_INDEX, sqlite::LEAF_TABLE] {
            for fill in [0u8, 0x7f, 0xff] {
                page.fill(fill);
                page[0] = kind;
                let _ = look.on_page(7, &page);
            }
        }
        let _ = look.on_page(7, &page[..10]);
    }
}
