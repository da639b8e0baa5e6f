//! The memory-pressure guard: stop speculative prefetching before it evicts
//! pages someone is using, and never let one request take much of the memory
//! that is left.
//!
//! What it weighs, each reading cached:
//! - the machine: PSI (`/proc/pressure/memory`, the share of time tasks
//!   stalled on memory in the last 10 s) and `MemAvailable` from
//!   `/proc/meminfo` ([`MemoryState`], re-read every
//!   [`PressureConfig::recheck`]);
//! - the memory cgroups (v2) the prefetch is bounded by, each with its
//!   ancestors up to the root, since a cgroup's limit bounds all of its
//!   descendants ([`CgroupMemory`], each re-read at most every
//!   [`PressureConfig::cgroup_recheck`], at most
//!   [`PressureConfig::max_cgroups`] of them kept): the executor's own, which
//!   the page cache it fills is charged to, and the one of the process the
//!   prefetch is for ([`crate::request::Request::target_pid`]), which should
//!   not get more of the machine's memory through a prefetcher than its
//!   limit lets it hold.
//!
//! The headroom is the least of `MemAvailable` and, over those cgroups, of
//! `min(memory.max, memory.high) - memory.current`. A speculative request is
//! shed ([`Admission::Shed`]) when the machine is under pressure, when a
//! cgroup's headroom is under its floor, or when the PSI of the executor's or
//! the target's cgroup is over the threshold; otherwise it may issue at most
//! [`PressureConfig::max_request_headroom_fraction`] of the headroom
//! ([`Admission::Issue`]). The guard decides and never blocks; the executor
//! drops what it is told to, and counts it.
//!
//! Where the memory controller is bound to a cgroup v1 hierarchy (a hybrid
//! or v1 host) the guard reads the same cgroups there: `memory.limit_in_bytes`
//! and `memory.usage_in_bytes`, with no per-cgroup PSI (v1 has none to
//! read). With neither, it watches the machine alone, and says so once.
//! Files are read whole and closed at once: no descriptor is held between
//! readings.

use std::borrow::Borrow;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::page::{PAGE_SIZE, PageRange};

/// PSI `some avg10` of a pressure file's text (`/proc/pressure/memory`, a
/// cgroup's `memory.pressure`), in percent; 0 where it is missing.
fn some_avg10(psi: &str) -> f64 {
    psi.lines()
        .find(|line| line.starts_with("some"))
        .and_then(|line| line.split_whitespace().find_map(|f| f.strip_prefix("avg10=")))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// A reading of the machine's memory state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryState {
    /// PSI `some avg10` of `/proc/pressure/memory`, in percent (0 where PSI
    /// is unavailable).
    pub some_avg10: f64,
    /// `MemAvailable`, bytes.
    pub available: u64,
    /// `MemTotal`, bytes.
    pub total: u64,
}

impl MemoryState {
    /// Reads `/proc/pressure/memory` (optional: missing PSI reads as 0) and
    /// `/proc/meminfo`.
    pub fn read() -> io::Result<Self> {
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let psi = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
        Ok(Self::parse(&meminfo, &psi))
    }

    /// Parses the two procfs files' text.
    pub fn parse(meminfo: &str, psi: &str) -> Self {
        let kib = |key: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                .saturating_mul(1024)
        };
        Self { some_avg10: some_avg10(psi), available: kib("MemAvailable"), total: kib("MemTotal") }
    }
}

/// A reading of one memory cgroup (v2).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CgroupMemory {
    /// PSI `some avg10` of its `memory.pressure`, in percent (0 where it is
    /// missing).
    pub some_avg10: f64,
    /// The lower of `memory.max` and `memory.high`, bytes. `None` when
    /// neither is set (`max`), or when the memory controller is not enabled
    /// for the cgroup (no `memory.current`).
    pub limit: Option<u64>,
    /// `memory.current`, bytes (page cache charged to it included).
    pub current: u64,
}

impl CgroupMemory {
    /// Parses the text of the cgroup's `memory.max`, `memory.high`,
    /// `memory.current` and `memory.pressure` (each `None` where the file is
    /// missing).
    pub fn parse(max: Option<&str>, high: Option<&str>, current: Option<&str>, pressure: Option<&str>) -> Self {
        let bytes = |text: Option<&str>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let current = bytes(current);
        let limit = current.and_then(|_| [bytes(max), bytes(high)].into_iter().flatten().min());
        Self { some_avg10: pressure.map_or(0.0, some_avg10), limit, current: current.unwrap_or(0) }
    }

    /// Parses a cgroup v1 memory cgroup's `memory.limit_in_bytes` and
    /// `memory.usage_in_bytes` (page cache included). v1 says "no limit"
    /// with the largest page-aligned `i64` (`PAGE_COUNTER_MAX` pages);
    /// anything from 2^62 bytes on is taken as none.
    pub fn parse_v1(limit: Option<&str>, usage: Option<&str>) -> Self {
        let bytes = |text: Option<&str>| text.and_then(|t| t.trim().parse::<u64>().ok());
        let current = bytes(usage);
        let limit = current.and(bytes(limit)).filter(|&limit| limit < 1 << 62);
        Self { some_avg10: 0.0, limit, current: current.unwrap_or(0) }
    }

    /// Bytes it may still grow by before it reaches its limit; `None` when
    /// it has none.
    pub fn headroom(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.current))
    }
}

