//! `launch-daemon`: cold starts of real programs with the daemon as a user
//! installs it, against the same programs without it.
//!
//! The daemon is `predictio daemon` (this very binary) on the default
//! configuration, with its own sockets and profile store under the bench
//! directory, and `[observe] assume_missing` set to `--assume-missing` (a
//! kernel profile of an older kernel: see `tests/old_kernel.rs`). Nothing is
//! prepared for it: for each program,
//!
//! 1. **Training** (not measured): the daemon is started, the program is
//!    launched [`TRAIN_RUNS`] times from a cold cache, and the daemon is
//!    stopped: it learned what it saw, as it would at a user's first
//!    launches.
//! 2. **Measured pairs**, interleaved and alternating which runs first, cold
//!    before every pass (drop_caches): **baseline** with no daemon running,
//!    and **daemon**, started fresh before its pass (as at boot) and given
//!    [`super::daemon_cost`]'s settling time, then the program launched and
//!    timed from just before the spawn to its exit, and the daemon stopped.
//!    stdout and exit status must match the first baseline pass's.
//! 3. **Warm** (the limit): one launch to warm the cache, then the median of
//!    [`WARM_RUNS`] more. Closure = (baseline − daemon) / (baseline − warm).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::daemon_cost::{Daemon, daemon_config, daemon_home};
use super::launch::{Pass, Program, programs, spawn_and_wait};
use crate::BenchOptions;
use crate::harness::{BenchError, BenchVar, Harness, IoContext, settle};
use crate::report::{Case, Report, median};

/// Cold launches the daemon learns from before the measured pairs.
const TRAIN_RUNS: usize = 3;
/// Warm launches whose median is a program's limit.
const WARM_RUNS: usize = 5;

/// The daemon's files and configuration.
pub(crate) struct Setup {
    me: PathBuf,
    home: PathBuf,
    config: PathBuf,
}

impl Setup {
    /// The daemon of workload `bench`, its home under `dir`.
    pub(crate) fn new(dir: &Path, bench: &str, assume_missing: &[String]) -> Result<Setup, BenchError> {
        let me = crate::harness::predictio_binary()?;
        let home = daemon_home(dir, bench)?;
        let missing: Vec<String> = assume_missing.iter().map(|m| format!("{m:?}")).collect();
        let launch = BenchVar::DaemonLaunch.get_string().map_or_else(String::new, |l| format!("{l}\n"));
        let observe = format!("{launch}[observe]\nassume_missing = [{}]\n", missing.join(", "));
        let config = daemon_config(&home, bench, "predictio.toml", &[], &observe)?;
        Ok(Setup { me, home, config })
    }

    /// Starts the daemon, its log in `log` (under the bench's directory).
    pub(crate) fn start(&self, log: &str) -> Result<Daemon, BenchError> {
        Daemon::start(&self.me, &self.config, &self.home.join("control.sock"), &self.home.join(log))
    }

    /// Bytes the running daemon's executor issued so far (0 if `stat`
    /// cannot tell).
    pub(crate) fn issued_bytes(&self) -> u64 {
        let out = std::process::Command::new(&self.me)
            .args(["stat", "--json", "--control"])
            .arg(self.home.join("control.sock"))
            .output();
        out.ok()
            .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
            .and_then(|s| s["executor"]["total"]["issued_bytes"].as_u64())
            .unwrap_or(0)
    }

    /// Runs and files of the stored profile of `argv`'s launch.
    pub(crate) fn learned(&self, argv: &[String]) -> (u64, u64) {
        let Ok(launch) = predictio::launch::command::launch_of(argv) else { return (0, 0) };
        let out = std::process::Command::new(&self.me)
            .args(["profile", "list", "--json", "--store"])
            .arg(self.home.join("store"))
            .output();
        let list = out.ok().and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok());
        let entry = list
            .as_ref()
            .and_then(|l| l.as_array())
            .and_then(|l| l.iter().find(|e| e["exe"].as_str() == Some(launch.exe.path.as_str())).cloned());
        entry.map_or((0, 0), |e| (e["runs"].as_u64().unwrap_or(0), e["files"].as_u64().unwrap_or(0)))
    }

    /// Training: the daemon started, `argv` launched [`TRAIN_RUNS`] times
    /// from a cold cache, the daemon stopped. Returns the runs and files of
    /// the profile it stored.
    pub(crate) fn train(&self, h: &Harness, argv: &[String]) -> Result<(u64, u64), BenchError> {
        let daemon = self.start("training.log")?;
        for _ in 0..TRAIN_RUNS {
            h.make_cold(&[])?;
            settle();
            spawn_and_wait(argv)?;
        }
        // The learner names and stores a launch after the program exits.
        std::thread::sleep(Duration::from_secs(1));
        daemon.stop()?;
        Ok(self.learned(argv))
    }

    /// One timed pass with the daemon: started fresh (as at boot), the
    /// cache made cold, `argv` launched and timed, the daemon stopped.
    /// Returns the pass, the bytes its executor issued and the cold
    /// check's resident fraction.
    pub(crate) fn pass(&self, h: &Harness, argv: &[String]) -> Result<(Pass, u64, f64), BenchError> {
        let daemon = self.start("daemon.log")?;
        let before = self.issued_bytes();
        let resident = h.make_cold(&[])?;
        settle();
        let run = spawn_and_wait(argv)?;
        // The replay's reads finish within the launch or soon after.
        std::thread::sleep(Duration::from_millis(200));
        let issued = self.issued_bytes().saturating_sub(before);
        daemon.stop()?;
        Ok((run, issued, resident))
    }
}

