//! predictio's SQLite adapter. Two shared objects:
//!
//! - `libpredictio_sqlite.so`, the loadable extension a program loads: a
//!   small VFS shim (`loader/loader.rs`, built by `build.rs` without std)
//!   registered as `predictio`, made the default, over the default VFS. It
//!   forwards every call to the real VFS and times the reads of main
//!   database files; once they have waited long enough to pay for it, it
//!   loads the runtime in the background and from then on shows it each
//!   page SQLite read.
//! - `libpredictio_sqlite_runtime.so`, this crate's cdylib: for each main
//!   database a [`DbObserver`] parses the interior b-tree pages
//!   ([`predictio::btree::sqlite::parse_page`]), a [`Traversal`] turns
//!   descents into `TreeChildEnter` events, and the `btree` policy in an
//!   embedded runtime ([`Prefetcher`], one per process) prefetches the
//!   upcoming children.
//!
//! SQLite's reads are never changed: only bytes the real VFS returned are
//! observed, and bad pages are passed over.
//!
//! ```text
//! sqlite3 :memory:
//! sqlite> .load /path/to/libpredictio_sqlite.so
//! sqlite> .open /path/to/db.sqlite
//! sqlite> SELECT predictio_stats();
//! ```
//!
//! Rust programs that link SQLite themselves can use [`DbObserver`] and
//! [`Prefetcher`] directly (`default-features = false` leaves out the
//! loader's functions). All `unsafe` code of this crate is in one private
//! module, `hooks`: the functions the loader calls.
//!
//! [`Traversal`]: predictio::btree::Traversal
#![deny(unsafe_code)]

#[cfg(feature = "extension")]
#[path = "../loader/abi.rs"]
#[allow(dead_code, missing_docs)]
mod abi;
#[cfg(feature = "extension")]
mod hooks;
#[cfg(feature = "extension")]
mod json;
pub mod observer;

#[cfg(feature = "extension")]
pub use hooks::predictio_sqlite_runtime_hooks;
pub use observer::{DbObserver, Error, PrefetchStats, Prefetcher, SharedObserver};
