//! The daemon's configuration: TOML, every key optional, defaults built in.
//!
//! Names are typed: backends ([`BackendKind`]), observation sources
//! ([`SourceChoice`]) and policies ([`PolicyName`]) are enums, so a
//! misspelled one fails at load with the key, the value and the choices.
//! Unknown keys are errors too (a typo must not silently fall back to a
//! default). Settings that parse but cannot work — an out-of-range size, a
//! zero budget, a relative path — are rejected by [`Config::validate`],
//! which [`Config::load`] runs, each problem naming its key, its value and
//! what is allowed. [`Config::warnings`] lists settings that work but
//! deserve a look (an unauthenticated endpoint on every interface).
//!
//! Every default is written once: where the core has a default for the
//! same setting ([`ExecutorConfig`], [`Limits`], [`PressureConfig`],
//! [`HintConfig`], [`WindowLimits`]), the section's default is read from it.

use std::fmt;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use predictio::executor::{BackendKind, ExecutorConfig, Limits};
use predictio::hints::HintConfig;
use predictio::launch::{LearnFloor, ReplayPacing, RetireRule, WalkLimits, WindowLimits};
use predictio::pressure::PressureConfig;
use serde::{Deserialize, Deserializer};

/// Where the daemon looks for its configuration by default.
pub const DEFAULT_PATH: &str = "/etc/predictio/predictio.toml";

/// The control socket's default path (`[control] socket`).
pub const DEFAULT_CONTROL_SOCKET: &str = "/run/predictio/control.sock";

/// A configuration that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (a missing file is an error only when it
    /// was named explicitly).
    #[error("reading {path}: {source}", path = path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not TOML, has an unknown key, or a value of the wrong
    /// type or an unknown name. `message` names the key and the value.
    #[error("{path}, line {line}: {message}", path = path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// The line of the offending key or value (1-based).
        line: usize,
        /// What is wrong, e.g. `[executor] backend = "magic": expected one
        /// of fadvise, readahead, uring, madvise`.
        message: String,
    },
    /// The file parses but some settings cannot work.
    #[error("{path}: {problems}", path = path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Every setting that cannot work.
        problems: Invalid,
    },
}

/// One setting that cannot work, or that works but deserves a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The key, as written in the file: `[executor] queue_capacity`, or
    /// `policies` for a top-level key.
    pub key: String,
    /// The value, as TOML would write it.
    pub value: String,
    /// What is allowed, or why the value is a concern.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} = {}: {}", self.key, self.value, self.message)
    }
}

/// Every setting of a configuration that cannot work (at least one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Invalid(pub Vec<Problem>);

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            many => {
                write!(f, "{} invalid settings:", many.len())?;
                many.iter().try_for_each(|p| write!(f, "\n  {p}"))
            }
        }
    }
}

/// The whole file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Policies to run.
    pub policies: Vec<PolicyName>,
    /// Executor settings.
    pub executor: ExecutorSection,
    /// Memory-pressure guard.
    pub pressure: PressureSection,
    /// The hint socket.
    pub hints: HintsSection,
    /// Kernel observation.
    pub observe: ObserveSection,
    /// The control socket (`predictio stat`, `top`).
    pub control: ControlSection,
    /// Prometheus text endpoint.
    pub metrics: MetricsSection,
    /// Application launch: learning and replay.
    pub launch: LaunchSection,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            policies: PolicyName::defaults(),
            executor: ExecutorSection::default(),
            pressure: PressureSection::default(),
            hints: HintsSection::default(),
            observe: ObserveSection::default(),
            control: ControlSection::default(),
            metrics: MetricsSection::default(),
            launch: LaunchSection::default(),
        }
    }
}

/// A policy the daemon can run (`policies = [...]`): the names of
/// [`predictio::policies::by_name`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyName {
    /// Prefetch what programs declare through the hint socket.
    Hints,
    /// B-tree traversals declared by storage-engine adapters.
    Btree,
    /// Sequential streams detected in observed reads (opt-in).
    Stream,
    /// Read plans declared by programs.
    Readplan,
    /// Learned access patterns from observed reads (opt-in).
    Learned,
    /// Tensor layouts of model files.
    Tensor,
    /// Storage-engine scans.
    Scan,
    /// A Parquet query's column chunks ahead of it (opt-in).
    Columns,
}

impl PolicyName {
    /// Every policy.
    pub const ALL: [PolicyName; 8] = [
        PolicyName::Hints,
        PolicyName::Btree,
        PolicyName::Stream,
        PolicyName::Readplan,
        PolicyName::Learned,
        PolicyName::Tensor,
        PolicyName::Scan,
        PolicyName::Columns,
    ];

    /// The name in the file and in [`predictio::policies::by_name`].
    pub fn name(self) -> &'static str {
        match self {
            PolicyName::Hints => "hints",
            PolicyName::Btree => "btree",
            PolicyName::Stream => "stream",
            PolicyName::Readplan => "readplan",
            PolicyName::Learned => "learned",
            PolicyName::Tensor => "tensor",
            PolicyName::Scan => "scan",
            PolicyName::Columns => "columns",
        }
    }

    /// The policy of `name`, if there is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The core's default set ([`predictio::policies::DEFAULT`]).
    pub fn defaults() -> Vec<Self> {
        predictio::policies::DEFAULT.iter().filter_map(|name| Self::from_name(name)).collect()
    }

    /// A new instance of the policy.
    pub fn build(self) -> Option<Box<dyn predictio::policy::Policy>> {
        predictio::policies::by_name(self.name())
    }
}

impl fmt::Display for PolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where kernel observation comes from (`[observe] source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourceChoice {
    /// eBPF, else perf_event_open tracepoints, else fanotify, else hints
    /// only; the daemon says which one runs and why.
    #[default]
    Auto,
    /// eBPF or fail to start.
    Ebpf,
    /// perf_event_open tracepoints or fail to start.
    Perf,
    /// fanotify (opens and execs only) or fail to start.
    Fanotify,
    /// No kernel observation: hints only.
    None,
}

impl SourceChoice {
    /// Every choice.
    pub const ALL: [SourceChoice; 5] =
        [SourceChoice::Auto, SourceChoice::Ebpf, SourceChoice::Perf, SourceChoice::Fanotify, SourceChoice::None];

    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            SourceChoice::Auto => "auto",
            SourceChoice::Ebpf => "ebpf",
            SourceChoice::Perf => "perf",
            SourceChoice::Fanotify => "fanotify",
            SourceChoice::None => "none",
        }
    }
}

impl fmt::Display for SourceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A kernel feature the daemon runs as if absent (`[observe]
/// assume_missing`), for test profiles of older kernels on a newer one:
/// each takes the fallback it would take on a kernel without it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssumedMissing {
    /// The page-access tracepoints (`filemap:mm_filemap_get_pages`,
    /// `_fault`, `_map_pages`, Linux 6.11+): the observer reports misses,
    /// evictions and the process tree but no hits, as before 6.11.
    FilemapAccess,
    /// `cachestat(2)` (Linux 6.5+): residency is counted with `mincore(2)`,
    /// as before 6.5.
    Cachestat,
    /// The `PROCMAP_QUERY` ioctl (Linux 6.11+): a process's file mappings
    /// are read from the text of `/proc/PID/maps`, as before 6.11.
    ProcmapQuery,
    /// io_uring (refused as under `kernel.io_uring_disabled = 2`): the
    /// executor issues through fadvise.
    IoUring,
    /// The kernel's BTF (`/sys/kernel/btf/vmlinux`, which the eBPF
    /// observer's CO-RE reads need): eBPF observation does not load, and
    /// the daemon falls back to perf on the same tracepoints, their record
    /// layouts read from tracefs.
    Btf,
}

impl AssumedMissing {
    /// Every feature.
    pub const ALL: [AssumedMissing; 5] = [
        AssumedMissing::FilemapAccess,
        AssumedMissing::Cachestat,
        AssumedMissing::ProcmapQuery,
        AssumedMissing::IoUring,
        AssumedMissing::Btf,
    ];