fn measure(h: &Harness, setup: &Setup, prog: &Program, pairs: usize) -> Result<Case, BenchError> {
    let argv = &prog.argv;
    h.say(format!("{}: the daemon learns {TRAIN_RUNS} cold launches", prog.name));
    let (runs, files) = setup.train(h, argv)?;

    let mut secs: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut issued = Vec::new();
    let mut reference: Option<(Vec<u8>, Option<i32>)> = None;
    let mut identical = true;
    let mut resident: f64 = 0.0;
    for pair in 0..pairs {
        for k in 0..2 {
            let side = (k + pair) % 2;
            let run: Pass = if side == 1 {
                let (run, bytes, cold) = setup.pass(h, argv)?;
                issued.push(bytes as f64);
                resident = resident.max(cold);
                run
            } else {
                resident = resident.max(h.make_cold(&[])?);
                settle();
                spawn_and_wait(argv)?
            };
            match &reference {
                None => reference = Some((run.stdout.clone(), run.status)),
                Some((out, status)) => identical &= *out == run.stdout && *status == run.status,
            }
            secs[side].push(run.seconds);
            h.step(format!(
                "{} pair {}/{pairs}: {}",
                prog.name,
                pair + 1,
                if side == 0 { "baseline" } else { "daemon" }
            ));
        }
    }
    spawn_and_wait(argv)?;
    let mut warm = Vec::with_capacity(WARM_RUNS);
    for _ in 0..WARM_RUNS {
        let run = spawn_and_wait(argv)?;
        identical &= reference.as_ref().is_some_and(|r| r.0 == run.stdout && r.1 == run.status);
        warm.push(run.seconds);
    }
    let warm_s = median(&warm);
    let [base, treat] = secs;
    let (b, d) = (median(&base), median(&treat));
    let mut case = Case::ab(prog.name, base, treat);
    case.warm_s = Some(warm_s);
    case.limit_s = Some(warm_s);
    case.resident_before = resident;
    case.answers_identical = identical;
    case.issued_bytes = median(&issued) as u64;
    let e = &mut case.extra;
    e.insert("command".into(), argv.join(" ").into());
    e.insert("reduction_pct".into(), (100.0 * (1.0 - d / b.max(1e-12))).into());
    e.insert("closure".into(), closure(b, d, warm_s).into());
    e.insert("profile_runs".into(), runs.into());
    e.insert("profile_files".into(), files.into());
    Ok(case)
}

/// The share of the cold-to-warm gap closed: (baseline − treatment) /
/// (baseline − warm); 0 where there is no gap.
pub(crate) fn closure(baseline: f64, treatment: f64, warm: f64) -> f64 {
    let gap = baseline - warm;
    if gap > 0.0 { (baseline - treatment) / gap } else { 0.0 }
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    std::fs::create_dir_all(&options.dir).doing(|| format!("creating {}", options.dir.display()))?;
    let (mut progs, mut notes) = programs(&options.dir, options.quick)?;
    if !options.programs.is_empty() {
        progs.retain(|p| options.programs.iter().any(|want| p.name.contains(want.as_str())));
        if progs.is_empty() {
            return Err(BenchError::Options(format!(
                "--programs {}: none of the installed launch programs matches",
                options.programs.join(",")
            )));
        }
    }
    let setup = Setup::new(&options.dir, "launch-daemon", &options.assume_missing)?;
    let h = Harness::new(options, (progs.len() * pairs * 2) as u64)?;
    let mut cases = Vec::new();
    for prog in &progs {
        cases.push(measure(&h, &setup, prog, pairs)?);
    }
    h.finish();
    let reductions: Vec<f64> = cases.iter().filter_map(|c| c.extra.get("reduction_pct")?.as_f64()).collect();
    let closures: Vec<f64> = cases.iter().filter_map(|c| c.extra.get("closure")?.as_f64()).collect();
    let mean = |v: &[f64]| if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 };
    notes.push(format!(
        "the daemon as installed{}: mean reduction {:.1} % (smallest {:.1} %), mean closure {:.0} % of the \
         cold-to-warm gap",
        if options.assume_missing.is_empty() {
            String::new()
        } else {
            format!(" as if the kernel lacked {}", options.assume_missing.join(", "))
        },
        mean(&reductions),
        reductions.iter().copied().fold(f64::INFINITY, f64::min),
        100.0 * mean(&closures)
    ));
    if options.quick {
        notes.push("--quick: one program, 2 pairs: a smoke test, not a result".into());
    }
    let workload = if options.assume_missing.is_empty() {
        "launch-daemon".to_owned()
    } else {
        format!("launch-daemon-without-{}", options.assume_missing.join("-"))
    };
    Ok(Report {
        workload,
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "pairs": pairs,
            "training": format!("{TRAIN_RUNS} cold launches with the daemon running (it learns them itself)"),
            "daemon": "predictio daemon, default configuration, own sockets and store, started before each of its passes",
            "assume_missing": options.assume_missing,
            "warm_runs": WARM_RUNS,
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
    fn closure_is_the_share_of_the_cold_to_warm_gap() {
        assert!((closure(1.0, 0.6, 0.2) - 0.5).abs() < 1e-9);
        assert!((closure(1.0, 0.2, 0.2) - 1.0).abs() < 1e-9);
        assert!(closure(1.0, 1.1, 0.2) < 0.0, "slower is negative");
        assert_eq!(closure(0.2, 0.2, 0.3), 0.0, "no gap");
    }
}
