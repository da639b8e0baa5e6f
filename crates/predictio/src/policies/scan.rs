//! `scan`: a storage engine's own iterator readahead, moved into a policy
//! (seed 000 §6.3). An engine adapter (the RocksDB one in
//! `predictio-rocksdb`) reports each key-range scan as [`Event::Scan`] steps:
//! the file stretches the scan reads if it runs to its upper bound, in scan
//! order ([`ScanStep::Segment`]), then how many of those bytes it has
//! consumed ([`ScanStep::Progress`], the first one with 0 says "go"), then
//! [`ScanStep::End`].
//!
//! The selectivity is RocksDB's: point reads never show up here (they are not
//! scans); a scan whose whole plan fits in [`ScanConfig::skip_below_bytes`]
//! gets nothing, because its first demand read brings all of it; a scan the
//! program bounded to at most [`ScanConfig::whole_below_bytes`] is fetched
//! whole at once (the bound says it will be read); any longer scan starts
//! with [`ScanConfig::initial_window_bytes`] ahead of the reader, and the
//! window doubles, up to [`ScanConfig::max_window_bytes`], each time the
//! reader gets into the second half of what was fetched — so a scan that
//! stops early wastes little and one that goes on is served at the device's
//! pace. Nothing is ever fetched past the scan's bound.
//!
//! Requests are [`Urgency::Imminent`] only for the bounded whole-plan case
//! and the window the reader is in; the policy keeps at most
//! [`ScanConfig::max_scans`] scans (the oldest is forgotten) and
//! [`ScanConfig::max_segments`] segments per scan (more are dropped and
//! counted). It never issues I/O, reads no data, never blocks and never
//! looks at the clock: the same events give the same requests.

use std::collections::{HashMap, VecDeque};

use crate::event::{Event, EventKind, EventKinds, ScanStep};
use crate::file::FileId;
use crate::page::{ByteRange, PageRange};
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// The `scan` policy's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanConfig {
    /// A scan whose plan is at most this many bytes gets nothing.
    pub skip_below_bytes: u64,
    /// A scan whose plan is at most this many bytes is fetched whole when it
    /// starts.
    pub whole_below_bytes: u64,
    /// Bytes fetched ahead of a longer scan when it starts.
    pub initial_window_bytes: u64,
    /// The largest window.
    pub max_window_bytes: u64,
    /// Scans tracked at once.
    pub max_scans: usize,
    /// Segments kept per scan.
    pub max_segments: usize,
}

impl Default for ScanConfig {
    /// Skip plans of up to two 4 KiB blocks (RocksDB itself starts reading
    /// ahead at a scan's third block read), fetch plans up to 256 KiB whole,
    /// start longer scans at 64 KiB and double up to 64 MiB; 1,024 scans of
    /// up to 4,096 segments.
    fn default() -> Self {
        Self {
            skip_below_bytes: 8192,
            whole_below_bytes: 256 << 10,
            initial_window_bytes: 64 << 10,
            max_window_bytes: 64 << 20,
            max_scans: 1024,
            max_segments: 4096,
        }
    }
}

/// Why a [`ScanConfig`] was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanConfigError {
    /// A bound is zero.
    #[error("scan: {0} must be at least 1")]
    Zero(&'static str),
    /// The initial window is above the largest one.
    #[error("scan: initial_window_bytes ({initial}) is above max_window_bytes ({max})")]
    InitialAboveMax {
        /// `initial_window_bytes`.
        initial: u64,
        /// `max_window_bytes`.
        max: u64,
    },
}

impl ScanConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), ScanConfigError> {
        let zero = [
            ("initial_window_bytes", self.initial_window_bytes == 0),
            ("max_window_bytes", self.max_window_bytes == 0),
            ("max_scans", self.max_scans == 0),
            ("max_segments", self.max_segments == 0),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
            return Err(ScanConfigError::Zero(name));
        }
        if self.initial_window_bytes > self.max_window_bytes {
            return Err(ScanConfigError::InitialAboveMax {
                initial: self.initial_window_bytes,
                max: self.max_window_bytes,
            });
        }
        Ok(())
    }
}

/// Counters of the `scan` policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ScanStats {
    /// Scans that started (got their first progress).
    pub scans: u64,
    /// Scans too short to be worth anything.
    pub skipped_short: u64,
    /// Scans fetched whole at their start.
    pub whole: u64,
    /// Bytes of plan requested.
    pub requested_bytes: u64,
    /// Segments dropped by the per-scan bound.
    pub dropped_segments: u64,
    /// Scans forgotten by the scan bound before they ended.
    pub evicted_scans: u64,
    /// Requests for files the runtime holds no descriptor for.
    pub no_descriptor: u64,
}

#[derive(Clone, Copy, Debug)]
struct Segment {
    file: FileId,
    range: ByteRange,
    backward: bool,
}

