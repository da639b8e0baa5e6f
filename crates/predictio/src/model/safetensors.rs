//! safetensors headers: an 8-byte little-endian header length N, then N
//! bytes of JSON mapping each tensor name to its `dtype`, `shape` and
//! `data_offsets` (`[begin, end)`, relative to the byte after the header),
//! plus an optional `__metadata__` map of strings.
//!
//! The JSON is parsed by `serde_json` (recursion-limited, allocation bounded
//! by the header's length); everything after that is validated here: each
//! entry's fields and types, offsets inside the file, and for known dtypes
//! that the byte length matches the shape.
//!
//! # References
//! - The safetensors format description (huggingface/safetensors README).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{MetaValue, ModelError, ModelFormat, ModelLayout, TensorInfo, keep_meta};

/// Largest header accepted (the reference implementation's limit).
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Bits per element of a safetensors dtype, if known.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" | "C64" => 64,
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        _ => return None,
    })
}

/// Parses a safetensors header (see [`ModelLayout::parse`]).
pub fn parse(buf: &[u8], file_len: u64) -> Result<ModelLayout, ModelError> {
    let Some(len_bytes) = buf.get(..8) else {
        return Err(ModelError::Truncated { what: "header length", offset: 0, available: buf.len() as u64 });
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(len_bytes);
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_LEN {
        return Err(ModelError::HeaderTooLarge { len: n, limit: MAX_HEADER_LEN });
    }
    let data_offset = n + 8;
    if data_offset > file_len {
        return Err(ModelError::BadHeader(format!("header length {n} runs past the end of the {file_len}-byte file")));
    }
    let Some(json) = buf.get(8..data_offset as usize) else {
        return Err(ModelError::Truncated { what: "JSON header", offset: 8, available: buf.len() as u64 });
    };
    let root: serde_json::Map<String, Value> = serde_json::from_slice(json)?;
    let data_len = file_len - data_offset;

    let mut metadata = BTreeMap::new();
    let mut tensors = Vec::with_capacity(root.len());
    for (name, entry) in &root {
        if name == "__metadata__" {
            let Value::Object(map) = entry else {
                return Err(ModelError::BadHeader("__metadata__ is not an object".into()));
            };
            for (key, value) in map {
                let Value::String(s) = value else {
                    return Err(ModelError::BadHeader(format!("__metadata__.{key} is not a string")));
                };
                keep_meta(&mut metadata, key, MetaValue::Str(s.clone()));
            }
            continue;
        }
        tensors.push(tensor(name, entry, data_offset, data_len)?);
    }
    tensors.sort_by_key(|t| t.offset);
    Ok(ModelLayout { format: ModelFormat::Safetensors, tensors, data_offset, alignment: 1, file_len, metadata })
}

fn tensor(name: &str, entry: &Value, data_offset: u64, data_len: u64) -> Result<TensorInfo, ModelError> {
    let bad = |reason: String| ModelError::BadTensor { tensor: name.to_owned(), reason };
    let Value::Object(fields) = entry else { return Err(bad("entry is not an object".into())) };
    for key in fields.keys() {
        if !matches!(key.as_str(), "dtype" | "shape" | "data_offsets") {
            return Err(bad(format!("unknown field {key:?}")));
        }
    }
    let dtype = match fields.get("dtype") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(bad("dtype missing or not a string".into())),
    };
    let Some(Value::Array(dims)) = fields.get("shape") else {
        return Err(bad("shape missing or not an array".into()));
    };
    let shape = dims
        .iter()
        .map(|d| d.as_u64().ok_or_else(|| bad(format!("dimension {d} is not a non-negative integer"))))
        .collect::<Result<Vec<u64>, _>>()?;
    let offsets = match fields.get("data_offsets") {
        Some(Value::Array(pair)) if pair.len() == 2 => (pair[0].as_u64(), pair[1].as_u64()),
        _ => return Err(bad("data_offsets missing or not a pair".into())),
    };
    let (Some(begin), Some(end)) = offsets else {
        return Err(bad("data_offsets are not non-negative integers".into()));
    };
    if end < begin {
        return Err(bad(format!("data_offsets [{begin}, {end}] end before they begin")));
    }
    if end > data_len {
        return Err(ModelError::TensorOutOfBounds {
            tensor: name.to_owned(),
            offset: data_offset.saturating_add(begin),
            end: data_offset.saturating_add(end),
            file_len: data_offset.saturating_add(data_len),
        });
    }
    let len = end - begin;
    if let Some(bits) = dtype_bits(&dtype) {
        let mut elements: u64 = 1;
        for &d in &shape {
            elements = elements.checked_mul(d).ok_or_else(|| bad("element count overflows".into()))?;
        }
        let want_bits = elements.checked_mul(bits).ok_or_else(|| bad("bit length overflows".into()))?;
        if want_bits.div_ceil(8) != len {
            return Err(bad(format!("{len} bytes for a {dtype} tensor of shape {shape:?} ({want_bits} bits)")));
        }
    }
    Ok(TensorInfo { name: name.to_owned(), dtype, shape, offset: data_offset + begin, len })
}
