//! Fallback observation with `perf_event_open(2)` on the eBPF observer's
//! tracepoints, for machines where BPF programs cannot load (BPF locked
//! down, no BTF, a build without clang) but perf tracepoint events are
//! allowed: root, `CAP_PERFMON`, or `perf_event_paranoid` at -1 (raw
//! tracepoint samples need one of these; tracefs must also be readable, to
//! learn the tracepoint ids and record layouts).
//!
//! # What it owns
//!
//! One perf event per tracepoint per online CPU and one mmap'ed ring per
//! CPU (plus a small one for execs), and the decoding of their records into
//! the same core [`Event`]s as [`crate::Observer`]. Like it, it only reports.
//!
//! | tracepoint | event |
//! | --- | --- |
//! | `filemap:mm_filemap_get_pages` | `PageAccess { kind: Read }`, pages `index..=last_index` *as asked for* (see below) |
//! | `filemap:mm_filemap_fault` | `PageAccess { kind: Fault }` (one page) |
//! | `filemap:mm_filemap_map_pages` | `PageAccess { kind: MapPages }`, as asked for |
//! | `filemap:mm_filemap_add_to_page_cache` | `PageMiss` of the folio's pages (back-to-back folios joined) |
//! | `filemap:mm_filemap_delete_from_page_cache` | `PageEvict` of the folio's pages (joined likewise) |
//! | `sched:sched_process_exec` | `Exec` (the executable's `FileId` from a `stat` of `/proc/PID/exe` when the record is read) |
//! | `PERF_RECORD_FORK` (the `task` side band, not `sched:sched_process_fork`) | `Fork` (processes only) |
//! | `sched:sched_process_exit` (last thread of a group) | `Exit` |
//!
//! Field offsets are read from each tracepoint's tracefs `format` file at
//! [`PerfObserver::open`], not compiled in: a kernel that moves a field is
//! read correctly, one that drops a field is refused with
//! [`PerfError::Layout`]. tracefs is read where it is mounted,
//! `/sys/kernel/tracing` or `/sys/kernel/debug/tracing`; where it is mounted
//! at neither, it is mounted at the first ([`PerfConfig::mount_tracefs`]).
//!
//! # Older kernels
//!
//! Misses, evictions, execs and exits are required. The page-access
//! tracepoints (`mm_filemap_get_pages`, `_fault`, `_map_pages`) exist from
//! Linux 6.11 only: before it (RHEL 9, Ubuntu 22.04 and 24.04, Debian 12)
//! the observer opens without them, reports no hits, and names what it runs
//! without ([`PerfObserver::missing_hooks`]), as the eBPF observer does; a
//! page-access tracepoint laid out in a way the decoder cannot read is left
//! out likewise. [`PerfConfig::assume_missing`] makes a newer kernel behave
//! so, for tests. The page-based miss and eviction records of Linux
//! 5.14/5.15 carry no folio order; each is one page there.
//!
//! # Differences from the eBPF observer
//!
//! - **Filtering.** With [`PerfConfig::pid`] the events are per-task and
//!   `inherit`ed, so the kernel follows the process tree (every child gets
//!   copies of the events at fork) and unrelated processes cost nothing. The
//!   events are still opened once per CPU (`pid = P, cpu = c`): the kernel
//!   refuses to mmap an inherited event opened with `cpu = -1`, since all
//!   children would then write one ring. With [`PerfConfig::follow_all`]
//!   they are per-CPU (`pid = -1`, needs `CAP_PERFMON` or root). There is
//!   no device or cgroup filter, and no `follow`/`unfollow` after opening.
//! - **Read ranges are not clamped to the file's size.** A raw tracepoint
//!   record carries no `i_size`, so `cat` of a 10-page file reports the 32
//!   pages it asked for, and its last `read()` at end of file reports pages
//!   past the end. Consumers that need exact ranges intersect with the
//!   file's size.
//! - **Forks** come from `PERF_RECORD_FORK` (the `task` bit), not from
//!   `sched:sched_process_fork`: that tracepoint's record has thread ids
//!   only and cannot tell a new process from a new thread (the eBPF observer
//!   reads the child's task through a raw tracepoint for the same reason).
//! - **Exec's executable** is resolved in user space, when the record is
//!   read: a process that has exited by then (or exec'd again) cannot be
//!   resolved from `/proc`, and the absolute path in the record is tried
//!   instead; failing both, the `Exec` carries a zero `FileId` and
//!   [`PerfStats::unresolved_execs`] counts it.
//! - **Order.** Each CPU has its own ring; a drain merges what it read by
//!   timestamp, but a record written on one CPU after the drain began may
//!   arrive in the next drain behind later records of another CPU.
//! - **Cost.** A classic tracepoint formats its record before perf copies
//!   it, for every hit in a followed (or, following all, any) process; a
//!   process not followed in `pid` mode pays nothing (its task has no
//!   events).
//!
//! # Cost, measured
//!
//! The ignored test `overhead_of_a_traced_reader` in `tests/perf.rs`: `dd
//! bs=4096` over a cached 256 MiB file (one `read()` and one record per
//! page, the worst case for per-record cost), 5 interleaved rounds, on the
//! development machine (2 vCPUs, Linux 6.18) shared with other builds (load
//! 3–6, so the figures are noisy), three runs:
//!
//! | reader | best round, ratio to untraced | median round |
//! | --- | --- | --- |
//! | followed by perf, batched wake-ups (default) | 1.7–2.1× | 2.0–2.5× |
//! | followed by perf, woken on every record (`wakeup_bytes: 1`) | 24–33× | 31–42× |
//! | followed by the eBPF observer, same rounds | 1.2–1.6× | 1.7–1.8× |
//!
//! About 0.6–0.9 µs per record on top of a ~0.9 µs `read()`: the price of
//! the fallback. None lost with the default ring (128 pages per CPU).
//!
//! # Notification
//!
//! The page-cache ring of each CPU wakes the reader only when
//! [`PerfConfig::wakeup_bytes`] of records have accumulated (the perf
//! `watermark`); below that, [`PerfObserver::poll`]'s timeout bounds the
//! latency, as with the eBPF observer. Execs go to a ring of their own that
//! wakes on every record: they are rare, and start launch prefetching.
//! Records the kernel drops because a ring is full are reported by a
//! `PERF_RECORD_LOST` and counted in [`PerfStats::lost`]; the kernel writes
//! that report with the next record that fits, so a loss shows only once
//! the ring has been drained and something else was recorded on that CPU. Timestamps are
//! `CLOCK_MONOTONIC` (`use_clockid`), the clock of the eBPF observer's
//! events and [`crate::monotonic_now_ns`].

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use predictio::event::Coalescer;
use predictio::{Event, FileId};

use crate::hooks::{HOOKS, Hook, MissingHook};
use crate::record::Record;
use crate::record::consts::{
    PIO_KIND_EVICT, PIO_KIND_EXIT, PIO_KIND_FAULT, PIO_KIND_FORK, PIO_KIND_MAP_PAGES, PIO_KIND_MISS, PIO_KIND_READ,
};
use crate::sys::{self, PerfEventAttr, PerfIoctl, PerfRing};
use crate::{ObserverStats, layout};

