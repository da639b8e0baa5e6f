//! `predictio prefetch FILE [--range …]… [--backend B]`

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use predictio::executor::{BackendKind, ExecutorConfig, FetchError, Limits};
use predictio::{Executor, PAGE_SIZE, PageRange, Request, Urgency};

use crate::units::{human, parse_range};

/// Arguments of `prefetch`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file to prefetch.
    file: PathBuf,
    /// Byte range to prefetch, START..END or START+LEN (K/M/G suffixes);
    /// repeat for several. Default: the whole file.
    #[arg(long = "range", value_name = "RANGE")]
    ranges: Vec<String>,
    /// How to issue reads: fadvise (asynchronous kernel readahead, the
    /// fastest here), uring (io_uring reads, --depth in flight), readahead or
    /// madvise.
    #[arg(long, default_value = "fadvise")]
    backend: BackendKind,
    /// Reads in flight at once (uring).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    depth: u32,
    /// Largest single read.
    #[arg(long, default_value = "256K", value_parser = parse_io_size)]
    max_io: u64,
    /// Return once the reads are issued instead of waiting until the pages
    /// are resident.
    #[arg(long)]
    no_wait: bool,
    /// Give up waiting after this many seconds.
    #[arg(long, default_value = "120", value_parser = crate::units::parse_seconds)]
    timeout: Duration,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

/// Parses an I/O size between 4K and 256M.
pub fn parse_io_size(text: &str) -> Result<u64, String> {
    let bytes = crate::units::parse_size(text).map_err(|e| e.to_string())?;
    if !(PAGE_SIZE..=(256 << 20)).contains(&bytes) {
        return Err("must be between 4K and 256M".into());
    }
    Ok(bytes)
}

#[derive(serde::Serialize)]
struct Outcome {
    file: String,
    backend: String,
    fallback: Option<String>,
    requested_pages: u64,
    skipped_resident_pages: u64,
    issued_pages: u64,
    issued_ios: u64,
    errors: u64,
    seconds: f64,
    resident_pages: u64,
    wanted_pages: u64,
    resident_fraction_after: f64,
}

/// Runs `prefetch`.
pub fn run(args: Args) -> Result<()> {
    let file = super::open(&args.file)?;
    let size = file.file().metadata().context("stat")?.len();
    let size_pages = size.div_ceil(PAGE_SIZE);
    let mut ranges = Vec::new();
    for text in &args.ranges {
        let span = parse_range(text)?;
        if span.start >= size {
            bail!(
                "range {text:?} starts at byte {} but {} is only {} ({} bytes) long",
                span.start,
                args.file.display(),
                human(size),
                size
            );
        }
        if span.end > size && span.end != u64::MAX {
            eprintln!("predictio: range {text:?} runs past the end of the file; clamped to {}", human(size));
        }
        ranges.push(PageRange::covering_bytes(span.start, span.end.min(size) - span.start));
    }
    if args.ranges.is_empty() {
        if size == 0 {
            bail!("{} is empty: nothing to prefetch", args.file.display());
        }
        ranges.push(PageRange::new(0, size_pages));
    }

    let max_io_pages = args.max_io / PAGE_SIZE;
    let config = ExecutorConfig {
        backend: args.backend,
        io_depth: args.depth,
        max_ranges_per_request: ranges.len().max(1),
        limits: Limits {
            max_pages_per_request: u64::MAX,
            max_io_pages,
            max_inflight_pages: (max_io_pages * args.depth as u64).max(max_io_pages),
            ..Limits::default()
        },
        ..ExecutorConfig::default()
    };
    let executor = Executor::new(config).context("starting the executor")?;
    if let Some(reason) = executor.fallback_reason() {
        eprintln!("predictio: {reason}");
    }
    let origin = executor.register_origin("cli");
    let timeout = args.timeout;
    let start = Instant::now();
    let wanted: u64 = ranges.iter().map(PageRange::len).sum();
    let resident = if args.no_wait {
        // The user asked for these pages explicitly: not speculative.
        let request = Request::new(file.clone(), ranges.clone(), origin).with_urgency(Urgency::Imminent);
        executor.submit(request).context("submitting the request")?;
        if !executor.wait_idle(timeout) {
            bail!("the executor did not finish within {:.0} s", timeout.as_secs_f64());
        }
        predictio::cache::uptodate_pages(&file, &ranges).context("mincore")?
    } else {
        match executor.fetch_and_wait(&file, &ranges, origin, timeout) {
            Ok(resident) => resident,
            Err(FetchError::Timeout { resident, .. }) => resident,
            Err(err) => return Err(err).context("prefetching"),
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    let stats = executor.stats();
    let c = stats.origins[origin.0 as usize].counters;
    let after = predictio::cache::residency(&file).context("cachestat")?;
    let outcome = Outcome {
        file: args.file.display().to_string(),
        backend: executor.backend().to_string(),
        fallback: executor.fallback_reason().map(str::to_owned),
        requested_pages: c.requested_pages,
        skipped_resident_pages: c.skipped_resident_pages,
        issued_pages: c.issued_pages,
        issued_ios: c.issued_ios,
        errors: c.errors,
        seconds,
        resident_pages: resident,
        wanted_pages: wanted,
        resident_fraction_after: after.fraction(),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        println!(
            "{}: {} requested, {} already resident, {} issued in {} reads via {}; {} of {} pages resident after {:.3} s ({:.0} MB/s); file {:.1}% resident",
            outcome.file,
            human(c.requested_pages * PAGE_SIZE),
            human(c.skipped_resident_pages * PAGE_SIZE),
            human(c.issued_pages * PAGE_SIZE),
            c.issued_ios,
            outcome.backend,
            resident,
            wanted,
            seconds,
            (c.issued_pages * PAGE_SIZE) as f64 / seconds.max(1e-9) / 1e6,
            after.fraction() * 100.0
        );
    }
    if c.errors > 0 {
        bail!("{} prefetch reads failed (run with -vv for details)", c.errors);
    }
    if !args.no_wait && resident < wanted {
        bail!("only {resident} of {wanted} pages became resident within {:.0} s", timeout.as_secs_f64());
    }
    Ok(())
}
