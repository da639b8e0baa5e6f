//! `btree`: range scans over a B-tree, seen as a traversal (seed 000 §4.2).
//!
//! B-tree neighbours in key order are far apart on disk, so offset readahead
//! cannot help a range scan over a fragmented table. An adapter (a SQLite VFS
//! shim, an LMDB wrapper, the daemon parsing interior pages it saw read) tells
//! us where the traversal is with [`Event::TreeChildEnter`]: this interior
//! page, its children in key order, the child being descended into. This
//! policy asks for a bounded window of the children *after* that one, as
//! [`Urgency::Imminent`] requests. It is engine independent: only the page
//! parser ([`crate::btree`]) differs between engines.
//!
//! # Behaviour
//!
//! - **A point lookup costs nothing.** The first enter into a parent starts a
//!   scan with a window of [`BtreeConfig::initial_window`] children (0 by
//!   default: nothing is requested until the traversal shows it is a scan).
//! - **A short scan costs nothing either.** While the window is 0, a scan
//!   must continue [`BtreeConfig::confirm_after`] times (once by default:
//!   it has read its third child) before anything is requested, so a scan
//!   that ends on its second leaf wastes nothing.
//! - **A scan grows its window.** An enter into the same parent at a later
//!   position, no further ahead than what was already predicted plus one,
//!   continues the scan: the window slides along with it, and each time the
//!   traversal has advanced by the previous window (readahead's async mark)
//!   it is multiplied by [`BtreeConfig::growth_factor`] (0 becomes the
//!   factor), up to [`BtreeConfig::max_window`]. With the defaults the window
//!   after `n` children of a scan is about `n` (2, 4, 8, … 64), so a scan
//!   that stops wastes at most about as many pages as it read. Entering the
//!   first child of a parent whose preceding sibling the scan just finished
//!   (the grandparent's enter came first, as every descent does) carries the
//!   window over; the grandparent's own forward step is a continuation at
//!   its level too, so upcoming interior pages are fetched as well.
//! - **Anything else starts a new scan** (a backward or far jump, a parent
//!   whose child list changed length) with the initial window.
//! - **Recent scans size the first window.** Per file, the lengths (in
//!   children, over every parent a scan carried over to) of the last
//!   [`BtreeConfig::history`] finished scans of the lowest level are kept.
//!   Once one is known, a new scan opens with a window of the shortest of
//!   them minus one, at its first child: a workload of 100-row
//!   range scans gets the rest of each scan's leaves in parallel instead of
//!   reading three leaves one by one first, while a single point lookup
//!   among the recent scans (length 1) closes it again. Such a scan asks for
//!   nothing past the longest recent one until it goes beyond it, so a scan
//!   of a workload whose scans have the same length wastes nothing. Once
//!   beyond, it asks for at most [`BtreeConfig::growth_factor`] times the
//!   children it has read past that length (2, 4, 8, … up to its window):
//!   scans of nearly the same length (a 1,000-row scan covers 105 to 130
//!   SQLite leaves, as leaves are filled unevenly) end a few children past
//!   the longest recent one, and a whole window there was all waste
//!   (~12 % of the pages a cold 1,000-row pass issued).
//! - **Requests come in batches.** The window is topped up once a quarter
//!   of it has been used ([`BtreeConfig::top_up_divisor`]), not at every
//!   child: one request, one executor wake-up, per quarter window. (Topping
//!   up at half the window, readahead's async mark, let the device's queue
//!   fall to half the window between top-ups, and a scan reading faster
//!   than the device waited on each batch: ~30 % more time stalled in a
//!   10,000-row SQLite scan.) The lowest level is told apart
//!   from the ones above it by the descents: a parent one of whose children
//!   was entered as a parent itself is marked upper, and its scans neither
//!   count nor get a learned window.
//! - **Past the end of a parent**, when the window reaches beyond its last
//!   child, the parent's next sibling (an interior page, known from the
//!   grandparent's enter) is requested too, so the next descent finds it
//!   resident.
//! - **The levels above the leaves are fetched whole, once, when it pays.**
//!   A parent seen to lie above the lowest level (one of its children was
//!   entered as a parent itself) has interior pages for children, and every
//!   lookup through it reads one of them. Once lookups through it have been
//!   seen often enough, all its children are requested at once (once per
//!   parent, at most [`BtreeConfig::upper_pages`] pages per file): for
//!   SQLite's 1 M-row table that is the ~230 pages (~1 MiB) below the root,
//!   after which a point lookup or a scan reads one page fewer from the
//!   device. "Often enough" is a rent-or-buy rule: a whole level of `len`
//!   pages read in parallel costs about as much device time as `len /`
//!   [`BtreeConfig::upper_payback`] lookups' single reads one after another,
//!   and it is fetched once that many lookups (the rent paid so far, and
//!   the best guess of how many are still to come) went through the parent.
//!   A few long scans never pay for it (their 230 extra reads would sit in
//!   the device queue ahead of the scan's own leaves); many lookups do. A
//!   single lookup costs nothing: the first descent only marks the level.
//! - **Duplicates are suppressed**: per parent, children already requested
//!   are not requested again while the scan goes on; across parents and
//!   scans, a bounded recent set of `(file, page)` requested lately
//!   ([`BtreeConfig::recent_capacity`], first in first out) drops repeats.
//!
//! # Units
//!
//! `TreeChildEnter` carries no page size, so its child "pages" are 4 KiB page
//! indices ([`crate::page::PAGE_SIZE`]): adapters convert a database page
//! number to the index of the first 4 KiB page it occupies
//! ([`DbPageLayout::first_page`](crate::btree::DbPageLayout::first_page)).
//! A database page larger than
//! 4 KiB spans several: the event's `child_pages` says how many, and each
//! child is requested whole.
//!
//! # Bounds
//!
//! Memory is bounded whatever the input: at most [`BtreeConfig::max_files`]
//! files and [`BtreeConfig::max_parents_per_file`] parents per file are
//! tracked (least recently used evicted first), each in a few words (no child
//! list is kept: every event carries its own), and the recent set holds at
//! most [`BtreeConfig::recent_capacity`] pages. One event requests at most
//! `max_window + 1` children, plus, once per parent above the lowest level,
//! its children within [`BtreeConfig::upper_pages`] per file. Pure logic: no I/O, no syscalls, no blocking.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::event::{Event, EventKind, EventKinds};
use crate::file::FileId;
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// Parameters of the [`BtreePolicy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BtreeConfig {
    /// Children requested ahead on the first enter of a scan. 0 (the
    /// default): a point lookup requests nothing.
    pub initial_window: u32,
    /// Continuations a scan must show before a window of 0 opens (1: the
    /// first request is made when the scan enters its third child). 0 opens
    /// it at the second child.
    pub confirm_after: u32,
    /// Factor the window grows by on each step of a continuing scan (a
    /// window of 0 becomes this). At least 2 is sensible; 1 never grows.
    pub growth_factor: u32,
    /// Most children requested ahead of the traversal (64).
    pub max_window: u32,
    /// Pages in the recent set that suppresses duplicate requests (4,096).
    pub recent_capacity: usize,
    /// Files tracked at once (64).
    pub max_files: usize,
    /// Parents tracked per file (16): enough for the levels of a few
    /// concurrent cursors.
    pub max_parents_per_file: usize,
    /// Finished scans per file whose lengths size the first window of the
    /// next one (4). Once one is known, a new scan of the lowest level
    /// opens with a window of the shortest of the last (up to) this many
    /// minus the child it enters, so that scans as long as the recent ones
    /// are fetched in parallel from their first leaf, while a point lookup
    /// among them (length 1) keeps the next first window at 0. (Waiting for
    /// four before using any left a process's second to fourth scans on the
    /// ramp: per-query timing of cold 1,000-row passes, 15 interleaved
    /// rounds, median 29 ms for those three queries against 20 ms learning
    /// from the first.) 0 turns this off.
    pub history: usize,
    /// Most pages per file requested as whole levels above the lowest one
    /// (1,024 = 4 MiB of 4 KiB pages): when a parent known to lie above the
    /// lowest level has been entered often enough
    /// ([`BtreeConfig::upper_payback`]), all its children (interior pages
    /// every lookup passes through) are requested once. 0 turns this off.
    pub upper_pages: u32,
    /// When a level above the lowest one pays to fetch whole (8): once the
    /// parent has been entered at least `len / upper_payback` times (and at
    /// least twice), `len` being its number of children. A random 4 KiB read
    /// alone takes several times as long as one of many issued together,
    /// so a level of `len` pages fetched at once costs about what `len / 8`
    /// single reads do. 0: from the second enter, whatever `len`.
    pub upper_payback: u32,
    /// The window is topped up once `1 / top_up_divisor` of it has been
    /// used (4: a quarter; 2 would be readahead's async mark; at least 1).
    pub top_up_divisor: u32,
}

