//! The `launch` policy: on the exec of a known executable, the page lists of
//! its profile are replayed at once; later phases when their trigger file is
//! first touched.
//!
//! The policy is handed [`Replay`]s — profiles already walked into page
//! lists, each file named by its learned identity (path, device, inode,
//! size, mtime), no descriptor held — through a shared [`ReplayBook`]. On the
//! event path it only looks up and hands a [`ReplayJob`] over a bounded
//! channel to whoever replays ([`replay_channel`]: the daemon's launch
//! service, `predictio run`), which opens and checks the files and submits
//! their requests off the event path. No I/O, no descriptor, no blocking
//! beyond a short uncontended lock; a full channel drops the replay,
//! counted ([`LaunchPolicy::dropped_replays`]).

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use super::model::next_wave;
use super::profile::FileIdentity;
use super::recorder::{Recorder, WindowLimits};
use crate::event::{Event, EventKind, EventKinds};
use crate::file::{FileId, IdMap, IdSet};
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext, PolicyId};

/// One file's share of a replay.
#[derive(Clone, Debug)]
pub struct ReplayFile {
    /// The file as it was learned. Whoever replays opens the path without
    /// following a symbolic link and checks it against this identity before
    /// any page is requested.
    pub identity: FileIdentity,
    /// Pages in order of expected first use: waves of about
    /// [`Replay::wave_pages`] pages, each wave sorted.
    pub ranges: Vec<PageRange>,
    /// When the launch first touched the file, ms after exec (the
    /// profile's average).
    pub first_touch_ms: f64,
    /// When each range is expected to be first needed, ms after exec
    /// (parallel to `ranges`), or empty when the profile does not know
    /// ([`crate::launch::Walked::due_ms`]).
    pub due_ms: Vec<f64>,
}

/// Names a launch looked up in one directory, to look up again at exec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathLookup {
    /// The directory (absolute), opened when the replay runs.
    pub dir: String,
    /// Single path components, in the order they were looked up.
    pub names: Arc<[Box<str>]>,
}

/// A profile ready to replay: walked into page lists, its files and
/// directories named, nothing held open.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// The executable's path, as its profile is stored (with the shape in
    /// its [`LaunchKey`], the profile's key in the store).
    pub exe: String,
    /// Files to fetch at exec, in order of expected first use.
    pub at_exec: Vec<ReplayFile>,
    /// Files to fetch when a trigger file is first touched.
    pub on_trigger: Vec<(FileId, Vec<ReplayFile>)>,
    /// Files of the profile left out because they changed since learned
    /// (when whoever prepared it looked; the replay checks every file again).
    pub changed: Vec<String>,
    /// Files of the profile left out because they are gone or unreadable.
    pub missing: Vec<String>,
    /// The directories the launch searched and those it looked up, listed
    /// by the executor's metadata threads at exec (opened then).
    pub dirs: Vec<String>,
    /// The launch's lookups, by directory, looked up again by the
    /// executor's metadata threads at exec.
    pub lookups: Vec<PathLookup>,
    /// Pages per request ([`crate::launch::WalkLimits::wave_pages`]; 0: one
    /// request per file).
    pub wave_pages: u64,
    /// How long the launch lasts, ms: its average learned window, or its
    /// latest first touch if that is later. Spreads the waves over time
    /// ([`wave_order`]).
    pub span_ms: f64,
    /// The pacing window its requests ask for
    /// ([`crate::launch::ReplayPacing::window_pages`] of its pages).
    pub window_pages: u64,
    /// When its profile was last learned or used, UNIX seconds (0: not
    /// known): a daemon that restarts knows from it what it learned lately.
    pub learned_s: u64,
}

/// Which files of a [`Replay`] a [`ReplayJob`] replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayPart {
    /// Its files of the exec ([`Replay::at_exec`]), its lookups and its
    /// directories.
    AtExec,
    /// The files of its `n`th trigger ([`Replay::on_trigger`]).
    Trigger(usize),
}

/// A replay to run now, handed by the policy to whoever replays (over
/// [`replay_channel`]): open the files of `part` (no symbolic link
/// followed, checked against their identity), submit their waves in
/// [`wave_order`] under `origin`, and for [`ReplayPart::AtExec`] the
/// metadata request (`exec` first, then the lookups and directories).
#[derive(Clone, Debug)]
pub struct ReplayJob {
    /// The replay.
    pub replay: Arc<Replay>,
    /// Which of its files.
    pub part: ReplayPart,
    /// The path of an exec that has not happened yet (a replay at its
    /// start): resolved first, as the exec will
    /// ([`crate::request::MetaRequest::execs`]).
    pub exec: Option<Arc<str>>,
    /// The policy the requests are accounted under.
    pub origin: PolicyId,
    /// The process launching (its requests are for it: see
    /// [`crate::request::Request::target_pid`]).
    pub pid: u32,
    /// A launch of a command replayed less than [`REPEAT_NS`] before: not
    /// to be replayed again (its pages are on their way or cached), only
    /// looked at to tell whether it is warm.
    pub repeat: bool,
}

impl ReplayJob {
    /// The files it replays.
    pub fn files(&self) -> &[ReplayFile] {
        match self.part {
            ReplayPart::AtExec => &self.replay.at_exec,
            ReplayPart::Trigger(n) => self.replay.on_trigger.get(n).map_or(&[], |t| t.1.as_slice()),
        }
    }
}

/// Replay jobs waiting for whoever replays, at most: past it a replay is
/// dropped, counted. A job holds no descriptor (its files are opened when it
/// runs), so the bound is of work, not of descriptors.
pub const MAX_QUEUED_REPLAYS: usize = 8;

/// Files one replay job opens at most; the rest of a larger profile is left
/// out, counted. Descriptors are opened as the job submits its waves and
/// let go by the job once the executor holds its requests.
pub const MAX_REPLAY_FILES: usize = 1024;