#[derive(Debug, Default)]
struct Scan {
    segments: Vec<Segment>,
    total: u64,
    started: bool,
    consumed: u64,
    issued_to: u64,
    window: u64,
}

/// The `scan` policy. See the module documentation.
#[derive(Debug, Default)]
pub struct ScanPolicy {
    config: ScanConfig,
    scans: HashMap<u64, Scan>,
    order: VecDeque<u64>,
    stats: ScanStats,
}

impl ScanPolicy {
    /// A policy with these settings.
    pub fn new(config: ScanConfig) -> Result<Self, ScanConfigError> {
        config.validate()?;
        Ok(Self { config, ..Self::default() })
    }

    /// The counters.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    fn scan_mut(&mut self, id: u64) -> &mut Scan {
        if !self.scans.contains_key(&id) {
            while self.scans.len() >= self.config.max_scans {
                let Some(old) = self.order.pop_front() else { break };
                if self.scans.remove(&old).is_some() {
                    self.stats.evicted_scans += 1;
                }
            }
            self.order.push_back(id);
        }
        self.scans.entry(id).or_default()
    }

    fn end(&mut self, id: u64) {
        if self.scans.remove(&id).is_some() {
            self.order.retain(|o| *o != id);
        }
    }
}

/// Emits the plan positions `[from, to)` of `scan` as page requests, one per
/// file stretch.
fn emit(scan: &Scan, from: u64, to: u64, ctx: &mut PolicyContext<'_>, stats: &mut ScanStats) {
    let mut at = 0u64;
    for seg in &scan.segments {
        let (lo, hi) = (at, at + seg.range.len);
        at = hi;
        let (a, b) = (from.max(lo), to.min(hi));
        if a >= b {
            continue;
        }
        let (skip, take) = (a - lo, b - a);
        let offset =
            if seg.backward { seg.range.offset + seg.range.len - skip - take } else { seg.range.offset + skip };
        let pages = PageRange::covering_bytes(offset, take);
        if ctx.request(seg.file, vec![pages], Urgency::Imminent) {
            stats.requested_bytes += take;
        } else {
            stats.no_descriptor += 1;
        }
        if at >= to {
            break;
        }
    }
}

