//! Fuzz the Parquet footer parser: two bytes of column data the file claims
//! before the footer, then the thrift footer. Must give a layout or a typed
//! error — never a panic, a hang or a huge allocation — and every chunk of a
//! layout lies in the file's data.
#![no_main]

use libfuzzer_sys::fuzz_target;
use predictio::parquet::ParquetLayout;

fuzz_target!(|data: &[u8]| {
    let (data_len, footer) = match data {
        [a, b, rest @ ..] => (u64::from(u16::from_le_bytes([*a, *b])), rest),
        _ => (0, data),
    };
    // The leading magic, the data, the footer, its length, the magic.
    let file_len = 4 + data_len + footer.len() as u64 + 8;
    if let Ok(layout) = ParquetLayout::parse_footer(footer, file_len) {
        for c in &layout.chunks {
            assert!(c.offset >= 4 && c.end() <= layout.footer_offset);
        }
    }
});
