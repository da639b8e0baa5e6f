//! Model-layout parsers: hand-built GGUF and safetensors files, malformed
//! headers (each a typed error), the load order, and a bounded-time fuzz run
//! (seeded, stable toolchain) that CI executes: random and mutated inputs
//! must never panic, hang or allocate beyond the input.

use std::io::Write;

use predictio::model::writer::{GgufTensor, GgufValue, GgufWriter};
use predictio::model::{LoadOrder, MetaValue, ModelError, ModelFormat, ModelLayout, TensorRole};
use predictio::testing::Rng;

// ---------------------------------------------------------------- GGUF writer
// The library's writer (`predictio::model::writer`), which the benchmark's
// generated models use too.

type Val = GgufValue;
type T = GgufTensor;

fn t(name: &str, dims: &[u64], ty: u32) -> T {
    GgufTensor::new(name, dims, ty).expect("test tensor")
}

/// Writes a GGUF file: header, metadata, tensor infos, padding, then the
/// tensors' data (filled with a byte derived from the tensor's index) in the
/// given order, each aligned. Returns the bytes and each tensor's absolute
/// offset.
fn gguf(version: u32, kvs: &[(&str, Val)], tensors: &[T], alignment: u64) -> (Vec<u8>, Vec<u64>) {
    let mut writer = GgufWriter::new(version, alignment);
    for (key, val) in kvs {
        writer.kv(key, val.clone());
    }
    for tensor in tensors {
        writer.tensor(tensor.clone());
    }
    let mut out = Vec::new();
    let (_, offsets) = writer.write(&mut out, |i, _, chunk| chunk.fill(i as u8)).expect("write to memory");
    (out, offsets)
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend((s.len() as u64).to_le_bytes());
    out.extend(s.as_bytes());
}

/// A small llama-like model: embeddings, 3 layers of 4 tensors, output norm
/// and output, written in the order convert_hf_to_gguf uses (layers in the
/// middle, output last), with rich metadata of every value type.
fn llama_gguf(version: u32) -> (Vec<u8>, Vec<u64>) {
    let mut tensors = vec![t("token_embd.weight", &[64, 32], 8)];
    for layer in 0..3 {
        tensors.push(t(&format!("blk.{layer}.attn_norm.weight"), &[64], 0));
        tensors.push(t(&format!("blk.{layer}.attn_q.weight"), &[64, 64], 2));
        tensors.push(t(&format!("blk.{layer}.ffn_up.weight"), &[64, 128], 1));
        tensors.push(t(&format!("blk.{layer}.ffn_down.weight"), &[128, 64], 30));
    }
    tensors.push(t("output_norm.weight", &[64], 0));
    tensors.push(t("output.weight", &[64, 32], 8));
    let kvs = vec![
        ("general.architecture", Val::str("llama")),
        ("general.name", Val::str("tiny")),
        ("general.alignment", Val::U32(64)),
        ("llama.block_count", Val::U32(3)),
        ("llama.context_length", Val::U64(4096)),
        ("t.u8", Val::U8(7)),
        ("t.i8", Val::I8(-7)),
        ("t.u16", Val::U16(700)),
        ("t.i16", Val::I16(-700)),
        ("t.i32", Val::I32(-70000)),
        ("t.f32", Val::F32(0.5)),
        ("t.bool", Val::Bool(true)),
        ("t.i64", Val::I64(-1)),
        ("t.f64", Val::F64(2.25)),
        ("tokenizer.ggml.tokens", Val::Arr(8, vec![Val::str("<s>"), Val::str("</s>"), Val::str("a")])),
        ("tokenizer.ggml.scores", Val::Arr(6, vec![Val::F32(0.0), Val::F32(-1.0), Val::F32(-2.0)])),
        ("t.nested", Val::Arr(9, vec![Val::Arr(4, vec![Val::U32(1), Val::U32(2)]), Val::Arr(8, vec![Val::str("x")])])),
        ("t.empty", Val::Arr(10, vec![])),
    ];
    gguf(version, &kvs, &tensors, 64)
}

// --------------------------------------------------------- safetensors writer

