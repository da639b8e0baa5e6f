//! Streaming a large range of a file, window by window, the page cache
//! first: what `predictio read` does.
//!
//! Each window (64 MiB by default) is first checked for residency
//! (`cachestat(2)`, or `mincore(2)` on a kernel without it). Then:
//!
//! - **Resident window, bytes discarded**: `pread` in 256 KiB pieces into
//!   a reused, page-aligned buffer that stays in the CPU's cache, as `cat`
//!   does, by one thread per core (up to 4), each taking the next piece.
//!   Every byte is copied out of the page cache; nothing is skipped.
//! - **Resident window, bytes written out**: `sendfile(2)` from the page
//!   cache to the output (a pipe, a regular file, a socket), no copy through
//!   user space; `pread` + `write` where the output refuses `sendfile`
//!   (`O_APPEND`, some character devices).
//! - **Cold or partly cached window**, [`ColdRead::Advised`]:
//!   `fadvise(WILLNEED)` of the window and of the next one, one call per
//!   MiB (each call is capped by the kernel, so one call for the whole
//!   range would read only its head), which puts up to two windows of reads
//!   in flight in requests as large as the device takes; then the same
//!   calls as above copy the window out as its pages arrive (1 MiB `pread`s
//!   when discarding). Pages already cached are skipped by the advice.
//! - [`ColdRead::Sequential`]: the same stream with no advice: the kernel's
//!   readahead alone (its window, `read_ahead_kb`, in flight), which caches
//!   the file in large folios.
//! - [`ColdRead::Parallel`]: the window is read by a [`LargeReader`] (chunks
//!   in flight at depth) into a window-sized buffer, then written out or
//!   dropped.
//!
//! Never returns other bytes than `pread` of the same range would (the unit
//! tests here and `predictio-cli`'s `read_output` test compare them), and
//! never reports a byte as read that it did not copy out of the file.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use super::{LargeReadError, LargeReader};
use crate::page::{PAGE_SIZE, PageRange};
use crate::sys;

/// Default window: the unit of the residency check (64 MiB).
pub const DEFAULT_WINDOW: u64 = 64 << 20;
/// Piece size of reads of resident windows when discarding: small enough to
/// stay in the CPU's cache, large enough that syscalls cost nothing.
const WARM_PIECE: usize = 256 << 10;
/// Piece size of reads of cold windows when discarding.
const COLD_PIECE: usize = 1 << 20;
/// Most threads copying a resident window out when discarding.
const MAX_COPIERS: usize = 4;
/// Bytes per `fadvise(WILLNEED)` call of [`ColdRead::Advised`].
const ADVICE_STEP: u64 = 1 << 20;
/// Largest single `sendfile` call.
const SEND_MAX: u64 = 16 << 20;

/// Where a [`stream_range`] puts the bytes.
#[derive(Clone, Copy, Debug)]
pub enum Sink<'a> {
    /// Read into a reused buffer and dropped: every byte is still copied out
    /// of the page cache (as `cat FILE > /dev/null` does).
    Discard,
    /// Written to this descriptor at its current file position.
    Fd(BorrowedFd<'a>),
}

/// How a [`stream_range`] reads windows that are not wholly resident.
#[derive(Clone, Copy, Debug)]
pub enum ColdRead<'r> {
    /// One sequential stream through the kernel's readahead.
    Sequential,
    /// The same stream, after `fadvise(WILLNEED)` of the window and of the
    /// next one (one call per MiB): the device has up to two windows of
    /// reads in flight while the window is copied out.
    Advised,
    /// The parallel engine, into a window-sized buffer.
    Parallel(&'r LargeReader),
}

/// How residency was checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Probe {
    /// `cachestat(2)`.
    #[default]
    Cachestat,
    /// `mincore(2)` over a mapping of the file (no `cachestat` here).
    Mincore,
    /// Neither worked (no `cachestat`, and the file could not be mapped or
    /// `mincore` failed): windows from then on were read as cold.
    None,
}