    /// The name in the file.
    pub fn name(self) -> &'static str {
        match self {
            AssumedMissing::FilemapAccess => "filemap_access",
            AssumedMissing::Cachestat => "cachestat",
            AssumedMissing::ProcmapQuery => "procmap_query",
            AssumedMissing::IoUring => "io_uring",
            AssumedMissing::Btf => "btf",
        }
    }

    /// The observer hooks (`category:name`) the feature stands for (none
    /// for a system call or BTF).
    pub fn hooks(self) -> Vec<String> {
        match self {
            AssumedMissing::FilemapAccess => predictio_bpf::hooks::filemap_access().map(|h| h.label()).collect(),
            _ => Vec::new(),
        }
    }

    /// The system call the feature stands for, if it is one.
    pub fn call(self) -> Option<predictio::os::NewerCall> {
        match self {
            AssumedMissing::FilemapAccess | AssumedMissing::Btf => None,
            AssumedMissing::Cachestat => Some(predictio::os::NewerCall::Cachestat),
            AssumedMissing::ProcmapQuery => Some(predictio::os::NewerCall::ProcmapQuery),
            AssumedMissing::IoUring => Some(predictio::os::NewerCall::IoUring),
        }
    }

    /// Takes the system calls of `features` away from this whole process
    /// ([`predictio::os::assume_missing`]); the hooks are left to the
    /// observer's configuration.
    pub fn apply(features: &[AssumedMissing]) {
        for call in features.iter().filter_map(|f| f.call()) {
            predictio::os::assume_missing(call);
        }
    }
}

impl fmt::Display for AssumedMissing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The backend names, in [`BackendKind::ALL`]'s order (serde wants them as
/// a static list; a test keeps the two in step).
const BACKEND_NAMES: [&str; 4] = ["fadvise", "readahead", "uring", "madvise"];

/// A [`BackendKind`] by its name ([`BackendKind`]'s `FromStr`).
fn backend_by_name<'de, D: Deserializer<'de>>(d: D) -> Result<BackendKind, D::Error> {
    let name = String::deserialize(d)?;
    name.parse().map_err(|_| serde::de::Error::unknown_variant(&name, &BACKEND_NAMES))
}

/// `[executor]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorSection {
    /// fadvise | readahead | uring | madvise
    #[serde(deserialize_with = "backend_by_name")]
    pub backend: BackendKind,
    /// I/Os in flight (uring).
    pub io_depth: u32,
    /// Requests queued before new ones are dropped.
    pub queue_capacity: usize,
    /// Largest single I/O, KiB.
    pub max_io_kib: u64,
    /// Pages in flight at once.
    pub max_inflight_pages: u64,
    /// Pages one request may ask for.
    pub max_pages_per_request: u64,
    /// Remember prefetched pages to count hits and waste. On in the daemon
    /// ([`DAEMON_TRACKS_HITS`]), whose `stat`, `top` and metrics report them.
    pub track_hits: bool,
    /// Seconds an untouched prefetched page may wait before it counts as
    /// waste.
    pub hit_timeout_secs: u64,
    /// KiB of fadvise/readahead I/O that may be in flight unconfirmed before
    /// the executor waits for some of it to settle (0: unbounded). The
    /// default is the launch replay's window ([`ExecutorConfig::replaying`],
    /// 4 MiB), which keeps a program's own reads from queueing behind a
    /// replay.
    pub max_unsettled_kib: u64,
    /// Metadata prefetch (a launch's lookups and directory listings) in the
    /// real-time I/O class, ahead of queued data prefetch. Off by default:
    /// mq-deadline holds every best-effort read back while a real-time one
    /// is in flight, the launching program's own reads included.
    pub meta_realtime_io: bool,
    /// How long data prefetch waits, at most, for the exec a launch replay
    /// names to be resolved, ms ([`ExecutorConfig::exec_gate_max`]): enough
    /// for an exec's lookups on this device, so they do not queue behind
    /// the replay's data.
    pub exec_gate_ms: u64,
    /// Unsettled reads probed per round, oldest first
    /// ([`Limits::settle_scan`]): more finds room sooner on a device that
    /// completes reads far out of order, at more probes.
    pub settle_scan: usize,
    /// A paced read younger than this that is not readable yet is taken to
    /// be in flight, ms ([`Limits::settle_recent`]): about the device's
    /// slowest ordinary read.
    pub settle_recent_ms: u64,
    /// Sleep between rounds of probes that found nothing settled, µs
    /// ([`Limits::pace_sleep`]): a fraction of the device's read latency.
    pub pace_sleep_us: u64,
    /// A read in flight is probed again after a quarter of its age, at
    /// least this long after, µs ([`Limits::min_probe_interval`]: bounds
    /// the probes' CPU)...
    pub probe_min_us: u64,
    /// ...and at most this long after, µs ([`Limits::max_probe_interval`]:
    /// bounds how late a settled read leaves the window).
    pub probe_max_us: u64,
}

/// Whether the daemon tracks hits and waste by default (the core's
/// [`Limits`] do not: an embedded executor has no one to report them to).
pub const DAEMON_TRACKS_HITS: bool = true;

/// KiB in a page.
const PAGE_KIB: u64 = predictio::PAGE_SIZE / 1024;

impl Default for ExecutorSection {
    fn default() -> Self {
        let d = ExecutorConfig::default();
        Self {
            backend: d.backend,
            io_depth: d.io_depth,
            queue_capacity: d.queue_capacity,
            max_io_kib: d.limits.max_io_pages * PAGE_KIB,
            max_inflight_pages: d.limits.max_inflight_pages,
            max_pages_per_request: d.limits.max_pages_per_request,
            track_hits: DAEMON_TRACKS_HITS,
            hit_timeout_secs: d.hit_timeout.as_secs(),
            max_unsettled_kib: ExecutorConfig::replaying().limits.max_unsettled_pages * PAGE_KIB,
            meta_realtime_io: d.meta_realtime_io,
            exec_gate_ms: d.exec_gate_max.as_millis() as u64,
            settle_scan: d.limits.settle_scan,
            settle_recent_ms: d.limits.settle_recent.as_millis() as u64,
            pace_sleep_us: d.limits.pace_sleep.as_micros() as u64,
            probe_min_us: d.limits.min_probe_interval.as_micros() as u64,
            probe_max_us: d.limits.max_probe_interval.as_micros() as u64,
        }
    }
}

/// `[pressure]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct PressureSection {
    /// PSI `some avg10` above which speculative work stops (percent).
    pub max_some_avg10: f64,
    /// `MemAvailable` share of RAM below which speculative work stops.
    pub min_available_fraction: f64,
    /// …or this many MiB, whichever is larger.
    pub min_available_mib: u64,
    /// A memory cgroup's (v2) headroom, limit less usage, below which
    /// speculative work for it stops, as a share of its limit…
    pub min_cgroup_headroom_fraction: f64,
    /// …or this many MiB, whichever is larger.
    pub min_cgroup_headroom_mib: u64,
    /// The largest share of the memory headroom one speculative request may
    /// issue; the rest is dropped, counted. Above 0, at most 1.
    pub max_request_headroom_fraction: f64,
}

impl Default for PressureSection {
    fn default() -> Self {
        let d = PressureConfig::default();
        Self {
            max_some_avg10: d.max_some_avg10,
            min_available_fraction: d.min_available_fraction,
            min_available_mib: d.min_available_bytes >> 20,
            min_cgroup_headroom_fraction: d.min_cgroup_headroom_fraction,
            min_cgroup_headroom_mib: d.min_cgroup_headroom_bytes >> 20,
            max_request_headroom_fraction: d.max_request_headroom_fraction,
        }
    }
}

