//! `predictio run -- CMD`: the runtime in-process for one command's process
//! tree — no daemon needed. Kernel observation follows CMD and everything it
//! forks; a private hint socket is handed to CMD in `PREDICTIO_HINT_SOCK`;
//! the policies run; at the end the counters are printed.
//!
//! Beside a running daemon, `run -q` hands CMD to it instead
//! ([`beside_daemon`]): the daemon observes every program and replays its
//! launch at exec anyway, so `run` only puts the daemon's hint socket in
//! CMD's environment and becomes CMD, setting nothing up of its own.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use predictio::Executor;
use predictio::pipeline::Pipeline;
use predictio_bpf::FollowAllLookups;

use predictio_daemon::sources::{HintSource, is_own, observer_or_note};
use predictio_daemon::status::Status;

/// Events `run`'s pipeline queues before it drops and counts.
const RUN_QUEUE_EVENTS: usize = 1 << 14;

/// Arguments of `run`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Policies to run (repeatable): hints, readplan, btree, tensor, scan,
    /// columns, stream, learned. Default: hints, readplan, btree, tensor,
    /// scan (columns, stream and learned, which speculate from observed
    /// reads, are opt-in).
    #[arg(long = "policy", value_name = "POLICY")]
    policies: Vec<String>,
    /// Print the counters as JSON (to stderr) at the end.
    #[arg(long)]
    json: bool,
    /// Print nothing of our own. Beside a running daemon that replays
    /// launches (the control socket of `--config` answers), and without
    /// --json, --policy, --store, --no-replay or --observe-from-start, CMD
    /// is handed to the daemon: run execs it at once with the daemon's hint
    /// socket, and the daemon observes and replays it as it does any
    /// program (`predictio stat` shows its counters).
    #[arg(short, long)]
    quiet: bool,
    /// Keep the runtime in this process even beside a running daemon.
    #[arg(long)]
    no_daemon: bool,
    /// The launch profile store: when it holds a profile of the command
    /// (see `predictio record`), its pages are replayed at exec.
    #[arg(long, default_value = predictio_daemon::launch::store::DEFAULT_DIR, value_name = "DIR")]
    store: std::path::PathBuf,
    /// Do not replay a launch profile.
    #[arg(long)]
    no_replay: bool,
    /// The daemon's configuration file, for how a replay is walked and
    /// paced on this machine's storage (`[launch]`) and the executor's
    /// settings (`[executor]`). Default: /etc/predictio/predictio.toml if it
    /// exists, else built-in defaults.
    #[arg(long, value_name = "FILE")]
    config: Option<std::path::PathBuf>,
    /// Start the command only once eBPF observation is loaded (~100 ms), so
    /// that its first reads are observed too. By default the command starts
    /// at once and observation follows it, and what it has forked, when
    /// ready: a command that ends within that time is not observed.
    #[arg(long)]
    observe_from_start: bool,
    /// Follow the command the front (`predictio`) has started already, as
    /// process PID, instead of starting it (with --hint-fd, --hint-dir and
    /// --started-ns). Internal: the front starts a command without a
    /// profile at once and hands it over if it runs for long.
    #[arg(long, hide = true, value_name = "PID", requires_all = ["hint_fd", "hint_dir", "started_ns"])]
    adopt: Option<u32>,
    /// With --adopt: the private hint socket, bound already, inherited.
    #[arg(long, hide = true, value_name = "FD", requires = "adopt")]
    hint_fd: Option<i32>,
    /// With --adopt: the private directory the hint socket is in.
    #[arg(long, hide = true, value_name = "DIR", requires = "adopt")]
    hint_dir: Option<std::path::PathBuf>,
    /// With --adopt: when the command was started (CLOCK_MONOTONIC, ns).
    #[arg(long, hide = true, value_name = "NS", requires = "adopt")]
    started_ns: Option<u64>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Runs `run`; exits with the command's exit code.
