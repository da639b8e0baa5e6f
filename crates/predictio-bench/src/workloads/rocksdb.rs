//! `rocksdb`: seed 000 §6.3 — RocksDB's own iterator readahead moved into a
//! predictio policy. A YCSB-like database (keys `user%010d`, 400-byte
//! values, inserted in random order, then compacted; ~1.1 GB, `--quick`:
//! ~85 MB) is built once under `--dir` and reused.
//!
//! Cases, each cold (the database is reopened before every pass, then the
//! page cache is dropped: RocksDB's table readers keep their indexes in
//! memory, its block cache starts empty):
//!
//! - **long-scan**: one iterator over every row, from the first key to the
//!   end (no bound).
//! - **ycsb-e**: short scans from uniformly random keys, lengths uniform in
//!   1..=100 rows, each bounded by `iterate_upper_bound` = its last key + 1
//!   (the keys are dense, so the bound is what YCSB-E's record count says).
//! - **ycsb-c**: uniformly random point gets (20,000, so that one pass
//!   outlasts the bursts of a shared disk).
//!
//! Sides, interleaved in a balanced order:
//!
//! - **baseline**: RocksDB's own readahead (its defaults: after two
//!   sequential block reads, `readahead(2)` in chunks from 8 KiB doubling
//!   to 256 KiB).
//! - **off** (`off_s`): RocksDB's readahead off (`max_auto_readahead_size=0`,
//!   `readahead_size=0`, files advised random): one `pread` per block.
//! - **predictio** (treatment): readahead off, and the iterator wrapped in
//!   [`predictio_rocksdb::HintedIter`], which reports each scan to an
//!   in-process pipeline running the `scan` policy and an executor
//!   (`--backend`, `--depth`, `--max-io`).
//!
//! Every pass checksums the keys and values it read (all sides must agree).
//! Issued bytes are the executor's; a side's waste is the bytes of SST files
//! resident after its pass beyond those resident after the `off` pass of the
//! same pair (the same queries, so the same blocks demanded). The limit is
//! the bytes the `off` side read over the device's best bandwidth (scans),
//! or the gets over the device's best 4 KiB IOPS (point reads).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio::FileRef;
use predictio::executor::{Executor, ExecutorConfig, Limits};
use predictio::pipeline::Pipeline;
use predictio::policies::scan::ScanPolicy;
use predictio_rocksdb::{Db, DbOptions, HintedIter, Readahead, RocksError, ScanReporter};

use crate::BenchOptions;
use crate::harness::{BenchError, Harness, IoContext, XorShift, checksum, median_u64, settle};
use crate::report::{Case, Report, median};

/// Value size, bytes.
pub const VALUE_BYTES: usize = 400;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    Off,
    Predictio,
}

const SIDES: [Side; 3] = [Side::Baseline, Side::Off, Side::Predictio];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Off => "off",
            Side::Predictio => "predictio",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    LongScan,
    YcsbE,
    YcsbC,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::LongScan => "long-scan",
            Kind::YcsbE => "ycsb-e",
            Kind::YcsbC => "ycsb-c",
        }
    }

    /// The bar: treatment time over baseline time, and how it is said.
    fn bar(self) -> (f64, f64, &'static str) {
        match self {
            Kind::LongScan => (0.0, 0.20, "<= 0.20 of baseline time"),
            Kind::YcsbE => (0.0, 0.80, "<= 0.80 of baseline time"),
            Kind::YcsbC => (0.98, 1.02, "within 2 % of baseline time"),
        }
    }
}

fn rocks(err: RocksError) -> BenchError {
    BenchError::Options(err.to_string())
}

fn key(i: u64) -> Vec<u8> {
    format!("user{i:010}").into_bytes()
}

fn value(i: u64, out: &mut Vec<u8>) {
    out.clear();
    let mut rng = XorShift::new(i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5151);
    while out.len() < VALUE_BYTES {
        out.extend_from_slice(&rng.next().to_le_bytes());
    }
    out.truncate(VALUE_BYTES);
}