impl Default for BtreeConfig {
    fn default() -> Self {
        Self {
            initial_window: 0,
            confirm_after: 1,
            growth_factor: 2,
            max_window: 64,
            recent_capacity: 4096,
            max_files: 64,
            max_parents_per_file: 16,
            history: 4,
            upper_pages: 1024,
            upper_payback: 8,
            top_up_divisor: 4,
        }
    }
}

/// Counters of the [`BtreePolicy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BtreeStats {
    /// `TreeChildEnter` events handled.
    pub events: u64,
    /// Events ignored: no descriptor held for the file.
    pub unknown_file: u64,
    /// Events ignored: no children, or a position outside them.
    pub malformed: u64,
    /// Events that started a new scan.
    pub scans_started: u64,
    /// Events that continued a scan (window grown).
    pub continued: u64,
    /// Requests emitted.
    pub requests: u64,
    /// Children (and next siblings) requested.
    pub requested_children: u64,
    /// Children not requested because they were requested lately.
    pub suppressed_duplicates: u64,
    /// Scans whose first window came from the lengths of recent scans.
    pub learned_windows: u64,
    /// Parents above the lowest level whose children were requested whole.
    pub upper_levels: u64,
}

/// How an enter relates to what the policy saw before.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// The scan goes on: the window it had, and the position at which
    /// that window grows.
    Continue {
        /// Window so far.
        window: u32,
        /// Grow once the traversal reaches this position.
        grow_at: u32,
        /// Continuations of this scan before this one.
        steps: u32,
    },
    /// The same child entered again.
    Repeat(ParentState),
    /// A new scan.
    Start,
}

/// What the policy remembers of one parent (interior page) of one file.
#[derive(Clone, Copy, Debug)]
struct ParentState {
    parent: u64,
    /// Number of children when last seen.
    len: u32,
    /// Position last entered.
    position: u32,
    /// Current window, in children.
    window: u32,
    /// The window grows when the traversal reaches this position: once it
    /// has advanced by the previous window (readahead's async mark).
    grow_at: u32,
    /// Continuations this scan has shown (saturating).
    steps: u32,
    /// Children below this index have been requested (or passed) in this scan.
    issued_until: u32,
    /// The child last entered (`children[position]`).
    entered: u64,
    /// The child entered before it, when the last step continued a scan.
    prev_entered: Option<u64>,
    /// `children[position + 1]`, if any.
    next_sibling: Option<u64>,
    /// The parent we descended from into this one, when known.
    grandparent: Option<u64>,
    /// A descent from this parent was seen continuing into an interior page
    /// (one of its children was a parent itself): not the lowest level, so
    /// its scans are not leaf scans.
    upper: bool,
    /// All its children were requested (an upper parent, fetched whole).
    fetched_whole: bool,
    /// Enters into this parent seen (saturating): the lookups through it.
    enters: u32,
    /// Logical time of last use, for eviction.
    last_used: u64,
}

/// The scan of the lowest level going on in a file: where it is, and how
/// many children it has entered (over every parent it carried over to).
#[derive(Clone, Copy, Debug)]
struct Run {
    parent: u64,
    children: u32,
    /// Children the recent scans suggest this one reads (0: no guess):
    /// nothing past them is requested until the scan goes beyond.
    expect: u32,
}

/// The parents tracked for one file.
#[derive(Debug, Default)]
struct FileState {
    parents: Vec<ParentState>,
    last_used: u64,
    /// The scan going on.
    run: Option<Run>,
    /// Lengths (children) of the last finished scans, oldest first.
    lengths: VecDeque<u32>,
    /// Pages requested as whole upper levels (bounded by
    /// [`BtreeConfig::upper_pages`]).
    upper_requested: u32,
}

impl FileState {
    /// Whether `parent` is known to lie above the lowest level.
    fn is_upper(&self, parent: u64) -> bool {
        self.parents.iter().any(|p| p.parent == parent && p.upper)
    }

