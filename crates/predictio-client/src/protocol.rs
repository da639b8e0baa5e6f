//! The hint wire format: versioned, compact, little-endian binary frames.
//!
//! This module is the one definition both sides share: clients encode with
//! [`encode`], the daemon decodes with [`decode`] / [`frames`]. The byte-level
//! layout is written down in `docs/protocol.md`; keep the two in step.
//!
//! A datagram carries one or more frames back to back. Every frame starts with
//! a 12-byte header (magic, version, kind, total frame length, handle) and is
//! followed by kind-specific fields. Lists carry an explicit element count that
//! must match the frame length exactly.
//!
//! Invariants a reader must keep:
//! - decoding never panics and never allocates: decoded lists are views over
//!   the received bytes ([`RangeList`], [`PageList`]);
//! - every decoding failure has its own [`DecodeError`] variant, so the daemon
//!   can count rejections per reason;
//! - a frame is at most [`MAX_FRAME`] bytes and a datagram at most
//!   [`MAX_DATAGRAM`] bytes.

use std::fmt;

/// First two bytes of every frame: `b"PH"` ("predictio hint").
pub const MAGIC: [u8; 2] = *b"PH";

/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;

/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 12;

/// Largest frame, header included, in bytes.
pub const MAX_FRAME: usize = 64 * 1024;

/// Largest datagram (one or more frames) in bytes.
pub const MAX_DATAGRAM: usize = 64 * 1024;

/// Most descriptors one datagram may carry (one per `Register` frame).
pub const MAX_FDS_PER_DATAGRAM: usize = 16;

/// The default socket path of the daemon.
pub const DEFAULT_SOCKET_PATH: &str = "/run/predictio/hint.sock";

/// The environment variable that overrides [`DEFAULT_SOCKET_PATH`]:
/// `predictio run` points the command it starts at a private socket this way.
/// Ignored in secure-execution mode (see [`default_socket_path`]).
pub const SOCKET_ENV: &str = "PREDICTIO_HINT_SOCK";

/// The socket a client uses by default: `$PREDICTIO_HINT_SOCK` when set and
/// not empty, else [`DEFAULT_SOCKET_PATH`] — with `secure_getenv(3)`'s rule:
/// in a set-user-ID or set-group-ID program (`AT_SECURE`) the environment
/// is its caller's, who could point the program's hints, and the
/// descriptors they carry, at a socket of the caller's own; there the
/// variable is ignored.
pub fn default_socket_path() -> std::path::PathBuf {
    socket_path_from(std::env::var_os(SOCKET_ENV), crate::sys::secure_execution())
}

/// [`default_socket_path`]'s rule, given the variable's value and whether
/// the process runs in secure-execution mode.
fn socket_path_from(env: Option<std::ffi::OsString>, secure: bool) -> std::path::PathBuf {
    match env {
        Some(path) if !path.is_empty() && !secure => path.into(),
        _ => DEFAULT_SOCKET_PATH.into(),
    }
}

/// Bytes of one `(u64, u64)` list element.
const PAIR_LEN: usize = 16;

/// Most `(u64, u64)` elements one frame can hold.
pub const MAX_PAIRS: usize = (MAX_FRAME - HEADER_LEN - 4) / PAIR_LEN;

/// Most children one `TreeChildEnter` frame can hold.
pub const MAX_CHILDREN: usize = (MAX_FRAME - HEADER_LEN - 16) / 8;

/// A client-chosen name for a file registered with [`Frame::Register`].
/// Handles are private to one client: another client's handle 7 is not yours.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
#[repr(transparent)]
pub struct Handle(pub u32);

/// Frame kinds, as the byte at offset 3 of the header.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum Kind {
    /// [`Frame::Register`]
    Register = 1,
    /// [`Frame::Unregister`]
    Unregister = 2,
    /// [`Frame::Pages`]
    Pages = 3,
    /// [`Frame::ReadPlan`]
    ReadPlan = 4,
    /// [`Frame::StreamRead`]
    StreamRead = 5,
    /// [`Frame::TreeChildEnter`]
    TreeChildEnter = 6,
    /// [`Frame::TensorLayout`]
    TensorLayout = 7,
    /// [`Frame::LayerStart`]
    LayerStart = 8,
    /// [`Frame::Sync`]
    Sync = 9,
}