/// `[hints]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct HintsSection {
    /// Listen for hints at all.
    pub enabled: bool,
    /// The datagram socket.
    pub socket: PathBuf,
    /// Clients served at once.
    pub max_clients: usize,
    /// Files one client may register.
    pub max_handles_per_client: usize,
    /// Frames per second one client may send.
    pub frames_per_sec: u64,
    /// Bytes of prefetch one client may ask for per second, MiB.
    pub mib_per_sec: u64,
    /// Clients one user (uid) may have at once.
    pub max_clients_per_uid: usize,
    /// Files one user may register over all its clients.
    pub max_handles_per_uid: usize,
    /// Files registered over all clients (at most 3/4 of RLIMIT_NOFILE).
    pub max_handles: usize,
    /// Frames per second one user may send over all its clients.
    pub frames_per_sec_per_uid: u64,
    /// Bytes one user may send and ask for per second over all its
    /// clients, MiB.
    pub mib_per_sec_per_uid: u64,
    /// One user's accepted hints waiting for the pipeline, KiB.
    pub max_queued_kib_per_uid: u64,
    /// All users' accepted hints waiting for the pipeline, KiB.
    pub max_queued_kib: u64,
}

impl Default for HintsSection {
    fn default() -> Self {
        let d = HintConfig::default();
        Self {
            enabled: true,
            socket: d.path,
            max_clients: d.max_clients,
            max_handles_per_client: d.max_handles_per_client,
            frames_per_sec: d.frames_per_sec,
            mib_per_sec: d.bytes_per_sec >> 20,
            max_clients_per_uid: d.max_clients_per_uid,
            max_handles_per_uid: d.max_handles_per_uid,
            max_handles: d.max_handles,
            frames_per_sec_per_uid: d.frames_per_sec_per_uid,
            mib_per_sec_per_uid: d.bytes_per_sec_per_uid >> 20,
            max_queued_kib_per_uid: d.max_queued_bytes_per_uid >> 10,
            max_queued_kib: d.max_queued_bytes >> 10,
        }
    }
}

impl HintsSection {
    /// The hint server's settings: these limits, and the core's defaults for
    /// the rest. A client's bursts scale with its rates as the core's
    /// defaults do (in seconds of each rate).
    pub fn hint_config(&self) -> HintConfig {
        let d = HintConfig::default();
        let bytes_per_sec = self.mib_per_sec.saturating_mul(1 << 20);
        let bytes_per_sec_per_uid = self.mib_per_sec_per_uid.saturating_mul(1 << 20);
        HintConfig {
            max_clients: self.max_clients,
            max_handles_per_client: self.max_handles_per_client,
            frames_per_sec: self.frames_per_sec,
            frame_burst: self.frames_per_sec.saturating_mul(d.frame_burst / d.frames_per_sec.max(1)),
            bytes_per_sec,
            byte_burst: bytes_per_sec.saturating_mul(d.byte_burst / d.bytes_per_sec.max(1)),
            max_clients_per_uid: self.max_clients_per_uid,
            max_handles_per_uid: self.max_handles_per_uid,
            max_handles: self.max_handles,
            frames_per_sec_per_uid: self.frames_per_sec_per_uid,
            frame_burst_per_uid: self
                .frames_per_sec_per_uid
                .saturating_mul(d.frame_burst_per_uid / d.frames_per_sec_per_uid.max(1)),
            bytes_per_sec_per_uid,
            byte_burst_per_uid: bytes_per_sec_per_uid
                .saturating_mul(d.byte_burst_per_uid / d.bytes_per_sec_per_uid.max(1)),
            max_queued_bytes_per_uid: self.max_queued_kib_per_uid.saturating_mul(1 << 10),
            max_queued_bytes: self.max_queued_kib.saturating_mul(1 << 10),
            ..HintConfig::at(&self.socket)
        }
    }
}

/// `[observe]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ObserveSection {
    /// auto (eBPF, else perf, else fanotify, else hints only) | ebpf | perf |
    /// fanotify | none
    pub source: SourceChoice,
    /// Mounts fanotify watches when it is the source (opens and execs).
    pub fanotify_mounts: Vec<PathBuf>,
    /// How long the event source may sit on events before handing them over,
    /// ms (the notification-latency bound) while events flow; while few
    /// arrive the daemon waits up to 16 ms (exec records never wait).
    pub poll_ms: u64,
    /// Kernel features to run without as if this kernel lacked them (test
    /// profiles of older kernels): `filemap_access`.
    pub assume_missing: Vec<AssumedMissing>,
}

impl Default for ObserveSection {
    fn default() -> Self {
        Self { source: SourceChoice::Auto, poll_ms: 2, fanotify_mounts: vec!["/".into()], assume_missing: Vec::new() }
    }
}

/// `[control]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ControlSection {
    /// The control socket (mode 0600: per-file counters name other users'
    /// files).
    pub socket: PathBuf,
}

impl Default for ControlSection {
    fn default() -> Self {
        Self { socket: PathBuf::from(DEFAULT_CONTROL_SOCKET) }
    }
}

/// `[metrics]`
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// `host:port` for a Prometheus text endpoint (`GET /metrics`); empty:
    /// off. Only per-origin and total counters are exported, never files.
    /// The endpoint has no authentication: an address on every interface
    /// (`0.0.0.0`, `::`) is accepted with a warning.
    pub listen: String,
}

/// `[launch]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LaunchSection {
    /// Learn the launch window of every exec (needs observation of all
    /// processes: eBPF or perf). A launch that read less than 1 MiB from
    /// storage itself (warm, or filled by a replay) is learned again only
    /// 10 minutes after its profile was last written.
    pub learn: bool,
    /// Replay the profile of a known executable on its exec (off: nothing
    /// is replayed, stored profiles included; learning goes on if `learn`).
    pub replay: bool,
    /// Directory of the profile store.
    pub store: PathBuf,
    /// Size cap of the stored profiles, MiB (least recently used evicted).
    pub store_cap_mib: u64,
    /// A launch window ends after this long without a page-cache miss, ms.
    pub idle_ms: u64,
    /// A launch window never lasts longer, ms.
    pub cap_ms: u64,
    /// Launch windows open at once; more execs are not learned (counted).
    pub max_windows: usize,
    /// Learn the paths launches look up too, replayed as lookups at exec
    /// (profiles from `predictio record` have them whatever this says).
    /// Only a process's first `cap_ms` after its exec (and its children's
    /// in that time) are reported, at most 16,384 per launch. Off by
    /// default: the path-call tracepoints put every system call of every
    /// process on the kernel's tracing path (measured here: +45 ns a call,
    /// +400 ns a path call), for a wall-time gain not shown in the daemon;
    /// off, they are not attached. On, `execve`'s entry is seen too, and a
    /// launch is replayed there, before the kernel reads the program, not
    /// at its exec (python3's heavy imports 107–110 against 121–124 ms
    /// here, see `docs/notes/2026-12-06-launch-and-executor-findings.md`).
    pub lookups: bool,
    /// Learn only executables under these path prefixes (empty: all).
    pub allow: Vec<String>,
    /// Never learn executables under these path prefixes.
    pub deny: Vec<String>,
    /// A launch of a command with no profile yet is learned only if it read
    /// at least this much from storage itself (page-cache misses), KiB...
    pub min_learn_missed_kib: u64,
    /// ...and its window lasted at least this long, ms. A replay can win at
    /// most a launch's own time waiting for storage: under either floor a
    /// launch (a script's `head -2`, a warm launch) is too trivial to learn
    /// ([`predictio::launch::LearnFloor`]). 0 and 0: learn every launch.
    pub min_learn_ms: u64,
    /// Replays of at most this many MiB are small
    /// ([`predictio::launch::ReplayPacing::small_pages`]): bound by the
    /// program's own reads waiting behind the replay, not by throughput...
    pub small_replay_mib: u64,
    /// ...and are paced in this narrower window, KiB
    /// ([`predictio::launch::ReplayPacing::small_window_pages`]; the others
    /// in `[executor] max_unsettled_kib`).
    pub small_replay_window_kib: u64,
    /// A replay's pages go to the executor in requests of about this many
    /// KiB, in order of first use ([`predictio::launch::WalkLimits::wave_pages`];
    /// 0: one request per file).
    pub replay_wave_kib: u64,
    /// A replayed range takes in later pages that continue it while it stays
    /// within this many KiB ([`predictio::launch::WalkLimits::coalesce_pages`];
    /// 0: never): fewer, larger reads for a device bound by reads a second.
    pub replay_coalesce_kib: u64,
    /// Shadow mode: learn and score replays as usual, but the replayer
    /// issues nothing (no prefetch request at all); a replayed page the
    /// launch accessed counts as used ([`predictio::launch::score`]).
    pub shadow: bool,
    /// A profile is judged once this many of its replays were scored
    /// ([`predictio::launch::RetireRule::min_replays`]; 1 to 8)...
    pub retire_after_replays: u32,
    /// ...and retired when its launches used less than this share of the
    /// replayed pages, percent (0: never on use), or when its replayed
    /// launches' median duration is not below its cold launches' (not in
    /// shadow mode).
    pub retire_min_used_pct: u32,
    /// A retired profile is learned and replayed again after this many
    /// days (or once its executable changes), 1 to 3650.
    pub retire_days: u64,
}

