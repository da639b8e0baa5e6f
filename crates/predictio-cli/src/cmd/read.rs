//! `predictio read FILE [--offset N] [--len N] [-o OUT|-] [--depth D] [--chunk SIZE]`

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use predictio::largeread::{self, LargeReader, ReadBackend};

use crate::units::{human, parse_size};

/// Largest piece read into memory at once: longer ranges are read (and
/// written out) a window at a time.
const WINDOW: u64 = 256 << 20;

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
    /// Chunk reads in flight at once.
    #[arg(long, default_value_t = largeread::DEFAULT_DEPTH, value_parser = clap::value_parser!(u32).range(1..=4096))]
    depth: u32,
    /// Bytes per chunk read (4K..1G).
    #[arg(long, default_value = "1M", value_parser = chunk_size)]
    chunk: u64,
    /// Don't start with one fadvise(WILLNEED) of the whole range: each
    /// chunk read then brings in only its own chunk.
    #[arg(long)]
    no_will_need: bool,
    /// How chunk reads are issued.
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
    backend: ReadBackend,
    depth: u32,
    chunk: u64,
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
    let chunk = usize::try_from(args.chunk).context("chunk size")?;
    let mut reader = match args.backend {
        Backend::Auto => LargeReader::new(args.depth, chunk),
        Backend::Uring => LargeReader::with_backend(args.depth, chunk, ReadBackend::Uring),
        Backend::Threads => LargeReader::with_backend(args.depth, chunk, ReadBackend::Threads),
    }
    .context("starting the large-read engine")?;
    reader.set_will_need(!args.no_will_need);
    if let Some(reason) = reader.fallback_reason() {
        eprintln!("predictio: {reason}");
    }

    let to_stdout = args.output.as_deref().is_some_and(|p| p.as_os_str() == "-");
    if let Some(path) = args.output.as_deref().filter(|_| !to_stdout) {
        // Creating the output truncates it: refuse to clobber the input.
        use std::os::unix::fs::MetadataExt;
        let input = file.metadata().context("fstat")?;
        if std::fs::metadata(path).is_ok_and(|out| out.dev() == input.dev() && out.ino() == input.ino()) {
            bail!("{} is the file being read; choose another output", path.display());
        }
    }
    let mut out: Option<Box<dyn Write>> = match &args.output {
        None => None,
        Some(_) if to_stdout => Some(Box::new(std::io::stdout().lock())),
        Some(path) => Some(Box::new(std::io::BufWriter::with_capacity(
            1 << 20,
            File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ))),
    };

    let window = usize::try_from(wanted.min(WINDOW)).context("window size")?;
    // Touch every page of the buffer before the clock starts (a non-zero
    // fill is a real memset), so page faults are not timed as reading.
    let mut buf = vec![0xA5u8; window];
    let mut done = 0u64;
    let mut read_seconds = 0.0;
    let start = Instant::now();
    while done < wanted {
        let n = usize::try_from((wanted - done).min(window as u64)).context("window size")?;
        let t = Instant::now();
        let got = reader
            .read_at(&file, args.offset + done, &mut buf[..n])
            .with_context(|| format!("reading {} at offset {}", args.file.display(), args.offset + done))?;
        read_seconds += t.elapsed().as_secs_f64();
        if let Some(out) = out.as_mut() {
            out.write_all(&buf[..got]).context("writing the output")?;
        }
        done += got as u64;
        if got < n {
            break;
        }
    }
    if let Some(mut out) = out.take() {
        out.flush().context("flushing the output")?;
    }
    let total_seconds = start.elapsed().as_secs_f64();
    let outcome = Outcome {
        file: args.file.display().to_string(),
        offset: args.offset,
        requested_bytes: wanted,
        bytes_read: done,
        backend: reader.backend(),
        depth: reader.depth(),
        chunk: args.chunk,
        read_seconds,
        total_seconds,
        read_mbps: done as f64 / read_seconds.max(1e-9) / 1e6,
    };
    let report = if args.json {
        serde_json::to_string_pretty(&outcome)?
    } else {
        format!(
            "{}: read {} ({} bytes) from offset {} in {:.3} s: {:.0} MB/s ({} backend, depth {}, {} chunks){}",
            outcome.file,
            human(done),
            done,
            args.offset,
            read_seconds,
            outcome.read_mbps,
            outcome.backend,
            outcome.depth,
            human(args.chunk),
            if args.output.is_some() { format!("; {:.3} s with writing", total_seconds) } else { String::new() }
        )
    };
    // Keep standard output clean when the data goes there.
    if to_stdout {
        eprintln!("{report}");
    } else {
        println!("{report}");
    }
    if done < wanted {
        bail!("the file ended after {done} of {wanted} bytes (was it truncated while reading?)");
    }
    Ok(())
}
