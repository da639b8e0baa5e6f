//! `predictio::reader` on real files under /var/tmp (no root needed: the
//! page cache is emptied with `fadvise(DONTNEED)`).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::Duration;

use predictio::FileRef;
use predictio::page::PageRange;
use predictio::reader::{PrefetchingReader, ReaderConfig, Speculation};

const MIB: u64 = 1 << 20;

/// The tests here time reads against the disk: run one at a time, so one
/// test's 64 MiB write-and-sync does not turn another's in-flight windows
/// into misses (it did, under CI).
static DISK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    DISK.lock().unwrap_or_else(|e| e.into_inner())
}

/// A file of `size` pseudo-random bytes, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, size: u64) -> Self {
        let path = PathBuf::from(format!("/var/tmp/predictio-reader-{}-{name}", std::process::id()));
        let mut f = File::create(&path).expect("create test file");
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ size;
        let mut chunk = vec![0u8; MIB as usize];
        let mut left = size;
        while left > 0 {
            for w in chunk.chunks_exact_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                w.copy_from_slice(&x.to_le_bytes());
            }
            let n = left.min(MIB) as usize;
            f.write_all(&chunk[..n]).expect("write test file");
            left -= n as u64;
        }
        f.sync_all().expect("sync test file");
        let t = Self(path);
        t.evict();
        t
    }

    fn open(&self) -> File {
        File::open(&self.0).expect("open test file")
    }

    /// A descriptor whose open file description is marked
    /// `POSIX_FADV_RANDOM`: the kernel's own readahead stays out, so what is
    /// resident early was prefetched by the reader.
    fn open_no_readahead(&self) -> File {
        FileRef::open(&self.0).expect("open").file().try_clone().expect("dup")
    }

    fn evict(&self) {
        let f = FileRef::open(&self.0).expect("open for eviction");
        predictio::cache::evict(&f).expect("evict");
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn a_sequential_batch_reader_gets_hits_after_the_first_batches() {
    let _disk = one_at_a_time();
    let t = TempFile::new("seq", 64 * MIB);
    let watch = FileRef::open(&t.0).expect("open");
    let mut reader = PrefetchingReader::new(t.open_no_readahead(), ReaderConfig::default()).expect("reader");
    let batch = 2 * MIB as usize;
    let mut buf = vec![0u8; batch];
    let mut hit_at = Vec::new();
    for i in 0..32u64 {
        reader.read_exact_at(&mut buf, i * batch as u64).expect("read");
        hit_at.push(reader.stats().hits);
        // The program's work between batches: long enough for the next
        // batch to arrive once it was asked for. Waiting for it (rather
        // than sleeping a fixed time) keeps a slow spell of the disk from
        // turning prefetched batches into misses (it did, under CI); a
        // batch nobody asked for never arrives (the descriptor is
        // POSIX_FADV_RANDOM: the kernel reads nothing ahead) and its read
        // is a miss after the timeout.
        if (1..31).contains(&i) {
            let next = PageRange::covering_bytes((i + 1) * batch as u64, batch as u64);
            predictio::cache::wait_resident(&watch, &[next], Duration::from_secs(3)).expect("cachestat");
        }
    }
    let s = reader.finish();
    assert_eq!(s.reads, 32);
    assert_eq!(s.bytes, 64 * MIB);
    assert_eq!(s.hits + s.misses, s.reads);
    // The first read is cold; the stream is confirmed on the second, and
    // every batch after that was prefetched.
    assert_eq!(hit_at[0], 0, "{s:?}");
    assert!(s.hits >= 29, "expected hits after the first batches: {hit_at:?} {s:?}");
    assert!(hit_at[31] - hit_at[15] >= 15, "{hit_at:?} {s:?}");
    assert!(s.prefetched_bytes > 0);
    assert!(s.prefetch_read_bytes > 0);
    // Everything prefetched lies inside the file and was read.
    assert!(s.wasted_bytes <= 4 * MIB, "{s:?}");
    assert!(s.latency_max_ns > 0 && s.latency_total_ns >= s.latency_max_ns);
}

#[test]
fn a_random_reader_gets_no_prefetch() {
    let _disk = one_at_a_time();
    let t = TempFile::new("random", 64 * MIB);
    let mut reader = PrefetchingReader::new(t.open(), ReaderConfig::default()).expect("reader");
    let mut buf = vec![0u8; 64 << 10];
    let mut x: u64 = 12345;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = (x % (64 * MIB / (64 << 10))) * (64 << 10);
        reader.read_exact_at(&mut buf, offset).expect("read");
    }
    let s = reader.finish();
    assert_eq!(s.reads, 200);
    assert_eq!(s.prefetched_bytes, 0, "{s:?}");
    assert_eq!(s.wasted_bytes, 0, "{s:?}");
}

