//! SQLite interior pages (file format: <https://www.sqlite.org/fileformat2.html>).
//!
//! ```text
//! page 1:  ┌ 100-byte database header ─────────────────────────────────────┐
//!          │ 0 "SQLite format 3\0"  16 page size (u16 BE, 1 = 65536)       │
//!          │ 18 write ver  19 read ver  20 reserved bytes  21..24 64,32,32 │
//!          │ 24 change counter  28 page count  32 freelist trunk  36 count │
//!          │ 92 version-valid-for (page count valid iff == change counter) │
//!          └────────────────────────────────────────────────────────────────┘
//! b-tree page header at 0 (100 on page 1), big endian:
//!   +0 type: 0x05 interior table, 0x02 interior index, 0x0d leaf table, 0x0a leaf index
//!   +1 first freeblock (u16)  +3 cell count (u16)  +5 cell content start (u16, 0 = 65536)
//!   +7 fragmented free bytes (u8)  +8 right-most child (u32, interior only)
//! cell pointer array (u16 each) after the 12-byte interior header, in key order;
//! each interior cell starts with its 4-byte left-child page number.
//! ```
//!
//! Everything is checked against the page size and the usable size (page
//! size minus reserved bytes): header fields, the cell count (each cell
//! needs a 2-byte pointer and at least 4 bytes), every cell pointer (inside
//! `[end of pointer array, usable size − 4]`), every child (≥ 2 — page 1 is
//! the schema root and is nobody's child —, not the page itself, not the
//! lock-byte page, ≤ the page count when the header's count is valid).
//! Overflow and freelist trunk pages start with a page number, not a type
//! byte, and are passed over as [`PageError::NotBtree`] (or fail a later
//! check); a freelist *leaf* page keeps whatever it held before it was freed
//! and cannot be told from a live page by its bytes — SQLite never reads one
//! during a traversal, and a stale one costs one bounded window. In WAL mode
//! the database file may hold an older version of a page than the WAL; the
//! parse is still safe, only the prediction may be stale. WAL files
//! themselves are recognised by [`Header::parse`] and passed over.

use super::{DbPageLayout, Engine, InteriorKind, InteriorPage, PageError};

/// Size of the database header at the start of page 1.
pub const HEADER_SIZE: usize = 100;

/// The first 16 bytes of every SQLite database file.
pub const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// The first 4 bytes (big endian) of a WAL file, with either checksum order.
pub const WAL_MAGIC: [u32; 2] = [0x377f_0682, 0x377f_0683];

/// Byte offset of the lock-byte page, which never holds b-tree data.
const PENDING_BYTE: u64 = 0x4000_0000;

/// Page type: interior index b-tree page.
pub const INTERIOR_INDEX: u8 = 0x02;
/// Page type: interior table b-tree page.
pub const INTERIOR_TABLE: u8 = 0x05;
/// Page type: leaf index b-tree page.
pub const LEAF_INDEX: u8 = 0x0a;
/// Page type: leaf table b-tree page.
pub const LEAF_TABLE: u8 = 0x0d;

/// The fields of the database header that page parsing needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Page size in bytes (512 to 65,536).
    pub page_size: u32,
    /// Bytes reserved at the end of each page (encryption, checksums).
    pub reserved: u8,
    /// Pages in the database, when the header's count is valid (it is only
    /// trusted when `version-valid-for` equals the change counter, as
    /// SQLite itself does).
    pub page_count: Option<u32>,
    /// The file is in WAL mode (read or write version 2).
    pub wal: bool,
    /// First freelist trunk page (0: none).
    pub freelist_trunk: u32,
    /// Pages on the freelist.
    pub freelist_count: u32,
}