/// Settings of a [`PerfObserver`], fixed at [`PerfObserver::open`].
#[derive(Clone, Debug)]
pub struct PerfConfig {
    /// Report every process (per-CPU events; needs `CAP_PERFMON` or root).
    /// Exclusive with `pid`.
    pub follow_all: bool,
    /// Report this process (thread-group id, in the opener's pid namespace)
    /// and every process it forks after the observer opens. To miss nothing
    /// of a new command, start it stopped (e.g. blocked on a pipe), open the
    /// observer, then let it go.
    pub pid: Option<u32>,
    /// Data pages of each CPU's page-cache ring: a power of two. Records take
    /// 56–64 bytes (a buffered read, a fault, a miss). The pages count
    /// against `perf_event_mlock_kb` (per CPU) and then `RLIMIT_MEMLOCK`
    /// unless the opener has `CAP_IPC_LOCK`.
    pub ring_pages: usize,
    /// Unread bytes in a CPU's ring at which the reader is woken at once
    /// (below, the poll timeout applies). 0: half the ring.
    pub wakeup_bytes: u32,
    /// Poll timeout a draining loop should use ([`PerfObserver::poll_interval`]).
    pub poll_interval: Duration,
    /// Mount tracefs at `/sys/kernel/tracing` if it is mounted neither there
    /// nor at `/sys/kernel/debug/tracing`.
    pub mount_tracefs: bool,
    /// Tracepoints to treat as absent from this kernel, by label
    /// (`filemap:mm_filemap_fault`, as [`crate::hooks::Hook::label`] gives):
    /// they are not opened, as on a kernel without them, and
    /// [`PerfObserver::missing_hooks`] names them. For testing older
    /// kernels' behaviour on a newer one. Only the page-access tracepoints
    /// ([`crate::hooks::filemap_access`]) may be named: the others are
    /// required.
    pub assume_missing: Vec<String>,
}

impl Default for PerfConfig {
    fn default() -> Self {
        Self {
            follow_all: false,
            pid: None,
            ring_pages: 128,
            wakeup_bytes: 128 << 10,
            poll_interval: Duration::from_millis(1),
            mount_tracefs: true,
            assume_missing: Vec::new(),
        }
    }
}

/// Why the perf observer could not start or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PerfError {
    /// tracefs cannot be read: mounted at neither `/sys/kernel/tracing` nor
    /// `/sys/kernel/debug/tracing` (and mounting it at the first failed or
    /// was not asked for), or not readable by this user (`EACCES`: it is
    /// root-only by default).
    #[error("tracefs: {source}")]
    Tracefs {
        /// Why it could not be read or mounted.
        source: std::io::Error,
    },
    /// A tracepoint's `format` file could not be read (no such tracepoint on
    /// this kernel, or tracefs not readable by this user).
    #[error("tracepoint {tracepoint}: reading its format: {source}")]
    MissingTracepoint {
        /// `category:name`.
        tracepoint: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// A tracepoint's record lacks a field this code reads, or has it in a
    /// size it cannot read.
    #[error("tracepoint {tracepoint}: field `{field}`: {problem}")]
    Layout {
        /// `category:name`.
        tracepoint: &'static str,
        /// The field.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The configuration is invalid.
    #[error("invalid perf observer configuration: {0}")]
    Config(String),
    /// `perf_event_open` of one tracepoint on one CPU failed.
    #[error("perf_event_open {tracepoint} on cpu {cpu}: {source}")]
    Open {
        /// `category:name`.
        tracepoint: &'static str,
        /// The CPU.
        cpu: u32,
        /// The error (`EACCES`/`EPERM` without privilege).
        source: std::io::Error,
    },
    /// Another system call failed (`mmap` of a ring, an `ioctl`, `poll`).
    #[error("{call}: {source}")]
    Syscall {
        /// The call.
        call: &'static str,
        /// The error.
        source: std::io::Error,
    },
}

impl PerfError {
    /// True when perf observation cannot run here (no privilege, no perf
    /// events, no such tracepoint or no tracefs): the caller should fall back
    /// to another source and log the error, which names what is missing.
    pub fn is_unavailable(&self) -> bool {
        let source = match self {
            PerfError::Layout { .. } => return true,
            PerfError::Config(_) => return false,
            PerfError::Tracefs { source }
            | PerfError::MissingTracepoint { source, .. }
            | PerfError::Open { source, .. }
            | PerfError::Syscall { source, .. } => source,
        };
        matches!(source.raw_os_error(), Some(libc::EACCES | libc::EPERM | libc::ENOENT | libc::ENOSYS))
            || source.kind() == std::io::ErrorKind::NotFound
    }
}

/// Counters of a [`PerfObserver`] since it opened. The fields shared with
/// [`ObserverStats`] mean the same ([`From`] converts, for `predictio stat`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct PerfStats {
    /// Samples and process-fork records read from the rings (thread
    /// creations are skipped uncounted).
    pub records: u64,
    /// Events delivered.
    pub events: u64,
    /// Records the kernel dropped because a ring was full (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// Records too short, of an unknown tracepoint, or with a field out of
    /// bounds (skipped).
    pub malformed: u64,
    /// Buffered-read records.
    pub reads: u64,
    /// Page-fault records.
    pub faults: u64,
    /// Map-pages records.
    pub map_pages: u64,
    /// Page-cache insertion records.
    pub misses: u64,
    /// Page-cache deletion records.
    pub evictions: u64,
    /// Exec records.
    pub execs: u64,
    /// Execs whose executable could not be resolved (delivered with a zero
    /// `FileId`).
    pub unresolved_execs: u64,
    /// Fork records of new processes (threads are skipped).
    pub forks: u64,
    /// Exit records of whole thread groups.
    pub exits: u64,
}

impl From<PerfStats> for ObserverStats {
    fn from(s: PerfStats) -> ObserverStats {
        ObserverStats {
            records: s.records,
            events: s.events,
            lost: s.lost,
            lost_follows: 0,
            malformed: s.malformed,
            reads: s.reads,
            faults: s.faults,
            map_pages: s.map_pages,
            misses: s.misses,
            evictions: s.evictions,
            execs: s.execs,
            forks: s.forks,
            exits: s.exits,
            lookups: 0,
            exec_starts: 0,
        }
    }
}

/// The tracepoints, in the order they are opened on each CPU.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Tracepoint {
    /// Opened first on each CPU, with the `task` bit: its ring also gets the
    /// `PERF_RECORD_FORK`s.
    Exit,
    Exec,
    GetPages,
    Fault,
    MapPages,
    AddToPageCache,
    DeleteFromPageCache,
}

impl Tracepoint {
    const ALL: [Tracepoint; 7] = [
        Tracepoint::Exit,
        Tracepoint::Exec,
        Tracepoint::GetPages,
        Tracepoint::Fault,
        Tracepoint::MapPages,
        Tracepoint::AddToPageCache,
        Tracepoint::DeleteFromPageCache,
    ];