impl Default for LaunchSection {
    fn default() -> Self {
        let window = WindowLimits::default();
        let (floor, pacing, walk) = (LearnFloor::default(), ReplayPacing::default(), WalkLimits::default());
        let retire = RetireRule::default();
        Self {
            learn: true,
            replay: true,
            store: PathBuf::from(crate::launch::store::DEFAULT_DIR),
            store_cap_mib: crate::launch::store::DEFAULT_CAP_BYTES >> 20,
            idle_ms: window.idle_ms,
            cap_ms: window.cap_ms,
            max_windows: 8,
            lookups: false,
            allow: Vec::new(),
            deny: Vec::new(),
            min_learn_missed_kib: floor.missed_pages * PAGE_KIB,
            min_learn_ms: floor.window_ms,
            small_replay_mib: pacing.small_pages * PAGE_KIB / 1024,
            small_replay_window_kib: pacing.small_window_pages * PAGE_KIB,
            replay_wave_kib: walk.wave_pages * PAGE_KIB,
            replay_coalesce_kib: walk.coalesce_pages * PAGE_KIB,
            shadow: false,
            retire_after_replays: retire.min_replays as u32,
            retire_min_used_pct: (retire.min_used * 100.0).round() as u32,
            retire_days: retire.retire_for_s / 86_400,
        }
    }
}

impl LaunchSection {
    /// Whether the executable at `path` may be learned.
    pub fn may_learn(&self, path: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|p| path.starts_with(p.as_str())))
            && !self.deny.iter().any(|p| path.starts_with(p.as_str()))
    }

    /// The profile store's size cap in bytes.
    pub fn store_cap_bytes(&self) -> u64 {
        self.store_cap_mib.saturating_mul(1 << 20)
    }

    /// When a profile whose replays do not pay is retired.
    pub fn retire_rule(&self) -> RetireRule {
        RetireRule {
            min_replays: self.retire_after_replays as usize,
            min_used: f64::from(self.retire_min_used_pct) / 100.0,
            by_duration: !self.shadow,
            retire_for_s: self.retire_days.saturating_mul(86_400),
        }
    }

    /// The floor under which a launch of a command with no profile is not
    /// learned.
    pub fn learn_floor(&self) -> LearnFloor {
        LearnFloor { missed_pages: self.min_learn_missed_kib.div_ceil(PAGE_KIB), window_ms: self.min_learn_ms }
    }

    /// Which replays ask for a narrower window than the executor's
    /// (`[executor] max_unsettled_kib`), and how narrow.
    pub fn replay_pacing(&self) -> ReplayPacing {
        ReplayPacing {
            small_pages: self.small_replay_mib.saturating_mul(1024 / PAGE_KIB),
            small_window_pages: self.small_replay_window_kib / PAGE_KIB,
        }
    }

    /// How a profile is walked into a replay.
    pub fn walk_limits(&self) -> WalkLimits {
        WalkLimits {
            wave_pages: self.replay_wave_kib / PAGE_KIB,
            coalesce_pages: self.replay_coalesce_kib / PAGE_KIB,
            ..WalkLimits::default()
        }
    }
}

impl Config {
    /// Reads `path`; a missing file at the default path means defaults, a
    /// missing file named explicitly is an error. The result is validated.
    pub fn load(path: Option<&Path>) -> Result<Self, ConfigError> {
        Self::load_from(path).map(|(config, _)| config)
    }

