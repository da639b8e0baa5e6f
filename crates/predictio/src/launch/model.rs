//! A first-order Markov model over the pages of one file, learned from the
//! accesses of past launches (seed 000 §4.1).
//!
//! A node is an access: the first page of a run of pages the program touched
//! (with the longest run seen from there). An edge `a → b` counts how often
//! access `b` came right after access `a` in the same file. Runs are merged
//! with aging: before a run is added every weight is multiplied by
//! [`ModelLimits::decay`], so a launch that changed stops counting after a few
//! runs, and weights that fall below [`ModelLimits::min_weight`] are pruned.
//! The model is bounded ([`ModelLimits::max_nodes`]).
//!
//! [`PageModel::walk`] turns it into a prediction: starting from the pages a
//! launch started this file at, it follows transitions (each node once, so
//! loops and repeats are suppressed), keeps the nodes seen in enough of the
//! recent runs, and returns a sorted sparse page list. Runs that say when
//! each access happened ([`PageModel::merge_timed_run`]) also teach each
//! node when it is first needed (an aged mean, ms after exec); a walk whose
//! nodes all know it returns them in that order rather than the walk's
//! ([`PageModel::walk_timed`]). Pure data; no I/O.

use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use crate::page::PageRange;

/// Bounds and aging of a [`PageModel`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelLimits {
    /// Weight kept from earlier runs when a run is merged (0..=1).
    pub decay: f32,
    /// Weights below this are pruned after a merge.
    pub min_weight: f32,
    /// Nodes kept per file; beyond it the lightest are pruned.
    pub max_nodes: usize,
    /// Pages one node may cover (a long sequential read is cut).
    pub max_node_pages: u32,
}

impl Default for ModelLimits {
    fn default() -> Self {
        Self { decay: 0.7, min_weight: 0.1, max_nodes: 1 << 15, max_node_pages: 1 << 12 }
    }
}

/// Bounds of a [`PageModel::walk`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WalkLimits {
    /// A node is kept when its weight is at least this fraction of the
    /// (aged) number of runs: the share of recent launches that touched it.
    pub min_share: f32,
    /// A transition is followed when it carries at least this fraction of
    /// its node's outgoing weight.
    pub min_edge_share: f32,
    /// Pages returned per file at most.
    pub max_pages: u64,
    /// Neighbouring predicted ranges closer than this many pages are merged
    /// (reading a small gap costs less than a second I/O).
    pub merge_gap: u64,
    /// Pages per wave: the walk's pages, in the order it visits them (the
    /// order of expected first use), are cut into waves of about this many
    /// pages, each sorted and merged on its own (0: one wave, the whole
    /// file sorted). A replay hands the waves of all its files to the
    /// executor in order of when each is due
    /// ([`crate::launch::policy::wave_order`], by the pages before it), so
    /// that a large library's late pages do not hold up a small one's early
    /// ones.
    pub wave_pages: u64,
    /// A wave's ranges take in the pages of later waves that continue them
    /// (at most [`WalkLimits::merge_gap`] pages away) while the range stays
    /// within this many pages (0: never). Pages used in order of time are
    /// scattered over the waves, so a file several processes fault at once
    /// comes out as many small reads; on a device bound by reads a second
    /// rather than bytes, reading some pages a little early as one read
    /// fills it sooner. Larger: fewer reads, more pages read before they
    /// are due.
    pub coalesce_pages: u64,
}

impl Default for WalkLimits {
    fn default() -> Self {
        Self {
            min_share: 0.3,
            min_edge_share: 0.05,
            max_pages: 1 << 17,
            merge_gap: 4,
            wave_pages: 256,
            coalesce_pages: 64,
        }
    }
}

/// One node of the model: an access starting at a page.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    /// First page of the access.
    pub page: u64,
    /// Longest run of pages seen from it.
    pub pages: u32,
    /// Aged number of runs that touched it.
    pub weight: f32,
    /// When the runs that touched it first did, ms after exec: their mean,
    /// weighted like the runs (absent when no run said).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<f32>,
}

/// A walk's prediction for one file: page ranges in waves (in order of
/// expected first use, each wave sorted and merged), and when each range is
/// expected to be first needed, ms after exec — the earliest node of its
/// wave — when every node walked knew it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Walked {
    /// The ranges, wave after wave.
    pub ranges: Vec<PageRange>,
    /// Parallel to `ranges`, or empty (a node walked had no time).
    pub due_ms: Vec<f64>,
}

/// An edge: access `to` followed access `from`.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Edge {
    /// Page of the earlier access.
    pub from: u64,
    /// Page of the next access.
    pub to: u64,
    /// Aged count.
    pub weight: f32,
}