    fn category_and_name(self) -> (&'static str, &'static str) {
        match self {
            Tracepoint::Exit => ("sched", "sched_process_exit"),
            Tracepoint::Exec => ("sched", "sched_process_exec"),
            Tracepoint::GetPages => ("filemap", "mm_filemap_get_pages"),
            Tracepoint::Fault => ("filemap", "mm_filemap_fault"),
            Tracepoint::MapPages => ("filemap", "mm_filemap_map_pages"),
            Tracepoint::AddToPageCache => ("filemap", "mm_filemap_add_to_page_cache"),
            Tracepoint::DeleteFromPageCache => ("filemap", "mm_filemap_delete_from_page_cache"),
        }
    }

    /// Whether the observer needs it to open. The page-access tracepoints
    /// (Linux 6.11+) are opened where the kernel has them; misses,
    /// evictions, execs and exits always.
    fn required(self) -> bool {
        !matches!(self, Tracepoint::GetPages | Tracepoint::Fault | Tracepoint::MapPages)
    }

    /// Its row of [`crate::hooks::HOOKS`].
    fn hook(self) -> &'static Hook {
        let (category, name) = self.category_and_name();
        HOOKS
            .iter()
            .find(|hook| hook.category == category && hook.name == name)
            .expect("every perf tracepoint is a hook (unit-tested)")
    }

    fn label(self) -> &'static str {
        match self {
            Tracepoint::Exit => "sched:sched_process_exit",
            Tracepoint::Exec => "sched:sched_process_exec",
            Tracepoint::GetPages => "filemap:mm_filemap_get_pages",
            Tracepoint::Fault => "filemap:mm_filemap_fault",
            Tracepoint::MapPages => "filemap:mm_filemap_map_pages",
            Tracepoint::AddToPageCache => "filemap:mm_filemap_add_to_page_cache",
            Tracepoint::DeleteFromPageCache => "filemap:mm_filemap_delete_from_page_cache",
        }
    }
}

/// A field of a raw tracepoint record: byte offset and size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FieldAt {
    offset: usize,
    size: usize,
}

impl FieldAt {
    /// The field as an unsigned integer (sizes 1, 2, 4, 8); `None` when the
    /// record is too short.
    fn read(self, raw: &[u8]) -> Option<u64> {
        let bytes = raw.get(self.offset..self.offset.checked_add(self.size)?)?;
        Some(match self.size {
            1 => u64::from(bytes[0]),
            2 => u64::from(u16::from_ne_bytes(bytes.try_into().ok()?)),
            4 => u64::from(u32::from_ne_bytes(bytes.try_into().ok()?)),
            8 => u64::from_ne_bytes(bytes.try_into().ok()?),
            _ => return None,
        })
    }
}

/// What a tracepoint's `format` file says: its id and its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Format {
    id: u64,
    fields: Vec<(String, FieldAt)>,
}

impl Format {
    /// Parses `name: …\nID: N\nformat:\n\tfield:TYPE NAME;\toffset:N;\tsize:M;…`.
    fn parse(text: &str) -> Option<Format> {
        let mut id = None;
        let mut fields = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            if let Some(value) = line.strip_prefix("ID:") {
                id = value.trim().parse().ok();
                continue;
            }
            let mut parts = line.split(';').map(str::trim);
            let Some(decl) = parts.next().and_then(|d| d.strip_prefix("field:")) else { continue };
            // The name is the last word of the declaration, less any `[N]`.
            let name = decl.rsplit(' ').next().unwrap_or("").split('[').next().unwrap_or("");
            let (mut offset, mut size) = (None, None);
            for part in parts {
                if let Some(v) = part.strip_prefix("offset:") {
                    offset = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("size:") {
                    size = v.parse().ok();
                }
            }
            if let (Some(offset), Some(size)) = (offset, size) {
                fields.push((name.to_owned(), FieldAt { offset, size }));
            }
        }
        Some(Format { id: id?, fields })
    }

    fn field(&self, name: &str) -> Option<FieldAt> {
        self.fields.iter().find(|(n, _)| n == name).map(|&(_, at)| at)
    }

    /// A field this code needs, of one of `sizes`.
    fn require(&self, tracepoint: Tracepoint, name: &'static str, sizes: &[usize]) -> Result<FieldAt, PerfError> {
        let problem = match self.field(name) {
            Some(at) if sizes.contains(&at.size) => return Ok(at),
            Some(at) => format!("size {} (expected one of {sizes:?})", at.size),
            None => "absent".to_owned(),
        };
        Err(PerfError::Layout { tracepoint: tracepoint.label(), field: name, problem })
    }
}

/// Where the decoder finds each field, per tracepoint.
#[derive(Clone, Copy, Debug)]
enum Decode {
    /// A filemap record: the page range is `index..=last` (`last` absent for
    /// a fault), or `index` and `2^order` pages for misses and evictions
    /// (one page where the record has no `order`).
    Filemap { kind: u32, ino: FieldAt, dev: FieldAt, index: FieldAt, last: Option<FieldAt>, order: Option<FieldAt> },
    /// `sched_process_exec`: the `__data_loc` of the file name.
    Exec { filename: FieldAt },
    /// `sched_process_exit`: `group_dead` (Linux 6.16+); without it the exit
    /// of the thread-group leader stands for the group's.
    Exit { group_dead: Option<FieldAt> },
}

/// The kernel's tracepoint ids and how to decode each one's raw record.
#[derive(Clone, Debug)]
struct Decoder {
    common_type: FieldAt,
    by_id: Vec<(u64, Decode)>,
}

impl Decoder {
    fn new(formats: &[(Tracepoint, Format)]) -> Result<Decoder, PerfError> {
        let mut common_type = FieldAt { offset: 0, size: 2 };
        let mut by_id = Vec::new();
        for (tracepoint, format) in formats {
            let tp = *tracepoint;
            common_type = format.require(tp, "common_type", &[2])?;
            let long = &[4, 8];
            let filemap = |kind, ranged: bool, folio: bool| -> Result<Decode, PerfError> {
                Ok(Decode::Filemap {
                    kind,
                    ino: format.require(tp, "i_ino", long)?,
                    dev: format.require(tp, "s_dev", &[4])?,
                    index: format.require(tp, "index", long)?,
                    last: if ranged { Some(format.require(tp, "last_index", long)?) } else { None },
                    // The page-based records of Linux 5.14/5.15 have no
                    // order: each is one page.
                    order: match format.field("order") {
                        Some(_) if folio => Some(format.require(tp, "order", &[1, 2, 4])?),
                        _ => None,
                    },
                })
            };
            let decode = match tp {
                Tracepoint::GetPages => filemap(PIO_KIND_READ, true, false)?,
                Tracepoint::MapPages => filemap(PIO_KIND_MAP_PAGES, true, false)?,
                Tracepoint::Fault => filemap(PIO_KIND_FAULT, false, false)?,
                Tracepoint::AddToPageCache => filemap(PIO_KIND_MISS, false, true)?,
                Tracepoint::DeleteFromPageCache => filemap(PIO_KIND_EVICT, false, true)?,
                Tracepoint::Exec => Decode::Exec { filename: format.require(tp, "filename", &[4])? },
                Tracepoint::Exit => Decode::Exit { group_dead: format.field("group_dead").filter(|f| f.size == 1) },
            };
            by_id.push((format.id, decode));
        }
        Ok(Decoder { common_type, by_id })
    }