/// Why a speculative request was shed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shed {
    /// The machine: PSI over [`PressureConfig::max_some_avg10`], or
    /// `MemAvailable` under its floor.
    Machine,
    /// The PSI of the executor's or the target's cgroup is over
    /// [`PressureConfig::max_some_avg10`].
    CgroupStall,
    /// A cgroup's headroom is under its floor
    /// ([`PressureConfig::min_cgroup_headroom_bytes`],
    /// [`PressureConfig::min_cgroup_headroom_fraction`]).
    CgroupFull,
}

/// The guard's verdict on a speculative request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Drop it whole, counted.
    Shed(Shed),
    /// Issue at most this many of its pages; drop the rest, counted
    /// (`u64::MAX`: no bound is known).
    Issue {
        /// Pages it may issue.
        max_pages: u64,
    },
}

/// Thresholds of the guard. Every default is written here once (the
/// daemon's `[pressure]` section reads them).
#[derive(Clone, Debug, PartialEq)]
pub struct PressureConfig {
    /// Under pressure when PSI `some avg10` exceeds this (percent): the
    /// machine's, the executor's cgroup's or the target's cgroup's.
    pub max_some_avg10: f64,
    /// Under pressure when `MemAvailable` falls below this share of
    /// `MemTotal`…
    pub min_available_fraction: f64,
    /// …or below this many bytes, whichever is larger.
    pub min_available_bytes: u64,
    /// How often to re-read procfs.
    pub recheck: Duration,
    /// A cgroup is full when its headroom falls below this share of its
    /// limit…
    pub min_cgroup_headroom_fraction: f64,
    /// …or below this many bytes, whichever is larger.
    pub min_cgroup_headroom_bytes: u64,
    /// The largest share of the headroom one speculative request may issue;
    /// the rest of it is dropped, counted. Above 0, at most 1.
    pub max_request_headroom_fraction: f64,
    /// How often one cgroup's files (and one process's cgroup) are re-read
    /// at most.
    pub cgroup_recheck: Duration,
    /// Cgroups, and processes' cgroup paths, kept at once; the least
    /// recently used is forgotten first.
    pub max_cgroups: usize,
}

impl Default for PressureConfig {
    fn default() -> Self {
        Self {
            max_some_avg10: 10.0,
            min_available_fraction: 0.05,
            min_available_bytes: 256 << 20,
            recheck: Duration::from_millis(100),
            min_cgroup_headroom_fraction: 0.05,
            min_cgroup_headroom_bytes: 16 << 20,
            max_request_headroom_fraction: 0.25,
            cgroup_recheck: Duration::from_millis(5),
            max_cgroups: 64,
        }
    }
}

impl PressureConfig {
    /// Whether `state` counts as memory pressure.
    pub fn is_pressure(&self, state: &MemoryState) -> bool {
        let floor = ((state.total as f64 * self.min_available_fraction) as u64).max(self.min_available_bytes);
        state.some_avg10 > self.max_some_avg10 || (state.total > 0 && state.available < floor)
    }

    /// The verdict on a speculative request, from the machine's state
    /// (`None`: unknown), the cgroups that bound it (each with its
    /// ancestors; order does not matter) and the highest PSI `some avg10` of
    /// the cgroups whose stalls count (the executor's and the target's).
    pub fn admit(&self, machine: Option<&MemoryState>, cgroups: &[CgroupMemory], cgroup_some_avg10: f64) -> Admission {
        if machine.is_some_and(|m| self.is_pressure(m)) {
            return Admission::Shed(Shed::Machine);
        }
        if cgroup_some_avg10 > self.max_some_avg10 {
            return Admission::Shed(Shed::CgroupStall);
        }
        let mut headroom = machine.filter(|m| m.total > 0).map_or(u64::MAX, |m| m.available);
        for cgroup in cgroups {
            let (Some(limit), Some(room)) = (cgroup.limit, cgroup.headroom()) else { continue };
            let floor = ((limit as f64 * self.min_cgroup_headroom_fraction) as u64).max(self.min_cgroup_headroom_bytes);
            if room < floor {
                return Admission::Shed(Shed::CgroupFull);
            }
            headroom = headroom.min(room);
        }
        let max_pages = if headroom == u64::MAX {
            u64::MAX
        } else {
            (headroom as f64 * self.max_request_headroom_fraction) as u64 / PAGE_SIZE
        };
        Admission::Issue { max_pages }
    }
}

/// Keeps the first `max_pages` pages of `runs`, in order, and drops the
/// rest; returns the pages dropped.
pub fn clamp_runs(runs: &mut Vec<PageRange>, max_pages: u64) -> u64 {
    let mut left = max_pages;
    let mut dropped = 0;
    runs.retain_mut(|run| {
        let kept = run.len().min(left);
        left -= kept;
        dropped += run.len() - kept;
        run.end = run.start + kept;
        kept > 0
    });
    dropped
}

/// Which cgroup hierarchy a [`CgroupFs`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hierarchy {
    /// The unified hierarchy (`cgroup2`): `memory.max`, `memory.high`,
    /// `memory.current`, `memory.pressure`.
    V2,
    /// A cgroup v1 hierarchy the memory controller is bound to:
    /// `memory.limit_in_bytes`, `memory.usage_in_bytes`.
    V1Memory,
}