/// What a [`stream_range`] did.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct StreamStats {
    /// Bytes read (and written, with [`Sink::Fd`]).
    pub bytes: u64,
    /// Windows read.
    pub windows: u64,
    /// Windows found wholly resident before they were read.
    pub resident_windows: u64,
    /// Bytes of those windows.
    pub resident_bytes: u64,
    /// How residency was checked.
    pub probe: Probe,
    /// Bytes moved to the output by `sendfile` (the rest of a
    /// [`Sink::Fd`]'s bytes went through `read`/`write`).
    pub sendfile_bytes: u64,
}

/// Residency of windows of one file.
struct Residency<'f> {
    file: &'f File,
    size: u64,
    mapping: Option<sys::Mapping>,
    probe: Probe,
    pages: Vec<u8>,
}

impl<'f> Residency<'f> {
    fn new(file: &'f File, size: u64) -> Self {
        Self { file, size, mapping: None, probe: Probe::Cachestat, pages: Vec::new() }
    }

    /// Whether every page of `[offset, offset + len)` is in the page cache.
    /// A probe that fails is not an error (the window is then read as
    /// cold): `cachestat` gives way to `mincore` (no `cachestat` on this
    /// kernel, or not for this file), and `mincore` to nothing.
    fn resident(&mut self, offset: u64, len: u64) -> bool {
        let range = PageRange::covering_bytes(offset, len);
        if range.is_empty() {
            return true;
        }
        if self.probe == Probe::Cachestat {
            match sys::cachestat(self.file.as_fd(), range.byte_offset(), range.byte_len()) {
                Ok(stat) => return stat.nr_cache >= range.len(),
                Err(err) => {
                    tracing::debug!("cachestat failed ({err}); checking residency with mincore");
                    self.probe = Probe::Mincore;
                    match sys::Mapping::map(self.file.as_fd(), self.size) {
                        Ok(mapping) => self.mapping = Some(mapping),
                        Err(err) => self.give_up(&err),
                    }
                }
            }
        }
        let Some(mapping) = &self.mapping else { return false };
        if let Err(err) = mapping.residency(range, &mut self.pages) {
            self.give_up(&err);
            return false;
        }
        // Pages past the mapping (the file grew) were left out: not known.
        self.pages.len() as u64 == range.len() && self.pages.iter().all(|p| p & 1 == 1)
    }

    fn give_up(&mut self, err: &io::Error) {
        tracing::info!("no residency check ({err}): reading every window as cold");
        self.probe = Probe::None;
        self.mapping = None;
    }
}

