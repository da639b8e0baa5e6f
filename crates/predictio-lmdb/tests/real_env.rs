//! The adapter on real LMDB environments (heed's bundled LMDB): the page
//! format the parser reads is the one LMDB writes, rows are the same with
//! and without the adapter, a point lookup asks for (almost) nothing, and a
//! long scan prefetches the leaves ahead of itself.

use std::collections::HashSet;
use std::ops::Bound;
use std::path::Path;
use std::time::Duration;

use heed::types::Bytes;
use heed::{Database, Env, EnvOpenOptions};
use predictio::btree::PageError;
use predictio::btree::lmdb::{self, Meta};
use predictio::executor::Limits;
use predictio::policies::btree::BtreeConfig;
use predictio::testing::Rng;
use predictio::{ExecutorConfig, FileRef};
use predictio_lmdb::{LmdbPrefetcher, ReadAround};

const ROWS: u32 = 20_000;

fn key(i: u32) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: u32) -> Vec<u8> {
    let mut rng = Rng(u64::from(i) + 1);
    (0..400).map(|_| rng.next() as u8).collect()
}

fn open(path: &Path) -> (Env, Database<Bytes, Bytes>) {
    let mut options = EnvOpenOptions::new();
    options.map_size(256 << 20);
    // SAFETY: heed's contract for opening: each test opens its environment
    // once at a time.
    let env = unsafe { options.open(path) }.expect("open env");
    let mut wtxn = env.write_txn().expect("write txn");
    let db: Database<Bytes, Bytes> = env.create_database(&mut wtxn, None).expect("main db");
    wtxn.commit().expect("commit");
    (env, db)
}

/// A table of `ROWS` rows inserted in random key order (leaves scattered
/// over the file), closed, and evicted from the page cache.
fn build(dir: &Path) {
    let (env, db) = open(dir);
    let mut order: Vec<u32> = (0..ROWS).collect();
    let mut rng = Rng(7);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut wtxn = env.write_txn().expect("write txn");
    for &i in &order {
        db.put(&mut wtxn, &key(i), &value(i)).expect("put");
    }
    wtxn.commit().expect("commit");
    env.prepare_for_closing().wait();
    let file = FileRef::open(dir.join("data.mdb")).expect("open data file");
    predictio::cache::evict(&file).expect("evict");
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("predictio-lmdb-test").tempdir_in("/var/tmp").expect("tempdir")
}

#[test]
fn the_parser_reads_the_format_lmdb_writes() {
    let dir = tempdir();
    build(dir.path());
    let (env, db) = open(dir.path());
    let rtxn = env.read_txn().expect("read txn");
    let stat = db.stat(&rtxn).expect("stat");
    let bytes = std::fs::read(dir.path().join("data.mdb")).expect("read data file");
    let metas: Vec<Meta> = (0..2).map(|i| Meta::parse(&bytes[i * 4096..]).expect("meta page")).collect();
    let meta = metas.iter().max_by_key(|m| m.txnid).expect("a meta");
    assert_eq!(meta.page_size, 4096);
    assert_eq!(meta.main_flags, 0);
    assert_eq!(usize::from(meta.main_depth), stat.depth as usize);
    let geometry = meta.geometry();
    let root = meta.main_root.expect("a root");
    // Walk the whole tree through the parser; every key must lead where
    // LMDB put it.
    let (mut branches, mut leaves, mut depth) = (0usize, 0usize, 0usize);
    let mut level = vec![root];
    while !level.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for page_no in level {
            let at = page_no as usize * 4096;
            match lmdb::parse_page(&bytes[at..at + 4096], page_no, &geometry) {
                Ok(interior) => {
                    branches += 1;
                    next.extend(interior.children);
                }
                Err(PageError::Leaf) => leaves += 1,
                Err(err) => panic!("page {page_no}: {err}"),
            }
        }
        level = next;
    }
    assert_eq!((branches, leaves, depth), (stat.branch_pages, stat.leaf_pages, stat.depth as usize));
    assert!(depth >= 3, "a tree of {ROWS} rows with 400-byte values has at least 3 levels");
    // search_branch finds the leaf holding each key (the leaf LMDB returns
    // the key from: its slice points into the map).
    let prefetcher = LmdbPrefetcher::new(&env).expect("prefetcher");
    let mut rng = Rng(3);
    for _ in 0..300 {
        let k = key(rng.below(ROWS));
        let (found, _) = db.get_greater_than_or_equal_to(&rtxn, &k).expect("get").expect("row");
        let leaf = prefetcher.page_of(found.as_ptr()).expect("key in the map");
        let mut page_no = root;
        loop {
            let at = page_no as usize * 4096;
            match lmdb::search_branch(&bytes[at..at + 4096], page_no, &geometry, &k) {
                Ok((interior, position)) => page_no = interior.children[position as usize],
                Err(PageError::Leaf) => break,
                Err(err) => panic!("page {page_no}: {err}"),
            }
        }
        assert_eq!(page_no, leaf, "search for {:?}", String::from_utf8_lossy(&k));
    }
}

