//! Parallel large buffered reads (seed 003, MARS, in user space): read a
//! large range of a file into memory with the device kept busy.
//!
//! A single `read()` of 64 MiB is served by one thread that walks the page
//! cache page by page and, on a cold file, waits for one readahead window
//! after another: the device sees a few requests at a time. A
//! [`LargeReader`] works in two stages. First it advises the kernel of the
//! whole range (`posix_fadvise(WILLNEED)` per chunk), which puts all of the
//! range's I/O in flight at once in requests as large as the device takes.
//! Then it keeps `depth` chunk reads in flight — io_uring buffered reads,
//! each straight into its own slice of the caller's buffer (no bounce
//! buffer, no extra copy), completing in any order as their pages arrive;
//! short reads are resubmitted for their remainder. Without io_uring it
//! falls back to `depth` threads issuing `pread`s. The reads stay
//! *buffered*: the data also lands in the page cache, exactly as a plain
//! `read()` would leave it.
//!
//! Where it does not help: a range already cached (both paths are then
//! memory copies), and a device whose best pattern is what the kernel's own
//! readahead already issues for one large `read()` (see the `large-read`
//! benchmark's notes). Known cost: `WILLNEED` and reads at scattered offsets
//! make the kernel cache the range in small folios, while one long
//! sequential `read()` ramps its readahead up to large folios, which are
//! about twice as cheap to fill and to copy from; on a device that one
//! sequential stream already saturates, a single `read()` of 64 MiB or more
//! wins.
//!
//! [`stream`] streams a range out window by window instead (what
//! `predictio read` does): windows already cached are copied straight from
//! the page cache, cold ones advised to the kernel ahead and copied out as
//! their pages arrive, or read by a [`LargeReader`] on request.
//!
//! What this module must never do: return bytes that differ from what
//! `read()` of the same range returns (the property test in
//! `tests/largeread.rs` checks it against `pread`), or return while the
//! kernel may still write into the caller's buffer (see
//! [`crate::sys::bigread`]).

use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::sys::bigread::{ReadRing, RingReadError};

pub mod stream;

/// Default reads in flight.
pub const DEFAULT_DEPTH: u32 = 16;
/// Default chunk size (1 MiB).
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Smallest chunk accepted (4 KiB).
pub const MIN_CHUNK: usize = 4096;
/// Largest chunk accepted (1 GiB).
pub const MAX_CHUNK: usize = 1 << 30;
/// Largest depth accepted.
pub const MAX_DEPTH: u32 = 4096;

/// Why a large read failed. Each variant names the failing call.
#[derive(Debug, thiserror::Error)]
pub enum LargeReadError {
    /// The depth or chunk size is out of range.
    #[error("invalid large-read settings: {0}")]
    InvalidConfig(String),
    /// `io_uring_setup` failed when io_uring was required.
    #[error("io_uring_setup failed: {0}")]
    RingSetup(#[source] io::Error),
    /// `io_uring_enter` failed.
    #[error("io_uring_enter failed: {0}")]
    Enter(#[source] io::Error),
    /// A read of part of the range failed.
    #[error("{call} of {len} bytes at offset {offset} failed: {source}")]
    Read {
        /// `"io_uring read"` or `"pread"`.
        call: &'static str,
        /// File offset of the failed read.
        offset: u64,
        /// Its length.
        len: usize,
        /// The OS error.
        source: io::Error,
    },
    /// `fstat` of the file failed.
    #[error("fstat failed: {0}")]
    Stat(#[source] io::Error),
    /// Writing to the output failed ([`stream::stream_range`]).
    #[error("{call} to the output failed: {source}")]
    Write {
        /// `"sendfile"` or `"write"`.
        call: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The file ended before the range did ([`LargeReader::read_exact_at`]).
    #[error("file ended after {got} of {wanted} bytes from offset {offset}")]
    UnexpectedEof {
        /// Start of the range.
        offset: u64,
        /// Bytes asked for.
        wanted: usize,
        /// Bytes the file had.
        got: usize,
    },
}

impl From<RingReadError> for LargeReadError {
    fn from(err: RingReadError) -> Self {
        match err {
            RingReadError::Enter(source) => LargeReadError::Enter(source),
            RingReadError::Read { offset, len, source } => {
                LargeReadError::Read { call: "io_uring read", offset, len, source }
            }
        }
    }
}

/// How a [`LargeReader`] issues its reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReadBackend {
    /// io_uring buffered reads, `depth` in flight, from the calling thread.
    Uring,
    /// `depth` scoped threads issuing `pread`s.
    Threads,
}

impl std::fmt::Display for ReadBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ReadBackend::Uring => "uring",
            ReadBackend::Threads => "threads",
        })
    }
}