impl Header {
    /// Parses the first [`HEADER_SIZE`] bytes of a file (more may be given).
    pub fn parse(bytes: &[u8]) -> Result<Header, PageError> {
        let Some(header) = bytes.get(..HEADER_SIZE) else {
            return Err(PageError::Length { expected: HEADER_SIZE, actual: bytes.len() });
        };
        if header[..16] != MAGIC[..] {
            let first = be32(header, 0).unwrap_or(0);
            if WAL_MAGIC.contains(&first) {
                return Err(PageError::WalFile);
            }
            return Err(PageError::Header { what: "magic", value: u64::from(first) });
        }
        let raw_size = be16(header, 16).unwrap_or(0);
        let page_size = if raw_size == 1 { 65536 } else { u32::from(raw_size) };
        if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
            return Err(PageError::PageSize(page_size));
        }
        let (write_version, read_version) = (header[18], header[19]);
        if !(1..=2).contains(&write_version) {
            return Err(PageError::Header { what: "write version", value: u64::from(write_version) });
        }
        if !(1..=2).contains(&read_version) {
            return Err(PageError::Header { what: "read version", value: u64::from(read_version) });
        }
        let reserved = header[20];
        if page_size - u32::from(reserved) < 480 {
            return Err(PageError::Header { what: "reserved bytes", value: u64::from(reserved) });
        }
        if header[21..24] != [64, 32, 32] {
            return Err(PageError::Header { what: "payload fractions", value: u64::from(header[21]) });
        }
        let change_counter = be32(header, 24).unwrap_or(0);
        let count = be32(header, 28).unwrap_or(0);
        let valid_for = be32(header, 92).unwrap_or(0);
        let page_count = (count > 0 && valid_for == change_counter).then_some(count);
        Ok(Header {
            page_size,
            reserved,
            page_count,
            wal: write_version == 2 || read_version == 2,
            freelist_trunk: be32(header, 32).unwrap_or(0),
            freelist_count: be32(header, 36).unwrap_or(0),
        })
    }

    /// What [`parse_page`] needs to know of this file.
    pub fn geometry(&self) -> Geometry {
        Geometry {
            page_size: self.page_size,
            usable_size: self.page_size - u32::from(self.reserved),
            page_count: self.page_count,
        }
    }

    /// Where this file's pages lie.
    pub fn layout(&self) -> Result<DbPageLayout, PageError> {
        DbPageLayout::new(Engine::Sqlite, self.page_size)
    }
}

/// The page geometry of one database file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Page size in bytes.
    pub page_size: u32,
    /// Page size minus reserved bytes: where cells must end.
    pub usable_size: u32,
    /// Pages in the file, if known: children beyond it are refused.
    pub page_count: Option<u32>,
}

impl Geometry {
    /// A geometry from its parts, checked as [`Header::parse`] checks them.
    pub fn new(page_size: u32, reserved: u8, page_count: Option<u32>) -> Result<Self, PageError> {
        if !page_size.is_power_of_two() || !(512..=65536).contains(&page_size) {
            return Err(PageError::PageSize(page_size));
        }
        let usable_size = page_size - u32::from(reserved);
        if usable_size < 480 {
            return Err(PageError::Header { what: "reserved bytes", value: u64::from(reserved) });
        }
        Ok(Self { page_size, usable_size, page_count })
    }

    /// Whether `page` can be a b-tree page of this file: not page 1 (the
    /// schema's root, nobody's child), not the lock-byte page, not beyond
    /// the page count when it is known.
    fn btree_page(&self, page: u32) -> bool {
        let lock_page = PENDING_BYTE / u64::from(self.page_size) + 1;
        page >= 2 && u64::from(page) != lock_page && self.page_count.is_none_or(|n| page <= n)
    }
}

