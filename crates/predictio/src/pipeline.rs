//! The event pipeline: source threads → a bounded queue → one dispatcher
//! thread → policies → the executor.
//!
//! Sources (eBPF observation, the hint socket, library calls) hold an
//! [`EventSender`]; sending never blocks: a full queue drops the event and
//! counts it. The queue is bounded twice ([`QueueBounds`]): in events, and
//! in the payload bytes its events own ([`Event::payload_bytes`]: one hint
//! may carry a 64 KiB list, so a bound in events alone is a bound of
//! gigabytes). Hints also carry their sender's [`QueueCharge`], released
//! when the event has been dispatched, so that the hint server can hold
//! each user to a share of the queue. The dispatcher thread owns the [`Runtime`]: it holds the
//! descriptors that arrive with hints, dispatches each event to the policies
//! subscribed to its kind, and feeds observed accesses and evictions to the
//! executor's hit and waste accounting. The dispatcher parks while the queue
//! is empty, without a timeout: each push unparks it, or for a [`SendBatch`]
//! (one drain of the kernel observer) the end of the batch.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::event::{AccessKind, Event, EventKind, EventKinds};
use crate::executor::Executor;
use crate::file::FileRef;
use crate::hints::{Hint, QueueCharge};
use crate::policy::Policy;
use crate::resolve::{Resolver, ResolverConfig, Through};
use crate::runtime::{Runtime, RuntimeStats};

/// One item on the queue: an event, with the descriptor of its file when the
/// source has one (hints always do; kernel observation does not).
#[derive(Debug, Clone)]
pub struct Incoming {
    /// The event.
    pub event: Event,
    /// A descriptor for the event's file, to be held by the runtime.
    pub file: Option<FileRef>,
    /// The sender's budget this event is charged to (hints), released when
    /// the item is dropped after dispatch.
    pub charge: Option<QueueCharge>,
    /// `event.payload_bytes()`, reserved on the queue's byte bound.
    bytes: usize,
    /// The process the event's requests are for: a hint's sender (0 when
    /// it is not visible in our pid namespace), else the event's own.
    target: Option<u32>,
}

/// The queue's bounds. Sending past either drops the event and counts it;
/// it never blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueBounds {
    /// Most events queued. The queue's slots are allocated up front.
    pub events: usize,
    /// Most bytes the queued events may own beyond their slots
    /// ([`Event::payload_bytes`], summed).
    pub payload_bytes: usize,
}

/// [`QueueBounds::payload_bytes`] of [`Pipeline::start`] and
/// [`Pipeline::start_with`]: 64 MiB, a thousand times a large model's tensor
/// list, and a thousandth of what 65,536 full-datagram hints would hold.
pub const DEFAULT_QUEUE_PAYLOAD_BYTES: usize = 64 << 20;

impl QueueBounds {
    /// `events` slots and [`DEFAULT_QUEUE_PAYLOAD_BYTES`].
    pub const fn events(events: usize) -> Self {
        Self { events, payload_bytes: DEFAULT_QUEUE_PAYLOAD_BYTES }
    }
}

/// Counters of the pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PipelineStats {
    /// Events accepted onto the queue.
    pub queued: u64,
    /// Events dropped because the queue was full (in events or in bytes).
    pub dropped: u64,
    /// Of `dropped`, those dropped because the queued events' payload was
    /// at [`QueueBounds::payload_bytes`].
    #[serde(default)]
    pub dropped_for_bytes: u64,
    /// Payload bytes queued now.
    #[serde(default)]
    pub queued_bytes: u64,
    /// The most payload bytes ever queued at once (never above the bound).
    #[serde(default)]
    pub queued_bytes_peak: u64,
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
    /// Model files (GGUF, safetensors) and Parquet files recognised among
    /// held files, whose layout was handed to the policies as a
    /// `TensorLayout` or `ColumnLayout` event.
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
    dropped_for_bytes: AtomicU64,
    queued_bytes: AtomicU64,
    queued_bytes_peak: AtomicU64,
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
    /// [`QueueBounds::payload_bytes`].
    max_bytes: u64,
    /// Kinds a policy or the accounting uses; others are not queued.
    wanted: EventKinds,
    counters: Counters,
    stop: AtomicBool,
    /// Until when (ns after `epoch`) observed events should reach the
    /// dispatcher without delay ([`EventSender::prompt`]).
    prompt_until_ns: AtomicU64,
    epoch: Instant,
}

