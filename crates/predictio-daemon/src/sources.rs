//! Event sources of the daemon and of `run`: the hint socket and kernel
//! observation, each on its own thread, each feeding the pipeline through a
//! non-blocking [`EventSender`].
//!
//! Kernel observation is chosen here, once, from `[observe] source`
//! ([`SourceChoice`]): `auto` takes the first of eBPF, perf_event_open
//! tracepoints and fanotify that opens, and says why it took a fallback or
//! none; a named source must open or the daemon does not start.
//! [`probe_observation`] makes the same choice without starting anything,
//! for `predictio daemon --check`.
//!
//! An eBPF or perf observer that opens must then pass the start-up
//! self-check ([`predictio_bpf::self_check`]) before it is used: a page read
//! from a probe file of the daemon's own must be reported as that file's
//! miss. One that fails is refused like one that cannot open (`auto` moves
//! on to the next source and the note says why; a named source is an
//! error). The check's own events never reach the policies.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use predictio::hints::{HintConfig, HintError, HintServer, HintStats};
use predictio::pipeline::EventSender;
use predictio_bpf::fallback::{FanotifyConfig, FanotifyError, FanotifyObserver};
use predictio_bpf::perf::{PerfConfig, PerfError, PerfObserver};
use predictio_bpf::self_check::{self, Outcome, ProbeSpec, Refusal};
use predictio_bpf::{BpfError, FollowAllLookups, Observer, ObserverConfig, ObserverStats};

use crate::Stopper;
use crate::config::{AssumedMissing, Config, SourceChoice};

