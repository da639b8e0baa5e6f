//! `sqlite-scan`: seed 000 §4.2 — cold range scans over a fragmented SQLite
//! B-tree, run by a real SQLite program.
//!
//! Two tables (each built once, cached in the data directory), 1 M rows
//! with 400-byte random values (`--quick`: 200 K):
//!
//! - **rowid** (`scan-*`, `point`): YCSB-style keys `user%010d`, inserted
//!   in a shuffled order in one transaction so that leaves are scattered
//!   over the file (≥ 500 MB, 4 KiB pages);
//!   `SELECT key, value … WHERE id >= ? ORDER BY id LIMIT N` (the rowid is
//!   the key's number, so rowid order is key order), or a point read.
//! - **index** (`index-*`): the ordinary schema `t(id INTEGER PRIMARY KEY,
//!   k TEXT, v BLOB)` with `CREATE INDEX t_k ON t(k)`, 8 KiB pages, rows
//!   inserted in a random order of `k` (≥ 400 MB);
//!   `SELECT k, v … WHERE k >= ? ORDER BY k LIMIT N`: each row is a rowid
//!   lookup at a random place in the table.
//!
//! Each pass is one `/usr/bin/python3` process (Debian's `sqlite3` module,
//! which can load extensions). In the in-process cases it opens the
//! database and times — inside the program, with process start, the
//! extension's load and opening outside the timed region — several queries
//! from random start keys. In the `fresh-*` cases it runs one query, timed
//! from before the extension's load to its last row: what a script that
//! opens SQLite, runs a query and exits waits for. It prints the elapsed
//! time and a SHA-256 of every row returned.
//!
//! Sides, interleaved in a balanced order, cold (`drop_caches`) before
//! every pass, the same start keys for every side within a pair, new keys
//! each pair, and the database read once with O_DIRECT before each pair so
//! that the host's cache of the virtual disk holds it for every side
//! ([`crate::harness::PRIMED_NOTE`]):
//!
//! - **baseline**: the program as is.
//! - **adapter** (treatment): the program loads `libpredictio_sqlite.so`
//!   (`load_extension`, from a copy installed in the data directory) before
//!   opening the database: the loader's VFS shim times SQLite's reads and,
//!   once they have waited long enough, loads the runtime library, which
//!   parses the interior pages SQLite reads and drives the `btree` policy
//!   in-process.
//! - **nochange** (`nochange_s`): the unmodified program under
//!   `predictio run` with its default policies, as a user runs it (this
//!   binary): eBPF observes its reads, the pipeline recognises the SQLite
//!   file and parses the pages it sees read from the page cache
//!   ([`predictio::btree::observe`]): descents go to the `btree` policy,
//!   the table leaves of an index scan's rowids ahead to the `hints`
//!   policy.
//! - **daemon** (`daemon_s`; the fresh-* cases): the unmodified program
//!   beside `predictio daemon` as installed (default configuration, its own
//!   sockets and store), started before each of its passes as at boot, so
//!   that the one query is the first it sees of the database.
//!
//! Per case: each pair's ratio (baseline / side), the closure of each side
//! (the share of the cold-to-warm gap closed, from the medians), answers
//! identical across every pass, the resident fraction before each pass, issued bytes (the
//! executor's count) and wasted bytes (pages resident after the side's pass
//! beyond those resident after the baseline's pass with the same keys, i.e.
//! prefetched and never needed), and the limit: the warm time and the pages
//! the queries touch over the device's 4 KiB IOPS at queue depth 64.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::daemon_cost::{Daemon, daemon_config, daemon_home};
use crate::BenchOptions;
use crate::harness::{BenchError, BenchVar, Harness, IoContext, XorShift, median_u64, settle};
use crate::report::{Case, Report, median};

/// The SQLite program (builder and query runner).
const SCRIPT: &str = include_str!("sqlite_scan.py");

/// Bytes of each value.
const VALUE_BYTES: u64 = 400;

/// Seed of the insertion order and the values.
const BUILD_SEED: u64 = 1;

/// The sides, in their base order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    Adapter,
    NoChange,
    Daemon,
}

const SIDES: [Side; 4] = [Side::Baseline, Side::Adapter, Side::NoChange, Side::Daemon];