    /// Decodes one sample's raw record. `Ok(None)`: nothing to report (the
    /// exit of a thread that is not the group's last).
    fn sample(&self, pid: u32, tid: u32, time_ns: u64, raw: &[u8]) -> Result<Option<Item>, Malformed> {
        let id = self.common_type.read(raw).ok_or(Malformed)?;
        let decode = self.by_id.iter().find(|(known, _)| *known == id).map(|&(_, d)| d).ok_or(Malformed)?;
        let record = |kind, dev, ino, first, last, aux| Record { time_ns, ino, first, last, dev, pid, aux, kind };
        let item = match decode {
            Decode::Filemap { kind, ino, dev, index, last, order } => {
                let first = index.read(raw).ok_or(Malformed)?;
                let last = match (last, order) {
                    (Some(last), _) => last.read(raw).ok_or(Malformed)?,
                    // Orders above 31 would be corrupt; mask like the BPF side.
                    (None, Some(order)) => first.saturating_add((1u64 << (order.read(raw).ok_or(Malformed)? & 31)) - 1),
                    (None, None) => first,
                };
                if last < first {
                    return Err(Malformed);
                }
                let dev = dev.read(raw).ok_or(Malformed)? as u32;
                Item::Record(record(kind, dev, ino.read(raw).ok_or(Malformed)?, first, last, 0))
            }
            Decode::Exec { filename } => {
                let loc = filename.read(raw).ok_or(Malformed)?;
                let (at, len) = ((loc & 0xffff) as usize, (loc >> 16) as usize);
                let bytes = raw.get(at..at + len).ok_or(Malformed)?;
                let bytes = bytes.split(|&b| b == 0).next().unwrap_or(&[]);
                let filename = String::from_utf8_lossy(bytes).into_owned();
                Item::Exec { pid, time_ns, filename }
            }
            Decode::Exit { group_dead } => {
                let last_thread = match group_dead {
                    Some(field) => field.read(raw).ok_or(Malformed)? != 0,
                    None => tid == pid,
                };
                if !last_thread {
                    return Ok(None);
                }
                Item::Record(record(PIO_KIND_EXIT, 0, 0, 0, 0, 0))
            }
        };
        Ok(Some(item))
    }
}

/// A record that could not be decoded (counted, skipped).
#[derive(Debug, PartialEq, Eq)]
struct Malformed;

/// A decoded record waiting, with the rest of its drain, to be put in time
/// order and delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Item {
    /// Delivered through [`Record::emit_events`], as the eBPF observer does.
    Record(Record),
    /// An exec, resolved to a `FileId` when delivered.
    Exec { pid: u32, time_ns: u64, filename: String },
}

impl Item {
    fn time_ns(&self) -> u64 {
        match self {
            Item::Record(record) => record.time_ns,
            Item::Exec { time_ns, .. } => *time_ns,
        }
    }
}

// perf record types and sample bits (include/uapi/linux/perf_event.h).
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_RECORD_LOST: u32 = 2;
const PERF_RECORD_FORK: u32 = 7;
const PERF_RECORD_SAMPLE: u32 = 9;
const PERF_RECORD_LOST_SAMPLES: u32 = 13;
const PERF_SAMPLE_TID: u64 = 1 << 1;
const PERF_SAMPLE_TIME: u64 = 1 << 2;
const PERF_SAMPLE_RAW: u64 = 1 << 10;
/// Size of `struct perf_event_header`.
const HEADER_LEN: usize = 8;

/// Decodes one ring record (`kind` from its header, `body` what follows the
/// header) into `items`, counting in `stats`.
fn decode_record(decoder: &Decoder, kind: u32, body: &[u8], items: &mut Vec<Item>, stats: &mut PerfStats) {
    let u32_at = |at: usize| body.get(at..at + 4).map(|b| u32::from_ne_bytes(b.try_into().expect("4 bytes")));
    let u64_at = |at: usize| body.get(at..at + 8).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")));
    match kind {
        PERF_RECORD_SAMPLE => {
            stats.records += 1;
            // PERF_SAMPLE_TID | TIME | RAW: u32 pid, u32 tid, u64 time, u32 size, raw.
            let decoded = (|| {
                let (pid, tid, time_ns, size) = (u32_at(0)?, u32_at(4)?, u64_at(8)?, u32_at(16)? as usize);
                let raw = body.get(20..20usize.checked_add(size)?)?;
                decoder.sample(pid, tid, time_ns, raw).ok()
            })();
            match decoded {
                Some(Some(item)) => items.push(item),
                Some(None) => {}
                None => stats.malformed += 1,
            }
        }
        PERF_RECORD_FORK => {
            // u32 pid, ppid, tid, ptid; u64 time. A new thread has pid == ppid.
            let Some((pid, ppid, time_ns)) = (|| Some((u32_at(0)?, u32_at(4)?, u64_at(16)?)))() else {
                stats.malformed += 1;
                return;
            };
            if pid != ppid {
                stats.records += 1;
                let record =
                    Record { time_ns, ino: 0, first: 0, last: 0, dev: 0, pid: ppid, aux: pid, kind: PIO_KIND_FORK };
                items.push(Item::Record(record));
            }
        }
        // u64 id, u64 lost.
        PERF_RECORD_LOST => stats.lost += u64_at(8).unwrap_or(0),
        // u64 lost.
        PERF_RECORD_LOST_SAMPLES => stats.lost += u64_at(0).unwrap_or(0),
        // PERF_RECORD_EXIT (every thread's, from the `task` bit; the
        // tracepoint tells group exits) and anything else: not ours to report.
        _ => {}
    }
}

/// One mmap'ed ring and the event that owns it.
struct Ring {
    ring: PerfRing,
    owner: OwnedFd,
    /// The owner reported `POLLHUP` (a followed tree that has all exited):
    /// still drained, no longer polled.
    hung_up: bool,
}

/// perf observation of page-cache accesses and process trees (see the
/// module documentation for how it differs from [`crate::Observer`]).
pub struct PerfObserver {
    // Rings are unmapped before the events that write them close (either
    // order is sound: a mapping keeps its buffer alive).
    rings: Vec<Ring>,
    _events: Vec<OwnedFd>,
    decoder: Decoder,
    /// Reused across drains: decoded records, a record's bytes.
    items: Vec<Item>,
    scratch: Vec<u8>,
    stats: PerfStats,
    poll_interval: Duration,
    missing: Vec<MissingHook>,
}

impl std::fmt::Debug for PerfObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerfObserver")
            .field("rings", &self.rings.len())
            .field("stats", &self.stats)
            .field("missing", &self.missing)
            .finish()
    }
}

