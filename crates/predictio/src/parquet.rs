//! Parquet footers: which byte ranges of a Parquet file hold which column
//! of which row group.
//!
//! A Parquet reader (DuckDB, Arrow, Spark) reads the footer first, then the
//! column chunks of the columns a query needs, row group by row group. The
//! footer says where every chunk lies; the `columns` policy
//! ([`crate::policies::columns`]) learns from the reader's first accesses
//! which columns it reads and fetches the same columns of the row groups
//! ahead of it.
//!
//! ```text
//! ┌──────┬──────────────────────────────────────────┬──────────────┬─────┬──────┐
//! │"PAR1"│ row group 0: chunk c0, c1, …  row group 1 │ FileMetaData │ u32 │"PAR1"│
//! │      │ (each chunk: [dictionary page] data pages)│ thrift compact│ len │      │
//! └──────┴──────────────────────────────────────────┴──────────────┴─────┴──────┘
//! ```
//!
//! This module parses untrusted bytes. Like [`crate::model`], it never
//! panics, never reserves more than the input justifies (every count is
//! checked against the bytes that remain), nests at most
//! [`MAX_NESTING`] structures deep, reads at most [`MAX_FOOTER_BYTES`] and
//! turns every malformed input into a typed [`ParquetError`]. It reads no
//! column data.

use std::fs::File;
use std::os::fd::AsFd;

/// The magic at both ends of a plain Parquet file.
pub const MAGIC: &[u8; 4] = b"PAR1";

/// The magic of a file whose footer is encrypted (not parsed).
pub const ENCRYPTED_MAGIC: &[u8; 4] = b"PARE";

/// The largest footer parsed. Footers of wide tables with statistics run to
/// a few MiB.
pub const MAX_FOOTER_BYTES: u64 = 16 << 20;

/// The most column chunks kept (row groups × columns).
pub const MAX_CHUNKS: usize = 1 << 18;

/// Thrift structures nested deeper than this are refused (real footers
/// nest five or six deep).
pub const MAX_NESTING: u32 = 32;

