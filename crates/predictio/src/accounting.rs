//! Accounting: what was asked, skipped, issued, dropped, and later hit or
//! wasted — per origin (policy) and per file.
//!
//! Counters are updated once per request with the request's deltas, so the
//! cost does not grow with the number of pages. Hit and waste accounting needs
//! someone to report accesses and evictions (kernel observation); it is off
//! until enabled, and costs nothing then.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use crate::file::{FileId, IdMap};
use crate::page::PageRange;
use crate::policy::PolicyId;

macro_rules! counters {
    ($($(#[$doc:meta])* $field:ident),* $(,)?) => {
        /// A set of counters (a snapshot, or the deltas of one request).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub struct Counters {
            $($(#[$doc])* pub $field: u64,)*
        }

        /// [`Counters`] that many threads may add to.
        #[derive(Debug, Default)]
        pub struct AtomicCounters {
            $($field: AtomicU64,)*
        }

        impl AtomicCounters {
            /// Adds every non-zero field of `delta`.
            pub fn add(&self, delta: &Counters) {
                $(if delta.$field != 0 { self.$field.fetch_add(delta.$field, Ordering::Relaxed); })*
            }

            /// The current values.
            pub fn snapshot(&self) -> Counters {
                Counters { $($field: self.$field.load(Ordering::Relaxed),)* }
            }
        }

        impl Counters {
            /// Adds `delta` field by field.
            pub fn add(&mut self, delta: &Counters) {
                $(self.$field += delta.$field;)*
            }
        }
    };
}

counters! {
    /// Requests accepted by `submit`.
    requests,
    /// Pages asked for (after validation).
    requested_pages,
    /// Pages asked for past the end of the file.
    beyond_eof_pages,
    /// Pages in holes of sparse files (nothing to read).
    hole_pages,
    /// Pages already resident: skipped, no I/O.
    skipped_resident_pages,
    /// Pages already being read by the executor: skipped.
    skipped_inflight_pages,
    /// Pages issued for reading.
    issued_pages,
    /// Bytes issued for reading.
    issued_bytes,
    /// I/O operations issued (after coalescing).
    issued_ios,
    /// Pages whose read finished (asynchronous backends) or was handed to the
    /// kernel (synchronous ones).
    completed_pages,
    /// Requests dropped whole: queue full, or memory pressure.
    dropped_requests,
    /// Pages dropped: queue full, too many per request, memory pressure.
    dropped_pages,
    /// Of `dropped_pages`, those shed because of memory pressure.
    pressure_dropped_pages,
    /// Of `pressure_dropped_pages`, those cut off a speculative request
    /// larger than its share of the memory headroom (the rest of it was
    /// issued).
    pressure_clamped_pages,
    /// Requests refused as nonsense by `submit`.
    rejected_requests,
    /// Failed syscalls or reads.
    errors,
    /// Prefetched pages later accessed while resident.
    hit_pages,
    /// Prefetched pages evicted or timed out before any access.
    wasted_pages,
    /// Directories named by metadata requests.
    meta_dirs_requested,
    /// Directories a metadata thread listed.
    meta_dirs_listed,
    /// Of `meta_dirs_requested`, those dropped: the metadata queue was full.
    meta_dirs_dropped,
    /// Directory entries the metadata threads read.
    meta_entries,
    /// Names the metadata threads looked up (`fstatat` in a held directory,
    /// repeating a launch's own lookups).
    meta_lookups,
    /// Names of metadata requests dropped: the metadata queue was full.
    meta_lookups_dropped,
    /// Times the executor found the oldest unsettled I/O still in flight
    /// and waited before issuing more (`Limits::max_unsettled_pages`).
    paced_waits,
}

/// Counters of one origin, by name.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OriginStats {
    /// The origin's id.
    pub id: PolicyId,
    /// Its name (a policy name, `cli`, …).
    pub name: String,
    /// Its counters.
    pub counters: Counters,
}

/// Counters of one file.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileStats {
    /// The file.
    pub file: FileId,
    /// Its counters.
    pub counters: Counters,
}

/// A snapshot of all accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    /// All origins together.
    pub total: Counters,
    /// Per origin.
    pub origins: Vec<OriginStats>,
    /// Per file (the most recently active files, up to the tracking cap).
    pub files: Vec<FileStats>,
}

/// Files tracked individually before the least recently changed is dropped.
const MAX_TRACKED_FILES: usize = 4096;

/// The executor's accounting, shared between the worker, submitters and
/// observers.
#[derive(Debug)]
pub struct Accounting {
    total: AtomicCounters,
    origins: RwLock<Vec<(String, Arc<AtomicCounters>)>>,
    files: Mutex<IdMap<FileId, (u64, Counters)>>,
    file_clock: AtomicU64,
    ledger: Mutex<Ledger>,
}

