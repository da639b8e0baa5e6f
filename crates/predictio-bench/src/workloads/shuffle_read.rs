//! `shuffle-read`: seed 004's microbenchmark (Riffle, PR #411) — one reader
//! takes a file in 14 MiB batches, consecutive and ascending, with a pause
//! between batches (the executor's processing of a shuffle block), cold.
//!
//! Cases: a 400 ms pause over 20 batches (the seed's captured run), and a
//! 20 ms pause over the whole file (1 GiB; `--quick`: 256 MiB, 8 batches at
//! 400 ms). Sides, interleaved in a balanced order, cold before every
//! pass:
//!
//! - **baseline**: plain `pread`s; the kernel's readahead at the machine's
//!   setting.
//! - **riffle** (`riffle_s`): Riffle's fixed-window scheme reimplemented as a
//!   peer: `fadvise(WILLNEED)` of 4 batches at the first read, 2 more
//!   whenever a read reaches into the last batch of the loaded window (one
//!   call per batch).
//! - **stream** (treatment): [`predictio::reader::PrefetchingReader`] with
//!   the `stream` policy and no plan.
//! - **readplan** (`readplan_s`): the same reader told every upcoming batch
//!   at the start ([`PrefetchingReader::plan`]), speculation off.
//!
//! Total read time sums the batch reads only, never the pauses. Per side:
//! median and max batch latency, a checksum of every byte read (the same for
//! all sides), and for the reader sides the library's checked hits, misses,
//! prefetched and wasted bytes. The limit is the bytes read over the
//! device's best bandwidth.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, Instant};

use predictio::os::{Advice, fadvise};
use predictio::reader::{PrefetchingReader, ReaderConfig, ReaderStats, Speculation};

use crate::BenchOptions;
use crate::harness::{BenchError, Harness, IoContext, checksum, data_file, insert_reader_stats, median_u64};
use crate::report::{Case, Report, median};

/// Seed 004's batch: 14 MiB.
pub const BATCH: u64 = 14 << 20;

/// The sides, in their base order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Baseline,
    Riffle,
    Stream,
    ReadPlan,
}

const SIDES: [Side; 4] = [Side::Baseline, Side::Riffle, Side::Stream, Side::ReadPlan];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Riffle => "riffle",
            Side::Stream => "stream",
            Side::ReadPlan => "readplan",
        }
    }
}

/// One pass of one side.
#[derive(Debug, Default)]
struct Pass {
    /// Sum of batch read times, s.
    total_s: f64,
    /// Each batch's read time, ms.
    batch_ms: Vec<f64>,
    checksum: u64,
    /// The library's counters (reader sides).
    reader: Option<ReaderStats>,
}

/// Riffle's read-ahead layer (PR #411): 4 batches on the first read, 2 more
/// as the reader nears the end of the loaded window.
struct RiffleWindow {
    loaded_to: Option<u64>,
    size: u64,
}

impl RiffleWindow {
    fn before_read(&mut self, file: &File, offset: u64) -> std::io::Result<()> {
        let (from, batches) = match self.loaded_to {
            None => (offset, 4),
            // This read reaches into the window's last batch: two more.
            Some(loaded) if loaded < self.size && offset + 2 * BATCH > loaded => (loaded, 2),
            Some(_) => return Ok(()),
        };
        let mut at = from;
        // One call per batch, as Riffle advises each batch's extent. The
        // kernel reads at most max(io_pages, ra_pages) of one WILLNEED call
        // (force_page_cache_ra), so a 14 MiB call brings in only the first
        // read_ahead_kb of its batch.
        for _ in 0..batches {
            let end = (at + BATCH).min(self.size);
            if end > at {
                fadvise(file.as_fd(), at, end - at, Advice::WillNeed)?;
            }
            at = end;
        }
        self.loaded_to = Some(at);
        Ok(())
    }
}

