//! B-tree page parsers: turn a raw database page a program just read into a
//! traversal step for the `btree` policy ([`crate::policies::btree`]).
//!
//! This module owns the parsing of untrusted database pages. It must never
//! panic, never index outside the bytes it was given, never allocate more
//! than the page justifies, and never trust a page: every header field, cell
//! count, pointer and child page number is checked, and whatever fails a check
//! (a corrupt page, an overflow or freelist page, a meta page, a WAL file) is
//! passed over with a typed [`PageError`]. A page that passes is still only a
//! *prediction*: a stale or forged interior page costs at most one bounded
//! window of wasted prefetch, never a wrong read, because prefetch is
//! advisory. It does no I/O: the caller hands it bytes it already has.
//!
//! Only the parser differs between engines; the policy is shared:
//!
//! ```text
//!  SQLite page ─ sqlite::parse_page ─┐                                     ┌─ PageRange (4 KiB pages)
//!                                    ├─ InteriorPage ─ Traversal ─ Event::TreeChildEnter ─ btree policy
//!  LMDB page ─── lmdb::parse_page ───┘   (children in    (child read →     (children as first 4 KiB
//!                                         key order)      parent, position) page of each DB page)
//! ```
//!
//! [`DbPageLayout`] maps database page numbers to file offsets: SQLite
//! numbers pages from 1 (page N at byte `(N - 1) × page_size`), LMDB from 0
//! (page N at `N × page_size`). `TreeChildEnter` names pages in 4 KiB
//! pages: adapters put the index of the first 4 KiB page of each database
//! page in it, and in its `child_pages` how many a database page spans
//! ([`DbPageLayout::pages_per_db_page`]; 2 for SQLite's 8 KiB pages), so
//! that each child is requested whole.

pub mod lmdb;
pub mod observe;
pub mod rowid;
pub mod sqlite;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::event::Event;
use crate::file::FileId;
use crate::page::{PAGE_SIZE, PageRange};

/// Why a page is not a usable interior page. Every variant but
/// [`PageError::Leaf`] means the page was passed over as not trustworthy or
/// not a B-tree page.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// A well-formed leaf page: nothing below it to prefetch.
    #[error("a leaf page")]
    Leaf,
    /// Not a B-tree page: an overflow, freelist, meta or unknown page (its
    /// type byte or flags as read).
    #[error("not a b-tree page (type {kind:#x})")]
    NotBtree {
        /// SQLite's page type byte, or LMDB's page flags.
        kind: u16,
    },
    /// The buffer is not one whole page.
    #[error("page buffer is {actual} bytes, the page size is {expected}")]
    Length {
        /// The page size.
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A page size the engine cannot have.
    #[error("invalid page size {0}")]
    PageSize(u32),
    /// The first bytes are a SQLite write-ahead log, not a database.
    #[error("a SQLite WAL file, not a database file")]
    WalFile,
    /// A header field holds a value a valid file or page cannot have.
    #[error("bad {what}: {value}")]
    Header {
        /// The field.
        what: &'static str,
        /// Its value as read.
        value: u64,
    },
    /// More cells than the page can hold.
    #[error("{count} cells cannot fit in the page (at most {max})")]
    CellCount {
        /// The count as read.
        count: u32,
        /// The most the page can hold.
        max: u32,
    },
    /// A cell pointer points outside the page's cell area.
    #[error("cell {index} at offset {offset} lies outside the cell area")]
    CellOutOfBounds {
        /// Index in the cell pointer array.
        index: u32,
        /// The pointer as read.
        offset: u32,
    },
    /// A child page number no valid tree can hold (zero, a meta or header
    /// page, the page itself, past the end of the file).
    #[error("child {index} names page {child}, which cannot be a child")]
    BadChild {
        /// Index among the children (the right-most child of a SQLite page
        /// is last).
        index: u32,
        /// The page number as read.
        child: u64,
    },
    /// The page says it is another page (LMDB stores its own number).
    #[error("page {expected} says it is page {found}")]
    PageNumber {
        /// Where the page was read.
        expected: u64,
        /// What its header says.
        found: u64,
    },
}

