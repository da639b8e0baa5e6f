//! LMDB branch pages (the on-disk format of LMDB 0.9, `MDB_DATA_VERSION`
//! 1, as written by a 64-bit little-endian build; layouts from `mdb.c`).
//!
//! ```text
//! page header (PAGEHDRSZ = 16):
//!   0 mp_pgno (u64: the page's own number)  8 mp_pad (u16)  10 mp_flags (u16)
//!   12 mp_lower (u16: end of the pointer array)  14 mp_upper (u16: start of the nodes)
//!   16 mp_ptrs[NUMKEYS] (u16 node offsets from the page start, in key order)
//!   NUMKEYS = (mp_lower - 16) / 2
//! flags: P_BRANCH 0x01  P_LEAF 0x02  P_OVERFLOW 0x04  P_META 0x08  P_DIRTY 0x10
//!        P_LEAF2 0x20  P_SUBP 0x40  P_LOOSE 0x4000  P_KEEP 0x8000
//! branch node (NODESIZE = 8), 2-byte aligned, in [mp_upper, page size):
//!   0 mn_lo (u16)  2 mn_hi (u16)  4 mn_flags (u16)  6 mn_ksize (u16)  8 key
//!   child pgno = mn_lo | mn_hi << 16 | mn_flags << 32   (48 bits)
//! meta page (pages 0 and 1, P_META), after the page header:
//!   16 mm_magic 0xBEEFC0DE  20 mm_version 1  24 mm_address  32 mm_mapsize
//!   40 mm_dbs[FREE_DBI] (48 bytes; md_pad = page size)  88 mm_dbs[MAIN_DBI]
//!   MDB_db: +0 md_pad u32 +4 md_flags u16 +6 md_depth u16 +8 branch +16 leaf
//!           +24 overflow +32 entries +40 md_root (u64 each)
//!   136 mm_last_pg  144 mm_txnid
//! ```
//!
//! Checked: the page's own number against where it was read, the flags (a
//! branch page and nothing else; `P_DIRTY`/`P_KEEP` are in-memory bits that
//! are tolerated), `mp_lower`/`mp_upper` against the header and page size,
//! every node offset (even, inside `[mp_upper, page size]` with its header
//! and key), every child (not a meta page, not the page itself, ≤ the last
//! page when known). Overflow, leaf, meta, `LEAF2` and sub-pages are passed
//! over by their flags. LMDB 1.0's development format (`MDB_DEVEL`, page base
//! offsets) is not read: its pages fail these checks and are passed over.

use super::{DbPageLayout, Engine, InteriorKind, InteriorPage, PageError};

/// Size of the page header (`PAGEHDRSZ`).
pub const PAGE_HEADER_SIZE: usize = 16;
/// Size of a node header (`NODESIZE`).
pub const NODE_HEADER_SIZE: usize = 8;
/// `mm_magic`.
pub const MAGIC: u32 = 0xBEEF_C0DE;
/// `MDB_DATA_VERSION` this parser reads.
pub const DATA_VERSION: u32 = 1;
/// LMDB's default page size (the OS page size on most machines).
pub const DEFAULT_PAGE_SIZE: u32 = 4096;

/// Branch page.
pub const P_BRANCH: u16 = 0x01;
/// Leaf page.
pub const P_LEAF: u16 = 0x02;
/// Overflow page.
pub const P_OVERFLOW: u16 = 0x04;
/// Meta page.
pub const P_META: u16 = 0x08;
/// Dirty page (in memory only).
pub const P_DIRTY: u16 = 0x10;
/// Leaf page of `MDB_DUPFIXED` records.
pub const P_LEAF2: u16 = 0x20;
/// Sub-page of `MDB_DUPSORT` data.
pub const P_SUBP: u16 = 0x40;
/// Freed page reused in the same transaction.
pub const P_LOOSE: u16 = 0x4000;
/// Page kept during spill (in memory only).
pub const P_KEEP: u16 = 0x8000;

/// `P_INVALID`: no root.
const P_INVALID: u64 = u64::MAX;