    /// Ends the scan going on, remembering its length if it was a scan of
    /// the lowest level; keeps the last `history` lengths.
    fn finish_run(&mut self, history: usize) {
        if let Some(run) = self.run.take()
            && history > 0
            && !self.is_upper(run.parent)
        {
            if self.lengths.len() >= history {
                self.lengths.pop_front();
            }
            self.lengths.push_back(run.children);
        }
    }

    /// The lengths the recent scans suggest for a new one: the shortest
    /// and the longest of the last `history`; `None` until one is known.
    fn learned_lengths(&self, history: usize) -> Option<(u32, u32)> {
        if history == 0 {
            return None;
        }
        Some((*self.lengths.iter().min()?, *self.lengths.iter().max()?))
    }

    /// Children the scan going on through `parent` is still expected to
    /// read after this one, while it has not gone past what was expected.
    fn expected_remaining(&self, parent: u64) -> Option<u32> {
        let run = self.run.filter(|r| r.parent == parent && r.expect > 0 && r.children <= r.expect)?;
        Some(run.expect - run.children)
    }

    /// Children the scan going on through `parent` has read beyond what the
    /// recent scans suggested, once it has gone past them.
    fn beyond_expected(&self, parent: u64) -> Option<u32> {
        let run = self.run.filter(|r| r.parent == parent && r.expect > 0 && r.children > r.expect)?;
        Some(run.children - run.expect)
    }
}

/// A bounded first-in-first-out set of `(file, page)` recently requested.
#[derive(Debug)]
struct RecentSet {
    capacity: usize,
    order: VecDeque<(FileId, u64)>,
    members: HashSet<(FileId, u64)>,
}

impl RecentSet {
    fn new(capacity: usize) -> Self {
        Self { capacity, order: VecDeque::new(), members: HashSet::new() }
    }

    /// Inserts `key`; false when it was already there.
    fn insert(&mut self, key: (FileId, u64)) -> bool {
        if self.capacity == 0 {
            return true;
        }
        if self.members.contains(&key) {
            return false;
        }
        if self.order.len() >= self.capacity
            && let Some(old) = self.order.pop_front()
        {
            self.members.remove(&old);
        }
        self.order.push_back(key);
        self.members.insert(key);
        true
    }

    fn len(&self) -> usize {
        self.order.len()
    }
}

/// The `btree` policy: a growing window of upcoming B-tree children.
#[derive(Debug)]
pub struct BtreePolicy {
    config: BtreeConfig,
    files: HashMap<FileId, FileState>,
    recent: RecentSet,
    clock: u64,
    stats: BtreeStats,
}

impl Default for BtreePolicy {
    fn default() -> Self {
        Self::new(BtreeConfig::default())
    }
}

impl BtreePolicy {
    /// A policy with these parameters. Zero caps are raised to 1 (a zero
    /// `recent_capacity` disables duplicate suppression across scans).
    pub fn new(config: BtreeConfig) -> Self {
        let config = BtreeConfig {
            growth_factor: config.growth_factor.max(1),
            max_files: config.max_files.max(1),
            max_parents_per_file: config.max_parents_per_file.max(1),
            ..config
        };
        Self {
            recent: RecentSet::new(config.recent_capacity),
            config,
            files: HashMap::new(),
            clock: 0,
            stats: BtreeStats::default(),
        }
    }

    /// The parameters in use.
    pub fn config(&self) -> &BtreeConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> BtreeStats {
        self.stats
    }

    /// Files tracked, parents tracked over all files, pages in the recent set:
    /// what bounds the policy's memory.
    pub fn footprint(&self) -> (usize, usize, usize) {
        let parents = self.files.values().map(|f| f.parents.len()).sum();
        (self.files.len(), parents, self.recent.len())
    }

    /// The window of the scan through `parent` of `file`, if tracked.
    pub fn window(&self, file: FileId, parent: u64) -> Option<u32> {
        let state = self.files.get(&file)?;
        state.parents.iter().find(|p| p.parent == parent).map(|p| p.window)
    }

    fn grow(&self, window: u32) -> u32 {
        let grown =
            if window == 0 { self.config.growth_factor } else { window.saturating_mul(self.config.growth_factor) };
        grown.min(self.config.max_window)
    }

    /// The file's state, creating it (and evicting the least recently used
    /// file beyond the cap).
    fn file_state(&mut self, file: FileId) -> &mut FileState {
        if !self.files.contains_key(&file)
            && self.files.len() >= self.config.max_files
            && let Some(oldest) = self.files.iter().min_by_key(|(_, s)| s.last_used).map(|(id, _)| *id)
        {
            self.files.remove(&oldest);
        }
        let clock = self.clock;
        let state = self.files.entry(file).or_default();
        state.last_used = clock;
        state
    }