pub fn run(args: Args) -> Result<()> {
    // Handed over by the front: the signals it blocked across the exec
    // are caught from here on.
    let signals = Forwarded::install()?;
    crate::handoff::block_run_signals(false);
    let adopted = match (args.adopt, args.hint_fd, &args.hint_dir) {
        (Some(pid), Some(fd), Some(dir)) => Some(Adopted::take(pid, fd, dir, args.started_ns)?),
        _ => None,
    };
    let settings = predictio_daemon::config::Config::load(args.config.as_deref())?;
    if adopted.is_none()
        && let Some(hint_socket) = beside_daemon(&args, &settings)
    {
        let err = crate::handoff::exec_beside_daemon(&args.command, hint_socket.as_deref());
        return Err(err).with_context(|| format!("starting {}", args.command[0]));
    }
    let names: Vec<String> = if args.policies.is_empty() {
        predictio::policies::DEFAULT.iter().map(|s| s.to_string()).collect()
    } else {
        args.policies.clone()
    };
    let mut policies = Vec::new();
    for name in &names {
        policies.push(
            predictio::policies::by_name(name).with_context(|| {
                format!("unknown policy {name:?}; known: {}", predictio::policies::NAMES.join(", "))
            })?,
        );
    }
    // A command handed over has no profile: the front starts only those.
    let replay = if args.no_replay || adopted.is_some() {
        None
    } else {
        let (walk, pacing) = (settings.launch.walk_limits(), settings.launch.replay_pacing());
        predictio_daemon::launch::replay::prepare_replay(&args.store, &args.command, &walk, &pacing)
    };
    // The policy hands its replay to a replayer thread, which opens the
    // profile's files when the exec comes (started with the executor).
    let mut replay_jobs = None;
    if let Some((key, book, replay_note)) = &replay {
        let (jobs, job_rx) = predictio::launch::replay_channel();
        replay_jobs = Some(job_rx);
        policies.push(Box::new(predictio::launch::LaunchPolicy::new(book.clone(), jobs)));
        if !args.quiet && !args.json {
            eprintln!("predictio run: {replay_note} ({}, shape \"{}\")", key.exe, key.shape);
        }
    }
    // The executor as the daemon's configuration sets it up, counting hits;
    // its fadvise I/O paced only under a replay (`[executor]
    // max_unsettled_kib`, see `predictio::launch::pacing`).
    let mut config = settings.executor_config();
    config.limits.track_hits = true;
    if replay.is_none() {
        config.limits.max_unsettled_pages = 0;
    }
    let executor = Arc::new(Executor::new(config).context("starting the executor")?);
    let _replayer = match replay_jobs {
        Some(jobs) => {
            let sink: Arc<dyn predictio::executor::RequestSink> = executor.clone();
            Some(predictio_daemon::launch::replay::start_replayer(sink, jobs).context("starting the replayer")?)
        }
        None => None,
    };
    let resolve = Some(predictio::resolve::ResolverConfig::default());
    // One process tree's events: a quarter of the daemon's queue, which
    // is allocated and touched whole at start (2 MiB here).
    let pipeline = Pipeline::start_with(Arc::clone(&executor), policies, RUN_QUEUE_EVENTS, resolve)?;
    let sender = pipeline.sender();

    let (mut observer, mut note) =
        if args.observe_from_start { observer_or_note(false, FollowAllLookups::None) } else { (None, None) };
    let me = std::process::id();
    let (socket_dir, hints, start, mut child) = match adopted {
        Some(adopted) => {
            let hints = HintSource::adopt_private(&adopted.dir.socket(), adopted.socket, sender.clone())?;
            let start = Instant::now() - adopted.running_for;
            (adopted.dir, hints, start, Running::Adopted { pid: adopted.pid, status: None })
        }
        None => {
            let dir = crate::handoff::HintDir::new().context("temporary directory")?;
            let socket = dir.socket();
            let hints = HintSource::start_private(&socket, sender.clone())?;
            let start = Instant::now();
            let mut cmd = Command::new(&args.command[0]);
            cmd.args(&args.command[1..]).env("PREDICTIO_HINT_SOCK", &socket);
            let spawned = match observer.as_mut() {
                Some(obs) => {
                    // Follow ourselves across the fork so the child is followed
                    // from its first instruction; our own events are dropped
                    // below.
                    obs.follow(me).context("following the command")?;
                    let spawned = cmd.spawn();
                    let _ = obs.unfollow(me);
                    spawned
                }
                None => cmd.spawn(),
            };
            let child = spawned.with_context(|| format!("starting {}", args.command[0]))?;
            (dir, hints, start, Running::Spawned(child))
        }
    };
    if let Some((key, _, _)) = &replay {
        // `spawn` returns once the command has exec'd: replay now, as the
        // daemon does on the exec event. Not before: the exec's own reads
        // (the directories on its path, its inode, its ELF headers) would
        // queue behind the replay's tens of MiB (measured: 40-150 ms more
        // per launch on the bench's programs, see docs/notes/2026-12-06-launch-and-executor-findings.md).
        sender.send(
            predictio::Event::Exec {
                pid: child.id(),
                exe: key.exe,
                shape: std::sync::Arc::clone(&key.shape),
                time_ns: predictio_bpf::monotonic_now_ns(),
            },
            None,
        );
    }
    // Loading the eBPF observer takes ~100 ms of CPU, and the command
    // neither waits for it nor shares the CPU with it before it has
    // started (a replay needs no observation), unless asked
    // (`--observe-from-start`): it follows the command and everything
    // forked by then once it is loaded. A command that ends first never
    // waits for it.
    let mut loading = if args.observe_from_start {
        None
    } else {
        Some(
            std::thread::Builder::new()
                .name("observer-load".into())
                .spawn(|| observer_or_note(false, FollowAllLookups::None))
                .context("starting the observer's loader")?,
        )
    };
    let mut forward = |event: predictio::Event| {
        if !is_own(&event, me) {
            sender.send(event, None);
        }
    };
    let status = loop {
        signals.forward_to(child.id());
        if loading.as_ref().is_some_and(|thread| thread.is_finished())
            && let Some(thread) = loading.take()
        {
            let (loaded, why) = thread.join().unwrap_or_else(|_| (None, Some("the observer's loader panicked".into())));
            tracing::info!(
                after_ms = start.elapsed().as_millis() as u64,
                loaded = loaded.is_some(),
                "eBPF observation loaded"
            );
            note = why;
            observer = loaded;
            // The command runs already: an observer that cannot follow it
            // is reported, never a reason to leave the command behind.
            if let Some(obs) = observer.as_mut()
                && let Err(err) = follow_tree(obs, child.id())
            {
                tracing::warn!("{err:#}");
                note = Some(format!("observation could not follow {}: {err:#}", args.command[0]));
                if let Some(obs) = observer.take() {
                    obs.close_in_background();
                }
            }
        }
        match observer.as_mut() {
            Some(obs) => {
                obs.poll(obs.poll_interval().max(Duration::from_millis(1)), &mut forward)?;
            }
            None => {
                // Until the observer is there: the command's end is what
                // is waited for, at the pace of a short command.
                std::thread::sleep(Duration::from_micros(if loading.is_some() { 200 } else { 5000 }))
            }
        }
        if let Some(status) = child.try_wait()? {
            if let Some(obs) = observer.as_mut() {
                obs.drain(&mut forward);
            }
            break status;
        }
    };
    let elapsed = start.elapsed();
    // The command's last hints may still be queued on the socket.
    let hint_stats = hints.finish();
    pipeline.flush(Duration::from_secs(2));
    executor.wait_idle(Duration::from_secs(5));
    let source = observer.as_ref().map_or("none", |o| o.source_name());
    let observer_stats = observer.as_ref().map(|o| o.stats());
    // Detaching the programs takes over a second here: a helper finishes it.
    if let Some(observer) = observer.take() {
        observer.close_in_background();
    }
    let note = if loading.is_some() {
        // The loader is still attaching programs: a helper holds what it
        // has made so far, so that this process's exit does not wait for
        // their detaching either.
        predictio_bpf::release_at_exit();
        Some(format!("{} ended before eBPF observation was ready", args.command[0]))
    } else {
        note
    };

    if !args.quiet {
        let report = Status {
            version: env!("CARGO_PKG_VERSION").into(),
            pid: me,
            uptime_s: elapsed.as_secs_f64(),
            backend: executor.backend().to_string(),
            fallback: executor.fallback_reason().map(str::to_owned),
            source: source.into(),
            source_note: note,
            assumed_missing: Vec::new(),
            policies: names,
            executor: executor.stats(),
            pipeline: pipeline.stats(),
            hints: hint_stats,
            observer: observer_stats.map_or(serde_json::Value::Null, |stats| {
                serde_json::to_value(predictio_daemon::sources::observer_stats_json(&stats)).unwrap_or_default()
            }),
            launch: None,
        };
        let mut err = std::io::stderr().lock();
        if args.json {
            serde_json::to_writer_pretty(&mut err, &report)?;
            eprintln!();
        } else {
            eprintln!("\npredictio run: {} finished in {:.3} s ({status})", args.command[0], elapsed.as_secs_f64());
            super::stat::write_text(&mut err, &report, 5)?;
        }
    }
    let code = match status.code() {
        Some(code) => code,
        None => bail!("{} was killed ({status})", args.command[0]),
    };
    // Everything is reported: exit now, without joining the executor's and
    // the pipeline's threads one by one (milliseconds that a short command
    // would pay); only the socket's directory needs removing.
    drop(socket_dir);
    let _ = std::io::Write::flush(&mut std::io::stdout());
    std::process::exit(code)
}