/// Parses database page `page_no` (numbered from 1; its b-tree header
/// starts after the database header on page 1). `page` must be exactly one
/// page. An interior table or index page yields its children in key order;
/// anything else is a [`PageError`] (a valid leaf is [`PageError::Leaf`]).
pub fn parse_page(page: &[u8], page_no: u32, geometry: &Geometry) -> Result<InteriorPage, PageError> {
    let (page_size, usable) = whole_page(page, geometry)?;
    if page_no == 0 {
        return Err(PageError::Header { what: "page number", value: 0 });
    }
    let header = if page_no == 1 { HEADER_SIZE } else { 0 };
    let kind = match page[header] {
        INTERIOR_TABLE => InteriorKind::SqliteTable,
        INTERIOR_INDEX => InteriorKind::SqliteIndex,
        LEAF_TABLE | LEAF_INDEX => return Err(PageError::Leaf),
        other => return Err(PageError::NotBtree { kind: u16::from(other) }),
    };
    let field = |offset: usize| be16(page, header + offset).map(usize::from);
    let (Some(freeblock), Some(count), Some(content), Some(right)) =
        (field(1), field(3), field(5), be32(page, header + 8))
    else {
        return Err(PageError::Length { expected: page_size, actual: page.len() });
    };
    let fragmented = page[header + 7];
    let array_start = header + 12;
    // Each cell needs a 2-byte pointer and at least a 4-byte child number.
    let max = usable.saturating_sub(array_start) / 6;
    if count > max {
        return Err(PageError::CellCount { count: count as u32, max: max as u32 });
    }
    let array_end = array_start + 2 * count;
    let content = if content == 0 { 65536 } else { content };
    if content < array_end || content > usable {
        return Err(PageError::Header { what: "cell content start", value: content as u64 });
    }
    if freeblock != 0 && (freeblock < array_end || freeblock + 4 > usable) {
        return Err(PageError::Header { what: "first freeblock", value: freeblock as u64 });
    }
    if fragmented > 60 {
        return Err(PageError::Header { what: "fragmented bytes", value: u64::from(fragmented) });
    }
    let check = |index: usize, child: u32| -> Result<u64, PageError> {
        if child == page_no || !geometry.btree_page(child) {
            return Err(PageError::BadChild { index: index as u32, child: u64::from(child) });
        }
        Ok(u64::from(child))
    };
    let mut children = Vec::with_capacity(count + 1);
    for index in 0..count {
        let offset = be16(page, array_start + 2 * index).map(usize::from).unwrap_or(0);
        if offset < array_end || offset + 4 > usable {
            return Err(PageError::CellOutOfBounds { index: index as u32, offset: offset as u32 });
        }
        let child =
            be32(page, offset).ok_or(PageError::CellOutOfBounds { index: index as u32, offset: offset as u32 })?;
        children.push(check(index, child)?);
    }
    children.push(check(count, right)?);
    Ok(InteriorPage { kind, children })
}

/// Parses table interior page `page_no` with its keys (see
/// [`rowid::TableInterior`](super::rowid::TableInterior)): checked as
/// [`parse_page`] checks it, and each cell's key read after its child.
pub fn parse_table_interior(
    page: &[u8],
    page_no: u32,
    geometry: &Geometry,
) -> Result<super::rowid::TableInterior, PageError> {
    let parsed = parse_page(page, page_no, geometry)?;
    if parsed.kind != InteriorKind::SqliteTable {
        return Err(PageError::NotBtree { kind: u16::from(INTERIOR_INDEX) });
    }
    let header = if page_no == 1 { HEADER_SIZE } else { 0 };
    let cells = parsed.children.len() - 1;
    let mut keys = Vec::with_capacity(cells);
    for index in 0..cells {
        let bad = PageError::CellOutOfBounds { index: index as u32, offset: 0 };
        let offset = usize::from(be16(page, header + 12 + 2 * index).ok_or(bad.clone())?);
        let (key, _) = super::rowid::varint(&page[..geometry.usable_size as usize], offset + 4).ok_or(bad)?;
        keys.push(key as i64);
    }
    let children = parsed.children.iter().map(|&c| u32::try_from(c).unwrap_or(0)).collect();
    Ok(super::rowid::TableInterior { keys, children })
}

/// The rowid at the end of each cell of index leaf page `page_no`, in key
/// order: `None` for a cell whose record does not end in an integer (a
/// `WITHOUT ROWID` table's index) or spills to overflow pages (its rowid
/// is not on this page). Every header field and cell pointer is checked as
/// [`parse_page`] checks an interior page's; a cell's record is read only
/// within the page's usable bytes.
pub fn index_leaf_rowids(page: &[u8], page_no: u32, geometry: &Geometry) -> Result<Vec<Option<i64>>, PageError> {
    let (_, usable) = whole_page(page, geometry)?;
    let header = if page_no == 1 { HEADER_SIZE } else { 0 };
    if page[header] != LEAF_INDEX {
        return Err(PageError::NotBtree { kind: u16::from(page[header]) });
    }
    let (count, array_start, array_end) = leaf_cells(page, header, usable)?;
    let usable_bytes = &page[..usable];
    // The most payload an index cell keeps on its page (file format 1.6).
    let max_local = (usable - 12) * 64 / 255 - 23;
    let mut rowids = Vec::with_capacity(count);
    for index in 0..count {
        let offset = usize::from(be16(page, array_start + 2 * index).unwrap_or(0));
        if offset < array_end || offset >= usable {
            return Err(PageError::CellOutOfBounds { index: index as u32, offset: offset as u32 });
        }
        rowids.push(record_rowid(usable_bytes, offset, max_local));
    }
    Ok(rowids)
}