    /// Like [`Self::load`], and says which file was read (`None`: there was
    /// none at the default path, the built-in defaults apply).
    pub fn load_from(path: Option<&Path>) -> Result<(Self, Option<PathBuf>), ConfigError> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_PATH), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !explicit => {
                tracing::info!(path = %path.display(), "no configuration file; using defaults");
                return Ok((Self::default(), None));
            }
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let config =
            Self::parse(&text).map_err(|(line, message)| ConfigError::Parse { path: path.clone(), line, message })?;
        config.validate().map_err(|problems| ConfigError::Invalid { path: path.clone(), problems })?;
        Ok((config, Some(path)))
    }

    /// Parses `text` without validating it. The error is the line and a
    /// message naming the key and the value, e.g. `[executor] backend =
    /// "magic": expected one of fadvise, readahead, uring, madvise`.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        toml::from_str(text).map_err(|err| describe(text, &err))
    }

    /// Rejects settings that cannot work, naming each one's key, its value
    /// and what is allowed.
    pub fn validate(&self) -> Result<(), Invalid> {
        let mut c = Checker::default();
        self.check_policies(&mut c);
        self.check_executor(&mut c);
        self.check_pressure(&mut c);
        self.check_hints(&mut c);
        self.check_observe(&mut c);
        self.check_control_and_metrics(&mut c);
        self.check_launch(&mut c);
        if c.problems.is_empty() { Ok(()) } else { Err(Invalid(c.problems)) }
    }

    /// Settings that work but deserve a look: an unauthenticated metrics
    /// endpoint on every interface, launch learning without an observation
    /// source that sees every process's reads.
    pub fn warnings(&self) -> Vec<Problem> {
        let mut warnings = Vec::new();
        let listen = self.metrics.listen.trim();
        if !listen.is_empty() && listen_addrs(listen).is_some_and(|a| a.iter().any(|a| a.ip().is_unspecified())) {
            warnings.push(Problem {
                key: "[metrics] listen".into(),
                value: quoted(listen),
                message: "the metrics endpoint has no authentication and this address is every interface: \
                          anyone who can reach the port reads the counters; prefer 127.0.0.1 or a firewall"
                    .into(),
            });
        }
        if self.launch.learn && matches!(self.observe.source, SourceChoice::Fanotify | SourceChoice::None) {
            warnings.push(Problem {
                key: "[observe] source".into(),
                value: quoted(self.observe.source.name()),
                message: "[launch] learn = true needs page-cache observation of every process (eBPF or perf): \
                          nothing will be learned"
                    .into(),
            });
        }
        warnings
    }

    fn check_policies(&self, c: &mut Checker) {
        let value = || format!("[{}]", self.policies.iter().map(|p| quoted(p.name())).collect::<Vec<_>>().join(", "));
        if self.policies.is_empty() {
            c.fail(
                "policies",
                value(),
                format!(
                    "no policy would run, so hints and observed events would do nothing; name at least one of {}",
                    names(PolicyName::ALL.map(PolicyName::name))
                ),
            );
        }
        for (i, p) in self.policies.iter().enumerate() {
            if self.policies[..i].contains(p) {
                c.fail("policies", value(), format!("{p} is named twice"));
            }
        }
    }

    fn check_executor(&self, c: &mut Checker) {
        let e = &self.executor;
        c.range("[executor] io_depth", e.io_depth.into(), 1..=4096, "I/Os in flight");
        c.range("[executor] queue_capacity", e.queue_capacity as u64, 1..=1 << 20, "requests");
        c.kib("[executor] max_io_kib", e.max_io_kib, 4..=256 * 1024);
        c.range("[executor] max_inflight_pages", e.max_inflight_pages, 1..=1 << 24, "pages, 64 GiB at most");
        c.range("[executor] max_pages_per_request", e.max_pages_per_request, 1..=1 << 28, "pages, 1 TiB at most");
        c.range("[executor] hit_timeout_secs", e.hit_timeout_secs, 1..=86_400, "seconds");
        if e.max_unsettled_kib != 0 {
            c.kib("[executor] max_unsettled_kib", e.max_unsettled_kib, 4..=16 << 20);
        }
        c.range("[executor] exec_gate_ms", e.exec_gate_ms, 0..=1000, "ms");
        c.range("[executor] settle_scan", e.settle_scan as u64, 1..=4096, "reads probed per round");
        c.range("[executor] settle_recent_ms", e.settle_recent_ms, 0..=10_000, "ms");
        c.range("[executor] pace_sleep_us", e.pace_sleep_us, 1..=100_000, "µs");
        c.range("[executor] probe_max_us", e.probe_max_us, 1..=1_000_000, "µs");
        c.range("[executor] probe_min_us", e.probe_min_us, 1..=e.probe_max_us.max(1), "µs, at most probe_max_us");
    }

    fn check_pressure(&self, c: &mut Checker) {
        let p = &self.pressure;
        c.fraction("[pressure] max_some_avg10", p.max_some_avg10, 100.0, "percent of time stalled");
        c.fraction("[pressure] min_available_fraction", p.min_available_fraction, 1.0, "share of RAM");
        c.range("[pressure] min_available_mib", p.min_available_mib, 0..=16 << 20, "MiB, 16 TiB at most");
        c.fraction(
            "[pressure] min_cgroup_headroom_fraction",
            p.min_cgroup_headroom_fraction,
            1.0,
            "share of the limit",
        );
        c.range("[pressure] min_cgroup_headroom_mib", p.min_cgroup_headroom_mib, 0..=16 << 20, "MiB, 16 TiB at most");
        let share = p.max_request_headroom_fraction;
        if !(share.is_finite() && share > 0.0 && share <= 1.0) {
            c.fail(
                "[pressure] max_request_headroom_fraction",
                share,
                "expected a number above 0, at most 1 (share of the headroom; 0 would drop every speculative request)",
            );
        }
    }

    fn check_hints(&self, c: &mut Checker) {
        let h = &self.hints;
        c.absolute("[hints] socket", &h.socket);
        let nothing = "hints would do nothing";
        c.budget("[hints] max_clients", h.max_clients as u64, 1..=1 << 16, "clients", nothing);
        c.budget("[hints] max_handles_per_client", h.max_handles_per_client as u64, 1..=1 << 20, "files", nothing);
        c.budget("[hints] frames_per_sec", h.frames_per_sec, 1..=100_000_000, "frames per second per client", nothing);
        c.budget("[hints] mib_per_sec", h.mib_per_sec, 1..=16 << 20, "MiB per second per client", nothing);
        c.budget("[hints] max_clients_per_uid", h.max_clients_per_uid as u64, 1..=1 << 16, "clients per user", nothing);
        c.budget("[hints] max_handles_per_uid", h.max_handles_per_uid as u64, 1..=1 << 20, "files per user", nothing);
        c.budget("[hints] max_handles", h.max_handles as u64, 1..=1 << 20, "files in all", nothing);
        let per_uid = "frames per second per user";
        c.budget("[hints] frames_per_sec_per_uid", h.frames_per_sec_per_uid, 1..=100_000_000, per_uid, nothing);
        c.budget("[hints] mib_per_sec_per_uid", h.mib_per_sec_per_uid, 1..=16 << 20, "MiB/s per user", nothing);
        c.budget("[hints] max_queued_kib_per_uid", h.max_queued_kib_per_uid, 1..=1 << 20, "KiB per user", nothing);
        c.budget("[hints] max_queued_kib", h.max_queued_kib, 1..=16 << 20, "KiB in all", nothing);
    }

    fn check_observe(&self, c: &mut Checker) {
        let o = &self.observe;
        c.range("[observe] poll_ms", o.poll_ms, 1..=1000, "ms");
        for mount in &o.fanotify_mounts {
            c.absolute("[observe] fanotify_mounts", mount);
        }
        if o.source == SourceChoice::Fanotify && o.fanotify_mounts.is_empty() {
            c.fail("[observe] fanotify_mounts", "[]", "source = \"fanotify\" needs at least one mount to watch");
        }
        for (i, feature) in o.assume_missing.iter().enumerate() {
            if o.assume_missing[..i].contains(feature) {
                c.fail("[observe] assume_missing", quoted(feature.name()), "named twice");
            }
        }
    }

    fn check_control_and_metrics(&self, c: &mut Checker) {
        let socket = &self.control.socket;
        c.absolute("[control] socket", socket);
        if self.hints.enabled && *socket == self.hints.socket {
            c.fail("[control] socket", quoted_path(socket), "the same path as [hints] socket; give each its own");
        }
        let listen = self.metrics.listen.trim();
        if !listen.is_empty() && listen_addrs(listen).is_none() {
            c.fail("[metrics] listen", quoted(listen), "expected host:port, e.g. \"127.0.0.1:9464\", or \"\" (off)");
        }
    }

    fn check_launch(&self, c: &mut Checker) {
        let l = &self.launch;
        c.absolute("[launch] store", &l.store);
        c.range("[launch] store_cap_mib", l.store_cap_mib, 1..=1 << 20, "MiB, 1 TiB at most");
        c.range("[launch] cap_ms", l.cap_ms, 1..=600_000, "ms, 10 minutes at most");
        c.range("[launch] idle_ms", l.idle_ms, 1..=l.cap_ms.max(1), "ms, at most cap_ms");
        c.range("[launch] max_windows", l.max_windows as u64, 1..=1024, "launches learned at once");
        c.range("[launch] min_learn_missed_kib", l.min_learn_missed_kib, 0..=16 << 20, "KiB, 16 GiB at most");
        c.range("[launch] min_learn_ms", l.min_learn_ms, 0..=l.cap_ms, "ms, at most cap_ms");
        c.range("[launch] small_replay_mib", l.small_replay_mib, 0..=1 << 20, "MiB, 1 TiB at most");
        c.kib("[launch] small_replay_window_kib", l.small_replay_window_kib, 4..=16 << 20);
        let kept = predictio::launch::score::KEPT as u64;
        c.range(
            "[launch] retire_after_replays",
            u64::from(l.retire_after_replays),
            1..=kept,
            "replays, the last 8 are kept",
        );
        c.range("[launch] retire_min_used_pct", u64::from(l.retire_min_used_pct), 0..=100, "percent");
        c.range("[launch] retire_days", l.retire_days, 1..=3650, "days, 10 years at most");
        for (key, kib) in
            [("[launch] replay_wave_kib", l.replay_wave_kib), ("[launch] replay_coalesce_kib", l.replay_coalesce_kib)]
        {
            if kib != 0 {
                c.kib(key, kib, 4..=1 << 20);
            }
        }
        for (key, prefixes) in [("[launch] allow", &l.allow), ("[launch] deny", &l.deny)] {
            for p in prefixes.iter().filter(|p| !p.starts_with('/')) {
                c.fail(key, quoted(p), "expected an absolute path prefix (executables are named by absolute path)");
            }
        }
    }

    /// The executor configuration these settings describe.
    pub fn executor_config(&self) -> ExecutorConfig {
        let e = &self.executor;
        ExecutorConfig {
            backend: e.backend,
            queue_capacity: e.queue_capacity,
            io_depth: e.io_depth,
            limits: Limits {
                max_pages_per_request: e.max_pages_per_request,
                max_io_pages: e.max_io_kib / PAGE_KIB,
                max_inflight_pages: e.max_inflight_pages,
                track_hits: e.track_hits,
                max_unsettled_pages: e.max_unsettled_kib / PAGE_KIB,
                settle_scan: e.settle_scan,
                settle_recent: Duration::from_millis(e.settle_recent_ms),
                pace_sleep: Duration::from_micros(e.pace_sleep_us),
                min_probe_interval: Duration::from_micros(e.probe_min_us),
                max_probe_interval: Duration::from_micros(e.probe_max_us),
                ..Limits::default()
            },
            pressure: PressureConfig {
                max_some_avg10: self.pressure.max_some_avg10,
                min_available_fraction: self.pressure.min_available_fraction,
                min_available_bytes: self.pressure.min_available_mib.saturating_mul(1 << 20),
                min_cgroup_headroom_fraction: self.pressure.min_cgroup_headroom_fraction,
                min_cgroup_headroom_bytes: self.pressure.min_cgroup_headroom_mib.saturating_mul(1 << 20),
                max_request_headroom_fraction: self.pressure.max_request_headroom_fraction,
                ..PressureConfig::default()
            },
            hit_timeout: Duration::from_secs(e.hit_timeout_secs),
            meta_realtime_io: e.meta_realtime_io,
            exec_gate_max: Duration::from_millis(e.exec_gate_ms),
            ..ExecutorConfig::default()
        }
    }
}

