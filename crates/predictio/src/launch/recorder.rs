//! Learning one launch from kernel observation.
//!
//! A [`Recorder`] follows one process tree from its exec: it keeps the pages
//! each file's accesses touched, in order, and the time of each file's first
//! touch. The launch window ends when the tree exits, when it has gone
//! [`WindowLimits::idle_ms`] without a page-cache miss (the launch is done
//! reading), or at [`WindowLimits::cap_ms`]. Pure: events in, a run out; the
//! caller names the files ([`Recorder::finish`] takes the lookup).
//!
//! Which pages count as touched is the [`AccessSource`]. By default every
//! observed access, the kernel's fault-around included: a fault maps the
//! resident pages of the 64 KiB block around it, and the program may use any
//! of them later without another fault, so no event says which it used.
//! [`AccessSource::Misses`] counts only the pages the launch itself brought
//! in. That is exact when the launch ran cold with the kernel's readahead
//! off (`predictio record --exact`): every page it touched was then read by
//! itself, one miss each, and fault-around could only map pages it had
//! already read (or that other processes keep resident).

use std::collections::HashSet;

use super::profile::{FileIdentity, LaunchRun, RunFile};
use crate::event::{AccessKind, Event};
use crate::file::{FileId, IdMap, IdSet};
use crate::page::{PageRange, merge_into_last};

/// When a launch window ends.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowLimits {
    /// No miss for this long ends the window.
    pub idle_ms: u64,
    /// The window never lasts longer.
    pub cap_ms: u64,
    /// Distinct files followed at most.
    pub max_files: usize,
    /// Accesses kept per file at most.
    pub max_accesses_per_file: usize,
    /// Distinct looked-up paths kept at most.
    pub max_lookups: usize,
}

impl Default for WindowLimits {
    fn default() -> Self {
        Self {
            idle_ms: 500,
            cap_ms: 10_000,
            max_files: 4096,
            max_accesses_per_file: 1 << 16,
            max_lookups: super::profile::MAX_LOOKUPS,
        }
    }
}

/// The least a launch must have cost for a replay of it to win anything: a
/// replay saves at most the time the launch waited for storage, and that
/// is bounded both by what the launch read from storage itself (its
/// page-cache misses, [`Recorder::missed_pages`]) and by how long it ran.
/// A launch under either floor — a shell script's `head -2` or `mkdir -m`,
/// a warm launch — is trivial: it is not learned into a new profile, so the
/// store holds the programs worth replaying. (A launch of a profile already
/// stored is judged otherwise: its replay may be what made it cheap.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LearnFloor {
    /// Pages the launch must have read from storage itself (0: no floor).
    pub missed_pages: u64,
    /// How long its window must have lasted, from its exec to its last
    /// event (its exit, for a short command), ms (0: no floor).
    pub window_ms: u64,
}

impl Default for LearnFloor {
    fn default() -> Self {
        Self { missed_pages: 256, window_ms: 20 }
    }
}

impl LearnFloor {
    /// Whether a launch that read `missed_pages` pages from storage itself
    /// in a window of `window_ms` could gain from a replay enough to be
    /// learned.
    pub fn admits(&self, missed_pages: u64, window_ms: f64) -> bool {
        missed_pages >= self.missed_pages && window_ms >= self.window_ms as f64
    }

    /// [`LearnFloor::admits`] of the window `recorder` recorded.
    pub fn admits_window(&self, recorder: &Recorder) -> bool {
        self.admits(recorder.missed_pages(), recorder.window_ms())
    }
}

/// Where looked-up paths are not replayed: filesystems with no disk blocks
/// behind them.
const VIRTUAL_ROOTS: [&str; 3] = ["/proc/", "/sys/", "/dev/"];

/// `file`'s entry in `map`, made if `map` has fewer than `cap` entries.
fn bounded(map: &mut IdMap<FileId, u64>, file: FileId, cap: usize) -> Option<&mut u64> {
    if map.len() >= cap && !map.contains_key(&file) {
        return None;
    }
    Some(map.entry(file).or_default())
}

