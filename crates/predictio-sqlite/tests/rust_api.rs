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
use predictio_sqlite::{DbObserver, Prefetcher};

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
/// from the page cache, yet learns the tree; a lone slow read (a cached read
/// preempted) does not start it, the second of two close together does: the
/// process's runtime, and the descents after it reach the policy.
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
    assert!(observer.knows_header(), "the tree is learnt before the runtime starts");
    assert!(!observer.feeds_runtime(), "cached reads started the runtime");
    assert!(!Prefetcher::global_started(), "cached reads started the process's runtime");

    let slow = Duration::from_millis(1);
    let (offset, bytes) = page(reads[half]);
    observer.before_read(offset, PAGE);
    observer.on_timed_read(offset, bytes, slow);
    assert!(!observer.feeds_runtime(), "a lone slow read started the runtime");
    for &page_no in &reads[half + 1..] {
        let (offset, bytes) = page(page_no);
        observer.before_read(offset, PAGE);
        observer.on_timed_read(offset, bytes, slow);
    }
    assert!(observer.feeds_runtime() && Prefetcher::global_started(), "reads from the device start the runtime");
    let stats = Prefetcher::global().expect("runtime").stats();
    assert!(stats.events as usize > (reads.len() - half) / 2, "{stats:?}");
    // Counted from the second slow read on.
    assert!(stats.reads_observed as usize >= reads.len() - half - 1, "{stats:?}");
}
