//! Replays, the launch service's side: off the event path, and holding no
//! descriptor longer than a replay needs it.
//!
//! [`plan_replay`] walks a profile into a [`Replay`] that names its files
//! (their learned identities) and directories and holds nothing open: a
//! booked profile costs memory, never a descriptor. At exec the `launch`
//! policy hands a [`ReplayJob`] to the [`Replayer`] thread, which opens each
//! file as its waves come up ([`FileRef::open_no_follow`]: no symbolic link
//! followed, never blocking, regular files only), checks it against its
//! learned identity (a file that changed is left out), submits its waves,
//! and lets its descriptor go once the executor holds its requests; at most
//! [`MAX_REPLAY_FILES`] files a job, [`MAX_DIRS`] directories. The
//! directories are opened the same way, for the metadata request that goes
//! first. [`prepare_replay`] makes the one replay of `predictio run`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::thread::JoinHandle;
use std::time::Duration;

use predictio::executor::RequestSink;
use predictio::file::FileError;
use predictio::launch::policy::{MAX_REPLAY_FILES, PathLookup, ReplayJob, ReplayPart, wave_order};
use predictio::launch::profile::MAX_DIRS;
use predictio::launch::{
    FileIdentity, Freshness, LaunchKey, Profile, Replay, ReplayBook, ReplayFile, ReplayPacing, WalkLimits, Walked,
};
use predictio::request::{MetaDir, MetaLookup, MetaRequest};
use predictio::{FileRef, Request, Urgency};

use super::store::{self, Store};

/// Walks `profile` within `walk` into a replay that asks for the window
/// `pacing` gives its size. Opens none of its files: they are named by
/// their learned identities and opened when the replay runs
/// ([`run_job`]). Looks directories up (`lstat`, and a short-lived open
/// of each looked-up directory to see whether it is on storage): call it
/// off the event path.
pub fn plan_replay(profile: &Profile, walk: &WalkLimits, pacing: &ReplayPacing) -> Replay {
    let plan = profile.plan(walk);
    let latest = profile.files.iter().map(|f| f.first_touch_ms).fold(0.0f64, f64::max);
    let window = profile.learned_ms / f64::from(profile.runs.max(1));
    let file = |index: usize, walked: Walked| ReplayFile {
        identity: profile.files[index].identity.clone(),
        ranges: walked.ranges,
        first_touch_ms: profile.files[index].first_touch_ms,
        due_ms: walked.due_ms,
    };
    let mut replay = Replay {
        exe: profile.exe.path.clone(),
        learned_s: profile.last_used_s,
        wave_pages: walk.wave_pages,
        span_ms: window.max(latest),
        ..Replay::default()
    };
    replay.at_exec = plan.at_exec.into_iter().map(|(i, w)| file(i, w)).collect();
    for (on, files) in plan.on_trigger {
        let trigger = profile.files[on].identity.id();
        replay.on_trigger.push((trigger, files.into_iter().map(|(i, w)| file(i, w)).collect()));
    }
    replay.dirs = profile.dirs.iter().take(MAX_DIRS).cloned().collect();
    let listed = looked_up_dirs(&profile.lookups, &replay.dirs);
    replay.dirs.extend(listed);
    replay.lookups = lookups_of(&profile.lookups, &replay.dirs);
    replay.window_pages = pacing.window_pages(replay.pages());
    replay
}

/// Leaves out of `replay` (listing them in [`Replay::changed`] and
/// [`Replay::missing`]) the files whose path no longer names their learned
/// identity (`lstat`: a symbolic link there now is a change). Opens
/// nothing; a replay checks each file again when it opens it. For a note
/// on what will be replayed.
pub fn check_files(replay: &mut Replay) {
    let keep = |files: &mut Vec<ReplayFile>, changed: &mut Vec<String>, missing: &mut Vec<String>| {
        files.retain(|f| match std::fs::symlink_metadata(&f.identity.path) {
            Ok(meta) if f.identity.compare(&meta) == Freshness::Fresh => true,
            Ok(_) => {
                changed.push(f.identity.path.clone());
                false
            }
            Err(_) => {
                missing.push(f.identity.path.clone());
                false
            }
        })
    };
    let (mut changed, mut missing) = (Vec::new(), Vec::new());
    keep(&mut replay.at_exec, &mut changed, &mut missing);
    for (_, files) in &mut replay.on_trigger {
        keep(files, &mut changed, &mut missing);
    }
    replay.on_trigger.retain(|t| !t.1.is_empty());
    replay.changed.extend(changed);
    replay.missing.extend(missing);
}

/// What running replay jobs did (one job's, or a [`Replayer`]'s sum).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReplayCounts {
    /// Jobs run.
    pub jobs: u64,
    /// Files opened and found as learned.
    pub opened: u64,
    /// Files left out: not the learned file any more (another inode, size
    /// or mtime; not a regular file; a symbolic link).
    pub changed: u64,
    /// Files left out: gone, or not to be opened (a symbolic link on the
    /// way, no permission, no descriptor left).
    pub missing: u64,
    /// Files left out: past [`MAX_REPLAY_FILES`] of one job.
    pub capped: u64,
    /// Directories opened for the metadata request.
    pub dirs: u64,
    /// Requests submitted.
    pub requests: u64,
    /// Requests (and metadata requests) the executor refused.
    pub refused: u64,
    /// Jobs of those not run at all: shadow mode (`[launch] shadow`), which
    /// scores replays without issuing them.
    #[serde(default)]
    pub shadowed: u64,
    /// Jobs of those that found the launch warm and replayed nothing: each
    /// of [`WARM_SAMPLE`] files spread over the job, still as learned, was
    /// resident over the pages the job asks of it (jobs of at least
    /// [`WARM_CHECK_FILES`] files; see `looks_warm`).
    #[serde(default)]
    pub warm: u64,
    /// Launches of a command replayed less than 200 ms before (a build's
    /// hundredth compiler run): not replayed again, only looked at, and
    /// counted in [`Self::warm`] (not in [`Self::jobs`]) when warm.
    #[serde(default)]
    pub repeats: u64,
}

impl ReplayCounts {
    fn add(&mut self, other: &ReplayCounts) {
        self.jobs += other.jobs;
        self.opened += other.opened;
        self.changed += other.changed;
        self.missing += other.missing;
        self.capped += other.capped;
        self.dirs += other.dirs;
        self.requests += other.requests;
        self.refused += other.refused;
        self.shadowed += other.shadowed;
        self.warm += other.warm;
        self.repeats += other.repeats;
    }
}

/// Files of a job looked at before it runs, spread over its order of use:
/// when each is resident over the pages the job asks of it, the launch is
/// taken for a warm one and nothing is replayed.
pub const WARM_SAMPLE: usize = 8;
/// Jobs of fewer files are replayed without that look: they cost little
/// more than it, and a few files are no sample of the launch.
pub const WARM_CHECK_FILES: usize = 24;
/// Ranges of one sampled file whose residency is looked at, spread over it.
const WARM_RANGES: usize = 16;