/// The bounded channel from the policy to whoever replays.
pub fn replay_channel() -> (SyncSender<ReplayJob>, Receiver<ReplayJob>) {
    std::sync::mpsc::sync_channel(MAX_QUEUED_REPLAYS)
}

impl Replay {
    /// The files it replays (at exec and on triggers).
    pub fn files(&self) -> impl Iterator<Item = FileId> + '_ {
        self.at_exec.iter().chain(self.on_trigger.iter().flat_map(|t| t.1.iter())).map(|f| f.identity.id())
    }

    /// Pages the replay would request.
    pub fn pages(&self) -> u64 {
        let sum = |v: &[ReplayFile]| v.iter().flat_map(|f| &f.ranges).map(PageRange::len).sum::<u64>();
        sum(&self.at_exec) + self.on_trigger.iter().map(|t| sum(&t.1)).sum::<u64>()
    }
}

/// Which profile a launch replays: its executable and the shape of its
/// command line ([`super::shape`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LaunchKey {
    /// The executable.
    pub exe: FileId,
    /// The command shape.
    pub shape: Arc<str>,
}

impl LaunchKey {
    /// The key of launches of `exe` with command shape `shape`.
    pub fn new(exe: FileId, shape: &str) -> Self {
        Self { exe, shape: shape.into() }
    }
}

/// Replays by executable and command shape, shared between the policy and
/// whoever prepares them. The book also remembers which of them replayed
/// since its owner last asked ([`ReplayBook::take_replayed`]), so that the
/// profiles a daemon replays count as used in the store (least recently
/// used eviction) without the event path touching the store.
#[derive(Clone, Debug, Default)]
pub struct ReplayBook {
    inner: Arc<Mutex<Book>>,
}

#[derive(Debug, Default)]
struct Book {
    replays: HashMap<LaunchKey, Arc<Replay>>,
    /// Keys replayed since the last `take_replayed` (at most the booked).
    replayed: HashSet<LaunchKey>,
}

/// Replays a book holds at most; inserting beyond drops an arbitrary one.
pub const MAX_REPLAYS: usize = 256;

impl ReplayBook {
    /// Sets the replay of launches `key`. An unshaped key (an empty shape:
    /// a profile from before shapes, or a command line that could not be
    /// read) is not kept: it would replay every program of its executable.
    pub fn insert(&self, key: LaunchKey, replay: Replay) {
        if key.shape.is_empty() {
            return;
        }
        if let Ok(mut book) = self.inner.lock() {
            if book.replays.len() >= MAX_REPLAYS
                && !book.replays.contains_key(&key)
                && let Some(victim) = book.replays.keys().next().cloned()
            {
                book.replays.remove(&victim);
                book.replayed.remove(&victim);
            }
            book.replays.insert(key, Arc::new(replay));
        }
    }

    /// Forgets the replay of launches `key`.
    pub fn remove(&self, key: &LaunchKey) {
        if let Ok(mut book) = self.inner.lock() {
            book.replays.remove(key);
            book.replayed.remove(key);
        }
    }

    /// The replay of launches `key`.
    pub fn get(&self, key: &LaunchKey) -> Option<Arc<Replay>> {
        self.inner.lock().ok()?.replays.get(key).cloned()
    }

    /// Notes that the replay of `key` was just replayed.
    pub fn mark_replayed(&self, key: &LaunchKey) {
        if let Ok(mut book) = self.inner.lock()
            && book.replays.contains_key(key)
            && !book.replayed.contains(key)
        {
            book.replayed.insert(key.clone());
        }
    }

    /// The profiles replayed since the last call, each as its store key's
    /// parts (executable path, shape), sorted; forgets them.
    pub fn take_replayed(&self) -> Vec<(String, String)> {
        let Ok(mut book) = self.inner.lock() else { return Vec::new() };
        let keys = std::mem::take(&mut book.replayed);
        let mut out: Vec<(String, String)> = keys
            .iter()
            .filter_map(|k| book.replays.get(k).map(|r| (r.exe.clone(), k.shape.to_string())))
            .filter(|(exe, _)| !exe.is_empty())
            .collect();
        out.sort();
        out
    }

    /// Launches (executable and shape) with a replay.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |b| b.replays.len())
    }

    /// True when the book is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Pending triggers kept at most.
const MAX_PENDING: usize = 4096;
/// A trigger not fired within this long after its exec is dropped.
const TRIGGER_TTL_NS: u64 = 120 * 1_000_000_000;
/// A second exec of the same executable within this long replays nothing:
/// the first replay's pages are resident or in flight (a compiler driver
/// running itself again as its own child). Longer gaps replay again — the
/// executor skips what is still resident for the cost of a `cachestat`.
pub const REPEAT_NS: u64 = 200_000_000;

/// A finished launch window, handed to whoever learns from it (the
/// daemon's learner thread names the files and merges the run into the
/// store, off the event path).
#[derive(Debug)]
pub struct FinishedLaunch {
    /// The executable of the exec that opened the window.
    pub exe: FileId,
    /// The shape of that exec's command line.
    pub shape: Arc<str>,
    /// The process that exec'd.
    pub pid: u32,
    /// The window.
    pub recorder: Recorder,
    /// The replay handed over for this launch (at its exec or its exec
    /// start, or for a launch of the same command just before it): what the
    /// launch is scored against ([`super::score`]). `None`: not replayed.
    pub replay: Option<Arc<Replay>>,
}

/// Automatic learning inside the policy: every exec (that is not part of a
/// window already open) opens a bounded launch window.
#[derive(Debug)]
struct Learning {
    limits: WindowLimits,
    max_windows: usize,
    windows: Vec<(LaunchKey, u32, Recorder, Option<Arc<Replay>>)>,
    done: std::sync::mpsc::SyncSender<FinishedLaunch>,
    /// Windows not opened because `max_windows` were open, or not handed
    /// over because the learner was behind.
    skipped: u64,
    /// Model and Parquet files (a `TensorLayout` or `ColumnLayout` was
    /// seen; at most [`MAX_MODELS`]): the `tensor` and `columns` policies
    /// fetch them as their readers go, so a launch window that spans a
    /// model load or a query leaves them out, rather than have a replay
    /// read a model's pages, or the last query's columns, at every exec
    /// beside the imports it is for.
    models: IdSet<FileId>,
}

