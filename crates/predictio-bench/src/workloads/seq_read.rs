//! `seq-read`: seed 002's 64 KiB buffered sequential reads of a 2 GiB file
//! (`--quick`: 256 MiB), cold, at `read_ahead_kb` 128 and at the machine's
//! default (and at any `--read-ahead-kb` given).
//!
//! Sides, interleaved in a balanced order, cold before every pass:
//!
//! - **baseline**: `pread`s of 64 KiB from offset 0 to the end; the kernel's
//!   readahead alone.
//! - **stream** (treatment): the same reads through
//!   [`predictio::reader::PrefetchingReader`] with the `stream` policy.
//! - **learned** (`learned_s`): the same reader with the `learned` policy.
//!
//! Reported: MB/s of each side beside the device's best sequential bandwidth
//! (O_DIRECT, probed by the harness) and each side's share of it (bar: at
//! least 80 % at both settings), the file's checksum (the same for every
//! side), and the reader's hits and waste.

use std::path::Path;
use std::time::Instant;

use predictio::reader::ReaderConfig;

use super::reader_sides::{Pass, PassFile, Runs, SIDES, Side, interleave};
use crate::BenchOptions;
use crate::harness::{
    BenchError, Harness, IoContext, checksum, data_file, insert_reader_stats, median_u64, with_read_ahead,
};
use crate::report::{Case, Report, median};

/// Seed 002's read size.
pub const READ: usize = 64 << 10;

fn pass(path: &Path, side: Side) -> Result<Pass, BenchError> {
    let mut file = PassFile::open(path, side, ReaderConfig::default().check_residency)?;
    let mut buf = vec![0u8; READ];
    let mut sum = 0;
    let mut offset = 0u64;
    let start = Instant::now();
    loop {
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            break;
        }
        sum = checksum(sum, &buf[..n]);
        offset += n as u64;
    }
    let seconds = start.elapsed().as_secs_f64();
    Ok(Pass { seconds, checksum: sum, reader: file.finish() })
}

fn measure(h: &Harness, path: &Path, size: u64, ra: u64, pairs: usize) -> Result<Case, BenchError> {
    let name = format!("seq-64k@ra{ra}");
    let Runs { secs, stats, sums, resident_before, warm } = interleave(h, path, &name, pairs, |side| pass(path, side))?;

    let device_mbps = h.bandwidth() / 1e6;
    let mut case = Case::ab(name, secs[0].clone(), secs[1].clone());
    case.limit_s = Some(size as f64 / h.bandwidth().max(1.0));
    case.warm_s = Some(warm.seconds);
    case.resident_before = resident_before;
    case.answers_identical = sums.windows(2).all(|w| w[0] == w[1]);
    let med_u64 = |xs: Vec<u64>| median_u64(xs);
    case.issued_bytes = med_u64(stats[1].iter().map(|s| s.prefetched_bytes).collect()) as u64;
    case.wasted_bytes = med_u64(stats[1].iter().map(|s| s.wasted_bytes).collect()) as u64;
    let e = &mut case.extra;
    e.insert("read_ahead_kb".into(), ra.into());
    e.insert("file_bytes".into(), size.into());
    e.insert("learned_s".into(), secs[2].clone().into());
    let ratio: Vec<f64> = secs[0].iter().zip(&secs[2]).map(|(b, t)| b / t.max(1e-12)).collect();
    e.insert("learned_ratio_median".into(), median(&ratio).into());
    e.insert("device_MBps".into(), device_mbps.into());
    for (s, side) in SIDES.iter().enumerate() {
        let n = side.name();
        let mbps = size as f64 / median(&secs[s]).max(1e-12) / 1e6;
        e.insert(format!("{n}_MBps"), mbps.into());
        e.insert(format!("{n}_pct_of_device"), (100.0 * mbps / device_mbps.max(1e-9)).into());
        insert_reader_stats(e, n, &stats[s]);
    }
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let size: u64 = if options.quick { 256 << 20 } else { 2 << 30 };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let default_ra = crate::machine::read_ahead_kb(&options.dir).doing(|| "reading read_ahead_kb".into())?;
    let mut settings = vec![128, default_ra];
    settings.extend(options.read_ahead_kb.iter().copied());
    settings.sort_unstable();
    settings.dedup();
    let h = Harness::new(options, (settings.len() * (pairs * SIDES.len() + 1)) as u64)?;
    let path = data_file(&options.dir, "seq-read.dat", size)?;
    let mut cases = Vec::new();
    for &ra in &settings {
        cases.push(with_read_ahead(&options.dir, ra, || measure(&h, &path, size, ra, pairs))?);
    }
    h.finish();
    let mut notes = Vec::new();
    for c in &cases {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        let best = get("stream_pct_of_device").max(get("learned_pct_of_device"));
        notes.push(format!(
            "{}: baseline {:.0} MB/s ({:.0} %), stream {:.0} MB/s ({:.0} %, {:.2}x), learned {:.0} MB/s ({:.0} %, {:.2}x) \
             of the device's {:.0} MB/s; bar >= 80 %: {}",
            c.name,
            get("baseline_MBps"),
            get("baseline_pct_of_device"),
            get("stream_MBps"),
            get("stream_pct_of_device"),
            c.ratio_median,
            get("learned_MBps"),
            get("learned_pct_of_device"),
            get("learned_ratio_median"),
            get("device_MBps"),
            if best >= 80.0 { "met" } else { "not met" },
        ));
        let mut honest = Vec::new();
        if c.ratio_median < 1.03 {
            honest.push(format!("stream gives no gain over the kernel's readahead ({:.2}x)", c.ratio_median));
        }
        if get("learned_ratio_median") < 1.0 {
            honest.push(format!("learned is slower than the baseline ({:.2}x)", get("learned_ratio_median")));
        }
        if !honest.is_empty() {
            notes.push(format!("{}: {}", c.name, honest.join("; ")));
        }
    }
    if options.quick {
        notes.push(
            "--quick: passes of a 256 MiB file last ~0.1 s and the short device probe varies between runs: \
             a smoke test, not a result"
                .into(),
        );
    }
    notes.push(format!(
        "the machine's default read_ahead_kb is {default_ra}{}; the reader checks residency (mincore) before every 64 KiB read",
        if default_ra == 128 { " (so both settings are the same case)" } else { "" }
    ));
    Ok(Report {
        workload: "seq-read".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "file_bytes": size, "read_bytes": READ, "pairs": pairs, "read_ahead_kb": settings,
            "default_read_ahead_kb": default_ra,
            "sides": ["baseline", "stream", "learned"],
            "stream": "PrefetchingReader, ReaderConfig::default() (stream: confirmed by a continuation once its run has read 256 KiB, window 256 KiB..64 MiB, 2 MiB I/Os)",
            "learned": "PrefetchingReader with LearnedConfig::default()",
        }),
        cold_method: h.cold.describe().into(),
        cases,
        notes,
    })
}