/// Collects [`Problem`]s.
#[derive(Default)]
struct Checker {
    problems: Vec<Problem>,
}

impl Checker {
    fn fail(&mut self, key: &str, value: impl fmt::Display, message: impl Into<String>) {
        self.problems.push(Problem { key: key.into(), value: value.to_string(), message: message.into() });
    }

    /// `value` within `allowed` (`unit` says what it counts).
    fn range(&mut self, key: &str, value: u64, allowed: std::ops::RangeInclusive<u64>, unit: &str) {
        if !allowed.contains(&value) {
            self.fail(key, value, format!("out of range: expected {} to {} ({unit})", allowed.start(), allowed.end()));
        }
    }

    /// Like [`Self::range`], for a budget whose zero would make `what`.
    fn budget(&mut self, key: &str, value: u64, allowed: std::ops::RangeInclusive<u64>, unit: &str, what: &str) {
        if value == 0 {
            self.fail(
                key,
                0,
                format!("a zero budget: {what}; expected {} to {} ({unit})", allowed.start(), allowed.end()),
            );
        } else {
            self.range(key, value, allowed, unit);
        }
    }

    /// A size in KiB: whole pages within `allowed`.
    fn kib(&mut self, key: &str, value: u64, allowed: std::ops::RangeInclusive<u64>) {
        if !allowed.contains(&value) || !value.is_multiple_of(PAGE_KIB) {
            self.fail(
                key,
                value,
                format!("expected a multiple of {PAGE_KIB} from {} to {} (KiB)", allowed.start(), allowed.end()),
            );
        }
    }

    /// A finite number from 0 to `max`.
    fn fraction(&mut self, key: &str, value: f64, max: f64, unit: &str) {
        if !(value.is_finite() && (0.0..=max).contains(&value)) {
            self.fail(key, value, format!("expected a number from 0 to {max} ({unit})"));
        }
    }

    fn absolute(&mut self, key: &str, path: &Path) {
        if !path.is_absolute() {
            self.fail(
                key,
                quoted_path(path),
                "expected an absolute path (the daemon's working directory is not yours)",
            );
        }
    }
}

/// The addresses `listen` (`host:port`) names, without a DNS lookup for an
/// IP address; `None` if it names none.
fn listen_addrs(listen: &str) -> Option<Vec<SocketAddr>> {
    if let Ok(addr) = listen.parse::<SocketAddr>() {
        return Some(vec![addr]);
    }
    listen.to_socket_addrs().ok().map(Vec::from_iter).filter(|a| !a.is_empty())
}

fn quoted(s: &str) -> String {
    format!("{s:?}")
}

fn quoted_path(p: &Path) -> String {
    quoted(&p.to_string_lossy())
}

/// `a, b, c`.
fn names<const N: usize>(names: [&str; N]) -> String {
    names.join(", ")
}

/// The line of a parse error and a message naming its key and value.
fn describe(text: &str, err: &toml::de::Error) -> (usize, String) {
    let message = tidy(err.message());
    let Some(span) = err.span() else { return (1, message) };
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    let Some(found) = toml::de::DeTable::parse(text).ok().and_then(|t| find_key(t.get_ref(), &span, &mut Vec::new()))
    else {
        return (line, message);
    };
    let key = match found.path.as_slice() {
        [] => String::new(),
        [key] => key.clone(),
        [table @ .., key] => format!("[{}] {key}", table.join(".")),
    };
    let shown = if found.table {
        format!("[{}]", found.path.join("."))
    } else if span == found.value || span == found.key {
        format!("{key} = {}", excerpt(&text[found.value.clone()]))
    } else {
        format!("{key}: {}", excerpt(&text[span.clone()]))
    };
    (line, format!("{shown}: {message}"))
}

/// Where a parse error sits: the key's path, its span and its value's.
struct FoundKey {
    path: Vec<String>,
    key: Range<usize>,
    value: Range<usize>,
    table: bool,
}

/// The deepest key of `table` whose key or value covers `span`.
fn find_key(table: &toml::de::DeTable<'_>, span: &Range<usize>, path: &mut Vec<String>) -> Option<FoundKey> {
    let covers = |r: Range<usize>| r.start <= span.start && span.end <= r.end.max(r.start + 1);
    for (key, value) in table {
        path.push(key.get_ref().to_string());
        let inner = match value.get_ref() {
            toml::de::DeValue::Table(t) => find_key(t, span, path),
            toml::de::DeValue::Array(items) => items.iter().find_map(|item| match item.get_ref() {
                toml::de::DeValue::Table(t) => find_key(t, span, path),
                _ => None,
            }),
            _ => None,
        };
        if inner.is_some() {
            return inner;
        }
        if covers(key.span()) || covers(value.span()) {
            let table = value.get_ref().is_table();
            return Some(FoundKey { path: path.clone(), key: key.span(), value: value.span(), table });
        }
        path.pop();
    }
    None
}

/// At most a line of the value.
fn excerpt(value: &str) -> String {
    let line = value.lines().next().unwrap_or_default();
    if line.chars().count() > 60 || line.len() < value.len() {
        format!("{}…", line.chars().take(60).collect::<String>())
    } else {
        line.to_owned()
    }
}

