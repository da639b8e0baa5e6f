//! The loaded BPF object: attach, follow, drain.
//!
//! Owns the programs (attached while the [`Observer`] lives) and the maps it
//! talks to. Draining never blocks longer than the caller's timeout and never
//! allocates per record.

use std::os::fd::AsFd;
use std::time::Duration;

use aya::maps::{Array, HashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfLoader};
use predictio::Event;
use predictio::event::Coalescer;

use crate::hooks::{self, Attach, HOOKS, Hook, MissingHook};
use crate::record::consts::{
    PIO_LOST_FOLLOWS, PIO_LOST_RECORDS, PIO_MAX_DEVICES, PIO_RECORD_SIZE, PIO_SETTING_FOLLOW_ALL,
    PIO_SETTING_LOOKUPS_ALL, PIO_SETTING_LOOKUPS_LAUNCHES, PIO_SETTINGS_KEY, PIO_SLEEPING_KEY,
};
use crate::record::{Record, RecordKind, user_dev_to_kernel};
use crate::{BpfError, FollowAllLookups, ObserverConfig, ObserverStats, layout, sys};

/// The object compiled by `build.rs`.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/observe.bpf.o"));

/// Each program and the hook ([`HOOKS`], by name) it attaches to: the
/// process-tree programs first, so that the followed set is kept up to date
/// before any page-cache program reports.
const PROGRAMS: &[(&str, &str)] = &[
    ("pio_fork", "sched_process_fork"),
    ("pio_exit", "sched_process_exit"),
    ("pio_exec", "sched_process_exec"),
    ("pio_get_pages", "mm_filemap_get_pages"),
    ("pio_fault", "mm_filemap_fault"),
    ("pio_map_pages", "mm_filemap_map_pages"),
    ("pio_add_page", "mm_filemap_add_to_page_cache"),
    ("pio_delete_page", "mm_filemap_delete_from_page_cache"),
];

/// Stops the observer reporting one launch's page-cache hits on the files
/// of its profile for a while: the daemon found the launch warm when it came
/// to replay it, and neither learns nor scores it, so those hits (thousands
/// a launch) would be thrown away after costing the launch and the daemon
/// their time. Its processes (the launching one and what it forks) are
/// quiet until the deadline; misses, evictions, their other files and every
/// other process are reported as ever. Bounded in the kernel (LRU maps of
/// 4,096 processes and 65,536 files). Cloned freely; usable from any
/// thread.
#[derive(Clone)]
pub struct Quieter {
    maps: std::sync::Arc<std::sync::Mutex<QuietMaps>>,
}

struct QuietMaps {
    pids: HashMap<MapData, u32, [u64; 2]>,
    files: HashMap<MapData, [u32; 4], u8>,
}

impl std::fmt::Debug for Quieter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quieter").finish_non_exhaustive()
    }
}

impl Quieter {
    /// Files of one launch listed at most.
    pub const MAX_FILES: usize = 4096;

    /// Hits of process `pid` (and of what it forks from now on) on each of
    /// `files` are not reported for `span`. Returns how many files were
    /// listed (at most [`Self::MAX_FILES`]).
    pub fn quiet(
        &self,
        pid: u32,
        files: impl IntoIterator<Item = predictio::FileId>,
        span: Duration,
    ) -> Result<usize, BpfError> {
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        let mut listed = 0;
        for file in files.into_iter().take(Self::MAX_FILES) {
            let Some(dev) = user_dev_to_kernel(file.dev) else { continue };
            let key = [pid, dev, file.ino as u32, (file.ino >> 32) as u32];
            maps.files.insert(key, 1, 0).map_err(|source| BpfError::Map {
                map: "quiet_files",
                step: "insert",
                source,
            })?;
            listed += 1;
        }
        drop(maps);
        self.join(pid, pid, span)?;
        Ok(listed)
    }

    /// Process `pid` (and what it forks from now on) joins the files that
    /// [`Self::quiet`] listed for process `set` (a repeat of the same
    /// launch): its hits on them are not reported for `span`. One map
    /// update, whatever the number of files.
    pub fn join(&self, pid: u32, set: u32, span: Duration) -> Result<(), BpfError> {
        let deadline = crate::sys::monotonic_ns().saturating_add(span.as_nanos().min(u128::from(u64::MAX)) as u64);
        // `struct pio_quiet`: the deadline, then the set and padding.
        let mut maps = self.maps.lock().unwrap_or_else(|e| e.into_inner());
        maps.pids.insert(pid, [deadline, u64::from(set)], 0).map_err(|source| BpfError::Map {
            map: "quiet_pids",
            step: "insert",
            source,
        })
    }
}

