//! The types of the io_uring rings that do not depend on io_uring itself:
//! shared by the rings ([`super::uring`], [`super::bigread`]) and by their
//! stand-ins in a build without the `uring` feature.

use std::io;

/// The ring has `depth` reads in flight already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("io_uring has {0} reads in flight, its depth")]
pub struct RingFull(pub u32);

/// One finished read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// What the caller passed to [`ScratchRing::push_read`](super::uring::ScratchRing::push_read).
    pub user_data: u64,
    /// Bytes read, or the error.
    pub result: Result<u32, i32>,
}

/// Why [`ReadRing::read_into`](super::bigread::ReadRing::read_into) failed.
#[derive(Debug, thiserror::Error)]
pub enum RingReadError {
    /// `io_uring_enter` failed before any read was in flight.
    #[error("io_uring_enter failed: {0}")]
    Enter(#[source] io::Error),
    /// A read completed with an error.
    #[error("io_uring read of {len} bytes at offset {offset} failed: {source}")]
    Read {
        /// File offset of the failed read.
        offset: u64,
        /// Its length.
        len: usize,
        /// The error from the completion.
        source: io::Error,
    },
}