/// `ranges` sorted, with overlapping and adjacent ranges merged and empty
/// ones left out.
pub fn normalized(mut ranges: Vec<PageRange>) -> Vec<PageRange> {
    ranges.retain(|r| !r.is_empty());
    ranges.sort_unstable();
    let mut out: Vec<PageRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Which observed pages a [`Recorder`] counts as the launch's accesses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AccessSource {
    /// Every page an access touched: reads, faults and the pages mapped
    /// around a fault (a superset of what the launch used).
    #[default]
    Observed,
    /// The launch's reads and faulting pages and the pages its own misses
    /// brought into the cache; pages mapped around a fault are not counted.
    /// Exact for a launch run cold with readahead off; with readahead on, it
    /// would count the kernel's readahead and miss what fault-around mapped.
    Misses,
}

#[derive(Debug)]
struct Seen {
    first_ns: u64,
    accesses: Vec<PageRange>,
    /// When each access began, ms after exec (parallel to `accesses`).
    at_ms: Vec<f32>,
}

/// Records one launch (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    limits: WindowLimits,
    source: AccessSource,
    exec_ns: u64,
    last_io_ns: u64,
    last_ns: u64,
    tree: IdSet<u32>,
    files: IdMap<FileId, Seen>,
    order: Vec<FileId>,
    done: bool,
    /// The pids whose accesses were seen (to name files through them).
    pids: IdMap<FileId, u32>,
    /// Looked-up paths, in order of first lookup, and the set of them.
    lookups: Vec<std::sync::Arc<str>>,
    looked_up: HashSet<std::sync::Arc<str>>,
    /// Pages the tree brought into the page cache itself, by file (at most
    /// [`WindowLimits::max_files`] files).
    missed: IdMap<FileId, u64>,
    /// Which pages those were, by file: consecutive misses merged into one
    /// range, at most [`WindowLimits::max_accesses_per_file`] ranges a file
    /// (for scoring a replay: [`Recorder::seen_in`]).
    missed_ranges: IdMap<FileId, Vec<PageRange>>,
    /// Files the tree read or mapped (any access event; as many at most).
    accessed: IdSet<FileId>,
    /// Whether any access event of the tree was seen. Until one is, the
    /// misses stand for the accesses: an observer without the page-access
    /// tracepoints (kernels before Linux 6.11) reports misses only. The
    /// first access drops what they recorded.
    saw_access: bool,
}

impl Recorder {
    /// Starts recording the tree of `pid`, which exec'd at `exec_ns`
    /// (monotonic).
    pub fn new(pid: u32, exec_ns: u64, limits: WindowLimits) -> Self {
        Self {
            limits,
            source: AccessSource::Observed,
            exec_ns,
            last_io_ns: exec_ns,
            last_ns: exec_ns,
            tree: IdSet::from_iter([pid]),
            files: IdMap::default(),
            order: Vec::new(),
            done: false,
            pids: IdMap::default(),
            lookups: Vec::new(),
            looked_up: HashSet::new(),
            missed: IdMap::default(),
            missed_ranges: IdMap::default(),
            accessed: IdSet::default(),
            saw_access: false,
        }
    }

    /// Leaves `file` out of the launch: what was recorded of it is
    /// dropped. For a file a policy that knows its structure fetches (a
    /// model a loader reads in the window), whose pages are that policy's
    /// work, not the launch's.
    pub fn leave_out(&mut self, file: FileId) {
        if self.files.remove(&file).is_some() {
            self.order.retain(|f| *f != file);
        }
        self.pids.remove(&file);
        self.missed.remove(&file);
        self.missed_ranges.remove(&file);
        self.accessed.remove(&file);
    }

    /// Counts the accesses `source` names (the default is
    /// [`AccessSource::Observed`]).
    pub fn counting(mut self, source: AccessSource) -> Self {
        self.source = source;
        self
    }

