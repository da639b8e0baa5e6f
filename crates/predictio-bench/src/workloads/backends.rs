//! `backends`: prefetch a fragmented range list of a 256 MiB file, cold, with
//! each backend; time until every page is resident and up to date.
//!
//! The list covers the file in 32 KiB ranges in shuffled order — what a
//! history-based policy hands the executor. Baseline: `fadvise`. Treatments:
//! `readahead`, `madvise`, `uring` at depths 16 and 64. Each pair runs the
//! variants interleaved, in a balanced order. The limit is the file's
//! bytes over the device's best measured bandwidth.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio::executor::{BackendKind, ExecutorConfig, FetchError, Limits};
use predictio::{Executor, FileRef, PAGE_SIZE, PageRange};

use crate::BenchOptions;
use crate::harness::{BenchError, Harness, IoContext, XorShift, checksum, data_file};
use crate::report::{Case, Report, median};

#[derive(Clone, Copy, Debug)]
struct Variant {
    name: &'static str,
    backend: BackendKind,
    depth: u32,
}

const VARIANTS: [Variant; 5] = [
    Variant { name: "fadvise", backend: BackendKind::Fadvise, depth: 1 },
    Variant { name: "readahead", backend: BackendKind::Readahead, depth: 1 },
    Variant { name: "madvise", backend: BackendKind::Madvise, depth: 1 },
    Variant { name: "uring-d16", backend: BackendKind::Uring, depth: 16 },
    Variant { name: "uring-d64", backend: BackendKind::Uring, depth: 64 },
];

/// 32 KiB ranges covering the file, shuffled.
pub fn fragmented(file_pages: u64, seed: u64) -> Vec<PageRange> {
    let mut ranges: Vec<PageRange> = (0..file_pages / 8).map(|i| PageRange::new(i * 8, i * 8 + 8)).collect();
    XorShift::new(seed).shuffle(&mut ranges);
    ranges
}

struct Pass {
    seconds: f64,
    resident: u64,
    issued_pages: u64,
    checksum: u64,
}

fn pass(path: &Path, variant: Variant, ranges: &[PageRange]) -> Result<Pass, BenchError> {
    let config = ExecutorConfig {
        backend: variant.backend,
        io_depth: variant.depth,
        max_ranges_per_request: ranges.len(),
        limits: Limits { max_pages_per_request: u64::MAX, ..Limits::default() },
        ..ExecutorConfig::default()
    };
    let executor = Arc::new(Executor::new(config)?);
    let origin = executor.register_origin(variant.name);
    let file = FileRef::open(path)?;
    let wanted: u64 = ranges.iter().map(PageRange::len).sum();

    let start = Instant::now();
    let resident = match executor.fetch_and_wait(&file, ranges, origin, Duration::from_secs(60)) {
        Ok(resident) => resident,
        Err(FetchError::Timeout { resident, .. }) => resident,
        Err(err) => return Err(BenchError::Options(err.to_string())),
    };
    let seconds = start.elapsed().as_secs_f64();
    if resident < wanted {
        tracing::warn!(variant = variant.name, resident, wanted, "not every page became resident");
    }
    let stats = executor.stats();
    // Same answers: the file's bytes, read after the prefetch, hash the same
    // for every variant.
    let data = std::fs::read(path).doing(|| format!("reading {}", path.display()))?;
    Ok(Pass { seconds, resident, issued_pages: stats.total.issued_pages, checksum: checksum(0, &data) })
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let size: u64 = if options.quick { 64 << 20 } else { 256 << 20 };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let h = Harness::new(options, (pairs * VARIANTS.len()) as u64)?;
    let path = data_file(&options.dir, "backends.dat", size)?;
    let file_pages = size / PAGE_SIZE;

    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut issued: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut resident_after: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut sums = Vec::new();
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        let ranges = fragmented(file_pages, 0xBAC0 + pair as u64);
        let resident = h.round(pair, VARIANTS.len(), &[&path], |v| {
            let p = pass(&path, VARIANTS[v], &ranges)?;
            seconds[v].push(p.seconds);
            issued[v].push(p.issued_pages as f64);
            resident_after[v].push(p.resident as f64 / file_pages as f64);
            sums.push(p.checksum);
            h.step(format!("pair {}/{pairs}: {}", pair + 1, VARIANTS[v].name));
            Ok(())
        })?;
        resident_before = resident_before.max(resident);
    }
    h.finish();
    let identical = sums.windows(2).all(|w| w[0] == w[1]);
    let limit = size as f64 / h.bandwidth().max(1.0);
    let mut cases = Vec::new();
    for v in 1..VARIANTS.len() {
        let mut c = Case::ab(format!("{} vs fadvise", VARIANTS[v].name), seconds[0].clone(), seconds[v].clone());
        c.limit_s = Some(limit);
        c.resident_before = resident_before;
        c.answers_identical = identical;
        c.issued_bytes = (median(&issued[v]) * PAGE_SIZE as f64) as u64;
        c.wasted_bytes = 0;
        c.extra.insert("resident_after".into(), median(&resident_after[v]).into());
        c.extra.insert("baseline_resident_after".into(), median(&resident_after[0]).into());
        c.extra.insert("treatment_MBps".into(), (size as f64 / median(&seconds[v]) / 1e6).into());
        c.extra.insert("fadvise_MBps".into(), (size as f64 / median(&seconds[0]) / 1e6).into());
        cases.push(c);
    }
    let uring16 = cases.iter().find(|c| c.name.starts_with("uring-d16")).map(|c| c.ratio_median).unwrap_or(0.0);
    Ok(Report {
        workload: "backends".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "file_bytes": size, "range_bytes": 8 * PAGE_SIZE, "ranges": file_pages / 8, "order": "shuffled",
            "pairs": pairs, "max_io_kib": 256,
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes: vec![
            format!("uring at depth 16 vs fadvise: {uring16:.2}x (bar: >= 2x)"),
            "time = from submit until mincore reports every page resident and up to date; wasted bytes are 0 by construction (the list is the whole file)".into(),
        ],
    })
}