impl PageError {
    /// A short stable name for counting pages passed over by reason.
    pub fn reason(&self) -> &'static str {
        match self {
            PageError::Leaf => "leaf",
            PageError::NotBtree { .. } => "not_btree",
            PageError::Length { .. } => "length",
            PageError::PageSize(_) => "page_size",
            PageError::WalFile => "wal_file",
            PageError::Header { .. } => "header",
            PageError::CellCount { .. } => "cell_count",
            PageError::CellOutOfBounds { .. } => "cell_out_of_bounds",
            PageError::BadChild { .. } => "bad_child",
            PageError::PageNumber { .. } => "page_number",
        }
    }
}

/// What kind of interior page was parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InteriorKind {
    /// SQLite interior table b-tree page (type 0x05).
    SqliteTable,
    /// SQLite interior index b-tree page (type 0x02).
    SqliteIndex,
    /// LMDB branch page (`P_BRANCH`).
    LmdbBranch,
}

/// A valid interior page: its children, as database page numbers, in key
/// order (for SQLite, the left children of the cells, then the right-most
/// pointer). Database page numbers are `u64` because LMDB's are 48-bit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InteriorPage {
    /// Which engine and tree kind.
    pub kind: InteriorKind,
    /// Children in key order.
    pub children: Vec<u64>,
}

impl InteriorPage {
    /// The position of `child` among the children, if it is one.
    pub fn position_of(&self, child: u64) -> Option<u32> {
        self.children.iter().position(|&c| c == child).and_then(|i| u32::try_from(i).ok())
    }
}

/// Which engine numbers the pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// SQLite: pages numbered from 1.
    Sqlite,
    /// LMDB: pages numbered from 0 (0 and 1 are the meta pages).
    Lmdb,
}

/// How an engine's page numbers map onto a file's bytes and 4 KiB pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DbPageLayout {
    engine: Engine,
    page_size: u32,
}

impl DbPageLayout {
    /// The layout of `engine` with `page_size`-byte pages: a power of two
    /// from 512 to 65,536.
    pub fn new(engine: Engine, page_size: u32) -> Result<Self, PageError> {
        if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
            return Err(PageError::PageSize(page_size));
        }
        Ok(Self { engine, page_size })
    }

    /// The engine.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Database page size in bytes.
    pub fn page_size(&self) -> u32 {
        self.page_size
    }

    /// Byte offset of database page `page`; `None` for SQLite's page 0
    /// (which does not exist) or an offset past `u64`.
    pub fn byte_offset(&self, page: u64) -> Option<u64> {
        let index = match self.engine {
            Engine::Sqlite => page.checked_sub(1)?,
            Engine::Lmdb => page,
        };
        index.checked_mul(u64::from(self.page_size))
    }

    /// The 4 KiB pages database page `page` occupies (one 4 KiB page holds
    /// several database pages smaller than 4 KiB).
    pub fn page_range(&self, page: u64) -> Option<PageRange> {
        let offset = self.byte_offset(page)?;
        offset.checked_add(u64::from(self.page_size))?;
        Some(PageRange::covering_bytes(offset, u64::from(self.page_size)))
    }

    /// The first 4 KiB page of database page `page`: what adapters put in
    /// `TreeChildEnter`.
    pub fn first_page(&self, page: u64) -> Option<u64> {
        self.page_range(page).map(|range| range.start)
    }

    /// 4 KiB pages one database page spans (at least 1): the
    /// `child_pages` of this layout's `TreeChildEnter` events.
    pub fn pages_per_db_page(&self) -> u32 {
        u32::try_from(u64::from(self.page_size) / PAGE_SIZE).unwrap_or(u32::MAX).max(1)
    }

    /// The `TreeChildEnter` event for a descent from database page `parent`
    /// (parsed into `page`) into its child at `position`, with pages as
    /// first 4 KiB page indices. `None` when `position` is not a child or a
    /// page number does not map.
    pub fn enter_event(&self, file: FileId, parent: u64, page: &InteriorPage, position: u32) -> Option<Event> {
        if position as usize >= page.children.len() {
            return None;
        }
        let children = page.children.iter().map(|&child| self.first_page(child)).collect::<Option<Arc<[u64]>>>()?;
        Some(Event::TreeChildEnter {
            file,
            parent: self.first_page(parent)?,
            children,
            position,
            child_pages: self.pages_per_db_page(),
        })
    }
}