/// Whether the launch `files` are for looks warm: [`WARM_SAMPLE`] of them
/// still as learned, taken from twice as many spread over their order, each
/// resident over the pages asked of it (up to [`WARM_RANGES`] of its ranges
/// looked at); one that is not makes the launch cold.
/// A replay on a warm cache only skips resident pages, but opening the
/// profile's files, looking at every range and listing its directories
/// cost a warm launch of a large program several milliseconds of CPU.
fn looks_warm(files: &[ReplayFile]) -> bool {
    if files.len() < WARM_CHECK_FILES {
        return false;
    }
    // `Some(resident)` for a file still as learned; a file the launch
    // rewrites each time (its output, a temporary file) is another file by
    // now and says nothing: the next candidate is looked at instead.
    let resident_as_asked = |f: &ReplayFile| {
        let mut ignored = ReplayCounts::default();
        let file = open_checked(&f.identity, &mut ignored)?;
        let step = f.ranges.len().div_ceil(WARM_RANGES).max(1);
        Some(
            f.ranges
                .iter()
                .step_by(step)
                .all(|r| predictio::cache::cache_stat(&file, *r).is_ok_and(|stat| stat.nr_cache >= r.len())),
        )
    };
    // Twice the sample's candidates, spread over the order.
    let candidates = (0..2 * WARM_SAMPLE).map(|k| k * files.len() / (2 * WARM_SAMPLE));
    let mut checked = 0;
    for i in candidates {
        match resident_as_asked(&files[i]) {
            Some(false) => return false,
            Some(true) => checked += 1,
            None => {}
        }
        if checked == WARM_SAMPLE {
            return true;
        }
    }
    false
}

/// Opens `identity`'s path as a record's path is opened
/// ([`FileRef::open_no_follow`]) and checks that it is still that file.
fn open_checked(identity: &FileIdentity, counts: &mut ReplayCounts) -> Option<FileRef> {
    let file = match FileRef::open_no_follow(&identity.path) {
        Ok(file) => file,
        Err(FileError::NotRegular { .. }) => {
            counts.changed += 1;
            return None;
        }
        Err(_) => {
            counts.missing += 1;
            return None;
        }
    };
    match file.file().metadata().map(|m| identity.compare(&m)) {
        Ok(Freshness::Fresh) => {
            counts.opened += 1;
            Some(file)
        }
        Ok(_) => {
            counts.changed += 1;
            None
        }
        Err(_) => {
            counts.missing += 1;
            None
        }
    }
}

/// Threads a replay job opens its files and directories on, beside the one
/// that submits. On a cold cache each open is a chain of synchronous reads
/// (directory blocks, inodes) that the device would serve many at once:
/// opened one after another, a Clang launch's 41 directories and 80 files
/// took the replayer 47 ms of the launch's 135. One opener beside the
/// submitter: clang 131 ms, Chromium 644; four: 120 and 626; eight: 121
/// and 622 (5 interleaved cold pairs, the same profiles).
const OPENERS: usize = 4;

/// Runs one replay job: for [`ReplayPart::AtExec`] first the metadata
/// request of the exec's path, then that of its lookups by directory and
/// the directories to list (each directory opened without following a
/// symbolic link, at most [`MAX_DIRS`]) once they are open; and one request
/// per wave of its files in [`wave_order`], each file checked against its
/// identity, at most [`MAX_REPLAY_FILES`] files. The directories and the
/// files are opened on [`OPENERS`] threads, the files in the order of their
/// first waves, while this thread submits each wave as soon as its file is
/// open. Holds no descriptor when it returns: the executor holds what its
/// queued requests need, and lets them go when they are done.
pub fn run_job(job: &ReplayJob, sink: &dyn RequestSink) -> ReplayCounts {
    if job.repeat {
        let warm = u64::from(looks_warm(job.files()));
        return ReplayCounts { repeats: 1, warm, ..ReplayCounts::default() };
    }
    let mut counts = ReplayCounts { jobs: 1, ..ReplayCounts::default() };
    let replay = &job.replay;
    if looks_warm(job.files()) {
        counts.warm = 1;
        return counts;
    }
    let at_exec = job.part == ReplayPart::AtExec;
    if at_exec && let Some(exec) = &job.exec {
        let request =
            MetaRequest { execs: vec![Arc::clone(exec)], lookups: Vec::new(), dirs: Vec::new(), origin: job.origin };
        if sink.submit_meta(request).is_err() {
            counts.refused += 1;
        }
    }
    let files = job.files();
    let order = wave_order(files, replay.wave_pages, replay.span_ms);
    // Per file, its last wave; the files in the order of their first.
    let mut last: Vec<Option<usize>> = vec![None; files.len()];
    let mut firsts = Vec::new();
    for (k, (f, _)) in order.iter().enumerate() {
        if last[*f].replace(k).is_none() {
            firsts.push(*f);
        }
    }
    counts.capped += firsts.len().saturating_sub(MAX_REPLAY_FILES) as u64;
    firsts.truncate(MAX_REPLAY_FILES);
    let opened = Opened::new(files.len(), &firsts);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let dirs: std::sync::Mutex<Option<OpenedDirs>> = std::sync::Mutex::new(None);
    let submit_dirs = |counts: &mut ReplayCounts| {
        let Some((lookups, dirs, dir_counts)) = dirs.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return;
        };
        counts.dirs += dir_counts.dirs;
        if !(lookups.is_empty() && dirs.is_empty())
            && sink.submit_meta(MetaRequest { execs: Vec::new(), lookups, dirs, origin: job.origin }).is_err()
        {
            counts.refused += 1;
        }
    };
    std::thread::scope(|scope| {
        if at_exec {
            scope.spawn(|| {
                let mut c = ReplayCounts::default();
                let (lookups, opened) = open_dirs(replay, &mut c);
                *dirs.lock().unwrap_or_else(|e| e.into_inner()) = Some((lookups, opened, c));
            });
        }
        let openers: Vec<_> = (0..OPENERS.min(firsts.len()))
            .map(|_| {
                let (opener, firsts, next) = (opened.opener(), &firsts, &next);
                let opened = &opened;
                scope.spawn(move || {
                    // The whole hold moves in (not only the field set below):
                    // it is let go when this thread ends.
                    let mut opener = opener;
                    while let Some(&f) = firsts.get(next.fetch_add(1, Ordering::Relaxed)) {
                        opener.current = Some(f);
                        let mut c = ReplayCounts::default();
                        let file = open_checked(&files[f].identity, &mut c);
                        opened.put(f, file, &c);
                    }
                })
            })
            .collect();
        for (k, (f, wave)) in order.into_iter().enumerate() {
            submit_dirs(&mut counts);
            if let Some(file) = opened.wait(f) {
                let request = Request::new(file, wave.to_vec(), job.origin)
                    .with_urgency(Urgency::Imminent)
                    .paced(replay.window_pages)
                    .for_process(job.pid);
                counts.requests += 1;
                if sink.submit(request).is_err() {
                    counts.refused += 1;
                }
            }
            if last[f] == Some(k) {
                // Its last wave is submitted: the queued requests hold it now.
                opened.release(f);
            }
        }
        for opener in openers {
            // Joined here, a panicking opener does not take the replayer
            // down with it: its files were given up (see `Opener`).
            if opener.join().is_err() {
                tracing::warn!(exe = %replay.exe, "a replay's opener panicked: its files were left out");
            }
        }
    });
    submit_dirs(&mut counts);
    let c = opened.counts();
    (counts.opened, counts.changed, counts.missing) = (c.opened, c.changed, c.missing);
    counts
}

