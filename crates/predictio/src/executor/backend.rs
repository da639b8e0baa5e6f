//! Backends: the ways the executor can make the kernel read pages.
//!
//! | backend | call | completion |
//! | --- | --- | --- |
//! | `fadvise` | `posix_fadvise(WILLNEED)` | kernel's, not reported |
//! | `readahead` | `readahead(2)` | kernel's, not reported |
//! | `uring` | io_uring buffered reads at a set depth | reported per read |
//! | `madvise` | `madvise(MADV_WILLNEED)` on a mapping | kernel's, not reported |
//!
//! `uring` is where device parallelism is won: it keeps `depth` reads in
//! flight, where the others submit and return. A backend that cannot start on
//! this kernel falls back to `fadvise`, with the reason logged and reported.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::str::FromStr;

use crate::file::{FileId, FileRef};
use crate::page::{PAGE_SIZE, PageRange};
use crate::sys;
use crate::sys::uring::{Completion, ScratchRing};

/// Which backend issues prefetch I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// `posix_fadvise(POSIX_FADV_WILLNEED)`. The default: the kernel
    /// submits the reads asynchronously and returns, so many calls in a row
    /// keep the device as deep as the block layer allows, with no copy and
    /// no completion handling (see `docs/results/backends.md`).
    #[default]
    Fadvise,
    /// `readahead(2)`.
    Readahead,
    /// io_uring buffered reads with a set queue depth: bounded parallelism
    /// and a completion per read (so the in-flight table is exact).
    Uring,
    /// `madvise(MADV_WILLNEED)` on a read-only mapping.
    Madvise,
}

impl BackendKind {
    /// Every backend.
    pub const ALL: [BackendKind; 4] =
        [BackendKind::Fadvise, BackendKind::Readahead, BackendKind::Uring, BackendKind::Madvise];

    /// The backend's name.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Fadvise => "fadvise",
            BackendKind::Readahead => "readahead",
            BackendKind::Uring => "uring",
            BackendKind::Madvise => "madvise",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown backend name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend {0:?}: expected one of fadvise, readahead, uring, madvise")]
pub struct UnknownBackend(pub String);

impl FromStr for BackendKind {
    type Err = UnknownBackend;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackendKind::ALL.into_iter().find(|k| k.name() == s).ok_or_else(|| UnknownBackend(s.to_owned()))
    }
}

/// What became of one issued I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Issued {
    /// Handed to the kernel; no completion will be reported.
    Done,
    /// In flight; a [`Completion`] with the token will be reported.
    Pending,
}

/// A way of issuing prefetch I/O. Only the executor calls it.
pub trait Backend: Send {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Issues one coalesced I/O of `range` (already clamped, absent, not in
    /// flight). `token` comes back in the completion of a `Pending` I/O. Never
    /// called while `in_flight() >= depth()`.
    fn issue(&mut self, file: &FileRef, range: PageRange, token: u64) -> io::Result<Issued>;

    /// I/Os in flight.
    fn in_flight(&self) -> u32 {
        0
    }

    /// I/Os allowed in flight.
    fn depth(&self) -> u32 {
        u32::MAX
    }

    /// Starts I/Os issued but not yet started.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// Waits until at least `min` I/Os finished (capped at those in flight)
    /// and appends every finished one to `out`.
    fn wait(&mut self, min: u32, out: &mut Vec<Completion>) -> io::Result<()> {
        let _ = (min, out);
        Ok(())
    }

    /// Appends finished I/Os to `out` without waiting.
    fn reap(&mut self, out: &mut Vec<Completion>) {
        let _ = out;
    }
}

/// `posix_fadvise(WILLNEED)`.
#[derive(Debug, Default)]
pub struct FadviseBackend;

impl Backend for FadviseBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Fadvise
    }

    fn issue(&mut self, file: &FileRef, range: PageRange, _token: u64) -> io::Result<Issued> {
        sys::fadvise(file.as_fd(), range.byte_offset(), range.byte_len(), sys::Advice::WillNeed)?;
        Ok(Issued::Done)
    }
}