/// The trailing integer of the index cell at `offset` (see
/// [`index_leaf_rowids`]).
fn record_rowid(bytes: &[u8], offset: usize, max_local: usize) -> Option<i64> {
    use super::rowid::varint;
    let (payload, n) = varint(bytes, offset)?;
    let payload = usize::try_from(payload).ok().filter(|&p| p <= max_local)?;
    let record = bytes.get(offset + n..offset + n + payload)?;
    let (header_len, mut at) = varint(record, 0)?;
    let header_len = usize::try_from(header_len).ok().filter(|&h| h <= record.len())?;
    let (mut body, mut last) = (0usize, None);
    while at < header_len {
        let (serial, len) = varint(&record[..header_len], at)?;
        at += len;
        if let Some(previous) = last {
            body += serial_size(previous)?;
        }
        last = Some(serial);
    }
    let start = header_len.checked_add(body)?;
    let value = match last? {
        8 => 0,
        9 => 1,
        serial @ 1..=6 => integer(record.get(start..start + serial_size(serial)?)?)?,
        _ => return None,
    };
    Some(value)
}

/// A record's integer field: big-endian two's complement of its 1 to 8
/// bytes.
fn integer(field: &[u8]) -> Option<i64> {
    let mut value: i64 = if *field.first()? & 0x80 != 0 { -1 } else { 0 };
    for &byte in field {
        value = (value << 8) | i64::from(byte);
    }
    Some(value)
}

/// The cell count of the leaf page whose b-tree header is at `header`, and
/// where its cell pointer array starts and ends, checked against the usable
/// size (each cell needs a 2-byte pointer and at least 2 bytes).
fn leaf_cells(page: &[u8], header: usize, usable: usize) -> Result<(usize, usize, usize), PageError> {
    let count = usize::from(be16(page, header + 3).unwrap_or(0));
    let array_start = header + 8;
    let max = usable.saturating_sub(array_start) / 4;
    if count > max {
        return Err(PageError::CellCount { count: count as u32, max: max as u32 });
    }
    Ok((count, array_start, array_start + 2 * count))
}

/// Most root pages [`schema_roots`] returns.
pub const MAX_SCHEMA_ROOTS: usize = 64;

/// The root pages of the tables and indexes listed on page 1 (the schema
/// table, `sqlite_schema`), in the order listed, at most
/// [`MAX_SCHEMA_ROOTS`]: what an observer that came late to a database
/// needs to learn the upper pages of its trees, which the engine read before
/// and keeps in its own cache. Only a schema that fits on page 1 (a leaf) is
/// read; a larger one (an interior page 1) gives none. A row whose first
/// four fields (type, name, table name, root page) are not all on the page,
/// or whose root page is not a valid page number, is passed over; every
/// header field and cell pointer is checked as [`parse_page`] checks them.
pub fn schema_roots(page: &[u8], geometry: &Geometry) -> Result<Vec<u32>, PageError> {
    let (_, usable) = whole_page(page, geometry)?;
    match page[HEADER_SIZE] {
        LEAF_TABLE => {}
        INTERIOR_TABLE => return Ok(Vec::new()),
        other => return Err(PageError::NotBtree { kind: u16::from(other) }),
    }
    let (count, array_start, array_end) = leaf_cells(page, HEADER_SIZE, usable)?;
    let usable_bytes = &page[..usable];
    let mut roots = Vec::new();
    for index in 0..count {
        let offset = usize::from(be16(page, array_start + 2 * index).unwrap_or(0));
        if offset < array_end || offset >= usable {
            return Err(PageError::CellOutOfBounds { index: index as u32, offset: offset as u32 });
        }
        let Some(root) = schema_row_root(usable_bytes, offset, usable) else { continue };
        if !geometry.btree_page(root) || roots.contains(&root) {
            continue;
        }
        roots.push(root);
        if roots.len() == MAX_SCHEMA_ROOTS {
            break;
        }
    }
    Ok(roots)
}

