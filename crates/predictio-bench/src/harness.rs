//! The protocol's moving parts: the machine and its limits, cold caches made
//! and verified, workload data files, and the progress bar.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use predictio::FileRef;

use crate::BenchOptions;
use crate::device::{self, ProbeError, ProbeOptions};
use crate::machine::Machine;

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A filesystem or syscall step failed.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// The device-limit probe failed.
    #[error("device-limit probe failed: {0}")]
    Probe(#[from] ProbeError),
    /// The executor could not start.
    #[error("executor: {0}")]
    Executor(#[from] predictio::executor::ExecutorError),
    /// A workload file could not be opened for prefetching.
    #[error("file: {0}")]
    File(#[from] predictio::file::FileError),
    /// The options make no sense.
    #[error("invalid benchmark options: {0}")]
    Options(String),
    /// The cache could not be made cold.
    #[error("could not make the cache cold: {0}")]
    NotCold(String),
}

/// Attaches what the harness was doing to an I/O error.
pub trait IoContext<T> {
    /// Names the step that failed.
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, BenchError>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn doing(self, what: impl FnOnce() -> String) -> Result<T, BenchError> {
        self.map_err(|source| BenchError::Io { what: what(), source })
    }
}

/// How caches are made cold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColdMethod {
    /// `sync; echo 3 > /proc/sys/vm/drop_caches`.
    DropCaches,
    /// `posix_fadvise(DONTNEED)` of the workload's own files.
    Evict,
}

impl ColdMethod {
    /// How the report says it.
    pub fn describe(self) -> &'static str {
        match self {
            ColdMethod::DropCaches => "drop_caches (sync; echo 3 > /proc/sys/vm/drop_caches) before every pass",
            ColdMethod::Evict => {
                "fadvise(DONTNEED) of the workload's files before every pass (drop_caches not permitted: not root)"
            }
        }
    }
}

/// Shared state of one benchmark run.
pub struct Harness {
    /// The options.
    pub options: BenchOptions,
    /// This machine and its device limits.
    pub machine: Machine,
    /// How caches are made cold.
    pub cold: ColdMethod,
    progress: ProgressBar,
}

impl Harness {
    /// Prepares a run: the data directory, the machine description, the
    /// device-limit probe (O_DIRECT at queue depths 1–64) and the cold-cache
    /// method. `steps` sizes the progress bar.
    pub fn new(options: &BenchOptions, steps: u64) -> Result<Self, BenchError> {
        if options.pairs == 0 {
            return Err(BenchError::Options("--pairs must be at least 1".into()));
        }
        std::fs::create_dir_all(&options.dir).doing(|| format!("creating {}", options.dir.display()))?;
        let mut machine = Machine::describe(&options.dir).doing(|| "describing the machine".into())?;
        let probe = ProbeOptions {
            dir: options.dir.clone(),
            seconds_per_point: if options.quick { 0.15 } else { 0.4 },
            file_size: if options.quick { 256 << 20 } else { 1 << 30 },
            ..ProbeOptions::default()
        };
        let progress = if options.progress { ProgressBar::new(steps) } else { ProgressBar::hidden() };
        progress.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        progress.set_message("probing device limits (O_DIRECT, QD 1-64)");
        machine.device_limit = device::probe(&probe)?;
        let cold = if drop_caches().is_ok() { ColdMethod::DropCaches } else { ColdMethod::Evict };
        Ok(Self { options: options.clone(), machine, cold, progress })
    }

    /// Makes the cache cold for `files` and returns the largest resident
    /// fraction among them right after (the verification the report states).
    pub fn make_cold(&self, files: &[&Path]) -> Result<f64, BenchError> {
        match self.cold {
            ColdMethod::DropCaches => drop_caches().map_err(|e| BenchError::NotCold(e.to_string()))?,
            ColdMethod::Evict => {
                for path in files {
                    let file = FileRef::open(path)?;
                    predictio::cache::evict(&file).doing(|| format!("evicting {}", path.display()))?;
                }
            }
        }
        let mut worst: f64 = 0.0;
        for path in files {
            let file = FileRef::open(path)?;
            let r = predictio::cache::residency(&file).doing(|| format!("cachestat of {}", path.display()))?;
            worst = worst.max(r.fraction());
        }
        if worst > 0.05 {
            return Err(BenchError::NotCold(format!("{:.1}% of a workload file is still resident", worst * 100.0)));
        }
        Ok(worst)
    }