/// Where the guard reads cgroups from: a procfs (for `PID/cgroup`) and the
/// hierarchy the memory controller is in. Injectable, so the guard's logic
/// is tested over a directory laid out like `/sys/fs/cgroup`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupFs {
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    hierarchy: Hierarchy,
}

impl CgroupFs {
    /// The running system's: `/proc` and, from `/proc/self/mounts`, the
    /// first cgroup2 mount (`/sys/fs/cgroup` on a unified host,
    /// `/sys/fs/cgroup/unified` on a hybrid one) if the memory controller
    /// is there, else the cgroup v1 hierarchy it is bound to
    /// (`/sys/fs/cgroup/memory`), else the cgroup2 mount without it (whose
    /// [`CgroupFs::memory_controller`] says why). Says why not where there
    /// is no cgroup filesystem.
    pub fn system() -> Result<Self, String> {
        let mounts =
            std::fs::read_to_string("/proc/self/mounts").map_err(|err| format!("reading /proc/self/mounts: {err}"))?;
        let mount = |want: &dyn Fn(&str, &str) -> bool| {
            mounts.lines().find_map(|line| {
                let mut fields = line.split_whitespace();
                let (_, target, fstype, options) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
                want(fstype, options).then(|| PathBuf::from(target))
            })
        };
        let v2 = mount(&|fstype, _| fstype == "cgroup2").map(|root| Self::at("/proc", root));
        if let Some(v2) = &v2
            && v2.memory_controller().is_ok()
        {
            return Ok(v2.clone());
        }
        let v1 = mount(&|fstype, options| fstype == "cgroup" && options.split(',').any(|o| o == "memory"));
        match (v1, v2) {
            (Some(root), _) => Ok(Self::at_v1("/proc", root)),
            (None, Some(v2)) => Ok(v2),
            (None, None) => Err("no cgroup filesystem with the memory controller is mounted".to_owned()),
        }
    }

    /// A procfs at `proc_root` and a cgroup2 hierarchy at `cgroup_root`.
    pub fn at(proc_root: impl Into<PathBuf>, cgroup_root: impl Into<PathBuf>) -> Self {
        Self { proc_root: proc_root.into(), cgroup_root: cgroup_root.into(), hierarchy: Hierarchy::V2 }
    }

    /// A procfs at `proc_root` and the cgroup v1 memory hierarchy at
    /// `memory_root`.
    pub fn at_v1(proc_root: impl Into<PathBuf>, memory_root: impl Into<PathBuf>) -> Self {
        Self { proc_root: proc_root.into(), cgroup_root: memory_root.into(), hierarchy: Hierarchy::V1Memory }
    }

    /// The hierarchy's root.
    pub fn cgroup_root(&self) -> &Path {
        &self.cgroup_root
    }

    /// Which hierarchy it reads.
    pub fn hierarchy(&self) -> Hierarchy {
        self.hierarchy
    }

    /// Whether the memory controller is available in this hierarchy and
    /// this process has a path in it; says why not.
    pub fn memory_controller(&self) -> Result<(), String> {
        if self.hierarchy == Hierarchy::V1Memory {
            let usage = self.cgroup_root.join("memory.usage_in_bytes");
            std::fs::metadata(&usage).map_err(|err| format!("reading {}: {err}", usage.display()))?;
            return self.cgroup_of(None).map(drop).ok_or_else(|| "this process has no memory cgroup path".to_owned());
        }
        let controllers = self.cgroup_root.join("cgroup.controllers");
        let text =
            std::fs::read_to_string(&controllers).map_err(|err| format!("reading {}: {err}", controllers.display()))?;
        if !text.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the memory controller is not in {} (it is bound to a cgroup v1 hierarchy, or disabled)",
                controllers.display()
            ));
        }
        self.cgroup_of(None).map(drop).ok_or_else(|| "this process has no cgroup v2 path".to_owned())
    }

    /// The cgroup of process `pid` (`None`: this process), relative to the
    /// root (empty: the root itself). `None` where it cannot be read, or is
    /// outside this hierarchy's view (another cgroup namespace's `..`), or
    /// was removed.
    pub fn cgroup_of(&self, pid: Option<u32>) -> Option<PathBuf> {
        let file = match pid {
            Some(pid) => self.proc_root.join(pid.to_string()).join("cgroup"),
            None => self.proc_root.join("self/cgroup"),
        };
        let text = std::fs::read_to_string(file).ok()?;
        match self.hierarchy {
            Hierarchy::V2 => parse_cgroup_path(&text),
            Hierarchy::V1Memory => parse_v1_memory_path(&text),
        }
    }

    /// Reads the memory files of `cgroup` (relative to the root).
    pub fn read(&self, cgroup: &Path) -> CgroupMemory {
        let dir = self.cgroup_root.join(cgroup);
        let file = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
        if self.hierarchy == Hierarchy::V1Memory {
            let (limit, usage) = (file("memory.limit_in_bytes"), file("memory.usage_in_bytes"));
            return CgroupMemory::parse_v1(limit.as_deref(), usage.as_deref());
        }
        let (max, high, current, pressure) =
            (file("memory.max"), file("memory.high"), file("memory.current"), file("memory.pressure"));
        CgroupMemory::parse(max.as_deref(), high.as_deref(), current.as_deref(), pressure.as_deref())
    }
}