    /// Whether `pid` is in the followed tree.
    pub fn follows(&self, pid: u32) -> bool {
        self.tree.contains(&pid)
    }

    /// Feeds one event. Returns true once the window has ended.
    pub fn on_event(&mut self, event: &Event) -> bool {
        if self.done {
            return true;
        }
        match event {
            Event::Fork { parent, child, .. } if self.tree.contains(parent) => {
                self.tree.insert(*child);
            }
            Event::Exit { pid, time_ns } if self.tree.remove(pid) => {
                self.last_ns = self.last_ns.max(*time_ns);
                if self.tree.is_empty() {
                    self.done = true;
                }
            }
            Event::PageMiss { pid, file, pages, time_ns } if self.tree.contains(pid) && !pages.is_empty() => {
                if let Some(n) = bounded(&mut self.missed, *file, self.limits.max_files) {
                    *n += pages.len();
                    let ranges = self.missed_ranges.entry(*file).or_default();
                    if !merge_into_last(ranges, *pages) && ranges.len() < self.limits.max_accesses_per_file {
                        ranges.push(*pages);
                    }
                }
                self.last_io_ns = self.last_io_ns.max(*time_ns);
                self.last_ns = self.last_ns.max(*time_ns);
                if self.source == AccessSource::Misses || !self.saw_access {
                    self.touch(*pid, *file, *pages, *time_ns, true);
                }
            }
            // Lookups before the exec (a launcher's search of PATH) are
            // over by the time a replay starts.
            Event::Lookup { pid, path, time_ns } if self.tree.contains(pid) && *time_ns >= self.exec_ns => {
                self.last_ns = self.last_ns.max(*time_ns);
                if self.lookups.len() < self.limits.max_lookups
                    && !VIRTUAL_ROOTS.iter().any(|root| path.starts_with(root))
                    && self.looked_up.insert(std::sync::Arc::clone(path))
                {
                    self.lookups.push(std::sync::Arc::clone(path));
                }
            }
            Event::PageAccess { pid, file, pages, kind, time_ns } if self.tree.contains(pid) => {
                if !self.saw_access && self.source == AccessSource::Observed {
                    self.files.clear();
                    self.order.clear();
                    self.pids.clear();
                }
                self.saw_access = true;
                self.last_ns = self.last_ns.max(*time_ns);
                if self.accessed.len() < self.limits.max_files {
                    self.accessed.insert(*file);
                }
                let counted = match self.source {
                    AccessSource::Observed => *pages,
                    AccessSource::Misses if *kind == AccessKind::MapPages => PageRange::new(pages.start, pages.start),
                    AccessSource::Misses => *pages,
                };
                self.touch(*pid, *file, counted, *time_ns, self.source == AccessSource::Misses);
            }
            _ => {}
        }
        self.tick(self.last_ns)
    }

    /// Notes that `pid` touched `pages` of `file` (an empty range only notes
    /// the file). A range that continues or lies within the file's last
    /// access extends it instead of making a new one: with readahead off a
    /// sequential walk is one miss per page (`merge`: for misses).
    fn touch(&mut self, pid: u32, file: FileId, pages: PageRange, time_ns: u64, merge: bool) {
        if !self.files.contains_key(&file) && self.files.len() < self.limits.max_files {
            self.files.insert(file, Seen { first_ns: time_ns, accesses: Vec::new(), at_ms: Vec::new() });
            self.order.push(file);
            self.pids.insert(file, pid);
        }
        let Some(seen) = self.files.get_mut(&file) else { return };
        if pages.is_empty() {
            return;
        }
        if merge && merge_into_last(&mut seen.accesses, pages) {
            return;
        }
        if seen.accesses.len() < self.limits.max_accesses_per_file {
            seen.accesses.push(pages);
            seen.at_ms.push(time_ns.saturating_sub(self.exec_ns) as f32 / 1e6);
        }
    }

