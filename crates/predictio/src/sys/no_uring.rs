//! The io_uring rings of a build without the `uring` feature: the same
//! types, whose constructors always fail, so that every caller takes the
//! path it takes on a kernel without io_uring (the executor falls back to
//! `fadvise`, large reads to `pread` threads). A loadable extension that
//! never uses io_uring links none of it.

/// The error every constructor returns.
fn unsupported() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::Unsupported, "predictio was built without io_uring (feature `uring`)")
}

/// [`ScratchRing`](uring::ScratchRing) and its types, never constructed.
pub mod uring {
    use std::io;
    use std::os::fd::BorrowedFd;

    pub use crate::sys::ring::{Completion, RingFull};

    /// A ring of buffered reads that discard their data: none in this build.
    #[derive(Debug)]
    pub struct ScratchRing {
        never: std::convert::Infallible,
    }

    impl ScratchRing {
        /// Always fails: this build has no io_uring.
        pub fn new(_depth: u32, _max_read: u32) -> io::Result<Self> {
            Err(super::unsupported())
        }

        /// Reads allowed in flight at once.
        pub fn depth(&self) -> u32 {
            match self.never {}
        }

        /// Reads queued or in flight now.
        pub fn in_flight(&self) -> u32 {
            match self.never {}
        }

        /// Queues a buffered read.
        pub fn push_read(&mut self, _: BorrowedFd<'_>, _: u64, _: u32, _: u64) -> Result<(), RingFull> {
            match self.never {}
        }

        /// Starts every queued read.
        pub fn submit(&mut self) -> io::Result<()> {
            match self.never {}
        }

        /// Waits for finished reads.
        pub fn wait(&mut self, _: u32, _: &mut Vec<Completion>) -> io::Result<()> {
            match self.never {}
        }

        /// Appends every finished read to `out`.
        pub fn reap(&mut self, _: &mut Vec<Completion>) {
            match self.never {}
        }
    }
}

/// [`ReadRing`](bigread::ReadRing) and its error, never constructed.
pub mod bigread {
    use std::io;
    use std::os::fd::BorrowedFd;

    pub use crate::sys::ring::RingReadError;

    /// An io_uring instance for large reads: none in this build.
    #[derive(Debug)]
    pub struct ReadRing {
        never: std::convert::Infallible,
    }

    impl ReadRing {
        /// Always fails: this build has no io_uring.
        pub fn new(_depth: u32) -> io::Result<Self> {
            Err(super::unsupported())
        }

        /// Reads into `buf`.
        pub fn read_into(&mut self, _: BorrowedFd<'_>, _: u64, _: &mut [u8], _: usize) -> Result<usize, RingReadError> {
            match self.never {}
        }
    }
}
