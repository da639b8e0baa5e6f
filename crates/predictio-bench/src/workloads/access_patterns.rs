//! `access-patterns`: seed 000 §2.1 / Figure 1.
//!
//! 4,096 page-sized reads of a cold file, in contiguous runs of 1, 2, 4, …
//! pages with a jump to a far, random place between runs, and one fully
//! sequential pattern. Baseline: the kernel's readahead alone. Treatment: the
//! same reads while an oracle policy, handed the upcoming offsets as a
//! `ReadPlan`, prefetches them through the executor (io_uring, depth 64) —
//! the executor's ceiling. Reported per run length: total time, P50/P95
//! demand-read latency, and the limit (runs ÷ device IOPS at depth, or bytes
//! ÷ device bandwidth, whichever is larger; and the warm time).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio::event::Event;
use predictio::executor::{ExecutorConfig, Limits};
use predictio::page::ByteRange;
use predictio::{Executor, FileRef, PAGE_SIZE, PageRange, Runtime};

use crate::BenchOptions;
use crate::harness::{
    BenchError, Harness, IoContext, XorShift, checksum, data_file, read_ahead_settings, with_read_ahead,
};
use crate::oracle::OraclePolicy;
use crate::report::{Case, Report, median, percentile};

/// Reads per pass.
const READS: u64 = 4096;

/// One pass's measurements.
struct Pass {
    seconds: f64,
    latencies_us: Vec<f64>,
    checksum: u64,
    issued_pages: u64,
    wasted_pages: u64,
}

/// The pages to read, in order: `READS / run` runs of `run` pages, each run
/// in its own slot of the file, slots visited in random order.
pub fn pattern(run: u64, file_pages: u64, seed: u64) -> Vec<u64> {
    let run = run.clamp(1, READS);
    let runs = READS / run;
    let slot = file_pages / runs;
    let mut rng = XorShift::new(seed);
    let mut order: Vec<u64> = (0..runs).collect();
    rng.shuffle(&mut order);
    let mut pages = Vec::with_capacity(READS as usize);
    for s in order {
        let start = s * slot + rng.below(slot.saturating_sub(run).max(1));
        pages.extend(start..start + run);
    }
    pages
}

/// The pattern as byte segments (runs merged), as a read plan carries them.
fn segments(pages: &[u64]) -> Vec<ByteRange> {
    let mut out: Vec<ByteRange> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some(last) if last.offset + last.len == p * PAGE_SIZE => last.len += PAGE_SIZE,
            _ => out.push(ByteRange::new(p * PAGE_SIZE, PAGE_SIZE)),
        }
    }
    out
}

fn read_all(file: &File, pages: &[u64], mut on_read: impl FnMut(u64)) -> std::io::Result<(Vec<f64>, u64)> {
    let mut buf = vec![0u8; PAGE_SIZE as usize];
    let mut latencies = Vec::with_capacity(pages.len());
    let mut sum = 0xCBF2_9CE4_8422_2325;
    for &page in pages {
        let t = Instant::now();
        file.read_exact_at(&mut buf, page * PAGE_SIZE)?;
        latencies.push(t.elapsed().as_secs_f64() * 1e6);
        on_read(page);
        sum = checksum(sum, &buf);
    }
    Ok((latencies, sum))
}

fn baseline_pass(path: &Path, pages: &[u64]) -> Result<Pass, BenchError> {
    let file = File::open(path).doing(|| format!("opening {}", path.display()))?;
    let start = Instant::now();
    let (latencies_us, checksum) = read_all(&file, pages, |_| {}).doing(|| "reading".into())?;
    Ok(Pass { seconds: start.elapsed().as_secs_f64(), latencies_us, checksum, issued_pages: 0, wasted_pages: 0 })
}