/// The fields of a meta page that page parsing needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Page size in bytes (`mm_psize`).
    pub page_size: u32,
    /// Last page in use (`mm_last_pg`).
    pub last_page: u64,
    /// Transaction that wrote this meta page; the newer of pages 0 and 1 wins.
    pub txnid: u64,
    /// Root of the main database, if it has one.
    pub main_root: Option<u64>,
    /// Depth of the main database's tree.
    pub main_depth: u16,
    /// Flags of the main database (`md_flags`: `MDB_REVERSEKEY` 0x02,
    /// `MDB_DUPSORT` 0x04, `MDB_INTEGERKEY` 0x08, …); 0 for plain byte keys.
    pub main_flags: u16,
}

impl Meta {
    /// Parses a meta page (page 0 or 1 of the data file; only its first
    /// 152 bytes are read).
    pub fn parse(page: &[u8]) -> Result<Meta, PageError> {
        if page.len() < 152 {
            return Err(PageError::Length { expected: 152, actual: page.len() });
        }
        let flags = le16(page, 10).unwrap_or(0);
        if flags & P_META == 0 {
            return Err(PageError::NotBtree { kind: flags });
        }
        let magic = le32(page, 16).unwrap_or(0);
        if magic != MAGIC {
            return Err(PageError::Header { what: "magic", value: u64::from(magic) });
        }
        let version = le32(page, 20).unwrap_or(0);
        if version != DATA_VERSION {
            return Err(PageError::Header { what: "version", value: u64::from(version) });
        }
        let page_size = le32(page, 40).unwrap_or(0);
        DbPageLayout::new(Engine::Lmdb, page_size)?;
        let root = le64(page, 128).unwrap_or(P_INVALID);
        Ok(Meta {
            page_size,
            last_page: le64(page, 136).unwrap_or(0),
            txnid: le64(page, 144).unwrap_or(0),
            main_root: (root != P_INVALID).then_some(root),
            main_depth: le16(page, 94).unwrap_or(0),
            main_flags: le16(page, 92).unwrap_or(0),
        })
    }

    /// What [`parse_page`] needs to know of this file.
    pub fn geometry(&self) -> Geometry {
        Geometry { page_size: self.page_size, last_page: Some(self.last_page) }
    }

    /// Where this file's pages lie.
    pub fn layout(&self) -> Result<DbPageLayout, PageError> {
        DbPageLayout::new(Engine::Lmdb, self.page_size)
    }
}

/// The page geometry of one LMDB data file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Page size in bytes.
    pub page_size: u32,
    /// Last page in use, if known: children beyond it are refused. (A
    /// newer transaction may have grown the file since the meta page was
    /// read; leave this `None` rather than refuse its pages.)
    pub last_page: Option<u64>,
}

impl Geometry {
    /// A geometry from its parts.
    pub fn new(page_size: u32, last_page: Option<u64>) -> Result<Self, PageError> {
        DbPageLayout::new(Engine::Lmdb, page_size)?;
        Ok(Self { page_size, last_page })
    }
}

