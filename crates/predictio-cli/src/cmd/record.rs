//! `predictio record -- CMD`: learn CMD's launch.
//!
//! Runs CMD under eBPF observation (its whole process tree, from its first
//! instruction), records the launch window — from exec until the tree exits,
//! goes `--idle-ms` without a page-cache miss, or `--cap-ms` passes — names
//! the files it touched, merges the run into CMD's profile in the store and
//! prints what it learned. CMD runs to completion either way; its exit
//! status is ours.
//!
//! With `--exact` (root) the page cache is dropped first and the kernel's
//! readahead is off on every backing device while CMD runs, so each page
//! the launch touches is its own miss and the profile holds just those
//! pages, not the 64 KiB fault-around blocks around its faults (see
//! [`predictio::launch::AccessSource`]). Readahead comes back when CMD ends,
//! also when record is interrupted.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use predictio::launch::naming::Namer;
use predictio::launch::{AccessSource, LearnLimits, Recorder, WindowLimits};
use predictio_bpf::FollowAllLookups;
use predictio_daemon::launch::store::Store;
use predictio_daemon::launch::store::{DEFAULT_CAP_BYTES, DEFAULT_DIR};

use predictio_daemon::sources::{is_own, observer_or_note};

/// Arguments of `record`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The profile store's directory.
    #[arg(long, default_value = DEFAULT_DIR, value_name = "DIR")]
    pub store: PathBuf,
    /// The window ends after this long without a page-cache miss, ms.
    #[arg(long, default_value_t = 500)]
    pub idle_ms: u64,
    /// The window ends after this long at most, ms.
    #[arg(long, default_value_t = 10_000)]
    pub cap_ms: u64,
    /// Learn exactly the pages the launch reads (root): drop the page cache
    /// first, and keep the kernel's readahead off on every device while the
    /// command runs, so that each page it touches is one observed miss.
    /// Without it a fault counts the whole 64 KiB block the kernel maps
    /// around it, used or not; an exact profile replays fewer bytes. Other
    /// programs read without readahead meanwhile (slower, never wrong), and
    /// the command itself runs slower than usual.
    #[arg(long)]
    pub exact: bool,
    /// Print what was learned as JSON on stderr.
    #[arg(long)]
    pub json: bool,
    /// Print nothing of our own.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Opens the store with an error that says where and why.
pub fn open_store(dir: &Path) -> Result<Store> {
    Store::open(dir, DEFAULT_CAP_BYTES, Duration::from_secs(10))
        .with_context(|| format!("opening the profile store in {}", dir.display()))
}

/// The machine set up for an exact recording: page cache dropped,
/// readahead off on every backing device (`/sys/class/bdi/*/read_ahead_kb`)
/// until dropped, when each device gets its own setting back.
struct ExactTraining {
    restore: Vec<(PathBuf, String)>,
}

impl ExactTraining {
    const BDI: &str = "/sys/class/bdi";

    fn start() -> Result<Self> {
        let mut training = Self { restore: Vec::new() };
        let entries = std::fs::read_dir(Self::BDI).with_context(|| format!("--exact: listing {}", Self::BDI))?;
        for entry in entries {
            let knob = entry.with_context(|| format!("--exact: listing {}", Self::BDI))?.path().join("read_ahead_kb");
            let Ok(value) = std::fs::read_to_string(&knob) else { continue };
            if value.trim() == "0" {
                continue;
            }
            std::fs::write(&knob, "0\n")
                .with_context(|| format!("--exact needs root: turning readahead off ({})", knob.display()))?;
            training.restore.push((knob, value));
        }
        predictio::cache::drop_caches()
            .context("--exact needs root: dropping the page cache (sync, /proc/sys/vm/drop_caches)")?;
        Ok(training)
    }
}

impl Drop for ExactTraining {
    fn drop(&mut self) {
        for (knob, value) in &self.restore {
            if let Err(e) = std::fs::write(knob, value) {
                eprintln!(
                    "predictio record: could not turn readahead back on ({}: {e}); it was {}",
                    knob.display(),
                    value.trim()
                );
            }
        }
    }
}