/// The per-file first-order Markov model (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PageModel {
    /// Aged number of runs merged.
    pub runs: f32,
    /// Where runs started in this file: page → aged count.
    pub starts: Vec<(u64, f32)>,
    /// Nodes, by page.
    pub nodes: Vec<Node>,
    /// Transitions, by `(from, to)`.
    pub edges: Vec<Edge>,
}

impl PageModel {
    /// Merges one launch's accesses of this file, in the order they happened.
    /// Accesses already covered earlier in the same run are skipped (they
    /// were hits; they say nothing about first use).
    pub fn merge_run(&mut self, accesses: &[PageRange], limits: &ModelLimits) {
        self.merge_timed_run(accesses, &[], limits);
    }

    /// [`PageModel::merge_run`] with when each access began, ms after exec
    /// (`at_ms`, parallel to `accesses`; shorter or empty: the rest are not
    /// known). Each node a timed access touches moves its
    /// [`Node::at_ms`] toward the time.
    pub fn merge_timed_run(&mut self, accesses: &[PageRange], at_ms: &[f32], limits: &ModelLimits) {
        let decay = limits.decay.clamp(0.0, 1.0);
        let mut nodes: BTreeMap<u64, Node> = self.nodes.iter().map(|n| (n.page, *n)).collect();
        let mut edges: HashMap<(u64, u64), f32> = self.edges.iter().map(|e| ((e.from, e.to), e.weight)).collect();
        let mut starts: BTreeMap<u64, f32> = self.starts.iter().copied().collect();
        for n in nodes.values_mut() {
            n.weight *= decay;
        }
        for w in edges.values_mut() {
            *w *= decay;
        }
        for w in starts.values_mut() {
            *w *= decay;
        }
        self.runs = self.runs * decay + 1.0;

        let mut seen = Covered::default();
        let mut touched_nodes: HashSet<u64> = HashSet::new();
        let mut previous: Option<u64> = None;
        for (i, access) in accesses.iter().enumerate() {
            let at = at_ms.get(i).copied().filter(|t| t.is_finite());
            let mut page = access.start;
            while page < access.end {
                let len = (access.end - page).min(u64::from(limits.max_node_pages.max(1)));
                let fresh = !seen.covers(page, page + len);
                if fresh {
                    seen.insert(page, page + len);
                    let node = nodes.entry(page).or_insert(Node { page, pages: 0, weight: 0.0, at_ms: None });
                    node.pages = node.pages.max(len as u32);
                    if touched_nodes.insert(page) {
                        let before = node.weight;
                        node.weight += 1.0;
                        if let Some(t) = at {
                            node.at_ms = Some(match node.at_ms {
                                Some(old) if before > 0.0 => (old * before + t) / node.weight,
                                _ => t,
                            });
                        }
                    }
                    match previous {
                        None => *starts.entry(page).or_insert(0.0) += 1.0,
                        Some(from) if from != page => *edges.entry((from, page)).or_insert(0.0) += 1.0,
                        Some(_) => {}
                    }
                    previous = Some(page);
                }
                page += len;
            }
        }

        let min = limits.min_weight;
        nodes.retain(|_, n| n.weight >= min);
        if nodes.len() > limits.max_nodes {
            let mut weights: Vec<f32> = nodes.values().map(|n| n.weight).collect();
            weights.sort_by(|a, b| b.total_cmp(a));
            let cut = weights[limits.max_nodes - 1];
            let mut kept = 0usize;
            nodes.retain(|_, n| {
                let keep = n.weight > cut || (n.weight == cut && kept < limits.max_nodes);
                if keep {
                    kept += 1;
                }
                keep && kept <= limits.max_nodes
            });
        }
        edges.retain(|(from, to), w| *w >= min && nodes.contains_key(from) && nodes.contains_key(to));
        starts.retain(|page, w| *w >= min && nodes.contains_key(page));

        self.nodes = nodes.into_values().collect();
        let mut edges: Vec<Edge> = edges.into_iter().map(|((from, to), weight)| Edge { from, to, weight }).collect();
        edges.sort_by_key(|e| (e.from, e.to));
        self.edges = edges;
        self.starts = starts.into_iter().collect();
    }