/// The sides of a case: the daemon's only for the fresh-* cases (a process
/// that runs one query, the shape a daemon serves without any change).
fn sides_of(spec: &CaseSpec) -> &'static [Side] {
    if spec.fresh { &SIDES } else { &SIDES[..3] }
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Adapter => "adapter",
            Side::NoChange => "nochange",
            Side::Daemon => "daemon",
        }
    }
}

/// The two tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Schema {
    /// The YCSB table: rowid order is key order, a range scan walks the
    /// table B-tree.
    Rowid,
    /// A rowid table reached through a secondary index on a key inserted
    /// in random order: each row of a key-range scan is a rowid lookup at
    /// a random place in the table.
    Index,
    /// The YCSB table with 16 KiB pages: each leaf is four 4 KiB pages of
    /// the page cache, all of which a prefetch must bring in.
    Large,
}

impl Schema {
    fn name(self) -> &'static str {
        match self {
            Schema::Rowid => "rowid",
            Schema::Index => "index",
            Schema::Large => "rowid-16k",
        }
    }
}

/// One case: the table, rows per query and queries per pass; `fresh`: each
/// pass is a new process running one query, timed from before the
/// extension's load (see `sqlite_scan.py fresh`).
struct CaseSpec {
    name: &'static str,
    schema: Schema,
    limit: u64,
    queries: usize,
    fresh: bool,
}

const fn case(name: &'static str, schema: Schema, limit: u64, queries: usize, fresh: bool) -> CaseSpec {
    CaseSpec { name, schema, limit, queries, fresh }
}

const CASES: [CaseSpec; 19] = [
    case("scan-10", Schema::Rowid, 10, 200, false),
    case("scan-100", Schema::Rowid, 100, 60, false),
    case("scan-1000", Schema::Rowid, 1000, 10, false),
    case("scan-10000", Schema::Rowid, 10000, 3, false),
    case("point", Schema::Rowid, 1, 1000, false),
    case("index-100", Schema::Index, 100, 20, false),
    case("index-1000", Schema::Index, 1000, 3, false),
    case("index-10000", Schema::Index, 10000, 1, false),
    case("index-point", Schema::Index, 1, 300, false),
    case("large-100", Schema::Large, 100, 60, false),
    case("large-1000", Schema::Large, 1000, 10, false),
    case("fresh-scan-10", Schema::Rowid, 10, 1, true),
    case("fresh-scan-1000", Schema::Rowid, 1000, 1, true),
    case("fresh-point", Schema::Rowid, 1, 1, true),
    case("fresh-index-10", Schema::Index, 10, 1, true),
    case("fresh-index-100", Schema::Index, 100, 1, true),
    case("fresh-index-1000", Schema::Index, 1000, 1, true),
    case("fresh-index-10000", Schema::Index, 10000, 1, true),
    case("fresh-index-point", Schema::Index, 1, 1, true),
];

/// Niceness of every pass's processes (the program, and `predictio run`
/// with it): the same for every side, so that other load on a shared
/// machine perturbs the timed queries less.
const NICE: &str = "-15";

/// What one pass reported.
#[derive(Debug)]
struct Pass {
    elapsed_s: f64,
    rows: u64,
    sha256: String,
    /// Bytes the prefetcher issued (treatment sides).
    issued_bytes: u64,
    /// Pages of the database resident right after the pass.
    resident_pages: u64,
}

/// Everything a pass needs to run.
struct Setup {
    python: PathBuf,
    script: PathBuf,
    /// The database of each [`Schema`] a case uses.
    rowid_db: Option<PathBuf>,
    index_db: Option<PathBuf>,
    large_db: Option<PathBuf>,
    extension: PathBuf,
    predictio: PathBuf,
    /// The daemon side's home (sockets, store, log) and configuration.
    daemon_home: PathBuf,
    daemon_config: PathBuf,
}

impl Setup {
    fn db(&self, schema: Schema) -> Result<&Path, BenchError> {
        match schema {
            Schema::Rowid => self.rowid_db.as_deref(),
            Schema::Index => self.index_db.as_deref(),
            Schema::Large => self.large_db.as_deref(),
        }
        .ok_or_else(|| BenchError::Options(format!("no {} table was built", schema.name())))
    }
}

fn python() -> PathBuf {
    // Debian's python3 has load_extension; a python3 earlier on PATH (pyenv)
    // may not.
    let debian = Path::new("/usr/bin/python3");
    if debian.exists() { debian.to_path_buf() } else { PathBuf::from("python3") }
}