/// Reads `[offset, offset + len)` of `file` into `sink`, `window` bytes at a
/// time (see the module's notes), and returns what it did. Reads nothing
/// past the end of the file (`bytes` then says how far it got).
pub fn stream_range(
    file: &File,
    offset: u64,
    len: u64,
    window: u64,
    sink: Sink<'_>,
    cold: ColdRead<'_>,
) -> Result<StreamStats, LargeReadError> {
    if window == 0 {
        return Err(LargeReadError::InvalidConfig("window must not be 0".into()));
    }
    let size = file.metadata().map_err(LargeReadError::Stat)?.len();
    // Past the size known now, nothing is read (a file that shrinks while
    // it is read stops the loop at its new end).
    let end = offset.saturating_add(len).min(size);
    let mut residency = Residency::new(file, size);
    let mut stats = StreamStats::default();
    let mut piece: Vec<u8> = Vec::new();
    // One buffer per thread copying resident windows out when discarding.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_COPIERS);
    let mut copiers: Vec<Vec<u8>> = vec![Vec::new(); if matches!(sink, Sink::Discard) { threads } else { 0 }];
    let mut window_buf: Vec<u8> = Vec::new();
    let mut sendfile_ok = true;
    let mut advised_until = 0u64;
    let mut at = offset;
    while at < end {
        let n = window.min(end - at);
        // A window this loop advised is on its way in, not found cached.
        let resident = at.saturating_add(n) > advised_until && residency.resident(at, n);
        stats.windows += 1;
        if resident {
            stats.resident_windows += 1;
            stats.resident_bytes += n;
        }
        if !resident && matches!(cold, ColdRead::Advised) {
            // This window (unless advised with the one before) and the next.
            let ahead = end.min(at.saturating_add(n).saturating_add(window));
            if advised_until < ahead {
                let from = advised_until.max(at);
                super::will_need(file, from, ahead - from, ADVICE_STEP);
                advised_until = ahead;
            }
        }
        let got = match (sink, cold) {
            (Sink::Fd(out), ColdRead::Parallel(reader)) if !resident => {
                let (window, got) = parallel_window(reader, file, at, n, &mut window_buf)?;
                write_all(out, &window[..got])?;
                got as u64
            }
            (Sink::Discard, ColdRead::Parallel(reader)) if !resident => {
                parallel_window(reader, file, at, n, &mut window_buf)?.1 as u64
            }
            (Sink::Fd(out), _) => send(out, file, at, n, &mut sendfile_ok, &mut stats, &mut piece)?,
            (Sink::Discard, _) if resident && copiers.len() > 1 => read_discard_parallel(file, at, n, &mut copiers)?,
            (Sink::Discard, _) => {
                let size = if resident { WARM_PIECE } else { COLD_PIECE };
                read_discard(file, at, n, page_aligned(&mut piece, size))?
            }
        };
        stats.bytes += got;
        at += got;
        if got < n {
            break;
        }
    }
    stats.probe = residency.probe;
    Ok(stats)
}

/// Reads `[offset, offset + len)` of `direct`, a descriptor opened with
/// `O_DIRECT`, into `sink`: `reader`'s chunk reads at its depth into one
/// page-aligned window buffer, bypassing the page cache (nothing is cached,
/// nothing is checked for residency). A baseline for the device's own
/// speed: what buffered reads are compared with. `offset` and `window` must
/// be multiples of 4 KiB, and so must `reader`'s chunk (reads are rounded up
/// to 4 KiB; the file's end is read short). The reader should not advise
/// WILLNEED ([`LargeReader::set_will_need`]).
pub fn direct_range(
    direct: &File,
    offset: u64,
    len: u64,
    window: u64,
    reader: &LargeReader,
    sink: Sink<'_>,
) -> Result<StreamStats, LargeReadError> {
    let align = PAGE_SIZE;
    if !offset.is_multiple_of(align)
        || !window.is_multiple_of(align)
        || window == 0
        || !(reader.chunk() as u64).is_multiple_of(align)
    {
        return Err(LargeReadError::InvalidConfig(format!(
            "O_DIRECT reads need an offset, window and chunk that are multiples of {align} bytes"
        )));
    }
    let size = direct.metadata().map_err(LargeReadError::Stat)?.len();
    let end = offset.saturating_add(len).min(size);
    let mut stats = StreamStats { probe: Probe::None, ..StreamStats::default() };
    let mut buf = Vec::new();
    let mut at = offset;
    while at < end {
        let n = window.min(end - at);
        let (bytes, got) = parallel_window(reader, direct, at, n.next_multiple_of(align), &mut buf)?;
        let got = (got as u64).min(n);
        if let Sink::Fd(out) = sink {
            write_all(out, &bytes[..got as usize])?;
        }
        stats.windows += 1;
        stats.bytes += got;
        at += got;
        if got < n {
            break;
        }
    }
    Ok(stats)
}

/// `len` bytes of `buf` (grown to fit) starting on a page boundary. The
/// kernel copies page-cache pages into a page-aligned buffer about four
/// times as fast as into one 16 bytes off (what `malloc` returns for large
/// blocks): 256 KiB `pread`s of a cached file ran at 2 GB/s instead of 13.
fn page_aligned(buf: &mut Vec<u8>, len: usize) -> &mut [u8] {
    let page = PAGE_SIZE as usize;
    if buf.len() < len + page {
        *buf = vec![0; len + page];
    }
    let skip = buf.as_ptr().align_offset(page).min(page);
    &mut buf[skip..skip + len]
}

