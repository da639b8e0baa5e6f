//! Launch profiles: what one executable's launches read, learned across runs.
//!
//! A [`Profile`] is the executable's identity, the files its launches touch
//! (each with its identity — path, device, inode, size, mtime — the aged time
//! of its first touch after exec, and a [`PageModel`]), and Notifetcher-style
//! [`Trigger`]s for the files of later phases (seed 001): "when file X is
//! first touched, the set Y follows". A [`LaunchRun`] (one observed launch,
//! from [`super::recorder`]) is merged into a profile with aging; a file whose
//! identity changed is re-learned from scratch. [`Profile::plan`] walks the
//! models into the page lists a replay hands to the executor. Pure data; the
//! only I/O here is [`FileIdentity::of_path`] / [`FileIdentity::check`], which
//! the callers (record, the daemon, the store) use — never a policy.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::model::{ModelLimits, PageModel, WalkLimits, Walked};
use crate::file::FileId;
use crate::page::PageRange;

/// Version of the profile format. Versions 1 (no [`Profile::dirs`]), 2
/// (no [`Profile::lookups`]) and 3 (no [`Profile::shape`]) are migrated on
/// load ([`Profile::migrate`]); a store refuses other versions.
pub const PROFILE_VERSION: u32 = 4;

/// Directories a profile keeps at most.
pub const MAX_DIRS: usize = 1024;

/// Looked-up paths a profile keeps at most.
pub const MAX_LOOKUPS: usize = 16384;

/// Who a file is: where it was, and what it was when learned.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileIdentity {
    /// Absolute path.
    pub path: String,
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
    /// `st_size`.
    pub size: u64,
    /// `st_mtime` in nanoseconds.
    pub mtime_ns: i64,
}

/// Whether a learned file is still the file on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Same inode, size and mtime.
    Fresh,
    /// Replaced or modified since it was learned.
    Changed,
    /// Gone (or unreadable).
    Missing,
}

impl FileIdentity {
    /// The identity of `path` from its metadata.
    pub fn from_metadata(path: &str, meta: &std::fs::Metadata) -> Self {
        Self {
            path: path.to_owned(),
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: meta.mtime().saturating_mul(1_000_000_000).saturating_add(meta.mtime_nsec()),
        }
    }

    /// Reads the identity of `path` (`stat`, following links).
    pub fn of_path(path: impl AsRef<Path>) -> std::io::Result<Self> {
        let path = path.as_ref();
        let meta = std::fs::metadata(path)?;
        Ok(Self::from_metadata(&path.to_string_lossy(), &meta))
    }

    /// The file id.
    pub fn id(&self) -> FileId {
        FileId { dev: self.dev, ino: self.ino }
    }

    /// Whether `now` (the metadata of the file as it is) is still this file.
    pub fn compare(&self, now: &std::fs::Metadata) -> Freshness {
        let current = Self::from_metadata(&self.path, now);
        if current == *self { Freshness::Fresh } else { Freshness::Changed }
    }

    /// Stats the path and compares.
    pub fn check(&self) -> Freshness {
        match std::fs::metadata(&self.path) {
            Ok(meta) => self.compare(&meta),
            Err(_) => Freshness::Missing,
        }
    }
}

/// One observed launch of an executable.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LaunchRun {
    /// The files touched, in order of first touch.
    pub files: Vec<RunFile>,
    /// Length of the observed window, ms.
    pub window_ms: f64,
    /// The absolute paths the launch looked up (opened, stat'ed, accessed,
    /// exec'd; existing or not), each once, in order of first lookup.
    #[serde(default)]
    pub lookups: Vec<String>,
}

/// One file of a [`LaunchRun`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunFile {
    /// The file.
    pub identity: FileIdentity,
    /// First touch, ms after exec.
    pub first_touch_ms: f64,
    /// The accesses, in order.
    pub accesses: Vec<PageRange>,
    /// When each access began, ms after exec (parallel to `accesses`;
    /// empty when not known, as in runs kept by an older version).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_ms: Vec<f32>,
}