/// eBPF observation of page-cache accesses and process trees.
///
/// See the crate documentation for an example of the draining loop.
pub struct Observer {
    // Fields drop in order: the maps we hold are closed before the object
    // (programs and links) goes.
    ring: RingBuf<MapData>,
    followed: HashMap<MapData, u32, u8>,
    quieter: Quieter,
    settings: Array<MapData, u32>,
    lost: PerCpuArray<MapData, u64>,
    stats: ObserverStats,
    /// The [`ObserverConfig::follow_all_lookups`] bits, kept across
    /// [`Observer::follow_all`].
    lookup_bits: u32,
    poll_interval: Duration,
    attached: Vec<&'static Hook>,
    missing: Vec<MissingHook>,
    _ebpf: Ebpf,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer").field("stats", &self.stats).field("missing", &self.missing).finish_non_exhaustive()
    }
}

impl Observer {
    /// Checks the kernel's tracepoint layouts, loads the programs and attaches
    /// them. Needs `CAP_BPF` + `CAP_PERFMON` (or root) and a kernel with BTF.
    ///
    /// A program whose hook is optional ([`Hook::required`] false) and
    /// absent, laid out otherwise, refused by this kernel or
    /// [assumed missing](ObserverConfig::assume_missing) is not loaded: the
    /// observer runs without its events and [`Observer::missing_hooks`]
    /// says why. A required hook's failure fails the load.
    ///
    /// Errors name the failing step; [`BpfError::is_unavailable`] tells
    /// whether to fall back to another source.
    pub fn load(config: ObserverConfig) -> Result<Observer, BpfError> {
        validate(&config)?;
        let tracefs =
            layout::find_or_mount_tracefs(config.mount_tracefs).map_err(|source| BpfError::Tracefs { source })?;
        let layouts = layout::check_all(&tracefs)?;
        let exit_has_group_dead = u32::from(layouts.exit_has_group_dead);
        let folio_has_order = u32::from(layouts.folio_has_order);

        let devices = config
            .devices
            .iter()
            .map(|&dev| {
                user_dev_to_kernel(dev).ok_or_else(|| BpfError::Config(format!("device {dev:#x} has no kernel dev_t")))
            })
            .collect::<Result<Vec<u32>, _>>()?;
        let (cgroup_id, cgroup_level) = match &config.cgroup {
            Some(path) => crate::cgroup::resolve(path)?,
            None => (0, 0),
        };
        let filter_devices = u32::from(!devices.is_empty());
        let evictions_any_process = u32::from(config.evictions_any_process);
        let ignore_tgid = if config.ignore_own_pages { std::process::id() } else { 0 };
        let (lookup_bits, lookup_window_ns, lookup_budget) = match config.follow_all_lookups {
            FollowAllLookups::None => (0, 0u64, 0u32),
            FollowAllLookups::Launches { window, per_launch } => {
                (PIO_SETTING_LOOKUPS_LAUNCHES, u64::try_from(window.as_nanos()).unwrap_or(u64::MAX), per_launch)
            }
            FollowAllLookups::All => (PIO_SETTING_LOOKUPS_ALL, 0, 0),
        };

        let mut ebpf = EbpfLoader::new()
            .override_global("wakeup_bytes", &config.wakeup_bytes, true)
            .override_global("filter_devices", &filter_devices, true)
            .override_global("cgroup_id", &cgroup_id, true)
            .override_global("cgroup_level", &cgroup_level, true)
            .override_global("evictions_any_process", &evictions_any_process, true)
            .override_global("ignore_tgid", &ignore_tgid, true)
            .override_global("exit_has_group_dead", &exit_has_group_dead, true)
            .override_global("folio_has_order", &folio_has_order, true)
            .override_global("lookup_window_ns", &lookup_window_ns, true)
            .override_global("lookup_budget", &lookup_budget, true)
            .map_max_entries("events", config.ring_bytes)
            .map_max_entries("followed", config.max_followed)
            .load(OBJECT)
            .map_err(BpfError::Load)?;

        {
            let mut device_map: HashMap<_, u32, u8> = HashMap::try_from(map_mut(&mut ebpf, "devices")?)
                .map_err(|source| BpfError::Map { map: "devices", step: "open", source })?;
            for dev in devices {
                device_map.insert(dev, 1, 0).map_err(|source| BpfError::Map {
                    map: "devices",
                    step: "insert",
                    source,
                })?;
            }
        }
        let mut settings: Array<MapData, u32> = take_map(&mut ebpf, "settings")?;
        let bits = if config.follow_all { PIO_SETTING_FOLLOW_ALL } else { 0 } | lookup_bits;
        settings.set(PIO_SETTINGS_KEY, bits, 0).map_err(|source| BpfError::Map {
            map: "settings",
            step: "set follow_all",
            source,
        })?;

        let btf = aya::Btf::from_sys_fs().map_err(|source| BpfError::KernelBtf { source })?;
        let mut attached = Vec::new();
        let mut missing = Vec::new();
        for &(name, hook_name) in PROGRAMS {
            let hook = HOOKS
                .iter()
                .find(|hook| hook.name == hook_name)
                .ok_or_else(|| BpfError::Config(format!("no hook {hook_name} for program {name}")))?;
            let assumed = config.assume_missing.contains(&hook.label());
            let result = if assumed {
                Err(BpfError::MissingTracepoint {
                    tracepoint: hook.label(),
                    source: std::io::Error::other("assumed missing (ObserverConfig::assume_missing)"),
                })
            } else {
                hooks::check(&tracefs, hook).and_then(|()| attach(&mut ebpf, name, hook, &btf))
            };
            match result {
                Ok(()) => attached.push(hook),
                Err(err) if !hook.required && err.is_unavailable() => {
                    tracing::debug!("eBPF observer: {} not attached: {err}", hook.label());
                    missing.push(MissingHook { hook, reason: err.to_string() });
                }
                Err(err) => return Err(err),
            }
        }

        // The path calls' programs, and with them those on the exec calls'
        // entry (exec starts): the same syscall tracing pays for both.
        if config.path_calls {
            for &(name, call) in layouts.path_calls.iter().chain(&layouts.exec_start_calls) {
                let program =
                    ebpf.program_mut(name).ok_or_else(|| BpfError::Config(format!("object lacks program {name}")))?;
                attach_tracepoint(program, name, "syscalls", &format!("sys_enter_{call}"))?;
            }
        }

        let ring = take_map(&mut ebpf, "events")?;
        let followed = take_map(&mut ebpf, "followed")?;
        let pids = take_map(&mut ebpf, "quiet_pids")?;
        let files = take_map(&mut ebpf, "quiet_files")?;
        let quieter = Quieter { maps: std::sync::Arc::new(std::sync::Mutex::new(QuietMaps { pids, files })) };
        let lost = take_map(&mut ebpf, "lost")?;
        Ok(Observer {
            ring,
            followed,
            quieter,
            settings,
            lost,
            stats: ObserverStats::default(),
            lookup_bits,
            poll_interval: config.poll_interval,
            attached,
            missing,
            _ebpf: ebpf,
        })
    }

