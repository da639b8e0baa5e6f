//! The pipeline end to end: events from a source thread, through the
//! dispatcher and a policy, into the real executor; a slow policy makes the
//! queue drop (counted) rather than block the source.

use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio::event::{AccessKind, Event, EventKind, EventKinds};
use predictio::executor::ExecutorConfig;
use predictio::page::ByteRange;
use predictio::pipeline::Pipeline;
use predictio::policies::readplan::ReadPlanPolicy;
use predictio::policy::{Policy, PolicyContext};
use predictio::{Executor, FileRef, PAGE_SIZE, PageRange, cache};

fn disk_file(pages: u64) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::Builder::new().prefix("predictio-pipe").tempdir_in("/var/tmp").expect("temp dir");
    let path = dir.path().join("f");
    std::fs::write(&path, vec![5u8; (pages * PAGE_SIZE) as usize]).expect("write");
    (dir, path)
}

#[test]
fn a_read_plan_hint_becomes_resident_pages() {
    let (_dir, path) = disk_file(512);
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline =
        Pipeline::start(Arc::clone(&executor), vec![Box::new(ReadPlanPolicy::default())], 1024).expect("start");
    let sender = pipeline.sender();
    let plan = Event::ReadPlan { file: file.id(), segments: vec![ByteRange::new(0, 64 * PAGE_SIZE)].into() };
    assert!(sender.send(plan, Some(file.clone())));
    assert!(pipeline.flush(Duration::from_secs(5)));
    assert!(executor.wait_idle(Duration::from_secs(5)));
    let up = cache::wait_resident(&file, &[PageRange::new(0, 64)], Duration::from_secs(5)).expect("mincore");
    assert_eq!(up, 64);
    let stats = pipeline.stats();
    assert_eq!((stats.dispatched, stats.requests, stats.refused), (1, 1, 0));
    let hints = executor.stats().origins.into_iter().find(|o| o.name == "readplan").expect("readplan origin");
    assert_eq!(hints.counters.issued_pages, 64);
}

struct Slow;

impl Policy for Slow {
    fn name(&self) -> &str {
        "slow"
    }
    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::PageAccess])
    }
    fn on_event(&mut self, _: &Event, _: &mut PolicyContext<'_>) {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_slow_policy_makes_the_queue_drop_not_block() {
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline = Pipeline::start(executor, vec![Box::new(Slow)], 8).expect("start");
    let sender = pipeline.sender();
    let start = Instant::now();
    let mut refused = 0;
    for i in 0..10_000u64 {
        let ev = Event::PageAccess {
            pid: 1,
            file: predictio::FileId { dev: 1, ino: 1 },
            pages: PageRange::page(i),
            kind: AccessKind::Read,
            time_ns: i,
        };
        if !sender.send(ev, None) {
            refused += 1;
        }
    }
    assert!(start.elapsed() < Duration::from_secs(1), "sends blocked: {:?}", start.elapsed());
    assert!(refused > 9_000, "most events dropped: {refused}");
    assert_eq!(pipeline.stats().dropped, refused);
}

/// Requests the page after every observed read: enough to show that an
/// observed file (no descriptor came with the event) becomes requestable.
struct NextPage;

impl Policy for NextPage {
    fn name(&self) -> &str {
        "next-page"
    }
    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::PageAccess])
    }
    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        if let Event::PageAccess { file, pages, .. } = event {
            ctx.request(*file, vec![PageRange::new(pages.end, pages.end + 8)], predictio::Urgency::Speculative);
        }
    }
}

#[test]
fn observed_files_are_resolved_through_the_process_that_has_them_open() {
    let (_dir, path) = disk_file(64);
    // This process has the file open, as an observed program would.
    let (held, id) = held_file(&path);
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let pipeline = Pipeline::start_with(
        Arc::clone(&executor),
        vec![Box::new(NextPage)],
        1024,
        Some(predictio::resolve::ResolverConfig::default()),
    )
    .expect("start");
    assert!(pipeline.sender().send(own_read(id, 0), None));
    assert!(pipeline.flush(Duration::from_secs(5)));
    assert!(executor.wait_idle(Duration::from_secs(5)));
    let stats = pipeline.stats();
    assert_eq!((stats.resolved, stats.requests), (1, 1), "{stats:?}");
    let up = cache::wait_resident(&file, &[PageRange::new(1, 9)], Duration::from_secs(5)).expect("mincore");
    assert_eq!(up, 8);
    // Without a resolver the same event requests nothing.
    let plain = Pipeline::start(Arc::clone(&executor), vec![Box::new(NextPage)], 1024).expect("start");
    plain.sender().send(own_read(id, 0), None);
    assert!(plain.flush(Duration::from_secs(5)));
    assert_eq!(plain.stats().requests, 0);
    drop(held);
}

