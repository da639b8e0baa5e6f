//! The daemon's launch learning and replay, off the event path.
//!
//! The `launch` policy (in the dispatcher) opens a window at every exec and
//! hands each finished window here over a bounded channel. This thread names
//! the files (through `/proc`, else by inode), applies the allow/deny list,
//! leaves out trivial launches of commands it has no profile of (under the
//! [`LearnFloor`]: read less than `[launch] min_learn_missed_kib` from
//! storage, or ran shorter than `min_learn_ms`, so a replay could win them
//! nearly nothing — a shell script's `head -2`, a warm launch), keeps a
//! command shape's first launch worth learning in memory ([`FirstRuns`]: a
//! build's one-off commands are never written), and from its second such
//! launch on merges the runs into the store (opened for that one write:
//! other `predictio` commands can use the store in between), walks the
//! updated profile into a replay that names its files ([`plan_replay`]:
//! nothing is held open), and puts it in the book the policy replays from
//! at the next exec. At start the stored profiles are booked the same way.
//! The replays themselves run on a third thread, the [`Replayer`], which
//! opens a replay's files when its exec comes. A launch of a stored profile is not judged by the floor: its
//! replay may be what made it cheap.
//! A launch that read (nearly) nothing from storage — warm, or filled by a
//! replay; what it wrote does not count ([`Recorder::missed_pages`]) — is
//! not learned again for a while after its profile was last
//! written ([`RecentlyLearned`]): it would cost the learner tens of ms of
//! CPU each time for a profile it does not change much.
//! Each replayed launch is scored against the replay its exec handed over
//! ([`predictio::launch::score`]: pages used, wasted, late; its duration),
//! and each cold launch without a replay gives its duration: a profile's
//! [`Benefit`] is kept in [`Scores`] and written beside it in the store
//! (at most once a minute, at a retirement, and when the learner stops).
//! A profile whose replays do not pay ([`predictio::launch::RetireRule`])
//! is retired: taken out of the book, kept in the store marked retired
//! with why, and neither learned nor booked again until `[launch]
//! retire_days` have passed or its executable changed (a new profile).
//! A second thread (the use marker, [`start_use_marker`]) marks the profiles the daemon replayed
//! used in the store, once a minute and when the daemon stops, so that the
//! store's least-recently-used eviction spares the profiles in use even
//! when nothing is being learned.

use std::collections::{HashMap, HashSet};
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use predictio::FileId;
use predictio::launch::naming::Namer;
use predictio::launch::policy::FinishedLaunch;
use predictio::launch::profile::now_s;
use predictio::launch::{Benefit, FirstRuns, LaunchKey, LearnLimits, Replay, ReplayBook, Retired};
#[cfg(doc)]
use predictio::launch::{LearnFloor, Recorder};

use crate::config::LaunchSection;
#[cfg(doc)]
use replay::Replayer;
use replay::{ReplayTotals, plan_replay};
use store::{BenefitSummary, Store, StoreError};

pub mod keys;
pub mod replay;
pub mod store;

fn open_store(config: &LaunchSection) -> Result<Store, StoreError> {
    Store::open(&config.store, config.store_cap_mib << 20, Duration::from_secs(5))
}

/// Opens the store as the launch service does (creating it, or setting a
/// broken one aside): at start, so that a store that cannot be used is an
/// error then, not a warning at every launch.
pub fn check_store(config: &LaunchSection) -> Result<(), StoreError> {
    open_store(config).map(drop)
}

/// Books the stored profiles whose executable is still the one learned:
/// each walked into a replay that names its files ([`plan_replay`]), no
/// file opened. Returns how many.
/// Their stored benefits go to `scores`; a retired profile is not booked
/// (until it may come back: then its benefit starts again).
pub fn load_book(config: &LaunchSection, book: &ReplayBook, scores: &Scores) -> Result<usize, StoreError> {
    let store = open_store(config)?;
    let (profiles, _) = store.all()?;
    let mut benefits: HashMap<(String, String), Benefit> =
        store.benefits()?.into_iter().map(|(exe, shape, b)| ((exe, shape), b)).collect();
    drop(store);
    let mut loaded = 0;
    let (walk, pacing, rule, now) = (config.walk_limits(), config.replay_pacing(), config.retire_rule(), now_s());
    for profile in &profiles {
        let mut benefit = benefits.remove(&(profile.exe.path.clone(), profile.shape.clone()));
        let mut came_back = false;
        if let Some(b) = &mut benefit
            && b.retired.as_ref().is_some_and(|r| rule.may_come_back(r, now))
        {
            tracing::info!(exe = %profile.exe.path, shape = %profile.shape, "retired launch profile replayed again");
            *b = Benefit::default();
            came_back = true;
        }
        let retired = benefit.as_ref().is_some_and(|b| b.retired.is_some());
        if let Some(b) = benefit {
            let id = Some(profile.exe.id());
            scores.with(|board| board.put(&profile.exe.path, &profile.shape, (b, id), came_back));
        }
        if !retired
            && loaded < predictio::launch::policy::MAX_REPLAYS
            && profile.exe.check() == predictio::launch::Freshness::Fresh
        {
            let key = LaunchKey::new(profile.exe.id(), &profile.shape);
            book.insert(key, plan_replay(profile, &walk, &pacing));
            loaded += 1;
        }
    }
    Ok(loaded)
}

/// Profiles [`Scores`] remembers at most (beyond, one not waiting to be
/// written is forgotten: its stored benefit is read again at the next
/// start).
const MAX_SCORED: usize = 4096;