impl Kind {
    /// Every kind, in wire order.
    pub const ALL: [Kind; 9] = [
        Kind::Register,
        Kind::Unregister,
        Kind::Pages,
        Kind::ReadPlan,
        Kind::StreamRead,
        Kind::TreeChildEnter,
        Kind::TensorLayout,
        Kind::LayerStart,
        Kind::Sync,
    ];

    /// The kind with wire value `byte`, if any.
    pub const fn from_u8(byte: u8) -> Option<Kind> {
        Some(match byte {
            1 => Kind::Register,
            2 => Kind::Unregister,
            3 => Kind::Pages,
            4 => Kind::ReadPlan,
            5 => Kind::StreamRead,
            6 => Kind::TreeChildEnter,
            7 => Kind::TensorLayout,
            8 => Kind::LayerStart,
            9 => Kind::Sync,
            _ => return None,
        })
    }
}

/// A list of `(u64, u64)` pairs: page ranges `(start, end)` or byte segments
/// `(offset, len)`. Either a view over received wire bytes (decoding never
/// copies) or a borrowed caller slice (encoding never copies).
#[derive(Clone, Copy)]
pub struct RangeList<'a> {
    repr: PairsRepr<'a>,
}

#[derive(Clone, Copy)]
enum PairsRepr<'a> {
    /// `16 * n` little-endian bytes.
    Wire(&'a [u8]),
    /// Caller pairs.
    Pairs(&'a [(u64, u64)]),
    /// Two parallel caller arrays of equal length (the C ABI's shape).
    Split(&'a [u64], &'a [u64]),
}

impl<'a> RangeList<'a> {
    /// A list over caller pairs.
    pub const fn from_pairs(pairs: &'a [(u64, u64)]) -> Self {
        Self { repr: PairsRepr::Pairs(pairs) }
    }

    /// A list over two parallel arrays; `None` unless they have equal length.
    pub fn from_split(first: &'a [u64], second: &'a [u64]) -> Option<Self> {
        (first.len() == second.len()).then_some(Self { repr: PairsRepr::Split(first, second) })
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        match self.repr {
            PairsRepr::Wire(bytes) => bytes.len() / PAIR_LEN,
            PairsRepr::Pairs(pairs) => pairs.len(),
            PairsRepr::Split(first, _) => first.len(),
        }
    }

    /// True when the list holds no pair.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The pair at `index`.
    pub fn get(&self, index: usize) -> Option<(u64, u64)> {
        match self.repr {
            PairsRepr::Wire(bytes) => {
                let at = index.checked_mul(PAIR_LEN)?;
                let chunk = bytes.get(at..at.checked_add(PAIR_LEN)?)?;
                Some((le_u64(chunk, 0), le_u64(chunk, 8)))
            }
            PairsRepr::Pairs(pairs) => pairs.get(index).copied(),
            PairsRepr::Split(first, second) => Some((*first.get(index)?, *second.get(index)?)),
        }
    }

    /// The pairs in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + 'a {
        let list = *self;
        (0..list.len()).map(move |i| list.get(i).unwrap_or_default())
    }
}

impl PartialEq for RangeList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for RangeList<'_> {}

impl fmt::Debug for RangeList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// A list of page indices (the children of a B-tree page). Like
/// [`RangeList`], a view over wire bytes or a borrowed caller slice.
#[derive(Clone, Copy)]
pub struct PageList<'a> {
    repr: PagesRepr<'a>,
}

#[derive(Clone, Copy)]
enum PagesRepr<'a> {
    Wire(&'a [u8]),
    Slice(&'a [u64]),
}

impl<'a> PageList<'a> {
    /// A list over caller page indices.
    pub const fn from_slice(pages: &'a [u64]) -> Self {
        Self { repr: PagesRepr::Slice(pages) }
    }

    /// Number of pages.
    pub fn len(&self) -> usize {
        match self.repr {
            PagesRepr::Wire(bytes) => bytes.len() / 8,
            PagesRepr::Slice(pages) => pages.len(),
        }
    }

    /// True when the list holds no page.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The page at `index`.
    pub fn get(&self, index: usize) -> Option<u64> {
        match self.repr {
            PagesRepr::Wire(bytes) => {
                let at = index.checked_mul(8)?;
                let chunk = bytes.get(at..at.checked_add(8)?)?;
                Some(le_u64(chunk, 0))
            }
            PagesRepr::Slice(pages) => pages.get(index).copied(),
        }
    }

    /// The pages in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        let list = *self;
        (0..list.len()).map(move |i| list.get(i).unwrap_or_default())
    }
}

impl PartialEq for PageList<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for PageList<'_> {}

