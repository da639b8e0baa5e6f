//! Generated llama-architecture GGUF models for the `llm-load` workload (no
//! model can be downloaded here).
//!
//! Shapes are those of real small llamas (n_embd 2048 / 2560 / 3200, 32
//! heads, grouped-query attention with 8 KV heads, a SwiGLU feed-forward of
//! about 2.7 × n_embd, a 32,000-token vocabulary); the layer count is chosen
//! to reach the wanted file size. Tensor types mix the three that GGUF models
//! ship most: Q8_0 attention, Q4_0 feed-forward and token embeddings, an F16
//! output projection, F32 norms. Weights are random but *valid*: every block
//! scale is a finite, small F16 (random bytes would make NaNs), so llama.cpp
//! computes finite logits and greedy decoding gives the same tokens every
//! time. The tokenizer is a minimal SentencePiece-style ("llama") vocabulary
//! llama.cpp accepts: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then
//! plain pieces.
//!
//! Files are written through [`predictio::model::writer`], the same writer
//! the parser's tests use, in the order converters write them (embeddings,
//! layers, output norm, output) and cached: a file that exists with the
//! expected length is reused.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use predictio::model::writer::{GgufTensor, GgufValue, GgufWriter, WriteError};

use crate::harness::{BenchError, IoContext, XorShift};

/// GGML type codes used here.
const F32: u32 = 0;
const F16: u32 = 1;
const Q4_0: u32 = 2;
const Q8_0: u32 = 8;

/// Vocabulary size (llama 1/2).
pub const N_VOCAB: u64 = 32_000;

/// The shape of a generated llama model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LlamaShape {
    /// Embedding width.
    pub n_embd: u64,
    /// Attention heads.
    pub n_head: u64,
    /// Key/value heads (grouped-query attention).
    pub n_head_kv: u64,
    /// Feed-forward width.
    pub n_ff: u64,
    /// Transformer blocks.
    pub n_layer: u64,
    /// Training context length written in the metadata.
    pub n_ctx_train: u64,
}

impl LlamaShape {
    /// The shape whose file is closest to `gib` GiB: a wider model for a
    /// bigger file, as real model families are, and the layer count that
    /// fills the rest.
    pub fn for_size(gib: u64) -> Self {
        let (n_embd, n_ff) = match gib {
            0 | 1 => (2048, 5632),
            2 | 3 => (2560, 6912),
            _ => (3200, 8640),
        };
        let mut shape = Self { n_embd, n_head: 32, n_head_kv: 8, n_ff, n_layer: 1, n_ctx_train: 4096 };
        let fixed = shape.bytes_outside_layers();
        let per_layer = shape.bytes_per_layer();
        let target = gib.max(1) << 30;
        shape.n_layer = (target.saturating_sub(fixed) / per_layer).max(1);
        shape
    }

    fn n_embd_kv(&self) -> u64 {
        self.n_embd / self.n_head * self.n_head_kv
    }

    /// The tensors in file order: name, dims (innermost first), type.
    pub fn tensors(&self) -> Vec<(String, Vec<u64>, u32)> {
        let (e, kv, f) = (self.n_embd, self.n_embd_kv(), self.n_ff);
        let mut out = vec![("token_embd.weight".to_owned(), vec![e, N_VOCAB], Q4_0)];
        for l in 0..self.n_layer {
            let b = |name: &str| format!("blk.{l}.{name}.weight");
            out.push((b("attn_norm"), vec![e], F32));
            out.push((b("attn_q"), vec![e, e], Q8_0));
            out.push((b("attn_k"), vec![e, kv], Q8_0));
            out.push((b("attn_v"), vec![e, kv], Q8_0));
            out.push((b("attn_output"), vec![e, e], Q8_0));
            out.push((b("ffn_norm"), vec![e], F32));
            out.push((b("ffn_gate"), vec![e, f], Q4_0));
            out.push((b("ffn_up"), vec![e, f], Q4_0));
            out.push((b("ffn_down"), vec![f, e], Q4_0));
        }
        out.push(("output_norm.weight".to_owned(), vec![e], F32));
        out.push(("output.weight".to_owned(), vec![e, N_VOCAB], F16));
        out
    }

    fn bytes_per_layer(&self) -> u64 {
        let one = Self { n_layer: 1, ..*self };
        let zero_layers = one.bytes_outside_layers();
        tensor_bytes(&one.tensors()) - zero_layers
    }

