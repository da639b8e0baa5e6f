//! `predictio bench WORKLOAD`

use std::path::PathBuf;

use anyhow::{Context, Result};
use predictio_bench::{BenchOptions, Workload};

/// Arguments of `bench`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The workload: access-patterns, control-path, backends, large-read,
    /// shuffle-read, seq-read, sqlite-scan, lmdb-scan, rocksdb, no-structure,
    /// llm-load, launch or daemon-cost.
    workload: Workload,
    /// A/B pairs per case (at least 5 for a reported result).
    #[arg(long, default_value_t = 5)]
    pairs: usize,
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
    /// Executor's largest single I/O for those workloads.
    #[arg(long, default_value = "256K", value_parser = super::prefetch::parse_io_size)]
    max_io: u64,
    /// Model sizes in GiB for llm-load (default 1,2,4), e.g. --sizes 2,4.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<u64>,
}

/// Runs `bench`.
pub fn run(args: Args) -> Result<()> {
    let command = std::env::args().map(|a| if a.contains(' ') { format!("{a:?}") } else { a }).collect::<Vec<_>>();
    let mut command = command.join(" ");
    if let Some(rest) = command.split_once(' ').map(|(_, rest)| rest.to_owned()) {
        command = format!("predictio {rest}");
    }
    let options = BenchOptions {
        pairs: args.pairs,
        dir: args.dir,
        quick: args.quick,
        read_ahead_kb: args.read_ahead_kb,
        progress: !args.no_progress,
        command,
        backend: args.backend,
        depth: args.depth,
        max_io_pages: args.max_io / predictio::PAGE_SIZE,
        sizes: args.sizes,
    };
    let report = predictio_bench::run(args.workload, &options).context("running the benchmark")?;
    let paths = report.write(&args.out).with_context(|| format!("writing results to {}", args.out.display()))?;
    println!("{}", report.markdown());
    for path in paths {
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