impl fmt::Debug for PageList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One hint frame. Lists borrow either the received datagram or the caller's
/// slices, so neither encoding nor decoding copies them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Frame<'a> {
    /// Names the descriptor passed with this datagram (`SCM_RIGHTS`) as
    /// `handle`. The `n`-th `Register` frame of a datagram takes its `n`-th
    /// descriptor. Registering a handle again replaces the file.
    Register {
        /// The client's name for the file.
        handle: Handle,
    },
    /// Forgets `handle`; the daemon closes its descriptor.
    Unregister {
        /// The handle.
        handle: Handle,
    },
    /// Plain page ranges `(start_page, end_page)`, half-open, to prefetch.
    Pages {
        /// The file.
        handle: Handle,
        /// `(start, end)` page indices; `start <= end`.
        ranges: RangeList<'a>,
    },
    /// The byte segments `(offset, len)` the program will read next, in order.
    ReadPlan {
        /// The file.
        handle: Handle,
        /// `(offset, len)` segments; `offset + len` must not overflow.
        segments: RangeList<'a>,
    },
    /// The program read `len` bytes at `offset`.
    StreamRead {
        /// The file.
        handle: Handle,
        /// Offset of the read.
        offset: u64,
        /// Length of the read.
        len: u64,
    },
    /// A B-tree traversal descends from interior page `parent_page` into
    /// `children[position]`.
    TreeChildEnter {
        /// The database file.
        handle: Handle,
        /// The interior page.
        parent_page: u64,
        /// Index in `children` of the child entered now; `< children.len()`.
        position: u32,
        /// The parent's children in key order (page indices).
        children: PageList<'a>,
    },
    /// A model file's tensor byte ranges `(offset, len)` in load order.
    TensorLayout {
        /// The model file.
        handle: Handle,
        /// `(offset, len)` ranges.
        ranges: RangeList<'a>,
    },
    /// A model loader starts layer `layer`.
    LayerStart {
        /// The model file.
        handle: Handle,
        /// Layer index.
        layer: u32,
    },
    /// Asks the daemon to answer with an [`Ack`]: how many of this client's
    /// frames, up to and including this one, it accepted and refused. The
    /// hint protocol is otherwise one-way; a tool that must know whether
    /// its hints were taken (`predictio hint`) ends with one. Names no file:
    /// the header's handle field is 0.
    Sync {
        /// Echoed in the answer, so that a late answer to an earlier
        /// `Sync` is not mistaken for this one's.
        token: u32,
    },
}

impl Frame<'_> {
    /// The frame's kind.
    pub fn kind(&self) -> Kind {
        match self {
            Frame::Register { .. } => Kind::Register,
            Frame::Unregister { .. } => Kind::Unregister,
            Frame::Pages { .. } => Kind::Pages,
            Frame::ReadPlan { .. } => Kind::ReadPlan,
            Frame::StreamRead { .. } => Kind::StreamRead,
            Frame::TreeChildEnter { .. } => Kind::TreeChildEnter,
            Frame::TensorLayout { .. } => Kind::TensorLayout,
            Frame::LayerStart { .. } => Kind::LayerStart,
            Frame::Sync { .. } => Kind::Sync,
        }
    }

    /// The handle the frame names (`Handle(0)` for [`Frame::Sync`], which
    /// names none).
    pub fn handle(&self) -> Handle {
        match *self {
            Frame::Sync { .. } => Handle(0),
            Frame::Register { handle }
            | Frame::Unregister { handle }
            | Frame::Pages { handle, .. }
            | Frame::ReadPlan { handle, .. }
            | Frame::StreamRead { handle, .. }
            | Frame::TreeChildEnter { handle, .. }
            | Frame::TensorLayout { handle, .. }
            | Frame::LayerStart { handle, .. } => handle,
        }
    }

    /// The encoded size of this frame in bytes.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + match self {
                Frame::Register { .. } | Frame::Unregister { .. } => 0,
                Frame::Pages { ranges, .. } | Frame::TensorLayout { ranges, .. } => {
                    4usize.saturating_add(ranges.len().saturating_mul(PAIR_LEN))
                }
                Frame::ReadPlan { segments, .. } => 4usize.saturating_add(segments.len().saturating_mul(PAIR_LEN)),
                Frame::StreamRead { .. } => 16,
                Frame::TreeChildEnter { children, .. } => 16usize.saturating_add(children.len().saturating_mul(8)),
                Frame::LayerStart { .. } | Frame::Sync { .. } => 4,
            }
    }
}