/// What the launch service knows of each profile's [`Benefit`], by
/// executable path and shape: shared by the learner (which scores and
/// retires), [`load_book`] and the daemon's status. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct Scores {
    inner: Arc<Mutex<Board>>,
}

#[derive(Debug, Default)]
struct Board {
    /// (benefit, the executable's id when known: a retired profile whose
    /// executable changed is a new one).
    benefits: HashMap<(String, String), (Benefit, Option<FileId>)>,
    /// Changed since last written to the store.
    dirty: HashSet<(String, String)>,
    replayer: Option<ReplayTotals>,
    shadow: bool,
}

impl Board {
    /// The entry of `exe` with shape `shape` (made if new; beyond
    /// [`MAX_SCORED`] another is forgotten), marked to be written.
    fn entry(&mut self, exe: &str, shape: &str) -> &mut (Benefit, Option<FileId>) {
        let key = (exe.to_owned(), shape.to_owned());
        if self.benefits.len() >= MAX_SCORED && !self.benefits.contains_key(&key) {
            let victim = self.benefits.keys().find(|k| !self.dirty.contains(*k)).cloned();
            if let Some(victim) = victim.or_else(|| self.benefits.keys().next().cloned()) {
                self.benefits.remove(&victim);
                self.dirty.remove(&victim);
            }
        }
        self.dirty.insert(key.clone());
        self.benefits.entry(key).or_default()
    }

    /// Sets the entry of `exe` with shape `shape`; `dirty`: to be written.
    fn put(&mut self, exe: &str, shape: &str, entry: (Benefit, Option<FileId>), dirty: bool) {
        *self.entry(exe, shape) = entry;
        if !dirty {
            self.dirty.remove(&(exe.to_owned(), shape.to_owned()));
        }
    }
}

impl Scores {
    /// Scores of a daemon in shadow mode or not (`[launch] shadow`).
    pub fn new(shadow: bool) -> Self {
        let scores = Self::default();
        scores.with(|b| b.shadow = shadow);
        scores
    }

    /// Shows the totals of the daemon's replayer in the status.
    pub fn follow(&self, totals: ReplayTotals) {
        self.with(|b| b.replayer = Some(totals));
    }

    /// Whether the replayer found the launch by process `pid` warm and
    /// replayed nothing ([`ReplayTotals::take_warm`]).
    fn found_warm(&self, pid: u32) -> bool {
        self.with(|b| b.replayer.as_ref().is_some_and(|totals| totals.take_warm(pid)))
    }

    fn with<R>(&self, f: impl FnOnce(&mut Board) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The benefit of the profile of `exe` with shape `shape`, if known.
    pub fn benefit(&self, exe: &str, shape: &str) -> Option<Benefit> {
        self.with(|b| b.benefits.get(&(exe.to_owned(), shape.to_owned())).map(|e| e.0.clone()))
    }

    /// The launch service's part of the daemon's status: the replayer's
    /// totals and, per profile scored or retired, its benefit.
    pub fn status(&self) -> crate::status::LaunchStatus {
        self.with(|b| {
            let mut profiles: Vec<crate::status::ProfileBenefit> = b
                .benefits
                .iter()
                .filter(|(_, (benefit, _))| benefit.scored > 0 || benefit.retired.is_some())
                .map(|((exe, shape), (benefit, _))| crate::status::ProfileBenefit {
                    exe: exe.clone(),
                    shape: shape.clone(),
                    benefit: BenefitSummary::of(benefit),
                })
                .collect();
            profiles.sort_by(|x, y| (&x.exe, &x.shape).cmp(&(&y.exe, &y.shape)));
            profiles.truncate(predictio::launch::policy::MAX_REPLAYS);
            crate::status::LaunchStatus {
                shadow: b.shadow,
                replayer: b.replayer.as_ref().map(ReplayTotals::counts).unwrap_or_default(),
                profiles,
            }
        })
    }

    /// The benefits changed since the last call: forgets that they were.
    fn take_dirty(&self) -> Vec<(String, String, Benefit)> {
        self.with(|b| {
            let dirty = std::mem::take(&mut b.dirty);
            dirty
                .into_iter()
                .filter_map(|k| b.benefits.get(&k).map(|e| (k.0.clone(), k.1.clone(), e.0.clone())))
                .collect()
        })
    }
}

/// Writes the benefits changed since the last write to the store.
fn flush_scores(config: &LaunchSection, scores: &Scores) {
    let dirty = scores.take_dirty();
    if dirty.is_empty() {
        return;
    }
    let rows: Vec<(&str, &str, &Benefit)> = dirty.iter().map(|(e, s, b)| (e.as_str(), s.as_str(), b)).collect();
    match open_store(config).and_then(|store| store.put_benefits(&rows)) {
        Ok(written) => tracing::debug!(written, "launch scores written"),
        Err(err) => tracing::warn!(%err, profiles = rows.len(), "launch scores not written"),
    }
}

/// How often the learner writes changed scores at most (a retirement is
/// written at once).
const FLUSH_EVERY: Duration = Duration::from_secs(60);

/// Whether the replayer found the launch `done` warm (and forgets it): its
/// files were cached, so nothing was replayed, how long it took says
/// nothing of what a replay gains (it is not a cold launch), and its hits
/// on its profile's files went unreported (quieted). It is neither scored
/// nor learned.
fn found_warm(scores: &Scores, done: &FinishedLaunch) -> bool {
    done.replay.is_some() && scores.found_warm(done.pid)
}

/// Scores the replayed launch `done` against `replayed`, the replay its exec
/// handed over, into `scores`, and retires its profile (out of `book`) if
/// its replays do not pay. True when it retired it.
fn score_replay(
    config: &LaunchSection,
    scores: &Scores,
    book: &ReplayBook,
    key: &LaunchKey,
    replayed: &Replay,
    done: &FinishedLaunch,
) -> bool {
    if replayed.exe.is_empty() {
        return false;
    }
    let score = predictio::launch::score::score(&done.recorder, replayed, config.shadow);
    let rule = config.retire_rule();
    let why = scores.with(|board| {
        let (benefit, id) = board.entry(&replayed.exe, &key.shape);
        *id = Some(key.exe);
        if benefit.retired.is_some() {
            return None;
        }
        benefit.add_replay(score);
        let why = rule.judge(benefit)?;
        benefit.retired = Some(Retired { why: why.clone(), at_s: now_s() });
        Some(why)
    });
    tracing::debug!(exe = %replayed.exe, ?score, "replayed launch scored");
    let Some(why) = why else { return false };
    book.remove(key);
    tracing::info!(exe = %replayed.exe, shape = %key.shape, %why, "launch profile retired: its replay does not pay");
    true
}

/// A background thread of this module: started at nice 19 (see
/// [`background`]), told to stop and joined when dropped. It sleeps on its
/// work (the learner on its channel, the use marker on its [`Wakeup`]),
/// never on a timer while there is nothing to do.
pub struct Background {
    thread: Option<JoinHandle<()>>,
    wakeup: Arc<Wakeup>,
}

/// How long dropping a [`Background`] waits for a thread that sleeps on a
/// channel whose senders are still alive (the learner, dropped before the
/// pipeline) before leaving it to end with them.
const JOIN_WAIT: Duration = Duration::from_secs(2);

impl Background {
    /// Runs `body` on a thread named `name`; `body` returns once its
    /// [`Wakeup`] is stopped (or its channel closed).
    fn spawn(name: &str, body: impl FnOnce(&Wakeup) + Send + 'static) -> std::io::Result<Self> {
        let wakeup = Arc::new(Wakeup::default());
        let own = Arc::clone(&wakeup);
        let thread = std::thread::Builder::new().name(name.into()).spawn(move || {
            background();
            body(&own);
        })?;
        Ok(Self { thread: Some(thread), wakeup })
    }