/// Parses page `page_no` of an LMDB data file. `page` must be exactly one
/// page. A branch page yields its children in key order; anything else is a
/// [`PageError`] (a valid leaf is [`PageError::Leaf`]).
pub fn parse_page(page: &[u8], page_no: u64, geometry: &Geometry) -> Result<InteriorPage, PageError> {
    let page_size = geometry.page_size as usize;
    if page.len() != page_size || page_size < PAGE_HEADER_SIZE {
        return Err(PageError::Length { expected: page_size, actual: page.len() });
    }
    let (Some(own), Some(flags), Some(lower), Some(upper)) =
        (le64(page, 0), le16(page, 10), le16(page, 12), le16(page, 14))
    else {
        return Err(PageError::Length { expected: page_size, actual: page.len() });
    };
    let kind = flags & !(P_DIRTY | P_KEEP);
    if kind == P_LEAF {
        return Err(PageError::Leaf);
    }
    if kind != P_BRANCH {
        return Err(PageError::NotBtree { kind: flags });
    }
    if own != page_no {
        return Err(PageError::PageNumber { expected: page_no, found: own });
    }
    let (lower, upper) = (usize::from(lower), usize::from(upper));
    if lower < PAGE_HEADER_SIZE || !(lower - PAGE_HEADER_SIZE).is_multiple_of(2) || lower > page_size {
        return Err(PageError::Header { what: "mp_lower", value: lower as u64 });
    }
    if upper < lower || upper > page_size {
        return Err(PageError::Header { what: "mp_upper", value: upper as u64 });
    }
    let count = (lower - PAGE_HEADER_SIZE) / 2;
    let max = (page_size - PAGE_HEADER_SIZE) / (2 + NODE_HEADER_SIZE);
    if count == 0 || count > max {
        return Err(PageError::CellCount { count: count as u32, max: max as u32 });
    }
    let mut children = Vec::with_capacity(count);
    for index in 0..count {
        let offset = le16(page, PAGE_HEADER_SIZE + 2 * index).map(usize::from).unwrap_or(0);
        let out_of_bounds = PageError::CellOutOfBounds { index: index as u32, offset: offset as u32 };
        if offset < upper || !offset.is_multiple_of(2) || offset + NODE_HEADER_SIZE > page_size {
            return Err(out_of_bounds);
        }
        let (Some(lo), Some(hi), Some(top), Some(key_size)) =
            (le16(page, offset), le16(page, offset + 2), le16(page, offset + 4), le16(page, offset + 6))
        else {
            return Err(out_of_bounds);
        };
        if offset + NODE_HEADER_SIZE + usize::from(key_size) > page_size {
            return Err(out_of_bounds);
        }
        let child = u64::from(lo) | u64::from(hi) << 16 | u64::from(top) << 32;
        let beyond = geometry.last_page.is_some_and(|last| child > last);
        if child < 2 || child == page_no || beyond {
            return Err(PageError::BadChild { index: index as u32, child });
        }
        children.push(child);
    }
    Ok(InteriorPage { kind: InteriorKind::LmdbBranch, children })
}

/// Parses branch page `page_no` like [`parse_page`] and finds the child a
/// search for `key` descends into, as LMDB's `mdb_node_search` does with its
/// default comparator (`memcmp` order, the main database's unless it was
/// opened with `MDB_REVERSEKEY`, `MDB_INTEGERKEY` or a custom comparator): the
/// last child whose separator key is at most `key`, where node 0's key
/// stands for "less than every key". Returns the page and that position.
pub fn search_branch(
    page: &[u8],
    page_no: u64,
    geometry: &Geometry,
    key: &[u8],
) -> Result<(InteriorPage, u32), PageError> {
    let interior = parse_page(page, page_no, geometry)?;
    // parse_page checked every node and key against the page bounds.
    let node_key = |index: usize| -> &[u8] {
        let offset = le16(page, PAGE_HEADER_SIZE + 2 * index).map(usize::from).unwrap_or(0);
        let size = le16(page, offset + 6).map(usize::from).unwrap_or(0);
        page.get(offset + NODE_HEADER_SIZE..offset + NODE_HEADER_SIZE + size).unwrap_or(&[])
    };
    // Binary search over nodes 1..count for the last key <= `key`.
    let (mut low, mut high) = (1usize, interior.children.len());
    while low < high {
        let mid = low + (high - low) / 2;
        if node_key(mid) <= key {
            low = mid + 1;
        } else {
            high = mid;
        }
    }
    let position = u32::try_from(low - 1).map_err(|_| PageError::CellCount { count: u32::MAX, max: 0 })?;
    Ok((interior, position))
}

fn le16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([b[0], b[1]]))
}