/// Writes a safetensors file from (name, dtype, shape, byte length) entries,
/// data back to back in the given order, with optional metadata.
fn safetensors(entries: &[(&str, &str, &[u64], u64)], metadata: Option<&str>) -> Vec<u8> {
    let mut json = String::from("{");
    if let Some(m) = metadata {
        json.push_str(&format!("\"__metadata__\":{m},"));
    }
    let mut at = 0u64;
    for (i, (name, dtype, shape, len)) in entries.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
        json.push_str(&format!(
            "\"{name}\":{{\"dtype\":\"{dtype}\",\"shape\":[{}],\"data_offsets\":[{at},{}]}}",
            dims.join(","),
            at + len
        ));
        at += len;
    }
    json.push('}');
    while json.len() % 8 != 0 {
        json.push(' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json.as_bytes());
    out.resize(out.len() + at as usize, 0xAB);
    out
}

fn hf_model() -> Vec<u8> {
    let mut entries: Vec<(String, &str, Vec<u64>, u64)> = Vec::new();
    entries.push(("lm_head.weight".into(), "BF16", vec![32, 16], 32 * 16 * 2));
    for layer in [1u32, 0, 2] {
        entries.push((format!("model.layers.{layer}.mlp.up_proj.weight"), "F16", vec![16, 16], 512));
        entries.push((format!("model.layers.{layer}.input_layernorm.weight"), "F32", vec![16], 64));
    }
    entries.push(("model.embed_tokens.weight".into(), "BF16", vec![32, 16], 1024));
    entries.push(("model.norm.weight".into(), "F32", vec![16], 64));
    let refs: Vec<(&str, &str, &[u64], u64)> =
        entries.iter().map(|(n, d, s, l)| (n.as_str(), *d, s.as_slice(), *l)).collect();
    safetensors(&refs, Some(r#"{"format":"pt"}"#))
}

// ---------------------------------------------------------------------- tests

#[test]
fn gguf_v3_layout() {
    let (bytes, offsets) = llama_gguf(3);
    let layout = ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
    assert_eq!(layout.format, ModelFormat::Gguf { version: 3 });
    assert_eq!(layout.alignment, 64);
    assert_eq!(layout.data_offset % 64, 0);
    assert_eq!(layout.tensors.len(), 15);
    assert_eq!(layout.layer_count(), 3);
    // File order, absolute offsets, lengths from the types.
    let mut sorted = offsets.clone();
    sorted.sort_unstable();
    assert_eq!(layout.tensors.iter().map(|t| t.offset).collect::<Vec<_>>(), sorted);
    let embd = layout.tensors.iter().find(|t| t.name == "token_embd.weight").expect("embd");
    assert_eq!((embd.dtype.as_str(), embd.len, embd.shape.as_slice()), ("Q8_0", 64 * 32 / 32 * 34, &[64, 32][..]));
    // Each tensor's bytes hold its index (the writer's fill), so the offsets
    // point at the right data.
    for t in &layout.tensors {
        let data = &bytes[t.offset as usize..t.end() as usize];
        assert!(data.windows(2).all(|w| w[0] == w[1]), "{} not uniform", t.name);
    }
    assert_eq!(layout.metadata.get("general.architecture").and_then(MetaValue::as_str), Some("llama"));
    assert_eq!(layout.metadata.get("llama.block_count").and_then(MetaValue::as_u64), Some(3));
    assert_eq!(layout.metadata.get("t.i8"), Some(&MetaValue::Int(-7)));
    assert_eq!(layout.metadata.get("t.f64"), Some(&MetaValue::Float(2.25)));
    assert_eq!(layout.metadata.get("t.bool"), Some(&MetaValue::Bool(true)));
    assert_eq!(layout.metadata.get("t.nested"), Some(&MetaValue::Array { element: "array", len: 2 }));
    assert_eq!(layout.metadata.get("tokenizer.ggml.tokens"), Some(&MetaValue::Array { element: "string", len: 3 }));
}

#[test]
fn gguf_v2_and_default_alignment() {
    let (bytes, _) = gguf(2, &[], &[t("a.weight", &[32], 2), t("b.weight", &[3], 0)], 32);
    let layout = ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
    assert_eq!(layout.format, ModelFormat::Gguf { version: 2 });
    assert_eq!(layout.alignment, 32);
    assert_eq!(layout.tensors[1].offset - layout.tensors[0].offset, 32);
    assert_eq!(layout.tensor_bytes(), 18 + 12);
}

#[test]
fn gguf_load_orders() {
    let (bytes, _) = llama_gguf(3);
    let layout = ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
    let names: Vec<&str> = layout.load_order().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names[0], "token_embd.weight");
    assert_eq!(
        &names[1..5],
        ["blk.0.attn_norm.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "blk.0.ffn_down.weight"]
    );
    assert_eq!(&names[13..], ["output_norm.weight", "output.weight"]);
    let read: Vec<&str> = layout.load_order_for(LoadOrder::LlamaCppRead).iter().map(|t| t.name.as_str()).collect();
    assert_eq!(&read[..3], ["token_embd.weight", "output_norm.weight", "output.weight"]);
    assert_eq!(read[3], "blk.0.attn_norm.weight");

    // The file is laid out in compute order, so the plan coalesces into one
    // range covering all tensor data.
    let plan = layout.plan(LoadOrder::Compute);
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].offset, layout.data_offset);
    let last = layout.tensors.last().expect("tensors");
    assert_eq!(plan[0].end(), last.end());
    // The read order jumps to the output and back: three ranges.
    assert_eq!(layout.plan(LoadOrder::LlamaCppRead).len(), 3);

    let spans = layout.layers();
    assert_eq!(spans.len(), 5);
    assert_eq!(spans[0].role, TensorRole::Embedding);
    assert_eq!(spans[1].role, TensorRole::Layer(0));
    assert_eq!(spans[1].tensors, 4);
    assert_eq!(spans[1].ranges.len(), 1);
    assert_eq!(spans[4].role, TensorRole::Output);
}

#[test]
fn safetensors_layout_and_order() {
    let bytes = hf_model();
    let layout = ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
    assert_eq!(layout.format, ModelFormat::Safetensors);
    assert_eq!(layout.tensors.len(), 9);
    assert_eq!(layout.metadata.get("format").and_then(MetaValue::as_str), Some("pt"));
    assert_eq!(layout.tensors[0].name, "lm_head.weight");
    assert_eq!(layout.tensors[0].offset, layout.data_offset);
    assert_eq!(layout.tensors.last().expect("tensors").end(), bytes.len() as u64);
    let order: Vec<&str> = layout.load_order().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(order[0], "model.embed_tokens.weight");
    assert_eq!(order[1], "model.layers.0.mlp.up_proj.weight");
    assert_eq!(order[2], "model.layers.0.input_layernorm.weight");
    assert!(order[3].starts_with("model.layers.1."));
    assert_eq!(&order[7..], ["lm_head.weight", "model.norm.weight"]);
    assert_eq!(layout.layer_count(), 3);
}

#[test]
fn read_from_file_reads_only_the_header() {
    let (bytes, _) = llama_gguf(3);
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(&bytes).expect("write");
    let layout = ModelLayout::read(f.as_file()).expect("read");
    assert_eq!(layout, ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse"));

    // A GGUF whose header exceeds the first 1 MiB read: the reader grows.
    let big: Vec<Val> = (0..150_000).map(|_| Val::str("tok")).collect();
    let (bytes, _) = gguf(3, &[("tokenizer.ggml.tokens", Val::Arr(8, big))], &[t("w", &[32], 0)], 32);
    assert!(bytes.len() > 1 << 20);
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(&bytes).expect("write");
    assert_eq!(ModelLayout::read(f.as_file()).expect("read").tensors.len(), 1);

    let st = hf_model();
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(&st).expect("write");
    assert_eq!(ModelLayout::read(f.as_file()).expect("read").tensors.len(), 9);
}

#[test]
fn read_from_file_stops_at_the_header_limit() {
    // A metadata string of 100 MiB: the header can never fit in the 64 MiB
    // the reader allows itself. The file is sparse, so this costs no disk.
    let mut header = b"GGUF".to_vec();
    header.extend(3u32.to_le_bytes());
    header.extend(0u64.to_le_bytes());
    header.extend(1u64.to_le_bytes());
    put_str(&mut header, "huge");
    header.extend(8u32.to_le_bytes());
    header.extend((100u64 << 20).to_le_bytes());
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(&header).expect("write");
    f.as_file().set_len(200 << 20).expect("set_len");
    let err = ModelLayout::read(f.as_file()).expect_err("too large");
    assert!(
        matches!(err, ModelError::HeaderTooLarge { limit, .. } if limit == predictio::model::MAX_HEADER_BYTES),
        "{err}"
    );

    // A file that ends inside its own header is truncated, not too large.
    let mut f = tempfile::NamedTempFile::new().expect("tempfile");
    f.write_all(&header).expect("write");
    let err = ModelLayout::read(f.as_file()).expect_err("truncated");
    assert!(matches!(err, ModelError::CountTooLarge { .. } | ModelError::Truncated { .. }), "{err}");
}

#[track_caller]
fn parse_err(bytes: &[u8]) -> ModelError {
    match ModelLayout::parse(bytes, bytes.len() as u64) {
        Ok(layout) => panic!("expected an error, parsed {} tensors", layout.tensors.len()),
        Err(err) => err,
    }
}

#[test]
fn gguf_malformed() {
    let (good, _) = llama_gguf(3);
    assert!(matches!(parse_err(b"GGUF"), ModelError::Truncated { .. }));
    assert!(matches!(parse_err(b"nope, not a model at all"), ModelError::UnknownFormat));

    let mut v1 = good.clone();
    v1[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(parse_err(&v1), ModelError::UnsupportedVersion { version: 1, big_endian: false }));
    let mut be = good.clone();
    be[4..8].copy_from_slice(&3u32.to_be_bytes());
    assert!(matches!(parse_err(&be), ModelError::UnsupportedVersion { big_endian: true, .. }));

    // Inflated counts fail before any allocation or loop.
    let mut many = good.clone();
    many[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(parse_err(&many), ModelError::CountTooLarge { what: "tensor count", .. }));
    let mut kvs = good.clone();
    kvs[16..24].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(parse_err(&kvs), ModelError::CountTooLarge { what: "metadata count", .. }));

    // Every truncation of the header region is a typed error, never a panic.
    let layout = ModelLayout::parse(&good, good.len() as u64).expect("parse");
    // (Cuts inside the padding before the data still hold the whole header.)
    for cut in 0..layout.data_offset as usize {
        match ModelLayout::parse(&good[..cut], good.len() as u64) {
            Err(ModelError::Truncated { .. }) => {}
            Ok(parsed) => assert_eq!(parsed, layout, "cut at {cut}"),
            Err(err) => panic!("cut at {cut}: {err}"),
        }
    }
    // A file shorter than its tensors claim.
    let err = ModelLayout::parse(&good, good.len() as u64 - 1).expect_err("short file");
    assert!(matches!(err, ModelError::TensorOutOfBounds { .. }), "{err}");

    let bad_type = gguf(3, &[("k", Val::U8(1))], &[], 32).0;
    let mut bt = bad_type.clone();
    let pos = 24 + 8 + 1; // count fields, key length, key
    bt[pos..pos + 4].copy_from_slice(&13u32.to_le_bytes());
    assert!(matches!(parse_err(&bt), ModelError::BadValueType { value_type: 13, .. }));

    let (align0, _) = gguf(3, &[("general.alignment", Val::U32(0))], &[], 32);
    assert!(matches!(parse_err(&align0), ModelError::BadAlignment(0)));
    let (align3, _) = gguf(3, &[("general.alignment", Val::U32(48))], &[], 32);
    assert!(matches!(parse_err(&align3), ModelError::BadAlignment(48)));
    let (align_str, _) = gguf(3, &[("general.alignment", Val::str("64"))], &[], 32);
    assert!(matches!(parse_err(&align_str), ModelError::WrongValueType { .. }));

    let mut deep = Val::Arr(0, vec![Val::U8(1)]);
    for _ in 0..20 {
        deep = Val::Arr(9, vec![deep]);
    }
    let (deep, _) = gguf(3, &[("deep", deep)], &[], 32);
    assert!(matches!(parse_err(&deep), ModelError::NestingTooDeep { .. }));

    let (dup, _) = gguf(3, &[], &[t("w", &[32], 0), t("w", &[32], 0)], 32);
    assert!(matches!(parse_err(&dup), ModelError::DuplicateTensor(_)));

    let (five, _) = gguf(3, &[], &[t("w", &[1, 1, 1, 1, 32], 0)], 32);
    assert!(matches!(parse_err(&five), ModelError::BadTensor { .. }));
    let mut not_blocks = t("q", &[32], 2);
    not_blocks.dims = vec![33];
    let (nb, _) = gguf(3, &[], &[not_blocks], 32);
    assert!(matches!(parse_err(&nb), ModelError::BadTensor { .. }));
    let mut overflow = t("o", &[2], 0);
    overflow.dims = vec![u64::MAX, 2];
    let (of, _) = gguf(3, &[], &[overflow], 32);
    assert!(matches!(parse_err(&of), ModelError::BadTensor { .. }));

    let mut bad_name = gguf(3, &[], &[t("w", &[32], 0)], 32).0;
    bad_name[24 + 8] = 0xFF;
    assert!(matches!(parse_err(&bad_name), ModelError::InvalidUtf8 { .. }));
}

#[test]
fn gguf_unknown_type_takes_the_gap() {
    let (mut bytes, _) = gguf(3, &[], &[t("a", &[32], 0), t("b", &[32], 0)], 32);
    // Patch a's type (after: counts 24, name len 8 + "a", n_dims 4, dim 8).
    let pos = 24 + 8 + 1 + 4 + 8;
    bytes[pos..pos + 4].copy_from_slice(&200u32.to_le_bytes());
    let layout = ModelLayout::parse(&bytes, bytes.len() as u64).expect("parse");
    assert_eq!(layout.tensors[0].dtype, "type#200");
    assert_eq!(layout.tensors[0].len, 128);
}

#[test]
fn safetensors_malformed() {
    let good = hf_model();
    assert!(matches!(parse_err(&good[..4]), ModelError::Truncated { .. }));
    let json_len = u64::from_le_bytes(good[..8].try_into().expect("8 bytes")) as usize;
    for cut in [9, 20, json_len] {
        let err = ModelLayout::parse(&good[..cut], good.len() as u64).expect_err("truncated");
        assert!(matches!(err, ModelError::Truncated { .. }), "{err}");
    }
    let mut huge = good.clone();
    huge[..8].copy_from_slice(&(1u64 << 40).to_le_bytes());
    assert!(matches!(parse_err(&huge), ModelError::HeaderTooLarge { .. }));
    let mut past = good.clone();
    past[..8].copy_from_slice(&(good.len() as u64).to_le_bytes());
    assert!(matches!(parse_err(&past), ModelError::BadHeader(_)));

    type Check = fn(&ModelError) -> bool;
    let cases: &[(&str, Check)] = &[
        (r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"#, |e| matches!(e, ModelError::Json(_))),
        (r#"[1,2]"#, |e| matches!(e, ModelError::UnknownFormat)),
        (r#"{"a":1,"a":2}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a" 5}"#, |e| matches!(e, ModelError::Json(_))),
        (r#"{"a":5}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,9999]}}"#, |e| {
            matches!(e, ModelError::TensorOutOfBounds { .. })
        }),
        (r#"{"a":{"dtype":"F32","shape":[2]}}"#, |e| matches!(e, ModelError::BadTensor { .. })),
        (r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}"#, |e| {
            matches!(e, ModelError::BadTensor { .. })
        }),
        (r#"{"__metadata__":{"k":1}}"#, |e| matches!(e, ModelError::BadHeader(_))),
        (r#"{"__metadata__":[]}"#, |e| matches!(e, ModelError::BadHeader(_))),
    ];
    for (json, check) in cases {
        let mut bytes = (json.len() as u64).to_le_bytes().to_vec();
        bytes.extend(json.as_bytes());
        bytes.extend([0u8; 8]);
        let err = parse_err(&bytes);
        assert!(check(&err), "{json}: {err}");
    }
    // Deeply nested JSON hits serde_json's recursion limit, not the stack.
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let mut bytes = (deep.len() as u64 + 6).to_le_bytes().to_vec();
    bytes.extend(b"{\"a\":");
    bytes.extend(deep.as_bytes());
    bytes.push(b'}');
    assert!(matches!(parse_err(&bytes), ModelError::Json(_)));
}

// ------------------------------------------------------------------ fuzzing

/// One mutation of a valid encoding: bit flips, byte stores, truncation,
/// count inflation (a u64 field overwritten with a large value), splices.
fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut out = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        if out.is_empty() {
            break;
        }
        match rng.below(6) {
            0 => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(out.len());
                out[i] = rng.next() as u8;
            }
            2 => {
                let cut = rng.below(out.len());
                out.truncate(cut);
            }
            3 => {
                // Inflate a count/length: GGUF counts sit at 8..24, string
                // lengths and dims all over the header.
                let i = if rng.below(2) == 0 { 8 + 8 * rng.below(2) } else { rng.below(out.len()) };
                let value: u64 = match rng.below(4) {
                    0 => u64::MAX,
                    1 => 1 << (32 + rng.below(31)),
                    2 => rng.next(),
                    _ => out.len() as u64 + rng.below(64) as u64,
                };
                let bytes = value.to_le_bytes();
                for (k, b) in bytes.iter().enumerate() {
                    if let Some(slot) = out.get_mut(i + k) {
                        *slot = *b;
                    }
                }
            }
            4 => {
                let i = rng.below(out.len());
                let n = rng.below(16).min(out.len() - i);
                out.drain(i..i + n);
            }
            _ => {
                let i = rng.below(out.len());
                let j = rng.below(out.len());
                let n = rng.below(32).min(out.len() - i.max(j));
                out.copy_within(j..j + n, i);
            }
        }
    }
    out
}

#[test]
fn fuzz_parsers_bounded() {
    let seeds: Vec<Vec<u8>> = vec![
        llama_gguf(3).0,
        llama_gguf(2).0,
        gguf(3, &[("general.alignment", Val::U32(16))], &[t("a", &[32], 2)], 16).0,
        hf_model(),
        safetensors(&[("x", "F16", &[2, 2], 8)], None),
    ];
    write_fuzz_seeds(&seeds);
    let iterations: u64 =
        std::env::var("PREDICTIO_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let mut rng = Rng(0x00F0_22ED_5EED);
    let started = std::time::Instant::now();
    let (mut ok, mut errors) = (0u64, 0u64);
    for i in 0..iterations {
        let input = if i % 8 == 0 {
            // Pure noise, sometimes behind a valid magic.
            let len = rng.below(256);
            let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            match rng.below(3) {
                0 if v.len() >= 8 => v[..8].copy_from_slice(b"GGUF\x03\0\0\0"),
                1 if v.len() >= 9 => v[8] = b'{',
                _ => {}
            }
            v
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        // Sometimes claim a file longer than the header we hand over.
        let file_len =
            if rng.below(4) == 0 { input.len() as u64 + rng.below(1 << 20) as u64 } else { input.len() as u64 };
        let parsed = std::panic::catch_unwind(|| ModelLayout::parse(&input, file_len));
        match parsed {
            Ok(Ok(layout)) => {
                ok += 1;
                // Whatever parses must be internally consistent.
                for t in &layout.tensors {
                    assert!(t.end() <= file_len, "iteration {i}: tensor {} past the file", t.name);
                }
                let _ = layout.plan(LoadOrder::Compute);
                let _ = layout.layers();
            }
            Ok(Err(_)) => errors += 1,
            Err(_) => panic!("iteration {i}: parser panicked on input {:02x?}", input),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    eprintln!("fuzz: {iterations} inputs in {secs:.2} s: {ok} parsed, {errors} rejected");
    assert!(ok > 0 && errors > 0, "the mutations should both keep and break inputs");
}

/// With `PREDICTIO_FUZZ_SEEDS=DIR`, writes the valid encodings as seed
/// corpora for the cargo-fuzz targets in `fuzz/` (`DIR/gguf/`,
/// `DIR/safetensors/`), in the framing each target expects.
fn write_fuzz_seeds(seeds: &[Vec<u8>]) {
    let Some(dir) = std::env::var_os("PREDICTIO_FUZZ_SEEDS") else { return };
    let dir = std::path::PathBuf::from(dir);
    for (i, seed) in seeds.iter().enumerate() {
        let (target, framed) = if seed.starts_with(b"GGUF") {
            // gguf target: 8 bytes of extra file length (the tensor data,
            // left out), then the header after the magic.
            let layout = ModelLayout::parse(seed, seed.len() as u64).expect("valid seed");
            let header = layout.data_offset as usize;
            let mut framed = ((seed.len() - header) as u64).to_le_bytes().to_vec();
            framed.extend_from_slice(&seed[4..header]);
            ("gguf", framed)
        } else {
            // safetensors target: 1 byte of extra length, then the JSON.
            let n = u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")) as usize;
            let mut framed = vec![0u8];
            framed.extend_from_slice(&seed[8..8 + n]);
            ("safetensors", framed)
        };
        let sub = dir.join(target);
        std::fs::create_dir_all(&sub).expect("create seed dir");
        std::fs::write(sub.join(format!("seed-{i}")), framed).expect("write seed");
    }
}

// ---------------------------------------------------------------- Parquet

/// A Parquet file DuckDB 2.0.1 wrote: 6,000 rows in 3 row groups of 3
/// columns (`id` BIGINT, `k` VARCHAR with a dictionary page, `sq` BIGINT),
/// snappy. Each chunk as DuckDB's `parquet_metadata` reports it: row group,
/// column, dictionary page offset (or the data page's), compressed size.
const DUCKDB_PARQUET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/duckdb-3x3.parquet");
const DUCKDB_CHUNKS: [(u32, u32, u64, u64); 9] = [
    (0, 0, 4, 8983),
    (0, 1, 8987, 182),
    (0, 2, 9169, 10017),
    (1, 0, 19186, 8237),
    (1, 1, 27423, 182),
    (1, 2, 27605, 10471),
    (2, 0, 38076, 7661),
    (2, 1, 45737, 182),
    (2, 2, 45919, 9852),
];

/// A Parquet file pyarrow 26.0.1 wrote: 5,000 rows in 3 row groups of 5
/// leaf columns (`id`, `name` with a dictionary, a list, a struct of two),
/// zstd, with statistics and the page index (column and offset indexes
/// between the last row group and the footer). Chunks as pyarrow's
/// `metadata` reports them.
const PYARROW_PARQUET: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/pyarrow-3x5.parquet");
const PYARROW_CHUNKS: [(u32, u32, u64, u64); 15] = [
    (0, 0, 4, 5327),
    (0, 1, 5331, 162),
    (0, 2, 5493, 7920),
    (0, 3, 13413, 4670),
    (0, 4, 18083, 4315),
    (1, 0, 22398, 4885),
    (1, 1, 27283, 159),
    (1, 2, 27442, 8078),
    (1, 3, 35520, 4732),
    (1, 4, 40252, 3958),
    (2, 0, 44210, 2368),
    (2, 1, 46578, 140),
    (2, 2, 46718, 3838),
    (2, 3, 50556, 2377),
    (2, 4, 52933, 1933),
];

#[test]
fn parquet_footer_of_pyarrow_with_nested_columns_and_a_page_index() {
    use predictio::parquet::ParquetLayout;
    let bytes = std::fs::read(PYARROW_PARQUET).expect("fixture");
    let layout = ParquetLayout::parse_tail(&bytes, bytes.len() as u64).expect("pyarrow's footer parses");
    let chunks: Vec<(u32, u32, u64, u64)> =
        layout.chunks.iter().map(|c| (c.row_group, c.column, c.offset, c.len)).collect();
    assert_eq!(chunks, PYARROW_CHUNKS);
    assert_eq!((layout.row_groups, layout.columns, layout.rows), (3, 5, 5000));
}

#[test]
fn parquet_footer_of_a_real_writer() {
    use predictio::parquet::ParquetLayout;
    let bytes = std::fs::read(DUCKDB_PARQUET).expect("fixture");
    let layout = ParquetLayout::parse_tail(&bytes, bytes.len() as u64).expect("DuckDB's footer parses");
    let chunks: Vec<(u32, u32, u64, u64)> =
        layout.chunks.iter().map(|c| (c.row_group, c.column, c.offset, c.len)).collect();
    assert_eq!(chunks, DUCKDB_CHUNKS);
    assert_eq!((layout.row_groups, layout.columns, layout.rows), (3, 3, 6000));
    // From the page cache alone, once the file has been read.
    let file = std::fs::File::open(DUCKDB_PARQUET).expect("open fixture");
    let (resident, spent) = ParquetLayout::read_resident(&file, 1 << 20).expect("cached footer parses");
    assert_eq!(resident, layout);
    assert_eq!(spent, bytes.len() as u64 - layout.footer_offset);
    assert!(matches!(
        ParquetLayout::read_resident(&file, 100),
        Err(predictio::parquet::ParquetError::OverBudget { limit: 100 })
    ));
}

/// The Parquet footer parser under 100,000 seeded mutations of real and
/// encoded footers (and noise): never a panic, and whatever parses lies
/// inside the file's data.
#[test]
fn fuzz_parquet_bounded() {
    use predictio::parquet::{ParquetLayout, encode_footer};
    let footer = |path: &str| {
        let real = std::fs::read(path).expect("fixture");
        let len = u32::from_le_bytes(real[real.len() - 8..real.len() - 4].try_into().expect("4 bytes")) as usize;
        real[real.len() - 8 - len..real.len() - 8].to_vec()
    };
    let seeds: Vec<Vec<u8>> = vec![
        footer(DUCKDB_PARQUET),
        footer(PYARROW_PARQUET),
        encode_footer(&[vec![(4, 100), (104, 50)], vec![(154, 100), (254, 50)]], 10),
        encode_footer(&(0..20u64).map(|rg| vec![(4 + rg * 30, 10), (14 + rg * 30, 20)]).collect::<Vec<_>>(), 99),
    ];
    write_parquet_fuzz_seeds(&seeds);
    let iterations: u64 =
        std::env::var("PREDICTIO_FUZZ_ITERATIONS").ok().and_then(|v| v.parse().ok()).map_or(100_000, |n: u64| n / 2);
    let mut rng = Rng(0x009A_40E7_F00D);
    let (mut ok, mut errors) = (0u64, 0u64);
    for i in 0..iterations {
        let input = if i % 8 == 0 {
            (0..rng.below(256)).map(|_| rng.next() as u8).collect()
        } else {
            let seed = &seeds[rng.below(seeds.len())];
            mutate(&mut rng, seed)
        };
        let file_len = input.len() as u64 + 12 + rng.below(1 << 16) as u64;
        match std::panic::catch_unwind(|| ParquetLayout::parse_footer(&input, file_len)) {
            Ok(Ok(layout)) => {
                ok += 1;
                assert!(layout.footer_offset + input.len() as u64 + 8 == file_len);
                for c in &layout.chunks {
                    assert!(c.offset >= 4 && c.end() <= layout.footer_offset, "iteration {i}: chunk {c:?} outside");
                    assert!(c.row_group < layout.row_groups && c.column < layout.columns);
                }
            }
            Ok(Err(_)) => errors += 1,
            Err(_) => panic!("iteration {i}: Parquet parser panicked on input {input:02x?}"),
        }
    }
    eprintln!("fuzz parquet: {iterations} inputs: {ok} parsed, {errors} rejected");
    assert!(ok > 0 && errors > 0, "the mutations should both keep and break inputs");
}

/// With `PREDICTIO_FUZZ_SEEDS=DIR`, the footers as seeds for the `parquet`
/// cargo-fuzz target (`DIR/parquet/`): 2 bytes of extra data length, then
/// the footer.
fn write_parquet_fuzz_seeds(seeds: &[Vec<u8>]) {
    let Some(dir) = std::env::var_os("PREDICTIO_FUZZ_SEEDS") else { return };
    let sub = std::path::PathBuf::from(dir).join("parquet");
    std::fs::create_dir_all(&sub).expect("create seed dir");
    for (i, seed) in seeds.iter().enumerate() {
        let mut framed = 0xffffu16.to_le_bytes().to_vec();
        framed.extend_from_slice(seed);
        std::fs::write(sub.join(format!("seed-{i}")), framed).expect("write seed");
    }
}