/// A [`run_job`]'s lookups and directories, opened, with its counts.
type OpenedDirs = (Vec<MetaLookup>, Vec<MetaDir>, ReplayCounts);

/// The files of a [`run_job`] as its openers open them.
struct Opened {
    state: std::sync::Mutex<OpenedState>,
    changed: std::sync::Condvar,
}

struct OpenedState {
    slots: Vec<Slot>,
    counts: ReplayCounts,
    /// Openers not yet gone ([`Opened::opener`]).
    openers: usize,
}

/// One opener thread's hold on an [`Opened`]: when it goes, normally or
/// by a panic, the file it was opening (if not put yet) is given up, and
/// once the last opener has gone, every file still waiting is too, so that
/// [`Opened::wait`] never waits for a file no one will open.
struct Opener<'a> {
    opened: &'a Opened,
    /// The file being opened.
    current: Option<usize>,
}

impl Drop for Opener<'_> {
    fn drop(&mut self) {
        let mut state = self.opened.lock();
        if let Some(f) = self.current
            && matches!(state.slots[f], Slot::Waiting)
        {
            state.slots[f] = Slot::Open(None);
        }
        state.openers -= 1;
        if state.openers == 0 {
            for slot in state.slots.iter_mut().filter(|s| matches!(s, Slot::Waiting)) {
                *slot = Slot::Open(None);
            }
        }
        drop(state);
        self.opened.changed.notify_all();
    }
}

enum Slot {
    /// Not to be opened (past [`MAX_REPLAY_FILES`]), or let go.
    None,
    /// To be opened.
    Waiting,
    /// What its open gave.
    Open(Option<FileRef>),
}

impl Opened {
    fn new(files: usize, wanted: &[usize]) -> Self {
        let mut slots: Vec<Slot> = (0..files).map(|_| Slot::None).collect();
        for &f in wanted {
            slots[f] = Slot::Waiting;
        }
        let state = OpenedState { slots, counts: ReplayCounts::default(), openers: 0 };
        Self { state: std::sync::Mutex::new(state), changed: std::sync::Condvar::new() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OpenedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new opener's hold (see [`Opener`]).
    fn opener(&self) -> Opener<'_> {
        self.lock().openers += 1;
        Opener { opened: self, current: None }
    }

    fn put(&self, f: usize, file: Option<FileRef>, counts: &ReplayCounts) {
        let mut state = self.lock();
        state.slots[f] = Slot::Open(file);
        state.counts.opened += counts.opened;
        state.counts.changed += counts.changed;
        state.counts.missing += counts.missing;
        drop(state);
        self.changed.notify_all();
    }

    /// File `f` once its opener is done with it (`None`: not opened).
    fn wait(&self, f: usize) -> Option<FileRef> {
        let mut state = self.lock();
        while matches!(state.slots[f], Slot::Waiting) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        match &state.slots[f] {
            Slot::Open(file) => file.clone(),
            _ => None,
        }
    }

    fn release(&self, f: usize) {
        self.lock().slots[f] = Slot::None;
    }

    fn counts(&self) -> ReplayCounts {
        self.lock().counts
    }
}

/// The replay's lookups and directories, opened (see [`run_job`]).
fn open_dirs(replay: &Replay, counts: &mut ReplayCounts) -> (Vec<MetaLookup>, Vec<MetaDir>) {
    let mut opened: HashMap<String, Option<MetaDir>> = HashMap::new();
    let mut open = |path: &str| -> Option<MetaDir> {
        if let Some(dir) = opened.get(path) {
            return dir.clone();
        }
        let dir = (opened.len() < MAX_DIRS).then(|| MetaDir::open_no_follow(path).ok()).flatten();
        counts.dirs += u64::from(dir.is_some());
        opened.insert(path.to_owned(), dir.clone());
        dir
    };
    let lookups: Vec<MetaLookup> = replay
        .lookups
        .iter()
        .filter_map(|l| open(&l.dir).map(|dir| MetaLookup { dir, names: Arc::clone(&l.names) }))
        .collect();
    let dirs: Vec<MetaDir> = replay.dirs.iter().filter_map(|d| open(d)).collect();
    (lookups, dirs)
}

/// The launch service's replay thread (see the module docs): runs the jobs
/// the `launch` policy hands it, in order, at the daemon's own priority (a
/// replay is worth only what it fetches before the program needs it).
/// It sleeps on the channel, with no timeout, and ends once every sender
/// is gone; drop the senders first (the `launch` policy, with the pipeline
/// or runtime holding it): dropping the replayer joins the thread once
/// they are, and leaves it to end with them (after [`JOIN_WAIT`]) if not.
pub struct Replayer {
    thread: Option<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    totals: ReplayTotals,
}

/// A [`Replayer`]'s running totals, readable from any thread (the daemon's
/// status) while the replayer runs.
#[derive(Clone, Debug, Default)]
pub struct ReplayTotals {
    sums: Arc<[AtomicU64; 11]>,
    /// The launching processes of the last [`WARM_KEPT`] jobs found warm.
    warm: Arc<std::sync::Mutex<std::collections::VecDeque<u32>>>,
}

/// Launching processes remembered as found warm, the latest.
pub const WARM_KEPT: usize = 64;

impl ReplayTotals {
    /// Whether the replay of the launch by process `pid` found it warm
    /// (and replayed nothing); forgets it. Such a launch says nothing of
    /// whether its profile pays: it is not scored.
    pub fn take_warm(&self, pid: u32) -> bool {
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        let found = warm.iter().position(|&p| p == pid);
        found.map(|i| warm.remove(i)).is_some()
    }

    /// Remembers that the replay of the launch by process `pid` found it
    /// warm.
    pub(crate) fn mark_warm(&self, pid: u32) {
        let mut warm = self.warm.lock().unwrap_or_else(|e| e.into_inner());
        if warm.len() >= WARM_KEPT {
            warm.pop_front();
        }
        warm.push_back(pid);
    }

    /// What the replayer's jobs did so far.
    pub fn counts(&self) -> ReplayCounts {
        let t = |i: usize| self.sums[i].load(Ordering::Relaxed);
        ReplayCounts {
            jobs: t(0),
            opened: t(1),
            changed: t(2),
            missing: t(3),
            capped: t(4),
            dirs: t(5),
            requests: t(6),
            refused: t(7),
            shadowed: t(8),
            warm: t(9),
            repeats: t(10),
        }
    }

    fn store(&self, c: &ReplayCounts) {
        let values = [
            c.jobs, c.opened, c.changed, c.missing, c.capped, c.dirs, c.requests, c.refused, c.shadowed, c.warm,
            c.repeats,
        ];
        for (sum, value) in self.sums.iter().zip(values) {
            sum.store(value, Ordering::Relaxed);
        }
    }
}

impl Replayer {
    /// What its jobs did so far.
    pub fn counts(&self) -> ReplayCounts {
        self.totals.counts()
    }

