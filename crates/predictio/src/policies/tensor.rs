//! `tensor`: a model loader's tensors, fetched in load order a bounded
//! distance ahead of the loader (seed 000 §4.3, issue 6).
//!
//! A loader (through an adapter's `TensorLayout` hint, or a dispatcher that
//! parsed the model header itself and calls [`TensorPolicy::set_layout`])
//! says which byte ranges of a model file hold tensors and in which order it
//! reads them. This policy owns, per model file, that plan and two cursors
//! over it, both measured in *plan bytes* (tensor bytes in load order):
//!
//! - `reached`: how far the loader has got. It moves forward only, on the
//!   loader's own accesses to the file — `PageAccess` of any kind (buffered
//!   reads, mmap faults, pages mapped around a fault) and `StreamRead`
//!   hints (not `PageMiss`: every miss comes with an access, and leaving
//!   misses out lets the pipeline drop the per-page miss events of every
//!   cold read when no other policy wants them) — and on `LayerStart`, which moves it to the first
//!   tensor of that layer when the plan knows layers. An access is placed in
//!   the plan by a binary search over the plan's pieces sorted by file
//!   offset; the furthest (in load order) piece it touches wins. Pages
//!   mapped around a fault count because, once the plan's pages are
//!   resident, fault-around serves an mmap'd loader and no `Fault` is
//!   reported; misses count because a loader's own misses are where it reads
//!   (both may lead the loader by the kernel's fault-around or readahead
//!   window, far less than the window kept here). The daemon filters out its
//!   own accesses, so the policy's prefetches are never taken for progress.
//! - `requested`: everything before it has been requested, or passed over by
//!   the loader. It moves forward only, so no byte of the plan is ever
//!   requested twice (a change of order keeps track of what was).
//!
//! Requests keep `requested − reached` at most [`TensorConfig::ahead_bytes`]
//! per file, and the sum over all files at most
//! [`TensorConfig::max_outstanding_bytes`] (the memory budget: bytes fetched
//! that the loader has not reached yet). Tensors are cut into pieces of at
//! most [`TensorConfig::piece_bytes`] at aligned file offsets, so one huge
//! tensor (token embeddings, the output projection) neither stalls the window
//! nor blows it; a release waits until a whole piece fits (or the plan's tail
//! does), so a loader reading page by page does not cause a request per page.
//! Pieces next to each other in the file are coalesced into one page range,
//! and a page shared by two tensors is asked for once (with whichever comes
//! first in load order). Requests are
//! [`Urgency::Imminent`]: the loader said so.
//!
//! A plan's order is checked against the loader's first accesses: one
//! whose loader steps back in it while going forward through the file is
//! put in file order (see [`ORDER_CHECK_ACCESSES`]); what was asked for
//! under the old order is not asked for again.
//!
//! State is bounded: at most [`TensorConfig::max_files`] plans (a new one
//! replaces the least recently active) of at most
//! [`TensorConfig::max_pieces_per_file`] pieces (the plan's tail beyond is
//! dropped, counted). A file whose loader went quiet keeps its share of the
//! budget until another file is held back by it and the quiet file has seen no
//! event for [`TensorConfig::stale_after_events`] events on planned files;
//! then its plan is forgotten.
//!
//! The policy never issues I/O, never reads file data (model headers are
//! parsed by [`crate::model`], elsewhere), never blocks and never looks at
//! the clock: the same events give the same requests.

use std::collections::{BTreeMap, HashMap};

use crate::event::{Event, EventKind, EventKinds};
use crate::executor::MAX_PAGE;
use crate::file::FileId;
use crate::model::{LoadOrder, ModelLayout};
use crate::page::{ByteRange, PAGE_SIZE, PageRange, push_merged};
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// One past the last byte a request may name (the executor refuses pages
/// beyond [`MAX_PAGE`]).
const MAX_BYTE: u64 = MAX_PAGE * PAGE_SIZE;

/// The `tensor` policy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorConfig {
    /// Requested bytes allowed beyond the loader's position, per file.
    pub ahead_bytes: u64,
    /// Requested bytes not yet reached by their loaders, over all files.
    pub max_outstanding_bytes: u64,
    /// Tensors are cut into pieces of at most this many bytes, at file
    /// offsets that are multiples of it; a multiple of [`PAGE_SIZE`].
    pub piece_bytes: u64,
    /// Plans kept; a new one replaces the least recently active.
    pub max_files: usize,
    /// Pieces kept per plan; the tensors beyond are dropped (counted).
    pub max_pieces_per_file: usize,
    /// Events on planned files after which a file with no event of its own
    /// may lose its plan to a file held back by the budget.
    pub stale_after_events: u64,
    /// Mark requests [`Request::sequential`](crate::request::Request::sequential):
    /// the executor's stream thread reads them through the kernel's own
    /// readahead, which caches them in large folios, instead of `fadvise`.
    /// Off by default: in `llm-load` it was slower than `fadvise` (see
    /// docs/notes/2026-12-06-model-loading-and-readers-findings.md).
    pub stream: bool,
}

impl Default for TensorConfig {
    /// 512 MiB ahead per file, 1 GiB in all, 16 MiB pieces, 16 plans of up
    /// to 32,768 pieces (a 400 GiB model at 16 MiB a piece, or tens of
    /// thousands of tensors), staleness after 16,384 events.
    fn default() -> Self {
        Self {
            // A loader that parses before it reads (the gguf package's
            // reader) leaves the fill alone for a second, and a window this
            // size lets it get that far ahead; one twice as large slowed a
            // loader that reads at the device's pace (safetensors'):
            // docs/notes/2026-12-07-model-load.md.
            ahead_bytes: 512 << 20,
            max_outstanding_bytes: 1 << 30,
            piece_bytes: 16 << 20,
            max_files: 16,
            max_pieces_per_file: 1 << 15,
            stale_after_events: 1 << 14,
            stream: false,
        }
    }
}

/// Why a [`TensorConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TensorConfigError {
    /// A bound is zero.
    #[error("tensor: {0} must be at least 1")]
    Zero(&'static str),
    /// `piece_bytes` is not a whole number of pages.
    #[error("tensor: piece_bytes ({0}) is not a multiple of the page size")]
    PieceNotPageAligned(u64),
    /// A piece would not fit a bound, so it could never be requested.
    #[error("tensor: piece_bytes ({piece}) is above {bound} ({limit})")]
    PieceAboveBound {
        /// `piece_bytes`.
        piece: u64,
        /// The bound's name.
        bound: &'static str,
        /// The bound's value.
        limit: u64,
    },
}

impl TensorConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), TensorConfigError> {
        let zero = [
            ("ahead_bytes", self.ahead_bytes == 0),
            ("max_outstanding_bytes", self.max_outstanding_bytes == 0),
            ("piece_bytes", self.piece_bytes == 0),
            ("max_files", self.max_files == 0),
            ("max_pieces_per_file", self.max_pieces_per_file == 0),
            ("stale_after_events", self.stale_after_events == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
            return Err(TensorConfigError::Zero(name));
        }
        if !self.piece_bytes.is_multiple_of(PAGE_SIZE) {
            return Err(TensorConfigError::PieceNotPageAligned(self.piece_bytes));
        }
        for (bound, limit) in [("ahead_bytes", self.ahead_bytes), ("max_outstanding_bytes", self.max_outstanding_bytes)]
        {
            if self.piece_bytes > limit {
                return Err(TensorConfigError::PieceAboveBound { piece: self.piece_bytes, bound, limit });
            }
        }
        Ok(())
    }
}

/// Counters of the `tensor` policy. Books balance:
/// `bytes_requested = bytes_passed + abandoned_bytes + outstanding_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TensorStats {
    /// Layouts taken (events and [`TensorPolicy::set_layout`] calls).
    pub layouts: u64,
    /// Layouts identical in geometry to the file's current plan (progress
    /// kept; layer indices taken from the new one when it has any).
    pub repeated_layouts: u64,
    /// Layouts for files the runtime holds no descriptor for (ignored), and
    /// releases not made because the descriptor is gone.
    pub no_descriptor: u64,
    /// Tensors left out of a plan because it was full.
    pub dropped_tensors: u64,
    /// Tensors left out because they overlap another tensor of the plan.
    pub overlapping_tensors: u64,
    /// Requests emitted.
    pub requests: u64,
    /// Plan bytes those requests asked for.
    pub bytes_requested: u64,
    /// Pages those requests asked for.
    pub pages_requested: u64,
    /// Times the loader's position moved forward.
    pub position_updates: u64,
    /// Requested plan bytes the loader then reached or passed over.
    pub bytes_passed: u64,
    /// Plan bytes the loader reached before they were requested.
    pub overtaken_bytes: u64,
    /// Requested bytes not yet reached when their plan was forgotten
    /// (replaced, evicted, or stale).
    pub abandoned_bytes: u64,
    /// Releases held back by [`TensorConfig::max_outstanding_bytes`].
    pub budget_holds: u64,
    /// `LayerStart` events that moved to a known layer's first tensor.
    pub layer_starts: u64,
    /// `LayerStart` events for a layer the plan does not know (plans from
    /// the plain `TensorLayout` event know none).
    pub unknown_layers: u64,
    /// Plan bytes passed by a release because they had been asked for
    /// under the plan's earlier order (outstanding again, not asked twice).
    pub bytes_kept: u64,
    /// Plans put in file order because the loader's first accesses
    /// followed the file, not the plan (see [`ORDER_CHECK_ACCESSES`]).
    pub order_switches: u64,
    /// Loads begun again from a plan's start after an earlier load got
    /// through half of it or more (the plan asked for once more).
    pub loads_again: u64,
    /// Requested-but-unreached bytes now, over all files.
    pub outstanding_bytes: u64,
    /// Plans now.
    pub files: u64,
}