    /// What wakes the thread: the use marker is nudged after each replay.
    pub fn wakeup(&self) -> &Arc<Wakeup> {
        &self.wakeup
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.wakeup.stop();
        let Some(thread) = self.thread.take() else { return };
        // The learner wakes for its channel's close, not for the stop: the
        // service drops the pipeline (the senders) first. Dropped before,
        // it is left to end with them rather than waited for forever.
        let started = Instant::now();
        while !thread.is_finished() && started.elapsed() < JOIN_WAIT {
            std::thread::sleep(Duration::from_millis(10));
        }
        if thread.is_finished() {
            let _ = thread.join();
        } else {
            tracing::debug!("a launch thread is still waiting on its channel; not joined");
        }
    }
}

/// The stop of a [`Background`] thread, and nudges: something happened
/// that it has work for (a replay ran, for the use marker).
#[derive(Debug, Default)]
pub struct Wakeup {
    /// (stopped, nudged)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl Wakeup {
    fn stop(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = true;
        self.changed.notify_all();
    }

    /// Tells the thread there is work (see [`start_use_marker`]).
    pub fn nudge(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        self.changed.notify_all();
    }

    fn is_stopped(&self) -> bool {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Waits until stopped, or `until` passes, or — with `for_nudge` — a
    /// nudge comes (or came since the last nudge taken), which it takes.
    /// True when stopped.
    fn wait(&self, until: Option<Instant>, for_nudge: bool) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if state.0 {
                return true;
            }
            if for_nudge && state.1 {
                state.1 = false;
                return false;
            }
            state = match until {
                None => self.changed.wait(state).unwrap_or_else(|e| e.into_inner()),
                Some(until) => {
                    let Some(left) = until.checked_duration_since(Instant::now()) else { return false };
                    self.changed.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0
                }
            };
        }
    }

    /// Takes a pending nudge, if any.
    fn take_nudge(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).1 = false;
    }
}

/// Lowers the calling thread to the lowest CPU priority (nice 19): learning
/// and bookkeeping are background work and must not take CPU from the
/// launches they learn. Measured on this 2-core machine, a warm headless
/// Chromium under the daemon took 776 ms against 684 without it while the
/// learner spent ~117 ms of CPU per launch at normal priority.
fn background() {
    if let Err(err) = predictio::os::set_thread_nice(19) {
        tracing::debug!(%err, "cannot lower the learner's priority");
    }
}

