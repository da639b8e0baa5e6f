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
//! reads stay in the best-effort class, the program's own, unless
//! [`super::ExecutorConfig::meta_realtime_io`] says otherwise (mq-deadline
//! holds a program's best-effort reads back while a real-time one is in
//! flight).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

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

/// Files of one exec resolved at most: the program, up to
/// [`crate::launch::command::MAX_INTERPRETERS`] `#!` interpreters, and the
/// dynamic loader.
const MAX_EXEC_CHAIN: usize = 6;

/// Holds the executor's data reads back while execs are being resolved
/// ([`MetaRequest::execs`]), for at most
/// [`super::ExecutorConfig::exec_gate_max`] from when the first of them was
/// queued. The device serves reads in the order they
/// reach it: once a replay's data window is in its queue, a directory
/// block or an inode the exec waits for, even in the real-time class,
/// waits behind a few MiB of data — 1.5–4 ms per lookup, five or so in a
/// row before the program runs. The other metadata is not held: holding
/// it too measured worse for gdb, whose own lookups it serves
/// (`docs/notes/2026-12-06-launch-and-executor-findings.md`). The wait is the executor worker's, never a
/// submitter's.
#[derive(Debug)]
pub struct ExecGate {
    /// Execs queued or being resolved, and since when the gate is closed.
    state: Mutex<(u64, Option<Instant>)>,
    opened: Condvar,
    /// How long the gate holds data back at most.
    max: Duration,
}

impl ExecGate {
    /// An open gate that, once closed, holds data back for `max` at most.
    pub fn new(max: Duration) -> Self {
        Self { state: Mutex::new((0, None)), opened: Condvar::new(), max }
    }

