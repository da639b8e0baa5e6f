//! The policy interface: deterministic prediction over typed events.
//!
//! A policy says which [`EventKind`](crate::event::EventKind)s it wants and turns each such event into
//! zero or more [`Request`]s through its [`PolicyContext`]. It must never issue
//! I/O, read file data on an application's behalf, or block: the runtime calls
//! it on the event path. That keeps every policy unit-testable with a synthetic
//! event stream.

use std::sync::Arc;

use crate::event::{Event, EventKinds};
use crate::file::{FileId, FileRef};
use crate::page::PageRange;
use crate::request::{MetaDir, MetaLookup, MetaRequest, Request, Urgency};

/// Identifies the origin of a request (a policy, or a tool like the CLI) in
/// the executor's accounting. Assigned by
/// [`Executor::register_origin`](crate::executor::Executor::register_origin).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct PolicyId(pub u16);

/// Descriptors a [`FileTable`] holds before it lets go of the oldest.
pub const MAX_HELD_FILES: usize = 8192;

/// The files the runtime holds descriptors for, by identity. Bounded: past
/// [`MAX_HELD_FILES`] the longest-held descriptor is closed.
#[derive(Default, Debug)]
pub struct FileTable {
    files: crate::file::IdMap<FileId, FileRef>,
    order: std::collections::VecDeque<FileId>,
}

impl FileTable {
    /// Holds `file` (replacing any earlier descriptor of the same file).
    pub fn insert(&mut self, file: FileRef) {
        let id = file.id();
        if self.files.insert(id, file).is_none() {
            self.order.push_back(id);
            while self.files.len() > MAX_HELD_FILES {
                match self.order.pop_front() {
                    Some(old) => {
                        self.files.remove(&old);
                    }
                    None => break,
                }
            }
        }
    }

    /// The held descriptor of `id`, if any.
    pub fn get(&self, id: FileId) -> Option<&FileRef> {
        self.files.get(&id)
    }

    /// Stops holding `id`.
    pub fn remove(&mut self, id: FileId) -> Option<FileRef> {
        let removed = self.files.remove(&id);
        if removed.is_some() {
            self.order.retain(|o| *o != id);
        }
        removed
    }

    /// Number of files held.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when no file is held.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// What a policy may use while handling one event: the held files and a place
/// to put its requests.
pub struct PolicyContext<'a> {
    files: &'a FileTable,
    out: &'a mut Vec<Request>,
    meta: Vec<MetaRequest>,
    origin: PolicyId,
}

impl<'a> PolicyContext<'a> {
    /// A context writing requests into `out` on behalf of `origin`.
    pub fn new(files: &'a FileTable, out: &'a mut Vec<Request>, origin: PolicyId) -> Self {
        Self { files, out, meta: Vec::new(), origin }
    }

    /// The descriptor the runtime holds for `id`. A policy can only request
    /// files someone proved they could open.
    pub fn file(&self, id: FileId) -> Option<&FileRef> {
        self.files.get(id)
    }

    /// Emits a request for `ranges` of the held file `id`. Returns false (and
    /// emits nothing) when the runtime holds no descriptor for it.
    pub fn request(&mut self, id: FileId, ranges: Vec<PageRange>, urgency: Urgency) -> bool {
        self.request_held(id, ranges, urgency, false, 0)
    }

    /// Like [`PolicyContext::request`], for bulk data the program will map
    /// or read whole: the executor streams it (see [`Request::sequential`]).
    pub fn request_streamed(&mut self, id: FileId, ranges: Vec<PageRange>, urgency: Urgency) -> bool {
        self.request_held(id, ranges, urgency, true, 0)
    }

    /// Like [`PolicyContext::request`], with the request's own pacing
    /// window ([`Request::window_pages`]).
    pub fn request_paced(&mut self, id: FileId, ranges: Vec<PageRange>, urgency: Urgency, window_pages: u64) -> bool {
        self.request_held(id, ranges, urgency, false, window_pages)
    }

    fn request_held(
        &mut self,
        id: FileId,
        ranges: Vec<PageRange>,
        urgency: Urgency,
        sequential: bool,
        window_pages: u64,
    ) -> bool {
        let Some(file) = self.files.get(id) else { return false };
        if ranges.is_empty() {
            return true;
        }
        let mut request = Request::new(file.clone(), ranges, self.origin).with_urgency(urgency).paced(window_pages);
        request.sequential = sequential;
        self.out.push(request);
        true
    }

    /// Emits a request for a descriptor the policy was handed by its owner
    /// (the `launch` policy's replays: files the daemon or `predictio run`
    /// opened and checked itself, from profiles it learned by observation —
    /// never a path a client named).
    pub fn request_file(&mut self, file: &FileRef, ranges: Vec<PageRange>, urgency: Urgency) {
        self.request_file_paced(file, ranges, urgency, 0);
    }

