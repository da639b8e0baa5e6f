//! A safe, small face of RocksDB's C API: open a database with or without
//! RocksDB's own iterator readahead, load it, compact it, point reads,
//! iterators, SST file metadata and key-to-offset estimates.
//!
//! Every `unsafe` block of the crate is here, each with its `SAFETY` line:
//! pointers handed to RocksDB live for the call (or, for iterator bounds,
//! as long as the iterator, which owns them), and every object RocksDB
//! allocates is destroyed once, by the `Drop` of the type that owns it.

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr;

use libc::{c_char, c_int, size_t};

use crate::RocksError;
use crate::ffi;

/// RocksDB's readahead while iterating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readahead {
    /// RocksDB's defaults: after two sequential block reads of a table
    /// file, an implicit readahead from 8 KiB doubling to 256 KiB
    /// (`BlockBasedTableOptions::max_auto_readahead_size`).
    RocksDb,
    /// None: `max_auto_readahead_size=0` turns the implicit readahead off,
    /// `ReadOptions::readahead_size` stays 0, and files are opened with
    /// `advise_random_on_open` (RocksDB's default), so the kernel reads ahead
    /// nothing either. Each block read is one `pread` of that block.
    Off,
}

/// How a database is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbOptions {
    /// Iterator readahead.
    pub readahead: Readahead,
    /// RocksDB's block cache, bytes (small: the page cache is what is
    /// measured).
    pub block_cache_bytes: u64,
    /// Data block size, bytes.
    pub block_size: u64,
    /// Target SST file size, bytes.
    pub target_file_bytes: u64,
    /// Memtable size, bytes (each flush writes a file of about this size).
    pub write_buffer_bytes: u64,
}

impl Default for DbOptions {
    /// RocksDB's readahead, an 8 MiB block cache, 4 KiB blocks, 64 MiB
    /// files and memtables.
    fn default() -> Self {
        Self {
            readahead: Readahead::RocksDb,
            block_cache_bytes: 8 << 20,
            block_size: 4096,
            target_file_bytes: 64 << 20,
            write_buffer_bytes: 64 << 20,
        }
    }
}

impl DbOptions {
    /// The options string RocksDB parses (`GetOptionsFromString`).
    pub fn to_options_string(&self) -> String {
        let mut table = format!("block_size={};block_cache={}", self.block_size, self.block_cache_bytes);
        if self.readahead == Readahead::Off {
            table.push_str(";max_auto_readahead_size=0");
        }
        format!(
            "create_if_missing=true;compression=kNoCompression;max_open_files=-1;advise_random_on_open=true;\
             write_buffer_size={};target_file_size_base={};max_bytes_for_level_base={};\
             block_based_table_factory={{{table}}}",
            self.write_buffer_bytes,
            self.target_file_bytes,
            self.target_file_bytes * 4,
        )
    }
}

/// Takes an error string RocksDB allocated, if any.
fn check(err: *mut c_char, what: &'static str) -> Result<(), RocksError> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: RocksDB set `err` to a NUL-terminated string it malloc'ed; we
    // copy it and free it once.
    let message = unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned();
    // SAFETY: as above; `err` is not used after this.
    unsafe { ffi::rocksdb_free(err.cast()) };
    Err(RocksError::Rocks { what, message })
}

/// An open database.
pub struct Db {
    raw: *mut ffi::rocksdb_t,
    path: PathBuf,
    options: DbOptions,
}

// SAFETY: a rocksdb_t is safe to use from several threads at once (RocksDB's
// DB is thread-safe); `Db` hands out no interior pointer that outlives it.
unsafe impl Send for Db {}
// SAFETY: as above.
unsafe impl Sync for Db {}

impl std::fmt::Debug for Db {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Db").field("path", &self.path).field("options", &self.options).finish()
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rocksdb_open and is closed once; iterators
        // borrow the Db, so none is alive here.
        unsafe { ffi::rocksdb_close(self.raw) };
    }
}

