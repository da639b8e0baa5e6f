//! `model-load`: large structured files read cold by real Python libraries
//! that have no predictio adapter: a safetensors model through
//! `safetensors.safe_open` (numpy), a GGUF model through the `gguf`
//! package's reader (numpy memmap, every tensor copied out), and queries of
//! DuckDB over a Parquet table of 2 GB in 30 row groups, each touching some
//! of its columns (seeds 000 §4.3 and 003).
//!
//! The loaders are `model_load.py`, run by the Python of
//! `scripts/bench-deps.sh` (`/var/tmp/predictio-python`, or
//! `PREDICTIO_BENCH_PYTHON`). Per case, sides interleaved in a balanced
//! order, the file primed (read once with O_DIRECT, so that no side gets the
//! host's cache of it that another side warmed) and made cold before every
//! pass:
//!
//! - **baseline**: the loader alone;
//! - **peer**: a vLLM-style background prefetch: one thread of the loader
//!   reads the file from start to end in 16 MiB reads as the load starts;
//! - **predictio** (treatment): the loader, unchanged, beside `predictio
//!   daemon` as installed: the default configuration with the bench's own
//!   sockets and store, started (and settled) before the pass and stopped
//!   after it (for the DuckDB queries, with the opt-in `columns` policy
//!   added). It learns from what it observes: no hint, no adapter;
//! - **oracle**: a prefetch that knows what the load reads: one thread of
//!   the loader asks the kernel (`fadvise(WILLNEED)`) for those bytes in
//!   the order they are read, as the load starts (a model's every byte; a
//!   query's column chunks, row group by row group, found from the Parquet
//!   footer before the clock starts): what a policy that predicted the
//!   load perfectly could ask for, through the same kernel call;
//! - **ideal**: the loader right after the file was made resident by one
//!   sequential read, untimed, after the same drop_caches: a perfect
//!   prefetcher with unlimited lead, on the same cold memory (this VM gives
//!   freed memory back to its host, so a cold pass also pays for touching
//!   memory anew, which a warm pass does not).
//!
//! The time is the loader's own, as it measures it: after its imports, from
//! just before it opens the file to the last byte used. Closure is
//! (baseline − predictio) / (baseline − ideal). The answer (a digest of
//! every tensor, or of the query's rows) must be the same on every pass.
//! The daemon's CPU over each of its passes is recorded, split into its
//! executor's threads (the page-cache fill) and the rest.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::daemon_cost::{Daemon, daemon_config, daemon_home, model_file};
use crate::BenchOptions;
use crate::harness::{BenchError, BenchVar, Harness, IoContext};
use crate::report::{Case, Report, median};

/// The loaders (see the module docs).
const SCRIPT: &str = include_str!("model_load.py");

/// Where `scripts/bench-deps.sh` makes the loaders' Python.
pub const DEFAULT_PYTHON: &str = "/var/tmp/predictio-python/bin/python";

/// The Parquet table: rows and rows per row group (10 BIGINT/INTEGER
/// columns of hashed values, snappy: 2.08 GB, 30 row groups).
const PARQUET_ROWS: u64 = 30_000_000;
const PARQUET_GROUP: u64 = 1_000_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    Peer,
    Predictio,
    Ideal,
    Oracle,
}

const SIDES: [Side; 5] = [Side::Baseline, Side::Peer, Side::Predictio, Side::Ideal, Side::Oracle];