fn le32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn le64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(b);
    Some(u64::from_le_bytes(word))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A branch page `page_no` with these children, as LMDB lays it out:
    /// node 0 has an empty key, the others short keys; nodes packed at the
    /// end of the page, highest first.
    pub(crate) fn branch(page_size: usize, page_no: u64, children: &[u64]) -> Vec<u8> {
        let mut page = vec![0u8; page_size];
        page[..8].copy_from_slice(&page_no.to_le_bytes());
        page[10..12].copy_from_slice(&P_BRANCH.to_le_bytes());
        let mut upper = page_size;
        for (i, &child) in children.iter().enumerate() {
            let key: Vec<u8> = if i == 0 { Vec::new() } else { format!("user{i:06}").into_bytes() };
            let size = (NODE_HEADER_SIZE + key.len() + 1) & !1;
            upper -= size;
            let node = &mut page[upper..upper + size];
            node[..2].copy_from_slice(&(child as u16).to_le_bytes());
            node[2..4].copy_from_slice(&((child >> 16) as u16).to_le_bytes());
            node[4..6].copy_from_slice(&((child >> 32) as u16).to_le_bytes());
            node[6..8].copy_from_slice(&(key.len() as u16).to_le_bytes());
            node[8..8 + key.len()].copy_from_slice(&key);
            let at = PAGE_HEADER_SIZE + 2 * i;
            page[at..at + 2].copy_from_slice(&(upper as u16).to_le_bytes());
        }
        let lower = PAGE_HEADER_SIZE + 2 * children.len();
        page[12..14].copy_from_slice(&(lower as u16).to_le_bytes());
        page[14..16].copy_from_slice(&(upper as u16).to_le_bytes());
        page
    }

    /// A meta page.
    pub(crate) fn meta(page_size: u32, last_page: u64, root: u64) -> Vec<u8> {
        let mut page = vec![0u8; page_size as usize];
        page[10..12].copy_from_slice(&P_META.to_le_bytes());
        page[16..20].copy_from_slice(&MAGIC.to_le_bytes());
        page[20..24].copy_from_slice(&DATA_VERSION.to_le_bytes());
        page[40..44].copy_from_slice(&page_size.to_le_bytes());
        page[80..88].copy_from_slice(&P_INVALID.to_le_bytes());
        page[94..96].copy_from_slice(&3u16.to_le_bytes());
        page[128..136].copy_from_slice(&root.to_le_bytes());
        page[136..144].copy_from_slice(&last_page.to_le_bytes());
        page[144..152].copy_from_slice(&42u64.to_le_bytes());
        page
    }

    fn geometry() -> Geometry {
        Geometry::new(4096, Some(10_000)).expect("geometry")
    }

    #[test]
    fn parses_branch_pages() {
        let page = branch(4096, 9, &[20, 3, 7000, 15]);
        let parsed = parse_page(&page, 9, &geometry()).expect("branch");
        assert_eq!(parsed.kind, InteriorKind::LmdbBranch);
        assert_eq!(parsed.children, vec![20, 3, 7000, 15]);
        // 48-bit page numbers.
        let far = 0x0000_1234_5678_9abc;
        let page = branch(4096, 9, &[far, 5]);
        let unknown = Geometry::new(4096, None).expect("geometry");
        assert_eq!(parse_page(&page, 9, &unknown).expect("branch").children, vec![far, 5]);
        // Dirty/keep bits are tolerated.
        let mut page = branch(4096, 9, &[4, 5]);
        page[10..12].copy_from_slice(&(P_BRANCH | P_DIRTY).to_le_bytes());
        assert!(parse_page(&page, 9, &geometry()).is_ok());
    }

    #[test]
    fn search_finds_the_child_a_key_descends_into() {
        // Keys: node 0 empty, node i "user{i:06}".
        let page = branch(4096, 9, &[20, 3, 7000, 15]);
        let g = geometry();
        let at = |key: &str| search_branch(&page, 9, &g, key.as_bytes()).expect("branch").1;
        assert_eq!(at(""), 0);
        assert_eq!(at("a"), 0);
        assert_eq!(at("user000001"), 1);
        assert_eq!(at("user0000015"), 1);
        assert_eq!(at("user000002"), 2);
        assert_eq!(at("user000003"), 3);
        assert_eq!(at("zzz"), 3);
        let single = branch(4096, 9, &[20]);
        assert_eq!(search_branch(&single, 9, &g, b"x").expect("branch").1, 0);
        let mut leaf = page.clone();
        leaf[10..12].copy_from_slice(&P_LEAF.to_le_bytes());
        assert_eq!(search_branch(&leaf, 9, &g, b"x"), Err(PageError::Leaf));
    }

    #[test]
    fn meta_pages() {
        let page = meta(4096, 500, 77);
        let m = Meta::parse(&page).expect("meta");
        assert_eq!((m.page_size, m.last_page, m.txnid, m.main_root, m.main_depth), (4096, 500, 42, Some(77), 3));
        assert_eq!(m.geometry().last_page, Some(500));
        assert!(matches!(parse_page(&page, 0, &geometry()), Err(PageError::NotBtree { kind: P_META })));
        let empty = meta(4096, 1, P_INVALID);
        assert_eq!(Meta::parse(&empty).expect("meta").main_root, None);
        let mut bad = meta(4096, 1, 2);
        bad[16] ^= 1;
        assert!(matches!(Meta::parse(&bad), Err(PageError::Header { what: "magic", .. })));
        let mut bad = meta(4096, 1, 2);
        bad[40..44].copy_from_slice(&3000u32.to_le_bytes());
        assert_eq!(Meta::parse(&bad), Err(PageError::PageSize(3000)));
        assert!(matches!(Meta::parse(&page[..100]), Err(PageError::Length { .. })));
        let branch_page = branch(4096, 9, &[4, 5]);
        assert!(matches!(Meta::parse(&branch_page), Err(PageError::NotBtree { .. })));
    }

    #[test]
    fn other_pages_are_passed_over() {
        let mut page = branch(4096, 9, &[4, 5]);
        page[10..12].copy_from_slice(&P_LEAF.to_le_bytes());
        assert_eq!(parse_page(&page, 9, &geometry()), Err(PageError::Leaf));
        for flags in [P_OVERFLOW, P_LEAF | P_LEAF2, P_LEAF | P_SUBP, P_BRANCH | P_LOOSE, 0, P_BRANCH | P_LEAF] {
            page[10..12].copy_from_slice(&flags.to_le_bytes());
            assert_eq!(parse_page(&page, 9, &geometry()), Err(PageError::NotBtree { kind: flags }));
        }
    }

    #[test]
    fn malformed_branch_pages_are_refused() {
        let good = branch(4096, 9, &[20, 3, 70, 15]);
        let g = geometry();
        assert_eq!(parse_page(&good, 8, &g), Err(PageError::PageNumber { expected: 8, found: 9 }));
        let mut bad = good.clone();
        bad[12..14].copy_from_slice(&17u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::Header { what: "mp_lower", .. })));
        let mut bad = good.clone();
        bad[12..14].copy_from_slice(&16u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::CellCount { count: 0, .. })));
        let mut bad = good.clone();
        bad[14..16].copy_from_slice(&5000u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::Header { what: "mp_upper", .. })));
        let mut bad = good.clone();
        bad[16..18].copy_from_slice(&4095u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::CellOutOfBounds { index: 0, .. })));
        let mut bad = good.clone();
        bad[18..20].copy_from_slice(&4090u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::CellOutOfBounds { index: 1, .. })));
        let mut bad = good.clone();
        bad[18..20].copy_from_slice(&20u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::CellOutOfBounds { index: 1, .. })));
        assert!(matches!(
            parse_page(&branch(4096, 9, &[1, 5]), 9, &g),
            Err(PageError::BadChild { index: 0, child: 1 })
        ));
        assert!(matches!(
            parse_page(&branch(4096, 9, &[4, 9]), 9, &g),
            Err(PageError::BadChild { index: 1, child: 9 })
        ));
        assert!(matches!(parse_page(&branch(4096, 9, &[4, 10_001]), 9, &g), Err(PageError::BadChild { .. })));
        // A key running past the page.
        let mut bad = good.clone();
        let node = usize::from(u16::from_le_bytes([bad[16], bad[17]]));
        bad[node + 6..node + 8].copy_from_slice(&4000u16.to_le_bytes());
        assert!(matches!(parse_page(&bad, 9, &g), Err(PageError::CellOutOfBounds { index: 0, .. })));
        assert!(matches!(parse_page(&good[..4000], 9, &g), Err(PageError::Length { .. })));
    }
}