    fn bytes_outside_layers(&self) -> u64 {
        let e = self.n_embd;
        (e * N_VOCAB) / 32 * 18 + e * N_VOCAB * 2 + e * 4
    }

    /// Tensor data bytes.
    pub fn data_bytes(&self) -> u64 {
        tensor_bytes(&self.tensors())
    }

    /// The file name the bench caches this model under.
    pub fn file_name(&self) -> String {
        format!("llama-e{}-l{}-ff{}-q4q8f16.gguf", self.n_embd, self.n_layer, self.n_ff)
    }

    fn writer(&self) -> Result<GgufWriter, WriteError> {
        let mut w = GgufWriter::new(3, 32);
        let u32v = |v: u64| GgufValue::U32(v as u32);
        w.kv("general.architecture", GgufValue::str("llama"))
            .kv("general.name", GgufValue::str(&format!("predictio-bench llama {}x{}", self.n_layer, self.n_embd)))
            .kv("general.file_type", GgufValue::U32(2))
            .kv("llama.context_length", u32v(self.n_ctx_train))
            .kv("llama.embedding_length", u32v(self.n_embd))
            .kv("llama.block_count", u32v(self.n_layer))
            .kv("llama.feed_forward_length", u32v(self.n_ff))
            .kv("llama.attention.head_count", u32v(self.n_head))
            .kv("llama.attention.head_count_kv", u32v(self.n_head_kv))
            .kv("llama.rope.dimension_count", u32v(self.n_embd / self.n_head))
            .kv("llama.rope.freq_base", GgufValue::F32(10_000.0))
            .kv("llama.attention.layer_norm_rms_epsilon", GgufValue::F32(1e-5))
            .kv("llama.vocab_size", u32v(N_VOCAB));
        let (tokens, scores, types) = vocabulary();
        w.kv("tokenizer.ggml.model", GgufValue::str("llama"))
            .kv("tokenizer.ggml.tokens", GgufValue::Arr(8, tokens))
            .kv("tokenizer.ggml.scores", GgufValue::Arr(6, scores))
            .kv("tokenizer.ggml.token_type", GgufValue::Arr(5, types))
            .kv("tokenizer.ggml.unknown_token_id", GgufValue::U32(0))
            .kv("tokenizer.ggml.bos_token_id", GgufValue::U32(1))
            .kv("tokenizer.ggml.eos_token_id", GgufValue::U32(2))
            .kv("tokenizer.ggml.add_bos_token", GgufValue::Bool(true))
            .kv("tokenizer.ggml.add_eos_token", GgufValue::Bool(false));
        for (name, dims, ty) in self.tensors() {
            w.tensor(GgufTensor::new(&name, &dims, ty)?);
        }
        Ok(w)
    }
}

fn tensor_bytes(tensors: &[(String, Vec<u64>, u32)]) -> u64 {
    tensors
        .iter()
        .map(|(_, dims, ty)| predictio::model::writer::tensor_bytes(*ty, dims.iter().product()).unwrap_or(0))
        .sum()
}

/// `<unk>`, `<s>`, `</s>`, 256 byte tokens, then unique plain pieces, with
/// SentencePiece scores and token types (2 unknown, 3 control, 6 byte, 1
/// normal).
fn vocabulary() -> (Vec<GgufValue>, Vec<GgufValue>, Vec<GgufValue>) {
    let mut tokens = vec![GgufValue::str("<unk>"), GgufValue::str("<s>"), GgufValue::str("</s>")];
    let mut types = vec![GgufValue::I32(2), GgufValue::I32(3), GgufValue::I32(3)];
    for b in 0..=255u8 {
        tokens.push(GgufValue::Str(format!("<0x{b:02X}>")));
        types.push(GgufValue::I32(6));
    }
    let mut i = 0u64;
    while (tokens.len() as u64) < N_VOCAB {
        tokens.push(GgufValue::Str(format!("\u{2581}w{i}")));
        types.push(GgufValue::I32(1));
        i += 1;
    }
    let scores = (0..tokens.len()).map(|i| GgufValue::F32(-(i as f32))).collect();
    (tokens, scores, types)
}

/// Random F16 bits with magnitude in [2^(exp-15), 2^(exp-14)), random sign
/// when `signed`: always finite.
fn f16_bits(rng: &mut XorShift, exp: u16, signed: bool) -> u16 {
    let r = rng.next();
    let sign = if signed { ((r >> 20) as u16 & 1) << 15 } else { 0 };
    sign | (exp << 10) | (r as u16 & 0x3FF)
}