/// The root page of the schema row in the table leaf cell at `offset`, if
/// the row is a table's or an index's and its first four fields are on the
/// page (see [`schema_roots`]).
fn schema_row_root(bytes: &[u8], offset: usize, usable: usize) -> Option<u32> {
    use super::rowid::varint;
    let (payload, n) = varint(bytes, offset)?;
    let (_rowid, m) = varint(bytes, offset + n)?;
    // The bytes of the payload on this page (file format 1.6: a table leaf
    // keeps up to `usable − 35`, else at least `min_local` of it).
    let (max_local, min_local) = (usable - 35, (usable - 12) * 32 / 255 - 23);
    let payload = usize::try_from(payload).ok()?;
    let local = if payload <= max_local {
        payload
    } else {
        let local = min_local + (payload - min_local) % (usable - 4);
        if local > max_local { min_local } else { local }
    };
    let start = offset + n + m;
    let record = bytes.get(start..start.checked_add(local)?)?;
    let (header_len, mut at) = varint(record, 0)?;
    let header_len = usize::try_from(header_len).ok().filter(|&h| h <= record.len())?;
    let mut fields = [(0u64, 0usize); 4];
    let mut body = header_len;
    for field in &mut fields {
        if at >= header_len {
            return None;
        }
        let (serial, len) = varint(&record[..header_len], at)?;
        at += len;
        *field = (serial, body);
        body = body.checked_add(serial_size(serial)?)?;
    }
    let (kind, kind_at) = fields[0];
    // Text of 5 bytes: "table" or "index" (serial 13 + 2 * 5).
    let kind = record.get(kind_at..kind_at + 5).filter(|_| kind == 23)?;
    if kind != b"table" && kind != b"index" {
        return None;
    }
    let (serial, root_at) = fields[3];
    if !(1..=6).contains(&serial) {
        return None;
    }
    u32::try_from(integer(record.get(root_at..root_at + serial_size(serial)?)?)?).ok()
}

/// Bytes a record field of serial type `serial` takes.
fn serial_size(serial: u64) -> Option<usize> {
    Some(match serial {
        0 | 8 | 9 => 0,
        1..=4 => serial as usize,
        5 => 6,
        6 | 7 => 8,
        10 | 11 => return None,
        n => usize::try_from((n - 12) / 2).ok()?,
    })
}

