//! LMDB adapter of predictio: range scans over an LMDB database that
//! prefetch the upcoming leaves through the shared `btree` policy.
//!
//! LMDB reads through a read-only `mmap` of its data file, so a cold range
//! scan over a table inserted in random key order takes one page fault per
//! leaf, one at a time: B-tree neighbours in key order lie far apart in the
//! file, and the kernel's read-around cannot guess them. The branch pages
//! above the scan know them. This crate watches where a scan is (the leaf
//! page each returned key lies in: keys are pointers into the map), and when
//! the scan enters a new leaf it reads the branch pages on the path to it
//! from the map (resident: LMDB just walked them), turns the step into
//! `TreeChildEnter` events ([`predictio::btree::Traversal`]) and hands them
//! to the `btree` policy ([`predictio::policies::btree`]) in an embedded
//! runtime ([`predictio::embedded::Embedded`]), whose executor prefetches
//! the next leaves with `posix_fadvise(WILLNEED)` on the data file. The page
//! faults of the scan then find those leaves in the page cache.
//!
//! ```text
//!  RoRange::next ─ key ptr ─ leaf page ─ (new leaf?) ─ branch pages from the map ─ lmdb::search_branch
//!                                                      └ Traversal ─ TreeChildEnter ─ Embedded (btree policy ─ executor)
//! ```
//!
//! The policy is the one SQLite's adapter uses; only the page parser
//! ([`predictio::btree::lmdb`]) is LMDB's. A point lookup or a short scan
//! costs almost nothing: the policy asks for nothing until the traversal
//! steps forward, then grows its window while the scan goes on.
//!
//! Scope: the unnamed (main) database of an environment with 4 KiB pages
//! and LMDB's default key order (no `MDB_REVERSEKEY`, `MDB_INTEGERKEY`,
//! `MDB_DUPSORT` or custom comparator); other databases are read as usual
//! and nothing is prefetched. Prefetch never changes what a scan returns.
//!
//! # Example
//!
//! ```
//! use heed::types::Bytes;
//! use heed::{Database, EnvOpenOptions};
//! use predictio_lmdb::LmdbPrefetcher;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! // SAFETY: heed's contract for opening: this environment is opened once, here.
//! let env = unsafe { EnvOpenOptions::new().map_size(64 << 20).open(dir.path())? };
//! let mut wtxn = env.write_txn()?;
//! let db: Database<Bytes, Bytes> = env.create_database(&mut wtxn, None)?;
//! for i in 0..1000u32 {
//!     db.put(&mut wtxn, format!("user{i:010}").as_bytes(), &[7u8; 400])?;
//! }
//! wtxn.commit()?;
//!
//! // One per environment: holds the data file and an embedded runtime.
//! let prefetcher = LmdbPrefetcher::new(&env)?;
//! let rtxn = env.read_txn()?;
//! let mut scan = prefetcher.scan_from(&db, &rtxn, b"user0000000100")?;
//! let mut rows = 0;
//! for row in scan.by_ref().take(300) {
//!     let (_key, value) = row?;
//!     assert_eq!(value.len(), 400);
//!     rows += 1;
//! }
//! assert_eq!(rows, 300);
//! assert!(scan.stats().leaves > 1);
//! # Ok(()) }
//! ```
//!
//! All `unsafe` code is in one private module, `sys`: the copy of a page
//! out of LMDB's map and `madvise` on it (through rustix); the rest of the
//! crate is safe Rust.

#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod sys;

use std::any::Any;
use std::ops::RangeBounds;
use std::path::PathBuf;
use std::sync::Arc;

use heed::types::Bytes;
use heed::{Database, Env, RoRange, RoTxn};
use predictio::btree::lmdb::{self, Geometry, Meta};
use predictio::btree::{DbPageLayout, PageError, Traversal};
use predictio::embedded::Embedded;
use predictio::executor::ExecutorError;
use predictio::file::FileError;
use predictio::policies::btree::{BtreeConfig, BtreePolicy};
use predictio::{ExecutorConfig, FileRef, PageRange};