/// Model and Parquet files remembered by a learning policy at most (then forgotten
/// all at once).
const MAX_MODELS: usize = 1024;

/// An exec as its caller asked for it ([`Event::ExecStart`]): who, which
/// path, which command shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct StartKey {
    uid: u32,
    path: Arc<str>,
    shape: Arc<str>,
}

/// Exec starts waiting for their exec, and paths learned, kept at most.
const MAX_STARTS: usize = 4096;
/// An exec start pairs with an exec of the same process at most this long
/// after it (a cold exec takes milliseconds; a process that never exec'd
/// and whose pid came back must not pair).
const START_TTL_NS: u64 = 2_000_000_000;

/// The `launch` policy (see the module docs).
#[derive(Debug, Default)]
pub struct LaunchPolicy {
    book: ReplayBook,
    pending: IdMap<FileId, (u64, Arc<Replay>)>,
    last_exec: HashMap<LaunchKey, u64>,
    /// Exec starts by process, until its exec ([`Event::Exec`]) pairs them.
    starting: IdMap<u32, (StartKey, u64)>,
    /// The launch each exec start led to the last time: a later start with
    /// the same user, path and shape replays that launch at once, without
    /// waiting for the exec.
    started: HashMap<StartKey, LaunchKey>,
    /// Where replay jobs go ([`replay_channel`]); none: nothing replays.
    jobs: Option<SyncSender<ReplayJob>>,
    replays: u64,
    early_replays: u64,
    dropped_replays: u64,
    learning: Option<Learning>,
}

impl LaunchPolicy {
    /// A policy replaying from `book`: each replay is a [`ReplayJob`] sent
    /// to `jobs` (never blocking: a full channel drops it, counted).
    pub fn new(book: ReplayBook, jobs: SyncSender<ReplayJob>) -> Self {
        Self { book, jobs: Some(jobs), ..Self::default() }
    }

