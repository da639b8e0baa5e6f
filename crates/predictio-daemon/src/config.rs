//! The daemon's configuration: TOML, every key optional, defaults built in.
//! Unknown keys are errors (a typo must not silently fall back to a
//! default).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use predictio::executor::{BackendKind, ExecutorConfig, Limits};
use predictio::pressure::PressureConfig;
use serde::Deserialize;

/// Where the daemon looks for its configuration by default.
pub const DEFAULT_PATH: &str = "/etc/predictio/predictio.toml";

/// The whole file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Policies to run, by name.
    pub policies: Vec<String>,
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
            policies: predictio::policies::DEFAULT.iter().map(|s| s.to_string()).collect(),
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

/// `[executor]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ExecutorSection {
    /// fadvise | readahead | uring | madvise
    pub backend: String,
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
    /// Remember prefetched pages to count hits and waste.
    pub track_hits: bool,
    /// Seconds an untouched prefetched page may wait before it counts as
    /// waste.
    pub hit_timeout_secs: u64,
    /// KiB of fadvise/readahead I/O that may be in flight unconfirmed before
    /// the executor waits for some of it to settle (0: unbounded). The
    /// default is the launch replay's window (4 MiB), which keeps a
    /// program's own reads from queueing behind a replay.
    pub max_unsettled_kib: u64,
    /// Metadata prefetch (a launch's lookups and directory listings) in the
    /// real-time I/O class, ahead of queued data prefetch. Off by default:
    /// mq-deadline holds every best-effort read back while a real-time one
    /// is in flight, the launching program's own reads included.
    pub meta_realtime_io: bool,
}

impl Default for ExecutorSection {
    fn default() -> Self {
        let d = ExecutorConfig::default();
        Self {
            backend: d.backend.name().into(),
            io_depth: d.io_depth,
            queue_capacity: d.queue_capacity,
            max_io_kib: d.limits.max_io_pages * 4,
            max_inflight_pages: d.limits.max_inflight_pages,
            max_pages_per_request: d.limits.max_pages_per_request,
            track_hits: true,
            hit_timeout_secs: d.hit_timeout.as_secs(),
            max_unsettled_kib: predictio::launch::REPLAY_MAX_UNSETTLED_PAGES * 4,
            meta_realtime_io: d.meta_realtime_io,
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
}

impl Default for PressureSection {
    fn default() -> Self {
        let d = PressureConfig::default();
        Self {
            max_some_avg10: d.max_some_avg10,
            min_available_fraction: d.min_available_fraction,
            min_available_mib: d.min_available_bytes >> 20,
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
}

impl Default for HintsSection {
    fn default() -> Self {
        Self {
            enabled: true,
            socket: PathBuf::from("/run/predictio/hint.sock"),
            max_clients: 1024,
            max_handles_per_client: 4096,
            frames_per_sec: 2_000_000,
            mib_per_sec: 4096,
        }
    }
}

/// `[observe]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ObserveSection {
    /// auto (eBPF, else perf, else fanotify, else hints only) | ebpf | perf |
    /// fanotify | none
    pub source: String,
    /// Mounts fanotify watches when it is the source (opens and execs).
    pub fanotify_mounts: Vec<std::path::PathBuf>,
    /// How long the event source may sit on events before handing them over,
    /// ms (the notification-latency bound) while events flow; while few
    /// arrive the daemon waits up to 16 ms (exec records never wait).
    pub poll_ms: u64,
}

impl Default for ObserveSection {
    fn default() -> Self {
        Self { source: "auto".into(), poll_ms: 2, fanotify_mounts: vec!["/".into()] }
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
        Self { socket: PathBuf::from("/run/predictio/control.sock") }
    }
}

/// `[metrics]`
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsSection {
    /// `host:port` for a Prometheus text endpoint (`GET /metrics`); empty:
    /// off. Only per-origin and total counters are exported, never files.
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
    /// here, see `docs/DESIGN.md`, "Exec starts").
    pub lookups: bool,
    /// Learn only executables under these path prefixes (empty: all).
    pub allow: Vec<String>,
    /// Never learn executables under these path prefixes.
    pub deny: Vec<String>,
}

impl Default for LaunchSection {
    fn default() -> Self {
        Self {
            learn: true,
            replay: true,
            store: PathBuf::from(crate::launch::store::DEFAULT_DIR),
            store_cap_mib: crate::launch::store::DEFAULT_CAP_BYTES >> 20,
            idle_ms: 500,
            cap_ms: 10_000,
            max_windows: 8,
            lookups: false,
            allow: Vec::new(),
            deny: Vec::new(),
        }
    }
}

impl LaunchSection {
    /// Whether the executable at `path` may be learned.
    pub fn may_learn(&self, path: &str) -> bool {
        (self.allow.is_empty() || self.allow.iter().any(|p| path.starts_with(p.as_str())))
            && !self.deny.iter().any(|p| path.starts_with(p.as_str()))
    }
}

impl Config {
    /// Reads `path`; a missing file at the default path means defaults, a
    /// missing file named explicitly is an error.
    pub fn load(path: Option<&Path>) -> Result<Self> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_PATH), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound && !explicit => {
                tracing::info!(path = %path.display(), "no configuration file; using defaults");
                return Ok(Self::default());
            }
            Err(err) => return Err(err).with_context(|| format!("reading {}", path.display())),
        };
        let config: Config = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
        config.check()?;
        Ok(config)
    }

