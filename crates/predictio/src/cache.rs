//! Page-cache inspection and eviction for tools (the CLI, benchmarks,
//! tests): how much of a file is resident, drop it, wait for pages to arrive.
//!
//! These are tools for people and measurements, not part of the prefetch
//! path: the executor never evicts anything.

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use crate::file::FileRef;
use crate::page::{PAGE_SIZE, PageRange};
use crate::sys::{self, CacheStat};

/// Residency of a whole file.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize)]
pub struct Residency {
    /// File size, bytes.
    pub size: u64,
    /// Pages the file spans.
    pub pages: u64,
    /// Pages in the page cache.
    pub resident: u64,
    /// Dirty pages.
    pub dirty: u64,
    /// Pages under writeback.
    pub writeback: u64,
    /// Pages evicted so far (kernel's count for this file's mapping).
    pub evicted: u64,
}

impl Residency {
    /// Resident share of the file's pages, 0..=1 (1 for an empty file).
    pub fn fraction(&self) -> f64 {
        if self.pages == 0 { 1.0 } else { self.resident as f64 / self.pages as f64 }
    }
}

/// Residency of `file` via `cachestat(2)`, or `mincore(2)` where the kernel
/// has no `cachestat`.
pub fn residency(file: &FileRef) -> io::Result<Residency> {
    let size = file.file().metadata()?.len();
    let pages = size.div_ceil(PAGE_SIZE);
    if pages == 0 {
        return Ok(Residency::default());
    }
    let stat = cache_stat(file, PageRange::new(0, pages))?;
    Ok(Residency {
        size,
        pages,
        resident: stat.nr_cache.min(pages),
        dirty: stat.nr_dirty,
        writeback: stat.nr_writeback,
        evicted: stat.nr_evicted,
    })
}

/// `cachestat(2)` of `range` of `file`, or where the kernel has none
/// (before Linux 6.5) its resident pages by `mincore(2)` (the other counts
/// then 0).
pub fn cache_stat(file: &FileRef, range: PageRange) -> io::Result<CacheStat> {
    match sys::cachestat(file.as_fd(), range.byte_offset(), range.byte_len()) {
        Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
            Ok(CacheStat { nr_cache: uptodate_pages(file, &[range])?, ..CacheStat::default() })
        }
        other => other,
    }
}

/// Pages of `ranges` that are resident and up to date (`mincore(2)`: a page
/// still being read does not count, unlike `cachestat`).
pub fn uptodate_pages(file: &FileRef, ranges: &[PageRange]) -> io::Result<u64> {
    let size = file.file().metadata()?.len();
    if size == 0 {
        return Ok(0);
    }
    let mapping = sys::Mapping::map(file.as_fd(), size)?;
    let mut map = Vec::new();
    let mut count = 0;
    for range in ranges {
        mapping.residency(*range, &mut map)?;
        count += map.iter().filter(|b| *b & 1 == 1).count() as u64;
    }
    Ok(count)
}

/// Writes back `file`'s dirty pages, then asks the kernel to drop its clean
/// cached pages (`POSIX_FADV_DONTNEED`). Pages another process has mapped
/// and locked may stay.
pub fn evict(file: &FileRef) -> io::Result<()> {
    file.file().sync_data()?;
    sys::fadvise(file.as_fd(), 0, 0, sys::Advice::DontNeed)
}

/// Reads `buf.len()` bytes of `file` at `offset` only if they are in the
/// page cache (`preadv2(RWF_NOWAIT)`): `Some(n)` with the bytes read,
/// `None` when they are not cached (nothing is read from storage, nothing
/// waits). For observers that look at pages a program or a prefetch
/// brought in.
pub fn read_cached(file: &FileRef, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
    crate::sys::pread_resident(std::os::fd::AsFd::as_fd(file), buf, offset)
}

/// Polls until every page of `ranges` (clamped to the file) is resident and
/// up to date, or `timeout` passes. Returns the up-to-date page count at the
/// end.
pub fn wait_resident(file: &FileRef, ranges: &[PageRange], timeout: Duration) -> io::Result<u64> {
    let size = file.file().metadata()?.len();
    let pages = size.div_ceil(PAGE_SIZE);
    let clamped: Vec<PageRange> = ranges.iter().map(|r| PageRange::new(r.start.min(pages), r.end.min(pages))).collect();
    let want: u64 = clamped.iter().map(PageRange::len).sum();
    let deadline = Instant::now() + timeout;
    loop {
        let have = uptodate_pages(file, &clamped)?;
        if have >= want || Instant::now() >= deadline {
            return Ok(have);
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Writes back every filesystem (`sync(1)`) and drops the clean page cache,
/// dentries and inodes (`/proc/sys/vm/drop_caches`): the cold start of a
/// measurement or of an exact recording. Needs root.
pub fn drop_caches() -> io::Result<()> {
    use std::io::Write;
    // sync(1) writes back every filesystem, so dropping leaves nothing dirty
    // behind that a later pass would have to write.
    let status = std::process::Command::new("sync").status()?;
    if !status.success() {
        return Err(io::Error::other("sync failed"));
    }
    let mut f = std::fs::OpenOptions::new().write(true).open("/proc/sys/vm/drop_caches")?;
    f.write_all(b"3\n")?;
    Ok(())
}
