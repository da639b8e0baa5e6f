//! The stream path: long runs of pages read front to back through the
//! kernel's own readahead, for requests marked
//! [`Request::sequential`](crate::request::Request::sequential).
//!
//! `fadvise(WILLNEED)` (and `readahead(2)`, `madvise(WILLNEED)`, and any
//! read on a descriptor marked `POSIX_FADV_RANDOM`, as the runtime's own
//! are) fills the page cache with single pages. A sequential read on a
//! descriptor in normal readahead mode ramps the kernel's readahead up to
//! large folios (up to 2 MiB here), which a program then maps with a fraction
//! of the faults and copies from at about twice the speed: on this machine a
//! 2 GiB model cached by `fadvise` loads under llama.cpp in a median 2.1 s
//! (mmap) and 4–5 s (no mmap), cached by one sequential read in a median
//! 1.4 s and 2.2–2.9 s (docs/notes/2026-12-06-model-loading-and-readers-findings.md).
//! Bulk data a program will map or read whole (model
//! tensors, with `TensorConfig::stream`; off by default, as a whole
//! `llm-load` run with it was slower than with `fadvise`) can therefore be
//! streamed: one thread walks each run with
//! `sendfile(2)` to `/dev/null` — a read through the page cache that copies
//! nothing — on its own open file description of the file (reopened through
//! `/proc/self/fd`), in steps of [`STREAM_STEP`] bytes, while the kernel's
//! asynchronous readahead keeps the device busy ahead of it.
//!
//! Bounds: at most `max_queued_pages` pages wait for the thread; a push
//! beyond is refused (the engine drops and counts it). Reopened descriptions
//! are kept for at most [`MAX_OPEN`] files. A file that cannot be reopened
//! or streamed falls back to `fadvise(WILLNEED)` on the held descriptor, so
//! a request is never silently lost. Nothing here changes what a program
//! reads.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle, Thread};

use crossbeam_queue::ArrayQueue;

use crate::accounting::{Accounting, Counters};
use crate::file::{FileId, FileRef};
use crate::page::PageRange;
use crate::policy::PolicyId;

/// Bytes one `sendfile` call asks for (the thread checks for shutdown
/// between calls).
pub const STREAM_STEP: usize = 8 << 20;
/// Reopened files kept before the set is cleared.
pub const MAX_OPEN: usize = 16;
/// Runs waiting for the thread, at most.
const QUEUE_RUNS: usize = 4096;

struct Run {
    file: FileRef,
    range: PageRange,
    origin: PolicyId,
}

struct Shared {
    queue: ArrayQueue<Run>,
    queued_pages: AtomicU64,
    max_queued_pages: u64,
    busy: AtomicBool,
    parking: super::Parking,
    stop: AtomicBool,
    accounting: Arc<Accounting>,
}

/// The stream thread and its bounded queue.
pub struct Streamer {
    shared: Arc<Shared>,
    worker: Option<JoinHandle<()>>,
    thread: Thread,
}

impl std::fmt::Debug for Streamer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Streamer")
            .field("queued_pages", &self.shared.queued_pages.load(Ordering::Relaxed))
            .field("max_queued_pages", &self.shared.max_queued_pages)
            .finish()
    }
}

impl Streamer {
    /// Starts the stream thread; at most `max_queued_pages` pages wait for it.
    pub fn new(max_queued_pages: u64, accounting: Arc<Accounting>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(QUEUE_RUNS),
            queued_pages: AtomicU64::new(0),
            max_queued_pages,
            busy: AtomicBool::new(false),
            parking: super::Parking::default(),
            stop: AtomicBool::new(false),
            accounting,
        });
        let worker_shared = Arc::clone(&shared);
        let worker =
            thread::Builder::new().name("predictio-stream".into()).spawn(move || stream_loop(&worker_shared))?;
        let thread = worker.thread().clone();
        Ok(Self { shared, worker: Some(worker), thread })
    }

    /// Queues `range` of `file` to be streamed; never blocks. False (nothing
    /// queued) when the queue is full in runs or pages.
    pub fn push(&self, file: &FileRef, range: PageRange, origin: PolicyId) -> bool {
        let pages = range.len();
        let queued = self.shared.queued_pages.fetch_add(pages, Ordering::SeqCst);
        if queued + pages > self.shared.max_queued_pages
            || self.shared.queue.push(Run { file: file.clone(), range, origin }).is_err()
        {
            self.shared.queued_pages.fetch_sub(pages, Ordering::SeqCst);
            return false;
        }
        self.shared.parking.wake(&self.thread);
        true
    }

    /// True when nothing is queued or being streamed.
    pub fn is_idle(&self) -> bool {
        self.shared.queue.is_empty() && !self.shared.busy.load(Ordering::SeqCst)
    }
}

impl Drop for Streamer {
    fn drop(&mut self) {
        super::stop_threads(&self.shared.stop, self.worker.take(), "stream");
    }
}

fn stream_loop(shared: &Shared) {
    let null = match File::options().write(true).open("/dev/null") {
        Ok(null) => Some(null),
        Err(err) => {
            tracing::warn!(%err, "cannot open /dev/null; streamed requests fall back to fadvise");
            None
        }
    };
    let mut open: HashMap<FileId, Option<File>> = HashMap::new();
    loop {
        shared.busy.store(true, Ordering::SeqCst);
        while let Some(run) = shared.queue.pop() {
            if !shared.stop.load(Ordering::Relaxed) {
                stream_run(&run, null.as_ref(), &mut open, shared);
            }
            shared.queued_pages.fetch_sub(run.range.len(), Ordering::SeqCst);
        }
        shared.busy.store(false, Ordering::SeqCst);
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        shared.parking.park_unless(None, || !shared.queue.is_empty() || shared.stop.load(Ordering::SeqCst));
    }
}

/// Streams one run; on any failure, advises the rest with `fadvise`.
fn stream_run(run: &Run, null: Option<&File>, open: &mut HashMap<FileId, Option<File>>, shared: &Shared) {
    let id = run.file.id();
    if !open.contains_key(&id) {
        if open.len() >= MAX_OPEN {
            open.clear();
        }
        // A description of our own in normal readahead mode: the held one is
        // marked random (see `FileRef::open`) or belongs to the program.
        let reopened = File::open(crate::sys::fd_path(run.file.as_fd()))
            .inspect_err(|err| tracing::debug!(file = %id, %err, "cannot reopen for streaming; using fadvise"))
            .ok();
        open.insert(id, reopened);
    }
    let mut at = run.range.byte_offset();
    let end = at + run.range.byte_len();
    if let (Some(null), Some(Some(own))) = (null, open.get(&id)) {
        while at < end && !shared.stop.load(Ordering::Relaxed) {
            let step = usize::try_from(end - at).unwrap_or(STREAM_STEP).min(STREAM_STEP);
            match crate::sys::sendfile_at(null.as_fd(), own.as_fd(), at, step) {
                Ok(0) => return, // end of file
                Ok(sent) => at += sent as u64,
                Err(err) => {
                    tracing::debug!(file = %id, %err, "sendfile failed; using fadvise for the rest");
                    let d = Counters { errors: 1, ..Counters::default() };
                    shared.accounting.record(run.origin, Some(id), &d);
                    break;
                }
            }
        }
    }
    if at < end
        && !shared.stop.load(Ordering::Relaxed)
        && crate::sys::fadvise(run.file.as_fd(), at, end - at, crate::sys::Advice::WillNeed).is_err()
    {
        let d = Counters { errors: 1, ..Counters::default() };
        shared.accounting.record(run.origin, Some(id), &d);
    }
}