    fn handle(
        &mut self,
        file: FileId,
        parent: u64,
        children: &[u64],
        position: u32,
        child_pages: u32,
        ctx: &mut PolicyContext<'_>,
    ) {
        let span = u64::from(child_pages.max(1));
        self.stats.events += 1;
        if ctx.file(file).is_none() {
            self.stats.unknown_file += 1;
            return;
        }
        let Ok(len) = u32::try_from(children.len()) else {
            self.stats.malformed += 1;
            return;
        };
        if len == 0 || position >= len {
            self.stats.malformed += 1;
            return;
        }
        self.clock += 1;
        let clock = self.clock;
        let config = self.config;
        let pos = position as usize;
        let entered = children[pos];
        let next_sibling = children.get(pos + 1).copied();

        // Decide: continue a scan (and from which window), repeat, or start one.
        let state = self.file_state(file);
        let index = state.parents.iter().position(|p| p.parent == parent);
        let old = index.map(|i| state.parents[i]);
        let (step, grandparent) = match old {
            Some(p) if p.len == len && position > p.position && position - p.position <= p.window.saturating_add(1) => {
                (Step::Continue { window: p.window, grow_at: p.grow_at, steps: p.steps }, p.grandparent)
            }
            Some(p) if p.len == len && position == p.position => (Step::Repeat(p), p.grandparent),
            Some(p) => (Step::Start, p.grandparent),
            None => {
                // A descent: the grandparent's enter into `parent` came first.
                // If the grandparent stepped forward from a sibling whose
                // scan reached its end, this is the same scan moving on.
                let gp = state.parents.iter().filter(|g| g.entered == parent).max_by_key(|g| g.last_used).copied();
                let carried = gp.and_then(|g| {
                    let prev = g.prev_entered?;
                    let sibling = state.parents.iter().find(|s| s.parent == prev)?;
                    let finished = sibling.position.saturating_add(2) >= sibling.len;
                    let to_grow = sibling.grow_at.saturating_sub(sibling.position).max(1);
                    (finished && position <= 1).then_some(Step::Continue {
                        window: sibling.window,
                        grow_at: position.saturating_add(to_grow),
                        steps: sibling.steps,
                    })
                });
                (carried.unwrap_or(Step::Start), gp.map(|g| g.parent))
            }
        };
        // The grandparent's child is this parent: the grandparent is above
        // the lowest level (and a scan just started there was no leaf scan).
        if old.is_none()
            && let Some(gp) = grandparent
            && let Some(g) = state.parents.iter_mut().find(|g| g.parent == gp)
        {
            g.upper = true;
        }
        let upper = old.is_some_and(|p| p.upper);
        // The lowest level's scan: a new one ends the one going on.
        let mut learned_length = None;
        match step {
            Step::Continue { .. } if !upper => {
                let advanced = old.map_or(1, |p| position.saturating_sub(p.position).max(1));
                match state.run.as_mut() {
                    Some(run) => {
                        run.parent = parent;
                        run.children = run.children.saturating_add(advanced);
                    }
                    None => state.run = Some(Run { parent, children: 1 + advanced, expect: 0 }),
                }
            }
            Step::Start if !upper => {
                state.finish_run(config.history);
                learned_length = state.learned_lengths(config.history);
                state.run = Some(Run { parent, children: 1, expect: learned_length.map_or(0, |(_, longest)| longest) });
            }
            _ => {}
        }
        let learned = learned_length.map(|(shortest, _)| shortest.saturating_sub(1));
        let remaining = if upper { None } else { state.expected_remaining(parent) };
        let beyond = if upper { None } else { state.beyond_expected(parent) };
        let (window, grow_at, issued_from, prev_entered, steps) = match step {
            Step::Continue { window, grow_at, steps } => {
                self.stats.continued += 1;
                let steps = steps.saturating_add(1);
                let issued = old.map_or(position + 1, |p| p.issued_until.max(position + 1));
                let (window, grow_at) = if window == 0 && steps <= config.confirm_after {
                    // Not yet a scan worth a request: wait for the next step.
                    (0, position.saturating_add(1))
                } else if position >= grow_at {
                    (self.grow(window), position.saturating_add(window.max(1)))
                } else {
                    (window, grow_at)
                };
                (window, grow_at, issued, old.map(|p| p.entered), steps)
            }
            Step::Repeat(p) => (p.window, p.grow_at, p.issued_until.max(position + 1), p.prev_entered, p.steps),
            Step::Start => {
                self.stats.scans_started += 1;
                let initial = config.initial_window.max(learned.unwrap_or(0)).min(config.max_window);
                if initial > config.initial_window {
                    self.stats.learned_windows += 1;
                }
                // Grow once the scan has gone through this window.
                (initial, position.saturating_add(initial.max(1)), position + 1, None, 0)
            }
        };

        // What to request: children[issued_from .. position + 1 + window],
        // no further than a scan as long as the recent ones would read.
        let ahead = match (remaining, beyond) {
            (Some(remaining), _) => window.min(remaining),
            (None, Some(beyond)) => window.min(beyond.saturating_mul(config.growth_factor)),
            (None, None) => window,
        };
        let mut want_end = (position as u64 + 1 + ahead as u64).min(len as u64) as u32;
        // Top up once a quarter of the lookahead is used: one request per
        // quarter window rather than one per child, each waking the
        // executor and costing a few syscalls, while the device's queue
        // stays at least three quarters full.
        let lookahead = issued_from.saturating_sub(position + 1);
        let used = ahead.saturating_sub(lookahead);
        let deferred = lookahead > 0 && used.saturating_mul(config.top_up_divisor.max(1)) <= ahead;
        if deferred {
            want_end = want_end.min(issued_from);
        }
        let from = issued_from.min(want_end);
        let mut ranges = Vec::new();
        for &child in &children[from as usize..want_end as usize] {
            self.push_child(file, child, span, &mut ranges);
        }
        let issued_until = want_end.max(issued_from.min(len));

        // The window runs past this parent's last child: fetch the next
        // sibling parent too, so the next descent finds it resident.
        let overflow = !deferred && position as u64 + 1 + ahead as u64 > len as u64;
        if overflow
            && ahead > 0
            && let Some(gp) = grandparent
            && let Some(sibling) = self
                .files
                .get(&file)
                .and_then(|s| s.parents.iter().find(|g| g.parent == gp && g.entered == parent))
                .and_then(|g| g.next_sibling)
        {
            self.push_child(file, sibling, span, &mut ranges);
        }

        // A parent above the lowest level, entered again: its children are
        // the interior pages every lookup goes through; fetch them whole,
        // once, within the file's budget.
        let mut fetched_whole = old.is_some_and(|p| p.fetched_whole);
        let enters = old.map_or(1, |p| p.enters.saturating_add(1));
        let pays = config.upper_payback == 0
            || u64::from(enters).saturating_mul(u64::from(config.upper_payback)) >= u64::from(len);
        if upper && !fetched_whole && enters >= 2 && pays {
            // The budget is in 4 KiB pages: a level of large database
            // pages spends `span` of it per child.
            let cost = u64::from(len).saturating_mul(span);
            let budget = self.files.get(&file).map_or(0, |s| config.upper_pages.saturating_sub(s.upper_requested));
            if cost <= u64::from(budget) {
                for &child in children {
                    self.push_child(file, child, span, &mut ranges);
                }
                fetched_whole = true;
                self.stats.upper_levels += 1;
                let state = self.file_state(file);
                state.upper_requested = state.upper_requested.saturating_add(u32::try_from(cost).unwrap_or(u32::MAX));
            }
        }

        let new_state = ParentState {
            parent,
            len,
            position,
            window,
            grow_at,
            steps,
            issued_until,
            entered,
            prev_entered,
            next_sibling,
            grandparent,
            upper,
            fetched_whole,
            enters,
            last_used: clock,
        };
        let cap = config.max_parents_per_file;
        let state = self.file_state(file);
        match index {
            Some(i) => state.parents[i] = new_state,
            None => {
                if state.parents.len() >= cap
                    && let Some(oldest) =
                        state.parents.iter().enumerate().min_by_key(|(_, p)| p.last_used).map(|(i, _)| i)
                {
                    state.parents.swap_remove(oldest);
                }
                state.parents.push(new_state);
            }
        }

        if !ranges.is_empty() {
            self.stats.requested_children += ranges.len() as u64;
            if ctx.request(file, ranges, Urgency::Imminent) {
                self.stats.requests += 1;
            }
        }
    }

