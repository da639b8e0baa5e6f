//! The no-change mode end to end: a real SQLite file (made by the sqlite3
//! shell), page reads reported as kernel observation reports them (no hint,
//! no adapter), through the pipeline's database watcher, the `btree` policy
//! and the real executor: the upcoming leaves of a scan become resident
//! although nobody read them.

use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use predictio::btree::sqlite;
use predictio::event::{AccessKind, Event};
use predictio::executor::ExecutorConfig;
use predictio::pipeline::Pipeline;
use predictio::policies::btree::BtreePolicy;
use predictio::{Executor, FileRef, PageRange, cache};

use predictio::testing::scattered_sqlite_db as real_db;

fn read_page(file: &FileRef, page_no: u64) -> Vec<u8> {
    let mut buf = vec![0u8; 4096];
    file.file().read_exact_at(&mut buf, (page_no - 1) * 4096).expect("read page");
    buf
}

#[test]
fn observed_reads_of_an_unmodified_scan_prefetch_its_next_leaves() {
    let dir = tempfile::Builder::new().prefix("predictio-btree-observe").tempdir_in("/var/tmp").expect("temp dir");
    let Some(db) = real_db(dir.path()) else {
        predictio::testing::skip("needs the sqlite3 shell");
        return;
    };
    let file = FileRef::open(&db).expect("open");
    cache::evict(&file).expect("evict");
    if cache::uptodate_pages(&file, &[PageRange::new(0, 8)]).expect("mincore") != 0 {
        predictio::testing::skip("the page cache kept the file after fadvise(DONTNEED)");
        return;
    }
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline = Pipeline::start(Arc::clone(&executor), vec![Box::new(BtreePolicy::default())], 1024).expect("start");
    let sender = pipeline.sender();
    let geometry = sqlite::Geometry::new(4096, 0, None).expect("geometry");
    assert!(!sender.prompt(), "no database read yet");

    // "The program" reads as SQLite would: the header, the root (page 2),
    // its first interior child, then that child's leaves in key order. Each
    // read is reported after it returned, as the tracepoint would.
    let report = |page_no: u64| {
        let event = Event::PageAccess {
            pid: std::process::id(),
            file: file.id(),
            pages: PageRange::new(page_no - 1, page_no),
            kind: AccessKind::Read,
            time_ns: 0,
        };
        // The first report hands over the descriptor, as the resolver would.
        assert!(sender.send(event, Some(file.clone())));
    };
    read_page(&file, 1);
    report(1);
    let root = sqlite::parse_page(&read_page(&file, 2), 2, &geometry).expect("root is interior");
    report(2);
    let interior_no = root.children[0];
    let interior = sqlite::parse_page(&read_page(&file, interior_no), interior_no as u32, &geometry).expect("interior");
    report(interior_no);
    let leaves = &interior.children;
    assert!(leaves.len() > 40, "{} leaves", leaves.len());
    for &leaf in &leaves[..8] {
        read_page(&file, leaf);
        report(leaf);
        assert!(pipeline.flush(Duration::from_secs(5)));
    }
    assert!(executor.wait_idle(Duration::from_secs(5)));
    // A watched database is being read: its reads are wanted without delay.
    assert!(sender.prompt(), "reads of a watched database are wanted promptly");

    // Nobody read leaves 8 and 9; the scan's window brought them in.
    let next: Vec<PageRange> = leaves[8..10].iter().map(|&p| PageRange::new(p - 1, p)).collect();
    let up = cache::wait_resident(&file, &next, Duration::from_secs(5)).expect("mincore");
    let stats = pipeline.stats();
    assert_eq!(up, 2, "upcoming leaves not prefetched: {stats:?}, {:?}", executor.stats().total);
    assert!(stats.tree_descents >= 9, "{stats:?}");
    // A leaf far ahead of the window stayed cold: bounded.
    let far = leaves[leaves.len() - 1];
    assert_eq!(cache::uptodate_pages(&file, &[PageRange::new(far - 1, far)]).expect("mincore"), 0);
    // And no longer once its reads have stopped for a while.
    std::thread::sleep(predictio::pipeline::PROMPT_FOR);
    assert!(!sender.prompt(), "a database no longer read is not");
}