/// One loader on one file.
struct Load {
    name: String,
    file: PathBuf,
    /// The script's arguments after its path, before `--peer` or `--oracle`.
    args: Vec<String>,
    /// A query's reads: the columns (by index) and whether only the second
    /// half of the row groups; `None`: the whole file.
    reads: Option<(&'static [u32], bool)>,
}

impl Load {
    /// The bytes the load reads: a query's column chunks (from the Parquet
    /// footer), else the whole file.
    fn bytes(&self) -> Result<u64, BenchError> {
        let file = std::fs::File::open(&self.file).doing(|| format!("opening {}", self.file.display()))?;
        let Some((columns, second_half)) = self.reads else {
            return Ok(file.metadata().map_or(0, |m| m.len()));
        };
        let layout = predictio::parquet::ParquetLayout::read(&file)
            .map_err(|e| BenchError::Options(format!("the Parquet footer of {}: {e}", self.file.display())))?;
        let first = if second_half { layout.row_groups / 2 } else { 0 };
        Ok(layout.chunks.iter().filter(|c| c.row_group >= first && columns.contains(&c.column)).map(|c| c.len).sum())
    }
}

/// What one pass reported.
#[derive(Debug, Clone, Default)]
struct Pass {
    seconds: f64,
    answer: String,
    fill_ms: f64,
    other_ms: f64,
}

/// The Python, the script, the daemon's binary and configuration.
struct Runtime {
    python: PathBuf,
    script: PathBuf,
    me: PathBuf,
    home: PathBuf,
    /// The daemon's configuration: the default one...
    config: PathBuf,
    /// ...and for the Parquet queries, the default one with the opt-in
    /// `columns` policy.
    columns: PathBuf,
}

impl Runtime {
    fn new(dir: &Path) -> Result<Runtime, BenchError> {
        let python = BenchVar::BenchPython.get().map_or_else(|| PathBuf::from(DEFAULT_PYTHON), PathBuf::from);
        let probe = Command::new(&python).args(["-c", "import numpy, safetensors, gguf, duckdb"]).output();
        if !probe.is_ok_and(|o| o.status.success()) {
            return Err(BenchError::Options(format!(
                "{} cannot import numpy, safetensors, gguf and duckdb (run scripts/bench-deps.sh, or set \
                 PREDICTIO_BENCH_PYTHON)",
                python.display()
            )));
        }
        let script = dir.join("model_load.py");
        std::fs::write(&script, SCRIPT).doing(|| format!("writing {}", script.display()))?;
        let home = daemon_home(dir, "model-load")?;
        let config = daemon_config(&home, "model-load", "predictio.toml", &[], "")?;
        let columns = daemon_config(&home, "model-load", "predictio-columns.toml", &["columns"], "")?;
        Ok(Runtime { python, script, me: crate::harness::predictio_binary()?, home, config, columns })
    }

    fn run(&self, load: &Load, side: Side) -> Result<Pass, BenchError> {
        let daemon = match side {
            Side::Predictio => Some(Daemon::start(
                &self.me,
                if load.reads.is_some() { &self.columns } else { &self.config },
                &self.home.join("control.sock"),
                &self.home.join("daemon.log"),
            )?),
            _ => None,
        };
        if side == Side::Ideal {
            crate::harness::read_into_cache(&load.file)?;
        }
        let before = daemon.as_ref().map(Daemon::cpu_split);
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script).args(&load.args);
        match side {
            Side::Peer => _ = cmd.arg("--peer"),
            Side::Oracle => _ = cmd.arg("--oracle"),
            _ => {}
        }
        let out = cmd.output().doing(|| format!("running the {} loader", load.name));
        let mut pass = Pass::default();
        if let (Some(d), Some(before)) = (&daemon, before) {
            (pass.fill_ms, pass.other_ms) = d.cpu_ms_since(before);
        }
        if let Some(d) = daemon {
            d.stop()?;
        }
        let out = out?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail = crate::harness::tail(&stderr, 2000);
            return Err(BenchError::Options(format!("the {} loader failed ({}): {tail}", load.name, out.status)));
        }
        let v = crate::harness::last_json_line(&stdout, &format!("the {} loader", load.name))?;
        pass.seconds = v["seconds"].as_f64().unwrap_or(f64::NAN);
        pass.answer = v["answer"].to_string();
        Ok(pass)
    }

    /// The Parquet table under `dir`, written by DuckDB if it is not there.
    fn parquet(&self, dir: &Path) -> Result<PathBuf, BenchError> {
        let path = dir.join("model-load.parquet");
        let marker = dir.join("model-load.parquet.ok");
        let expect = format!("rows={PARQUET_ROWS} group={PARQUET_GROUP}\n");
        if path.exists() && std::fs::read_to_string(&marker).is_ok_and(|t| t == expect) {
            return Ok(path);
        }
        let _ = std::fs::remove_file(&marker);
        let tmp = dir.join(".model-load.parquet.tmp");
        let _ = std::fs::remove_file(&tmp);
        let status = Command::new(&self.python)
            .arg(&self.script)
            .arg("make-parquet")
            .arg(&tmp)
            .args([PARQUET_ROWS.to_string(), PARQUET_GROUP.to_string()])
            .status()
            .doing(|| "writing the Parquet table".into())?;
        if !status.success() {
            return Err(BenchError::Options(format!("writing the Parquet table failed ({status})")));
        }
        std::fs::rename(&tmp, &path).doing(|| format!("renaming {}", tmp.display()))?;
        std::fs::write(&marker, expect).doing(|| format!("writing {}", marker.display()))?;
        Ok(path)
    }
}