/// The cgroup v2 path of a `/proc/PID/cgroup` text (its `0::` line),
/// relative to the root; `None` without one, for a removed cgroup, or for a
/// path that is not plain components below the root.
pub fn parse_cgroup_path(text: &str) -> Option<PathBuf> {
    relative_cgroup(text.lines().find_map(|line| line.strip_prefix("0::"))?)
}

/// The path field of a `/proc/PID/cgroup` line, relative to the root; see
/// [`parse_cgroup_path`].
fn relative_cgroup(path: &str) -> Option<PathBuf> {
    let path = path.trim_end();
    if path.ends_with(" (deleted)") {
        return None;
    }
    let relative = Path::new(path.strip_prefix('/')?);
    relative.components().all(|c| matches!(c, Component::Normal(_))).then(|| relative.to_path_buf())
}

/// The memory cgroup v1 path of a `/proc/PID/cgroup` text (the line whose
/// controllers include `memory`), relative to the hierarchy's root; `None`
/// as for [`parse_cgroup_path`].
pub fn parse_v1_memory_path(text: &str) -> Option<PathBuf> {
    text.lines()
        .find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (id, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            (id != "0" && controllers.split(',').any(|c| c == "memory")).then_some(path)
        })
        .and_then(relative_cgroup)
}

/// A few values by key, each with the time it was read; the least recently
/// used is forgotten when full.
#[derive(Debug)]
struct Recent<K, V> {
    slots: Vec<Slot<K, V>>,
    capacity: usize,
    tick: u64,
}

#[derive(Debug)]
struct Slot<K, V> {
    key: K,
    value: V,
    read: Instant,
    used: u64,
}

impl<K, V> Recent<K, V> {
    fn new(capacity: usize) -> Self {
        Self { slots: Vec::new(), capacity: capacity.max(1), tick: 0 }
    }

    /// The value of `key`, read with `read` if it is missing or was read
    /// `ttl` or longer before `now`.
    fn fresh<Q>(&mut self, key: &Q, now: Instant, ttl: Duration, read: impl FnOnce(&Q) -> V) -> &mut V
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq + ToOwned<Owned = K>,
    {
        self.tick += 1;
        let i = match self.slots.iter().position(|s| s.key.borrow() == key) {
            Some(i) => {
                let slot = &mut self.slots[i];
                if now.saturating_duration_since(slot.read) >= ttl {
                    slot.value = read(key);
                    slot.read = now;
                }
                i
            }
            None => {
                let slot = Slot { key: key.to_owned(), value: read(key), read: now, used: 0 };
                if self.slots.len() < self.capacity {
                    self.slots.push(slot);
                    self.slots.len() - 1
                } else {
                    let oldest = (0..self.slots.len()).min_by_key(|&i| self.slots[i].used).unwrap_or(0);
                    self.slots[oldest] = slot;
                    oldest
                }
            }
        };
        self.slots[i].used = self.tick;
        &mut self.slots[i].value
    }

    /// The value of `key` if it is kept, without reading it.
    fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: ?Sized + Eq,
    {
        self.slots.iter_mut().find(|s| s.key.borrow() == key).map(|s| &mut s.value)
    }
}

/// The cgroups the guard watches, and what it last read of them.
#[derive(Debug)]
struct Cgroups {
    fs: CgroupFs,
    /// This process's id: a request for it is bounded by `own` alone.
    pid: u32,
    /// This process's cgroup and when it was read.
    own: Option<(Option<PathBuf>, Instant)>,
    /// Other processes' cgroups (`None`: unreadable).
    targets: Recent<u32, Option<PathBuf>>,
    /// Readings by cgroup (relative path).
    readings: Recent<PathBuf, CgroupMemory>,
}

impl Cgroups {
    fn new(fs: CgroupFs, capacity: usize) -> Self {
        Self { fs, pid: std::process::id(), own: None, targets: Recent::new(capacity), readings: Recent::new(capacity) }
    }

    /// Refreshes this process's cgroup path if stale.
    fn refresh_own(&mut self, now: Instant, ttl: Duration) {
        if self.own.as_ref().is_none_or(|(_, at)| now.saturating_duration_since(*at) >= ttl) {
            self.own = Some((self.fs.cgroup_of(None), now));
        }
    }

    /// Appends the readings of the cgroups bounding a prefetch for `target`
    /// to `out` (the executor's own and its ancestors, then the target's not
    /// among them), and returns the highest PSI `some avg10` of the two
    /// leaves (the root's is the machine's, weighed apart).
    fn collect(&mut self, now: Instant, ttl: Duration, target: Option<u32>, out: &mut Vec<CgroupMemory>) -> f64 {
        self.refresh_own(now, ttl);
        let Self { fs, pid: own_pid, own, targets, readings } = self;
        let own = own.as_ref().and_then(|(path, _)| path.as_deref());
        let mut stall: f64 = 0.0;
        let mut chain = |leaf: &Path, shared: Option<&Path>, out: &mut Vec<CgroupMemory>| {
            for (depth, cgroup) in leaf.ancestors().filter(|c| !c.as_os_str().is_empty()).enumerate() {
                if shared.is_some_and(|s| s.starts_with(cgroup)) {
                    break;
                }
                let reading = *readings.fresh(cgroup, now, ttl, |c| fs.read(c));
                if depth == 0 {
                    stall = stall.max(reading.some_avg10);
                }
                out.push(reading);
            }
        };
        if let Some(own) = own {
            chain(own, None, out);
        }
        if let Some(pid) = target.filter(|pid| pid != own_pid)
            && let Some(path) = targets.fresh(&pid, now, ttl, |&pid| fs.cgroup_of(Some(pid))).as_deref()
            && Some(path) != own
        {
            chain(path, own, out);
        }
        stall
    }

