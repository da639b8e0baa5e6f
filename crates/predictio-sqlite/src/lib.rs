//! predictio's SQLite adapter: a loadable extension that registers a VFS
//! shim (`predictio`, made the default) over the default VFS. The shim
//! forwards every call to the real VFS and, for main database files, shows
//! each page SQLite read to [`observer::DbObserver`]: interior b-tree pages
//! are parsed ([`predictio::btree::sqlite::parse_page`]), a [`Traversal`]
//! turns descents into `TreeChildEnter` events, and the `btree` policy in an
//! embedded runtime ([`observer::Prefetcher`], one per process) prefetches
//! the upcoming children. SQLite's reads are never changed: the shim only
//! observes bytes the real VFS returned, and bad pages are passed over.
//!
//! Loading (the shim wraps files opened *after* the load):
//!
//! ```text
//! sqlite3 :memory:
//! sqlite> .load /path/to/libpredictio_sqlite.so
//! sqlite> .open /path/to/db.sqlite
//! sqlite> SELECT predictio_stats();
//! ```
//!
//! All `unsafe` code is in one private module, `vfs`: the FFI edge with
//! SQLite's C API (the VFS method table and the extension's entry points).
//! It makes no system call of its own: file I/O is the real VFS's, and the
//! prefetch goes through predictio's core (`predictio::os`, its syscall
//! edge).
//!
//! [`Traversal`]: predictio::btree::Traversal
#![deny(unsafe_code)]

#[cfg(feature = "extension")]
mod json;
pub mod observer;
#[cfg(feature = "extension")]
mod vfs;

pub use observer::{DbObserver, Error, PrefetchStats, Prefetcher, SharedObserver};
#[cfg(feature = "extension")]
pub use vfs::{VFS_NAME, sqlite3_predictio_init};