fn pass(path: &Path, side: Side, batches: u64, pause: Duration) -> Result<Pass, BenchError> {
    let open = || File::open(path).doing(|| format!("opening {}", path.display()));
    let file = open()?;
    let size = file.metadata().doing(|| "stat".into())?.len();
    let mut buf = vec![0u8; BATCH as usize];
    let mut out = Pass::default();
    let mut riffle = RiffleWindow { loaded_to: None, size };
    let mut reader = match side {
        Side::Baseline | Side::Riffle => None,
        Side::Stream => Some(PrefetchingReader::new(open()?, ReaderConfig::default()).map_err(reader_error)?),
        Side::ReadPlan => {
            let config = ReaderConfig { speculation: Speculation::Off, ..ReaderConfig::default() };
            let mut r = PrefetchingReader::new(open()?, config).map_err(reader_error)?;
            let plan: Vec<(u64, u64)> = (0..batches).map(|i| (i * BATCH, BATCH)).collect();
            // Announcing the plan is part of the reader's work: timed.
            let start = Instant::now();
            r.plan(&plan);
            out.total_s += start.elapsed().as_secs_f64();
            Some(r)
        }
    };
    for i in 0..batches {
        let offset = i * BATCH;
        let len = BATCH.min(size.saturating_sub(offset)) as usize;
        if len == 0 {
            break;
        }
        let start = Instant::now();
        match (&mut reader, side) {
            (Some(r), _) => r.read_exact_at(&mut buf[..len], offset).map_err(reader_error)?,
            (None, Side::Riffle) => {
                riffle.before_read(&file, offset).doing(|| "fadvise(WILLNEED)".into())?;
                file.read_exact_at(&mut buf[..len], offset).doing(|| format!("reading at {offset}"))?;
            }
            (None, _) => file.read_exact_at(&mut buf[..len], offset).doing(|| format!("reading at {offset}"))?,
        }
        let took = start.elapsed().as_secs_f64();
        out.total_s += took;
        out.batch_ms.push(took * 1e3);
        out.checksum = checksum(out.checksum, &buf[..len]);
        if i + 1 < batches {
            std::thread::sleep(pause);
        }
    }
    out.reader = reader.map(PrefetchingReader::finish);
    Ok(out)
}

fn reader_error(err: predictio::reader::ReaderError) -> BenchError {
    BenchError::Options(format!("prefetching reader: {err}"))
}

fn max(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(0.0, f64::max)
}

/// One case: `batches` batches with `pause` between them.
fn measure(
    h: &Harness,
    path: &Path,
    name: &str,
    batches: u64,
    pause: Duration,
    pairs: usize,
) -> Result<Case, BenchError> {
    let mut totals: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut medians: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut maxes: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    // Where the total goes: the first batch, the second, and the rest.
    let mut parts: Vec<[Vec<f64>; 3]> = vec![Default::default(); SIDES.len()];
    let mut stats: Vec<Vec<ReaderStats>> = vec![Vec::new(); SIDES.len()];
    let mut sums = Vec::new();
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        let resident = h.round(pair, SIDES.len(), &[path], |s| {
            let p = pass(path, SIDES[s], batches, pause)?;
            totals[s].push(p.total_s);
            medians[s].push(median(&p.batch_ms));
            maxes[s].push(max(&p.batch_ms));
            let at = |i: usize| p.batch_ms.get(i).copied().unwrap_or(0.0);
            parts[s][0].push(at(0));
            parts[s][1].push(at(1));
            parts[s][2].push(p.batch_ms.iter().skip(2).sum());
            sums.push(p.checksum);
            if let Some(r) = p.reader {
                stats[s].push(r);
            }
            h.step(format!("{name} pair {}/{pairs}: {}", pair + 1, SIDES[s].name()));
            Ok(())
        })?;
        resident_before = resident_before.max(resident);
    }
    // Warm: the file's batches are resident after the last pass's prefetch
    // only in part, so read them once untimed, then time a warm pass.
    pass(path, Side::Baseline, batches, Duration::ZERO)?;
    let warm = pass(path, Side::Baseline, batches, Duration::ZERO)?;
    h.step(format!("{name} warm"));

    let bytes = (batches * BATCH).min(std::fs::metadata(path).doing(|| "stat".into())?.len());
    let mut case = Case::ab(name, totals[0].clone(), totals[2].clone());
    case.limit_s = Some(bytes as f64 / h.bandwidth().max(1.0));
    case.warm_s = Some(warm.total_s);
    case.resident_before = resident_before;
    case.answers_identical = sums.windows(2).all(|w| w[0] == w[1]);
    let stream = &stats[2];
    let med_u64 = |xs: Vec<u64>| median_u64(xs);
    case.issued_bytes = med_u64(stream.iter().map(|s| s.prefetched_bytes).collect()) as u64;
    case.wasted_bytes = med_u64(stream.iter().map(|s| s.wasted_bytes).collect()) as u64;
    let e = &mut case.extra;
    e.insert("batches".into(), batches.into());
    e.insert("batch_bytes".into(), BATCH.into());
    e.insert("pause_ms".into(), (pause.as_millis() as u64).into());
    e.insert("bytes".into(), bytes.into());
    e.insert("riffle_s".into(), totals[1].clone().into());
    e.insert("readplan_s".into(), totals[3].clone().into());
    let ratio = |b: &[f64], t: &[f64]| {
        let r: Vec<f64> = b.iter().zip(t).map(|(b, t)| b / t.max(1e-12)).collect();
        median(&r)
    };
    // A floor for any side that cannot know the first batch before it is
    // asked for: the first batch cold (as the baseline read it), every later
    // one a page-cache copy at the warm pass's rate.
    let warm_batch_ms = warm.total_s * 1e3 / (warm.batch_ms.len().max(1) as f64);
    let floor_ms = median(&parts[0][0]) + warm_batch_ms * (warm.batch_ms.len().saturating_sub(1) as f64);
    e.insert("warm_batch_ms".into(), warm_batch_ms.into());
    e.insert("floor_ms".into(), floor_ms.into());
    e.insert("floor_total_change_pct".into(), (100.0 * (floor_ms / (1e3 * median(&totals[0])).max(1e-9) - 1.0)).into());
    e.insert("riffle_ratio_median".into(), ratio(&totals[0], &totals[1]).into());
    e.insert("readplan_ratio_median".into(), ratio(&totals[0], &totals[3]).into());
    e.insert("stream_vs_riffle_ratio_median".into(), ratio(&totals[1], &totals[2]).into());
    for (s, side) in SIDES.iter().enumerate() {
        let n = side.name();
        e.insert(format!("{n}_total_change_pct"), (100.0 * (median(&totals[s]) / median(&totals[0]) - 1.0)).into());
        e.insert(format!("{n}_median_batch_ms"), median(&medians[s]).into());
        e.insert(format!("{n}_max_batch_ms"), median(&maxes[s]).into());
        e.insert(format!("{n}_first_batch_ms"), median(&parts[s][0]).into());
        e.insert(format!("{n}_second_batch_ms"), median(&parts[s][1]).into());
        e.insert(format!("{n}_rest_batches_ms"), median(&parts[s][2]).into());
        e.insert(
            format!("{n}_median_batch_change_pct"),
            (100.0 * (median(&medians[s]) / median(&medians[0]).max(1e-12) - 1.0)).into(),
        );
        if !stats[s].is_empty() {
            let st = &stats[s];
            e.insert(format!("{n}_hits"), med_u64(st.iter().map(|x| x.hits).collect()).into());
            e.insert(format!("{n}_misses"), med_u64(st.iter().map(|x| x.misses).collect()).into());
        }
        insert_reader_stats(e, n, &stats[s]);
    }
    Ok(case)
}

