//! The event pipeline: source threads → a bounded queue → one dispatcher
//! thread → policies → the executor.
//!
//! Sources (eBPF observation, the hint socket, library calls) hold an
//! [`EventSender`]; sending never blocks: a full queue drops the event and
//! counts it. The dispatcher thread owns the [`Runtime`]: it holds the
//! descriptors that arrive with hints, dispatches each event to the policies
//! subscribed to its kind, and feeds observed accesses and evictions to the
//! executor's hit and waste accounting.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use crossbeam_queue::ArrayQueue;

use crate::event::{Event, EventKind, EventKinds};
use crate::executor::Executor;
use crate::file::FileRef;
use crate::page::PageRange;
use crate::policy::Policy;
use crate::resolve::{Resolver, ResolverConfig};
use crate::runtime::{Runtime, RuntimeStats};

/// One item on the queue: an event, with the descriptor of its file when the
/// source has one (hints always do; kernel observation does not).
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The event.
    pub event: Event,
    /// A descriptor for the event's file, to be held by the runtime.
    pub file: Option<FileRef>,
}

/// Counters of the pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PipelineStats {
    /// Events accepted onto the queue.
    pub queued: u64,
    /// Events dropped because the queue was full.
    pub dropped: u64,
    /// Events dispatched.
    pub dispatched: u64,
    /// Requests policies made.
    pub requests: u64,
    /// Requests the executor refused (full, nonsense).
    pub refused: u64,
    /// Observed files resolved to a held descriptor (see [`crate::resolve`]).
    #[serde(default)]
    pub resolved: u64,
    /// Lookups of observed files that found no descriptor (or were skipped
    /// by the resolver's bounds).
    #[serde(default)]
    pub unresolved: u64,
    /// Model files (GGUF, safetensors) recognised among held files, whose
    /// layout was handed to the policies as a `TensorLayout` event.
    #[serde(default)]
    pub models_detected: u64,
    /// Events of kinds nobody uses, let go without queueing.
    #[serde(default)]
    pub filtered: u64,
    /// B-tree descents of unmodified programs, seen by parsing the database
    /// pages they read (see [`crate::btree::observe`]).
    #[serde(default)]
    pub tree_descents: u64,
}

#[derive(Default)]
struct Counters {
    queued: AtomicU64,
    dropped: AtomicU64,
    dispatched: AtomicU64,
    requests: AtomicU64,
    refused: AtomicU64,
    resolved: AtomicU64,
    unresolved: AtomicU64,
    models_detected: AtomicU64,
    filtered: AtomicU64,
    tree_descents: AtomicU64,
}

struct Shared {
    queue: ArrayQueue<Incoming>,
    /// Kinds a policy or the accounting uses; others are not queued.
    wanted: EventKinds,
    counters: Counters,
    stop: AtomicBool,
}

/// A cheap, cloneable, non-blocking handle for sources.
#[derive(Clone)]
pub struct EventSender {
    shared: Arc<Shared>,
    dispatcher: thread::Thread,
}

impl std::fmt::Debug for EventSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSender").finish_non_exhaustive()
    }
}

impl EventSender {
    /// Queues an event; false (and counted) when the queue is full or the
    /// pipeline stopped. Never blocks. Events of a kind nobody uses (no
    /// policy wants it and the accounting does not need it) are let go at
    /// once and counted as filtered — e.g. every page-cache miss of a cold
    /// read when no policy learns from misses.
    pub fn send(&self, event: Event, file: Option<FileRef>) -> bool {
        if !self.shared.wanted.contains(event.kind()) {
            self.shared.counters.filtered.fetch_add(1, Ordering::Relaxed);
            return true;
        }
        if self.shared.stop.load(Ordering::Relaxed) || self.shared.queue.push(Incoming { event, file }).is_err() {
            self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.shared.counters.queued.fetch_add(1, Ordering::Relaxed);
        self.dispatcher.unpark();
        true
    }
}

/// The running pipeline. Dropping it stops the dispatcher.
pub struct Pipeline {
    shared: Arc<Shared>,
    executor: Arc<Executor>,
    dispatcher: Option<JoinHandle<()>>,
    sender: EventSender,
    policies: Vec<String>,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline").field("policies", &self.policies).finish_non_exhaustive()
    }
}

impl Pipeline {
    /// Starts a dispatcher thread running `policies` over `executor`, with a
    /// queue of `capacity` events.
    pub fn start(executor: Arc<Executor>, policies: Vec<Box<dyn Policy>>, capacity: usize) -> std::io::Result<Self> {
        Self::start_with(executor, policies, capacity, None)
    }