/// One remembered interior page, ready to place a read of any of its
/// children. An 8,192-bit filter of its children with two bits per child,
/// built once when the page is read (a multiply and two bits per child),
/// lets a read that is no child of it (a point lookup whose parent SQLite
/// had cached) skip it with two bit tests; only a likely child (about one
/// miss in a hundred with 450 children) scans the list. (With one bit in
/// 4,096, one miss in ten scanned, about 3 scans of 3.6 KiB per read over
/// 32 remembered pages; sorting the children instead cost more to build than
/// it saved, as pages are re-read often.)
#[derive(Debug)]
struct Remembered {
    parent: u64,
    children: Vec<u64>,
    filter: Box<[u64; FILTER_WORDS]>,
    /// The event's fields (first 4 KiB pages), shared by every descent from
    /// this page; `None` when a page number does not map.
    event: Option<(u64, Arc<[u64]>)>,
    /// The page's bytes as last read, when the observer gave them
    /// ([`Traversal::keep_bytes`]): a read of the same bytes again is
    /// recognised by one comparison instead of a parse.
    bytes: Option<Box<[u8]>>,
}

/// Words of a [`Remembered`] page's child filter (8,192 bits).
const FILTER_WORDS: usize = 128;

/// The two filter bits of `child`: two 13-bit slices of its Fibonacci
/// hash, onto 8,192 bits.
fn filter_bits(child: u64) -> [usize; 2] {
    let hash = child.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    [(hash >> 51) as usize, ((hash >> 38) & 0x1FFF) as usize]
}

impl Remembered {
    fn new(layout: &DbPageLayout, parent: u64, page: InteriorPage) -> Self {
        let mut filter = Box::new([0u64; FILTER_WORDS]);
        for &child in &page.children {
            for bit in filter_bits(child) {
                filter[bit / 64] |= 1 << (bit % 64);
            }
        }
        let children = page.children.iter().map(|&child| layout.first_page(child)).collect::<Option<Arc<[u64]>>>();
        let event = layout.first_page(parent).zip(children);
        Self { parent, children: page.children, filter, event, bytes: None }
    }

    /// The first position of `child` among the children.
    fn position_of(&self, child: u64) -> Option<u32> {
        if filter_bits(child).iter().any(|bit| self.filter[bit / 64] & (1 << (bit % 64)) == 0) {
            return None;
        }
        self.children.iter().position(|&c| c == child).and_then(|i| u32::try_from(i).ok())
    }
}

/// Turns a stream of page reads of one database file into `TreeChildEnter`
/// events: remembers the last few interior pages read and, when a page read
/// is one of their children, reports the descent. This is the part of an
/// adapter (VFS shim, LMDB wrapper, daemon observation) that does not depend
/// on the engine. Bounded: at most `capacity` interior pages are remembered;
/// the one whose children were read least recently is forgotten first.
#[derive(Debug)]
pub struct Traversal {
    file: FileId,
    layout: DbPageLayout,
    capacity: usize,
    /// Remembered interior pages, least recently read or used first. A read
    /// is looked up in them most recent first (a child named by two
    /// remembered parents belongs to the more recent), each behind its child
    /// filter.
    parents: VecDeque<Remembered>,
}

impl Traversal {
    /// A traversal of `file` laid out as `layout`, remembering up to
    /// `capacity` interior pages (at least 1; a tree's depth plus a few
    /// concurrent cursors is enough).
    pub fn new(file: FileId, layout: DbPageLayout, capacity: usize) -> Self {
        Self { file, layout, capacity: capacity.max(1), parents: VecDeque::new() }
    }