    /// Its totals, to read while it runs.
    pub fn totals(&self) -> ReplayTotals {
        self.totals.clone()
    }
}

/// How long dropping a [`Replayer`] whose senders are still alive waits for
/// them to go before leaving its thread to end with them.
pub const JOIN_WAIT: Duration = Duration::from_secs(2);

impl Drop for Replayer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let Some(thread) = self.thread.take() else { return };
        let started = std::time::Instant::now();
        while !thread.is_finished() && started.elapsed() < JOIN_WAIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::debug!("the replayer's senders are still alive; its thread is not joined");
        }
    }
}

/// Starts the [`Replayer`]: the jobs of `jobs` go to `sink` (the executor).
pub fn start_replayer(sink: Arc<dyn RequestSink>, jobs: Receiver<ReplayJob>) -> std::io::Result<Replayer> {
    start_replayer_with(sink, jobs, false, || {}, |_, _| {})
}

/// [`start_replayer`], calling `after_job` after each job (the daemon
/// nudges its use marker, which sleeps until a replay ran) and `on_warm`
/// with each job found warm and the process whose quieted files it joins
/// (its own pid, or for a repeat of a launch found warm less than
/// [`QUIET_MIN`] before, that launch's: the daemon quiets its hits,
/// [`quiet_warm`]). Such a repeat is taken for warm without looking again,
/// and a later phase (a trigger's job) of a launch found warm less than
/// [`QUIET_MAX`] before replays nothing.
/// With `shadow` (`[launch] shadow`) it runs no job: it opens nothing and
/// hands the executor nothing, and counts each job as shadowed.
pub fn start_replayer_with(
    sink: Arc<dyn RequestSink>,
    jobs: Receiver<ReplayJob>,
    shadow: bool,
    after_job: impl Fn() + Send + 'static,
    on_warm: impl Fn(&ReplayJob, u32) + Send + 'static,
) -> std::io::Result<Replayer> {
    let stop = Arc::new(AtomicBool::new(false));
    let totals = ReplayTotals::default();
    let (flag, sums) = (Arc::clone(&stop), totals.clone());
    let thread = std::thread::Builder::new().name("predictio-replay".into()).spawn(move || {
        let mut total = ReplayCounts::default();
        // The last launch found warm: its replay, its process, when.
        let mut last_warm: Option<(Arc<predictio::launch::Replay>, u32, std::time::Instant)> = None;
        // Until every sender is gone; a job still queued at the stop is
        // let go.
        while let Ok(job) = jobs.recv() {
            if flag.load(Ordering::Relaxed) {
                break;
            }
            let same = |replay: &Arc<predictio::launch::Replay>| Arc::ptr_eq(replay, &job.replay);
            let warm_within =
                |span| last_warm.as_ref().filter(|(replay, _, at)| same(replay) && at.elapsed() < span).map(|w| w.1);
            // The counts, the set of quiet files the launch joins if it is
            // warm, and whether a job ran.
            let (counts, set, ran) = if let Some(set) = warm_within(QUIET_MIN).filter(|_| job.repeat) {
                // A repeat of the launch just found warm: as warm.
                (ReplayCounts { repeats: 1, warm: 1, ..ReplayCounts::default() }, Some(set), false)
            } else if matches!(job.part, ReplayPart::Trigger(_)) && warm_within(QUIET_MAX).is_some() {
                // A later phase of the launch found warm at its exec (its
                // files were quieted with the launch's): nothing to replay.
                (ReplayCounts { jobs: 1, warm: 1, ..ReplayCounts::default() }, None, false)
            } else {
                let started = std::time::Instant::now();
                let counts = if shadow {
                    let (jobs, repeats) = if job.repeat { (0, 1) } else { (1, 0) };
                    ReplayCounts { jobs, repeats, shadowed: 1 - repeats, ..ReplayCounts::default() }
                } else {
                    run_job(&job, &*sink)
                };
                let took_ms = started.elapsed().as_secs_f64() * 1e3;
                tracing::debug!(exe = %job.replay.exe, part = ?job.part, ?counts, shadow, took_ms, "replayed");
                (counts, (counts.warm > 0).then_some(job.pid), true)
            };
            if let Some(set) = set {
                sums.mark_warm(job.pid);
                on_warm(&job, set);
                if set == job.pid {
                    last_warm = Some((Arc::clone(&job.replay), job.pid, std::time::Instant::now()));
                }
            } else if ran && counts.jobs > 0 && last_warm.as_ref().is_some_and(|(replay, _, _)| same(replay)) {
                // The same program launched cold since: its phases replay.
                last_warm = None;
            }
            total.add(&counts);
            sums.store(&total);
            if ran {
                after_job();
            }
        }
    })?;
    Ok(Replayer { thread: Some(thread), stop, totals })
}

/// How long a warm launch's hits stay quiet: twice its learned span, at
/// least [`QUIET_MIN`], at most [`QUIET_MAX`] (a launch window's cap).
pub const QUIET_MIN: Duration = Duration::from_secs(1);
/// See [`QUIET_MIN`].
pub const QUIET_MAX: Duration = Duration::from_secs(10);

/// Quiets the hits of the launch `job` found warm on the files of the job
/// (at its exec: of the whole launch, its triggers' too;
/// [`predictio_bpf::Quieter`]): the launch is neither replayed, learned
/// nor scored (the learner leaves out a launch found warm), so they would
/// only cost the launch and the daemon their time. A file that changed
/// since it was learned is listed by its learned identity, and so stays
/// reported.
///
/// A repeat of a launch quieted before joins that launch's files (`set`,
/// the other launch's process).
pub fn quiet_warm(quieter: &predictio_bpf::Quieter, job: &ReplayJob, set: u32) {
    let span = Duration::from_secs_f64((2.0 * job.replay.span_ms / 1e3).max(0.0)).clamp(QUIET_MIN, QUIET_MAX);
    if set != job.pid {
        if let Err(err) = quieter.join(job.pid, set, span) {
            tracing::warn!(%err, "quieting a warm launch's hits");
        }
        return;
    }
    // Found warm at its exec, the launch's later phases (its triggers'
    // files) are as good as warm too: all its files are listed.
    let later = job.replay.on_trigger.iter().filter(|_| job.part == ReplayPart::AtExec).flat_map(|t| &t.1);
    let files = job.files().iter().chain(later).map(|f| predictio::FileId { dev: f.identity.dev, ino: f.identity.ino });
    match quieter.quiet(job.pid, files, span) {
        Ok(listed) => tracing::debug!(pid = job.pid, listed, ?span, "warm launch: its hits quieted"),
        Err(err) => tracing::warn!(%err, "quieting a warm launch's hits"),
    }
}

/// Whether a recorded `path` can be used as it is: absolute, without `.`
/// or `..` components (which would need resolving against what the launch
/// saw, not what is there now).
fn is_plain_absolute(path: &std::path::Path) -> bool {
    use std::path::Component;
    path.is_absolute() && !path.components().any(|c| matches!(c, Component::CurDir | Component::ParentDir))
}