/// One piece of one tensor, in load order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    /// Absolute file offset.
    offset: u64,
    /// Length in bytes (at least 1).
    len: u64,
    /// Plan bytes before this piece (its position in load order).
    start: u64,
    /// The layer of its tensor, if known.
    layer: Option<u32>,
    /// Its index in the plan's `by_offset`.
    rank: usize,
    /// Asked for under an earlier order of the plan (see
    /// [`ORDER_CHECK_ACCESSES`]): not asked for again.
    asked: bool,
}

impl Piece {
    fn end(&self) -> u64 {
        self.offset + self.len
    }
}

/// A file's plan: pieces in load order, and ways into them.
#[derive(Debug, Default)]
struct TensorPlan {
    pieces: Vec<Piece>,
    /// Indices into `pieces`, by file offset. Pieces never overlap, so their
    /// ends are sorted too.
    by_offset: Vec<usize>,
    /// Layer → index of its first piece in load order.
    layer_starts: BTreeMap<u32, usize>,
    /// Plan bytes in all.
    total: u64,
}

/// What building a plan left out.
#[derive(Default)]
struct BuildReport {
    dropped: u64,
    overlapping: u64,
}

impl TensorPlan {
    /// Builds a plan from tensor ranges in load order: ranges clamped to
    /// what a request may name, empty ones skipped, overlapping ones left out
    /// (the later in file order), each cut into pieces, at most `max_pieces`.
    fn build(tensors: &[(ByteRange, Option<u32>)], piece_bytes: u64, max_pieces: usize) -> (Self, BuildReport) {
        let mut report = BuildReport::default();
        // Every tensor is at least one piece: more could never fit.
        let considered = tensors.len().min(max_pieces);
        report.dropped += (tensors.len() - considered) as u64;
        let clamped: Vec<(u64, u64, Option<u32>)> = tensors[..considered]
            .iter()
            .map(|(range, layer)| {
                let offset = range.offset.min(MAX_BYTE);
                (offset, range.offset.saturating_add(range.len).min(MAX_BYTE), *layer)
            })
            .collect();
        let mut order: Vec<usize> = (0..clamped.len()).filter(|&i| clamped[i].1 > clamped[i].0).collect();
        order.sort_by_key(|&i| (clamped[i].0, i));
        let mut keep = vec![false; clamped.len()];
        let mut covered_to = 0;
        for i in order {
            let (offset, end, _) = clamped[i];
            if offset < covered_to {
                report.overlapping += 1;
                continue;
            }
            keep[i] = true;
            covered_to = end;
        }
        let mut plan = TensorPlan::default();
        for (index, &(offset, end, layer)) in clamped.iter().enumerate() {
            if !keep[index] {
                continue;
            }
            let first_cut = (offset / piece_bytes).saturating_add(1).saturating_mul(piece_bytes);
            let pieces_needed = if end <= first_cut { 1 } else { 1 + (end - first_cut).div_ceil(piece_bytes) };
            if (plan.pieces.len() as u64).saturating_add(pieces_needed) > max_pieces as u64 {
                report.dropped += keep[index..].iter().filter(|k| **k).count() as u64;
                break;
            }
            let mut at = offset;
            while at < end {
                let cut = (at / piece_bytes).saturating_add(1).saturating_mul(piece_bytes).min(end);
                plan.pieces.push(Piece { offset: at, len: cut - at, start: plan.total, layer, rank: 0, asked: false });
                plan.total += cut - at;
                at = cut;
            }
        }
        plan.index();
        (plan, report)
    }

    /// Fills `by_offset` and `layer_starts` from `pieces`.
    fn index(&mut self) {
        self.by_offset = (0..self.pieces.len()).collect();
        self.by_offset.sort_by_key(|&i| self.pieces[i].offset);
        for (rank, &i) in self.by_offset.iter().enumerate() {
            self.pieces[i].rank = rank;
        }
        self.layer_starts.clear();
        for (i, piece) in self.pieces.iter().enumerate() {
            if let Some(layer) = piece.layer {
                self.layer_starts.entry(layer).or_insert(i);
            }
        }
    }

    /// True when both plans cut the file into the same pieces in the same
    /// order (layers aside).
    fn same_geometry(&self, other: &TensorPlan) -> bool {
        self.pieces.len() == other.pieces.len()
            && self.pieces.iter().zip(&other.pieces).all(|(a, b)| (a.offset, a.len) == (b.offset, b.len))
    }

    /// The plan position an access to bytes `[first, end)` shows the loader
    /// has reached: the furthest, in load order, of the touched pieces' ends
    /// (clipped to the access). `None` when the access touches no piece.
    fn reached_by(&self, first: u64, end: u64) -> Option<u64> {
        let from = self.by_offset.partition_point(|&i| self.pieces[i].end() <= first);
        let mut furthest = None;
        for &i in &self.by_offset[from..] {
            let piece = &self.pieces[i];
            if piece.offset >= end {
                break;
            }
            furthest = furthest.max(Some(piece.start + (end.min(piece.end()) - piece.offset)));
        }
        furthest
    }

    /// The pages of bytes `[first, first + len)` of `piece`, less a first or
    /// last page it shares with its neighbour in the file when that
    /// neighbour lies before plan position `requested` (already requested,
    /// or passed over by the loader): a page is asked for once.
    fn pages_of(&self, piece: &Piece, first: u64, len: u64, requested: u64) -> PageRange {
        let mut pages = ByteRange::new(first, len).pages();
        let neighbour = |rank: Option<usize>| rank.and_then(|r| self.by_offset.get(r)).map(|&i| &self.pieces[i]);
        if let Some(before) = neighbour(piece.rank.checked_sub(1))
            && (before.start < requested || before.asked)
            && (before.end() - 1) / PAGE_SIZE == pages.start
        {
            pages.start = (pages.start + 1).min(pages.end);
        }
        if let Some(after) = neighbour(piece.rank.checked_add(1))
            && (after.start < requested || after.asked)
            && after.offset / PAGE_SIZE + 1 == pages.end
        {
            pages.end = (pages.end - 1).max(pages.start);
        }
        pages
    }

    /// Index of the piece holding plan position `position` (`pieces.len()`
    /// at the end of the plan).
    fn piece_at(&self, position: u64) -> usize {
        self.pieces.partition_point(|p| p.start + p.len <= position)
    }
}

/// Accesses to a planned file that are checked against its plan's order.
///
/// A plan's order is what its maker expected of the loader (from the
/// format, and tensor names); the loader's own first accesses say what it
/// does. Each of them is placed both in the plan and in the file: one that
/// lands more than a piece behind the furthest so far is a step back in
/// that order. When the plan has taken [`ORDER_SWITCH_STEPS`] steps back
/// while the file has taken none, the loader reads the file front to back
/// (a safetensors loader going through the tensors by name, which is how
/// they are laid out) and the plan is put in file order, from the furthest
/// byte the loader touched.
pub const ORDER_CHECK_ACCESSES: u32 = 64;

/// Steps back in plan order (none in file order) that put a plan in file
/// order.
pub const ORDER_SWITCH_STEPS: u32 = 2;

/// What a file's first accesses say about its plan's order.
#[derive(Debug, Default)]
struct OrderCheck {
    accesses: u32,
    plan_back: u32,
    file_back: u32,
    /// The furthest plan position and file byte (end) reached so far.
    plan_max: u64,
    file_max: u64,
}