/// Fills one chunk of a tensor with valid random data of its type.
fn fill(rng: &mut XorShift, tensor: &GgufTensor, chunk: &mut [u8]) {
    match tensor.ggml_type {
        // Norm weights: 1.0.
        F32 => {
            for w in chunk.chunks_exact_mut(4) {
                w.copy_from_slice(&1.0f32.to_le_bytes());
            }
        }
        // ±[2^-7, 2^-6): std about 0.01.
        F16 => {
            for w in chunk.chunks_exact_mut(2) {
                w.copy_from_slice(&f16_bits(rng, 8, true).to_le_bytes());
            }
        }
        // Scale d in [2^-9, 2^-8), nibbles random: values d·(q−8), std ≈ 0.01.
        Q4_0 => {
            for block in chunk.chunks_exact_mut(18) {
                block[..2].copy_from_slice(&f16_bits(rng, 6, false).to_le_bytes());
                for q in block[2..].chunks_mut(8) {
                    let r = rng.next().to_le_bytes();
                    q.copy_from_slice(&r[..q.len()]);
                }
            }
        }
        // Scale d in [2^-13, 2^-12), int8 random: std ≈ 0.01–0.02.
        Q8_0 => {
            for block in chunk.chunks_exact_mut(34) {
                block[..2].copy_from_slice(&f16_bits(rng, 2, false).to_le_bytes());
                for q in block[2..].chunks_mut(8) {
                    let r = rng.next().to_le_bytes();
                    q.copy_from_slice(&r[..q.len()]);
                }
            }
        }
        _ => chunk.fill(0),
    }
}

/// The generated model of about `gib` GiB under `dir`, written if it is not
/// there yet (or has the wrong length). Returns its path and shape.
pub fn ensure(dir: &Path, gib: u64) -> Result<(PathBuf, LlamaShape), BenchError> {
    let shape = LlamaShape::for_size(gib);
    let path = dir.join(shape.file_name());
    let writer = shape.writer().map_err(|e| BenchError::Options(e.to_string()))?;
    let (header, offsets) = writer.header();
    let expected =
        offsets.last().zip(writer.tensors().last()).map_or(header.len() as u64, |(offset, t)| offset + t.len);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == expected) {
        return Ok((path, shape));
    }
    std::fs::create_dir_all(dir).doing(|| format!("creating {}", dir.display()))?;
    let tmp = dir.join(format!(".{}.tmp", shape.file_name()));
    let file = File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let mut rng = XorShift::new(0x11A3_A000 ^ gib);
    writer.write(BufWriter::with_capacity(8 << 20, &file), |_, t, chunk| fill(&mut rng, t, chunk)).map_err(
        |e| match e {
            WriteError::Io(source) => BenchError::Io { what: format!("writing {}", tmp.display()), source },
            other => BenchError::Options(other.to_string()),
        },
    )?;
    file.sync_all().doing(|| format!("syncing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).doing(|| format!("renaming {}", tmp.display()))?;
    Ok((path, shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_reach_their_sizes() {
        for gib in [1u64, 2, 4] {
            let shape = LlamaShape::for_size(gib);
            let bytes = shape.data_bytes() as f64;
            let target = (gib << 30) as f64;
            assert!(bytes <= target && bytes > target * 0.95, "{gib} GiB: {bytes} bytes ({shape:?})");
        }
    }

    #[test]
    fn a_small_model_parses_back_with_finite_scales() {
        let shape = LlamaShape { n_embd: 64, n_head: 4, n_head_kv: 2, n_ff: 128, n_layer: 2, n_ctx_train: 128 };
        let writer = shape.writer().expect("writer");
        let mut bytes = Vec::new();
        let mut rng = XorShift::new(7);
        writer.write(&mut bytes, |_, t, chunk| fill(&mut rng, t, chunk)).expect("write");
        let layout = predictio::model::ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
        assert_eq!(layout.tensors.len(), 2 + 9 * 2 + 1);
        assert_eq!(layout.layer_count(), 2);
        for t in &layout.tensors {
            let data = &bytes[t.offset as usize..t.end() as usize];
            let block = match t.dtype.as_str() {
                "Q4_0" => 18,
                "Q8_0" => 34,
                _ => continue,
            };
            for b in data.chunks_exact(block) {
                let scale = u16::from_le_bytes([b[0], b[1]]);
                assert!(scale & 0x7C00 != 0x7C00, "{}: non-finite scale", t.name);
            }
        }
    }
}