#[test]
fn read_plan_segments_are_resident_before_they_are_read() {
    let _disk = one_at_a_time();
    let t = TempFile::new("plan", 64 * MIB);
    let config = ReaderConfig { speculation: Speculation::Off, ..ReaderConfig::default() };
    let mut reader = PrefetchingReader::new(t.open(), config).expect("reader");
    // Non-sequential segments, as an AQE skew split reads them.
    let segments: Vec<(u64, u64)> =
        [37u64, 3, 50, 12, 28, 61, 7, 44].iter().map(|&m| (m * MIB + 4096, 768 << 10)).collect();
    reader.plan(&segments);
    let file = FileRef::from_file(t.open()).expect("fileref");
    let ranges: Vec<PageRange> = segments.iter().map(|&(o, l)| PageRange::covering_bytes(o, l)).collect();
    let want: u64 = ranges.iter().map(PageRange::len).sum();
    // Before any read only the first segment is asked for (the read that
    // follows a plan must not queue behind the whole window).
    assert!(reader.executor().wait_idle(Duration::from_secs(10)));
    let first = predictio::cache::wait_resident(&file, &ranges[..1], Duration::from_secs(10)).expect("residency");
    assert_eq!(first, ranges[0].len(), "the first planned segment resident before any read");
    let issued_before_read = reader.stats().prefetched_bytes;
    assert!(issued_before_read <= ranges[0].byte_len(), "only the first segment issued: {issued_before_read}");
    let mut buf = vec![0u8; 768 << 10];
    reader.read_exact_at(&mut buf[..segments[0].1 as usize], segments[0].0).expect("read");
    // The first read releases the rest, within the bound.
    assert!(reader.executor().wait_idle(Duration::from_secs(10)));
    let have = predictio::cache::wait_resident(&file, &ranges, Duration::from_secs(10)).expect("residency");
    assert_eq!(have, want, "planned pages resident before they are read");
    for &(offset, len) in &segments[1..] {
        reader.read_exact_at(&mut buf[..len as usize], offset).expect("read");
    }
    let s = reader.finish();
    assert_eq!(s.plans, 1);
    assert_eq!(s.planned_bytes, 8 * (768 << 10));
    assert_eq!(s.hits, 8, "{s:?}");
    assert_eq!(s.misses, 0);
    assert_eq!(s.pages_resident, s.pages_read);
    assert_eq!(s.wasted_bytes, 0, "{s:?}");
}

#[test]
fn passed_over_plan_segments_are_waste() {
    let _disk = one_at_a_time();
    let t = TempFile::new("planwaste", 16 * MIB);
    let config = ReaderConfig { speculation: Speculation::Off, ..ReaderConfig::default() };
    let mut reader = PrefetchingReader::new(t.open_no_readahead(), config).expect("reader");
    reader.plan(&[(0, MIB), (4 * MIB, MIB), (8 * MIB, MIB)]);
    assert!(reader.executor().wait_idle(Duration::from_secs(10)));
    let mut buf = vec![0u8; MIB as usize];
    // The second segment is skipped (the first read released it).
    reader.read_exact_at(&mut buf, 0).expect("read");
    assert!(reader.executor().wait_idle(Duration::from_secs(10)));
    reader.read_exact_at(&mut buf, 8 * MIB).expect("read");
    let s = reader.finish();
    assert_eq!(s.wasted_bytes, MIB, "{s:?}");
    assert_eq!(s.prefetch_read_bytes, 2 * MIB, "{s:?}");
}

#[test]
fn a_reader_that_stops_early_leaves_waste() {
    let _disk = one_at_a_time();
    let t = TempFile::new("early", 64 * MIB);
    let mut reader = PrefetchingReader::new(t.open_no_readahead(), ReaderConfig::default()).expect("reader");
    let mut buf = vec![0u8; 4 * MIB as usize];
    for i in 0..4u64 {
        reader.read_exact_at(&mut buf, i * 4 * MIB).expect("read");
    }
    let s = reader.finish();
    assert!(s.prefetched_bytes > 0, "{s:?}");
    assert!(s.wasted_bytes > 0, "{s:?}");
    assert!(s.wasted_bytes <= s.prefetched_bytes);
}

#[test]
fn bytes_read_are_identical_to_plain_reads() {
    let _disk = one_at_a_time();
    let t = TempFile::new("same", 24 * MIB + 1234);
    let plain = t.open();
    for config in [
        ReaderConfig::default(),
        ReaderConfig { speculation: Speculation::Learned(Default::default()), ..ReaderConfig::default() },
    ] {
        t.evict();
        let mut reader = PrefetchingReader::new(t.open(), config).expect("reader");
        reader.plan(&[(20 * MIB, MIB), (2 * MIB, MIB)]);
        let mut offset = 0;
        let mut a = vec![0u8; 700_001];
        let mut b = vec![0u8; 700_001];
        loop {
            let n = reader.read_at(&mut a, offset).expect("read");
            let m = plain.read_at(&mut b, offset).expect("plain read");
            assert_eq!(n, m);
            assert_eq!(a[..n], b[..m]);
            if n == 0 {
                break;
            }
            offset += n as u64;
        }
        let s = reader.finish();
        assert_eq!(s.bytes, 24 * MIB + 1234);
    }
}

#[test]
fn short_runs_at_random_places_get_no_prefetch() {
    let _disk = one_at_a_time();
    // no-structure's jumpy scan: runs of 1 to 4 consecutive 4 KiB reads,
    // each from a random page. A run never reads the 256 KiB the reader
    // asks of a stream, so nothing is issued, nothing wasted.
    let t = TempFile::new("jumpy", 64 * MIB);
    let mut reader = PrefetchingReader::new(t.open(), ReaderConfig::default()).expect("reader");
    let mut buf = vec![0u8; 4096];
    let pages = 64 * MIB / 4096;
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut reads = 0;
    while reads < 2_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let run = 1 + x % 4;
        let first = (x >> 8) % (pages - run);
        for p in first..first + run {
            reader.read_exact_at(&mut buf, p * 4096).expect("read");
            reads += 1;
        }
    }
    let s = reader.finish();
    assert_eq!(s.prefetched_bytes, 0, "{s:?}");
    assert_eq!(s.wasted_bytes, 0, "{s:?}");
}