/// The learner thread: learns from `finished` into the store and puts the
/// replays in `book`. It sleeps on the channel and ends when the channel
/// closes (every sender gone) or, at its next launch, once stopped.
pub fn start_learner(
    config: LaunchSection,
    finished: Receiver<FinishedLaunch>,
    book: ReplayBook,
    scores: Scores,
) -> std::io::Result<Background> {
    Background::spawn("predictio-learn", move |stop| {
        let mut namer = Namer::new();
        let mut first_runs = FirstRuns::new(FIRST_RUNS, FIRST_RUN_RANGES);
        load_first_runs(&config, &mut first_runs);
        let mut recent = RecentlyLearned::new(RELEARN_AFTER, RELEARN_MISSED_PAGES, RECENT_KEYS);
        let mut flushed = Instant::now();
        while let Ok(done) = finished.recv() {
            if stop.is_stopped() {
                break;
            }
            let key = LaunchKey::new(done.exe, &done.shape);
            let now = Instant::now();
            if found_warm(&scores, &done) {
                tracing::debug!(exe = %done.exe, "warm launch: neither scored nor learned");
                continue;
            }
            if let Some(replayed) = done.replay.clone()
                && score_replay(&config, &scores, &book, &key, &replayed, &done)
            {
                flush_scores(&config, &scores);
                flushed = now;
                continue;
            }
            if now.saturating_duration_since(flushed) >= FLUSH_EVERY {
                flush_scores(&config, &scores);
                flushed = now;
            }
            let replay = book.get(&key);
            let missed = missed_by_profile(&done, replay.as_deref());
            // Known from the store after a restart, when this thread has
            // not stored it itself.
            let age =
                replay.map(|r| Duration::from_secs(predictio::launch::profile::now_s().saturating_sub(r.learned_s)));
            if !recent.worth_learning(&key, missed, now, age) {
                tracing::debug!(exe = %done.exe, missed, "launch served from the cache: not learned again yet");
                continue;
            }
            match learn(&config, &mut namer, &mut first_runs, done, &book, &scores) {
                Ok(true) => recent.stored(key, now),
                Ok(false) => {}
                Err(err) => tracing::warn!(%err, "launch not learned"),
            }
        }
        flush_scores(&config, &scores);
        save_first_runs(&config, &first_runs);
    })
}

/// Bytes of JSON the first runs saved at a stop take at most (the newest
/// are kept): a Chromium launch's run is ~0.5 MiB.
const FIRST_RUNS_SAVED_BYTES: usize = 16 << 20;

/// Takes back the first runs the learner kept when the daemon last
/// stopped: a program launched once per boot still reaches the store at
/// its second launch, a boot later.
fn load_first_runs(config: &LaunchSection, first_runs: &mut FirstRuns) {
    let saved = match open_store(config).and_then(|store| store.first_runs()) {
        Ok(saved) => saved,
        Err(err) => {
            tracing::warn!(%err, "first launches kept at the last stop not read");
            return;
        }
    };
    let n = saved.len();
    for (exe, shape, run) in saved {
        first_runs.admit(&exe, &shape, run);
    }
    tracing::debug!(saved = n, kept = first_runs.len(), "first launches kept at the last stop read");
}

/// Saves the first runs the learner keeps (see [`load_first_runs`]).
fn save_first_runs(config: &LaunchSection, first_runs: &FirstRuns) {
    let runs: Vec<_> = first_runs.iter().collect();
    match open_store(config).and_then(|store| store.put_first_runs(&runs, FIRST_RUNS_SAVED_BYTES)) {
        Ok(written) => tracing::debug!(written, "first launches saved"),
        Err(err) => tracing::warn!(%err, runs = runs.len(), "first launches not saved"),
    }
}

/// A launch of a profile stored less than this long ago that missed fewer
/// than [`RELEARN_MISSED_PAGES`] pages is not learned again. Measured with
/// `predictio bench daemon-cost`: learning a warm `gdb --batch` again took
/// the learner 34 ms of CPU per launch.
const RELEARN_AFTER: Duration = Duration::from_secs(600);
/// Pages (1 MiB) a launch must read from storage itself to be learned
/// again within [`RELEARN_AFTER`]: reading that much, it read something its
/// profile did not fill.
const RELEARN_MISSED_PAGES: u64 = 256;
/// Profiles remembered as recently stored at most.
const RECENT_KEYS: usize = 4096;

/// When each profile was last written by the learner, to leave out
/// launches that would teach it little (see the module docs). Pure: the
/// caller passes the time.
#[derive(Debug)]
pub struct RecentlyLearned {
    after: Duration,
    missed_pages: u64,
    cap: usize,
    stored: HashMap<LaunchKey, Instant>,
}

impl RecentlyLearned {
    /// Leaves out launches of profiles stored less than `after` ago that
    /// missed fewer than `missed_pages`, remembering at most `cap` profiles.
    pub fn new(after: Duration, missed_pages: u64, cap: usize) -> Self {
        Self { after, missed_pages, cap: cap.max(1), stored: HashMap::new() }
    }

    /// Whether a launch of `key` that missed `missed` pages is worth
    /// learning at `now`. `stored_ago`: how long ago the profile was stored
    /// or used, as the store says (its replay's [`Replay::learned_s`]), for
    /// profiles this learner has not stored since it started.
    pub fn worth_learning(&self, key: &LaunchKey, missed: u64, now: Instant, stored_ago: Option<Duration>) -> bool {
        let ago = self.stored.get(key).map(|at| now.saturating_duration_since(*at)).or(stored_ago);
        missed >= self.missed_pages || ago.is_none_or(|ago| ago >= self.after)
    }

    /// Notes that `key`'s profile was written at `now`.
    pub fn stored(&mut self, key: LaunchKey, now: Instant) {
        if self.stored.len() >= self.cap && !self.stored.contains_key(&key) {
            let after = self.after;
            self.stored.retain(|_, at| now.saturating_duration_since(*at) < after);
            if self.stored.len() >= self.cap {
                // All recent: forget the oldest.
                if let Some(oldest) = self.stored.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) {
                    self.stored.remove(&oldest);
                }
            }
        }
        self.stored.insert(key, now);
    }
}

/// Pages the launch `done` read from storage itself in the files its
/// replay `replay` holds (in every file it read, without one). The files a
/// launch writes and reads back — a compiler's objects, a linker's output —
/// are read from the cache but were never in it before the launch: only
/// its profile's files tell that a miss was storage the replay did not
/// fill. A new file it reads is learned once [`RELEARN_AFTER`] has passed.
fn missed_by_profile(done: &FinishedLaunch, replay: Option<&Replay>) -> u64 {
    match replay {
        Some(replay) => {
            let files: std::collections::HashSet<predictio::FileId> = replay.files().collect();
            done.recorder.missed_in(|f| files.contains(&f))
        }
        None => done.recorder.missed_pages(),
    }
}

