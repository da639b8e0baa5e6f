//! Whether a profile's replay pays: each replayed launch is scored against
//! what its replay asked for, a profile keeps the scores of its last few
//! replays and the durations of its last few cold launches that ran
//! without a replay ([`Benefit`]), and a profile whose replay does not pay
//! is retired ([`RetireRule`]).
//!
//! A replayed page the launch accessed without reading it from storage
//! itself is *used*; one it read from storage itself anyway (a miss: the
//! replay came too late, or its page was evicted before use) is *late*;
//! one it never accessed is *wasted*. Each replayed page is exactly one of
//! the three. In shadow mode (nothing prefetched) a replayed page the
//! launch accessed, hit or missed, is used: it is what a replay would have
//! fetched for it. Seen through misses alone (kernels without the
//! page-access tracepoints) the pages a launch used from the cache go
//! unseen: only the late ones are known, and a profile is never retired on
//! its use. Pure: the daemon's learner feeds it the finished launch.

use serde::{Deserialize, Serialize};

use super::policy::Replay;
use super::recorder::{Recorder, normalized};
use crate::file::FileId;
use crate::page::PageRange;

/// Replays (and cold launches) a [`Benefit`] keeps, the latest.
pub const KEPT: usize = 8;

/// One replayed launch's score.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayScore {
    /// Pages the replay asked for.
    pub replayed: u64,
    /// Replayed pages the launch used (`None`: not known, misses only seen).
    pub used: Option<u64>,
    /// Replayed pages the launch never accessed (`None`: not known).
    pub wasted: Option<u64>,
    /// Replayed pages the launch still read from storage itself.
    pub late: u64,
    /// How long the launch's window lasted, ms ([`Recorder::window_ms`]).
    pub ms: u32,
}

/// The intersection of two sorted, merged range lists, in pages.
fn overlap(a: &[PageRange], b: &[PageRange]) -> u64 {
    let (mut i, mut j, mut pages) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        pages += a[i].intersect(&b[j]).len();
        if a[i].end <= b[j].end {
            i += 1;
        } else {
            j += 1;
        }
    }
    pages
}

/// The union of two sorted, merged range lists, sorted and merged (in one
/// pass: no sort).
fn union(a: &[PageRange], b: &[PageRange]) -> Vec<PageRange> {
    let mut out: Vec<PageRange> = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let next = if j >= b.len() || (i < a.len() && a[i].start <= b[j].start) {
            i += 1;
            a[i - 1]
        } else {
            j += 1;
            b[j - 1]
        };
        match out.last_mut() {
            Some(last) if next.start <= last.end => last.end = last.end.max(next.end),
            _ => out.push(next),
        }
    }
    out
}

/// Scores the launch `recorder` recorded against `replay`, the replay its
/// exec handed over (`shadow`: it was not issued). Works on file ids and
/// page ranges alone: nothing is named or opened.
pub fn score(recorder: &Recorder, replay: &Replay, shadow: bool) -> ReplayScore {
    // A file may be in the replay more than once (at exec and on a trigger).
    let mut by_file: Vec<(FileId, Vec<PageRange>)> = Vec::new();
    for f in replay.at_exec.iter().chain(replay.on_trigger.iter().flat_map(|t| t.1.iter())) {
        let id = f.identity.id();
        match by_file.iter_mut().find(|(i, _)| *i == id) {
            Some((_, ranges)) => ranges.extend_from_slice(&f.ranges),
            None => by_file.push((id, f.ranges.clone())),
        }
    }
    let misses_only = recorder.misses_only();
    let (mut replayed, mut seen, mut late) = (0, 0, 0);
    for (id, ranges) in by_file {
        let ranges = normalized(ranges);
        let (accessed, missed) = recorder.seen_in(id);
        let either = union(&accessed, &missed);
        replayed += ranges.iter().map(PageRange::len).sum::<u64>();
        seen += overlap(&ranges, &either);
        late += overlap(&ranges, &missed);
    }
    let used = if shadow { seen } else { seen - late };
    ReplayScore {
        replayed,
        used: (!misses_only).then_some(used),
        wasted: (!misses_only).then_some(replayed - seen),
        late,
        ms: recorder.window_ms().round().min(f64::from(u32::MAX)) as u32,
    }
}

/// Why and when a profile was retired.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retired {
    /// What its scores said.
    pub why: String,
    /// When, UNIX seconds.
    pub at_s: u64,
}

