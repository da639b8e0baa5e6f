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
//! 4. **A model load**: a 2 GiB safetensors file read tensor by tensor by a
//!    plain Python loader (`daemon_cost_model.py`), cold, with no daemon
//!    against beside it: the load's time, and the daemon's CPU over it split
//!    into the page-cache fill (its executor's threads, time the loader
//!    would otherwise spend itself) and the rest (observation, dispatch,
//!    policies), whose bar is [`MODEL_CPU_BAR_MS`].
//! 5. **`predictio run`'s own cost**: a cold `true` against a cold
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

/// The model-load case's name, and its bar: the daemon's CPU over one load
/// outside its executor's threads (observation, dispatch, policies).
const MODEL_LOAD: &str = "model load: 2 GiB safetensors, python read(), cold";
const MODEL_CPU_BAR_MS: f64 = 100.0;

/// The model loader (see the module docs).
const MODEL_SCRIPT: &str = include_str!("daemon_cost_model.py");

/// Thread names (`comm`, cut to 15 bytes) of the daemon's executor: the
/// page-cache fill.
const FILL_THREADS: [&str; 3] = ["predictio-exec", "predictio-strea", "predictio-meta"];

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

    /// CPU time (ns) of its threads so far: its executor's (the
    /// page-cache fill, [`FILL_THREADS`]) and the others'.
    pub(crate) fn cpu_split(&self) -> (u64, u64) {
        cpu_split(self.service.id())
    }

    /// CPU ms of its executor's threads and of the others since `before`
    /// (a [`Daemon::cpu_split`]), read half a second from now: its executor
    /// may still be finishing a load's last requests, and they count.
    pub(crate) fn cpu_ms_since(&self, before: (u64, u64)) -> (f64, f64) {
        std::thread::sleep(Duration::from_millis(500));
        let (fill, other) = self.cpu_split();
        (fill.saturating_sub(before.0) as f64 / 1e6, other.saturating_sub(before.1) as f64 / 1e6)
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

/// CPU time (ns) of process `pid`'s threads: its executor's
/// ([`FILL_THREADS`]) and the others'.
fn cpu_split(pid: u32) -> (u64, u64) {
    let (mut fill, mut rest) = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return (0, 0) };
    for task in tasks.flatten() {
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let cpu = task_usage(&task.path()).cpu_ns;
        if FILL_THREADS.iter().any(|prefix| name.trim_end().starts_with(prefix)) {
            fill += cpu;
        } else {
            rest += cpu;
        }
    }
    (fill, rest)
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

/// `dir/name`, emptied and made afresh: the home of a bench's daemon.
pub(crate) fn daemon_home(dir: &Path, name: &str) -> Result<PathBuf, BenchError> {
    let home = dir.join(name);
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).doing(|| format!("creating {}", home.display()))?;
    Ok(home)
}