/// One learned file of a [`Profile`].
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FileProfile {
    /// The file as learned.
    pub identity: FileIdentity,
    /// Aged mean of its first touch, ms after exec.
    pub first_touch_ms: f64,
    /// Its pages.
    pub model: PageModel,
}

impl FileProfile {
    /// A file first seen in a launch: its model learned from that run alone.
    fn first_seen(file: &RunFile, limits: &LearnLimits) -> Self {
        let mut model = PageModel::default();
        model.merge_timed_run(&file.accesses, &file.access_ms, &limits.model);
        FileProfile { identity: file.identity.clone(), first_touch_ms: file.first_touch_ms, model }
    }
}

/// "When file `on` is first touched, files `then` follow" (seed 001). Indices
/// into [`Profile::files`].
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Trigger {
    /// The file whose first touch fires the trigger.
    pub on: usize,
    /// The files to fetch then.
    pub then: Vec<usize>,
}

/// The first launches of command shapes the store does not hold yet,
/// kept in memory until their shape launches again (the daemon's).
///
/// With a profile per command shape, a build runs hundreds of commands
/// that each launch once (a compile per source file): storing each would
/// write a profile per command (hundreds of KiB each, fsync'd) and evict
/// the profiles of programs that do launch again. So a shape reaches the
/// store at its second launch, both runs merged; until then its first run
/// waits here, bounded by count and by the pages it names, oldest out.
#[derive(Debug)]
pub struct FirstRuns {
    runs: std::collections::VecDeque<(FileIdentity, String, LaunchRun)>,
    max_runs: usize,
    max_ranges: usize,
    ranges: usize,
}

impl FirstRuns {
    /// Keeps at most `max_runs` first runs naming at most `max_ranges`
    /// page ranges in all.
    pub fn new(max_runs: usize, max_ranges: usize) -> Self {
        Self { runs: std::collections::VecDeque::new(), max_runs, max_ranges, ranges: 0 }
    }

    fn ranges_of(run: &LaunchRun) -> usize {
        run.files.iter().map(|f| f.accesses.len()).sum()
    }

    /// A finished launch of `exe` with command shape `shape` whose profile
    /// is not stored: `None` when it is the first seen (kept), else the
    /// runs to store, the kept first one and then `run`. A first run of a
    /// since changed executable does not count.
    pub fn admit(&mut self, exe: &FileIdentity, shape: &str, run: LaunchRun) -> Option<Vec<LaunchRun>> {
        if let Some(i) = self.runs.iter().position(|(e, s, _)| e.path == exe.path && s == shape) {
            let (kept_exe, _, first) = self.runs.remove(i)?;
            self.ranges -= Self::ranges_of(&first);
            if kept_exe == *exe {
                return Some(vec![first, run]);
            }
        }
        let ranges = Self::ranges_of(&run);
        if ranges > self.max_ranges || self.max_runs == 0 {
            return None;
        }
        while self.runs.len() >= self.max_runs || self.ranges + ranges > self.max_ranges {
            let Some((_, _, old)) = self.runs.pop_front() else { break };
            self.ranges -= Self::ranges_of(&old);
        }
        self.ranges += ranges;
        self.runs.push_back((exe.clone(), shape.to_owned(), run));
        None
    }

    /// The first runs kept, oldest first: executable, command shape, run
    /// (to save them over a restart, and [`Self::admit`] them back in this
    /// order).
    pub fn iter(&self) -> impl Iterator<Item = (&FileIdentity, &str, &LaunchRun)> {
        self.runs.iter().map(|(exe, shape, run)| (exe, shape.as_str(), run))
    }

    /// First runs kept.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// True when none is kept.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }
}

/// Learning settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LearnLimits {
    /// Per-file model bounds.
    pub model: ModelLimits,
    /// Files kept per profile (the first touched win).
    pub max_files: usize,
    /// A pause of at least this long between first touches starts a later
    /// phase, fetched on a trigger instead of at exec.
    pub phase_gap_ms: f64,
}

impl Default for LearnLimits {
    fn default() -> Self {
        Self { model: ModelLimits::default(), max_files: 4096, phase_gap_ms: 1000.0 }
    }
}

