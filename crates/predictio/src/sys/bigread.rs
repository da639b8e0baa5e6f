//! io_uring reads of one large range straight into the caller's buffer: the
//! syscall edge of [`crate::largeread`].
//!
//! The range is cut into chunks; up to `depth` chunk reads are in flight at
//! once, each targeting its own disjoint slice of the destination, and they
//! complete in any order. A short read is resubmitted for its remainder, a
//! read of 0 bytes marks the end of the file, `EAGAIN`/`EINTR` completions are
//! retried.
//!
//! The invariant this file exists to keep: **the kernel writes into the
//! caller's buffer only while [`ReadRing::read_into`] holds the `&mut`
//! borrow**. `read_into` therefore never returns — not on success, not on a
//! read error — while a read is in flight. If the ring itself fails while
//! reads are in flight (an `io_uring_enter` error other than `EINTR`,
//! `EAGAIN` or `EBUSY`, which the kernel does not return for a ring used like
//! this one), there is no way to learn when the kernel is done with the
//! buffer, so the process aborts rather than hand back memory the kernel may
//! still write.
//!
//! # References
//! - `io_uring_enter(2)`, `io_uring_prep_read(3)`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, opcode, types};

pub use super::ring::RingReadError;

/// An io_uring instance for large reads into caller buffers.
pub struct ReadRing {
    ring: IoUring,
    depth: u32,
    /// Completions of one wait, reused across calls.
    done: Vec<(u64, i32)>,
}

impl std::fmt::Debug for ReadRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadRing").field("depth", &self.depth).finish()
    }
}

/// Per-chunk progress: bytes of the chunk already read.
struct Chunk {
    start: usize,
    end: usize,
    filled: usize,
}

impl ReadRing {
    /// A ring that keeps up to `depth` reads (1..=4096) in flight.
    pub fn new(depth: u32) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        super::refuse_if_assumed_missing()?;
        let ring = IoUring::builder().build(depth.next_power_of_two())?;
        Ok(Self { ring, depth, done: Vec::with_capacity(depth as usize) })
    }

    /// Reads `buf.len()` bytes of `fd` starting at `offset` into `buf`, in
    /// chunks of `chunk` bytes (clamped to 4 KiB..=1 GiB), `depth` at a time.
    /// Returns the bytes read: `buf.len()`, or fewer when the file ends
    /// first (then `buf[..n]` holds the file's bytes up to its end).
    pub fn read_into(
        &mut self,
        fd: BorrowedFd<'_>,
        offset: u64,
        buf: &mut [u8],
        chunk: usize,
    ) -> Result<usize, RingReadError> {
        let chunk = chunk.clamp(4096, 1 << 30);
        let total = buf.len();
        if total == 0 {
            return Ok(0);
        }
        let mut chunks: Vec<Chunk> = (0..total.div_ceil(chunk))
            .map(|i| Chunk { start: i * chunk, end: ((i + 1) * chunk).min(total), filled: 0 })
            .collect();
        let base = buf.as_mut_ptr();
        let raw_fd = types::Fd(fd.as_raw_fd());
        let mut next = 0usize;
        let mut in_flight = 0u32;
        let mut eof_at = total;
        let mut error: Option<RingReadError> = None;
        // Chunks to (re)submit for their remainder, before new ones.
        let mut retry: Vec<usize> = Vec::new();

        loop {
            // Queue reads up to the depth: remainders first, then new chunks.
            while error.is_none() && in_flight < self.depth {
                let index = match retry.pop() {
                    Some(i) => i,
                    None if next < chunks.len() && chunks[next].start < eof_at => {
                        next += 1;
                        next - 1
                    }
                    None => break,
                };
                let c = &chunks[index];
                let at = c.start + c.filled;
                let len = (c.end.min(eof_at)).saturating_sub(at);
                if len == 0 {
                    continue;
                }
                // `at + len <= total`, so the target lies inside `buf`; the
                // cast is exact because chunks are at most 1 GiB.
                let target = base.wrapping_add(at);
                let entry = opcode::Read::new(raw_fd, target, len as u32)
                    .offset(offset.saturating_add(at as u64))
                    .build()
                    .user_data(index as u64);
                // SAFETY: `target..target + len` is a sub-slice of `buf`,
                // which this call borrows mutably until it returns, and
                // which is disjoint from every other read in flight (each
                // chunk has at most one read in flight, covering only its
                // unfilled part). This function does not return while any
                // read is in flight (the loop below drains them all, or the
                // process aborts), so the kernel never writes to `buf` after
                // the borrow ends. `fd` is borrowed for the whole call too.
                let pushed = unsafe { self.ring.submission().push(&entry) };
                if pushed.is_err() {
                    // The queue holds `depth` entries and we never exceed
                    // `depth` in flight, so this does not happen; retry the
                    // chunk after the next completion if it somehow does,
                    // and fail rather than spin when nothing is in flight.
                    retry.push(index);
                    if in_flight == 0 {
                        error = Some(RingReadError::Enter(io::Error::other("io_uring submission queue full")));
                    }
                    break;
                }
                in_flight += 1;
            }
            if in_flight == 0 {
                break;
            }
            if let Err(err) = self.ring.submit_and_wait(1) {
                match err.raw_os_error() {
                    Some(libc::EINTR | libc::EAGAIN | libc::EBUSY) => continue,
                    _ => {
                        // Reads may be in flight into `buf`: see the module
                        // docs for why this cannot return.
                        eprintln!("predictio: io_uring_enter failed with reads in flight ({err}); aborting");
                        std::process::abort();
                    }
                }
            }
            self.done.clear();
            self.done.extend(self.ring.completion().map(|cqe| (cqe.user_data(), cqe.result())));
            for &(user_data, res) in &self.done {
                in_flight = in_flight.saturating_sub(1);
                let Some(c) = chunks.get_mut(user_data as usize) else { continue };
                if res < 0 {
                    let errno = -res;
                    if errno == libc::EAGAIN || errno == libc::EINTR {
                        retry.push(user_data as usize);
                    } else if error.is_none() {
                        error = Some(RingReadError::Read {
                            offset: offset.saturating_add((c.start + c.filled) as u64),
                            len: c.end - c.start - c.filled,
                            source: io::Error::from_raw_os_error(errno),
                        });
                    }
                } else if res == 0 {
                    eof_at = eof_at.min(c.start + c.filled);
                } else {
                    c.filled += res as usize;
                    if c.start + c.filled < c.end.min(eof_at) {
                        retry.push(user_data as usize);
                    }
                }
            }
        }
        match error {
            Some(err) => Err(err),
            None => {
                // Every chunk below eof_at was read to its end or to eof_at.
                Ok(eof_at)
            }
        }
    }
}
