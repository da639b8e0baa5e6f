//! Model-file layouts: which byte ranges of a GGUF or safetensors file hold
//! which tensors, and the order a loader touches them.
//!
//! This module owns the parsing of untrusted headers. It must never panic,
//! never allocate more than the input justifies (every count read from a file
//! is checked against the bytes that remain before anything is reserved), and
//! never read more than [`MAX_HEADER_BYTES`] of a file. Every malformed input
//! is a typed [`ModelError`]. It reads no tensor data: a layout is metadata,
//! and turning it into prefetches is the `tensor` policy's job.
//!
//! ```text
//! GGUF (v2/v3, little endian)           safetensors
//! ┌──────────────────────────────┐       ┌──────────────────────────────┐
//! │ "GGUF" u32 version           │       │ u64 N (header length)        │
//! │ u64 tensor_count u64 kv_count│       │ N bytes of JSON:             │
//! │ kv_count × (key, type, value)│       │  {"name": {"dtype", "shape", │
//! │ tensor_count × (name, n_dims,│       │    "data_offsets": [b, e]},  │
//! │   dims, ggml type, offset)   │       │   "__metadata__": {..}}      │
//! │ padding to general.alignment │       ├──────────────────────────────┤
//! ├──────────────────────────────┤       │ data: offsets relative here  │
//! │ data: offsets relative here  │       └──────────────────────────────┘
//! └──────────────────────────────┘
//! ```

pub mod gguf;
pub mod header;
pub mod safetensors;
pub mod writer;

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// The most header bytes [`ModelLayout::read`] will read from a file. Real
/// GGUF headers (with tokenizer vocabularies) are a few MiB; safetensors
/// caps its JSON header at 100 MB, of which we accept the first 64 MiB.
pub const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Why a model header could not be parsed. Every variant says where.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// Neither the GGUF magic nor a plausible safetensors header.
    #[error("not a GGUF or safetensors file (unrecognised first bytes)")]
    UnknownFormat,
    /// The GGUF magic is wrong.
    #[error("bad GGUF magic {0:02x?}")]
    BadMagic([u8; 4]),
    /// A GGUF version this parser does not read (v1, big-endian, future).
    #[error("unsupported GGUF version {version}{}", if *.big_endian { " (big-endian file)" } else { "" })]
    UnsupportedVersion {
        /// The version field as read (little endian).
        version: u32,
        /// The field looks like a byte-swapped v2/v3: a big-endian file.
        big_endian: bool,
    },
    /// The header ends before `what` (at byte `offset`) is complete.
    #[error("header truncated: {what} at byte {offset} runs past the {available} bytes available")]
    Truncated {
        /// The field being read.
        what: &'static str,
        /// Its offset in the file.
        offset: u64,
        /// Bytes of header that were available.
        available: u64,
    },
    /// A count read from the file cannot fit in the bytes that remain.
    #[error("{what} count {count} at byte {offset} cannot fit in the {remaining} bytes that remain")]
    CountTooLarge {
        /// What is counted.
        what: &'static str,
        /// The count as read.
        count: u64,
        /// Offset of the count field.
        offset: u64,
        /// Bytes left after it.
        remaining: u64,
    },
    /// A metadata value type that GGUF does not define.
    #[error("unknown GGUF value type {value_type} at byte {offset}")]
    BadValueType {
        /// The type code.
        value_type: u32,
        /// Offset of the type field.
        offset: u64,
    },
    /// Arrays nested deeper than [`gguf::MAX_ARRAY_NESTING`].
    #[error("GGUF arrays nested deeper than {} at byte {offset}", gguf::MAX_ARRAY_NESTING)]
    NestingTooDeep {
        /// Offset of the innermost array.
        offset: u64,
    },
    /// A key or tensor name is not UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    InvalidUtf8 {
        /// The field.
        what: &'static str,
        /// Its offset.
        offset: u64,
    },
    /// `general.alignment` is zero, not a power of two, or absurdly large.
    #[error("bad general.alignment {0} (must be a power of two between 1 and 2^30)")]
    BadAlignment(u64),
    /// A metadata key has a value of the wrong type.
    #[error("metadata key {key} has the wrong type ({found})")]
    WrongValueType {
        /// The key.
        key: String,
        /// What was found.
        found: &'static str,
    },
    /// A tensor's shape or type is invalid (too many dimensions, overflow,
    /// a row length that is not a whole number of quantization blocks).
    #[error("tensor {tensor:?}: {reason}")]
    BadTensor {
        /// The tensor's name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// Two tensors share a name.
    #[error("duplicate tensor name {0:?}")]
    DuplicateTensor(String),
    /// A tensor's bytes lie (partly) outside the file.
    #[error("tensor {tensor:?} spans bytes {offset}..{end} but the file has {file_len}")]
    TensorOutOfBounds {
        /// The tensor's name.
        tensor: String,
        /// Absolute start.
        offset: u64,
        /// Absolute end (saturating).
        end: u64,
        /// The file's length.
        file_len: u64,
    },
    /// A header larger than this parser accepts.
    #[error("header of {len} bytes exceeds the limit of {limit} bytes")]
    HeaderTooLarge {
        /// The header's length (as declared or as far as read).
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// The safetensors JSON header is not valid JSON.
    #[error("safetensors header is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The safetensors JSON is valid but not a safetensors header.
    #[error("safetensors header: {0}")]
    BadHeader(String),
    /// Reading only what the page cache holds
    /// ([`ModelLayout::read_resident`]), the header's bytes from `offset`
    /// on are not cached.
    #[error("the model header is not in the page cache from byte {offset} on")]
    NotResident {
        /// The first byte not cached.
        offset: u64,
    },
    /// Reading only what the page cache holds, the header needs more than
    /// the bytes the caller allowed.
    #[error("the model header needs more than the {limit} bytes allowed")]
    OverBudget {
        /// The bytes allowed.
        limit: u64,
    },
    /// Reading the file failed.
    #[error("{call} of the model header failed: {source}")]
    Io {
        /// The failing call.
        call: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Which container a layout came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum ModelFormat {
    /// GGUF, with its version (2 or 3).
    Gguf {
        /// The file's GGUF version.
        version: u32,
    },
    /// Hugging Face safetensors.
    Safetensors,
}

impl std::fmt::Display for ModelFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelFormat::Gguf { version } => write!(f, "GGUF v{version}"),
            ModelFormat::Safetensors => f.write_str("safetensors"),
        }
    }
}