/// Why a frame could not be encoded.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum EncodeError {
    /// The frame would exceed [`MAX_FRAME`] bytes (too many list elements).
    TooLarge {
        /// The size it would have.
        len: usize,
    },
    /// A page range with `end < start`, or a byte segment whose end overflows
    /// `u64`.
    InvertedRange {
        /// Index of the offending element.
        index: usize,
    },
    /// `TreeChildEnter` with `position >= children.len()`.
    BadPosition,
    /// A `Register` frame outside [`encode`]'s caller that attaches the
    /// descriptor (batches and plain sends cannot carry one).
    NeedsDescriptor,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLarge { len } => write!(f, "encode: frame of {len} bytes exceeds {MAX_FRAME}"),
            EncodeError::InvertedRange { index } => write!(f, "encode: range {index} is inverted or overflows"),
            EncodeError::BadPosition => write!(f, "encode: tree position is not an index into children"),
            EncodeError::NeedsDescriptor => write!(f, "encode: a Register frame must carry a descriptor"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Why bytes are not a valid frame. One variant per reason, so that the daemon
/// counts rejections per reason.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum DecodeError {
    /// Fewer bytes than the header, or than the header's frame length.
    Short,
    /// The first two bytes are not [`MAGIC`].
    BadMagic,
    /// A version this decoder does not speak.
    BadVersion,
    /// A kind byte this version does not define (framing is intact: a frames
    /// iterator skips it and goes on).
    UnknownKind,
    /// The frame length exceeds [`MAX_FRAME`] or is smaller than the header.
    TooLarge,
    /// A list count larger than the frame's remaining bytes can hold.
    CountTooLarge,
    /// Bytes left over after the frame's fields.
    TrailingBytes,
    /// A page range with `end < start`, or a byte segment whose end overflows.
    InvertedRange,
    /// `TreeChildEnter` with `position >= children.len()`.
    BadPosition,
}

impl DecodeError {
    /// Every reason, in a stable order (for per-reason counters).
    pub const ALL: [DecodeError; 9] = [
        DecodeError::Short,
        DecodeError::BadMagic,
        DecodeError::BadVersion,
        DecodeError::UnknownKind,
        DecodeError::TooLarge,
        DecodeError::CountTooLarge,
        DecodeError::TrailingBytes,
        DecodeError::InvertedRange,
        DecodeError::BadPosition,
    ];

    /// A short stable name (`short`, `bad_magic`, …) for counters and logs.
    pub const fn name(&self) -> &'static str {
        match self {
            DecodeError::Short => "short",
            DecodeError::BadMagic => "bad_magic",
            DecodeError::BadVersion => "bad_version",
            DecodeError::UnknownKind => "unknown_kind",
            DecodeError::TooLarge => "too_large",
            DecodeError::CountTooLarge => "count_too_large",
            DecodeError::TrailingBytes => "trailing_bytes",
            DecodeError::InvertedRange => "inverted_range",
            DecodeError::BadPosition => "bad_position",
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "decode: {}", self.name())
    }
}

impl std::error::Error for DecodeError {}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        word.copy_from_slice(src);
    }
    u64::from_le_bytes(word)
}

