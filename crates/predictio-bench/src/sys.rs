//! The bench's syscall edge: the only module of the crate allowed `unsafe`,
//! each block with a `SAFETY:` comment. System calls go through rustix
//! (`fadvise`, `kill`, `getuid`); io_uring through the `io-uring` crate,
//! whose queue pushes are `unsafe` because the kernel writes into our
//! buffers after the call returns; aligned heap buffers for `O_DIRECT`
//! through `std::alloc`; LMDB environments through heed, whose `open` is
//! `unsafe` because LMDB maps the data file.
//!
//! # References
//! - `posix_fadvise(2)`, `kill(2)`, `getuid(2)`, `io_uring_enter(2)`,
//!   `open(2)` (`O_DIRECT` alignment).

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::ptr::NonNull;

use io_uring::{IoUring, opcode, types};

use crate::device::{ALIGN, ProbeError};

/// `posix_fadvise(POSIX_FADV_DONTNEED)` over the whole file: drops its
/// clean cached pages.
pub(crate) fn drop_cached(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::fs::fadvise(fd, 0, None, rustix::fs::Advice::DontNeed)?)
}

/// Sends `SIGTERM` to the process `pid`.
pub(crate) fn terminate(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw).ok_or(rustix::io::Errno::SRCH)?;
    Ok(rustix::process::kill_process(pid, rustix::process::Signal::TERM)?)
}

/// The real user id of this process.
pub(crate) fn uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Opens the LMDB environment in `dir` with `options` and `flags`, which
/// may only be [`heed::EnvFlags::NO_READ_AHEAD`] (the flags heed calls
/// unsafe, such as `NO_LOCK` or `NO_SYNC`, are refused).
///
/// Only for the bench's own environments: they live in its work directory
/// and are written by this process alone, through heed.
pub(crate) fn open_lmdb_env(
    options: &mut heed::EnvOpenOptions,
    flags: heed::EnvFlags,
    dir: &Path,
) -> heed::Result<heed::Env> {
    if !heed::EnvFlags::NO_READ_AHEAD.contains(flags) {
        let refused = io::Error::new(io::ErrorKind::InvalidInput, format!("LMDB flags {flags:?} are not allowed"));
        return Err(heed::Error::Io(refused));
    }
    // SAFETY: heed's contract for `flags` is that no unsafe flag is set
    // (checked above: at most NO_READ_AHEAD). Its contract for `open` is
    // about the memory map: the data file must not be modified behind
    // LMDB's back. The bench's environments are files in its own work
    // directory that nothing but this process, through heed, writes, each
    // opened once at a time (closed before it is opened again).
    unsafe { options.flags(flags).open(dir) }
}

/// A zeroed heap buffer aligned for O_DIRECT, freed on drop.
pub(crate) struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    /// A buffer of `size` bytes aligned to [`ALIGN`].
    pub(crate) fn new(size: usize) -> Result<AlignedBuf, ProbeError> {
        AlignedBuf::aligned(size, ALIGN)
    }

    /// A buffer aligned to `align` (a power of two).
    pub(crate) fn aligned(size: usize, align: usize) -> Result<AlignedBuf, ProbeError> {
        let layout = Layout::from_size_align(size.max(1), align).map_err(|_| ProbeError::Alloc { size })?;
        // SAFETY: `layout` has a non-zero size (`size.max(1)`).
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).ok_or(ProbeError::Alloc { size })?;
        Ok(AlignedBuf { ptr, layout })
    }

    /// The buffer's first byte.
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The buffer's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised bytes owned by
        // this buffer; a read into it is only ever in flight while
        // `DirectReads` holds it, and it hands out no slice then.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The buffer's bytes, to write.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised (zeroed) bytes
        // owned by this buffer, and `&mut self` makes this the only borrow.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was returned by `alloc_zeroed` with exactly `layout`
        // and is freed only here, once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

/// io_uring reads into buffers this type owns, one per slot: a slot's
/// buffer is not lent out while a read into it is in flight, and the
/// buffers are never freed while one may be (dropped with reads in flight,
/// they are leaked instead).
pub(crate) struct DirectReads {
    ring: IoUring,
    bufs: Vec<AlignedBuf>,
    busy: Vec<bool>,
    len: u32,
}

impl DirectReads {
    /// `ring`, and `bufs`, one per slot, each read `len` bytes at a time
    /// (at most the smallest buffer's size).
    pub(crate) fn new(ring: IoUring, bufs: Vec<AlignedBuf>, len: u32) -> DirectReads {
        let smallest = bufs.iter().map(|b| b.layout.size()).min().unwrap_or(0);
        let len = len.min(u32::try_from(smallest).unwrap_or(u32::MAX));
        let busy = vec![false; bufs.len()];
        DirectReads { ring, bufs, busy, len }
    }

