//! `predictio`: make Linux programs stop waiting on storage.
//!
//! A thin binary: argument parsing, output and exit codes. All logic lives in
//! the libraries: `predictio` (core) and `predictio-daemon`; `predictio bench`
//! runs the separate `predictio-bench` binary. This is the only place
//! `anyhow` is used.

#![deny(unsafe_code)]

mod cmd;
mod handoff;
mod units;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// predictio prefetches file pages into the Linux page cache before programs
/// ask for them, through one bounded, page-cache-aware executor.
///
/// Start with `predictio residency FILE` to see what is cached,
/// `predictio prefetch FILE` to bring a file (or ranges of it) in, and
/// `predictio bench access-patterns` to see what prefetching buys on this
/// machine.
#[derive(Parser, Debug)]
#[command(name = "predictio", version, about, long_about, propagate_version = true)]
struct Cli {
    /// Log more (-v: info, -vv: debug). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Read a file, or ranges of it, into the page cache through the executor.
    ///
    /// Pages already resident are skipped, the rest is coalesced and issued
    /// through the chosen backend. By default the command waits until the
    /// pages are resident and reports how long that took.
    ///
    /// Examples:
    ///   predictio prefetch big.db
    ///   predictio prefetch model.gguf --range 0..64M --range 1G..1G+256M --backend uring --depth 32
    Prefetch(cmd::prefetch::Args),
    /// Show how much of each file is in the page cache (like fincore).
    ///
    /// Uses cachestat(2): resident, dirty, under writeback and evicted pages.
    Residency(cmd::residency::Args),
    /// Drop files' clean pages from the page cache (after writing back dirty
    /// ones). Any user may evict files they can read.
    Evict(cmd::evict::Args),
    /// Run a benchmark (the separate `predictio-bench` binary): cold cache
    /// verified, interleaved A/B pairs, medians, ratios and this machine's
    /// limits; writes JSON, Markdown and SVG. `predictio bench --help` lists
    /// the workloads.
    ///
    /// Example:
    ///   predictio bench access-patterns --quick
    Bench(cmd::bench::Args),
    /// Run the service: observe (eBPF), take hints on the hint socket, run
    /// the policies, prefetch, answer `stat`/`top` on the control socket.
    ///
    /// Configuration: /etc/predictio/predictio.toml (every key optional; see
    /// dist/predictio.toml). A systemd unit is in dist/predictio.service.
    Daemon(cmd::daemon::Args),
    /// Say what of predictio works on this machine and why the rest does
    /// not: each tracepoint, the newer system calls, privileges, memlock,
    /// tracefs, cgroups and the daemon, each with its fix, and which
    /// capabilities (launch learning, B-tree and tensor observation,
    /// residency, the pressure guard) work here. Run it as root.
    Doctor(cmd::doctor::Args),
    /// Run a command with predictio in-process, following its whole process
    /// tree (no daemon needed), and print what was prefetched, hit and wasted.
    ///
    /// The command finds a private hint socket in PREDICTIO_HINT_SOCK. It
    /// starts before anything else is set up: a command that ends within
    /// 20 ms (too soon for anything to help it) costs only that start, and
    /// its stored launch profile, if it has one, is replayed as it execs.
    ///
    /// Example:
    ///   predictio run -- cat big.file
    Run(cmd::run::Args),
    /// Learn a command's launch: run it under eBPF observation, record what
    /// its launch reads (exec until its tree exits or goes idle on I/O) and
    /// merge it into its profile in the store (/var/lib/predictio). `run`
    /// and the daemon replay it at the next launch.
    ///
    /// Example:
    ///   predictio record -- rustc --version
    Record(cmd::record::Args),
    /// The launch profile store: list, show EXE, forget EXE, export FILE,
    /// import FILE.
    ///
    /// Examples:
    ///   predictio profile list
    ///   predictio profile show rustc
    ///   predictio profile export profiles.json
    Profile(cmd::profile::Args),
    /// Show the daemon's counters per policy and per file.
    Stat(cmd::stat::Args),
    /// A live view of the daemon: issued, hits, waste and drops per second,
    /// per policy and per file.
    Top(cmd::top::Args),
    /// Print observed events (reads, faults, misses, evictions, exec, fork,
    /// exit) of a command's process tree, a pid, or everything.
    ///
    /// Examples:
    ///   predictio trace -- cat big.file
    ///   predictio trace --all --kind miss --duration 5
    Trace(cmd::trace::Args),
    /// Show a GGUF or safetensors model's layout and its prefetch plan, or
    /// a Parquet file's column chunks.
    ///
    /// Parses only the header: tensors, their byte ranges, per-layer byte
    /// ranges, and the ranges in the order a loader touches them, coalesced.
    /// For Parquet, the footer: bytes per column over the row groups (the
    /// `columns` policy fetches the columns a query reads, row group after
    /// row group, ahead of it).
    ///
    /// Examples:
    ///   predictio model llama-7b.Q4_0.gguf
    ///   predictio model model.safetensors --order llama-cpp-read --json
    ///   predictio model table.parquet --tensors
    Model(cmd::model::Args),
    /// Read a large range of a file fast: windows already cached straight
    /// from the page cache, cold ones advised to the kernel ahead and
    /// streamed (--cold, --direct for other ways).
    ///
    /// Examples:
    ///   predictio read model.gguf
    ///   predictio read big.dat --offset 1G --len 128M -o part.bin
    ///   predictio read big.dat -o - | sha256sum
    Read(cmd::read::Args),
    /// Ask the daemon to prefetch ranges of a file, through the hint socket
    /// (the file is opened with your rights and passed by descriptor).
    ///
    /// Example:
    ///   predictio hint big.db --range 0..64M
    Hint(cmd::hint::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Prefetch(args) => cmd::prefetch::run(args),
        Command::Residency(args) => cmd::residency::run(args),
        Command::Evict(args) => cmd::evict::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Daemon(args) => cmd::daemon::run(args),
        Command::Doctor(args) => cmd::doctor::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Record(args) => cmd::record::run(args),
        Command::Profile(args) => cmd::profile::run(args),
        Command::Stat(args) => cmd::stat::run(args),
        Command::Top(args) => cmd::top::run(args),
        Command::Trace(args) => cmd::trace::run(args),
        Command::Model(args) => cmd::model::run(args),
        Command::Read(args) => cmd::read::run(args),
        Command::Hint(args) => cmd::hint::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("predictio: {}", error_message(&err));
            ExitCode::FAILURE
        }
    }
}

/// `err` and its causes, outermost first, joined by ": ", leaving out a
/// cause whose text the message already holds: the library errors name
/// their source in their own text (`cannot open FILE: No such file…`), and
/// `{:#}` would print it a second time.
pub(crate) fn error_message(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .any(|e| e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(false).init();
}

#[cfg(test)]
mod tests {
    use super::error_message;

    /// A library-style error: its text names its source, which it also
    /// gives as `source()`.
    #[derive(Debug)]
    struct Open {
        source: std::io::Error,
    }

    impl std::fmt::Display for Open {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "cannot open /x: {}", self.source)
        }
    }

    impl std::error::Error for Open {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn a_source_the_message_already_names_is_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file");
        let err = anyhow::Error::new(Open { source: io }).context("opening the store");
        assert_eq!(error_message(&err), "opening the store: cannot open /x: No such file");
    }

    #[test]
    fn a_source_the_message_does_not_name_is_kept() {
        let err = anyhow::anyhow!("disk full").context("writing /y");
        assert_eq!(error_message(&err), "writing /y: disk full");
    }
}
