//! `lmdb-scan`: seed 000 §6.3's LMDB range scans — the same `btree` policy
//! as SQLite's, through the LMDB adapter ([`predictio_lmdb`]).
//!
//! The table is YCSB-style: keys `user%010d`, 400-byte pseudo-random values,
//! 1.2 M rows (about 0.6 GB; `--quick`: 200 K rows) inserted in random key
//! order, so that neighbouring leaves lie far apart in the file. It is built
//! once under the data directory and reused. Cases, each a pass of several
//! scans from random start keys (the same starts for every side of a pair):
//! range scans of 10, 100, 1 000 and 10 000 rows, and point reads. Before
//! every pass the cache is dropped and the environment opened anew (as a
//! new process would: LMDB's file and the kernel's per-file readahead state
//! start fresh). Only the scans are timed.
//!
//! Sides, interleaved in a balanced order:
//!
//! - **baseline**: heed's plain cursor over an environment opened with
//!   LMDB's default flags (no `MDB_NORDAHEAD`, so the kernel's mmap
//!   read-around of up to `read_ahead_kb` runs on every fault);
//! - **treatment**: the same, through [`LmdbPrefetcher`]: leaves ahead of
//!   the scan are prefetched by the `btree` policy and the executor;
//!   [`ReadAround::Replace`] (its default) also turns the kernel's blind
//!   read-around off on the map, since the policy now does the reading;
//! - peers: `nordahead_s` — the baseline with `MDB_NORDAHEAD` (LMDB's own
//!   switch for random access: `MADV_RANDOM`, no read-around: how much of
//!   the adapter's gain is only that), and `adapter_readaround_s` — the
//!   adapter with [`ReadAround::Keep`] (how much the policy gains with the
//!   kernel's read-around left on).
//!
//! Every pass checksums the rows it returned; all sides must agree. The
//! limit beside each case: the warm time (the baseline's pass with the
//! table resident) and the pages the pass touches (leaves entered plus
//! branch pages read on descents, from the adapter's counters) over the
//! device's 4 KiB random-read rate at queue depth 64.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions};
use predictio::embedded::Embedded;
use predictio::executor::Limits;
use predictio::policies::btree::BtreeConfig;
use predictio::{ExecutorConfig, PAGE_SIZE};
use predictio_lmdb::{LmdbPrefetcher, ReadAround, ScanStats};

use crate::BenchOptions;
use crate::harness::{BenchError, Harness, IoContext, XorShift, checksum, with_read_ahead};
use crate::report::{Case, Report, median};

/// Bytes per value.
pub const VALUE_BYTES: usize = 400;
/// Rows of the full table.
pub const ROWS: u32 = 1_200_000;
/// Rows of the `--quick` table.
pub const QUICK_ROWS: u32 = 200_000;
/// Rows per write transaction while building.
const BATCH_ROWS: usize = 50_000;

/// The sides, in their base order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    Adapter,
    NoReadAhead,
    AdapterKeepReadAround,
}

const SIDES: [Side; 4] = [Side::Baseline, Side::Adapter, Side::NoReadAhead, Side::AdapterKeepReadAround];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Adapter => "adapter",
            Side::NoReadAhead => "nordahead",
            Side::AdapterKeepReadAround => "adapter_readaround",
        }
    }

    fn flags(self) -> EnvFlags {
        match self {
            Side::Baseline | Side::Adapter | Side::AdapterKeepReadAround => EnvFlags::empty(),
            Side::NoReadAhead => EnvFlags::NO_READ_AHEAD,
        }
    }

    fn prefetches(self) -> bool {
        matches!(self, Side::Adapter | Side::AdapterKeepReadAround)
    }
}

/// One case: `scans` scans of `rows` rows each (point reads: `rows` = 1).
#[derive(Clone, Debug)]
struct Shape {
    name: &'static str,
    rows: usize,
    scans: usize,
}

