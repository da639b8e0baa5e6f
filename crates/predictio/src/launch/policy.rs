//! The `launch` policy: on the exec of a known executable, the page lists of
//! its profile go to the executor at once; later phases go when their
//! trigger file is first touched.
//!
//! The policy is handed [`Replay`]s — profiles already walked into page lists
//! over descriptors its owner opened and checked ([`Replay::open`], done by
//! `predictio run` or the daemon off the event path) — through a shared
//! [`ReplayBook`]. On the event path it only looks up and emits: no I/O, no
//! blocking beyond a short uncontended lock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::model::WalkLimits;
use super::profile::{Freshness, Profile};
use crate::event::{Event, EventKind, EventKinds};
use crate::file::{FileId, FileRef};
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// One file's share of a replay.
#[derive(Clone, Debug)]
pub struct ReplayFile {
    /// The held descriptor.
    pub file: FileRef,
    /// Pages, sorted.
    pub ranges: Vec<PageRange>,
}

/// A profile ready to replay: descriptors opened, files checked.
#[derive(Clone, Debug, Default)]
pub struct Replay {
    /// Files to fetch at exec, in order of expected first use.
    pub at_exec: Vec<ReplayFile>,
    /// Files to fetch when a trigger file is first touched.
    pub on_trigger: Vec<(FileId, Vec<ReplayFile>)>,
    /// Files of the profile left out because they changed since learned.
    pub changed: Vec<String>,
    /// Files of the profile left out because they are gone or unreadable.
    pub missing: Vec<String>,
}

impl Replay {
    /// Walks `profile` and opens its files, leaving out (and listing) every
    /// file whose inode, size or mtime changed — a stale profile never
    /// replays pages of a different file. Does I/O (open, fstat): call it off
    /// the event path.
    pub fn open(profile: &Profile, walk: &WalkLimits) -> Replay {
        let plan = profile.plan(walk);
        let mut replay = Replay::default();
        let open_one = |index: usize, ranges: Vec<PageRange>, replay: &mut Replay| -> Option<ReplayFile> {
            let identity = &profile.files[index].identity;
            let file = match FileRef::open(&identity.path) {
                Ok(file) => file,
                Err(_) => {
                    replay.missing.push(identity.path.clone());
                    return None;
                }
            };
            match file.file().metadata().map(|m| identity.compare(&m)) {
                Ok(Freshness::Fresh) => Some(ReplayFile { file, ranges }),
                Ok(_) => {
                    replay.changed.push(identity.path.clone());
                    None
                }
                Err(_) => {
                    replay.missing.push(identity.path.clone());
                    None
                }
            }
        };
        for (index, ranges) in plan.at_exec {
            if let Some(f) = open_one(index, ranges, &mut replay) {
                replay.at_exec.push(f);
            }
        }
        for (on, files) in plan.on_trigger {
            let trigger = profile.files[on].identity.id();
            let opened: Vec<ReplayFile> = files.into_iter().filter_map(|(i, r)| open_one(i, r, &mut replay)).collect();
            if !opened.is_empty() {
                replay.on_trigger.push((trigger, opened));
            }
        }
        replay
    }

    /// Pages the replay would request.
    pub fn pages(&self) -> u64 {
        let sum = |v: &[ReplayFile]| v.iter().flat_map(|f| &f.ranges).map(PageRange::len).sum::<u64>();
        sum(&self.at_exec) + self.on_trigger.iter().map(|t| sum(&t.1)).sum::<u64>()
    }
}

/// Replays by executable, shared between the policy and whoever prepares
/// them.
#[derive(Clone, Debug, Default)]
pub struct ReplayBook {
    inner: Arc<Mutex<HashMap<FileId, Arc<Replay>>>>,
}

/// Replays a book holds at most; inserting beyond drops an arbitrary one.
pub const MAX_REPLAYS: usize = 256;

impl ReplayBook {
    /// Sets the replay of executable `exe`.
    pub fn insert(&self, exe: FileId, replay: Replay) {
        if let Ok(mut map) = self.inner.lock() {
            if map.len() >= MAX_REPLAYS
                && !map.contains_key(&exe)
                && let Some(victim) = map.keys().next().copied()
            {
                map.remove(&victim);
            }
            map.insert(exe, Arc::new(replay));
        }
    }

    /// Forgets the replay of `exe`.
    pub fn remove(&self, exe: FileId) {
        if let Ok(mut map) = self.inner.lock() {
            map.remove(&exe);
        }
    }

    /// The replay of `exe`.
    pub fn get(&self, exe: FileId) -> Option<Arc<Replay>> {
        self.inner.lock().ok()?.get(&exe).cloned()
    }

    /// Executables with a replay.
    pub fn len(&self) -> usize {
        self.inner.lock().map_or(0, |m| m.len())
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
/// A second exec of the same executable within this long replays nothing
/// (the first replay's pages are resident or in flight).
const REPEAT_NS: u64 = 1_000_000_000;

/// The `launch` policy (see the module docs).
#[derive(Debug, Default)]
pub struct LaunchPolicy {
    book: ReplayBook,
    pending: HashMap<FileId, (u64, Arc<Replay>)>,
    last_exec: HashMap<FileId, u64>,
    replays: u64,
}

impl LaunchPolicy {
    /// A policy replaying from `book`.
    pub fn new(book: ReplayBook) -> Self {
        Self { book, ..Self::default() }
    }

    /// Replays started.
    pub fn replays(&self) -> u64 {
        self.replays
    }

    fn emit(files: &[ReplayFile], ctx: &mut PolicyContext<'_>) {
        for f in files {
            ctx.request_file(&f.file, f.ranges.clone(), Urgency::Imminent);
        }
    }
}

impl Policy for LaunchPolicy {
    fn name(&self) -> &str {
        "launch"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::Exec, EventKind::PageAccess])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        match event {
            Event::Exec { exe, time_ns, .. } => {
                let Some(replay) = self.book.get(*exe) else { return };
                if self.last_exec.get(exe).is_some_and(|t| time_ns.saturating_sub(*t) < REPEAT_NS) {
                    return;
                }
                if self.last_exec.len() >= MAX_PENDING {
                    self.last_exec.clear();
                }
                self.last_exec.insert(*exe, *time_ns);
                self.replays += 1;
                Self::emit(&replay.at_exec, ctx);
                self.pending.retain(|_, (at, _)| time_ns.saturating_sub(*at) < TRIGGER_TTL_NS);
                for (trigger, _) in &replay.on_trigger {
                    if self.pending.len() < MAX_PENDING {
                        self.pending.insert(*trigger, (*time_ns, Arc::clone(&replay)));
                    }
                }
            }
            Event::PageAccess { file, .. } if !self.pending.is_empty() => {
                if let Some((_, replay)) = self.pending.remove(file)
                    && let Some((_, files)) = replay.on_trigger.iter().find(|(t, _)| t == file)
                {
                    Self::emit(files, ctx);
                }
            }
            _ => {}
        }
    }
}