/// What a profile's replays gained, kept beside it in the store: bounded
/// (the last [`KEPT`] of each).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Benefit {
    /// The last replays' scores, oldest first.
    pub replays: Vec<ReplayScore>,
    /// Replays scored in all.
    pub scored: u64,
    /// How long the last launches that ran cold without a replay lasted,
    /// ms (those learned from: they read at least the learn floor from
    /// storage), oldest first.
    pub cold_ms: Vec<u32>,
    /// Set once the profile was retired: not replayed, not learned again,
    /// until it may come back ([`RetireRule::may_come_back`]).
    pub retired: Option<Retired>,
}

fn push_bounded<T>(v: &mut Vec<T>, item: T) {
    if v.len() >= KEPT {
        v.remove(0);
    }
    v.push(item);
}

fn median(values: impl Iterator<Item = u32>) -> Option<u32> {
    let mut v: Vec<u32> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { ((u64::from(v[n / 2 - 1]) + u64::from(v[n / 2])) / 2) as u32 })
}

impl Benefit {
    /// Adds a replayed launch's score.
    pub fn add_replay(&mut self, score: ReplayScore) {
        push_bounded(&mut self.replays, score);
        self.scored += 1;
    }

    /// Adds the duration of a cold launch that ran without a replay.
    pub fn add_cold(&mut self, ms: u32) {
        push_bounded(&mut self.cold_ms, ms);
    }

    /// Pages the kept replays asked for, and of those the used, wasted and
    /// late, summed over the replays whose use is known (`None` when no
    /// kept replay's is).
    fn sums(&self) -> (u64, Option<(u64, u64)>, u64) {
        let replayed: u64 = self.replays.iter().map(|r| r.replayed).sum();
        let late: u64 = self.replays.iter().map(|r| r.late).sum();
        let known: Vec<&ReplayScore> = self.replays.iter().filter(|r| r.used.is_some()).collect();
        let use_known = (!known.is_empty()).then(|| {
            let of = |f: fn(&ReplayScore) -> Option<u64>| known.iter().filter_map(|r| f(r)).sum::<u64>();
            (of(|r| r.used), of(|r| r.wasted))
        });
        (replayed, use_known, late)
    }

    /// The share of the kept replays' pages the launches used (`None`: not
    /// known, or nothing replayed).
    pub fn used_share(&self) -> Option<f64> {
        let known: u64 = self.replays.iter().filter(|r| r.used.is_some()).map(|r| r.replayed).sum();
        let (_, use_known, _) = self.sums();
        use_known.filter(|_| known > 0).map(|(used, _)| used as f64 / known as f64)
    }

    /// The share of the kept replays' pages the launches never accessed.
    pub fn wasted_share(&self) -> Option<f64> {
        let known: u64 = self.replays.iter().filter(|r| r.used.is_some()).map(|r| r.replayed).sum();
        let (_, use_known, _) = self.sums();
        use_known.filter(|_| known > 0).map(|(_, wasted)| wasted as f64 / known as f64)
    }

    /// The share of the kept replays' pages the launches still read from
    /// storage themselves.
    pub fn late_share(&self) -> Option<f64> {
        let (replayed, _, late) = self.sums();
        (replayed > 0).then(|| late as f64 / replayed as f64)
    }

    /// The median duration of the kept replayed launches, ms.
    pub fn median_replayed_ms(&self) -> Option<u32> {
        median(self.replays.iter().map(|r| r.ms))
    }

    /// The median duration of the kept cold launches without a replay, ms.
    pub fn median_cold_ms(&self) -> Option<u32> {
        median(self.cold_ms.iter().copied())
    }
}

/// When a profile does not pay (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RetireRule {
    /// Replays scored before the rule judges at all.
    pub min_replays: usize,
    /// The launches must have used at least this share of the replayed
    /// pages (0: never retired on use).
    pub min_used: f64,
    /// Judge by duration too: retired when the replayed launches' median
    /// duration is not below the cold launches' (off in shadow mode, where
    /// nothing was prefetched to make them faster).
    pub by_duration: bool,
    /// A retired profile may be learned and replayed again this long after
    /// it was retired, seconds (or sooner, once its executable changes: it
    /// is then a new profile).
    pub retire_for_s: u64,
}

impl Default for RetireRule {
    fn default() -> Self {
        Self { min_replays: 3, min_used: 0.10, by_duration: true, retire_for_s: 7 * 24 * 3600 }
    }
}