/// A metadata value kept from the header (scalars and strings; arrays are
/// summarised, never copied).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(untagged)]
pub enum MetaValue {
    /// Any unsigned integer.
    Uint(u64),
    /// Any signed integer.
    Int(i64),
    /// Any float.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// A string (at most [`MAX_META_STRING`] bytes kept).
    Str(String),
    /// An array: its element type and length only.
    Array {
        /// Element type name (`"string"`, `"u32"`, `"array"`, …).
        element: &'static str,
        /// Number of elements.
        len: u64,
    },
}

impl MetaValue {
    /// The value as an unsigned integer, if it is a non-negative integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetaValue::Uint(v) => Some(v),
            MetaValue::Int(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as a string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Longest metadata string kept (longer ones are cut at a char boundary).
pub const MAX_META_STRING: usize = 256;
/// Most metadata entries kept (the rest are parsed and validated, not kept).
pub const MAX_META_ENTRIES: usize = 256;

/// One tensor: where its bytes are.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct TensorInfo {
    /// The tensor's name as stored (`blk.0.attn_q.weight`,
    /// `model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Element type as the format names it (`Q4_0`, `F16`, `BF16`, …;
    /// `type#N` for a GGML type this parser does not know).
    pub dtype: String,
    /// Dimensions as stored (GGUF: innermost first; safetensors: outermost
    /// first).
    pub shape: Vec<u64>,
    /// Absolute offset of the first byte in the file.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl TensorInfo {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }

    /// The layer this tensor belongs to, parsed from its name.
    pub fn layer(&self) -> Option<u32> {
        layer_of(&self.name)
    }

    /// Where a loader places this tensor relative to the layers.
    pub fn role(&self) -> TensorRole {
        role_of(&self.name)
    }
}

/// Where a tensor sits in a loader's order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TensorRole {
    /// Token embeddings: touched first.
    Embedding,
    /// Other non-layer tensors before the layers (position embeddings, rope
    /// factors, …).
    Prelude,
    /// A tensor of layer N.
    Layer(u32),
    /// The final norm and output projection: touched last.
    Output,
}

/// The layer index in a tensor name: the number after `blk.`, `layers.`,
/// `layer.`, `h.`, `blocks.` or `block.` (`blk.12.attn_q.weight`,
/// `model.layers.3.mlp.up_proj.weight`, `transformer.h.7.attn.c_attn.weight`).
pub fn layer_of(name: &str) -> Option<u32> {
    let mut previous = "";
    for part in name.split('.') {
        if matches!(previous, "blk" | "layers" | "layer" | "h" | "blocks" | "block")
            && !part.is_empty()
            && part.bytes().all(|b| b.is_ascii_digit())
        {
            return part.parse().ok();
        }
        previous = part;
    }
    None
}

