//! Learning one launch from kernel observation.
//!
//! A [`Recorder`] follows one process tree from its exec: it keeps the pages
//! each file's accesses touched, in order, and the time of each file's first
//! touch. The launch window ends when the tree exits, when it has gone
//! [`WindowLimits::idle_ms`] without a page-cache miss (the launch is done
//! reading), or at [`WindowLimits::cap_ms`]. Pure: events in, a run out; the
//! caller names the files ([`Recorder::finish`] takes the lookup).

use std::collections::{HashMap, HashSet};

use super::profile::{FileIdentity, LaunchRun, RunFile};
use crate::event::Event;
use crate::file::FileId;
use crate::page::PageRange;

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
}

impl Default for WindowLimits {
    fn default() -> Self {
        Self { idle_ms: 500, cap_ms: 10_000, max_files: 4096, max_accesses_per_file: 1 << 16 }
    }
}

#[derive(Debug)]
struct Seen {
    first_ns: u64,
    accesses: Vec<PageRange>,
}

/// Records one launch (see the module docs).
#[derive(Debug)]
pub struct Recorder {
    limits: WindowLimits,
    exec_ns: u64,
    last_io_ns: u64,
    last_ns: u64,
    tree: HashSet<u32>,
    files: HashMap<FileId, Seen>,
    order: Vec<FileId>,
    done: bool,
    /// The pids whose accesses were seen (to name files through them).
    pids: HashMap<FileId, u32>,
}

impl Recorder {
    /// Starts recording the tree of `pid`, which exec'd at `exec_ns`
    /// (monotonic).
    pub fn new(pid: u32, exec_ns: u64, limits: WindowLimits) -> Self {
        Self {
            limits,
            exec_ns,
            last_io_ns: exec_ns,
            last_ns: exec_ns,
            tree: HashSet::from([pid]),
            files: HashMap::new(),
            order: Vec::new(),
            done: false,
            pids: HashMap::new(),
        }
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
            Event::PageMiss { pid, time_ns, .. } if self.tree.contains(pid) => {
                self.last_io_ns = self.last_io_ns.max(*time_ns);
                self.last_ns = self.last_ns.max(*time_ns);
            }
            Event::PageAccess { pid, file, pages, time_ns, .. } if self.tree.contains(pid) => {
                self.last_ns = self.last_ns.max(*time_ns);
                if !self.files.contains_key(file) && self.files.len() < self.limits.max_files {
                    self.files.insert(*file, Seen { first_ns: *time_ns, accesses: Vec::new() });
                    self.order.push(*file);
                    self.pids.insert(*file, *pid);
                }
                if let Some(seen) = self.files.get_mut(file)
                    && seen.accesses.len() < self.limits.max_accesses_per_file
                    && !pages.is_empty()
                {
                    seen.accesses.push(*pages);
                }
            }
            _ => {}
        }
        self.tick(self.last_ns)
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
        let window_ms = self.last_ns.saturating_sub(self.exec_ns) as f64 / 1e6;
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
            });
        }
        LaunchRun { files, window_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::AccessKind;

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
        assert_eq!(run.files[1].first_touch_ms, 3.0);
        assert_eq!(run.window_ms, 6.0);
    }

    #[test]
    fn idle_and_cap_end_the_window() {
        let limits = WindowLimits { idle_ms: 100, cap_ms: 1000, ..WindowLimits::default() };
        let mut r = Recorder::new(1, 0, limits);
        r.on_event(&Event::PageMiss { pid: 1, file: FileId { dev: 1, ino: 1 }, page: 0, time_ns: 50_000_000 });
        assert!(!r.tick(120_000_000));
        assert!(r.tick(151_000_000), "100 ms without a miss");
        let mut r = Recorder::new(1, 0, limits);
        for ms in (0..1000).step_by(50) {
            r.on_event(&Event::PageMiss { pid: 1, file: FileId { dev: 1, ino: 1 }, page: 0, time_ns: ms * 1_000_000 });
        }
        assert!(r.tick(1_000_000_000), "the cap");
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
