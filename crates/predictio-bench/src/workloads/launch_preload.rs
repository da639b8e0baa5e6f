//! The `preload` peer of the `launch` bench: Debian's adaptive readahead
//! daemon (preload 0.6.4), given its own training and then run, with its
//! learned state, around each of its measured passes.
//!
//! preload learns by sampling: every half `cycle` it scans `/proc` for
//! running processes and, half a cycle later, reads the maps of the new ones
//! it saw; from that it builds a Markov model over executables and, each
//! cycle, reads ahead the mapped files of the executables it predicts. Its
//! configuration here is Debian's, with two changes: `cycle = 2` (default 20
//! s) so that training fits in a minute or two, and `/root/` added to the
//! executable and map prefixes (rustup's `rustc` and pyenv's `ipython3` live
//! there; Debian's default would ignore them outright). Its state file, log
//! and configuration are the bench's own, never the system's.
//!
//! **Training** (not measured): preload runs while every program of the set
//! is launched in turn, cold and warm alternately, for
//! [`TRAIN_BUDGET`] (at least [`TRAIN_MIN_LAUNCHES`] launches each); then it
//! is stopped (it saves its state) and the state file is read back to see
//! which executables it learned. **Measured passes**: after the cold drop,
//! preload is started on that state and given [`PREDICT_WAIT`] (longer than
//! a cycle: it loads the state and predicts at start) to read ahead what it
//! predicts, then the program is timed from spawn to exit; then preload is
//! stopped (SIGTERM; it saves what it learned meanwhile, as a running daemon
//! would keep learning). The bytes it read are its `/proc/PID/io`
//! `read_bytes`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::harness::{BenchError, Harness, IoContext, Service};

/// preload's sampling cycle in this bench, seconds.
pub const CYCLE_S: u64 = 2;
/// Training time for the whole set.
pub const TRAIN_BUDGET: Duration = Duration::from_secs(90);
/// Launches per program during training, at least.
pub const TRAIN_MIN_LAUNCHES: usize = 4;
/// Time preload gets after it starts, before a measured launch.
pub const PREDICT_WAIT: Duration = Duration::from_millis(CYCLE_S * 1000 + 500);

/// The daemon's binary, if installed.
pub fn find() -> Option<PathBuf> {
    ["/usr/sbin/preload", "/sbin/preload", "/usr/bin/preload"].iter().map(PathBuf::from).find(|p| p.is_file())
}

/// What preload's state file says it learned.
#[derive(Clone, Debug, Default)]
pub struct Learned {
    /// Executables (paths) in the state.
    pub exes: Vec<String>,
    /// Mapped-file regions in the state.
    pub maps: usize,
    /// Markov chains (pairs of executables).
    pub markovs: usize,
}

impl Learned {
    /// Whether an executable named like `name` (its file name starts with
    /// it) was learned.
    pub fn knows(&self, name: &str) -> bool {
        self.exes.iter().any(|e| Path::new(e).file_name().is_some_and(|f| f.to_string_lossy().starts_with(name)))
    }

    /// One line for the notes.
    pub fn describe(&self) -> String {
        format!(
            "{} executables ({}), {} mapped regions, {} Markov chains",
            self.exes.len(),
            self.exes.join(", "),
            self.maps,
            self.markovs
        )
    }
}

/// The preload peer (see the module docs).
pub struct Preload {
    binary: PathBuf,
    conf: PathBuf,
    state: PathBuf,
    log: PathBuf,
}

/// One running preload.
pub struct Running {
    service: Service,
}

impl Running {
    /// Bytes preload read from storage so far (`/proc/PID/io` `read_bytes`).
    pub fn read_bytes(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/io", self.service.id()))
            .ok()
            .and_then(|io| io.lines().find_map(|l| l.strip_prefix("read_bytes:").and_then(|v| v.trim().parse().ok())))
            .unwrap_or(0)
    }

    /// Stops it with SIGTERM (it saves its state) and waits.
    pub fn stop(self) -> Result<(), BenchError> {
        self.service.stop()
    }
}

impl Preload {
    /// Sets preload up in `dir` (configuration, an empty state), if it is
    /// installed.
    pub fn setup(dir: &Path) -> Result<Option<Preload>, BenchError> {
        let Some(binary) = find() else { return Ok(None) };
        let dir = dir.join("launch-preload");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).doing(|| format!("creating {}", dir.display()))?;
        let conf = dir.join("preload.conf");
        std::fs::write(
            &conf,
            format!(
                "[model]\ncycle = {CYCLE_S}\nusecorrelation = true\nminsize = 2000000\nmemtotal = -10\nmemfree = 50\n\
                 memcached = 0\n[system]\ndoscan = true\ndopredict = true\nautosave = 3600\n\
                 mapprefix = /usr/;/lib;/var/cache/;/root/;!/\nexeprefix = !/usr/sbin/;!/usr/local/sbin/;/usr/;/root/;!/\n\
                 processes = 30\nsortstrategy = 3\n"
            ),
        )
        .doing(|| format!("writing {}", conf.display()))?;
        Ok(Some(Preload { binary, conf, state: dir.join("preload.state"), log: dir.join("preload.log") }))
    }

    /// Starts preload on its state, in the foreground (our child).
    pub fn start(&self) -> Result<Running, BenchError> {
        let child = Command::new(&self.binary)
            .arg("--foreground")
            .arg("--conffile")
            .arg(&self.conf)
            .arg("--statefile")
            .arg(&self.state)
            .arg("--logfile")
            .arg(&self.log)
            .arg("--verbose")
            .arg("4")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .doing(|| format!("starting {}", self.binary.display()))?;
        Ok(Running { service: Service::new(child, "preload") })
    }

    /// Trains preload on `programs` (see the module docs). Returns the
    /// training wall time, the launches of each program and what was
    /// learned.
    pub fn train(
        &self,
        h: &Harness,
        programs: &[Vec<String>],
        budget: Duration,
    ) -> Result<(f64, Vec<usize>, Learned), BenchError> {
        let started = Instant::now();
        let running = self.start()?;
        let mut launches = vec![0usize; programs.len()];
        let mut round = 0usize;
        while started.elapsed() < budget || launches.iter().any(|&n| n < TRAIN_MIN_LAUNCHES) {
            for (i, argv) in programs.iter().enumerate() {
                if round.is_multiple_of(2) {
                    h.make_cold(&[])?;
                }
                Command::new(&argv[0])
                    .args(&argv[1..])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .doing(|| format!("running {}", argv.join(" ")))?;
                launches[i] += 1;
            }
            round += 1;
            if started.elapsed() > budget * 3 {
                break;
            }
        }
        running.stop()?;
        Ok((started.elapsed().as_secs_f64(), launches, self.learned()))
    }

    /// Reads what the state file holds.
    pub fn learned(&self) -> Learned {
        let mut learned = Learned::default();
        let Ok(text) = std::fs::read_to_string(&self.state) else { return learned };
        for line in text.lines() {
            let mut fields = line.split('\t');
            match fields.next() {
                Some("EXE") => {
                    if let Some(uri) = fields.next_back() {
                        learned.exes.push(uri.trim_start_matches("file://").to_owned());
                    }
                }
                Some("MAP") => learned.maps += 1,
                Some("MARKOV") => learned.markovs += 1,
                _ => {}
            }
        }
        learned
    }
}
