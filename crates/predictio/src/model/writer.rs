//! A GGUF writer: the inverse of [`super::gguf::parse`], for tests and for
//! the benchmark's generated models (no model can be downloaded here).
//!
//! It writes exactly what the parser reads — header, metadata, tensor infos,
//! padding to the alignment, then each tensor's data at its aligned offset —
//! and leaves the tensor *contents* to the caller, who fills them in chunks
//! that start on block boundaries of the tensor's type (a quantised block is
//! never split across two calls). It knows nothing about any architecture.

use std::io::{self, Write};

use super::gguf::ggml_type;

/// A metadata value to write (GGUF value types 0–12).
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    /// u8
    U8(u8),
    /// i8
    I8(i8),
    /// u16
    U16(u16),
    /// i16
    I16(i16),
    /// u32
    U32(u32),
    /// i32
    I32(i32),
    /// f32
    F32(f32),
    /// bool
    Bool(bool),
    /// UTF-8 string
    Str(String),
    /// u64
    U64(u64),
    /// i64
    I64(i64),
    /// f64
    F64(f64),
    /// An array: the element type code, then elements (all of that type).
    Arr(u32, Vec<GgufValue>),
}

impl GgufValue {
    /// A string value.
    pub fn str(s: &str) -> Self {
        GgufValue::Str(s.to_owned())
    }

    /// The GGUF value-type code.
    pub fn code(&self) -> u32 {
        match self {
            GgufValue::U8(_) => 0,
            GgufValue::I8(_) => 1,
            GgufValue::U16(_) => 2,
            GgufValue::I16(_) => 3,
            GgufValue::U32(_) => 4,
            GgufValue::I32(_) => 5,
            GgufValue::F32(_) => 6,
            GgufValue::Bool(_) => 7,
            GgufValue::Str(_) => 8,
            GgufValue::Arr(..) => 9,
            GgufValue::U64(_) => 10,
            GgufValue::I64(_) => 11,
            GgufValue::F64(_) => 12,
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            GgufValue::U8(v) => out.push(*v),
            GgufValue::I8(v) => out.extend(v.to_le_bytes()),
            GgufValue::U16(v) => out.extend(v.to_le_bytes()),
            GgufValue::I16(v) => out.extend(v.to_le_bytes()),
            GgufValue::U32(v) => out.extend(v.to_le_bytes()),
            GgufValue::I32(v) => out.extend(v.to_le_bytes()),
            GgufValue::F32(v) => out.extend(v.to_le_bytes()),
            GgufValue::Bool(v) => out.push(u8::from(*v)),
            GgufValue::Str(s) => put_str(out, s),
            GgufValue::U64(v) => out.extend(v.to_le_bytes()),
            GgufValue::I64(v) => out.extend(v.to_le_bytes()),
            GgufValue::F64(v) => out.extend(v.to_le_bytes()),
            GgufValue::Arr(elem, items) => {
                out.extend(elem.to_le_bytes());
                out.extend((items.len() as u64).to_le_bytes());
                for item in items {
                    item.encode(out);
                }
            }
        }
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A tensor to write: name, dims (innermost first, as GGUF stores them) and
/// GGML type code.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufTensor {
    /// Tensor name.
    pub name: String,
    /// Dimensions, innermost first.
    pub dims: Vec<u64>,
    /// GGML type code (0 F32, 1 F16, 2 Q4_0, 8 Q8_0, …).
    pub ggml_type: u32,
    /// Data bytes (from the type's block size).
    pub len: u64,
    /// Bytes per block of the type (the fill granularity).
    pub block_bytes: u64,
}

/// Why a tensor cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The type code is not a GGML type the parser knows.
    #[error("tensor {0:?}: unknown GGML type {1}")]
    UnknownType(String, u32),
    /// The innermost dimension is not a multiple of the type's block.
    #[error("tensor {0:?}: innermost dimension {1} is not a multiple of the {2}-element block")]
    NotBlockAligned(String, u64, u64),
    /// Writing failed.
    #[error("writing the model: {0}")]
    Io(#[from] io::Error),
}

impl GgufTensor {
    /// A tensor of `dims` and GGML type `ggml_type`, sized from the type.
    pub fn new(name: &str, dims: &[u64], ggml_type: u32) -> Result<Self, WriteError> {
        let (_, block, block_bytes) =
            super::gguf::ggml_type(ggml_type).ok_or_else(|| WriteError::UnknownType(name.to_owned(), ggml_type))?;
        let inner = dims.first().copied().unwrap_or(1);
        if !inner.is_multiple_of(block) {
            return Err(WriteError::NotBlockAligned(name.to_owned(), inner, block));
        }
        let elements: u64 = dims.iter().product();
        Ok(Self {
            name: name.to_owned(),
            dims: dims.to_vec(),
            ggml_type,
            len: elements / block * block_bytes,
            block_bytes,
        })
    }
}

/// A GGUF file being described: version, alignment, metadata, tensors (in
/// file order).
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    kvs: Vec<(String, GgufValue)>,
    tensors: Vec<GgufTensor>,
}