fn oracle_pass(path: &Path, pages: &[u64], options: &BenchOptions) -> Result<Pass, BenchError> {
    // The executor and runtime stand ready before the clock starts, as a
    // running daemon would.
    let config = ExecutorConfig {
        backend: options.backend,
        io_depth: options.depth,
        limits: Limits {
            max_io_pages: options.max_io_pages,
            max_inflight_pages: (options.max_io_pages * options.depth as u64).max(1 << 14),
            track_hits: true,
            ..Limits::default()
        },
        ..ExecutorConfig::default()
    };
    let executor = Arc::new(Executor::new(config)?);
    let mut runtime = Runtime::new(Arc::clone(&executor));
    runtime.add_policy(Box::new(OraclePolicy));
    let target = FileRef::open(path)?;
    let id = target.id();
    runtime.hold_file(target);
    let file = File::open(path).doing(|| format!("opening {}", path.display()))?;
    let plan = Event::ReadPlan { file: id, segments: segments(pages).into() };

    let start = Instant::now();
    runtime.dispatch(&plan);
    let (latencies_us, checksum) =
        read_all(&file, pages, |p| executor.note_access(id, PageRange::page(p))).doing(|| "reading".into())?;
    let seconds = start.elapsed().as_secs_f64();

    executor.wait_idle(Duration::from_secs(30));
    let stats = executor.stats();
    Ok(Pass {
        seconds,
        latencies_us,
        checksum,
        issued_pages: stats.total.issued_pages,
        wasted_pages: executor.accounting().outstanding_pages() + stats.total.wasted_pages,
    })
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let runs: &[u64] =
        if options.quick { &[1, 16, 4096] } else { &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096] };
    let pairs = if options.quick { options.pairs.min(3) } else { options.pairs };
    let file_size: u64 = if options.quick { 256 << 20 } else { 1 << 30 };
    let settings_ra = read_ahead_settings(options);
    let steps = (settings_ra.len() * runs.len() * (pairs * 2 + 1)) as u64;
    let h = Harness::new(options, steps)?;
    h.say("writing the data file");
    let path = data_file(&options.dir, "access-patterns.dat", file_size)?;
    let file_pages = file_size / PAGE_SIZE;

    let mut cases = Vec::new();
    let mut notes = Vec::new();
    for (ra_index, &ra) in settings_ra.iter().enumerate() {
        let ra_cases = with_read_ahead(&options.dir, ra, || {
            let mut out = Vec::new();
            for &run in runs {
                out.push(measure_case(&h, &path, run, file_pages, pairs, ra, ra_index > 0)?);
            }
            Ok(out)
        })?;
        cases.extend(ra_cases);
    }
    h.finish();

    let jumpy: Vec<&Case> = cases.iter().filter(|c| run_of(c).is_some_and(|r| r <= 16)).collect();
    let p95_ratio = |c: &Case| num(c, "baseline_p95_us") / num(c, "treatment_p95_us").max(1e-9);
    if let Some(worst) = jumpy.iter().map(|c| p95_ratio(c)).reduce(f64::min) {
        notes.push(format!("runs of 1-16 pages: worst P95 demand-latency ratio {worst:.1}x (bar: >= 5x)"));
    }
    if let Some(worst) = jumpy.iter().map(|c| c.ratio_median).reduce(f64::min) {
        notes.push(format!("runs of 1-16 pages: worst total-time median ratio {worst:.2}x (bar: >= 3x)"));
    }
    for c in cases.iter().filter(|c| c.ratio_median < 1.05) {
        notes
            .push(format!("{}: no real gain ({:.2}x) - readahead already covers this pattern", c.name, c.ratio_median));
    }
    notes.push("treatment = kernel readahead at the same setting + oracle policy prefetching through the executor (backend and depth in settings); limit_s = max(runs / device random-4K IOPS at the deepest probed depth, 16 MiB / device bandwidth)".into());

    Ok(Report {
        workload: "access-patterns".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "reads_per_pass": READS, "file_bytes": file_size, "pairs": pairs,
            "run_lengths": runs, "read_ahead_kb": settings_ra,
            "executor": {"backend": options.backend, "io_depth": options.depth, "max_io_kib": options.max_io_pages * 4},
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}

fn num(case: &Case, key: &str) -> f64 {
    case.extra.get(key).and_then(|v| v.as_f64()).unwrap_or(0.0)
}

fn run_of(case: &Case) -> Option<u64> {
    case.extra.get("run_pages").and_then(|v| v.as_u64())
}

fn measure_case(
    h: &Harness,
    path: &Path,
    run: u64,
    file_pages: u64,
    pairs: usize,
    ra: u64,
    tag_ra: bool,
) -> Result<Case, BenchError> {
    let name = match (run >= READS, tag_ra) {
        (true, false) => "sequential".to_string(),
        (true, true) => format!("sequential@ra{ra}"),
        (false, false) => format!("run-{run}"),
        (false, true) => format!("run-{run}@ra{ra}"),
    };
    let mut base_s = Vec::new();
    let mut treat_s = Vec::new();
    let (mut base_p50, mut base_p95, mut treat_p50, mut treat_p95) = (vec![], vec![], vec![], vec![]);
    let mut sums = Vec::new();
    let mut resident_before: f64 = 0.0;
    let (mut issued, mut wasted) = (Vec::new(), Vec::new());
    for pair in 0..pairs {
        // A fresh pattern per pair, the same for both sides of the pair.
        let pages = pattern(run, file_pages, 0x5EED ^ (run << 8) ^ pair as u64);
        // Both sides, alternating which goes first, each from cold.
        let seen = h.round(pair, 2, &[path], |side| {
            let treatment = side == 1;
            let pass = if treatment { oracle_pass(path, &pages, &h.options)? } else { baseline_pass(path, &pages)? };
            let (s, p50, p95) = if treatment {
                (&mut treat_s, &mut treat_p50, &mut treat_p95)
            } else {
                (&mut base_s, &mut base_p50, &mut base_p95)
            };
            s.push(pass.seconds);
            p50.push(percentile(&pass.latencies_us, 50.0));
            p95.push(percentile(&pass.latencies_us, 95.0));
            if treatment {
                issued.push(pass.issued_pages as f64);
                wasted.push(pass.wasted_pages as f64);
            }
            sums.push((pair, pass.checksum));
            h.step(format!("{name} pair {}/{pairs}", pair + 1));
            Ok(())
        })?;
        resident_before = resident_before.max(seen);
    }
    // Warm: the last treatment left the pages resident.
    let last = pattern(run, file_pages, 0x5EED ^ (run << 8) ^ (pairs as u64 - 1));
    let warm = baseline_pass(path, &last)?;
    h.step(format!("{name} warm"));

    let identical = sums.chunks(2).all(|pair| pair.len() == 2 && pair[0].1 == pair[1].1);
    let runs = READS / run.min(READS);
    let limit = (runs as f64 / h.iops().max(1.0)).max((READS * PAGE_SIZE) as f64 / h.bandwidth().max(1.0));
    let mut case = Case::ab(name, base_s, treat_s);
    case.limit_s = Some(limit);
    case.warm_s = Some(warm.seconds);
    case.resident_before = resident_before;
    case.answers_identical = identical;
    case.issued_bytes = (median(&issued) * PAGE_SIZE as f64) as u64;
    case.wasted_bytes = (median(&wasted) * PAGE_SIZE as f64) as u64;
    let extra = &mut case.extra;
    extra.insert("run_pages".into(), run.min(READS).into());
    extra.insert("read_ahead_kb".into(), ra.into());
    extra.insert("baseline_p50_us".into(), median(&base_p50).into());
    extra.insert("baseline_p95_us".into(), median(&base_p95).into());
    extra.insert("treatment_p50_us".into(), median(&treat_p50).into());
    extra.insert("treatment_p95_us".into(), median(&treat_p95).into());
    extra.insert("p95_ratio".into(), (median(&base_p95) / median(&treat_p95).max(1e-9)).into());
    Ok(case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_has_runs_and_stays_in_file() {
        for run in [1, 2, 16, 4096] {
            let pages = pattern(run, 65536, 7);
            assert_eq!(pages.len() as u64, READS);
            assert!(pages.iter().all(|&p| p < 65536));
            let jumps = pages.windows(2).filter(|w| w[1] != w[0] + 1).count() as u64;
            assert!(jumps < READS / run, "run {run}: {jumps} jumps");
            let mut sorted = pages.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(sorted.len() as u64, READS, "no page read twice");
        }
    }

    #[test]
    fn segments_merge_runs() {
        let s = segments(&[4, 5, 6, 10, 2]);
        assert_eq!(
            s,
            vec![ByteRange::new(4 * 4096, 3 * 4096), ByteRange::new(40960, 4096), ByteRange::new(8192, 4096)]
        );
    }
}