impl PerfObserver {
    /// Reads the tracepoints' ids and layouts from tracefs, opens their
    /// events on every online CPU, maps the rings and enables the events.
    ///
    /// A page-access tracepoint (Linux 6.11+) that this kernel lacks, lays
    /// out otherwise, or that is [assumed missing](PerfConfig::assume_missing)
    /// is not opened: the observer runs without its events and
    /// [`PerfObserver::missing_hooks`] says why. The other tracepoints are
    /// required.
    ///
    /// Errors name the failing step; [`PerfError::is_unavailable`] tells
    /// whether to fall back to another source.
    pub fn open(config: PerfConfig) -> Result<PerfObserver, PerfError> {
        let target = validate(&config)?;
        let tracefs =
            layout::find_or_mount_tracefs(config.mount_tracefs).map_err(|source| PerfError::Tracefs { source })?;
        let (formats, missing) = read_formats(&tracefs, &config.assume_missing)?;
        let decoder = Decoder::new(&formats)?;
        let cpus = online_cpus().map_err(|source| PerfError::Syscall { call: "read cpu/online", source })?;

        let (pid, inherit) = match target {
            Some(pid) => (pid as i32, sys::PERF_ATTR_FLAG_INHERIT),
            None => (-1, 0),
        };
        let wakeup_bytes = match config.wakeup_bytes {
            0 => (config.ring_pages * sys::page_size() / 2) as u32,
            bytes => bytes,
        };
        let mut rings = Vec::with_capacity(cpus.len() * 2);
        let mut events = Vec::with_capacity(cpus.len() * Tracepoint::ALL.len());
        for &cpu in &cpus {
            let mut bulk: Option<usize> = None;
            for (tracepoint, format) in &formats {
                let mut attr = PerfEventAttr {
                    kind: PERF_TYPE_TRACEPOINT,
                    size: sys::PERF_ATTR_SIZE,
                    config: format.id,
                    sample_period: 1,
                    sample_type: PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_RAW,
                    flags: sys::PERF_ATTR_FLAG_DISABLED | sys::PERF_ATTR_FLAG_USE_CLOCKID | inherit,
                    clockid: libc::CLOCK_MONOTONIC,
                    ..PerfEventAttr::default()
                };
                let urgent = *tracepoint == Tracepoint::Exec;
                if urgent {
                    attr.wakeup = 1; // wakeup_events: every exec
                } else {
                    attr.flags |= sys::PERF_ATTR_FLAG_WATERMARK;
                    attr.wakeup = wakeup_bytes;
                }
                if *tracepoint == Tracepoint::Exit {
                    attr.flags |= sys::PERF_ATTR_FLAG_TASK;
                }
                let fd = sys::perf_event_open(&attr, pid, cpu as i32).map_err(|source| PerfError::Open {
                    tracepoint: tracepoint.label(),
                    cpu,
                    source,
                })?;
                let mmap_err = |source| PerfError::Syscall { call: "mmap perf ring", source };
                match (urgent, bulk) {
                    (true, _) => {
                        let ring = PerfRing::map(fd.as_fd(), 1).map_err(mmap_err)?;
                        rings.push(Ring { ring, owner: fd, hung_up: false });
                    }
                    (false, None) => {
                        let ring = PerfRing::map(fd.as_fd(), config.ring_pages).map_err(mmap_err)?;
                        bulk = Some(rings.len());
                        rings.push(Ring { ring, owner: fd, hung_up: false });
                    }
                    (false, Some(index)) => {
                        sys::perf_ioctl(fd.as_fd(), PerfIoctl::SetOutput(rings[index].owner.as_fd()))
                            .map_err(|source| PerfError::Syscall { call: "ioctl PERF_EVENT_IOC_SET_OUTPUT", source })?;
                        events.push(fd);
                    }
                }
            }
        }
        for fd in rings.iter().map(|r| &r.owner).chain(&events) {
            sys::perf_ioctl(fd.as_fd(), PerfIoctl::Enable)
                .map_err(|source| PerfError::Syscall { call: "ioctl PERF_EVENT_IOC_ENABLE", source })?;
        }
        Ok(PerfObserver {
            rings,
            _events: events,
            decoder,
            items: Vec::new(),
            scratch: Vec::new(),
            stats: PerfStats::default(),
            poll_interval: config.poll_interval,
            missing,
        })
    }

    /// The name of this event source, for logs and `predictio stat`.
    pub fn source_name(&self) -> &'static str {
        "perf"
    }

    /// The page-access tracepoints this observer runs without, and why
    /// (empty on a kernel with them all: Linux 6.11 and later).
    pub fn missing_hooks(&self) -> &[MissingHook] {
        &self.missing
    }

    /// The configured poll timeout ([`PerfConfig::poll_interval`]).
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// Delivers every record already in the rings, as events in time order,
    /// without waiting; misses and evictions that came back to back are
    /// joined into runs ([`Coalescer`]). Returns the number of events
    /// delivered.
    pub fn drain(&mut self, on_event: &mut impl FnMut(Event)) -> usize {
        let Self { rings, decoder, items, scratch, stats, .. } = self;
        items.clear();
        for ring in rings.iter() {
            read_ring(&ring.ring, scratch, &mut |kind, body| decode_record(decoder, kind, body, items, stats));
        }
        // Each ring is in time order already: the stable sort merges runs.
        items.sort_by_key(Item::time_ns);
        let mut delivered = 0usize;
        let mut deliver = |event| {
            delivered += 1;
            on_event(event);
        };
        let mut runs = Coalescer::default();
        for item in items.drain(..) {
            match item {
                Item::Record(record) => {
                    let counter = match record.kind {
                        PIO_KIND_READ => &mut stats.reads,
                        PIO_KIND_FAULT => &mut stats.faults,
                        PIO_KIND_MAP_PAGES => &mut stats.map_pages,
                        PIO_KIND_MISS => &mut stats.misses,
                        PIO_KIND_EVICT => &mut stats.evictions,
                        PIO_KIND_FORK => &mut stats.forks,
                        PIO_KIND_EXIT => &mut stats.exits,
                        _ => &mut stats.malformed,
                    };
                    *counter += 1;
                    record.emit_events(&[], &mut |event| runs.push(event, &mut deliver));
                }
                Item::Exec { pid, time_ns, filename } => {
                    stats.execs += 1;
                    let exe = resolve_exe(pid, &filename).unwrap_or_else(|| {
                        stats.unresolved_execs += 1;
                        FileId { dev: 0, ino: 0 }
                    });
                    let exec = Event::Exec { pid, exe, shape: crate::record::shape_of_process(pid), time_ns };
                    runs.push(exec, &mut deliver);
                }
            }
        }
        runs.flush(&mut deliver);
        stats.events += delivered as u64;
        delivered
    }

    /// Delivers what is in the rings; if they are empty, waits up to
    /// `timeout` (woken early by an exec or a ring past
    /// [`PerfConfig::wakeup_bytes`]) and delivers what arrived. Returns the
    /// number of events delivered (0 on a quiet timeout). Call it in a loop
    /// with a short timeout ([`PerfObserver::poll_interval`]).
    pub fn poll(&mut self, timeout: Duration, on_event: &mut impl FnMut(Event)) -> Result<usize, PerfError> {
        let delivered = self.drain(on_event);
        if delivered > 0 || timeout.is_zero() {
            return Ok(delivered);
        }
        use rustix::event::{PollFd, PollFlags};
        let mut pollfds: Vec<PollFd<'_>> =
            self.rings.iter().filter(|r| !r.hung_up).map(|r| PollFd::new(&r.owner, PollFlags::IN)).collect();
        if pollfds.is_empty() {
            // Every followed process has exited: nothing will wake us, but
            // the caller's loop still expects `timeout` to pass.
            std::thread::sleep(timeout);
        } else {
            sys::poll_many(&mut pollfds, timeout).map_err(|source| PerfError::Syscall { call: "poll", source })?;
            let hung_up: Vec<bool> =
                pollfds.iter().map(|p| p.revents().intersects(PollFlags::HUP | PollFlags::ERR)).collect();
            // The same filter, in the same order, as the poll set.
            for (ring, hung_up) in self.rings.iter_mut().filter(|r| !r.hung_up).zip(hung_up) {
                ring.hung_up = hung_up;
            }
        }
        Ok(self.drain(on_event))
    }

    /// The descriptors of the rings still polled, for a consumer that waits
    /// on them together with descriptors of its own (a stop signal) instead
    /// of in [`PerfObserver::poll`]: such a wait is woken as `poll`'s is (an
    /// exec, a ring past [`PerfConfig::wakeup_bytes`]).
    pub fn ring_fds(&self) -> impl Iterator<Item = std::os::fd::BorrowedFd<'_>> {
        self.rings.iter().filter(|r| !r.hung_up).map(|r| r.owner.as_fd())
    }

    /// Counters since the observer opened.
    pub fn stats(&self) -> PerfStats {
        self.stats
    }
}