/// Why a Parquet footer could not be parsed. Every variant says where.
#[derive(Debug, thiserror::Error)]
pub enum ParquetError {
    /// The file does not end in `PAR1`.
    #[error("not a Parquet file (no PAR1 at its end)")]
    NotParquet,
    /// The footer is encrypted (`PARE`).
    #[error("encrypted Parquet footer (PARE): not parsed")]
    Encrypted,
    /// The footer's declared length does not fit the file.
    #[error("footer of {len} bytes does not fit a file of {file_len} bytes")]
    BadFooterLength {
        /// The declared length.
        len: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A footer larger than [`MAX_FOOTER_BYTES`].
    #[error("footer of {len} bytes exceeds the limit of {limit} bytes")]
    FooterTooLarge {
        /// The declared length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The footer ends inside `what`.
    #[error("footer truncated: {what} at footer byte {offset}")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Its offset within the footer.
        offset: usize,
    },
    /// A thrift field or element type that compact protocol does not define.
    #[error("unknown thrift type {0} at footer byte {1}")]
    BadType(u8, usize),
    /// A varint longer than ten bytes.
    #[error("varint too long at footer byte {0}")]
    BadVarint(usize),
    /// A count that cannot fit in the bytes that remain.
    #[error("{what} count {count} at footer byte {offset} cannot fit in the {remaining} bytes that remain")]
    CountTooLarge {
        /// What is counted.
        what: &'static str,
        /// The count.
        count: u64,
        /// Offset of the count within the footer.
        offset: usize,
        /// Bytes left after it.
        remaining: usize,
    },
    /// Structures nested deeper than [`MAX_NESTING`].
    #[error("thrift structures nested deeper than {MAX_NESTING} at footer byte {0}")]
    NestingTooDeep(usize),
    /// A field the footer must have is missing or has the wrong type.
    #[error("{0}")]
    BadField(&'static str),
    /// A column chunk's bytes lie outside the file's data.
    #[error("row group {row_group} column {column}: bytes {offset}..{end} lie outside the data (4..{data_end})")]
    ChunkOutOfBounds {
        /// Row group index.
        row_group: u32,
        /// Column index.
        column: u32,
        /// First byte.
        offset: u64,
        /// One past the last (saturating).
        end: u64,
        /// Where the footer starts.
        data_end: u64,
    },
    /// More column chunks than [`MAX_CHUNKS`].
    #[error("more than {MAX_CHUNKS} column chunks")]
    TooManyChunks,
    /// Reading only what the page cache holds, the footer's bytes are not
    /// all cached.
    #[error("the Parquet footer is not in the page cache")]
    NotResident,
    /// The footer needs more than the bytes the caller allowed.
    #[error("the Parquet footer needs more than the {limit} bytes allowed")]
    OverBudget {
        /// The bytes allowed.
        limit: u64,
    },
    /// Reading the file failed.
    #[error("{call} of the Parquet footer failed: {source}")]
    Io {
        /// The failing call.
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// One column chunk: where the bytes of one column of one row group are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ColumnChunk {
    /// Row group index.
    pub row_group: u32,
    /// Column index within the row group.
    pub column: u32,
    /// First byte (the dictionary page's, when there is one).
    pub offset: u64,
    /// Length in bytes (compressed, as stored).
    pub len: u64,
}

impl ColumnChunk {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// A Parquet file's layout: its column chunks.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ParquetLayout {
    /// The file's length.
    pub file_len: u64,
    /// Where the footer (its thrift bytes) starts: every chunk ends at or
    /// before it.
    pub footer_offset: u64,
    /// Rows in the file, as the footer says.
    pub rows: u64,
    /// Row groups.
    pub row_groups: u32,
    /// Most columns in a row group.
    pub columns: u32,
    /// Every chunk stored in this file, by row group then column. Chunks a
    /// footer places in another file (`file_path`) and empty ones are left
    /// out.
    pub chunks: Vec<ColumnChunk>,
}

impl ParquetLayout {
    /// Parses a file's tail: `tail` holds the file's last bytes (at least the
    /// footer, its length and the magic); `file_len` is the file's length.
    pub fn parse_tail(tail: &[u8], file_len: u64) -> Result<Self, ParquetError> {
        let footer_len = footer_len(tail, file_len)?;
        let start = tail.len().checked_sub(8 + footer_len as usize).ok_or(ParquetError::Truncated {
            what: "footer (the tail given is shorter than its declared length)",
            offset: 0,
        })?;
        Self::parse_footer(&tail[start..tail.len() - 8], file_len)
    }

    /// Parses the thrift `FileMetaData` of a file of `file_len` bytes, whose
    /// last `footer.len() + 8` bytes are this footer, its length and the
    /// magic.
    pub fn parse_footer(footer: &[u8], file_len: u64) -> Result<Self, ParquetError> {
        let footer_offset = file_len
            .checked_sub(8 + footer.len() as u64)
            .filter(|&at| at >= MAGIC.len() as u64)
            .ok_or(ParquetError::BadFooterLength { len: footer.len() as u64, file_len })?;
        let mut reader = Reader { buf: footer, pos: 0 };
        let mut layout =
            ParquetLayout { file_len, footer_offset, rows: 0, row_groups: 0, columns: 0, chunks: Vec::new() };
        let mut saw_row_groups = false;
        reader.read_struct(0, &mut |reader, id, ty| match (id, ty) {
            (3, Type::I64) => {
                layout.rows = u64::try_from(reader.zigzag()?).unwrap_or(0);
                Ok(true)
            }
            (4, Type::List) => {
                saw_row_groups = true;
                let (elem, count) = reader.collection_header("row group")?;
                if elem != Type::Struct {
                    return Err(ParquetError::BadField("FileMetaData.row_groups is not a list of structs"));
                }
                for index in 0..count {
                    let row_group = u32::try_from(index).map_err(|_| ParquetError::TooManyChunks)?;
                    reader.row_group(row_group, &mut layout)?;
                    layout.row_groups = row_group + 1;
                }
                Ok(true)
            }
            _ => Ok(false),
        })?;
        if !saw_row_groups {
            return Err(ParquetError::BadField("FileMetaData has no row_groups"));
        }
        for chunk in &layout.chunks {
            if chunk.offset < MAGIC.len() as u64 || chunk.end() > footer_offset {
                return Err(ParquetError::ChunkOutOfBounds {
                    row_group: chunk.row_group,
                    column: chunk.column,
                    offset: chunk.offset,
                    end: chunk.end(),
                    data_end: footer_offset,
                });
            }
        }
        Ok(layout)
    }

    /// Reads and parses `file`'s footer from the bytes the page cache holds
    /// alone (`cachestat`, then `preadv2(RWF_NOWAIT)`), at most `max_bytes`
    /// in all: it never waits on storage and never makes a page resident.
    /// A reader that opened the file read its footer first, so it is cached
    /// when the reader's accesses are seen. Returns the layout and the bytes
    /// read.
    pub fn read_resident(file: &File, max_bytes: u64) -> Result<(Self, u64), ParquetError> {
        Self::read_with(file, max_bytes, &mut |buf, offset| read_resident_at(file, buf, offset))
    }

    /// Reads `file`'s footer with ordinary reads, which may wait on storage
    /// (for tools, never an event path: see
    /// [`ParquetLayout::read_resident`]), and parses it. Reads at most
    /// [`MAX_FOOTER_BYTES`] and 8 more.
    pub fn read(file: &File) -> Result<Self, ParquetError> {
        use std::os::unix::fs::FileExt;
        let mut pread = |buf: &mut [u8], offset: u64| {
            file.read_exact_at(buf, offset).map_err(|source| ParquetError::Io { call: "pread", source })
        };
        Self::read_with(file, u64::MAX, &mut pread).map(|(layout, _)| layout)
    }

    /// The footer read with `read_at` (which fills a buffer from an
    /// offset, whole or not at all), at most `max_bytes` of it; the layout
    /// and the bytes read.
    fn read_with(file: &File, max_bytes: u64, read_at: ReadAt<'_>) -> Result<(Self, u64), ParquetError> {
        let file_len = file.metadata().map_err(|source| ParquetError::Io { call: "fstat", source })?.len();
        if file_len < 12 {
            return Err(ParquetError::NotParquet);
        }
        let mut end = [0u8; 8];
        read_at(&mut end, file_len - 8)?;
        let footer_len = footer_len(&end, file_len)?;
        let spent = 8 + footer_len;
        if spent > max_bytes {
            return Err(ParquetError::OverBudget { limit: max_bytes });
        }
        let mut footer = vec![0u8; footer_len as usize];
        read_at(&mut footer, file_len - 8 - footer_len)?;
        Ok((Self::parse_footer(&footer, file_len)?, spent))
    }

    /// Bytes of column data in all.
    pub fn chunk_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.len).fold(0, u64::saturating_add)
    }
}

/// Whether a file's last bytes end in a Parquet magic (plain or encrypted).
pub fn ends_like_parquet(last: &[u8]) -> bool {
    last.ends_with(MAGIC) || last.ends_with(ENCRYPTED_MAGIC)
}

/// The footer length the last 8 bytes of `tail` declare, checked against
/// the file and [`MAX_FOOTER_BYTES`].
fn footer_len(tail: &[u8], file_len: u64) -> Result<u64, ParquetError> {
    if tail.len() < 8 {
        return Err(ParquetError::Truncated { what: "footer length and magic", offset: 0 });
    }
    let last = &tail[tail.len() - 8..];
    if &last[4..] == ENCRYPTED_MAGIC {
        return Err(ParquetError::Encrypted);
    }
    if &last[4..] != MAGIC {
        return Err(ParquetError::NotParquet);
    }
    let len = u64::from(u32::from_le_bytes([last[0], last[1], last[2], last[3]]));
    if len > MAX_FOOTER_BYTES {
        return Err(ParquetError::FooterTooLarge { len, limit: MAX_FOOTER_BYTES });
    }
    // The leading magic, the footer, its length and the trailing magic.
    if len.saturating_add(12) > file_len {
        return Err(ParquetError::BadFooterLength { len, file_len });
    }
    Ok(len)
}

/// Fills a buffer from an offset of the file, whole or with an error.
type ReadAt<'a> = &'a mut dyn FnMut(&mut [u8], u64) -> Result<(), ParquetError>;

/// Fills `buf` from `offset` with bytes the page cache holds.
fn read_resident_at(file: &File, buf: &mut [u8], offset: u64) -> Result<(), ParquetError> {
    let mut done = 0;
    while done < buf.len() {
        match crate::sys::pread_resident(file.as_fd(), &mut buf[done..], offset + done as u64) {
            Ok(Some(0)) => return Err(ParquetError::NotParquet),
            Ok(Some(n)) => done += n,
            Ok(None) => return Err(ParquetError::NotResident),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(ParquetError::Io { call: "preadv2", source }),
        }
    }
    Ok(())
}

/// Thrift compact protocol types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Type {
    True,
    False,
    Byte,
    I16,
    I32,
    I64,
    Double,
    Binary,
    List,
    Set,
    Map,
    Struct,
    Uuid,
}

