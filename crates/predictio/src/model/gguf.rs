//! GGUF v2/v3 headers: magic, version, metadata key–values of every value
//! type (nested arrays included), tensor infos, `general.alignment` and the
//! data offset.
//!
//! Every count is checked against the bytes that remain before it is used,
//! so a forged count fails fast with [`ModelError::CountTooLarge`] instead of
//! looping or allocating; arrays nest at most [`MAX_ARRAY_NESTING`] deep.
//! The work done is linear in the header's length.
//!
//! # References
//! - ggml's `docs/gguf.md` (the format) and `ggml.c` (`ggml_type_size`,
//!   `ggml_blck_size`).

use std::collections::{BTreeMap, HashSet};

use super::{MetaValue, ModelError, ModelFormat, ModelLayout, TensorInfo, keep_meta};

/// Deepest array nesting accepted (arrays of arrays of …).
pub const MAX_ARRAY_NESTING: u32 = 8;
/// Alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;

/// Smallest encoding of one tensor info: name length (8), n_dims (4),
/// type (4), offset (8).
const MIN_TENSOR_INFO: u64 = 24;
/// Smallest encoding of one key–value: key length (8), type (4), a 1-byte
/// value.
const MIN_KV: u64 = 13;

/// GGUF metadata value types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ValueType {
    /// u8
    U8 = 0,
    /// i8
    I8 = 1,
    /// u16
    U16 = 2,
    /// i16
    I16 = 3,
    /// u32
    U32 = 4,
    /// i32
    I32 = 5,
    /// f32
    F32 = 6,
    /// bool (one byte)
    Bool = 7,
    /// string: u64 length + bytes
    String = 8,
    /// array: u32 element type + u64 count + elements
    Array = 9,
    /// u64
    U64 = 10,
    /// i64
    I64 = 11,
    /// f64
    F64 = 12,
}