impl Db {
    /// Opens (creating if missing) the database in `path`.
    pub fn open(path: &Path, options: &DbOptions) -> Result<Self, RocksError> {
        let name = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| RocksError::Path(path.into()))?;
        let text = CString::new(options.to_options_string()).map_err(|_| RocksError::Path(path.into()))?;
        // SAFETY: plain constructors; each result is destroyed below.
        let (base, opts) = unsafe { (ffi::rocksdb_options_create(), ffi::rocksdb_options_create()) };
        let mut err = ptr::null_mut();
        // SAFETY: `base` and `opts` are live options objects, `text` a
        // NUL-terminated string, `err` a valid out-pointer.
        unsafe { ffi::rocksdb_get_options_from_string(base, text.as_ptr(), opts, &mut err) };
        let parsed = check(err, "parsing options");
        let raw = parsed.and_then(|()| {
            let mut err = ptr::null_mut();
            // SAFETY: `opts` is live, `name` NUL-terminated, `err` valid.
            let raw = unsafe { ffi::rocksdb_open(opts, name.as_ptr(), &mut err) };
            check(err, "opening the database").map(|()| raw)
        });
        // SAFETY: RocksDB copies options on open; both are destroyed once.
        unsafe {
            ffi::rocksdb_options_destroy(base);
            ffi::rocksdb_options_destroy(opts);
        }
        let raw = raw?;
        if raw.is_null() {
            return Err(RocksError::Rocks { what: "opening the database", message: "null handle".into() });
        }
        Ok(Self { raw, path: path.to_owned(), options: options.clone() })
    }

    /// The database directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &DbOptions {
        &self.options
    }

    /// Writes `pairs` in one batch, without the write-ahead log (a bulk
    /// load; [`Self::flush`] makes it durable).
    pub fn put_batch<'a>(&self, pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>) -> Result<(), RocksError> {
        // SAFETY: constructors; destroyed below.
        let (batch, wo) = unsafe { (ffi::rocksdb_writebatch_create(), ffi::rocksdb_writeoptions_create()) };
        for (k, v) in pairs {
            // SAFETY: `batch` is live; RocksDB copies the key and value.
            unsafe { ffi::rocksdb_writebatch_put(batch, k.as_ptr().cast(), k.len(), v.as_ptr().cast(), v.len()) };
        }
        let mut err = ptr::null_mut();
        // SAFETY: all pointers are live for the call.
        unsafe {
            ffi::rocksdb_writeoptions_disable_WAL(wo, 1);
            ffi::rocksdb_write(self.raw, wo, batch, &mut err);
            ffi::rocksdb_writebatch_clear(batch);
            ffi::rocksdb_writebatch_destroy(batch);
            ffi::rocksdb_writeoptions_destroy(wo);
        }
        check(err, "writing a batch")
    }

    /// Flushes the memtable to SST files and waits.
    pub fn flush(&self) -> Result<(), RocksError> {
        // SAFETY: constructor; destroyed below.
        let fo = unsafe { ffi::rocksdb_flushoptions_create() };
        let mut err = ptr::null_mut();
        // SAFETY: live pointers for the call.
        unsafe {
            ffi::rocksdb_flushoptions_set_wait(fo, 1);
            ffi::rocksdb_flush(self.raw, fo, &mut err);
            ffi::rocksdb_flushoptions_destroy(fo);
        }
        check(err, "flushing")
    }

    /// Compacts the whole key space (after a load: one sorted run, so each
    /// key range lives in one level).
    pub fn compact_all(&self) {
        // SAFETY: null start and limit mean the whole key space.
        unsafe { ffi::rocksdb_compact_range(self.raw, ptr::null(), 0, ptr::null(), 0) };
    }

    /// A point read.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, RocksError> {
        // SAFETY: constructor; destroyed below.
        let ro = unsafe { ffi::rocksdb_readoptions_create() };
        let mut len: size_t = 0;
        let mut err = ptr::null_mut();
        // SAFETY: live pointers for the call.
        let value = unsafe { ffi::rocksdb_get(self.raw, ro, key.as_ptr().cast(), key.len(), &mut len, &mut err) };
        // SAFETY: destroyed once.
        unsafe { ffi::rocksdb_readoptions_destroy(ro) };
        check(err, "get")?;
        if value.is_null() {
            return Ok(None);
        }
        // SAFETY: RocksDB returned a malloc'ed array of `len` bytes; copied,
        // then freed once.
        let out = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec();
        // SAFETY: as above.
        unsafe { ffi::rocksdb_free(value.cast()) };
        Ok(Some(out))
    }

    /// A raw iterator (RocksDB's readahead as the database was opened),
    /// bounded to `[lower, upper)` where given.
    pub fn iter(&self, lower: Option<&[u8]>, upper: Option<&[u8]>) -> DbIter<'_> {
        let lower = lower.map(<[u8]>::to_vec).map(Vec::into_boxed_slice);
        let upper = upper.map(<[u8]>::to_vec).map(Vec::into_boxed_slice);
        // SAFETY: constructor; destroyed by DbIter's Drop after the iterator.
        let ro = unsafe { ffi::rocksdb_readoptions_create() };
        // SAFETY: `ro` is live; the bounds' bytes are owned by the DbIter
        // (boxed, never moved or freed before the iterator is destroyed),
        // as RocksDB keeps pointers to them.
        unsafe {
            ffi::rocksdb_readoptions_set_readahead_size(ro, 0);
            if let Some(l) = &lower {
                ffi::rocksdb_readoptions_set_iterate_lower_bound(ro, l.as_ptr().cast(), l.len());
            }
            if let Some(u) = &upper {
                ffi::rocksdb_readoptions_set_iterate_upper_bound(ro, u.as_ptr().cast(), u.len());
            }
        }
        // SAFETY: `self.raw` and `ro` are live; the iterator is destroyed
        // before `ro` and before the Db (it borrows it).
        let raw = unsafe { ffi::rocksdb_create_iterator(self.raw, ro) };
        DbIter { raw, ro, _lower: lower, _upper: upper, _db: std::marker::PhantomData }
    }

    /// A database property (`rocksdb.stats`, …), if RocksDB knows it.
    pub fn property(&self, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        // SAFETY: live db, NUL-terminated name; the result is malloc'ed or
        // null.
        let value = unsafe { ffi::rocksdb_property_value(self.raw, name.as_ptr()) };
        if value.is_null() {
            return None;
        }
        // SAFETY: a NUL-terminated string RocksDB allocated; copied, then
        // freed once.
        let out = unsafe { CStr::from_ptr(value) }.to_string_lossy().into_owned();
        // SAFETY: as above.
        unsafe { ffi::rocksdb_free(value.cast()) };
        Some(out)
    }

    /// The live SST files, with their key ranges.
    pub fn live_files(&self) -> Vec<SstFile> {
        // SAFETY: returns an object destroyed below.
        let lf = unsafe { ffi::rocksdb_livefiles(self.raw) };
        if lf.is_null() {
            return Vec::new();
        }
        // SAFETY: `lf` is live.
        let count = unsafe { ffi::rocksdb_livefiles_count(lf) };
        let mut out = Vec::with_capacity(count.max(0) as usize);
        for i in 0..count {
            let (mut slen, mut llen) = (0, 0);
            // SAFETY: `i` < count; the returned pointers stay valid until
            // `lf` is destroyed and are copied here.
            let file = unsafe {
                let name = CStr::from_ptr(ffi::rocksdb_livefiles_name(lf, i)).to_string_lossy().into_owned();
                let s = ffi::rocksdb_livefiles_smallestkey(lf, i, &mut slen);
                let l = ffi::rocksdb_livefiles_largestkey(lf, i, &mut llen);
                SstFile {
                    path: self.path.join(name.trim_start_matches('/')),
                    level: ffi::rocksdb_livefiles_level(lf, i),
                    size: ffi::rocksdb_livefiles_size(lf, i) as u64,
                    smallest: std::slice::from_raw_parts(s.cast::<u8>(), slen).to_vec(),
                    largest: std::slice::from_raw_parts(l.cast::<u8>(), llen).to_vec(),
                }
            };
            out.push(file);
        }
        // SAFETY: destroyed once.
        unsafe { ffi::rocksdb_livefiles_destroy(lf) };
        out
    }

    /// RocksDB's estimate of the bytes on disk of each key range
    /// `[start, limit)`, from the table files' indexes (no data read).
    pub fn approximate_sizes(&self, ranges: &[(&[u8], &[u8])]) -> Result<Vec<u64>, RocksError> {
        let starts: Vec<*const c_char> = ranges.iter().map(|r| r.0.as_ptr().cast()).collect();
        let start_lens: Vec<size_t> = ranges.iter().map(|r| r.0.len()).collect();
        let limits: Vec<*const c_char> = ranges.iter().map(|r| r.1.as_ptr().cast()).collect();
        let limit_lens: Vec<size_t> = ranges.iter().map(|r| r.1.len()).collect();
        let mut sizes = vec![0u64; ranges.len()];
        let n = c_int::try_from(ranges.len()).map_err(|_| RocksError::TooMany(ranges.len()))?;
        let mut err = ptr::null_mut();
        // SAFETY: the arrays hold `n` entries each and live for the call.
        unsafe {
            ffi::rocksdb_approximate_sizes(
                self.raw,
                n,
                starts.as_ptr(),
                start_lens.as_ptr(),
                limits.as_ptr(),
                limit_lens.as_ptr(),
                sizes.as_mut_ptr(),
                &mut err,
            )
        };
        check(err, "approximate sizes")?;
        Ok(sizes)
    }
}