impl Type {
    fn of(code: u8, at: usize) -> Result<Self, ParquetError> {
        Ok(match code {
            1 => Type::True,
            2 => Type::False,
            3 => Type::Byte,
            4 => Type::I16,
            5 => Type::I32,
            6 => Type::I64,
            7 => Type::Double,
            8 => Type::Binary,
            9 => Type::List,
            10 => Type::Set,
            11 => Type::Map,
            12 => Type::Struct,
            13 => Type::Uuid,
            other => return Err(ParquetError::BadType(other, at)),
        })
    }
}

/// A struct field handler: given the reader at a field's value, its id and
/// type, reads the value and returns `Ok(true)`, or returns `Ok(false)`
/// without reading for the caller to skip it.
type FieldFn<'f, 'a> = &'f mut dyn FnMut(&mut Reader<'a>, i16, Type) -> Result<bool, ParquetError>;

/// A cursor over thrift compact bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&mut self, what: &'static str) -> Result<u8, ParquetError> {
        let byte = *self.buf.get(self.pos).ok_or(ParquetError::Truncated { what, offset: self.pos })?;
        self.pos += 1;
        Ok(byte)
    }

    fn advance(&mut self, n: u64, what: &'static str) -> Result<(), ParquetError> {
        if n > self.remaining() as u64 {
            return Err(ParquetError::Truncated { what, offset: self.pos });
        }
        self.pos += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, ParquetError> {
        let start = self.pos;
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte("varint")?;
            value |= u64::from(byte & 0x7f).checked_shl(shift).unwrap_or(0);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ParquetError::BadVarint(start))
    }

    fn zigzag(&mut self) -> Result<i64, ParquetError> {
        let raw = self.varint()?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    /// A list or set header: element type and count, the count checked
    /// against the bytes that remain (every element takes at least one).
    fn collection_header(&mut self, what: &'static str) -> Result<(Type, u64), ParquetError> {
        let at = self.pos;
        let head = self.byte("list header")?;
        let elem = Type::of(head & 0x0f, at)?;
        let count = match head >> 4 {
            15 => self.varint()?,
            short => u64::from(short),
        };
        if count > self.remaining() as u64 {
            return Err(ParquetError::CountTooLarge { what, count, offset: at, remaining: self.remaining() });
        }
        Ok((elem, count))
    }

    /// Reads a struct's fields up to its stop byte, handing each to `field`
    /// and skipping those it does not read.
    fn read_struct(&mut self, depth: u32, field: FieldFn<'_, 'a>) -> Result<(), ParquetError> {
        if depth >= MAX_NESTING {
            return Err(ParquetError::NestingTooDeep(self.pos));
        }
        let mut last_id: i16 = 0;
        loop {
            let at = self.pos;
            let head = self.byte("field header")?;
            if head == 0 {
                return Ok(());
            }
            let ty = Type::of(head & 0x0f, at)?;
            let id = match head >> 4 {
                0 => i16::try_from(self.zigzag()?).map_err(|_| ParquetError::BadField("field id out of range"))?,
                delta => last_id.saturating_add(i16::from(delta)),
            };
            last_id = id;
            if !field(self, id, ty)? {
                self.skip(ty, depth + 1, true)?;
            }
        }
    }

    /// Skips one value of type `ty`. `in_field`: a boolean's value is in the
    /// field header (no byte follows); in a collection it takes one byte.
    fn skip(&mut self, ty: Type, depth: u32, in_field: bool) -> Result<(), ParquetError> {
        if depth >= MAX_NESTING {
            return Err(ParquetError::NestingTooDeep(self.pos));
        }
        match ty {
            Type::True | Type::False => {
                if !in_field {
                    self.byte("bool")?;
                }
            }
            Type::Byte => {
                self.byte("byte")?;
            }
            Type::I16 | Type::I32 | Type::I64 => {
                self.varint()?;
            }
            Type::Double => self.advance(8, "double")?,
            Type::Uuid => self.advance(16, "uuid")?,
            Type::Binary => {
                let len = self.varint()?;
                self.advance(len, "binary")?;
            }
            Type::List | Type::Set => {
                let (elem, count) = self.collection_header("list element")?;
                for _ in 0..count {
                    self.skip(elem, depth + 1, false)?;
                }
            }
            Type::Map => {
                let at = self.pos;
                let count = self.varint()?;
                if count > 0 {
                    if count > (self.remaining() / 2) as u64 {
                        return Err(ParquetError::CountTooLarge {
                            what: "map entry",
                            count,
                            offset: at,
                            remaining: self.remaining(),
                        });
                    }
                    let types_at = self.pos;
                    let types = self.byte("map types")?;
                    let (key, value) = (Type::of(types >> 4, types_at)?, Type::of(types & 0x0f, types_at)?);
                    for _ in 0..count {
                        self.skip(key, depth + 1, false)?;
                        self.skip(value, depth + 1, false)?;
                    }
                }
            }
            Type::Struct => self.read_struct(depth, &mut |_, _, _| Ok(false))?,
        }
        Ok(())
    }

    /// A `RowGroup`: its `columns` (field 1) into `layout`.
    fn row_group(&mut self, row_group: u32, layout: &mut ParquetLayout) -> Result<(), ParquetError> {
        self.read_struct(1, &mut |reader, id, ty| {
            if (id, ty) != (1, Type::List) {
                return Ok(false);
            }
            let (elem, count) = reader.collection_header("column chunk")?;
            if elem != Type::Struct {
                return Err(ParquetError::BadField("RowGroup.columns is not a list of structs"));
            }
            for index in 0..count {
                let column = u32::try_from(index).map_err(|_| ParquetError::TooManyChunks)?;
                if let Some((offset, len)) = reader.column_chunk()?
                    && len > 0
                {
                    if layout.chunks.len() >= MAX_CHUNKS {
                        return Err(ParquetError::TooManyChunks);
                    }
                    layout.chunks.push(ColumnChunk { row_group, column, offset, len });
                }
                layout.columns = layout.columns.max(column + 1);
            }
            Ok(true)
        })
    }

    /// A `ColumnChunk`: its byte range in this file, or `None` when it lies
    /// in another file (`file_path`, field 1).
    fn column_chunk(&mut self) -> Result<Option<(u64, u64)>, ParquetError> {
        let mut elsewhere = false;
        let mut range = None;
        self.read_struct(2, &mut |reader, id, ty| match (id, ty) {
            (1, Type::Binary) => {
                elsewhere = true;
                Ok(false)
            }
            (3, Type::Struct) => {
                range = Some(reader.column_meta()?);
                Ok(true)
            }
            _ => Ok(false),
        })?;
        match range {
            None if !elsewhere => Err(ParquetError::BadField("ColumnChunk has no meta_data")),
            _ if elsewhere => Ok(None),
            range => Ok(range),
        }
    }

    /// A `ColumnMetaData`: where its pages start (the dictionary page's
    /// offset, field 11, when it precedes the first data page, field 9) and
    /// `total_compressed_size` (field 7).
    fn column_meta(&mut self) -> Result<(u64, u64), ParquetError> {
        let (mut data, mut dictionary, mut size) = (None, None, None);
        self.read_struct(3, &mut |reader, id, ty| {
            let slot = match (id, ty) {
                (7, Type::I64) => &mut size,
                (9, Type::I64) => &mut data,
                (11, Type::I64) => &mut dictionary,
                _ => return Ok(false),
            };
            *slot = Some(reader.zigzag()?);
            Ok(true)
        })?;
        let data = data.and_then(|v| u64::try_from(v).ok());
        let size = size.and_then(|v| u64::try_from(v).ok());
        let (Some(data), Some(size)) = (data, size) else {
            return Err(ParquetError::BadField("ColumnMetaData lacks data_page_offset or total_compressed_size"));
        };
        // Some writers store 0 for "no dictionary page".
        let start = match dictionary.and_then(|v| u64::try_from(v).ok()) {
            Some(dict) if dict > 0 && dict < data => dict,
            _ => data,
        };
        Ok((start, size))
    }
}