/// Appends the encoding of `frame` to `out`. On error `out` is left as it was.
pub fn encode(frame: &Frame<'_>, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let len = frame.encoded_len();
    if len > MAX_FRAME {
        return Err(EncodeError::TooLarge { len });
    }
    match frame {
        Frame::Pages { ranges, .. } => {
            if let Some(index) = ranges.iter().position(|(start, end)| end < start) {
                return Err(EncodeError::InvertedRange { index });
            }
        }
        Frame::ReadPlan { segments: ranges, .. } | Frame::TensorLayout { ranges, .. } => {
            if let Some(index) = ranges.iter().position(|(offset, len)| offset.checked_add(len).is_none()) {
                return Err(EncodeError::InvertedRange { index });
            }
        }
        Frame::StreamRead { offset, len, .. } => {
            if offset.checked_add(*len).is_none() {
                return Err(EncodeError::InvertedRange { index: 0 });
            }
        }
        Frame::TreeChildEnter { position, children, .. } => {
            if *position as usize >= children.len() {
                return Err(EncodeError::BadPosition);
            }
        }
        Frame::Register { .. } | Frame::Unregister { .. } | Frame::LayerStart { .. } | Frame::Sync { .. } => {}
    }
    out.reserve(len);
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(frame.kind() as u8);
    // len <= MAX_FRAME, which fits u32.
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out.extend_from_slice(&frame.handle().0.to_le_bytes());
    let put_pairs = |out: &mut Vec<u8>, list: &RangeList<'_>| {
        out.extend_from_slice(&(list.len() as u32).to_le_bytes());
        match list.repr {
            PairsRepr::Wire(bytes) => out.extend_from_slice(bytes),
            _ => {
                for (a, b) in list.iter() {
                    out.extend_from_slice(&a.to_le_bytes());
                    out.extend_from_slice(&b.to_le_bytes());
                }
            }
        }
    };
    match frame {
        Frame::Register { .. } | Frame::Unregister { .. } => {}
        Frame::Pages { ranges, .. } | Frame::TensorLayout { ranges, .. } => put_pairs(out, ranges),
        Frame::ReadPlan { segments, .. } => put_pairs(out, segments),
        Frame::StreamRead { offset, len, .. } => {
            out.extend_from_slice(&offset.to_le_bytes());
            out.extend_from_slice(&len.to_le_bytes());
        }
        Frame::TreeChildEnter { parent_page, position, children, .. } => {
            out.extend_from_slice(&parent_page.to_le_bytes());
            out.extend_from_slice(&position.to_le_bytes());
            out.extend_from_slice(&(children.len() as u32).to_le_bytes());
            match children.repr {
                PagesRepr::Wire(bytes) => out.extend_from_slice(bytes),
                PagesRepr::Slice(pages) => {
                    for page in pages {
                        out.extend_from_slice(&page.to_le_bytes());
                    }
                }
            }
        }
        Frame::LayerStart { layer, .. } => out.extend_from_slice(&layer.to_le_bytes()),
        Frame::Sync { token } => out.extend_from_slice(&token.to_le_bytes()),
    }
    debug_assert_eq!(len, frame.encoded_len());
    Ok(())
}

/// Checks the header of the frame at the start of `bytes` and returns its
/// total length. Errors here break framing: a frames iterator stops.
fn frame_len(bytes: &[u8]) -> Result<usize, DecodeError> {
    if bytes.len() < HEADER_LEN {
        return Err(DecodeError::Short);
    }
    if bytes[0..2] != MAGIC {
        return Err(DecodeError::BadMagic);
    }
    if bytes[2] != VERSION {
        return Err(DecodeError::BadVersion);
    }
    let len = le_u32(bytes, 4) as usize;
    if !(HEADER_LEN..=MAX_FRAME).contains(&len) {
        return Err(DecodeError::TooLarge);
    }
    if len > bytes.len() {
        return Err(DecodeError::Short);
    }
    Ok(len)
}

/// Splits `body` into a count-prefixed list of `elem`-byte elements.
fn counted(body: &[u8], elem: usize) -> Result<&[u8], DecodeError> {
    if body.len() < 4 {
        return Err(DecodeError::Short);
    }
    let count = le_u32(body, 0) as usize;
    let rest = &body[4..];
    // count * elem cannot overflow usize on 64-bit (u32 * 16), but say so.
    let need = count.checked_mul(elem).ok_or(DecodeError::CountTooLarge)?;
    if need > rest.len() {
        return Err(DecodeError::CountTooLarge);
    }
    if need < rest.len() {
        return Err(DecodeError::TrailingBytes);
    }
    Ok(rest)
}

fn fixed(body: &[u8], len: usize) -> Result<&[u8], DecodeError> {
    match body.len().cmp(&len) {
        std::cmp::Ordering::Less => Err(DecodeError::Short),
        std::cmp::Ordering::Greater => Err(DecodeError::TrailingBytes),
        std::cmp::Ordering::Equal => Ok(body),
    }
}

/// Decodes exactly one frame from `bytes` (which must hold nothing else).
/// Never panics, never allocates: lists are views over `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let len = frame_len(bytes)?;
    if len != bytes.len() {
        return Err(DecodeError::TrailingBytes);
    }
    decode_body(bytes)
}