/// Records the model layouts it is told about.
struct Layouts(Arc<std::sync::Mutex<Vec<Vec<ByteRange>>>>);

impl Policy for Layouts {
    fn name(&self) -> &str {
        "layouts"
    }
    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::TensorLayout, EventKind::PageAccess])
    }
    fn on_event(&mut self, event: &Event, _: &mut PolicyContext<'_>) {
        if let Event::TensorLayout { ranges, .. } = event {
            self.0.lock().expect("lock").push(ranges.to_vec());
        }
    }
}

/// `path` opened (held, so the resolver finds it among this process's
/// descriptors) and its identity.
fn held_file(path: &std::path::Path) -> (std::fs::File, predictio::FileId) {
    use std::os::unix::fs::MetadataExt;
    let held = std::fs::File::open(path).expect("open");
    let meta = held.metadata().expect("stat");
    let id = predictio::FileId { dev: meta.dev(), ino: meta.ino() };
    (held, id)
}

/// A pipeline with a resolver whose only policy records the layouts it gets.
fn layouts_pipeline(seen: &Arc<std::sync::Mutex<Vec<Vec<ByteRange>>>>) -> Pipeline {
    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let policies: Vec<Box<dyn Policy>> = vec![Box::new(Layouts(Arc::clone(seen)))];
    Pipeline::start_with(executor, policies, 1024, Some(predictio::resolve::ResolverConfig::default())).expect("start")
}

/// A read of one page by this process, as kernel observation reports it.
fn own_read(file: predictio::FileId, page: u64) -> Event {
    Event::PageAccess {
        pid: std::process::id(),
        file,
        pages: PageRange::page(page),
        kind: AccessKind::Read,
        time_ns: 0,
    }
}

#[test]
fn an_observed_model_file_is_recognised_and_its_layout_dispatched_once() {
    let dir = tempfile::Builder::new().prefix("predictio-model").tempdir_in("/var/tmp").expect("temp dir");
    let path = dir.path().join("m.safetensors");
    let header = br#"{"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[7u8; 32]);
    std::fs::write(&path, &bytes).expect("write");
    let (held, id) = held_file(&path);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let pipeline = layouts_pipeline(&seen);
    for page in 0..3 {
        pipeline.sender().send(own_read(id, page), None);
    }
    assert!(pipeline.flush(Duration::from_secs(5)));
    let layouts = seen.lock().expect("lock").clone();
    assert_eq!(layouts.len(), 1, "one layout for one file: {layouts:?}");
    let data = 8 + header.len() as u64;
    let total: u64 = layouts[0].iter().map(|r| r.len).sum();
    assert_eq!(total, 32, "both tensors: {layouts:?}");
    assert!(layouts[0].iter().all(|r| r.offset >= data), "ranges are absolute, past the header");
    assert_eq!(pipeline.stats().models_detected, 1);
    drop(held);
}

/// Regression: the detector planned every model in compute order, so a
/// `--no-mmap` llama.cpp loader, which reads the output projection (at the end
/// of the file and of the compute order) right after the embeddings, seemed
/// to have reached the end of the plan and nothing more was prefetched. GGUF
/// files are now planned in llama.cpp's order: embeddings, output, layers.
#[test]
fn an_observed_gguf_file_is_planned_in_llama_cpp_order() {
    use predictio::model::writer::{GgufTensor, GgufWriter};
    let dir = tempfile::Builder::new().prefix("predictio-model").tempdir_in("/var/tmp").expect("temp dir");
    let path = dir.path().join("m.gguf");
    let mut writer = GgufWriter::new(3, 32);
    for (name, dims) in [
        ("token_embd.weight", vec![64u64, 16]),
        ("blk.0.attn_q.weight", vec![64, 64]),
        ("blk.1.attn_q.weight", vec![64, 64]),
        ("output_norm.weight", vec![64]),
        ("output.weight", vec![64, 16]),
    ] {
        writer.tensor(GgufTensor::new(name, &dims, 0).expect("tensor"));
    }
    let mut bytes = Vec::new();
    let (_, offsets) = writer.write(&mut bytes, |i, _, chunk| chunk.fill(i as u8)).expect("write");
    std::fs::write(&path, &bytes).expect("write");
    let (held, id) = held_file(&path);
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let pipeline = layouts_pipeline(&seen);
    pipeline.sender().send(own_read(id, 0), None);
    assert!(pipeline.flush(Duration::from_secs(5)));
    let layouts = seen.lock().expect("lock").clone();
    assert_eq!(layouts.len(), 1, "one layout: {layouts:?}");
    let order: Vec<(u64, u64)> = layouts[0].iter().map(|r| (r.offset, r.offset + r.len)).collect();
    let at = |offset: u64| order.iter().position(|(b, e)| (*b..*e).contains(&offset)).expect("tensor in the plan");
    let (embd, blk0, blk1, out) = (at(offsets[0]), at(offsets[1]), at(offsets[2]), at(offsets[4]));
    assert!(embd < out && out < blk0 && blk0 <= blk1, "embeddings, output, layers: {order:?} vs {offsets:?}");
    drop(held);
}

