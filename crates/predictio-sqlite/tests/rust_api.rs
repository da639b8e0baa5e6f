//! The Rust API without SQLite in the loop: a cold key-order walk of a real
//! table's b-tree, page by page as SQLite's pager reads it, fed to a
//! [`DbObserver`] over a runtime of its own. The executor issues reads of
//! the leaves ahead of the walk, and every page read is the same bytes as
//! the file holds (the observer only looks).

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use predictio::ExecutorConfig;
use predictio::btree::sqlite;
use predictio_sqlite_runtime::{DbObserver, Prefetcher};

const PAGE: usize = 4096;

#[track_caller]
fn sqlite3(db: &Path, sql: &str) -> Option<String> {
    let out = match Command::new("sqlite3").arg(db).arg(sql).stderr(Stdio::inherit()).output() {
        Ok(out) => out,
        Err(_) => {
            assert!(std::env::var("CI").as_deref() != Ok("true"), "sqlite3 shell missing under CI (scripts/deps.sh)");
            eprintln!("skipping: needs the sqlite3 shell (apt install sqlite3)");
            return None;
        }
    };
    assert!(out.status.success(), "sqlite3 failed on {sql}");
    Some(String::from_utf8(out.stdout).expect("utf-8"))
}

/// Pages in the order a full key-order scan reads them from `root`.
fn walk(image: &[u8], geometry: &sqlite::Geometry, page_no: u32, reads: &mut Vec<u32>) {
    reads.push(page_no);
    let start = (page_no as usize - 1) * PAGE;
    if let Ok(interior) = sqlite::parse_page(&image[start..start + PAGE], page_no, geometry) {
        for child in interior.children {
            walk(image, geometry, child as u32, reads);
        }
    }
}

/// A 20,000-row table inserted in random key order in `dir/name`, its
/// bytes, and the pages a full walk of its tree reads, in order (the header
/// page first); `None` without the sqlite3 shell.
fn scattered_table(dir: &std::path::Path, name: &str) -> Option<(std::path::PathBuf, Vec<u8>, Vec<u32>)> {
    let db = dir.join(name);
    let build = "PRAGMA page_size = 4096;
        CREATE TABLE usertable(k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID;
        WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < 20000)
        INSERT INTO usertable SELECT printf('user%010d', i), randomblob(400) FROM c ORDER BY random();";
    sqlite3(&db, build)?;
    let root: u32 = sqlite3(&db, "SELECT rootpage FROM sqlite_schema WHERE name = 'usertable';")
        .expect("sqlite3")
        .trim()
        .parse()
        .expect("root page");
    let image = std::fs::read(&db).expect("read db");
    let geometry = sqlite::Header::parse(&image).expect("header").geometry();
    let mut reads = vec![1];
    walk(&image, &geometry, root, &mut reads);
    Some((db, image, reads))
}

#[test]
fn a_cold_walk_through_the_observer_issues_prefetches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((db, image, reads)) = scattered_table(dir.path(), "walk.db") else { return };
    assert!(reads.len() > 1000, "{} pages", reads.len());

    let prefetcher: &'static Prefetcher =
        Box::leak(Box::new(Prefetcher::new(ExecutorConfig::default()).expect("executor")));
    let mut observer = DbObserver::new(&db, prefetcher);
    let file = File::open(&db).expect("open db");
    predictio::os::fadvise(file.as_fd(), 0, 0, predictio::os::Advice::DontNeed).expect("posix_fadvise(DONTNEED)");
    let mut buf = vec![0; PAGE];
    for (i, &page_no) in reads.iter().enumerate() {
        let offset = (u64::from(page_no) - 1) * PAGE as u64;
        // As the VFS shim does: announce the read first (every other read
        // here, so that reads reported only afterwards are covered too).
        if i % 2 == 0 {
            observer.before_read(offset, PAGE);
        }
        file.read_exact_at(&mut buf, offset).expect("read page");
        observer.on_read(offset, &buf);
        let start = offset as usize;
        assert_eq!(buf, image[start..start + PAGE], "page {page_no} changed");
    }
    assert!(observer.knows_header());
    assert!(prefetcher.executor().wait_idle(Duration::from_secs(5)), "executor did not drain");
    let stats = prefetcher.stats();
    assert!(stats.events as usize > reads.len() / 2, "{stats:?}");
    assert!(stats.requests > 0, "{stats:?}");
    assert!(stats.executor.requested_pages > 0, "{stats:?}");
    assert!(stats.executor.issued_pages > 0, "{stats:?}");
    assert_eq!(stats.executor.errors, 0, "{stats:?}");
}