impl Default for Accounting {
    fn default() -> Self {
        Self::new()
    }
}

impl Accounting {
    /// Empty accounting with one origin, `unknown` (id 0), for requests whose
    /// origin was never registered.
    pub fn new() -> Self {
        Self {
            total: AtomicCounters::default(),
            origins: RwLock::new(vec![("unknown".to_owned(), Arc::default())]),
            files: Mutex::new(IdMap::default()),
            file_clock: AtomicU64::new(0),
            ledger: Mutex::new(Ledger::default()),
        }
    }

    /// Registers an origin name, returning its id (the same id for a name
    /// registered before).
    pub fn register(&self, name: &str) -> PolicyId {
        let mut origins = self.origins.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = origins.iter().position(|(n, _)| n == name) {
            return PolicyId(i as u16);
        }
        if origins.len() >= u16::MAX as usize {
            return PolicyId(0);
        }
        origins.push((name.to_owned(), Arc::default()));
        PolicyId((origins.len() - 1) as u16)
    }

    fn origin(&self, id: PolicyId) -> Arc<AtomicCounters> {
        let origins = self.origins.read().unwrap_or_else(|e| e.into_inner());
        let slot = origins.get(id.0 as usize).unwrap_or(&origins[0]);
        Arc::clone(&slot.1)
    }