/// The role of a tensor named `name` (see [`TensorRole`]).
pub fn role_of(name: &str) -> TensorRole {
    if let Some(layer) = layer_of(name) {
        return TensorRole::Layer(layer);
    }
    let embedding = ["token_embd", "embed_tokens", "tok_embeddings", "word_embeddings", "wte."];
    if embedding.iter().any(|p| name.contains(p)) {
        return TensorRole::Embedding;
    }
    let output = ["output_norm", "lm_head", "ln_f.", "final_norm", "final_layernorm"];
    if name == "output.weight"
        || name.starts_with("output.")
        || name == "norm.weight"
        || name == "model.norm.weight"
        || name.ends_with(".norm.weight") && !name.contains("layers")
        || output.iter().any(|p| name.contains(p))
    {
        return TensorRole::Output;
    }
    TensorRole::Prelude
}

/// Which loader's order [`ModelLayout::load_order_for`] follows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadOrder {
    /// The order computation touches tensors — what an mmap'd loader faults
    /// in: token embeddings, other prelude tensors, layers in ascending
    /// order (by file offset within a layer), then the output norm and
    /// output projection.
    #[default]
    Compute,
    /// llama.cpp without mmap (`--no-mmap`): it reads tensors in the order
    /// it creates them — token embeddings, the output norm and output
    /// projection, then the layers.
    LlamaCppRead,
}

/// A model file's layout.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ModelLayout {
    /// The container format.
    pub format: ModelFormat,
    /// Every tensor, in file order (by offset).
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset where tensor data starts.
    pub data_offset: u64,
    /// Alignment of tensor data (GGUF `general.alignment`, default 32;
    /// 1 for safetensors, which promises none).
    pub alignment: u64,
    /// The file's length in bytes.
    pub file_len: u64,
    /// A few metadata entries (scalars and short strings; arrays
    /// summarised), at most [`MAX_META_ENTRIES`].
    pub metadata: BTreeMap<String, MetaValue>,
}

/// A byte range to read, tagged with the layer it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PlanRange {
    /// Absolute offset.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
    /// The role of the first tensor in the range.
    pub role: TensorRole,
}

impl PlanRange {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.len)
    }
}

/// The bytes of one layer (or of the embedding / prelude / output group).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LayerSpan {
    /// Which group.
    pub role: TensorRole,
    /// Number of tensors.
    pub tensors: usize,
    /// Total tensor bytes.
    pub bytes: u64,
    /// The group's byte ranges in file order, neighbours coalesced.
    pub ranges: Vec<(u64, u64)>,
}

impl ModelLayout {
    /// Parses a header. `header` holds the file's first bytes (the whole
    /// header region, or the parse fails with [`ModelError::Truncated`]);
    /// `file_len` is the file's full length, against which tensor ranges are
    /// checked. The format is detected from the magic.
    pub fn parse(header: &[u8], file_len: u64) -> Result<Self, ModelError> {
        match detect(header) {
            Some(Detected::Gguf) => gguf::parse(header, file_len),
            Some(Detected::Safetensors) => safetensors::parse(header, file_len),
            None if header.len() < 9 => {
                Err(ModelError::Truncated { what: "magic", offset: 0, available: header.len() as u64 })
            }
            None => Err(ModelError::UnknownFormat),
        }
    }

    /// Reads just the header region of `file` (growing bounded reads, never
    /// more than [`MAX_HEADER_BYTES`]) and parses it. The reads wait for
    /// storage: for tools and background threads, never an event path
    /// ([`ModelLayout::read_resident`]).
    pub fn read(file: &File) -> Result<Self, ModelError> {
        Self::read_with(file, u64::MAX, &mut |file, buf| read_prefix_into(file, buf)).map(|(layout, _)| layout)
    }

    /// [`ModelLayout::read`] of the bytes already in the page cache alone
    /// ([`crate::sys::pread_resident`]: `cachestat`, then
    /// `preadv2(RWF_NOWAIT)`), reading at most `max_bytes` in all: it never
    /// waits on storage and never makes a page resident. Fails with
    /// [`ModelError::NotResident`] when a byte the parse needs is not
    /// cached (the loader has not read it yet) and
    /// [`ModelError::OverBudget`] past `max_bytes`. Returns the layout and
    /// the bytes it read.
    pub fn read_resident(file: &File, max_bytes: u64) -> Result<(Self, u64), ModelError> {
        Self::read_with(file, max_bytes, &mut read_resident_into)
    }