    /// Counts `bytes` more against the kept readings of the cgroups
    /// bounding a prefetch for `target` (until they are next read), so that
    /// requests between two readings do not each take the same headroom.
    fn charge(&mut self, target: Option<u32>, bytes: u64) {
        let Self { pid: own_pid, own, targets, readings, .. } = self;
        let own = own.as_ref().and_then(|(path, _)| path.as_deref());
        let mut charge = |leaf: &Path, shared: Option<&Path>| {
            for cgroup in leaf.ancestors().filter(|c| !c.as_os_str().is_empty()) {
                if shared.is_some_and(|s| s.starts_with(cgroup)) {
                    break;
                }
                if let Some(reading) = readings.get_mut(cgroup) {
                    reading.current = reading.current.saturating_add(bytes);
                }
            }
        };
        if let Some(own) = own {
            charge(own, None);
        }
        if let Some(pid) = target.filter(|pid| pid != own_pid)
            && let Some(Some(path)) = targets.get_mut(&pid).map(|p| p.as_deref())
            && Some(path) != own
        {
            charge(path, own);
        }
    }
}

/// Whether the guard has said that it watches the machine alone.
static SAID_MACHINE_ONLY: AtomicBool = AtomicBool::new(false);

/// A cached verdict over the machine's memory state and the memory cgroups
/// a prefetch is bounded by.
pub struct PressureGuard {
    config: PressureConfig,
    source: Box<dyn FnMut() -> io::Result<MemoryState> + Send>,
    checked: Option<Instant>,
    machine: Option<MemoryState>,
    cgroups: Option<Cgroups>,
    scratch: Vec<CgroupMemory>,
}

impl std::fmt::Debug for PressureGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PressureGuard")
            .field("config", &self.config)
            .field("machine", &self.machine)
            .field("cgroups", &self.cgroups.as_ref().map(|c| &c.fs))
            .finish()
    }
}

impl PressureGuard {
    /// A guard over procfs and, where cgroup v2's memory controller is
    /// available, the system's memory cgroups (else the machine alone,
    /// logged once).
    pub fn new(config: PressureConfig) -> Self {
        let guard = Self::with_source(config, MemoryState::read);
        match CgroupFs::system() {
            Ok(fs) => guard.with_cgroups(fs),
            Err(reason) => {
                say_machine_only(&reason);
                guard
            }
        }
    }

    /// A guard over another source of the machine's state, watching no
    /// cgroup (tests, benchmarks; see [`Self::with_cgroups`]).
    pub fn with_source(
        config: PressureConfig,
        source: impl FnMut() -> io::Result<MemoryState> + Send + 'static,
    ) -> Self {
        Self { config, source: Box::new(source), checked: None, machine: None, cgroups: None, scratch: Vec::new() }
    }

    /// The same guard, watching the memory cgroups of `fs` if its memory
    /// controller is available (else the machine alone, logged once).
    pub fn with_cgroups(mut self, fs: CgroupFs) -> Self {
        match fs.memory_controller() {
            Ok(()) => self.cgroups = Some(Cgroups::new(fs, self.config.max_cgroups)),
            Err(reason) => {
                say_machine_only(&reason);
                self.cgroups = None;
            }
        }
        self
    }

    /// Whether memory cgroups are watched (else the machine alone).
    pub fn watches_cgroups(&self) -> bool {
        self.cgroups.is_some()
    }

    fn refresh_machine(&mut self, now: Instant) {
        let stale = self.checked.is_none_or(|at| now.saturating_duration_since(at) >= self.config.recheck);
        if stale {
            self.checked = Some(now);
            self.machine = match (self.source)() {
                Ok(state) => Some(state),
                Err(err) => {
                    tracing::debug!(%err, "memory state unreadable; assuming no pressure");
                    None
                }
            };
        }
    }

    /// Whether the machine is under memory pressure now. An unreadable
    /// source counts as no pressure (and is retried at the next recheck).
    pub fn under_pressure(&mut self, now: Instant) -> bool {
        self.refresh_machine(now);
        self.machine.is_some_and(|m| self.config.is_pressure(&m))
    }

    /// The verdict on a speculative request for process `target` (`None`:
    /// unknown, the executor's cgroup and the machine alone), from readings
    /// at most [`PressureConfig::recheck`] (the machine) and
    /// [`PressureConfig::cgroup_recheck`] (each cgroup) old. Unreadable
    /// files count as no pressure and no limit.
    pub fn admit(&mut self, now: Instant, target: Option<u32>) -> Admission {
        self.refresh_machine(now);
        let mut readings = std::mem::take(&mut self.scratch);
        readings.clear();
        let stall = match &mut self.cgroups {
            Some(cgroups) => cgroups.collect(now, self.config.cgroup_recheck, target, &mut readings),
            None => 0.0,
        };
        let verdict = self.config.admit(self.machine.as_ref(), &readings, stall);
        self.scratch = readings;
        verdict
    }