#[test]
fn rows_are_identical_with_and_without_the_adapter() {
    let dir = tempdir();
    build(dir.path());
    let (env, db) = open(dir.path());
    let prefetcher = LmdbPrefetcher::new(&env).expect("prefetcher");
    let rtxn = env.read_txn().expect("read txn");
    let mut rng = Rng(11);
    for length in [1usize, 10, 100, 1000, 5000] {
        let start = key(rng.below(ROWS));
        let plain: Vec<(&[u8], &[u8])> = db
            .range(&rtxn, &(Bound::Included(start.as_slice()), Bound::Unbounded))
            .expect("range")
            .take(length)
            .collect::<heed::Result<_>>()
            .expect("rows");
        let mut scan = prefetcher.scan_from(&db, &rtxn, &start).expect("range");
        let observed: Vec<(&[u8], &[u8])> = scan.by_ref().take(length).collect::<heed::Result<_>>().expect("rows");
        assert_eq!(plain, observed, "scan of {length} from {:?}", String::from_utf8_lossy(&start));
        assert_eq!(scan.stats().rows as usize, observed.len());
        assert_eq!(scan.stats().passed_over, 0);
    }
    // Point reads too.
    for _ in 0..100 {
        let i = rng.below(ROWS);
        assert_eq!(prefetcher.get(&db, &rtxn, &key(i)).expect("get"), Some(value(i).as_slice()));
    }
    assert_eq!(prefetcher.get(&db, &rtxn, b"user9999999999").expect("get"), None);
}

fn tracked_runtime() -> std::sync::Arc<predictio::embedded::Embedded> {
    let config = ExecutorConfig {
        limits: Limits { track_hits: true, ..Limits::default() },
        hit_timeout: Duration::from_secs(600),
        ..ExecutorConfig::default()
    };
    LmdbPrefetcher::runtime(config, BtreeConfig::default()).expect("runtime")
}

#[test]
fn a_point_lookup_asks_for_almost_nothing() {
    let dir = tempdir();
    build(dir.path());
    let (env, db) = open(dir.path());
    let prefetcher = LmdbPrefetcher::with_runtime(&env, tracked_runtime(), ReadAround::Keep).expect("prefetcher");
    let rtxn = env.read_txn().expect("read txn");
    let mut rng = Rng(5);
    let lookups = 500;
    for _ in 0..lookups {
        let i = rng.below(ROWS);
        assert_eq!(prefetcher.get(&db, &rtxn, &key(i)).expect("get"), Some(value(i).as_slice()));
    }
    let executor = prefetcher.embedded().executor();
    assert!(executor.wait_idle(Duration::from_secs(10)));
    // A lookup stays in one leaf: no descent is made and the policy is not
    // even asked.
    let requested = executor.stats().total.requested_pages;
    assert_eq!(requested, 0, "{lookups} point lookups asked for {requested} pages");
    assert_eq!(prefetcher.embedded().stats().events, 0);
    // A scan of a few rows that crosses into a second leaf (or a third) is
    // seen, and asks for about as many leaves as it read: the policy's
    // window after n steps is about n.
    let mut crossed = 0;
    for _ in 0..200 {
        let start = key(rng.below(ROWS));
        let mut scan = prefetcher.scan_from(&db, &rtxn, &start).expect("range");
        for row in scan.by_ref().take(8) {
            row.expect("row");
        }
        crossed += usize::from(scan.stats().leaves >= 2);
    }
    assert!(crossed > 50, "{crossed} of 200 short scans crossed a leaf");
    assert!(prefetcher.embedded().stats().events > 0);
    assert!(executor.wait_idle(Duration::from_secs(10)));
    let requested = executor.stats().total.requested_pages;
    assert!(requested <= 4 * crossed as u64, "{crossed} short scans asked for {requested} pages");
}