    /// The name of this event source, for logs and `predictio stat`.
    pub fn source_name(&self) -> &'static str {
        "ebpf"
    }

    /// The hooks whose programs are attached, in attach order.
    pub fn attached_hooks(&self) -> &[&'static Hook] {
        &self.attached
    }

    /// The optional hooks this observer runs without, and why (empty on a
    /// kernel with every hook: Linux 6.11 and later).
    pub fn missing_hooks(&self) -> &[MissingHook] {
        &self.missing
    }

    /// The configured poll timeout ([`ObserverConfig::poll_interval`]).
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }

    /// Follows process `pid` (a thread-group id, in the initial pid
    /// namespace) and, from now on, every process it forks, recursively. A
    /// process leaves the set when its last thread exits.
    ///
    /// To miss nothing of a new command, start it stopped (e.g. blocked on a
    /// pipe), follow it, then let it go.
    pub fn follow(&mut self, pid: u32) -> Result<(), BpfError> {
        self.followed.insert(pid, 1, 0).map_err(|source| BpfError::Map { map: "followed", step: "insert", source })
    }

    /// Stops following `pid` (its descendants stay followed). Returns false
    /// when it was not followed.
    pub fn unfollow(&mut self, pid: u32) -> Result<bool, BpfError> {
        match self.followed.remove(&pid) {
            Ok(()) => Ok(true),
            Err(aya::maps::MapError::KeyNotFound) => Ok(false),
            Err(aya::maps::MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(false),
            Err(source) => Err(BpfError::Map { map: "followed", step: "remove", source }),
        }
    }

    /// The handle that quiets warm launches' hits ([`Quieter`]), for
    /// another thread.
    pub fn quieter(&self) -> Quieter {
        self.quieter.clone()
    }

    /// True when `pid` is in the in-kernel followed set.
    pub fn is_followed(&self, pid: u32) -> bool {
        self.followed.get(&pid, 0).is_ok()
    }

    /// Says whether the consumer is about to sleep on the emptied ring
    /// (`true`): the next record then wakes it, whatever its size, where
    /// records otherwise wait for a wake-up threshold or an exec. Set it
    /// before the sleep, and poll without waiting once more before sleeping
    /// (a record may have come in between); the record that wakes the
    /// consumer clears it.
    pub fn set_sleeping(&mut self, on: bool) -> Result<(), BpfError> {
        self.settings.set(PIO_SLEEPING_KEY, u32::from(on), 0).map_err(|source| BpfError::Map {
            map: "settings",
            step: "set sleeping",
            source,
        })
    }

    /// Reports every process (`true`, the daemon's mode) or only followed
    /// ones (`false`). The cgroup and device filters still apply.
    pub fn follow_all(&mut self, on: bool) -> Result<(), BpfError> {
        let bits = if on { PIO_SETTING_FOLLOW_ALL } else { 0 } | self.lookup_bits;
        self.settings.set(PIO_SETTINGS_KEY, bits, 0).map_err(|source| BpfError::Map {
            map: "settings",
            step: "set follow_all",
            source,
        })
    }

    /// Delivers every record already in the ring buffer, as events, without
    /// waiting. Misses and evictions that came back to back are joined into
    /// runs ([`Coalescer`]). Returns the number of events delivered.
    pub fn drain(&mut self, on_event: &mut impl FnMut(Event)) -> usize {
        let mut delivered = 0usize;
        let mut deliver = |event| {
            delivered += 1;
            on_event(event);
        };
        let mut runs = Coalescer::default();
        while let Some(item) = self.ring.next() {
            self.stats.records += 1;
            let Some(record) = Record::parse(&item) else {
                self.stats.malformed += 1;
                continue;
            };
            let tail = item.get(PIO_RECORD_SIZE as usize..).unwrap_or_default();
            let kind = record.emit_events(tail, &mut |event| runs.push(event, &mut deliver));
            let counter = match kind {
                Some(RecordKind::Read) => &mut self.stats.reads,
                Some(RecordKind::Fault) => &mut self.stats.faults,
                Some(RecordKind::MapPages) => &mut self.stats.map_pages,
                Some(RecordKind::Miss) => &mut self.stats.misses,
                Some(RecordKind::Evict) => &mut self.stats.evictions,
                Some(RecordKind::Exec) => &mut self.stats.execs,
                Some(RecordKind::Fork) => &mut self.stats.forks,
                Some(RecordKind::Exit) => &mut self.stats.exits,
                Some(RecordKind::Lookup) => &mut self.stats.lookups,
                Some(RecordKind::ExecStart) => &mut self.stats.exec_starts,
                None => &mut self.stats.malformed,
            };
            *counter += 1;
        }
        runs.flush(&mut deliver);
        self.stats.events += delivered as u64;
        delivered
    }

    /// Delivers what is in the ring buffer; if it is empty, waits up to
    /// `timeout` (woken early only when the unread data passes
    /// [`ObserverConfig::wakeup_bytes`]) and delivers what arrived. Returns
    /// the number of events delivered (0 on a quiet timeout).
    ///
    /// Records are submitted without waking the consumer, so `timeout` is
    /// the notification latency while the ring is below the threshold: call
    /// this in a loop with a short timeout ([`Observer::poll_interval`]).
    pub fn poll(&mut self, timeout: Duration, on_event: &mut impl FnMut(Event)) -> Result<usize, BpfError> {
        let delivered = self.drain(on_event);
        if delivered > 0 || timeout.is_zero() {
            return Ok(delivered);
        }
        sys::poll_readable(self.ring.as_fd(), timeout).map_err(|source| BpfError::Syscall { call: "poll", source })?;
        Ok(self.drain(on_event))
    }

    /// Closes the observer without waiting for the kernel to detach its
    /// programs, which takes one RCU grace period per program (here ~75 ms
    /// each, over a second in all). A forked helper holds the last
    /// references and exits once this process has dropped its own; this
    /// returns then, with the helper's pid (a caller that lives on may reap
    /// it; an exiting one leaves that to init). If the process cannot fork,
    /// the observer is closed here, waiting, and `None` returned. For
    /// commands that exit once their work is done (`predictio run`,
    /// `record`, `trace`); a process that lives on can simply drop the
    /// observer.
    pub fn close_in_background(self) -> Option<u32> {
        let mut observer = Some(self);
        match sys::release_in_helper(|| drop(observer.take())) {
            Ok(helper) => Some(helper),
            Err(err) => {
                tracing::debug!("closing the eBPF observer in place: cannot fork ({err})");
                drop(observer);
                None
            }
        }
    }

    /// Counters since load; `lost` and `lost_follows` are read from the
    /// kernel's per-CPU counters.
    pub fn stats(&self) -> ObserverStats {
        let read = |index| self.lost.get(&index, 0).map(|per_cpu| per_cpu.iter().sum()).unwrap_or(0);
        ObserverStats { lost: read(PIO_LOST_RECORDS), lost_follows: read(PIO_LOST_FOLLOWS), ..self.stats }
    }
}