/// How long after an access to a watched database observed events stay
/// prompt ([`EventSender::prompt`]).
pub const PROMPT_FOR: Duration = Duration::from_millis(100);

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
        let target = event.pid();
        self.push(event, file, None, target).wake(self)
    }

    /// A batch of sends that wakes the dispatcher once, when the batch is
    /// dropped, rather than once per event: for a source that drains many
    /// events at a time (the kernel observer's ring), so that one drain
    /// costs the dispatcher one wake-up.
    pub fn batch(&self) -> SendBatch<'_> {
        SendBatch { sender: self, unwoken: 0 }
    }

    /// Queues an accepted hint with its file, holding the hint's
    /// [`QueueCharge`] until the event has been dispatched. As
    /// [`EventSender::send`] otherwise.
    pub fn send_hint(&self, hint: Hint) -> bool {
        let target = (hint.peer.pid != 0).then_some(hint.peer.pid);
        self.push(hint.event, Some(hint.file), Some(hint.charge), target).wake(self)
    }

    /// Whether observed events should reach the dispatcher without delay
    /// now: a program is reading a database the dispatcher watches (within
    /// the last [`PROMPT_FOR`]), and each of its next reads depends on the
    /// one before, so an event held back to be batched is a page its scan
    /// waits for. A source that batches while few events arrive (the
    /// daemon's observer) polls at its shortest interval meanwhile.
    pub fn prompt(&self) -> bool {
        let shared = &self.shared;
        (shared.epoch.elapsed().as_nanos() as u64) < shared.prompt_until_ns.load(Ordering::Relaxed)
    }

    /// Queues without waking the dispatcher; the caller wakes it.
    fn push(&self, event: Event, file: Option<FileRef>, charge: Option<QueueCharge>, target: Option<u32>) -> Pushed {
        let shared = &self.shared;
        if !shared.wanted.contains(event.kind()) {
            shared.counters.filtered.fetch_add(1, Ordering::Relaxed);
            return Pushed::Filtered;
        }
        if shared.stop.load(Ordering::Relaxed) {
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Pushed::Dropped;
        }
        let bytes = event.payload_bytes();
        if !shared.reserve(bytes) {
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            shared.counters.dropped_for_bytes.fetch_add(1, Ordering::Relaxed);
            return Pushed::Dropped;
        }
        if shared.queue.push(Incoming { event, file, charge, bytes, target }).is_err() {
            shared.release(bytes);
            shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
            return Pushed::Dropped;
        }
        shared.counters.queued.fetch_add(1, Ordering::Relaxed);
        Pushed::Queued
    }
}

impl Shared {
    /// Keeps [`EventSender::prompt`] true for [`PROMPT_FOR`] from now.
    fn stay_prompt(&self) {
        let until = self.epoch.elapsed().saturating_add(PROMPT_FOR).as_nanos() as u64;
        self.prompt_until_ns.store(until, Ordering::Relaxed);
    }

    /// Takes `bytes` of the queue's byte bound, or refuses without taking
    /// any.
    fn reserve(&self, bytes: usize) -> bool {
        let bytes = bytes as u64;
        let queued = &self.counters.queued_bytes;
        let mut now = queued.load(Ordering::Relaxed);
        loop {
            let Some(after) = now.checked_add(bytes).filter(|after| *after <= self.max_bytes) else { return false };
            match queued.compare_exchange_weak(now, after, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.counters.queued_bytes_peak.fetch_max(after, Ordering::Relaxed);
                    return true;
                }
                Err(actual) => now = actual,
            }
        }
    }

    /// Gives back what [`Shared::reserve`] took.
    fn release(&self, bytes: usize) {
        self.counters.queued_bytes.fetch_sub(bytes as u64, Ordering::Relaxed);
    }
}

/// What became of a pushed event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pushed {
    /// Queued for the dispatcher, which is yet to be woken.
    Queued,
    /// Of a kind nobody uses: let go and counted.
    Filtered,
    /// The queue was full or the pipeline stopped: dropped and counted.
    Dropped,
}