pub use sys::LMDB_PAGE;
use sys::Map;

/// Interior pages a scan's [`Traversal`] remembers: the depth of a deep
/// tree plus the next few branch pages.
const TRAVERSAL_CAPACITY: usize = 16;
/// Deepest tree a descent follows (LMDB trees of billions of rows are
/// under 10 levels).
const MAX_DEPTH: usize = 32;
/// `MDB_NOSUBDIR`: the environment's path is the data file itself.
const MDB_NOSUBDIR: u32 = 0x4000;
/// Main-database flags whose key order this adapter cannot follow:
/// `MDB_REVERSEKEY`, `MDB_DUPSORT`, `MDB_INTEGERKEY`, `MDB_REVERSEDUP`.
const UNSUPPORTED_DB_FLAGS: u16 = 0x02 | 0x04 | 0x08 | 0x40;

/// Why the adapter could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The embedded executor did not start.
    #[error("starting the prefetch executor: {0}")]
    Executor(#[from] ExecutorError),
    /// The data file could not be opened for prefetching.
    #[error("opening the LMDB data file for prefetch: {0}")]
    File(#[from] FileError),
    /// LMDB reported an error.
    #[error("LMDB: {0}")]
    Lmdb(#[from] heed::Error),
    /// `/proc/self/maps` could not be read.
    #[error("reading /proc/self/maps: {0}")]
    Maps(std::io::Error),
    /// No mapping of the data file was found in this process.
    #[error("no mapping of {0} in this process")]
    NoMap(PathBuf),
    /// `madvise(MADV_RANDOM)` on the map failed.
    #[error("madvise(MADV_RANDOM) on the map: {0}")]
    Madvise(std::io::Error),
    /// The data file's meta page does not parse.
    #[error("the data file's meta page: {0}")]
    Meta(PageError),
    /// The environment's page size is not the 4 KiB this adapter reads.
    #[error("LMDB page size {0} is not supported (4096 only)")]
    PageSize(u32),
}

/// What happens to the kernel's read-around on the map.
///
/// Without `MDB_NORDAHEAD`, every page fault on LMDB's map makes the kernel
/// read up to `read_ahead_kb` around the faulting page (8 MiB on a device
/// set to 8192): blind, mostly useless for a B-tree whose neighbours lie
/// far apart, and it competes with the policy's reads for the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReadAround {
    /// The adapter takes over readahead for the map: `madvise(MADV_RANDOM)`
    /// once at setup (as `MDB_NORDAHEAD` would), so that faults read only
    /// their page and the policy's prefetch does the rest. The advice stays
    /// on the map for the environment's life.
    #[default]
    Replace,
    /// Leave the map's read-around as the environment has it.
    Keep,
}

/// What one scan saw and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScanStats {
    /// Rows observed.
    pub rows: u64,
    /// Leaf pages entered (a change of leaf between consecutive rows).
    pub leaves: u64,
    /// Descents from the root (a leaf that was not a child of a branch page
    /// the scan already knew).
    pub descents: u64,
    /// Branch pages read from the map.
    pub branch_pages: u64,
    /// `TreeChildEnter` events dispatched.
    pub events: u64,
    /// Rows whose key was not in a leaf of the map's snapshot (a dirty page
    /// of a write transaction, a page that failed its checks): not followed.
    pub passed_over: u64,
}

/// The adapter for one LMDB environment: its data file, its map and an
/// embedded runtime with the `btree` policy.
pub struct LmdbPrefetcher {
    runtime: Arc<Embedded>,
    file: FileRef,
    map: Map,
    layout: DbPageLayout,
    /// A clone of the environment: keeps the map alive while this exists.
    _env: Box<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for LmdbPrefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LmdbPrefetcher").field("file", &self.file.id()).field("map", &self.map).finish()
    }
}