/// Checks the configuration; returns the pid to follow (`None`: all).
fn validate(config: &PerfConfig) -> Result<Option<u32>, PerfError> {
    if !config.ring_pages.is_power_of_two() {
        return Err(PerfError::Config(format!("ring_pages {} must be a power of two", config.ring_pages)));
    }
    let target = match (config.follow_all, config.pid) {
        (true, None) => Ok(None),
        (false, Some(pid)) if pid > 0 && pid <= i32::MAX as u32 => Ok(Some(pid)),
        (false, Some(pid)) => Err(PerfError::Config(format!("pid {pid} out of range"))),
        (true, Some(_)) => Err(PerfError::Config("follow_all and pid are exclusive".into())),
        (false, None) => Err(PerfError::Config("nothing to observe: set follow_all or pid".into())),
    }?;
    for label in &config.assume_missing {
        if !Tracepoint::ALL.iter().any(|tp| !tp.required() && tp.label() == label) {
            let optional: Vec<&str> = Tracepoint::ALL.iter().filter(|tp| !tp.required()).map(|tp| tp.label()).collect();
            return Err(PerfError::Config(format!(
                "assume_missing: {label} is not an optional tracepoint of the perf observer; optional: {}",
                optional.join(", ")
            )));
        }
    }
    Ok(target)
}

/// The tracepoints to open, each with its `format`.
type Formats = Vec<(Tracepoint, Format)>;

/// Reads every tracepoint's `format` file: the formats of those to open,
/// and the optional ones left out (absent, assumed missing, or laid out in
/// a way the decoder cannot read). A required one's failure is the error.
fn read_formats(tracefs: &Path, assume_missing: &[String]) -> Result<(Formats, Vec<MissingHook>), PerfError> {
    let mut formats = Vec::new();
    let mut missing = Vec::new();
    for &tracepoint in &Tracepoint::ALL {
        let read = || {
            if assume_missing.iter().any(|label| label == tracepoint.label()) {
                return Err(PerfError::MissingTracepoint {
                    tracepoint: tracepoint.label(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "assumed missing (PerfConfig::assume_missing)",
                    ),
                });
            }
            let (category, name) = tracepoint.category_and_name();
            let path = tracefs.join("events").join(category).join(name).join("format");
            let text = std::fs::read_to_string(&path)
                .map_err(|source| PerfError::MissingTracepoint { tracepoint: tracepoint.label(), source })?;
            let format = Format::parse(&text).ok_or_else(|| PerfError::Layout {
                tracepoint: tracepoint.label(),
                field: "ID",
                problem: "no `ID:` line in the format file".into(),
            })?;
            // The decoder's own check, one tracepoint at a time, so that an
            // optional one it cannot read is left out rather than fatal.
            let pair = (tracepoint, format);
            Decoder::new(std::slice::from_ref(&pair))?;
            Ok(pair)
        };
        match read() {
            Ok(pair) => formats.push(pair),
            Err(err) if !tracepoint.required() && err.is_unavailable() => {
                tracing::debug!("perf observer: {} not opened: {err}", tracepoint.label());
                missing.push(MissingHook { hook: tracepoint.hook(), reason: err.to_string() });
            }
            Err(err) => return Err(err),
        }
    }
    Ok((formats, missing))
}

/// The online CPUs, from `/sys/devices/system/cpu/online` (`0-3,6,8-9`).
fn online_cpus() -> std::io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(text.trim()).ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, text))
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((first, last)) => cpus.extend(first.parse::<u32>().ok()?..=last.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    (!cpus.is_empty()).then_some(cpus)
}

/// Hands every complete record between the ring's tail and head to
/// `on_record(type, body)`, then moves the tail past them.
fn read_ring(ring: &PerfRing, scratch: &mut Vec<u8>, on_record: &mut dyn FnMut(u32, &[u8])) {
    let head = ring.head();
    let mut tail = ring.tail();
    while head.wrapping_sub(tail) >= HEADER_LEN as u64 {
        let mut header = [0u8; HEADER_LEN];
        ring.copy_out(tail, &mut header);
        let kind = u32::from_ne_bytes(header[0..4].try_into().expect("4 bytes"));
        let size = usize::from(u16::from_ne_bytes(header[6..8].try_into().expect("2 bytes")));
        if size < HEADER_LEN || size as u64 > head.wrapping_sub(tail) || size as u64 > ring.data_size() {
            // A corrupt header: nothing after it can be framed. Skip it all.
            tail = head;
            break;
        }
        scratch.resize(size - HEADER_LEN, 0);
        ring.copy_out(tail.wrapping_add(HEADER_LEN as u64), scratch);
        on_record(kind, scratch);
        tail = tail.wrapping_add(size as u64);
    }
    ring.set_tail(tail);
}

/// The executable of `pid` (`/proc/PID/exe`), or of the absolute path the
/// exec record names.
fn resolve_exe(pid: u32, filename: &str) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(format!("/proc/{pid}/exe"))
        .or_else(|err| if filename.starts_with('/') { std::fs::metadata(filename) } else { Err(err) })
        .ok()?;
    Some(FileId { dev: meta.dev(), ino: meta.ino() })
}

#[cfg(test)]
mod tests {
    use predictio::PageRange;
    use predictio::event::AccessKind;

