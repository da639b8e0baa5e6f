//! Fuzz the GGUF header parser: any bytes, any claimed file length, must
//! give a layout or a typed error — never a panic, a hang or a huge
//! allocation. The input is forced to start with the GGUF magic so that
//! every run exercises the GGUF parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use predictio::model::{LoadOrder, ModelLayout};

fuzz_target!(|data: &[u8]| {
    // First 8 bytes: extra file length beyond the header (a header that is
    // a prefix of a longer file); the rest follows the magic.
    let (extra, body) = match data.split_first_chunk::<8>() {
        Some((extra, body)) => (u64::from_le_bytes(*extra) % (1 << 40), body),
        None => (0, data),
    };
    let mut input = b"GGUF".to_vec();
    input.extend_from_slice(body);
    let file_len = input.len() as u64 + extra;
    if let Ok(layout) = ModelLayout::parse(&input, file_len) {
        for t in &layout.tensors {
            assert!(t.end() <= file_len);
        }
        let _ = layout.plan(LoadOrder::Compute);
        let _ = layout.plan(LoadOrder::LlamaCppRead);
        let _ = layout.layers();
    }
});