/// Checks that `page` is one whole page of `geometry` with a usable size a
/// page can have; its size and usable size.
fn whole_page(page: &[u8], geometry: &Geometry) -> Result<(usize, usize), PageError> {
    let page_size = geometry.page_size as usize;
    if page.len() != page_size {
        return Err(PageError::Length { expected: page_size, actual: page.len() });
    }
    let usable = geometry.usable_size as usize;
    if usable > page_size || usable < 480 {
        return Err(PageError::Header { what: "usable size", value: usable as u64 });
    }
    Ok((page_size, usable))
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A database header for `page_size`-byte pages and `page_count` pages.
    pub(crate) fn header(page_size: u32, page_count: u32) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_SIZE];
        h[..16].copy_from_slice(MAGIC);
        let raw = if page_size == 65536 { 1 } else { page_size as u16 };
        h[16..18].copy_from_slice(&raw.to_be_bytes());
        h[18] = 1;
        h[19] = 1;
        h[21..24].copy_from_slice(&[64, 32, 32]);
        h[24..28].copy_from_slice(&7u32.to_be_bytes());
        h[28..32].copy_from_slice(&page_count.to_be_bytes());
        h[92..96].copy_from_slice(&7u32.to_be_bytes());
        h
    }

    /// An interior page `page_no` of `page_size` bytes with these children
    /// (the last is the right-most pointer), cells packed at the page's end.
    pub(crate) fn interior(page_size: usize, page_no: u32, kind: u8, children: &[u32]) -> Vec<u8> {
        let mut page = vec![0u8; page_size];
        let header = if page_no == 1 { HEADER_SIZE } else { 0 };
        let (cells, right) = children.split_at(children.len() - 1);
        let mut content = page_size;
        for (i, child) in cells.iter().enumerate() {
            // A cell: left child, then a one-byte rowid varint (table) or
            // payload length + payload (index).
            let cell: Vec<u8> = child
                .to_be_bytes()
                .into_iter()
                .chain(if kind == INTERIOR_TABLE { vec![i as u8 & 0x7f] } else { vec![2, 1, 7] })
                .collect();
            content -= cell.len();
            page[content..content + cell.len()].copy_from_slice(&cell);
            let at = header + 12 + 2 * i;
            page[at..at + 2].copy_from_slice(&(content as u16).to_be_bytes());
        }
        page[header] = kind;
        page[header + 3..header + 5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
        page[header + 5..header + 7].copy_from_slice(&((content % 65536) as u16).to_be_bytes());
        page[header + 8..header + 12].copy_from_slice(&right[0].to_be_bytes());
        page
    }

    fn geometry() -> Geometry {
        Geometry::new(4096, 0, Some(1000)).expect("geometry")
    }

    #[test]
    fn parses_interior_table_and_index_pages() {
        let page = interior(4096, 7, INTERIOR_TABLE, &[10, 30, 20, 99]);
        let parsed = parse_page(&page, 7, &geometry()).expect("interior");
        assert_eq!(parsed.kind, InteriorKind::SqliteTable);
        assert_eq!(parsed.children, vec![10, 30, 20, 99]);
        assert_eq!(parsed.position_of(20), Some(2));
        let page = interior(4096, 8, INTERIOR_INDEX, &[11, 12]);
        let parsed = parse_page(&page, 8, &geometry()).expect("interior");
        assert_eq!((parsed.kind, parsed.children), (InteriorKind::SqliteIndex, vec![11, 12]));
        // Only the right-most child.
        let page = interior(4096, 8, INTERIOR_TABLE, &[5]);
        assert_eq!(parse_page(&page, 8, &geometry()).expect("interior").children, vec![5]);
    }

    #[test]
    fn page_one_has_its_header_first() {
        let mut page = interior(4096, 1, INTERIOR_TABLE, &[2, 3, 4]);
        page[..HEADER_SIZE].copy_from_slice(&header(4096, 4));
        let parsed_header = Header::parse(&page).expect("header");
        assert_eq!(parsed_header.page_count, Some(4));
        let parsed = parse_page(&page, 1, &parsed_header.geometry()).expect("interior");
        assert_eq!(parsed.children, vec![2, 3, 4]);
    }

    #[test]
    fn header_fields() {
        let h = Header::parse(&header(65536, 10)).expect("header");
        assert_eq!((h.page_size, h.page_count, h.wal), (65536, Some(10), false));
        let mut stale = header(4096, 10);
        stale[92] = 9;
        assert_eq!(Header::parse(&stale).expect("header").page_count, None, "stale count is not trusted");
        let mut wal = header(4096, 10);
        wal[18] = 2;
        wal[19] = 2;
        assert!(Header::parse(&wal).expect("header").wal);
        let mut wal_file = vec![0u8; 100];
        wal_file[..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        assert_eq!(Header::parse(&wal_file), Err(PageError::WalFile));
        assert!(matches!(Header::parse(&[0u8; 100]), Err(PageError::Header { what: "magic", .. })));
        assert!(matches!(Header::parse(&header(4096, 1)[..50]), Err(PageError::Length { .. })));
        let mut odd = header(4096, 1);
        odd[16..18].copy_from_slice(&1000u16.to_be_bytes());
        assert_eq!(Header::parse(&odd), Err(PageError::PageSize(1000)));
        let mut reserved = header(512, 1);
        reserved[20] = 40;
        assert!(matches!(Header::parse(&reserved), Err(PageError::Header { what: "reserved bytes", .. })));
    }

    #[test]
    fn leaves_and_other_pages_are_passed_over() {
        let mut page = vec![0u8; 4096];
        page[0] = LEAF_TABLE;
        assert_eq!(parse_page(&page, 5, &geometry()), Err(PageError::Leaf));
        page[0] = LEAF_INDEX;
        assert_eq!(parse_page(&page, 5, &geometry()), Err(PageError::Leaf));
        // An overflow or freelist trunk page starts with a page number.
        page[..4].copy_from_slice(&77u32.to_be_bytes());
        assert_eq!(parse_page(&page, 5, &geometry()), Err(PageError::NotBtree { kind: 0 }));
        assert!(matches!(parse_page(&page[..100], 5, &geometry()), Err(PageError::Length { .. })));
    }

    #[test]
    fn malformed_interior_pages_are_refused() {
        let good = interior(4096, 7, INTERIOR_TABLE, &[10, 30, 20, 99]);
        let g = geometry();
        let mut bad = good.clone();
        bad[3..5].copy_from_slice(&2000u16.to_be_bytes());
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::CellCount { .. })));
        let mut bad = good.clone();
        bad[12..14].copy_from_slice(&4094u16.to_be_bytes());
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::CellOutOfBounds { index: 0, .. })));
        let mut bad = good.clone();
        bad[14..16].copy_from_slice(&2u16.to_be_bytes());
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::CellOutOfBounds { index: 1, .. })));
        let mut bad = good.clone();
        bad[8..12].copy_from_slice(&0u32.to_be_bytes());
        assert_eq!(parse_page(&bad, 7, &g), Err(PageError::BadChild { index: 3, child: 0 }));
        let bad = interior(4096, 7, INTERIOR_TABLE, &[10, 7, 99]);
        assert_eq!(parse_page(&bad, 7, &g), Err(PageError::BadChild { index: 1, child: 7 }));
        let bad = interior(4096, 7, INTERIOR_TABLE, &[10, 1001]);
        assert_eq!(parse_page(&bad, 7, &g), Err(PageError::BadChild { index: 1, child: 1001 }));
        let unknown = Geometry::new(4096, 0, None).expect("geometry");
        assert!(parse_page(&bad, 7, &unknown).is_ok(), "no page count, no upper bound");
        let lock_page = (PENDING_BYTE / 4096 + 1) as u32;
        let bad = interior(4096, 7, INTERIOR_TABLE, &[10, lock_page]);
        assert!(matches!(parse_page(&bad, 7, &unknown), Err(PageError::BadChild { .. })));
        let mut bad = good.clone();
        bad[5..7].copy_from_slice(&10u16.to_be_bytes());
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::Header { what: "cell content start", .. })));
        let mut bad = good.clone();
        bad[7] = 61;
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::Header { what: "fragmented bytes", .. })));
        let mut bad = good.clone();
        bad[1..3].copy_from_slice(&4094u16.to_be_bytes());
        assert!(matches!(parse_page(&bad, 7, &g), Err(PageError::Header { what: "first freeblock", .. })));
        // Reserved bytes shrink where cells may lie.
        let reserved = Geometry::new(4096, 32, Some(1000)).expect("geometry");
        assert!(matches!(parse_page(&good, 7, &reserved), Err(PageError::Header { .. })));
    }

    #[test]
    fn sixty_four_kib_pages() {
        let g = Geometry::new(65536, 0, None).expect("geometry");
        let page = interior(65536, 3, INTERIOR_TABLE, &[4, 5, 6]);
        assert_eq!(parse_page(&page, 3, &g).expect("interior").children, vec![4, 5, 6]);
    }

    /// The schema of a real database, with every kind of row: tables with
    /// and without rowids, indexes (declared and automatic), a view and a
    /// trigger (no root page), a statement longer than a page.
    #[test]
    fn schema_roots_are_those_sqlite_lists() {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("s.db");
        let long = "x".repeat(5000);
        let sql = format!(
            "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT UNIQUE, v BLOB);\
             CREATE INDEX t_v ON t(v); CREATE TABLE w(a TEXT PRIMARY KEY, b) WITHOUT ROWID;\
             CREATE VIEW vw AS SELECT id FROM t; CREATE TRIGGER tr AFTER INSERT ON t BEGIN SELECT 1; END;\
             CREATE TABLE long(a DEFAULT '{long}'); INSERT INTO t(k, v) VALUES ('a', x'00');"
        );
        let built = std::process::Command::new("sqlite3").arg(&db).arg(&sql).output();
        if !built.is_ok_and(|out| out.status.success()) {
            crate::testing::skip("needs the sqlite3 shell");
            return;
        }
        let listed = std::process::Command::new("sqlite3")
            .arg(&db)
            .arg("SELECT rootpage FROM sqlite_schema WHERE type IN ('table', 'index') AND rootpage > 0 ORDER BY rowid;")
            .output()
            .expect("sqlite3");
        let mut listed: Vec<u32> =
            String::from_utf8_lossy(&listed.stdout).lines().map(|l| l.trim().parse().expect("root page")).collect();
        let bytes = std::fs::read(&db).expect("read");
        let header = Header::parse(&bytes).expect("header");
        let page = &bytes[..header.page_size as usize];
        let mut roots = schema_roots(page, &header.geometry()).expect("page 1");
        // The long statement's row spills to an overflow page, its first
        // fields on page 1: every listed root is found.
        assert_eq!(listed.len(), 5, "t, its UNIQUE index, t_v, w, the long one: {listed:?}");
        listed.sort_unstable();
        roots.sort_unstable();
        assert_eq!(roots, listed);
    }

    #[test]
    fn schema_roots_pass_over_what_is_not_a_valid_root() {
        let g = geometry();
        // An interior page 1 (a schema too large for it) gives none.
        let mut page = interior(4096, 1, INTERIOR_TABLE, &[2, 3]);
        page[..HEADER_SIZE].copy_from_slice(&header(4096, 1000));
        assert_eq!(schema_roots(&page, &g), Ok(Vec::new()));
        // Not a table leaf at all.
        page[HEADER_SIZE] = LEAF_INDEX;
        assert!(schema_roots(&page, &g).is_err());
        // One leaf cell per row: ("table", "t", "t", root, "x").
        let row = |root: &[u8]| -> Vec<u8> {
            let mut record = vec![6, 23, 15, 15, root.len() as u8, 15];
            record.extend_from_slice(b"tablett");
            record.extend_from_slice(root);
            record.push(b'x');
            let mut cell = vec![record.len() as u8, 1];
            cell.extend(record);
            cell
        };
        let leaf = |cells: &[Vec<u8>]| -> Vec<u8> {
            let mut page = vec![0u8; 4096];
            page[..HEADER_SIZE].copy_from_slice(&header(4096, 1000));
            page[HEADER_SIZE] = LEAF_TABLE;
            page[HEADER_SIZE + 3..HEADER_SIZE + 5].copy_from_slice(&(cells.len() as u16).to_be_bytes());
            let mut content = 4096;
            for (i, cell) in cells.iter().enumerate() {
                content -= cell.len();
                page[content..content + cell.len()].copy_from_slice(cell);
                let at = HEADER_SIZE + 8 + 2 * i;
                page[at..at + 2].copy_from_slice(&(content as u16).to_be_bytes());
            }
            page
        };
        // Roots 5 and 700 are kept; 1 (the schema's own), 0, a page past
        // the count (2000) and a repeat are passed over.
        let page = leaf(&[row(&[5]), row(&[1]), row(&[0]), row(&[0x07, 0xd0]), row(&[0x02, 0xbc]), row(&[5])]);
        assert_eq!(schema_roots(&page, &g), Ok(vec![5, 700]));
        // A cell pointer into the pointer array is refused.
        let mut bad = page.clone();
        bad[HEADER_SIZE + 8..HEADER_SIZE + 10].copy_from_slice(&(HEADER_SIZE as u16).to_be_bytes());
        assert!(schema_roots(&bad, &g).is_err());
    }

    proptest::proptest! {
        /// Whatever page 1 holds after a valid header, the schema parse
        /// ends without panicking and names only valid page numbers.
        #[test]
        fn schema_roots_of_any_page_one_are_valid_pages(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 4096 - HEADER_SIZE),
            leaf in proptest::prelude::any::<bool>(),
        ) {
            let g = geometry();
            let mut page = header(4096, 1000);
            page.extend(body);
            if leaf {
                page[HEADER_SIZE] = LEAF_TABLE;
                page[HEADER_SIZE + 3] = 0;
            }
            if let Ok(roots) = schema_roots(&page, &g) {
                proptest::prop_assert!(roots.len() <= MAX_SCHEMA_ROOTS);
                for root in roots {
                    proptest::prop_assert!((2..=1000).contains(&root));
                }
            }
        }
    }
}