fn measure(h: &Harness, rt: &Runtime, load: &Load, pairs: usize) -> Result<Case, BenchError> {
    let mut passes: [Vec<Pass>; 5] = Default::default();
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        h.prime(&[&load.file])?;
        resident_before = resident_before.max(h.round(pair, SIDES.len(), &[&load.file], |s| {
            let pass = rt.run(load, SIDES[s])?;
            h.step(format!("{} pair {} {:?}: {:.2} s", load.name, pair + 1, SIDES[s], pass.seconds));
            passes[s].push(pass);
            Ok(())
        })?);
    }
    // Warm: the file resident since the run before, the best of three.
    let mut warm = f64::INFINITY;
    for _ in 0..4 {
        warm = warm.min(rt.run(load, Side::Baseline)?.seconds);
    }
    h.step(format!("{} warm", load.name));

    let secs = |s: usize| passes[s].iter().map(|p| p.seconds).collect::<Vec<_>>();
    let mut case = Case::ab(&load.name, secs(0), secs(2));
    // The bytes the load reads over the device's best rate: no prefetcher
    // that starts with the load can beat it, whatever the ideal.
    let bytes = load.bytes()?;
    case.limit_s = Some(bytes as f64 / h.bandwidth().max(1.0));
    case.extra.insert("bytes_read".into(), bytes.into());
    case.warm_s = Some(warm);
    case.resident_before = resident_before;
    let first = passes[0].first().map(|p| p.answer.clone()).unwrap_or_default();
    case.answers_identical = !first.is_empty() && passes.iter().flatten().all(|p| p.answer == first);
    let ratio = |b: &[f64], t: &[f64]| median(&b.iter().zip(t).map(|(b, t)| b / t.max(1e-12)).collect::<Vec<_>>());
    let base = median(&secs(0));
    let ideal = median(&secs(3));
    let closure = |t: f64| 100.0 * (base - t) / (base - ideal);
    let e = &mut case.extra;
    e.insert("command".into(), format!("python model_load.py {}", load.args.join(" ")).into());
    e.insert("file_bytes".into(), bytes.into());
    e.insert("peer".into(), "vLLM-style: one thread reading the file in 16 MiB reads as the load starts".into());
    e.insert("peer_s".into(), secs(1).into());
    e.insert("peer_ratio_median".into(), ratio(&secs(0), &secs(1)).into());
    e.insert("ideal_s".into(), secs(3).into());
    e.insert("ideal_median_s".into(), ideal.into());
    e.insert("ideal_ratio_median".into(), ratio(&secs(0), &secs(3)).into());
    e.insert("closure_ideal_pct".into(), closure(median(&secs(2))).into());
    e.insert("peer_closure_ideal_pct".into(), closure(median(&secs(1))).into());
    e.insert("oracle_s".into(), secs(4).into());
    e.insert("oracle_ratio_median".into(), ratio(&secs(0), &secs(4)).into());
    e.insert("oracle_closure_ideal_pct".into(), closure(median(&secs(4))).into());
    e.insert("answer".into(), first.into());
    let fill: Vec<f64> = passes[2].iter().map(|p| p.fill_ms).collect();
    let other: Vec<f64> = passes[2].iter().map(|p| p.other_ms).collect();
    e.insert("daemon_fill_cpu_ms_median".into(), median(&fill).into());
    e.insert("daemon_other_cpu_ms_median".into(), median(&other).into());
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let rt = Runtime::new(&options.dir)?;
    let script = |args: &[&str]| args.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let mut loads = Vec::new();
    let safetensors = model_file(&options.dir)?;
    let st = safetensors.display().to_string();
    loads.push(Load {
        name: "safetensors safe_open (numpy)".into(),
        file: safetensors,
        args: script(&["safetensors", &st]),
        reads: None,
    });
    if !options.quick {
        let (gguf, _) = crate::llm_model::ensure(&options.dir, 2)?;
        let g = gguf.display().to_string();
        let name = "gguf GGUFReader (numpy memmap)".into();
        loads.push(Load { name, file: gguf, args: script(&["gguf", &g]), reads: None });
    }
    let parquet = rt.parquet(&options.dir)?;
    let pq = parquet.display().to_string();
    // What each query reads (the script's READS): columns by index (id, k,
    // v1..v8), and whether only the second half of the row groups.
    type Query = (&'static str, &'static str, &'static [u32], bool);
    let group: Query = ("group", "4 of 10 columns", &[1, 2, 3, 4], false);
    let queries: &[Query] = if options.quick {
        &[group]
    } else {
        &[
            group,
            ("sums", "2 of 10 columns", &[8, 9], false),
            ("range", "1 of 10 columns, half the row groups", &[0, 6], true),
        ]
    };
    for &(query, what, columns, second_half) in queries {
        loads.push(Load {
            name: format!("duckdb parquet {query} ({what}), columns policy"),
            file: parquet.clone(),
            args: script(&["duckdb", &pq, query]),
            reads: Some((columns, second_half)),
        });
    }
    if let Some(only) = BenchVar::ModelOnly.get_string() {
        let words: Vec<&str> = only.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
        loads.retain(|load| words.iter().any(|w| load.name.contains(w)));
    }
    let h = Harness::new(options, (loads.len() * (pairs * SIDES.len() + 1)) as u64)?;
    let mut cases = Vec::new();
    for load in &loads {
        cases.push(measure(&h, &rt, load, pairs)?);
    }
    h.finish();
    let mut notes: Vec<String> = cases
        .iter()
        .map(|c| {
            let get = |k: &str| c.extra.get(k).and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN);
            format!(
                "{}: {:.2}x beside the daemon (median of pairs), closing {:.0} % of the gap to the ideal (the file \
                 made resident just before: {:.2}x); the vLLM-style peer {:.2}x, closing {:.0} %; the oracle {:.2}x, \
                 closing {:.0} %; daemon CPU {:.0} ms filling, {:.0} ms other; answers {}",
                c.name,
                c.ratio_median,
                get("closure_ideal_pct"),
                get("ideal_ratio_median"),
                get("peer_ratio_median"),
                get("peer_closure_ideal_pct"),
                get("oracle_ratio_median"),
                get("oracle_closure_ideal_pct"),
                get("daemon_fill_cpu_ms_median"),
                get("daemon_other_cpu_ms_median"),
                if c.answers_identical { "identical" } else { "DIFFER" },
            )
        })
        .collect();
    if options.quick {
        notes.push("--quick: the safetensors load and one query, 2 pairs at most: a smoke test, not a result".into());
    }
    notes.push(
        "timed by the loader itself, after its imports: from just before it opens the file to the last byte used"
            .into(),
    );
    Ok(Report {
        workload: "model-load".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "loaders": "crates/predictio-bench/src/workloads/model_load.py: safetensors 0.8.0, gguf 0.19.0, duckdb 2.0.1, numpy 2.4.6",
            "python": rt.python.display().to_string(),
            "pairs": pairs,
            "sides": ["baseline", "peer", "predictio", "ideal", "oracle"],
            "predictio": "predictio daemon, default configuration with its own sockets and store (for the DuckDB queries, with the opt-in columns policy added), started before each of its passes",
            "parquet": {"rows": PARQUET_ROWS, "row_group_rows": PARQUET_GROUP, "columns": 10, "compression": "snappy"},
            "primed": crate::harness::PRIMED_NOTE,
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}
