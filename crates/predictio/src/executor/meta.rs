//! Metadata prefetch: names looked up and directories listed by a small
//! pool of executor threads, in parallel.
//!
//! A cold launch does not only read file pages: it looks names up — many
//! that do not exist (an interpreter's module search, a loader's library
//! path) — and lists directories. After `drop_caches` each of those reads a
//! directory block synchronously, one at a time. A [`MetaRequest`] names the
//! directories a launch searched (held open by whoever prepared the replay);
//! each is one job on a bounded queue, taken by one of
//! [`MetaPool::threads`] threads that lists it (`getdents64` through the
//! held descriptor, at most [`MAX_ENTRIES`] entries), which brings its blocks
//! into the cache so the program's lookups find them there. A full queue
//! drops the directory, counted; nothing is returned to anyone. The threads'
//! reads go in the real-time I/O class when allowed
//! ([`super::ExecutorConfig::meta_realtime_io`]), so that a directory block
//! a launch is about to wait for is not queued behind the replay's data.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::accounting::{Accounting, Counters};
use crate::policy::PolicyId;
use crate::request::{MetaDir, MetaLookup, MetaRequest};

/// Entries listed per directory at most.
pub const MAX_ENTRIES: u64 = 1 << 16;

/// Names one job looks up at most: a directory with many lookups (an
/// interpreter's module directory) is spread over the threads.
pub const LOOKUPS_PER_JOB: usize = 32;

/// The real-time I/O level of the metadata threads: the class's middle
/// (mq-deadline orders by class only).
const REALTIME_LEVEL: u8 = 4;

/// One job of the queue.
enum Job {
    /// List the directory.
    List(MetaDir),
    /// Look `names[range]` up in `dir`.
    Lookup(MetaDir, Arc<[Box<str>]>, std::ops::Range<usize>),
}

struct Shared {
    queue: ArrayQueue<(Job, PolicyId)>,
    accounting: Arc<Accounting>,
    stop: AtomicBool,
    submitted: AtomicU64,
    processed: AtomicU64,
}

/// The metadata threads (see the module docs).
pub struct MetaPool {
    shared: Arc<Shared>,
    workers: Vec<(JoinHandle<()>, Thread)>,
}

impl std::fmt::Debug for MetaPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaPool").field("threads", &self.workers.len()).finish()
    }
}

impl MetaPool {
    /// Starts `threads` threads over a queue of `capacity` directories,
    /// their I/O in the real-time class if `realtime` (and allowed).
    pub fn new(threads: usize, capacity: usize, realtime: bool, accounting: Arc<Accounting>) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity.max(1)),
            accounting,
            stop: AtomicBool::new(false),
            submitted: AtomicU64::new(0),
            processed: AtomicU64::new(0),
        });
        let mut workers = Vec::new();
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let handle =
                thread::Builder::new().name(format!("predictio-meta{i}")).spawn(move || worker(&shared, realtime))?;
            let t = handle.thread().clone();
            workers.push((handle, t));
        }
        Ok(Self { shared, workers })
    }

    /// Threads listing directories.
    pub fn threads(&self) -> usize {
        self.workers.len()
    }

    /// Queues every lookup and directory of `request`; never blocks. Jobs
    /// beyond the queue's room are dropped and counted. Returns the jobs
    /// queued.
    pub fn submit(&self, request: MetaRequest) -> usize {
        let origin = request.origin;
        let mut queued = 0;
        let mut dropped = 0;
        let mut names_dropped = 0;
        let lookups = request.lookups.iter().flat_map(|MetaLookup { dir, names }| {
            (0..names.len()).step_by(LOOKUPS_PER_JOB).map(move |start| {
                Job::Lookup(dir.clone(), Arc::clone(names), start..(start + LOOKUPS_PER_JOB).min(names.len()))
            })
        });
        let dirs = request.dirs.len() as u64;
        for job in lookups.chain(request.dirs.into_iter().map(Job::List)) {
            let refused =
                if self.workers.is_empty() { Err((job, origin)) } else { self.shared.queue.push((job, origin)) };
            match refused {
                Ok(()) => queued += 1,
                Err((Job::List(_), _)) => dropped += 1,
                Err((Job::Lookup(_, _, range), _)) => names_dropped += range.len() as u64,
            }
        }
        let d = Counters {
            meta_dirs_requested: dirs,
            meta_dirs_dropped: dropped,
            meta_lookups_dropped: names_dropped,
            ..Counters::default()
        };
        self.shared.accounting.record(origin, None, &d);
        self.shared.submitted.fetch_add(queued as u64, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        for (_, t) in self.workers.iter().take(queued) {
            t.unpark();
        }
        queued
    }

    /// True when every queued directory was listed.
    pub fn is_idle(&self) -> bool {
        self.shared.processed.load(Ordering::SeqCst) == self.shared.submitted.load(Ordering::SeqCst)
    }
}

impl Drop for MetaPool {
    fn drop(&mut self) {
        super::stop_threads(&self.shared.stop, self.workers.drain(..).map(|(handle, _)| handle), "metadata");
    }
}

fn worker(shared: &Shared, realtime: bool) {
    if realtime && let Err(err) = crate::sys::set_thread_io_realtime(REALTIME_LEVEL) {
        tracing::debug!(%err, "metadata thread stays in its I/O class");
    }
    loop {
        while let Some((job, origin)) = shared.queue.pop() {
            let d = match job {
                Job::List(dir) => match crate::sys::list_dir(dir.as_fd(), MAX_ENTRIES) {
                    Ok(entries) => Counters { meta_dirs_listed: 1, meta_entries: entries, ..Counters::default() },
                    Err(err) => {
                        tracing::debug!(dir = dir.path(), %err, "listing a directory failed");
                        Counters { errors: 1, ..Counters::default() }
                    }
                },
                Job::Lookup(dir, names, range) => {
                    // A name that does not exist is what the launch looked
                    // up too: the answer is not the point, the blocks are.
                    for name in &names[range.clone()] {
                        crate::sys::look_up(dir.as_fd(), name);
                    }
                    Counters { meta_lookups: range.len() as u64, ..Counters::default() }
                }
            };
            shared.accounting.record(origin, None, &d);
            shared.processed.fetch_add(1, Ordering::SeqCst);
        }
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        thread::park_timeout(Duration::from_millis(250));
    }
}
