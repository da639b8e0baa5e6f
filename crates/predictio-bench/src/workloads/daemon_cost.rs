//! `daemon-cost`: what the running daemon costs the machine it runs on.
//!
//! predictio promises never to make anything slower. This workload runs the
//! daemon as a user installs it (`predictio daemon`, this very binary, with
//! the default configuration but its own sockets and profile store under the
//! bench directory: eBPF observation of every process, launch learning and
//! replay, the default policies) and measures three things:
//!
//! 1. **Idle**: the CPU time and wake-ups a second of all the daemon's
//!    threads while nothing is launched (the median of [`IDLE_WINDOWS`]
//!    windows of [`IDLE_S`] seconds, after [`START_SETTLE`] for its start
//!    and the machine settled), and its resident memory.
//! 2. **Cold launches while the daemon learns** real programs (the launch
//!    set's compilers, interpreter, debugger and browser, [`PROGRAMS`]): no daemon
//!    against the daemon with `replay = false` (it observes and learns every
//!    launch and replays nothing): what observation and learning cost a
//!    cold start, the one a new program always has.
//! 3. **Warm launches** of the same programs: no daemon against the daemon
//!    learning and replaying (default configuration) with the profiles it
//!    learned in 2: on a warm cache every page is resident, so its replay
//!    only checks. The program is run once untimed to warm the cache, then
//!    [`WARM_LAUNCHES`] times timed (the pass's time is their mean).
//!
//! 4. **`predictio run`'s own cost**: a cold `true` against a cold
//!    `predictio run -q -- true`, with no daemon and beside the running
//!    daemon (given the daemon's configuration, where it finds the daemon
//!    and hands the command to it): what a user pays for prefixing a
//!    command that has no profile and sends no hints ([`RUN_BAR_MS`] over
//!    the plain command at most).
//!
//! A/B cases are interleaved pass by pass, alternating which side runs
//! first; the daemon is started before each of its passes and stopped
//! after, so a baseline pass runs with no daemon at all. Each daemon pass
//! also records the daemon's CPU time per timed launch
//! (`/proc/PID/task/*/schedstat`). stdout and exit status must match the
//! first baseline pass's. The limit of an A/B case is its baseline: the
//! daemon can only add to it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::launch::{Pass, Program, programs, spawn_and_wait};
use crate::BenchOptions;
use crate::harness::{BenchError, Harness, IoContext, Service, settle};
use crate::report::{Case, Report, median};

/// The launch set's programs measured here (by name): short launches that a
/// daemon's cost would show in, and the browser, whose launch brings the
/// observer the most events (~50 K). Not the pyenv shims of ipython3.
const PROGRAMS: [&str; 5] =
    ["rustc hello.rs", "clang -c small.c", "python3 heavy imports", "gdb --batch", "chromium --headless --dump-dom"];

/// Warm launches timed one after the other in a warm pass (its time is
/// their mean): a warm launch is short, and one alone swings by ±25 % here.
const WARM_LAUNCHES: usize = 5;

/// How long each window of the idle daemon lasts, and how many there are.
const IDLE_S: f64 = 4.0;
const IDLE_WINDOWS: usize = 3;

/// How long a started daemon is left before it is measured or a program is
/// timed beside it: its start (loading profiles, attaching eBPF) is over.
const START_SETTLE: Duration = Duration::from_millis(1500);

/// The bars of BENCHMARKS.md: a launch beside the daemon at least this
/// fraction as fast as without it, and the idle daemon under this much CPU
/// and this many wake-ups a second.
const LAUNCH_BAR: f64 = 0.98;
const IDLE_CPU_BAR_MS_PER_S: f64 = 0.5;
const IDLE_WAKEUPS_BAR_PER_S: f64 = 2.0;

/// The bar on `predictio run -- true` from a cold cache: at most this many
/// milliseconds over a plain `true` (the median of per-pair differences).
const RUN_BAR_MS: f64 = 10.0;