#[test]
fn a_long_scan_prefetches_the_leaves_ahead() {
    let dir = tempdir();
    build(dir.path());
    // ReadAround::Replace: the kernel's mmap read-around (up to read_ahead_kb
    // around each fault) would otherwise read much of this small file, and
    // there would be little left to prefetch.
    let (env, db) = open(dir.path());
    let prefetcher = LmdbPrefetcher::with_runtime(&env, tracked_runtime(), ReadAround::Replace).expect("prefetcher");
    let rtxn = env.read_txn().expect("read txn");
    let start = key(3000);
    let mut scan = prefetcher.scan_from(&db, &rtxn, &start).expect("range");
    let mut leaves = HashSet::new();
    for row in scan.by_ref().take(5000) {
        let (k, _) = row.expect("row");
        leaves.insert(prefetcher.page_of(k.as_ptr()).expect("in the map"));
    }
    let stats = scan.stats();
    assert_eq!(stats.leaves as usize, leaves.len());
    assert!(stats.descents >= 2 && stats.descents <= 30, "{stats:?}");
    let executor = prefetcher.embedded().executor();
    assert!(executor.wait_idle(Duration::from_secs(10)));
    let total = executor.stats().total;
    // Every leaf after the ramp-up, and each branch page's first leaf, was
    // asked for before the scan reached it.
    assert!(total.issued_pages > 0, "{total:?}");
    assert!(
        total.hit_pages as usize * 10 >= leaves.len() * 7,
        "{} of {} leaves were prefetched before use: {total:?}",
        total.hit_pages,
        leaves.len()
    );
    // What the scan did not reach is mostly the last window (the policy's
    // cap, 64 leaves) and the next branch page; little else.
    let unused = total.issued_pages - total.hit_pages;
    assert!(unused <= 100, "{unused} prefetched pages unused: {total:?}");
}

#[test]
fn other_databases_and_write_transactions_are_read_as_usual() {
    let dir = tempdir();
    let mut options = EnvOpenOptions::new();
    options.map_size(256 << 20).max_dbs(2);
    // SAFETY: heed's contract for opening: this test opens the environment once.
    let env = unsafe { options.open(dir.path()) }.expect("open env");
    let mut wtxn = env.write_txn().expect("write txn");
    let named: Database<Bytes, Bytes> = env.create_database(&mut wtxn, Some("table")).expect("named db");
    for i in (0..5000).rev() {
        named.put(&mut wtxn, &key(i), &value(i)).expect("put");
    }
    wtxn.commit().expect("commit");
    let prefetcher = LmdbPrefetcher::new(&env).expect("prefetcher");
    // A named database: its tree hangs off the main database, which the
    // adapter does not follow; rows are LMDB's, nothing is descended.
    let rtxn = env.read_txn().expect("read txn");
    let plain: Vec<(&[u8], &[u8])> = named.iter(&rtxn).expect("iter").collect::<heed::Result<_>>().expect("rows");
    let mut scan = prefetcher.scan_from(&named, &rtxn, &key(0)).expect("range");
    let observed: Vec<(&[u8], &[u8])> = scan.by_ref().collect::<heed::Result<_>>().expect("rows");
    assert_eq!(plain, observed);
    assert_eq!(scan.stats().descents, 0, "{:?}", scan.stats());
    assert!(scan.stats().passed_over > 0);
    drop(scan);
    drop(rtxn);
    // A write transaction: dirty pages live outside the map.
    let mut wtxn = env.write_txn().expect("write txn");
    for i in 0..100 {
        named.put(&mut wtxn, &key(i), b"new").expect("put");
    }
    let plain: Vec<Vec<u8>> = named.iter(&wtxn).expect("iter").map(|r| r.expect("row").1.to_vec()).collect::<Vec<_>>();
    let observed: Vec<Vec<u8>> = prefetcher
        .scan_from(&named, &wtxn, &key(0))
        .expect("range")
        .map(|r| r.expect("row").1.to_vec())
        .collect::<Vec<_>>();
    assert_eq!(plain, observed);
    assert_eq!(&observed[0], b"new");
}
