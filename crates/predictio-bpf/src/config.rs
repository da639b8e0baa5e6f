//! What the observer reports and how it buffers.

use std::path::PathBuf;
use std::time::Duration;

/// Settings of an [`crate::Observer`], fixed at [`crate::Observer::load`]
/// (only the followed set and follow-all change later).
#[derive(Clone, Debug)]
pub struct ObserverConfig {
    /// Report every process (the daemon's mode) instead of only followed
    /// ones. Can be changed later with [`crate::Observer::follow_all`].
    pub follow_all: bool,
    /// Whose path lookups ([`predictio::Event::Lookup`]) are reported under
    /// follow-all. Explicitly followed processes' are always reported.
    pub follow_all_lookups: FollowAllLookups,
    /// Attach the programs on the path system calls, which report lookups
    /// at all. Without them no process's lookups are reported, followed or
    /// not; with them every system call of every process takes the kernel's
    /// tracing path (the syscall tracepoints switch it on for all tasks),
    /// so a daemon that wants no lookups leaves them off.
    ///
    /// With them, the programs on `execve`/`execveat`'s entry report execs
    /// starting too ([`predictio::Event::ExecStart`], for every reported
    /// process).
    pub path_calls: bool,
    /// Report only files on these devices (`st_dev` values, as in
    /// [`predictio::FileId::dev`]). Empty: every device. At most 64.
    pub devices: Vec<u64>,
    /// Report only processes in this cgroup v2 directory or below it (e.g.
    /// `/sys/fs/cgroup/system.slice/foo.service`). `None`: any cgroup.
    pub cgroup: Option<PathBuf>,
    /// Report evictions whichever process causes them (reclaim by `kswapd`,
    /// another process's `fadvise(DONTNEED)`), subject to the device filter;
    /// waste accounting wants this. When false, evictions are filtered like
    /// everything else, by the process that evicts.
    pub evictions_any_process: bool,
    /// Report no page-cache accesses or misses of this process itself (the
    /// daemon's: its executor's prefetches would be a ring record per page,
    /// parsed only to be thrown away — about 37 K records per replayed
    /// Chromium launch). Other kinds (exec, fork, exit, evictions, lookups)
    /// are unaffected.
    pub ignore_own_pages: bool,
    /// Ring buffer size in bytes: a power of two, a multiple of the page size.
    /// A record takes 56 bytes (48 plus an 8-byte header), a lookup 312.
    pub ring_bytes: u32,
    /// Unread bytes in the ring buffer above which a record wakes the
    /// consumer at once. Below it, records are submitted without a wake-up
    /// and the consumer finds them when its poll timeout expires. 0 wakes on
    /// every record (lowest latency, and a traced reader several times
    /// slower). Exec records always wake the consumer: they are rare and
    /// start launch prefetching.
    pub wakeup_bytes: u64,
    /// Poll timeout a draining loop should use: the bound on notification
    /// latency while the ring is below `wakeup_bytes`. Read by
    /// [`crate::Observer::poll_interval`]; `poll` itself takes its timeout
    /// as an argument.
    pub poll_interval: Duration,
    /// Capacity of the in-kernel followed-process set.
    pub max_followed: u32,
    /// Mount tracefs at `/sys/kernel/tracing` if it is mounted neither there
    /// nor at `/sys/kernel/debug/tracing`.
    pub mount_tracefs: bool,
    /// Hooks to treat as absent from this kernel, by label
    /// (`filemap:mm_filemap_get_pages`, as [`crate::hooks::Hook::label`]
    /// gives): their programs are not attached, as on a kernel without them,
    /// and [`crate::Observer::missing_hooks`] names them. For testing older
    /// kernels' behaviour on a newer one. Only optional hooks
    /// ([`crate::hooks::Hook::required`] false) may be named.
    pub assume_missing: Vec<String>,
}

/// Whose path lookups an observer in follow-all mode reports
/// ([`ObserverConfig::follow_all_lookups`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FollowAllLookups {
    /// Nobody's: only explicitly followed processes' lookups are reported.
    #[default]
    None,
    /// A process's during its launch: for `window` after its exec, at most
    /// `per_launch` of them; a process it forks in that time shares the
    /// deadline and starts with what is left of the budget. What launch
    /// learning needs: ring records only for launching processes, at most
    /// `per_launch` a launch (every path call still runs the program: see
    /// [`ObserverConfig::path_calls`]). At most 8,192 processes are in their
    /// launch at once; past that the oldest leave early.
    Launches {
        /// How long after the exec lookups are reported.
        window: Duration,
        /// How many at most (a fork starts with what its parent has left).
        per_launch: u32,
    },
    /// Every process's, always: each path system call costs a ring record.
    All,
}

impl Default for ObserverConfig {
    fn default() -> Self {
        Self {
            follow_all: false,
            follow_all_lookups: FollowAllLookups::None,
            path_calls: true,
            devices: Vec::new(),
            cgroup: None,
            evictions_any_process: false,
            ignore_own_pages: false,
            ring_bytes: 8 << 20,
            wakeup_bytes: 2 << 20,
            poll_interval: Duration::from_millis(1),
            max_followed: 65536,
            mount_tracefs: true,
            assume_missing: Vec::new(),
        }
    }
}

/// Counters of an [`crate::Observer`] since it was loaded.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct ObserverStats {
    /// Records read from the ring buffer.
    pub records: u64,
    /// Events delivered (a miss or eviction of a large folio is one record
    /// and one event per page).
    pub events: u64,
    /// Records the kernel dropped because the ring buffer was full.
    pub lost: u64,
    /// Forked children of followed processes that could not be followed
    /// because the followed set was full ([`ObserverConfig::max_followed`]).
    pub lost_follows: u64,
    /// Records that were too short or of an unknown kind (skipped).
    pub malformed: u64,
    /// Buffered-read records (`mm_filemap_get_pages`).
    pub reads: u64,
    /// Page-fault records (`mm_filemap_fault`).
    pub faults: u64,
    /// Map-pages records (`mm_filemap_map_pages`).
    pub map_pages: u64,
    /// Page-cache insertion records (`mm_filemap_add_to_page_cache`).
    pub misses: u64,
    /// Page-cache deletion records (`mm_filemap_delete_from_page_cache`).
    pub evictions: u64,
    /// Exec records.
    pub execs: u64,
    /// Fork records (processes, not threads).
    pub forks: u64,
    /// Exit records (whole thread groups).
    pub exits: u64,
    /// Lookup records (absolute paths the path system calls were given); the
    /// perf source has none.
    pub lookups: u64,
    /// Exec-start records (`execve` entered with an absolute path); the
    /// perf source has none.
    pub exec_starts: u64,
}