/// How often the use marker writes: replays are many, a store commit per
/// replay would be a write per exec.
const MARK_EVERY: Duration = Duration::from_secs(60);

/// The use marker: marks the profiles `book` replayed used in the store
/// (see the module docs), at most every [`MARK_EVERY`], and when stopped.
/// It sleeps until nudged ([`Wakeup::nudge`] on [`Background::wakeup`]:
/// the service nudges it after each replay), then waits out the rest of
/// the [`MARK_EVERY`] since its last mark and marks: no replay, no
/// wake-up.
pub fn start_use_marker(config: LaunchSection, book: ReplayBook) -> std::io::Result<Background> {
    Background::spawn("predictio-used", move |wakeup| {
        let mut last = Instant::now();
        while !wakeup.wait(None, true) {
            if wakeup.wait(Some(last + MARK_EVERY), false) {
                break;
            }
            // What this mark takes covers the replays nudged until now.
            wakeup.take_nudge();
            mark_used(&config, &book);
            last = Instant::now();
        }
        mark_used(&config, &book);
    })
}

fn mark_used(config: &LaunchSection, book: &ReplayBook) {
    let replayed = book.take_replayed();
    if replayed.is_empty() {
        return;
    }
    let pairs: Vec<(&str, &str)> = replayed.iter().map(|(e, s)| (e.as_str(), s.as_str())).collect();
    match open_store(config).and_then(|store| store.touch_all(&pairs)) {
        Ok(marked) => tracing::debug!(marked, "replayed profiles marked used"),
        Err(err) => tracing::warn!(%err, profiles = pairs.len(), "replayed profiles not marked used"),
    }
}

/// First launches of command shapes kept until their second launch
/// ([`FirstRuns`]): at most this many,
const FIRST_RUNS: usize = 256;
/// naming at most this many page ranges in all (16 MiB of them).
const FIRST_RUN_RANGES: usize = 1 << 20;