/// Reads large ranges of files with `depth` chunk reads in flight.
///
/// `read_at` takes `&self`: one reader can be shared, and concurrent calls
/// on the io_uring backend take turns on its ring.
#[derive(Debug)]
pub struct LargeReader {
    depth: u32,
    chunk: usize,
    ring: Option<Mutex<ReadRing>>,
    fallback: Option<String>,
    will_need: bool,
}

impl LargeReader {
    /// A reader with `depth` reads (1..=4096) of `chunk` bytes (4 KiB..=1 GiB)
    /// in flight, through io_uring when the kernel allows it, else threads
    /// (see [`Self::fallback_reason`]).
    pub fn new(depth: u32, chunk: usize) -> Result<Self, LargeReadError> {
        Self::check(depth, chunk)?;
        match ReadRing::new(depth) {
            Ok(ring) => Ok(Self { depth, chunk, ring: Some(Mutex::new(ring)), fallback: None, will_need: true }),
            Err(err) => {
                let reason = format!("io_uring unavailable ({err}); reading with {depth} pread threads");
                tracing::info!("{reason}");
                Ok(Self { depth, chunk, ring: None, fallback: Some(reason), will_need: true })
            }
        }
    }

    /// A reader on a given backend; [`ReadBackend::Uring`] fails with
    /// [`LargeReadError::RingSetup`] where io_uring is unavailable.
    pub fn with_backend(depth: u32, chunk: usize, backend: ReadBackend) -> Result<Self, LargeReadError> {
        Self::check(depth, chunk)?;
        match backend {
            ReadBackend::Uring => {
                let ring = ReadRing::new(depth).map_err(LargeReadError::RingSetup)?;
                Ok(Self { depth, chunk, ring: Some(Mutex::new(ring)), fallback: None, will_need: true })
            }
            ReadBackend::Threads => Ok(Self { depth, chunk, ring: None, fallback: None, will_need: true }),
        }
    }

    fn check(depth: u32, chunk: usize) -> Result<(), LargeReadError> {
        if !(1..=MAX_DEPTH).contains(&depth) {
            return Err(LargeReadError::InvalidConfig(format!("depth {depth} is not in 1..={MAX_DEPTH}")));
        }
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk) {
            return Err(LargeReadError::InvalidConfig(format!("chunk {chunk} is not in {MIN_CHUNK}..={MAX_CHUNK}")));
        }
        Ok(())
    }

    /// Whether each read starts by advising the kernel of the whole range
    /// (`posix_fadvise(WILLNEED)`, one call per chunk; on by default). The
    /// kernel then has the range's I/O in flight at once, merged into
    /// requests as large as the device takes, while the chunk reads copy
    /// pages as they arrive; without it only the `depth` chunk reads in
    /// flight bring in data.
    pub fn set_will_need(&mut self, on: bool) {
        self.will_need = on;
    }

    /// See [`Self::set_will_need`].
    pub fn will_need(&self) -> bool {
        self.will_need
    }

    /// Reads in flight at most.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Bytes per chunk read.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The backend in use.
    pub fn backend(&self) -> ReadBackend {
        if self.ring.is_some() { ReadBackend::Uring } else { ReadBackend::Threads }
    }

    /// Why [`Self::new`] fell back to threads, if it did.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// Reads `buf.len()` bytes of `file` from `offset` into `buf`. Returns
    /// the bytes read: `buf.len()`, or fewer when the file ends first
    /// (`buf[..n]` then holds every byte up to the end). Byte for byte what
    /// `read_at` in a loop would return.
    pub fn read_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<usize, LargeReadError> {
        if buf.is_empty() {
            return Ok(0);
        }
        // A range that ends past u64::MAX cannot be read: stop at the limit.
        let room = usize::try_from(u64::MAX - offset).unwrap_or(usize::MAX);
        let buf_len = buf.len().min(room);
        let buf = &mut buf[..buf_len];
        if self.will_need {
            will_need(file, offset, buf_len as u64, self.chunk as u64);
        }
        match &self.ring {
            Some(ring) => {
                let mut ring = ring.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                Ok(ring.read_into(file.as_fd(), offset, buf, self.chunk)?)
            }
            None => read_threads(file, offset, buf, self.chunk, self.depth),
        }
    }

    /// Like [`Self::read_at`], but a file that ends before the range does is
    /// [`LargeReadError::UnexpectedEof`].
    pub fn read_exact_at(&self, file: &File, offset: u64, buf: &mut [u8]) -> Result<(), LargeReadError> {
        let got = self.read_at(file, offset, buf)?;
        if got < buf.len() {
            return Err(LargeReadError::UnexpectedEof { offset, wanted: buf.len(), got });
        }
        Ok(())
    }

    /// Reads up to `len` bytes from `offset` into a new vector (shorter when
    /// the file ends first). Allocates no more than the file holds.
    pub fn read_range(&self, file: &File, offset: u64, len: u64) -> Result<Vec<u8>, LargeReadError> {
        let size = file.metadata().map_err(LargeReadError::Stat)?.len();
        let len = len.min(size.saturating_sub(offset));
        let len = usize::try_from(len).map_err(|_| {
            LargeReadError::InvalidConfig(format!("{len} bytes do not fit in this machine's address space"))
        })?;
        let mut buf = vec![0u8; len];
        let got = self.read_at(file, offset, &mut buf)?;
        buf.truncate(got);
        Ok(buf)
    }
}