    /// The header read with `read` (which fills a buffer from the start of
    /// the file, short only at its end), at most `max_bytes` read in all.
    fn read_with(file: &File, max_bytes: u64, read: ReadPrefix<'_>) -> Result<(Self, u64), ModelError> {
        let file_len = file.metadata().map_err(|source| ModelError::Io { call: "fstat", source })?.len();
        let cap = file_len.min(MAX_HEADER_BYTES);
        let mut spent = 0u64;
        let charge = |spent: &mut u64, bytes: usize| {
            *spent = spent.saturating_add(bytes as u64);
            if *spent > max_bytes { Err(ModelError::OverBudget { limit: max_bytes }) } else { Ok(()) }
        };
        let mut first = [0u8; 16];
        let head = first.len().min(usize::try_from(file_len).unwrap_or(usize::MAX));
        charge(&mut spent, head)?;
        let got = read(file, &mut first[..head])?;
        let mut want = match detect(&first[..got]) {
            Some(Detected::Safetensors) => {
                let n = u64::from_le_bytes(first[..8].try_into().unwrap_or([0; 8]));
                if n > safetensors::MAX_HEADER_LEN {
                    return Err(ModelError::HeaderTooLarge { len: n, limit: safetensors::MAX_HEADER_LEN });
                }
                n.saturating_add(8)
            }
            _ => 1 << 20,
        }
        .min(cap);
        loop {
            charge(&mut spent, want as usize)?;
            let mut buf = vec![0u8; want as usize];
            let got = read(file, &mut buf)?;
            buf.truncate(got);
            match Self::parse(&buf, file_len).map(|layout| (layout, spent)) {
                Err(ModelError::Truncated { .. }) if want < cap && got as u64 == want => {
                    want = want.saturating_mul(4).min(cap);
                }
                Err(ModelError::Truncated { .. }) if want == MAX_HEADER_BYTES && file_len > want => {
                    return Err(ModelError::HeaderTooLarge { len: want, limit: MAX_HEADER_BYTES });
                }
                other => return other,
            }
        }
    }

    /// Total bytes of tensor data.
    pub fn tensor_bytes(&self) -> u64 {
        self.tensors.iter().map(|t| t.len).fold(0, u64::saturating_add)
    }

    /// Number of layers: one more than the largest layer index (0 if none).
    pub fn layer_count(&self) -> u32 {
        self.tensors.iter().filter_map(TensorInfo::layer).max().map_or(0, |l| l.saturating_add(1))
    }

    /// Tensors in the order a loader touches them ([`LoadOrder::Compute`]).
    pub fn load_order(&self) -> Vec<&TensorInfo> {
        self.load_order_for(LoadOrder::Compute)
    }

    /// Tensors in the order the given loader touches them: grouped by role
    /// (see [`LoadOrder`]), by file offset within a group.
    pub fn load_order_for(&self, order: LoadOrder) -> Vec<&TensorInfo> {
        let mut out: Vec<&TensorInfo> = self.tensors.iter().collect();
        out.sort_by_key(|t| (rank(t.role(), order), t.offset));
        out
    }

    /// The prefetch plan: byte ranges in load order, neighbours that follow
    /// each other in the file (gaps of at most the alignment padding)
    /// coalesced into one range.
    pub fn plan(&self, order: LoadOrder) -> Vec<PlanRange> {
        let mut out: Vec<PlanRange> = Vec::new();
        for t in self.load_order_for(order) {
            if t.len == 0 {
                continue;
            }
            if let Some(last) = out.last_mut() {
                let gap_ok = t.offset >= last.end() && t.offset - last.end() < self.alignment.max(1);
                if gap_ok {
                    last.len = t.end() - last.offset;
                    continue;
                }
            }
            out.push(PlanRange { offset: t.offset, len: t.len, role: t.role() });
        }
        out
    }

    /// Byte ranges per group (embedding, prelude, each layer, output), in
    /// [`LoadOrder::Compute`] order, each group's ranges coalesced.
    pub fn layers(&self) -> Vec<LayerSpan> {
        let mut groups: BTreeMap<(u64, TensorRole), LayerSpan> = BTreeMap::new();
        for t in &self.tensors {
            let role = t.role();
            let span = groups.entry((rank(role, LoadOrder::Compute), role)).or_insert_with(|| LayerSpan {
                role,
                tensors: 0,
                bytes: 0,
                ranges: Vec::new(),
            });
            span.tensors += 1;
            span.bytes = span.bytes.saturating_add(t.len);
            // Tensors are in file order, so each group's ranges are too.
            match span.ranges.last_mut() {
                Some(last) if t.offset >= last.1 && t.offset - last.1 < self.alignment.max(1) => {
                    last.1 = last.1.max(t.end())
                }
                _ => span.ranges.push((t.offset, t.end())),
            }
        }
        groups.into_values().collect()
    }
}