/// Learns the finished launch `done` (see the module docs). True when it
/// was written to the store.
fn learn(
    config: &LaunchSection,
    namer: &mut Namer,
    first_runs: &mut FirstRuns,
    done: FinishedLaunch,
    book: &ReplayBook,
    scores: &Scores,
) -> Result<bool, StoreError> {
    if done.shape.is_empty() {
        // Its command line was gone before it could be read: which of the
        // executable's programs ran is not known.
        return Ok(false);
    }
    let Some(exe) = namer.name(done.exe, done.pid) else { return Ok(false) };
    if !config.may_learn(&exe.path) {
        return Ok(false);
    }
    // A retired profile is not learned (nor booked) again until it may
    // come back, or its executable changed: then it starts anew.
    let retired = scores.with(|b| {
        let (benefit, id) = b.benefits.get(&(exe.path.clone(), done.shape.to_string()))?;
        Some((benefit.retired.clone()?, *id))
    });
    if let Some((retired, id)) = retired {
        if id.is_none_or(|id| id == exe.id()) && !config.retire_rule().may_come_back(&retired, now_s()) {
            return Ok(false);
        }
        scores.with(|b| b.put(&exe.path, &done.shape, (Benefit::default(), Some(exe.id())), true));
        tracing::info!(exe = %exe.path, shape = %done.shape, "retired launch profile learned again");
    }
    // A cold launch without a replay: how long its command takes unhelped.
    let booked = config.replay && book.get(&LaunchKey::new(done.exe, &done.shape)).is_some();
    if !booked && config.learn_floor().admits_window(&done.recorder) {
        let ms = done.recorder.window_ms().round().min(f64::from(u32::MAX)) as u32;
        scores.with(|b| {
            let (benefit, id) = b.entry(&exe.path, &done.shape);
            benefit.add_cold(ms);
            *id = Some(exe.id());
        });
    }
    let trivial = !config.learn_floor().admits_window(&done.recorder);
    let missed = done.recorder.missed_pages();
    if trivial && keys::may_hold(&config.store, &exe.path, &done.shape) == Some(false) {
        // Most launches a machine runs are trivial and have no profile: the
        // key index says so without opening the database (reading and
        // parsing its allocator state cost ~2 ms a launch).
        return Ok(false);
    }
    // A launch worth learning is named before the store is opened: its
    // files are named by inode once it has exited, and the dentries of
    // those it closed may be reclaimed at any moment.
    let (seen, window_ms) = (done.recorder.files().count(), done.recorder.window_ms());
    // A replayed launch seen through misses alone (no page-access
    // tracepoints) only adds files: the replayed pages it used went unseen.
    let partial = booked && done.recorder.misses_only();
    let mut recorder = Some(done.recorder);
    let mut name_run = || recorder.take().map(|r| r.finish(|id, pid| namer.name(id, pid)));
    let early = if trivial { None } else { name_run() };
    let store = open_store(config)?;
    let learned = store.learned(&exe, &done.shape)?;
    if learned.is_none() && trivial {
        // Checked before its files are named: most launches a machine
        // runs are trivial, and naming is most of the learner's work.
        tracing::debug!(exe = %exe.path, missed, ms = window_ms, "trivial launch: not learned");
        return Ok(false);
    }
    let Some(run) = early.or_else(name_run) else { return Ok(false) };
    tracing::debug!(exe = %exe.path, pid = done.pid, seen, named = run.files.len(), window_ms, "launch window named");
    if run.files.is_empty() {
        return Ok(false);
    }
    if partial && let Some(mut profile) = learned {
        profile.add_unseen(&run, &LearnLimits::default());
        store.put(&profile)?;
        drop(store);
        tracing::info!(exe = %exe.path, files = profile.files.len(), "launch seen through misses: files added");
        book.insert(
            LaunchKey::new(exe.id(), &done.shape),
            plan_replay(&profile, &config.walk_limits(), &config.replay_pacing()),
        );
        return Ok(true);
    }
    // A shape reaches the store at its second launch (see `FirstRuns`).
    let runs = match learned {
        Some(_) => vec![run],
        None => match first_runs.admit(&exe, &done.shape, run) {
            Some(runs) => runs,
            None => return Ok(false),
        },
    };
    let profile = store.merge_runs(learned, &exe, &done.shape, &runs, &LearnLimits::default())?;
    drop(store);
    tracing::info!(exe = %exe.path, runs = profile.runs, files = profile.files.len(), "launch learned");
    if config.replay {
        let replay = plan_replay(&profile, &config.walk_limits(), &config.replay_pacing());
        book.insert(LaunchKey::new(exe.id(), &done.shape), replay);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use predictio::FileId;
    use predictio::event::{AccessKind, Event};
    use predictio::launch::WindowLimits;
    use predictio::page::PageRange;
    use std::os::unix::fs::MetadataExt;

    /// A program file held open by this process, so the learner names it
    /// through `/proc/self/fd` as it names a launch's files.
    struct Held {
        _file: std::fs::File,
        id: FileId,
    }

    fn held(dir: &std::path::Path, name: &str, pages: u64) -> Held {
        let path = dir.join(name);
        std::fs::write(&path, vec![7u8; (pages * 4096) as usize]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let meta = file.metadata().expect("stat");
        Held { id: FileId { dev: meta.dev(), ino: meta.ino() }, _file: file }
    }

    /// A finished launch of `exe` with command shape `shape` that read
    /// `missed` pages of it from storage and exited `ms` after its exec.
    fn finished(exe: &Held, shape: &str, missed: u64, ms: u64) -> FinishedLaunch {
        let pid = std::process::id();
        let exec_ns = 1_000_000_000;
        let mut recorder = predictio::launch::Recorder::new(pid, exec_ns, WindowLimits::default());
        let (file, time_ns) = (exe.id, exec_ns + 1_000_000);
        let pages = PageRange::new(0, missed.max(1));
        recorder.on_event(&Event::PageAccess { pid, file, pages, kind: AccessKind::Read, time_ns });
        for page in 0..missed {
            recorder.on_event(&Event::PageMiss { pid, file, pages: PageRange::page(page), time_ns });
        }
        recorder.on_event(&Event::Exit { pid, time_ns: exec_ns + ms * 1_000_000 });
        FinishedLaunch { exe: exe.id, shape: shape.into(), pid, recorder, replay: None }
    }

    /// Regression: every `head -2` and `mkdir -m` a shell script ran ended
    /// up in the store (from its second launch), crowding out the programs
    /// worth replaying. A launch under the learn floor is not learned into
    /// a new profile; a heavy one still is, and once a profile is stored
    /// its cheap (replayed) launches still reach it.
    #[test]
    fn trivial_launches_of_unknown_commands_are_not_learned_heavy_ones_are() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LaunchSection { store: dir.path().join("store"), ..LaunchSection::default() };
        let (head, clang) = (held(dir.path(), "head", 12), held(dir.path(), "clang", 2048));
        let (mut namer, mut first_runs, book) = (Namer::new(), FirstRuns::new(16, 1 << 20), ReplayBook::default());
        let scores = Scores::default();
        let mut learn_one = |config: &LaunchSection, done| {
            learn(config, &mut namer, &mut first_runs, done, &book, &scores).expect("learner store")
        };
        let floor = config.learn_floor();
        assert!(!floor.admits(12, 7.0) && floor.admits(2048, 300.0), "the defaults: 1 MiB and 20 ms");
        for _ in 0..3 {
            assert!(!learn_one(&config, finished(&head, "head -2 /tmp/t", 12, 7)), "cold head: 48 KiB, 7 ms");
            assert!(!learn_one(&config, finished(&head, "head -c", 2048, 5)), "8 MiB in 5 ms: too short to win");
        }
        assert!(!learn_one(&config, finished(&clang, "clang -c a.c", 2048, 300)), "a first launch is kept in memory");
        assert!(learn_one(&config, finished(&clang, "clang -c a.c", 2048, 280)), "stored at its second");
        // Its profile stored, a launch its replay filled is learned too.
        assert!(
            learn_one(&config, finished(&clang, "clang -c a.c", 0, 40)),
            "a stored profile is not judged by the floor"
        );
        let store = open_store(&config).expect("store");
        let (profiles, _) = store.all().expect("profiles");
        let shapes: Vec<&str> = profiles.iter().map(|p| p.shape.as_str()).collect();
        assert_eq!(shapes, ["clang -c a.c"], "only the heavy command is stored");
        assert_eq!(profiles[0].runs, 3);
        drop(store);
        // With no floor, every command is learned from its second launch.
        let everything = LaunchSection { min_learn_missed_kib: 0, min_learn_ms: 0, ..config.clone() };
        assert!(!learn_one(&everything, finished(&head, "head -2 /tmp/t", 12, 7)));
        assert!(learn_one(&everything, finished(&head, "head -2 /tmp/t", 12, 7)), "the floor is what left it out");
    }

    /// A shape's first launch, kept in memory, survives a restart: saved at
    /// the learner's stop and read at its start, the shape's next launch
    /// stores the profile with both runs.
    #[test]
    fn a_first_launch_survives_a_restart_and_the_second_stores_the_profile() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LaunchSection { store: dir.path().join("store"), ..LaunchSection::default() };
        let (clang, gdb) = (held(dir.path(), "clang", 2048), held(dir.path(), "gdb", 1024));
        let (book, scores) = (ReplayBook::default(), Scores::default());
        let mut namer = Namer::new();
        let mut before = FirstRuns::new(16, 1 << 20);
        for (exe, shape) in [(&gdb, "gdb --batch"), (&clang, "clang -c a.c")] {
            let done = finished(exe, shape, 2048, 300);
            assert!(!learn(&config, &mut namer, &mut before, done, &book, &scores).expect("store"), "kept");
        }
        save_first_runs(&config, &before);
        let mut after = FirstRuns::new(16, 1 << 20);
        load_first_runs(&config, &mut after);
        assert_eq!(after.len(), 2);
        let order: Vec<&str> = after.iter().map(|(_, shape, _)| shape).collect();
        assert_eq!(order, ["gdb --batch", "clang -c a.c"], "oldest first, as kept");
        let done = finished(&clang, "clang -c a.c", 2048, 280);
        assert!(learn(&config, &mut namer, &mut after, done, &book, &scores).expect("store"), "stored at its second");
        let exe = dir.path().join("clang").to_string_lossy().into_owned();
        let profile = open_store(&config).expect("store").get(&exe, "clang -c a.c").expect("read");
        assert_eq!(profile.expect("stored").runs, 2, "both runs");
        // Saving again replaces what was saved: the stored shape's run is gone.
        save_first_runs(&config, &after);
        let saved = open_store(&config).expect("store").first_runs().expect("read");
        let shapes: Vec<&str> = saved.iter().map(|(_, shape, _)| shape.as_str()).collect();
        assert_eq!(shapes, ["gdb --batch"]);
        // A byte budget keeps the newest.
        let runs: Vec<_> = before.iter().collect();
        let store = open_store(&config).expect("store");
        assert_eq!(store.put_first_runs(&runs, 0).expect("write"), 0);
        assert!(store.first_runs().expect("read").is_empty());
    }

    /// A replayed launch that used none of its replay's pages is scored;
    /// at the third such the profile is retired: out of the book, its
    /// benefit written to the store marked retired, and its next launches
    /// are not learned (nor booked) again. Launches without a replay give
    /// their duration as cold ones.
    #[test]
    fn a_profile_whose_replays_go_unused_is_retired_and_not_learned_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LaunchSection { store: dir.path().join("store"), ..LaunchSection::default() };
        let prog = held(dir.path(), "prog", 2048);
        let other = held(dir.path(), "data-a", 512);
        let (mut namer, mut first_runs, book, scores) =
            (Namer::new(), FirstRuns::new(16, 1 << 20), ReplayBook::default(), Scores::new(false));
        let mut learn_one = |done| learn(&config, &mut namer, &mut first_runs, done, &book, &scores).expect("store");
        assert!(!learn_one(finished(&prog, "prog", 2048, 300)));
        assert!(learn_one(finished(&prog, "prog", 2048, 320)), "stored at its second launch, booked");
        let exe = prog_path(dir.path());
        assert_eq!(scores.benefit(&exe, "prog").expect("known").cold_ms, [300, 320], "two cold launches");
        let key = LaunchKey::new(prog.id, "prog");
        let booked = book.get(&key).expect("booked");
        // The replay that ran held a file the launches never touch.
        let replayed = Arc::new(Replay {
            exe: booked.exe.clone(),
            at_exec: vec![predictio::launch::ReplayFile {
                identity: predictio::launch::FileIdentity::of_path(dir.path().join("data-a")).expect("identity"),
                ranges: vec![PageRange::new(0, 512)],
                first_touch_ms: 0.0,
                due_ms: Vec::new(),
            }],
            ..Replay::default()
        });
        assert_eq!(other.id, replayed.at_exec[0].identity.id());
        for n in 1..=3 {
            let mut done = finished(&prog, "prog", 10, 250);
            done.replay = Some(Arc::clone(&replayed));
            let retired = score_replay(&config, &scores, &book, &key, &replayed, &done);
            assert_eq!(retired, n == 3, "judged from the third replay on");
        }
        let benefit = scores.benefit(&exe, "prog").expect("scored");
        assert_eq!((benefit.scored, benefit.replays[0].used, benefit.replays[0].wasted), (3, Some(0), Some(512)));
        let why = benefit.retired.as_ref().expect("retired").why.clone();
        assert!(why.contains("0.0 %"), "{why}");
        assert!(book.get(&key).is_none(), "out of the book");
        flush_scores(&config, &scores);
        let stored = open_store(&config).expect("store").benefit(&exe, "prog").expect("read");
        assert_eq!(stored.and_then(|b| b.retired).map(|r| r.why), Some(why), "in the store, with why");
        // Its next cold launch is not learned, and it is not booked again.
        assert!(!learn_one(finished(&prog, "prog", 2048, 300)));
        assert!(book.get(&key).is_none());
        // Not at the next start either.
        let (book2, scores2) = (ReplayBook::default(), Scores::default());
        assert_eq!(load_book(&config, &book2, &scores2).expect("load"), 0, "a retired profile is not booked");
        assert!(scores2.benefit(&exe, "prog").is_some_and(|b| b.retired.is_some()));
        assert!(scores2.status().profiles.iter().any(|p| p.benefit.retired.is_some()), "the status says so");
        // Retired longer ago than `retire_days`: booked again, its benefit
        // started anew (and written so).
        let mut long_ago = stored_benefit(&config, &exe);
        long_ago.retired.as_mut().expect("retired").at_s = now_s() - config.retire_days * 86_400;
        open_store(&config).expect("store").put_benefits(&[(&exe, "prog", &long_ago)]).expect("written");
        let (book3, scores3) = (ReplayBook::default(), Scores::default());
        assert_eq!(load_book(&config, &book3, &scores3).expect("load"), 1, "it may come back");
        assert_eq!(scores3.benefit(&exe, "prog"), Some(Benefit::default()));
        flush_scores(&config, &scores3);
        assert_eq!(stored_benefit(&config, &exe), Benefit::default());
    }

    /// Regression: warm launches of a learned program were scored like
    /// cold ones, and a profile whose replayed (warm) launches took no less
    /// than its cold launches without a replay was retired, so that the
    /// next cold launch went unhelped. A launch the replayer found warm is
    /// neither scored nor learned (its hits were quieted); the same
    /// launches found cold are scored.
    #[test]
    fn launches_the_replayer_found_warm_are_not_scored() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = LaunchSection { store: dir.path().join("store"), ..LaunchSection::default() };
        let prog = held(dir.path(), "prog", 2048);
        let (mut namer, mut first_runs, book, scores) =
            (Namer::new(), FirstRuns::new(16, 1 << 20), ReplayBook::default(), Scores::new(false));
        let totals = ReplayTotals::default();
        scores.follow(totals.clone());
        for ms in [300, 320] {
            learn(&config, &mut namer, &mut first_runs, finished(&prog, "prog", 2048, ms), &book, &scores)
                .expect("store");
        }
        let key = LaunchKey::new(prog.id, "prog");
        let replayed = book.get(&key).expect("booked");
        let exe = prog_path(dir.path());
        for _ in 0..5 {
            // As long as a cold launch: retired by duration if scored.
            let mut done = finished(&prog, "prog", 10, 400);
            done.replay = Some(Arc::clone(&replayed));
            totals.mark_warm(done.pid);
            assert!(found_warm(&scores, &done), "the learner leaves it out");
            assert!(!found_warm(&scores, &done), "once");
        }
        assert_eq!(scores.benefit(&exe, "prog").expect("known").scored, 0, "warm launches are not scored");
        assert!(book.get(&key).is_some(), "still booked");
        let retired = (0..3).map(|_| {
            let mut done = finished(&prog, "prog", 10, 400);
            done.replay = Some(Arc::clone(&replayed));
            assert!(!found_warm(&scores, &done));
            score_replay(&config, &scores, &book, &key, &replayed, &done)
        });
        assert_eq!(retired.collect::<Vec<_>>(), [false, false, true], "found cold, the same launches are");
    }

    fn stored_benefit(config: &LaunchSection, exe: &str) -> Benefit {
        open_store(config).expect("store").benefit(exe, "prog").expect("read").expect("stored")
    }

    fn prog_path(dir: &std::path::Path) -> String {
        dir.join("prog").to_string_lossy().into_owned()
    }

    fn key(ino: u64) -> LaunchKey {
        LaunchKey::new(FileId { dev: 1, ino }, "gdb --batch")
    }

    #[test]
    fn a_launch_served_from_the_cache_is_not_learned_again_soon_after() {
        let t0 = Instant::now();
        let mut recent = RecentlyLearned::new(Duration::from_secs(600), 256, 16);
        assert!(recent.worth_learning(&key(1), 0, t0, None), "never stored: learned, warm or not");
        recent.stored(key(1), t0);
        let soon = t0 + Duration::from_secs(5);
        assert!(!recent.worth_learning(&key(1), 0, soon, None), "warm, stored 5 s ago");
        assert!(!recent.worth_learning(&key(1), 255, soon, None));
        assert!(recent.worth_learning(&key(1), 256, soon, None), "it read 1 MiB itself: something its profile lacks");
        assert!(recent.worth_learning(&key(2), 0, soon, None), "another program");
        assert!(recent.worth_learning(&key(1), 0, t0 + Duration::from_secs(600), None), "stored long enough ago");

        // After a restart, what the store says: a profile stored a minute
        // ago is not learned again from a warm launch, one stored an hour
        // ago is.
        let restarted = RecentlyLearned::new(Duration::from_secs(600), 256, 16);
        assert!(!restarted.worth_learning(&key(1), 0, t0, Some(Duration::from_secs(60))));
        assert!(restarted.worth_learning(&key(1), 300, t0, Some(Duration::from_secs(60))), "it missed 1 MiB+");
        assert!(restarted.worth_learning(&key(1), 0, t0, Some(Duration::from_secs(3600))));
    }

    #[test]
    fn recently_learned_remembers_a_bounded_number_of_profiles() {
        let t0 = Instant::now();
        let mut recent = RecentlyLearned::new(Duration::from_secs(600), 256, 2);
        recent.stored(key(1), t0);
        recent.stored(key(2), t0 + Duration::from_secs(1));
        recent.stored(key(3), t0 + Duration::from_secs(2));
        assert_eq!(recent.stored.len(), 2);
        let now = t0 + Duration::from_secs(3);
        assert!(recent.worth_learning(&key(1), 0, now, None), "the oldest was forgotten");
        assert!(!recent.worth_learning(&key(2), 0, now, None));
        assert!(!recent.worth_learning(&key(3), 0, now, None));
        // Expired ones go before a recent one has to.
        recent.stored(key(4), t0 + Duration::from_secs(700));
        assert!(!recent.worth_learning(&key(4), 0, t0 + Duration::from_secs(701), None));
        assert!(recent.worth_learning(&key(2), 0, t0 + Duration::from_secs(701), None));
    }
}