/// Reads one window with the parallel engine into `buf` (grown to fit);
/// returns the bytes read, at the front of the returned slice.
fn parallel_window<'b>(
    reader: &LargeReader,
    file: &File,
    at: u64,
    n: u64,
    buf: &'b mut Vec<u8>,
) -> Result<(&'b [u8], usize), LargeReadError> {
    let n = usize::try_from(n)
        .map_err(|_| LargeReadError::InvalidConfig(format!("a window of {n} bytes does not fit in memory")))?;
    let window = page_aligned(buf, n);
    let got = reader.read_at(file, at, window)?;
    Ok((window, got))
}

/// `pread`s `[at, at + n)` in pieces of `piece.len()` bytes, each into the
/// same buffer. Returns the bytes read (fewer at the end of the file).
fn read_discard(file: &File, at: u64, n: u64, piece: &mut [u8]) -> Result<u64, LargeReadError> {
    use std::os::unix::fs::FileExt;
    let mut done = 0u64;
    while done < n {
        let want = piece.len().min(usize::try_from(n - done).unwrap_or(usize::MAX));
        let pos = at + done;
        match file.read_at(&mut piece[..want], pos) {
            Ok(0) => break,
            Ok(got) => done += got as u64,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(source) => return Err(LargeReadError::Read { call: "pread", offset: pos, len: want, source }),
        }
    }
    Ok(done)
}

/// [`read_discard`] of a resident window by one thread per buffer in
/// `bufs`, each taking the next [`WARM_PIECE`] in turn (a thread that gets
/// less CPU takes fewer pieces). Copying from the page cache is bound by
/// one core's copy rate, not by memory bandwidth: with a second core free,
/// 2 GiB cached took 122 ms against 175 ms for one thread; with both cores
/// busy elsewhere, about the same as one thread.
fn read_discard_parallel(file: &File, at: u64, n: u64, bufs: &mut [Vec<u8>]) -> Result<u64, LargeReadError> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicU64, Ordering};
    let piece = WARM_PIECE as u64;
    let next = AtomicU64::new(0);
    // The first byte not read: `n`, or where a piece came back short (the
    // file shrank). Pieces are taken in order, so every byte before the
    // shortest stop was read.
    let stop = AtomicU64::new(n);
    let error: Mutex<Option<LargeReadError>> = Mutex::new(None);
    let copy = |buf: &mut Vec<u8>| {
        let buf = page_aligned(buf, WARM_PIECE);
        loop {
            let start = next.fetch_add(piece, Ordering::Relaxed);
            if start >= stop.load(Ordering::Relaxed) {
                return;
            }
            let len = piece.min(n - start);
            match read_discard(file, at + start, len, buf) {
                Ok(got) if got < len => {
                    stop.fetch_min(start + got, Ordering::Relaxed);
                    return;
                }
                Ok(_) => {}
                Err(err) => {
                    stop.store(0, Ordering::Relaxed);
                    error.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(err);
                    return;
                }
            }
        }
    };
    let Some((first, rest)) = bufs.split_first_mut() else { return Ok(0) };
    std::thread::scope(|scope| {
        for buf in rest {
            scope.spawn(|| copy(buf));
        }
        copy(first);
    });
    if let Some(err) = error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(err);
    }
    Ok(stop.into_inner())
}