/// Why a source could not start.
#[derive(Debug, thiserror::Error)]
pub enum SourcesError {
    /// The hint socket could not be bound (its directory, a live server
    /// already there, something else at the path).
    #[error("binding the hint socket {path}: {source}", path = path.display())]
    HintSocket {
        /// The socket path.
        path: PathBuf,
        /// Why.
        source: HintError,
    },
    /// A source's thread could not be started.
    #[error("starting the {name} thread: {source}")]
    Thread {
        /// The thread's name.
        name: &'static str,
        /// Why.
        source: io::Error,
    },
    /// `[observe] source = "ebpf"` and eBPF cannot run here.
    #[error("[observe] source = \"ebpf\": eBPF observation cannot start: {0}")]
    Ebpf(#[source] EbpfUnavailable),
    /// `[observe] source = "perf"` and the tracepoints cannot be opened.
    #[error("[observe] source = \"perf\": perf_event_open tracepoints cannot open: {0}")]
    Perf(#[source] PerfError),
    /// `[observe] source = "fanotify"` and fanotify cannot start.
    #[error("[observe] source = \"fanotify\": fanotify cannot start: {0}")]
    Fanotify(#[source] FanotifyError),
    /// `[observe] source` names eBPF or perf, which opened but reported the
    /// start-up self-check's read wrongly or not at all.
    #[error("[observe] source = \"{name}\": refused by the start-up self-check: {refusal}")]
    SelfCheck {
        /// `ebpf` or `perf`.
        name: &'static str,
        /// What the observer reported of the check's read.
        refusal: Refusal,
    },
}

/// Why eBPF observation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum EbpfUnavailable {
    /// This build carries no BPF object; the reason names what the build
    /// lacked (e.g. clang).
    #[error("not built in ({0})")]
    NotBuilt(&'static str),
    /// Loading or attaching the programs failed (no privilege, no BTF, a
    /// missing tracepoint…).
    #[error(transparent)]
    Load(#[from] BpfError),
    /// The kernel's BTF is assumed missing (`[observe] assume_missing =
    /// ["btf"]`): the programs' CO-RE reads cannot be relocated.
    #[error("no kernel BTF (assumed missing by [observe] assume_missing)")]
    NoBtf,
}

/// The hint server on its own thread, asleep until a datagram comes or it
/// is stopped ([`HintServer::recv_until`]).
pub struct HintSource {
    stats: Arc<Mutex<HintStats>>,
    stop: Arc<AtomicBool>,
    stopper: Stopper,
    thread: Option<JoinHandle<()>>,
}

/// Receive calls a stopping hint server makes at most to handle what is
/// still queued on its socket.
pub const DRAIN_ROUNDS: usize = 64;

impl HintSource {
    /// Serves `config`, sending every hint (with its file) to `sender`.
    pub fn start(config: HintConfig, sender: EventSender) -> Result<Self, SourcesError> {
        let path = config.path.clone();
        let server = HintServer::bind(config).map_err(|source| SourcesError::HintSocket { path, source })?;
        Self::serve(server, sender)
    }

    /// A server for one `predictio run` whose private socket at `path` was
    /// bound before the command started, and handed over (`socket`).
    pub fn adopt_private(path: &Path, socket: UnixDatagram, sender: EventSender) -> Result<Self, SourcesError> {
        let server = HintServer::adopt(HintConfig::at(path).unlimited(), socket)
            .map_err(|source| SourcesError::HintSocket { path: path.to_owned(), source })?;
        Self::serve(server, sender)
    }

    fn serve(mut server: HintServer, sender: EventSender) -> Result<Self, SourcesError> {
        let stats = Arc::new(Mutex::new(server.stats()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread_error = |source| SourcesError::Thread { name: "predictio-hints", source };
        let (stopper, stopped) = Stopper::new().map_err(thread_error)?;
        let (shared, flag) = (Arc::clone(&stats), Arc::clone(&stop));
        let thread = std::thread::Builder::new().name("predictio-hints".into()).spawn(move || {
            let mut forward = |hint: predictio::hints::Hint| {
                // The hint's queue charge travels with it until dispatched.
                sender.send_hint(hint);
            };
            while !flag.load(Ordering::Relaxed) {
                if let Err(err) = server.recv_until(stopped.as_fd(), &mut forward) {
                    tracing::warn!(%err, "hint socket");
                    std::thread::sleep(Duration::from_millis(100));
                }
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = server.stats();
            }
            // Stopping: what clients sent before the stop is still handled
            // (a command's last hints arrive just before it exits), within
            // a bound so that a flooding client cannot hold the stop.
            for _ in 0..DRAIN_ROUNDS {
                let before = server.stats().datagrams;
                if server.recv(Some(Duration::ZERO), &mut forward).is_err() || server.stats().datagrams == before {
                    break;
                }
            }
            *shared.lock().unwrap_or_else(|e| e.into_inner()) = server.stats();
        });
        let thread = thread.map_err(thread_error)?;
        Ok(Self { stats, stop, stopper, thread: Some(thread) })
    }

    /// A server for one `predictio run`: a private socket, no rate limits
    /// (only the command's own tree knows where it is).
    pub fn start_private(path: &Path, sender: EventSender) -> Result<Self, SourcesError> {
        Self::start(HintConfig::at(path).unlimited(), sender)
    }

    /// Stops the server once the datagrams already queued on its socket are
    /// handled (at most [`DRAIN_ROUNDS`] receive calls) and their hints
    /// sent on; returns its final counters as JSON.
    pub fn finish(mut self) -> serde_json::Value {
        self.stop_and_join();
        self.stats_json()
    }

    fn stop_and_join(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stopper.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// The server's counters as JSON.
    pub fn stats_json(&self) -> serde_json::Value {
        hint_stats_json(&self.stats.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for HintSource {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Hint-server counters as JSON.
pub fn hint_stats_json(s: &HintStats) -> serde_json::Value {
    serde_json::json!({
        "datagrams": s.datagrams, "frames": s.frames, "accepted": s.accepted, "hints": s.hints,
        "rejected": s.rejected_total(), "rate_limited": s.rate_limited, "volume_limited": s.volume_limited,
        "descriptors_closed": s.descriptors_closed, "clients": s.clients, "handles": s.handles,
        "queue_limited": s.queue_limited, "users": s.users, "queued_bytes": s.queued_bytes,
    })
}

/// Observer counters as JSON.
pub fn observer_stats_json(s: &ObserverStats) -> serde_json::Value {
    serde_json::json!({
        "records": s.records, "events": s.events, "lost": s.lost, "malformed": s.malformed,
        "reads": s.reads, "faults": s.faults, "map_pages": s.map_pages, "misses": s.misses,
        "evictions": s.evictions, "execs": s.execs, "forks": s.forks, "exits": s.exits,
    })
}

/// Whether `event` is predictio's own activity (process `me`): our prefetch
/// reads and opens are not the workload, so sources drop them.
pub fn is_own(event: &predictio::Event, me: u32) -> bool {
    matches!(event,
        predictio::Event::PageAccess { pid, .. }
        | predictio::Event::PageMiss { pid, .. }
        | predictio::Event::FileOpen { pid, .. } if *pid == me)
}

/// Loads the eBPF observer, or says why not (and the caller runs without
/// observation: hints still work). `follow_all_lookups`: whose path lookups
/// are reported under follow-all (explicitly followed processes' always are).
pub fn observer_or_note(follow_all: bool, follow_all_lookups: FollowAllLookups) -> (Option<Observer>, Option<String>) {
    match load_observer(follow_all, follow_all_lookups) {
        Ok(observer) => (Some(observer), None),
        Err(why) => {
            let note = format!("eBPF observation unavailable ({why}); running on hints only");
            tracing::warn!("{note}");
            (None, Some(note))
        }
    }
}

/// Loads the eBPF observer: all processes (`follow_all`) or those followed.
pub fn load_observer(follow_all: bool, follow_all_lookups: FollowAllLookups) -> Result<Observer, EbpfUnavailable> {
    load_observer_without(follow_all, follow_all_lookups, &[])
}

/// [`load_observer`], as if this kernel lacked the features of
/// `assume_missing` (`[observe] assume_missing`).
pub fn load_observer_without(
    follow_all: bool,
    follow_all_lookups: FollowAllLookups,
    assume_missing: &[AssumedMissing],
) -> Result<Observer, EbpfUnavailable> {
    predictio_bpf::available().map_err(EbpfUnavailable::NotBuilt)?;
    if assume_missing.contains(&AssumedMissing::Btf) {
        return Err(EbpfUnavailable::NoBtf);
    }
    // Under follow-all nobody is followed explicitly: without lookups
    // wanted, the path-call programs would cost every system call for
    // nothing.
    let path_calls = !follow_all || follow_all_lookups != FollowAllLookups::None;
    let config = ObserverConfig {
        follow_all,
        follow_all_lookups,
        path_calls,
        evictions_any_process: follow_all,
        // The daemon's own prefetches (`is_own` drops what gets through).
        ignore_own_pages: follow_all,
        assume_missing: assume_missing.iter().flat_map(|f| f.hooks()).collect(),
        ..ObserverConfig::default()
    };
    Ok(Observer::load(config)?)
}

/// How often, at most, the observer thread publishes its counters (`stat`,
/// metrics) while events flow; it publishes again when they stop, and
/// never while nothing happens.
const STATS_EVERY: Duration = Duration::from_millis(200);

/// The observer thread's poll timeout while events flow. It starts at the
/// configured `poll_ms`, the bound on how long an event waits; while few
/// arrive it doubles, up to [`QUIET_POLL`], so that a trickle (evictions by
/// the kernel's reclaim, a few faults) does not wake the daemon every
/// 2 ms. A poll that delivers nothing ends the timed polling: the thread
/// then sleeps without a timeout until the source wakes it (an exec record,
/// a backlog over the eBPF ring's wake-up threshold, any fanotify event) or
/// it is stopped ([`Kernel::rest`]), and starts again at the short timeout
/// ([`PollPace::rested`]).
#[derive(Debug)]
struct PollPace {
    base: Duration,
    current: Duration,
}

/// The longest the observer waits while few events arrive.
const QUIET_POLL: Duration = Duration::from_millis(16);
/// A poll delivering fewer events than this lengthens the next wait,
const FEW_EVENTS: usize = 16;
/// and one delivering at least this many goes back to the short one.
const BUSY_EVENTS: usize = 64;

impl PollPace {
    fn new(base: Duration) -> Self {
        Self { base, current: base }
    }

    fn timeout(&self) -> Duration {
        self.current
    }

    /// After a sleep ended by the source: a burst (a launch) is starting.
    fn rested(&mut self) {
        self.current = self.base;
    }

    /// After a poll that delivered `events`; `prompt`: the dispatcher wants
    /// events without delay now ([`EventSender::prompt`]), however few.
    fn delivered(&mut self, events: usize, prompt: bool) {
        if prompt || events >= BUSY_EVENTS {
            self.current = self.base;
        } else if events < FEW_EVENTS {
            self.current = (self.current * 2).min(QUIET_POLL.max(self.base));
        }
    }
}

/// A running kernel event source.
#[derive(Debug)]
enum Kernel {
    Ebpf(Box<Observer>),
    Perf(Box<PerfObserver>),
    Fanotify(FanotifyObserver),
}

impl Kernel {
    fn name(&self) -> &'static str {
        match self {
            Kernel::Ebpf(o) => o.source_name(),
            Kernel::Perf(o) => o.source_name(),
            Kernel::Fanotify(o) => o.source_name(),
        }
    }

    fn poll(&mut self, timeout: Duration, on_event: &mut impl FnMut(predictio::Event)) -> Result<usize, String> {
        match self {
            Kernel::Ebpf(o) => o.poll(timeout, on_event).map_err(|e| e.to_string()),
            Kernel::Perf(o) => o.poll(timeout, on_event).map_err(|e| e.to_string()),
            Kernel::Fanotify(o) => o.poll(timeout, on_event).map_err(|e| e.to_string()),
        }
    }

    /// After a poll that delivered nothing: sleeps until the source has
    /// something to say or `stop` is readable, without a timeout. The eBPF
    /// observer is told first ([`Observer::set_sleeping`]), so that the
    /// first record into the emptied ring ends the sleep whatever its size
    /// (a record already there makes the poll return at once); while
    /// records flow they go without wake-ups. The perf observer's per-CPU
    /// rings wake it at their own watermark.
    fn rest(&mut self, stop: BorrowedFd<'_>) -> Result<(), String> {
        let waited = match self {
            Kernel::Ebpf(o) => {
                o.set_sleeping(true).map_err(|e| e.to_string())?;
                let waited = predictio::os::poll_readable_any([AsFd::as_fd(&**o), stop], None).map(drop);
                o.set_sleeping(false).map_err(|e| e.to_string())?;
                waited
            }
            Kernel::Fanotify(o) => predictio::os::poll_readable_any([AsFd::as_fd(&*o), stop], None).map(drop),
            Kernel::Perf(o) => {
                let fds: Vec<BorrowedFd<'_>> = std::iter::once(stop).chain(o.ring_fds()).collect();
                predictio::os::poll_readable_list(&fds, None).map(drop)
            }
        };
        waited.map_err(|e| e.to_string())
    }

    fn stats_json(&self) -> serde_json::Value {
        match self {
            Kernel::Ebpf(o) => observer_stats_json(&o.stats()),
            Kernel::Perf(o) => observer_stats_json(&o.stats().into()),
            Kernel::Fanotify(o) => {
                let s = o.stats();
                serde_json::json!({
                    "events": s.events, "opens": s.opens, "execs": s.execs,
                    "overflows": s.overflows, "skipped": s.skipped,
                })
            }
        }
    }
}

/// The perf observer as the daemon runs it: every process, without the
/// features `[observe] assume_missing` names.
fn start_perf(config: &Config) -> Result<Kernel, PerfError> {
    let assume_missing = config.observe.assume_missing.iter().flat_map(|f| f.hooks()).collect();
    let config = PerfConfig { follow_all: true, pid: None, assume_missing, ..PerfConfig::default() };
    PerfObserver::open(config).map(|o| Kernel::Perf(Box::new(o)))
}

fn start_fanotify(config: &Config) -> Result<Kernel, FanotifyError> {
    let mounts = config.observe.fanotify_mounts.clone();
    FanotifyObserver::new(&FanotifyConfig { mounts, whole_filesystems: true }).map(Kernel::Fanotify)
}

/// The eBPF observer as the daemon runs it: every process, lookups only
/// inside launch windows when launches learn them, as many as a window
/// keeps (the window's cap bounds how long a process's path calls are
/// reported).
fn start_ebpf(config: &Config) -> Result<Kernel, EbpfUnavailable> {
    let lookups = if config.launch.learn && config.launch.lookups {
        FollowAllLookups::Launches {
            window: Duration::from_millis(config.launch.cap_ms),
            per_launch: u32::try_from(predictio::launch::profile::MAX_LOOKUPS).unwrap_or(u32::MAX),
        }
    } else {
        FollowAllLookups::None
    };
    load_observer_without(true, lookups, &config.observe.assume_missing).map(|o| Kernel::Ebpf(Box::new(o)))
}

/// What an eBPF or perf observer runs without (its optional hooks this
/// kernel lacks, or the configuration assumes missing), for the daemon's
/// status.
fn missing_hooks_note(kernel: &Kernel) -> Option<String> {
    let (what, missing) = match kernel {
        Kernel::Ebpf(observer) => ("eBPF observation", observer.missing_hooks()),
        Kernel::Perf(observer) => ("perf observation", observer.missing_hooks()),
        Kernel::Fanotify(_) => return None,
    };
    if missing.is_empty() {
        return None;
    }
    let hooks: Vec<String> = missing.iter().map(|m| format!("{} ({})", m.hook.label(), m.reason)).collect();
    Some(format!("{what} without {}: no page hits; launches learn from page-cache misses", hooks.join(", ")))
}

/// `first` and `then`, as one note.
fn join_notes(first: Option<String>, then: Option<String>) -> Option<String> {
    match (first, then) {
        (Some(first), Some(then)) => Some(format!("{first}; {then}")),
        (first, then) => first.or(then),
    }
}

/// Where the self-check's probe file may go, in order: the daemon's state
/// directory (the launch store), then the system's disk-backed temporary
/// and state directories. The first on a disk file system where the daemon
/// can create a file is used; the file has no name (or loses it at once).
fn probe_dirs(config: &Config) -> Vec<PathBuf> {
    let mut dirs = vec![config.launch.store.clone()];
    dirs.extend(["/var/tmp", "/var/lib", "/tmp"].map(PathBuf::from));
    dirs
}

/// Runs the start-up self-check on a just-opened eBPF or perf observer
/// (see [`predictio_bpf::self_check`]); events that are not the check's go
/// to `on_other`. A check that cannot run here (no disk directory for the
/// probe file) passes with a log line: it says nothing against the
/// observer.
fn self_check(
    kernel: &mut Kernel,
    dirs: &[PathBuf],
    spec: ProbeSpec,
    on_other: &mut dyn FnMut(predictio::Event),
) -> Result<(), Refusal> {
    let name = kernel.name();
    let mut poll = |timeout, on: &mut dyn FnMut(predictio::Event)| kernel.poll(timeout, &mut |e| on(e));
    match self_check::run(dirs, spec, &mut poll, on_other) {
        Outcome::Passed { took } => {
            tracing::debug!(source = name, ?took, "observation self-check passed");
            Ok(())
        }
        Outcome::Refused(refusal) => {
            tracing::warn!(source = name, %refusal, "observation self-check failed");
            Err(refusal)
        }
        Outcome::Unchecked(why) => {
            tracing::info!(source = name, %why, "observation self-check skipped");
            Ok(())
        }
    }
}

/// The kernel source `config` asks for, opened and self-checked, and why
/// observation runs on a fallback or not at all. `auto`: eBPF →
/// perf_event_open on the same tracepoints → fanotify (opens and execs
/// only) → hints only; a named source opens and passes or is an error.
/// Events the observers deliver during the checks (not the checks' own)
/// go to `on_other`.
fn open_kernel(
    config: &Config,
    spec: ProbeSpec,
    on_other: &mut dyn FnMut(predictio::Event),
) -> Result<(Option<Kernel>, Option<String>), SourcesError> {
    let dirs = probe_dirs(config);
    let mut checked = |mut kernel: Kernel| match self_check(&mut kernel, &dirs, spec, on_other) {
        Ok(()) => Ok(kernel),
        Err(refusal) => Err((kernel.name(), refusal)),
    };
    let refused = |(name, refusal)| SourcesError::SelfCheck { name, refusal };
    match config.observe.source {
        SourceChoice::None => {
            Ok((None, Some("observation disabled by configuration ([observe] source = \"none\")".into())))
        }
        SourceChoice::Ebpf => {
            let kernel = checked(start_ebpf(config).map_err(SourcesError::Ebpf)?).map_err(refused)?;
            let note = missing_hooks_note(&kernel);
            Ok((Some(kernel), note))
        }
        SourceChoice::Perf => {
            let kernel = checked(start_perf(config).map_err(SourcesError::Perf)?).map_err(refused)?;
            let note = missing_hooks_note(&kernel);
            Ok((Some(kernel), note))
        }
        SourceChoice::Fanotify => start_fanotify(config).map(|k| (Some(k), None)).map_err(SourcesError::Fanotify),
        SourceChoice::Auto => {
            let ebpf = match start_ebpf(config).map(&mut checked) {
                Ok(Ok(kernel)) => {
                    let note = missing_hooks_note(&kernel);
                    return Ok((Some(kernel), note));
                }
                Ok(Err((_, refusal))) => format!("eBPF observation refused by the start-up self-check ({refusal})"),
                Err(why) => format!("eBPF observation unavailable ({why})"),
            };
            let perf = match start_perf(config).map(&mut checked) {
                Ok(Ok(kernel)) => {
                    let note = format!("{ebpf}; falling back to perf_event_open tracepoints");
                    let note = join_notes(Some(note), missing_hooks_note(&kernel));
                    return Ok((Some(kernel), note));
                }
                Ok(Err((_, refusal))) => format!("perf refused by the start-up self-check ({refusal})"),
                Err(why) => format!("perf unavailable ({why})"),
            };
            Ok(match start_fanotify(config) {
                Ok(kernel) => {
                    (Some(kernel), Some(format!("{ebpf}; {perf}; falling back to fanotify (opens and execs only)")))
                }
                Err(fanotify) => (None, Some(format!("{ebpf}; {perf}; fanotify: {fanotify}; running on hints only"))),
            })
        }
    }
}

/// The observation source `config` would run on here — `"ebpf"`, `"perf"`,
/// `"fanotify"` or `"none"` — and why it is a fallback or none, found as
/// [`Sources::start`] finds it: the source is opened (eBPF programs loaded
/// and attached, tracepoints or fanotify opened) and closed again at once.
/// Nothing is bound and no thread started. A source the configuration
/// names that cannot open is the error `start` would fail with.
pub fn probe_observation(config: &Config) -> Result<(&'static str, Option<String>), SourcesError> {
    let (kernel, note) = open_kernel(config, ProbeSpec::default(), &mut |_| {})?;
    Ok((kernel.as_ref().map_or("none", Kernel::name), note))
}

/// The daemon's sources.
pub struct Sources {
    hints: Option<HintSource>,
    observer_stats: Arc<Mutex<serde_json::Value>>,
    observer_thread: Option<JoinHandle<()>>,
    quieter: Option<predictio_bpf::Quieter>,
    source: &'static str,
    note: Option<String>,
    stop: Arc<AtomicBool>,
    stopper: Stopper,
}

impl Sources {
    /// The handle that quiets a warm launch's hits, when observation runs
    /// on eBPF.
    pub fn quieter(&self) -> Option<predictio_bpf::Quieter> {
        self.quieter.clone()
    }

    /// Starts what `config` asks for. Observation that cannot start is a
    /// warning (the daemon says which source it runs on), unless the
    /// configuration names the source.
    pub fn start(config: &Config, sender: EventSender, stop: Arc<AtomicBool>) -> Result<Self, SourcesError> {
        let hints = if config.hints.enabled {
            Some(HintSource::start(config.hints.hint_config(), sender.clone())?)
        } else {
            None
        };
        let observer_stats = Arc::new(Mutex::new(serde_json::Value::Null));
        let me = std::process::id();
        let (kernel, note) = {
            // What the observer delivers while it is checked, less the
            // check's own events, goes where the thread will send the rest.
            let sender = sender.clone();
            open_kernel(config, ProbeSpec::default(), &mut |event| {
                if !is_own(&event, me) {
                    sender.send(event, None);
                }
            })?
        };
        if let Some(note) = &note {
            tracing::warn!("{note}");
        }
        let (mut source, mut observer_thread) = ("none", None);
        let quieter = match &kernel {
            Some(Kernel::Ebpf(observer)) => Some(observer.quieter()),
            _ => None,
        };
        let thread_error = |source| SourcesError::Thread { name: "predictio-observe", source };
        let (stopper, stopped) = Stopper::new().map_err(thread_error)?;
        if let Some(mut kernel) = kernel {
            source = kernel.name();
            let mut pace = PollPace::new(Duration::from_millis(config.observe.poll_ms.max(1)));
            let (shared, flag) = (Arc::clone(&observer_stats), Arc::clone(&stop));
            let thread = std::thread::Builder::new().name("predictio-observe".into()).spawn(move || {
                // The counters for `stat` and metrics: at most every
                // STATS_EVERY while events flow (reading the kernel's
                // per-CPU loss counters after every poll, every 2 ms, cost
                // ~3 % of a core), once more when they stop, and not at
                // all while nothing happens.
                let publish = |kernel: &Kernel| {
                    *shared.lock().unwrap_or_else(|e| e.into_inner()) = kernel.stats_json();
                };
                let mut published = Instant::now();
                let mut unpublished = false;
                publish(&kernel);
                while !flag.load(Ordering::Relaxed) {
                    // One drain of the ring, one wake-up of the dispatcher.
                    let mut batch = sender.batch();
                    let mut forward = |event: predictio::Event| {
                        if !is_own(&event, me) {
                            batch.send(event, None);
                        }
                    };
                    let polled = kernel.poll(pace.timeout(), &mut forward);
                    drop(batch);
                    let polled = match polled {
                        Ok(0) => {
                            if unpublished {
                                publish(&kernel);
                                (published, unpublished) = (Instant::now(), false);
                            }
                            pace.rested();
                            kernel.rest(stopped.as_fd()).map(|()| 0)
                        }
                        Ok(delivered) => {
                            pace.delivered(delivered, sender.prompt());
                            Ok(delivered)
                        }
                        Err(err) => Err(err),
                    };
                    match polled {
                        Ok(0) => {}
                        Ok(_) => unpublished = true,
                        Err(err) => {
                            tracing::warn!(%err, "observation");
                            std::thread::sleep(Duration::from_millis(100));
                        }
                    }
                    if unpublished && published.elapsed() >= STATS_EVERY {
                        publish(&kernel);
                        (published, unpublished) = (Instant::now(), false);
                    }
                }
                publish(&kernel);
            });
            observer_thread = Some(thread.map_err(thread_error)?);
        }
        Ok(Self { hints, observer_stats, observer_thread, quieter, source, note, stop, stopper })
    }

    /// "ebpf", "perf", "fanotify" or "none".
    pub fn source_name(&self) -> &'static str {
        self.source
    }

    /// Why observation runs on a fallback or not at all.
    pub fn source_note(&self) -> Option<String> {
        self.note.clone()
    }

    /// Hint-server counters as JSON (null when hints are off).
    pub fn hint_stats(&self) -> serde_json::Value {
        self.hints.as_ref().map_or(serde_json::Value::Null, HintSource::stats_json)
    }

    /// Observer counters as JSON (null without observation).
    pub fn observer_stats(&self) -> serde_json::Value {
        self.observer_stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops every source thread: raises the stop flag and wakes each
    /// thread from its wait (none waits on a timer).
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stopper.stop();
        if let Some(t) = self.observer_thread.take() {
            let _ = t.join();
        }
        self.hints = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use predictio::testing::{is_root, skip};

    /// The chooser the daemon and `--check` share: `auto` runs eBPF where
    /// it can (root, built in) and otherwise says why it fell back; `none`
    /// says it was configured; a named source that cannot open is an error
    /// naming the key.
    #[test]
    fn auto_takes_ebpf_where_it_can_and_says_why_not_otherwise() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.observe.fanotify_mounts = vec![dir.path().to_owned()];
        let (source, note) = probe_observation(&config).expect("auto falls back, never fails");
        let ebpf_here = is_root() && predictio_bpf::available().is_ok();
        let fallback = if ebpf_here {
            assert_eq!((source, note.as_deref()), ("ebpf", None));
            None
        } else {
            let note = note.expect("a fallback says why");
            assert!(note.contains("eBPF observation unavailable"), "{note}");
            assert_ne!(source, "ebpf");
            Some(note)
        };
        config.observe.source = SourceChoice::None;
        let (source, note) = probe_observation(&config).expect("none always works");
        assert_eq!(source, "none");
        assert!(note.is_some_and(|n| n.contains("[observe] source = \"none\"")));
        config.observe.source = SourceChoice::Ebpf;
        match probe_observation(&config) {
            Ok((source, _)) => assert!(ebpf_here && source == "ebpf", "{source}"),
            Err(err) => {
                assert!(!ebpf_here, "{err}");
                assert!(err.to_string().starts_with("[observe] source = \"ebpf\""), "{err}");
            }
        }
        if let Some(note) = fallback {
            skip(&format!("the eBPF case: eBPF cannot run here (root: {}): {note}", is_root()));
        }
    }

    /// `[observe] assume_missing = ["filemap_access"]`: eBPF still runs,
    /// and the note (the daemon's status) names the hooks it runs without.
    #[test]
    fn ebpf_without_the_page_access_hooks_runs_and_names_them() {
        if !(is_root() && predictio_bpf::available().is_ok()) {
            skip(&format!("eBPF cannot run here (root: {})", is_root()));
            return;
        }
        let mut config = Config::default();
        config.observe.source = SourceChoice::Ebpf;
        config.observe.assume_missing = vec![AssumedMissing::FilemapAccess];
        let (source, note) = probe_observation(&config).expect("eBPF loads without the page-access hooks");
        assert_eq!(source, "ebpf");
        let note = note.expect("a note names the missing hooks");
        for hook in ["filemap:mm_filemap_get_pages", "filemap:mm_filemap_fault", "filemap:mm_filemap_map_pages"] {
            assert!(note.contains(hook), "{note}");
        }
        assert!(!note.contains("add_to_page_cache"), "{note}");
    }

    /// The same for the perf fallback: it opens without the page-access
    /// tracepoints, and the note names them.
    #[test]
    fn perf_without_the_page_access_hooks_runs_and_names_them() {
        if !is_root() {
            skip("perf tracepoint events need root here");
            return;
        }
        let mut config = Config::default();
        config.observe.source = SourceChoice::Perf;
        config.observe.assume_missing = vec![AssumedMissing::FilemapAccess];
        let (source, note) = probe_observation(&config).expect("perf opens without the page-access tracepoints");
        assert_eq!(source, "perf");
        let note = note.expect("a note names the missing tracepoints");
        assert!(note.starts_with("perf observation without"), "{note}");
        for hook in ["filemap:mm_filemap_get_pages", "filemap:mm_filemap_fault", "filemap:mm_filemap_map_pages"] {
            assert!(note.contains(hook), "{note}");
        }
        assert!(!note.contains("add_to_page_cache"), "{note}");
        config.observe.assume_missing.clear();
        let (source, note) = probe_observation(&config).expect("perf opens");
        assert_eq!((source, note), ("perf", None));
    }

    /// Without BTF (assumed missing), `auto` falls back from eBPF to perf on
    /// the same tracepoints, and says why.
    #[test]
    fn without_btf_auto_falls_back_to_perf() {
        if !is_root() {
            skip("perf tracepoint events need root here");
            return;
        }
        let mut config = Config::default();
        config.observe.assume_missing = vec![AssumedMissing::Btf, AssumedMissing::FilemapAccess];
        let (source, note) = probe_observation(&config).expect("auto opens a source");
        assert_eq!(source, "perf");
        let note = note.expect("a note says why");
        assert!(note.contains("no kernel BTF"), "{note}");
        assert!(note.contains("perf_event_open"), "{note}");
    }

    /// The refusal path of the start-up self-check, on the real kernel: a
    /// probe expecting a page the read did not touch fails every observer,
    /// so `auto` refuses eBPF, then perf, falls back to fanotify and says
    /// why; a named source is an error. The real probe passes (the `auto`
    /// test above: eBPF, no note).
    #[test]
    fn an_observer_failing_the_self_check_is_refused_and_the_next_one_tried() {
        if !(is_root() && predictio_bpf::available().is_ok()) {
            skip(&format!("eBPF cannot run here (root: {})", is_root()));
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = Config::default();
        config.observe.fanotify_mounts = vec![dir.path().to_owned()];
        let wrong = ProbeSpec { read_page: 37, expect_page: 38 };
        let (kernel, note) = open_kernel(&config, wrong, &mut |_| {}).expect("auto falls back");
        assert_eq!(kernel.as_ref().map(Kernel::name), Some("fanotify"));
        let note = note.expect("the note says why");
        for refused in
            ["eBPF observation refused by the start-up self-check", "perf refused by the start-up self-check"]
        {
            assert!(note.contains(refused), "{note}");
        }
        assert!(
            note.contains("page 38") && note.ends_with("falling back to fanotify (opens and execs only)"),
            "{note}"
        );
        config.observe.source = SourceChoice::Ebpf;
        let err = open_kernel(&config, wrong, &mut |_| {}).expect_err("a named source that fails is an error");
        assert!(matches!(err, SourcesError::SelfCheck { name: "ebpf", .. }), "{err}");
        assert!(err.to_string().starts_with("[observe] source = \"ebpf\": refused by the start-up self-check"));
    }

    #[test]
    fn the_poll_waits_longer_while_few_events_arrive_and_short_once_they_flow() {
        let ms = Duration::from_millis;
        let mut pace = PollPace::new(ms(2));
        assert_eq!(pace.timeout(), ms(2));
        for want in [4, 8, 16, 16] {
            pace.delivered(0, false);
            assert_eq!(pace.timeout(), ms(want));
        }
        pace.delivered(20, false);
        assert_eq!(pace.timeout(), ms(16), "a middling poll keeps the wait");
        pace.delivered(BUSY_EVENTS, false);
        assert_eq!(pace.timeout(), ms(2), "a burst is back at the configured bound");
        pace.delivered(3, false);
        assert_eq!(pace.timeout(), ms(4));
        // A database scan's few reads at a time, each waited for: no wait
        // grows while the dispatcher asks for them promptly.
        pace.delivered(3, true);
        assert_eq!(pace.timeout(), ms(2));
        pace.delivered(1, true);
        assert_eq!(pace.timeout(), ms(2));
        // A configured bound above the quiet one is never shortened or passed.
        let mut slow = PollPace::new(ms(50));
        slow.delivered(0, false);
        assert_eq!(slow.timeout(), ms(50));
    }
}
