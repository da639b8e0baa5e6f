//! What the executor asks the kernel about a file: size, holes, residency.
//!
//! [`PageCache`] is the seam between the executor's logic and the syscalls:
//! [`LinuxPageCache`] answers with `fstat`, `lseek(SEEK_DATA/SEEK_HOLE)`,
//! `cachestat(2)` and `mincore(2)`; unit tests answer with a fake, so every
//! rule of the executor is tested without root or real files.

use std::collections::HashMap;
use std::io;
use std::os::fd::AsFd;

use crate::file::{FileId, FileRef};
use crate::page::{PAGE_SIZE, PageRange};
use crate::sys;

/// The executor's questions about files and their cached pages.
pub trait PageCache: Send {
    /// The file's size in bytes.
    fn size(&mut self, file: &FileRef) -> io::Result<u64>;

    /// Whether the file of `size` bytes may contain holes.
    fn has_holes(&mut self, file: &FileRef, size: u64) -> io::Result<bool>;

    /// Appends the parts of `range` that hold data (not holes) to `out`;
    /// returns the number of hole pages.
    fn data_segments(&mut self, file: &FileRef, range: PageRange, out: &mut Vec<PageRange>) -> io::Result<u64>;

    /// How many pages of `range` are in the page cache.
    fn resident_pages(&mut self, file: &FileRef, range: PageRange) -> io::Result<u64>;

    /// One byte per page of `range` (bit 0 = resident) into `out`. `size` is
    /// the file size in bytes.
    fn residency(&mut self, file: &FileRef, size: u64, range: PageRange, out: &mut Vec<u8>) -> io::Result<()>;

    /// Whether a read of `page` issued earlier is no longer in flight: the
    /// page is cached and up to date, or not cached at all (never added, or
    /// evicted). Never reads an absent page in and never waits. The engine
    /// paces backends that report no completion with it. `recent`: the read
    /// was issued moments ago, so a page not yet readable may be taken to be
    /// in flight without asking whether it is cached at all.
    fn read_settled(&mut self, file: &FileRef, page: u64, recent: bool) -> bool {
        let _ = (file, page, recent);
        true
    }
}

/// Mappings kept for `mincore` before the oldest are dropped.
const MAX_MAPPINGS: usize = 256;

/// The real kernel.
#[derive(Debug)]
pub struct LinuxPageCache {
    cachestat: bool,
    mappings: HashMap<FileId, sys::Mapping>,
}

impl LinuxPageCache {
    /// Probes for `cachestat(2)` (Linux 6.5+); without it, residency is
    /// counted with `mincore` alone.
    pub fn new() -> Self {
        let cachestat = probe_cachestat();
        if !cachestat {
            tracing::warn!("cachestat(2) unavailable: counting residency with mincore(2) only");
        }
        Self { cachestat, mappings: HashMap::new() }
    }

    /// Whether `cachestat(2)` is in use.
    pub fn has_cachestat(&self) -> bool {
        self.cachestat
    }

    fn mapping(&mut self, file: &FileRef, size: u64) -> io::Result<&sys::Mapping> {
        let id = file.id();
        let stale = self.mappings.get(&id).is_none_or(|m| (m.len() as u64) < size);
        if stale {
            if self.mappings.len() >= MAX_MAPPINGS {
                self.mappings.clear();
            }
            let mapping = sys::Mapping::map(file.as_fd(), size.max(1))?;
            self.mappings.insert(id, mapping);
        }
        self.mappings.get(&id).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))
    }
}

impl Default for LinuxPageCache {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether this kernel has `cachestat(2)`.
pub fn probe_cachestat() -> bool {
    match sys::memfd(c"predictio-probe") {
        Ok(f) => match sys::cachestat(f.as_fd(), 0, PAGE_SIZE) {
            Ok(_) => true,
            Err(err) => {
                tracing::debug!(%err, "cachestat probe failed");
                false
            }
        },
        Err(err) => {
            tracing::debug!(%err, "memfd_create failed; cannot probe cachestat");
            false
        }
    }
}

impl PageCache for LinuxPageCache {
    fn read_settled(&mut self, file: &FileRef, page: u64, recent: bool) -> bool {
        let mut byte = [0u8; 1];
        match sys::pread_resident(file.as_fd(), &mut byte, page * PAGE_SIZE) {
            // Cached and up to date (or the file ends there).
            Ok(Some(_)) => true,
            // Not readable without waiting: just issued, so still being read
            // (half the pacing probes' syscalls were this `cachestat`)…
            Ok(None) if recent => false,
            // …else still being read if it is cached.
            Ok(None) => sys::cachestat(file.as_fd(), page * PAGE_SIZE, PAGE_SIZE).map_or(true, |c| c.nr_cache == 0),
            Err(_) => true,
        }
    }

    fn size(&mut self, file: &FileRef) -> io::Result<u64> {
        Ok(file.file().metadata()?.len())
    }

    fn has_holes(&mut self, file: &FileRef, size: u64) -> io::Result<bool> {
        if size == 0 {
            return Ok(false);
        }
        match sys::seek_hole(file.as_fd(), 0) {
            Ok(Some(hole)) => Ok(hole < size),
            Ok(None) => Ok(false),
            // A filesystem without SEEK_HOLE: treat the file as dense.
            Err(err) if err.raw_os_error() == Some(libc::EINVAL) => Ok(false),
            Err(err) => Err(err),
        }
    }

    fn data_segments(&mut self, file: &FileRef, range: PageRange, out: &mut Vec<PageRange>) -> io::Result<u64> {
        data_segments(file, range, out)
    }

    fn resident_pages(&mut self, file: &FileRef, range: PageRange) -> io::Result<u64> {
        if self.cachestat {
            return Ok(sys::cachestat(file.as_fd(), range.byte_offset(), range.byte_len())?.nr_cache.min(range.len()));
        }
        let size = self.size(file)?;
        let mut map = Vec::new();
        self.residency(file, size, range, &mut map)?;
        Ok(map.iter().filter(|b| *b & 1 == 1).count() as u64)
    }

    fn residency(&mut self, file: &FileRef, size: u64, range: PageRange, out: &mut Vec<u8>) -> io::Result<()> {
        self.mapping(file, size)?.residency(range, out)
    }
}

/// Appends the parts of `range` that hold data (`SEEK_DATA`/`SEEK_HOLE`) to
/// `out`, merged where page rounding makes them touch, and returns the
/// pages of `range` that are holes.
pub(crate) fn data_segments(file: &FileRef, range: PageRange, out: &mut Vec<PageRange>) -> io::Result<u64> {
    let fd = file.as_fd();
    let end = range.byte_offset() + range.byte_len();
    let mut pos = range.byte_offset();
    let mut data_pages = 0;
    while pos < end {
        let Some(data) = sys::seek_data(fd, pos)? else { break };
        if data >= end {
            break;
        }
        let hole = sys::seek_hole(fd, data)?.unwrap_or(end).min(end);
        let seg = PageRange::new(data / PAGE_SIZE, hole.div_ceil(PAGE_SIZE)).intersect(&range);
        if !seg.is_empty() {
            // Page rounding can make neighbours touch; merge them.
            match out.last_mut() {
                Some(last) if last.end >= seg.start => last.end = last.end.max(seg.end),
                _ => out.push(seg),
            }
            data_pages += seg.len();
        }
        pos = hole.max(pos + 1);
    }
    Ok(range.len().saturating_sub(data_pages))
}