/// A live SST file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SstFile {
    /// Its path.
    pub path: PathBuf,
    /// Its LSM level.
    pub level: i32,
    /// Its size, bytes.
    pub size: u64,
    /// Its smallest user key.
    pub smallest: Vec<u8>,
    /// Its largest user key.
    pub largest: Vec<u8>,
}

/// A RocksDB iterator. Borrowing the [`Db`] keeps it open while the
/// iterator lives.
pub struct DbIter<'db> {
    raw: *mut ffi::rocksdb_iterator_t,
    ro: *mut ffi::rocksdb_readoptions_t,
    _lower: Option<Box<[u8]>>,
    _upper: Option<Box<[u8]>>,
    _db: std::marker::PhantomData<&'db Db>,
}

impl Drop for DbIter<'_> {
    fn drop(&mut self) {
        // SAFETY: iterator first, then its read options (which point at the
        // bounds this struct still owns); each destroyed once.
        unsafe {
            ffi::rocksdb_iter_destroy(self.raw);
            ffi::rocksdb_readoptions_destroy(self.ro);
        }
    }
}

impl DbIter<'_> {
    /// Positions at the first key `>= key`.
    pub fn seek(&mut self, key: &[u8]) {
        // SAFETY: live iterator; RocksDB copies what it needs of `key`.
        unsafe { ffi::rocksdb_iter_seek(self.raw, key.as_ptr().cast(), key.len()) }
    }

    /// Positions at the last key `<= key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) {
        // SAFETY: as for seek.
        unsafe { ffi::rocksdb_iter_seek_for_prev(self.raw, key.as_ptr().cast(), key.len()) }
    }

    /// Positions at the first key.
    pub fn seek_to_first(&mut self) {
        // SAFETY: live iterator.
        unsafe { ffi::rocksdb_iter_seek_to_first(self.raw) }
    }

    /// Whether the iterator is at an entry.
    pub fn valid(&self) -> bool {
        // SAFETY: live iterator.
        unsafe { ffi::rocksdb_iter_valid(self.raw) != 0 }
    }

    /// Moves to the next entry (only while [`Self::valid`]).
    pub fn next(&mut self) {
        if self.valid() {
            // SAFETY: live, valid iterator.
            unsafe { ffi::rocksdb_iter_next(self.raw) }
        }
    }

    /// Moves to the previous entry (only while [`Self::valid`]).
    pub fn prev(&mut self) {
        if self.valid() {
            // SAFETY: live, valid iterator.
            unsafe { ffi::rocksdb_iter_prev(self.raw) }
        }
    }

    /// The current key (empty when not valid).
    pub fn key(&self) -> &[u8] {
        if !self.valid() {
            return &[];
        }
        let mut len = 0;
        // SAFETY: valid iterator; the bytes stay valid until it moves, which
        // needs `&mut self` while this borrow lives.
        unsafe {
            let p = ffi::rocksdb_iter_key(self.raw, &mut len);
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }

    /// The current value (empty when not valid).
    pub fn value(&self) -> &[u8] {
        if !self.valid() {
            return &[];
        }
        let mut len = 0;
        // SAFETY: as for key.
        unsafe {
            let p = ffi::rocksdb_iter_value(self.raw, &mut len);
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }

    /// The error that stopped the iterator, if any.
    pub fn status(&self) -> Result<(), RocksError> {
        let mut err = ptr::null_mut();
        // SAFETY: live iterator, valid out-pointer.
        unsafe { ffi::rocksdb_iter_get_error(self.raw, &mut err) };
        check(err, "iterating")
    }
}