impl LmdbPrefetcher {
    /// The adapter for `env` with a runtime of its own: the `btree` policy
    /// with its defaults and an executor with [`ExecutorConfig::embedded`]
    /// (the `fadvise` backend).
    pub fn new<T: 'static>(env: &Env<T>) -> Result<Self, Error>
    where
        Env<T>: Send + Sync,
    {
        let runtime = Embedded::new(ExecutorConfig::embedded(), vec![Box::new(BtreePolicy::default())])?;
        Self::with_runtime(env, Arc::new(runtime), ReadAround::Replace)
    }

    /// An embedded runtime with the `btree` policy over LMDB's 4 KiB pages
    /// and an executor configured as `config` (to share among several
    /// environments, or to tune the executor).
    pub fn runtime(config: ExecutorConfig, policy: BtreeConfig) -> Result<Arc<Embedded>, Error> {
        Ok(Arc::new(Embedded::new(config, vec![Box::new(BtreePolicy::new(policy))])?))
    }

    /// The adapter for `env`, feeding `runtime` (which should run a `btree`
    /// policy), doing `read_around` to the map. The environment must not be
    /// resized (`Env::resize`) while the adapter exists: make a new one after.
    pub fn with_runtime<T: 'static>(
        env: &Env<T>,
        runtime: Arc<Embedded>,
        read_around: ReadAround,
    ) -> Result<Self, Error>
    where
        Env<T>: Send + Sync,
    {
        let flags = env.get_flags()?;
        let path = if flags & MDB_NOSUBDIR != 0 { env.path().to_path_buf() } else { env.path().join("data.mdb") };
        let file = FileRef::open(&path)?;
        let map =
            Map::find(file.id().dev, file.id().ino).map_err(Error::Maps)?.ok_or_else(|| Error::NoMap(path.clone()))?;
        let mut page = [0u8; LMDB_PAGE];
        if !map.copy_page(0, 2, &mut page) {
            return Err(Error::Meta(PageError::Length { expected: LMDB_PAGE, actual: 0 }));
        }
        let meta = Meta::parse(&page).map_err(Error::Meta)?;
        if meta.page_size as usize != LMDB_PAGE {
            return Err(Error::PageSize(meta.page_size));
        }
        let layout = meta.layout().map_err(Error::Meta)?;
        if read_around == ReadAround::Replace {
            map.advise_random().map_err(Error::Madvise)?;
        }
        let prefetcher = Self { runtime, file, map, layout, _env: Box::new(env.clone()) };
        prefetcher.runtime.hold(prefetcher.file.clone());
        Ok(prefetcher)
    }

    /// The embedded runtime (its executor's counters, `wait_idle`).
    pub fn embedded(&self) -> &Arc<Embedded> {
        &self.runtime
    }

    /// The data file, as held for prefetching.
    pub fn file(&self) -> &FileRef {
        &self.file
    }

    /// The page of the data file that an address LMDB returned (a key or
    /// a value, which point into its map) falls in, if it is in the map.
    pub fn page_of(&self, addr: *const u8) -> Option<u64> {
        self.map.page_of(addr as usize)
    }

    /// An observer for one scan in `txn`: feed it every key the scan
    /// returns ([`ScanObserver::on_row`]). [`LmdbPrefetcher::range`] does
    /// this for you.
    pub fn observer<T>(&self, txn: &RoTxn<'_, T>) -> ScanObserver<'_> {
        ScanObserver::new(self, txn.id() as u64)
    }

    /// `db.range(txn, range)`, observed: the rows are LMDB's, unchanged;
    /// the leaves after them are prefetched while the scan goes on.
    pub fn range<'txn, 'p, R>(
        &'p self,
        db: &Database<Bytes, Bytes>,
        txn: &'txn RoTxn<'_>,
        range: &R,
    ) -> heed::Result<Scan<'txn, 'p>>
    where
        R: RangeBounds<[u8]>,
    {
        let inner = db.range(txn, range)?;
        Ok(Scan { inner, observer: self.observer(txn) })
    }

    /// The rows from `start` on (the first key at or after it), observed:
    /// `range` with `(Included(start), Unbounded)`. LMDB refuses an empty
    /// key (`MDB_BAD_VALSIZE`); to scan from the first row use `range` with
    /// `(Unbounded, Unbounded)`.
    pub fn scan_from<'txn, 'p>(
        &'p self,
        db: &Database<Bytes, Bytes>,
        txn: &'txn RoTxn<'_>,
        start: &[u8],
    ) -> heed::Result<Scan<'txn, 'p>> {
        self.range(db, txn, &(std::ops::Bound::Included(start), std::ops::Bound::Unbounded))
    }

    /// `db.get(txn, key)`, observed (a point lookup asks for nothing; it
    /// lets the policy tell lookups from scans).
    pub fn get<'txn>(
        &self,
        db: &Database<Bytes, Bytes>,
        txn: &'txn RoTxn<'_>,
        key: &[u8],
    ) -> heed::Result<Option<&'txn [u8]>> {
        let mut scan = self.range(db, txn, &(std::ops::Bound::Included(key), std::ops::Bound::Included(key)))?;
        Ok(scan.next().transpose()?.map(|(_, value)| value))
    }

    /// Meta page 0 or 1, parsed; `None` if it cannot be read.
    fn meta(&self, index: u64) -> Option<Result<Meta, PageError>> {
        let mut page = [0u8; LMDB_PAGE];
        self.map.copy_page(index, 2, &mut page).then(|| Meta::parse(&page))
    }

    fn file_pages(&self) -> u64 {
        self.file.file().metadata().map(|m| m.len() / LMDB_PAGE as u64).unwrap_or(0)
    }
}