impl Pushed {
    /// Wakes the dispatcher for a queued event; whether the event was
    /// accepted (queued or filtered).
    fn wake(self, sender: &EventSender) -> bool {
        if self == Pushed::Queued {
            sender.dispatcher.unpark();
        }
        self != Pushed::Dropped
    }
}

/// Sends from one drain of a source; see [`EventSender::batch`].
pub struct SendBatch<'a> {
    sender: &'a EventSender,
    /// Events queued since the dispatcher was last woken.
    unwoken: usize,
}

/// A long batch wakes the dispatcher every this many queued events, so
/// that it drains while the source still fills the bounded queue.
const BATCH_WAKE_EVERY: usize = 256;

impl SendBatch<'_> {
    /// As [`EventSender::send`], except that the dispatcher is woken when
    /// the batch ends.
    pub fn send(&mut self, event: Event, file: Option<FileRef>) -> bool {
        let target = event.pid();
        let pushed = self.sender.push(event, file, None, target);
        if pushed == Pushed::Queued {
            self.unwoken += 1;
            if self.unwoken >= BATCH_WAKE_EVERY {
                self.sender.dispatcher.unpark();
                self.unwoken = 0;
            }
        }
        pushed != Pushed::Dropped
    }
}

impl Drop for SendBatch<'_> {
    fn drop(&mut self) {
        if self.unwoken > 0 {
            self.sender.dispatcher.unpark();
        }
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
    /// queue of `capacity` events (and [`DEFAULT_QUEUE_PAYLOAD_BYTES`]).
    pub fn start(executor: Arc<Executor>, policies: Vec<Box<dyn Policy>>, capacity: usize) -> std::io::Result<Self> {
        Self::start_bounded(executor, policies, QueueBounds::events(capacity), None)
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
        Self::start_bounded(executor, policies, QueueBounds::events(capacity), resolve)
    }

    /// Like [`Self::start_with`], with both of the queue's bounds given.
    pub fn start_bounded(
        executor: Arc<Executor>,
        policies: Vec<Box<dyn Policy>>,
        bounds: QueueBounds,
        resolve: Option<ResolverConfig>,
    ) -> std::io::Result<Self> {
        // The accounting needs accesses (hits) and evictions (waste).
        let wanted = policies
            .iter()
            .fold(EventKinds::of(&[EventKind::PageAccess, EventKind::PageEvict]), |k, p| k.with(p.interests()));
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(bounds.events.max(1)),
            max_bytes: bounds.payload_bytes as u64,
            wanted,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            prompt_until_ns: AtomicU64::new(0),
            epoch: Instant::now(),
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
            dropped_for_bytes: c.dropped_for_bytes.load(Ordering::Relaxed),
            queued_bytes: c.queued_bytes.load(Ordering::Relaxed),
            queued_bytes_peak: c.queued_bytes_peak.load(Ordering::Relaxed),
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
        Event::PageEvict { file, pages, .. } => executor.note_eviction(*file, *pages),
        _ => {}
    }
}

/// The process and file of an observed event, when it has both.
fn observed(event: &Event) -> Option<(u32, crate::file::FileId, Through)> {
    match event {
        Event::PageAccess { pid, file, kind: AccessKind::Read, .. } | Event::FileOpen { pid, file, .. } => {
            Some((*pid, *file, Through::Descriptors))
        }
        Event::PageAccess { pid, file, .. } => Some((*pid, *file, Through::Mappings)),
        Event::PageMiss { pid, file, .. } => Some((*pid, *file, Through::Either)),
        Event::Exec { pid, exe, .. } => Some((*pid, *exe, Through::Mappings)),
        _ => None,
    }
}

/// Files checked for a model header before the set is cleared.
const MAX_CHECKED_FILES: usize = 1 << 16;

/// Accesses to a Parquet file after which a footer still not cached is
/// given up on.
const FOOTER_TRIES: u32 = 64;