impl Policy for ScanPolicy {
    fn name(&self) -> &str {
        "scan"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::Scan])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        let Event::Scan { scan: id, step } = *event else { return };
        match step {
            ScanStep::Segment { file, range, backward } => {
                let max_segments = self.config.max_segments;
                let scan = self.scan_mut(id);
                if scan.started || scan.segments.len() >= max_segments {
                    // Segments come before the scan starts; later ones, or
                    // too many, are not part of a plan we can follow.
                    self.stats.dropped_segments += 1;
                    return;
                }
                if range.len > 0 {
                    scan.segments.push(Segment { file, range, backward });
                    scan.total += range.len;
                }
            }
            ScanStep::Progress { consumed } => {
                let config = self.config.clone();
                let mut stats = self.stats;
                let scan = self.scan_mut(id);
                if !scan.started {
                    scan.started = true;
                    stats.scans += 1;
                    if scan.total <= config.skip_below_bytes {
                        stats.skipped_short += 1;
                        scan.issued_to = scan.total;
                    } else if scan.total <= config.whole_below_bytes {
                        stats.whole += 1;
                        scan.window = scan.total;
                    } else {
                        scan.window = config.initial_window_bytes;
                    }
                }
                scan.consumed = scan.consumed.max(consumed.min(scan.total));
                if scan.issued_to > 0 {
                    // Until the reader is into the second half of what was
                    // fetched, nothing more; once it is, the scan goes on,
                    // so the window grows and is topped up.
                    if scan.consumed + scan.window / 2 < scan.issued_to {
                        self.stats = stats;
                        return;
                    }
                    scan.window = (scan.window * 2).min(config.max_window_bytes);
                }
                let target = (scan.consumed + scan.window).min(scan.total);
                if target > scan.issued_to {
                    let from = scan.issued_to.max(scan.consumed);
                    emit(scan, from, target, ctx, &mut stats);
                    scan.issued_to = target;
                }
                self.stats = stats;
            }
            ScanStep::End => self.end(id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::FileTable;
    use crate::request::Request;

    fn held(ids: &[FileId]) -> (FileTable, Vec<tempfile::NamedTempFile>) {
        let mut table = FileTable::default();
        let mut keep = Vec::new();
        for _ in ids {
            let tmp = tempfile::NamedTempFile::new().expect("temp file");
            let file = crate::FileRef::open(tmp.path()).expect("open");
            table.insert(file);
            keep.push(tmp);
        }
        (table, keep)
    }

    fn run(policy: &mut ScanPolicy, files: &FileTable, events: &[Event]) -> Vec<Request> {
        let mut out = Vec::new();
        for e in events {
            let mut ctx = PolicyContext::new(files, &mut out, crate::policy::PolicyId(1));
            policy.on_event(e, &mut ctx);
        }
        out
    }

    fn bytes(reqs: &[Request]) -> u64 {
        reqs.iter().flat_map(|r| r.ranges.iter()).map(|p| p.byte_len()).sum()
    }

    fn setup() -> (FileTable, Vec<tempfile::NamedTempFile>, Vec<FileId>) {
        let (table, keep) = held(&[FileId { dev: 0, ino: 0 }, FileId { dev: 0, ino: 0 }]);
        let ids: Vec<FileId> = keep.iter().map(|t| crate::FileRef::open(t.path()).expect("open").id()).collect();
        (table, keep, ids)
    }

    fn seg(scan: u64, file: FileId, offset: u64, len: u64) -> Event {
        Event::Scan { scan, step: ScanStep::Segment { file, range: ByteRange::new(offset, len), backward: false } }
    }

    fn progress(scan: u64, consumed: u64) -> Event {
        Event::Scan { scan, step: ScanStep::Progress { consumed } }
    }

    #[test]
    fn a_scan_of_two_blocks_gets_nothing() {
        let (files, _keep, ids) = setup();
        let mut p = ScanPolicy::default();
        let reqs = run(&mut p, &files, &[seg(1, ids[0], 8192, 8000), progress(1, 0), progress(1, 8000)]);
        assert!(reqs.is_empty());
        assert_eq!(p.stats().skipped_short, 1);
    }

    #[test]
    fn a_bounded_short_scan_is_fetched_whole_across_files() {
        let (files, _keep, ids) = setup();
        let mut p = ScanPolicy::default();
        let reqs =
            run(&mut p, &files, &[seg(1, ids[0], 1 << 20, 20 << 10), seg(1, ids[1], 0, 12 << 10), progress(1, 0)]);
        assert_eq!(reqs.len(), 2);
        assert_eq!(reqs[0].ranges, vec![PageRange::new(256, 261)]);
        assert_eq!(reqs[1].ranges, vec![PageRange::new(0, 3)]);
        assert!(reqs.iter().all(|r| r.urgency == Urgency::Imminent));
        // Progress inside it asks for nothing more.
        assert!(run(&mut p, &files, &[progress(1, 30 << 10)]).is_empty());
    }

    #[test]
    fn a_long_scan_starts_small_grows_and_stops_at_its_bound() {
        let (files, _keep, ids) = setup();
        let mut p = ScanPolicy::default();
        let total = 256u64 << 20;
        let first = run(&mut p, &files, &[seg(7, ids[0], 0, total), progress(7, 0)]);
        assert_eq!(bytes(&first), 64 << 10);
        let mut issued = bytes(&first);
        let mut windows = Vec::new();
        let mut consumed = 0;
        while consumed < total {
            consumed += 64 << 10;
            let reqs = run(&mut p, &files, &[progress(7, consumed)]);
            issued += bytes(&reqs);
            windows.push(p.scans.get(&7).map(|s| s.window).unwrap_or(0));
        }
        assert_eq!(issued, total, "everything up to the bound, nothing past it");
        assert_eq!(windows.iter().copied().max(), Some(64 << 20));
        assert!(windows.windows(2).all(|w| w[0] <= w[1]), "the window only grows");
        run(&mut p, &files, &[Event::Scan { scan: 7, step: ScanStep::End }]);
        assert!(p.scans.is_empty());
    }

    #[test]
    fn a_backward_scan_fetches_from_the_end() {
        let (files, _keep, ids) = setup();
        let mut p = ScanPolicy::default();
        let range = ByteRange::new(0, 1 << 30);
        let reqs = run(
            &mut p,
            &files,
            &[Event::Scan { scan: 2, step: ScanStep::Segment { file: ids[0], range, backward: true } }, progress(2, 0)],
        );
        let end = (1u64 << 30) / 4096;
        assert_eq!(reqs[0].ranges, vec![PageRange::new(end - 16, end)]);
    }

    #[test]
    fn scans_are_bounded_and_bad_settings_refused() {
        let (files, _keep, ids) = setup();
        let mut p = ScanPolicy::new(ScanConfig { max_scans: 2, ..ScanConfig::default() }).expect("config");
        run(&mut p, &files, &[seg(1, ids[0], 0, 1 << 20), seg(2, ids[0], 0, 1 << 20), seg(3, ids[0], 0, 1 << 20)]);
        assert_eq!(p.scans.len(), 2);
        assert_eq!(p.stats().evicted_scans, 1);
        assert!(ScanPolicy::new(ScanConfig { max_scans: 0, ..ScanConfig::default() }).is_err());
        assert!(
            ScanPolicy::new(ScanConfig { initial_window_bytes: 2, max_window_bytes: 1, ..ScanConfig::default() })
                .is_err()
        );
    }
}