/// serde's message without what the excerpt already shows:
/// "unknown variant `x`, expected one of `a`, `b`" becomes
/// "expected one of a, b".
fn tidy(message: &str) -> String {
    let message = message.trim();
    let message = match message.strip_prefix("unknown variant `") {
        Some(rest) => rest.split_once("`, ").map_or(message, |(_, expected)| expected),
        None => message,
    };
    let message = match message.strip_prefix("unknown field `") {
        Some(rest) => {
            return format!("unknown key; {}", rest.split_once("`, ").map_or("", |(_, e)| e).replace('`', ""));
        }
        None => message,
    };
    message.replace('`', "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of `text`, parsing or validating.
    fn error(text: &str) -> String {
        match Config::parse(text) {
            Err((line, message)) => format!("line {line}: {message}"),
            Ok(config) => config.validate().expect_err("invalid").to_string(),
        }
    }

    #[track_caller]
    fn rejects(text: &str, needles: &[&str]) {
        let message = error(text);
        for needle in needles {
            assert!(message.contains(needle), "{message:?} does not say {needle:?}");
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let c =
            Config::parse("policies = [\"hints\"]\n[executor]\nbackend = \"uring\"\nio_depth = 16\n").expect("parses");
        assert_eq!(c.executor.io_depth, 16);
        assert_eq!(c.policies, [PolicyName::Hints]);
        assert_eq!(c.hints, HintsSection::default());
        assert_eq!(c.executor_config().backend, BackendKind::Uring);
        c.validate().expect("valid");
        Config::default().validate().expect("the defaults are valid");
    }

    #[test]
    fn an_unknown_backend_names_the_key_the_value_and_the_choices() {
        assert_eq!(
            error("[executor]\nbackend = \"magic\"\n"),
            "line 2: [executor] backend = \"magic\": expected one of fadvise, readahead, uring, madvise"
        );
        assert_eq!(
            error("executor = { backend = \"magic\" }\n"),
            "line 1: [executor] backend = \"magic\": expected one of fadvise, readahead, uring, madvise"
        );
    }

    #[test]
    fn an_unknown_source_or_policy_names_the_key_and_the_choices() {
        rejects("[observe]\nsource = \"bpf\"\n", &["[observe] source = \"bpf\"", "auto, ebpf, perf, fanotify, none"]);
        rejects("[observe]\nassume_missing = [\"bpf\"]\n", &["[observe] assume_missing: \"bpf\"", "filemap_access"]);
        rejects(
            "[observe]\nassume_missing = [\"filemap_access\", \"filemap_access\"]\n",
            &["[observe] assume_missing = \"filemap_access\"", "named twice"],
        );
        rejects("policies = [\"hints\", \"nope\"]\n", &["line 1: policies: \"nope\"", "expected one of hints, btree"]);
    }

    #[test]
    fn unknown_keys_and_wrong_types_name_the_key() {
        rejects("\n[executor]\nbackend_typo = 1\n", &["line 3: [executor] backend_typo = 1: unknown key", "backend"]);
        rejects("[launch]\nlearn_typo = true\n", &["[launch] learn_typo"]);
        rejects("[executr]\nio_depth = 1\n", &["[executr]: unknown key"]);
        rejects("[executor]\nio_depth = -1\n", &["[executor] io_depth = -1"]);
        rejects("[hints]\nsocket = 5\n", &["[hints] socket = 5"]);
    }

    #[test]
    fn names_are_in_step_with_the_core() {
        assert_eq!(BACKEND_NAMES, BackendKind::ALL.map(BackendKind::name));
        assert_eq!(PolicyName::ALL.map(PolicyName::name), predictio::policies::NAMES);
        for p in PolicyName::ALL {
            assert!(p.build().is_some(), "{p}");
        }
        assert_eq!(
            PolicyName::defaults().iter().map(|p| p.name()).collect::<Vec<_>>(),
            predictio::policies::DEFAULT,
            "every default policy has a name here"
        );
        for s in SourceChoice::ALL {
            let c = Config::parse(&format!("[observe]\nsource = \"{s}\"\n")).expect("parses");
            assert_eq!(c.observe.source, s);
        }
        for f in AssumedMissing::ALL {
            let c = Config::parse(&format!("[observe]\nassume_missing = [\"{f}\"]\n")).expect("parses");
            assert_eq!(c.observe.assume_missing, [f]);
            assert!(f == AssumedMissing::Btf || f.hooks().is_empty() == f.call().is_some(), "{f} is hooks or a call");
        }
    }

    #[test]
    fn a_huge_queue_capacity_is_rejected() {
        rejects(
            "[executor]\nqueue_capacity = 9223372036854775807\n",
            &["[executor] queue_capacity = 9223372036854775807", "1 to 1048576"],
        );
    }

    #[test]
    fn sizes_that_would_wrap_when_shifted_are_rejected() {
        // 2^44 MiB << 20 is 2^64: it would wrap to 0.
        rejects("[pressure]\nmin_available_mib = 17592186044416\n", &["[pressure] min_available_mib", "16777216"]);
        rejects("[hints]\nmib_per_sec = 17592186044416\n", &["[hints] mib_per_sec = 17592186044416"]);
        rejects("[launch]\nstore_cap_mib = 17592186044416\n", &["[launch] store_cap_mib"]);
        rejects("[executor]\nmax_io_kib = 17592186044416\n", &["[executor] max_io_kib", "multiple of 4"]);
        rejects("[executor]\nmax_io_kib = 6\n", &["[executor] max_io_kib = 6"]);
        rejects("[executor]\nmax_unsettled_kib = 17592186044416\n", &["[executor] max_unsettled_kib"]);
        rejects("[executor]\nmax_pages_per_request = 0\n", &["[executor] max_pages_per_request = 0"]);
        rejects("[executor]\nio_depth = 0\n", &["[executor] io_depth = 0"]);
    }

    #[test]
    fn zero_budgets_are_rejected_as_doing_nothing() {
        for key in [
            "frames_per_sec",
            "mib_per_sec",
            "max_clients",
            "max_handles_per_client",
            "max_clients_per_uid",
            "max_handles_per_uid",
            "max_handles",
            "frames_per_sec_per_uid",
            "mib_per_sec_per_uid",
            "max_queued_kib_per_uid",
            "max_queued_kib",
        ] {
            rejects(&format!("[hints]\n{key} = 0\n"), &[&format!("[hints] {key} = 0"), "hints would do nothing"]);
        }
        rejects("[launch]\nmax_windows = 0\n", &["[launch] max_windows = 0"]);
    }

    #[test]
    fn no_policy_is_rejected_as_doing_nothing() {
        rejects("policies = []\n", &["policies = []", "would do nothing"]);
        rejects("policies = [\"hints\", \"hints\"]\n", &["policies = [\"hints\", \"hints\"]", "twice"]);
    }

    #[test]
    fn pressure_values_out_of_range_are_rejected() {
        rejects("[pressure]\nmax_some_avg10 = nan\n", &["[pressure] max_some_avg10 = NaN", "0 to 100"]);
        rejects("[pressure]\nmax_some_avg10 = -1.0\n", &["[pressure] max_some_avg10 = -1"]);
        rejects("[pressure]\nmax_some_avg10 = inf\n", &["[pressure] max_some_avg10 = inf"]);
        rejects("[pressure]\nmin_available_fraction = 1.5\n", &["[pressure] min_available_fraction = 1.5", "0 to 1"]);
        rejects(
            "[pressure]\nmin_cgroup_headroom_fraction = -0.1\n",
            &["[pressure] min_cgroup_headroom_fraction = -0.1"],
        );
        rejects("[pressure]\nmin_cgroup_headroom_mib = 16777217\n", &["[pressure] min_cgroup_headroom_mib = 16777217"]);
        for share in ["0.0", "1.5", "nan"] {
            rejects(
                &format!("[pressure]\nmax_request_headroom_fraction = {share}\n"),
                &["[pressure] max_request_headroom_fraction", "above 0, at most 1"],
            );
        }
        let c = Config::parse(
            "[pressure]\nmin_cgroup_headroom_fraction = 0.1\nmin_cgroup_headroom_mib = 32\n\
             max_request_headroom_fraction = 1.0\n",
        )
        .expect("parses");
        c.validate().expect("valid");
        let p = c.executor_config().pressure;
        assert_eq!((p.min_cgroup_headroom_fraction, p.min_cgroup_headroom_bytes), (0.1, 32 << 20));
        assert_eq!(p.max_request_headroom_fraction, 1.0);
    }

    #[test]
    fn relative_paths_are_rejected() {
        rejects("[hints]\nsocket = \"hint.sock\"\n", &["[hints] socket = \"hint.sock\"", "absolute"]);
        rejects("[control]\nsocket = \"run/c.sock\"\n", &["[control] socket = \"run/c.sock\""]);
        rejects("[launch]\nstore = \"store\"\n", &["[launch] store = \"store\""]);
        rejects("[observe]\nfanotify_mounts = [\"home\"]\n", &["[observe] fanotify_mounts = \"home\""]);
        rejects("[launch]\nallow = [\"usr/\"]\n", &["[launch] allow = \"usr/\""]);
    }

    #[test]
    fn the_control_socket_may_not_be_the_hint_socket() {
        rejects(
            "[control]\nsocket = \"/run/predictio/hint.sock\"\n",
            &["[control] socket = \"/run/predictio/hint.sock\"", "[hints] socket"],
        );
    }

    #[test]
    fn other_ranges_are_checked() {
        rejects("[observe]\npoll_ms = 0\n", &["[observe] poll_ms = 0"]);
        rejects("[observe]\nsource = \"fanotify\"\nfanotify_mounts = []\n", &["[observe] fanotify_mounts = []"]);
        rejects("[launch]\nidle_ms = 20000\n", &["[launch] idle_ms = 20000", "cap_ms"]);
        rejects("[metrics]\nlisten = \"nowhere\"\n", &["[metrics] listen = \"nowhere\"", "host:port"]);
        rejects("[executor]\nhit_timeout_secs = 0\n", &["[executor] hit_timeout_secs = 0"]);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let message = error("[executor]\nio_depth = 0\nqueue_capacity = 0\n");
        assert!(message.starts_with("2 invalid settings:"), "{message}");
        assert!(message.contains("io_depth") && message.contains("queue_capacity"), "{message}");
    }

    #[test]
    fn metrics_on_every_interface_are_accepted_with_a_warning() {
        for listen in ["0.0.0.0:9464", "[::]:9464"] {
            let c = Config::parse(&format!("[metrics]\nlisten = \"{listen}\"\n")).expect("parses");
            c.validate().expect("accepted");
            let warnings = c.warnings();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            assert!(warnings[0].to_string().contains("[metrics] listen"), "{}", warnings[0]);
            assert!(warnings[0].message.contains("no authentication"), "{}", warnings[0]);
        }
        let local = Config::parse("[metrics]\nlisten = \"127.0.0.1:9464\"\n").expect("parses");
        assert!(local.warnings().is_empty());
        assert!(Config::default().warnings().is_empty());
    }

    #[test]
    fn load_names_the_file_and_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("predictio.toml");
        std::fs::write(&path, "# comment\n[executor]\nbackend = \"magic\"\n").expect("write");
        let err = Config::load(Some(&path)).expect_err("invalid").to_string();
        assert!(err.starts_with(&format!("{}, line 3: [executor] backend", path.display())), "{err}");
        std::fs::write(&path, "[executor]\nio_depth = 0\n").expect("write");
        let err = Config::load(Some(&path)).expect_err("invalid").to_string();
        assert!(err.contains("[executor] io_depth = 0"), "{err}");
        let missing = dir.path().join("missing.toml");
        assert!(matches!(Config::load(Some(&missing)), Err(ConfigError::Read { .. })));
    }

    #[test]
    fn the_hint_limits_come_from_the_core_defaults() {
        let d = HintConfig::default();
        let h = HintsSection::default().hint_config();
        assert_eq!(h.frames_per_sec, d.frames_per_sec);
        assert_eq!(h.frame_burst, d.frame_burst);
        assert_eq!(h.bytes_per_sec, d.bytes_per_sec);
        assert_eq!(h.byte_burst, d.byte_burst);
        assert_eq!((h.frames_per_sec_per_uid, h.frame_burst_per_uid), (200_000, d.frame_burst_per_uid));
        assert_eq!((h.bytes_per_sec_per_uid, h.byte_burst_per_uid), (d.bytes_per_sec_per_uid, d.byte_burst_per_uid));
        assert_eq!((h.max_clients_per_uid, h.max_handles_per_uid, h.max_handles), (128, 4096, 16384));
        assert_eq!((h.max_queued_bytes_per_uid, h.max_queued_bytes), (d.max_queued_bytes_per_uid, d.max_queued_bytes));
        assert_eq!(h.path, d.path);
        let e = Config::default().executor_config();
        let core = ExecutorConfig::default();
        assert_eq!(e.limits.max_io_pages, core.limits.max_io_pages);
        assert_eq!(e.pressure, core.pressure);
        assert_eq!(e.queue_capacity, core.queue_capacity);
    }

    #[test]
    fn launch_allow_and_deny() {
        let c = Config::parse("[launch]\nallow = [\"/usr/\"]\ndeny = [\"/usr/sbin/\"]\n").expect("parses");
        assert!(c.launch.may_learn("/usr/bin/python3.11"));
        assert!(!c.launch.may_learn("/usr/sbin/sshd"));
        assert!(!c.launch.may_learn("/opt/x"));
        assert!(Config::default().launch.may_learn("/opt/x"));
    }

    /// `N to M` in a comment of `dist/predictio.toml`: the range it
    /// documents for the key on that line.
    fn documented_range(comment: &str) -> Option<(u64, u64)> {
        let words: Vec<&str> = comment.split_whitespace().map(|w| w.trim_matches(&['(', ')', ',', ';'][..])).collect();
        words.windows(3).find_map(|w| match w {
            [lo, "to", hi] => Some((lo.parse().ok()?, hi.parse().ok()?)),
            _ => None,
        })
    }

    #[test]
    fn the_ranges_the_shipped_example_documents_are_the_ones_enforced() {
        let mut section = String::new();
        let mut checked = 0;
        for line in include_str!("../../../dist/predictio.toml").lines().map(str::trim) {
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_owned();
                continue;
            }
            let Some((setting, comment)) = line.split_once('#') else { continue };
            let (Some((key, _)), Some((lo, hi))) = (setting.split_once('='), documented_range(comment)) else {
                continue;
            };
            let (key, file) = (key.trim(), |v: u64| format!("[{section}]\n{} = {v}\n", key.trim()));
            let c = Config::parse(&file(hi)).unwrap_or_else(|e| panic!("{e:?}"));
            c.validate().unwrap_or_else(|e| panic!("[{section}] {key} = {hi} is documented as allowed: {e}"));
            rejects(&file(hi + 1), &[&format!("[{section}] {key} = {}", hi + 1)]);
            if lo > 0 {
                rejects(&file(lo - 1), &[&format!("[{section}] {key} = {}", lo - 1)]);
            }
            checked += 1;
        }
        assert!(checked >= 15, "only {checked} documented ranges found");
    }

    #[test]
    fn the_shipped_example_is_valid_and_matches_the_defaults() {
        let text = include_str!("../../../dist/predictio.toml");
        let c = Config::parse(text).expect("dist/predictio.toml parses");
        c.validate().expect("dist/predictio.toml is valid");
        assert_eq!(c, Config::default(), "dist/predictio.toml documents the built-in defaults");
    }

    #[test]
    fn machine_tuned_settings_reach_the_core_and_default_to_its_values() {
        let c = Config::parse(
            "[executor]\nexec_gate_ms = 9\nsettle_scan = 8\nsettle_recent_ms = 50\npace_sleep_us = 500\n\
             probe_min_us = 100\nprobe_max_us = 8000\n\
             [launch]\nmin_learn_missed_kib = 4096\nmin_learn_ms = 0\nsmall_replay_mib = 8\n\
             small_replay_window_kib = 1024\nreplay_wave_kib = 512\nreplay_coalesce_kib = 0\n",
        )
        .expect("parses");
        c.validate().expect("valid");
        let e = c.executor_config();
        assert_eq!(e.exec_gate_max, Duration::from_millis(9));
        assert_eq!((e.limits.settle_scan, e.limits.settle_recent), (8, Duration::from_millis(50)));
        assert_eq!(e.limits.pace_sleep, Duration::from_micros(500));
        assert_eq!(e.limits.min_probe_interval, Duration::from_micros(100));
        assert_eq!(e.limits.max_probe_interval, Duration::from_millis(8));
        assert_eq!(c.launch.learn_floor(), LearnFloor { missed_pages: 1024, window_ms: 0 });
        assert_eq!(c.launch.replay_pacing(), ReplayPacing { small_pages: 2048, small_window_pages: 256 });
        let walk = c.launch.walk_limits();
        assert_eq!((walk.wave_pages, walk.coalesce_pages), (128, 0));
        // Unset, each is the core's default.
        let d = Config::default();
        let (core, replaying) = (ExecutorConfig::default(), ExecutorConfig::replaying());
        let e = d.executor_config();
        assert_eq!(e.exec_gate_max, core.exec_gate_max);
        assert_eq!(
            Limits { max_unsettled_pages: 0, track_hits: false, ..e.limits },
            Limits::default(),
            "settling as the core's"
        );
        assert_eq!(e.limits.max_unsettled_pages, replaying.limits.max_unsettled_pages);
        assert_eq!(d.launch.learn_floor(), LearnFloor::default());
        assert_eq!(d.launch.replay_pacing(), ReplayPacing::default());
        assert_eq!(d.launch.walk_limits(), WalkLimits::default());
        // Values that cannot work.
        rejects("[executor]\nsettle_scan = 0\n", &["[executor] settle_scan = 0"]);
        rejects("[executor]\nprobe_min_us = 5000\n", &["[executor] probe_min_us = 5000", "at most probe_max_us"]);
        rejects("[executor]\npace_sleep_us = 0\n", &["[executor] pace_sleep_us = 0"]);
        rejects("[launch]\nmin_learn_ms = 20000\n", &["[launch] min_learn_ms = 20000", "at most cap_ms"]);
        rejects("[launch]\nsmall_replay_window_kib = 6\n", &["[launch] small_replay_window_kib = 6"]);
        rejects("[launch]\nreplay_coalesce_kib = 2\n", &["[launch] replay_coalesce_kib = 2"]);
    }
}