impl RetireRule {
    /// Why `benefit`'s profile should be retired, if it should.
    pub fn judge(&self, benefit: &Benefit) -> Option<String> {
        if benefit.replays.len() < self.min_replays.max(1) {
            return None;
        }
        if let Some(used) = benefit.used_share()
            && used < self.min_used
        {
            return Some(format!(
                "its launches used {:.1} % of the replayed pages (under {:.1} %)",
                used * 100.0,
                self.min_used * 100.0
            ));
        }
        if self.by_duration
            && let (Some(replayed), Some(cold)) = (benefit.median_replayed_ms(), benefit.median_cold_ms())
            && replayed >= cold
        {
            return Some(format!(
                "replayed launches took {replayed} ms (median), not less than the {cold} ms of its cold launches"
            ));
        }
        None
    }

    /// Whether a profile retired as `retired` may be learned and replayed
    /// again at `now_s` (UNIX seconds).
    pub fn may_come_back(&self, retired: &Retired, now_s: u64) -> bool {
        now_s.saturating_sub(retired.at_s) >= self.retire_for_s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{AccessKind, Event};
    use crate::launch::policy::ReplayFile;
    use crate::launch::profile::FileIdentity;
    use crate::launch::recorder::WindowLimits;

    fn file(ino: u64, ranges: Vec<PageRange>) -> ReplayFile {
        ReplayFile {
            identity: FileIdentity { path: format!("/f{ino}"), dev: 1, ino, size: 1 << 30, mtime_ns: 0 },
            ranges,
            first_touch_ms: 0.0,
            due_ms: Vec::new(),
        }
    }

    fn id(ino: u64) -> FileId {
        FileId { dev: 1, ino }
    }

    fn access(ino: u64, pages: PageRange) -> Event {
        Event::PageAccess { pid: 1, file: id(ino), pages, kind: AccessKind::Read, time_ns: 2_000_000 }
    }

    fn miss(ino: u64, page: u64) -> Event {
        Event::PageMiss { pid: 1, file: id(ino), pages: PageRange::page(page), time_ns: 2_000_000 }
    }

    /// A replay of pages 0..100 of file 1 and 0..10 of file 2 (file 2 also
    /// on a trigger, pages 5..20).
    fn replay() -> Replay {
        Replay {
            at_exec: vec![
                file(1, vec![PageRange::new(0, 50), PageRange::new(50, 100)]),
                file(2, vec![PageRange::new(0, 10)]),
            ],
            on_trigger: vec![(id(1), vec![file(2, vec![PageRange::new(5, 20)])])],
            ..Replay::default()
        }
    }

    fn recorded(events: &[Event], exit_ms: u64) -> Recorder {
        let mut r = Recorder::new(1, 0, WindowLimits::default());
        for e in events {
            r.on_event(e);
        }
        r.on_event(&Event::Exit { pid: 1, time_ns: exit_ms * 1_000_000 });
        r
    }

    #[test]
    fn each_replayed_page_is_used_late_or_wasted() {
        // File 1: pages 0..30 accessed from the cache, 30..40 read by the
        // launch itself (late), 200..210 accessed but never replayed. File
        // 2 (0..20 replayed once): 15..25 accessed, of which 18 missed.
        let mut events = vec![access(1, PageRange::new(0, 40)), access(1, PageRange::new(200, 210))];
        events.extend((30..40).map(|p| miss(1, p)));
        events.push(access(2, PageRange::new(15, 25)));
        events.push(miss(2, 18));
        events.push(miss(3, 0)); // a file the replay does not hold
        let s = score(&recorded(&events, 120), &replay(), false);
        assert_eq!(s.replayed, 120, "100 of file 1, 0..20 of file 2 counted once");
        assert_eq!(s.late, 11);
        assert_eq!(s.used, Some(30 + 4));
        assert_eq!(s.wasted, Some(60 + 15));
        assert_eq!(s.used.unwrap() + s.wasted.unwrap() + s.late, s.replayed);
        assert_eq!(s.ms, 120);
        // Shadow: nothing was prefetched, every accessed replayed page is
        // one a replay would have served.
        let shadow = score(&recorded(&events, 120), &replay(), true);
        assert_eq!((shadow.used, shadow.wasted, shadow.late), (Some(45), Some(75), 11));
    }

    #[test]
    fn seen_through_misses_alone_only_the_late_pages_are_known() {
        let events: Vec<Event> = (0..5).map(|p| miss(1, p)).chain([miss(9, 0)]).collect();
        let s = score(&recorded(&events, 50), &replay(), false);
        assert_eq!((s.used, s.wasted, s.late), (None, None, 5));
        let mut b = Benefit::default();
        for _ in 0..5 {
            b.add_replay(s);
        }
        assert_eq!(b.used_share(), None);
        assert!(b.late_share().is_some_and(|l| (l - 5.0 / 120.0).abs() < 1e-9));
        let rule = RetireRule { by_duration: false, ..RetireRule::default() };
        assert_eq!(rule.judge(&b), None, "never retired on a use it cannot see");
    }

    #[test]
    fn union_and_overlap_of_sorted_range_lists() {
        let r = |a, b| PageRange::new(a, b);
        let a = [r(0, 4), r(10, 12), r(20, 30)];
        let b = [r(2, 6), r(6, 8), r(12, 15), r(40, 41)];
        assert_eq!(union(&a, &b), [r(0, 8), r(10, 15), r(20, 30), r(40, 41)]);
        assert_eq!(union(&a, &[]), a);
        assert_eq!(overlap(&a, &b), 2);
        assert_eq!(overlap(&union(&a, &b), &[r(5, 25)]), 3 + 5 + 5);
    }

    fn scored(replayed: u64, used: u64, ms: u32) -> ReplayScore {
        ReplayScore { replayed, used: Some(used), wasted: Some(replayed - used), late: 0, ms }
    }

    #[test]
    fn a_benefit_keeps_the_last_replays_and_cold_runs() {
        let mut b = Benefit::default();
        for i in 0..20 {
            b.add_replay(scored(100, i, 10 + i as u32));
            b.add_cold(1000 + i as u32);
        }
        assert_eq!((b.replays.len(), b.cold_ms.len(), b.scored), (KEPT, KEPT, 20));
        assert_eq!(b.replays[0].used, Some(12), "the oldest kept");
        assert_eq!(b.median_replayed_ms(), Some(25), "22 to 29 ms kept");
        assert_eq!(b.median_cold_ms(), Some(1015));
        let used = (12..20).sum::<u64>() as f64 / 800.0;
        assert!(b.used_share().is_some_and(|u| (u - used).abs() < 1e-9));
        assert!(b.wasted_share().is_some_and(|w| (w - (1.0 - used)).abs() < 1e-9));
        let json = serde_json::to_string(&b).expect("serializes");
        assert_eq!(serde_json::from_str::<Benefit>(&json).expect("parses"), b);
    }

    #[test]
    fn a_profile_that_does_not_pay_is_retired() {
        let rule = RetireRule::default();
        let mut b = Benefit::default();
        b.add_cold(300);
        b.add_cold(320);
        for _ in 0..2 {
            b.add_replay(scored(1000, 5, 400));
        }
        assert_eq!(rule.judge(&b), None, "two replays: too few to judge");
        b.add_replay(scored(1000, 5, 400));
        let why = rule.judge(&b).expect("0.5 % used");
        assert!(why.contains("0.5 %") && why.contains("10.0 %"), "{why}");
        // Used, but slower than without: retired on duration.
        let mut slow = Benefit::default();
        slow.add_cold(300);
        for ms in [290, 330, 310] {
            slow.add_replay(scored(1000, 900, ms));
        }
        let why = rule.judge(&slow).expect("310 ms against 300");
        assert!(why.contains("310 ms") && why.contains("300 ms"), "{why}");
        assert_eq!(RetireRule { by_duration: false, ..rule }.judge(&slow), None, "shadow: no duration rule");
        // Used and faster: kept.
        let mut good = Benefit::default();
        good.add_cold(300);
        for ms in [120, 140, 400] {
            good.add_replay(scored(1000, 800, ms));
        }
        assert_eq!(rule.judge(&good), None);
        // No cold launch known: judged on use alone.
        let mut unknown = Benefit::default();
        for _ in 0..3 {
            unknown.add_replay(scored(1000, 800, 5000));
        }
        assert_eq!(rule.judge(&unknown), None);
        // It may come back after a while.
        let retired = Retired { why: "x".into(), at_s: 1000 };
        assert!(!rule.may_come_back(&retired, 1000 + 3600));
        assert!(rule.may_come_back(&retired, 1000 + rule.retire_for_s));
    }
}