/// Runs the workload.
pub fn run(options: &BenchOptions) -> Result<Report, BenchError> {
    let size: u64 = if options.quick { 256 << 20 } else { 1 << 30 };
    let pairs = if options.quick { options.pairs.min(2) } else { options.pairs };
    let all = size.div_ceil(BATCH);
    let cases: Vec<(String, u64, Duration)> = vec![
        ("pause-400ms".into(), if options.quick { 8 } else { 20 }, Duration::from_millis(400)),
        ("pause-20ms".into(), all, Duration::from_millis(20)),
    ];
    let h = Harness::new(options, (cases.len() * (pairs * SIDES.len() + 1)) as u64)?;
    let path = data_file(&options.dir, "shuffle-read.dat", size)?;
    let mut out = Vec::new();
    for (name, batches, pause) in &cases {
        out.push(measure(&h, &path, name, *batches, *pause, pairs)?);
    }
    h.finish();
    let mut notes = Vec::new();
    for c in &out {
        let get = |k: &str| c.extra.get(k).and_then(|v| v.as_f64()).unwrap_or(f64::NAN);
        notes.push(format!(
            "{}: total read time vs baseline: riffle {:+.1} %, stream {:+.1} %, readplan {:+.1} % (seed: -85.2 %, bar: -90 %); \
             median batch: riffle {:+.1} %, stream {:+.1} %, readplan {:+.1} % (seed: -90.2 %, bar: -90 %); \
             stream vs riffle {:.2}x; stream hit rate {:.2}, wasted {} of {} prefetched bytes",
            c.name,
            get("riffle_total_change_pct"),
            get("stream_total_change_pct"),
            get("readplan_total_change_pct"),
            get("riffle_median_batch_change_pct"),
            get("stream_median_batch_change_pct"),
            get("readplan_median_batch_change_pct"),
            get("stream_vs_riffle_ratio_median"),
            get("stream_hit_rate"),
            c.wasted_bytes,
            c.issued_bytes,
        ));
        let met = |side: &str| {
            get(&format!("{side}_total_change_pct")) <= -90.0
                && get(&format!("{side}_median_batch_change_pct")) <= -90.0
        };
        notes.push(format!(
            "{}: bar (-90 % total and median batch) {} by stream, {} by readplan; stream {} the riffle peer",
            c.name,
            if met("stream") { "met" } else { "not met" },
            if met("readplan") { "met" } else { "not met" },
            if get("stream_vs_riffle_ratio_median") > 1.0 { "is ahead of" } else { "is not ahead of" },
        ));
        let parts: Vec<String> = SIDES
            .iter()
            .map(|side| {
                let n = side.name();
                format!(
                    "{n} {:.1} + {:.1} + {:.1}",
                    get(&format!("{n}_first_batch_ms")),
                    get(&format!("{n}_second_batch_ms")),
                    get(&format!("{n}_rest_batches_ms")),
                )
            })
            .collect();
        notes.push(format!(
            "{}: floor for a side that learns of the first batch when it is read: the baseline's first batch ({:.1} ms) \
             + every later batch at the warm pass's copy rate ({:.2} ms a batch) = {:.1} ms, {:+.1} % vs the baseline \
             total ({:.1} ms; the bar, -90 %, is {:.1} ms); the reader sides' median batch (their hits) is {:.2} ms \
             (stream) and {:.2} ms (readplan)",
            c.name,
            get("baseline_first_batch_ms"),
            get("warm_batch_ms"),
            get("floor_ms"),
            get("floor_total_change_pct"),
            1e3 * median(&c.baseline_s),
            100.0 * median(&c.baseline_s),
            get("stream_median_batch_ms"),
            get("readplan_median_batch_ms"),
        ));
        notes.push(format!(
            "{}: where the read time goes, ms (median of passes; first batch + second batch + all later ones): {}",
            c.name,
            parts.join("; "),
        ));
    }
    if options.quick {
        notes.push("--quick: 256 MiB file, 2 pairs at most: a smoke test, not a result".into());
    }
    notes.push(
        "total = the batch reads only (the pauses are excluded); hits are checked with mincore before each read; \
         the stream reader is confirmed by its second batch (one read is no stream), so its first two batches \
         find their pages absent; the readplan reader's plan covers the first batch but the read starts at once \
         (Riffle's window starts at the first read); until that read the readplan policy requests only the first \
         batch, so its read does not queue behind the rest of the window"
            .into(),
    );
    notes.push(format!(
        "the kernel reads at most max(io_pages, read_ahead_kb) (read_ahead_kb here: {} KiB) of one fadvise(WILLNEED) call \
         (mm/readahead.c force_page_cache_ra), so the riffle peer's 14 MiB calls each bring in only that much of \
         their batch; the reader's executor issues calls of at most 2 MiB and is not capped",
        h.machine.read_ahead_kb
    ));
    notes.push(
        "every side pays its first batch cold; with a fast device (baseline median batch far below the seed's \
         92 ms) that batch and the memory copy of every later 14 MiB batch, hit or not, bound the total-time \
         reduction (see where the read time goes)"
            .into(),
    );
    notes.push(
        "wasted bytes: a case that stops before the end of the file leaves the stream's window (up to 64 MiB) \
         prefetched and unread; the reader counts it as waste when it finishes"
            .into(),
    );
    Ok(Report {
        workload: "shuffle-read".into(),
        command: options.command.clone(),
        provenance: crate::report::Provenance::capture(),
        created: crate::report::now_rfc3339(),
        machine: h.machine.clone(),
        settings: serde_json::json!({
            "file_bytes": size, "batch_bytes": BATCH, "pairs": pairs,
            "sides": ["baseline", "riffle", "stream", "readplan"],
            "riffle": "fadvise(WILLNEED) 4 batches at the first read, 2 more when a read reaches the window's last batch; one call per batch",
            "stream": "PrefetchingReader, ReaderConfig::default() (stream: confirmed by a continuation once its run has read 256 KiB, window 256 KiB..64 MiB, 2 MiB I/Os)",
            "readplan": "PrefetchingReader, speculation off, every batch planned at the start (readplan: 64 MiB ahead; only the first batch until the first read)",
        }),
        cold_method: h.cold.describe().into(),
        cases: out,
        notes,
    })
}