/// Whether to hand the command to a running daemon, and if so the hint
/// socket to give it (`None` when the daemon takes no hints): with `-q` and
/// nothing else that only this process's runtime does (its counters, other
/// policies, another store, no replay, observation from the start), when
/// the daemon replays launches and its control socket (from `settings`,
/// the configuration the daemon runs with) accepts a connection. Both
/// observing the command and both replaying its launch would do the work
/// twice, and setting up a runtime of its own was most of what `run`
/// costs a short command beside the daemon.
fn beside_daemon(args: &Args, settings: &predictio_daemon::config::Config) -> Option<Option<std::path::PathBuf>> {
    let only_quiet = args.quiet
        && !args.no_daemon
        && !args.json
        && args.policies.is_empty()
        && !args.no_replay
        && !args.observe_from_start
        && args.store.as_path() == std::path::Path::new(predictio_daemon::launch::store::DEFAULT_DIR);
    if !only_quiet {
        return None;
    }
    crate::handoff::daemon_hint_socket(settings)
}

/// Follows `root` and every process it has forked by now (read from
/// `/proc`): what it forks from now on the observer follows by itself.
fn follow_tree(observer: &mut predictio_bpf::Observer, root: u32) -> Result<()> {
    observer.follow(root).context("following the command")?;
    for pid in descendants(root) {
        // A descendant that has exited since /proc was read is no loss.
        let _ = observer.follow(pid);
    }
    Ok(())
}