/// Sends `[at, at + n)` of `file` to `out`: `sendfile` while the output
/// takes it, else `pread` + `write` through `piece`. Returns the bytes sent
/// (fewer at the end of the file).
fn send(
    out: BorrowedFd<'_>,
    file: &File,
    at: u64,
    n: u64,
    sendfile_ok: &mut bool,
    stats: &mut StreamStats,
    piece: &mut Vec<u8>,
) -> Result<u64, LargeReadError> {
    let mut done = 0u64;
    while done < n && *sendfile_ok {
        let pos = at + done;
        let want = usize::try_from(SEND_MAX.min(n - done)).unwrap_or(usize::MAX);
        match sys::sendfile_at(out, file.as_fd(), pos, want) {
            Ok(0) => return Ok(done),
            Ok(sent) => {
                done += sent as u64;
                stats.sendfile_bytes += sent as u64;
            }
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            // The output does not take sendfile (O_APPEND, a device without
            // splice): nothing was written, carry on with read + write.
            Err(err) if matches!(err.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) => {
                tracing::debug!("sendfile refused ({err}); writing with read + write");
                *sendfile_ok = false;
            }
            Err(source) => return Err(LargeReadError::Write { call: "sendfile", source }),
        }
    }
    if done == n {
        return Ok(done);
    }
    let piece = page_aligned(piece, COLD_PIECE);
    while done < n {
        let got = read_discard(file, at + done, (COLD_PIECE as u64).min(n - done), piece)?;
        if got == 0 {
            break;
        }
        write_all(out, &piece[..got as usize])?;
        done += got;
    }
    Ok(done)
}