/// Follows one scan: turns its steps from leaf to leaf into
/// `TreeChildEnter` events for the embedded runtime.
#[derive(Debug)]
pub struct ScanObserver<'p> {
    prefetcher: &'p LmdbPrefetcher,
    txn_id: u64,
    traversal: Traversal,
    leaf: Option<u64>,
    /// The root that led to the scan's leaves, once found.
    root: Option<(u64, Geometry)>,
    file_pages: u64,
    /// The first row's key, while the scan has not left its first leaf:
    /// the descent to that leaf is made only once the scan reaches a second
    /// leaf, so a point lookup or a scan inside one leaf costs no descent.
    first_key: Vec<u8>,
    /// Scratch page: a branch page copied out of the map.
    page: Option<Box<[u8; LMDB_PAGE]>>,
    stats: ScanStats,
}

impl<'p> ScanObserver<'p> {
    fn new(prefetcher: &'p LmdbPrefetcher, txn_id: u64) -> Self {
        Self {
            prefetcher,
            txn_id,
            traversal: Traversal::new(prefetcher.file.id(), prefetcher.layout, TRAVERSAL_CAPACITY),
            leaf: None,
            root: None,
            file_pages: 0,
            first_key: Vec::new(),
            page: None,
            stats: ScanStats::default(),
        }
    }

    /// What this scan saw and did.
    pub fn stats(&self) -> ScanStats {
        self.stats
    }

    /// Reports that the scan returned a row with this key (a slice LMDB
    /// returned: it points into the map). Cheap while the row is in the same
    /// leaf as the last one; the first leaf's descent waits until the scan
    /// reaches a second leaf.
    pub fn on_row(&mut self, key: &[u8]) {
        self.stats.rows += 1;
        let Some(leaf) = self.prefetcher.map.page_of(key.as_ptr() as usize) else {
            self.stats.passed_over += 1;
            return;
        };
        if self.leaf == Some(leaf) {
            return;
        }
        let previous = self.leaf.replace(leaf);
        self.stats.leaves += 1;
        let executor = self.prefetcher.runtime.executor();
        executor.note_access(self.prefetcher.file.id(), PageRange::new(leaf, leaf + 1));
        match previous {
            None => {
                // First leaf: remember where the scan started, nothing more.
                self.first_key.clear();
                self.first_key.extend_from_slice(key);
                return;
            }
            Some(first) if self.stats.leaves == 2 => {
                // A second leaf: this is a scan. Replay the descent to the
                // first leaf so that the policy sees the step between them.
                let first_key = std::mem::take(&mut self.first_key);
                if !self.descend(&first_key, first) {
                    self.stats.passed_over += 1;
                }
            }
            Some(_) => {}
        }
        if let Some(event) = self.traversal.on_read(leaf, None) {
            self.dispatch(&event);
            return;
        }
        if !self.descend(key, leaf) {
            self.stats.passed_over += 1;
        }
    }

