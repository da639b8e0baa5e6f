//! RocksDB with predictio: RocksDB's own iterator readahead turned off and
//! the same selectivity moved into predictio's `scan` policy (seed 000
//! §6.3).
//!
//! - [`db`]: a small safe face of RocksDB's C API (Debian's `librocksdb`
//!   7.8, linked as a system library; the few functions used are declared
//!   by hand in `ffi.rs`, the only `extern` items of the crate).
//! - [`scan`]: [`scan::ScanReporter`] knows the live SST files and turns a
//!   scan's start key, bound and direction into the stretches of those
//!   files the scan will read (from RocksDB's own index-based offset
//!   estimates); [`scan::HintedIter`] wraps an iterator and reports each
//!   scan to a predictio pipeline as `Scan` events — segments, progress,
//!   end — before RocksDB reads anything.
//!
//! Point reads ([`db::Db::get`]) report nothing. Prefetching never changes
//! what an iterator returns: the wrapper only sends events, without
//! blocking.
//!
//! `unsafe` code is in the crate's FFI edge only: `ffi` (the declarations
//! of RocksDB's C functions) and [`db`] (the calls into them behind a safe
//! API, each with a `SAFETY:` comment). The crate makes no system call of
//! its own; RocksDB does its I/O, predictio's core its prefetching.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
pub mod db;
#[allow(unsafe_code)]
mod ffi;
pub mod scan;

pub use db::{Db, DbIter, DbOptions, Readahead, SstFile};
pub use scan::{HintedIter, ScanReporter};

/// Why a RocksDB call failed.
#[derive(Debug, thiserror::Error)]
pub enum RocksError {
    /// RocksDB returned an error.
    #[error("rocksdb: {what}: {message}")]
    Rocks {
        /// What was being done.
        what: &'static str,
        /// RocksDB's message.
        message: String,
    },
    /// A path RocksDB cannot take (an interior NUL byte).
    #[error("rocksdb: unusable path {0}")]
    Path(std::path::PathBuf),
    /// Too many ranges for one call.
    #[error("rocksdb: {0} ranges in one call")]
    TooMany(usize),
    /// An SST file could not be opened for prefetching.
    #[error("rocksdb: SST file: {0}")]
    File(#[from] predictio::file::FileError),
}