/// Whether `path` is a directory itself, not a symbolic link to one (a
/// replay opens it without following links).
fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

/// The lookups of `paths` (absolute), by directory: each path's deepest
/// directory that exists now, and the name looked up in it — the path's
/// last component, or for a path whose parent is gone the first component
/// that is missing, where that lookup stopped. Directories keep the order
/// of their first path, names theirs; a pair appears once. Paths with `.`
/// or `..` components are left out, and lookups in more than [`MAX_DIRS`]
/// directories beyond those of `held` (taken to exist). Opens nothing
/// (`lstat` only): call it off the event path.
pub fn lookups_of(paths: &[String], held: &[String]) -> Vec<PathLookup> {
    let mut exists: HashMap<&Path, bool> = held.iter().map(|d| (Path::new(d.as_str()), true)).collect();
    let mut probed = 0;
    let mut by_dir: Vec<(String, Vec<Box<str>>)> = Vec::new();
    let mut slot: HashMap<&Path, usize> = HashMap::new();
    let mut seen: HashSet<(usize, &str)> = HashSet::new();
    for path in paths {
        let path = Path::new(path.as_str());
        if !is_plain_absolute(path) {
            continue;
        }
        let mut name = path.file_name();
        let mut dir = path.parent();
        while let (Some(d), Some(_)) = (dir, name) {
            if !exists.contains_key(d) {
                if probed >= MAX_DIRS {
                    dir = None;
                    break;
                }
                probed += 1;
            }
            if *exists.entry(d).or_insert_with(|| is_real_dir(d)) {
                break;
            }
            name = d.file_name();
            dir = d.parent();
        }
        let (Some(dir), Some(name)) = (dir, name.and_then(|n| n.to_str())) else { continue };
        let i = *slot.entry(dir).or_insert_with(|| {
            by_dir.push((dir.to_string_lossy().into_owned(), Vec::new()));
            by_dir.len() - 1
        });
        if seen.insert((i, name)) {
            by_dir[i].1.push(name.into());
        }
    }
    by_dir.into_iter().map(|(dir, names)| PathLookup { dir, names: names.into() }).collect()
}

/// The directories among the lookups `paths` (absolute) to be listed too: a
/// launch that looks a directory up usually lists it (a browser its
/// profile's component directories, an interpreter its search path), and a
/// directory it opened nothing in is not among the profile's
/// [`Profile::dirs`]. Leaves out those of `held` (listed already), paths
/// with `.` or `..`, symbolic links, directories of in-memory filesystems
/// (`/proc`, a tmpfs: listing them reads nothing from storage), and any
/// beyond [`MAX_DIRS`] in all. Each is opened for as long as it takes to
/// see its filesystem (`O_DIRECTORY`, no symbolic link followed: anything
/// else is refused before it is opened). Call it off the event path.
pub fn looked_up_dirs(paths: &[String], held: &[String]) -> Vec<String> {
    use std::path::PathBuf;
    let mut seen: HashSet<PathBuf> = held.iter().map(|d| Path::new(d.as_str()).components().collect()).collect();
    let mut dirs = Vec::new();
    for path in paths {
        if held.len() + dirs.len() >= MAX_DIRS {
            break;
        }
        let path = Path::new(path.as_str());
        if !is_plain_absolute(path) {
            continue;
        }
        // `a/b/` and `a/b` are one directory.
        let normal: PathBuf = path.components().collect();
        if !seen.insert(normal.clone()) {
            continue;
        }
        if MetaDir::open_no_follow(&normal).is_ok_and(|dir| dir.on_storage()) {
            dirs.push(normal.to_string_lossy().into_owned());
        }
    }
    dirs
}

/// Whether the store in `dir` may hold a profile of `command`, from the
/// key index alone: `false` for most commands, which have none, without
/// opening the database (fsyncs). `predictio run` asks before anything
/// else, to start a command without a profile at once.
pub fn may_have_profile<S: AsRef<std::ffi::OsStr>>(dir: &Path, command: &[S]) -> bool {
    predictio::launch::command::launch_of(command)
        .is_ok_and(|launch| may_be_stored(dir, &launch.exe.path, &launch.shape))
}

/// Whether the store in `dir` may hold the profile of `exe` run as `shape`.
fn may_be_stored(dir: &Path, exe: &str, shape: &str) -> bool {
    dir.join(store::FILE_NAME).exists() && super::keys::may_hold(dir, exe, shape) != Some(false)
}

