//! Typed workload events: what policies see.
//!
//! Events come from kernel observation (eBPF tracepoints, fanotify), from
//! application hints (the hint socket, the C ABI) and from in-process library
//! calls. They are small; lists are shared (`Arc<[T]>`) so that dispatching one
//! event to several policies never copies them. A file is named by its
//! [`FileId`]; the descriptor the runtime holds for it is found through the
//! policy context.

use std::sync::Arc;

use crate::file::FileId;
use crate::page::{ByteRange, PageRange};

/// How a page was accessed.
#[derive(Clone, Copy, PartialEq, Eq, Debug, serde::Serialize, serde::Deserialize)]
pub enum AccessKind {
    /// A buffered `read()` (`filemap:mm_filemap_get_pages`).
    Read,
    /// A page fault on a mapping (`filemap:mm_filemap_fault`).
    Fault,
    /// Pages mapped around a fault (`filemap:mm_filemap_map_pages`).
    MapPages,
}

/// One workload event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// Pages of a file were accessed (and were resident or became resident).
    PageAccess {
        /// Accessing process.
        pid: u32,
        /// File.
        file: FileId,
        /// Pages touched.
        pages: PageRange,
        /// Read or fault.
        kind: AccessKind,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// Pages were added to the page cache on demand: a miss (one folio, or
    /// a run of them added back to back, as readahead adds them; see
    /// [`Coalescer`]).
    PageMiss {
        /// Process that missed.
        pid: u32,
        /// File.
        file: FileId,
        /// The pages added.
        pages: PageRange,
        /// Monotonic time, ns (of the run's first folio).
        time_ns: u64,
    },
    /// Pages left the page cache (for waste accounting): one folio, or a run.
    PageEvict {
        /// File.
        file: FileId,
        /// The pages removed.
        pages: PageRange,
        /// Monotonic time, ns (of the run's first folio).
        time_ns: u64,
    },
    /// A process executed a program.
    Exec {
        /// Process.
        pid: u32,
        /// The executable.
        exe: FileId,
        /// The shape of its command line ([`crate::launch::shape`]): with
        /// `exe`, which launch profile is its own. Empty when the command
        /// line could not be read.
        shape: Arc<str>,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A process entered `execve` (or `execveat`) with an absolute path:
    /// an exec starting, before the kernel has looked the path up or read
    /// the program, and before it is known whether the exec succeeds. Cold,
    /// that part of an exec takes milliseconds (a large program's headers,
    /// the loader's, and the read-around of their first faults), so a
    /// launch replay started here is that much ahead of one started at the
    /// [`Event::Exec`] that follows.
    ExecStart {
        /// Process (its thread-group id, which the exec keeps).
        pid: u32,
        /// The caller's real uid.
        uid: u32,
        /// The path, as the caller gave it (not resolved).
        path: Arc<str>,
        /// The shape of the command line it passed ([`crate::launch::shape`]).
        shape: Arc<str>,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A process forked.
    Fork {
        /// Parent.
        parent: u32,
        /// Child.
        child: u32,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A process exited.
    Exit {
        /// Process.
        pid: u32,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A process looked a path up: opened, stat'ed, accessed, read as a
    /// link or exec'd it, whether it exists or not. Cold, each lookup reads
    /// directory blocks (and, for a name that exists, its inode) one at a
    /// time.
    Lookup {
        /// Process.
        pid: u32,
        /// The absolute path, as the process gave it.
        path: Arc<str>,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A process opened a file.
    FileOpen {
        /// Process.
        pid: u32,
        /// File.
        file: FileId,
        /// Monotonic time, ns.
        time_ns: u64,
    },
    /// A B-tree traversal descends from an interior page (SQLite/LMDB adapters).
    TreeChildEnter {
        /// The database file.
        file: FileId,
        /// The interior page being traversed.
        parent: u64,
        /// Its children in key order (page indices in the file: each
        /// child's first 4 KiB page).
        children: Arc<[u64]>,
        /// Index in `children` of the child being descended into now.
        position: u32,
        /// 4 KiB pages each child spans: its database page's size over
        /// 4 KiB (1 for pages of 4 KiB or less).
        child_pages: u32,
    },
    /// A model file's tensor byte ranges, in the order the loader reads them.
    TensorLayout {
        /// The model file.
        file: FileId,
        /// Tensor ranges in load order.
        ranges: Arc<[ByteRange]>,
    },
    /// A Parquet file's column chunks (its footer, parsed by the
    /// dispatcher once a reader has read it).
    ColumnLayout {
        /// The Parquet file.
        file: FileId,
        /// Its length, as the footer was read (a read of its last bytes is
        /// a reader opening it).
        file_len: u64,
        /// Its column chunks, by row group then column.
        chunks: Arc<[crate::parquet::ColumnChunk]>,
    },
    /// A model loader starts a layer.
    LayerStart {
        /// The model file.
        file: FileId,
        /// Layer index.
        layer: u32,
    },
    /// A program reports the segments it will read next, in order.
    ReadPlan {
        /// The file.
        file: FileId,
        /// Upcoming segments.
        segments: Arc<[ByteRange]>,
    },
    /// A program read `len` bytes at `offset` (hint or observation).
    StreamRead {
        /// The file.
        file: FileId,
        /// Offset of the read.
        offset: u64,
        /// Length of the read.
        len: u64,
    },
    /// Plain page ranges a program asks to have prefetched.
    Pages {
        /// The file.
        file: FileId,
        /// The ranges.
        ranges: Arc<[PageRange]>,
    },
    /// One step of a key-range scan a storage engine's iterator reports (the
    /// RocksDB adapter): where the scan may go, how far it got, that it ended.
    Scan {
        /// The scan, unique among the sender's live scans.
        scan: u64,
        /// What happened.
        step: ScanStep,
    },
}

/// A step of a [`Event::Scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanStep {
    /// A stretch of a file the scan reads if it runs to its bound. Sent when
    /// the scan starts, one per file, in the order the scan reads them.
    Segment {
        /// The file.
        file: FileId,
        /// Its bytes the scan would read.
        range: ByteRange,
        /// The scan reads the range from its end towards its start.
        backward: bool,
    },
    /// The scan has consumed this many bytes of its segments, counted in
    /// scan order from the start of the first.
    Progress {
        /// Bytes consumed so far.
        consumed: u64,
    },
    /// The scan ended (its iterator was dropped or re-positioned).
    End,
}

/// The kind of an [`Event`], for subscription.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u8)]
pub enum EventKind {
    /// [`Event::PageAccess`]
    PageAccess,
    /// [`Event::PageMiss`]
    PageMiss,
    /// [`Event::PageEvict`]
    PageEvict,
    /// [`Event::Exec`]
    Exec,
    /// [`Event::Fork`]
    Fork,
    /// [`Event::Exit`]
    Exit,
    /// [`Event::FileOpen`]
    FileOpen,
    /// [`Event::TreeChildEnter`]
    TreeChildEnter,
    /// [`Event::TensorLayout`]
    TensorLayout,
    /// [`Event::ColumnLayout`]
    ColumnLayout,
    /// [`Event::LayerStart`]
    LayerStart,
    /// [`Event::ReadPlan`]
    ReadPlan,
    /// [`Event::StreamRead`]
    StreamRead,
    /// [`Event::Pages`]
    Pages,
    /// [`Event::Scan`]
    Scan,
    /// [`Event::Lookup`]
    Lookup,
    /// [`Event::ExecStart`]
    ExecStart,
}

impl EventKind {
    /// Every kind, in discriminant order.
    pub const ALL: [EventKind; 17] = [
        EventKind::PageAccess,
        EventKind::PageMiss,
        EventKind::PageEvict,
        EventKind::Exec,
        EventKind::Fork,
        EventKind::Exit,
        EventKind::FileOpen,
        EventKind::TreeChildEnter,
        EventKind::TensorLayout,
        EventKind::ColumnLayout,
        EventKind::LayerStart,
        EventKind::ReadPlan,
        EventKind::StreamRead,
        EventKind::Pages,
        EventKind::Scan,
        EventKind::Lookup,
        EventKind::ExecStart,
    ];

    /// Number of kinds.
    pub const COUNT: usize = Self::ALL.len();
}

impl Event {
    /// This event's kind.
    pub fn kind(&self) -> EventKind {
        match self {
            Event::PageAccess { .. } => EventKind::PageAccess,
            Event::PageMiss { .. } => EventKind::PageMiss,
            Event::PageEvict { .. } => EventKind::PageEvict,
            Event::Exec { .. } => EventKind::Exec,
            Event::ExecStart { .. } => EventKind::ExecStart,
            Event::Fork { .. } => EventKind::Fork,
            Event::Exit { .. } => EventKind::Exit,
            Event::FileOpen { .. } => EventKind::FileOpen,
            Event::Lookup { .. } => EventKind::Lookup,
            Event::TreeChildEnter { .. } => EventKind::TreeChildEnter,
            Event::TensorLayout { .. } => EventKind::TensorLayout,
            Event::ColumnLayout { .. } => EventKind::ColumnLayout,
            Event::LayerStart { .. } => EventKind::LayerStart,
            Event::ReadPlan { .. } => EventKind::ReadPlan,
            Event::StreamRead { .. } => EventKind::StreamRead,
            Event::Pages { .. } => EventKind::Pages,
            Event::Scan { .. } => EventKind::Scan,
        }
    }

    /// The file the event is about, where there is one.
    pub fn file(&self) -> Option<FileId> {
        match self {
            Event::PageAccess { file, .. }
            | Event::PageMiss { file, .. }
            | Event::PageEvict { file, .. }
            | Event::FileOpen { file, .. }
            | Event::TreeChildEnter { file, .. }
            | Event::TensorLayout { file, .. }
            | Event::ColumnLayout { file, .. }
            | Event::LayerStart { file, .. }
            | Event::ReadPlan { file, .. }
            | Event::StreamRead { file, .. }
            | Event::Pages { file, .. }
            | Event::Scan { step: ScanStep::Segment { file, .. }, .. } => Some(*file),
            Event::Exec { exe, .. } => Some(*exe),
            Event::ExecStart { .. }
            | Event::Fork { .. }
            | Event::Exit { .. }
            | Event::Lookup { .. }
            | Event::Scan { .. } => None,
        }
    }

    /// The process the event is about, for events observed in the kernel
    /// (a fork's child). Hints carry none: their sender is known apart.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Event::PageAccess { pid, .. }
            | Event::PageMiss { pid, .. }
            | Event::Exec { pid, .. }
            | Event::ExecStart { pid, .. }
            | Event::Exit { pid, .. }
            | Event::Lookup { pid, .. }
            | Event::FileOpen { pid, .. } => Some(*pid),
            Event::Fork { child, .. } => Some(*child),
            Event::PageEvict { .. }
            | Event::TreeChildEnter { .. }
            | Event::TensorLayout { .. }
            | Event::ColumnLayout { .. }
            | Event::LayerStart { .. }
            | Event::ReadPlan { .. }
            | Event::StreamRead { .. }
            | Event::Pages { .. }
            | Event::Scan { .. } => None,
        }
    }
}

/// Heap bytes of an `Arc<[T]>` (or `Arc<str>` of `len` bytes) holding `len`
/// elements: its two reference counts and the elements. What one queued
/// event's list costs, counted as if the list were not shared (a bound, not
/// an estimate: sharing only makes the real cost smaller).
pub const fn shared_list_bytes<T>(len: usize) -> usize {
    2 * std::mem::size_of::<usize>() + len.saturating_mul(std::mem::size_of::<T>())
}

impl Event {
    /// Heap bytes this event owns beyond its own size: its shared lists and
    /// strings ([`shared_list_bytes`]); 0 for events of fixed size. Queues
    /// bound what they hold with it (see `pipeline` and `hints`), since a
    /// list may be up to a datagram (64 KiB) long.
    pub fn payload_bytes(&self) -> usize {
        match self {
            Event::TreeChildEnter { children, .. } => shared_list_bytes::<u64>(children.len()),
            Event::TensorLayout { ranges, .. } => shared_list_bytes::<ByteRange>(ranges.len()),
            Event::ColumnLayout { chunks, .. } => shared_list_bytes::<crate::parquet::ColumnChunk>(chunks.len()),
            Event::ReadPlan { segments, .. } => shared_list_bytes::<ByteRange>(segments.len()),
            Event::Pages { ranges, .. } => shared_list_bytes::<PageRange>(ranges.len()),
            Event::Exec { shape, .. } => shared_list_bytes::<u8>(shape.len()),
            Event::ExecStart { path, shape, .. } => {
                shared_list_bytes::<u8>(path.len()) + shared_list_bytes::<u8>(shape.len())
            }
            Event::Lookup { path, .. } => shared_list_bytes::<u8>(path.len()),
            Event::PageAccess { .. }
            | Event::PageMiss { .. }
            | Event::PageEvict { .. }
            | Event::Fork { .. }
            | Event::Exit { .. }
            | Event::FileOpen { .. }
            | Event::LayerStart { .. }
            | Event::StreamRead { .. }
            | Event::Scan { .. } => 0,
        }
    }

    /// Bytes this event occupies in all: its own size plus
    /// [`Event::payload_bytes`].
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<Event>() + self.payload_bytes()
    }
}

/// A set of [`EventKind`]s (a bit mask).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct EventKinds(u32);

impl EventKinds {
    /// No kind.
    pub const NONE: EventKinds = EventKinds(0);

    /// Every kind.
    pub const ALL: EventKinds = EventKinds((1 << EventKind::COUNT) - 1);

    /// The set holding exactly these kinds.
    pub const fn of(kinds: &[EventKind]) -> Self {
        let mut bits = 0;
        let mut i = 0;
        while i < kinds.len() {
            bits |= 1 << kinds[i] as u32;
            i += 1;
        }
        EventKinds(bits)
    }

    /// True when `kind` is in the set.
    pub const fn contains(&self, kind: EventKind) -> bool {
        self.0 & (1 << kind as u32) != 0
    }

    /// The union of two sets.
    pub const fn with(self, other: EventKinds) -> Self {
        EventKinds(self.0 | other.0)
    }
}

/// Joins page-cache misses (and evictions) that arrive back to back into
/// runs. Readahead adds a window's folios one by one, each its own
/// tracepoint record: a 1 MiB window of single pages is 256 records for one
/// fact, and every one of them would cross the pipeline and every policy.
///
/// A miss joins the pending one when it is the same process's, on the same
/// file, starts where the pending run ends, and came within
/// [`Coalescer::MAX_GAP_NS`] of the run's last folio; an eviction likewise,
/// without the process. Any other event first hands the pending run on, so
/// events keep their order. A run is at most [`Coalescer::MAX_PAGES`] long.
/// Call [`Coalescer::flush`] when a batch of records ends.
#[derive(Debug, Default)]
pub struct Coalescer {
    pending: Option<Event>,
    last_ns: u64,
}

impl Coalescer {
    /// The longest pause between two folios of one run, ns.
    pub const MAX_GAP_NS: u64 = 1_000_000;
    /// The most pages one run holds (32 MiB of 4 KiB pages).
    pub const MAX_PAGES: u64 = 8192;

    /// Takes the next event in arrival order; hands on, in order, whatever
    /// is complete.
    pub fn push(&mut self, event: Event, out: &mut impl FnMut(Event)) {
        if let Some(pending) = self.pending.as_mut()
            && let Some(time_ns) = join(pending, &event, self.last_ns)
        {
            self.last_ns = time_ns;
            return;
        }
        self.flush(out);
        match event {
            Event::PageMiss { time_ns, .. } | Event::PageEvict { time_ns, .. } => {
                self.last_ns = time_ns;
                self.pending = Some(event);
            }
            other => out(other),
        }
    }

    /// Hands on the pending run, if any.
    pub fn flush(&mut self, out: &mut impl FnMut(Event)) {
        if let Some(pending) = self.pending.take() {
            out(pending);
        }
    }
}

/// Extends the run `pending` by `next` when it continues it; returns
/// `next`'s time then.
fn join(pending: &mut Event, next: &Event, last_ns: u64) -> Option<u64> {
    let (run, more, time_ns) = match (pending, next) {
        (
            Event::PageMiss { pid, file, pages, .. },
            Event::PageMiss { pid: next_pid, file: next_file, pages: more, time_ns },
        ) if pid == next_pid && file == next_file => (pages, more, *time_ns),
        (Event::PageEvict { file, pages, .. }, Event::PageEvict { file: next_file, pages: more, time_ns })
            if file == next_file =>
        {
            (pages, more, *time_ns)
        }
        _ => return None,
    };
    let continues = more.start == run.end
        && time_ns.saturating_sub(last_ns) <= Coalescer::MAX_GAP_NS
        && run.len().saturating_add(more.len()) <= Coalescer::MAX_PAGES;
    continues.then(|| {
        run.end = more.end;
        time_ns
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn miss(pid: u32, ino: u64, start: u64, end: u64, time_ns: u64) -> Event {
        Event::PageMiss { pid, file: FileId { dev: 1, ino }, pages: PageRange::new(start, end), time_ns }
    }

    fn coalesce(events: Vec<Event>) -> Vec<Event> {
        let mut coalescer = Coalescer::default();
        let mut out = Vec::new();
        for event in events {
            coalescer.push(event, &mut |e| out.push(e));
        }
        coalescer.flush(&mut |e| out.push(e));
        out
    }

    #[test]
    fn a_readahead_window_of_folios_is_one_miss() {
        let window: Vec<Event> = (0..256).map(|p| miss(7, 3, p, p + 1, 1_000 + p)).collect();
        assert_eq!(coalesce(window), vec![miss(7, 3, 0, 256, 1_000)]);
        // Folios of several pages join too.
        let folios = vec![miss(7, 3, 0, 4, 0), miss(7, 3, 4, 8, 10), miss(7, 3, 8, 24, 20)];
        assert_eq!(coalesce(folios), vec![miss(7, 3, 0, 24, 0)]);
    }

    #[test]
    fn only_a_continuation_joins_a_run() {
        let exit = Event::Exit { pid: 7, time_ns: 5 };
        let events = vec![
            miss(7, 3, 0, 1, 0),
            miss(7, 3, 1, 2, 1),
            miss(8, 3, 2, 3, 2), // another process
            miss(8, 4, 3, 4, 3), // another file
            miss(8, 4, 5, 6, 4), // a hole
            exit.clone(),        // any other event ends the run, in order
            miss(8, 4, 6, 7, 6),
            miss(8, 4, 7, 8, 6 + Coalescer::MAX_GAP_NS + 1), // too late
        ];
        let want = vec![
            miss(7, 3, 0, 2, 0),
            miss(8, 3, 2, 3, 2),
            miss(8, 4, 3, 4, 3),
            miss(8, 4, 5, 6, 4),
            exit,
            miss(8, 4, 6, 7, 6),
            miss(8, 4, 7, 8, 6 + Coalescer::MAX_GAP_NS + 1),
        ];
        assert_eq!(coalesce(events), want);
        // A miss and an eviction of the same pages never join.
        let file = FileId { dev: 1, ino: 3 };
        let evict = Event::PageEvict { file, pages: PageRange::new(1, 2), time_ns: 1 };
        assert_eq!(coalesce(vec![miss(7, 3, 0, 1, 0), evict.clone()]), vec![miss(7, 3, 0, 1, 0), evict]);
        // Evictions join like misses.
        let evictions = (0..3).map(|p| Event::PageEvict { file, pages: PageRange::page(p), time_ns: p }).collect();
        assert_eq!(coalesce(evictions), vec![Event::PageEvict { file, pages: PageRange::new(0, 3), time_ns: 0 }]);
    }

    #[test]
    fn a_run_stops_at_its_bound() {
        let pages = Coalescer::MAX_PAGES + 10;
        let out = coalesce((0..pages).map(|p| miss(1, 1, p, p + 1, 0)).collect());
        assert_eq!(out, vec![miss(1, 1, 0, Coalescer::MAX_PAGES, 0), miss(1, 1, Coalescer::MAX_PAGES, pages, 0)]);
    }

    proptest::proptest! {
        /// Whatever arrives, every page of every process and file comes out
        /// exactly as often as it went in, and other events keep their order.
        #[test]
        fn coalescing_loses_and_invents_nothing(
            input in proptest::collection::vec((0u32..3, 0u64..3, 0u64..40, 1u64..5, 0u64..3_000_000, proptest::bool::ANY), 0..200)
        ) {
            let mut time = 0;
            let events: Vec<Event> = input
                .iter()
                .enumerate()
                .map(|(i, &(pid, ino, start, len, gap, other))| {
                    time += gap;
                    if other { Event::Exit { pid: i as u32, time_ns: time } } else { miss(pid, ino, start, start + len, time) }
                })
                .collect();
            let pages = |events: &[Event]| {
                let mut seen = std::collections::BTreeMap::new();
                for e in events {
                    if let Event::PageMiss { pid, file, pages, .. } = e {
                        for page in pages.start..pages.end {
                            *seen.entry((*pid, *file, page)).or_insert(0) += 1;
                        }
                    }
                }
                seen
            };
            let others = |events: &[Event]| events.iter().filter(|e| matches!(e, Event::Exit { .. })).cloned().collect::<Vec<_>>();
            let out = coalesce(events.clone());
            proptest::prop_assert_eq!(pages(&out), pages(&events));
            proptest::prop_assert_eq!(others(&out), others(&events));
            proptest::prop_assert!(out.len() <= events.len());
        }
    }

    #[test]
    fn kinds_mask() {
        let set = EventKinds::of(&[EventKind::ReadPlan, EventKind::Exec]);
        assert!(set.contains(EventKind::ReadPlan));
        assert!(set.contains(EventKind::Exec));
        assert!(!set.contains(EventKind::PageAccess));
        for kind in EventKind::ALL {
            assert!(EventKinds::ALL.contains(kind));
            assert!(!EventKinds::NONE.contains(kind));
        }
    }

    #[test]
    fn payload_counts_every_list_and_string() {
        let file = FileId { dev: 1, ino: 2 };
        let ranges: Arc<[ByteRange]> = (0..100).map(|i| ByteRange::new(i, 1)).collect();
        let layout = Event::TensorLayout { file, ranges };
        assert_eq!(layout.payload_bytes(), 16 + 100 * 16);
        assert_eq!(layout.footprint(), std::mem::size_of::<Event>() + 16 + 1600);
        let pages = Event::Pages { file, ranges: Arc::from([PageRange::new(0, 1); 7]) };
        assert_eq!(pages.payload_bytes(), 16 + 7 * 16);
        let tree =
            Event::TreeChildEnter { file, parent: 0, children: Arc::from([0u64; 9]), position: 0, child_pages: 1 };
        assert_eq!(tree.payload_bytes(), 16 + 9 * 8);
        let start = Event::ExecStart { pid: 1, uid: 0, path: "/bin/x".into(), shape: "x".into(), time_ns: 0 };
        assert_eq!(start.payload_bytes(), 16 + 6 + 16 + 1);
        assert_eq!(Event::LayerStart { file, layer: 1 }.payload_bytes(), 0);
        // An empty list still costs its counts: a flood of empty lists is
        // not free.
        assert!(Event::ReadPlan { file, segments: Arc::from([]) }.payload_bytes() > 0);
    }

    #[test]
    fn kind_discriminants_match_all_order() {
        for (i, kind) in EventKind::ALL.iter().enumerate() {
            assert_eq!(*kind as usize, i);
        }
    }
}