/// The processes below `root` in the process tree, from each
/// `/proc/PID/stat`'s parent field. Best effort: a process that ends while
/// /proc is read is left out.
fn descendants(root: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut parent_of = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
        if let Some(ppid) = parent_in_stat(&stat) {
            parent_of.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(parent_of.iter().filter(|&&(_, ppid)| ppid == parent).map(|&(pid, _)| pid));
        next += 1;
    }
    found.remove(0);
    found
}

/// The parent pid in a `/proc/PID/stat` line: the second field after the
/// command name, which ends at the line's last `)` (a name may hold any
/// byte, spaces and parentheses included).
fn parent_in_stat(stat: &str) -> Option<u32> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// The command `run` follows: started here, or by the front and handed
/// over (a child of this process all the same: the front exec'd into it).
enum Running {
    Spawned(std::process::Child),
    Adopted {
        pid: u32,
        /// Once reaped.
        status: Option<std::process::ExitStatus>,
    },
}

impl Running {
    fn id(&self) -> u32 {
        match self {
            Running::Spawned(child) => child.id(),
            Running::Adopted { pid, .. } => *pid,
        }
    }

    /// Its status once it has ended, without waiting.
    fn try_wait(&mut self) -> std::io::Result<Option<std::process::ExitStatus>> {
        match self {
            Running::Spawned(child) => child.try_wait(),
            Running::Adopted { status: Some(status), .. } => Ok(Some(*status)),
            Running::Adopted { pid, status } => {
                let Some(target) = rustix::process::Pid::from_raw(*pid as i32) else {
                    return Err(std::io::Error::other(format!("not a process id: {pid}")));
                };
                let reaped = rustix::process::waitpid(Some(target), rustix::process::WaitOptions::NOHANG)?;
                *status = reaped.map(|(_, raw)| {
                    <std::process::ExitStatus as std::os::unix::process::ExitStatusExt>::from_raw(raw.as_raw())
                });
                Ok(*status)
            }
        }
    }
}

/// What the front handed over with a command (`--adopt`).
struct Adopted {
    pid: u32,
    socket: std::os::unix::net::UnixDatagram,
    dir: crate::handoff::HintDir,
    /// Since the command started.
    running_for: Duration,
}

