//! `launch`: cold starts of real programs on this machine, unmodified
//! (seeds 000 §4.1 / §6.2 and 001).
//!
//! For each program found on the machine:
//!
//! 1. **Training** (not measured): the profile store is emptied, then the
//!    program runs `--train` times cold under `predictio record --exact`
//!    (this very binary; readahead off while it runs, so the profile holds
//!    the pages the launch read rather than the fault-around blocks around
//!    its faults), which learns its launch into the bench's own store.
//!    Then the daemon as installed (`predictio daemon`, default
//!    configuration, its own store: [`super::launch_daemon`]) is started and
//!    the program launched 3 times cold: it learns them itself.
//! 2. **Measured passes**, interleaved in a balanced order, cold before
//!    every pass (drop_caches, the resident fraction of the profile's files
//!    checked): **baseline** (the program alone); **daemon** (the primary
//!    side: the daemon started fresh before its pass, as at boot, and
//!    stopped after it); **exact** (the profile `record --exact` learned,
//!    replayed in the bench's own process: the `launch` policy gets the
//!    program's exec start — the daemon with
//!    `[launch] lookups`, whose profiles' lookups are replayed here too,
//!    sees `execve` entered — just before the spawn, paired with the exec
//!    it leads to as the daemon pairs them at the first launch it sees,
//!    and hands the profile's page lists to the executor then; the exec
//!    once the program has exec'd finds the launch replayed);
//!    **whole-file** (every file the profile names prefetched whole
//!    through the same executor at the same moment: the naive peer, like
//!    `vmtouch -t`). Time is from just before the spawn to
//!    the program's exit, its exec included. stdout and exit status must be
//!    the same as the first baseline pass's.
//! 3. **Warm** (the limit): the program run once to warm the cache, then the
//!    median of [`WARM_RUNS`] more.
//! 4. **Waste** (not timed): one more cold exact pass under eBPF
//!    observation; pages the replay asked for that the launch never touched
//!    are wasted bytes; the same for the whole-file peer.
//!
//! As in the daemon, the replay's descriptors are opened (and checked
//! against the profile) outside the timed region and held: they are the
//! daemon's standing state. The whole-file peer uses the same held
//! descriptors. Before a baseline or preload pass they are closed, so those
//! passes start with cold inodes and directories too (a held descriptor
//! keeps its inode and dentries cached across drop_caches).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio::executor::ExecutorConfig;
use predictio::launch::{LaunchKey, LaunchPolicy, Profile, ReplayBook, ReplayPacing, WalkLimits};
use predictio::page::PageRange;
use predictio::{Event, Executor, FileId, FileRef, Request, Runtime, Urgency};
use predictio_daemon::launch::replay::{Replayer, check_files, plan_replay, start_replayer};
use predictio_daemon::launch::store::Store;

use super::launch_daemon::{Setup as DaemonSetup, closure};
use super::launch_preload::{Learned, PREDICT_WAIT, Preload, TRAIN_BUDGET};
use crate::BenchOptions;
use crate::harness::{
    BenchError, BenchVar, Harness, IoContext, median_u64, read_ahead_settings, settle, with_read_ahead,
};
use crate::report::{Case, Report, median};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    /// The daemon as installed, from its own learning (the primary side).
    Daemon,
    /// A profile from `record --exact`, replayed at the exec start.
    Predictio,
    WholeFile,
    Preload,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Daemon => "daemon",
            Side::Predictio => "exact",
            Side::WholeFile => "whole_file",
            Side::Preload => "preload",
        }
    }
}

/// One program of the set.
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) argv: Vec<String>,
}

const PYTHON_IMPORTS: &str = "import json, decimal, asyncio, email.mime.multipart, http.client, xml.dom.minidom, \
sqlite3, unittest, argparse, logging, multiprocessing, ssl, csv, tarfile, zipfile, urllib.request, html.parser, \
difflib, statistics, fractions, ctypes, uuid, pydoc, pickle, gzip, bz2, lzma, hashlib, inspect, dataclasses; print('ok')";