    /// Records that `pages` were issued for `target`: they count against
    /// the cgroups' kept readings until those are read again.
    pub fn note_issued(&mut self, target: Option<u32>, pages: u64) {
        if pages > 0
            && let Some(cgroups) = &mut self.cgroups
        {
            cgroups.charge(target, pages.saturating_mul(PAGE_SIZE));
        }
    }
}

fn say_machine_only(reason: &str) {
    if !SAID_MACHINE_ONLY.swap(true, Ordering::Relaxed) {
        tracing::info!(reason, "no memory cgroup to read: the pressure guard watches the machine only");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n";
    const MIB: u64 = 1 << 20;

    /// cgroup v1: the memory controller's line of `/proc/PID/cgroup`
    /// names the path; "unlimited" is a huge number, not a limit.
    #[test]
    fn parses_cgroup_v1_memory() {
        let text = "12:cpu,cpuacct:/x\n4:memory:/process_api/abc\n1:name=systemd:/\n0::/\n";
        assert_eq!(parse_v1_memory_path(text), Some(PathBuf::from("process_api/abc")));
        assert_eq!(parse_v1_memory_path("4:memory:/\n"), Some(PathBuf::new()));
        assert_eq!(parse_v1_memory_path("0::/a\n4:blkio:/b\n"), None);
        assert_eq!(parse_v1_memory_path("4:memory:/gone (deleted)\n"), None);
        let limited = CgroupMemory::parse_v1(Some("50331648\n"), Some("1048576\n"));
        assert_eq!((limited.limit, limited.current, limited.headroom()), (Some(48 * MIB), MIB, Some(47 * MIB)));
        let unlimited = CgroupMemory::parse_v1(Some("9223372036854771712\n"), Some("1048576\n"));
        assert_eq!(unlimited.headroom(), None);
        assert_eq!(CgroupMemory::parse_v1(Some("50331648"), None).limit, None, "no usage: not a memory cgroup");
    }

    #[test]
    fn parses_procfs() {
        let psi = "some avg10=12.50 avg60=0.00 avg300=0.00 total=5\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=0\n";
        let state = MemoryState::parse(MEMINFO, psi);
        assert_eq!(state.total, 24_000_000 * 1024);
        assert_eq!(state.available, 20_000_000 * 1024);
        assert!((state.some_avg10 - 12.5).abs() < 1e-9);
    }

    #[test]
    fn thresholds() {
        let cfg = PressureConfig::default();
        let calm = MemoryState { some_avg10: 0.0, available: 20 << 30, total: 24 << 30 };
        assert!(!cfg.is_pressure(&calm));
        assert!(cfg.is_pressure(&MemoryState { some_avg10: 50.0, ..calm }));
        assert!(cfg.is_pressure(&MemoryState { available: 100 << 20, ..calm }));
    }

    #[test]
    fn guard_caches_and_rechecks() {
        let mut calls = 0;
        let mut guard = PressureGuard::with_source(PressureConfig::default(), move || {
            calls += 1;
            Ok(MemoryState { some_avg10: if calls > 1 { 99.0 } else { 0.0 }, available: 1 << 40, total: 1 << 40 })
        });
        let t0 = Instant::now();
        assert!(!guard.under_pressure(t0));
        assert!(!guard.under_pressure(t0 + Duration::from_millis(10)), "cached within recheck");
        assert!(guard.under_pressure(t0 + Duration::from_millis(200)));
    }

    #[test]
    fn parses_cgroup_files() {
        let psi = "some avg10=3.25 avg60=0.00 avg300=0.00 total=1\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        let m = CgroupMemory::parse(Some("50331648\n"), Some("max\n"), Some("1048576\n"), Some(psi));
        assert_eq!((m.limit, m.current, m.headroom()), (Some(48 * MIB), MIB, Some(47 * MIB)));
        assert!((m.some_avg10 - 3.25).abs() < 1e-9);
        let high = CgroupMemory::parse(Some("max\n"), Some("33554432\n"), Some("0\n"), None);
        assert_eq!(high.limit, Some(32 * MIB), "memory.high is a limit too");
        let both = CgroupMemory::parse(Some("16777216\n"), Some("33554432\n"), Some("0\n"), None);
        assert_eq!(both.limit, Some(16 * MIB), "the lower of the two");
        let unlimited = CgroupMemory::parse(Some("max\n"), Some("max\n"), Some("5\n"), None);
        assert_eq!((unlimited.limit, unlimited.headroom()), (None, None));
        let no_controller = CgroupMemory::parse(None, None, None, Some(psi));
        assert_eq!((no_controller.limit, no_controller.current), (None, 0));
    }

    #[test]
    fn parses_proc_cgroup() {
        assert_eq!(parse_cgroup_path("0::/a/b.slice\n"), Some(PathBuf::from("a/b.slice")));
        assert_eq!(parse_cgroup_path("0::/\n"), Some(PathBuf::new()), "the root");
        let hybrid = "4:memory:/x\n1:name=systemd:/\n0::/user.slice\n";
        assert_eq!(parse_cgroup_path(hybrid), Some(PathBuf::from("user.slice")));
        assert_eq!(parse_cgroup_path("4:memory:/x\n"), None, "cgroup v1 only");
        assert_eq!(parse_cgroup_path("0::/../../other\n"), None, "outside this namespace's view");
        assert_eq!(parse_cgroup_path("0::/gone (deleted)\n"), None);
        assert_eq!(parse_cgroup_path(""), None);
    }

    fn limited(limit_mib: u64, current_mib: u64) -> CgroupMemory {
        CgroupMemory { some_avg10: 0.0, limit: Some(limit_mib * MIB), current: current_mib * MIB }
    }

    #[test]
    fn headroom_is_the_least_over_the_chain_and_the_machine() {
        let cfg = PressureConfig::default();
        let machine = MemoryState { some_avg10: 0.0, available: 20 << 30, total: 24 << 30 };
        let pages = |mib: u64| mib * MIB / 4 / PAGE_SIZE;
        // Machine alone: a quarter of MemAvailable.
        assert_eq!(cfg.admit(Some(&machine), &[], 0.0), Admission::Issue { max_pages: pages(20 << 10) });
        // A 48 MiB leaf under an unlimited parent: its 47 MiB bound it.
        let chain = [limited(48, 1), CgroupMemory { limit: None, current: 900 * MIB, some_avg10: 0.0 }];
        assert_eq!(cfg.admit(Some(&machine), &chain, 0.0), Admission::Issue { max_pages: pages(47) });
        // An unlimited leaf under a 1 GiB parent with 200 MiB left.
        let chain = [CgroupMemory::default(), limited(1024, 824)];
        assert_eq!(cfg.admit(Some(&machine), &chain, 0.0), Admission::Issue { max_pages: pages(200) });
        // The machine tighter than any cgroup.
        let low = MemoryState { available: 400 * MIB, total: 4 << 30, ..machine };
        assert_eq!(cfg.admit(Some(&low), &[limited(4096, 0)], 0.0), Admission::Issue { max_pages: pages(400) });
        // Nothing known: no bound.
        assert_eq!(cfg.admit(None, &[], 0.0), Admission::Issue { max_pages: u64::MAX });
    }

    #[test]
    fn sheds_when_a_cgroup_is_full_or_stalls() {
        let cfg = PressureConfig::default();
        let machine = MemoryState { some_avg10: 0.0, available: 20 << 30, total: 24 << 30 };
        // 16 MiB floor for a small cgroup…
        assert_eq!(cfg.admit(Some(&machine), &[limited(48, 33)], 0.0), Admission::Shed(Shed::CgroupFull));
        assert!(matches!(cfg.admit(Some(&machine), &[limited(48, 32)], 0.0), Admission::Issue { .. }));
        // …5 % of the limit for a large one (102 MiB of 2 GiB).
        assert_eq!(cfg.admit(Some(&machine), &[limited(2048, 1948)], 0.0), Admission::Shed(Shed::CgroupFull));
        assert!(matches!(cfg.admit(Some(&machine), &[limited(2048, 1940)], 0.0), Admission::Issue { .. }));
        // Over the limit (memory.high exceeded) is full, not a wrap.
        assert_eq!(cfg.admit(Some(&machine), &[limited(48, 60)], 0.0), Admission::Shed(Shed::CgroupFull));
        // A full ancestor sheds a roomy leaf.
        let chain = [limited(4096, 0), limited(64, 60)];
        assert_eq!(cfg.admit(Some(&machine), &chain, 0.0), Admission::Shed(Shed::CgroupFull));
        // The cgroup's stalls, at the machine's threshold.
        assert_eq!(cfg.admit(Some(&machine), &[limited(4096, 0)], 10.5), Admission::Shed(Shed::CgroupStall));
        assert!(matches!(cfg.admit(Some(&machine), &[], 10.0), Admission::Issue { .. }));
        // The machine first.
        let stalled = MemoryState { some_avg10: 50.0, ..machine };
        assert_eq!(cfg.admit(Some(&stalled), &[], 0.0), Admission::Shed(Shed::Machine));
    }

    #[test]
    fn clamps_runs_in_order() {
        let mut runs = vec![PageRange::new(0, 10), PageRange::new(20, 30), PageRange::new(40, 50)];
        assert_eq!(clamp_runs(&mut runs, 15), 15);
        assert_eq!(runs, vec![PageRange::new(0, 10), PageRange::new(20, 25)]);
        assert_eq!(clamp_runs(&mut runs, u64::MAX), 0);
        assert_eq!(clamp_runs(&mut runs, 0), 15);
        assert!(runs.is_empty());
    }

    /// A directory laid out like `/proc` and `/sys/fs/cgroup`.
    struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        fn new(controllers: &str) -> Self {
            let tree = Self { dir: tempfile::tempdir().expect("tempdir") };
            tree.write("cg/cgroup.controllers", controllers);
            tree
        }

        fn write(&self, path: &str, text: &str) {
            let path = self.dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }

        fn process(&self, pid: &str, cgroup: &str) {
            self.write(&format!("proc/{pid}/cgroup"), &format!("0::{cgroup}\n"));
        }

        fn cgroup(&self, path: &str, max: &str, current: u64) {
            self.write(&format!("cg/{path}/memory.max"), &format!("{max}\n"));
            self.write(&format!("cg/{path}/memory.high"), "max\n");
            self.write(&format!("cg/{path}/memory.current"), &format!("{current}\n"));
            self.write(&format!("cg/{path}/memory.pressure"), "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
        }

        fn fs(&self) -> CgroupFs {
            CgroupFs::at(self.dir.path().join("proc"), self.dir.path().join("cg"))
        }

        fn guard(&self) -> PressureGuard {
            PressureGuard::with_source(PressureConfig::default(), || {
                Ok(MemoryState { some_avg10: 0.0, available: 1 << 40, total: 1 << 40 })
            })
            .with_cgroups(self.fs())
        }
    }

    #[test]
    fn falls_back_to_the_machine_without_the_memory_controller() {
        let tree = Tree::new("cpu io pids\n");
        tree.process("self", "/");
        assert_eq!(tree.fs().memory_controller().map_err(|e| e.contains("memory controller")), Err(true));
        let mut guard = tree.guard();
        assert!(!guard.watches_cgroups());
        assert_eq!(
            guard.admit(Instant::now(), Some(4_000_000_007)),
            Admission::Issue { max_pages: (1u64 << 40) / 4 / PAGE_SIZE }
        );
        let no_v2 = Tree::new("cpu memory\n");
        no_v2.write("proc/self/cgroup", "4:memory:/x\n");
        assert!(!no_v2.guard().watches_cgroups(), "a process with no cgroup v2 path");
    }

    #[test]
    fn reads_the_target_chain_and_its_own() {
        let tree = Tree::new("cpu memory pids\n");
        tree.process("self", "/system.slice/predictio.service");
        tree.cgroup("system.slice", "max", 0);
        tree.cgroup("system.slice/predictio.service", "max", 0);
        tree.process("4000000042", "/box/app");
        tree.cgroup("box", &(48 * MIB).to_string(), 2 * MIB);
        tree.cgroup("box/app", "max", MIB);
        let mut guard = tree.guard();
        assert!(guard.watches_cgroups());
        let t0 = Instant::now();
        // The parent's 48 MiB bound the leaf: 46 MiB of headroom.
        assert_eq!(guard.admit(t0, Some(4_000_000_042)), Admission::Issue { max_pages: 46 * MIB / 4 / PAGE_SIZE });
        // No target, or one whose cgroup cannot be read: its own and the machine.
        let machine = Admission::Issue { max_pages: (1u64 << 40) / 4 / PAGE_SIZE };
        assert_eq!(guard.admit(t0, None), machine);
        assert_eq!(guard.admit(t0, Some(4_000_000_999)), machine);
        // Its own cgroup counts too.
        tree.cgroup("system.slice", &(64 * MIB).to_string(), 60 * MIB);
        let later = t0 + Duration::from_millis(10);
        assert_eq!(guard.admit(later, None), Admission::Shed(Shed::CgroupFull));
        // The target's cgroup stalls.
        tree.cgroup("system.slice", "max", 0);
        tree.write("cg/box/app/memory.pressure", "some avg10=42.00 avg60=0.00 avg300=0.00 total=9\n");
        let later = later + Duration::from_millis(10);
        assert_eq!(guard.admit(later, Some(4_000_000_042)), Admission::Shed(Shed::CgroupStall));
        // An ancestor's stalls are its siblings' too: only the leaf's count.
        tree.write("cg/box/app/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n");
        tree.write("cg/box/memory.pressure", "some avg10=42.00 avg60=0.00 avg300=0.00 total=9\n");
        let later = later + Duration::from_millis(10);
        assert!(matches!(guard.admit(later, Some(4_000_000_042)), Admission::Issue { .. }));
    }

    #[test]
    fn readings_are_cached_charged_and_bounded() {
        let tree = Tree::new("memory\n");
        tree.process("self", "/");
        tree.process("1", "/box");
        tree.cgroup("box", &(48 * MIB).to_string(), 0);
        let mut guard = tree.guard();
        let t0 = Instant::now();
        let quarter = |mib: u64| Admission::Issue { max_pages: mib * MIB / 4 / PAGE_SIZE };
        assert_eq!(guard.admit(t0, Some(1)), quarter(48));
        // Within the recheck the files are not read again…
        tree.cgroup("box", &(48 * MIB).to_string(), 40 * MIB);
        assert_eq!(guard.admit(t0 + Duration::from_millis(1), Some(1)), quarter(48));
        // …but what was issued since counts.
        guard.note_issued(Some(1), 8 * MIB / PAGE_SIZE);
        assert_eq!(guard.admit(t0 + Duration::from_millis(2), Some(1)), quarter(40));
        // After it, the new reading.
        assert_eq!(guard.admit(t0 + Duration::from_millis(5), Some(1)), Admission::Shed(Shed::CgroupFull));
        // Bounded: many targets keep at most max_cgroups paths and readings.
        for pid in 2..200u32 {
            tree.process(&pid.to_string(), &format!("/many/c{pid}"));
            let _ = guard.admit(t0, Some(pid));
        }
        let cgroups = guard.cgroups.as_ref().expect("watching");
        let cap = PressureConfig::default().max_cgroups;
        assert!(cgroups.targets.slots.len() <= cap && cgroups.readings.slots.len() <= cap);
    }

    #[test]
    fn reads_this_system_or_says_why_not() {
        match CgroupFs::system().and_then(|fs| fs.memory_controller().map(|()| fs)) {
            Ok(fs) => {
                let own = fs.cgroup_of(None).expect("own cgroup");
                assert!(fs.cgroup_root().join(&own).is_dir(), "{} exists", own.display());
            }
            Err(reason) => {
                assert!(!reason.is_empty());
                assert!(!PressureGuard::new(PressureConfig::default()).watches_cgroups());
            }
        }
    }
}