impl GgufWriter {
    /// A file of GGUF `version` whose tensor data is aligned to `alignment`
    /// (write `general.alignment` yourself when it is not the default 32).
    pub fn new(version: u32, alignment: u64) -> Self {
        Self { version, alignment: alignment.max(1), kvs: Vec::new(), tensors: Vec::new() }
    }

    /// Adds a metadata entry.
    pub fn kv(&mut self, key: &str, value: GgufValue) -> &mut Self {
        self.kvs.push((key.to_owned(), value));
        self
    }

    /// Adds a tensor (file order is the order of calls).
    pub fn tensor(&mut self, tensor: GgufTensor) -> &mut Self {
        self.tensors.push(tensor);
        self
    }

    /// The tensors, in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    /// The header up to the data section (padding included), and each
    /// tensor's absolute offset.
    pub fn header(&self) -> (Vec<u8>, Vec<u64>) {
        let mut out = Vec::new();
        out.extend(b"GGUF");
        out.extend(self.version.to_le_bytes());
        out.extend((self.tensors.len() as u64).to_le_bytes());
        out.extend((self.kvs.len() as u64).to_le_bytes());
        for (key, val) in &self.kvs {
            put_str(&mut out, key);
            out.extend(val.code().to_le_bytes());
            val.encode(&mut out);
        }
        let mut relative = Vec::with_capacity(self.tensors.len());
        let mut at = 0u64;
        for t in &self.tensors {
            relative.push(at);
            at = (at + t.len).div_ceil(self.alignment) * self.alignment;
        }
        for (t, rel) in self.tensors.iter().zip(&relative) {
            put_str(&mut out, &t.name);
            out.extend((t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                out.extend(d.to_le_bytes());
            }
            out.extend(t.ggml_type.to_le_bytes());
            out.extend(rel.to_le_bytes());
        }
        let data_offset = (out.len() as u64).div_ceil(self.alignment) * self.alignment;
        out.resize(data_offset as usize, 0);
        (out, relative.iter().map(|r| r + data_offset).collect())
    }

    /// Writes the whole file to `out`. `fill(index, tensor, chunk)` fills
    /// each tensor's data in order, chunk by chunk; every chunk holds whole
    /// blocks of the tensor's type (at most about 4 MiB). Returns the file
    /// length and each tensor's absolute offset.
    pub fn write<W: Write>(
        &self,
        mut out: W,
        mut fill: impl FnMut(usize, &GgufTensor, &mut [u8]),
    ) -> Result<(u64, Vec<u64>), WriteError> {
        let (header, offsets) = self.header();
        out.write_all(&header)?;
        let mut at = header.len() as u64;
        let mut chunk = Vec::new();
        for (i, (t, offset)) in self.tensors.iter().zip(&offsets).enumerate() {
            if *offset > at {
                out.write_all(&vec![0u8; (offset - at) as usize])?;
                at = *offset;
            }
            let per_chunk = ((4 << 20) / t.block_bytes).max(1) * t.block_bytes;
            let mut left = t.len;
            while left > 0 {
                let n = left.min(per_chunk) as usize;
                chunk.clear();
                chunk.resize(n, 0);
                fill(i, t, &mut chunk);
                out.write_all(&chunk)?;
                left -= n as u64;
            }
            at += t.len;
        }
        out.flush()?;
        Ok((at, offsets))
    }
}

/// Bytes of `elements` elements of GGML type `code`, if the type is known
/// and the count is whole blocks.
pub fn tensor_bytes(code: u32, elements: u64) -> Option<u64> {
    let (_, block, block_bytes) = ggml_type(code)?;
    elements.is_multiple_of(block).then(|| elements / block * block_bytes)
}