/// One running daemon.
pub(crate) struct Daemon {
    service: Service,
}

/// CPU time (ns) and voluntary context switches (each one a sleep, so a
/// wake-up after it) of all of a process's threads.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    cpu_ns: u64,
    switches: u64,
}

impl Daemon {
    /// Starts `predictio daemon` on `config` and waits for its control
    /// socket (bound once its sources are attached), then [`START_SETTLE`].
    pub(crate) fn start(me: &Path, config: &Path, control: &Path, log: &Path) -> Result<Daemon, BenchError> {
        let _ = std::fs::remove_file(control);
        let log_file = std::fs::File::create(log).doing(|| format!("creating {}", log.display()))?;
        let child = Command::new(me)
            .arg("daemon")
            .arg("--config")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .doing(|| "starting predictio daemon".into())?;
        let mut daemon = Daemon { service: Service::new(child, "predictio daemon") };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !control.exists() {
            if let Some(status) = daemon.service.exited()? {
                let tail = std::fs::read_to_string(log).unwrap_or_default();
                return Err(BenchError::Options(format!("predictio daemon exited at start ({status}): {tail}")));
            }
            if Instant::now() >= deadline {
                daemon.stop()?;
                return Err(BenchError::Options("predictio daemon did not open its control socket in 30 s".into()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(START_SETTLE);
        Ok(daemon)
    }

    fn usage(&self) -> Usage {
        usage_of(self.service.id())
    }

    /// Resident memory, bytes (`VmRSS`; 0 if it cannot be read).
    fn rss_bytes(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.service.id()))
            .ok()
            .and_then(|s| status_field(&s, "VmRSS:"))
            .map_or(0, |kib| kib * 1024)
    }

    pub(crate) fn stop(self) -> Result<(), BenchError> {
        self.service.stop()
    }
}

/// The number in the `/proc/PID/status` line starting with `key` (a unit
/// such as `kB` after it is left off).
fn status_field(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(key)).and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// [`Usage`] of process `pid`, summed over its threads (0 for a thread
/// that went away while it was read).
fn usage_of(pid: u32) -> Usage {
    let mut usage = Usage::default();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return usage };
    for task in tasks.flatten() {
        let one = task_usage(&task.path());
        usage.cpu_ns += one.cpu_ns;
        usage.switches += one.switches;
    }
    usage
}

/// [`Usage`] of the thread whose `/proc` directory is `dir`.
fn task_usage(dir: &Path) -> Usage {
    let cpu_ns = std::fs::read_to_string(dir.join("schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse::<u64>().ok()))
        .unwrap_or(0);
    let switches = std::fs::read_to_string(dir.join("status"))
        .ok()
        .and_then(|s| status_field(&s, "voluntary_ctxt_switches:"))
        .unwrap_or(0);
    Usage { cpu_ns, switches }
}

/// Where the daemon's files live, and its two configurations.
struct Setup {
    me: PathBuf,
    control: PathBuf,
    log: PathBuf,
    /// Learning and replaying (the default).
    replaying: PathBuf,
    /// Learning only (`replay = false`).
    learning: PathBuf,
}

impl Setup {
    fn new(dir: &Path) -> Result<Setup, BenchError> {
        let me = crate::harness::predictio_binary()?;
        let home = dir.join("daemon-cost");
        let _ = std::fs::remove_dir_all(&home);
        std::fs::create_dir_all(&home).doing(|| format!("creating {}", home.display()))?;
        let d = home.display();
        let write = |name: &str, replay: bool| -> Result<PathBuf, BenchError> {
            let path = home.join(name);
            let text = format!(
                "# predictio bench daemon-cost: the default configuration with this bench's own sockets and store\n\
                 [hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n\
                 [launch]\nstore = \"{d}/store\"\nreplay = {replay}\n"
            );
            std::fs::write(&path, text).doing(|| format!("writing {}", path.display()))?;
            Ok(path)
        };
        Ok(Setup {
            control: home.join("control.sock"),
            log: home.join("daemon.log"),
            replaying: write("replaying.toml", true)?,
            learning: write("learning.toml", false)?,
            me,
        })
    }

    fn start(&self, config: &Path) -> Result<Daemon, BenchError> {
        Daemon::start(&self.me, config, &self.control, &self.log)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Cache {
    Warm,
    Cold,
}

/// One A/B case: `prog` without a daemon against beside one started on
/// `config`, `pairs` pairs, alternating which side runs first.
fn measure(
    h: &Harness,
    setup: &Setup,
    prog: &Program,
    config: &Path,
    cache: Cache,
    pairs: usize,
) -> Result<Case, BenchError> {
    let label = match cache {
        Cache::Warm => format!("warm {}", prog.name),
        Cache::Cold => format!("cold {}, daemon learning", prog.name),
    };
    let mut secs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut daemon_cpu_ms = Vec::new();
    let mut reference: Option<(Vec<u8>, Option<i32>)> = None;
    let mut identical = true;
    let mut resident: f64 = 0.0;
    for pair in 0..pairs {
        for k in 0..2 {
            let side = (k + pair) % 2;
            let daemon = if side == 1 { Some(setup.start(config)?) } else { None };
            match cache {
                Cache::Warm => {
                    spawn_and_wait(&prog.argv)?;
                }
                Cache::Cold => resident = resident.max(h.make_cold(&[])?),
            }
            settle();
            let launches = if cache == Cache::Warm { WARM_LAUNCHES } else { 1 };
            let before = daemon.as_ref().map(Daemon::usage);
            let mut seconds = 0.0;
            for _ in 0..launches {
                let run: Pass = spawn_and_wait(&prog.argv)?;
                seconds += run.seconds;
                match &reference {
                    None => reference = Some((run.stdout.clone(), run.status)),
                    Some((out, status)) => identical &= *out == run.stdout && *status == run.status,
                }
            }
            if let (Some(d), Some(before)) = (&daemon, before) {
                let ns = d.usage().cpu_ns.saturating_sub(before.cpu_ns);
                daemon_cpu_ms.push(ns as f64 / 1e6 / launches as f64);
            }
            if let Some(d) = daemon {
                d.stop()?;
            }
            secs[side].push(seconds / launches as f64);
            h.step(format!("{label} pair {}/{pairs}: {}", pair + 1, if side == 0 { "no daemon" } else { "daemon" }));
        }
    }
    let mut case = launch_case(
        label,
        secs,
        resident,
        identical,
        [
            ("command", prog.argv.join(" ")),
            ("cache", (if cache == Cache::Warm { "warm" } else { "cold" }).into()),
            ("daemon", (if cache == Cache::Warm { "learning and replaying" } else { "learning only" }).into()),
        ],
    );
    let e = &mut case.extra;
    // Per launch (a warm pass's CPU over its launches).
    e.insert("daemon_cpu_ms".into(), daemon_cpu_ms.clone().into());
    e.insert("daemon_cpu_ms_median".into(), median(&daemon_cpu_ms).into());
    e.insert("meets_bar".into(), (case.ratio_median >= LAUNCH_BAR).into());
    Ok(case)
}

/// An A/B case of launches, `secs` its baseline's and treatment's pass
/// times: its limit is its baseline (the daemon can only add), with what
/// was launched, how and beside what as `about`.
fn launch_case(label: String, secs: [Vec<f64>; 2], resident: f64, identical: bool, about: [(&str, String); 3]) -> Case {
    let [base, treat] = secs;
    let mut case = Case::ab(label, base, treat);
    case.limit_s = case.baseline.as_ref().map(|b| b.median);
    case.resident_before = resident;
    case.answers_identical = identical;
    for (key, value) in about {
        case.extra.insert(key.into(), value.into());
    }
    case
}

/// `predictio run -q -- true` against `true`, both from a cold cache,
/// `pairs` interleaved pairs; with `beside` (its configuration) a daemon
/// is started before each pass of either side and stopped after it, and
/// `run` is given the daemon's configuration.
fn run_cost(h: &Harness, setup: &Setup, beside: Option<&Path>, pairs: usize) -> Result<Case, BenchError> {
    // By its path, as `execvp` finds it: both sides run the same file.
    let truth = predictio::launch::command::find_program("true".as_ref())
        .map_err(|e| BenchError::Options(format!("true: {e}")))?
        .display()
        .to_string();
    let plain = vec![truth.clone()];
    let me = setup.me.display().to_string();
    // Beside the daemon, `run` reads the daemon's configuration, as both
    // read /etc/predictio/predictio.toml on an installed system (it finds
    // the daemon by its control socket there).
    let mut wrapped = vec![me, "run".into(), "-q".into()];
    if let Some(config) = beside {
        wrapped.extend(["--config".into(), config.display().to_string()]);
    }
    wrapped.extend(["--".into(), truth]);
    let label = match beside {
        None => "cold predictio run -- true, no daemon",
        Some(_) => "cold predictio run -- true, beside the daemon",
    };
    let mut secs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut identical = true;
    let mut resident: f64 = 0.0;
    for pair in 0..pairs {
        for k in 0..2 {
            let side = (k + pair) % 2;
            let daemon = match beside {
                Some(config) => Some(setup.start(config)?),
                None => None,
            };
            resident = resident.max(h.make_cold(&[])?);
            settle();
            let run = spawn_and_wait(if side == 0 { &plain } else { &wrapped })?;
            identical &= run.status == Some(0) && run.stdout.is_empty();
            if let Some(d) = daemon {
                d.stop()?;
            }
            secs[side].push(run.seconds);
            h.step(format!("{label} pair {}/{pairs}: {}", pair + 1, if side == 0 { "true" } else { "run" }));
        }
    }
    let over_ms: Vec<f64> = secs[1].iter().zip(&secs[0]).map(|(t, b)| (t - b) * 1e3).collect();
    let over = median(&over_ms);
    let mut case = launch_case(
        label.into(),
        secs,
        resident,
        identical,
        [
            (
                "command",
                (if beside.is_some() {
                    "predictio run -q --config DAEMON.toml -- true"
                } else {
                    "predictio run -q -- true"
                })
                .into(),
            ),
            ("cache", "cold".into()),
            ("daemon", (if beside.is_some() { "running (default configuration)" } else { "none" }).into()),
        ],
    );
    let e = &mut case.extra;
    e.insert("overhead_ms".into(), over_ms.into());
    e.insert("overhead_ms_median".into(), over.into());
    e.insert("meets_bar".into(), (over <= RUN_BAR_MS).into());
    Ok(case)
}

/// The idle daemon: CPU ms a second and wake-ups a second (each the median
/// of [`IDLE_WINDOWS`] windows of [`IDLE_S`], after the machine has
/// settled: a window is at the mercy of whatever else the machine does,
/// whose page-cache events the daemon observes), and its resident bytes.
fn idle(setup: &Setup) -> Result<Idle, BenchError> {
    let daemon = setup.start(&setup.replaying)?;
    settle();
    let (mut cpu, mut wakeups, mut seen) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..IDLE_WINDOWS {
        let observed_before = observed(&setup.control);
        let before = daemon.usage();
        let start = Instant::now();
        std::thread::sleep(Duration::from_secs_f64(IDLE_S));
        let after = daemon.usage();
        let secs = start.elapsed().as_secs_f64();
        let observed_after = observed(&setup.control);
        cpu.push(after.cpu_ns.saturating_sub(before.cpu_ns) as f64 / 1e6 / secs);
        wakeups.push(after.switches.saturating_sub(before.switches) as f64 / secs);
        if let (Some((e0, r0)), Some((e1, r1))) = (observed_before, observed_after) {
            seen.push(((e1.saturating_sub(e0)) as f64 / secs, (r1.saturating_sub(r0)) as f64 / secs));
        }
    }
    let rss = daemon.rss_bytes();
    daemon.stop()?;
    let at_median = |pick: fn(&(f64, f64)) -> f64| median(&seen.iter().map(pick).collect::<Vec<_>>());
    Ok(Idle {
        cpu_ms_per_s: median(&cpu),
        wakeups_per_s: median(&wakeups),
        rss,
        execs_per_s: at_median(|s| s.0),
        records_per_s: at_median(|s| s.1),
    })
}

/// What [`idle`] measured: the daemon's CPU, wake-ups and memory, and what
/// its observer saw happen on the machine meanwhile (every exec and every
/// page-cache miss or eviction elsewhere is work, not idleness).
struct Idle {
    cpu_ms_per_s: f64,
    wakeups_per_s: f64,
    rss: u64,
    execs_per_s: f64,
    records_per_s: f64,
}

/// The daemon observer's counts of execs and records so far, asked on its
/// control socket (`None` if it does not answer).
fn observed(control: &Path) -> Option<(u64, u64)> {
    use std::io::{Read, Write};
    let mut stream = std::os::unix::net::UnixStream::connect(control).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"status\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let status: serde_json::Value = serde_json::from_str(&answer).ok()?;
    Some((status["observer"]["execs"].as_u64()?, status["observer"]["records"].as_u64()?))
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    std::fs::create_dir_all(&options.dir).doing(|| format!("creating {}", options.dir.display()))?;
    let (all, mut notes) = programs(&options.dir, false)?;
    let mut progs: Vec<Program> = all.into_iter().filter(|p| PROGRAMS.contains(&p.name)).collect();
    if options.quick {
        progs.truncate(1);
    }
    if progs.is_empty() {
        return Err(BenchError::Options(format!(
            "none of the programs is installed ({}): scripts/bench-deps.sh",
            PROGRAMS.join(", ")
        )));
    }
    let h = Harness::new(options, (progs.len() * pairs * 4 + pairs * 4) as u64)?;
    let setup = Setup::new(&options.dir)?;

    h.say("the idle daemon");
    let Idle { cpu_ms_per_s: cpu, wakeups_per_s: wakeups, rss, execs_per_s, records_per_s } = idle(&setup)?;
    let mut cases = vec![
        Case::metric(
            "idle daemon CPU",
            cpu,
            "ms/s",
            "",
            Some((
                &format!("<= {IDLE_CPU_BAR_MS_PER_S} ms/s ({} % of one core)", IDLE_CPU_BAR_MS_PER_S / 10.0),
                cpu <= IDLE_CPU_BAR_MS_PER_S,
            )),
        ),
        Case::metric(
            "idle daemon wake-ups",
            wakeups,
            "/s",
            "",
            Some((&format!("<= {IDLE_WAKEUPS_BAR_PER_S} /s"), wakeups <= IDLE_WAKEUPS_BAR_PER_S)),
        ),
        Case::metric("daemon resident memory", rss as f64 / 1048576.0, "MiB", "", None),
    ];
    // Cold first: what the daemon learns there, it replays in the warm cases.
    for prog in &progs {
        cases.push(measure(&h, &setup, prog, &setup.learning, Cache::Cold, pairs)?);
    }
    for prog in &progs {
        cases.push(measure(&h, &setup, prog, &setup.replaying, Cache::Warm, pairs)?);
    }
    let run_cases = [run_cost(&h, &setup, None, pairs)?, run_cost(&h, &setup, Some(&setup.replaying), pairs)?];
    h.finish();
    for c in &run_cases {
        let over = c.extra.get("overhead_ms_median").and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        notes.push(format!(
            "{}: true {:.1} ms, predictio run -q -- true {:.1} ms (medians); its own cost {over:.1} ms (median of \
             per-pair differences; bar: <= {RUN_BAR_MS} ms: {})",
            c.name,
            c.baseline.as_ref().map_or(f64::NAN, |s| s.median) * 1e3,
            c.treatment.as_ref().map_or(f64::NAN, |s| s.median) * 1e3,
            if over <= RUN_BAR_MS { "met" } else { "not met" },
        ));
    }

    notes.push(format!(
        "idle (nothing launched; the median of {IDLE_WINDOWS} windows of {IDLE_S:.0} s, at least {:.1} s after its start, the machine settled): \
         {cpu:.1} ms of CPU a second, {wakeups:.0} wake-ups a second (voluntary context switches of all its threads), \
         {:.1} MiB resident; meanwhile its observer saw {execs_per_s:.1} execs and {records_per_s:.0} records a \
         second elsewhere on the machine (medians)",
        START_SETTLE.as_secs_f64(),
        rss as f64 / 1048576.0
    ));
    let ab: Vec<&Case> = cases.iter().filter(|c| !c.is_metric()).collect();
    for c in &ab {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        let (b, t) =
            (c.baseline.as_ref().map_or(f64::NAN, |s| s.median), c.treatment.as_ref().map_or(f64::NAN, |s| s.median));
        notes.push(format!(
            "{}: no daemon {:.1} ms, daemon {:.1} ms; per-pair ratio median {:.3}x (bar: >= {LAUNCH_BAR}: {}); the \
             daemon's CPU per launch {:.1} ms (median)",
            c.name,
            b * 1e3,
            t * 1e3,
            c.ratio_median,
            if c.ratio_median >= LAUNCH_BAR { "met" } else { "not met" },
            get("daemon_cpu_ms_median"),
        ));
    }
    let worst = ab.iter().map(|c| c.ratio_median).fold(f64::INFINITY, f64::min);
    notes.push(format!(
        "slowest launch beside the daemon: {worst:.3}x of its time without (bar: every launch >= {LAUNCH_BAR}x: {})",
        if worst >= LAUNCH_BAR { "met" } else { "not met" }
    ));
    notes.push(format!(
        "the daemon is started before each of its passes and stopped (SIGTERM) after, so no baseline pass runs \
         beside it; its start (eBPF attached, profiles loaded) is not timed. A warm pass runs the program once \
         untimed first, then {WARM_LAUNCHES} times timed (their mean is its time); a cold one drops the page cache \
         first and times one launch. limit_s is the baseline: the daemon can only add"
    ));
    cases.extend(run_cases);
    if options.quick {
        notes.push("--quick: one program, 2 pairs: a smoke test, not a result".into());
    }
    Ok(Report {
        workload: "daemon-cost".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "pairs": pairs, "idle_window_s": IDLE_S, "idle_windows": IDLE_WINDOWS, "start_settle_s": START_SETTLE.as_secs_f64(),
            "daemon": "predictio daemon, default configuration; its own sockets and store; replay = false for the cold cases",
            "programs": progs.iter().map(|p| p.name).collect::<Vec<_>>(),
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_without_their_unit() {
        let status =
            "Name:\tpredictio\nVmRSS:\t   20480 kB\nvoluntary_ctxt_switches:\t17\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(20480));
        assert_eq!(status_field(status, "voluntary_ctxt_switches:"), Some(17));
        assert_eq!(status_field(status, "VmSwap:"), None);
    }

    #[test]
    fn a_busy_thread_shows_in_its_usage() {
        let me = Path::new("/proc/thread-self");
        let before = task_usage(me);
        // Spin until the thread's counter shows 20 ms more (or 5 s passed,
        // when the assertion below fails).
        let start = Instant::now();
        let mut x = 0u64;
        while task_usage(me).cpu_ns < before.cpu_ns + 20_000_000 && start.elapsed() < Duration::from_secs(5) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        std::thread::sleep(Duration::from_millis(5));
        let after = task_usage(me);
        assert!(usage_of(std::process::id()).cpu_ns >= after.cpu_ns, "the process counts this thread");
        assert!(after.cpu_ns >= before.cpu_ns + 20_000_000, "{before:?} -> {after:?}");
        assert!(after.switches > before.switches, "the sleep is a voluntary switch: {before:?} -> {after:?}");
    }
}