impl OrderCheck {
    /// Takes one access ending at file byte `end` that reached plan
    /// position `position`; true when the plan should be put in file order.
    fn take(&mut self, end: u64, position: u64, slack: u64) -> bool {
        if self.accesses >= ORDER_CHECK_ACCESSES {
            return false;
        }
        self.accesses += 1;
        if self.accesses > 1 {
            self.plan_back += u32::from(position.saturating_add(slack) < self.plan_max);
            self.file_back += u32::from(end.saturating_add(slack) < self.file_max);
        }
        self.plan_max = self.plan_max.max(position);
        self.file_max = self.file_max.max(end);
        if self.plan_back >= ORDER_SWITCH_STEPS && self.file_back == 0 {
            self.accesses = ORDER_CHECK_ACCESSES;
            return true;
        }
        false
    }
}

/// A planned file.
#[derive(Debug)]
struct PlannedFile {
    plan: TensorPlan,
    /// Plan bytes the loader has reached.
    reached: u64,
    /// Plan bytes requested or passed over; never below `reached`.
    requested: u64,
    /// Last event on this file, in events on planned files.
    active: u64,
    /// The loader's first accesses against the plan's order.
    order: OrderCheck,
}

impl PlannedFile {
    fn outstanding(&self) -> u64 {
        self.requested - self.reached
    }
}

/// Fetches a model file's tensors in load order, a bounded distance ahead of
/// its loader, within a memory budget shared by all files.
#[derive(Debug, Default)]
pub struct TensorPolicy {
    config: TensorConfig,
    files: HashMap<FileId, PlannedFile>,
    /// Sum of every file's outstanding bytes.
    outstanding: u64,
    /// Events on planned files (and layouts): the clock of staleness and LRU.
    tick: u64,
    stats: TensorStats,
}

impl TensorPolicy {
    /// A policy with these settings.
    pub fn new(config: TensorConfig) -> Result<Self, TensorConfigError> {
        config.validate()?;
        Ok(Self { config, ..Self::default() })
    }