/// The extension as a program loads it once installed: the loader
/// `libpredictio_sqlite.so` (next to this binary, or
/// `PREDICTIO_SQLITE_EXTENSION`) and the runtime library beside it, copied
/// into `<dir>/sqlite-extension/`. Not loaded from the build tree: a cold
/// lookup in `target/release/`, a directory of thousands of entries, reads
/// more directory blocks than loading the loader itself reads.
fn extension(dir: &Path) -> Result<PathBuf, BenchError> {
    let loader = match BenchVar::SqliteExtension.get() {
        Some(path) => PathBuf::from(path),
        None => {
            std::env::current_exe().doing(|| "locating this binary".into())?.with_file_name("libpredictio_sqlite.so")
        }
    };
    let runtime = loader.with_file_name("libpredictio_sqlite_runtime.so");
    for file in [&loader, &runtime] {
        if !file.exists() {
            return Err(BenchError::Options(format!(
                "{} not found: build it with `cargo build --release -p predictio-sqlite` (or set PREDICTIO_SQLITE_EXTENSION to the loader, with the runtime beside it)",
                file.display()
            )));
        }
    }
    let installed = dir.join("sqlite-extension");
    std::fs::create_dir_all(&installed).doing(|| format!("creating {}", installed.display()))?;
    for file in [&loader, &runtime] {
        let name = file.file_name().unwrap_or_default();
        let (to, tmp) = (installed.join(name), installed.join(".installing"));
        std::fs::copy(file, &tmp).doing(|| format!("copying {}", file.display()))?;
        std::fs::rename(&tmp, &to).doing(|| format!("installing {}", to.display()))?;
    }
    Ok(installed.join(loader.file_name().unwrap_or_default()))
}

