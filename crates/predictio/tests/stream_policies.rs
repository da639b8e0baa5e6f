//! The `stream` and `readplan` policies end to end: synthetic reads and
//! plans go through the pipeline and the real executor, and the page cache of
//! a real file under /var/tmp shows what was fetched. The reader's own reads
//! are only reported, never made, so every resident page was prefetched.
//! No root needed.

use std::sync::Arc;
use std::time::Duration;

use predictio::event::{AccessKind, Event};
use predictio::executor::ExecutorConfig;
use predictio::page::ByteRange;
use predictio::pipeline::Pipeline;
use predictio::policies::readplan::{ReadPlanConfig, ReadPlanPolicy};
use predictio::policies::stream::StreamPolicy;
use predictio::resolve::ResolverConfig;
use predictio::{Executor, FileId, FileRef, PAGE_SIZE, PageRange, cache};

const FILE_PAGES: u64 = 8192;

#[track_caller]
fn cold_file() -> (tempfile::TempDir, std::path::PathBuf, FileRef) {
    let dir = tempfile::Builder::new().prefix("predictio-stream").tempdir_in("/var/tmp").expect("temp dir");
    let path = dir.path().join("f");
    std::fs::write(&path, vec![7u8; (FILE_PAGES * PAGE_SIZE) as usize]).expect("write");
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    assert_eq!(cache::uptodate_pages(&file, &[PageRange::new(0, FILE_PAGES)]).expect("mincore"), 0, "cold");
    (dir, path, file)
}

fn read_event(pid: u32, file: FileId, pages: PageRange) -> Event {
    Event::PageAccess { pid, file, pages, kind: AccessKind::Read, time_ns: 0 }
}

#[track_caller]
fn settle(pipeline: &Pipeline) {
    assert!(pipeline.flush(Duration::from_secs(5)), "dispatcher did not drain");
    assert!(pipeline.executor().wait_idle(Duration::from_secs(5)), "executor did not go idle");
}

#[track_caller]
fn resident(file: &FileRef, range: PageRange) -> u64 {
    cache::uptodate_pages(file, &[range]).expect("mincore")
}

#[test]
fn a_followed_sequential_reader_gets_its_next_pages_fetched() {
    let (_dir, _path, file) = cold_file();
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline =
        Pipeline::start(Arc::clone(&executor), vec![Box::new(StreamPolicy::default())], 1024).expect("start");
    let sender = pipeline.sender();
    // A reader goes through the first 2 MiB in 64 KiB reads; the first event
    // brings the descriptor, as a hint would.
    let reads = 32;
    for i in 0..reads {
        let held = (i == 0).then(|| file.clone());
        assert!(sender.send(read_event(4242, file.id(), PageRange::new(i * 16, i * 16 + 16)), held));
    }
    settle(&pipeline);
    let position = reads * 16;
    // The pages just ahead of the reader are in; what it "read" itself (only
    // reported) and the first window before confirmation are not.
    let ahead = cache::wait_resident(&file, &[PageRange::new(position, position + 32)], Duration::from_secs(5))
        .expect("mincore");
    assert_eq!(ahead, 32, "the next 32 pages were prefetched");
    assert_eq!(resident(&file, PageRange::new(0, 64)), 0, "nothing before the first window");
    let stream = executor.stats().origins.into_iter().find(|o| o.name == "stream").expect("stream origin");
    assert!(stream.counters.issued_pages >= 32, "{:?}", stream.counters);
    // Bounded: nothing beyond one largest window past the reader.
    assert_eq!(resident(&file, PageRange::new(position + 8192, FILE_PAGES)), 0);
    let far = resident(&file, PageRange::new(position, FILE_PAGES));
    assert!(far < 4096, "{far} pages fetched ahead of a reader at page {position}");
}

#[test]
fn a_random_reader_gets_nothing() {
    let (_dir, _path, file) = cold_file();
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline =
        Pipeline::start(Arc::clone(&executor), vec![Box::new(StreamPolicy::default())], 1 << 14).expect("start");
    let sender = pipeline.sender();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..5000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let page = seed % FILE_PAGES;
        let held = (i == 0).then(|| file.clone());
        assert!(sender.send(read_event(4343, file.id(), PageRange::new(page, page + 1)), held));
    }
    settle(&pipeline);
    assert_eq!(pipeline.stats().requests, 0);
    assert_eq!(resident(&file, PageRange::new(0, FILE_PAGES)), 0);
}

#[test]
fn an_observed_reader_is_followed_once_its_file_is_resolved() {
    let (_dir, path, file) = cold_file();
    // This process has the file open, as an observed program would; the
    // events carry no descriptor.
    let _open = std::fs::File::open(&path).expect("open");
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let policies: Vec<Box<dyn predictio::Policy>> = vec![Box::new(StreamPolicy::default())];
    let pipeline =
        Pipeline::start_with(Arc::clone(&executor), policies, 1024, Some(ResolverConfig::default())).expect("start");
    let sender = pipeline.sender();
    let me = std::process::id();
    for i in 0..16 {
        assert!(sender.send(read_event(me, file.id(), PageRange::new(i * 16, i * 16 + 16)), None));
    }
    settle(&pipeline);
    let stats = pipeline.stats();
    assert!(stats.resolved >= 1 && stats.requests >= 1, "{stats:?}");
    let up = cache::wait_resident(&file, &[PageRange::new(256, 288)], Duration::from_secs(5)).expect("mincore");
    assert_eq!(up, 32);
}

#[test]
fn a_read_plan_is_fetched_in_order_within_its_bound() {
    let (_dir, _path, file) = cold_file();
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let config = ReadPlanConfig {
        max_ahead_pages_per_file: 256,
        max_ahead_pages_total: 256,
        chunk_pages: 128,
        // The whole window at once: this test is about the bound.
        opening_segments: 0,
        ..ReadPlanConfig::default()
    };
    let policy = ReadPlanPolicy::new(config).expect("config");
    let pipeline = Pipeline::start(Arc::clone(&executor), vec![Box::new(policy)], 1024).expect("start");
    let sender = pipeline.sender();
    // Four 512 KiB segments out of file order (an AQE skew read).
    let segments: Vec<u64> = vec![4096, 1024, 6144, 2048];
    let plan = Event::ReadPlan {
        file: file.id(),
        segments: segments.iter().map(|&page| ByteRange::new(page * PAGE_SIZE, 128 * PAGE_SIZE)).collect(),
    };
    assert!(sender.send(plan, Some(file.clone())));
    settle(&pipeline);
    let segment = |page: u64| PageRange::new(page, page + 128);
    // 256 pages may be ahead: the first two segments.
    assert_eq!(
        cache::wait_resident(&file, &[segment(4096), segment(1024)], Duration::from_secs(5)).expect("mincore"),
        256
    );
    assert_eq!(resident(&file, segment(6144)) + resident(&file, segment(2048)), 0, "held back by the bound");
    // The reader finishes the first segment: the third is released.
    assert!(sender.send(read_event(1, file.id(), segment(4096)), None));
    settle(&pipeline);
    assert_eq!(cache::wait_resident(&file, &[segment(6144)], Duration::from_secs(5)).expect("mincore"), 128);
    assert_eq!(resident(&file, segment(2048)), 0);
    let origin = executor.stats().origins.into_iter().find(|o| o.name == "readplan").expect("readplan origin");
    assert_eq!(origin.counters.issued_pages, 384);
}