/// A Parquet file read as a query reads it — footer first, then one column
/// row group after row group — through the pipeline with the `columns`
/// policy and the real executor: the footer is found among the file's
/// cached pages, and that column's chunks in the row groups ahead become
/// resident while the other columns' stay on disk.
#[test]
fn a_parquet_readers_next_row_groups_of_its_column_are_fetched_and_no_others() {
    const CHUNK: u64 = 64 * PAGE_SIZE;
    let (groups, columns) = (12u64, 3u64);
    let offset = |g: u64, c: u64| PAGE_SIZE + (g * columns + c) * CHUNK;
    let layout: Vec<Vec<(u64, u64)>> =
        (0..groups).map(|g| (0..columns).map(|c| (offset(g, c), CHUNK)).collect()).collect();
    let (tail, file_len) = predictio::parquet::encode_file(&layout, 1000, groups * columns * CHUNK + PAGE_SIZE - 4);
    let dir = tempfile::Builder::new().prefix("predictio-parquet").tempdir_in("/var/tmp").expect("temp dir");
    let path = dir.path().join("t.parquet");
    let mut bytes = b"PAR1".to_vec();
    bytes.resize((file_len - tail.len() as u64) as usize, 9);
    bytes.extend_from_slice(&tail);
    std::fs::write(&path, &bytes).expect("write");
    let file = FileRef::open(&path).expect("open");
    cache::evict(&file).expect("evict");
    let (held, id) = held_file(&path);

    let executor = Arc::new(Executor::new(ExecutorConfig::default()).expect("executor"));
    let policy = predictio::policies::by_name("columns").expect("columns policy");
    let pipeline =
        Pipeline::start_with(executor, vec![policy], 1024, Some(predictio::resolve::ResolverConfig::default()))
            .expect("start");
    // The reader reads the footer (cached now), then column 1 of row group 0.
    let mut footer = vec![0u8; tail.len()];
    std::os::unix::fs::FileExt::read_exact_at(&held, &mut footer, file_len - tail.len() as u64).expect("read footer");
    let last = (file_len - 1) / PAGE_SIZE;
    pipeline.sender().send(own_read(id, last), None);
    let mut chunk = vec![0u8; CHUNK as usize];
    std::os::unix::fs::FileExt::read_exact_at(&held, &mut chunk, offset(0, 1)).expect("read chunk");
    let first = offset(0, 1) / PAGE_SIZE;
    let event = Event::PageAccess {
        pid: std::process::id(),
        file: id,
        pages: PageRange::new(first, first + CHUNK / PAGE_SIZE),
        kind: AccessKind::Read,
        time_ns: 0,
    };
    pipeline.sender().send(event, None);
    assert!(pipeline.flush(Duration::from_secs(5)));
    assert_eq!(pipeline.stats().models_detected, 1, "the footer was found");

    let pages = |g: u64, c: u64| PageRange::new(offset(g, c) / PAGE_SIZE, (offset(g, c) + CHUNK) / PAGE_SIZE);
    let ahead: Vec<PageRange> = (1..groups).map(|g| pages(g, 1)).collect();
    let want: u64 = ahead.iter().map(PageRange::len).sum();
    assert_eq!(cache::wait_resident(&file, &ahead, Duration::from_secs(10)).expect("residency"), want);
    let others: Vec<PageRange> = (1..groups).flat_map(|g| [pages(g, 0), pages(g, 2)]).collect();
    assert_eq!(cache::wait_resident(&file, &others, Duration::ZERO).expect("residency"), 0, "other columns");
    drop(held);
}
