//! The RocksDB adapter on a real RocksDB (Debian's librocksdb): RocksDB's
//! own readahead really is off, the scan plan covers what a scan reads,
//! rows are identical with and without predictio, and point reads and
//! one-block scans issue nothing.
//!
//! Caches are made cold per file with `fadvise(DONTNEED)` (no root needed)
//! after the database is opened, so RocksDB's in-memory index and block
//! cache hold nothing of the data blocks measured.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use predictio::FileRef;
use predictio::executor::{Executor, ExecutorConfig};
use predictio::pipeline::Pipeline;
use predictio::policies::scan::ScanPolicy;
use predictio_rocksdb::scan::Direction;
use predictio_rocksdb::{Db, DbOptions, HintedIter, Readahead, ScanReporter};

const ROWS: u64 = 20_000;

fn key(i: u64) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: u64) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..400)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn options(readahead: Readahead) -> DbOptions {
    DbOptions { readahead, target_file_bytes: 2 << 20, write_buffer_bytes: 1 << 20, ..DbOptions::default() }
}

/// A compacted database of ROWS rows inserted in a shuffled order.
fn build(dir: &Path) {
    let db = Db::open(dir, &options(Readahead::RocksDb)).expect("open for load");
    let mut order: Vec<u64> = (0..ROWS).collect();
    let mut rng = predictio::testing::Rng(7);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    for chunk in order.chunks(1000) {
        let rows: Vec<(Vec<u8>, Vec<u8>)> = chunk.iter().map(|&i| (key(i), value(i))).collect();
        db.put_batch(rows.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).expect("load");
    }
    db.flush().expect("flush");
    db.compact_all();
}

fn evict_all(db: &Db) {
    for sst in db.live_files() {
        predictio::cache::evict(&FileRef::open(&sst.path).expect("sst")).expect("evict");
    }
}

fn resident_bytes(db: &Db) -> u64 {
    db.live_files()
        .iter()
        .map(|sst| predictio::cache::residency(&FileRef::open(&sst.path).expect("sst")).expect("cachestat").resident)
        .sum::<u64>()
        * 4096
}

/// Scans `rows` rows from `start` (bounded by `upper` where given) and
/// returns the rows' keys and values concatenated.
fn scan(db: &Db, start: u64, rows: u64, upper: Option<u64>, reporter: Option<&ScanReporter>) -> Vec<u8> {
    let upper = upper.map(key);
    let mut it = HintedIter::new(db, None, upper.as_deref(), reporter);
    it.seek(&key(start)).expect("seek");
    let mut out = Vec::new();
    for _ in 0..rows {
        if !it.valid() {
            break;
        }
        out.extend_from_slice(it.key());
        out.extend_from_slice(it.value());
        it.next().expect("next");
    }
    out
}

/// Read syscalls of this thread so far (RocksDB reads a user iterator's
/// blocks in the calling thread, one `pread` each).
fn read_syscalls() -> u64 {
    let io = std::fs::read_to_string("/proc/thread-self/io").expect("/proc/thread-self/io");
    io.lines().find_map(|l| l.strip_prefix("syscr: ")).and_then(|n| n.trim().parse().ok()).expect("syscr")
}

fn dir() -> tempfile::TempDir {
    // Under /var/tmp: a real disk (tmpfs has no page cache to measure).
    std::fs::create_dir_all("/var/tmp").ok();
    tempfile::Builder::new().prefix("predictio-rocksdb-test").tempdir_in("/var/tmp").expect("temp dir")
}

#[test]
fn rocksdb_readahead_off_reads_only_the_blocks_a_scan_needs() {
    let tmp = dir();
    build(tmp.path());
    let rows = 600; // ~250 KiB: RocksDB's implicit readahead grows past it
    let mut resident = Vec::new();
    let mut reads = Vec::new();
    for readahead in [Readahead::Off, Readahead::RocksDb] {
        let db = Db::open(tmp.path(), &options(readahead)).expect("open");
        evict_all(&db);
        assert_eq!(resident_bytes(&db), 0, "evicted");
        let before = read_syscalls();
        let got = scan(&db, 5_000, rows, None, None);
        reads.push(read_syscalls() - before);
        assert_eq!(got.len() as u64, rows * (14 + 400));
        resident.push(resident_bytes(&db));
    }
    let needed = rows * (14 + 400 + 11);
    // Off: RocksDB reads every data block itself, one pread each (with its
    // readahead on, it calls readahead(2) ahead of those preads instead).
    assert!(reads[0] >= needed / 4096 * 9 / 10, "readahead off: {} reads for {needed} bytes", reads[0]);
    // Off: the blocks the rows live in, give or take a block at each end and
    // page rounding.
    assert!(resident[0] <= needed + 16 * 1024, "readahead off still read {} bytes for {needed}", resident[0]);
    assert!(resident[0] >= needed / 2, "the scan read {} bytes for {needed}", resident[0]);
    // RocksDB's own readahead (readahead(2) in chunks growing to 256 KiB)
    // reads past the scan's last block.
    assert!(resident[1] > resident[0], "RocksDB readahead on: {} bytes, off: {} bytes", resident[1], resident[0]);
}