    /// Adds one request's deltas to its origin, its file and the total.
    pub fn record(&self, origin: PolicyId, file: Option<FileId>, delta: &Counters) {
        self.total.add(delta);
        self.origin(origin).add(delta);
        if let Some(file) = file {
            let tick = self.file_clock.fetch_add(1, Ordering::Relaxed);
            let mut files = self.files.lock().unwrap_or_else(|e| e.into_inner());
            if files.len() >= MAX_TRACKED_FILES
                && !files.contains_key(&file)
                && let Some(oldest) = files.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| *k)
            {
                files.remove(&oldest);
            }
            let entry = files.entry(file).or_default();
            entry.0 = tick;
            entry.1.add(delta);
        }
    }

    /// A snapshot of everything.
    pub fn snapshot(&self) -> Stats {
        let origins = self.origins.read().unwrap_or_else(|e| e.into_inner());
        let files = self.files.lock().unwrap_or_else(|e| e.into_inner());
        let mut files: Vec<FileStats> =
            files.iter().map(|(file, (_, counters))| FileStats { file: *file, counters: *counters }).collect();
        files.sort_by(|a, b| b.counters.issued_pages.cmp(&a.counters.issued_pages).then(a.file.cmp(&b.file)));
        Stats {
            total: self.total.snapshot(),
            origins: origins
                .iter()
                .enumerate()
                .map(|(i, (name, c))| OriginStats {
                    id: PolicyId(i as u16),
                    name: name.clone(),
                    counters: c.snapshot(),
                })
                .collect(),
            files,
        }
    }

    /// Remembers that `pages` of `file` were prefetched for `origin` (only
    /// while hit tracking is on).
    pub fn note_issued(&self, file: FileId, pages: PageRange, origin: PolicyId, now: Instant) {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner()).insert(file, pages, origin, now);
    }

    /// Forgets pages [`Self::note_issued`] remembered that were not issued
    /// after all (the backend refused them): they count as neither hit nor
    /// waste. Pages of `pages` already hit are not taken back.
    pub fn forget_issued(&self, file: FileId, pages: PageRange) {
        let _ = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).take(file, pages);
    }

    /// Feeds an observed access: prefetched pages in `pages` count as hits.
    pub fn note_access(&self, file: FileId, pages: PageRange) {
        let taken = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).take(file, pages);
        self.credit(file, taken, |c, n| c.hit_pages = n);
    }

    /// Feeds an observed eviction: prefetched, never-accessed pages in
    /// `pages` count as waste.
    pub fn note_eviction(&self, file: FileId, pages: PageRange) {
        let taken = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).take(file, pages);
        self.credit(file, taken, |c, n| c.wasted_pages = n);
    }

    /// Counts prefetched pages untouched for longer than `timeout` as waste.
    pub fn expire(&self, now: Instant, timeout: Duration) {
        let expired = self.ledger.lock().unwrap_or_else(|e| e.into_inner()).expire(now, timeout);
        for (file, taken) in expired {
            self.credit(file, taken, |c, n| c.wasted_pages = n);
        }
    }

    /// Prefetched pages not yet hit or wasted.
    pub fn outstanding_pages(&self) -> u64 {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner()).pages
    }

    fn credit(&self, file: FileId, taken: Vec<(PolicyId, u64)>, set: impl Fn(&mut Counters, u64)) {
        for (origin, n) in taken {
            let mut delta = Counters::default();
            set(&mut delta, n);
            self.record(origin, Some(file), &delta);
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Span {
    end: u64,
    origin: PolicyId,
    issued: Instant,
}

/// Prefetched pages not yet accessed: per file, disjoint spans by start page.
#[derive(Debug, Default)]
struct Ledger {
    files: IdMap<FileId, BTreeMap<u64, Span>>,
    pages: u64,
}

impl Ledger {
    fn insert(&mut self, file: FileId, pages: PageRange, origin: PolicyId, now: Instant) {
        // Re-issued pages replace older spans, so first take any overlap out.
        let _ = self.take(file, pages);
        if pages.is_empty() {
            return;
        }
        self.files.entry(file).or_default().insert(pages.start, Span { end: pages.end, origin, issued: now });
        self.pages += pages.len();
    }

    /// Removes the pages of `pages` from the ledger; returns how many were
    /// there, per origin.
    fn take(&mut self, file: FileId, pages: PageRange) -> Vec<(PolicyId, u64)> {
        let mut taken = Vec::new();
        let Some(spans) = self.files.get_mut(&file) else { return taken };
        let overlapping: Vec<(u64, Span)> =
            spans.range(..pages.end).rev().take_while(|(_, s)| s.end > pages.start).map(|(k, s)| (*k, *s)).collect();
        for (start, span) in overlapping {
            spans.remove(&start);
            let cut = PageRange::new(start, span.end).intersect(&pages);
            if start < cut.start {
                spans.insert(start, Span { end: cut.start, ..span });
            }
            if cut.end < span.end {
                spans.insert(cut.end, Span { ..span });
            }
            self.pages -= cut.len();
            taken.push((span.origin, cut.len()));
        }
        if spans.is_empty() {
            self.files.remove(&file);
        }
        taken
    }

    fn expire(&mut self, now: Instant, timeout: Duration) -> Vec<(FileId, Vec<(PolicyId, u64)>)> {
        let mut out = Vec::new();
        for (file, spans) in &mut self.files {
            let mut taken = Vec::new();
            spans.retain(|start, span| {
                let old = now.duration_since(span.issued) >= timeout;
                if old {
                    taken.push((span.origin, span.end - start));
                }
                !old
            });
            let n: u64 = taken.iter().map(|(_, n)| n).sum();
            self.pages -= n;
            if !taken.is_empty() {
                out.push((*file, taken));
            }
        }
        self.files.retain(|_, spans| !spans.is_empty());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: FileId = FileId { dev: 1, ino: 2 };

    #[test]
    fn hits_and_waste() {
        let acc = Accounting::new();
        let p = acc.register("policy");
        assert_eq!(acc.register("policy"), p);
        let t0 = Instant::now();
        acc.note_issued(F, PageRange::new(10, 20), p, t0);
        acc.note_access(F, PageRange::new(12, 14));
        acc.note_access(F, PageRange::new(12, 14)); // a second access is no second hit
        acc.note_eviction(F, PageRange::new(18, 30));
        assert_eq!(acc.outstanding_pages(), 6);
        acc.expire(t0 + Duration::from_secs(60), Duration::from_secs(30));
        let stats = acc.snapshot();
        assert_eq!(stats.total.hit_pages, 2);
        assert_eq!(stats.total.wasted_pages, 2 + 6);
        assert_eq!(stats.origins[p.0 as usize].counters.hit_pages, 2);
        assert_eq!(stats.files[0].counters.wasted_pages, 8);
        assert_eq!(acc.outstanding_pages(), 0);
    }

    #[test]
    fn forgotten_pages_are_neither_hit_nor_waste() {
        let acc = Accounting::new();
        let p = acc.register("policy");
        let t0 = Instant::now();
        acc.note_issued(F, PageRange::new(0, 10), p, t0);
        acc.note_access(F, PageRange::new(0, 2)); // touched while being issued
        acc.forget_issued(F, PageRange::new(0, 10)); // then the backend refused it
        acc.note_access(F, PageRange::new(2, 10));
        acc.expire(t0 + Duration::from_secs(60), Duration::from_secs(30));
        let stats = acc.snapshot();
        assert_eq!((stats.total.hit_pages, stats.total.wasted_pages), (2, 0));
        assert_eq!(acc.outstanding_pages(), 0);
    }

    #[test]
    fn unknown_origin_goes_to_slot_zero() {
        let acc = Accounting::new();
        acc.record(PolicyId(999), None, &Counters { requests: 1, ..Default::default() });
        assert_eq!(acc.snapshot().origins[0].counters.requests, 1);
    }
}