/// The table, built once per row count and reused while its marker matches.
fn database(h: &Harness, setup_python: &Path, script: &Path, schema: Schema, rows: u64) -> Result<PathBuf, BenchError> {
    let dir = &h.options.dir;
    let stem = match schema {
        Schema::Rowid => "sqlite-scan",
        Schema::Index => "sqlite-index",
        Schema::Large => "sqlite-scan-16k",
    };
    let db = dir.join(format!("{stem}-{rows}.db"));
    let marker = dir.join(format!("{stem}-{rows}.ok"));
    let expect = |size: u64| format!("rows={rows} value_bytes={VALUE_BYTES} seed={BUILD_SEED} size={size}\n");
    if let (Ok(meta), Ok(text)) = (std::fs::metadata(&db), std::fs::read_to_string(&marker))
        && text == expect(meta.len())
    {
        return Ok(db);
    }
    h.say(format!("building the {} table ({rows} rows in random key order; once)", schema.name()));
    let tmp = dir.join(format!(".{stem}-{rows}.db.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let _ = std::fs::remove_file(&marker);
    let out = Command::new(setup_python)
        .arg(script)
        .arg(match schema {
            Schema::Rowid => "build",
            Schema::Index => "build-index",
            Schema::Large => "build-16k",
        })
        .args([tmp.to_string_lossy().into_owned(), rows.to_string(), VALUE_BYTES.to_string(), BUILD_SEED.to_string()])
        .output()
        .doing(|| "running the table builder".into())?;
    if !out.status.success() {
        return Err(BenchError::Options(format!(
            "building the table failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    std::fs::rename(&tmp, &db).doing(|| format!("renaming {}", tmp.display()))?;
    let size = std::fs::metadata(&db).doing(|| "stat".into())?.len();
    std::fs::write(&marker, expect(size)).doing(|| format!("writing {}", marker.display()))?;
    Ok(db)
}

/// The first JSON object in `text` that starts a line.
fn json_object(text: &str) -> Option<serde_json::Value> {
    let start = if text.starts_with('{') { 0 } else { text.find("\n{")? + 1 };
    serde_json::Deserializer::from_str(&text[start..]).into_iter::<serde_json::Value>().next()?.ok()
}

fn resident_pages(db: &Path) -> Result<u64, BenchError> {
    let file = predictio::FileRef::open(db)?;
    Ok(predictio::cache::residency(&file).doing(|| "cachestat".into())?.resident)
}

fn pass(setup: &Setup, spec: &CaseSpec, side: Side, ids: &[u64]) -> Result<Pass, BenchError> {
    let db = setup.db(spec.schema)?;
    let limit = spec.limit;
    let script = setup.script.to_string_lossy().into_owned();
    let db_arg = db.to_string_lossy().into_owned();
    let mut query: Vec<String> = if spec.fresh {
        let id = ids.first().copied().unwrap_or(1);
        vec![script, "fresh".into(), spec.schema.name().into(), db_arg, limit.to_string(), id.to_string()]
    } else {
        let ids = ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        vec![script, "query".into(), spec.schema.name().into(), db_arg, limit.to_string(), ids]
    };
    let control = setup.daemon_home.join("control.sock");
    let daemon = match side {
        Side::Daemon => Some(Daemon::start(
            &setup.predictio,
            &setup.daemon_config,
            &control,
            &setup.daemon_home.join("daemon.log"),
        )?),
        _ => None,
    };
    let mut cmd = Command::new("nice");
    cmd.args(["-n", NICE]);
    match side {
        Side::Baseline | Side::Daemon => cmd.arg(&setup.python),
        Side::Adapter => {
            query.push(setup.extension.to_string_lossy().into_owned());
            cmd.arg(&setup.python)
        }
        Side::NoChange => cmd.arg(&setup.predictio).args(["run", "--json", "--"]).arg(&setup.python),
    };
    let out = cmd.args(&query).output().doing(|| format!("running the {} pass", side.name()));
    let daemon_stat = match daemon {
        Some(daemon) => {
            let stat = Command::new(&setup.predictio).args(["stat", "--json", "--control"]).arg(&control).output();
            daemon.stop()?;
            stat.ok().map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        }
        None => None,
    };
    let out = out?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(BenchError::Options(format!("{} pass failed: {stdout} {stderr}", side.name())));
    }
    let result = json_object(&stdout)
        .ok_or_else(|| BenchError::Options(format!("{} pass printed no result: {stdout}", side.name())))?;
    let num = |v: &serde_json::Value, path: &[&str]| {
        path.iter().try_fold(v, |v, k| v.get(k)).and_then(serde_json::Value::as_u64).unwrap_or(0)
    };
    // `predictio run --json` and `predictio stat --json` report alike.
    let issued_of = |report: Option<&str>| {
        report.and_then(json_object).map_or(0, |report| num(&report, &["executor", "total", "issued_bytes"]))
    };
    let issued_bytes = match side {
        Side::Baseline => 0,
        Side::Adapter => num(&result, &["extension", "executor", "issued_bytes"]),
        Side::NoChange => issued_of(Some(&stderr)),
        Side::Daemon => issued_of(daemon_stat.as_deref()),
    };
    Ok(Pass {
        elapsed_s: result.get("elapsed_s").and_then(serde_json::Value::as_f64).unwrap_or(f64::NAN),
        rows: num(&result, &["rows"]),
        sha256: result.get("sha256").and_then(serde_json::Value::as_str).unwrap_or_default().to_owned(),
        issued_bytes,
        resident_pages: resident_pages(db)?,
    })
}

fn ratios(base: &[f64], side: &[f64]) -> Vec<f64> {
    base.iter().zip(side).map(|(b, t)| b / t.max(1e-12)).collect()
}

fn measure(h: &Harness, setup: &Setup, spec: &CaseSpec, rows: u64, pairs: usize) -> Result<Case, BenchError> {
    let db = setup.db(spec.schema)?;
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut issued: Vec<Vec<u64>> = vec![Vec::new(); SIDES.len()];
    let mut wasted: Vec<Vec<u64>> = vec![Vec::new(); SIDES.len()];
    let mut resident_before: Vec<f64> = Vec::new();
    let mut touched = Vec::new();
    let mut identical = true;
    let mut rows_per_pass = 0;
    let mut last_ids = Vec::new();
    let mut helper_wait = std::time::Duration::ZERO;
    for pair in 0..pairs {
        let mut rng = XorShift::new(0x5eed_0000 ^ (spec.limit << 16) ^ pair as u64);
        let span = rows.saturating_sub(spec.limit).max(1);
        // Rowid table: ids from 0 (the scan's start); index table: ids from
        // 1, whose keys are at random places in key order.
        let ids: Vec<u64> =
            (0..spec.queries).map(|_| rng.below(span) + u64::from(spec.schema == Schema::Index)).collect();
        let sides = sides_of(spec);
        let mut passes: Vec<Option<Pass>> = (0..sides.len()).map(|_| None).collect();
        h.prime(&[db])?;
        // Balanced for order and carry-over ([`crate::harness::pass_order`]).
        for s in crate::harness::pass_order(pair, sides.len()) {
            helper_wait = helper_wait.max(crate::harness::await_run_helpers());
            resident_before.push(h.make_cold(&[db])?);
            settle();
            let p = pass(setup, spec, sides[s], &ids)?;
            h.step(format!("{} pair {}/{pairs}: {} {:.1} ms", spec.name, pair + 1, sides[s].name(), p.elapsed_s * 1e3));
            passes[s] = Some(p);
        }
        let passes: Vec<Pass> = passes.into_iter().flatten().collect();
        let base = &passes[0];
        touched.push(base.resident_pages);
        rows_per_pass = base.rows;
        for (s, p) in passes.iter().enumerate() {
            identical &= p.sha256 == base.sha256 && p.rows == base.rows && !p.sha256.is_empty();
            times[s].push(p.elapsed_s);
            issued[s].push(p.issued_bytes);
            wasted[s].push(p.resident_pages.saturating_sub(base.resident_pages) * predictio::PAGE_SIZE);
        }
        last_ids = ids;
    }
    // Warm: the last pair's queries again without dropping caches, once to
    // fill the cache, then three times each for the baseline and the
    // adapter, interleaved: the limit, and what the adapter costs where it
    // cannot help.
    pass(setup, spec, Side::Baseline, &last_ids)?;
    let (mut warm_base, mut warm_adapter) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        warm_base.push(pass(setup, spec, Side::Baseline, &last_ids)?.elapsed_s);
        warm_adapter.push(pass(setup, spec, Side::Adapter, &last_ids)?.elapsed_s);
    }
    let (warm_s, warm_adapter_s) = (median(&warm_base), median(&warm_adapter));
    h.step(format!("{} warm", spec.name));

    let pages = median_u64(touched.iter().copied());
    let mut case = Case::ab(spec.name, times[0].clone(), times[1].clone());
    case.limit_s = Some(pages / h.iops().max(1.0));
    case.warm_s = Some(warm_s);
    case.resident_before = resident_before.iter().copied().fold(0.0, f64::max);
    case.answers_identical = identical;
    case.issued_bytes = median_u64(issued[1].iter().copied()) as u64;
    case.wasted_bytes = median_u64(wasted[1].iter().copied()) as u64;
    // The share of the cold-to-warm gap closed (BENCHMARKS.md), from the
    // medians.
    let closure = |side: &[f64]| {
        let (base, warm) = (median(&times[0]), warm_s);
        ((base - median(side)) / (base - warm)).clamp(-10.0, 10.0)
    };
    let (closure_adapter, closure_nochange) = (closure(&times[1]), closure(&times[2]));
    let e = &mut case.extra;
    e.insert("schema".into(), spec.schema.name().into());
    e.insert("mode".into(), (if spec.fresh { "fresh process, one query, load timed" } else { "in process" }).into());
    e.insert("closure".into(), closure_adapter.into());
    e.insert("nochange_closure".into(), closure_nochange.into());
    e.insert("rows_per_query".into(), spec.limit.into());
    e.insert("nochange_helper_wait_s".into(), helper_wait.as_secs_f64().into());
    e.insert("queries_per_pass".into(), spec.queries.into());
    e.insert("rows_per_pass".into(), rows_per_pass.into());
    e.insert("pages_touched".into(), pages.into());
    e.insert(
        "limit_note".into(),
        "pages touched (baseline) / 4 KiB IOPS at QD64; warm_s = warm-cache time (median of 3)".into(),
    );
    e.insert("warm_adapter_s".into(), warm_adapter_s.into());
    e.insert("warm_adapter_overhead".into(), (warm_adapter_s / warm_s.max(1e-12) - 1.0).into());
    e.insert("resident_before_each".into(), resident_before.into());
    let nochange_ratios = ratios(&times[0], &times[2]);
    e.insert("nochange_s".into(), times[2].clone().into());
    e.insert("nochange_ratios".into(), nochange_ratios.clone().into());
    e.insert("nochange_ratio_median".into(), median(&nochange_ratios).into());
    e.insert("nochange_issued_bytes".into(), median_u64(issued[2].iter().copied()).into());
    e.insert("nochange_wasted_bytes".into(), median_u64(wasted[2].iter().copied()).into());
    e.insert("adapter_issued_bytes_each".into(), issued[1].clone().into());
    e.insert("adapter_wasted_bytes_each".into(), wasted[1].clone().into());
    e.insert("nochange_issued_bytes_each".into(), issued[2].clone().into());
    e.insert("nochange_wasted_bytes_each".into(), wasted[2].clone().into());
    if spec.fresh {
        let daemon_ratios = ratios(&times[0], &times[3]);
        e.insert("daemon_s".into(), times[3].clone().into());
        e.insert("daemon_ratios".into(), daemon_ratios.clone().into());
        e.insert("daemon_ratio_median".into(), median(&daemon_ratios).into());
        e.insert("daemon_closure".into(), closure(&times[3]).into());
        e.insert("daemon_issued_bytes".into(), median_u64(issued[3].iter().copied()).into());
        e.insert("daemon_wasted_bytes".into(), median_u64(wasted[3].iter().copied()).into());
    }
    let gain = |r: f64| r - 1.0;
    let kept = gain(median(&nochange_ratios)) / gain(case.ratio_median);
    if kept.is_finite() {
        e.insert("nochange_gain_kept".into(), kept.into());
    }
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let rows: u64 = if options.quick { 200_000 } else { 1_000_000 };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    // PREDICTIO_BENCH_SQLITE_ONLY=name[,name…] runs only the cases named
    // (to look at some cases; a reported result runs them all).
    let only = BenchVar::SqliteOnly.get_string();
    let cases: Vec<&CaseSpec> =
        CASES.iter().filter(|c| only.as_deref().is_none_or(|o| o.split(',').any(|w| w == c.name))).collect();
    if cases.is_empty() {
        return Err(BenchError::Options(format!(
            "PREDICTIO_BENCH_SQLITE_ONLY matches no case (cases: {})",
            CASES.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        )));
    }
    let h = Harness::new(options, (cases.len() * (pairs * SIDES.len() + 1)) as u64)?;
    let script = options.dir.join("sqlite_scan.py");
    std::fs::write(&script, SCRIPT).doing(|| format!("writing {}", script.display()))?;
    let python = python();
    let daemon_home = daemon_home(&options.dir, "sqlite-scan")?;
    let uses = |schema| cases.iter().any(|c| c.schema == schema);
    let rowid_db = if uses(Schema::Rowid) { Some(database(&h, &python, &script, Schema::Rowid, rows)?) } else { None };
    let index_db = if uses(Schema::Index) { Some(database(&h, &python, &script, Schema::Index, rows)?) } else { None };
    let large_db = if uses(Schema::Large) { Some(database(&h, &python, &script, Schema::Large, rows)?) } else { None };
    let setup = Setup {
        python,
        script,
        rowid_db,
        index_db,
        large_db,
        extension: extension(&options.dir)?,
        predictio: crate::harness::predictio_binary()?,
        daemon_home: daemon_home.clone(),
        daemon_config: daemon_config(&daemon_home, "sqlite-scan", "predictio.toml", &[], "")?,
    };
    let mut out = Vec::new();
    for spec in cases {
        out.push(measure(&h, &setup, spec, rows, pairs)?);
    }
    h.finish();
    let size = |db: &Option<PathBuf>| db.as_ref().and_then(|db| std::fs::metadata(db).ok()).map(|m| m.len());
    let (rowid_bytes, index_bytes, large_bytes) = (size(&setup.rowid_db), size(&setup.index_db), size(&setup.large_db));
    let mut notes = Vec::new();
    notes.push(crate::harness::PRIMED_NOTE.to_string());
    for c in &out {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        let rows = get("rows_per_query");
        let closure = get("closure");
        // The bars: closure >= 80 % at 1,000 rows and more, >= 50 % at 100,
        // and never below 0.98x.
        let (bar, met) = if rows >= 1000.0 {
            ("bar: closure >= 80 %", closure >= 0.8)
        } else if rows >= 100.0 {
            ("bar: closure >= 50 %", closure >= 0.5)
        } else {
            ("bar: >= 0.98x", c.ratio_median >= 0.98)
        };
        let met = Some(met && c.ratio_median >= 0.98);
        let daemon = c.extra.get("daemon_ratio_median").map_or(String::new(), |_| {
            format!(
                "; daemon {:.2}x, closure {:.0} %, issued {} B",
                get("daemon_ratio_median"),
                get("daemon_closure") * 100.0,
                get("daemon_issued_bytes")
            )
        });
        notes.push(format!(
            "{}: adapter {:.2}x, closure {:.0} %, nochange {:.2}x, closure {:.0} % ({bar}{}); adapter issued {} B, \
             wasted {} B; nochange issued {} B, wasted {} B; {} pages touched, limit {:.2} ms at QD64 IOPS \
             (baseline / limit = {:.2}x with the device rates probed at the start of the run), warm {:.2} ms \
             (adapter warm {:.2} ms, {:+.0} %){daemon}",
            c.name,
            c.ratio_median,
            closure * 100.0,
            get("nochange_ratio_median"),
            get("nochange_closure") * 100.0,
            match met {
                Some(true) => ": met",
                Some(false) => ": NOT met",
                None => "",
            },
            c.issued_bytes,
            c.wasted_bytes,
            get("nochange_issued_bytes"),
            get("nochange_wasted_bytes"),
            get("pages_touched"),
            c.limit_s.unwrap_or(f64::NAN) * 1e3,
            c.limit_s.zip(c.baseline.as_ref()).map_or(f64::NAN, |(limit, b)| b.median / limit),
            c.warm_s.unwrap_or(f64::NAN) * 1e3,
            get("warm_adapter_s") * 1e3,
            get("warm_adapter_overhead") * 100.0,
        ));
    }
    notes.push(
        "times are measured inside the SQLite program (python3's sqlite3, time.perf_counter): for the in-process \
         cases around the queries (process start, extension load and opening the database outside the timed \
         region), for the fresh-* cases from before the extension's load to the last row of the one query the \
         new process runs (load, open, schema and query inside); every pass runs at nice -15 (the same for \
         every side) so that other load on the shared machine perturbs it less"
            .into(),
    );
    notes.push(
        "each pass starts once no `predictio run` of an earlier pass is left (nochange_helper_wait_s: the longest \
         wait): a finished `run` detaches its tracepoints in a helper for about a second, during which the kernel's \
         tracing lock keeps the next `run` from attaching its own, so that it observes nothing until then"
            .into(),
    );
    notes.push(
        "wasted bytes = database pages resident after the side's pass minus those resident after the baseline pass \
         with the same start keys (prefetched but never needed); issued bytes = the executor's count"
            .into(),
    );
    if options.quick {
        notes.push("--quick: 200 K rows, 2 pairs at most: a smoke test, not a result".into());
    }
    Ok(Report {
        workload: "sqlite-scan".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "rows": rows, "value_bytes": VALUE_BYTES, "pairs": pairs,
            "insert_order": "shuffled (one transaction)",
            "schemas": {
                "rowid": {
                    "db_bytes": rowid_bytes, "page_size": 4096,
                    "schema": "CREATE TABLE usertable (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL); key = user%010d of id",
                    "query": "SELECT key, value FROM usertable WHERE id >= ? ORDER BY id LIMIT N (point: WHERE id = ?)",
                },
                "rowid-16k": {
                    "db_bytes": large_bytes, "page_size": 16384,
                    "schema": "the rowid table's, with 16 KiB pages",
                    "query": "the rowid table's",
                },
                "index": {
                    "db_bytes": index_bytes, "page_size": 8192,
                    "schema": "CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB); CREATE INDEX t_k ON t(k); rows inserted in a random order of k",
                    "query": "SELECT k, v FROM t WHERE k >= ? ORDER BY k LIMIT N (point: WHERE k = ?)",
                },
            },
            "program": setup.python.display().to_string(),
            "sides": ["baseline", "adapter (treatment: load_extension libpredictio_sqlite.so)", "nochange (predictio run -- python3 ..., default policies)", "daemon (fresh-* cases: python3 ... beside predictio daemon, default configuration with its own sockets and store, started before each of its passes)"],
            "cases": CASES.iter().map(|c| serde_json::json!({"name": c.name, "schema": c.schema.name(), "limit": c.limit, "queries": c.queries, "fresh": c.fresh})).collect::<Vec<_>>(),
        }),
        cold_method: h.cold.describe().into(),
        cases: out,
        notes,
    })
}