/// Recognises model and Parquet files among the files the runtime comes to
/// hold and describes their layout to the policies: the runtime reads a
/// model's *header* once per file, and only once the file's first page is
/// already in the page cache (the program read it); a Parquet file's footer
/// only once its reader has read it. On the dispatcher it copies only
/// cached bytes, within a budget; a header not cached yet is read by a
/// bounded background reader ([`crate::model::header`]), so the event path
/// never waits on storage. It never reads tensor data on anyone's behalf.
#[derive(Default)]
struct ModelDetector {
    checked: crate::file::IdSet<crate::file::FileId>,
    /// Checked files whose first bytes are no model's.
    plain: crate::file::IdSet<crate::file::FileId>,
    /// Files whose first page was not resident yet, and when to look again.
    later: crate::file::IdMap<crate::file::FileId, std::time::Instant>,
    /// Parquet files whose footer was not all cached yet, and how many more
    /// of their accesses may look again.
    footers: crate::file::IdMap<crate::file::FileId, u32>,
    reader: crate::model::header::HeaderReader,
}

impl ModelDetector {
    /// A `TensorLayout` event for `file` if it is a model file not seen
    /// before (`models`: the policies want them), a `ColumnLayout` event if
    /// it is a Parquet file (`columns`).
    fn detect(&mut self, file: &crate::file::FileRef, models: bool, columns: bool) -> Option<Event> {
        if self.checked.len() + self.later.len() >= MAX_CHECKED_FILES {
            self.checked.clear();
            self.plain.clear();
            self.later.clear();
            self.footers.clear();
        }
        let id = file.id();
        if self.checked.contains(&id) {
            return None;
        }
        let now = std::time::Instant::now();
        if self.later.get(&id).is_some_and(|at| now < *at) {
            return None;
        }
        use crate::model::header::{Header, Tail};
        let tail = if columns { self.reader.read_parquet(file, now) } else { Tail::NotParquet };
        match tail {
            Tail::Parquet(layout) => {
                self.later.remove(&id);
                self.checked.insert(id);
                return Some(crate::model::header::column_event(id, layout));
            }
            Tail::NotYet => {
                self.later.remove(&id);
                self.checked.insert(id);
                self.footers.insert(id, FOOTER_TRIES);
                return None;
            }
            // A Parquet reader reads the footer before anything else: a
            // file whose end is not cached when it is first seen read is
            // not being read as one.
            Tail::NotParquet | Tail::Unknown => {}
        }
        if !models {
            self.later.remove(&id);
            self.checked.insert(id);
            self.plain.insert(id);
            return None;
        }
        let first_cached = crate::cache::cache_stat(file, crate::page::PageRange::new(0, 1));
        if !first_cached.is_ok_and(|stat| stat.nr_cache > 0) {
            self.later.insert(id, now + Duration::from_secs(1));
            return None;
        }
        self.later.remove(&id);
        self.checked.insert(id);
        match self.reader.read(file, now) {
            Header::Layout(layout) => Some(crate::model::header::layout_event(id, &layout)),
            Header::NotAModel => {
                self.plain.insert(id);
                None
            }
            Header::Unknown => None,
        }
    }

    /// Whether `file` is a Parquet file whose footer was not cached yet.
    fn awaits_footer(&self, file: crate::file::FileId) -> bool {
        self.footers.contains_key(&file)
    }

    /// On an access to a held Parquet file whose footer was not cached yet:
    /// its `ColumnLayout` event once it is (looked for at most
    /// [`FOOTER_TRIES`] times).
    fn retry_footer(&mut self, file: &crate::file::FileRef) -> Option<Event> {
        use crate::model::header::Tail;
        let id = file.id();
        let tries = self.footers.get_mut(&id)?;
        *tries -= 1;
        if *tries == 0 {
            self.footers.remove(&id);
        }
        match self.reader.read_parquet(file, std::time::Instant::now()) {
            Tail::Parquet(layout) => {
                self.footers.remove(&id);
                Some(crate::model::header::column_event(id, layout))
            }
            Tail::NotYet => None,
            Tail::NotParquet | Tail::Unknown => {
                self.footers.remove(&id);
                None
            }
        }
    }

    /// Whether `file` was checked and is no model.
    fn is_plain(&self, file: crate::file::FileId) -> bool {
        self.plain.contains(&file)
    }

    /// `TensorLayout` events of the headers the background reader finished.
    fn finished(&mut self) -> Vec<Event> {
        self.reader.finished().iter().map(|(file, layout)| crate::model::header::layout_event(*file, layout)).collect()
    }
}

/// Whether a policy wants the files programs read looked at: for the
/// B-tree watcher (databases) or the layout detector (models, Parquet).
fn looks_at_reads(runtime: &Runtime) -> bool {
    runtime.wants(EventKind::TreeChildEnter) || wants_layouts(runtime)
}