/// `write(2)` until all of `bytes` is written.
fn write_all(out: BorrowedFd<'_>, mut bytes: &[u8]) -> Result<(), LargeReadError> {
    while !bytes.is_empty() {
        match rustix::io::write(out, bytes) {
            Ok(0) => {
                return Err(LargeReadError::Write { call: "write", source: io::ErrorKind::WriteZero.into() });
            }
            Ok(n) => bytes = &bytes[n..],
            Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(LargeReadError::Write { call: "write", source: err.into() }),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, Write};

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
    }

    fn file_with(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(bytes).expect("write");
        f
    }

    fn read_back(mut out: File) -> Vec<u8> {
        let mut got = Vec::new();
        out.rewind().expect("rewind");
        out.read_to_end(&mut got).expect("read back");
        got
    }

    #[test]
    fn largeread_stream_writes_the_same_bytes_warm_and_cold() {
        let bytes = data(3 * 1_000_000 + 123);
        let file = file_with(&bytes);
        file.sync_all().expect("sync");
        let engine = LargeReader::new(4, 64 << 10).expect("engine");
        for cold in [ColdRead::Sequential, ColdRead::Advised, ColdRead::Parallel(&engine)] {
            for evict in [false, true] {
                if evict {
                    sys::fadvise(file.as_fd(), 0, 0, sys::Advice::DontNeed).expect("evict");
                }
                let out = tempfile::tempfile().expect("out");
                let stats = stream_range(&file, 777, u64::MAX, 1 << 20, Sink::Fd(out.as_fd()), cold).expect("stream");
                assert_eq!(stats.bytes, bytes.len() as u64 - 777, "{cold:?}");
                assert_eq!(read_back(out), &bytes[777..], "{cold:?} evict {evict}");
                let stats = stream_range(&file, 5, 2_000_000, 300_000, Sink::Discard, cold).expect("discard");
                assert_eq!(stats.bytes, 2_000_000);
                assert_eq!(stats.windows, 7);
            }
        }
    }

    #[test]
    fn largeread_stream_sees_resident_windows() {
        let bytes = data(4 << 20);
        let file = file_with(&bytes);
        // Written pages are cached (a tmpfs keeps them anyway).
        let stats = stream_range(&file, 0, u64::MAX, 1 << 20, Sink::Discard, ColdRead::Sequential).expect("warm");
        assert_eq!(stats.windows, 4);
        assert_eq!(stats.resident_windows, 4, "{stats:?}");
        assert_eq!(stats.resident_bytes, 4 << 20);
    }

    #[test]
    fn largeread_stream_mincore_agrees_with_cachestat() {
        let bytes = data(3 << 20);
        let file = file_with(&bytes);
        file.sync_all().expect("sync");
        let size = bytes.len() as u64;
        let mut mincore = Residency::new(&file, size);
        mincore.probe = Probe::Mincore;
        mincore.mapping = Some(sys::Mapping::map(file.as_fd(), size).expect("map"));
        let mut cachestat = Residency::new(&file, size);
        for evict in [false, true] {
            if evict {
                sys::fadvise(file.as_fd(), 0, 0, sys::Advice::DontNeed).expect("evict");
            }
            for (offset, len) in [(0, size), (5000, 1 << 20), (size - 10, 10)] {
                let by_cachestat = cachestat.resident(offset, len);
                // Pages just written stay cached.
                assert!(evict || by_cachestat, "{offset}+{len}");
                assert_eq!(mincore.resident(offset, len), by_cachestat, "{offset}+{len}");
                assert_eq!((cachestat.probe, mincore.probe), (Probe::Cachestat, Probe::Mincore));
            }
        }
    }

    #[test]
    fn largeread_direct_reads_the_same_bytes() {
        let bytes = data((5 << 20) + 999);
        let dir = tempfile::tempdir_in("/var/tmp").expect("dir on disk");
        let path = dir.path().join("in");
        std::fs::write(&path, &bytes).expect("write");
        use std::os::unix::fs::OpenOptionsExt;
        let direct = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&path) {
            Ok(file) => file,
            Err(err) => {
                assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "O_DIRECT needed in CI: {err}");
                eprintln!("skipping: needs O_DIRECT ({err})");
                return;
            }
        };
        let mut engine = LargeReader::new(4, 256 << 10).expect("engine");
        engine.set_will_need(false);
        let out = tempfile::tempfile().expect("out");
        let stats = direct_range(&direct, 8192, u64::MAX, 1 << 20, &engine, Sink::Fd(out.as_fd())).expect("direct");
        assert_eq!(stats.bytes, bytes.len() as u64 - 8192);
        assert_eq!(read_back(out), &bytes[8192..]);
        assert!(direct_range(&direct, 100, 10, 1 << 20, &engine, Sink::Discard).is_err(), "unaligned offset");
    }

    #[test]
    fn largeread_parallel_copy_reads_to_the_end() {
        let bytes = data(3 * WARM_PIECE + 1000);
        let file = file_with(&bytes);
        let mut bufs = vec![Vec::new(); 3];
        let n = bytes.len() as u64;
        assert_eq!(read_discard_parallel(&file, 0, n, &mut bufs).expect("all"), n);
        assert_eq!(read_discard_parallel(&file, 10, n, &mut bufs).expect("to eof"), n - 10);
        assert_eq!(read_discard_parallel(&file, n + 5, 100, &mut bufs).expect("past eof"), 0);
        let stats = stream_range(&file, 1, u64::MAX, 1 << 20, Sink::Discard, ColdRead::Advised).expect("stream");
        assert_eq!((stats.bytes, stats.resident_windows), (n - 1, 1));
    }

    #[test]
    fn largeread_stream_falls_back_to_write_for_append_outputs() {
        let bytes = data(2_500_000);
        let file = file_with(&bytes);
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("out");
        std::fs::write(&path, b"head").expect("head");
        let out = std::fs::OpenOptions::new().append(true).open(&path).expect("append");
        let stats =
            stream_range(&file, 0, u64::MAX, 1 << 20, Sink::Fd(out.as_fd()), ColdRead::Sequential).expect("stream");
        assert_eq!(stats.bytes, bytes.len() as u64);
        let got = std::fs::read(&path).expect("read");
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &bytes[..]);
    }

    #[test]
    fn largeread_stream_stops_at_eof_and_checks_window() {
        let bytes = data(10_000);
        let file = file_with(&bytes);
        let stats = stream_range(&file, 9_000, 5_000, 4096, Sink::Discard, ColdRead::Sequential).expect("short");
        assert_eq!(stats.bytes, 1_000);
        assert!(stream_range(&file, 0, 1, 0, Sink::Discard, ColdRead::Sequential).is_err());
        let stats = stream_range(&file, 20_000, 5, 4096, Sink::Discard, ColdRead::Sequential).expect("past eof");
        assert_eq!(stats.bytes, 0);
    }
}
