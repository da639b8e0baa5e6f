//! `predictio-bench`: the benchmark binary (also run as `predictio bench`).
//!
//! Kept apart from the `predictio` binary so that the product does not link
//! the benchmark suite and its peers (RocksDB, LMDB). This is, with the
//! `predictio` binary, the only place `anyhow` is used.

#![deny(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Parser;
use predictio_bench::{BenchOptions, Workload};

/// Run a benchmark: cold cache verified, interleaved A/B pairs, medians,
/// ratios and this machine's limits; writes JSON, Markdown and SVG.
///
/// Workloads: access-patterns (jumpy reads, readahead vs an oracle),
/// control-path (executor, dispatch, eBPF, hints), backends (prefetch a
/// fragmented 256 MiB range list with each backend), large-read (parallel
/// large buffered reads), shuffle-read (batches with pauses, Riffle's
/// microbenchmark), seq-read (64 KiB sequential reads), sqlite-scan (cold
/// SQLite range scans: plain, the extension, no change), lmdb-scan (cold
/// LMDB range scans, plain vs the LMDB adapter), rocksdb (long scan,
/// YCSB-E, YCSB-C: RocksDB's readahead vs the scan policy), no-structure
/// (random reads and jumpy scans: stream and learned stay out), llm-load
/// (llama.cpp loading generated GGUF models; needs scripts/llama.sh),
/// model-load (Python safetensors and GGUF loaders and DuckDB over Parquet
/// beside the daemon; needs scripts/bench-deps.sh), launch (cold starts of
/// real programs: the daemon as installed, profiles from record --exact,
/// whole-file prefetch, preload), launch-daemon (the daemon alone, also as
/// on older kernels), daemon-cost (the running daemon: idle CPU, launches
/// beside it).
///
/// `predictio-bench summary [--check README.md]` prints the README's table
/// of headline numbers from docs/results (or checks a README's copy of it).
///
/// Cold caches need root (drop_caches); without it the workload's files
/// are evicted instead and the report says so. The workloads that run
/// `predictio` itself use the `predictio` binary beside this one, or
/// $PREDICTIO_BIN.
#[derive(Parser, Debug)]
#[command(name = "predictio-bench", version, about, long_about)]
struct Args {
    /// The workload: access-patterns, control-path, backends, large-read,
    /// shuffle-read, seq-read, sqlite-scan, lmdb-scan, rocksdb, no-structure,
    /// llm-load, model-load, launch, launch-daemon or daemon-cost.
    workload: Workload,
    /// A/B pairs per case (at least 5 for a reported result).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pairs: u32,
    /// Where the workload's data files live (on the disk being measured).
    #[arg(long, default_value = "/var/tmp/predictio-bench")]
    dir: PathBuf,
    /// Where the JSON, Markdown and SVG results go.
    #[arg(long, default_value = "docs/results")]
    out: PathBuf,
    /// A short run: fewer cases and pairs (a smoke test, not a result).
    #[arg(long)]
    quick: bool,
    /// Also run every case at these read_ahead_kb settings (root), e.g.
    /// --read-ahead-kb 128; the machine's own setting always runs.
    #[arg(long, value_delimiter = ',')]
    read_ahead_kb: Vec<u64>,
    /// Hide the progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Executor backend for workloads that prefetch through a policy
    /// (access-patterns, rocksdb).
    #[arg(long, default_value = "fadvise")]
    backend: predictio::executor::BackendKind,
    /// Executor I/O depth for those workloads.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    depth: u32,
    /// Executor's largest single I/O for those workloads, KiB (4 to 262144).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(4..=262_144))]
    max_io_kib: u64,
    /// Model sizes in GiB for llm-load (default 1,2,4), e.g. --sizes 2,4.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
    /// launch-daemon: run the daemon as if the kernel lacked these
    /// (`[observe] assume_missing`), e.g. filemap_access,procmap_query,cachestat
    /// for a 5.15-like kernel; the result is written as
    /// launch-daemon-without-….json.
    #[arg(long, value_delimiter = ',')]
    assume_missing: Vec<String>,
    /// launch-daemon: only the programs whose names contain one of these,
    /// e.g. --programs clang,rustc.
    #[arg(long, value_delimiter = ',')]
    programs: Vec<String>,
}

/// The README's table of headline numbers, rendered from the committed
/// result files (`predictio-bench summary`), or checked against a README's
/// block between `<!-- results:begin -->` and `<!-- results:end -->`
/// (`predictio-bench summary --check README.md`: exit status 1 and the first
/// differing line when they differ).
#[derive(Parser, Debug)]
#[command(name = "predictio-bench summary", bin_name = "predictio-bench summary")]
struct SummaryArgs {
    /// Check that this README's marked block is exactly the rendered table.
    #[arg(long, value_name = "README")]
    check: Option<PathBuf>,
    /// The directory of the result files.
    #[arg(long, default_value = "docs/results", value_name = "DIR")]
    results: PathBuf,
}

fn summary(args: SummaryArgs) -> ExitCode {
    use predictio_bench::summary;
    let outcome = match &args.check {
        // A closed pipe (`| head`) is not an error.
        None => summary::render(&args.results).map(|table| {
            let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), table.as_bytes());
        }),
        Some(readme) => summary::check_readme(readme, &args.results)
            .map(|()| println!("{}: the results table is the render of {}", readme.display(), args.results.display())),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("predictio-bench summary: {err}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    if std::env::args_os().nth(1).is_some_and(|arg| arg == "summary") {
        return summary(SummaryArgs::parse_from(std::env::args_os().skip(1)));
    }
    let args = Args::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
    match run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("predictio-bench: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// The command line as it was typed, for the report. Run through
/// `predictio bench`, that command is what `PREDICTIO_BENCH_COMMAND` holds.
fn command_line() -> String {
    if let Ok(command) = std::env::var("PREDICTIO_BENCH_COMMAND") {
        return command;
    }
    let words: Vec<String> = std::env::args().map(|a| if a.contains(' ') { format!("{a:?}") } else { a }).collect();
    match words.split_first() {
        Some((_, rest)) => format!("predictio-bench {}", rest.join(" ")),
        None => "predictio-bench".into(),
    }
}

fn run(args: Args) -> Result<()> {
    let options = BenchOptions {
        pairs: args.pairs as usize,
        dir: args.dir,
        quick: args.quick,
        read_ahead_kb: args.read_ahead_kb,
        progress: !args.no_progress,
        command: command_line(),
        backend: args.backend,
        depth: args.depth,
        max_io_pages: args.max_io_kib * 1024 / predictio::PAGE_SIZE,
        sizes: args.sizes,
        assume_missing: args.assume_missing,
        programs: args.programs,
    };
    let report = predictio_bench::run(args.workload, &options).context("running the benchmark")?;
    let paths = report.write(&args.out).with_context(|| format!("writing results to {}", args.out.display()))?;
    println!("{}", report.markdown());
    for path in paths {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