    /// Pages covered by the model's nodes.
    pub fn pages(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.pages)).sum()
    }

    /// The bounded walk: nodes reachable from the start pages through
    /// transitions, visited once each in order of expected first use
    /// (heaviest path first), kept when touched by at least
    /// [`WalkLimits::min_share`] of recent runs; returned in waves of
    /// [`WalkLimits::wave_pages`] pages in walk order, each wave's ranges
    /// sorted and merged.
    pub fn walk(&self, limits: &WalkLimits) -> Vec<PageRange> {
        self.walk_timed(limits).ranges
    }

    /// [`PageModel::walk`], and when each range is expected to be needed:
    /// when every node the walk keeps knows when runs first touched it
    /// ([`Node::at_ms`]), the nodes go in that order instead of the walk's
    /// (which only follows transitions, and for a file several processes
    /// read at once merges their streams: a traced Chromium reached pages
    /// of its binary at 57–250 ms that the walk put in waves 359–372 of
    /// 408), and [`Walked::due_ms`] says when.
    pub fn walk_timed(&self, limits: &WalkLimits) -> Walked {
        if self.runs <= 0.0 {
            return Walked::default();
        }
        let nodes: HashMap<u64, &Node> = self.nodes.iter().map(|n| (n.page, n)).collect();
        let mut out_edges: HashMap<u64, Vec<(u64, f32)>> = HashMap::new();
        for e in &self.edges {
            out_edges.entry(e.from).or_default().push((e.to, e.weight));
        }
        // Best-first: a node's priority is the probability of the most likely
        // path reaching it; ties go to the lower page.
        #[derive(PartialEq)]
        struct Item(f32, std::cmp::Reverse<u64>);
        impl Eq for Item {}
        impl PartialOrd for Item {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }
        impl Ord for Item {
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.0.total_cmp(&other.0).then(self.1.cmp(&other.1))
            }
        }
        let start_total: f32 = self.starts.iter().map(|s| s.1).sum();
        let mut heap: BinaryHeap<Item> = self
            .starts
            .iter()
            .map(|&(page, w)| Item(w / start_total.max(f32::MIN_POSITIVE), std::cmp::Reverse(page)))
            .collect();
        let mut visited: HashSet<u64> = HashSet::new();
        let mut taken: BTreeMap<u64, u64> = BTreeMap::new();
        let mut picked: Vec<(PageRange, Option<f32>)> = Vec::new();
        let mut total = 0u64;
        let min_weight = limits.min_share * self.runs;
        while let Some(Item(p, std::cmp::Reverse(page))) = heap.pop() {
            if !visited.insert(page) {
                continue;
            }
            let Some(node) = nodes.get(&page) else { continue };
            if node.weight >= min_weight {
                // Nodes' runs can overlap (a read from page 8 after a
                // fault-around block from page 0): each page once, where
                // the walk first reached it.
                for part in take_new(&mut taken, PageRange::new(page, page + u64::from(node.pages))) {
                    let len = part.len().min(limits.max_pages - total);
                    if len == 0 {
                        break;
                    }
                    picked.push((PageRange::new(part.start, part.start + len), node.at_ms));
                    total += len;
                }
                if total >= limits.max_pages {
                    break;
                }
            }
            if let Some(out) = out_edges.get(&page) {
                let sum: f32 = out.iter().map(|o| o.1).sum();
                for &(to, w) in out {
                    let share = w / sum.max(f32::MIN_POSITIVE);
                    if share >= limits.min_edge_share && !visited.contains(&to) {
                        // Never let a path's probability reach zero: a long
                        // chain still orders after a short one.
                        heap.push(Item((p * share).max(f32::MIN_POSITIVE), std::cmp::Reverse(to)));
                    }
                }
            }
        }
        waves(picked, limits)
    }
}

/// The parts of `range` not in `taken` (disjoint page intervals, start →
/// end), in order; adds `range` to `taken`.
fn take_new(taken: &mut BTreeMap<u64, u64>, range: PageRange) -> Vec<PageRange> {
    if range.is_empty() {
        return Vec::new();
    }
    // The intervals touching `range`: the last starting at or before it
    // (if it reaches it) and those starting inside it.
    let from =
        taken.range(..=range.start).next_back().filter(|(_, e)| **e >= range.start).map_or(range.start, |(s, _)| *s);
    let touching: Vec<(u64, u64)> = taken.range(from..range.end.saturating_add(1)).map(|(s, e)| (*s, *e)).collect();
    let mut parts = Vec::new();
    let mut at = range.start;
    for &(s, e) in &touching {
        if s > at {
            parts.push(PageRange::new(at, s.min(range.end)));
        }
        at = at.max(e);
        if at >= range.end {
            break;
        }
    }
    if at < range.end {
        parts.push(PageRange::new(at, range.end));
    }
    let lo = touching.first().map_or(range.start, |t| t.0.min(range.start));
    let hi = touching.last().map_or(range.end, |t| t.1.max(range.end));
    for (s, _) in &touching {
        taken.remove(s);
    }
    taken.insert(lo, hi);
    parts
}