/// What a launch of one executable reads (see the module docs).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Profile {
    /// [`PROFILE_VERSION`] when written.
    pub version: u32,
    /// The executable.
    pub exe: FileIdentity,
    /// The shape of the command lines learned ([`super::shape`]): a profile
    /// is replayed for launches of its executable with this shape only.
    /// Empty in profiles written before shapes (version 3 and older), which
    /// learned every command line of the executable together: kept, listed
    /// and exported, never replayed.
    #[serde(default)]
    pub shape: String,
    /// Launches merged.
    pub runs: u32,
    /// Wall-clock seconds (UNIX) of the last merge or replay.
    pub last_used_s: u64,
    /// Total time spent observing launches, ms.
    pub learned_ms: f64,
    /// Files in order of (aged) first touch.
    pub files: Vec<FileProfile>,
    /// Later phases.
    pub triggers: Vec<Trigger>,
    /// The directories the launch searched: every directory on the paths of
    /// the files it opened, in order of first touch, at most [`MAX_DIRS`].
    /// Replayed as a metadata request (listed by the executor's metadata
    /// threads), so its name lookups — including those of names that do
    /// not exist — find the directory blocks cached.
    #[serde(default)]
    pub dirs: Vec<String>,
    /// The paths the launch looked up: the latest run's, in order of first
    /// lookup, then those of earlier runs it did not repeat, at most
    /// [`MAX_LOOKUPS`]. Replayed as a metadata request (looked up again by
    /// the executor's metadata threads), so the directory blocks and inodes
    /// those lookups read are cached, including those of names that do not
    /// exist and of files the launch only stat'ed.
    #[serde(default)]
    pub lookups: Vec<String>,
}

/// Page lists of some files: `(index into Profile::files, its walk)`.
pub type FilePages = Vec<(usize, Walked)>;

/// A replay plan: page lists per file, in expected order of first use.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// `(file index, ranges)` to fetch at exec.
    pub at_exec: FilePages,
    /// `(trigger file index, [(file index, ranges)])` to fetch when the
    /// trigger file is first touched.
    pub on_trigger: Vec<(usize, FilePages)>,
}

impl Plan {
    /// Pages in the whole plan.
    pub fn pages(&self) -> u64 {
        let sum = |v: &[(usize, Walked)]| v.iter().flat_map(|f| &f.1.ranges).map(PageRange::len).sum::<u64>();
        sum(&self.at_exec) + self.on_trigger.iter().map(|t| sum(&t.1)).sum::<u64>()
    }
}