    /// The layout in use.
    pub fn layout(&self) -> &DbPageLayout {
        &self.layout
    }

    /// Interior pages remembered now.
    pub fn remembered(&self) -> usize {
        self.parents.len()
    }

    /// Reports that database page `page` was read and, if it parsed as an
    /// interior page, what it holds. Returns the descent it completes, if
    /// `page` is a child of a remembered interior page.
    pub fn on_read(&mut self, page: u64, parsed: Option<InteriorPage>) -> Option<Event> {
        let hit = self.parents.iter().enumerate().rev().find_map(|(i, r)| Some((i, r.position_of(page)?)));
        let event = hit.and_then(|(i, position)| {
            // A page whose children are being read is kept longest: an
            // engine caches its upper pages itself (SQLite's root is read
            // once per connection), so only their use shows they matter.
            if i + 1 != self.parents.len()
                && let Some(used) = self.parents.remove(i)
            {
                self.parents.push_back(used);
            }
            let (parent, children) = self.parents.back()?.event.as_ref()?;
            Some(Event::TreeChildEnter {
                file: self.file,
                parent: *parent,
                children: children.clone(),
                position,
                child_pages: self.layout.pages_per_db_page(),
            })
        });
        if let Some(interior) = parsed {
            self.remember(page, interior);
        }
        event
    }

    /// Remembers interior page `page` (parsed) without reporting a read of
    /// it: for an observer that got the bytes of a page later than the
    /// report of its read (which it already passed to [`Self::on_read`]).
    pub fn learn(&mut self, page: u64, parsed: InteriorPage) {
        self.remember(page, parsed);
    }

    /// Whether `page` is a remembered interior page whose bytes, kept with
    /// [`Self::keep_bytes`], are `bytes`: then it is moved to the recent end
    /// as [`Self::learn`] would, and the caller need not parse it again (an
    /// engine re-reads its upper pages on almost every lookup once they
    /// left its own cache; parsing a 4 KiB page of 450 children each time
    /// was most of an adapter's cost on a warm cache). Report the read
    /// with [`Self::on_read`] and no parsed page as well.
    pub fn reread_unchanged(&mut self, page: u64, bytes: &[u8]) -> bool {
        let Some(i) = self.parents.iter().rposition(|r| r.parent == page) else { return false };
        if self.parents[i].bytes.as_deref() != Some(bytes) {
            return false;
        }
        if i + 1 != self.parents.len()
            && let Some(used) = self.parents.remove(i)
        {
            self.parents.push_back(used);
        }
        true
    }

    /// Keeps `bytes` as the image of remembered interior page `page` (just
    /// remembered from them), for [`Self::reread_unchanged`]. A page not
    /// remembered is passed over.
    pub fn keep_bytes(&mut self, page: u64, bytes: &[u8]) {
        if let Some(r) = self.parents.iter_mut().rev().find(|r| r.parent == page) {
            match &mut r.bytes {
                Some(kept) if kept.len() == bytes.len() => kept.copy_from_slice(bytes),
                kept => *kept = Some(bytes.into()),
            }
        }
    }

