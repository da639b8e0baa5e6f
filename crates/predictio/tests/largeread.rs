//! The parallel large-read engine against plain `pread`: random files,
//! offsets, lengths, depths and chunk sizes, on both backends — same bytes,
//! same count, every time. Also: cold reads, end of file, typed read errors,
//! one reader shared by several threads.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use predictio::largeread::{LargeReadError, LargeReader, ReadBackend};
use predictio::os::Advice;
use proptest::prelude::*;

fn file_of(len: usize, seed: u64) -> (File, Vec<u8>) {
    let mut x = seed | 1;
    let data: Vec<u8> = (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut f = tempfile::tempfile().expect("tempfile");
    f.write_all(&data).expect("write");
    (f, data)
}

/// What a plain positional read loop returns.
fn reference(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut buf[done..], offset + done as u64).expect("pread") {
            0 => break,
            n => done += n,
        }
    }
    buf.truncate(done);
    buf
}

fn backends() -> Vec<ReadBackend> {
    let mut out = vec![ReadBackend::Threads];
    match LargeReader::with_backend(1, 4096, ReadBackend::Uring) {
        Ok(_) => out.push(ReadBackend::Uring),
        Err(err) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("io_uring needed under CI: {err}"),
        Err(err) => eprintln!("skipping the io_uring backend: needs io_uring ({err})"),
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn same_bytes_as_pread(
        file_len in 0usize..3_000_000,
        seed in any::<u64>(),
        offset_frac in 0.0f64..1.2,
        len in 0usize..3_500_000,
        depth in 1u32..40,
        chunk_pages in 1usize..300,
        odd_chunk in any::<bool>(),
    ) {
        let (file, _) = file_of(file_len, seed);
        let offset = (file_len as f64 * offset_frac) as u64;
        let chunk = chunk_pages * 4096 + if odd_chunk { 123 } else { 0 };
        let want = reference(&file, offset, len);
        for backend in backends() {
            let reader = LargeReader::with_backend(depth, chunk, backend).expect("reader");
            // Poison the buffer so a byte the engine forgot shows.
            let mut buf = vec![0xEEu8; len];
            let got = reader.read_at(&file, offset, &mut buf).expect("read_at");
            prop_assert_eq!(got, want.len(), "{} depth {} chunk {}", backend, depth, chunk);
            prop_assert!(buf[..got] == want[..], "{} depth {} chunk {}: bytes differ", backend, depth, chunk);
            let vec = reader.read_range(&file, offset, len as u64).expect("read_range");
            prop_assert!(vec == want, "{}: read_range differs", backend);
        }
    }
}

#[test]
fn cold_large_unaligned_read_is_exact() {
    // 48 MiB at an unaligned offset, 1 MiB chunks, depth 16, from a cold
    // cache (written back, then evicted) so that reads really go to disk.
    let (file, data) = file_of(48 << 20, 42);
    file.sync_all().expect("fsync");
    for backend in backends() {
        predictio::os::fadvise(file.as_fd(), 0, 0, Advice::DontNeed).expect("fadvise");
        let reader = LargeReader::with_backend(16, 1 << 20, backend).expect("reader");
        let offset = 12_345;
        let mut buf = vec![0u8; (40 << 20) + 777];
        reader.read_exact_at(&file, offset, &mut buf).expect("read");
        assert!(buf[..] == data[offset as usize..offset as usize + buf.len()], "{backend}");
        let err = reader.read_exact_at(&file, (48 << 20) - 10, &mut buf).expect_err("past eof");
        assert!(matches!(err, LargeReadError::UnexpectedEof { got: 10, .. }), "{backend}: {err}");
    }
}

#[test]
fn read_errors_are_typed() {
    // A descriptor opened for writing only: every read fails with EBADF.
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w");
    std::fs::write(&path, vec![1u8; 1 << 20]).expect("write");
    let file = std::fs::OpenOptions::new().write(true).open(&path).expect("open");
    for backend in backends() {
        let reader = LargeReader::with_backend(4, 64 << 10, backend).expect("reader");
        let mut buf = vec![0u8; 1 << 20];
        let err = reader.read_at(&file, 0, &mut buf).expect_err("write-only fd");
        match err {
            LargeReadError::Read { source, .. } => assert_eq!(source.raw_os_error(), Some(libc_ebadf())),
            other => panic!("{backend}: unexpected {other}"),
        }
    }
}

fn libc_ebadf() -> i32 {
    9
}

#[test]
fn shared_reader_across_threads() {
    let (file, data) = file_of(8 << 20, 7);
    let reader = LargeReader::new(8, 256 << 10).expect("reader");
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (reader, file, data) = (&reader, &file, &data);
            s.spawn(move || {
                for i in 0..8u64 {
                    let offset = (t * 8 + i) * 200_000;
                    let v = reader.read_range(file, offset, 3 << 20).expect("read");
                    let end = (offset as usize + (3 << 20)).min(data.len());
                    assert!(v[..] == data[offset as usize..end]);
                }
            });
        }
    });
}