fn db_options(readahead: Readahead) -> DbOptions {
    DbOptions { readahead, ..DbOptions::default() }
}

/// The database of `rows` rows under `dir`, built once (random insert order,
/// then compacted).
fn database(h: &Harness, dir: &Path, rows: u64) -> Result<PathBuf, BenchError> {
    let path = dir.join(format!("rocksdb-ycsb-{rows}"));
    let marker = path.join("PREDICTIO-BUILT");
    if marker.exists() {
        return Ok(path);
    }
    if path.exists() {
        std::fs::remove_dir_all(&path).doing(|| format!("removing the unfinished {}", path.display()))?;
    }
    std::fs::create_dir_all(&path).doing(|| format!("creating {}", path.display()))?;
    h.say(format!("building the RocksDB database ({rows} rows, random order, then compacting)"));
    let db = Db::open(&path, &db_options(Readahead::RocksDb)).map_err(rocks)?;
    let mut order: Vec<u64> = (0..rows).collect();
    XorShift::new(0x0DB5_EED5).shuffle(&mut order);
    let mut v = Vec::new();
    for chunk in order.chunks(10_000) {
        let batch: Vec<(Vec<u8>, Vec<u8>)> = chunk
            .iter()
            .map(|&i| {
                value(i, &mut v);
                (key(i), v.clone())
            })
            .collect();
        db.put_batch(batch.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))).map_err(rocks)?;
    }
    db.flush().map_err(rocks)?;
    db.compact_all();
    drop(db);
    std::fs::write(&marker, rows.to_string()).doing(|| format!("writing {}", marker.display()))?;
    Ok(path)
}

/// The queries of one case: the same in every pass.
struct Queries {
    /// (start row, rows) of each scan.
    scans: Vec<(u64, u64)>,
    /// Rows of point gets.
    gets: Vec<u64>,
}

fn queries(kind: Kind, rows: u64, quick: bool) -> Queries {
    let mut rng = XorShift::new(match kind {
        Kind::LongScan => 1,
        Kind::YcsbE => 2,
        Kind::YcsbC => 3,
    });
    match kind {
        Kind::LongScan => Queries { scans: vec![(0, rows)], gets: Vec::new() },
        Kind::YcsbE => {
            let n = if quick { 300 } else { 2000 };
            let scans = (0..n)
                .map(|_| {
                    let len = 1 + rng.below(100);
                    (rng.below(rows - len), len)
                })
                .collect();
            Queries { scans, gets: Vec::new() }
        }
        Kind::YcsbC => {
            let n = if quick { 1000 } else { 20_000 };
            Queries { scans: Vec::new(), gets: (0..n).map(|_| rng.below(rows)).collect() }
        }
    }
}

struct Pass {
    seconds: f64,
    checksum: u64,
    rows: u64,
    resident_after: u64,
    issued: u64,
    resident_before: f64,
}

fn sst_paths(db: &Db) -> Vec<PathBuf> {
    db.live_files().into_iter().map(|f| f.path).collect()
}

fn resident_bytes(paths: &[PathBuf]) -> Result<u64, BenchError> {
    let mut total = 0;
    for p in paths {
        let r = predictio::cache::residency(&FileRef::open(p)?).doing(|| format!("cachestat of {}", p.display()))?;
        total += r.resident * predictio::PAGE_SIZE;
    }
    Ok(total)
}

fn run_queries(db: &Db, q: &Queries, kind: Kind, reporter: Option<&ScanReporter>) -> Result<(u64, u64), BenchError> {
    let mut sum = 0u64;
    let mut rows = 0u64;
    for &(start, len) in &q.scans {
        let upper = (kind == Kind::YcsbE).then(|| key(start + len));
        let mut it = HintedIter::new(db, None, upper.as_deref(), reporter);
        it.seek(&key(start)).map_err(rocks)?;
        let mut n = 0;
        while it.valid() && n < len {
            sum = checksum(sum, it.key());
            sum = checksum(sum, it.value());
            n += 1;
            it.next().map_err(rocks)?;
        }
        rows += n;
    }
    for &i in &q.gets {
        let v = db.get(&key(i)).map_err(rocks)?;
        if let Some(v) = v {
            sum = checksum(sum, &v);
            rows += 1;
        }
    }
    Ok((sum, rows))
}