    /// Like [`Self::start`], and when `resolve` is set, finds descriptors for
    /// files that kernel observation reports (through the process that
    /// touched them, see [`crate::resolve`]) so that policies can request
    /// them. For the daemon and `predictio run`.
    pub fn start_with(
        executor: Arc<Executor>,
        policies: Vec<Box<dyn Policy>>,
        capacity: usize,
        resolve: Option<ResolverConfig>,
    ) -> std::io::Result<Self> {
        // The accounting needs accesses (hits) and evictions (waste).
        let wanted = policies
            .iter()
            .fold(EventKinds::of(&[EventKind::PageAccess, EventKind::PageEvict]), |k, p| k.with(p.interests()));
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(capacity.max(1)),
            wanted,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
        });
        let names = policies.iter().map(|p| p.name().to_owned()).collect();
        let mut runtime = Runtime::new(Arc::clone(&executor));
        for policy in policies {
            runtime.add_policy(policy);
        }
        let worker_shared = Arc::clone(&shared);
        let worker_executor = Arc::clone(&executor);
        let dispatcher = thread::Builder::new()
            .name("predictio-dispatch".into())
            .spawn(move || dispatch_loop(worker_shared, runtime, worker_executor, resolve.map(Resolver::new)))?;
        let sender = EventSender { shared: Arc::clone(&shared), dispatcher: dispatcher.thread().clone() };
        Ok(Self { shared, executor, dispatcher: Some(dispatcher), sender, policies: names })
    }

    /// A handle for a source.
    pub fn sender(&self) -> EventSender {
        self.sender.clone()
    }

    /// The executor.
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Names of the running policies.
    pub fn policies(&self) -> &[String] {
        &self.policies
    }

    /// The pipeline's counters.
    pub fn stats(&self) -> PipelineStats {
        let c = &self.shared.counters;
        PipelineStats {
            queued: c.queued.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            dispatched: c.dispatched.load(Ordering::Relaxed),
            requests: c.requests.load(Ordering::Relaxed),
            refused: c.refused.load(Ordering::Relaxed),
            resolved: c.resolved.load(Ordering::Relaxed),
            unresolved: c.unresolved.load(Ordering::Relaxed),
            models_detected: c.models_detected.load(Ordering::Relaxed),
            filtered: c.filtered.load(Ordering::Relaxed),
            tree_descents: c.tree_descents.load(Ordering::Relaxed),
        }
    }

    /// Waits until the queue is empty (or `timeout` passes).
    pub fn flush(&self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            let c = &self.shared.counters;
            if self.shared.queue.is_empty() && c.dispatched.load(Ordering::SeqCst) >= c.queued.load(Ordering::SeqCst) {
                return true;
            }
            thread::sleep(Duration::from_micros(200));
        }
        false
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        crate::executor::stop_threads(&self.shared.stop, self.dispatcher.take(), "dispatcher");
    }
}

fn feed_accounting(executor: &Executor, event: &Event) {
    match event {
        Event::PageAccess { file, pages, .. } => executor.note_access(*file, *pages),
        Event::PageEvict { file, page, .. } => executor.note_eviction(*file, PageRange::page(*page)),
        _ => {}
    }
}

/// The process and file of an observed event, when it has both.
fn observed(event: &Event) -> Option<(u32, crate::file::FileId)> {
    match event {
        Event::PageAccess { pid, file, .. } | Event::PageMiss { pid, file, .. } | Event::FileOpen { pid, file, .. } => {
            Some((*pid, *file))
        }
        Event::Exec { pid, exe, .. } => Some((*pid, *exe)),
        _ => None,
    }
}

/// Files checked for a model header before the set is cleared.
const MAX_CHECKED_FILES: usize = 1 << 16;

/// Recognises model files among the files the runtime comes to hold and
/// describes their layout to the policies: the runtime reads a model's
/// *header* once per file, and only once the file's first page is already in
/// the page cache (the program read it) — so looking never causes I/O of its
/// own and never makes a page resident that the program did not ask for. It
/// never reads tensor data on anyone's behalf.
#[derive(Default)]
struct ModelDetector {
    checked: std::collections::HashSet<crate::file::FileId>,
    /// Files whose first page was not resident yet, and when to look again.
    later: HashMap<crate::file::FileId, std::time::Instant>,
}