/// A lazy observer (the extension's) starts no runtime while its reads come
/// from the page cache, and keeps the interior pages it sees unparsed until
/// then; a lone slow read (a cached read preempted) does not start it, the
/// second of two close together does: the process's runtime, which learns
/// the kept pages, and the descents after it reach the policy.
#[test]
fn a_lazy_observer_starts_the_runtime_at_the_first_slow_read_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Some((db, image, reads)) = scattered_table(dir.path(), "lazy.db") else { return };
    let page = |page_no: u32| {
        let start = (page_no as usize - 1) * PAGE;
        (start as u64, &image[start..start + PAGE])
    };

    let cached = Duration::from_micros(2);
    let mut observer = DbObserver::lazy(&db);
    // Fewer cached reads than make the observer stand aside on a warm cache.
    let half = 200;
    assert!(reads.len() > 2 * half, "{} pages", reads.len());
    for &page_no in &reads[..half] {
        let (offset, bytes) = page(page_no);
        observer.before_read(offset, PAGE);
        observer.on_timed_read(offset, bytes, cached);
    }
    assert!(observer.knows_header(), "the header is read before the runtime starts");
    // Its interior pages are kept as read, not parsed: nothing is
    // prefetched yet, and a warm process would pay for parsing them.
    let interior = |page_no: &u32| {
        let (_, bytes) = page(*page_no);
        matches!(bytes[if *page_no == 1 { 100 } else { 0 }], 0x02 | 0x05)
    };
    let seen_interior = reads[..half].iter().filter(|p| interior(p)).count();
    assert!(seen_interior > 1, "{seen_interior} interior pages in the first {half} reads");
    assert_eq!(observer.pages_kept_unparsed(), seen_interior);
    assert!(!observer.feeds_runtime(), "cached reads started the runtime");
    assert!(!Prefetcher::global_started(), "cached reads started the process's runtime");

    let slow = Duration::from_millis(1);
    let (offset, bytes) = page(reads[half]);
    observer.before_read(offset, PAGE);
    observer.on_timed_read(offset, bytes, slow);
    assert!(!observer.feeds_runtime(), "a lone slow read started the runtime");
    // The second slow read close by starts the process's runtime, on a
    // thread of its own; the observer attaches to it at a read after that.
    let (offset, bytes) = page(reads[half + 1]);
    observer.before_read(offset, PAGE);
    observer.on_timed_read(offset, bytes, slow);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !Prefetcher::global_started() {
        assert!(std::time::Instant::now() < deadline, "the runtime did not start in 10 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    for &page_no in &reads[half + 2..] {
        let (offset, bytes) = page(page_no);
        observer.before_read(offset, PAGE);
        observer.on_timed_read(offset, bytes, slow);
    }
    assert!(observer.feeds_runtime() && Prefetcher::global_started(), "reads from the device start the runtime");
    assert_eq!(observer.pages_kept_unparsed(), 0, "learnt when the runtime started");
    let stats = Prefetcher::global().expect("runtime").stats();
    assert!(stats.events as usize > (reads.len() - half) / 2, "{stats:?}");
    // Counted from the first read after the runtime was up.
    assert!(stats.reads_observed as usize >= reads.len() - half - 3, "{stats:?}");
}