/// Now, in UNIX seconds (0 before 1970).
pub fn now_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Profile {
    /// An empty profile for launches of `exe` with command shape `shape`.
    pub fn new(exe: FileIdentity, shape: &str) -> Self {
        Self {
            version: PROFILE_VERSION,
            exe,
            shape: shape.to_owned(),
            runs: 0,
            last_used_s: now_s(),
            learned_ms: 0.0,
            files: Vec::new(),
            triggers: Vec::new(),
            dirs: Vec::new(),
            lookups: Vec::new(),
        }
    }

    /// Brings a profile of an older format up to [`PROFILE_VERSION`]:
    /// version 1 had no directories, which are derived from its files'
    /// paths; versions 1 and 2 had no lookups, which the next merge learns;
    /// versions 1 to 3 had no shape (they stay unshaped: not replayed).
    /// Returns false for a version it cannot read.
    pub fn migrate(&mut self) -> bool {
        match self.version {
            PROFILE_VERSION => true,
            1..=3 => {
                if self.version == 1 {
                    self.dirs = dirs_of(&self.files);
                }
                self.version = PROFILE_VERSION;
                true
            }
            _ => false,
        }
    }

    /// Merges one launch: matching files (by path) learn the run with aging,
    /// a file whose identity changed starts over, files the run did not
    /// touch age, and files whose models emptied are forgotten.
    pub fn merge(&mut self, run: &LaunchRun, limits: &LearnLimits) {
        self.runs = self.runs.saturating_add(1);
        self.last_used_s = now_s();
        self.learned_ms += run.window_ms;
        let mut touched = vec![false; self.files.len()];
        for file in run.files.iter().take(limits.max_files) {
            match self.files.iter().position(|f| f.identity.path == file.identity.path) {
                Some(i) => {
                    let known = &mut self.files[i];
                    if known.identity != file.identity {
                        known.identity = file.identity.clone();
                        known.model = PageModel::default();
                        known.first_touch_ms = file.first_touch_ms;
                    } else {
                        known.first_touch_ms = 0.5 * (known.first_touch_ms + file.first_touch_ms);
                    }
                    known.model.merge_timed_run(&file.accesses, &file.access_ms, &limits.model);
                    touched[i] = true;
                }
                None if self.files.len() < limits.max_files => {
                    self.files.push(FileProfile::first_seen(file, limits));
                    touched.push(true);
                }
                None => {}
            }
        }
        for (file, touched) in self.files.iter_mut().zip(&touched) {
            if !touched {
                file.model.merge_run(&[], &limits.model);
            }
        }
        self.settle_files(limits);
        if !run.lookups.is_empty() {
            let latest: std::collections::HashSet<&str> = run.lookups.iter().map(String::as_str).collect();
            let earlier = self.lookups.iter().filter(|p| !latest.contains(p.as_str()));
            self.lookups = run.lookups.iter().chain(earlier).take(MAX_LOOKUPS).cloned().collect();
        }
    }

    /// Merges a launch that was replayed from this profile and seen through
    /// misses alone (no page-access tracepoints): its misses are only what
    /// the replay did not bring in, while the replayed pages it used went
    /// unseen. So it adds the files the profile lacks and nothing else: no
    /// file or page it did not miss is aged, and the run is not counted.
    pub fn add_unseen(&mut self, run: &LaunchRun, limits: &LearnLimits) {
        self.last_used_s = now_s();
        let mut added = false;
        for file in run.files.iter().take(limits.max_files) {
            if self.files.len() >= limits.max_files {
                break;
            }
            if self.files.iter().any(|f| f.identity.path == file.identity.path) {
                continue;
            }
            self.files.push(FileProfile::first_seen(file, limits));
            added = true;
        }
        if added {
            self.settle_files(limits);
        }
    }

    /// After a merge: files whose models emptied forgotten, the rest in
    /// order of first touch, and the phases and directories derived again.
    fn settle_files(&mut self, limits: &LearnLimits) {
        self.files.retain(|f| !f.model.nodes.is_empty());
        self.files.sort_by(|a, b| a.first_touch_ms.total_cmp(&b.first_touch_ms));
        self.triggers = phases(&self.files, limits.phase_gap_ms);
        self.dirs = dirs_of(&self.files);
    }

    /// Pages the models cover.
    pub fn pages(&self) -> u64 {
        self.files.iter().map(|f| f.model.pages()).sum()
    }

    /// Walks every file's model: files of the first phase go to
    /// [`Plan::at_exec`], later phases under their trigger. Files are in
    /// order of first touch.
    pub fn plan(&self, walk: &WalkLimits) -> Plan {
        let mut plan = Plan::default();
        let later: std::collections::HashSet<usize> =
            self.triggers.iter().flat_map(|t| t.then.iter().copied()).collect();
        let walked = |i: usize| -> Option<(usize, Walked)> {
            let walked = self.files[i].model.walk_timed(walk);
            (!walked.ranges.is_empty()).then_some((i, walked))
        };
        plan.at_exec = (0..self.files.len()).filter(|i| !later.contains(i)).filter_map(walked).collect();
        plan.on_trigger = self
            .triggers
            .iter()
            .map(|t| (t.on, t.then.iter().filter_map(|&i| walked(i)).collect::<Vec<_>>()))
            .filter(|t| !t.1.is_empty())
            .collect();
        plan
    }
}