    /// Queues a read at `offset` of `fd` into `slot`'s buffer. False if the
    /// submission queue is full, or the slot does not exist or has a read
    /// in flight. The descriptor must stay open until the next
    /// [`Self::submit_and_wait`] (the kernel takes its own reference then).
    pub(crate) fn push(&mut self, fd: BorrowedFd<'_>, slot: usize, offset: u64) -> bool {
        let (Some(buf), Some(false)) = (self.bufs.get(slot), self.busy.get(slot).copied()) else { return false };
        let entry = opcode::Read::new(types::Fd(fd.as_raw_fd()), buf.as_mut_ptr(), self.len)
            .offset(offset)
            .build()
            .user_data(slot as u64);
        // SAFETY: the entry points at `len` bytes of `bufs[slot]` (`len` is
        // at most any buffer's size), which no read is using (`busy` is
        // false) and which stays allocated until the read completes:
        // `busy` keeps it from being lent out, and `Drop` leaks the buffers
        // rather than free them while a read may be in flight.
        let pushed = unsafe { self.ring.submission().push(&entry) }.is_ok();
        if pushed {
            self.busy[slot] = true;
        }
        pushed
    }

    /// Submits queued reads and waits for `want` completions.
    pub(crate) fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        self.ring.submit_and_wait(want)
    }

    /// Appends finished reads to `done` as `(slot, result)` (bytes read, or
    /// `-errno`); their buffers may be read again.
    pub(crate) fn reap(&mut self, done: &mut Vec<(usize, i32)>) {
        for cqe in self.ring.completion() {
            let slot = cqe.user_data() as usize;
            if let Some(busy) = self.busy.get_mut(slot) {
                *busy = false;
            }
            done.push((slot, cqe.result()));
        }
    }

    /// `slot`'s buffer, when no read into it is in flight.
    pub(crate) fn buf(&self, slot: usize) -> Option<&[u8]> {
        match self.busy.get(slot) {
            Some(false) => self.bufs.get(slot).map(AlignedBuf::as_slice),
            _ => None,
        }
    }
}

impl Drop for DirectReads {
    /// Frees the buffers only when no read into them is in flight; leaks
    /// them otherwise (the kernel may still write into them).
    fn drop(&mut self) {
        if self.busy.iter().any(|&b| b) {
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn direct_reads_fill_owned_buffers_and_lend_them_only_when_idle() {
        let dir = std::env::temp_dir().join(format!("predictio-bench-sys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("data");
        let bytes: Vec<u8> = (0..2 * 4096u32).map(|i| (i % 251) as u8 + 1).collect();
        std::fs::write(&path, &bytes).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        let ring = IoUring::new(4).expect("io_uring");
        let bufs = vec![AlignedBuf::new(4096).expect("alloc"), AlignedBuf::new(4096).expect("alloc")];
        let mut reads = DirectReads::new(ring, bufs, 4096);
        use std::os::fd::AsFd;
        assert!(reads.push(file.as_fd(), 1, 4096));
        assert!(!reads.push(file.as_fd(), 1, 0), "slot 1 is busy");
        assert!(!reads.push(file.as_fd(), 2, 0), "no slot 2");
        assert!(reads.buf(1).is_none(), "not lent while in flight");
        reads.submit_and_wait(1).expect("submit");
        let mut done = Vec::new();
        reads.reap(&mut done);
        assert_eq!(done, vec![(1, 4096)]);
        assert_eq!(reads.buf(1).expect("idle"), &bytes[4096..]);
        drop_cached(file.as_fd()).expect("fadvise");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lmdb_environments_open_with_safe_flags_only() {
        let dir = std::env::temp_dir().join(format!("predictio-bench-sys-lmdb-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let mut options = heed::EnvOpenOptions::new();
        options.map_size(1 << 20);
        let env = open_lmdb_env(&mut options, heed::EnvFlags::NO_READ_AHEAD, &dir).expect("open");
        assert!(env.get_flags().expect("flags") & heed::EnvFlags::NO_READ_AHEAD.bits() != 0);
        env.prepare_for_closing().wait();
        let mut options = heed::EnvOpenOptions::new();
        let refused = open_lmdb_env(&mut options, heed::EnvFlags::NO_LOCK, &dir).map(drop);
        assert!(matches!(refused, Err(heed::Error::Io(_))), "{refused:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn uid_and_terminate() {
        assert_eq!(uid() == 0, predictio::testing::is_root());
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn sleep");
        terminate(child.id()).expect("kill");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().expect("wait").signal(), Some(15));
        assert!(terminate(u32::MAX).is_err());
    }
}