/// Cuts `picked` (in walk order, each range with its node's time) into
/// consecutive waves of at least `wave_pages` pages (0: one wave), lets each
/// wave take in the later pages that continue its ranges
/// ([`WalkLimits::coalesce_pages`], see [`coalesce`]), and sorts and merges
/// each. When every range has a time they go in order of it first (ties
/// keep the walk's order), and each wave is due at its earliest.
fn waves(mut picked: Vec<(PageRange, Option<f32>)>, limits: &WalkLimits) -> Walked {
    let timed = !picked.is_empty() && picked.iter().all(|p| p.1.is_some());
    if timed {
        picked.sort_by(|a, b| a.1.unwrap_or(0.0).total_cmp(&b.1.unwrap_or(0.0)));
    }
    let ranges: Vec<PageRange> = picked.iter().map(|p| p.0).collect();
    let mut cut: Vec<Vec<PageRange>> = Vec::new();
    let mut due: Vec<f64> = Vec::new();
    let mut rest = ranges.as_slice();
    while !rest.is_empty() {
        let first = ranges.len() - rest.len();
        cut.push(next_wave(&mut rest, limits.wave_pages).to_vec());
        due.push(f64::from(picked[first].1.unwrap_or(0.0)));
    }
    if limits.coalesce_pages > 0 {
        coalesce(&mut cut, limits.merge_gap, limits.coalesce_pages);
    }
    let mut out = Walked { ranges: Vec::with_capacity(ranges.len()), due_ms: Vec::new() };
    // A wave's merged ranges can bridge a gap holding pages of a later wave:
    // each page goes with the first wave that reads it.
    let mut taken: BTreeMap<u64, u64> = BTreeMap::new();
    for (wave, due) in cut.into_iter().zip(due) {
        let wave: Vec<PageRange> =
            sorted_sparse(wave, limits.merge_gap).into_iter().flat_map(|r| take_new(&mut taken, r)).collect();
        if timed {
            out.due_ms.extend(std::iter::repeat_n(due, wave.len()));
        }
        out.ranges.extend(wave);
    }
    out
}

/// Moves into each wave, in order, the ranges of later waves that continue
/// one of its (sorted, merged) ranges — starting or ending at most `gap`
/// pages from it — as long as the grown range is at most `max_pages` long
/// (a wave can be left empty). The ranges must be disjoint (the walk takes each
/// page once). No page is added but the gaps bridged: the pages are the
/// same, some read earlier, in fewer and larger reads.
fn coalesce(waves: &mut [Vec<PageRange>], gap: u64, max_pages: u64) {
    // The ranges no earlier wave has taken: start → (end, wave).
    let mut rest: BTreeMap<u64, (u64, usize)> = BTreeMap::new();
    for (w, wave) in waves.iter().enumerate() {
        for r in wave {
            rest.insert(r.start, (r.end, w));
        }
    }
    for (w, wave) in waves.iter_mut().enumerate() {
        let own: Vec<PageRange> =
            std::mem::take(wave).into_iter().filter(|r| rest.get(&r.start) == Some(&(r.end, w))).collect();
        for r in &own {
            rest.remove(&r.start);
        }
        let mut grown = sorted_sparse(own, gap);
        for i in 0..grown.len() {
            // Grown up to its neighbours at most: the wave's ranges stay disjoint.
            let low = if i > 0 { grown[i - 1].end } else { 0 };
            let high = grown.get(i + 1).map_or(u64::MAX, |r| r.start);
            let mut range = grown[i];
            loop {
                let next = rest.range(range.end..).next().map(|(s, e)| (*s, e.0));
                if let Some((start, end)) = next
                    && start <= range.end.saturating_add(gap)
                    && end <= high
                    && end - range.start <= max_pages
                {
                    rest.remove(&start);
                    range.end = end;
                    continue;
                }
                let before = rest.range(..range.start).next_back().map(|(s, e)| (*s, e.0));
                if let Some((start, end)) = before
                    && end.saturating_add(gap) >= range.start
                    && start >= low
                    && range.end - start <= max_pages
                {
                    rest.remove(&start);
                    range.start = start;
                    continue;
                }
                break;
            }
            grown[i] = range;
        }
        // Later pieces inside a bridged gap are read with the range that
        // spans them. They end inside it too: a gap is bridged only between
        // two of the range's pieces, and growth takes the nearest piece.
        for range in &grown {
            let inside: Vec<(u64, u64)> = rest.range(range.start..range.end).map(|(s, (e, _))| (*s, *e)).collect();
            for (start, end) in inside {
                debug_assert!(end <= range.end, "piece {start}..{end} past {range:?}");
                rest.remove(&start);
            }
        }
        *wave = grown;
    }
}