    /// Checks the idle and cap bounds at `now_ns`. Returns true once the
    /// window has ended.
    pub fn tick(&mut self, now_ns: u64) -> bool {
        if now_ns.saturating_sub(self.last_io_ns) >= self.limits.idle_ms * 1_000_000
            || now_ns.saturating_sub(self.exec_ns) >= self.limits.cap_ms * 1_000_000
        {
            self.done = true;
        }
        self.done
    }

    /// Whether the window saw only misses (an observer without the
    /// page-access tracepoints): the launch's pages that were already
    /// cached, a replay's among them, were used unseen.
    pub fn misses_only(&self) -> bool {
        !self.saw_access
    }

    /// Pages of files the launch read or mapped that it brought into the
    /// page cache itself so far (its read misses): none for a launch served
    /// from the cache, whether it was warm or a replay had filled it. Pages
    /// of a file it only wrote are left out: the kernel adds those to the
    /// cache as they are written, with the same event as a read's, but no
    /// read or fault touches them (unless no access was seen at all: an
    /// observer without the page-access tracepoints, where every miss counts).
    pub fn missed_pages(&self) -> u64 {
        self.missed_in(|_| true)
    }

    /// [`Recorder::missed_pages`] of the files `of` picks (a profile's: its
    /// launch read what the profile does not hold).
    pub fn missed_in(&self, of: impl Fn(FileId) -> bool) -> u64 {
        let read = |file: &FileId| !self.saw_access || self.accessed.contains(file);
        self.missed.iter().filter(|(file, _)| read(file) && of(**file)).map(|(_, n)| n).sum()
    }

    /// What the launch did with `file`'s pages: the ranges it accessed
    /// (read, faulted or mapped; its misses, when no access was seen) and
    /// the ranges it brought into the cache itself (its misses), each
    /// sorted and merged. Empty for a file it never touched. For scoring a
    /// replay ([`super::score`]): no naming, no copy of other files.
    pub fn seen_in(&self, file: FileId) -> (Vec<PageRange>, Vec<PageRange>) {
        let accessed = self.files.get(&file).map_or_else(Vec::new, |s| normalized(s.accesses.clone()));
        let read = !self.saw_access || self.accessed.contains(&file);
        let missed = match self.missed_ranges.get(&file) {
            Some(ranges) if read => normalized(ranges.clone()),
            _ => Vec::new(),
        };
        (accessed, missed)
    }

    /// How long the window has lasted so far, ms: from the exec to the
    /// last event of the tree (its exit, once it has exited).
    pub fn window_ms(&self) -> f64 {
        self.last_ns.saturating_sub(self.exec_ns) as f64 / 1e6
    }