    pub(super) fn close(&self, execs: u64) {
        if execs == 0 {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.0 == 0 {
            state.1 = Some(Instant::now());
        }
        state.0 += execs;
    }

    fn done(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.0 = state.0.saturating_sub(1);
        if state.0 == 0 {
            state.1 = None;
            self.opened.notify_all();
        }
    }

    /// Waits until no exec is being resolved, or until its bound after the
    /// gate closed. Returns at once when it is open.
    pub fn wait(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        while let (1.., Some(since)) = *state {
            let Some(left) = (since + self.max).checked_duration_since(Instant::now()) else { return };
            state = self.opened.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// Whether data reads would wait now.
    pub fn is_closed(&self) -> bool {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        matches!(*state, (1.., Some(since)) if since.elapsed() < self.max)
    }
}

/// Zeroed pages ([`crate::exec_image::elf_zeroed_offsets`]) read per file
/// at most.
const MAX_ZEROED: usize = 4;

/// One job of the queue.
enum Job {
    /// Resolve the exec of a program at this path.
    Exec(Arc<str>),
    /// List the directory.
    List(MetaDir),
    /// Look `names[range]` up in `dir`.
    Lookup(MetaDir, Arc<[Box<str>]>, std::ops::Range<usize>),
}

struct Shared {
    queue: ArrayQueue<(Job, PolicyId)>,
    accounting: Arc<Accounting>,
    gate: Arc<ExecGate>,
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
    /// their I/O in the real-time class if `realtime` (and allowed), with a
    /// gate that holds data back for `gate_max` at most.
    pub fn new(
        threads: usize,
        capacity: usize,
        realtime: bool,
        gate_max: Duration,
        accounting: Arc<Accounting>,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity.max(1)),
            accounting,
            gate: Arc::new(ExecGate::new(gate_max)),
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

    /// The gate that holds data reads back while execs are resolved.
    pub fn gate(&self) -> &Arc<ExecGate> {
        &self.shared.gate
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
        // Closed before the jobs are queued, so that none is done first.
        self.shared.gate.close(request.execs.len() as u64);
        let execs = request.execs.into_iter().map(Job::Exec);
        for job in execs.chain(lookups).chain(request.dirs.into_iter().map(Job::List)) {
            let refused =
                if self.workers.is_empty() { Err((job, origin)) } else { self.shared.queue.push((job, origin)) };
            match refused {
                Ok(()) => queued += 1,
                Err((Job::List(_), _)) => dropped += 1,
                Err((Job::Exec(_), _)) => {
                    names_dropped += 1;
                    self.shared.gate.done();
                }
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

/// Resolves an exec of the program at `path` (absolute) as the kernel will:
/// opens the path (every component and symbolic link looked up), reads the
/// first page of the file it names and the pages its loader will zero
/// ([`crate::exec_image::elf_zeroed_offsets`]), and goes on with the
/// interpreter that page names ([`crate::exec_image::interpreter`]), at
/// most [`MAX_EXEC_CHAIN`] files. Opens only to look a path up (`O_PATH`: no
/// FIFO or device is ever opened for reading) and reads regular files only,
/// through `/proc/self/fd` (without `/proc`, it stops at the lookup).
/// Returns the files looked up.
fn resolve_exec(path: &std::path::Path) -> u64 {
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let mut next = Some(path.to_path_buf());
    let mut resolved = 0;
    while let Some(path) = next.take() {
        if !path.is_absolute() || resolved >= MAX_EXEC_CHAIN as u64 {
            break;
        }
        let Ok(file) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open(&path) else { break };
        resolved += 1;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            break;
        }
        let Ok(readable) = std::fs::File::open(format!("/proc/self/fd/{}", file.as_raw_fd())) else { break };
        let mut head = vec![0u8; crate::exec_image::HEAD_BYTES];
        let Ok(len) = readable.read_at(&mut head, 0) else { break };
        // The pages the exec's loader zeroes: it faults them in before the
        // program runs.
        for offset in crate::exec_image::elf_zeroed_offsets(&head[..len]).into_iter().take(MAX_ZEROED) {
            let _ = readable.read_at(&mut [0u8], offset);
        }
        next = crate::exec_image::interpreter(&head[..len])
            .map(|interpreter| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(interpreter)));
    }
    resolved
}

fn worker(shared: &Shared, realtime: bool) {
    if realtime && let Err(err) = crate::sys::set_thread_io_realtime(REALTIME_LEVEL) {
        tracing::debug!(%err, "metadata thread stays in its I/O class");
    }
    loop {
        while let Some((job, origin)) = shared.queue.pop() {
            let d = match job {
                Job::Exec(path) => {
                    let resolved = resolve_exec(std::path::Path::new(&*path));
                    shared.gate.done();
                    Counters { meta_lookups: resolved, ..Counters::default() }
                }
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
        // Until `submit` or the stop unparks it: an unpark that comes
        // between the empty queue and here is kept for this park, so no job
        // waits, and an idle worker never wakes.
        thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_holds_data_back_for_a_bounded_time() {
        const MAX: Duration = Duration::from_millis(5);
        let gate = ExecGate::new(MAX);
        assert!(!gate.is_closed());
        let start = Instant::now();
        gate.wait();
        assert!(start.elapsed() < MAX, "open: no wait");
        gate.close(2);
        assert!(gate.is_closed());
        let start = Instant::now();
        gate.wait();
        let waited = start.elapsed();
        assert!(waited >= MAX - Duration::from_millis(1) && waited < Duration::from_secs(1), "{waited:?}");
        assert!(!gate.is_closed(), "past its time the gate no longer holds anything");
        // Once every exec is done it opens (and closes afresh).
        gate.done();
        gate.done();
        gate.close(1);
        assert!(gate.is_closed());
        let opener = std::thread::spawn({
            let gate = Arc::new(gate);
            let g = Arc::clone(&gate);
            move || {
                std::thread::sleep(Duration::from_millis(1));
                g.done();
                gate
            }
        });
        let gate = opener.join().expect("joins");
        assert!(!gate.is_closed());
        let start = Instant::now();
        gate.wait();
        assert!(start.elapsed() < MAX);
    }

    #[test]
    fn an_exec_is_resolved_through_its_interpreters() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = crate::testing::executable_script(dir.path(), "tool", "#!/bin/sh -e\necho hi\n");
        // The script, /bin/sh, and the loader /bin/sh names (itself with
        // no interpreter).
        assert_eq!(resolve_exec(&script), 3);
        // Through a symbolic link the same.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&script, &link).expect("symlink");
        assert_eq!(resolve_exec(&link), 3);
        // A FIFO is looked up, never opened for reading (which would
        // block); nothing missing or relative is tried.
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo runs");
        assert!(made.success());
        assert_eq!(resolve_exec(&fifo), 1);
        assert_eq!(resolve_exec(&dir.path().join("missing")), 0);
        assert_eq!(resolve_exec(std::path::Path::new("bin/sh")), 0);
        // A script naming itself stops at the chain's bound.
        let looped = dir.path().join("loop");
        std::fs::write(&looped, format!("#!{}\n", looped.display())).expect("write");
        assert_eq!(resolve_exec(&looped), MAX_EXEC_CHAIN as u64);
    }
}
