//! `predictio read FILE [--offset N] [--len N] [-o OUT|-] [--window SIZE] [--cold advised|readahead|parallel [--depth D] [--chunk SIZE]]`
//!
//! Streams the range window by window, the page cache first
//! ([`predictio::largeread::stream`]): resident windows are copied straight
//! from the cache (`sendfile` to the output, or `pread` into one reused
//! buffer when discarding, as `cat` does), cold ones read as one sequential
//! stream after fadvise(WILLNEED) (see `--cold`).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use predictio::largeread::stream::{self, ColdRead, Probe, Sink};
use predictio::largeread::{self, LargeReader, ReadBackend};

use crate::units::{human, parse_size};

/// Which engine backend to use.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum Backend {
    /// io_uring if the kernel allows it, else threads.
    Auto,
    /// io_uring buffered reads (fails without io_uring).
    Uring,
    /// A thread per read in flight, each issuing pread.
    Threads,
}

/// How `read` reads windows that are not all cached.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cold {
    /// fadvise(WILLNEED) of the window and the next, then one sequential
    /// stream.
    Advised,
    /// One sequential stream through the kernel's readahead alone.
    Readahead,
    /// The parallel engine (--depth chunk reads in flight, after
    /// fadvise(WILLNEED) of each chunk) into a window-sized buffer.
    Parallel,
}

impl Cold {
    fn name(self) -> &'static str {
        match self {
            Cold::Advised => "advised",
            Cold::Readahead => "readahead",
            Cold::Parallel => "parallel",
        }
    }
}

/// Arguments of `read`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file to read.
    file: PathBuf,
    /// First byte to read (K/M/G suffixes).
    #[arg(long, default_value = "0", value_parser = size)]
    offset: u64,
    /// Bytes to read (K/M/G suffixes). Default: to the end of the file.
    #[arg(long, value_parser = size)]
    len: Option<u64>,
    /// Write the bytes to OUT (`-` for standard output). Default: read and
    /// discard, reporting the bytes read and the rate.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    output: Option<PathBuf>,
    /// Bytes per residency check: each window is read from the page cache
    /// when it is all cached, else as cold (4K..1G).
    #[arg(long, default_value = "64M", value_parser = chunk_size)]
    window: u64,
    /// How windows that are not all cached are read.
    #[arg(long, value_enum, default_value_t = Cold::Advised)]
    cold: Cold,
    /// Bypass the page cache: O_DIRECT chunk reads (--depth in flight,
    /// --chunk bytes each) into one aligned window buffer, caching nothing.
    /// A baseline for the device's own speed. --offset and --window must
    /// be multiples of 4 KiB.
    #[arg(long, conflicts_with = "cold")]
    direct: bool,
    /// With --cold parallel or --direct: chunk reads in flight at once.
    #[arg(long, default_value_t = largeread::DEFAULT_DEPTH, value_parser = clap::value_parser!(u32).range(1..=4096))]
    depth: u32,
    /// With --cold parallel or --direct: bytes per chunk read (4K..1G).
    #[arg(long, default_value = "1M", value_parser = chunk_size)]
    chunk: u64,
    /// With --cold parallel: don't start with fadvise(WILLNEED) of each chunk:
    /// each chunk read then brings in only its own chunk.
    #[arg(long)]
    no_will_need: bool,
    /// With --cold parallel or --direct: how chunk reads are issued.
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Print the result as JSON (on standard error when -o - is given).
    #[arg(long)]
    json: bool,
}