/// Runs `record`.
pub fn run(args: Args) -> Result<()> {
    // Keyed as the kernel will run it (a script by its interpreter), so
    // that the daemon replays what was recorded here.
    let launch = predictio::launch::command::launch_of(&args.command)?;
    let (exe, shape) = (launch.exe, launch.shape);
    let store = open_store(&args.store)?;
    let (observer, note) = observer_or_note(false, FollowAllLookups::None);
    let Some(mut observer) = observer else {
        bail!("record needs eBPF observation (run as root on a kernel with BTF): {}", note.unwrap_or_default());
    };
    let me = std::process::id();
    let limits = WindowLimits { idle_ms: args.idle_ms, cap_ms: args.cap_ms, ..WindowLimits::default() };
    // Readahead stays off until `exact` is dropped, after the command ended;
    // an interrupt reaches the command (our process group) and is only
    // noted here, so that we live to turn readahead back on.
    let interrupted = Arc::new(AtomicBool::new(false));
    let exact = if args.exact {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
            signal_hook::flag::register(signal, Arc::clone(&interrupted)).context("installing signal handlers")?;
        }
        Some(ExactTraining::start()?)
    } else {
        None
    };
    let source = if exact.is_some() { AccessSource::Misses } else { AccessSource::Observed };
    let mut cmd = Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    observer.follow(me).context("following the command")?;
    let exec_ns = predictio_bpf::monotonic_now_ns();
    let started = Instant::now();
    let spawned = cmd.spawn();
    let _ = observer.unfollow(me);
    let mut child = spawned.with_context(|| format!("starting {}", args.command[0]))?;
    let mut recorder = Recorder::new(child.id(), exec_ns, limits).counting(source);
    let mut forward = |event: predictio::Event| {
        if !is_own(&event, me) {
            recorder.on_event(&event);
        }
    };
    let status = loop {
        observer.poll(observer.poll_interval().max(Duration::from_millis(1)), &mut forward)?;
        if let Some(status) = child.try_wait()? {
            observer.drain(&mut forward);
            break status;
        }
    };
    let window = started.elapsed();
    let lost = observer.stats().lost;
    // Detaching the programs takes over a second here: a helper finishes it.
    observer.close_in_background();
    drop(exact);
    if interrupted.load(Ordering::Relaxed) {
        bail!("interrupted: nothing learned (readahead is back on)");
    }
    recorder.tick(predictio_bpf::monotonic_now_ns());
    let learn_started = Instant::now();
    let mut namer = Namer::new();
    let run = recorder.finish(|id, pid| namer.name(id, pid));
    let profile = store.merge_run(&exe, &shape, &run, &LearnLimits::default())?;
    let learn = learn_started.elapsed();
    if !args.quiet {
        let pages: u64 = run.files.iter().flat_map(|f| &f.accesses).map(|r| r.len()).sum();
        let summary = serde_json::json!({
            "exe": exe.path, "shape": profile.shape, "runs": profile.runs, "window_ms": run.window_ms,
            "command_s": window.as_secs_f64(), "learn_ms": learn.as_secs_f64() * 1e3,
            "files_this_run": run.files.len(), "pages_touched_this_run": pages,
            "profile_files": profile.files.len(), "profile_pages": profile.pages(),
            "triggers": profile.triggers.len(), "store": store.path(),
            "lost_events": lost,
        });
        if args.json {
            eprintln!("{}", serde_json::to_string_pretty(&summary)?);
        } else {
            eprintln!(
                "predictio record: {} (\"{}\") run {} learned: {} files, {} accesses touching {:.1} MiB in a {:.0} ms window; \
                 profile now {} files, {:.1} MiB predicted, {} trigger(s); learning took {:.1} ms ({})",
                exe.path,
                profile.shape,
                profile.runs,
                run.files.len(),
                run.files.iter().map(|f| f.accesses.len()).sum::<usize>(),
                pages as f64 * 4096.0 / (1 << 20) as f64,
                run.window_ms,
                profile.files.len(),
                profile.pages() as f64 * 4096.0 / (1 << 20) as f64,
                profile.triggers.len(),
                learn.as_secs_f64() * 1e3,
                store.path().display(),
            );
            if lost > 0 {
                eprintln!(
                    "predictio record: {lost} events were lost (ring buffer full): this run's profile is incomplete"
                );
            }
        }
    }
    drop(store);
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => bail!("{} was killed ({status})", args.command[0]),
    }
}