    /// The same policy, its replays sent to `jobs` (a learning policy
    /// replays nothing without).
    pub fn replaying_to(mut self, jobs: SyncSender<ReplayJob>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// A policy that also learns: each exec opens a launch window (at most
    /// `max_windows` at once) and each finished window goes to `done`
    /// (never blocking: a full channel drops the window, counted).
    pub fn learning(
        book: ReplayBook,
        limits: WindowLimits,
        max_windows: usize,
        done: std::sync::mpsc::SyncSender<FinishedLaunch>,
    ) -> Self {
        Self {
            book,
            learning: Some(Learning {
                limits,
                max_windows,
                windows: Vec::new(),
                done,
                skipped: 0,
                models: IdSet::default(),
            }),
            ..Self::default()
        }
    }

    /// Windows skipped by the learning bounds.
    pub fn skipped_windows(&self) -> u64 {
        self.learning.as_ref().map_or(0, |l| l.skipped)
    }

    fn learn(&mut self, event: &Event) {
        let Some(learning) = self.learning.as_mut() else { return };
        if let Event::TensorLayout { file, .. } | Event::ColumnLayout { file, .. } = event {
            if learning.models.len() >= MAX_MODELS {
                learning.models.clear();
            }
            learning.models.insert(*file);
            for window in &mut learning.windows {
                window.2.leave_out(*file);
            }
            return;
        }
        // A model's pages are not the launch's, but their time still passes.
        let model_page = matches!(event, Event::PageAccess { file, .. } | Event::PageMiss { file, .. }
            if learning.models.contains(file));
        if let Event::Exec { pid, exe, shape, time_ns } = event
            && !learning.windows.iter().any(|w| w.2.follows(*pid))
        {
            if learning.windows.len() < learning.max_windows {
                let key = LaunchKey { exe: *exe, shape: Arc::clone(shape) };
                learning.windows.push((key, *pid, Recorder::new(*pid, *time_ns, learning.limits), None));
            } else {
                learning.skipped += 1;
            }
        }
        let now = event_time(event);
        let mut i = 0;
        while i < learning.windows.len() {
            let window = &mut learning.windows[i].2;
            let done = (!model_page && window.on_event(event)) || now.is_some_and(|t| window.tick(t));
            if done {
                let (key, pid, recorder, replay) = learning.windows.swap_remove(i);
                let finished = FinishedLaunch { exe: key.exe, shape: key.shape, pid, recorder, replay };
                if learning.done.try_send(finished).is_err() {
                    learning.skipped += 1;
                }
            } else {
                i += 1;
            }
        }
    }

    /// Replays started.
    pub fn replays(&self) -> u64 {
        self.replays
    }

    /// Replays not started because whoever replays was behind (the job
    /// channel full) or gone.
    pub fn dropped_replays(&self) -> u64 {
        self.dropped_replays
    }

    /// Replays started at an exec start ([`Event::ExecStart`]), before the
    /// exec; counted in [`LaunchPolicy::replays`] too.
    pub fn early_replays(&self) -> u64 {
        self.early_replays
    }

    /// Replays launch `key` at `time_ns` if the book has it and it did not
    /// replay within [`REPEAT_NS`]; true if it did. `exec` is the path of an
    /// exec that has not happened yet (the replay at its start): the
    /// metadata threads resolve it first, as the exec will
    /// ([`crate::request::MetaRequest::execs`]).
    fn replay(
        &mut self,
        key: LaunchKey,
        pid: u32,
        time_ns: u64,
        exec: Option<&Arc<str>>,
        ctx: &mut PolicyContext<'_>,
    ) -> bool {
        let Some(replay) = self.book.get(&key) else { return false };
        if self.last_exec.get(&key).is_some_and(|t| time_ns.saturating_sub(*t) < REPEAT_NS) {
            // Looked at all the same: whoever replays quiets a warm one's
            // page-cache hits, which nothing would use.
            self.send(ReplayJob {
                replay,
                part: ReplayPart::AtExec,
                exec: None,
                origin: ctx.origin(),
                pid,
                repeat: true,
            });
            return false;
        }
        if self.last_exec.len() >= MAX_PENDING {
            self.last_exec.clear();
        }
        self.book.mark_replayed(&key);
        self.last_exec.insert(key, time_ns);
        let job = ReplayJob {
            replay: Arc::clone(&replay),
            part: ReplayPart::AtExec,
            exec: exec.cloned(),
            origin: ctx.origin(),
            pid,
            repeat: false,
        };
        if !self.send(job) {
            return false;
        }
        self.replays += 1;
        self.pending.retain(|_, (at, _)| time_ns.saturating_sub(*at) < TRIGGER_TTL_NS);
        for (trigger, _) in &replay.on_trigger {
            if self.pending.len() < MAX_PENDING {
                self.pending.insert(*trigger, (time_ns, Arc::clone(&replay)));
            }
        }
        true
    }

    /// Gives the launch window `pid`'s exec of `key` at `time_ns` just
    /// opened, if it opened one, the replay handed over for it: at this
    /// exec, at its start, or for a launch of the same command within
    /// [`REPEAT_NS`] (its pages are this launch's too).
    fn note_replayed(&mut self, pid: u32, key: &LaunchKey, time_ns: u64) {
        let Some(learning) = self.learning.as_mut() else { return };
        let Some(window) = learning.windows.iter_mut().rev().find(|w| w.1 == pid && w.0 == *key && w.3.is_none())
        else {
            return;
        };
        if self.last_exec.get(key).is_some_and(|t| time_ns.saturating_sub(*t) < REPEAT_NS) {
            window.3 = self.book.get(key);
        }
    }

    /// Pairs `pid`'s exec start, if it has one, with the launch its exec is:
    /// the next start like it replays that launch at once.
    fn learn_start(&mut self, pid: u32, key: &LaunchKey, time_ns: u64) {
        let Some((start, at)) = self.starting.remove(&pid) else { return };
        if time_ns.saturating_sub(at) >= START_TTL_NS {
            return;
        }
        if self.started.len() >= MAX_STARTS
            && !self.started.contains_key(&start)
            && let Some(victim) = self.started.keys().next().cloned()
        {
            self.started.remove(&victim);
        }
        self.started.insert(start, key.clone());
    }

    /// Hands `job` to whoever replays, never blocking; false when the
    /// channel is full or gone (counted, unless the job is a repeat, which
    /// replays nothing).
    fn send(&mut self, job: ReplayJob) -> bool {
        let repeat = job.repeat;
        let sent = match &self.jobs {
            Some(jobs) => match jobs.try_send(job) {
                Ok(()) => true,
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            },
            None => false,
        };
        if !sent && !repeat {
            self.dropped_replays += 1;
        }
        sent
    }
}

/// The waves of `files` (`(file index, ranges)`), in order of expected need:
/// whoever replays submits one request per wave (about `wave_pages` pages,
/// in the file's order of first use). The executor runs requests in order,
/// and a file's whole list ahead of the next file's kept the loader's read
/// of a small library's header waiting behind tens of MiB of a large one's
/// pages (clang: libclang-cpp's 18 and libLLVM's 33 MiB ahead of
/// libstdc++'s first page).
///
/// A file whose profile knows when each range is first needed
/// ([`ReplayFile::due_ms`]) has each wave due then. Otherwise the launch is
/// taken to read its pages at an even rate over its span (`span_ms`, at
/// least the latest first touch), and a file's waves one after another
/// from its first touch, each due when the pages of the file's waves before
/// it would have been read at that rate: the first touch and the order
/// within each file are what such a profile knows. Ties keep the files'
/// order.
///
/// Counting pages, not waves: a small file is one wave of a few pages, and
/// when each wave took an equal share of the span, Chromium's ~300 small
/// files made the shares short and put 93 % of its 138 MiB binary ahead of
/// `icudtl.dat` (first touched at 30 % of the launch); the program got
/// there first, and its fault's 8 MiB read-around read the file whole,
/// queued beside the replay.
pub fn wave_order(files: &[ReplayFile], wave_pages: u64, span_ms: f64) -> Vec<(usize, &[PageRange])> {
    let span = files.iter().map(|f| f.first_touch_ms).fold(span_ms, f64::max).max(1.0);
    // (pages of the file before the wave, its due time if known, file,
    // wave), pushed file by file in each file's order.
    let mut waves: Vec<(u64, Option<f64>, usize, &[PageRange])> = Vec::new();
    let mut total = 0u64;
    for (i, f) in files.iter().enumerate() {
        let timed = f.due_ms.len() == f.ranges.len();
        let mut rest = f.ranges.as_slice();
        let mut before = 0u64;
        while !rest.is_empty() {
            let first = f.ranges.len() - rest.len();
            let wave = next_wave(&mut rest, wave_pages);
            waves.push((before, timed.then(|| f.due_ms[first]), i, wave));
            let pages: u64 = wave.iter().map(|r| r.len()).sum();
            before += pages;
            total += pages;
        }
    }
    let per_page = span / total.max(1) as f64;
    let due = |&(before, at, i, _): &(u64, Option<f64>, usize, &[PageRange])| {
        at.unwrap_or_else(|| files[i].first_touch_ms + before as f64 * per_page)
    };
    // A stable sort: ties keep the files' order, and each file's waves theirs.
    waves.sort_by(|a, b| due(a).total_cmp(&due(b)));
    waves.into_iter().map(|(_, _, i, w)| (i, w)).collect()
}

impl Policy for LaunchPolicy {
    fn name(&self) -> &str {
        "launch"
    }

    fn interests(&self) -> EventKinds {
        let replay = EventKinds::of(&[EventKind::ExecStart, EventKind::Exec, EventKind::PageAccess]);
        if self.learning.is_some() {
            replay.with(EventKinds::of(&[
                EventKind::PageMiss,
                EventKind::Fork,
                EventKind::Exit,
                EventKind::Lookup,
                EventKind::TensorLayout,
                EventKind::ColumnLayout,
            ]))
        } else {
            replay
        }
    }