fn pass(h: &Harness, path: &Path, side: Side, kind: Kind, q: &Queries, cold: bool) -> Result<Pass, BenchError> {
    let readahead = if side == Side::Baseline { Readahead::RocksDb } else { Readahead::Off };
    let db = Db::open(path, &db_options(readahead)).map_err(rocks)?;
    let paths = sst_paths(&db);
    let resident_before = if cold {
        let refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        h.make_cold(&refs)?
    } else {
        0.0
    };
    let machinery = match side {
        Side::Predictio => {
            let o = &h.options;
            let config = ExecutorConfig {
                backend: o.backend,
                io_depth: o.depth,
                limits: Limits { max_io_pages: o.max_io_pages, ..Limits::default() },
                ..ExecutorConfig::default()
            };
            let executor = Arc::new(Executor::new(config)?);
            let pipeline = Pipeline::start(Arc::clone(&executor), vec![Box::new(ScanPolicy::default())], 1 << 16)
                .doing(|| "starting the pipeline".into())?;
            let reporter = ScanReporter::new(&db, pipeline.sender()).map_err(rocks)?;
            Some((executor, pipeline, reporter))
        }
        _ => None,
    };
    if cold {
        settle();
    }
    let start = Instant::now();
    let (sum, rows) = run_queries(&db, q, kind, machinery.as_ref().map(|m| &m.2))?;
    let seconds = start.elapsed().as_secs_f64();
    let mut issued = 0;
    if let Some((executor, pipeline, reporter)) = machinery {
        pipeline.flush(Duration::from_secs(10));
        executor.wait_idle(Duration::from_secs(30));
        issued = executor.stats().total.issued_bytes;
        drop(reporter);
        drop(pipeline);
    }
    let resident_after = resident_bytes(&paths)?;
    Ok(Pass { seconds, checksum: sum, rows, resident_after, issued, resident_before })
}