/// Whether a policy wants model or Parquet layouts.
fn wants_layouts(runtime: &Runtime) -> bool {
    runtime.wants(EventKind::TensorLayout) || runtime.wants(EventKind::ColumnLayout)
}

/// Whether `file` was looked at and is neither a database the B-tree
/// watcher follows nor a model or Parquet file: found only to be looked
/// at, it need not be found again.
fn known_plain(
    runtime: &Runtime,
    databases: &crate::btree::observe::DbWatcher,
    models: &ModelDetector,
    file: crate::file::FileId,
) -> bool {
    (!runtime.wants(EventKind::TreeChildEnter) || databases.is_not_database(file))
        && (!wants_layouts(runtime) || models.is_plain(file))
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
                && let Some((pid, id, through)) = observed(&incoming.event)
                && (runtime.wants_file_of(incoming.event.kind(), id)
                    || incoming.event.kind() == EventKind::PageAccess
                        && looks_at_reads(&runtime)
                        && !known_plain(&runtime, &databases, &models, id))
                && runtime.files().get(id).is_none()
            {
                let found = resolver.resolve(pid, id, through);
                let counter = if found.is_some() { &shared.counters.resolved } else { &shared.counters.unresolved };
                counter.fetch_add(1, Ordering::Relaxed);
                found
            } else {
                None
            };
            if let Some(file) = newly_held {
                let (want_models, want_columns) =
                    (runtime.wants(EventKind::TensorLayout), runtime.wants(EventKind::ColumnLayout));
                if (want_models || want_columns)
                    && let Some(layout) = models.detect(&file, want_models, want_columns)
                {
                    runtime.hold_file(file.clone());
                    shared.counters.models_detected.fetch_add(1, Ordering::Relaxed);
                    runtime.dispatch_for(&layout, incoming.target);
                }
                runtime.hold_file(file);
            }
            // A Parquet footer that was being read when its file was found.
            if let Event::PageAccess { file, .. } = &incoming.event
                && models.awaits_footer(*file)
                && let Some(held) = runtime.files().get(*file).cloned()
                && let Some(layout) = models.retry_footer(&held)
            {
                shared.counters.models_detected.fetch_add(1, Ordering::Relaxed);
                runtime.dispatch_for(&layout, incoming.target);
            }
            feed_accounting(&executor, &incoming.event);
            // Unmodified B-tree programs: parse the database pages they read.
            if let Event::PageAccess { file, pages, .. } = &incoming.event
                && runtime.wants(EventKind::TreeChildEnter)
                && let Some(held) = runtime.files().get(*file)
            {
                if databases.on_access(held, *pages, &mut descents) {
                    shared.stay_prompt();
                }
                shared.counters.tree_descents.fetch_add(descents.len() as u64, Ordering::Relaxed);
                for descent in descents.drain(..) {
                    runtime.dispatch_for(&descent, incoming.target);
                }
            }
            runtime.dispatch_for(&incoming.event, incoming.target);
            // Only now does the event stop holding memory: free it, then
            // give back its bytes and its sender's charge.
            drop(incoming.event);
            drop(incoming.charge);
            shared.release(incoming.bytes);
            shared.counters.dispatched.fetch_add(1, Ordering::SeqCst);
        }
        for layout in models.finished() {
            shared.counters.models_detected.fetch_add(1, Ordering::Relaxed);
            runtime.dispatch(&layout);
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
            // Woken by whatever gives it work: a push, the header reader's
            // answer, the stop (`stop_threads`). A wake-up that finds
            // nothing just parks again; an idle dispatcher sleeps.
            thread::park();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::FileId;
    use crate::page::ByteRange;

    /// A sender over a queue no dispatcher drains: what it takes is what a
    /// stalled dispatcher would be left holding.
    fn stalled(bounds: QueueBounds) -> EventSender {
        let shared = Arc::new(Shared {
            queue: ArrayQueue::new(bounds.events),
            max_bytes: bounds.payload_bytes as u64,
            wanted: EventKinds::ALL,
            counters: Counters::default(),
            stop: AtomicBool::new(false),
            prompt_until_ns: AtomicU64::new(0),
            epoch: Instant::now(),
        });
        EventSender { shared, dispatcher: thread::current() }
    }

    /// Refuses everything: what a runtime in a test submits goes nowhere.
    struct Refuse;

    impl crate::executor::RequestSink for Refuse {
        fn submit(&self, _: crate::request::Request) -> Result<(), crate::executor::SubmitError> {
            Err(crate::executor::SubmitError::Unsupported)
        }
    }

    /// A file the B-tree watcher and the model detector have looked at and
    /// found plain is not looked for again (through `/proc`) once the
    /// runtime lets it go; a database is, and a file not yet looked at.
    #[test]
    fn a_file_found_plain_is_not_looked_for_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).expect("write");
            FileRef::open(&path).expect("open")
        };
        let plain = write("plain", &[b'x'; 8192]);
        let mut db = crate::btree::sqlite::tests::header(4096, 2);
        db.resize(8192, 0);
        let database = write("db", &db);
        let mut runtime = Runtime::with_sink(Arc::new(Refuse));
        for name in ["btree", "tensor", "columns"] {
            runtime.add_policy(crate::policies::by_name(name).expect("policy"));
        }
        let (mut databases, mut models) = (crate::btree::observe::DbWatcher::new(), ModelDetector::default());
        for file in [&plain, &database] {
            assert!(!known_plain(&runtime, &databases, &models, file.id()), "not looked at yet");
            let watched = databases.on_access(file, crate::page::PageRange::new(0, 1), &mut Vec::new());
            assert_eq!(watched, file.id() == database.id(), "only the database is watched");
            assert!(models.detect(file, true, true).is_none());
        }
        assert!(known_plain(&runtime, &databases, &models, plain.id()));
        assert!(!known_plain(&runtime, &databases, &models, database.id()), "a database is watched");
    }

    /// A file read from its start, its end not cached, is found plain at
    /// once, as it was before Parquet files were looked for: it is not
    /// looked up again through `/proc` whenever the runtime lets it go.
    #[test]
    fn a_file_read_from_its_start_is_plain_though_its_end_is_not_cached() {
        use std::os::fd::AsFd;
        use std::os::unix::fs::FileExt;
        // On disk (a tmpfs keeps every page cached).
        let dir = tempfile::Builder::new().prefix("predictio-plain").tempdir_in("/var/tmp").expect("tempdir");
        let path = dir.path().join("big");
        std::fs::write(&path, vec![b'y'; 64 * 4096]).expect("write");
        let file = FileRef::open(&path).expect("open");
        crate::cache::evict(&file).expect("evict");
        // Page 0 alone, no readahead.
        crate::sys::fadvise(file.as_fd(), 0, 0, crate::sys::Advice::Random).expect("fadvise");
        file.file().read_exact_at(&mut [0u8; 4096], 0).expect("read page 0");
        let tail = crate::cache::cache_stat(&file, crate::page::PageRange::new(63, 64)).expect("cachestat");
        assert_eq!(tail.nr_cache, 0, "the end is not cached");
        for (models, columns) in [(true, true), (false, true)] {
            let mut detector = ModelDetector::default();
            assert!(detector.detect(&file, models, columns).is_none());
            assert!(detector.is_plain(file.id()), "models {models}, columns {columns}");
        }
    }

    /// A Parquet file whose footer is cached is described to the policies
    /// once, from the page cache, and only when a policy wants it.
    #[test]
    fn a_parquet_file_is_found_by_its_footer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/duckdb-3x3.parquet");
        let path = dir.path().join("t.parquet");
        std::fs::copy(fixture, &path).expect("copy");
        let file = FileRef::open(&path).expect("open");
        let mut models = ModelDetector::default();
        assert!(models.detect(&file, true, false).is_none(), "no policy wants Parquet layouts");
        let mut models = ModelDetector::default();
        match models.detect(&file, false, true) {
            Some(Event::ColumnLayout { file: id, file_len, chunks }) => {
                assert_eq!((id, file_len, chunks.len()), (file.id(), 56843, 9));
                assert_eq!((chunks[4].row_group, chunks[4].column, chunks[4].offset), (1, 1, 27423));
            }
            other => panic!("expected a ColumnLayout, got {other:?}"),
        }
        assert!(models.detect(&file, false, true).is_none(), "once per file");
    }

    fn layout(ranges: usize) -> Event {
        let file = FileId { dev: 1, ino: 1 };
        Event::TensorLayout { file, ranges: (0..ranges as u64).map(|i| ByteRange::new(i << 20, 1 << 20)).collect() }
    }

    /// A queue bounded only in events held whatever its events carried:
    /// 65,536 full-datagram `TensorLayout`s are 4 GiB. The byte bound drops
    /// (and counts) the event that would pass it, never blocks, and gives
    /// the bytes back when an event leaves the queue.
    #[test]
    fn the_queue_is_bounded_in_payload_bytes_as_well_as_events() {
        let big = layout(4095);
        let each = big.payload_bytes() as u64;
        let sender = stalled(QueueBounds { events: 1 << 16, payload_bytes: 1 << 20 });
        let mut accepted = 0u64;
        for _ in 0..1000 {
            if sender.send(big.clone(), None) {
                accepted += 1;
            }
        }
        let c = &sender.shared.counters;
        let queued = c.queued_bytes.load(Ordering::Relaxed);
        assert_eq!(accepted, (1 << 20) / each, "as many as fit in 1 MiB");
        assert_eq!(queued, accepted * each);
        assert!(c.queued_bytes_peak.load(Ordering::Relaxed) <= 1 << 20);
        assert_eq!(c.dropped_for_bytes.load(Ordering::Relaxed), 1000 - accepted);
        assert_eq!(c.dropped.load(Ordering::Relaxed), 1000 - accepted);
        // Events without payload still fit: the bound is on bytes only.
        assert!(sender.send(Event::LayerStart { file: FileId { dev: 1, ino: 1 }, layer: 0 }, None));
        // What leaves the queue gives its bytes back.
        let first = sender.shared.queue.pop().expect("queued");
        sender.shared.release(first.bytes);
        assert_eq!(c.queued_bytes.load(Ordering::Relaxed), queued - each);
        assert!(sender.send(big, None), "room again for one");
    }

    #[test]
    fn a_refused_push_gives_its_bytes_back() {
        let sender = stalled(QueueBounds { events: 1, payload_bytes: 1 << 20 });
        assert!(sender.send(layout(1), None));
        assert!(!sender.send(layout(1), None), "the one slot is taken");
        let c = &sender.shared.counters;
        assert_eq!(c.queued_bytes.load(Ordering::Relaxed), layout(1).payload_bytes() as u64);
        assert_eq!(c.dropped_for_bytes.load(Ordering::Relaxed), 0, "dropped for the slot, not for bytes");
    }

    /// Whether this thread (the stalled sender's "dispatcher") was woken
    /// since it last looked: `park_timeout` returns at once on a pending
    /// unpark.
    fn woken() -> bool {
        let started = std::time::Instant::now();
        thread::park_timeout(Duration::from_millis(200));
        started.elapsed() < Duration::from_millis(100)
    }

    /// A batch queues as it goes and wakes the dispatcher when it ends, once
    /// for the whole drain (and every [`BATCH_WAKE_EVERY`] events of a long
    /// one); a batch that queued nothing wakes nobody.
    #[test]
    fn a_batch_wakes_the_dispatcher_once_when_it_ends() {
        let sender = stalled(QueueBounds::events(1 << 12));
        while woken() {}
        let mut batch = sender.batch();
        for layer in 0..3 {
            assert!(batch.send(Event::LayerStart { file: FileId { dev: 1, ino: 1 }, layer }, None));
        }
        assert_eq!(sender.shared.queue.len(), 3, "queued as sent");
        assert!(!woken(), "not woken before the batch ends");
        drop(batch);
        assert!(woken(), "woken when it ends");
        let mut one = sender.batch();
        assert!(one.send(layout(1), None));
        drop(one);
        assert!(woken(), "one queued event wakes it too");
        drop(sender.batch());
        assert!(!woken(), "an empty batch wakes nobody");
        let mut long = sender.batch();
        for layer in 0..BATCH_WAKE_EVERY as u32 {
            long.send(Event::LayerStart { file: FileId { dev: 1, ino: 1 }, layer }, None);
        }
        assert!(woken(), "a long batch wakes the dispatcher on the way");
        drop(long);
        assert!(!woken(), "and has nothing left to wake it for");
    }
}