    /// Rejects settings that cannot work.
    pub fn check(&self) -> Result<()> {
        self.backend()?;
        for name in &self.policies {
            if predictio::policies::by_name(name).is_none() {
                bail!("unknown policy {name:?}; known: {}", predictio::policies::NAMES.join(", "));
            }
        }
        if !["auto", "ebpf", "perf", "fanotify", "none"].contains(&self.observe.source.as_str()) {
            bail!("observe.source must be auto, ebpf, perf, fanotify or none, not {:?}", self.observe.source);
        }
        if self.executor.max_io_kib < 4
            || self.executor.max_io_kib > 256 * 1024
            || !self.executor.max_io_kib.is_multiple_of(4)
        {
            bail!("executor.max_io_kib must be a multiple of 4 between 4 and 262144");
        }
        Ok(())
    }

    fn backend(&self) -> Result<BackendKind> {
        self.executor.backend.parse().map_err(|e| anyhow::anyhow!("executor.backend: {e}"))
    }

    /// The executor configuration these settings describe.
    pub fn executor_config(&self) -> Result<ExecutorConfig> {
        let e = &self.executor;
        Ok(ExecutorConfig {
            backend: self.backend()?,
            queue_capacity: e.queue_capacity,
            io_depth: e.io_depth,
            limits: Limits {
                max_pages_per_request: e.max_pages_per_request,
                max_io_pages: e.max_io_kib / 4,
                max_inflight_pages: e.max_inflight_pages,
                track_hits: e.track_hits,
                max_unsettled_pages: e.max_unsettled_kib / 4,
                ..Limits::default()
            },
            pressure: PressureConfig {
                max_some_avg10: self.pressure.max_some_avg10,
                min_available_fraction: self.pressure.min_available_fraction,
                min_available_bytes: self.pressure.min_available_mib << 20,
                ..PressureConfig::default()
            },
            hit_timeout: Duration::from_secs(e.hit_timeout_secs),
            meta_realtime_io: e.meta_realtime_io,
            ..ExecutorConfig::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_overrides() {
        let c: Config =
            toml::from_str("policies = [\"hints\"]\n[executor]\nbackend = \"uring\"\nio_depth = 16\n").expect("parses");
        assert_eq!(c.executor.io_depth, 16);
        assert_eq!(c.hints, HintsSection::default());
        assert_eq!(c.executor_config().expect("valid").backend, BackendKind::Uring);
        c.check().expect("valid");
    }

    #[test]
    fn typos_and_bad_values_are_errors() {
        assert!(toml::from_str::<Config>("[executor]\nbackend_typo = 1\n").is_err());
        let c: Config = toml::from_str("[executor]\nbackend = \"magic\"\n").expect("parses");
        assert!(c.check().is_err());
        let c: Config = toml::from_str("policies = [\"nope\"]\n").expect("parses");
        assert!(c.check().is_err());
    }

    #[test]
    fn launch_allow_and_deny() {
        let c: Config = toml::from_str("[launch]\nallow = [\"/usr/\"]\ndeny = [\"/usr/sbin/\"]\n").expect("parses");
        assert!(c.launch.may_learn("/usr/bin/python3.11"));
        assert!(!c.launch.may_learn("/usr/sbin/sshd"));
        assert!(!c.launch.may_learn("/opt/x"));
        assert!(Config::default().launch.may_learn("/opt/x"));
        assert!(toml::from_str::<Config>("[launch]\nlearn_typo = true\n").is_err());
    }

    #[test]
    fn the_shipped_example_is_valid_and_matches_the_defaults() {
        let text = include_str!("../../../dist/predictio.toml");
        let c: Config = toml::from_str(text).expect("dist/predictio.toml parses");
        c.check().expect("dist/predictio.toml is valid");
        assert_eq!(c, Config::default(), "dist/predictio.toml documents the built-in defaults");
    }
}