/// Every directory on the paths of `files` (which the launch opened, so it
/// searched each), ancestors first, in order of the files' first touch, at
/// most [`MAX_DIRS`].
fn dirs_of(files: &[FileProfile]) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    let mut dirs = Vec::new();
    for f in files {
        let mut chain: Vec<&Path> = Path::new(&f.identity.path).ancestors().skip(1).collect();
        chain.reverse();
        for dir in chain {
            let dir = dir.to_string_lossy();
            if dir.is_empty() || !dir.starts_with('/') {
                continue;
            }
            if dirs.len() >= MAX_DIRS {
                return dirs;
            }
            if seen.insert(dir.to_string()) {
                dirs.push(dir.into_owned());
            }
        }
    }
    dirs
}

/// Splits files (sorted by first touch) into phases at pauses of at least
/// `gap_ms`; each later phase is a trigger on its first file.
fn phases(files: &[FileProfile], gap_ms: f64) -> Vec<Trigger> {
    let mut triggers: Vec<Trigger> = Vec::new();
    for i in 1..files.len() {
        if files[i].first_touch_ms - files[i - 1].first_touch_ms >= gap_ms {
            triggers.push(Trigger { on: i, then: vec![i] });
        } else if let Some(t) = triggers.last_mut() {
            t.then.push(i);
        }
    }
    triggers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ident(path: &str, ino: u64) -> FileIdentity {
        FileIdentity { path: path.into(), dev: 1, ino, size: 4096 * 100, mtime_ns: 7 }
    }

    /// A plan's page lists, without their times.
    fn ranges(files: &FilePages) -> Vec<(usize, Vec<PageRange>)> {
        files.iter().map(|(i, w)| (*i, w.ranges.clone())).collect()
    }

    fn file(path: &str, ino: u64, at: f64, pages: &[u64]) -> RunFile {
        RunFile {
            identity: ident(path, ino),
            first_touch_ms: at,
            accesses: pages.iter().map(|&p| PageRange::page(p)).collect(),
            access_ms: Vec::new(),
        }
    }

    #[test]
    fn merge_orders_files_by_first_touch_and_plans_them() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let run = LaunchRun {
            files: vec![file("/lib/b", 3, 5.0, &[9, 1]), file("/bin/x", 1, 0.0, &[0, 4])],
            window_ms: 20.0,
            lookups: Vec::new(),
        };
        p.merge(&run, &LearnLimits::default());
        assert_eq!(p.files.iter().map(|f| f.identity.path.as_str()).collect::<Vec<_>>(), vec!["/bin/x", "/lib/b"]);
        let plan = p.plan(&WalkLimits { merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(
            ranges(&plan.at_exec),
            vec![(0, vec![PageRange::page(0), PageRange::page(4)]), (1, vec![PageRange::page(1), PageRange::page(9)])]
        );
        assert!(plan.on_trigger.is_empty());
        assert_eq!(plan.pages(), 4);
    }

    /// Regression: seen through misses alone, each replayed launch showed
    /// only what its replay had not brought in, and merging it aged the
    /// rest: a daemon without the page-access tracepoints shrank a clang
    /// profile from 82 files to 6 in three launches.
    #[test]
    fn a_replayed_launch_seen_through_misses_only_adds_files() {
        let limits = LearnLimits::default();
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let full = || LaunchRun {
            files: vec![file("/bin/x", 1, 0.0, &[0, 1]), file("/lib/a", 2, 1.0, &[5, 6])],
            window_ms: 10.0,
            lookups: Vec::new(),
        };
        p.merge(&full(), &limits);
        p.merge(&full(), &limits);
        let before = p.plan(&WalkLimits::default());
        // The replay filled /bin/x and /lib/a; the launch missed a new file.
        let partial = LaunchRun { files: vec![file("/lib/new", 3, 4.0, &[9])], window_ms: 10.0, lookups: Vec::new() };
        for _ in 0..5 {
            p.add_unseen(&partial, &limits);
        }
        assert_eq!(p.runs, 2, "the partial launches are not counted");
        let after = p.plan(&WalkLimits::default());
        let paths: Vec<&str> = p.files.iter().map(|f| f.identity.path.as_str()).collect();
        assert_eq!(paths, ["/bin/x", "/lib/a", "/lib/new"]);
        assert_eq!(after.pages(), before.pages() + 1, "nothing aged, the new file's page added");
    }

    #[test]
    fn changed_file_is_relearned_not_mixed() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let limits = LearnLimits::default();
        for _ in 0..3 {
            p.merge(
                &LaunchRun { files: vec![file("/lib/a", 2, 1.0, &[10, 11])], window_ms: 1.0, lookups: Vec::new() },
                &limits,
            );
        }
        // Same path, new inode: the old pages must not be predicted.
        p.merge(
            &LaunchRun { files: vec![file("/lib/a", 99, 1.0, &[500])], window_ms: 1.0, lookups: Vec::new() },
            &limits,
        );
        assert_eq!(p.files[0].identity.ino, 99);
        assert_eq!(ranges(&p.plan(&WalkLimits::default()).at_exec), vec![(0, vec![PageRange::page(500)])]);
    }

    #[test]
    fn a_late_phase_becomes_a_trigger() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let run = LaunchRun {
            files: vec![
                file("/bin/x", 1, 0.0, &[0]),
                file("/lib/a", 2, 3.0, &[0]),
                file("/plugin/p", 3, 2500.0, &[5]),
                file("/plugin/q", 4, 2510.0, &[6]),
            ],
            window_ms: 3000.0,
            lookups: Vec::new(),
        };
        p.merge(&run, &LearnLimits::default());
        assert_eq!(p.triggers, vec![Trigger { on: 2, then: vec![2, 3] }]);
        let plan = p.plan(&WalkLimits::default());
        assert_eq!(plan.at_exec.iter().map(|f| f.0).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!(plan.on_trigger.len(), 1);
        assert_eq!(plan.on_trigger[0].0, 2);
        assert_eq!(plan.on_trigger[0].1.iter().map(|f| f.0).collect::<Vec<_>>(), vec![2, 3]);
    }

    #[test]
    fn files_no_longer_touched_age_out() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let limits = LearnLimits::default();
        p.merge(&LaunchRun { files: vec![file("/old", 5, 1.0, &[1])], window_ms: 1.0, lookups: Vec::new() }, &limits);
        for _ in 0..8 {
            p.merge(
                &LaunchRun { files: vec![file("/new", 6, 1.0, &[1])], window_ms: 1.0, lookups: Vec::new() },
                &limits,
            );
        }
        assert_eq!(p.files.iter().map(|f| f.identity.path.as_str()).collect::<Vec<_>>(), vec!["/new"]);
    }

    #[test]
    fn dirs_are_the_searched_directories_in_order() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let run = LaunchRun {
            files: vec![
                file("/usr/lib/a.so", 2, 0.0, &[0]),
                file("/usr/lib/py/m/b.py", 3, 1.0, &[0]),
                file("/usr/lib/c.so", 4, 2.0, &[0]),
            ],
            window_ms: 3.0,
            lookups: Vec::new(),
        };
        p.merge(&run, &LearnLimits::default());
        assert_eq!(p.dirs, vec!["/", "/usr", "/usr/lib", "/usr/lib/py", "/usr/lib/py/m"]);
    }

    #[test]
    fn lookups_keep_the_latest_run_first_then_earlier_ones_bounded() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        let run = |lookups: &[&str]| LaunchRun {
            files: vec![file("/lib/a", 2, 0.0, &[0])],
            window_ms: 1.0,
            lookups: lookups.iter().map(|s| s.to_string()).collect(),
        };
        p.merge(&run(&["/etc/a", "/etc/b"]), &LearnLimits::default());
        p.merge(&run(&["/etc/c", "/etc/a"]), &LearnLimits::default());
        assert_eq!(p.lookups, vec!["/etc/c", "/etc/a", "/etc/b"]);
        // A run that saw none (observed without lookups) keeps what was learned.
        p.merge(&run(&[]), &LearnLimits::default());
        assert_eq!(p.lookups.len(), 3);
        let many: Vec<String> = (0..MAX_LOOKUPS + 10).map(|i| format!("/n/{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        p.merge(&run(&refs), &LearnLimits::default());
        assert_eq!(p.lookups.len(), MAX_LOOKUPS);
        assert_eq!(p.lookups[0], "/n/0");
    }

    #[test]
    fn a_shape_is_stored_from_its_second_launch() {
        let one = |pages: &[u64]| LaunchRun {
            files: vec![file("/lib/a", 2, 0.0, pages)],
            window_ms: 1.0,
            lookups: Vec::new(),
        };
        let exe = ident("/bin/cc", 1);
        let mut first = FirstRuns::new(2, 10);
        assert_eq!(first.admit(&exe, "cc -c a.c", one(&[1])), None, "a first launch is kept");
        assert_eq!(first.admit(&exe, "cc -c b.c", one(&[2])), None);
        assert_eq!(first.admit(&exe, "cc -c a.c", one(&[3])), Some(vec![one(&[1]), one(&[3])]), "both runs stored");
        assert_eq!(first.len(), 1);
        // The executable changed since its first run: that run is dropped.
        assert_eq!(first.admit(&ident("/bin/cc", 2), "cc -c b.c", one(&[4])), None);
        assert_eq!(first.admit(&ident("/bin/cc", 2), "cc -c b.c", one(&[5])), Some(vec![one(&[4]), one(&[5])]));
        // Bounded by count, oldest out, and by pages named.
        for shape in ["x", "y", "z"] {
            assert_eq!(first.admit(&exe, shape, one(&[1, 2, 3])), None);
        }
        assert_eq!(first.len(), 2);
        assert_eq!(first.admit(&exe, "x", one(&[1])), None, "x was pushed out: a first launch again");
        assert_eq!(first.admit(&exe, "huge", one(&(0..11).map(|i| i * 9).collect::<Vec<_>>())), None);
        assert_eq!(first.admit(&exe, "huge", one(&[1])), None, "a run over the page bound is not kept");
        assert!(first.ranges <= 10);
    }

    #[test]
    fn version_3_profiles_migrate_unshaped() {
        let mut p = Profile::new(ident("/bin/x", 1), "");
        p.merge(
            &LaunchRun { files: vec![file("/opt/a/b", 2, 0.0, &[0])], window_ms: 1.0, lookups: vec!["/a".into()] },
            &LearnLimits::default(),
        );
        let mut v3 = serde_json::to_value(&p).unwrap();
        v3["version"] = 3.into();
        v3.as_object_mut().unwrap().remove("shape");
        let mut old: Profile = serde_json::from_value(v3).unwrap();
        assert!(old.migrate());
        assert_eq!(old, p, "no shape: learned from every command line, never replayed");
    }

    #[test]
    fn version_2_profiles_migrate_without_lookups() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        p.merge(
            &LaunchRun { files: vec![file("/opt/a/b", 2, 0.0, &[0])], window_ms: 1.0, lookups: Vec::new() },
            &LearnLimits::default(),
        );
        let mut v2 = serde_json::to_value(&p).unwrap();
        v2["version"] = 2.into();
        v2.as_object_mut().unwrap().remove("lookups");
        let mut old: Profile = serde_json::from_value(v2).unwrap();
        assert!(old.migrate());
        assert_eq!(old, p, "dirs kept, no lookups");
    }

    #[test]
    fn version_1_profiles_migrate() {
        let mut p = Profile::new(ident("/bin/x", 1), "x");
        p.merge(
            &LaunchRun { files: vec![file("/opt/a/b", 2, 0.0, &[0])], window_ms: 1.0, lookups: Vec::new() },
            &LearnLimits::default(),
        );
        let mut v1 = serde_json::to_value(&p).unwrap();
        v1["version"] = 1.into();
        v1.as_object_mut().unwrap().remove("dirs");
        let mut old: Profile = serde_json::from_value(v1).unwrap();
        assert!(old.dirs.is_empty());
        assert!(old.migrate());
        assert_eq!(old, p);
        old.version = 7;
        assert!(!old.migrate());
    }

    #[test]
    fn identity_check_sees_changes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"one").unwrap();
        let id = FileIdentity::of_path(&path).unwrap();
        assert_eq!(id.check(), Freshness::Fresh);
        std::fs::write(&path, b"three").unwrap();
        assert_eq!(id.check(), Freshness::Changed);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(id.check(), Freshness::Missing);
    }
}