    /// The settings.
    pub fn config(&self) -> &TensorConfig {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> TensorStats {
        TensorStats { outstanding_bytes: self.outstanding, files: self.files.len() as u64, ..self.stats }
    }

    /// Requested bytes of `file` its loader has not reached yet.
    pub fn outstanding_bytes(&self, file: FileId) -> u64 {
        self.files.get(&file).map_or(0, PlannedFile::outstanding)
    }

    /// The plan position (plan bytes in load order) `file`'s loader has
    /// reached, if the file has a plan.
    pub fn position(&self, file: FileId) -> Option<u64> {
        self.files.get(&file).map(|f| f.reached)
    }

    /// The plan a loader following `order` reads from `layout`: every tensor's
    /// byte range in that order, with its layer index when its name has one.
    /// Feed it to [`TensorPolicy::set_layout`].
    pub fn plan_from_layout(layout: &ModelLayout, order: LoadOrder) -> Vec<(ByteRange, Option<u32>)> {
        layout.load_order_for(order).into_iter().map(|t| (ByteRange::new(t.offset, t.len), t.layer())).collect()
    }

    /// Takes `file`'s plan — tensor ranges in the order the loader reads
    /// them, each with its layer index if known — and requests the first
    /// window. This is what a `TensorLayout` event does (with no layers);
    /// a dispatcher that parsed the model itself calls it directly so that
    /// `LayerStart` can find layers. A plan with the same pieces as the
    /// file's current one keeps the loader's progress (and nothing is asked
    /// for again); another plan replaces it. Returns false, and keeps
    /// nothing, when the runtime holds no descriptor for `file`.
    pub fn set_layout(
        &mut self,
        file: FileId,
        tensors: &[(ByteRange, Option<u32>)],
        ctx: &mut PolicyContext<'_>,
    ) -> bool {
        self.tick += 1;
        if ctx.file(file).is_none() {
            self.stats.no_descriptor += 1;
            return false;
        }
        self.stats.layouts += 1;
        let (plan, report) = TensorPlan::build(tensors, self.config.piece_bytes, self.config.max_pieces_per_file);
        self.stats.dropped_tensors += report.dropped;
        self.stats.overlapping_tensors += report.overlapping;
        let tick = self.tick;
        match self.files.get_mut(&file) {
            Some(planned) if planned.plan.same_geometry(&plan) => {
                self.stats.repeated_layouts += 1;
                if !plan.layer_starts.is_empty() {
                    planned.plan = plan;
                }
                planned.active = tick;
            }
            _ => {
                self.forget(file);
                self.make_room();
                let planned =
                    PlannedFile { plan, reached: 0, requested: 0, active: tick, order: OrderCheck::default() };
                self.files.insert(file, planned);
            }
        }
        self.release(file, ctx);
        true
    }

    /// The loader touched bytes `[first, end)` of `file`.
    fn on_access(&mut self, file: FileId, first: u64, end: u64, ctx: &mut PolicyContext<'_>) {
        let tick = self.tick + 1;
        let Some(planned) = self.files.get_mut(&file) else { return };
        self.tick = tick;
        planned.active = tick;
        let Some(reached) = planned.plan.reached_by(first, end) else { return };
        let first_piece = planned.plan.pieces.first().map_or(0, |p| p.len);
        if reached <= first_piece && planned.reached > first_piece && planned.reached >= planned.plan.total / 2 {
            self.begin_again(file);
            self.advance(file, reached);
        } else if planned.order.take(end, reached, self.config.piece_bytes) {
            self.put_in_file_order(file);
        } else {
            self.advance(file, reached);
        }
        self.release(file, ctx);
    }

    /// A load of `file` begins again: its loader is back in the plan's first
    /// piece after an earlier load got past it and through half of the plan
    /// or more (the model loaded once more, by a new process or the same
    /// one). The plan, in the order learnt, is asked for once more from its
    /// start: what is still cached costs the executor a residency check,
    /// what was evicted is read again.
    fn begin_again(&mut self, file: FileId) {
        self.abandon(file);
        let Some(planned) = self.files.get_mut(&file) else { return };
        for piece in &mut planned.plan.pieces {
            piece.asked = false;
        }
        planned.reached = 0;
        planned.requested = 0;
        self.stats.loads_again += 1;
    }

    /// Puts `file`'s plan in file order, the loader at the furthest byte it
    /// touched (see [`ORDER_CHECK_ACCESSES`]); what was requested ahead of
    /// the old order stays in the cache, and its budget is given back.
    fn put_in_file_order(&mut self, file: FileId) {
        let (piece_bytes, max_pieces) = (self.config.piece_bytes, self.config.max_pieces_per_file);
        self.abandon(file);
        let Some(planned) = self.files.get_mut(&file) else { return };
        let tensors: Vec<(ByteRange, Option<u32>)> = planned
            .plan
            .by_offset
            .iter()
            .map(|&i| &planned.plan.pieces[i])
            .map(|piece| (ByteRange::new(piece.offset, piece.len), piece.layer))
            .collect();
        let (mut plan, _) = TensorPlan::build(&tensors, piece_bytes, max_pieces);
        // The same cuts, now in file order: what was asked for stays asked.
        let asked: HashMap<u64, bool> = planned.plan.pieces.iter().map(|p| (p.offset, p.asked)).collect();
        for piece in &mut plan.pieces {
            piece.asked = asked.get(&piece.offset).copied().unwrap_or(false);
        }
        let furthest = planned.order.file_max;
        let reached = plan.reached_by(furthest.saturating_sub(1), furthest).unwrap_or(0);
        planned.plan = plan;
        planned.reached = reached;
        planned.requested = reached;
        self.stats.order_switches += 1;
    }

    /// The loader starts `layer` of `file`.
    fn on_layer_start(&mut self, file: FileId, layer: u32, ctx: &mut PolicyContext<'_>) {
        let tick = self.tick + 1;
        let Some(planned) = self.files.get_mut(&file) else { return };
        self.tick = tick;
        planned.active = tick;
        let Some(&first) = planned.plan.layer_starts.get(&layer) else {
            self.stats.unknown_layers += 1;
            return;
        };
        let start = planned.plan.pieces.get(first).map_or(planned.plan.total, |p| p.start);
        self.stats.layer_starts += 1;
        self.advance(file, start);
        self.release(file, ctx);
    }

    /// Moves `file`'s loader position forward to `reached` (never back).
    fn advance(&mut self, file: FileId, reached: u64) {
        let Some(planned) = self.files.get_mut(&file) else { return };
        if reached <= planned.reached {
            return;
        }
        self.stats.position_updates += 1;
        let passed = reached.min(planned.requested) - planned.reached;
        self.stats.bytes_passed += passed;
        self.outstanding -= passed;
        if reached > planned.requested {
            self.stats.overtaken_bytes += reached - planned.requested;
            planned.requested = reached;
        }
        planned.reached = reached;
    }

    /// Requests `file`'s next pieces in load order while the window and the
    /// budget allow; when the budget holds it back, reclaims stale plans and
    /// tries once more.
    fn release(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) {
        if self.release_once(file, ctx) && self.reclaim_stale(file) {
            self.release_once(file, ctx);
        }
    }

    /// One release; returns true when the budget held it back.
    fn release_once(&mut self, file: FileId, ctx: &mut PolicyContext<'_>) -> bool {
        let (ahead, budget, piece_bytes) =
            (self.config.ahead_bytes, self.config.max_outstanding_bytes, self.config.piece_bytes);
        let Some(planned) = self.files.get_mut(&file) else { return false };
        let remaining = planned.plan.total - planned.requested;
        let room = ahead.saturating_sub(planned.outstanding());
        // Wait for room for a whole piece (or the whole tail), so that a
        // loader going page by page does not make a request per page.
        if remaining == 0 || room < piece_bytes.min(remaining) {
            return false;
        }
        if ctx.file(file).is_none() {
            self.stats.no_descriptor += 1;
            return false;
        }
        let mut ranges: Vec<PageRange> = Vec::new();
        let (mut bytes, mut kept, mut held) = (0, 0, false);
        let mut index = planned.plan.piece_at(planned.requested);
        while let Some(piece) = planned.plan.pieces.get(index).copied() {
            let from = planned.requested.saturating_sub(piece.start).min(piece.len);
            let take = piece.len - from;
            if planned.outstanding() + take > ahead {
                break;
            }
            if self.outstanding + take > budget {
                self.stats.budget_holds += 1;
                held = true;
                break;
            }
            if piece.asked {
                // Asked for under the plan's earlier order: in flight or
                // cached already, and outstanding again until reached.
                kept += take;
            } else {
                let pages = planned.plan.pages_of(&piece, piece.offset + from, take, planned.requested);
                push_merged(&mut ranges, pages);
                bytes += take;
            }
            planned.plan.pieces[index].asked = true;
            planned.requested += take;
            self.outstanding += take;
            index += 1;
        }
        self.stats.bytes_requested += bytes;
        self.stats.bytes_kept += kept;
        if !ranges.is_empty() {
            self.stats.requests += 1;
            self.stats.pages_requested += ranges.iter().map(PageRange::len).sum::<u64>();
            // The descriptor was checked above and the context does not
            // change while one event is handled.
            if self.config.stream {
                ctx.request_streamed(file, ranges, Urgency::Imminent);
            } else {
                ctx.request(file, ranges, Urgency::Imminent);
            }
        }
        held
    }

    /// Forgets the plans (other than `keep`'s) with outstanding bytes and no
    /// event for [`TensorConfig::stale_after_events`]. Returns true if any.
    fn reclaim_stale(&mut self, keep: FileId) -> bool {
        let (tick, stale_after) = (self.tick, self.config.stale_after_events);
        let mut stale: Vec<FileId> = self
            .files
            .iter()
            .filter(|(id, f)| **id != keep && f.outstanding() > 0 && f.active.saturating_add(stale_after) <= tick)
            .map(|(id, _)| *id)
            .collect();
        stale.sort();
        for id in &stale {
            self.forget(*id);
        }
        !stale.is_empty()
    }

    /// Makes room for one more plan by forgetting the least recently active.
    fn make_room(&mut self) {
        while self.files.len() >= self.config.max_files {
            let Some(oldest) = self.files.iter().min_by_key(|(id, f)| (f.active, **id)).map(|(id, _)| *id) else {
                return;
            };
            self.forget(oldest);
        }
    }

    /// Drops a plan, returning its outstanding bytes to the budget.
    fn forget(&mut self, file: FileId) {
        self.abandon(file);
        self.files.remove(&file);
    }

    /// Gives `file`'s outstanding bytes back to the budget (counted as
    /// abandoned): what was requested and not reached stays in the cache,
    /// but the plan no longer waits for its loader to reach it.
    fn abandon(&mut self, file: FileId) {
        let Some(planned) = self.files.get_mut(&file) else { return };
        self.stats.abandoned_bytes += planned.outstanding();
        self.outstanding -= planned.outstanding();
        planned.requested = planned.reached;
    }
}

impl Policy for TensorPolicy {
    fn name(&self) -> &str {
        "tensor"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::TensorLayout, EventKind::LayerStart, EventKind::PageAccess, EventKind::StreamRead])
    }

    /// Accesses pace a model's plan only: no other file is requested.
    fn wants_observed_file(&self, file: FileId) -> bool {
        self.files.contains_key(&file)
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        match event {
            Event::TensorLayout { file, ranges } => {
                let tensors: Vec<(ByteRange, Option<u32>)> = ranges.iter().map(|r| (*r, None)).collect();
                self.set_layout(*file, &tensors, ctx);
            }
            Event::LayerStart { file, layer } => self.on_layer_start(*file, *layer, ctx),
            Event::PageAccess { file, pages, .. } => {
                let (first, end) = (pages.start.saturating_mul(PAGE_SIZE), pages.end.saturating_mul(PAGE_SIZE));
                self.on_access(*file, first, end, ctx);
            }
            Event::StreamRead { file, offset, len } => {
                self.on_access(*file, *offset, offset.saturating_add(*len), ctx);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::event::AccessKind;
    use crate::file::FileRef;
    use crate::policy::PolicyId;
    use crate::policy::test_support::HeldFiles;
    use crate::request::Request;

    /// Bytes of `n` pages.
    const fn pg(n: u64) -> u64 {
        n * PAGE_SIZE
    }

    /// 4-page pieces, 16 pages ahead per file, 24 in all.
    fn small() -> TensorConfig {
        TensorConfig {
            ahead_bytes: pg(16),
            max_outstanding_bytes: pg(24),
            piece_bytes: pg(4),
            max_files: 8,
            max_pieces_per_file: 1000,
            stale_after_events: 1000,
            stream: false,
        }
    }

    struct Bench {
        policy: TensorPolicy,
        held: HeldFiles,
        ids: Vec<FileId>,
    }

    impl Bench {
        fn new(config: TensorConfig) -> Self {
            let held = HeldFiles::distinct(3);
            let ids = held.ids.clone();
            Self { policy: TensorPolicy::new(config).expect("valid config"), held, ids }
        }

        fn feed(&mut self, event: Event) -> Vec<Request> {
            self.held.feed(&mut self.policy, &event, PolicyId(5))
        }

        /// A `TensorLayout` event of (first page, pages) tensors.
        fn layout(&mut self, file: usize, tensors: &[(u64, u64)]) -> Vec<PageRange> {
            let ranges: Vec<ByteRange> =
                tensors.iter().map(|&(page, pages)| ByteRange::new(pg(page), pg(pages))).collect();
            ranges_of(self.feed(Event::TensorLayout { file: self.ids[file], ranges: ranges.into() }))
        }

        /// [`TensorPolicy::set_layout`] with layers.
        fn set_layout(&mut self, file: usize, tensors: &[(ByteRange, Option<u32>)]) -> Vec<PageRange> {
            let mut out = Vec::new();
            let mut ctx = PolicyContext::new(&self.held.files, &mut out, PolicyId(5));
            assert!(self.policy.set_layout(self.ids[file], tensors, &mut ctx));
            ranges_of(out)
        }

        fn access(&mut self, file: usize, pages: PageRange, kind: AccessKind) -> Vec<PageRange> {
            let event = Event::PageAccess { pid: 3, file: self.ids[file], pages, kind, time_ns: 0 };
            ranges_of(self.feed(event))
        }

        fn read(&mut self, file: usize, pages: PageRange) -> Vec<PageRange> {
            self.access(file, pages, AccessKind::Read)
        }

        fn layer(&mut self, file: usize, layer: u32) -> Vec<PageRange> {
            ranges_of(self.feed(Event::LayerStart { file: self.ids[file], layer }))
        }

        /// The bounds and the books.
        fn check(&self) {
            let config = &self.policy.config;
            let mut sum = 0;
            for planned in self.policy.files.values() {
                assert!(planned.reached <= planned.requested && planned.requested <= planned.plan.total);
                assert!(planned.outstanding() <= config.ahead_bytes);
                sum += planned.outstanding();
            }
            assert_eq!(sum, self.policy.outstanding);
            assert!(self.policy.outstanding <= config.max_outstanding_bytes);
            let stats = self.policy.stats();
            assert_eq!(
                stats.bytes_requested + stats.bytes_kept,
                stats.bytes_passed + stats.abandoned_bytes + stats.outstanding_bytes
            );
        }
    }

    fn ranges_of(requests: Vec<Request>) -> Vec<PageRange> {
        for request in &requests {
            assert_eq!(request.urgency, Urgency::Imminent);
            assert_eq!(request.origin, PolicyId(5));
        }
        requests.into_iter().flat_map(|r| r.ranges).collect()
    }

    /// Every page of `ranges`, asserting none is there twice.
    #[track_caller]
    fn pages_once(ranges: &[PageRange]) -> BTreeSet<u64> {
        let mut seen = BTreeSet::new();
        for range in ranges {
            for page in range.start..range.end {
                assert!(seen.insert(page), "page {page} requested twice in {ranges:?}");
            }
        }
        seen
    }

    /// Only a model's descriptor is wanted from observation, once its
    /// layout is known.
    #[test]
    fn only_laid_out_files_are_wanted_from_observation() {
        let mut b = Bench::new(TensorConfig::default());
        assert!(!b.policy.wants_observed_file(b.ids[0]));
        b.layout(0, &[(0, 4), (4, 4)]);
        assert!(b.policy.wants_observed_file(b.ids[0]));
        assert!(!b.policy.wants_observed_file(b.ids[1]));
    }

    #[test]
    fn registered_by_name_and_default() {
        let policy = crate::policies::by_name("tensor").expect("registered");
        assert_eq!(policy.name(), "tensor");
        assert_eq!(
            policy.interests(),
            EventKinds::of(&[
                EventKind::TensorLayout,
                EventKind::LayerStart,
                EventKind::PageAccess,
                EventKind::StreamRead
            ])
        );
        assert!(crate::policies::NAMES.contains(&"tensor"));
        assert!(crate::policies::DEFAULT.contains(&"tensor"));
        let defaults = TensorConfig::default();
        assert_eq!((defaults.ahead_bytes, defaults.max_outstanding_bytes), (512 << 20, 1 << 30));
        assert!(!defaults.stream, "streaming measured slower in llm-load: off by default");
        assert!(defaults.validate().is_ok());
    }

    #[test]
    fn config_is_checked() {
        let bad = |edit: fn(&mut TensorConfig)| {
            let mut config = TensorConfig::default();
            edit(&mut config);
            TensorPolicy::new(config).err()
        };
        assert_eq!(bad(|c| c.ahead_bytes = 0), Some(TensorConfigError::Zero("ahead_bytes")));
        assert_eq!(bad(|c| c.max_files = 0), Some(TensorConfigError::Zero("max_files")));
        assert_eq!(bad(|c| c.piece_bytes = 4097), Some(TensorConfigError::PieceNotPageAligned(4097)));
        assert_eq!(
            bad(|c| c.piece_bytes = 1 << 30),
            Some(TensorConfigError::PieceAboveBound { piece: 1 << 30, bound: "ahead_bytes", limit: 512 << 20 })
        );
        assert_eq!(
            bad(|c| c.max_outstanding_bytes = 1 << 20),
            Some(TensorConfigError::PieceAboveBound {
                piece: 16 << 20,
                bound: "max_outstanding_bytes",
                limit: 1 << 20
            })
        );
    }

    #[test]
    fn requests_are_streamed_only_when_configured() {
        let tensors: Vec<(u64, u64)> = (0..4).map(|i| (4 * i, 4)).collect();
        for stream in [false, true] {
            let mut bench = Bench::new(TensorConfig { stream, ..small() });
            let ranges: Vec<ByteRange> = tensors.iter().map(|&(p, n)| ByteRange::new(pg(p), pg(n))).collect();
            let out = bench.feed(Event::TensorLayout { file: bench.ids[0], ranges: ranges.into() });
            assert!(!out.is_empty());
            assert!(out.iter().all(|r| r.sequential == stream), "stream = {stream}");
        }
    }

    #[test]
    fn the_first_window_is_bounded_and_coalesced() {
        let mut bench = Bench::new(small());
        // Ten 4-page tensors back to back from page 100.
        let tensors: Vec<(u64, u64)> = (0..10).map(|i| (100 + 4 * i, 4)).collect();
        assert_eq!(bench.layout(0, &tensors), vec![PageRange::new(100, 116)], "16 pages, one range");
        assert_eq!(bench.policy.outstanding_bytes(bench.ids[0]), pg(16));
        assert_eq!(bench.policy.position(bench.ids[0]), Some(0));
        let stats = bench.policy.stats();
        assert_eq!((stats.layouts, stats.requests, stats.bytes_requested, stats.pages_requested), (1, 1, pg(16), 16));
        bench.check();
    }

    #[test]
    fn progress_releases_the_plan_once_and_in_order() {
        let mut bench = Bench::new(small());
        let tensors: Vec<(u64, u64)> = (0..10).map(|i| (100 + 4 * i, 4)).collect();
        let mut requested = bench.layout(0, &tensors);
        // The loader reads page by page; the window follows it.
        for page in 100..140 {
            let released = bench.read(0, PageRange::page(page));
            if !released.is_empty() {
                // Releases wait for room for a whole piece.
                assert!(released.iter().map(PageRange::len).sum::<u64>() >= 4, "{released:?}");
            }
            requested.extend(released);
            bench.check();
            let planned = &bench.policy.files[&bench.ids[0]];
            assert!(planned.requested <= planned.reached + pg(16), "never more than ahead_bytes beyond the loader");
        }
        let pages = pages_once(&requested);
        assert_eq!(pages, (100..140).collect(), "every tensor page, once");
        let starts: Vec<u64> = requested.iter().map(|r| r.start).collect();
        assert!(starts.windows(2).all(|w| w[0] < w[1]), "in load order: {requested:?}");
        let stats = bench.policy.stats();
        assert_eq!(stats.requests, 1 + 6, "the first window, then one per piece read");
        assert_eq!((stats.bytes_passed, stats.outstanding_bytes, stats.overtaken_bytes), (pg(40), 0, 0));
        assert_eq!(stats.position_updates, 40);
    }

    #[test]
    fn load_order_not_file_order_and_the_furthest_tensor_wins() {
        let mut bench = Bench::new(small());
        // Load order: 200.., 0.., 100.., 300.. (4 pages each), then 400..
        let first = bench.layout(0, &[(200, 4), (0, 4), (100, 4), (300, 4), (400, 4)]);
        assert_eq!(
            first,
            vec![PageRange::new(200, 204), PageRange::new(0, 4), PageRange::new(100, 104), PageRange::new(300, 304)]
        );
        // A read of the second tensor (in load order) passes the first.
        assert_eq!(bench.read(0, PageRange::new(0, 4)), vec![PageRange::new(400, 404)]);
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(8)));
        // Reads behind the position and outside the plan change nothing.
        assert!(bench.read(0, PageRange::new(200, 204)).is_empty());
        assert!(bench.read(0, PageRange::new(50, 60)).is_empty());
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(8)));
        assert_eq!(bench.policy.stats().position_updates, 1);
        bench.check();
    }

    #[test]
    fn a_loader_that_follows_the_file_puts_the_plan_in_file_order() {
        let mut bench = Bench::new(small());
        // The plan expects the file back to front; the loader reads it front
        // to back (4 pages a tensor, a piece each).
        let order: Vec<(u64, u64)> = (0..6).rev().map(|i| (100 * i, 4)).collect();
        assert_eq!(
            bench.layout(0, &order),
            vec![
                PageRange::new(500, 504),
                PageRange::new(400, 404),
                PageRange::new(300, 304),
                PageRange::new(200, 204)
            ]
        );
        // 0.. is the plan's last tensor: the position jumps to its end.
        assert!(bench.read(0, PageRange::new(0, 4)).is_empty());
        // 100.. lies one piece behind in the plan (within the slack), 200..
        // two: the first step back.
        assert!(bench.read(0, PageRange::new(100, 104)).is_empty());
        assert!(bench.read(0, PageRange::new(200, 204)).is_empty());
        assert_eq!(bench.policy.stats().order_switches, 0);
        // The second step back while the file went forward every time: file
        // order, from 304 on.
        assert!(bench.read(0, PageRange::new(300, 304)).is_empty(), "400.. and 500.. were asked for already");
        assert_eq!(bench.policy.stats().order_switches, 1);
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(16)));
        bench.check();
        // A plan the loader follows (with reads a little behind, as fault-
        // around makes) is never switched.
        let mut bench = Bench::new(small());
        let order: Vec<(u64, u64)> = (0..8).map(|i| (100 * ((i * 3) % 8), 4)).collect();
        bench.layout(0, &order);
        for &(page, _) in &order {
            bench.read(0, PageRange::new(page, page + 4));
            bench.read(0, PageRange::new(page, page + 1));
        }
        assert_eq!(bench.policy.stats().order_switches, 0);
        bench.check();
    }

    #[test]
    fn a_model_loaded_again_is_asked_for_again() {
        let mut bench = Bench::new(small());
        let tensors: Vec<(u64, u64)> = (0..8).map(|i| (4 * i, 4)).collect();
        let first = bench.layout(0, &tensors);
        assert_eq!(first, vec![PageRange::new(0, 16)]);
        let mut asked = first;
        for i in 0..8 {
            asked.extend(bench.read(0, PageRange::new(4 * i, 4 * i + 4)));
        }
        assert_eq!(pages_once(&asked).len(), 32, "the first load asked for every page once");
        // Back in the first piece midway through a load: not a new load.
        let mut bench2 = Bench::new(small());
        bench2.layout(0, &tensors);
        bench2.read(0, PageRange::new(8, 12));
        assert!(bench2.read(0, PageRange::new(0, 1)).is_empty());
        assert_eq!(bench2.policy.stats().loads_again, 0);
        // The whole model read, then its first tensor again: a new load,
        // the plan asked for from its start once more.
        // (The loader reads its first two pages itself.)
        assert_eq!(bench.read(0, PageRange::new(0, 2)), vec![PageRange::new(2, 16)]);
        assert_eq!(bench.policy.stats().loads_again, 1);
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(2)));
        assert_eq!(bench.read(0, PageRange::new(4, 8)), vec![PageRange::new(16, 24)]);
        // The first piece touched again early in that load: still the same.
        assert!(bench.read(0, PageRange::new(1, 2)).is_empty());
        assert_eq!(bench.policy.stats().loads_again, 1);
        bench.check();
    }

    #[test]
    fn faults_reads_and_stream_hints_are_progress() {
        let mut bench = Bench::new(small());
        let tensors: Vec<(u64, u64)> = (0..8).map(|i| (4 * i, 4)).collect();
        bench.layout(0, &tensors);
        assert_eq!(bench.access(0, PageRange::page(3), AccessKind::Fault), vec![PageRange::new(16, 20)]);
        assert_eq!(bench.access(0, PageRange::page(7), AccessKind::Read), vec![PageRange::new(20, 24)]);
        let hint = Event::StreamRead { file: bench.ids[0], offset: pg(8), len: pg(4) };
        assert_eq!(ranges_of(bench.feed(hint)), vec![PageRange::new(24, 28)]);
        assert_eq!(bench.access(0, PageRange::new(12, 16), AccessKind::MapPages), vec![PageRange::new(28, 32)]);
        assert_eq!(bench.policy.stats().position_updates, 4);
        bench.check();
    }

    #[test]
    fn a_large_tensor_is_fetched_in_pieces() {
        let mut bench = Bench::new(small());
        // One 40-page tensor starting mid-piece, then a small one.
        assert_eq!(bench.layout(0, &[(2, 40), (42, 1)]), vec![PageRange::new(2, 16)], "whole pieces only");
        let plan = &bench.policy.files[&bench.ids[0]].plan;
        assert_eq!(plan.pieces.len(), 11 + 1, "cut at multiples of 4 pages: 2..4, 4..8, …, 40..42");
        assert_eq!(bench.read(0, PageRange::new(2, 8)), vec![PageRange::new(16, 24)]);
        let mut requested = vec![PageRange::new(2, 24)];
        for page in 8..43 {
            requested.extend(bench.read(0, PageRange::page(page)));
            bench.check();
        }
        assert_eq!(pages_once(&requested), (2..43).collect());
    }

    #[test]
    fn a_page_shared_by_two_tensors_is_requested_once() {
        let mut bench = Bench::new(small());
        let tensors = [(ByteRange::new(0, 5000), None), (ByteRange::new(5000, 4000), None)];
        assert_eq!(bench.set_layout(0, &tensors), vec![PageRange::new(0, 3)]);
        // Across requests too: tensors that share pages 7 and 15.
        let mut config = small();
        config.ahead_bytes = pg(8);
        config.piece_bytes = pg(8);
        let mut bench = Bench::new(config);
        let tensors = [
            (ByteRange::new(0, pg(7) + 100), None),
            (ByteRange::new(pg(7) + 100, pg(8)), None),
            (ByteRange::new(pg(15) + 100, 100), None),
        ];
        let mut requested = bench.set_layout(0, &tensors);
        assert_eq!(requested, vec![PageRange::new(0, 8)]);
        for page in 0..16 {
            requested.extend(bench.read(0, PageRange::page(page)));
        }
        assert_eq!(pages_once(&requested), (0..16).collect());
    }

    #[test]
    fn layer_start_jumps_to_the_layer_when_the_plan_knows_layers() {
        let mut bench = Bench::new(small());
        // An embedding, then four layers of two 4-page tensors each.
        let mut tensors = vec![(ByteRange::new(0, pg(4)), None)];
        for layer in 0..4u32 {
            for t in 0..2u64 {
                let page = 4 + 8 * u64::from(layer) + 4 * t;
                tensors.push((ByteRange::new(pg(page), pg(4)), Some(layer)));
            }
        }
        assert_eq!(bench.set_layout(0, &tensors), vec![PageRange::new(0, 16)]);
        // Layer 2 starts at page 20: the window moves there.
        assert_eq!(bench.layer(0, 2), vec![PageRange::new(20, 36)]);
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(20)));
        let stats = bench.policy.stats();
        assert_eq!((stats.layer_starts, stats.overtaken_bytes), (1, pg(4)), "layer 1's second tensor was passed");
        // Going back is not progress; an unknown layer is counted.
        assert!(bench.layer(0, 1).is_empty());
        assert!(bench.layer(0, 9).is_empty());
        assert_eq!(bench.policy.stats().unknown_layers, 1);
        bench.check();

        // From the plain event, layers are unknown.
        let mut bench = Bench::new(small());
        bench.layout(0, &[(0, 4), (4, 4)]);
        assert!(bench.layer(0, 0).is_empty());
        assert_eq!(bench.policy.stats().unknown_layers, 1);
        // The same geometry with layers keeps the progress and learns them.
        let layered = [(ByteRange::new(0, pg(4)), Some(0)), (ByteRange::new(pg(4), pg(4)), Some(1))];
        assert!(bench.set_layout(0, &layered).is_empty(), "nothing asked for twice");
        assert_eq!(bench.policy.stats().repeated_layouts, 1);
        assert!(bench.layer(0, 1).is_empty());
        assert_eq!(bench.policy.position(bench.ids[0]), Some(pg(4)));
    }

    #[test]
    fn a_new_layout_replaces_the_plan() {
        let mut bench = Bench::new(small());
        bench.layout(0, &[(0, 32)]);
        assert_eq!(bench.layout(0, &[(100, 8)]), vec![PageRange::new(100, 108)]);
        let stats = bench.policy.stats();
        assert_eq!((stats.layouts, stats.abandoned_bytes, stats.files), (2, pg(16), 1));
        bench.check();
    }

    #[test]
    fn the_budget_caps_outstanding_bytes_over_all_files() {
        let mut bench = Bench::new(small());
        assert_eq!(bench.layout(0, &[(0, 20)]), vec![PageRange::new(0, 16)]);
        assert_eq!(bench.layout(1, &[(0, 64)]), vec![PageRange::new(0, 8)], "what the budget has left");
        assert_eq!(bench.policy.stats().budget_holds, 1);
        // The first loader reads a piece and takes the room back for its
        // last piece; the second is still held.
        assert_eq!(bench.read(0, PageRange::new(0, 4)), vec![PageRange::new(16, 20)]);
        assert!(bench.read(1, PageRange::page(0)).is_empty(), "held: the budget is full");
        assert_eq!(bench.policy.stats().budget_holds, 2);
        // The first loader finishes: its room goes to the second.
        assert!(bench.read(0, PageRange::new(4, 20)).is_empty());
        assert_eq!(bench.read(1, PageRange::page(1)), vec![PageRange::new(8, 16)]);
        bench.check();
    }

    #[test]
    fn a_quiet_file_loses_its_budget_to_a_held_one() {
        let mut config = small();
        config.stale_after_events = 50;
        let mut bench = Bench::new(config);
        bench.layout(0, &[(0, 64)]);
        bench.layout(1, &[(0, 1000)]);
        let mut released = Vec::new();
        for page in 0..200 {
            released.extend(bench.read(1, PageRange::page(page)));
            bench.check();
        }
        let stats = bench.policy.stats();
        assert_eq!((stats.files, stats.abandoned_bytes), (1, pg(16)), "the quiet plan is forgotten");
        assert_eq!(bench.policy.outstanding_bytes(bench.ids[1]), pg(16), "the active file gets the full window");
        pages_once(&released);
    }

    #[test]
    fn plans_are_bounded_lru() {
        let mut config = small();
        config.max_files = 2;
        config.max_outstanding_bytes = pg(1024);
        let mut bench = Bench::new(config);
        bench.layout(0, &[(0, 8)]);
        bench.layout(1, &[(0, 8)]);
        bench.read(0, PageRange::page(0));
        // A third plan evicts the least recently active: file 1.
        bench.layout(2, &[(0, 8)]);
        let stats = bench.policy.stats();
        assert_eq!((stats.files, stats.abandoned_bytes), (2, pg(8)));
        assert!(bench.policy.position(bench.ids[1]).is_none());
        assert!(bench.policy.position(bench.ids[0]).is_some());
        assert!(bench.read(1, PageRange::page(0)).is_empty(), "forgotten");
        bench.check();
        // Pieces per plan are bounded too: the tail is dropped.
        let mut config = small();
        config.max_pieces_per_file = 3;
        let mut bench = Bench::new(config);
        bench.layout(0, &[(0, 4), (4, 4), (8, 8), (16, 1)]);
        let plan = &bench.policy.files[&bench.ids[0]].plan;
        assert_eq!(plan.pieces.len(), 2);
        assert_eq!(bench.policy.stats().dropped_tensors, 2);
    }

    #[test]
    fn files_without_a_descriptor_are_counted_and_ignored() {
        let mut bench = Bench::new(small());
        let ghost = FileId { dev: 77, ino: 77 };
        let event = Event::TensorLayout { file: ghost, ranges: vec![ByteRange::new(0, 1 << 20)].into() };
        assert!(bench.feed(event).is_empty());
        let read =
            Event::PageAccess { pid: 1, file: ghost, pages: PageRange::new(0, 8), kind: AccessKind::Read, time_ns: 0 };
        assert!(bench.feed(read).is_empty());
        assert!(bench.feed(Event::LayerStart { file: ghost, layer: 0 }).is_empty());
        let stats = bench.policy.stats();
        assert_eq!((stats.no_descriptor, stats.layouts, stats.files, stats.requests), (1, 0, 0, 0));
    }

    #[test]
    fn malformed_layouts_do_not_overflow_or_overlap() {
        let mut bench = Bench::new(TensorConfig::default());
        let tensors = [
            (ByteRange::new(u64::MAX - 5, 100), None),
            (ByteRange::new(u64::MAX / 2, u64::MAX), None),
            (ByteRange::new(pg(MAX_PAGE - 10), 1 << 30), None),
            (ByteRange::new(0, pg(8)), None),
            (ByteRange::new(pg(4), pg(8)), None),
            (ByteRange::new(pg(100), 0), None),
        ];
        let requested = bench.set_layout(0, &tensors);
        assert!(requested.iter().all(|r| r.end <= MAX_PAGE), "{requested:?}");
        assert_eq!(pages_once(&requested).len() as u64, 10 + 8);
        assert_eq!(bench.policy.stats().overlapping_tensors, 1);
        bench.feed(Event::StreamRead { file: bench.ids[0], offset: u64::MAX - 1, len: u64::MAX });
        bench.check();
    }

    mod gguf {
        //! A small llama-like GGUF written by hand (the writer of
        //! `tests/model.rs`, cut down), parsed by [`ModelLayout`], turned
        //! into a plan, then loaded the way llama.cpp does.

        use std::io::Write;

        use super::*;

        /// A metadata value to write.
        enum Val {
            U32(u32),
            Str(&'static str),
        }

        fn put_str(out: &mut Vec<u8>, s: &str) {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        }

        /// A tensor to write: name, dims (innermost first), ggml type, bytes.
        struct T {
            name: String,
            dims: Vec<u64>,
            ty: u32,
            bytes: u64,
        }

        fn t(name: &str, dims: &[u64], ty: u32) -> T {
            let elements: u64 = dims.iter().product();
            let bytes = match ty {
                0 => elements * 4,
                1 => elements * 2,
                2 => elements / 32 * 18,
                8 => elements / 32 * 34,
                other => panic!("test writer does not size type {other}"),
            };
            T { name: name.to_owned(), dims: dims.to_vec(), ty, bytes }
        }

        /// Writes a GGUF v3 file: header, metadata, tensor infos, padding,
        /// then each tensor's data, aligned.
        fn gguf(kvs: &[(&str, Val)], tensors: &[T], alignment: u64) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend(b"GGUF");
            out.extend(3u32.to_le_bytes());
            out.extend((tensors.len() as u64).to_le_bytes());
            out.extend((kvs.len() as u64).to_le_bytes());
            for (key, val) in kvs {
                put_str(&mut out, key);
                match val {
                    Val::U32(v) => {
                        out.extend(4u32.to_le_bytes());
                        out.extend(v.to_le_bytes());
                    }
                    Val::Str(s) => {
                        out.extend(8u32.to_le_bytes());
                        put_str(&mut out, s);
                    }
                }
            }
            let mut relative = Vec::new();
            let mut at = 0u64;
            for t in tensors {
                relative.push(at);
                at = (at + t.bytes).div_ceil(alignment) * alignment;
            }
            for (t, rel) in tensors.iter().zip(&relative) {
                put_str(&mut out, &t.name);
                out.extend((t.dims.len() as u32).to_le_bytes());
                for d in &t.dims {
                    out.extend(d.to_le_bytes());
                }
                out.extend(t.ty.to_le_bytes());
                out.extend(rel.to_le_bytes());
            }
            let data_offset = (out.len() as u64).div_ceil(alignment) * alignment;
            out.resize(data_offset as usize, 0);
            for (i, (t, rel)) in tensors.iter().zip(&relative).enumerate() {
                out.resize((data_offset + rel) as usize, 0);
                out.extend(std::iter::repeat_n(i as u8, t.bytes as usize));
            }
            out
        }

        /// Embeddings, 4 layers of 4 tensors, output norm and output, in
        /// the order convert_hf_to_gguf writes them.
        fn llama() -> Vec<u8> {
            let mut tensors = vec![t("token_embd.weight", &[256, 64], 8)];
            for layer in 0..4 {
                tensors.push(t(&format!("blk.{layer}.attn_norm.weight"), &[256], 0));
                tensors.push(t(&format!("blk.{layer}.attn_q.weight"), &[256, 256], 2));
                tensors.push(t(&format!("blk.{layer}.ffn_up.weight"), &[256, 64], 1));
                tensors.push(t(&format!("blk.{layer}.ffn_down.weight"), &[64, 256], 1));
            }
            tensors.push(t("output_norm.weight", &[256], 0));
            tensors.push(t("output.weight", &[256, 64], 8));
            let kvs = [
                ("general.architecture", Val::Str("llama")),
                ("general.alignment", Val::U32(32)),
                ("llama.block_count", Val::U32(4)),
            ];
            gguf(&kvs, &tensors, 32)
        }

        /// The model written to a temporary file (so that the plan is for a
        /// file the bench holds), its layout, and a bench holding it.
        fn model(config: TensorConfig) -> (Bench, ModelLayout, tempfile::NamedTempFile) {
            let bytes = llama();
            let mut file = tempfile::NamedTempFile::new().expect("temp file");
            file.write_all(&bytes).expect("write model");
            let layout = ModelLayout::read(file.as_file()).expect("parse the model");
            assert_eq!(layout.tensors.len(), 19);
            let mut bench = Bench::new(config);
            let held = FileRef::open(file.path()).expect("open model");
            bench.ids.insert(0, held.id());
            bench.held.files.insert(held);
            (bench, layout, file)
        }

        /// Storage bytes the threads named `name` (15 bytes at most) of
        /// this process read (`/proc/self/task/*/io`: `read_bytes`, I/O the
        /// thread submitted), summed.
        fn thread_read_bytes(name: &str) -> u64 {
            let mut sum = 0;
            for task in std::fs::read_dir("/proc/self/task").expect("tasks").flatten() {
                let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if comm.trim_end() != name {
                    continue;
                }
                let io = std::fs::read_to_string(task.path().join("io")).unwrap_or_default();
                sum += io
                    .lines()
                    .find_map(|l| l.strip_prefix("read_bytes:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
            }
            sum
        }

        /// Regression: the dispatcher read a model's header with blocking
        /// `pread`s (up to 64 MiB) as soon as its first page was cached, so
        /// a header on slow storage (or one a user made huge) stalled every
        /// event behind it. A 2 MiB header of which only the first page is
        /// cached: the dispatcher thread reads nothing from storage, the
        /// background reader does, and the layout still reaches the policy.
        #[test]
        fn the_dispatcher_never_reads_an_uncached_header_itself() {
            use std::os::fd::AsFd;
            let vocab: &'static str = Box::leak("t".repeat(2 << 20).into_boxed_str());
            let kvs = [
                ("general.architecture", Val::Str("llama")),
                ("general.alignment", Val::U32(32)),
                ("llama.block_count", Val::U32(1)),
                ("tokenizer.ggml.blob", Val::Str(vocab)),
            ];
            let tensors = vec![t("token_embd.weight", &[256, 64], 8), t("blk.0.attn_q.weight", &[256, 256], 2)];
            let dir = tempfile::tempdir_in("/var/tmp").expect("temp dir on disk");
            let path = dir.path().join("model.gguf");
            let mut out = std::fs::File::create(&path).expect("create");
            out.write_all(&gguf(&kvs, &tensors, 32)).expect("write");
            out.sync_all().expect("sync");
            drop(out);
            let file = FileRef::open(&path).expect("open"); // no readahead on its reads
            let len = file.file().metadata().expect("stat").len();
            crate::sys::fadvise(file.as_fd(), 0, 0, crate::sys::Advice::DontNeed).expect("evict");
            if crate::sys::cachestat(file.as_fd(), 0, len).expect("cachestat").nr_cache > 0 {
                crate::testing::skip("the model's pages cannot be evicted here (not on a block device?)");
                return;
            }
            use std::os::unix::fs::FileExt;
            file.file().read_at(&mut [0u8; 16], 0).expect("the loader reads the first bytes");
            let before = thread_read_bytes("predictio-dispa");
            let executor =
                std::sync::Arc::new(crate::Executor::new(crate::ExecutorConfig::default()).expect("executor"));
            let policy = TensorPolicy::new(TensorConfig::default()).expect("policy");
            let pipeline = crate::pipeline::Pipeline::start(executor, vec![Box::new(policy)], 64).expect("pipeline");
            let id = file.id();
            let access =
                Event::PageAccess { pid: 0, file: id, pages: PageRange::page(0), kind: AccessKind::Read, time_ns: 0 };
            pipeline.sender().send(access, Some(file.clone()));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while pipeline.stats().models_detected == 0 {
                assert!(std::time::Instant::now() < deadline, "the layout never came");
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let read = thread_read_bytes("predictio-dispa").saturating_sub(before);
            assert!(read < 64 << 10, "the dispatcher read {read} bytes of the header from storage");
            assert!(thread_read_bytes("predictio-model") > 1 << 20, "the background reader read the header");
        }

        /// 2-page pieces, 16 pages ahead, 24 in all.
        fn tiny() -> TensorConfig {
            TensorConfig {
                ahead_bytes: pg(16),
                max_outstanding_bytes: pg(24),
                piece_bytes: pg(2),
                max_files: 4,
                max_pieces_per_file: 1000,
                stale_after_events: 1000,
                stream: false,
            }
        }

        #[test]
        fn an_mmap_load_in_compute_order() {
            let (mut bench, layout, _file) = model(tiny());
            let plan = TensorPolicy::plan_from_layout(&layout, LoadOrder::Compute);
            assert_eq!(plan.len(), 19);
            assert_eq!(plan[1].1, Some(0), "blk.0 follows the embeddings");
            assert_eq!(plan[18].1, None, "the output comes last");
            // The adapter's event: ranges only.
            let ranges: Vec<ByteRange> = plan.iter().map(|(r, _)| *r).collect();
            let first = ranges_of(bench.feed(Event::TensorLayout { file: bench.ids[0], ranges: ranges.into() }));
            let data = PageRange::covering_bytes(layout.data_offset, layout.file_len - layout.data_offset);
            assert_eq!(first.len(), 1, "coalesced: {first:?}");
            assert_eq!(first[0].start, data.start);
            assert!((15..=17).contains(&first[0].len()), "16 pages ahead: {first:?}");
            // The loader faults its way through, a page at a time.
            let mut requested = first;
            for page in data.start..data.end {
                requested.extend(bench.access(0, PageRange::page(page), AccessKind::Fault));
                bench.check();
            }
            assert_eq!(pages_once(&requested), (data.start..data.end).collect(), "every tensor page, once");
            let stats = bench.policy.stats();
            assert_eq!(stats.bytes_requested, layout.tensor_bytes());
            assert_eq!((stats.outstanding_bytes, stats.overtaken_bytes), (0, 0));
        }

        #[test]
        fn a_read_load_in_llama_cpp_order_with_layer_starts() {
            let (mut bench, layout, _file) = model(tiny());
            let plan = TensorPolicy::plan_from_layout(&layout, LoadOrder::LlamaCppRead);
            let mut out = Vec::new();
            let mut ctx = PolicyContext::new(&bench.held.files, &mut out, PolicyId(5));
            assert!(bench.policy.set_layout(bench.ids[0], &plan, &mut ctx));
            let first = ranges_of(out);
            let find = |name: &str| layout.tensors.iter().find(|t| t.name == name).expect("tensor");
            let (embd, output) = (find("token_embd.weight"), find("output.weight"));
            // The embeddings, then the output at the end of the file, then
            // the first layer.
            assert_eq!(first[0].start, embd.offset / PAGE_SIZE);
            assert_eq!(first[1].start, find("output_norm.weight").offset / PAGE_SIZE);
            assert_eq!(first[1].end, output.end().div_ceil(PAGE_SIZE));
            let blk0 = find("blk.0.attn_norm.weight").offset / PAGE_SIZE;
            assert!(first[2].start.abs_diff(blk0) <= 1, "then layer 0: {first:?}");
            // The loader reads each tensor with one read(); a layer start
            // moves the window to that layer.
            let blk2 = find("blk.2.attn_norm.weight");
            let released = bench.layer(0, 2);
            assert_eq!(bench.policy.position(bench.ids[0]), Some(plan_position(&plan, blk2.offset)));
            assert!(released.iter().all(|r| r.end > blk2.offset / PAGE_SIZE), "{released:?}");
            let mut requested = first;
            requested.extend(released);
            for (range, _) in &plan {
                let hint = Event::StreamRead { file: bench.ids[0], offset: range.offset, len: range.len };
                requested.extend(ranges_of(bench.feed(hint)));
                bench.check();
            }
            pages_once(&requested);
            let stats = bench.policy.stats();
            assert_eq!(stats.layer_starts, 1);
            assert!(stats.overtaken_bytes > 0, "layers 0 and 1 were passed before all were requested");
            assert_eq!(stats.outstanding_bytes, 0);
        }

        /// The plan bytes before the tensor at `offset`.
        fn plan_position(plan: &[(ByteRange, Option<u32>)], offset: u64) -> u64 {
            plan.iter().take_while(|(r, _)| r.offset != offset).map(|(r, _)| r.len).sum()
        }
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        #[derive(Debug, Clone)]
        enum Op {
            Layout(usize, Vec<(u64, u64)>),
            Read(usize, u64, u64),
            Layer(usize, u32),
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                (0usize..3, proptest::collection::vec((0u64..400, 1u64..20), 1..12))
                    .prop_map(|(f, t)| Op::Layout(f, t)),
                (0usize..3, 0u64..450, 1u64..12).prop_map(|(f, p, n)| Op::Read(f, p, n)),
                (0usize..3, 0u32..6).prop_map(|(f, l)| Op::Layer(f, l)),
            ]
        }

        proptest! {
            /// Whatever the layouts and reads, the window and the budget
            /// hold, the books balance, and no page of one plan is asked
            /// for twice.
            #[test]
            fn bounds_hold(ops in proptest::collection::vec(op(), 1..150)) {
                let mut config = small();
                config.max_files = 2;
                let mut bench = Bench::new(config);
                let mut since_layout: Vec<Vec<PageRange>> = vec![Vec::new(); 3];
                for op in ops {
                    match op {
                        Op::Layout(file, tensors) => {
                            // Layers by position, so LayerStart has somewhere to go.
                            let tensors: Vec<(ByteRange, Option<u32>)> = tensors
                                .iter()
                                .enumerate()
                                .map(|(i, &(page, pages))| (ByteRange::new(pg(page), pg(pages)), Some(i as u32 / 2)))
                                .collect();
                            let mut out = Vec::new();
                            let mut ctx = PolicyContext::new(&bench.held.files, &mut out, PolicyId(5));
                            bench.policy.set_layout(bench.ids[file], &tensors, &mut ctx);
                            since_layout[file] = ranges_of(out);
                        }
                        Op::Read(file, page, len) => {
                            let again = bench.policy.stats().loads_again;
                            let released = bench.read(file, PageRange::new(page, page + len));
                            if bench.policy.stats().loads_again > again {
                                // A new load of the file: asked for anew.
                                since_layout[file] = released;
                            } else {
                                since_layout[file].extend(released);
                            }
                        }
                        Op::Layer(file, layer) => {
                            let released = bench.layer(file, layer);
                            since_layout[file].extend(released);
                        }
                    }
                    bench.check();
                    for ranges in &since_layout {
                        pages_once(ranges);
                    }
                }
            }
        }
    }
}