    fn requests_observed_files(&self) -> bool {
        false
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        self.learn(event);
        match event {
            Event::ExecStart { pid, uid, path, shape, time_ns } => {
                let start = StartKey { uid: *uid, path: Arc::clone(path), shape: Arc::clone(shape) };
                let known = self.started.get(&start).cloned();
                if self.starting.len() >= MAX_STARTS && !self.starting.contains_key(pid) {
                    self.starting.retain(|_, (_, at)| time_ns.saturating_sub(*at) < START_TTL_NS);
                    if self.starting.len() >= MAX_STARTS {
                        self.starting.clear();
                    }
                }
                self.starting.insert(*pid, (start, *time_ns));
                if let Some(key) = known
                    && self.replay(key, *pid, *time_ns, Some(path), ctx)
                {
                    self.early_replays += 1;
                }
            }
            Event::Exec { pid, exe, shape, time_ns } => {
                let key = LaunchKey { exe: *exe, shape: Arc::clone(shape) };
                self.learn_start(*pid, &key, *time_ns);
                self.replay(key.clone(), *pid, *time_ns, None, ctx);
                self.note_replayed(*pid, &key, *time_ns);
            }
            Event::PageAccess { pid, file, .. } if !self.pending.is_empty() => {
                if let Some((_, replay)) = self.pending.remove(file)
                    && let Some(n) = replay.on_trigger.iter().position(|(t, _)| t == file)
                {
                    let origin = ctx.origin();
                    self.send(ReplayJob {
                        replay,
                        part: ReplayPart::Trigger(n),
                        exec: None,
                        origin,
                        pid: *pid,
                        repeat: false,
                    });
                }
            }
            _ => {}
        }
    }
}

fn event_time(event: &Event) -> Option<u64> {
    match event {
        Event::PageAccess { time_ns, .. }
        | Event::PageMiss { time_ns, .. }
        | Event::Exec { time_ns, .. }
        | Event::Fork { time_ns, .. }
        | Event::Exit { time_ns, .. }
        | Event::FileOpen { time_ns, .. } => Some(*time_ns),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::event::AccessKind;

    /// A learned launch carries the replay handed over for it (to score
    /// it against); one with no profile, or of another shape, none.
    #[test]
    fn a_finished_launch_carries_the_replay_its_exec_handed_over() {
        let (tx, rx) = std::sync::mpsc::sync_channel(8);
        let exe = FileId { dev: 1, ino: 1 };
        let book = book_of_one_page(exe);
        let (jobs, _job_rx) = replay_channel();
        let mut policy = LaunchPolicy::learning(book, WindowLimits::default(), 4, tx).replaying_to(jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        let s = 1_000_000_000;
        for (pid, shape, at) in [(5, "rustc --version", 0), (6, "rustc -V", 10 * s)] {
            policy.on_event(&Event::Exec { pid, exe, shape: shape.into(), time_ns: at }, &mut ctx);
            policy.on_event(&Event::Exit { pid, time_ns: at + 1000 }, &mut ctx);
        }
        let done: Vec<FinishedLaunch> = rx.try_iter().collect();
        assert_eq!(done.len(), 2);
        let replay = done[0].replay.as_ref().expect("the replayed launch carries its replay");
        assert_eq!(replay.exe, "/x/rustc");
        assert!(done[1].replay.is_none(), "no profile for that shape: not replayed");
    }

    /// A learning policy with one window at most, which 100 ms without a
    /// miss ends, and where its finished windows go.
    fn learner() -> (LaunchPolicy, std::sync::mpsc::Receiver<FinishedLaunch>) {
        let (tx, rx) = std::sync::mpsc::sync_channel(4);
        let limits = WindowLimits { idle_ms: 100, ..WindowLimits::default() };
        (LaunchPolicy::learning(ReplayBook::default(), limits, 1, tx), rx)
    }

    #[test]
    fn learning_opens_a_window_per_exec_and_hands_it_over() {
        let (mut policy, rx) = learner();
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        let exe = FileId { dev: 1, ino: 1 };
        let lib = FileId { dev: 1, ino: 2 };
        let shape: Arc<str> = "prog --flag".into();
        policy.on_event(&Event::Exec { pid: 5, exe, shape: Arc::clone(&shape), time_ns: 0 }, &mut ctx);
        policy.on_event(&Event::Exec { pid: 6, exe, shape: Arc::clone(&shape), time_ns: 0 }, &mut ctx); // over max_windows
        let access = |pid, ms: u64| Event::PageAccess {
            pid,
            file: lib,
            pages: PageRange::page(3),
            kind: AccessKind::Fault,
            time_ns: ms * 1_000_000,
        };
        policy.on_event(&access(5, 1), &mut ctx);
        policy
            .on_event(&Event::PageMiss { pid: 5, file: lib, pages: PageRange::page(3), time_ns: 1_000_000 }, &mut ctx);
        assert!(rx.try_recv().is_err(), "window still open");
        // Another process's event 200 ms later: idle ends the window.
        policy.on_event(&access(99, 200), &mut ctx);
        let finished = rx.try_recv().expect("window handed over");
        assert_eq!((finished.exe, finished.pid, finished.shape), (exe, 5, shape));
        let names = |id: FileId, _| {
            Some(crate::launch::FileIdentity {
                path: format!("/{}", id.ino),
                dev: id.dev,
                ino: id.ino,
                size: 1,
                mtime_ns: 0,
            })
        };
        let run = finished.recorder.finish(names);
        assert_eq!(run.files.len(), 1);
        assert_eq!(run.files[0].accesses, vec![PageRange::page(3)]);
        assert_eq!(policy.skipped_windows(), 1);
        assert!(out.is_empty(), "learning alone requests nothing");
    }

    #[test]
    fn a_model_read_in_the_window_is_left_out_of_the_launch() {
        let (mut policy, rx) = learner();
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        let (exe, lib, model) = (FileId { dev: 1, ino: 1 }, FileId { dev: 1, ino: 2 }, FileId { dev: 1, ino: 3 });
        policy.on_event(&Event::Exec { pid: 5, exe, shape: "load model".into(), time_ns: 0 }, &mut ctx);
        let read = |file, page, ms: u64| {
            [
                Event::PageAccess {
                    pid: 5,
                    file,
                    pages: PageRange::page(page),
                    kind: AccessKind::Read,
                    time_ns: ms * 1_000_000,
                },
                Event::PageMiss { pid: 5, file, pages: PageRange::page(page), time_ns: ms * 1_000_000 },
            ]
        };
        for (i, event) in [read(lib, 0, 1), read(model, 0, 2)].iter().flatten().enumerate() {
            policy.on_event(event, &mut ctx);
            assert!(i < 3 || rx.try_recv().is_err());
        }
        // The model is recognised after its first page was read: what the
        // window has of it goes, and its later pages never come in (nor
        // do they keep the window open: it ends 100 ms after the library).
        policy.on_event(&Event::TensorLayout { file: model, ranges: Vec::new().into() }, &mut ctx);
        for ms in [3, 50, 90, 120] {
            for event in read(model, ms, ms) {
                policy.on_event(&event, &mut ctx);
            }
        }
        let finished = rx.try_recv().expect("the window ended 100 ms after the last miss not in the model");
        assert_eq!(finished.recorder.missed_pages(), 1);
        assert_eq!(finished.recorder.files().map(|(f, _)| f).collect::<Vec<_>>(), vec![lib]);
        assert!(out.is_empty());
    }

    #[test]
    fn the_dispatcher_resolves_nothing_for_launch_alone() {
        struct Null;
        impl crate::executor::RequestSink for Null {
            fn submit(&self, _: crate::request::Request) -> Result<(), crate::executor::SubmitError> {
                Ok(())
            }
        }
        let mut rt = crate::runtime::Runtime::with_sink(Arc::new(Null));
        rt.add_policy(Box::new(LaunchPolicy::new(ReplayBook::default(), replay_channel().0)));
        assert!(rt.wants(EventKind::PageAccess));
        let any = FileId { dev: 1, ino: 1 };
        assert!(!rt.wants_file_of(EventKind::PageAccess, any), "launch requests only files it was handed");
        rt.add_policy(crate::policies::by_name("stream").expect("stream policy"));
        assert!(rt.wants_file_of(EventKind::PageAccess, any), "stream requests the files it observes");
    }

    /// Regression: every booked replay held a descriptor per profiled file
    /// and directory for as long as it was booked, so a user's profiles of
    /// thousands of their own files took the daemon to its descriptor limit.
    /// A replay names its files and directories; the exec hands the policy's
    /// owner a job naming them, and the policy opens nothing, requests
    /// nothing itself and emits no metadata request.
    #[test]
    fn exec_hands_a_job_naming_the_files_and_directories_and_holds_nothing() {
        let book = ReplayBook::default();
        let exe = FileId { dev: 1, ino: 1 };
        let lookups = vec![PathLookup { dir: "/usr/lib".into(), names: vec!["a.so".into()].into() }];
        let replay = Replay {
            at_exec: vec![page_file("/nonexistent/lib.so", 2)],
            dirs: vec!["/usr/lib".into(), "/".into()],
            lookups: lookups.clone(),
            ..Replay::default()
        };
        book.insert(LaunchKey::new(exe, "prog"), replay);
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book, jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(3));
        policy.on_event(&Event::Exec { pid: 5, exe, shape: "prog".into(), time_ns: 0 }, &mut ctx);
        assert!(ctx.take_metadata().is_empty(), "the metadata request is the replayer's");
        drop(ctx);
        assert!(out.is_empty(), "the page requests are the replayer's");
        let job = rx.try_recv().expect("one job");
        assert_eq!((job.part, job.origin, job.exec.is_none()), (ReplayPart::AtExec, crate::policy::PolicyId(3), true));
        assert_eq!(job.replay.dirs, ["/usr/lib", "/"]);
        assert_eq!(job.replay.lookups, lookups);
        assert_eq!(job.files().iter().map(|f| f.identity.path.as_str()).collect::<Vec<_>>(), ["/nonexistent/lib.so"]);
        assert!(rx.try_recv().is_err(), "one job per replay");
    }

    /// Whoever replays is behind: the channel's bound holds, the replays past
    /// it are dropped and counted, and the event path never waits.
    #[test]
    fn a_full_job_channel_drops_replays_and_counts_them() {
        let book = ReplayBook::default();
        for ino in 1..=MAX_QUEUED_REPLAYS as u64 + 3 {
            book.insert(LaunchKey::new(FileId { dev: 1, ino }, "prog"), Replay::default());
        }
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book, jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        for ino in 1..=MAX_QUEUED_REPLAYS as u64 + 3 {
            let exe = FileId { dev: 1, ino };
            policy.on_event(&Event::Exec { pid: ino as u32, exe, shape: "prog".into(), time_ns: 0 }, &mut ctx);
        }
        assert_eq!(policy.replays(), MAX_QUEUED_REPLAYS as u64);
        assert_eq!(policy.dropped_replays(), 3);
        assert_eq!(rx.try_iter().count(), MAX_QUEUED_REPLAYS);
        // Gone: every replay is dropped, none blocks.
        drop(rx);
        let exe = FileId { dev: 1, ino: 1 };
        policy.on_event(&Event::Exec { pid: 99, exe, shape: "prog".into(), time_ns: 10_000_000_000 }, &mut ctx);
        assert_eq!(policy.dropped_replays(), 4);
    }

    #[test]
    fn a_trigger_hands_over_its_own_files_once() {
        let book = ReplayBook::default();
        let exe = FileId { dev: 1, ino: 1 };
        let trigger = page_file("/t/trigger", 10);
        let later = page_file("/t/later", 11);
        let replay = Replay {
            at_exec: vec![trigger.clone()],
            on_trigger: vec![(trigger.identity.id(), vec![later])],
            ..Replay::default()
        };
        book.insert(LaunchKey::new(exe, "prog"), replay);
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book, jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        policy.on_event(&Event::Exec { pid: 5, exe, shape: "prog".into(), time_ns: 0 }, &mut ctx);
        let access = Event::PageAccess {
            pid: 5,
            file: trigger.identity.id(),
            pages: PageRange::page(0),
            kind: crate::event::AccessKind::Read,
            time_ns: 1,
        };
        policy.on_event(&access, &mut ctx);
        policy.on_event(&access, &mut ctx);
        let parts: Vec<ReplayPart> = rx.try_iter().map(|j| j.part).collect();
        assert_eq!(parts, [ReplayPart::AtExec, ReplayPart::Trigger(0)]);
    }

    /// A one-page file named `path` with inode `ino` (nothing on disk: a
    /// replay names its files, it does not hold them).
    fn page_file(path: &str, ino: u64) -> ReplayFile {
        ReplayFile {
            identity: FileIdentity { path: path.into(), dev: 1, ino, size: 4096, mtime_ns: 0 },
            ranges: vec![PageRange::page(0)],
            first_touch_ms: 0.0,
            due_ms: Vec::new(),
        }
    }

    /// A file `name` (inode `ino`) to replay `ranges` of, first touched at
    /// `first_touch_ms`.
    fn named(name: &str, ino: u64, ranges: Vec<PageRange>, first_touch_ms: f64) -> ReplayFile {
        ReplayFile { ranges, first_touch_ms, ..page_file(name, ino) }
    }

    #[test]
    fn waves_are_ordered_by_when_they_are_needed() {
        let open = |name: &str| page_file(name, 0).identity;
        // A large library touched first (20 waves of one page) and a small
        // one touched 1 ms later, in a launch of 100 ms: the small one's
        // page comes after the large one's first waves, not after all 20.
        let big = ReplayFile {
            identity: open("big"),
            ranges: (0..20).map(|i| PageRange::page(i * 2)).collect(),
            first_touch_ms: 0.0,
            due_ms: Vec::new(),
        };
        let small = ReplayFile {
            identity: open("small"),
            ranges: vec![PageRange::page(0)],
            first_touch_ms: 1.0,
            due_ms: Vec::new(),
        };
        let files = [big, small];
        let order: Vec<usize> = wave_order(&files, 1, 100.0).into_iter().map(|(f, _)| f).collect();
        assert_eq!(order.len(), 21);
        assert_eq!(order.iter().position(|&f| f == 1), Some(1), "{order:?}");
        // The big file's own waves keep their order.
        let big_waves: Vec<u64> =
            wave_order(&files, 1, 100.0).into_iter().filter(|(f, _)| *f == 0).map(|(_, w)| w[0].start).collect();
        assert_eq!(big_waves, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        // Waves are due by their pages, not their number: 40 small files of
        // one page each do not shorten the big file's 4-page waves.
        let big4 = ReplayFile {
            identity: open("big4"),
            ranges: (0..80).map(|i| PageRange::page(i * 2)).collect(),
            first_touch_ms: 0.0,
            due_ms: Vec::new(),
        };
        let mut many = vec![big4];
        for i in 0..40 {
            many.push(ReplayFile {
                identity: open(&format!("early{i}")),
                ranges: vec![PageRange::page(0)],
                first_touch_ms: 2.0,
                due_ms: Vec::new(),
            });
        }
        many.push(ReplayFile {
            identity: open("late"),
            ranges: vec![PageRange::page(0)],
            first_touch_ms: 48.0,
            due_ms: Vec::new(),
        });
        let order: Vec<usize> = wave_order(&many, 4, 100.0).into_iter().map(|(f, _)| f).collect();
        assert_eq!(order.len(), 20 + 41);
        let late = order.iter().position(|&f| f == 41).unwrap();
        let big_before = order[..late].iter().filter(|&&f| f == 0).count();
        // 121 pages over 100 ms: a 4-page wave every 3.3 ms, 15 before 48 ms.
        assert_eq!(big_before, 15, "{order:?}");
        // One wave per file (wave_pages 0): one request each, files in order.
        let whole: Vec<usize> = wave_order(&files, 0, 100.0).into_iter().map(|(f, _)| f).collect();
        assert_eq!(whole, vec![0, 1]);
    }

    #[test]
    fn waves_with_known_times_are_due_then() {
        let open = |name: &str| page_file(name, 0).identity;
        // A binary of two one-page waves touched first, and a library
        // without times touched at `lib_ms`, in a launch of 100 ms. Without
        // times the binary's second wave would be due at 33 ms (3 pages
        // over 100 ms); with them it is due when the profile says.
        let order = |binary_due: Vec<f64>, lib_ms: f64| -> Vec<(usize, u64)> {
            let binary = ReplayFile {
                identity: open("binary"),
                ranges: vec![PageRange::page(0), PageRange::page(8)],
                first_touch_ms: 0.0,
                due_ms: binary_due,
            };
            let lib = ReplayFile {
                identity: open("lib"),
                ranges: vec![PageRange::page(0)],
                first_touch_ms: lib_ms,
                due_ms: Vec::new(),
            };
            let files = [binary, lib];
            wave_order(&files, 1, 100.0).into_iter().map(|(f, w)| (f, w[0].start)).collect()
        };
        assert_eq!(order(Vec::new(), 10.0), vec![(0, 0), (1, 0), (0, 8)], "untimed: by the even rate");
        assert_eq!(order(vec![1.0, 5.0], 10.0), vec![(0, 0), (0, 8), (1, 0)], "both of the binary's pages first");
        assert_eq!(order(vec![1.0, 90.0], 50.0), vec![(0, 0), (1, 0), (0, 8)], "the library between them");
        assert_eq!(order(Vec::new(), 50.0), vec![(0, 0), (0, 8), (1, 0)], "untimed, the library last");
    }

    /// A book holding, for `rustc --version` of `exe` (stored as
    /// `/x/rustc`), a replay of one page of a file.
    fn book_of_one_page(exe: FileId) -> ReplayBook {
        let book = ReplayBook::default();
        let at_exec = vec![named("/x/f", 2, vec![PageRange::page(1)], 0.0)];
        book.insert(
            LaunchKey::new(exe, "rustc --version"),
            Replay { exe: "/x/rustc".into(), at_exec, ..Replay::default() },
        );
        book
    }

    #[test]
    fn repeated_exec_replays_once() {
        let exe = FileId { dev: 1, ino: 1 };
        let book = book_of_one_page(exe);
        assert!(book.take_replayed().is_empty(), "nothing replayed yet");
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book.clone(), jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        let exec = |pid, shape: &str, time_ns| Event::Exec { pid, exe, shape: shape.into(), time_ns };
        policy.on_event(&exec(5, "rustc --version", 0), &mut ctx);
        policy.on_event(&exec(6, "rustc --version", 10), &mut ctx); // the driver re-running itself
        let replayed = vec![("/x/rustc".to_owned(), "rustc --version".to_owned())];
        assert_eq!(book.take_replayed(), replayed, "a replay marks its profile used");
        assert!(book.take_replayed().is_empty(), "once per take");
        policy.on_event(&exec(7, "rustc --version", 2_000_000_000), &mut ctx);
        assert_eq!(book.take_replayed(), replayed);
        policy.on_event(&exec(8, "rustc -V", 4_000_000_000), &mut ctx);
        assert!(book.take_replayed().is_empty(), "an exec with no profile marks nothing");
        // The repeat is looked at (is it warm?), not replayed.
        let jobs: Vec<(u32, bool)> = rx.try_iter().map(|job| (job.pid, job.repeat)).collect();
        assert_eq!(jobs, [(5, false), (6, true), (7, false)]);
        assert_eq!(policy.replays(), 2);
    }

    #[test]
    fn an_exec_start_replays_the_launch_its_last_start_led_to() {
        let exe = FileId { dev: 1, ino: 1 };
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book_of_one_page(exe), jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        let s = 1_000_000_000;
        let start = |pid, uid, path: &str, time_ns| Event::ExecStart {
            pid,
            uid,
            path: path.into(),
            shape: "rustc --version".into(),
            time_ns,
        };
        let exec = |pid, time_ns| Event::Exec { pid, exe, shape: "rustc --version".into(), time_ns };
        // Unknown at first: the start replays nothing, the exec does, and
        // the pair is learned.
        policy.on_event(&start(5, 0, "/bin/rustc", 0), &mut ctx);
        assert_eq!((policy.replays(), policy.early_replays()), (0, 0));
        policy.on_event(&exec(5, 1000), &mut ctx);
        assert_eq!((policy.replays(), policy.early_replays()), (1, 0));
        assert_eq!(rx.try_recv().expect("a job").exec, None, "an exec done has nothing to resolve");
        // The same start later replays at once, and its exec does not again;
        // the exec's path is resolved first.
        policy.on_event(&start(6, 0, "/bin/rustc", 10 * s), &mut ctx);
        assert_eq!((policy.replays(), policy.early_replays()), (2, 1));
        assert_eq!(rx.try_recv().expect("a job").exec, Some(Arc::<str>::from("/bin/rustc")));
        policy.on_event(&exec(6, 10 * s + 1000), &mut ctx);
        assert_eq!(policy.replays(), 2, "the exec right after its start is not replayed twice");
        // Another user's start of the same path, or another path, waits
        // for its exec.
        policy.on_event(&start(7, 1000, "/bin/rustc", 20 * s), &mut ctx);
        policy.on_event(&start(8, 0, "/tmp/rustc", 30 * s), &mut ctx);
        assert_eq!(policy.early_replays(), 1);
        // A start whose exec came too late (a pid reused) is not paired.
        policy.on_event(&start(9, 0, "/opt/rustc", 40 * s), &mut ctx);
        policy.on_event(&exec(9, 45 * s), &mut ctx);
        policy.on_event(&start(10, 0, "/opt/rustc", 50 * s), &mut ctx);
        assert_eq!(policy.early_replays(), 1);
        assert!(ctx.take_metadata().is_empty());
        drop(ctx);
        assert!(out.is_empty());
        let (repeats, replays) = rx.try_iter().partition::<Vec<_>, _>(|job| job.repeat);
        assert_eq!(replays.len() + 2, policy.replays() as usize);
        assert_eq!(repeats.len(), 1, "the exec right after its start: {repeats:?}");
    }

    #[test]
    fn only_the_launches_of_its_command_shape_replay_a_profile() {
        let book = ReplayBook::default();
        let exe = FileId { dev: 1, ino: 1 };
        let replay = || Replay { at_exec: vec![named("/x/f", 2, vec![PageRange::page(1)], 0.0)], ..Replay::default() };
        book.insert(LaunchKey::new(exe, "rustc --version"), replay());
        book.insert(LaunchKey::new(exe, ""), replay());
        assert_eq!(book.len(), 1, "an unshaped profile is never booked");
        let (jobs, rx) = replay_channel();
        let mut policy = LaunchPolicy::new(book, jobs);
        let files = crate::policy::FileTable::default();
        let mut out = Vec::new();
        let mut ctx = PolicyContext::new(&files, &mut out, crate::policy::PolicyId(1));
        for (pid, shape) in [(5, "rustc hello.rs"), (6, ""), (7, "cargo --version")] {
            policy.on_event(&Event::Exec { pid, exe, shape: shape.into(), time_ns: 0 }, &mut ctx);
        }
        assert_eq!(policy.replays(), 0, "other shapes of the executable replay nothing");
        policy.on_event(&Event::Exec { pid: 8, exe, shape: "rustc --version".into(), time_ns: 0 }, &mut ctx);
        assert_eq!((rx.try_iter().count(), policy.replays()), (1, 1));
    }
}