    use super::*;

    /// Linux 6.18's formats of the tracepoints, trimmed to what is read.
    const FORMATS: &[(Tracepoint, &str)] = &[
        (
            Tracepoint::Exit,
            "ID: 369\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n",
        ),
        (
            Tracepoint::Exec,
            "ID: 365\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:__data_loc char[] filename;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t pid;\toffset:12;\tsize:4;\tsigned:1;\n",
        ),
        (
            Tracepoint::GetPages,
            "ID: 599\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned long i_ino;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:dev_t s_dev;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:unsigned long last_index;\toffset:32;\tsize:8;\tsigned:0;\n",
        ),
        (
            Tracepoint::AddToPageCache,
            "ID: 600\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;\n\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;\n\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;\n\tfield:unsigned char order;\toffset:36;\tsize:1;\tsigned:0;\n",
        ),
    ];

    fn decoder() -> Decoder {
        let formats: Vec<(Tracepoint, Format)> =
            FORMATS.iter().map(|(tp, text)| (*tp, Format::parse(text).expect("format"))).collect();
        Decoder::new(&formats).expect("decoder")
    }

    fn put(raw: &mut Vec<u8>, at: usize, bytes: &[u8]) {
        if raw.len() < at + bytes.len() {
            raw.resize(at + bytes.len(), 0);
        }
        raw[at..at + bytes.len()].copy_from_slice(bytes);
    }