/// Decodes a frame whose header (and length == bytes.len()) was checked.
fn decode_body(bytes: &[u8]) -> Result<Frame<'_>, DecodeError> {
    let kind = Kind::from_u8(bytes[3]).ok_or(DecodeError::UnknownKind)?;
    let handle = Handle(le_u32(bytes, 8));
    let body = &bytes[HEADER_LEN..];
    Ok(match kind {
        Kind::Register => {
            fixed(body, 0)?;
            Frame::Register { handle }
        }
        Kind::Unregister => {
            fixed(body, 0)?;
            Frame::Unregister { handle }
        }
        Kind::Pages => {
            let list = RangeList { repr: PairsRepr::Wire(counted(body, PAIR_LEN)?) };
            if list.iter().any(|(start, end)| end < start) {
                return Err(DecodeError::InvertedRange);
            }
            Frame::Pages { handle, ranges: list }
        }
        Kind::ReadPlan | Kind::TensorLayout => {
            let list = RangeList { repr: PairsRepr::Wire(counted(body, PAIR_LEN)?) };
            if list.iter().any(|(offset, len)| offset.checked_add(len).is_none()) {
                return Err(DecodeError::InvertedRange);
            }
            if kind == Kind::ReadPlan {
                Frame::ReadPlan { handle, segments: list }
            } else {
                Frame::TensorLayout { handle, ranges: list }
            }
        }
        Kind::StreamRead => {
            let body = fixed(body, 16)?;
            let (offset, len) = (le_u64(body, 0), le_u64(body, 8));
            if offset.checked_add(len).is_none() {
                return Err(DecodeError::InvertedRange);
            }
            Frame::StreamRead { handle, offset, len }
        }
        Kind::TreeChildEnter => {
            if body.len() < 12 {
                return Err(DecodeError::Short);
            }
            let parent_page = le_u64(body, 0);
            let position = le_u32(body, 8);
            let children = PageList { repr: PagesRepr::Wire(counted(&body[12..], 8)?) };
            if position as usize >= children.len() {
                return Err(DecodeError::BadPosition);
            }
            Frame::TreeChildEnter { handle, parent_page, position, children }
        }
        Kind::LayerStart => {
            let body = fixed(body, 4)?;
            Frame::LayerStart { handle, layer: le_u32(body, 0) }
        }
        Kind::Sync => {
            let body = fixed(body, 4)?;
            Frame::Sync { token: le_u32(body, 0) }
        }
    })
}

/// First two bytes of an [`Ack`]: `b"PA"` ("predictio answer"). The daemon
/// sends nothing else to clients.
pub const ACK_MAGIC: [u8; 2] = *b"PA";

/// Size of an encoded [`Ack`] in bytes.
pub const ACK_LEN: usize = 32;

/// The daemon's answer to a [`Frame::Sync`], sent back to the client's own
/// (abstract, autobound) address. Counts cover the client's frames since
/// the daemon first heard from it, up to and including the `Sync`.
///
/// Layout (little-endian): `ACK_MAGIC`, [`VERSION`], a zero byte, `token`
/// (u32), `accepted`, `rejected`, `limited` (u64 each).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Ack {
    /// The `Sync` frame's token.
    pub token: u32,
    /// Frames taken (registrations, hints, the `Sync` itself).
    pub accepted: u64,
    /// Frames refused as malformed or not allowed (decode errors, unknown
    /// handles, descriptors that are not readable regular files, the
    /// handle caps).
    pub rejected: u64,
    /// Valid frames dropped because a budget was spent (frames or bytes per
    /// second, queued bytes).
    pub limited: u64,
}

impl Ack {
    /// Frames not taken: `rejected + limited`.
    pub fn refused(&self) -> u64 {
        self.rejected.saturating_add(self.limited)
    }

    /// The wire encoding.
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut out = [0u8; ACK_LEN];
        out[0..2].copy_from_slice(&ACK_MAGIC);
        out[2] = VERSION;
        out[4..8].copy_from_slice(&self.token.to_le_bytes());
        out[8..16].copy_from_slice(&self.accepted.to_le_bytes());
        out[16..24].copy_from_slice(&self.rejected.to_le_bytes());
        out[24..32].copy_from_slice(&self.limited.to_le_bytes());
        out
    }

    /// Decodes an answer; `None` for anything that is not exactly one.
    pub fn decode(bytes: &[u8]) -> Option<Ack> {
        if bytes.len() != ACK_LEN || bytes[0..2] != ACK_MAGIC || bytes[2] != VERSION || bytes[3] != 0 {
            return None;
        }
        Some(Ack {
            token: le_u32(bytes, 4),
            accepted: le_u64(bytes, 8),
            rejected: le_u64(bytes, 16),
            limited: le_u64(bytes, 24),
        })
    }
}