impl Adopted {
    /// Takes over the command `pid`, the hint socket at descriptor `fd`
    /// (bound in `dir`) and the directory. Refused unless `pid` is a child
    /// of this process and `fd` an open datagram socket.
    fn take(pid: u32, fd: i32, dir: &std::path::Path, started_ns: Option<u64>) -> Result<Self> {
        let is_child = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|stat| parent_in_stat(&stat))
            .is_some_and(|parent| parent == std::process::id());
        if !is_child {
            bail!("--adopt {pid}: not a child of this process");
        }
        let socket = inherited_datagram_socket(fd).with_context(|| format!("--hint-fd {fd}"))?;
        let now = predictio_bpf::monotonic_now_ns();
        let running_for = Duration::from_nanos(started_ns.map_or(0, |then| now.saturating_sub(then)));
        Ok(Self { pid, socket, dir: crate::handoff::HintDir { path: dir.to_owned() }, running_for })
    }
}

/// The hint socket the front bound and left open across its exec, at
/// descriptor `fd`: taken over (and made close-on-exec again) if it is an
/// open datagram socket.
#[allow(unsafe_code)]
fn inherited_datagram_socket(fd: i32) -> Result<std::os::unix::net::UnixDatagram> {
    use std::os::fd::{FromRawFd, OwnedFd};
    if fd <= 2 {
        bail!("not a socket the front handed over");
    }
    // SAFETY: F_GETFD on any integer is harmless: it fails with EBADF when
    // no descriptor has that number.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
        bail!("no such descriptor");
    }
    // SAFETY: the descriptor is open (checked above) and nothing else in
    // this process owns it: it was inherited across the front's exec, and
    // this is called once, before anything opens a descriptor that could
    // be given its number.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let kind = rustix::net::sockopt::socket_type(&owned).context("not a socket")?;
    if kind != rustix::net::SocketType::DGRAM {
        bail!("not a datagram socket");
    }
    rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC).context("making it close-on-exec")?;
    Ok(std::os::unix::net::UnixDatagram::from(owned))
}

/// Signals `run` passes on to its command, as `env` or `timeout` would:
/// a service manager's SIGTERM stops the command, and `run` stays to report
/// and to exit with the command's status. SIGINT and SIGQUIT from a
/// terminal reach the command's process group already; `run` only outlives
/// them.
struct Forwarded {
    /// The last signal caught and not yet passed on (0: none).
    pending: Arc<std::sync::atomic::AtomicUsize>,
}

impl Forwarded {
    /// Passed on to the command.
    const FORWARDED: [i32; 3] = crate::handoff::FORWARDED;
    /// Caught, not passed on: the terminal sends them to the command itself.
    const OUTLIVED: [i32; 2] = crate::handoff::OUTLIVED;

    fn install() -> Result<Self> {
        let pending = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        for signal in Self::FORWARDED {
            signal_hook::flag::register_usize(signal, Arc::clone(&pending), signal as usize)
                .context("installing signal handlers")?;
        }
        let outlived = Arc::new(std::sync::atomic::AtomicBool::new(false));
        for signal in Self::OUTLIVED {
            signal_hook::flag::register(signal, Arc::clone(&outlived)).context("installing signal handlers")?;
        }
        Ok(Self { pending })
    }

    /// Sends `child` the signal caught since the last call, if any.
    fn forward_to(&self, child: u32) {
        let signal = self.pending.swap(0, std::sync::atomic::Ordering::Relaxed);
        if signal == 0 {
            return;
        }
        let (Some(pid), Some(signal)) =
            (rustix::process::Pid::from_raw(child as i32), rustix::process::Signal::from_named_raw(signal as i32))
        else {
            return;
        };
        if let Err(err) = rustix::process::kill_process(pid, signal) {
            tracing::warn!(%err, "passing {signal:?} on to the command");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parent_is_read_past_any_name() {
        assert_eq!(parent_in_stat("42 (cat) S 7 42 42 0 -1"), Some(7));
        assert_eq!(parent_in_stat("42 (a) b) (c) R 1234 42"), Some(1234));
        assert_eq!(parent_in_stat("42 (x"), None);
        assert_eq!(parent_in_stat("42 (x) S"), None);
    }

    #[test]
    fn descendants_include_grandchildren_and_not_the_root() {
        let mut child =
            std::process::Command::new("sh").args(["-c", "sh -c 'sleep 5; true' & wait"]).spawn().expect("sh");
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut found = descendants(child.id());
        while found.len() < 2 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            found = descendants(child.id());
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(!found.contains(&child.id()));
        assert!(descendants(std::process::id()).iter().all(|&pid| pid != std::process::id()));
    }
}