/// The ring buffer's descriptor, for a consumer that waits on it together
/// with descriptors of its own (a stop signal) instead of in
/// [`Observer::poll`]: `poll(2)` finds it readable at once while records
/// are unread, and a wait on it is woken as `poll`'s is (a record past the
/// wake-up threshold, an exec), not by the records submitted in between.
impl AsFd for Observer {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.ring.as_fd()
    }
}

fn validate(config: &ObserverConfig) -> Result<(), BpfError> {
    let page = 4096;
    if !config.ring_bytes.is_power_of_two() || config.ring_bytes < page {
        return Err(BpfError::Config(format!(
            "ring_bytes {} must be a power of two of at least {page}",
            config.ring_bytes
        )));
    }
    if config.devices.len() > PIO_MAX_DEVICES as usize {
        return Err(BpfError::Config(format!("{} devices to filter; at most {PIO_MAX_DEVICES}", config.devices.len())));
    }
    if let FollowAllLookups::Launches { window, per_launch } = config.follow_all_lookups
        && (window.is_zero() || per_launch == 0)
    {
        return Err(BpfError::Config(format!(
            "follow_all_lookups: a launch's window ({window:?}) and budget ({per_launch}) must be positive"
        )));
    }
    if config.max_followed == 0 {
        return Err(BpfError::Config("max_followed must be positive".into()));
    }
    for label in &config.assume_missing {
        match hooks::by_label(label) {
            Some(hook) if !hook.required => {}
            Some(_) => return Err(BpfError::Config(format!("assume_missing: {label} is required, not optional"))),
            None => {
                let optional: Vec<String> = HOOKS.iter().filter(|h| !h.required).map(Hook::label).collect();
                return Err(BpfError::Config(format!(
                    "assume_missing: {label} is not a hook; optional hooks: {}",
                    optional.join(", ")
                )));
            }
        }
    }
    Ok(())
}