/// The replay of the profile of `command` (the program and its arguments:
/// its executable and command shape) in the store at `dir`, if there is
/// one, walked and paced as [`plan_replay`] does and its files checked
/// ([`check_files`]): the key the policy replays on, the book, and a line
/// saying what will be replayed. The caller runs a [`Replayer`] for the
/// policy's jobs. Problems (no store, no profile) mean no replay, never an
/// error: the command runs as it would without us.
pub fn prepare_replay(
    dir: &Path,
    command: &[String],
    walk: &WalkLimits,
    pacing: &ReplayPacing,
) -> Option<(LaunchKey, ReplayBook, String)> {
    let launch = predictio::launch::command::launch_of(command).ok()?;
    let (exe, shape) = (launch.exe, launch.shape);
    let key = LaunchKey::new(exe.id(), &shape);
    if !may_be_stored(dir, &exe.path, &shape) {
        return None;
    }
    let store = Store::open(dir, store::DEFAULT_CAP_BYTES, std::time::Duration::from_secs(10)).ok()?;
    let profile = store.get(&exe.path, &shape).ok()??;
    if profile.exe != exe {
        return Some((key, ReplayBook::default(), format!("{} changed since it was learned; not replayed", exe.path)));
    }
    let _ = store.touch(&exe.path, &shape);
    drop(store);
    let mut replay = plan_replay(&profile, walk, pacing);
    check_files(&mut replay);
    let note = format!(
        "replaying {:.1} MiB of {} files learned over {} run(s){}",
        replay.pages() as f64 * 4096.0 / (1 << 20) as f64,
        replay.at_exec.len() + replay.on_trigger.iter().map(|t| t.1.len()).sum::<usize>(),
        profile.runs,
        if replay.changed.is_empty() && replay.missing.is_empty() {
            String::new()
        } else {
            format!("; {} changed and {} missing files left out", replay.changed.len(), replay.missing.len())
        }
    );
    let book = ReplayBook::default();
    book.insert(key.clone(), replay);
    Some((key, book, note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use predictio::PageRange;
    use predictio::policy::PolicyId;
    use std::sync::Mutex;

    #[test]
    fn lookups_are_grouped_by_the_deepest_directory_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("sub"), dir.path().join("link")).unwrap();
        let root = dir.path().to_str().unwrap();
        let paths: Vec<String> = [
            format!("{root}/sub/f"),
            format!("{root}/top-missing"),
            format!("{root}/sub/missing"),
            format!("{root}/gone/deeper/name"), // stops at "gone"
            format!("{root}/sub/f"),            // again
            format!("{root}/sub/../sub/f"),     // not normal
            format!("{root}/link/f"),           // a link is looked up, not followed
            "relative/path".to_string(),
        ]
        .into();
        let lookups = lookups_of(&paths, &[root.to_string()]);
        let got: Vec<(String, Vec<String>)> =
            lookups.iter().map(|l| (l.dir.clone(), l.names.iter().map(|n| n.to_string()).collect())).collect();
        assert_eq!(
            got,
            vec![
                (format!("{root}/sub"), vec!["f".to_string(), "missing".to_string()]),
                (root.to_string(), vec!["top-missing".to_string(), "gone".to_string(), "link".to_string()]),
            ]
        );
    }

    #[test]
    fn looked_up_directories_on_storage_are_listed_once() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = dir.path().to_str().unwrap();
        std::fs::create_dir(dir.path().join("comp")).unwrap();
        std::fs::create_dir(dir.path().join("held")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        std::os::unix::fs::symlink(dir.path().join("comp"), dir.path().join("link")).unwrap();
        let held = vec![format!("{root}/held")];
        let paths: Vec<String> = [
            "comp",      // a directory: listed
            "comp/",     // the same one again
            "held",      // listed already
            "f",         // a file
            "missing",   // gone
            "comp/../f", // not resolved
            "link",      // a symbolic link: not followed
        ]
        .iter()
        .map(|p| format!("{root}/{p}"))
        .chain(["/proc".to_string(), "/dev".to_string(), "relative".to_string()])
        .collect();
        let listed = looked_up_dirs(&paths, &held);
        assert_eq!(listed, vec![format!("{root}/comp")]);
        assert!(MetaDir::open("/proc").is_ok_and(|d| !d.on_storage()), "procfs reads nothing from storage");
        assert!(MetaDir::open("/dev").is_ok_and(|d| !d.on_storage()), "nor does devtmpfs");
        assert!(MetaDir::open(dir.path()).is_ok_and(|d| d.on_storage()));
    }

    #[test]
    fn replay_lists_the_directories_its_launch_looked_up() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir(dir.path().join("comp")).unwrap();
        let mut profile = Profile::new(predictio::launch::FileIdentity::of_path("/bin/sh").unwrap(), "sh");
        profile.lookups = vec![dir.path().join("comp").to_string_lossy().into_owned()];
        let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        assert!(replay.dirs.contains(&dir.path().join("comp").to_string_lossy().into_owned()), "{:?}", replay.dirs);
    }

    /// A profile of `files` (each `pages` pages, every page read) of `exe`.
    fn profile_of(exe: &Path, files: &[std::path::PathBuf], pages: u64) -> Profile {
        let ident = |p: &Path| predictio::launch::FileIdentity::of_path(p).unwrap();
        let mut profile = Profile::new(ident(exe), "prog");
        let run = predictio::launch::LaunchRun {
            files: files
                .iter()
                .enumerate()
                .map(|(i, f)| predictio::launch::profile::RunFile {
                    identity: ident(f),
                    first_touch_ms: i as f64,
                    accesses: vec![PageRange::new(0, pages)],
                    access_ms: Vec::new(),
                })
                .collect(),
            window_ms: 10.0,
            lookups: Vec::new(),
        };
        profile.merge(&run, &predictio::launch::LearnLimits::default());
        profile
    }

    /// `n` files of one page each in `dir`.
    /// A replay of three one-page files in `dir`, a sink that collects what
    /// the replayer hands the executor, and a job channel.
    fn three_file_replay(
        dir: &Path,
    ) -> (
        Replay,
        Arc<Collect>,
        std::sync::mpsc::SyncSender<predictio::launch::policy::ReplayJob>,
        std::sync::mpsc::Receiver<predictio::launch::policy::ReplayJob>,
    ) {
        let files = page_files(dir, 3);
        let profile = profile_of(&files[0], &files, 1);
        let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        let (jobs, rx) = predictio::launch::policy::replay_channel();
        (replay, Arc::new(Collect::default()), jobs, rx)
    }

    /// `n` files of one page each in `dir`, evicted from the page cache as
    /// a cold launch finds its files (where `dir` is on storage).
    fn page_files(dir: &Path, n: usize) -> Vec<std::path::PathBuf> {
        (0..n)
            .map(|i| {
                let path = dir.join(format!("lib{i}.so"));
                std::fs::write(&path, vec![1u8; 4096]).unwrap();
                predictio::cache::evict(&FileRef::open(&path).unwrap()).unwrap();
                path
            })
            .collect()
    }

    /// A launch whose sampled files are all resident over the pages asked
    /// of them replays nothing: no file is opened for it, nothing asked of
    /// the executor, no directory listed. A sampled file rewritten since it
    /// was learned is passed over; one out of the cache is enough for the
    /// whole replay to run; a job of few files always runs.
    #[test]
    fn a_warm_launch_is_not_replayed() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files = page_files(dir.path(), 40);
        let profile = profile_of(&files[0], &files, 1);
        let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        let order: Vec<_> = replay.at_exec.iter().map(|f| f.identity.path.clone()).collect();
        for path in &files {
            std::fs::read(path).unwrap();
        }
        let sink = Collect::default();
        let counts = run_job(&job(replay.clone(), Some("/bin/sh")), &sink);
        assert_eq!((counts.jobs, counts.warm, counts.opened, counts.requests, counts.dirs), (1, 1, 0, 0, 0));
        assert!(sink.requests.lock().unwrap().is_empty() && sink.meta.lock().unwrap().is_empty());

        // A sampled file the launch rewrote (another file now) is passed
        // over for the next candidate.
        let rewritten = Path::new(&order[0]);
        std::fs::remove_file(rewritten).unwrap();
        std::fs::write(rewritten, vec![1u8; 4096]).unwrap();
        let counts = run_job(&job(replay.clone(), Some("/bin/sh")), &sink);
        assert_eq!((counts.warm, counts.opened), (1, 0));

        // One checked file out of the cache (the eighth of the sample's
        // candidates, the first seven still as learned) makes it cold.
        let sampled = Path::new(&order[8 * order.len() / (2 * WARM_SAMPLE)]);
        predictio::cache::evict(&FileRef::open(sampled).unwrap()).unwrap();
        let counts = run_job(&job(replay, Some("/bin/sh")), &sink);
        assert_eq!((counts.warm, counts.opened, counts.changed, counts.requests), (0, 39, 1, 39));

        let few = page_files(dir.path(), WARM_CHECK_FILES - 1);
        for path in &few {
            std::fs::read(path).unwrap();
        }
        let replay = plan_replay(&profile_of(&few[0], &few, 1), &WalkLimits::default(), &ReplayPacing::default());
        let counts = run_job(&job(replay, None), &sink);
        assert_eq!((counts.warm, counts.requests), (0, WARM_CHECK_FILES as u64 - 1));
    }

    /// A repeat of a launch replayed just before is never replayed again:
    /// it is only looked at, warm or not, and counted as a repeat, not a
    /// job.
    #[test]
    fn a_repeat_is_looked_at_and_never_replayed() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files = page_files(dir.path(), 40);
        let replay = plan_replay(&profile_of(&files[0], &files, 1), &WalkLimits::default(), &ReplayPacing::default());
        let repeat = ReplayJob { repeat: true, ..job(replay, Some("/bin/sh")) };
        let sink = Collect::default();
        for path in &files {
            predictio::cache::evict(&FileRef::open(path).unwrap()).unwrap();
        }
        let cold = run_job(&repeat, &sink);
        assert_eq!((cold.jobs, cold.repeats, cold.warm, cold.requests, cold.dirs), (0, 1, 0, 0, 0));
        for path in &files {
            std::fs::read(path).unwrap();
        }
        let warm = run_job(&repeat, &sink);
        assert_eq!((warm.jobs, warm.repeats, warm.warm, warm.requests), (0, 1, 1, 0));
        assert!(sink.requests.lock().unwrap().is_empty() && sink.meta.lock().unwrap().is_empty());
    }

    /// Descriptors this process has open on files in `dir` (other tests of
    /// this process open and close their own meanwhile; `dir` itself, held
    /// for the metadata request, is not counted).
    fn open_fds(dir: &Path) -> usize {
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.parent() == Some(dir))
            .count()
    }

    #[test]
    fn a_plan_holds_the_profile_directories_by_name_and_no_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let files = page_files(&lib, 2);
        let mut profile = profile_of(&files[0], &files, 2);
        profile.dirs.push("/nonexistent-predictio-dir".into());
        let pacing = ReplayPacing::default();
        let replay = plan_replay(&profile, &WalkLimits::default(), &pacing);
        assert_eq!(replay.window_pages, pacing.small_window_pages, "a few pages: a small replay");
        let none_small = ReplayPacing { small_pages: 0, ..pacing };
        let replay = plan_replay(&profile, &WalkLimits::default(), &none_small);
        assert_eq!(replay.window_pages, 0, "the pacing is the caller's: the executor's window");
        assert!(replay.dirs.contains(&lib.to_string_lossy().into_owned()) && replay.dirs.contains(&"/".into()));
        assert_eq!(replay.at_exec.len(), 2);
    }

    /// A sink that keeps what it is handed (its requests hold descriptors
    /// as the executor's queue would).
    #[derive(Default)]
    struct Collect {
        requests: Mutex<Vec<Request>>,
        meta: Mutex<Vec<MetaRequest>>,
    }

    impl RequestSink for Collect {
        fn submit(&self, request: Request) -> Result<(), predictio::executor::SubmitError> {
            self.requests.lock().unwrap().push(request);
            Ok(())
        }
        fn submit_meta(&self, request: MetaRequest) -> Result<(), predictio::executor::SubmitError> {
            self.meta.lock().unwrap().push(request);
            Ok(())
        }
    }

    fn job(replay: Replay, exec: Option<&str>) -> ReplayJob {
        ReplayJob {
            replay: Arc::new(replay),
            part: ReplayPart::AtExec,
            exec: exec.map(Into::into),
            origin: PolicyId(4),
            pid: 4242,
            repeat: false,
        }
    }

    /// An opener that panics gives up the file it was opening, and once
    /// the last opener is gone every file still waiting is given up too: a
    /// replay never waits for a file no one will open.
    #[test]
    fn a_panicking_opener_leaves_its_files_out_instead_of_hanging_the_replay() {
        // Whether each of `files` is given up (`wait` gives `None`), or
        // `None` if a wait lasted 10 s (then every slot is let go, to end it).
        fn given_up(opened: &Opened, files: &[usize]) -> Option<Vec<bool>> {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::scope(|scope| {
                scope.spawn(|| tx.send(files.iter().map(|&f| opened.wait(f).is_none()).collect::<Vec<_>>()));
                let got = rx.recv_timeout(Duration::from_secs(10)).ok();
                if got.is_none() {
                    opened.lock().slots.iter_mut().for_each(|s| *s = Slot::None);
                    opened.changed.notify_all();
                }
                got
            })
        }
        let opened = Opened::new(4, &[0, 1, 2, 3]);
        let calm = opened.opener();
        std::thread::scope(|scope| {
            let failing = opened.opener();
            let thread = scope.spawn(move || {
                let mut opener = failing;
                opener.current = Some(1);
                panic!("an opener fails while opening file 1");
            });
            assert!(thread.join().is_err());
        });
        assert_eq!(given_up(&opened, &[1]), Some(vec![true]), "the file being opened is given up at once");
        opened.put(0, None, &ReplayCounts { opened: 1, ..ReplayCounts::default() });
        drop(calm);
        assert_eq!(given_up(&opened, &[0, 1, 2, 3]), Some(vec![true; 4]), "with the last opener gone, the rest too");
        assert_eq!(opened.counts().opened, 1);
    }

    /// Regression: every profile in the book held a descriptor per file
    /// (up to 4,096 a profile), so five scripts reading 4,096 of their own
    /// files took the daemon to its descriptor limit. Planning opens
    /// nothing; a replay opens its files when it runs, and once the
    /// executor is done with its requests nothing is left open.
    #[test]
    fn descriptors_are_opened_by_the_replay_and_let_go_with_its_requests() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files = page_files(dir.path(), 300);
        let profile = profile_of(&files[0], &files, 1);
        let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        assert_eq!(replay.at_exec.len(), 300);
        assert_eq!(open_fds(dir.path()), 0, "a planned replay holds no descriptor");
        let sink = Collect::default();
        let want: Vec<predictio::FileId> = wave_order(&replay.at_exec, replay.wave_pages, replay.span_ms)
            .iter()
            .map(|(f, _)| replay.at_exec[*f].identity.id())
            .collect();
        let counts = run_job(&job(replay, Some("/bin/sh")), &sink);
        assert_eq!((counts.opened, counts.changed, counts.missing, counts.requests), (300, 0, 0, 300));
        let requests = std::mem::take(&mut *sink.requests.lock().unwrap());
        let got: Vec<predictio::FileId> = requests.iter().map(|r| r.file.id()).collect();
        assert_eq!(got, want, "opened on several threads, submitted in wave order");
        assert_eq!(requests.iter().map(|r| r.origin).collect::<HashSet<_>>(), HashSet::from([PolicyId(4)]));
        assert!(requests.iter().all(|r| r.urgency == Urgency::Imminent));
        assert!(requests.iter().all(|r| r.target_pid == Some(4242)), "for the launching process's cgroup");
        let meta = std::mem::take(&mut *sink.meta.lock().unwrap());
        assert_eq!(meta.len(), 2, "the exec first, on its own; then the directories, once opened");
        assert_eq!(meta[0].execs, vec![Arc::<str>::from("/bin/sh")]);
        assert!(meta[0].dirs.is_empty() && meta[0].lookups.is_empty());
        assert!(meta[1].execs.is_empty() && !meta[1].dirs.is_empty());
        assert_eq!(open_fds(dir.path()), 300, "only the queued requests hold descriptors");
        drop((requests, meta));
        assert_eq!(open_fds(dir.path()), 0, "and once they are done, nothing is left open");
    }

    #[test]
    fn a_replay_opens_at_most_its_cap_of_files() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files = page_files(dir.path(), 4);
        let one = ReplayFile {
            identity: predictio::launch::FileIdentity::of_path(&files[0]).unwrap(),
            ranges: vec![PageRange::page(0)],
            first_touch_ms: 0.0,
            due_ms: Vec::new(),
        };
        let replay = Replay { at_exec: vec![one; MAX_REPLAY_FILES + 5], ..Replay::default() };
        let sink = Collect::default();
        let counts = run_job(&job(replay, None), &sink);
        assert_eq!((counts.opened, counts.capped), (MAX_REPLAY_FILES as u64, 5));
        assert!(sink.meta.lock().unwrap().is_empty(), "nothing to look up: no metadata request");
    }

    /// A user who can write a directory of a profiled file swaps in, after
    /// it was learned, a FIFO (an open for reading would wait for a writer
    /// forever), a symbolic link to a device, and a symbolic link to the
    /// very file learned (moved aside: the same inode, size and mtime, so
    /// an identity check alone would pass). The replay neither waits nor
    /// follows a link: it requests only the file left as it was, in bounded
    /// time.
    #[test]
    fn a_fifo_or_a_symbolic_link_swapped_in_is_left_out_without_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let files = page_files(dir.path(), 4);
        let profile = profile_of(&files[0], &files, 1);
        let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        std::fs::remove_file(&files[1]).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(&files[1]).status().unwrap().success());
        std::fs::remove_file(&files[2]).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &files[2]).unwrap();
        let moved = dir.path().join("moved.so");
        std::fs::rename(&files[3], &moved).unwrap();
        std::os::unix::fs::symlink(&moved, &files[3]).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let sink = Collect::default();
            let counts = run_job(&job(replay, None), &sink);
            let paths: Vec<FileIdentity> = sink
                .requests
                .lock()
                .unwrap()
                .iter()
                .map(|r| FileIdentity::from_metadata("", &r.file.file().metadata().unwrap()))
                .collect();
            let _ = tx.send((counts, paths));
        });
        let (counts, requested) = rx.recv_timeout(Duration::from_secs(10)).expect("the replay must not wait on a FIFO");
        assert_eq!((counts.opened, counts.changed + counts.missing), (1, 3), "{counts:?}");
        let first = FileIdentity::of_path(&files[0]).unwrap();
        assert_eq!(requested.iter().map(|i| (i.dev, i.ino)).collect::<Vec<_>>(), vec![(first.dev, first.ino)]);
    }

    #[test]
    fn a_file_changed_since_it_was_learned_is_checked_out_ahead_and_at_replay() {
        let dir = tempfile::tempdir().unwrap();
        let files = page_files(dir.path(), 2);
        let profile = profile_of(&files[0], &files, 1);
        let mut replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&files[1], vec![2u8; 8192]).unwrap();
        let sink = Collect::default();
        let counts = run_job(&job(replay.clone(), None), &sink);
        assert_eq!((counts.opened, counts.changed), (1, 1));
        check_files(&mut replay);
        assert_eq!(replay.changed, vec![files[1].to_string_lossy().into_owned()]);
        assert_eq!(replay.at_exec.len(), 1);
    }

    /// A launch found warm at its exec: its repeat within a second joins
    /// its quiet set without a look, and its later phases (triggers)
    /// replay nothing; the same program launched cold since replays its
    /// phases again.
    #[test]
    fn a_launch_found_warm_quiets_its_repeats_and_later_phases() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let files = page_files(dir.path(), 40);
        let mut replay =
            plan_replay(&profile_of(&files[0], &files, 1), &WalkLimits::default(), &ReplayPacing::default());
        let later = replay.at_exec.split_off(30);
        replay.on_trigger.push((predictio::FileId { dev: 1, ino: 1 }, later));
        let replay = Arc::new(replay);
        let at = |pid, part, repeat| ReplayJob {
            replay: Arc::clone(&replay),
            part,
            exec: None,
            origin: PolicyId(4),
            pid,
            repeat,
        };
        let sink = Arc::new(Collect::default());
        let (jobs, rx) = predictio::launch::policy::replay_channel();
        let quieted = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&quieted);
        let replayer = start_replayer_with(
            sink.clone(),
            rx,
            false,
            || {},
            move |job, set| seen.lock().unwrap().push((job.pid, set)),
        )
        .unwrap();
        let totals = replayer.totals();
        let wait_for = |n: u64| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while totals.counts().jobs + totals.counts().repeats < n {
                assert!(std::time::Instant::now() < deadline, "{:?}", totals.counts());
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        for path in &files {
            std::fs::read(path).unwrap();
        }
        jobs.send(at(10, ReplayPart::AtExec, false)).unwrap();
        jobs.send(at(11, ReplayPart::AtExec, true)).unwrap();
        jobs.send(at(10, ReplayPart::Trigger(0), false)).unwrap();
        wait_for(3);
        let counts = totals.counts();
        assert_eq!((counts.jobs, counts.repeats, counts.warm, counts.requests), (2, 1, 3, 0), "{counts:?}");
        assert_eq!(*quieted.lock().unwrap(), [(10, 10), (11, 10)], "the repeat joins the first launch's set");
        assert!(sink.requests.lock().unwrap().is_empty());
        // Launched cold since: its later phase replays.
        for path in &files {
            predictio::cache::evict(&FileRef::open(path).unwrap()).unwrap();
        }
        jobs.send(at(12, ReplayPart::AtExec, false)).unwrap();
        jobs.send(at(12, ReplayPart::Trigger(0), false)).unwrap();
        wait_for(5);
        assert_eq!(totals.counts().warm, 3);
        let requested: std::collections::HashSet<u64> =
            sink.requests.lock().unwrap().iter().map(|r| r.file.id().ino).collect();
        assert_eq!(requested.len(), 40, "every file of both parts");
        drop(jobs);
    }

    /// Shadow mode: the replayer takes the jobs and counts them, and hands
    /// the executor nothing, opens nothing.
    #[test]
    fn a_shadow_replayer_issues_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (replay, sink, jobs, rx) = three_file_replay(dir.path());
        let replayer = start_replayer_with(sink.clone(), rx, true, || {}, |_, _| {}).unwrap();
        let totals = replayer.totals();
        jobs.send(job(replay.clone(), Some("/bin/sh"))).unwrap();
        jobs.send(job(replay, None)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while totals.counts().jobs < 2 {
            assert!(std::time::Instant::now() < deadline, "the jobs were never taken");
            std::thread::sleep(Duration::from_millis(5));
        }
        let counts = totals.counts();
        assert_eq!((counts.shadowed, counts.opened, counts.requests, counts.dirs), (2, 0, 0, 0));
        assert!(sink.requests.lock().unwrap().is_empty() && sink.meta.lock().unwrap().is_empty());
        drop(jobs);
        drop(replayer);
    }

    #[test]
    fn the_replayer_runs_jobs_until_its_senders_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let (replay, sink, jobs, rx) = three_file_replay(dir.path());
        let replayer = start_replayer(sink.clone(), rx).unwrap();
        jobs.send(job(replay, None)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while replayer.counts().jobs < 1 {
            assert!(std::time::Instant::now() < deadline, "the job never ran");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(replayer.counts().opened, 3);
        assert_eq!(sink.requests.lock().unwrap().len(), 3);
        drop(jobs);
        drop(replayer);
    }
}