/// Sort key of a role under a load order.
fn rank(role: TensorRole, order: LoadOrder) -> u64 {
    match (role, order) {
        (TensorRole::Embedding, _) => 0,
        (TensorRole::Output, LoadOrder::LlamaCppRead) => 1,
        (TensorRole::Prelude, _) => 2,
        (TensorRole::Layer(n), _) => 3 + u64::from(n),
        (TensorRole::Output, LoadOrder::Compute) => u64::MAX,
    }
}

/// What the first bytes say a file is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Detected {
    /// Starts with `GGUF`.
    Gguf,
    /// Starts with a little-endian header length followed by `{`.
    Safetensors,
}

/// Detects the format from a file's first bytes (at least 4 for GGUF, 9 for
/// safetensors).
pub fn detect(first: &[u8]) -> Option<Detected> {
    if first.starts_with(b"GGUF") {
        return Some(Detected::Gguf);
    }
    if first.len() >= 9 && first[8] == b'{' {
        return Some(Detected::Safetensors);
    }
    None
}

/// Reads up to `buf.len()` bytes from the start of `file`; returns how many
/// (fewer only at end of file).
fn read_prefix_into(file: &File, buf: &mut [u8]) -> Result<usize, ModelError> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(ModelError::Io { call: "pread", source }),
        }
    }
    Ok(done)
}

/// Fills a buffer from the start of a file (short only at its end).
type ReadPrefix<'a> = &'a mut dyn FnMut(&File, &mut [u8]) -> Result<usize, ModelError>;

/// Fills `buf` from the start of `file` with bytes the page cache holds
/// (fewer only at the end of the file); [`ModelError::NotResident`] at the
/// first byte it does not.
fn read_resident_into(file: &File, buf: &mut [u8]) -> Result<usize, ModelError> {
    use std::os::fd::AsFd;
    let mut done = 0;
    while done < buf.len() {
        match crate::sys::pread_resident(file.as_fd(), &mut buf[done..], done as u64) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => done += n,
            Ok(None) => return Err(ModelError::NotResident { offset: done as u64 }),
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(ModelError::Io { call: "preadv2", source }),
        }
    }
    Ok(done)
}

/// Keeps a metadata entry if there is room, cutting long strings.
fn keep_meta(metadata: &mut BTreeMap<String, MetaValue>, key: &str, value: MetaValue) {
    if metadata.len() >= MAX_META_ENTRIES && !metadata.contains_key(key) {
        return;
    }
    let value = match value {
        MetaValue::Str(mut s) if s.len() > MAX_META_STRING => {
            let mut cut = MAX_META_STRING;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
            MetaValue::Str(s)
        }
        other => other,
    };
    metadata.insert(key.to_owned(), value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_indices_from_names() {
        assert_eq!(layer_of("blk.12.attn_q.weight"), Some(12));
        assert_eq!(layer_of("model.layers.3.mlp.up_proj.weight"), Some(3));
        assert_eq!(layer_of("layers.0.attention.wq.weight"), Some(0));
        assert_eq!(layer_of("transformer.h.7.attn.c_attn.weight"), Some(7));
        assert_eq!(layer_of("token_embd.weight"), None);
        assert_eq!(layer_of("blk.x.attn"), None);
        assert_eq!(layer_of("blk.99999999999.attn"), None);
    }

    #[test]
    fn roles() {
        assert_eq!(role_of("token_embd.weight"), TensorRole::Embedding);
        assert_eq!(role_of("model.embed_tokens.weight"), TensorRole::Embedding);
        assert_eq!(role_of("output_norm.weight"), TensorRole::Output);
        assert_eq!(role_of("output.weight"), TensorRole::Output);
        assert_eq!(role_of("lm_head.weight"), TensorRole::Output);
        assert_eq!(role_of("model.norm.weight"), TensorRole::Output);
        assert_eq!(role_of("rope_freqs.weight"), TensorRole::Prelude);
        assert_eq!(role_of("blk.1.ffn_norm.weight"), TensorRole::Layer(1));
    }
}