    /// Whether the window has ended.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The files seen so far with a pid that touched each.
    pub fn files(&self) -> impl Iterator<Item = (FileId, u32)> + '_ {
        self.order.iter().map(|id| (*id, self.pids.get(id).copied().unwrap_or(0)))
    }

    /// The run, with each file named by `name` (files it cannot name are
    /// left out).
    pub fn finish(self, mut name: impl FnMut(FileId, u32) -> Option<FileIdentity>) -> LaunchRun {
        let window_ms = self.window_ms();
        let mut files = Vec::new();
        for id in &self.order {
            let Some(seen) = self.files.get(id) else { continue };
            let pid = self.pids.get(id).copied().unwrap_or(0);
            let Some(identity) = name(*id, pid) else { continue };
            if identity.id() != *id {
                continue;
            }
            files.push(RunFile {
                identity,
                first_touch_ms: seen.first_ns.saturating_sub(self.exec_ns) as f64 / 1e6,
                accesses: seen.accesses.clone(),
                access_ms: seen.at_ms.clone(),
            });
        }
        let lookups = self.lookups.iter().map(|p| p.to_string()).collect();
        LaunchRun { files, window_ms, lookups }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn access(pid: u32, ino: u64, page: u64, ms: u64) -> Event {
        Event::PageAccess {
            pid,
            file: FileId { dev: 1, ino },
            pages: PageRange::page(page),
            kind: AccessKind::Fault,
            time_ns: ms * 1_000_000,
        }
    }

    fn ident(id: FileId) -> Option<FileIdentity> {
        Some(FileIdentity { path: format!("/f{}", id.ino), dev: id.dev, ino: id.ino, size: 1 << 20, mtime_ns: 0 })
    }

    #[test]
    fn follows_the_tree_and_orders_first_touches() {
        let mut r = Recorder::new(10, 0, WindowLimits::default());
        r.on_event(&access(10, 5, 3, 1));
        r.on_event(&access(99, 6, 0, 1)); // not ours
        r.on_event(&Event::Fork { parent: 10, child: 11, time_ns: 2_000_000 });
        r.on_event(&access(11, 7, 8, 3));
        r.on_event(&access(10, 5, 1, 4));
        assert!(!r.on_event(&Event::Exit { pid: 11, time_ns: 5_000_000 }));
        assert!(r.on_event(&Event::Exit { pid: 10, time_ns: 6_000_000 }));
        let run = r.finish(|id, _| ident(id));
        assert_eq!(run.files.iter().map(|f| f.identity.ino).collect::<Vec<_>>(), vec![5, 7]);
        assert_eq!(run.files[0].accesses, vec![PageRange::page(3), PageRange::page(1)]);
        assert_eq!(run.files[0].access_ms, vec![1.0, 4.0], "when each access began, ms after exec");
        assert_eq!(run.files[1].first_touch_ms, 3.0);
        assert_eq!(run.window_ms, 6.0);
    }

    /// An observer without the page-access tracepoints (kernels before
    /// Linux 6.11) reports misses only: they stand for the launch's
    /// accesses and all count as missed. Once an access is seen, what the
    /// misses recorded is dropped and only accesses are learned.
    #[test]
    fn without_access_events_the_misses_are_the_launch() {
        let miss = |ino, page, ms: u64| Event::PageMiss {
            pid: 1,
            file: FileId { dev: 1, ino },
            pages: PageRange::page(page),
            time_ns: ms * 1_000_000,
        };
        let mut r = Recorder::new(1, 0, WindowLimits::default());
        for (ino, page, ms) in [(5, 0, 1), (5, 1, 1), (5, 2, 2), (6, 4, 3)] {
            r.on_event(&miss(ino, page, ms));
        }
        assert_eq!(r.missed_pages(), 4);
        assert!(r.on_event(&Event::Exit { pid: 1, time_ns: 4_000_000 }));
        let run = r.finish(|id, _| ident(id));
        assert_eq!(run.files.iter().map(|f| f.identity.ino).collect::<Vec<_>>(), vec![5, 6]);
        assert_eq!(run.files[0].accesses, vec![PageRange::new(0, 3)], "a file's consecutive misses are one range");
        assert_eq!(run.files[1].accesses, vec![PageRange::page(4)]);

        let mut r = Recorder::new(1, 0, WindowLimits::default());
        r.on_event(&miss(5, 0, 1));
        r.on_event(&access(1, 7, 2, 2));
        r.on_event(&miss(8, 0, 3));
        assert_eq!(r.missed_pages(), 0, "misses of files never read are not counted once accesses are seen");
        let run = r.finish(|id, _| ident(id));
        assert_eq!(run.files.iter().map(|f| f.identity.ino).collect::<Vec<_>>(), vec![7]);
    }

    #[test]
    fn misses_are_counted_for_a_bounded_number_of_files() {
        let limits = WindowLimits { max_files: 2, ..WindowLimits::default() };
        let mut r = Recorder::new(1, 0, limits);
        for ino in 1..=3 {
            let file = FileId { dev: 1, ino };
            r.on_event(&Event::PageMiss { pid: 1, file, pages: PageRange::page(0), time_ns: 1_000_000 });
            r.on_event(&Event::PageAccess {
                pid: 1,
                file,
                pages: PageRange::page(0),
                kind: AccessKind::Read,
                time_ns: 1_000_000,
            });
        }
        assert_eq!(r.missed_pages(), 2, "the third file is past max_files");
        r.on_event(&Event::PageMiss {
            pid: 1,
            file: FileId { dev: 1, ino: 1 },
            pages: PageRange::page(1),
            time_ns: 2_000_000,
        });
        assert_eq!(r.missed_pages(), 3, "a file already counted goes on counting");
    }

    /// A window of `missed` page-cache misses (one file, read) whose tree
    /// exits `ms` after its exec.
    fn window(missed: u64, ms: u64) -> Recorder {
        let file = FileId { dev: 1, ino: 9 };
        let mut r = Recorder::new(1, 1_000_000, WindowLimits::default());
        r.on_event(&Event::PageAccess {
            pid: 1,
            file,
            pages: PageRange::new(0, missed.max(1)),
            kind: AccessKind::Read,
            time_ns: 1_000_000,
        });
        for page in 0..missed {
            r.on_event(&Event::PageMiss { pid: 1, file, pages: PageRange::page(page), time_ns: 1_000_000 });
        }
        assert!(r.on_event(&Event::Exit { pid: 1, time_ns: 1_000_000 + ms * 1_000_000 }));
        r
    }

    #[test]
    fn trivial_launches_are_under_the_learn_floor() {
        let floor = LearnFloor::default();
        assert_eq!((floor.missed_pages, floor.window_ms), (256, 20), "1 MiB and 20 ms");
        // `head -2` on a cold cache: its binary's 12 pages, 7 ms.
        let head = window(12, 7);
        assert_eq!((head.missed_pages(), head.window_ms()), (12, 7.0));
        assert!(!floor.admits_window(&head));
        // A cold interpreter with its modules: 8 MiB, 300 ms.
        assert!(floor.admits_window(&window(2048, 300)));
        // Either floor alone leaves a launch out: a long warm launch read
        // nothing a replay could have read for it...
        assert!(!floor.admits_window(&window(0, 2000)));
        assert!(!floor.admits_window(&window(255, 2000)), "just under 1 MiB");
        // ...and a short one that read a lot cannot gain more than its time.
        assert!(!floor.admits_window(&window(4096, 19)));
        assert!(floor.admits_window(&window(256, 20)), "both floors reached");
        // A zero floor learns everything.
        let none = LearnFloor { missed_pages: 0, window_ms: 0 };
        assert!(none.admits_window(&window(0, 0)));
    }

    #[test]
    fn idle_and_cap_end_the_window() {
        let limits = WindowLimits { idle_ms: 100, cap_ms: 1000, ..WindowLimits::default() };
        let mut r = Recorder::new(1, 0, limits);
        r.on_event(&Event::PageMiss {
            pid: 1,
            file: FileId { dev: 1, ino: 1 },
            pages: PageRange::page(0),
            time_ns: 50_000_000,
        });
        assert!(!r.tick(120_000_000));
        assert!(r.tick(151_000_000), "100 ms without a miss");
        let mut r = Recorder::new(1, 0, limits);
        for ms in (0..1000).step_by(50) {
            r.on_event(&Event::PageMiss {
                pid: 1,
                file: FileId { dev: 1, ino: 1 },
                pages: PageRange::page(0),
                time_ns: ms * 1_000_000,
            });
        }
        assert!(r.tick(1_000_000_000), "the cap");
    }

    #[test]
    fn misses_count_what_the_launch_read_not_what_fault_around_mapped() {
        let file = FileId { dev: 1, ino: 5 };
        let map = |first: u64, end: u64, ms: u64| Event::PageAccess {
            pid: 1,
            file,
            pages: PageRange::new(first, end),
            kind: AccessKind::MapPages,
            time_ns: ms * 1_000_000,
        };
        let miss = |page: u64, ms: u64| Event::PageMiss {
            pid: 1,
            file,
            pages: PageRange::page(page),
            time_ns: ms * 1_000_000,
        };
        let events = [
            map(0, 16, 1), // fault-around: the whole block, nothing read
            access(1, 5, 3, 1),
            miss(3, 1),
            miss(4, 2),
            miss(5, 2),
            map(0, 16, 3),
            miss(40, 3),
            Event::PageMiss { pid: 99, file, pages: PageRange::page(41), time_ns: 3_000_000 }, // not ours
            miss(9, 4),
        ];
        let mut exact = Recorder::new(1, 0, WindowLimits::default()).counting(AccessSource::Misses);
        let mut observed = Recorder::new(1, 0, WindowLimits::default());
        for e in &events {
            exact.on_event(e);
            observed.on_event(e);
        }
        assert_eq!(exact.missed_pages(), 5, "its own misses, not another process's");
        assert_eq!(observed.missed_pages(), 5, "whatever it counts as accesses");
        // Pages of a file it only wrote are misses of no read.
        let mut writer = Recorder::new(1, 0, WindowLimits::default());
        for e in &events {
            writer.on_event(e);
        }
        let written = FileId { dev: 1, ino: 6 };
        for page in 0..10 {
            writer.on_event(&Event::PageMiss {
                pid: 1,
                file: written,
                pages: PageRange::page(page),
                time_ns: 5_000_000,
            });
        }
        assert_eq!(writer.missed_pages(), 5, "a file only written counts nothing");
        writer.on_event(&Event::PageAccess {
            pid: 1,
            file: written,
            pages: PageRange::new(0, 2),
            kind: AccessKind::Read,
            time_ns: 6_000_000,
        });
        assert_eq!(writer.missed_pages(), 15, "read back, its pages count");
        assert_eq!(writer.missed_in(|f| f == written), 10);
        assert_eq!(writer.missed_in(|f| f == file), 5);
        let exact = exact.finish(|id, _| ident(id));
        assert_eq!(exact.files.len(), 1);
        assert_eq!(exact.files[0].first_touch_ms, 1.0, "a map still marks the file's first touch");
        assert_eq!(
            exact.files[0].accesses,
            vec![PageRange::new(3, 6), PageRange::page(40), PageRange::page(9)],
            "the fault at 3 and the misses after it are one access; the mapped blocks count nothing"
        );
        let observed = observed.finish(|id, _| ident(id));
        assert_eq!(
            observed.files[0].accesses,
            vec![PageRange::new(0, 16), PageRange::page(3), PageRange::new(0, 16)],
            "by default every observed access counts and misses do not"
        );
    }

    #[test]
    fn lookups_of_the_tree_are_kept_once_in_order_and_bounded() {
        let limits = WindowLimits { max_lookups: 3, ..WindowLimits::default() };
        let mut r = Recorder::new(1, 10, limits);
        let look = |pid: u32, path: &str| Event::Lookup { pid, path: path.into(), time_ns: 11 };
        r.on_event(&Event::Fork { parent: 1, child: 2, time_ns: 10 });
        for e in [
            Event::Lookup { pid: 1, path: "/usr/local/bin/x".into(), time_ns: 9 }, // before the exec
            look(1, "/usr/lib/a.so"),
            look(99, "/etc/other"), // not ours
            look(2, "/usr/lib/missing.so"),
            look(1, "/proc/self/maps"), // no disk blocks behind it
            look(1, "/usr/lib/a.so"),   // again
            look(2, "/etc/ld.so.cache"),
            look(1, "/etc/beyond-the-bound"),
        ] {
            r.on_event(&e);
        }
        let run = r.finish(|id, _| ident(id));
        assert_eq!(run.lookups, vec!["/usr/lib/a.so", "/usr/lib/missing.so", "/etc/ld.so.cache"]);
    }

    #[test]
    fn files_that_cannot_be_named_or_changed_identity_are_left_out() {
        let mut r = Recorder::new(1, 0, WindowLimits::default());
        r.on_event(&access(1, 5, 0, 1));
        r.on_event(&access(1, 6, 0, 1));
        let run = r.finish(|id, _| if id.ino == 5 { None } else { ident(FileId { dev: 1, ino: 77 }) });
        assert!(run.files.is_empty());
    }
}