fn measure(h: &Harness, path: &Path, kind: Kind, rows: u64, pairs: usize) -> Result<Case, BenchError> {
    let name = kind.name();
    let q = queries(kind, rows, h.options.quick);
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut resident: Vec<Vec<u64>> = vec![Vec::new(); SIDES.len()];
    let mut issued = Vec::new();
    let mut sums = Vec::new();
    let mut rows_read = Vec::new();
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        // Balanced for order and carry-over ([`crate::harness::pass_order`]).
        for s in crate::harness::pass_order(pair, SIDES.len()) {
            let p = pass(h, path, SIDES[s], kind, &q, true)?;
            resident_before = resident_before.max(p.resident_before);
            secs[s].push(p.seconds);
            resident[s].push(p.resident_after);
            sums.push(p.checksum);
            rows_read.push(p.rows);
            if SIDES[s] == Side::Predictio {
                issued.push(p.issued);
            }
            h.step(format!("{name} pair {}/{pairs}: {}", pair + 1, SIDES[s].name()));
        }
    }
    pass(h, path, Side::Off, kind, &q, false)?;
    let warm = pass(h, path, Side::Off, kind, &q, false)?;
    h.step(format!("{name} warm"));

    let mut case = Case::ab(name, secs[0].clone(), secs[2].clone());
    let needed = median_u64(resident[1].iter().copied());
    case.limit_s = Some(match kind {
        Kind::YcsbC => q.gets.len() as f64 / h.iops().max(1.0),
        _ => needed / h.bandwidth().max(1.0),
    });
    case.warm_s = Some(warm.seconds);
    case.resident_before = resident_before;
    case.answers_identical = sums.windows(2).all(|w| w[0] == w[1]) && rows_read.windows(2).all(|w| w[0] == w[1]);
    let waste = |s: usize| median_u64(resident[s].iter().zip(&resident[1]).map(|(t, off)| t.saturating_sub(*off)));
    case.issued_bytes = median_u64(issued.iter().copied()) as u64;
    case.wasted_bytes = waste(2) as u64;
    let fraction: Vec<f64> = secs[2].iter().zip(&secs[0]).map(|(t, b)| t / b.max(1e-12)).collect();
    let off_ratio: Vec<f64> = secs[0].iter().zip(&secs[1]).map(|(b, o)| b / o.max(1e-12)).collect();
    let time_fraction = median(&fraction);
    let (lo, hi, bar) = kind.bar();
    let e = &mut case.extra;
    e.insert("off_s".into(), secs[1].clone().into());
    e.insert("off_ratio_median".into(), median(&off_ratio).into());
    e.insert("time_fraction_of_baseline".into(), time_fraction.into());
    e.insert("time_fraction_per_pair".into(), fraction.into());
    e.insert("bar".into(), bar.into());
    e.insert("meets_bar".into(), (time_fraction >= lo && time_fraction <= hi).into());
    e.insert("rows_read".into(), rows_read.first().copied().unwrap_or(0).into());
    e.insert("queries".into(), (q.scans.len() + q.gets.len()).into());
    e.insert("bytes_read_off".into(), needed.into());
    e.insert("baseline_readahead_wasted_bytes".into(), waste(0).into());
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let rows: u64 = if options.quick { 200_000 } else { 2_600_000 };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let kinds = [Kind::LongScan, Kind::YcsbE, Kind::YcsbC];
    let h = Harness::new(options, (kinds.len() * (pairs * SIDES.len() + 1)) as u64)?;
    let path = database(&h, &options.dir, rows)?;
    let mut cases = Vec::new();
    for kind in kinds {
        cases.push(measure(&h, &path, kind, rows, pairs)?);
    }
    h.finish();
    let mut notes = Vec::new();
    for c in &cases {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        let met = c.extra.get("meets_bar").and_then(|v| v.as_bool()).unwrap_or(false);
        notes.push(format!(
            "{}: predictio takes {:.3} of the baseline's time (bar {}: {}); readahead off takes {:.3}; \
             predictio issued {:.1} MB, wasted {:.1} MB; RocksDB's own readahead wasted {:.1} MB",
            c.name,
            get("time_fraction_of_baseline"),
            c.extra.get("bar").and_then(|v| v.as_str()).unwrap_or(""),
            if met { "met" } else { "not met" },
            1.0 / get("off_ratio_median"),
            c.issued_bytes as f64 / 1e6,
            c.wasted_bytes as f64 / 1e6,
            get("baseline_readahead_wasted_bytes") / 1e6,
        ));
    }
    if options.quick {
        notes.push("--quick: an 85 MB database and few queries: a smoke test, not a result".into());
    }
    notes.push(
        "point gets never go through the scan wrapper, so the predictio side of ycsb-c is readahead off; \
         RocksDB's readahead does not act on gets either"
            .into(),
    );
    Ok(Report {
        workload: "rocksdb".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "rows": rows, "key": "user%010d", "value_bytes": VALUE_BYTES, "pairs": pairs,
            "rocksdb": "Debian librocksdb 7.8.3, no compression, 4 KiB blocks, 8 MiB block cache, 64 MiB files, \
                        max_open_files=-1; inserted in random order without WAL, flushed, compact_range over all keys",
            "sides": ["baseline (RocksDB's readahead)", "off", "predictio (off + scan policy)"],
            "executor": {"backend": format!("{:?}", options.backend), "depth": options.depth,
                         "max_io_pages": options.max_io_pages},
            "ycsb_e": "scans from uniform random keys, 1..=100 rows uniform, upper bound = start + rows",
            "ycsb_c": "uniform random point gets",
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}