/// Thrift compact encoding of a footer, for tests and fuzz seeds: a file's
/// `FileMetaData` with the given chunks (row group → (offset, len) per
/// column), `rows` rows, a one-column-per-chunk schema and the fields a
/// real writer adds that the parser skips (schema, statistics, encodings,
/// key-value metadata, `created_by`).
#[doc(hidden)]
pub fn encode_footer(row_groups: &[Vec<(u64, u64)>], rows: u64) -> Vec<u8> {
    let mut out = Vec::new();
    let columns = row_groups.iter().map(Vec::len).max().unwrap_or(0);
    // 1: version i32
    field(&mut out, 0, 1, 5);
    varint(&mut out, zig(1));
    // 2: schema list<SchemaElement{4: name binary}>
    field(&mut out, 1, 2, 9);
    list_header(&mut out, 12, columns + 1);
    for i in 0..=columns {
        field(&mut out, 0, 4, 8);
        let name = if i == 0 { "schema".to_owned() } else { format!("c{i}") };
        varint(&mut out, name.len() as u64);
        out.extend_from_slice(name.as_bytes());
        out.push(0);
    }
    // 3: num_rows i64
    field(&mut out, 2, 3, 6);
    varint(&mut out, zig(rows as i64));
    // 4: row_groups
    field(&mut out, 3, 4, 9);
    list_header(&mut out, 12, row_groups.len());
    for chunks in row_groups {
        field(&mut out, 0, 1, 9);
        list_header(&mut out, 12, chunks.len());
        for (index, &(offset, len)) in chunks.iter().enumerate() {
            // ColumnChunk { 2: file_offset, 3: meta_data }
            field(&mut out, 0, 2, 6);
            varint(&mut out, zig((offset + len) as i64));
            field(&mut out, 2, 3, 12);
            // ColumnMetaData
            field(&mut out, 0, 1, 5);
            varint(&mut out, zig(6));
            field(&mut out, 1, 2, 9);
            list_header(&mut out, 5, 2);
            varint(&mut out, zig(0));
            varint(&mut out, zig(8));
            field(&mut out, 2, 3, 9);
            list_header(&mut out, 8, 1);
            let name = format!("c{}", index + 1);
            varint(&mut out, name.len() as u64);
            out.extend_from_slice(name.as_bytes());
            field(&mut out, 3, 4, 5);
            varint(&mut out, zig(1));
            field(&mut out, 4, 5, 6);
            varint(&mut out, zig(rows as i64));
            field(&mut out, 5, 6, 6);
            varint(&mut out, zig(len as i64 * 2));
            field(&mut out, 6, 7, 6);
            varint(&mut out, zig(len as i64));
            // 8: key_value_metadata list<KeyValue>, empty
            field(&mut out, 7, 8, 9);
            list_header(&mut out, 12, 0);
            let dictionary = index % 2 == 1 && len > 16;
            field(&mut out, 8, 9, 6);
            varint(&mut out, zig(if dictionary { offset + 16 } else { offset } as i64));
            if dictionary {
                field(&mut out, 9, 11, 6);
                varint(&mut out, zig(offset as i64));
            }
            // 12: statistics { 5: max_value binary, 6: min_value binary, 7: is_max_exact bool }
            field(&mut out, if dictionary { 11 } else { 9 }, 12, 12);
            field(&mut out, 0, 5, 8);
            varint(&mut out, 8);
            out.extend_from_slice(&u64::MAX.to_le_bytes());
            field(&mut out, 5, 6, 8);
            varint(&mut out, 8);
            out.extend_from_slice(&0u64.to_le_bytes());
            field(&mut out, 6, 7, 1);
            out.push(0);
            // end ColumnMetaData, ColumnChunk
            out.push(0);
            out.push(0);
        }
        // 2: total_byte_size, 3: num_rows
        field(&mut out, 1, 2, 6);
        varint(&mut out, zig(chunks.iter().map(|c| c.1 as i64).sum()));
        field(&mut out, 2, 3, 6);
        varint(&mut out, zig((rows / row_groups.len().max(1) as u64) as i64));
        out.push(0);
    }
    // 5: key_value_metadata map-free list<KeyValue{1: key}>, 6: created_by
    field(&mut out, 4, 5, 9);
    list_header(&mut out, 12, 1);
    field(&mut out, 0, 1, 8);
    varint(&mut out, 3);
    out.extend_from_slice(b"key");
    out.push(0);
    field(&mut out, 1, 6, 8);
    varint(&mut out, 9);
    out.extend_from_slice(b"predictio");
    out.push(0);
    return out;

    fn field(out: &mut Vec<u8>, previous: i16, id: i16, ty: u8) {
        let delta = id - previous;
        if (1..=15).contains(&delta) {
            out.push(((delta as u8) << 4) | ty);
        } else {
            out.push(ty);
            varint(out, zig(i64::from(id)));
        }
    }
    fn list_header(out: &mut Vec<u8>, ty: u8, len: usize) {
        if len < 15 {
            out.push(((len as u8) << 4) | ty);
        } else {
            out.push(0xf0 | ty);
            varint(out, len as u64);
        }
    }
    fn zig(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
}

/// A whole Parquet file's bytes around [`encode_footer`]: the magic, `data`
/// zero bytes, the footer, its length and the magic.
#[doc(hidden)]
pub fn encode_file(row_groups: &[Vec<(u64, u64)>], rows: u64, data: u64) -> (Vec<u8>, u64) {
    let footer = encode_footer(row_groups, rows);
    let mut tail = footer.clone();
    tail.extend_from_slice(&(footer.len() as u32).to_le_bytes());
    tail.extend_from_slice(MAGIC);
    (tail, 4 + data + footer.len() as u64 + 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout_of(groups: &[Vec<(u64, u64)>], data: u64) -> Result<ParquetLayout, ParquetError> {
        let (tail, file_len) = encode_file(groups, 1000, data);
        ParquetLayout::parse_tail(&tail, file_len)
    }

    #[test]
    fn chunks_by_row_group_and_column() {
        let groups = vec![vec![(4, 100), (104, 50), (154, 10)], vec![(164, 100), (264, 50), (314, 10)]];
        let layout = layout_of(&groups, 400).expect("parses");
        assert_eq!((layout.row_groups, layout.columns, layout.rows), (2, 3, 1000));
        let ranges: Vec<(u32, u32, u64, u64)> =
            layout.chunks.iter().map(|c| (c.row_group, c.column, c.offset, c.len)).collect();
        assert_eq!(
            ranges,
            vec![(0, 0, 4, 100), (0, 1, 104, 50), (0, 2, 154, 10), (1, 0, 164, 100), (1, 1, 264, 50), (1, 2, 314, 10)]
        );
        assert_eq!(layout.chunk_bytes(), 320);
        assert_eq!(layout.footer_offset, 404);
    }

    #[test]
    fn many_row_groups_use_the_long_list_header() {
        let groups: Vec<Vec<(u64, u64)>> = (0..40u64).map(|rg| vec![(4 + rg * 10, 10)]).collect();
        let layout = layout_of(&groups, 400).expect("parses");
        assert_eq!(layout.row_groups, 40);
        assert_eq!(layout.chunks.len(), 40);
    }

    #[test]
    fn chunks_outside_the_data_are_refused() {
        let err = layout_of(&[vec![(4, 500)]], 400).expect_err("past the footer");
        assert!(matches!(err, ParquetError::ChunkOutOfBounds { end: 504, data_end: 404, .. }), "{err}");
        let err = layout_of(&[vec![(0, 10)]], 400).expect_err("over the magic");
        assert!(matches!(err, ParquetError::ChunkOutOfBounds { .. }), "{err}");
    }

    #[test]
    fn bad_tails_are_typed_errors() {
        assert!(matches!(ParquetLayout::parse_tail(b"abcdefgh", 100), Err(ParquetError::NotParquet)));
        assert!(matches!(ParquetLayout::parse_tail(b"\x10\0\0\0PARE", 100), Err(ParquetError::Encrypted)));
        assert!(matches!(
            ParquetLayout::parse_tail(b"\xff\xff\xff\x01PAR1", 1 << 30),
            Err(ParquetError::FooterTooLarge { .. })
        ));
        assert!(matches!(ParquetLayout::parse_tail(b"\x64\0\0\0PAR1", 50), Err(ParquetError::BadFooterLength { .. })));
        assert!(matches!(ParquetLayout::parse_tail(b"\x64\0\0\0PAR1", 500), Err(ParquetError::Truncated { .. })));
        // An empty struct: no row groups.
        assert!(matches!(ParquetLayout::parse_footer(&[0], 100), Err(ParquetError::BadField(_))));
        // A list whose count cannot fit.
        assert!(matches!(
            ParquetLayout::parse_footer(&[0x49, 0xfc, 0xff, 0xff, 0x0f], 100),
            Err(ParquetError::CountTooLarge { .. })
        ));
        // Nesting without end.
        let deep = vec![0x1c; 200];
        assert!(matches!(ParquetLayout::parse_footer(&deep, 1000), Err(ParquetError::NestingTooDeep(_))));
    }

    #[test]
    fn every_prefix_and_every_flipped_byte_is_an_answer_not_a_panic() {
        let groups = vec![vec![(4, 100), (104, 50)], vec![(154, 100), (254, 50)]];
        let footer = encode_footer(&groups, 10);
        for cut in 0..footer.len() {
            assert!(ParquetLayout::parse_footer(&footer[..cut], 1000).is_err(), "prefix of {cut} bytes");
        }
        for at in 0..footer.len() {
            for flip in [0x01, 0x10, 0x80, 0xff] {
                let mut bytes = footer.clone();
                bytes[at] ^= flip;
                if let Ok(layout) = ParquetLayout::parse_footer(&bytes, 1000) {
                    assert!(layout.chunks.iter().all(|c| c.offset >= 4 && c.end() <= layout.footer_offset));
                }
            }
        }
    }
}