    fn dispatch(&mut self, event: &predictio::Event) {
        self.stats.events += 1;
        self.prefetcher.runtime.dispatch(event);
    }

    /// Descends from the root to `leaf` by `key`, feeding the path to the
    /// traversal. The root is this transaction's: the meta page written by
    /// it, else the newer one; a path that does not end at `leaf` is
    /// dropped (another snapshot) and the other meta page tried.
    fn descend(&mut self, key: &[u8], leaf: u64) -> bool {
        if self.file_pages <= leaf {
            self.file_pages = self.prefetcher.file_pages();
        }
        let mut roots: Vec<(u64, Geometry)> = self.root.into_iter().collect();
        if roots.is_empty() {
            let mut metas: Vec<Meta> = (0..2).filter_map(|i| self.prefetcher.meta(i)?.ok()).collect();
            metas.sort_by_key(|m| (m.txnid != self.txn_id, std::cmp::Reverse(m.txnid)));
            roots = metas
                .iter()
                .filter(|m| m.main_flags & UNSUPPORTED_DB_FLAGS == 0)
                .filter_map(|m| Some((m.main_root?, m.geometry())))
                .collect();
        }
        for (root, geometry) in roots {
            let mut path = Vec::new();
            let mut page_no = root;
            let mut reached = false;
            let page = self.page.get_or_insert_with(|| Box::new([0u8; LMDB_PAGE]));
            for _ in 0..MAX_DEPTH {
                if !self.prefetcher.map.copy_page(page_no, self.file_pages, page) {
                    break;
                }
                self.stats.branch_pages += 1;
                match lmdb::search_branch(&page[..], page_no, &geometry, key) {
                    Ok((interior, position)) => {
                        let Some(&child) = interior.children.get(position as usize) else { break };
                        path.push((page_no, interior));
                        page_no = child;
                    }
                    Err(PageError::Leaf) => {
                        // The leaf was counted as a branch read; it was not one.
                        self.stats.branch_pages -= 1;
                        reached = page_no == leaf;
                        break;
                    }
                    Err(_) => break,
                }
            }
            if !reached {
                continue;
            }
            self.root = Some((root, geometry));
            self.stats.descents += 1;
            let executor = self.prefetcher.runtime.executor().clone();
            for (page_no, interior) in path {
                executor.note_access(self.prefetcher.file.id(), PageRange::new(page_no, page_no + 1));
                if let Some(event) = self.traversal.on_read(page_no, Some(interior)) {
                    self.dispatch(&event);
                }
            }
            if let Some(event) = self.traversal.on_read(leaf, None) {
                self.dispatch(&event);
            }
            return true;
        }
        false
    }
}

/// A range scan over an LMDB database that prefetches ahead of itself:
/// an iterator over heed's [`RoRange`], rows unchanged.
pub struct Scan<'txn, 'p> {
    inner: RoRange<'txn, Bytes, Bytes>,
    observer: ScanObserver<'p>,
}

impl std::fmt::Debug for Scan<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan").field("observer", &self.observer).finish()
    }
}

impl Scan<'_, '_> {
    /// What the scan saw and did so far.
    pub fn stats(&self) -> ScanStats {
        self.observer.stats()
    }
}

impl<'txn> Iterator for Scan<'txn, '_> {
    type Item = heed::Result<(&'txn [u8], &'txn [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        let row = self.inner.next()?;
        if let Ok((key, _)) = &row {
            self.observer.on_row(key);
        }
        Some(row)
    }
}