fn which(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The set's programs that are installed (the files they work on written to
/// `dir`), and a note for each that is not.
pub(crate) fn programs(dir: &Path, quick: bool) -> Result<(Vec<Program>, Vec<String>), BenchError> {
    let s = |x: &str| x.to_owned();
    let hello_rs = dir.join("launch-hello.rs");
    std::fs::write(
        &hello_rs,
        "fn main() {\n    let v: Vec<u64> = (1..=10).collect();\n    println!(\"{}\", v.iter().sum::<u64>());\n}\n",
    )
    .doing(|| format!("writing {}", hello_rs.display()))?;
    let small_c = dir.join("launch-small.c");
    std::fs::write(&small_c, "#include <stdio.h>\n#include <stdlib.h>\n#include <string.h>\n\nint main(int argc, char **argv) {\n    char buf[64];\n    snprintf(buf, sizeof buf, \"%d\", argc);\n    puts(buf);\n    return (int)strlen(argv[0]) > 1000 ? EXIT_FAILURE : EXIT_SUCCESS;\n}\n")
        .doing(|| format!("writing {}", small_c.display()))?;
    // A local page for headless Chromium: styles, a table and a script that
    // rewrites the DOM, so the dumped DOM shows the page was laid out and run.
    let page = dir.join("launch-page.html");
    let rows: String = (1..=40).map(|i| format!("<tr><td>{i}</td><td>{}</td></tr>", i * i)).collect();
    std::fs::write(
        &page,
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>predictio launch</title>\
             <style>body{{font-family:sans-serif}} td{{padding:2px 8px;border:1px solid #999}}</style></head>\
             <body><h1 id=\"t\">squares</h1><table>{rows}</table>\
             <script>const n=document.querySelectorAll('td').length;\
             document.getElementById('t').textContent='squares: '+n+' cells, sum '+\
             [...Array(41).keys()].reduce((a,b)=>a+b*b,0);</script></body></html>\n"
        ),
    )
    .doing(|| format!("writing {}", page.display()))?;
    let path = |p: &Path| p.display().to_string();
    let mut all = vec![
        Program { name: "rustc --version", argv: vec![s("rustc"), s("--version")] },
        Program {
            name: "rustc hello.rs",
            argv: vec![s("rustc"), s("-o"), path(&dir.join("launch-hello")), path(&hello_rs)],
        },
        Program {
            name: "clang -c small.c",
            argv: vec![s("clang"), s("-c"), s("-o"), path(&dir.join("launch-small.o")), path(&small_c)],
        },
        Program { name: "python3 heavy imports", argv: vec![s("/usr/bin/python3"), s("-c"), s(PYTHON_IMPORTS)] },
        Program { name: "ipython3 -c 1", argv: vec![s("ipython3"), s("-c"), s("1")] },
        Program {
            name: "gdb --batch",
            argv: vec![s("gdb"), s("--batch"), s("-ex"), s("info functions ^main$"), s("/bin/ls")],
        },
        // Debian's launcher script execs the browser, which forks its zygote
        // and renderer; the user data directory is the bench's own (made by
        // the first training run, like a user's browser profile).
        Program {
            name: "chromium --headless --dump-dom",
            argv: vec![
                s("chromium"),
                s("--headless"),
                s("--no-sandbox"),
                s("--disable-gpu"),
                format!("--user-data-dir={}", path(&dir.join("launch-chromium-profile"))),
                s("--dump-dom"),
                format!("file://{}", path(&page)),
            ],
        },
    ];
    if quick {
        all.truncate(1);
    }
    // PREDICTIO_BENCH_LAUNCH_ONLY=word[,word…] keeps the programs whose name
    // has one of the words (to look at some programs; a reported result
    // runs them all).
    if let Some(only) = BenchVar::LaunchOnly.get_string() {
        all.retain(|p| only.split(',').any(|word| p.name.contains(word)));
    }
    let mut missing = Vec::new();
    all.retain(|p| {
        let found = which(&p.argv[0]).is_some();
        if !found {
            missing.push(format!("{}: {} not installed, skipped", p.name, p.argv[0]));
        }
        found
    });
    Ok((all, missing))
}

/// One timed launch: wall time from before the spawn, stdout, exit status.
pub(crate) struct Pass {
    pub(crate) seconds: f64,
    pub(crate) stdout: Vec<u8>,
    pub(crate) status: Option<i32>,
}

/// Warm launches whose median is a program's limit.
const WARM_RUNS: usize = 5;

/// Cold fills of the replay alone whose median is its fill time.
const FILL_RUNS: usize = 3;

/// Reads the block device `disk` (its sysfs directory) has in flight.
fn reads_in_flight(disk: &Path) -> Result<u64, BenchError> {
    let file = disk.join("inflight");
    let text = std::fs::read_to_string(&file).doing(|| format!("reading {}", file.display()))?;
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BenchError::Options(format!("{}: not \"READS WRITES\": {text:?}", file.display())))
}

/// Reads still in flight on the device this long after the executor went
/// idle are taken to be another process's: the fill is timed without them.
const FILL_SETTLE_CAP: Duration = Duration::from_secs(1);

/// The replay alone, cold, with no program running: from its dispatch (as
/// at an exec) until the executor is idle and `disk` (the block device's
/// sysfs directory, when there is one) has no read in flight, the median
/// of [`FILL_RUNS`], and whether some run's device was still busy after
/// [`FILL_SETTLE_CAP`]. Every replayed page is one the launch touches, so
/// a replayed launch ends about then at the soonest (with the warm time,
/// what a replay from the exec can reach on this device; the program's own
/// faults, reading beside the fill, can bring it a little under).
fn fill_alone(h: &Harness, p: &mut Prepared, disk: Option<&Path>, clock: &mut u64) -> Result<(f64, bool), BenchError> {
    let mut runs = Vec::with_capacity(FILL_RUNS);
    let mut busy = false;
    for _ in 0..FILL_RUNS {
        // The replay opens its files itself, as at an exec in the daemon.
        p.close_files();
        make_cold(h, p)?;
        settle();
        *clock += 10_000_000_000;
        let jobs = p.replayer.counts().jobs;
        let start = Instant::now();
        p.exec(std::process::id(), *clock);
        // The policy hands the replay to the replayer thread, which opens
        // its files and submits its requests: the executor is idle until
        // then, so wait for the job first.
        while p.replayer.counts().jobs == jobs {
            if start.elapsed() >= Duration::from_secs(30) {
                return Err(BenchError::Options("the replayer did not take the replay within 30 s".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if !p.executor.wait_idle(Duration::from_secs(30)) {
            return Err(BenchError::Options("the replay alone was not done after 30 s".into()));
        }
        let idle = Instant::now();
        let mut device_busy = false;
        if let Some(disk) = disk {
            while reads_in_flight(disk)? > 0 {
                if idle.elapsed() >= FILL_SETTLE_CAP {
                    device_busy = true;
                    break;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        busy |= device_busy;
        runs.push(if device_busy { idle - start } else { start.elapsed() }.as_secs_f64());
    }
    Ok((median(&runs), busy))
}

/// Runs the program once, timed from before the spawn to its exit.
pub(crate) fn spawn_and_wait(argv: &[String]) -> Result<Pass, BenchError> {
    let start = Instant::now();
    wait(spawn(argv)?, argv, start)
}

/// Starts the program with its stdout captured; returns once it has exec'd.
fn spawn(argv: &[String]) -> Result<std::process::Child, BenchError> {
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .doing(|| format!("running {}", argv.join(" ")))
}

/// Waits for the program started at `start`: its time, stdout and status.
fn wait(child: std::process::Child, argv: &[String], start: Instant) -> Result<Pass, BenchError> {
    let out = child.wait_with_output().doing(|| format!("waiting for {}", argv.join(" ")))?;
    Ok(Pass { seconds: start.elapsed().as_secs_f64(), stdout: out.stdout, status: out.status.code() })
}

/// `PREDICTIO_BENCH_LAUNCH_NO_LOOKUPS=1` replays no lookups (the profiles'
/// paths are still learned): the A/B of the lookup replay.
fn no_lookups() -> bool {
    BenchVar::LaunchNoLookups.get().is_some_and(|v| v != "0")
}

/// What the treatment sides need, prepared before the passes.
struct Prepared {
    /// The profile's executable and command shape, which the exec event
    /// carries.
    key: LaunchKey,
    /// What the exec-start event of a launch carries.
    start: ExecStart,
    runtime: Runtime,
    executor: Arc<Executor>,
    whole: Vec<Request>,
    replay_pages: HashMap<FileId, Vec<PageRange>>,
    whole_pages: u64,
    /// The replayed files, open (for the whole-file peer and the residency
    /// check) or closed ([`Prepared::close_files`]: the exact side, as
    /// the daemon's replayer opens them at the exec and holds none before).
    files: Vec<FileRef>,
    /// Their paths, to open them again.
    paths: Vec<String>,
    /// The whole-file peer's origin.
    whole_origin: predictio::policy::PolicyId,
    changed: usize,
    dirs: usize,
    /// Names the replay looks up again (`Replay::lookups`).
    lookups: usize,
    /// Runs the replays the policy hands over, as the daemon's does.
    replayer: Replayer,
}

/// An exec starting, as the daemon sees it at `execve`'s entry (with
/// `[launch] lookups` on, as the replayed lookups here assume).
struct ExecStart {
    uid: u32,
    path: Arc<str>,
    shape: Arc<str>,
}

impl ExecStart {
    fn event(&self, pid: u32, time_ns: u64) -> Event {
        Event::ExecStart { pid, uid: self.uid, path: Arc::clone(&self.path), shape: Arc::clone(&self.shape), time_ns }
    }
}

impl Prepared {
    /// Dispatches the exec of the profile's executable by `pid` at
    /// `time_ns`, as the daemon's exec event does: the `launch` policy
    /// replays the profile.
    /// Opens the replayed files (if they are not) and builds the
    /// whole-file peer's requests over them.
    fn open_files(&mut self) -> Result<(), BenchError> {
        if !self.files.is_empty() || self.paths.is_empty() {
            return Ok(());
        }
        let (mut whole, mut whole_pages) = (Vec::new(), 0);
        for path in &self.paths {
            let f = FileRef::open_no_follow(path)?;
            let pages = f.file().metadata().doing(|| "stat".into())?.len().div_ceil(predictio::PAGE_SIZE);
            if pages > 0 {
                whole_pages += pages;
                let request = Request::new(f.clone(), vec![PageRange::new(0, pages)], self.whole_origin);
                whole.push(request.with_urgency(Urgency::Imminent));
            }
            self.files.push(f);
        }
        (self.whole, self.whole_pages) = (whole, whole_pages);
        Ok(())
    }

    /// Closes the replayed files: nothing of the workload is held open.
    fn close_files(&mut self) {
        self.whole.clear();
        self.files.clear();
    }

    fn exec(&mut self, pid: u32, time_ns: u64) {
        self.runtime.dispatch(&Event::Exec { pid, exe: self.key.exe, shape: Arc::clone(&self.key.shape), time_ns });
    }
}

/// Drops caches and returns the resident fraction of the pages the replay
/// asks for, right after. Pages other running processes map (libc, the
/// loader; a compiler other users are running) stay resident: that is this
/// machine's real cold state, and the fraction says how much of it there was.
fn make_cold(h: &Harness, p: &Prepared) -> Result<f64, BenchError> {
    use std::os::fd::AsFd;
    h.make_cold(&[])?;
    let (mut resident, mut total) = (0u64, 0u64);
    for f in &p.files {
        for r in p.replay_pages.get(&f.id()).into_iter().flatten() {
            let stat = predictio::os::cachestat(f.as_fd(), r.byte_offset(), r.byte_len())
                .doing(|| format!("cachestat of {}", f.id()))?;
            resident += stat.nr_cache;
            total += r.len();
        }
    }
    Ok(resident as f64 / total.max(1) as f64)
}

/// The replay's descriptors held in `held`, opened first if they are not.
fn hold<'a>(
    held: &'a mut Option<Prepared>,
    profile: &Profile,
    exe: FileId,
    argv: &[String],
) -> Result<&'a mut Prepared, BenchError> {
    Ok(match held {
        Some(p) => p,
        None => held.insert(prepare(profile, exe, argv)?),
    })
}

fn prepare(profile: &Profile, exe: FileId, argv: &[String]) -> Result<Prepared, BenchError> {
    // The executor as `predictio run` and the daemon set it up for replays.
    let config = ExecutorConfig::replaying();
    let executor = Arc::new(Executor::new(config).map_err(BenchError::Executor)?);
    let mut replay = plan_replay(profile, &WalkLimits::default(), &ReplayPacing::default());
    check_files(&mut replay);
    let mut replay_pages: HashMap<FileId, Vec<PageRange>> = HashMap::new();
    let mut paths = Vec::new();
    for f in replay.at_exec.iter().chain(replay.on_trigger.iter().flat_map(|t| t.1.iter())) {
        replay_pages.entry(f.identity.id()).or_default().extend(f.ranges.iter().copied());
        paths.push(f.identity.path.clone());
    }
    let whole_origin = executor.register_origin("whole-file");
    let changed = replay.changed.len() + replay.missing.len();
    let dirs = replay.dirs.len();
    let lookups = replay.lookups.iter().map(|l| l.names.len()).sum();
    if no_lookups() {
        replay.lookups.clear();
    }
    let book = ReplayBook::default();
    let key = LaunchKey::new(exe, &profile.shape);
    let mut runtime = Runtime::new(Arc::clone(&executor));
    let (jobs, job_rx) = predictio::launch::replay_channel();
    runtime.add_policy(Box::new(LaunchPolicy::new(book.clone(), jobs)));
    let sink: Arc<dyn predictio::executor::RequestSink> = executor.clone();
    let replayer = start_replayer(sink, job_rx).doing(|| "starting the replayer".into())?;
    // The exec as its caller asks for it: the path `execvp` runs and the
    // command line as passed. The daemon pairs it with the exec it led to
    // at the first launch it sees; here that launch is dispatched before
    // the profile is in the book, so it replays nothing.
    let start = ExecStart {
        uid: crate::sys::uid(),
        path: which(&argv[0]).map(|p| p.display().to_string()).unwrap_or_else(|| argv[0].clone()).into(),
        shape: predictio::launch::shape::of_args(argv).into(),
    };
    let seed = u32::MAX;
    runtime.dispatch(&start.event(seed, 0));
    runtime.dispatch(&Event::Exec { pid: seed, exe, shape: Arc::clone(&key.shape), time_ns: 0 });
    book.insert(key.clone(), replay);
    let mut prepared = Prepared {
        key,
        start,
        runtime,
        executor,
        whole: Vec::new(),
        replay_pages,
        whole_pages: 0,
        files: Vec::new(),
        paths,
        whole_origin,
        changed,
        dirs,
        lookups,
        replayer,
    };
    prepared.open_files()?;
    Ok(prepared)
}

fn pass(
    mut p: Option<&mut Prepared>,
    argv: &[String],
    side: Side,
    time_ns: u64,
    preload: Option<&Preload>,
) -> Result<(Pass, u64), BenchError> {
    // preload is a background daemon: it is started on its state and given
    // more than a cycle to read ahead what it predicts before the launch.
    let daemon = match (side, preload) {
        (Side::Preload, Some(preload)) => {
            let running = preload.start()?;
            std::thread::sleep(PREDICT_WAIT);
            Some(running)
        }
        _ => None,
    };
    let issued = |p: &Option<&mut Prepared>| p.as_ref().map_or(0, |p| p.executor.stats().total.issued_bytes);
    let before = issued(&p);
    let start = Instant::now();
    // The time counts from before the spawn, the exec included. The
    // daemon's path: the exec-start event (`execve` entered; the pid is not
    // known before the spawn and plays no part in a replay) reaches the
    // policy, which emits the profile's requests to the executor; the exec
    // event, once the program runs (`spawn` returns once the child has
    // exec'd), finds the launch replayed. The whole-file peer starts at the
    // same moment.
    match (side, p.as_deref_mut()) {
        (Side::Predictio, Some(p)) => p.runtime.dispatch(&p.start.event(0, time_ns)),
        (Side::WholeFile, Some(p)) => {
            for r in &p.whole {
                let _ = p.executor.submit(r.clone());
            }
        }
        _ => {}
    }
    let child = spawn(argv)?;
    if let (Side::Predictio, Some(p)) = (side, p.as_deref_mut()) {
        p.exec(child.id(), time_ns);
    }
    let run = wait(child, argv, start)?;
    if let Some(p) = p.as_deref() {
        p.executor.wait_idle(Duration::from_secs(10));
    }
    if let Some(running) = daemon {
        let read = running.read_bytes();
        running.stop()?;
        return Ok((run, read));
    }
    Ok((run, issued(&p) - before))
}

/// Pages the launch touched (one observed cold exact pass), by file.
fn touched_pages(p: &mut Prepared, argv: &[String], h: &Harness) -> Result<HashMap<FileId, HashSet<u64>>, BenchError> {
    use predictio_bpf::{Observer, ObserverConfig};
    make_cold(h, p)?;
    settle();
    let mut observer = Observer::load(ObserverConfig::default())
        .map_err(|e| BenchError::Options(format!("the waste pass needs eBPF observation: {e}")))?;
    let me = std::process::id();
    observer.follow(me).map_err(|e| BenchError::Options(format!("following: {e}")))?;
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let _ = observer.unfollow(me);
    let mut child = child.doing(|| format!("running {}", argv.join(" ")))?;
    // As in the timed passes: the replay starts once the child has exec'd.
    p.exec(child.id(), u64::MAX / 2);
    let mut touched: HashMap<FileId, HashSet<u64>> = HashMap::new();
    let mut on_event = |e: Event| {
        if let Event::PageAccess { pid, file, pages, .. } = e
            && pid != me
        {
            touched.entry(file).or_default().extend(pages.start..pages.end);
        }
    };
    loop {
        observer
            .poll(Duration::from_millis(5), &mut on_event)
            .map_err(|e| BenchError::Options(format!("observing: {e}")))?;
        if child.try_wait().doing(|| "waiting".into())?.is_some() {
            observer.drain(&mut on_event);
            break;
        }
    }
    p.executor.wait_idle(Duration::from_secs(10));
    Ok(touched)
}

fn train(h: &Harness, store_dir: &Path, argv: &[String], runs: usize) -> Result<f64, BenchError> {
    let me = crate::harness::predictio_binary()?;
    let mut total = 0.0;
    for _ in 0..runs {
        h.make_cold(&[])?;
        let start = Instant::now();
        // --exact: the profile holds the pages the launch read, not the
        // fault-around blocks around its faults (the bench is root, and
        // makes every pass cold anyway).
        let status = Command::new(&me)
            .args(["record", "--quiet", "--exact"])
            .arg("--store")
            .arg(store_dir)
            .arg("--")
            .args(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .doing(|| "running predictio record".into())?;
        total += start.elapsed().as_secs_f64();
        if !status.success() {
            return Err(BenchError::Options(format!("predictio record -- {} failed ({status})", argv.join(" "))));
        }
    }
    Ok(total)
}

#[allow(clippy::too_many_arguments)]
fn measure(
    h: &Harness,
    store_dir: &Path,
    daemon: &DaemonSetup,
    prog: &Program,
    pairs: usize,
    train_runs: usize,
    sides: &[Side],
    preload: Option<(&Preload, &Learned)>,
) -> Result<Case, BenchError> {
    let argv = &prog.argv;
    h.say(format!("{}: training ({train_runs} recorded runs)", prog.name));
    let training_s = train(h, store_dir, argv, train_runs)?;
    h.say(format!("{}: the daemon learns {train_runs} cold launches", prog.name));
    let (daemon_runs, daemon_files) = daemon.train(h, argv)?;
    // `record` keys the profile as the kernel will run the command (a
    // script by its interpreter), as here.
    let launch = predictio::launch::command::launch_of(argv).map_err(|e| BenchError::Options(e.to_string()))?;
    let key = launch.exe;
    let profile = {
        let store = Store::open(store_dir, predictio_daemon::launch::store::DEFAULT_CAP_BYTES, Duration::from_secs(10))
            .map_err(|e| BenchError::Options(e.to_string()))?;
        store.get(&key.path, &launch.shape).map_err(|e| BenchError::Options(e.to_string()))?
    };
    let profile = profile.ok_or_else(|| BenchError::Options(format!("no profile learned for {}", argv.join(" "))))?;
    // The profile's descriptors, held, keep its inodes and dentries cached
    // across drop_caches. Only the whole-file side holds them through its
    // passes; the exact side closes them first, as the daemon's
    // replayer opens them at the exec and holds none in between; baseline
    // and preload passes drop the whole preparation.
    let mut held: Option<Prepared> = None;

    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    let mut issued: Vec<Vec<u64>> = vec![Vec::new(); sides.len()];
    let mut reference: Option<(Vec<u8>, Option<i32>)> = None;
    let mut identical = true;
    let mut resident_before: f64 = 0.0;
    let mut clock = 0u64;
    for pair in 0..pairs {
        // Balanced for order and carry-over ([`crate::harness::pass_order`]).
        for s in crate::harness::pass_order(pair, sides.len()) {
            let (run, bytes) = if sides[s] == Side::Daemon {
                // Nothing of the bench's replay is held open: the daemon
                // opens what it replays itself.
                held = None;
                let (run, bytes, cold) = daemon.pass(h, argv)?;
                resident_before = resident_before.max(cold);
                (run, bytes)
            } else {
                let p = match sides[s] {
                    Side::Predictio => {
                        // As the daemon: the replay opens its files at the
                        // exec, so nothing is held through drop_caches (and
                        // the resident-before check is drop_caches alone).
                        let p = hold(&mut held, &profile, key.id(), argv)?;
                        p.close_files();
                        h.make_cold(&[])?;
                        Some(p)
                    }
                    Side::WholeFile => {
                        let p = hold(&mut held, &profile, key.id(), argv)?;
                        p.open_files()?;
                        resident_before = resident_before.max(make_cold(h, p)?);
                        Some(p)
                    }
                    _ => {
                        // Baseline and preload: nothing of the workload is
                        // held open (checking the replay's pages here would
                        // open, and cache, their inodes).
                        held = None;
                        h.make_cold(&[])?;
                        None
                    }
                };
                settle();
                // Exec times far enough apart that the policy's repeat guard
                // never suppresses a measured replay.
                clock += 10_000_000_000;
                pass(p, argv, sides[s], clock, preload.map(|x| x.0))?
            };
            match &reference {
                None => reference = Some((run.stdout.clone(), run.status)),
                Some((out, status)) => identical &= *out == run.stdout && *status == run.status,
            }
            secs[s].push(run.seconds);
            issued[s].push(bytes);
            h.step(format!("{} pair {}/{pairs}: {}", prog.name, pair + 1, sides[s].name()));
        }
    }
    // The limit: the median of WARM_RUNS warm launches after one that warms
    // the cache (a single one swung by ±15 % here: an ipython3 warm launch
    // once measured slower than the replayed median).
    spawn_and_wait(argv)?;
    let mut warm_runs = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        warm_runs.push(spawn_and_wait(argv)?);
    }
    let warm_s = crate::report::median(&warm_runs.iter().map(|r| r.seconds).collect::<Vec<_>>());
    h.step(format!("{} warm", prog.name));

    let p = hold(&mut held, &profile, key.id(), argv)?;
    // Without a block device under the executable (overlay, tmpfs) the
    // fill is timed until the executor is idle only.
    let disk = crate::machine::block_device_of(Path::new(&key.path))
        .ok()
        .and_then(|(_, queue)| queue.parent().map(Path::to_path_buf));
    let (fill_s, fill_busy) = fill_alone(h, p, disk.as_deref(), &mut clock)?;
    h.step(format!("{} fill alone", prog.name));
    let touched = touched_pages(p, argv, h)?;
    let mut replay_pages = 0u64;
    let mut replay_wasted = 0u64;
    for (file, ranges) in &p.replay_pages {
        let t = touched.get(file);
        for r in ranges {
            for page in r.start..r.end {
                replay_pages += 1;
                if !t.is_some_and(|t| t.contains(&page)) {
                    replay_wasted += 1;
                }
            }
        }
    }
    let touched_in_files: u64 =
        p.replay_pages.keys().filter_map(|f| touched.get(f)).map(|t| t.len() as u64).sum::<u64>();
    let whole_wasted = p.whole_pages.saturating_sub(touched_in_files);
    let all_touched: u64 = touched.values().map(|t| t.len() as u64).sum();

    let at = |side: Side| sides.iter().position(|s| *s == side).unwrap_or(0);
    let (d, x, w) = (at(Side::Daemon), at(Side::Predictio), at(Side::WholeFile));
    let mut case = Case::ab(prog.name, secs[0].clone(), secs[d].clone());
    case.warm_s = Some(warm_s);
    case.limit_s = Some(warm_s.max(replay_pages as f64 * 4096.0 / h.bandwidth().max(1.0)));
    case.resident_before = resident_before;
    case.answers_identical = identical
        && reference.as_ref().is_some_and(|r| warm_runs.iter().all(|warm| r.1 == warm.status && r.0 == warm.stdout));
    case.issued_bytes = median_u64(issued[d].iter().copied()) as u64;
    case.wasted_bytes = replay_wasted * 4096;
    let e = &mut case.extra;
    e.insert("command".into(), argv.join(" ").into());
    e.insert("whole_file_s".into(), secs[w].clone().into());
    e.insert("exact_s".into(), secs[x].clone().into());
    let ratio =
        |a: &[f64], b: &[f64]| -> f64 { median(&a.iter().zip(b).map(|(x, y)| x / y.max(1e-12)).collect::<Vec<_>>()) };
    let base = median(&secs[0]);
    let cut = |t: f64| 100.0 * (1.0 - t / base.max(1e-12));
    let closed = |t: f64| closure(base, t, warm_s);
    e.insert("whole_file_ratio_median".into(), ratio(&secs[0], &secs[w]).into());
    e.insert("daemon_vs_whole_file_ratio_median".into(), ratio(&secs[w], &secs[d]).into());
    e.insert("exact_ratio_median".into(), ratio(&secs[0], &secs[x]).into());
    e.insert("daemon_vs_exact_ratio_median".into(), ratio(&secs[x], &secs[d]).into());
    e.insert("baseline_median_s".into(), base.into());
    e.insert("daemon_median_s".into(), median(&secs[d]).into());
    e.insert("exact_median_s".into(), median(&secs[x]).into());
    e.insert("whole_file_median_s".into(), median(&secs[w]).into());
    e.insert("reduction_pct".into(), cut(median(&secs[d])).into());
    e.insert("exact_reduction_pct".into(), cut(median(&secs[x])).into());
    e.insert("closure".into(), closed(median(&secs[d])).into());
    e.insert("exact_closure".into(), closed(median(&secs[x])).into());
    e.insert("exact_issued_bytes".into(), (median_u64(issued[x].iter().copied()) as u64).into());
    e.insert("daemon_profile_runs".into(), daemon_runs.into());
    e.insert("daemon_profile_files".into(), daemon_files.into());
    e.insert("fill_alone_s".into(), fill_s.into());
    // Another process kept the device busy: a fill timed to its last
    // `fadvise`, not to its last read.
    e.insert("fill_device_busy".into(), fill_busy.into());
    // The exact replay's fill: what a replay of the exact profile can reach.
    let bound = warm_s.max(fill_s);
    e.insert("replay_bound_s".into(), bound.into());
    e.insert("bound_reduction_pct".into(), cut(bound).into());
    e.insert("whole_file_issued_bytes".into(), (median_u64(issued[2].iter().copied()) as u64).into());
    e.insert("whole_file_bytes".into(), (p.whole_pages * 4096).into());
    e.insert("whole_file_wasted_bytes".into(), (whole_wasted * 4096).into());
    e.insert("replay_bytes".into(), (replay_pages * 4096).into());
    e.insert("touched_bytes".into(), (all_touched * 4096).into());
    e.insert("profile_files".into(), profile.files.len().into());
    e.insert("profile_runs".into(), profile.runs.into());
    e.insert("changed_or_missing_files".into(), p.changed.into());
    e.insert("training_runs".into(), train_runs.into());
    e.insert("training_wall_s".into(), training_s.into());
    e.insert("learned_window_ms".into(), profile.learned_ms.into());
    e.insert("replay_dirs".into(), p.dirs.into());
    e.insert("replay_lookups".into(), p.lookups.into());
    if let (Some(i), Some((_, learned))) = (sides.iter().position(|s| *s == Side::Preload), preload) {
        e.insert("preload_s".into(), secs[i].clone().into());
        e.insert("preload_median_s".into(), median(&secs[i]).into());
        e.insert("preload_ratio_median".into(), ratio(&secs[0], &secs[i]).into());
        e.insert("daemon_vs_preload_ratio_median".into(), ratio(&secs[i], &secs[d]).into());
        e.insert("preload_read_bytes".into(), (median_u64(issued[i].iter().copied()) as u64).into());
        let name = Path::new(&argv[0]).file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        e.insert("preload_learned_exe".into(), learned.knows(&name).into());
    } else {
        e.insert("preload_s".into(), serde_json::Value::Null);
    }
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let train_runs = 3;
    std::fs::create_dir_all(&options.dir).doing(|| format!("creating {}", options.dir.display()))?;
    let (progs, mut notes) = programs(&options.dir, options.quick)?;
    let preload = Preload::setup(&options.dir)?;
    let mut sides = vec![Side::Baseline, Side::Daemon, Side::Predictio, Side::WholeFile];
    if preload.is_some() {
        sides.push(Side::Preload);
    }
    // The machine's read_ahead_kb, then each other setting asked for
    // (`--read-ahead-kb`): the kernel's read-around is what a cold launch's
    // faults read, and a replayed launch's own faults too.
    let settings_ra = read_ahead_settings(options);
    let machine_ra = settings_ra[0];
    let h = Harness::new(options, (settings_ra.len() * progs.len() * (pairs * sides.len() + 2)) as u64)?;
    let store_dir = options.dir.join("launch-store");
    let _ = std::fs::remove_dir_all(&store_dir);
    // preload's own training, on the whole set, before anything is measured.
    let trained = match &preload {
        Some(preload) => {
            h.say("preload: training (its daemon running while the programs launch)");
            let argvs: Vec<Vec<String>> = progs.iter().map(|p| p.argv.clone()).collect();
            let (wall_s, launches, learned) =
                preload.train(&h, &argvs, if options.quick { Duration::from_secs(10) } else { TRAIN_BUDGET })?;
            notes.push(format!(
                "preload: trained for {wall_s:.0} s (cycle {} s; launches per program: {}) with its daemon running; its \
                 state file then held {}",
                super::launch_preload::CYCLE_S,
                progs.iter().zip(&launches).map(|(p, n)| format!("{} {n}", p.name)).collect::<Vec<_>>().join(", "),
                learned.describe()
            ));
            Some(learned)
        }
        None => {
            notes.push("preload (Debian's package) is not installed: no preload column (scripts/bench-deps.sh)".into());
            None
        }
    };
    let mut cases = Vec::new();
    for &ra in &settings_ra {
        // Each setting learns its own profiles, so every case's training
        // is its own (an exact recording turns readahead off anyway).
        let store_dir = if ra == machine_ra { store_dir.clone() } else { store_dir.join(format!("ra{ra}")) };
        let _ = std::fs::remove_dir_all(&store_dir);
        // The daemon too: a fresh home (store, sockets) per setting.
        let home = if ra == machine_ra { "launch".to_owned() } else { format!("launch-ra{ra}") };
        let daemon = DaemonSetup::new(&options.dir, &home, &options.assume_missing)?;
        let set = with_read_ahead(&options.dir, ra, || {
            let mut out = Vec::new();
            for prog in &progs {
                let peer = preload.as_ref().zip(trained.as_ref());
                let mut case = measure(&h, &store_dir, &daemon, prog, pairs, train_runs, &sides, peer)?;
                if ra != machine_ra {
                    case.name = format!("{} @ra{ra}", case.name);
                }
                case.extra.insert("read_ahead_kb".into(), ra.into());
                out.push(case);
            }
            Ok(out)
        })?;
        cases.extend(set);
    }
    h.finish();
    if let Some(preload) = &preload {
        notes.push(format!("preload: after the measured passes its state file held {}", preload.learned().describe()));
    }
    for &ra in &settings_ra {
        let set: Vec<&Case> =
            cases.iter().filter(|c| c.extra.get("read_ahead_kb").and_then(|v| v.as_u64()) == Some(ra)).collect();
        let label = if ra == machine_ra {
            format!("at the machine's read_ahead_kb ({ra})")
        } else {
            format!("at read_ahead_kb {ra} (the machine's is {machine_ra})")
        };
        notes.extend(set_notes(&set, &label));
    }
    for c in &cases {
        notes.extend(case_notes(c));
    }
    notes.push(
        "the exact replay runs as in the daemon: nothing of the workload is held through drop_caches, and the \
         replayer opens the profile's files (and the directories on their paths) at the exec, so those inodes, \
         dentries and directory blocks are read cold in every exact pass (and in every daemon pass); the whole-file peer holds the files \
         open across its passes (it has no exec-time opening of its own), so its inodes stay cached; baseline and \
         preload passes hold nothing (their resident-before check, like the exact and daemon sides', is drop_caches \
         alone: opening the files to check them would cache their inodes)"
            .into(),
    );
    if options.quick {
        notes.push("--quick: one program, 2 pairs: a smoke test, not a result".into());
    }
    Ok(Report {
        workload: "launch".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "pairs": pairs, "training_runs": train_runs, "read_ahead_kb": settings_ra, "sides": sides.iter().map(|s| s.name()).collect::<Vec<_>>(),
            "executor": format!("fadvise backend, default limits but max_unsettled_pages {}", ExecutorConfig::replaying().limits.max_unsettled_pages), "walk": format!("{:?}", WalkLimits::default()),
            "window": "exec until the tree exits or 500 ms without a page-cache miss, cap 10 s",
            "daemon": "predictio daemon, default configuration, own sockets and store, trained by 3 cold launches of each program with it running, started fresh before each of its passes",
            "training": "exact: predictio record --exact (cold, readahead off while the program runs: the pages it read, the paths it looked up)",
            "lookups": if no_lookups() { "exact: not replayed (PREDICTIO_BENCH_LAUNCH_NO_LOOKUPS)" } else { "exact: replayed" },
            "replay_at": "exact: the exec start (execve entered, before the spawn), as the daemon with [launch] lookups",
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}

/// The set's notes: its mean and smallest reduction against the bars, and
/// what a replay from the exec could reach.
fn set_notes(set: &[&Case], label: &str) -> Vec<String> {
    let mut notes = Vec::new();
    let reductions: Vec<f64> =
        set.iter().filter_map(|c| c.extra.get("reduction_pct").and_then(|v| v.as_f64())).collect();
    let mean = reductions.iter().sum::<f64>() / reductions.len().max(1) as f64;
    let worst = reductions.iter().copied().fold(f64::INFINITY, f64::min);
    let mean_of = |key: &str| {
        let v: Vec<f64> = set.iter().filter_map(|c| c.extra.get(key).and_then(|v| v.as_f64())).collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    notes.push(format!(
        "{label}: the daemon as installed: mean launch time reduction {mean:.1} % over {} programs (bar: >= 50 %: {}); \
         smallest {worst:.1} % (bar: every program >= 25 %: {}); none slower: {}; mean closure {:.0} % (goal >= 80 %)",
        reductions.len(),
        if mean >= 50.0 { "met" } else { "not met" },
        if worst >= 25.0 { "met" } else { "not met" },
        if worst > 0.0 { "yes" } else { "no" },
        100.0 * mean_of("closure"),
    ));
    let within: Vec<&str> = set
        .iter()
        .filter(|c| c.extra.get("daemon_vs_exact_ratio_median").and_then(|v| v.as_f64()).is_some_and(|r| r < 0.9))
        .map(|c| c.name.as_str())
        .collect();
    notes.push(format!(
        "{label}: exact profiles (record --exact, replayed at the exec start in the bench): mean reduction {:.1} %, \
         mean closure {:.0} %; the daemon within 10 % of exact on every program: {}",
        mean_of("exact_reduction_pct"),
        100.0 * mean_of("exact_closure"),
        if within.is_empty() { "yes".to_owned() } else { format!("no ({})", within.join(", ")) },
    ));
    let bounds: Vec<f64> =
        set.iter().filter_map(|c| c.extra.get("bound_reduction_pct").and_then(|v| v.as_f64())).collect();
    notes.push(format!(
        "{label}: what a replay from the exec can reach on this device: per program, about the slower of its warm launch and \
         its replay's fill alone (cold, nothing else running; a launch can come a little under it, its own faults \
         reading beside the fill). At those times the mean reduction would be {:.1} % and the smallest {:.1} %",
        bounds.iter().sum::<f64>() / bounds.len().max(1) as f64,
        bounds.iter().copied().fold(f64::INFINITY, f64::min),
    ));
    notes
}

/// One case's notes: its times against its bound and peers, and why it
/// falls short where it does.
fn case_notes(c: &Case) -> Vec<String> {
    let mut notes = Vec::new();
    let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
    notes.push(format!(
        "{}: the exact replay's fill alone {:.0} ms{}, warm {:.0} ms: reachable about {:.0} ms ({:.0} % below \
         baseline); exact {:.0} ms ({:+.0} ms)",
        c.name,
        get("fill_alone_s") * 1e3,
        if c.extra.get("fill_device_busy").and_then(|v| v.as_bool()) == Some(true) {
            " (timed to its last request: other reads kept the device busy)"
        } else {
            ""
        },
        c.warm_s.unwrap_or(f64::NAN) * 1e3,
        get("replay_bound_s") * 1e3,
        get("bound_reduction_pct"),
        get("exact_median_s") * 1e3,
        (get("exact_median_s") - get("replay_bound_s")) * 1e3,
    ));
    notes.push(format!(
        "{}: baseline {:.0} ms, daemon {:.0} ms ({:.2}x, {:.0} %, closure {:.0} %), exact {:.0} ms ({:.2}x, {:.0} %, \
         closure {:.0} %; the daemon {:.2}x of exact), whole-file {:.0} ms ({:.2}x), warm {:.0} ms; daemon issued \
         {:.1} MiB; exact replay {:.1} MiB of which {:.1} MiB wasted; whole-file {:.1} MiB of which {:.1} MiB wasted; \
         exact learned from {} runs ({:.0} ms of windows, {:.1} s of training wall time), the daemon's profile {} \
         runs, {} files",
        c.name,
        get("baseline_median_s") * 1e3,
        get("daemon_median_s") * 1e3,
        c.ratio_median,
        get("reduction_pct"),
        get("closure") * 100.0,
        get("exact_median_s") * 1e3,
        get("exact_ratio_median"),
        get("exact_reduction_pct"),
        get("exact_closure") * 100.0,
        get("daemon_vs_exact_ratio_median"),
        get("whole_file_median_s") * 1e3,
        get("whole_file_ratio_median"),
        c.warm_s.unwrap_or(f64::NAN) * 1e3,
        c.issued_bytes as f64 / 1048576.0,
        get("replay_bytes") / 1048576.0,
        c.wasted_bytes as f64 / 1048576.0,
        get("whole_file_bytes") / 1048576.0,
        get("whole_file_wasted_bytes") / 1048576.0,
        get("training_runs"),
        get("learned_window_ms"),
        get("training_wall_s"),
        get("daemon_profile_runs"),
        get("daemon_profile_files"),
    ));
    let base = get("baseline_median_s");
    let warm_cut = 100.0 * (1.0 - c.warm_s.unwrap_or(f64::NAN) / base.max(1e-12));
    if warm_cut < 50.0 {
        notes.push(format!(
            "{}: even a warm cache is only {warm_cut:.0} % faster than this cold baseline (warm {:.0} ms vs {:.0} ms): \
             the rest of the launch is CPU, so no prefetcher can reach -50 %{}; the daemon removed {:.0} % of the \
             cold-minus-warm gap",
            c.name,
            c.warm_s.unwrap_or(f64::NAN) * 1e3,
            base * 1e3,
            if warm_cut < 25.0 { " (nor -25 %)" } else { "" },
            100.0 * (base - get("daemon_median_s")) / (base - c.warm_s.unwrap_or(0.0)).max(1e-12),
        ));
    }
    if c.resident_before > 0.2 {
        notes.push(format!(
            "{}: up to {:.0} % of the replayed pages were resident right after drop_caches (other processes on \
             this shared machine were running the same program), so some passes were not fully cold",
            c.name,
            c.resident_before * 100.0
        ));
    }
    if c.extra.get("preload_median_s").is_some_and(|v| v.is_number()) {
        notes.push(format!(
            "{}: preload {:.0} ms ({:.2}x of baseline; the daemon {:.2}x faster than preload); preload read {:.1} MiB \
             in its pass; its state {} this program's executable",
            c.name,
            get("preload_median_s") * 1e3,
            get("preload_ratio_median"),
            get("daemon_vs_preload_ratio_median"),
            get("preload_read_bytes") / 1048576.0,
            if c.extra.get("preload_learned_exe").and_then(|v| v.as_bool()) == Some(true) {
                "holds"
            } else {
                "does not hold"
            },
        ));
        if get("daemon_vs_preload_ratio_median") < 1.0 {
            notes.push(format!("{}: preload beat the daemon", c.name));
        }
    }
    if get("daemon_vs_whole_file_ratio_median") < 1.0 {
        notes.push(format!(
            "{}: whole-file prefetch beat the daemon ({:.2}x of the daemon's time)",
            c.name,
            1.0 / get("daemon_vs_whole_file_ratio_median")
        ));
    }
    notes
}