impl ValueType {
    /// The type for a code, if GGUF defines it.
    pub fn from_code(code: u32) -> Option<Self> {
        use ValueType::*;
        Some(match code {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// Encoded size of a fixed-size value; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// Smallest encoding of one value of this type.
    fn min_size(self) -> u64 {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            other => other.fixed_size().unwrap_or(1),
        }
    }

    /// A short name.
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A GGML tensor type's name, block size (elements) and block size in bytes.
pub fn ggml_type(code: u32) -> Option<(&'static str, u64, u64)> {
    Some(match code {
        0 => ("F32", 1, 4),
        1 => ("F16", 1, 2),
        2 => ("Q4_0", 32, 18),
        3 => ("Q4_1", 32, 20),
        6 => ("Q5_0", 32, 22),
        7 => ("Q5_1", 32, 24),
        8 => ("Q8_0", 32, 34),
        9 => ("Q8_1", 32, 36),
        10 => ("Q2_K", 256, 84),
        11 => ("Q3_K", 256, 110),
        12 => ("Q4_K", 256, 144),
        13 => ("Q5_K", 256, 176),
        14 => ("Q6_K", 256, 210),
        15 => ("Q8_K", 256, 292),
        16 => ("IQ2_XXS", 256, 66),
        17 => ("IQ2_XS", 256, 74),
        18 => ("IQ3_XXS", 256, 98),
        19 => ("IQ1_S", 256, 50),
        20 => ("IQ4_NL", 32, 18),
        21 => ("IQ3_S", 256, 110),
        22 => ("IQ2_S", 256, 82),
        23 => ("IQ4_XS", 256, 136),
        24 => ("I8", 1, 1),
        25 => ("I16", 1, 2),
        26 => ("I32", 1, 4),
        27 => ("I64", 1, 8),
        28 => ("F64", 1, 8),
        29 => ("IQ1_M", 256, 56),
        30 => ("BF16", 1, 2),
        34 => ("TQ1_0", 256, 54),
        35 => ("TQ2_0", 256, 66),
        39 => ("MXFP4", 32, 17),
        _ => return None,
    })
}

/// A bounds-checked little-endian cursor over the header bytes.
///
/// `buf` may be only a prefix of the header (the rest of the file is
/// `file_len` bytes long): a count that the file could hold but the prefix
/// cannot is not an error yet — parsing runs into
/// [`ModelError::Truncated`] at the prefix's end, and the caller reads more.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    file_len: u64,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> u64 {
        (self.buf.len() - self.pos) as u64
    }

    /// Bytes left in the file after the cursor (at least those in `buf`).
    fn remaining_in_file(&self) -> u64 {
        self.file_len.max(self.buf.len() as u64).saturating_sub(self.pos as u64)
    }

    /// How many items of `min_size` bytes to reserve room for: never more
    /// than the bytes at hand can hold.
    fn capacity_for(&self, count: u64, min_size: u64) -> usize {
        count.min(self.remaining() / min_size.max(1)) as usize
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&'a [u8], ModelError> {
        if n > self.remaining() {
            return Err(ModelError::Truncated { what, offset: self.pos as u64, available: self.buf.len() as u64 });
        }
        let n = n as usize;
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], ModelError> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, ModelError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, ModelError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A count of items of at least `min_size` bytes each that must fit in
    /// what remains of the file.
    fn count(&mut self, what: &'static str, min_size: u64) -> Result<u64, ModelError> {
        let offset = self.pos as u64;
        let count = self.u64(what)?;
        let remaining = self.remaining_in_file();
        if count > remaining / min_size.max(1) {
            return Err(ModelError::CountTooLarge { what, count, offset, remaining });
        }
        Ok(count)
    }

    fn bytes_of_string(&mut self, what: &'static str) -> Result<&'a [u8], ModelError> {
        let len = self.u64(what)?;
        self.take(len, what)
    }

    fn utf8(&mut self, what: &'static str) -> Result<&'a str, ModelError> {
        let offset = self.pos as u64;
        let bytes = self.bytes_of_string(what)?;
        std::str::from_utf8(bytes).map_err(|_| ModelError::InvalidUtf8 { what, offset })
    }
}

/// Reads one value of type `ty`; returns it for scalars and strings, a
/// summary for arrays.
fn read_value(r: &mut Reader<'_>, ty: ValueType, depth: u32) -> Result<MetaValue, ModelError> {
    use ValueType::*;
    Ok(match ty {
        U8 => MetaValue::Uint(u64::from(r.array::<1>("u8 value")?[0])),
        I8 => MetaValue::Int(i64::from(i8::from_le_bytes(r.array("i8 value")?))),
        U16 => MetaValue::Uint(u64::from(u16::from_le_bytes(r.array("u16 value")?))),
        I16 => MetaValue::Int(i64::from(i16::from_le_bytes(r.array("i16 value")?))),
        U32 => MetaValue::Uint(u64::from(r.u32("u32 value")?)),
        I32 => MetaValue::Int(i64::from(i32::from_le_bytes(r.array("i32 value")?))),
        F32 => MetaValue::Float(f64::from(f32::from_le_bytes(r.array("f32 value")?))),
        Bool => MetaValue::Bool(r.array::<1>("bool value")?[0] != 0),
        String => MetaValue::Str(std::string::String::from_utf8_lossy(r.bytes_of_string("string value")?).into_owned()),
        U64 => MetaValue::Uint(r.u64("u64 value")?),
        I64 => MetaValue::Int(i64::from_le_bytes(r.array("i64 value")?)),
        F64 => MetaValue::Float(f64::from_le_bytes(r.array("f64 value")?)),
        Array => {
            let offset = r.pos as u64;
            if depth >= MAX_ARRAY_NESTING {
                return Err(ModelError::NestingTooDeep { offset });
            }
            let code = r.u32("array element type")?;
            let element = ValueType::from_code(code).ok_or(ModelError::BadValueType { value_type: code, offset })?;
            let len = r.count("array length", element.min_size())?;
            skip_elements(r, element, len, depth + 1)?;
            MetaValue::Array { element: element.name(), len }
        }
    })
}

/// Skips (validating) `len` array elements of type `element`.
fn skip_elements(r: &mut Reader<'_>, element: ValueType, len: u64, depth: u32) -> Result<(), ModelError> {
    match element {
        ValueType::String => {
            // `len` fits in the file; each iteration consumes at least 8
            // bytes of `buf` or fails, so the loop is bounded by the input.
            for _ in 0..len {
                r.bytes_of_string("array string")?;
            }
        }
        ValueType::Array => {
            for _ in 0..len {
                read_value(r, ValueType::Array, depth)?;
            }
        }
        fixed => {
            // count() checked len * size fits in the file; take() checks
            // the bytes at hand.
            let size = fixed.fixed_size().unwrap_or(1);
            r.take(len.saturating_mul(size), "array elements")?;
        }
    }
    Ok(())
}

struct RawTensor<'a> {
    name: &'a str,
    shape: Vec<u64>,
    type_code: u32,
    relative: u64,
}

/// Parses a GGUF header (see [`ModelLayout::parse`]).
pub fn parse(buf: &[u8], file_len: u64) -> Result<ModelLayout, ModelError> {
    let mut r = Reader { buf, pos: 0, file_len };
    let magic: [u8; 4] = r.array("magic")?;
    if &magic != b"GGUF" {
        return Err(ModelError::BadMagic(magic));
    }
    let version = r.u32("version")?;
    if !matches!(version, 2 | 3) {
        let big_endian = matches!(version.swap_bytes(), 1..=3);
        return Err(ModelError::UnsupportedVersion { version, big_endian });
    }
    let tensor_offset = r.pos as u64;
    let tensor_count = r.u64("tensor count")?;
    let kv_count = r.count("metadata count", MIN_KV)?;
    let remaining = r.remaining_in_file();
    if tensor_count > remaining / MIN_TENSOR_INFO {
        return Err(ModelError::CountTooLarge {
            what: "tensor count",
            count: tensor_count,
            offset: tensor_offset,
            remaining,
        });
    }

    let mut metadata = BTreeMap::new();
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..kv_count {
        let key = r.utf8("metadata key")?;
        let type_offset = r.pos as u64;
        let code = r.u32("metadata value type")?;
        let ty =
            ValueType::from_code(code).ok_or(ModelError::BadValueType { value_type: code, offset: type_offset })?;
        let value = read_value(&mut r, ty, 0)?;
        if key == "general.alignment" {
            let a = value.as_u64().ok_or_else(|| ModelError::WrongValueType {
                key: key.to_owned(),
                found: if matches!(value, MetaValue::Int(_)) { "negative integer" } else { ty.name() },
            })?;
            if a == 0 || !a.is_power_of_two() || a > 1 << 30 {
                return Err(ModelError::BadAlignment(a));
            }
            alignment = a;
        }
        keep_meta(&mut metadata, key, value);
    }

    // Tensor infos. The reservation is bounded by the bytes at hand; the
    // vector grows only with infos actually parsed.
    let mut raw: Vec<RawTensor<'_>> = Vec::with_capacity(r.capacity_for(tensor_count, MIN_TENSOR_INFO));
    for _ in 0..tensor_count {
        let name = r.utf8("tensor name")?;
        let n_dims = r.u32("tensor dimension count")?;
        if n_dims > MAX_DIMS {
            return Err(ModelError::BadTensor {
                tensor: name.to_owned(),
                reason: format!("{n_dims} dimensions (at most {MAX_DIMS})"),
            });
        }
        let mut shape = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            shape.push(r.u64("tensor dimension")?);
        }
        let type_code = r.u32("tensor type")?;
        let relative = r.u64("tensor offset")?;
        raw.push(RawTensor { name, shape, type_code, relative });
    }
    let header_end = r.pos as u64;
    let data_offset = header_end.div_ceil(alignment).saturating_mul(alignment);
    if !raw.is_empty() && data_offset > file_len {
        return Err(ModelError::TensorOutOfBounds {
            tensor: raw[0].name.to_owned(),
            offset: data_offset,
            end: data_offset,
            file_len,
        });
    }

    let mut seen = HashSet::with_capacity(raw.len());
    for t in &raw {
        if !seen.insert(t.name) {
            return Err(ModelError::DuplicateTensor(t.name.to_owned()));
        }
    }

    // Lengths: from the type where known; for a type this parser does not
    // know, up to the next tensor's start (or the end of the file).
    let mut starts: Vec<u64> = raw.iter().map(|t| t.relative).collect();
    starts.sort_unstable();
    let data_len = file_len - data_offset.min(file_len);
    let mut tensors = Vec::with_capacity(raw.len());
    for t in raw {
        let bad = |reason: String| ModelError::BadTensor { tensor: t.name.to_owned(), reason };
        if t.relative % alignment != 0 {
            return Err(bad(format!("offset {} is not a multiple of the alignment {alignment}", t.relative)));
        }
        let mut elements: u64 = 1;
        for &d in &t.shape {
            elements = elements.checked_mul(d).ok_or_else(|| bad("element count overflows".into()))?;
        }
        let (dtype, len) = match ggml_type(t.type_code) {
            Some((name, block, block_bytes)) => {
                let row = t.shape.first().copied().unwrap_or(1);
                if row % block != 0 {
                    return Err(bad(format!(
                        "row of {row} elements is not a whole number of {name} blocks of {block}"
                    )));
                }
                let len =
                    (elements / block).checked_mul(block_bytes).ok_or_else(|| bad("byte length overflows".into()))?;
                (name.to_owned(), len)
            }
            None => {
                let next = match starts.binary_search(&t.relative) {
                    Ok(i) | Err(i) => starts[i..].iter().copied().find(|&s| s > t.relative).unwrap_or(data_len),
                };
                (format!("type#{}", t.type_code), next.saturating_sub(t.relative))
            }
        };
        let offset = data_offset.checked_add(t.relative);
        let end = offset.and_then(|o| o.checked_add(len));
        match (offset, end) {
            (Some(offset), Some(end)) if end <= file_len => {
                tensors.push(TensorInfo { name: t.name.to_owned(), dtype, shape: t.shape, offset, len })
            }
            _ => {
                let offset = offset.unwrap_or(u64::MAX);
                return Err(ModelError::TensorOutOfBounds {
                    tensor: t.name.to_owned(),
                    offset,
                    end: offset.saturating_add(len),
                    file_len,
                });
            }
        }
    }
    tensors.sort_by_key(|t| t.offset);
    Ok(ModelLayout { format: ModelFormat::Gguf { version }, tensors, data_offset, alignment, file_len, metadata })
}