    /// [`PolicyContext::request_file`] with a narrower pacing window for
    /// its reads ([`Request::window_pages`]).
    pub fn request_file_paced(&mut self, file: &FileRef, ranges: Vec<PageRange>, urgency: Urgency, window_pages: u64) {
        if !ranges.is_empty() {
            self.out.push(Request::new(file.clone(), ranges, self.origin).with_urgency(urgency).paced(window_pages));
        }
    }

    /// Emits a metadata request: paths being exec'd (resolved first), names
    /// to look up and directories to list, held open by the policy's owner
    /// (the `launch` policy's replays), for the executor's metadata threads.
    pub fn request_metadata(&mut self, execs: Vec<Arc<str>>, lookups: Vec<MetaLookup>, dirs: Vec<MetaDir>) {
        if !execs.is_empty() || !lookups.is_empty() || !dirs.is_empty() {
            self.meta.push(MetaRequest { execs, lookups, dirs, origin: self.origin });
        }
    }

    /// The metadata requests emitted so far (the runtime hands them on).
    pub fn take_metadata(&mut self) -> Vec<MetaRequest> {
        std::mem::take(&mut self.meta)
    }

    /// The id requests from this context are accounted under.
    pub fn origin(&self) -> PolicyId {
        self.origin
    }
}

/// A prediction policy.
pub trait Policy: Send {
    /// Short stable name, used in accounting and on the command line.
    fn name(&self) -> &str;

    /// The event kinds this policy wants; others are never delivered.
    fn interests(&self) -> EventKinds;

    /// Handles one event: pure logic, no I/O, no blocking.
    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>);

    /// Whether this policy requests the files its observed events name (so
    /// the pipeline should find descriptors for them). A policy that only
    /// watches observation and requests files it was handed (`launch`) says
    /// no, and the dispatcher spends nothing resolving the files of every
    /// process on the machine for it.
    fn requests_observed_files(&self) -> bool {
        true
    }

    /// Of the files its observed events name, whether it would request
    /// `file` now (asked only when [`Policy::requests_observed_files`]). A
    /// policy that follows only files it was told of (a plan's, a model's)
    /// says so, and the dispatcher does not look through `/proc` for every
    /// other file a process reads.
    fn wants_observed_file(&self, _file: FileId) -> bool {
        true
    }
}

/// What policy unit tests share: real descriptors held in a [`FileTable`]
/// (the runtime only lets a policy request files it holds) and an event fed
/// to a policy as the runtime feeds it.
#[cfg(test)]
pub(crate) mod test_support {
    use super::{FileTable, Policy, PolicyContext, PolicyId};
    use crate::event::Event;
    use crate::file::{FileId, FileRef};
    use crate::request::Request;

    /// Readable files the tests hold, distinct by identity: the test binary
    /// first, then a few system files.
    const CANDIDATES: [&str; 5] = ["/proc/self/exe", "/etc/passwd", "/etc/hostname", "/etc/os-release", "/etc/group"];

    /// Held files and their identities.
    pub(crate) struct HeldFiles {
        pub(crate) files: FileTable,
        pub(crate) ids: Vec<FileId>,
    }

    impl HeldFiles {
        /// The test binary alone.
        pub(crate) fn own_exe() -> Self {
            let file = FileRef::open(CANDIDATES[0]).expect("open the test binary");
            let mut files = FileTable::default();
            let ids = vec![file.id()];
            files.insert(file);
            Self { files, ids }
        }

        /// Every distinct candidate that opens; at least `min` of them.
        pub(crate) fn distinct(min: usize) -> Self {
            let mut files = FileTable::default();
            let mut ids = Vec::new();
            for file in CANDIDATES.iter().filter_map(|path| FileRef::open(path).ok()) {
                if !ids.contains(&file.id()) {
                    ids.push(file.id());
                    files.insert(file);
                }
            }
            assert!(ids.len() >= min, "need {min} distinct readable files, found {}", ids.len());
            Self { files, ids }
        }

        /// The first held file (the test binary).
        pub(crate) fn id(&self) -> FileId {
            self.ids[0]
        }

        /// Feeds `event` to `policy` over these files; the requests it made.
        pub(crate) fn feed<P: Policy + ?Sized>(&self, policy: &mut P, event: &Event, origin: PolicyId) -> Vec<Request> {
            let mut out = Vec::new();
            policy.on_event(event, &mut PolicyContext::new(&self.files, &mut out, origin));
            out
        }
    }
}