#[test]
fn the_plan_covers_the_scan_and_little_more() {
    let tmp = dir();
    build(tmp.path());
    let db = Db::open(tmp.path(), &options(Readahead::Off)).expect("open");
    let pipeline = Pipeline::start(Arc::new(Executor::new(ExecutorConfig::default()).expect("executor")), vec![], 64)
        .expect("pipeline");
    let reporter = ScanReporter::new(&db, pipeline.sender()).expect("reporter");
    assert!(reporter.tables() >= 2, "several SST files: {}", reporter.tables());
    for (start, rows) in [(0u64, 100u64), (7_777, 3_000), (12_345, 1), (0, ROWS)] {
        let plan = reporter.plan(&db, &key(start), Some(&key(start + rows)), Direction::Forward).expect("plan");
        let planned: u64 = plan.iter().map(|s| s.range.len).sum();
        let needed = rows * (14 + 400 + 11);
        assert!(planned >= needed * 9 / 10, "{rows} rows from {start}: plan {planned} < {needed}");
        assert!(
            planned <= needed + plan.len() as u64 * 8192,
            "{rows} rows from {start}: plan {planned} for {needed} in {} files",
            plan.len()
        );
        // In key order, and inside the files.
        for s in &plan {
            let size = std::fs::metadata(&s.path).expect("sst").len();
            assert!(s.range.offset + s.range.len <= size);
        }
    }
    // The plan starts where the scan's reads start (RocksDB's estimates
    // scaled back to data offsets) and ends at most a block or two after.
    for start in [1_500u64, 9_876, 19_000] {
        let rows = 60;
        let plan = reporter.plan(&db, &key(start), Some(&key(start + rows)), Direction::Forward).expect("plan");
        evict_all(&db);
        scan(&db, start, rows, Some(start + rows), None);
        let file = FileRef::open(&plan[0].path).expect("sst");
        let pages = std::fs::metadata(&plan[0].path).expect("sst").len().div_ceil(4096);
        let read: Vec<u64> = (0..pages)
            .filter(|&p| {
                predictio::cache::uptodate_pages(&file, &[predictio::page::PageRange::new(p, p + 1)]).expect("mincore")
                    > 0
            })
            .collect();
        let (first, last) = (read[0], read[read.len() - 1]);
        let planned = plan[0].range.pages();
        assert!(
            planned.start <= first && planned.start + 2 >= first,
            "scan at {start}: plan starts at page {}, reads at {first}",
            planned.start
        );
        assert!(
            planned.end > last && planned.end <= last + 4,
            "scan at {start}: plan ends at page {}, reads end at {last}",
            planned.end
        );
    }
    let back = reporter.plan(&db, &key(10_000), Some(&key(9_000)), Direction::Backward).expect("plan");
    let planned: u64 = back.iter().map(|s| s.range.len).sum();
    assert!(planned >= 1_000 * 425 * 9 / 10 && planned <= 1_000 * 425 + back.len() as u64 * 8192, "{planned}");
}

#[test]
fn rows_are_identical_with_predictio_and_point_reads_issue_nothing() {
    let tmp = dir();
    build(tmp.path());
    let db = Db::open(tmp.path(), &options(Readahead::Off)).expect("open");
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline =
        Pipeline::start(Arc::clone(&executor), vec![Box::new(ScanPolicy::default())], 4096).expect("pipeline");
    let reporter = ScanReporter::new(&db, pipeline.sender()).expect("reporter");
    let settle = || {
        assert!(pipeline.flush(Duration::from_secs(10)));
        assert!(executor.wait_idle(Duration::from_secs(10)));
        executor.stats().total.issued_bytes
    };

    // Point reads: correct values, no prefetch.
    evict_all(&db);
    for i in [0, 17, 9_999, ROWS - 1] {
        assert_eq!(db.get(&key(i)).expect("get"), Some(value(i)));
    }
    assert_eq!(db.get(b"nope").expect("get"), None);
    // A one-row bounded scan: one block, nothing to prefetch.
    let one = scan(&db, 4_321, 1, Some(4_322), Some(&reporter));
    assert_eq!(one, [key(4_321), value(4_321)].concat());
    assert_eq!(settle(), 0, "point reads and a one-block scan issued prefetch");

    // Long and short scans: the same rows as without predictio.
    for (start, rows, upper) in [(3_000u64, 8_000u64, None), (15_000, 50, Some(15_050)), (100, 2_000, Some(2_100))] {
        evict_all(&db);
        let plain = scan(&db, start, rows, upper, None);
        evict_all(&db);
        let hinted = scan(&db, start, rows, upper, Some(&reporter));
        assert_eq!(plain.len() as u64, rows * 414);
        assert!(plain == hinted, "rows differ for the scan of {rows} from {start}");
    }
    let issued = settle();
    assert!(issued > 8_000 * 414 / 2, "a long scan was prefetched: {issued} bytes");
    // Nothing beyond what the scans could read up to their bounds (the
    // unbounded one: to the end of the data) plus a block per file.
    assert!(issued <= (ROWS - 3_000 + 50 + 2_000) * 430 + 16 * 8192, "issued {issued}");
}