    fn remember(&mut self, parent: u64, page: InteriorPage) {
        // A page read again replaces what was remembered of it; unchanged
        // (the common case: the engine dropped it from its own cache and
        // read it again), it is only moved to the recent end, not rebuilt.
        // (Compared as lists: a memcmp, where a hash of the list computed
        // on every read cost as much as parsing the page.)
        if let Some(i) = self.parents.iter().position(|r| r.parent == parent)
            && let Some(old) = self.parents.remove(i)
            && old.children == page.children
        {
            self.parents.push_back(old);
            return;
        }
        if self.parents.len() >= self.capacity {
            self.parents.pop_front();
        }
        self.parents.push_back(Remembered::new(&self.layout, parent, page));
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn layouts_map_pages_to_4k_ranges() {
        let sqlite = DbPageLayout::new(Engine::Sqlite, 4096).expect("4096");
        assert_eq!(sqlite.page_range(1), Some(PageRange::new(0, 1)));
        assert_eq!(sqlite.page_range(10), Some(PageRange::new(9, 10)));
        assert_eq!(sqlite.page_range(0), None);
        let big = DbPageLayout::new(Engine::Sqlite, 65536).expect("65536");
        assert_eq!(big.page_range(3), Some(PageRange::new(32, 48)));
        assert_eq!(big.pages_per_db_page(), 16);
        let small = DbPageLayout::new(Engine::Sqlite, 1024).expect("1024");
        assert_eq!(small.page_range(5), Some(PageRange::new(1, 2)));
        assert_eq!(small.pages_per_db_page(), 1);
        let lmdb = DbPageLayout::new(Engine::Lmdb, 4096).expect("4096");
        assert_eq!(lmdb.page_range(0), Some(PageRange::new(0, 1)));
        assert_eq!(lmdb.page_range(7), Some(PageRange::new(7, 8)));
        let lmdb16 = DbPageLayout::new(Engine::Lmdb, 16384).expect("16384");
        assert_eq!(lmdb16.page_range(2), Some(PageRange::new(8, 12)));
        assert_eq!(lmdb.page_range(u64::MAX), None);
        for bad in [0, 100, 256, 4095, 131072] {
            assert_eq!(DbPageLayout::new(Engine::Lmdb, bad), Err(PageError::PageSize(bad)));
        }
    }

    /// Builds one logical tree (a root over `interiors` interior pages over
    /// `fanout` leaves each, page numbers scattered) as the page images of
    /// `engine`, and the page reads of a full scan.
    fn tree_pages(engine: Engine, interiors: usize, fanout: usize) -> (HashMap<u64, Vec<u8>>, Vec<u64>) {
        let total = 1 + interiors * (1 + fanout);
        // Page numbers from 2 (SQLite's page 1 is the schema, LMDB's 0 and 1
        // are metas), scattered by a fixed multiplicative permutation.
        let numbers: Vec<u64> = (0..total as u64).map(|i| 2 + (i * 7919) % total as u64).collect();
        let root = numbers[0];
        let mut pages = HashMap::new();
        let mut reads = vec![root];
        let mut interior_pages = Vec::new();
        for k in 0..interiors {
            let base = 1 + k * (1 + fanout);
            let interior = numbers[base];
            let leaves = &numbers[base + 1..base + 1 + fanout];
            interior_pages.push(interior);
            reads.push(interior);
            reads.extend_from_slice(leaves);
            let image = match engine {
                Engine::Sqlite => {
                    let children: Vec<u32> = leaves.iter().map(|&p| p as u32).collect();
                    sqlite::tests::interior(4096, interior as u32, sqlite::INTERIOR_TABLE, &children)
                }
                Engine::Lmdb => lmdb::tests::branch(4096, interior, leaves),
            };
            pages.insert(interior, image);
            for &leaf in leaves {
                let mut image = vec![0u8; 4096];
                match engine {
                    Engine::Sqlite => image[0] = sqlite::LEAF_TABLE,
                    Engine::Lmdb => {
                        image[..8].copy_from_slice(&leaf.to_le_bytes());
                        image[10..12].copy_from_slice(&lmdb::P_LEAF.to_le_bytes());
                    }
                }
                pages.insert(leaf, image);
            }
        }
        let image = match engine {
            Engine::Sqlite => {
                let children: Vec<u32> = interior_pages.iter().map(|&p| p as u32).collect();
                sqlite::tests::interior(4096, root as u32, sqlite::INTERIOR_TABLE, &children)
            }
            Engine::Lmdb => lmdb::tests::branch(4096, root, &interior_pages),
        };
        pages.insert(root, image);
        (pages, reads)
    }

    /// Scans the tree of `engine` through its parser, a [`Traversal`] and the
    /// shared `btree` policy; returns the database pages requested, in order,
    /// and how many reads found their page requested before.
    fn scan_through_policy(engine: Engine) -> (Vec<u64>, usize) {
        use crate::file::FileRef;
        use crate::policies::btree::BtreePolicy;
        use crate::policy::{FileTable, Policy, PolicyContext, PolicyId};

        let (pages, reads) = tree_pages(engine, 4, 60);
        let file = FileRef::open("/proc/self/exe").expect("open /proc/self/exe");
        let mut files = FileTable::default();
        files.insert(file.clone());
        let layout = DbPageLayout::new(engine, 4096).expect("layout");
        let sqlite_geometry = sqlite::Geometry::new(4096, 0, None).expect("geometry");
        let lmdb_geometry = lmdb::Geometry::new(4096, None).expect("geometry");
        let mut traversal = Traversal::new(file.id(), layout, 8);
        let mut policy = BtreePolicy::default();
        let mut requested = Vec::new();
        let mut early = 0;
        for page_no in reads {
            if requested.contains(&page_no) {
                early += 1;
            }
            let image = &pages[&page_no];
            // Only the parser differs.
            let parsed = match engine {
                Engine::Sqlite => sqlite::parse_page(image, page_no as u32, &sqlite_geometry),
                Engine::Lmdb => lmdb::parse_page(image, page_no, &lmdb_geometry),
            };
            assert!(parsed.is_ok() || parsed == Err(PageError::Leaf), "{engine:?} page {page_no}: {parsed:?}");
            let Some(event) = traversal.on_read(page_no, parsed.ok()) else { continue };
            let mut out = Vec::new();
            policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
            for request in out {
                for range in request.ranges {
                    // Back from 4 KiB page indices to database page numbers.
                    let db_page = match engine {
                        Engine::Sqlite => range.start + 1,
                        Engine::Lmdb => range.start,
                    };
                    assert_eq!(layout.page_range(db_page), Some(range));
                    requested.push(db_page);
                }
            }
        }
        (requested, early)
    }

    #[test]
    fn one_policy_serves_sqlite_and_lmdb() {
        let (from_sqlite, early_sqlite) = scan_through_policy(Engine::Sqlite);
        let (from_lmdb, early_lmdb) = scan_through_policy(Engine::Lmdb);
        assert_eq!(from_sqlite, from_lmdb, "same tree, same policy, same predictions");
        assert_eq!(early_sqlite, early_lmdb);
        // 245 reads: all but the first leaves and each interior's first leaf
        // were requested before the scan got there (interiors too, after the first).
        assert!(early_sqlite >= 245 - 3 - 4 - 1, "{early_sqlite} reads prefetched");
        assert!(from_sqlite.len() <= early_sqlite + 2, "{} requested for {early_sqlite} used", from_sqlite.len());
    }

    #[test]
    fn remembered_pages_place_children_by_first_position() {
        let layout = DbPageLayout::new(Engine::Sqlite, 4096).expect("4096");
        let children: Vec<u64> = (0..450u64).map(|i| (i * 7919) % 100_003 + 2).chain([9, 5, 9]).collect();
        let page = InteriorPage { kind: InteriorKind::SqliteTable, children: children.clone() };
        let remembered = Remembered::new(&layout, 1, page);
        for (i, &child) in children.iter().enumerate() {
            let first = children.iter().position(|&c| c == child).expect("present");
            assert_eq!(remembered.position_of(child), Some(first as u32), "child {child} at {i}");
        }
        let absent = (0..200_000u64).filter(|c| !children.contains(c)).take(5000);
        assert!(absent.into_iter().all(|c| remembered.position_of(c).is_none()));
    }

    #[test]
    fn a_page_read_again_is_kept_if_unchanged_and_replaced_if_changed() {
        let file = FileId { dev: 1, ino: 2 };
        let layout = DbPageLayout::new(Engine::Sqlite, 4096).expect("4096");
        let mut traversal = Traversal::new(file, layout, 4);
        let page = |children: Vec<u64>| Some(InteriorPage { kind: InteriorKind::SqliteTable, children });
        traversal.on_read(2, page(vec![10, 11, 12]));
        traversal.on_read(2, page(vec![10, 11, 12]));
        assert_eq!(traversal.remembered(), 1);
        assert!(matches!(traversal.on_read(12, None), Some(Event::TreeChildEnter { position: 2, .. })));
        traversal.on_read(2, page(vec![20, 12]));
        assert_eq!(traversal.on_read(10, None), None, "the old children are forgotten");
        assert!(matches!(traversal.on_read(12, None), Some(Event::TreeChildEnter { position: 1, .. })));
    }

    #[test]
    fn a_page_whose_kept_bytes_are_read_again_needs_no_parse() {
        let file = FileId { dev: 1, ino: 2 };
        let layout = DbPageLayout::new(Engine::Sqlite, 4096).expect("4096");
        let mut traversal = Traversal::new(file, layout, 4);
        let bytes = vec![5u8; 4096];
        assert!(!traversal.reread_unchanged(2, &bytes), "nothing remembered yet");
        traversal.on_read(2, Some(InteriorPage { kind: InteriorKind::SqliteTable, children: vec![10, 11, 12] }));
        assert!(!traversal.reread_unchanged(2, &bytes), "no bytes kept for it yet");
        traversal.keep_bytes(2, &bytes);
        traversal.keep_bytes(3, &bytes); // not remembered: passed over
        assert_eq!(traversal.remembered(), 1);
        assert!(traversal.reread_unchanged(2, &bytes));
        let mut changed = bytes.clone();
        changed[100] ^= 1;
        assert!(!traversal.reread_unchanged(2, &changed), "other bytes are parsed again");
        // The kept page still places its children.
        assert!(matches!(traversal.on_read(11, None), Some(Event::TreeChildEnter { position: 1, .. })));
    }

    #[test]
    fn a_parent_in_use_is_kept_while_others_come_and_go() {
        let file = FileId { dev: 1, ino: 2 };
        let layout = DbPageLayout::new(Engine::Sqlite, 4096).expect("4096");
        let mut traversal = Traversal::new(file, layout, 3);
        let root = InteriorPage { kind: InteriorKind::SqliteTable, children: (100..200).collect() };
        traversal.on_read(2, Some(root));
        // The root is read once (the engine caches it); its children are
        // read one after another, each an interior page of its own.
        for child in 100..120u64 {
            let interior = InteriorPage { kind: InteriorKind::SqliteTable, children: vec![child * 10] };
            assert!(traversal.on_read(child, Some(interior)).is_some(), "descent from the root into {child}");
        }
        assert_eq!(traversal.remembered(), 3);
    }

    #[test]
    fn traversal_reports_descents_and_stays_bounded() {
        let file = FileId { dev: 1, ino: 2 };
        let layout = DbPageLayout::new(Engine::Sqlite, 8192).expect("8192");
        let mut traversal = Traversal::new(file, layout, 2);
        let root = InteriorPage { kind: InteriorKind::SqliteTable, children: vec![5, 9, 7] };
        assert_eq!(traversal.on_read(2, Some(root)), None);
        let Some(Event::TreeChildEnter { parent, children, position, .. }) = traversal.on_read(9, None) else {
            panic!("no descent reported");
        };
        // 8 KiB pages: page N starts at 4 KiB page 2 (N - 1).
        assert_eq!((parent, position), (2, 1));
        assert_eq!(&children[..], &[8, 16, 12]);
        assert_eq!(traversal.on_read(100, None), None);
        for page in 10..20 {
            let interior = InteriorPage { kind: InteriorKind::SqliteTable, children: vec![page * 10, page * 10 + 1] };
            traversal.on_read(page, Some(interior));
        }
        assert_eq!(traversal.remembered(), 2);
        assert!(traversal.parents.iter().map(|r| r.children.len()).sum::<usize>() <= 4);
        assert_eq!(traversal.on_read(5, None), None, "forgotten parent");
        assert!(traversal.on_read(191, None).is_some());
    }
}
