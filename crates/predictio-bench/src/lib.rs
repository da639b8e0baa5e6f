//! predictio's benchmark harness: the protocol of BENCHMARKS.md in code.
//!
//! Every workload makes the cache cold before each pass and checks that it is
//! (`cachestat`), alternates baseline and treatment passes (A B A B …),
//! reports each pair's ratio and the median, puts the machine's physical limit
//! beside every figure (warm time; bytes or I/Os over the device's measured
//! best), and checks that answers are identical with and without prefetching.
//! Results are written as JSON, Markdown and SVG.
//!
//! All `unsafe` code is in one private module, `sys`: io_uring queue pushes,
//! aligned buffers for `O_DIRECT`, opening LMDB environments; system calls
//! go through rustix there.

#![deny(unsafe_code)]

pub mod device;
pub mod harness;
pub mod llm_model;
pub mod machine;
pub mod oracle;
pub mod report;
pub mod summary;
#[allow(unsafe_code)]
mod sys;
pub mod workloads;

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

pub use harness::{BenchError, Harness};
pub use report::Report;

/// A benchmark workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Seed 000 Figure 1: jumpy page reads, readahead vs an oracle policy.
    AccessPatterns,
    /// Executor cost per page skipped and issued; runtime dispatch rate.
    ControlPath,
    /// Prefetch a fragmented range list of a 256 MiB file with each backend.
    Backends,
    /// Seed 003: 1–128 MiB random buffered reads, read() vs the large-read engine.
    LargeRead,
    /// Seed 004: a file read in 14 MiB batches with pauses; baseline, Riffle's window, stream, readplan.
    ShuffleRead,
    /// Seed 002: 64 KiB buffered sequential reads; baseline, stream, learned.
    SeqRead,
    /// Seed 000 §6.3: cold LMDB range scans, plain vs the LMDB adapter (btree policy).
    LmdbScan,
    /// Seed 000 §4.3 / 003: llama.cpp loading generated GGUF models cold, mmap and no-mmap.
    LlmLoad,
    /// Seeds 000 §4.3 / 003: Python safetensors and GGUF loaders and DuckDB over Parquet, cold, beside the daemon.
    ModelLoad,
    /// Seed 000 §4.2: cold range scans of a fragmented SQLite table; baseline, adapter, no-change daemon mode.
    SqliteScan,
    /// Seeds 000 §4.1 and 001: cold starts of real programs; baseline, the
    /// daemon as installed, exact-profile replay, whole-file prefetch, preload.
    Launch,
    /// Cold starts of real programs with the daemon as installed (default configuration, its own learning).
    LaunchDaemon,
    /// Seed 000 §6.3: RocksDB long scan, YCSB-E, YCSB-C; its own readahead, off, the scan policy.
    RocksDb,
    /// Random 4 KiB reads and an unpredictable scan: stream and learned stay out of the way.
    NoStructure,
    /// What the running daemon costs: idle CPU and wake-ups, launches beside it warm and while it learns.
    DaemonCost,
}

impl Workload {
    /// Every workload.
    pub const ALL: &[Workload] = &[
        Workload::AccessPatterns,
        Workload::ControlPath,
        Workload::Backends,
        Workload::LargeRead,
        Workload::ShuffleRead,
        Workload::SeqRead,
        Workload::LmdbScan,
        Workload::LlmLoad,
        Workload::ModelLoad,
        Workload::SqliteScan,
        Workload::Launch,
        Workload::LaunchDaemon,
        Workload::RocksDb,
        Workload::NoStructure,
        Workload::DaemonCost,
    ];

    /// Every workload's name, comma-separated (for messages).
    pub fn names() -> String {
        Workload::ALL.iter().map(|w| w.name()).collect::<Vec<_>>().join(", ")
    }

    /// The workload's name (and result file stem).
    pub fn name(self) -> &'static str {
        match self {
            Workload::AccessPatterns => "access-patterns",
            Workload::ControlPath => "control-path",
            Workload::Backends => "backends",
            Workload::LargeRead => "large-read",
            Workload::ShuffleRead => "shuffle-read",
            Workload::SeqRead => "seq-read",
            Workload::LmdbScan => "lmdb-scan",
            Workload::LlmLoad => "llm-load",
            Workload::ModelLoad => "model-load",
            Workload::SqliteScan => "sqlite-scan",
            Workload::Launch => "launch",
            Workload::LaunchDaemon => "launch-daemon",
            Workload::RocksDb => "rocksdb",
            Workload::NoStructure => "no-structure",
            Workload::DaemonCost => "daemon-cost",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown workload name.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown workload {0:?}: expected one of {names}", names = Workload::names())]
pub struct UnknownWorkload(pub String);

impl FromStr for Workload {
    type Err = UnknownWorkload;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Workload::ALL.iter().copied().find(|w| w.name() == s).ok_or_else(|| UnknownWorkload(s.to_owned()))
    }
}

/// Options common to every workload.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// A/B pairs per case.
    pub pairs: usize,
    /// Directory for the workload's data files.
    pub dir: PathBuf,
    /// Fewer cases and pairs: a smoke test, not a result.
    pub quick: bool,
    /// Extra read_ahead_kb settings to run every case at.
    pub read_ahead_kb: Vec<u64>,
    /// Show a progress bar.
    pub progress: bool,
    /// The command line, recorded in the report.
    pub command: String,
    /// The executor backend for workloads that prefetch through one policy.
    pub backend: predictio::executor::BackendKind,
    /// The executor's I/O depth for those workloads.
    pub depth: u32,
    /// The executor's largest I/O, in pages, for those workloads.
    pub max_io_pages: u64,
    /// Model sizes in GiB (llm-load); empty: the workload's default.
    pub sizes: Vec<u64>,
    /// Kernel features the daemon runs as if absent (launch-daemon:
    /// `[observe] assume_missing`).
    pub assume_missing: Vec<String>,
    /// Only the programs whose names contain one of these (launch-daemon);
    /// empty: every installed one.
    pub programs: Vec<String>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            pairs: 5,
            dir: PathBuf::from("/var/tmp/predictio-bench"),
            quick: false,
            read_ahead_kb: Vec::new(),
            progress: true,
            command: String::new(),
            backend: predictio::executor::BackendKind::Fadvise,
            depth: 64,
            max_io_pages: 64,
            sizes: Vec::new(),
            assume_missing: Vec::new(),
            programs: Vec::new(),
        }
    }
}

/// Runs one workload and returns its report (not yet written).
pub fn run(workload: Workload, options: &BenchOptions) -> Result<Report, BenchError> {
    match workload {
        Workload::AccessPatterns => workloads::access_patterns::run(options),
        Workload::ControlPath => workloads::control_path::run(options),
        Workload::Backends => workloads::backends::run(options),
        Workload::LargeRead => workloads::large_read::run(options),
        Workload::ShuffleRead => workloads::shuffle_read::run(options),
        Workload::SeqRead => workloads::seq_read::run(options),
        Workload::LmdbScan => workloads::lmdb_scan::run(options),
        Workload::LlmLoad => workloads::llm_load::run(options),
        Workload::ModelLoad => workloads::model_load::run(options),
        Workload::SqliteScan => workloads::sqlite_scan::run(options),
        Workload::Launch => workloads::launch::run(options),
        Workload::LaunchDaemon => workloads::launch_daemon::run(options),
        Workload::RocksDb => workloads::rocksdb::run(options),
        Workload::NoStructure => workloads::no_structure::run(options),
        Workload::DaemonCost => workloads::daemon_cost::run(options),
    }
}