fn size(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

fn chunk_size(text: &str) -> Result<u64, String> {
    let bytes = size(text)?;
    if !(largeread::MIN_CHUNK as u64..=largeread::MAX_CHUNK as u64).contains(&bytes) {
        return Err("must be between 4K and 1G".into());
    }
    Ok(bytes)
}

#[derive(serde::Serialize)]
struct Outcome {
    file: String,
    offset: u64,
    requested_bytes: u64,
    bytes_read: u64,
    /// How windows not all cached were read: `advised`, `readahead`,
    /// `parallel`, or `direct` (everything, bypassing the cache).
    cold_read: &'static str,
    /// With `parallel` or `direct`: the engine's settings.
    backend: Option<ReadBackend>,
    depth: Option<u32>,
    chunk: Option<u64>,
    window: u64,
    windows: u64,
    resident_windows: u64,
    resident_bytes: u64,
    residency_probe: Probe,
    sendfile_bytes: u64,
    read_seconds: f64,
    total_seconds: f64,
    #[serde(rename = "read_MBps")]
    read_mbps: f64,
}

/// Runs `read`.
pub fn run(args: Args) -> Result<()> {
    let file = super::open_file(&args.file)?;
    let size = file.metadata().context("fstat")?.len();
    if args.offset > size {
        bail!("--offset {} is past the end of {} ({} bytes)", args.offset, args.file.display(), size);
    }
    let available = size - args.offset;
    let wanted = match args.len {
        Some(len) if len > available => {
            eprintln!("predictio: --len runs past the end of the file; reading the {} that remain", human(available));
            available
        }
        Some(len) => len,
        None => available,
    };
    let engine = if args.cold == Cold::Parallel || args.direct {
        let chunk = usize::try_from(args.chunk).context("chunk size")?;
        let mut reader = match args.backend {
            Backend::Auto => LargeReader::new(args.depth, chunk),
            Backend::Uring => LargeReader::with_backend(args.depth, chunk, ReadBackend::Uring),
            Backend::Threads => LargeReader::with_backend(args.depth, chunk, ReadBackend::Threads),
        }
        .context("starting the large-read engine")?;
        reader.set_will_need(!args.no_will_need && !args.direct);
        if let Some(reason) = reader.fallback_reason() {
            eprintln!("predictio: {reason}");
        }
        Some(reader)
    } else {
        None
    };
    let cold = match (&engine, args.cold) {
        (Some(reader), _) => ColdRead::Parallel(reader),
        (None, Cold::Readahead) => ColdRead::Sequential,
        (None, _) => ColdRead::Advised,
    };

    let to_stdout = args.output.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = args.output.as_deref().filter(|_| !to_stdout) {
        // Creating the output truncates it: refuse to clobber the input.
        use std::os::unix::fs::MetadataExt;
        let input = file.metadata().context("fstat")?;
        if std::fs::metadata(path).is_ok_and(|out| out.dev() == input.dev() && out.ino() == input.ino()) {
            bail!("{} is the file being read; choose another output", path.display());
        }
    }
    let out_file = match &args.output {
        Some(path) if !to_stdout => Some(File::create(path).with_context(|| format!("creating {}", path.display()))?),
        _ => None,
    };
    let stdout = std::io::stdout();
    // Nothing was written through the standard library's buffer: the bytes
    // go straight to the descriptor, at its current position.
    let sink = match (&out_file, to_stdout) {
        (Some(out), _) => Sink::Fd(out.as_fd()),
        (None, true) => Sink::Fd(stdout.as_fd()),
        (None, false) => Sink::Discard,
    };

    let direct = match (args.direct, &engine) {
        (true, Some(reader)) => Some((reopen_direct(&file, &args.file)?, reader)),
        _ => None,
    };
    let start = Instant::now();
    let stats = match &direct {
        Some((direct, reader)) => stream::direct_range(direct, args.offset, wanted, args.window, reader, sink),
        None => stream::stream_range(&file, args.offset, wanted, args.window, sink, cold),
    }
    .with_context(|| format!("reading {} from offset {}", args.file.display(), args.offset))?;
    let read_seconds = start.elapsed().as_secs_f64();
    drop(out_file);
    let total_seconds = start.elapsed().as_secs_f64();
    let done = stats.bytes;
    let outcome = Outcome {
        file: args.file.display().to_string(),
        offset: args.offset,
        requested_bytes: wanted,
        bytes_read: done,
        cold_read: if args.direct { "direct" } else { args.cold.name() },
        backend: engine.as_ref().map(LargeReader::backend),
        depth: engine.as_ref().map(LargeReader::depth),
        chunk: engine.as_ref().map(|_| args.chunk),
        window: args.window,
        windows: stats.windows,
        resident_windows: stats.resident_windows,
        resident_bytes: stats.resident_bytes,
        residency_probe: stats.probe,
        sendfile_bytes: stats.sendfile_bytes,
        read_seconds,
        total_seconds,
        read_mbps: done as f64 / read_seconds.max(1e-9) / 1e6,
    };
    let report = if args.json {
        serde_json::to_string_pretty(&outcome)?
    } else {
        let how = match &engine {
            Some(reader) if args.direct => format!(
                "O_DIRECT: {} backend, depth {}, {} chunks",
                reader.backend(),
                reader.depth(),
                human(args.chunk)
            ),
            Some(reader) => format!(
                "cold windows: {} backend, depth {}, {} chunks",
                reader.backend(),
                reader.depth(),
                human(args.chunk)
            ),
            None if args.cold == Cold::Readahead => "cold windows: sequential stream".to_string(),
            None => "cold windows: advised, then a sequential stream".to_string(),
        };
        let windows = if args.direct {
            format!("{} windows of {}", stats.windows, human(args.window))
        } else {
            format!("{} of {} windows of {} cached", stats.resident_windows, stats.windows, human(args.window))
        };
        format!(
            "{}: read {} ({} bytes) from offset {} in {:.3} s: {:.0} MB/s ({windows}; {how})",
            outcome.file,
            human(done),
            done,
            args.offset,
            read_seconds,
            outcome.read_mbps,
        )
    };
    // Keep standard output clean when the data goes there.
    if to_stdout {
        eprintln!("{report}");
    } else {
        let mut stdout = stdout.lock();
        writeln!(stdout, "{report}").context("writing the report")?;
    }
    if done < wanted {
        bail!("the file ended after {done} of {wanted} bytes (was it truncated while reading?)");
    }
    Ok(())
}

/// The file `file` (opened from `path` and checked to be a regular file)
/// opened again, the same inode, for O_DIRECT reads.
fn reopen_direct(file: &File, path: &std::path::Path) -> Result<File> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let same = format!("/proc/self/fd/{}", file.as_raw_fd());
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&same)
        .with_context(|| format!("opening {} for O_DIRECT reads", path.display()))
}