/// Iterates over the frames of a datagram. A body error (bad range, unknown
/// kind…) yields an error and moves on to the next frame; a framing error
/// (short, bad magic, bad version, bad length) yields one error and ends the
/// iteration, since nothing after it can be trusted. An empty datagram yields
/// one [`DecodeError::Short`]. Never panics, never allocates.
pub fn frames(datagram: &[u8]) -> Frames<'_> {
    Frames { rest: datagram, started: false }
}

/// Iterator returned by [`frames`].
#[derive(Clone, Debug)]
pub struct Frames<'a> {
    rest: &'a [u8],
    started: bool,
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() && self.started {
            return None;
        }
        self.started = true;
        match frame_len(self.rest) {
            Err(err) => {
                self.rest = &[];
                Some(Err(err))
            }
            Ok(len) => {
                let (frame, rest) = self.rest.split_at(len);
                self.rest = rest;
                Some(decode_body(frame))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_frames() -> Vec<Vec<u8>> {
        let pairs = [(1u64, 5u64), (9, 9), (100, 200)];
        let segs = [(0u64, 4096u64), (1 << 40, 1 << 20)];
        let children = [3u64, 4, 5, 6];
        let frames = [
            Frame::Register { handle: Handle(1) },
            Frame::Unregister { handle: Handle(2) },
            Frame::Pages { handle: Handle(3), ranges: RangeList::from_pairs(&pairs) },
            Frame::ReadPlan { handle: Handle(4), segments: RangeList::from_pairs(&segs) },
            Frame::StreamRead { handle: Handle(5), offset: 8192, len: 65536 },
            Frame::TreeChildEnter {
                handle: Handle(6),
                parent_page: 77,
                position: 2,
                children: PageList::from_slice(&children),
            },
            Frame::TensorLayout { handle: Handle(7), ranges: RangeList::from_pairs(&segs) },
            Frame::LayerStart { handle: Handle(8), layer: 31 },
            Frame::Sync { token: 0xA5A5_0001 },
        ];
        frames
            .iter()
            .map(|f| {
                let mut out = Vec::new();
                encode(f, &mut out).expect("encode");
                assert_eq!(out.len(), f.encoded_len());
                let back = decode(&out).expect("decode");
                assert_eq!(&back, f);
                out
            })
            .collect()
    }

    #[test]
    fn the_socket_variable_is_ignored_in_secure_execution() {
        let path = || Some(std::ffi::OsString::from("/tmp/elsewhere.sock"));
        assert_eq!(socket_path_from(path(), false), std::path::Path::new("/tmp/elsewhere.sock"));
        assert_eq!(socket_path_from(path(), true), std::path::Path::new(DEFAULT_SOCKET_PATH));
        assert_eq!(socket_path_from(Some("".into()), false), std::path::Path::new(DEFAULT_SOCKET_PATH));
        assert_eq!(socket_path_from(None, false), std::path::Path::new(DEFAULT_SOCKET_PATH));
        assert!(!crate::sys::secure_execution(), "the test binary is not set-uid");
    }

    #[test]
    fn round_trip_every_kind() {
        assert_eq!(sample_frames().len(), Kind::ALL.len());
    }

    #[test]
    fn acks_round_trip_and_nothing_else_decodes_as_one() {
        let ack = Ack { token: 7, accepted: 3, rejected: 1, limited: u64::MAX };
        let wire = ack.encode();
        assert_eq!(Ack::decode(&wire), Some(ack));
        assert_eq!(ack.refused(), u64::MAX);
        assert_eq!(Ack::decode(&wire[..ACK_LEN - 1]), None);
        let mut bad = wire;
        bad[1] = b'H';
        assert_eq!(Ack::decode(&bad), None, "a hint frame's magic");
        let mut bad = wire;
        bad[3] = 1;
        assert_eq!(Ack::decode(&bad), None);
        let mut sync = Vec::new();
        encode(&Frame::Sync { token: 7 }, &mut sync).expect("encode");
        assert_eq!(sync, [b'P', b'H', 1, 9, 16, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0]);
    }

    #[test]
    fn header_layout_is_fixed() {
        let mut out = Vec::new();
        encode(&Frame::LayerStart { handle: Handle(0x0403_0201), layer: 0x0807_0605 }, &mut out).expect("encode");
        assert_eq!(out, [b'P', b'H', 1, 8, 16, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn typed_errors() {
        let frames = sample_frames();
        let pages = &frames[2];
        assert_eq!(decode(&pages[..5]), Err(DecodeError::Short));
        let mut bad = pages.clone();
        bad[0] = b'X';
        assert_eq!(decode(&bad), Err(DecodeError::BadMagic));
        let mut bad = pages.clone();
        bad[2] = 2;
        assert_eq!(decode(&bad), Err(DecodeError::BadVersion));
        let mut bad = pages.clone();
        bad[3] = 99;
        assert_eq!(decode(&bad), Err(DecodeError::UnknownKind));
        let mut bad = pages.clone();
        bad[12] = 200;
        assert_eq!(decode(&bad), Err(DecodeError::CountTooLarge));
        let mut bad = pages.clone();
        bad[12] = 2;
        assert_eq!(decode(&bad), Err(DecodeError::TrailingBytes));
        let mut bad = pages.clone();
        bad[4..8].copy_from_slice(&(MAX_FRAME as u32 + 1).to_le_bytes());
        assert_eq!(decode(&bad), Err(DecodeError::TooLarge));
        let mut bad = pages.clone();
        bad.push(0);
        assert_eq!(decode(&bad), Err(DecodeError::TrailingBytes));
        let inverted = [(5u64, 4u64)];
        let mut out = Vec::new();
        assert_eq!(
            encode(&Frame::Pages { handle: Handle(1), ranges: RangeList::from_pairs(&inverted) }, &mut out),
            Err(EncodeError::InvertedRange { index: 0 })
        );
        assert!(out.is_empty());
        // Hand-build the inverted frame: the decoder refuses it too.
        let mut raw = frames[2].clone();
        raw[16..24].copy_from_slice(&10u64.to_le_bytes());
        assert_eq!(decode(&raw), Err(DecodeError::InvertedRange));
        let mut raw = frames[5].clone();
        raw[20..24].copy_from_slice(&4u32.to_le_bytes());
        assert_eq!(decode(&raw), Err(DecodeError::BadPosition));
    }

    #[test]
    fn datagram_of_several_frames() {
        let frames_bytes = sample_frames();
        let datagram: Vec<u8> = frames_bytes.concat();
        let decoded: Vec<_> = frames(&datagram).collect();
        assert_eq!(decoded.len(), frames_bytes.len());
        assert!(decoded.iter().all(Result::is_ok));
        // An unknown kind in the middle is skipped; framing goes on.
        let mut datagram = datagram;
        datagram[frames_bytes[0].len() + 3] = 200;
        let decoded: Vec<_> = frames(&datagram).collect();
        assert_eq!(decoded.len(), frames_bytes.len());
        assert_eq!(decoded[1], Err(DecodeError::UnknownKind));
        // Garbage ends the iteration after one error.
        assert_eq!(frames(b"garbage garbage").collect::<Vec<_>>(), vec![Err(DecodeError::BadMagic)]);
        assert_eq!(frames(b"").collect::<Vec<_>>(), vec![Err(DecodeError::Short)]);
    }

    #[test]
    fn too_many_elements_refused() {
        let pairs = vec![(0u64, 1u64); MAX_PAIRS + 1];
        let mut out = Vec::new();
        assert!(matches!(
            encode(&Frame::Pages { handle: Handle(1), ranges: RangeList::from_pairs(&pairs) }, &mut out),
            Err(EncodeError::TooLarge { .. })
        ));
        let pairs = vec![(0u64, 1u64); MAX_PAIRS];
        encode(&Frame::Pages { handle: Handle(1), ranges: RangeList::from_pairs(&pairs) }, &mut out).expect("fits");
        assert!(out.len() <= MAX_FRAME);
        let children = vec![1u64; MAX_CHILDREN];
        let mut out = Vec::new();
        encode(
            &Frame::TreeChildEnter {
                handle: Handle(1),
                parent_page: 0,
                position: 0,
                children: PageList::from_slice(&children),
            },
            &mut out,
        )
        .expect("fits");
        assert!(out.len() <= MAX_FRAME);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x: u64 = 0x1234_5678_9abc_def0;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid = sample_frames();
        for i in 0..200_000 {
            let mut bytes = valid[i % valid.len()].clone();
            match next() % 4 {
                0 => {
                    let bit = (next() as usize) % (bytes.len() * 8);
                    bytes[bit / 8] ^= 1 << (bit % 8);
                }
                1 => bytes.truncate((next() as usize) % (bytes.len() + 1)),
                2 if bytes.len() >= 16 => bytes[12..16].copy_from_slice(&(next() as u32).to_le_bytes()),
                _ => bytes = (0..(next() % 64)).map(|_| next() as u8).collect(),
            }
            let _ = decode(&bytes);
            assert!(frames(&bytes).count() >= 1);
        }
    }
}