/// The rowids a real index's leaves hold, read by
/// [`sqlite::index_leaf_rowids`], are SQLite's own, in index order; and an
/// index scan replayed page by page as SQLite reads it (each index leaf,
/// then the table leaf of each of its rowids, through the table's interior
/// pages) is followed by a [`RowidLookahead`]: what it asks for ahead is
/// the table leaves the scan then reads, in order.
#[test]
fn the_rowids_of_a_real_index_are_found_and_their_leaves_predicted() {
    use predictio::btree::rowid::{RowidConfig, RowidLookahead};
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("rowid.db");
    let build = "PRAGMA page_size = 4096;
        CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);
        CREATE INDEX t_k ON t(k);
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
        INSERT INTO t(k, v) SELECT hex(randomblob(8)), randomblob(200) FROM c;";
    let Some(_) = sqlite3(&db, build) else { return };
    let root = |name: &str| -> u32 {
        sqlite3(&db, &format!("SELECT rootpage FROM sqlite_schema WHERE name = '{name}';"))
            .expect("sqlite3")
            .trim()
            .parse()
            .expect("root page")
    };
    let (table_root, index_root) = (root("t"), root("t_k"));
    let in_order: Vec<i64> = sqlite3(&db, "SELECT id FROM t ORDER BY k;")
        .expect("sqlite3")
        .lines()
        .map(|l| l.parse().expect("rowid"))
        .collect();
    let image = std::fs::read(&db).expect("read db");
    let geometry = sqlite::Header::parse(&image).expect("header").geometry();
    let page = |n: u32| &image[(n as usize - 1) * PAGE..n as usize * PAGE];

    // The index's leaves in key order, and their rowids: SQLite's order,
    // less the entries its interior pages hold themselves (an index
    // B-tree keeps an entry in each interior cell).
    let mut index_pages = Vec::new();
    walk(&image, &geometry, index_root, &mut index_pages);
    let leaves: Vec<u32> = index_pages.iter().copied().filter(|&p| page(p)[0] == sqlite::LEAF_INDEX).collect();
    let mut leaf_of_entry = std::collections::HashMap::new();
    let mut rowids = Vec::new();
    for &leaf in &leaves {
        let found = sqlite::index_leaf_rowids(page(leaf), leaf, &geometry).expect("an index leaf");
        for rowid in found {
            let rowid = rowid.expect("a local rowid");
            leaf_of_entry.insert(rowid, leaf);
            rowids.push(rowid);
        }
    }
    let interior_entries = in_order.len() - rowids.len();
    assert!(interior_entries < leaves.len(), "{interior_entries} entries in interior pages, {} leaves", leaves.len());
    let leaf_entries: Vec<i64> = in_order.iter().copied().filter(|r| leaf_of_entry.contains_key(r)).collect();
    assert!(leaf_entries == rowids, "the index leaves' rowids, in key order");

    // Where each rowid lives: a descent through the table's interior pages.
    let leaf_of = |rowid: i64, path: &mut Vec<u32>| -> u32 {
        let mut at = table_root;
        loop {
            path.push(at);
            match sqlite::parse_table_interior(page(at), at, &geometry) {
                Ok(interior) => at = interior.child_for(rowid).expect("a child"),
                Err(_) => return at,
            }
        }
    };
    // Replay the scan of the first 1,000 entries as SQLite's pager reads
    // it: each index leaf as the scan enters it, then each entry's table
    // path (each page once: SQLite keeps what it read in its own cache).
    let mut look = RowidLookahead::new(geometry, RowidConfig::default());
    let mut seen = std::collections::HashSet::new();
    let read = |n: u32, look: &mut RowidLookahead, asked: &mut Vec<u32>, seen: &mut std::collections::HashSet<u32>| {
        if seen.insert(n) {
            let ahead = look.on_page(n, page(n));
            asked.extend(ahead.interiors.iter().chain(&ahead.leaves));
        }
    };
    let (mut asked, mut table_reads) = (Vec::new(), Vec::new());
    for p in index_pages.iter().copied().filter(|&p| page(p)[0] == sqlite::INTERIOR_INDEX) {
        read(p, &mut look, &mut asked, &mut seen);
    }
    for &rowid in &in_order[..1000] {
        if let Some(&leaf) = leaf_of_entry.get(&rowid) {
            read(leaf, &mut look, &mut asked, &mut seen);
        }
        let mut path = Vec::new();
        leaf_of(rowid, &mut path);
        for n in path {
            if !seen.contains(&n) {
                table_reads.push(n);
            }
            read(n, &mut look, &mut asked, &mut seen);
        }
    }
    let stats = look.stats();
    // Lookups of a table leaf already read are not seen (SQLite has the
    // page): the others are followed.
    assert!(stats.followed as usize >= table_reads.len() / 2, "the scan was followed: {stats:?}");
    // Nearly every table page the scan read past its first lookups was
    // asked for ahead, and nothing asked for was something it did not read.
    let asked_set: std::collections::HashSet<u32> = asked.iter().copied().collect();
    let read_set: std::collections::HashSet<u32> = table_reads.iter().copied().collect();
    let covered = table_reads.iter().filter(|n| asked_set.contains(n)).count();
    assert!(covered * 10 >= table_reads.len() * 9, "{covered} of {} table reads asked ahead", table_reads.len());
    // What it asked for and the scan did not read lies just past where the
    // scan stopped (it would have read it next), within one window.
    let max_window = RowidConfig::default().max_window;
    let mut just_past = std::collections::HashSet::new();
    for &rowid in &in_order[1000..1000 + max_window + 2] {
        let mut path = Vec::new();
        leaf_of(rowid, &mut path);
        just_past.extend(path);
    }
    let wasted: Vec<u32> = asked_set.difference(&read_set).copied().collect();
    assert!(wasted.len() <= max_window, "{} pages asked for past the scan", wasted.len());
    assert!(wasted.iter().all(|n| just_past.contains(n)), "nothing asked that the scan would not read next");
}