/// Starts the kernel reading `[offset, offset + len)` into the page cache:
/// one `posix_fadvise(WILLNEED)` per `step` bytes. One call for the whole
/// range would not do: the kernel caps a single WILLNEED at the larger of
/// the readahead window and the device's largest I/O (`force_page_cache_ra`),
/// so a 64 MiB advice would read only the first few MiB. Each call returns
/// once its reads are submitted, so the loop puts the whole range in flight.
/// Advisory: a failure (a pipe, a filesystem without readahead) only loses
/// the head start.
fn will_need(file: &File, offset: u64, len: u64, step: u64) {
    let step = step.max(MIN_CHUNK as u64);
    let end = offset.saturating_add(len);
    let mut at = offset;
    while at < end {
        let n = step.min(end - at);
        if crate::sys::fadvise(file.as_fd(), at, n, crate::sys::Advice::WillNeed).is_err() {
            return;
        }
        at += n;
    }
}

/// The fallback: `depth` scoped threads take chunks in order and `pread`
/// each into its own slice of `buf`.
fn read_threads(file: &File, offset: u64, buf: &mut [u8], chunk: usize, depth: u32) -> Result<usize, LargeReadError> {
    let total = buf.len();
    let chunks = total.div_ceil(chunk);
    let queue = Mutex::new(buf.chunks_mut(chunk).enumerate());
    let eof_at = AtomicUsize::new(total);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<LargeReadError>> = Mutex::new(None);
    let workers = (depth as usize).min(chunks).max(1);
    let work = || {
        loop {
            if failed.load(Ordering::Relaxed) {
                return;
            }
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
            let Some((index, slice)) = next else { return };
            let start = index * chunk;
            if start >= eof_at.load(Ordering::Relaxed) {
                continue;
            }
            let mut filled = 0;
            while filled < slice.len() {
                let at = offset.saturating_add((start + filled) as u64);
                match file.read_at(&mut slice[filled..], at) {
                    Ok(0) => {
                        eof_at.fetch_min(start + filled, Ordering::Relaxed);
                        break;
                    }
                    Ok(n) => filled += n,
                    Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                    Err(source) => {
                        failed.store(true, Ordering::Relaxed);
                        let mut slot = first_error.lock().unwrap_or_else(|p| p.into_inner());
                        slot.get_or_insert(LargeReadError::Read {
                            call: "pread",
                            offset: at,
                            len: slice.len() - filled,
                            source,
                        });
                        return;
                    }
                }
            }
        }
    };
    std::thread::scope(|scope| {
        for _ in 1..workers {
            scope.spawn(work);
        }
        work();
    });
    if let Some(err) = first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(err);
    }
    Ok(eof_at.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(bytes).expect("write");
        f
    }

    #[test]
    fn settings_are_checked() {
        assert!(LargeReader::new(0, DEFAULT_CHUNK).is_err());
        assert!(LargeReader::new(4097, DEFAULT_CHUNK).is_err());
        assert!(LargeReader::new(4, 100).is_err());
        assert!(LargeReader::new(4, MAX_CHUNK + 1).is_err());
    }

    #[test]
    fn both_backends_read_to_eof() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let file = file_with(&data);
        for backend in [ReadBackend::Threads, ReadBackend::Uring] {
            let reader = match LargeReader::with_backend(3, 4096, backend) {
                Ok(reader) => reader,
                Err(err) if std::env::var("CI").is_ok_and(|v| v == "true") => panic!("{backend} needed in CI: {err}"),
                Err(err) => {
                    eprintln!("skipping the {backend} backend: needs io_uring ({err})");
                    continue;
                }
            };
            let mut buf = vec![0u8; 200_000];
            let n = reader.read_at(&file, 1000, &mut buf).expect("read");
            assert_eq!(n, data.len() - 1000, "{backend}");
            assert_eq!(&buf[..n], &data[1000..], "{backend}");
            assert_eq!(reader.read_at(&file, 200_000, &mut buf).expect("past eof"), 0);
            let err = reader.read_exact_at(&file, 0, &mut buf).expect_err("short");
            assert!(matches!(err, LargeReadError::UnexpectedEof { got: 100_000, .. }), "{err}");
            assert_eq!(reader.read_range(&file, 99_990, u64::MAX).expect("range"), &data[99_990..]);
        }
    }
}