    /// Reads `files` once, whole, with O_DIRECT (the guest's page cache is
    /// left as it was), before a round: see [`PRIMED_NOTE`]. Without it the
    /// side that runs first in a round reads from the disk behind the
    /// virtual one and the others from the host's cache of it, and a side
    /// that reads blocks the others do not (a prefetcher's unused pages)
    /// reads them from the disk.
    pub fn prime(&self, files: &[&Path]) -> Result<(), BenchError> {
        for path in files {
            device::read_direct(path).map_err(|e| BenchError::Options(format!("priming {}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// One round of an interleaved run: each of `sides` sides once, in the
    /// order [`pass_order`] gives round `pair` (no side always runs first,
    /// nor always right after the same other side), with
    /// `files` made cold and the machine settled before every pass;
    /// `pass(side)` runs one (and reports its step). Returns the largest
    /// resident fraction of `files` seen right before a pass.
    pub fn round(
        &self,
        pair: usize,
        sides: usize,
        files: &[&Path],
        mut pass: impl FnMut(usize) -> Result<(), BenchError>,
    ) -> Result<f64, BenchError> {
        let mut resident_before: f64 = 0.0;
        for side in pass_order(pair, sides) {
            resident_before = resident_before.max(self.make_cold(files)?);
            settle();
            pass(side)?;
        }
        Ok(resident_before)
    }

    /// Advances the progress bar.
    pub fn step(&self, message: impl Into<std::borrow::Cow<'static, str>>) {
        self.progress.set_message(message);
        self.progress.inc(1);
    }

    /// Sets the progress message without advancing.
    pub fn say(&self, message: impl Into<std::borrow::Cow<'static, str>>) {
        self.progress.set_message(message);
    }

    /// Clears the progress bar.
    pub fn finish(&self) {
        self.progress.finish_and_clear();
    }

    /// Best sequential bandwidth of the device, bytes/s.
    pub fn bandwidth(&self) -> f64 {
        self.machine.device_limit.seq_MBps * 1e6
    }

    /// Random 4 KiB reads/s of the device at its deepest probed depth.
    pub fn iops(&self) -> f64 {
        self.machine.device_limit.rand4k_iops_qd64
    }
}

/// Waits (up to 5 s) until no `predictio run` process is left: the helper
/// a finished `run` forks to detach its tracepoints takes about a second,
/// and while it does the kernel holds its tracing lock, so that the next
/// `run` cannot attach its own and observes nothing at first (and the
/// helper's work falls in whatever pass runs meanwhile). Returns how long
/// it waited. Workloads with a `predictio run` side call it before every
/// pass, so that each starts with no helper of an earlier one at work.
pub fn await_run_helpers() -> Duration {
    const CAP: Duration = Duration::from_secs(5);
    let start = std::time::Instant::now();
    while start.elapsed() < CAP && run_helper_alive() {
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// Whether a process `predictio* run …` is alive (a helper of a finished
/// `run`, when no `run` of ours is under way).
fn run_helper_alive() -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else { return false };
    entries.flatten().filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())).any(|e| {
        let Ok(cmdline) = std::fs::read(e.path().join("cmdline")) else { return false };
        let mut args = cmdline.split(|&b| b == 0);
        let exe = args.next().and_then(|a| Path::new(std::str::from_utf8(a).ok()?).file_name()?.to_str());
        exe.is_some_and(|exe| exe.starts_with("predictio")) && args.next() == Some(b"run")
    })
}

/// The `predictio` binary the workloads run (`daemon`, `run`, `record`):
/// `$PREDICTIO_BIN` if set, else the `predictio` beside this binary (cargo
/// builds both into one target directory; a package installs both into one
/// directory).
pub fn predictio_binary() -> Result<PathBuf, BenchError> {
    let path = match BenchVar::PredictioBin.get() {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe().doing(|| "finding this binary".into())?.with_file_name("predictio"),
    };
    if !path.is_file() {
        return Err(BenchError::Options(format!(
            "{} not found: build it (`cargo build --release -p predictio-cli`) or set PREDICTIO_BIN",
            path.display()
        )));
    }
    Ok(path)
}

/// Declares [`BenchVar`]: its variants, their names and [`BenchVar::ALL`]
/// from one list, so that a variable cannot be read without being listed.
macro_rules! bench_vars {
    ($($(#[doc = $doc:literal])+ $variant:ident = $name:literal,)+) => {
        /// An environment variable that filters a workload's cases or
        /// changes what a side runs. The bench reads these only through
        /// [`BenchVar::get`], and every result file records those that are
        /// set ([`BenchVar::captured`]): a run filtered or changed by one
        /// says so.
        ///
        /// Variables the bench itself does not read but the processes it
        /// starts do (the SQLite extension's settings) are listed too: they
        /// change the treatment of the runs they are set for.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum BenchVar {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl BenchVar {
            /// Every variable, in the order a report lists them.
            pub const ALL: &[BenchVar] = &[$(BenchVar::$variant),+];

            /// The variable's name.
            pub const fn name(self) -> &'static str {
                match self {
                    $(BenchVar::$variant => $name,)+
                }
            }
        }
    };
}

bench_vars! {
    /// `word[,word…]`: launch runs only the programs whose name contains
    /// one of the words.
    LaunchOnly = "PREDICTIO_BENCH_LAUNCH_ONLY",
    /// Set and not `0`: launch's replays replay no lookups (the A/B of the
    /// lookup replay).
    LaunchNoLookups = "PREDICTIO_BENCH_LAUNCH_NO_LOOKUPS",
    /// TOML lines added to the `[launch]` section of launch-daemon's
    /// daemon configuration (a variant of the default, e.g. `lookups =
    /// true`).
    DaemonLaunch = "PREDICTIO_BENCH_DAEMON_LAUNCH",
    /// `name[,name…]`: sqlite-scan runs only the cases named.
    SqliteOnly = "PREDICTIO_BENCH_SQLITE_ONLY",
    /// The SQLite extension sqlite-scan loads (default: the one built next
    /// to the bench).
    SqliteExtension = "PREDICTIO_SQLITE_EXTENSION",
    /// Read by the SQLite extension: its executor backend.
    SqliteBackend = "PREDICTIO_SQLITE_BACKEND",
    /// Read by the SQLite extension: the btree policy's growth factor.
    BtreeGrowth = "PREDICTIO_BTREE_GROWTH",
    /// Read by the SQLite extension: the btree policy's largest window.
    BtreeMaxWindow = "PREDICTIO_BTREE_MAX_WINDOW",
    /// Read by the SQLite extension: the scans the btree policy remembers.
    BtreeHistory = "PREDICTIO_BTREE_HISTORY",
    /// Read by the SQLite extension: continuations before a window opens.
    BtreeConfirm = "PREDICTIO_BTREE_CONFIRM",
    /// Read by the SQLite extension: the budget of whole upper levels.
    BtreeUpperPages = "PREDICTIO_BTREE_UPPER_PAGES",
    /// Read by the SQLite extension: the lookups that pay for an upper level.
    BtreeUpperPayback = "PREDICTIO_BTREE_UPPER_PAYBACK",
    /// Read by the SQLite extension: when a window is topped up.
    BtreeTopUp = "PREDICTIO_BTREE_TOP_UP",
    /// The node-llama-cpp installation llm-load's loaders run from.
    NodeLlamaCppDir = "NODE_LLAMA_CPP_DIR",
    /// llm-load's loader script (default `scripts/llama-load.mjs`).
    LlamaLoad = "PREDICTIO_LLAMA_LOAD",
    /// `word[,word…]`: model-load runs only the loads whose name contains
    /// one of the words.
    ModelOnly = "PREDICTIO_BENCH_MODEL_ONLY",
    /// The Python model-load's loaders run with (default
    /// `/var/tmp/predictio-python/bin/python`, made by
    /// `scripts/bench-deps.sh`).
    BenchPython = "PREDICTIO_BENCH_PYTHON",
    /// The `predictio` binary llm-load's treatment runs (default: this one).
    PredictioBin = "PREDICTIO_BIN",
}

impl BenchVar {
    /// The variable's value, when it is set.
    pub fn get(self) -> Option<std::ffi::OsString> {
        std::env::var_os(self.name())
    }

    /// The variable's value, when it is set and Unicode.
    pub fn get_string(self) -> Option<String> {
        self.get().and_then(|v| v.into_string().ok())
    }

    /// Every listed variable that is set in this process's environment,
    /// name → value (lossily converted to UTF-8): what a result file
    /// records as `env`.
    pub fn captured() -> std::collections::BTreeMap<String, String> {
        Self::captured_from(|name| std::env::var_os(name))
    }

    /// [`BenchVar::captured`] over an environment given as a lookup.
    fn captured_from(
        lookup: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> std::collections::BTreeMap<String, String> {
        Self::ALL
            .iter()
            .filter_map(|v| lookup(v.name()).map(|value| (v.name().to_owned(), value.to_string_lossy().into_owned())))
            .collect()
    }
}

/// `sync`, then drop the page cache, dentries and inodes (root only).
pub fn drop_caches() -> std::io::Result<()> {
    predictio::cache::drop_caches()
}

/// What [`Harness::prime`] is for, for the reports that use it.
pub const PRIMED_NOTE: &str = "before each pair the database file is read once, whole, with O_DIRECT (the guest's \
page cache is left cold): on this VM dropping the guest's page cache leaves the host's cache of the virtual disk, \
and a block read again comes back about twice as fast (4 KiB O_DIRECT at QD1: ~230 us the first time, ~107 us \
after), so without it the side that ran first in a pair read from the real disk and the others mostly from the \
host's cache, and a side reading blocks the others did not (a prefetcher's unused pages) read those from the \
disk; primed, every timed side starts from the same state: the guest cold, the host's cache holding the file";

/// Reads `path` once from start to end through the page cache (16 MiB
/// reads into one buffer) and returns the fraction of it resident after:
/// a file made warm, untimed.
pub fn read_into_cache(path: &Path) -> Result<f64, BenchError> {
    use std::io::Read;
    let mut file = File::open(path).doing(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; 16 << 20];
    while file.read(&mut buf).doing(|| format!("reading {}", path.display()))? > 0 {}
    let resident =
        predictio::cache::residency(&FileRef::open(path)?).doing(|| format!("cachestat of {}", path.display()))?;
    Ok(resident.fraction())
}

/// A data file of `size` bytes of deterministic pseudo-random content (seed
/// from `name`), created once and reused while its size matches.
pub fn data_file(dir: &Path, name: &str, size: u64) -> Result<PathBuf, BenchError> {
    let path = dir.join(name);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == size) {
        return Ok(path);
    }
    let tmp = dir.join(format!(".{name}.tmp"));
    let file = File::create(&tmp).doing(|| format!("creating {}", tmp.display()))?;
    let mut rng = XorShift::new(name.bytes().fold(0x9E37_79B9_7F4A_7C15, |h, b| h.rotate_left(5) ^ b as u64));
    let mut chunk = vec![0u8; 1 << 20];
    let mut offset = 0;
    while offset < size {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next().to_le_bytes());
        }
        let n = (size - offset).min(chunk.len() as u64) as usize;
        file.write_all_at(&chunk[..n], offset).doing(|| format!("writing {}", tmp.display()))?;
        offset += n as u64;
    }
    file.sync_all().doing(|| format!("syncing {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).doing(|| format!("renaming {}", tmp.display()))?;
    Ok(path)
}

/// A small, fast, deterministic PRNG (xorshift64*).
#[derive(Clone, Debug)]
pub struct XorShift(u64);

impl XorShift {
    /// Seeded (a zero seed is replaced).
    pub fn new(seed: u64) -> Self {
        Self(if seed == 0 { 0x2545_F491_4F6C_DD1D } else { seed })
    }

    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Shuffles `items` in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// A checksum of bytes read (FNV-1a over 8-byte words): answers must match
/// with and without prefetching.
pub fn checksum(mut state: u64, bytes: &[u8]) -> u64 {
    for word in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..word.len()].copy_from_slice(word);
        state ^= u64::from_le_bytes(w);
        state = state.wrapping_mul(0x0000_0100_0000_01B3);
    }
    state
}

/// The read_ahead_kb settings a workload runs at: the machine's (of the
/// device under `options.dir`; 0 when unknown) first, then each other one
/// asked for with `--read-ahead-kb`, once.
pub fn read_ahead_settings(options: &BenchOptions) -> Vec<u64> {
    let mut settings = vec![crate::machine::read_ahead_kb(&options.dir).unwrap_or(0)];
    for kb in &options.read_ahead_kb {
        if !settings.contains(kb) {
            settings.push(*kb);
        }
    }
    settings
}

/// Runs `f` with the device's read_ahead_kb set to `kb` (when it differs
/// from the current setting), restoring it after.
pub fn with_read_ahead<T>(dir: &Path, kb: u64, f: impl FnOnce() -> Result<T, BenchError>) -> Result<T, BenchError> {
    let current = crate::machine::read_ahead_kb(dir).doing(|| "reading read_ahead_kb".into())?;
    if current == kb {
        return f();
    }
    let previous = crate::machine::set_read_ahead_kb(dir, kb).doing(|| format!("setting read_ahead_kb to {kb}"))?;
    let result = f();
    let restored = crate::machine::set_read_ahead_kb(dir, previous);
    if let Err(err) = restored {
        tracing::error!(%err, previous, "could not restore read_ahead_kb");
    }
    result
}

/// A daemon the bench started (its child): stopped with SIGTERM by
/// [`Service::stop`], so that it can save its state; killed if dropped still
/// running, so that an error on the way leaves none behind.
pub struct Service {
    child: std::process::Child,
    what: &'static str,
}

impl Service {
    /// Takes charge of `child`; `what` names it in errors.
    pub fn new(child: std::process::Child, what: &'static str) -> Self {
        Self { child, what }
    }

    /// Its pid.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Its exit status, if it has exited.
    pub fn exited(&mut self) -> Result<Option<std::process::ExitStatus>, BenchError> {
        let what = self.what;
        self.child.try_wait().doing(|| format!("waiting for {what}"))
    }

    /// Stops it with SIGTERM and waits; kills it if it has not exited
    /// after 10 s.
    pub fn stop(mut self) -> Result<(), BenchError> {
        let what = self.what;
        // The pid of a child we spawned and have not yet reaped, so it
        // cannot have been reused.
        if crate::sys::terminate(self.child.id()).is_err() {
            let _ = self.child.kill();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if self.exited()?.is_some() {
                return Ok(());
            }
            if std::time::Instant::now() >= deadline {
                let _ = self.child.kill();
                self.child.wait().doing(|| format!("waiting for {what}"))?;
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Median of whole numbers, as a float.
pub fn median_u64(xs: impl IntoIterator<Item = u64>) -> f64 {
    crate::report::median(&xs.into_iter().map(|x| x as f64).collect::<Vec<_>>())
}

/// Adds one side's reader accounting (median over its passes) to a case's
/// extra figures as `{side}_hit_rate`, `{side}_prefetched_bytes` and
/// `{side}_wasted_bytes`; nothing when the side kept no stats.
pub fn insert_reader_stats(
    extra: &mut serde_json::Map<String, serde_json::Value>,
    side: &str,
    stats: &[predictio::reader::ReaderStats],
) {
    if stats.is_empty() {
        return;
    }
    let rates: Vec<f64> = stats.iter().map(predictio::reader::ReaderStats::hit_rate).collect();
    extra.insert(format!("{side}_hit_rate"), crate::report::median(&rates).into());
    extra.insert(format!("{side}_prefetched_bytes"), median_u64(stats.iter().map(|x| x.prefetched_bytes)).into());
    extra.insert(format!("{side}_wasted_bytes"), median_u64(stats.iter().map(|x| x.wasted_bytes)).into());
}

/// The last `max` characters of `text`: the end of a failed program's
/// error output, for a message.
pub fn tail(text: &str, max: usize) -> &str {
    match max.checked_sub(1) {
        None => "",
        Some(last) => &text[text.char_indices().rev().nth(last).map_or(0, |(i, _)| i)..],
    }
}

/// The last line of `stdout` that starts with `{`, parsed: what a loader
/// script prints when it is done (`who` names it in the error).
pub fn last_json_line(stdout: &str, who: &str) -> Result<serde_json::Value, BenchError> {
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).unwrap_or_default();
    serde_json::from_str(line).map_err(|e| BenchError::Options(format!("{who} output {line:?} is not JSON: {e}")))
}

/// Waits until the machine is quiet before a pass: at least 50 ms, then
/// until a 50 ms sample of `/proc/stat` shows the CPUs at most 10 % busy
/// (time stolen by the host not counted: it cannot be waited out), for at
/// most 1.5 s. Dropping the page cache sets off work that runs for a second
/// or two after it (compaction, the virtio driver reporting the freed
/// memory to the host, DAMON): started 50 ms after `drop_caches`, a pass of
/// sixty 100-row SQLite scans took 50–147 ms with the extension and 86–169
/// ms without (medians 73 and 120), 300 ms after it 47–74 and 111–135
/// (52 and 114).
pub fn settle() {
    const SAMPLE: Duration = Duration::from_millis(50);
    const QUIET: f64 = 0.10;
    const CAP: Duration = Duration::from_millis(1500);
    let start = std::time::Instant::now();
    let mut last = cpu_times();
    loop {
        std::thread::sleep(SAMPLE);
        let now = cpu_times();
        let quiet = match (last, now) {
            (Some((busy0, total0)), Some((busy1, total1))) if total1 > total0 => {
                (busy1 - busy0) as f64 / (total1 - total0) as f64 <= QUIET
            }
            // No /proc/stat: the fixed wait only.
            _ => true,
        };
        if quiet || start.elapsed() >= CAP {
            return;
        }
        last = now;
    }
}

/// `(busy, total)` jiffies of all CPUs from `/proc/stat`, steal left out
/// of both.
fn cpu_times() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    cpu_times_of(stat.lines().next()?)
}

fn cpu_times_of(line: &str) -> Option<(u64, u64)> {
    let mut fields = line.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.take(8).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    let [user, nice, system, idle, iowait, irq, softirq, _steal] = v[..] else { return None };
    let busy = user + nice + system + irq + softirq;
    Some((busy, busy + idle + iowait))
}

/// The order in which round `round` of an interleaved run takes its `sides`
/// sides: a Williams design, a Latin square balanced for carry-over. Over
/// `sides` consecutive rounds (twice as many for an odd count) every side
/// runs once at each position and right after each other side equally
/// often. A plain rotation puts each side after the same other side in
/// every round, and a side can leave the machine in a state that favours
/// or hampers the next: measured in `llm-load`, a cold llama.cpp load under
/// predictio took 5.5-5.9 s right after llama.cpp's direct-I/O side (whose
/// 2 GiB of freed memory this VM hands back to its host, to be faulted in
/// again) and 3.7-4.3 s right after the baseline, and the rotation ran it
/// after the direct-I/O side in every round.
pub fn pass_order(round: usize, sides: usize) -> Vec<usize> {
    if sides == 0 {
        return Vec::new();
    }
    // First row 0, 1, n-1, 2, n-2, ...; row r adds r to each (mod n).
    let first: Vec<usize> =
        (0..sides).map(|j| if !j.is_multiple_of(2) { j.div_ceil(2) } else { (sides - j / 2) % sides }).collect();
    let rows = if sides.is_multiple_of(2) { sides } else { 2 * sides };
    let row = round % rows;
    let mut order: Vec<usize> = first.iter().map(|&x| (x + row % sides) % sides).collect();
    if row >= sides {
        // Odd counts: the second half of the design is the first reversed.
        order.reverse();
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order is a Williams design: over a full cycle each side runs at
    /// each position equally often and right after every other side
    /// equally often; two sides alternate.
    #[test]
    fn pass_orders_are_balanced_for_position_and_for_the_side_before() {
        assert_eq!((0..4).map(|r| pass_order(r, 2)).collect::<Vec<_>>(), [[0, 1], [1, 0], [0, 1], [1, 0]]);
        for n in 1..=7usize {
            let rows = if n.is_multiple_of(2) { n } else { 2 * n };
            let mut at = vec![vec![0usize; n]; n];
            let mut after = vec![vec![0usize; n]; n];
            for r in 0..rows {
                let order = pass_order(r, n);
                let mut seen = order.clone();
                seen.sort_unstable();
                assert_eq!(seen, (0..n).collect::<Vec<_>>(), "round {r} of {n} runs every side once");
                for (k, &side) in order.iter().enumerate() {
                    at[side][k] += 1;
                }
                for w in order.windows(2) {
                    after[w[1]][w[0]] += 1;
                }
                assert_eq!(pass_order(r + rows, n), order, "the design repeats");
            }
            assert!(at.iter().flatten().all(|&c| c == rows / n), "{n} sides: positions {at:?}");
            for (side, before) in after.iter().enumerate() {
                for (other, &c) in before.iter().enumerate() {
                    let want = if side == other { 0 } else { rows / n };
                    assert_eq!(c, want, "{n} sides: {side} right after {other}");
                }
            }
        }
    }

    #[test]
    fn a_tail_keeps_the_last_characters_whole() {
        assert_eq!(tail("abcdef", 3), "def");
        assert_eq!(tail("ab", 3), "ab");
        assert_eq!(tail("abc", 0), "");
        assert_eq!(tail("x–yé", 2), "yé", "characters, not bytes");
    }

    #[test]
    fn the_last_json_line_is_the_answer() {
        let v = last_json_line("loading\n{\"a\": 1}\nnoise\n{\"a\": 2}\ndone\n", "loader").expect("json");
        assert_eq!(v["a"], 2);
        assert!(last_json_line("no json here\n", "loader").is_err());
    }

    #[test]
    fn env_capture_records_the_listed_variables_that_are_set() {
        let env = |name: &str| match name {
            "PREDICTIO_BENCH_LAUNCH_ONLY" => Some("clang,gdb".into()),
            "PREDICTIO_BTREE_GROWTH" => Some("4".into()),
            "PATH" | "PREDICTIO_NOT_A_BENCH_VARIABLE" => Some("x".into()),
            _ => None,
        };
        let captured = BenchVar::captured_from(env);
        assert_eq!(
            captured.into_iter().collect::<Vec<_>>(),
            [
                ("PREDICTIO_BENCH_LAUNCH_ONLY".to_owned(), "clang,gdb".to_owned()),
                ("PREDICTIO_BTREE_GROWTH".to_owned(), "4".to_owned()),
            ]
        );
        assert!(BenchVar::captured_from(|_| None).is_empty());
    }

    #[test]
    fn bench_vars_are_listed_once() {
        let mut names: Vec<&str> = BenchVar::ALL.iter().map(|v| v.name()).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n, "a name listed twice");
        assert!(BenchVar::ALL.contains(&BenchVar::LaunchOnly) && BenchVar::ALL.contains(&BenchVar::PredictioBin));
    }

    #[test]
    fn cpu_times_leave_steal_out() {
        let line = "cpu  356990 2982 103132 1181045 77322 0 11325 46056 0 0";
        let busy = 356990 + 2982 + 103132 + 11325;
        assert_eq!(cpu_times_of(line), Some((busy, busy + 1181045 + 77322)));
        assert_eq!(cpu_times_of("cpu0 1 2 3 4 5 6 7 8"), None, "the all-CPU line only");
        assert_eq!(cpu_times_of("cpu 1 2"), None);
    }
}
