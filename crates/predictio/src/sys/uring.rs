//! io_uring buffered reads into a scratch buffer: the executor's way to put
//! many reads in flight at once.
//!
//! The data is never looked at: the reads exist to make the kernel fill the
//! page cache, at a queue depth a single demand reader never reaches. All
//! reads therefore share one scratch buffer of the largest I/O size; the kernel
//! may copy into it concurrently, which is harmless because nothing ever reads
//! it. The buffer must outlive every read in flight, so dropping the ring
//! first waits for all of them (see `Drop`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::{IoUring, opcode, types};

pub use super::ring::{Completion, RingFull};

/// A ring of buffered reads that discard their data.
pub struct ScratchRing {
    ring: IoUring,
    scratch: Box<[u8]>,
    depth: u32,
    in_flight: u32,
    unsubmitted: u32,
}

impl std::fmt::Debug for ScratchRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchRing").field("depth", &self.depth).field("in_flight", &self.in_flight).finish()
    }
}

impl ScratchRing {
    /// A ring for up to `depth` reads in flight, each at most `max_read`
    /// bytes.
    pub fn new(depth: u32, max_read: u32) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        super::refuse_if_assumed_missing()?;
        let ring = IoUring::builder().build(depth.next_power_of_two())?;
        Ok(Self {
            ring,
            scratch: vec![0u8; max_read.max(1) as usize].into_boxed_slice(),
            depth,
            in_flight: 0,
            unsubmitted: 0,
        })
    }

    /// Reads allowed in flight at once.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Reads queued or in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Largest read this ring accepts, in bytes.
    fn max_read(&self) -> u32 {
        self.scratch.len() as u32
    }

    /// Queues a buffered read of `len` bytes (capped at [`Self::max_read`])
    /// at `offset` of `fd`. It starts at the next [`Self::submit`] or
    /// [`Self::wait`]. The descriptor only needs to stay open until then: the
    /// kernel takes its own reference to the file on submission.
    pub fn push_read(&mut self, fd: BorrowedFd<'_>, offset: u64, len: u32, user_data: u64) -> Result<(), RingFull> {
        if self.in_flight >= self.depth {
            return Err(RingFull(self.depth));
        }
        let len = len.min(self.max_read());
        let entry = opcode::Read::new(types::Fd(fd.as_raw_fd()), self.scratch.as_mut_ptr(), len)
            .offset(offset)
            .build()
            .user_data(user_data);
        // SAFETY: the entry's buffer is `scratch`, which lives as long as the
        // ring and is never read or moved while reads are in flight (Drop waits
        // for them); the fd is open now and the kernel resolves it on submit,
        // which happens before the caller's borrow could end in practice —
        // and a stale number would only read into scratch, never corrupt.
        let pushed = unsafe { self.ring.submission().push(&entry) };
        if pushed.is_err() {
            return Err(RingFull(self.depth));
        }
        self.in_flight += 1;
        self.unsubmitted += 1;
        Ok(())
    }

    /// Starts every queued read without waiting.
    pub fn submit(&mut self) -> io::Result<()> {
        if self.unsubmitted > 0 {
            self.ring.submit()?;
            self.unsubmitted = 0;
        }
        Ok(())
    }

    /// Starts queued reads, waits until at least `min_complete` reads have
    /// finished (capped at those in flight), and appends every finished read
    /// to `out`.
    pub fn wait(&mut self, min_complete: u32, out: &mut Vec<Completion>) -> io::Result<()> {
        let want = min_complete.min(self.in_flight) as usize;
        loop {
            match self.ring.submit_and_wait(want) {
                Ok(_) => break,
                Err(err) if err.raw_os_error() == Some(libc::EINTR) => continue,
                Err(err) => return Err(err),
            }
        }
        self.unsubmitted = 0;
        self.reap(out);
        Ok(())
    }

    /// Appends every finished read to `out`, without waiting.
    pub fn reap(&mut self, out: &mut Vec<Completion>) {
        for cqe in self.ring.completion() {
            let res = cqe.result();
            self.in_flight = self.in_flight.saturating_sub(1);
            out.push(Completion {
                user_data: cqe.user_data(),
                result: if res < 0 { Err(-res) } else { Ok(res as u32) },
            });
        }
    }
}

impl Drop for ScratchRing {
    fn drop(&mut self) {
        // Reads in flight still write into `scratch`: wait for all of them
        // before the buffer is freed (then the ring itself is unmapped).
        let mut sink = Vec::new();
        while self.in_flight > 0 {
            if self.wait(1, &mut sink).is_err() {
                // The ring is broken; leak the buffer rather than free memory
                // the kernel may still write.
                std::mem::forget(std::mem::take(&mut self.scratch));
                break;
            }
            sink.clear();
        }
    }
}