/// `readahead(2)`; falls back to fadvise for a file that refuses it.
#[derive(Debug, Default)]
pub struct ReadaheadBackend;

impl Backend for ReadaheadBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Readahead
    }

    fn issue(&mut self, file: &FileRef, range: PageRange, token: u64) -> io::Result<Issued> {
        match sys::readahead(file.as_fd(), range.byte_offset(), range.byte_len()) {
            Ok(()) => Ok(Issued::Done),
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => FadviseBackend.issue(file, range, token),
            Err(err) => Err(err),
        }
    }
}

/// Mappings the madvise backend keeps before dropping them all.
const MAX_MADVISE_MAPPINGS: usize = 64;

/// `madvise(MADV_WILLNEED)` on a read-only shared mapping of the file.
#[derive(Debug, Default)]
pub struct MadviseBackend {
    mappings: HashMap<FileId, sys::Mapping>,
}

impl Backend for MadviseBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Madvise
    }

    fn issue(&mut self, file: &FileRef, range: PageRange, _token: u64) -> io::Result<Issued> {
        let needed = range.byte_offset() + range.byte_len();
        let id = file.id();
        if self.mappings.get(&id).is_none_or(|m| (m.len() as u64) < needed) {
            if self.mappings.len() >= MAX_MADVISE_MAPPINGS {
                self.mappings.clear();
            }
            let size = file.file().metadata()?.len().max(needed);
            self.mappings.insert(id, sys::Mapping::map(file.as_fd(), size)?);
        }
        match self.mappings.get(&id) {
            Some(mapping) => mapping.will_need(range)?,
            None => return Err(io::Error::from_raw_os_error(libc::ENOMEM)),
        }
        Ok(Issued::Done)
    }
}

/// io_uring buffered reads, `depth` in flight, data discarded.
#[derive(Debug)]
pub struct UringBackend {
    ring: ScratchRing,
}

impl UringBackend {
    /// A ring of `depth` reads of at most `max_io_pages` pages.
    pub fn new(depth: u32, max_io_pages: u64) -> io::Result<Self> {
        let max_read = u32::try_from(max_io_pages * PAGE_SIZE).unwrap_or(!(PAGE_SIZE as u32 - 1));
        Ok(Self { ring: ScratchRing::new(depth, max_read)? })
    }
}

impl Backend for UringBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Uring
    }

    fn issue(&mut self, file: &FileRef, range: PageRange, token: u64) -> io::Result<Issued> {
        let len = u32::try_from(range.byte_len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.ring
            .push_read(file.as_fd(), range.byte_offset(), len, token)
            .map_err(|full| io::Error::new(io::ErrorKind::WouldBlock, full))?;
        Ok(Issued::Pending)
    }

    fn in_flight(&self) -> u32 {
        self.ring.in_flight()
    }

    fn depth(&self) -> u32 {
        self.ring.depth()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.ring.submit()
    }

    fn wait(&mut self, min: u32, out: &mut Vec<Completion>) -> io::Result<()> {
        self.ring.wait(min, out)
    }

    fn reap(&mut self, out: &mut Vec<Completion>) {
        self.ring.reap(out)
    }
}

/// Opens the backend `kind`, falling back to `fadvise` where this kernel
/// cannot run it. Returns the backend and, on fallback, the reason.
pub fn open_backend(kind: BackendKind, depth: u32, max_io_pages: u64) -> (Box<dyn Backend>, Option<String>) {
    match kind {
        BackendKind::Fadvise => (Box::new(FadviseBackend), None),
        BackendKind::Readahead => (Box::new(ReadaheadBackend), None),
        BackendKind::Madvise => (Box::new(MadviseBackend::default()), None),
        BackendKind::Uring => match UringBackend::new(depth, max_io_pages) {
            Ok(backend) => (Box::new(backend), None),
            Err(err) => {
                let reason = format!("io_uring unavailable ({err}); falling back to fadvise");
                tracing::warn!("{reason}");
                (Box::new(FadviseBackend), Some(reason))
            }
        },
    }
}
