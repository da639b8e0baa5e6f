//! Fuzz the safetensors header parser: an 8-byte header length, then the
//! JSON header taken from the input. Must give a layout or a typed error —
//! never a panic, a hang or a huge allocation.
#![no_main]

use libfuzzer_sys::fuzz_target;
use predictio::model::{LoadOrder, ModelLayout};

fuzz_target!(|data: &[u8]| {
    // First byte: how much longer than the header the file claims to be
    // (in KiB); the rest is the JSON header, with a correct length prefix
    // so that the JSON and the validation behind it are what gets fuzzed.
    let (extra, json) = match data.split_first() {
        Some((extra, json)) => (u64::from(*extra) << 10, json),
        None => (0, data),
    };
    let mut input = (json.len() as u64).to_le_bytes().to_vec();
    input.extend_from_slice(json);
    let file_len = input.len() as u64 + extra;
    if let Ok(layout) = ModelLayout::parse(&input, file_len) {
        for t in &layout.tensors {
            assert!(t.end() <= file_len);
        }
        let _ = layout.plan(LoadOrder::Compute);
        let _ = layout.layers();
    }
});