/// Writes `home/file`, the configuration of `bench`'s daemon: the default
/// configuration with `home`'s own sockets and store, the default policies
/// and `more_policies` (opt-in ones), and `extra` TOML after `[launch]
/// store` (keys of `[launch]` first, then other sections).
pub(crate) fn daemon_config(
    home: &Path,
    bench: &str,
    file: &str,
    more_policies: &[&str],
    extra: &str,
) -> Result<PathBuf, BenchError> {
    let path = home.join(file);
    let d = home.display();
    let policies = if more_policies.is_empty() {
        String::new()
    } else {
        let all: Vec<String> =
            predictio::policies::DEFAULT.iter().chain(more_policies).map(|p| format!("\"{p}\"")).collect();
        format!("policies = [{}]\n", all.join(", "))
    };
    let text = format!(
        "# predictio bench {bench}: the default configuration with this bench's own sockets and store\n\
         {policies}[hints]\nsocket = \"{d}/hint.sock\"\n[control]\nsocket = \"{d}/control.sock\"\n\
         [launch]\nstore = \"{d}/store\"\n{extra}"
    );
    std::fs::write(&path, text).doing(|| format!("writing {}", path.display()))?;
    Ok(path)
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
        let home = daemon_home(dir, "daemon-cost")?;
        Ok(Setup {
            control: home.join("control.sock"),
            log: home.join("daemon.log"),
            replaying: daemon_config(&home, "daemon-cost", "replaying.toml", &[], "replay = true\n")?,
            learning: daemon_config(&home, "daemon-cost", "learning.toml", &[], "replay = false\n")?,
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
    let mut answers = Answers::default();
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
                answers.take(&run);
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
        answers.identical(),
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

/// Whether every pass answered as the first did (stdout and exit status).
#[derive(Default)]
struct Answers {
    first: Option<(Vec<u8>, Option<i32>)>,
    differ: bool,
}

impl Answers {
    fn take(&mut self, run: &Pass) {
        match &self.first {
            None => self.first = Some((run.stdout.clone(), run.status)),
            Some((out, status)) => self.differ |= *out != run.stdout || *status != run.status,
        }
    }

    fn identical(&self) -> bool {
        !self.differ
    }
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

/// The model file of [`model_load`]: a safetensors file of float16 tensors
/// laid out as a 20-layer model's (embeddings and output 125 MiB each,
/// 98 MiB a layer; 2.2 GB), in name order as safetensors writers lay them
/// out, written once into `dir` and reused while its marker matches.
pub(crate) fn model_file(dir: &Path) -> Result<PathBuf, BenchError> {
    use std::io::Write;
    const HIDDEN: u64 = 2048;
    const FFN: u64 = 5632;
    const VOCAB: u64 = 32000;
    let mut tensors: Vec<(String, [u64; 2])> = vec![
        ("model.embed_tokens.weight".into(), [VOCAB, HIDDEN]),
        ("lm_head.weight".into(), [VOCAB, HIDDEN]),
        ("model.norm.weight".into(), [1, HIDDEN]),
    ];
    for layer in 0..20 {
        let name = |part: &str| format!("model.layers.{layer}.{part}.weight");
        for part in ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"] {
            tensors.push((name(part), [HIDDEN, HIDDEN]));
        }
        for part in ["mlp.gate_proj", "mlp.up_proj"] {
            tensors.push((name(part), [FFN, HIDDEN]));
        }
        tensors.push((name("mlp.down_proj"), [HIDDEN, FFN]));
        for part in ["input_layernorm", "post_attention_layernorm"] {
            tensors.push((name(part), [1, HIDDEN]));
        }
    }
    tensors.sort();
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut at = 0u64;
    for (name, shape) in &tensors {
        let len = shape[0] * shape[1] * 2;
        header
            .insert(name.clone(), serde_json::json!({"dtype": "F16", "shape": shape, "data_offsets": [at, at + len]}));
        at += len;
    }
    let mut text = serde_json::Value::Object(header).to_string();
    while !text.len().is_multiple_of(8) {
        text.push(' ');
    }
    let total = 8 + text.len() as u64 + at;
    let path = dir.join("daemon-cost-model.safetensors");
    let marker = dir.join("daemon-cost-model.ok");
    let expect = format!("safetensors bytes={total} tensors={}\n", tensors.len());
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == total)
        && std::fs::read_to_string(&marker).is_ok_and(|text| text == expect)
    {
        return Ok(path);
    }
    let _ = std::fs::remove_file(&marker);
    let tmp = dir.join(".daemon-cost-model.safetensors.tmp");
    let file = std::fs::File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let write = |out: &mut std::io::BufWriter<std::fs::File>, bytes: &[u8]| {
        out.write_all(bytes).doing(|| format!("writing {}", tmp.display()))
    };
    write(&mut out, &(text.len() as u64).to_le_bytes())?;
    write(&mut out, text.as_bytes())?;
    // Weights that differ page by page (a counter in each 4 KiB).
    let mut block = vec![0x3cu8; 1 << 20];
    let mut left = at;
    let mut n = 0u64;
    while left > 0 {
        for page in block.chunks_mut(4096) {
            page[..8].copy_from_slice(&n.to_le_bytes());
            n += 1;
        }
        let len = left.min(block.len() as u64) as usize;
        write(&mut out, &block[..len])?;
        left -= len as u64;
    }
    out.into_inner()
        .map_err(|e| e.into_error())
        .and_then(|f| f.sync_all())
        .doing(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).doing(|| format!("renaming {}", tmp.display()))?;
    std::fs::write(&marker, expect).doing(|| format!("writing {}", marker.display()))?;
    Ok(path)
}

/// The model load with no daemon against beside one started on `config`,
/// `pairs` interleaved pairs from a cold cache; the daemon's CPU over each
/// load, split into its executor's (the fill) and the rest.
fn model_load(h: &Harness, setup: &Setup, config: &Path, pairs: usize) -> Result<Case, BenchError> {
    let model = model_file(&h.options.dir)?;
    let script = h.options.dir.join("daemon_cost_model.py");
    std::fs::write(&script, MODEL_SCRIPT).doing(|| format!("writing {}", script.display()))?;
    let python = if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let argv: Vec<String> = vec![python.into(), script.display().to_string(), model.display().to_string()];
    let mut secs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let (mut fill_ms, mut rest_ms) = (Vec::new(), Vec::new());
    let (mut answers, mut failed) = (Answers::default(), false);
    let mut resident: f64 = 0.0;
    for pair in 0..pairs {
        for k in 0..2 {
            let side = (k + pair) % 2;
            let daemon = if side == 1 { Some(setup.start(config)?) } else { None };
            resident = resident.max(h.make_cold(&[model.as_path()])?);
            settle();
            let before = daemon.as_ref().map(Daemon::cpu_split);
            let run: Pass = spawn_and_wait(&argv)?;
            answers.take(&run);
            failed |= run.status != Some(0);
            if let (Some(d), Some(before)) = (&daemon, before) {
                let (fill, rest) = d.cpu_ms_since(before);
                fill_ms.push(fill);
                rest_ms.push(rest);
            }
            if let Some(d) = daemon {
                d.stop()?;
            }
            secs[side].push(run.seconds);
            h.step(format!("model load pair {}/{pairs}: {}", pair + 1, if side == 0 { "no daemon" } else { "daemon" }));
        }
    }
    let mut case = launch_case(
        MODEL_LOAD.into(),
        secs,
        resident,
        answers.identical() && !failed,
        [
            ("command", argv.join(" ")),
            ("cache", "cold".into()),
            ("daemon", "learning and replaying (default configuration)".into()),
        ],
    );
    let rest = median(&rest_ms);
    let e = &mut case.extra;
    e.insert("model_bytes".into(), std::fs::metadata(&model).map_or(0, |m| m.len()).into());
    e.insert("daemon_fill_cpu_ms".into(), fill_ms.clone().into());
    e.insert("daemon_fill_cpu_ms_median".into(), median(&fill_ms).into());
    e.insert("daemon_other_cpu_ms".into(), rest_ms.clone().into());
    e.insert("daemon_other_cpu_ms_median".into(), rest.into());
    e.insert("meets_bar".into(), (rest <= MODEL_CPU_BAR_MS).into());
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
    let h = Harness::new(options, (progs.len() * pairs * 4 + pairs * 6) as u64)?;
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
    h.say("a model load");
    let model = model_load(&h, &setup, &setup.replaying, pairs)?;
    h.finish();
    {
        let get = |k: &str| model.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        notes.push(format!(
            "{}: no daemon {:.2} s, daemon {:.2} s (per-pair ratio median {:.3}x); the daemon's CPU over one load: \
             {:.0} ms outside its executor (observation, dispatch, policies; bar <= {MODEL_CPU_BAR_MS} ms: {}), \
             {:.0} ms in its executor's threads (the page-cache fill, which the loader's own reads would otherwise \
             do) (medians; each measured until 0.5 s after the load ended)",
            model.name,
            model.baseline.as_ref().map_or(f64::NAN, |s| s.median),
            model.treatment.as_ref().map_or(f64::NAN, |s| s.median),
            model.ratio_median,
            get("daemon_other_cpu_ms_median"),
            if get("daemon_other_cpu_ms_median") <= MODEL_CPU_BAR_MS { "met" } else { "not met" },
            get("daemon_fill_cpu_ms_median"),
        ));
    }
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
    cases.push(model);
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
    fn a_bench_daemon_has_its_own_sockets_and_store_and_the_extra_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = daemon_home(dir.path(), "home").expect("home");
        std::fs::write(home.join("stale"), "").expect("write");
        let home = daemon_home(dir.path(), "home").expect("home again");
        assert!(!home.join("stale").exists(), "made afresh");
        let parse = |extra: &str| {
            let path = daemon_config(&home, "test", "c.toml", &[], extra).expect("written");
            let text = std::fs::read_to_string(path).expect("read");
            predictio_daemon::config::Config::parse(&text).expect("parses")
        };
        let config = parse("replay = false\n[observe]\nassume_missing = [\"filemap_access\"]\n");
        assert_eq!(config.hints.socket, home.join("hint.sock"));
        assert_eq!(config.control.socket, home.join("control.sock"));
        assert_eq!(config.launch.store, home.join("store"));
        assert!(!config.launch.replay);
        assert_eq!(config.observe.assume_missing.len(), 1);
        let plain = parse("");
        assert!(plain.launch.replay && plain.observe.assume_missing.is_empty(), "otherwise the defaults");
        assert_eq!(plain.policies, predictio_daemon::config::PolicyName::defaults());
        let path = daemon_config(&home, "test", "p.toml", &["columns"], "").expect("written");
        let text = std::fs::read_to_string(path).expect("read");
        let more = predictio_daemon::config::Config::parse(&text).expect("parses");
        let names: Vec<&str> = more.policies.iter().map(|p| p.name()).collect();
        assert_eq!(names.last(), Some(&"columns"));
        assert_eq!(names.len(), predictio::policies::DEFAULT.len() + 1, "the defaults, then the opt-in one");
    }

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