    /// Adds `child` (`span` 4 KiB pages) to `ranges` unless it was
    /// requested lately.
    fn push_child(&mut self, file: FileId, child: u64, span: u64, ranges: &mut Vec<PageRange>) {
        if self.recent.insert((file, child)) {
            ranges.push(PageRange::new(child, child.saturating_add(span)));
        } else {
            self.stats.suppressed_duplicates += 1;
        }
    }
}

impl Policy for BtreePolicy {
    fn name(&self) -> &str {
        "btree"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::TreeChildEnter])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        if let Event::TreeChildEnter { file, parent, children, position, child_pages } = event {
            self.handle(*file, *parent, children, *position, *child_pages, ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::file::FileRef;
    use crate::policy::test_support::HeldFiles;
    use crate::policy::{FileTable, PolicyId};
    use crate::request::Request;
    use crate::testing::Rng;

    /// A three-level tree (root, interiors, leaves) with pages scattered
    /// over the file, as after random-order inserts.
    struct Tree {
        root: u64,
        interiors: Vec<(u64, Arc<[u64]>)>,
    }

    impl Tree {
        fn new(interiors: usize, fanout: usize, seed: u64) -> Self {
            let mut rng = Rng(seed);
            let total = 1 + interiors * (1 + fanout);
            let mut pages: Vec<u64> = (1..=total as u64).collect();
            for i in (1..pages.len()).rev() {
                pages.swap(i, rng.below(i + 1));
            }
            let root = pages[0];
            let mut rest = pages[1..].chunks(1 + fanout);
            let interiors =
                (0..interiors).filter_map(|_| rest.next()).map(|c| (c[0], Arc::from(&c[1..]))).collect::<Vec<_>>();
            Self { root, interiors }
        }

        fn root_children(&self) -> Arc<[u64]> {
            self.interiors.iter().map(|(page, _)| *page).collect()
        }

        fn fanout(&self) -> usize {
            self.interiors[0].1.len()
        }

        fn leaf(&self, index: usize) -> u64 {
            self.interiors[index / self.fanout()].1[index % self.fanout()]
        }

        /// The enters of a scan over leaves `first..first + count`, and
        /// which leaf (if any) each enter reads.
        fn scan(&self, file: FileId, first: usize, count: usize) -> Vec<(Event, Option<u64>)> {
            let fanout = self.fanout();
            let root_children = self.root_children();
            let mut events = Vec::new();
            let mut current_interior = usize::MAX;
            for leaf in first..(first + count).min(self.interiors.len() * fanout) {
                let (k, j) = (leaf / fanout, leaf % fanout);
                if k != current_interior {
                    current_interior = k;
                    let enter = Event::TreeChildEnter {
                        file,
                        parent: self.root,
                        children: root_children.clone(),
                        position: k as u32,
                        child_pages: 1,
                    };
                    events.push((enter, None));
                }
                let (interior, children) = &self.interiors[k];
                let enter = Event::TreeChildEnter {
                    file,
                    parent: *interior,
                    children: children.clone(),
                    position: j as u32,
                    child_pages: 1,
                };
                events.push((enter, Some(children[j])));
            }
            events
        }
    }

    struct Harness {
        held: HeldFiles,
        policy: BtreePolicy,
    }

    impl Harness {
        fn new(config: BtreeConfig) -> Self {
            Self { held: HeldFiles::own_exe(), policy: BtreePolicy::new(config) }
        }

        fn id(&self) -> FileId {
            self.held.id()
        }

        fn send(&mut self, event: &Event) -> Vec<Request> {
            self.held.feed(&mut self.policy, event, PolicyId(1))
        }

        /// Runs a traversal; returns (pages requested, leaves read that
        /// had been requested earlier, leaves read).
        fn run(&mut self, events: &[(Event, Option<u64>)]) -> (Vec<u64>, usize, usize) {
            let mut requested = Vec::new();
            let mut seen = HashSet::new();
            let (mut covered, mut read) = (0, 0);
            for (event, leaf) in events {
                if let Some(leaf) = leaf {
                    read += 1;
                    covered += usize::from(seen.contains(leaf));
                }
                for request in self.send(event) {
                    assert_eq!(request.urgency, Urgency::Imminent);
                    for range in &request.ranges {
                        assert_eq!(range.len(), 1);
                        requested.push(range.start);
                        seen.insert(range.start);
                    }
                }
            }
            (requested, covered, read)
        }
    }

    #[test]
    fn full_scan_is_covered_without_repeats() {
        let tree = Tree::new(20, 100, 1);
        let mut h = Harness::new(BtreeConfig::default());
        let events = tree.scan(h.id(), 0, 2000);
        let (requested, covered, read) = h.run(&events);
        assert_eq!(read, 2000);
        let unique: HashSet<u64> = requested.iter().copied().collect();
        assert_eq!(unique.len(), requested.len(), "a page requested twice");
        // Only the first leaves of the scan, and the first leaf of each
        // interior (the descent that reveals its children), are demand reads.
        assert!(covered >= read - 2 - 20, "{covered} of {read} leaves prefetched");
        let leaves: HashSet<u64> = tree.interiors.iter().flat_map(|(_, c)| c.iter().copied()).collect();
        let interiors: HashSet<u64> = tree.interiors.iter().map(|(p, _)| *p).collect();
        assert!(requested.iter().all(|p| leaves.contains(p) || interiors.contains(p)));
        // The tail of the last interior is not overshot: nothing requested beyond the tree.
        assert!(requested.len() <= leaves.len() + interiors.len());
        assert_eq!(h.policy.window(h.id(), tree.interiors[19].0), Some(64));
        assert!(h.policy.stats().continued > 1900);
    }

    #[test]
    fn window_grows_geometrically_to_the_cap() {
        let tree = Tree::new(1, 200, 2);
        let mut h = Harness::new(BtreeConfig { confirm_after: 0, ..BtreeConfig::default() });
        let events = tree.scan(h.id(), 0, 200);
        let interior = tree.interiors[0].0;
        let mut windows = Vec::new();
        for (event, _) in &events {
            h.send(event);
            if let Some(w) = h.policy.window(h.id(), interior) {
                windows.push(w);
            }
        }
        // Doubling each time the scan has advanced by the previous window.
        assert_eq!(&windows[..10], &[0, 2, 4, 4, 8, 8, 8, 8, 16, 16]);
        assert_eq!(windows[16], 32);
        assert_eq!(windows[32], 64);
        assert!(windows.iter().all(|&w| w <= 64));
    }

    #[test]
    fn lookahead_never_exceeds_the_window() {
        let tree = Tree::new(4, 300, 3);
        let mut h = Harness::new(BtreeConfig { max_window: 16, ..BtreeConfig::default() });
        let events = tree.scan(h.id(), 0, 1200);
        let position: HashMap<u64, usize> = (0..1200).map(|i| (tree.leaf(i), i)).collect();
        let mut current = 0;
        for (event, leaf) in &events {
            if let Some(leaf) = leaf {
                current = position[leaf];
            }
            for request in h.send(event) {
                for range in &request.ranges {
                    if let Some(&ahead) = position.get(&range.start) {
                        assert!(ahead > current && ahead <= current + 16, "leaf {ahead} requested at {current}");
                    }
                }
            }
        }
    }

    #[test]
    fn point_lookups_request_nothing() {
        let tree = Tree::new(50, 100, 4);
        let mut h = Harness::new(BtreeConfig::default());
        let mut rng = Rng(44);
        let mut requested = 0;
        for _ in 0..2000 {
            let leaf = rng.below(5000);
            let (pages, _, _) = h.run(&tree.scan(h.id(), leaf, 1));
            requested += pages.len();
        }
        // Two random lookups into neighbouring children look like a scan
        // step now and then; that costs a few pages, no more.
        assert!(requested <= 100, "point lookups requested {requested} pages");
        assert!(h.policy.stats().scans_started >= 2000);
    }

    #[test]
    fn point_lookups_with_initial_window_one_waste_one_page_per_level() {
        let tree = Tree::new(50, 100, 5);
        let mut h = Harness::new(BtreeConfig { initial_window: 1, ..BtreeConfig::default() });
        let (pages, _, _) = h.run(&tree.scan(h.id(), 1234, 1));
        assert_eq!(pages.len(), 2, "one child ahead at the root and one at the interior");
    }

    #[test]
    fn the_level_above_the_leaves_is_fetched_whole_once_from_the_second_lookup() {
        let tree = Tree::new(50, 100, 13);
        let mut h = Harness::new(BtreeConfig { upper_payback: 0, ..BtreeConfig::default() });
        // The first lookup only learns that the root lies above the leaves.
        let (first, _, _) = h.run(&tree.scan(h.id(), 1234, 1));
        assert!(first.is_empty(), "{first:?}");
        // The second asks for every child of the root, once.
        let (second, _, _) = h.run(&tree.scan(h.id(), 3210, 1));
        let mut fetched = second.clone();
        fetched.sort_unstable();
        let mut interiors: Vec<u64> = tree.root_children().to_vec();
        interiors.sort_unstable();
        assert_eq!(fetched, interiors);
        assert_eq!(h.policy.stats().upper_levels, 1);
        // Later lookups ask for nothing more.
        for leaf in [17, 2500, 4999] {
            let (more, _, _) = h.run(&tree.scan(h.id(), leaf, 1));
            assert!(more.is_empty(), "{more:?}");
        }
    }

    #[test]
    fn a_whole_level_is_fetched_once_enough_lookups_paid_for_it() {
        // 50 interiors below the root: 50 / 8 → the 7th lookup fetches them.
        let tree = Tree::new(50, 100, 15);
        let mut h = Harness::new(BtreeConfig::default());
        let mut rng = Rng(151);
        for lookup in 1..=6 {
            let (pages, _, _) = h.run(&tree.scan(h.id(), rng.below(5000), 1));
            assert!(pages.is_empty(), "lookup {lookup} requested {pages:?}");
        }
        let (seventh, _, _) = h.run(&tree.scan(h.id(), rng.below(5000), 1));
        let mut fetched = seventh.clone();
        fetched.sort_unstable();
        let mut interiors: Vec<u64> = tree.root_children().to_vec();
        interiors.sort_unstable();
        assert_eq!(fetched, interiors);
        // A long scan crossing interiors enters the root only a few times:
        // it never pays for the whole level.
        let mut scan = Harness::new(BtreeConfig::default());
        scan.run(&tree.scan(scan.id(), 120, 400));
        assert_eq!(scan.policy.stats().upper_levels, 0);
    }

    #[test]
    fn whole_level_fetches_stay_within_the_budget() {
        let tree = Tree::new(50, 100, 14);
        let mut h = Harness::new(BtreeConfig { upper_pages: 49, ..BtreeConfig::default() });
        for leaf in [10, 2000, 4000] {
            let (pages, _, _) = h.run(&tree.scan(h.id(), leaf, 1));
            assert!(pages.is_empty(), "50 children exceed a budget of 49: {pages:?}");
        }
        let mut off = Harness::new(BtreeConfig { upper_pages: 0, ..BtreeConfig::default() });
        for leaf in [10, 2000, 4000] {
            assert!(off.run(&tree.scan(off.id(), leaf, 1)).0.is_empty());
        }
        assert_eq!(off.policy.stats().upper_levels, 0);
    }

    /// A whole level of 16 KiB pages costs four 4 KiB pages a child of the
    /// file's budget.
    #[test]
    fn whole_level_budgets_count_the_pages_children_span() {
        let tree = Tree::new(50, 100, 14);
        for (budget, fetched) in [(199, false), (200, true)] {
            let mut h = Harness::new(BtreeConfig { upper_pages: budget, upper_payback: 0, ..BtreeConfig::default() });
            let mut pages = 0;
            for leaf in [10, 2000, 4000] {
                for (event, _) in tree.scan(h.id(), leaf, 1) {
                    let Event::TreeChildEnter { file, parent, children, position, .. } = event else { continue };
                    let wide = Event::TreeChildEnter { file, parent, children, position, child_pages: 4 };
                    pages += h.send(&wide).iter().flat_map(|r| r.ranges.iter()).map(|r| r.len()).sum::<u64>();
                }
            }
            assert_eq!(h.policy.stats().upper_levels == 1, fetched, "a budget of {budget} pages");
            assert_eq!(pages >= 200, fetched, "{pages} pages requested with a budget of {budget}");
        }
    }

    #[test]
    fn short_scans_waste_little() {
        let tree = Tree::new(50, 100, 6);
        let mut rng = Rng(66);
        for length in [1usize, 2, 3, 5, 10, 30] {
            let mut h = Harness::new(BtreeConfig::default());
            let start = rng.below(4000);
            let events = tree.scan(h.id(), start, length);
            let (requested, _, _) = h.run(&events);
            let read: HashSet<u64> = events.iter().filter_map(|(_, leaf)| *leaf).collect();
            let wasted = requested.iter().filter(|p| !read.contains(p)).count();
            // The last window is the waste: about the scan's length, at most the cap (+ a sibling).
            let bound = (2 * length).min(64) + 1;
            assert!(wasted <= bound, "scan of {length}: {wasted} wasted pages (bound {bound})");
            if length == 1 {
                assert_eq!(requested.len(), 0);
            }
        }
    }

    #[test]
    fn recent_duplicates_are_suppressed() {
        let tree = Tree::new(2, 100, 7);
        let mut h = Harness::new(BtreeConfig::default());
        let events = tree.scan(h.id(), 10, 150);
        let (first, _, _) = h.run(&events);
        assert!(first.len() > 100);
        // The same scan again: nothing it asks for was asked lately. (Its
        // first window comes from the first scan's length, so it also asks
        // for the two leaves the first one read before its window opened.)
        let (second, _, _) = h.run(&events);
        assert!(second.iter().all(|p| !first.contains(p)), "repeated scan requested {second:?} again");
        assert!(second.len() <= 2, "{second:?}");
        assert!(h.policy.stats().suppressed_duplicates as usize >= first.len() - 4);
    }

    #[test]
    fn recent_set_forgets_oldest_first() {
        let tree = Tree::new(2, 100, 8);
        let mut h = Harness::new(BtreeConfig { recent_capacity: 16, history: 0, ..BtreeConfig::default() });
        let events = tree.scan(h.id(), 0, 200);
        let (first, _, _) = h.run(&events);
        let (second, _, _) = h.run(&events);
        assert!(!second.is_empty(), "a small recent set cannot suppress a whole rescan");
        assert!(second.len() <= first.len());
        assert!(h.policy.footprint().2 <= 16);
    }

    #[test]
    fn a_backward_jump_starts_a_new_scan() {
        let tree = Tree::new(1, 100, 9);
        let mut h = Harness::new(BtreeConfig { confirm_after: 0, history: 0, ..BtreeConfig::default() });
        let events = tree.scan(h.id(), 50, 20);
        h.run(&events);
        let interior = tree.interiors[0].0;
        assert_eq!(h.policy.window(h.id(), interior), Some(32));
        h.run(&tree.scan(h.id(), 5, 1));
        assert_eq!(h.policy.window(h.id(), interior), Some(0));
        // A far forward jump is a new scan too.
        h.run(&tree.scan(h.id(), 6, 1));
        assert_eq!(h.policy.window(h.id(), interior), Some(2));
        h.run(&tree.scan(h.id(), 90, 1));
        assert_eq!(h.policy.window(h.id(), interior), Some(0));
    }

    #[test]
    fn the_window_carries_over_to_the_next_sibling() {
        let tree = Tree::new(3, 10, 10);
        let mut h = Harness::new(BtreeConfig { confirm_after: 0, ..BtreeConfig::default() });
        let events = tree.scan(h.id(), 0, 30);
        let (requested, covered, read) = h.run(&events);
        assert_eq!(read, 30);
        // Interior 1 and 2 were requested before they were descended into.
        assert!(requested.contains(&tree.interiors[1].0));
        assert!(requested.contains(&tree.interiors[2].0));
        // Past the first interior, only the first leaf of each is a demand read.
        assert!(covered >= 30 - 2 - 2, "{covered}");
        assert!(h.policy.window(h.id(), tree.interiors[2].0).is_some_and(|w| w >= 16));
    }

    #[test]
    fn malformed_and_unknown_events_are_counted() {
        let mut h = Harness::new(BtreeConfig::default());
        let file = h.id();
        assert!(
            h.send(&Event::TreeChildEnter { file, parent: 1, children: Arc::from([]), position: 0, child_pages: 1 })
                .is_empty()
        );
        assert!(
            h.send(&Event::TreeChildEnter {
                file,
                parent: 1,
                children: Arc::from([2, 3]),
                position: 2,
                child_pages: 1
            })
            .is_empty()
        );
        let stranger = FileId { dev: 77, ino: 77 };
        let event = Event::TreeChildEnter {
            file: stranger,
            parent: 1,
            children: Arc::from([2, 3]),
            position: 0,
            child_pages: 1,
        };
        assert!(h.send(&event).is_empty());
        let stats = h.policy.stats();
        assert_eq!((stats.events, stats.malformed, stats.unknown_file), (3, 2, 1));
        assert_eq!(h.policy.footprint().0, 0, "nothing kept for malformed or unknown events");
        assert!(h.policy.window(stranger, 1).is_none());
        // Extreme page numbers do not overflow.
        let children: Arc<[u64]> = Arc::from([u64::MAX - 1, u64::MAX]);
        for position in [0, 1, 0, 1] {
            h.send(&Event::TreeChildEnter { file, parent: 9, children: children.clone(), position, child_pages: 1 });
        }
    }

    #[test]
    fn memory_is_bounded() {
        let config =
            BtreeConfig { max_files: 4, max_parents_per_file: 3, recent_capacity: 50, ..BtreeConfig::default() };
        let mut policy = BtreePolicy::new(config);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files = FileTable::default();
        let mut ids = Vec::new();
        for i in 0..10 {
            let path = dir.path().join(format!("db{i}"));
            std::fs::write(&path, b"x").expect("write");
            let file = FileRef::open(&path).expect("open");
            ids.push(file.id());
            files.insert(file);
        }
        let mut rng = Rng(12);
        let mut out = Vec::new();
        for _ in 0..20_000 {
            let len = 1 + rng.below(200);
            let children: Arc<[u64]> = (0..len).map(|_| rng.next() % 10_000).collect();
            let event = Event::TreeChildEnter {
                file: ids[rng.below(ids.len())],
                parent: (rng.next() % 40),
                children,
                position: rng.below(len) as u32,
                child_pages: 1 + rng.below(16) as u32,
            };
            policy.on_event(&event, &mut PolicyContext::new(&files, &mut out, PolicyId(1)));
            let (tracked_files, parents, recent) = policy.footprint();
            assert!(tracked_files <= 4 && parents <= 12 && recent <= 50);
            for request in out.drain(..) {
                assert!(request.ranges.len() as u32 <= config.max_window + 1 + config.upper_pages);
            }
        }
    }

    #[test]
    fn a_scan_of_two_children_requests_nothing_and_a_third_opens_the_window() {
        let tree = Tree::new(1, 100, 11);
        let mut h = Harness::new(BtreeConfig::default());
        let (requested, _, read) = h.run(&tree.scan(h.id(), 10, 2));
        assert_eq!((requested.len(), read), (0, 2), "a two-leaf scan wastes nothing");
        let interior = tree.interiors[0].0;
        assert_eq!(h.policy.window(h.id(), interior), Some(0));
        // The same scan going on to its third leaf asks for the next two.
        let third = tree.scan(h.id(), 12, 1);
        let (requested, _, _) = h.run(&third[third.len() - 1..]);
        assert_eq!(requested, vec![tree.leaf(13), tree.leaf(14)]);
        assert_eq!(h.policy.window(h.id(), interior), Some(2));
    }

    #[test]
    fn recent_scan_lengths_open_the_first_window_at_the_first_leaf() {
        let tree = Tree::new(40, 100, 12);
        // The root's level is fetched whole at the second scan, out of the way.
        let mut h = Harness::new(BtreeConfig { upper_payback: 0, ..BtreeConfig::default() });
        // A first scan of 12 leaves, within one interior page: nothing known
        // yet, so it ramps up (its first leaves are demand reads).
        let (_, covered, read) = h.run(&tree.scan(h.id(), 20, 12));
        assert_eq!(h.policy.stats().learned_windows, 0, "nothing learned before a scan finished");
        assert!(covered < read - 2, "{covered} of {read}");
        // The next ones (not neighbours: the root's own steps are no scan):
        // each first leaf asks for the 11 after it, at once. (The second
        // scan also fetches the root's level.)
        let (_, covered, read) = h.run(&tree.scan(h.id(), 320, 12));
        assert_eq!((covered, read), (11, 12), "learned from the one scan before it");
        for (k, first) in [620, 2040].into_iter().enumerate() {
            let events = tree.scan(h.id(), first, 12);
            let (requested, covered, read) = h.run(&events);
            assert_eq!(requested[..11], (first + 1..first + 12).map(|i| tree.leaf(i)).collect::<Vec<_>>());
            assert_eq!((covered, read), (11, 12), "only the first leaf is a demand read");
            // The root (an upper level) asked for no interior page on the
            // way, nor anything past the length the recent scans had.
            assert_eq!(requested.len(), 11, "{requested:?}");
            assert_eq!(h.policy.stats().learned_windows, k as u64 + 2);
        }
        // A scan longer than the recent ones: past what was expected, the
        // window slides and grows again (one leaf waits for it).
        let (requested, covered, read) = h.run(&tree.scan(h.id(), 3040, 50));
        assert_eq!(read, 50);
        assert!(covered >= 50 - 2, "{covered} of {read} leaves prefetched");
        assert!(requested.len() <= 50 + 24, "{} requested", requested.len());
    }

    #[test]
    fn a_point_lookup_among_recent_scans_keeps_the_first_window_closed() {
        let tree = Tree::new(40, 100, 13);
        let mut h = Harness::new(BtreeConfig::default());
        for k in 0..4 {
            h.run(&tree.scan(h.id(), k * 100 + 10, 30));
        }
        h.run(&tree.scan(h.id(), 2050, 1));
        // The shortest recent scan read one leaf: a new scan starts at 0.
        let events = tree.scan(h.id(), 3010, 2);
        let (requested, _, _) = h.run(&events);
        assert!(requested.is_empty(), "{requested:?}");
        // Point lookups only: never anything.
        let mut rng = Rng(13);
        let mut requested = 0;
        for _ in 0..500 {
            requested += h.run(&tree.scan(h.id(), rng.below(4000), 1)).0.len();
        }
        assert!(requested <= 30, "point lookups requested {requested} pages");
    }

    #[test]
    fn a_scan_a_little_longer_than_the_recent_ones_wastes_little_past_them() {
        // Scans of 40 leaves teach the policy to expect 40; one of 44 goes
        // past that and, being nearly over, should not get a whole window
        // beyond it (it did: 64 children, 60 of them never read), while one
        // of 200 still gets its full window back within a few children.
        let tree = Tree::new(40, 400, 15);
        let mut h = Harness::new(BtreeConfig::default());
        for k in 0..4 {
            h.run(&tree.scan(h.id(), k * 1200 + 10, 40));
        }
        let (requested, _, _) = h.run(&tree.scan(h.id(), 9 * 400 + 10, 44));
        let past: Vec<u64> = (9 * 400 + 10 + 44..9 * 400 + 10 + 400).map(|i| tree.leaf(i)).collect();
        let wasted = requested.iter().filter(|p| past.contains(p)).count();
        assert!(wasted <= 8, "{wasted} pages past a 44-leaf scan");
        h.run(&tree.scan(h.id(), 12 * 400 + 10, 2));
        let (_, covered, read) = h.run(&tree.scan(h.id(), 20 * 400 + 10, 200));
        assert!(covered + 12 >= read, "a long scan after short ones: {covered} of {read} leaves prefetched");
    }

    #[test]
    fn learned_windows_are_capped_and_can_be_turned_off() {
        let tree = Tree::new(40, 400, 14);
        for (history, expect) in [(4, 64), (0, 0)] {
            let mut h = Harness::new(BtreeConfig { history, ..BtreeConfig::default() });
            for k in 0..5 {
                h.run(&tree.scan(h.id(), k * 1200 + 10, 200));
            }
            let events = tree.scan(h.id(), 15 * 400 + 10, 200);
            let (requested, _, _) = h.run(&events[..2]);
            assert_eq!(requested.len(), expect, "history {history}");
        }
    }

    #[test]
    fn child_pages_span_large_database_pages() {
        let mut h = Harness::new(BtreeConfig { confirm_after: 0, ..BtreeConfig::default() });
        let file = h.id();
        let children: Arc<[u64]> = Arc::from([0, 4, 8, 12, 16]);
        let enter = |position| Event::TreeChildEnter {
            file,
            parent: 100,
            children: children.clone(),
            position,
            child_pages: 4,
        };
        h.send(&enter(0));
        let requests = h.send(&enter(1));
        assert_eq!(requests[0].ranges, vec![PageRange::new(8, 12), PageRange::new(12, 16)]);
    }

    #[test]
    fn registered_by_name() {
        let policy = crate::policies::by_name("btree").expect("btree registered");
        assert_eq!(policy.name(), "btree");
        assert!(policy.interests().contains(EventKind::TreeChildEnter));
        assert!(crate::policies::NAMES.contains(&"btree"));
    }
}