    /// A PERF_RECORD_SAMPLE body: pid, tid, time, raw size, raw.
    fn sample(pid: u32, tid: u32, time: u64, raw: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&pid.to_ne_bytes());
        body.extend_from_slice(&tid.to_ne_bytes());
        body.extend_from_slice(&time.to_ne_bytes());
        body.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        body.extend_from_slice(raw);
        body
    }

    fn decode(kind: u32, body: &[u8]) -> (Vec<Event>, PerfStats) {
        let mut items = Vec::new();
        let mut stats = PerfStats::default();
        decode_record(&decoder(), kind, body, &mut items, &mut stats);
        let mut events = Vec::new();
        for item in items {
            match item {
                Item::Record(record) => {
                    record.emit_events(&[], &mut |e| events.push(e));
                }
                Item::Exec { pid, time_ns, filename } => {
                    assert_eq!(filename, "/bin/true");
                    events.push(Event::Exec { pid, exe: FileId { dev: 0, ino: 0 }, shape: "".into(), time_ns });
                }
            }
        }
        (events, stats)
    }

    #[test]
    fn format_parsing_reads_the_id_and_fields() {
        let format = Format::parse(FORMATS[0].1).expect("parse");
        assert_eq!(format.id, 369);
        assert_eq!(format.field("comm"), Some(FieldAt { offset: 8, size: 16 }));
        assert_eq!(format.field("group_dead"), Some(FieldAt { offset: 32, size: 1 }));
        assert_eq!(Format::parse("format:\n"), None, "no ID line");
    }

    #[test]
    fn a_missing_field_is_a_layout_error_and_unavailable() {
        let text = FORMATS[2].1.replace("last_index", "end_index");
        let err = Decoder::new(&[(Tracepoint::GetPages, Format::parse(&text).expect("parse"))]).expect_err("layout");
        assert!(matches!(err, PerfError::Layout { field: "last_index", .. }), "{err}");
        assert!(err.is_unavailable());
    }

    #[test]
    fn a_buffered_read_sample_becomes_a_page_access() {
        let mut raw = Vec::new();
        put(&mut raw, 0, &599u16.to_ne_bytes());
        put(&mut raw, 8, &42u64.to_ne_bytes());
        put(&mut raw, 16, &((8u32 << 20) | 1).to_ne_bytes());
        put(&mut raw, 24, &3u64.to_ne_bytes());
        put(&mut raw, 32, &5u64.to_ne_bytes());
        let (events, stats) = decode(PERF_RECORD_SAMPLE, &sample(100, 101, 7, &raw));
        let file = FileId { dev: libc::makedev(8, 1), ino: 42 };
        let want =
            Event::PageAccess { pid: 100, file, pages: PageRange::new(3, 6), kind: AccessKind::Read, time_ns: 7 };
        assert_eq!(events, [want]);
        assert_eq!((stats.records, stats.malformed), (1, 0));
    }

    #[test]
    fn a_folio_miss_is_one_event_of_its_pages() {
        let mut raw = Vec::new();
        put(&mut raw, 0, &600u16.to_ne_bytes());
        put(&mut raw, 16, &9u64.to_ne_bytes());
        put(&mut raw, 24, &4u64.to_ne_bytes());
        put(&mut raw, 32, &((259u32 << 20) | 3).to_ne_bytes());
        put(&mut raw, 36, &[2]);
        let (events, _) = decode(PERF_RECORD_SAMPLE, &sample(5, 5, 1, &raw));
        let [Event::PageMiss { pages, file, .. }] = events[..] else { panic!("{events:?}") };
        assert_eq!((pages, file.dev), (PageRange::new(4, 8), libc::makedev(259, 3)));
    }

    /// Linux 5.15's page-based record of `mm_filemap_add_to_page_cache`:
    /// no `order`, one page per record.
    #[test]
    fn a_page_miss_without_order_is_one_page() {
        let text = FORMATS[3].1.replace("\tfield:unsigned char order;\toffset:36;\tsize:1;\tsigned:0;\n", "");
        assert!(!text.contains("order"), "{text}");
        let format = Format::parse(&text).expect("parse");
        let decoder = Decoder::new(&[(Tracepoint::AddToPageCache, format)]).expect("no order is fine");
        let mut raw = Vec::new();
        put(&mut raw, 0, &600u16.to_ne_bytes());
        put(&mut raw, 16, &9u64.to_ne_bytes());
        put(&mut raw, 24, &4u64.to_ne_bytes());
        put(&mut raw, 32, &((259u32 << 20) | 3).to_ne_bytes());
        put(&mut raw, 36, &[2]); // not a field of this layout
        let item = decoder.sample(5, 5, 1, &raw).expect("decodes").expect("an item");
        assert!(matches!(item, Item::Record(Record { first: 4, last: 4, .. })), "{item:?}");
    }

    #[test]
    fn exec_reads_its_data_loc_filename() {
        let mut raw = Vec::new();
        put(&mut raw, 0, &365u16.to_ne_bytes());
        let name = b"/bin/true\0";
        put(&mut raw, 8, &((name.len() as u32) << 16 | 20).to_ne_bytes());
        put(&mut raw, 20, name);
        let (events, _) = decode(PERF_RECORD_SAMPLE, &sample(9, 9, 3, &raw));
        assert!(matches!(events[..], [Event::Exec { pid: 9, time_ns: 3, .. }]), "{events:?}");
        // A location past the record's end is malformed, not a panic.
        put(&mut raw, 8, &(10u32 << 16 | 200).to_ne_bytes());
        let (events, stats) = decode(PERF_RECORD_SAMPLE, &sample(9, 9, 3, &raw));
        assert_eq!((events.len(), stats.malformed), (0, 1));
    }

    #[test]
    fn only_the_last_thread_s_exit_is_reported() {
        let mut raw = Vec::new();
        put(&mut raw, 0, &369u16.to_ne_bytes());
        put(&mut raw, 32, &[0]);
        assert_eq!(decode(PERF_RECORD_SAMPLE, &sample(7, 8, 1, &raw)).0, []);
        put(&mut raw, 32, &[1]);
        assert_eq!(decode(PERF_RECORD_SAMPLE, &sample(7, 8, 1, &raw)).0, [Event::Exit { pid: 7, time_ns: 1 }]);
    }

    #[test]
    fn fork_records_report_processes_not_threads() {
        let fork = |pid: u32, ppid: u32| {
            let mut body = Vec::new();
            for v in [pid, ppid, pid, ppid] {
                body.extend_from_slice(&v.to_ne_bytes());
            }
            body.extend_from_slice(&11u64.to_ne_bytes());
            decode(PERF_RECORD_FORK, &body).0
        };
        assert_eq!(fork(20, 10), [Event::Fork { parent: 10, child: 20, time_ns: 11 }]);
        assert_eq!(fork(10, 10), [], "a new thread");
    }

    #[test]
    fn lost_and_malformed_records_are_counted() {
        let mut lost = Vec::new();
        lost.extend_from_slice(&1u64.to_ne_bytes());
        lost.extend_from_slice(&17u64.to_ne_bytes());
        assert_eq!(decode(PERF_RECORD_LOST, &lost).1.lost, 17);
        let unknown_id = sample(1, 1, 1, &[0xff, 0xff, 0, 0]);
        assert_eq!(decode(PERF_RECORD_SAMPLE, &unknown_id).1.malformed, 1);
        assert_eq!(decode(PERF_RECORD_SAMPLE, &[1, 2, 3]).1.malformed, 1);
        let mut short = sample(1, 1, 1, &599u16.to_ne_bytes());
        assert_eq!(decode(PERF_RECORD_SAMPLE, &short).1.malformed, 1);
        short.truncate(21); // raw size says 2, one byte present
        assert_eq!(decode(PERF_RECORD_SAMPLE, &short).1.malformed, 1);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-3,6,8-9"), Some(vec![0, 1, 2, 3, 6, 8, 9]));
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn config_is_checked() {
        let err = |config| validate(&config).expect_err("invalid");
        assert!(matches!(err(PerfConfig::default()), PerfError::Config(_)));
        assert!(matches!(
            err(PerfConfig { follow_all: true, pid: Some(1), ..Default::default() }),
            PerfError::Config(_)
        ));
        let odd = PerfConfig { follow_all: true, ring_pages: 3, ..Default::default() };
        assert!(!err(odd).is_unavailable());
    }

    /// A tracefs holding `tracepoints`' format files (the trimmed 6.18
    /// ones; a deletion's record is laid out as an insertion's).
    fn fake_tracefs(tracepoints: &[Tracepoint]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for &tp in tracepoints {
            let like = match tp {
                Tracepoint::DeleteFromPageCache => Tracepoint::AddToPageCache,
                Tracepoint::Fault | Tracepoint::MapPages => Tracepoint::GetPages,
                other => other,
            };
            let text = FORMATS.iter().find(|(t, _)| *t == like).map(|(_, text)| *text).expect("a format");
            let (category, name) = tp.category_and_name();
            let at = dir.path().join("events").join(category).join(name);
            std::fs::create_dir_all(&at).expect("mkdir");
            std::fs::write(at.join("format"), text).expect("format");
        }
        dir
    }

    const REQUIRED: [Tracepoint; 4] =
        [Tracepoint::Exit, Tracepoint::Exec, Tracepoint::AddToPageCache, Tracepoint::DeleteFromPageCache];

    fn labels(missing: &[MissingHook]) -> Vec<String> {
        missing.iter().map(|m| m.hook.label()).collect()
    }

    /// A kernel before 6.11: no page-access tracepoints. The rest opens;
    /// what is left out is named.
    #[test]
    fn the_page_access_tracepoints_are_optional() {
        let before_6_11 = fake_tracefs(&REQUIRED);
        let (formats, missing) = read_formats(before_6_11.path(), &[]).expect("opens without them");
        let opened: Vec<Tracepoint> = formats.iter().map(|(tp, _)| *tp).collect();
        assert_eq!(opened, REQUIRED);
        let access: Vec<String> = crate::hooks::filemap_access().map(Hook::label).collect();
        assert_eq!(labels(&missing), access);
        assert!(missing.iter().all(|m| m.reason.contains("format")), "{missing:?}");

        // All there, one assumed missing.
        let all = fake_tracefs(&Tracepoint::ALL);
        let (formats, missing) = read_formats(all.path(), &[]).expect("all");
        assert_eq!((formats.len(), missing.len()), (7, 0));
        let fault = "filemap:mm_filemap_fault".to_owned();
        let (formats, missing) = read_formats(all.path(), std::slice::from_ref(&fault)).expect("assumed");
        assert_eq!((formats.len(), labels(&missing)), (6, vec![fault.clone()]));
        assert!(missing[0].reason.contains("assumed missing"), "{missing:?}");

        // A page access laid out otherwise is left out too; a required
        // tracepoint absent or laid out otherwise is the error.
        let at = all.path().join("events/filemap/mm_filemap_map_pages/format");
        std::fs::write(&at, FORMATS[2].1.replace("last_index", "end_index")).expect("rewrite");
        let (_, missing) = read_formats(all.path(), &[]).expect("without map_pages");
        assert_eq!(labels(&missing), ["filemap:mm_filemap_map_pages"]);
        std::fs::remove_dir_all(all.path().join("events/filemap/mm_filemap_delete_from_page_cache")).expect("rm");
        let err = read_formats(all.path(), &[]).expect_err("deletions are required");
        assert!(matches!(err, PerfError::MissingTracepoint { tracepoint, .. } if tracepoint.contains("delete")));
        for tp in Tracepoint::ALL {
            assert_eq!(tp.hook().label(), tp.label());
            assert_eq!(tp.required(), !crate::hooks::filemap_access().any(|h| h.name == tp.hook().name));
        }
    }

    #[test]
    fn only_page_access_tracepoints_can_be_assumed_missing() {
        let config = |label: &str| PerfConfig {
            follow_all: true,
            assume_missing: vec![label.to_owned()],
            ..PerfConfig::default()
        };
        validate(&config("filemap:mm_filemap_get_pages")).expect("optional");
        for label in ["filemap:mm_filemap_add_to_page_cache", "sched:sched_process_exec", "fault"] {
            let err = validate(&config(label)).expect_err(label);
            assert!(matches!(err, PerfError::Config(_)) && !err.is_unavailable(), "{err}");
        }
    }

    #[test]
    fn the_observer_can_move_to_a_thread() {
        fn send<T: Send>() {}
        send::<PerfObserver>();
        fn error<T: std::error::Error + Send + Sync + 'static>() {}
        error::<PerfError>();
    }
}
