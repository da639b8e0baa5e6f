//! The runtime: dispatches each event to the policies subscribed to its kind
//! and hands their requests to the executor.
//!
//! Dispatch is a table lookup by [`EventKind`]; a policy never sees an event
//! it did not ask for. Requests go to the sink with a non-blocking submit; a
//! refused request is counted by the executor and forgotten here.

use std::sync::Arc;

use crate::event::{Event, EventKind};
use crate::executor::{Executor, RequestSink};
use crate::file::{FileId, FileRef};
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

    /// Whether a policy that requests observed files wants a descriptor of
    /// `file` for events of `kind` ([`Policy::wants_observed_file`]): the
    /// pipeline resolves descriptors only for those.
    pub fn wants_file_of(&self, kind: EventKind, file: FileId) -> bool {
        self.resolve_kinds.contains(kind)
            && self.by_kind[kind as usize].iter().any(|&i| {
                let policy = &self.slots[i].policy;
                policy.requests_observed_files() && policy.wants_observed_file(file)
            })
    }

    /// The held files.
    pub fn files(&self) -> &FileTable {
        &self.files
    }

    /// Dispatches one event to every subscribed policy and submits their
    /// requests, each for the event's own process where it has one (see
    /// [`Runtime::dispatch_for`]).
    pub fn dispatch(&mut self, event: &Event) {
        self.dispatch_for(event, event.pid());
    }

    /// Dispatches one event, submitting the requests that do not name the
    /// process they are for as being for `target` (a hint's sender, the
    /// observed process): the memory-pressure guard then weighs that
    /// process's memory cgroup too ([`Request::target_pid`]).
    pub fn dispatch_for(&mut self, event: &Event, target: Option<u32>) {
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
        for mut request in self.out.drain(..) {
            if request.target_pid.is_none()
                && let Some(pid) = target
            {
                request = request.for_process(pid);
            }
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::event::EventKinds;
    use crate::executor::SubmitError;
    use crate::page::PageRange;
    use crate::request::Urgency;

    #[derive(Default)]
    struct Collect(Mutex<Vec<Request>>);

    impl RequestSink for Collect {
        fn submit(&self, request: Request) -> Result<(), SubmitError> {
            self.0.lock().expect("lock").push(request);
            Ok(())
        }
    }

    /// Requests the pages each event names.
    struct Echo;

    impl Policy for Echo {
        fn name(&self) -> &str {
            "echo"
        }
        fn interests(&self) -> EventKinds {
            EventKinds::of(&[EventKind::Pages, EventKind::PageAccess])
        }
        fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
            let (file, ranges) = match event {
                Event::Pages { file, ranges } => (*file, ranges.to_vec()),
                Event::PageAccess { file, pages, .. } => (*file, vec![*pages]),
                _ => return,
            };
            ctx.request(file, ranges, Urgency::Speculative);
        }
    }

    /// A request is for the process its event came from (a hint's sender,
    /// an observed process), so that the pressure guard weighs that
    /// process's memory cgroup.
    #[test]
    fn requests_are_for_the_process_their_event_came_from() {
        let file = FileRef::open("/proc/self/exe").expect("open");
        let id = file.id();
        let sink = Arc::new(Collect::default());
        let mut runtime = Runtime::with_sink(sink.clone());
        runtime.add_policy(Box::new(Echo));
        runtime.hold_file(file);
        let pages = |start| Event::Pages { file: id, ranges: Arc::from([PageRange::new(start, start + 1)]) };
        runtime.dispatch_for(&pages(0), Some(4242));
        runtime.dispatch(&pages(0));
        runtime.dispatch(&Event::PageAccess {
            pid: 99,
            file: id,
            pages: PageRange::new(0, 1),
            kind: crate::event::AccessKind::Read,
            time_ns: 0,
        });
        let targets: Vec<Option<u32>> = sink.0.lock().expect("lock").iter().map(|r| r.target_pid).collect();
        assert_eq!(targets, [Some(4242), None, Some(99)]);
    }
}
