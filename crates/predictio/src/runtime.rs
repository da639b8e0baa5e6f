//! The runtime: dispatches each event to the policies subscribed to its kind
//! and hands their requests to the executor.
//!
//! Dispatch is a table lookup by [`EventKind`]; a policy never sees an event
//! it did not ask for. Requests go to the sink with a non-blocking submit; a
//! refused request is counted by the executor and forgotten here.

use std::sync::Arc;

use crate::event::{Event, EventKind};
use crate::executor::{Executor, RequestSink};
use crate::file::FileRef;
use crate::policy::{FileTable, Policy, PolicyContext, PolicyId};
use crate::request::Request;

struct Slot {
    policy: Box<dyn Policy>,
    origin: PolicyId,
}

/// Counters of the runtime itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RuntimeStats {
    /// Events dispatched.
    pub events: u64,
    /// Policy invocations.
    pub deliveries: u64,
    /// Requests handed to the sink.
    pub requests: u64,
    /// Metadata requests handed to the sink.
    pub meta_requests: u64,
    /// Requests the sink refused (full, nonsense).
    pub refused: u64,
}

/// Events in, requests out.
pub struct Runtime {
    slots: Vec<Slot>,
    by_kind: [Vec<usize>; EventKind::COUNT],
    /// Kinds wanted by a policy that requests the files its events name.
    resolve_kinds: crate::event::EventKinds,
    files: FileTable,
    sink: Arc<dyn RequestSink>,
    register: Option<Arc<Executor>>,
    out: Vec<Request>,
    stats: RuntimeStats,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.slots.iter().map(|s| s.policy.name()).collect();
        f.debug_struct("Runtime").field("policies", &names).field("stats", &self.stats).finish()
    }
}

impl Runtime {
    /// A runtime feeding `executor`; policy names are registered with it for
    /// accounting.
    pub fn new(executor: Arc<Executor>) -> Self {
        let sink: Arc<dyn RequestSink> = executor.clone();
        let mut rt = Self::with_sink(sink);
        rt.register = Some(executor);
        rt
    }

    /// A runtime feeding any sink (policy ids are then assigned in order,
    /// from 1).
    pub fn with_sink(sink: Arc<dyn RequestSink>) -> Self {
        Self {
            slots: Vec::new(),
            by_kind: Default::default(),
            resolve_kinds: crate::event::EventKinds::NONE,
            files: FileTable::default(),
            sink,
            register: None,
            out: Vec::new(),
            stats: RuntimeStats::default(),
        }
    }

    /// Adds a policy; returns its id.
    pub fn add_policy(&mut self, policy: Box<dyn Policy>) -> PolicyId {
        let origin = match &self.register {
            Some(executor) => executor.register_origin(policy.name()),
            None => PolicyId(self.slots.len() as u16 + 1),
        };
        let index = self.slots.len();
        if policy.requests_observed_files() {
            self.resolve_kinds = self.resolve_kinds.with(policy.interests());
        }
        for kind in EventKind::ALL {
            if policy.interests().contains(kind) {
                self.by_kind[kind as usize].push(index);
            }
        }
        self.slots.push(Slot { policy, origin });
        origin
    }

    /// Holds a descriptor so that policies can request that file.
    pub fn hold_file(&mut self, file: FileRef) {
        self.files.insert(file);
    }

    /// Whether any policy wants events of `kind`.
    pub fn wants(&self, kind: EventKind) -> bool {
        !self.by_kind[kind as usize].is_empty()
    }

    /// Whether a policy that requests observed files wants events of `kind`
    /// (the pipeline resolves descriptors only for those).
    pub fn wants_files_of(&self, kind: EventKind) -> bool {
        self.resolve_kinds.contains(kind)
    }

    /// The held files.
    pub fn files(&self) -> &FileTable {
        &self.files
    }

    /// Dispatches one event to every subscribed policy and submits their
    /// requests.
    pub fn dispatch(&mut self, event: &Event) {
        self.stats.events += 1;
        let kind = event.kind() as usize;
        for &index in &self.by_kind[kind] {
            let slot = &mut self.slots[index];
            let mut ctx = PolicyContext::new(&self.files, &mut self.out, slot.origin);
            slot.policy.on_event(event, &mut ctx);
            let meta = ctx.take_metadata();
            self.stats.deliveries += 1;
            for request in meta {
                self.stats.meta_requests += 1;
                if self.sink.submit_meta(request).is_err() {
                    self.stats.refused += 1;
                }
            }
        }
        for request in self.out.drain(..) {
            self.stats.requests += 1;
            if self.sink.submit(request).is_err() {
                self.stats.refused += 1;
            }
        }
    }

    /// The runtime's own counters.
    pub fn stats(&self) -> RuntimeStats {
        self.stats
    }
}