/// Takes map `name` out of the object as a `T` (a ring buffer, a hash map,
/// an array).
fn take_map<T>(ebpf: &mut Ebpf, name: &'static str) -> Result<T, BpfError>
where
    T: TryFrom<aya::maps::Map, Error = aya::maps::MapError>,
{
    let map = ebpf.take_map(name).ok_or_else(|| BpfError::Config(format!("object lacks map {name}")))?;
    T::try_from(map).map_err(|source| BpfError::Map { map: name, step: "open", source })
}

fn map_mut<'a>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut aya::maps::Map, BpfError> {
    ebpf.map_mut(name).ok_or_else(|| BpfError::Config(format!("object lacks map {name}")))
}

/// Loads program `name` of the object and attaches it to `hook`.
fn attach(ebpf: &mut Ebpf, name: &'static str, hook: &Hook, btf: &aya::Btf) -> Result<(), BpfError> {
    let program = ebpf.program_mut(name).ok_or_else(|| BpfError::Config(format!("object lacks program {name}")))?;
    let step = |step, source| BpfError::Program { program: name, step, source };
    match hook.attach {
        Attach::Tracepoint => attach_tracepoint(program, name, hook.category, hook.name)?,
        Attach::BtfTracepoint => {
            let program: &mut BtfTracePoint = program.try_into().map_err(|e| step("type", e))?;
            program.load(hook.name, btf).map_err(|e| step("load", e))?;
            program.attach().map_err(|e| step("attach", e))?;
        }
        Attach::RawTracepoint => {
            let program: &mut RawTracePoint = program.try_into().map_err(|e| step("type", e))?;
            program.load().map_err(|e| step("load", e))?;
            program.attach(hook.name).map_err(|e| step("attach", e))?;
        }
    }
    Ok(())
}

/// Loads `program` (named `name` in the object) as a classic tracepoint and
/// attaches it to `category`/`event`.
fn attach_tracepoint(
    program: &mut aya::programs::Program,
    name: &'static str,
    category: &str,
    event: &str,
) -> Result<(), BpfError> {
    let step = |step, source| BpfError::Program { program: name, step, source };
    let program: &mut TracePoint = program.try_into().map_err(|e| step("type", e))?;
    program.load().map_err(|e| step("load", e))?;
    program.attach(category, event).map_err(|e| step("attach", e))?;
    Ok(())
}