impl ModelDetector {
    /// A `TensorLayout` event for `file` if it is a model file not seen
    /// before.
    fn detect(&mut self, file: &crate::file::FileRef) -> Option<Event> {
        use std::os::unix::fs::FileExt;
        if self.checked.len() + self.later.len() >= MAX_CHECKED_FILES {
            self.checked.clear();
            self.later.clear();
        }
        let id = file.id();
        if self.checked.contains(&id) {
            return None;
        }
        let now = std::time::Instant::now();
        if self.later.get(&id).is_some_and(|at| now < *at) {
            return None;
        }
        use std::os::fd::AsFd;
        match crate::sys::cachestat(file.as_fd(), 0, crate::page::PAGE_SIZE) {
            Ok(stat) if stat.nr_cache > 0 => {}
            _ => {
                self.later.insert(id, now + Duration::from_secs(1));
                return None;
            }
        }
        self.later.remove(&id);
        self.checked.insert(id);
        let mut first = [0u8; 16];
        let n = file.file().read_at(&mut first, 0).ok()?;
        crate::model::detect(&first[..n])?;
        let layout = match crate::model::ModelLayout::read(file.file()) {
            Ok(layout) => layout,
            Err(err) => {
                tracing::debug!(file = %file.id(), %err, "model header not parsed");
                return None;
            }
        };
        // GGUF is llama.cpp's format: with or without mmap it walks tensors
        // in the order it creates them (embeddings, output, then layers;
        // `--no-mmap` reads them, mmap copies the repacked ones), and the
        // first token's compute then follows layers in that same order.
        let order = match layout.format {
            crate::model::ModelFormat::Gguf { .. } => crate::model::LoadOrder::LlamaCppRead,
            _ => crate::model::LoadOrder::Compute,
        };
        let ranges: Vec<crate::page::ByteRange> =
            layout.plan(order).iter().map(|r| crate::page::ByteRange::new(r.offset, r.len)).collect();
        Some(Event::TensorLayout { file: file.id(), ranges: ranges.into() })
    }
}

fn dispatch_loop(shared: Arc<Shared>, mut runtime: Runtime, executor: Arc<Executor>, mut resolver: Option<Resolver>) {
    let mut models = ModelDetector::default();
    let mut databases = crate::btree::observe::DbWatcher::new();
    let mut descents = Vec::new();
    let mut last = RuntimeStats::default();
    loop {
        let mut any = false;
        while let Some(incoming) = shared.queue.pop() {
            any = true;
            let newly_held = if let Some(file) = incoming.file {
                Some(file)
            } else if let Some(resolver) = resolver.as_mut()
                && let Some((pid, id)) = observed(&incoming.event)
                && (runtime.wants_files_of(incoming.event.kind())
                    || incoming.event.kind() == EventKind::PageAccess && runtime.wants(EventKind::TreeChildEnter))
                && runtime.files().get(id).is_none()
            {
                let found = resolver.resolve(pid, id);
                let counter = if found.is_some() { &shared.counters.resolved } else { &shared.counters.unresolved };
                counter.fetch_add(1, Ordering::Relaxed);
                found
            } else {
                None
            };
            if let Some(file) = newly_held {
                if runtime.wants(crate::event::EventKind::TensorLayout)
                    && let Some(layout) = models.detect(&file)
                {
                    runtime.hold_file(file.clone());
                    shared.counters.models_detected.fetch_add(1, Ordering::Relaxed);
                    runtime.dispatch(&layout);
                }
                runtime.hold_file(file);
            }
            feed_accounting(&executor, &incoming.event);
            // Unmodified B-tree programs: parse the database pages they read.
            if let Event::PageAccess { file, pages, .. } = &incoming.event
                && runtime.wants(EventKind::TreeChildEnter)
                && let Some(held) = runtime.files().get(*file)
            {
                databases.on_access(held, *pages, &mut descents);
                shared.counters.tree_descents.fetch_add(descents.len() as u64, Ordering::Relaxed);
                for descent in descents.drain(..) {
                    runtime.dispatch(&descent);
                }
            }
            runtime.dispatch(&incoming.event);
            shared.counters.dispatched.fetch_add(1, Ordering::SeqCst);
        }
        if any {
            let now = runtime.stats();
            shared.counters.requests.fetch_add(now.requests - last.requests, Ordering::Relaxed);
            shared.counters.refused.fetch_add(now.refused - last.refused, Ordering::Relaxed);
            last = now;
        }
        if shared.stop.load(Ordering::SeqCst) && shared.queue.is_empty() {
            break;
        }
        if !any {
            thread::park_timeout(Duration::from_millis(50));
        }
    }
}