/// Takes the next wave off the front of `ranges`: the shortest prefix of at
/// least `wave_pages` pages (all of them when 0 or fewer are left).
pub(crate) fn next_wave<'a>(ranges: &mut &'a [PageRange], wave_pages: u64) -> &'a [PageRange] {
    let mut pages = 0;
    let mut end = ranges.len();
    if wave_pages > 0 {
        for (i, r) in ranges.iter().enumerate() {
            pages += r.len();
            if pages >= wave_pages {
                end = i + 1;
                break;
            }
        }
    }
    let (wave, rest) = ranges.split_at(end);
    *ranges = rest;
    wave
}

/// Sorts ranges by page and merges those that overlap or are at most `gap`
/// pages apart.
pub fn sorted_sparse(mut ranges: Vec<PageRange>, gap: u64) -> Vec<PageRange> {
    ranges.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<PageRange> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end.saturating_add(gap) => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Pages seen so far in one run, as disjoint ranges (start → end): a run's
/// accesses are mostly runs of pages, and a model load or a scan within a
/// launch window touches hundreds of thousands of pages, which a set of
/// pages would hash one by one.
#[derive(Debug, Default)]
struct Covered(BTreeMap<u64, u64>);

impl Covered {
    /// Whether every page of `[start, end)` was seen.
    fn covers(&self, start: u64, end: u64) -> bool {
        self.0.range(..=start).next_back().is_some_and(|(_, &e)| e >= end)
    }

    /// Marks `[start, end)` seen, merged with the ranges it touches.
    fn insert(&mut self, mut start: u64, mut end: u64) {
        if let Some((&s, &e)) = self.0.range(..=start).next_back()
            && e >= start
        {
            start = s;
            end = end.max(e);
        }
        while let Some((&s, &e)) = self.0.range(start..=end).next() {
            end = end.max(e);
            self.0.remove(&s);
        }
        self.0.insert(start, end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_ranges_merge_and_answer_for_every_page() {
        let mut seen = Covered::default();
        seen.insert(10, 20);
        seen.insert(30, 40);
        assert!(seen.covers(10, 20) && seen.covers(12, 15) && seen.covers(30, 40));
        assert!(!seen.covers(9, 12) && !seen.covers(15, 31) && !seen.covers(20, 21) && !seen.covers(0, 1));
        seen.insert(20, 30);
        assert!(seen.covers(10, 40));
        assert_eq!(seen.0.len(), 1);
        seen.insert(5, 45);
        seen.insert(50, 51);
        seen.insert(44, 50);
        assert_eq!(seen.0.iter().map(|(&s, &e)| (s, e)).collect::<Vec<_>>(), vec![(5, 51)]);
    }

    fn r(start: u64, end: u64) -> PageRange {
        PageRange::new(start, end)
    }

    #[test]
    fn one_run_walks_back_to_its_pages_sorted() {
        let mut m = PageModel::default();
        m.merge_run(&[r(100, 101), r(5, 7), r(50, 51), r(5, 6), r(200, 204)], &ModelLimits::default());
        assert_eq!(m.nodes.len(), 4, "the repeated page 5 is no new node");
        assert_eq!(m.starts, vec![(100, 1.0)]);
        let walk = m.walk(&WalkLimits { merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(walk, vec![r(5, 7), r(50, 51), r(100, 101), r(200, 204)]);
    }

    #[test]
    fn pages_of_one_old_run_age_out() {
        let limits = ModelLimits::default();
        let mut m = PageModel::default();
        m.merge_run(&[r(0, 1), r(900, 901)], &limits);
        for _ in 0..8 {
            m.merge_run(&[r(0, 1), r(10, 11)], &limits);
        }
        let walk = m.walk(&WalkLimits { merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(walk, vec![r(0, 1), r(10, 11)], "page 900, seen once long ago, is no longer predicted");
        assert!(m.nodes.iter().all(|n| n.page != 900), "and it was pruned from the model");
    }

    #[test]
    fn rare_branch_is_left_out_common_ones_kept() {
        let limits = ModelLimits { decay: 1.0, ..ModelLimits::default() };
        let mut m = PageModel::default();
        for i in 0..10 {
            let branch = if i == 0 { r(777, 778) } else { r(20, 21) };
            m.merge_run(&[r(0, 1), branch, r(30, 31)], &limits);
        }
        let walk = m.walk(&WalkLimits { merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(walk, vec![r(0, 1), r(20, 21), r(30, 31)]);
    }

    #[test]
    fn walk_returns_waves_in_order_of_first_use_each_sorted() {
        // A launch that reads a file backwards, one page every ten.
        let mut m = PageModel::default();
        let run: Vec<PageRange> = (0..6u64).rev().map(|i| r(i * 10, i * 10 + 1)).collect();
        m.merge_run(&run, &ModelLimits::default());
        let walk = |wave_pages| m.walk(&WalkLimits { merge_gap: 0, wave_pages, ..WalkLimits::default() });
        let starts = |v: Vec<PageRange>| v.iter().map(|r| r.start).collect::<Vec<_>>();
        assert_eq!(starts(walk(2)), vec![40, 50, 20, 30, 0, 10], "the first pages used come first");
        assert_eq!(starts(walk(0)), vec![0, 10, 20, 30, 40, 50], "one wave: sorted");
    }

    #[test]
    fn timed_runs_order_the_walk_by_when_pages_are_needed() {
        // Two processes reading one file at once: the file's stream
        // alternates between them, and the walk's transitions follow
        // neither. The times say which page comes when.
        let limits = ModelLimits::default();
        let run = [r(0, 1), r(900, 901), r(10, 11), r(500, 501), r(20, 21)];
        let at = [1.0, 50.0, 2.0, 60.0, 3.0];
        let mut m = PageModel::default();
        m.merge_timed_run(&run, &at, &limits);
        let walk = WalkLimits { merge_gap: 0, wave_pages: 1, ..WalkLimits::default() };
        let starts = |v: &[PageRange]| v.iter().map(|r| r.start).collect::<Vec<_>>();
        let mut untimed = PageModel::default();
        untimed.merge_run(&run, &limits);
        assert_eq!(starts(&untimed.walk(&walk)), vec![0, 900, 10, 500, 20], "the transitions' order");
        assert!(untimed.walk_timed(&walk).due_ms.is_empty());
        let timed = m.walk_timed(&walk);
        assert_eq!(starts(&timed.ranges), vec![0, 10, 20, 900, 500], "by time, not by transitions");
        assert_eq!(timed.due_ms, vec![1.0, 2.0, 3.0, 50.0, 60.0]);
        // Waves of two pages: each wave sorted, due at its earliest node.
        let two = m.walk_timed(&WalkLimits { wave_pages: 2, ..walk });
        assert_eq!(starts(&two.ranges), vec![0, 10, 20, 900, 500]);
        assert_eq!(two.due_ms, vec![1.0, 1.0, 3.0, 3.0, 60.0]);

        // A second run, later for page 900: the time is the runs' mean,
        // the older run aged like its weight.
        m.merge_timed_run(&[r(0, 1), r(900, 901)], &[1.0, 100.0], &limits);
        let node = *m.nodes.iter().find(|n| n.page == 900).unwrap();
        let expected = (50.0 * 0.7 + 100.0) / 1.7;
        assert!((node.at_ms.unwrap() - expected).abs() < 1e-3, "{:?} against {expected}", node.at_ms);

        // A run that says nothing of time leaves the times it has, and a
        // node no run timed leaves the whole file in the walk's order.
        m.merge_run(&[r(0, 1), r(700, 701)], &limits);
        assert_eq!(m.nodes.iter().find(|n| n.page == 900).unwrap().at_ms, Some(node.at_ms.unwrap()));
        let untimed = m.walk_timed(&walk);
        assert!(untimed.due_ms.is_empty());
        assert_eq!(untimed.ranges, m.walk(&walk));
    }

    #[test]
    fn overlapping_runs_are_walked_once_each_page() {
        // A fault-around block from page 0, then a read from page 8 to 24,
        // then page 4 alone: waves of one access each.
        let mut m = PageModel::default();
        m.merge_run(&[r(0, 16), r(8, 24), r(4, 5), r(30, 31)], &ModelLimits::default());
        let each = WalkLimits { merge_gap: 0, wave_pages: 1, coalesce_pages: 0, ..WalkLimits::default() };
        let walk = m.walk(&each);
        assert_eq!(walk, vec![r(0, 16), r(16, 24), r(30, 31)], "pages 8..16 and 4 were already walked");
        let bounded = m.walk(&WalkLimits { max_pages: 20, ..each });
        assert_eq!(bounded.iter().map(PageRange::len).sum::<u64>(), 20, "the bound counts pages, not repeats");
    }

    #[test]
    fn waves_take_in_the_later_pages_that_continue_their_ranges() {
        let waves = |cut: &[&[PageRange]], gap, max| {
            let mut cut: Vec<Vec<PageRange>> = cut.iter().map(|w| w.to_vec()).collect();
            coalesce(&mut cut, gap, max);
            cut
        };
        let cut: &[&[PageRange]] = &[&[r(10, 12), r(0, 2)], &[r(2, 4), r(50, 52)], &[r(4, 6)], &[r(8, 10)]];
        assert_eq!(
            waves(cut, 0, 64),
            vec![vec![r(0, 6), r(8, 12)], vec![r(50, 52)], vec![], vec![]],
            "forwards and backwards, through ranges taken in between"
        );
        assert_eq!(
            waves(cut, 0, 4),
            vec![vec![r(0, 4), r(8, 12)], vec![r(50, 52)], vec![r(4, 6)], vec![]],
            "no grown range longer than the bound"
        );
        assert_eq!(
            waves(&[&[r(0, 2)], &[r(5, 6)], &[r(9, 10)]], 3, 64),
            vec![vec![r(0, 10)], vec![], vec![]],
            "gaps up to the merge gap bridged"
        );
        assert_eq!(waves(&[&[r(0, 2)], &[r(6, 7)]], 3, 64), vec![vec![r(0, 2)], vec![r(6, 7)]], "wider ones not");
        assert_eq!(waves(&[&[r(0, 100)], &[r(100, 101)]], 0, 64), vec![vec![r(0, 100)], vec![r(100, 101)]]);
        assert_eq!(waves(&[&[r(5, 6)], &[r(0, 2)]], 0, 64), vec![vec![r(5, 6)], vec![r(0, 2)]], "not adjacent");
        assert_eq!(
            waves(&[&[r(0, 2), r(5, 6)], &[r(3, 4), r(6, 7)]], 2, 64),
            vec![vec![r(0, 4), r(5, 7)], vec![]],
            "a range grows up to the wave's next one, not over it"
        );

        // Through the walk: the pages stay the same, fewer ranges, each
        // wave due at its own earliest.
        let mut m = PageModel::default();
        let run = [r(0, 2), r(100, 101), r(2, 4), r(200, 201), r(4, 6)];
        m.merge_timed_run(&run, &[1.0, 2.0, 3.0, 4.0, 5.0], &ModelLimits::default());
        let each = WalkLimits { merge_gap: 0, wave_pages: 1, ..WalkLimits::default() };
        let walked = m.walk_timed(&each);
        assert_eq!(walked.ranges, vec![r(0, 6), r(100, 101), r(200, 201)]);
        assert_eq!(walked.due_ms, vec![1.0, 2.0, 4.0]);
        let apart = m.walk_timed(&WalkLimits { coalesce_pages: 0, ..each });
        assert_eq!(apart.ranges, run.to_vec());
        assert_eq!(apart.due_ms, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn coalescing_moves_pages_only_earlier_and_adds_only_bridged_gaps() {
        let mut rng = crate::testing::Rng(0x5EED_C0A1_E5CE_0001);
        for _ in 0..300 {
            // Disjoint ranges over 0..2000, dealt to waves at random.
            let mut ranges = Vec::new();
            let mut at = rng.below(5u64);
            while at < 2000 {
                let len = 1 + rng.below(8u64);
                ranges.push(r(at, at + len));
                at += len + rng.below(6u64);
            }
            let nwaves = 1 + rng.below(12usize);
            let mut cut = vec![Vec::new(); nwaves];
            let mut wave_of = HashMap::new();
            for range in &ranges {
                let w = rng.below(nwaves);
                cut[w].push(*range);
                for page in range.start..range.end {
                    wave_of.insert(page, w);
                }
            }
            let (gap, max) = (rng.below(6u64), 1 + rng.below(100u64));

            let mut seen = HashSet::new();
            for (w, wave) in cut.iter().enumerate() {
                assert!(wave.windows(2).all(|p| p[0].end <= p[1].start), "wave {w}: {wave:?} not sorted and disjoint");
                for range in wave {
                    let mut later = false;
                    for page in range.start..range.end {
                        // A wave's own pieces, merged, may span an earlier
                        // wave's (`waves` reads each page once, below).
                        let first = seen.insert(page);
                        match wave_of.get(&page) {
                            Some(&from) => {
                                assert!(!first || from >= w, "page {page} moved later");
                                later |= from > w;
                            }
                            None => {
                                // A bridged gap: original pages within `gap` on both sides, in this range.
                                let before = (range.start..page).rev().take_while(|p| !wave_of.contains_key(p)).count();
                                let after = (page..range.end).take_while(|p| !wave_of.contains_key(p)).count();
                                assert!(before + after <= usize::try_from(gap).unwrap_or(usize::MAX));
                                assert!(page > range.start && page < range.end - 1);
                            }
                        }
                    }
                    // Grown past its own pages only within the bound (a
                    // wave's own pieces, merged, may be longer).
                    let own: Vec<u64> = (range.start..range.end).filter(|p| wave_of.get(p) == Some(&w)).collect();
                    let outside = |p: u64| own.first().is_none_or(|&lo| p < lo) || own.last().is_none_or(|&hi| p > hi);
                    let grown = later && (range.start..range.end).any(|p| wave_of.contains_key(&p) && outside(p));
                    assert!(!grown || range.len() <= max, "{range:?} took in later pages past {max}");
                }
            }
            assert!(wave_of.keys().all(|p| seen.contains(p)), "every page kept");

            // Through `waves`, each wave sorted and merged again: still each page once.
            let picked: Vec<(PageRange, Option<f32>)> =
                ranges.iter().map(|r| (*r, Some(wave_of[&r.start] as f32))).collect();
            let limits = WalkLimits {
                merge_gap: gap,
                wave_pages: 1 + rng.below(40u64),
                coalesce_pages: max,
                ..WalkLimits::default()
            };
            let walked = waves(picked, &limits);
            let mut seen = HashSet::new();
            for range in &walked.ranges {
                assert!((range.start..range.end).all(|p| seen.insert(p)), "{range:?} read twice");
            }
            assert!(wave_of.keys().all(|p| seen.contains(p)), "every page kept");
            assert_eq!(walked.due_ms.len(), walked.ranges.len());
            assert!(walked.due_ms.windows(2).all(|d| d[0] <= d[1]), "waves in order of time");
        }
    }

    #[test]
    fn take_new_leaves_out_what_was_taken() {
        let mut taken = BTreeMap::new();
        assert_eq!(take_new(&mut taken, r(10, 20)), vec![r(10, 20)]);
        assert_eq!(take_new(&mut taken, r(30, 40)), vec![r(30, 40)]);
        assert_eq!(take_new(&mut taken, r(5, 45)), vec![r(5, 10), r(20, 30), r(40, 45)]);
        assert_eq!(taken.into_iter().collect::<Vec<_>>(), vec![(5, 45)]);
        let mut taken = BTreeMap::new();
        take_new(&mut taken, r(0, 4));
        assert_eq!(take_new(&mut taken, r(4, 8)), vec![r(4, 8)], "adjacent: nothing repeated");
        assert_eq!(take_new(&mut taken, r(2, 6)), Vec::<PageRange>::new());
        assert_eq!(take_new(&mut taken, r(9, 9)), Vec::<PageRange>::new());
        assert_eq!(taken.into_iter().collect::<Vec<_>>(), vec![(0, 8)]);
    }

    #[test]
    fn walk_is_bounded_and_loops_do_not_repeat() {
        let mut m = PageModel::default();
        let mut run = Vec::new();
        for i in 0..1000u64 {
            run.push(r(i * 10, i * 10 + 1));
            run.push(r(0, 1)); // back to page 0 after every access: a loop
        }
        m.merge_run(&run, &ModelLimits::default());
        let all = m.walk(&WalkLimits { merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(all.len(), 1000);
        let bounded = m.walk(&WalkLimits { max_pages: 10, merge_gap: 0, ..WalkLimits::default() });
        assert_eq!(bounded.iter().map(PageRange::len).sum::<u64>(), 10);
    }

    #[test]
    fn model_size_is_bounded() {
        let limits = ModelLimits { max_nodes: 64, ..ModelLimits::default() };
        let mut m = PageModel::default();
        let run: Vec<PageRange> = (0..1000).map(|i| r(i * 3, i * 3 + 1)).collect();
        m.merge_run(&run, &limits);
        assert!(m.nodes.len() <= 64, "{} nodes", m.nodes.len());
        assert!(m.edges.iter().all(|e| m.nodes.iter().any(|n| n.page == e.from)));
    }

    #[test]
    fn long_access_is_cut_into_bounded_nodes_and_merge_gap_joins() {
        let limits = ModelLimits { max_node_pages: 16, ..ModelLimits::default() };
        let mut m = PageModel::default();
        m.merge_run(&[r(0, 40), r(42, 43)], &limits);
        assert_eq!(m.nodes.iter().map(|n| n.page).collect::<Vec<_>>(), vec![0, 16, 32, 42]);
        assert_eq!(m.walk(&WalkLimits::default()), vec![r(0, 43)]);
        assert_eq!(m.walk(&WalkLimits { merge_gap: 0, ..WalkLimits::default() }), vec![r(0, 40), r(42, 43)]);
    }
}