/// One pass of one side.
#[derive(Debug, Default)]
struct Pass {
    seconds: f64,
    rows: u64,
    checksum: u64,
    scan: ScanStats,
    issued_bytes: u64,
    wasted_bytes: u64,
}

fn key(i: u32) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: u32, out: &mut [u8; VALUE_BYTES]) {
    let mut rng = XorShift::new(u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5EED);
    for word in out.chunks_mut(8) {
        let bytes = rng.next().to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
}

fn lmdb_error(what: &str, err: heed::Error) -> BenchError {
    BenchError::Io { what: what.into(), source: std::io::Error::other(err.to_string()) }
}

fn open_env(dir: &Path, flags: EnvFlags) -> Result<(Env, Database<Bytes, Bytes>), BenchError> {
    let mut options = EnvOpenOptions::new();
    options.map_size(4 << 30).max_readers(16);
    // Opened once at a time: closed with `close_env` before it is opened
    // again.
    let env = crate::sys::open_lmdb_env(&mut options, flags, dir)
        .map_err(|e| lmdb_error("opening the LMDB environment", e))?;
    let mut wtxn = env.write_txn().map_err(|e| lmdb_error("write txn", e))?;
    let db = env.create_database(&mut wtxn, None).map_err(|e| lmdb_error("opening the main database", e))?;
    wtxn.commit().map_err(|e| lmdb_error("commit", e))?;
    Ok((env, db))
}

fn close_env(env: Env) {
    env.prepare_for_closing().wait();
}

/// Builds the table once (random insert order), or reuses it.
fn build(h: &Harness, dir: &Path, rows: u32) -> Result<PathBuf, BenchError> {
    let env_dir = dir.join(format!("lmdb-scan-{rows}"));
    let done = env_dir.join("built");
    if done.exists() {
        return Ok(env_dir);
    }
    if env_dir.exists() {
        std::fs::remove_dir_all(&env_dir).doing(|| format!("removing {}", env_dir.display()))?;
    }
    std::fs::create_dir_all(&env_dir).doing(|| format!("creating {}", env_dir.display()))?;
    let (env, db) = open_env(&env_dir, EnvFlags::empty())?;
    let mut order: Vec<u32> = (0..rows).collect();
    XorShift::new(0x1CEB_00DA).shuffle(&mut order);
    let mut buf = [0u8; VALUE_BYTES];
    for (n, batch) in order.chunks(BATCH_ROWS).enumerate() {
        h.say(format!("building the LMDB table: {} of {rows} rows", n * BATCH_ROWS));
        let mut wtxn = env.write_txn().map_err(|e| lmdb_error("write txn", e))?;
        for &i in batch {
            value(i, &mut buf);
            db.put(&mut wtxn, &key(i), &buf).map_err(|e| lmdb_error("put", e))?;
        }
        wtxn.commit().map_err(|e| lmdb_error("commit", e))?;
    }
    env.force_sync().map_err(|e| lmdb_error("sync", e))?;
    close_env(env);
    std::fs::write(&done, format!("{rows} rows, random insert order\n")).doing(|| "marking the table built".into())?;
    Ok(env_dir)
}

/// Starting row indices of a pass (the same for every side of a pair).
fn starts(shape: &Shape, total: u32, seed: u64) -> Vec<u32> {
    let mut rng = XorShift::new(seed);
    let span = u64::from(total).saturating_sub(shape.rows as u64).max(1);
    (0..shape.scans).map(|_| rng.below(span) as u32).collect()
}

fn runtime(options: &BenchOptions) -> Result<Arc<Embedded>, BenchError> {
    let config = ExecutorConfig {
        backend: options.backend,
        io_depth: options.depth,
        limits: Limits { track_hits: true, max_io_pages: options.max_io_pages.max(1), ..Limits::default() },
        hit_timeout: Duration::from_secs(600),
        ..ExecutorConfig::default()
    };
    LmdbPrefetcher::runtime(config, BtreeConfig::default())
        .map_err(|e| BenchError::Options(format!("starting the LMDB adapter's runtime: {e}")))
}

fn pass(options: &BenchOptions, env_dir: &Path, side: Side, shape: &Shape, starts: &[u32]) -> Result<Pass, BenchError> {
    let (env, db) = open_env(env_dir, side.flags())?;
    let result = run_scans(options, &env, &db, side, shape, starts);
    close_env(env);
    result
}

fn run_scans(
    options: &BenchOptions,
    env: &Env,
    db: &Database<Bytes, Bytes>,
    side: Side,
    shape: &Shape,
    starts: &[u32],
) -> Result<Pass, BenchError> {
    let prefetcher = if side.prefetches() {
        let runtime = runtime(options)?;
        let read_around = if side == Side::AdapterKeepReadAround { ReadAround::Keep } else { ReadAround::Replace };
        Some(
            LmdbPrefetcher::with_runtime(env, runtime, read_around)
                .map_err(|e| BenchError::Options(format!("setting up the LMDB adapter: {e}")))?,
        )
    } else {
        None
    };
    let rtxn = env.read_txn().map_err(|e| lmdb_error("read txn", e))?;
    let mut out = Pass::default();
    for &start in starts {
        let start_key = key(start);
        let began = Instant::now();
        match &prefetcher {
            Some(p) => {
                let mut scan = p.scan_from(db, &rtxn, &start_key).map_err(|e| lmdb_error("range", e))?;
                for row in scan.by_ref().take(shape.rows) {
                    let (k, v) = row.map_err(|e| lmdb_error("scan", e))?;
                    out.checksum = checksum(checksum(out.checksum, k), v);
                    out.rows += 1;
                }
                let s = scan.stats();
                out.scan.leaves += s.leaves;
                out.scan.branch_pages += s.branch_pages;
                out.scan.descents += s.descents;
                out.scan.events += s.events;
            }
            None => {
                let range = (std::ops::Bound::Included(start_key.as_slice()), std::ops::Bound::Unbounded);
                for row in db.range(&rtxn, &range).map_err(|e| lmdb_error("range", e))?.take(shape.rows) {
                    let (k, v) = row.map_err(|e| lmdb_error("scan", e))?;
                    out.checksum = checksum(checksum(out.checksum, k), v);
                    out.rows += 1;
                }
            }
        }
        out.seconds += began.elapsed().as_secs_f64();
    }
    drop(rtxn);
    if let Some(p) = prefetcher {
        let executor = p.embedded().executor();
        executor.wait_idle(Duration::from_secs(10));
        let total = executor.stats().total;
        out.issued_bytes = total.issued_bytes;
        out.wasted_bytes = total.issued_pages.saturating_sub(total.hit_pages) * PAGE_SIZE;
    }
    Ok(out)
}

fn measure(h: &Harness, env_dir: &Path, shape: &Shape, total_rows: u32, pairs: usize) -> Result<Case, BenchError> {
    let data = env_dir.join("data.mdb");
    let files: [&Path; 1] = [&data];
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut passes: Vec<Vec<Pass>> = (0..SIDES.len()).map(|_| Vec::new()).collect();
    let mut identical = true;
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        let seed = 0xA5A5_0000 + (pair as u64) * 7919 + shape.rows as u64;
        let starts = starts(shape, total_rows, seed);
        let mut sums = Vec::new();
        h.prime(&files)?;
        let resident = h.round(pair, SIDES.len(), &files, |s| {
            let p = pass(&h.options, env_dir, SIDES[s], shape, &starts)?;
            sums.push((p.checksum, p.rows));
            times[s].push(p.seconds);
            passes[s].push(p);
            h.step(format!("{} pair {}/{pairs}: {}", shape.name, pair + 1, SIDES[s].name()));
            Ok(())
        })?;
        resident_before = resident_before.max(resident);
        identical &= sums.windows(2).all(|w| w[0] == w[1]);
    }
    // Warm: the same starts as the last pair, once untimed, then timed.
    let starts = starts(shape, total_rows, 0xA5A5_0000 + (pairs as u64 - 1) * 7919 + shape.rows as u64);
    pass(&h.options, env_dir, Side::Baseline, shape, &starts)?;
    let warm = pass(&h.options, env_dir, Side::Baseline, shape, &starts)?;
    pass(&h.options, env_dir, Side::Adapter, shape, &starts)?;
    let warm_adapter = pass(&h.options, env_dir, Side::Adapter, shape, &starts)?;
    h.step(format!("{} warm", shape.name));

    let adapter = &passes[1];
    let pages: Vec<f64> = adapter.iter().map(|p| (p.scan.leaves + p.scan.branch_pages) as f64).collect();
    let pages = median(&pages);
    let mut case = Case::ab(shape.name, times[0].clone(), times[1].clone());
    case.warm_s = Some(warm.seconds);
    case.limit_s = Some(pages / h.iops().max(1.0));
    case.resident_before = resident_before;
    case.answers_identical = identical;
    let med = |xs: Vec<u64>| median(&xs.into_iter().map(|x| x as f64).collect::<Vec<_>>()) as u64;
    case.issued_bytes = med(adapter.iter().map(|p| p.issued_bytes).collect());
    case.wasted_bytes = med(adapter.iter().map(|p| p.wasted_bytes).collect());
    let ratio = |b: &[f64], t: &[f64]| {
        let r: Vec<f64> = b.iter().zip(t).map(|(b, t)| b / t.max(1e-12)).collect();
        median(&r)
    };
    let e = &mut case.extra;
    e.insert("scans".into(), shape.scans.into());
    e.insert("rows_per_scan".into(), shape.rows.into());
    e.insert("rows".into(), adapter.first().map_or(0, |p| p.rows).into());
    e.insert("pages_touched".into(), pages.into());
    e.insert("pages_at_qd1_s".into(), (pages / h.machine.device_limit.rand4k_iops_qd1.max(1.0)).into());
    e.insert("warm_adapter_s".into(), warm_adapter.seconds.into());
    e.insert("nordahead_s".into(), times[2].clone().into());
    e.insert("adapter_readaround_s".into(), times[3].clone().into());
    e.insert("nordahead_ratio_median".into(), ratio(&times[0], &times[2]).into());
    e.insert("adapter_readaround_ratio_median".into(), ratio(&times[0], &times[3]).into());
    e.insert("adapter_vs_nordahead_ratio_median".into(), ratio(&times[2], &times[1]).into());
    let nra = &passes[3];
    e.insert("adapter_readaround_issued_bytes".into(), med(nra.iter().map(|p| p.issued_bytes).collect()).into());
    e.insert("adapter_readaround_wasted_bytes".into(), med(nra.iter().map(|p| p.wasted_bytes).collect()).into());
    e.insert("leaves".into(), med(adapter.iter().map(|p| p.scan.leaves).collect()).into());
    e.insert("descents".into(), med(adapter.iter().map(|p| p.scan.descents).collect()).into());
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let rows = if options.quick { QUICK_ROWS } else { ROWS };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let shapes = vec![
        // Enough scans per pass that a pass takes tens of milliseconds
        // even when prefetched: shorter passes are at the mercy of the
        // scheduler on a shared 2-core machine.
        Shape { name: "scan-10", rows: 10, scans: 200 },
        Shape { name: "scan-100", rows: 100, scans: 60 },
        Shape { name: "scan-1000", rows: 1000, scans: 12 },
        Shape { name: "scan-10000", rows: 10_000, scans: 3 },
        Shape { name: "point", rows: 1, scans: 400 },
    ];
    let mut settings: Vec<Option<u64>> = vec![None];
    settings.extend(options.read_ahead_kb.iter().map(|&kb| Some(kb)));
    let steps = settings.len() * shapes.len() * (pairs * SIDES.len() + 1);
    let h = Harness::new(options, steps as u64)?;
    let env_dir = build(&h, &options.dir, rows)?;
    let file_bytes = std::fs::metadata(env_dir.join("data.mdb")).doing(|| "stat data.mdb".into())?.len();
    let mut out = Vec::new();
    for setting in &settings {
        for shape in &shapes {
            let mut case = match setting {
                None => measure(&h, &env_dir, shape, rows, pairs)?,
                Some(kb) => with_read_ahead(&options.dir, *kb, || measure(&h, &env_dir, shape, rows, pairs))?,
            };
            if let Some(kb) = setting {
                case.name = format!("{}@ra{kb}", case.name);
                case.extra.insert("read_ahead_kb".into(), (*kb).into());
            } else {
                case.extra.insert("read_ahead_kb".into(), h.machine.read_ahead_kb.into());
            }
            out.push(case);
        }
    }
    h.finish();
    let mut notes = Vec::new();
    notes.push(crate::harness::PRIMED_NOTE.to_string());
    for c in &out {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        notes.push(format!(
            "{}: adapter {:.2}x vs LMDB's default (bar at scan-1000: >= 3x; seed: -32 %); MDB_NORDAHEAD alone {:.2}x; \
             adapter vs MDB_NORDAHEAD {:.2}x; adapter keeping the read-around {:.2}x; {:.0} pages touched per pass \
             (limit {:.4} s at QD64, {:.4} s at QD1); warm {:.4} s (adapter {:.4} s); issued {} B, unused {} B",
            c.name,
            c.ratio_median,
            get("nordahead_ratio_median"),
            get("adapter_vs_nordahead_ratio_median"),
            get("adapter_readaround_ratio_median"),
            get("pages_touched"),
            c.limit_s.unwrap_or(f64::NAN),
            get("pages_at_qd1_s"),
            c.warm_s.unwrap_or(f64::NAN),
            get("warm_adapter_s"),
            c.issued_bytes,
            c.wasted_bytes,
        ));
    }
    if options.quick {
        notes.push(format!("--quick: {QUICK_ROWS} rows, 2 pairs at most: a smoke test, not a result"));
    }
    notes.push(format!(
        "baseline = LMDB's default environment (heed {}, bundled LMDB mdb.master in the 0.9 file format): no \
         MDB_NORDAHEAD, so each page fault on the map also reads around it (read_ahead_kb = {} KiB on this machine; \
         cases named @raN ran at read_ahead_kb N), until the file's mmap miss count stops it; the adapter's default \
         (ReadAround::Replace) turns that read-around off with madvise(MADV_RANDOM), as MDB_NORDAHEAD would",
        "0.22", h.machine.read_ahead_kb
    ));
    notes.push(
        "each pass opens the environment anew after the cache is dropped and times only its scans; unused = pages the \
         executor issued that the scan never entered (mostly the policy's last window at the end of each scan)"
            .into(),
    );
    Ok(Report {
        workload: "lmdb-scan".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "rows": rows, "value_bytes": VALUE_BYTES, "key_format": "user%010d", "insert_order": "random",
            "file_bytes": file_bytes, "pairs": pairs,
            "sides": ["baseline (LMDB default flags)", "adapter (LmdbPrefetcher, btree policy)",
                      "nordahead (MDB_NORDAHEAD)", "adapter_readaround"],
            "cases": shapes.iter().map(|s| serde_json::json!({"name": s.name, "rows": s.rows, "scans_per_pass": s.scans})).collect::<Vec<_>>(),
            "policy": "btree, BtreeConfig::default() (window 0 -> x2 per step, max 64 children)",
            "executor": {"backend": options.backend.name(), "io_depth": options.depth, "max_io_pages": options.max_io_pages},
        }),
        cold_method: h.cold.describe().into(),
        cases: out,
        notes,
    })
}
