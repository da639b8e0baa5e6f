//! The FFI edge: the VFS shim and the extension's entry points. The only
//! module with `unsafe`.
//!
//! The shim's `sqlite3_file` is ours followed by the real VFS's:
//!
//! ```text
//! ┌ ShimFile ─────────────────────────────────────────────────┬ real file (szOsFile of the real VFS) ┐
//! │ pMethods (ours) │ observer (Box) │ wal_of │ checkpointing │ pMethods (real) │ …                  │
//! └───────────────────────────────────────────────────────────┴──────────────────────────────────────┘
//! ```
//!
//! Every method forwards to the real file; `xRead` then, for main database
//! files only and only on `SQLITE_OK`, shows the bytes the real VFS returned
//! to the [`DbObserver`] (reads shorter than a page past the header are not
//! pages and pass through untimed). A page SQLite reads from a main
//! database's WAL is shown to that database's observer as the page it
//! holds (its number read from the frame header, an extra 4-byte read of
//! ours before SQLite's): the pages a writer changed since the last
//! checkpoint, often the upper levels of the trees, are read from the WAL,
//! and without them the observer would miss every descent through them.
//! The WAL reads of a checkpoint (it holds the checkpoint lock) are not
//! lookups and pass through, as do journals and temp files. A page SQLite
//! maps (`xFetch`) is shown as a read is. Loading
//! registers the VFS and the SQL function and does nothing else: no thread,
//! no file, no runtime; each main database's observer starts the process's
//! runtime at its first read from the device ([`DbObserver::lazy`]). Every
//! `extern "C"` body runs inside `catch_unwind`; a panic while observing is
//! swallowed and never changes what SQLite gets.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use libsqlite3_sys::{
    SQLITE_CANTOPEN, SQLITE_ERROR, SQLITE_IOERR, SQLITE_OK, SQLITE_OK_LOAD_PERMANENTLY, SQLITE_OPEN_MAIN_DB,
    SQLITE_OPEN_WAL, SQLITE_SHM_EXCLUSIVE, SQLITE_SHM_LOCK, SQLITE_SHM_UNLOCK, SQLITE_UTF8, sqlite3,
    sqlite3_api_routines, sqlite3_context, sqlite3_file, sqlite3_int64, sqlite3_io_methods, sqlite3_syscall_ptr,
    sqlite3_value, sqlite3_vfs,
};

use crate::observer::{DbObserver, Prefetcher, SharedObserver};

/// The name the shim is registered under.
pub const VFS_NAME: &CStr = c"predictio";

/// The routines table SQLite handed us at load time.
static API: AtomicPtr<sqlite3_api_routines> = AtomicPtr::new(ptr::null_mut());

/// Our registered VFS (leaked, lives as long as the process), as an address.
static VFS: OnceLock<usize> = OnceLock::new();

/// Runs `f`, turning a panic into `fallback`.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

#[repr(C)]
struct ShimFile {
    base: sqlite3_file,
    /// `Box::into_raw` of the observer; null for files not observed.
    observer: *mut SharedObserver,
    /// For the WAL file of a main database opened through the shim: that
    /// database's file, which SQLite closes after its WAL; else null.
    wal_of: *const ShimFile,
    /// For a main database: whether its connection holds the WAL's
    /// checkpoint lock (set by `xShmLock`; only that connection reads its
    /// WAL through this file's `wal_of`).
    checkpointing: AtomicBool,
}

/// Bytes before the real file: `ShimFile` rounded up to 16, so the real file
/// is as aligned as SQLite's own allocation.
const SHIM_SIZE: usize = std::mem::size_of::<ShimFile>().next_multiple_of(16);

/// The real file following ours.
///
/// # Safety
///
/// `file` must point to an allocation of at least `SHIM_SIZE` plus the real
/// VFS's `szOsFile` bytes, as SQLite allocates it for our `szOsFile`.
unsafe fn real_file(file: *mut sqlite3_file) -> *mut sqlite3_file {
    // SAFETY: in bounds of the allocation the caller vouches for.
    unsafe { file.cast::<u8>().add(SHIM_SIZE).cast() }
}

/// The real VFS behind our VFS.
///
/// # Safety
///
/// `vfs` must be our registered VFS.
unsafe fn real_vfs(vfs: *mut sqlite3_vfs) -> *mut sqlite3_vfs {
    // SAFETY: our VFS's pAppData is the real VFS, set at registration.
    unsafe { (*vfs).pAppData.cast() }
}

/// Forwards one io method to the real file's; `SQLITE_IOERR` (or the given
/// fallback) when the real file lacks it.
macro_rules! forward_io {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $name(file: *mut sqlite3_file $(, $arg: $ty)*) -> $ret {
            guard($fallback, || {
                // SAFETY: SQLite calls us with a file opened by `shim_open`,
                // whose real file's methods are set (else ours would not be).
                unsafe {
                    let real = real_file(file);
                    match (*(*real).pMethods).$field {
                        Some(method) => method(real $(, $arg)*),
                        None => $fallback,
                    }
                }
            })
        }
    };
}

forward_io!(io_write, xWrite, (buf: *const c_void, amt: c_int, offset: sqlite3_int64) -> c_int, SQLITE_IOERR);
forward_io!(io_truncate, xTruncate, (size: sqlite3_int64) -> c_int, SQLITE_IOERR);
forward_io!(io_sync, xSync, (flags: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_file_size, xFileSize, (size: *mut sqlite3_int64) -> c_int, SQLITE_IOERR);
forward_io!(io_lock, xLock, (level: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_unlock, xUnlock, (level: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_check_reserved_lock, xCheckReservedLock, (out: *mut c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_file_control, xFileControl, (op: c_int, arg: *mut c_void) -> c_int, libsqlite3_sys::SQLITE_NOTFOUND);
forward_io!(io_sector_size, xSectorSize, () -> c_int, 4096);
forward_io!(io_device_characteristics, xDeviceCharacteristics, () -> c_int, 0);
forward_io!(io_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int, SQLITE_IOERR);
forward_io!(io_shm_barrier, xShmBarrier, () -> (), ());
forward_io!(io_shm_unmap, xShmUnmap, (delete: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_unfetch, xUnfetch, (offset: sqlite3_int64, p: *mut c_void) -> c_int, SQLITE_IOERR);

/// The WAL-index lock a checkpoint holds exclusively (`WAL_CKPT_LOCK`).
const WAL_CKPT_LOCK: c_int = 1;

unsafe extern "C" fn io_shm_lock(file: *mut sqlite3_file, offset: c_int, n: c_int, flags: c_int) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: a file opened by `shim_open` whose real methods are set.
        let rc = unsafe {
            let real = real_file(file);
            match (*(*real).pMethods).xShmLock {
                Some(lock) => lock(real, offset, n, flags),
                None => return SQLITE_IOERR,
            }
        };
        // A checkpoint (or a recovery) holds the checkpoint lock
        // exclusively while it copies WAL frames to the database: its WAL
        // reads are not lookups.
        if (offset..offset.saturating_add(n)).contains(&WAL_CKPT_LOCK) && flags & SQLITE_SHM_EXCLUSIVE != 0 {
            // SAFETY: our part of the file.
            let checkpointing = unsafe { &(*file.cast::<ShimFile>()).checkpointing };
            if flags & SQLITE_SHM_UNLOCK != 0 {
                checkpointing.store(false, Ordering::Relaxed);
            } else if flags & SQLITE_SHM_LOCK != 0 && rc == SQLITE_OK {
                checkpointing.store(true, Ordering::Relaxed);
            }
        }
        rc
    })
}

unsafe extern "C" fn io_close(file: *mut sqlite3_file) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: a file opened by `shim_open` with our methods set; the
        // observer pointer is ours (Box::into_raw) or null and is taken once.
        unsafe {
            let shim = file.cast::<ShimFile>();
            let real = real_file(file);
            let rc = match (*(*real).pMethods).xClose {
                Some(close) => close(real),
                None => SQLITE_OK,
            };
            (*shim).wal_of = ptr::null();
            let observer = std::mem::replace(&mut (*shim).observer, ptr::null_mut());
            if !observer.is_null() {
                drop(Box::from_raw(observer));
            }
            rc
        }
    })
}

/// The smallest SQLite page: shorter reads past the header (the change
/// counter SQLite checks at every transaction) are not pages and are passed
/// through unobserved and untimed.
const MIN_PAGE: c_int = 512;

/// Bytes of a WAL file's header, and of each frame's header before the
/// page it holds.
const WAL_HEADER: sqlite3_int64 = 32;
const WAL_FRAME_HEADER: sqlite3_int64 = 24;

unsafe extern "C" fn io_read(file: *mut sqlite3_file, buf: *mut c_void, amt: c_int, offset: sqlite3_int64) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: our part of a file opened by `shim_open`.
        let shim = unsafe { &*file.cast::<ShimFile>() };
        // SAFETY: a file opened by `shim_open`; the real read gets exactly
        // SQLite's arguments.
        let read = || unsafe { real_read(file, buf, amt, offset) };
        // SAFETY: the observer is ours or null and lives until `io_close`;
        // a WAL's database file is open as long as the WAL is.
        let (observer, db_offset) = match unsafe { (shim.observer.as_ref(), shim.wal_of.as_ref()) } {
            (Some(observer), _) if amt > 0 && (offset == 0 || (offset > 0 && amt >= MIN_PAGE)) => (observer, offset),
            (None, Some(db)) if !db.checkpointing.load(Ordering::Relaxed) => {
                // SAFETY: the database's observer, as above.
                let observer = unsafe { db.observer.as_ref() };
                // SAFETY: a file opened by `shim_open`.
                match observer.zip(unsafe { wal_page_offset(file, amt, offset) }) {
                    Some(found) => found,
                    None => return read(),
                }
            }
            _ => return read(),
        };
        // The descent is known from the offset alone: report it before the
        // read, so that prefetches overlap this read's own I/O.
        guard((), || observer.before_read(db_offset as u64, amt as usize));
        let start = std::time::Instant::now();
        let rc = read();
        if rc == SQLITE_OK {
            let elapsed = start.elapsed();
            // SAFETY: on SQLITE_OK the real VFS filled all `amt` (> 0) bytes
            // of `buf`, which we only read, before SQLite sees them again.
            let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>().cast_const(), amt as usize) };
            // A panic while observing must not change what SQLite gets.
            guard((), || observer.after_read(db_offset as u64, bytes, elapsed));
        }
        rc
    })
}

/// A page SQLite maps (`mmap_size` above 0) rather than reads is shown to
/// the observer as a read would be: the descent before, the mapped bytes
/// after, timed up to the first touch of the page (the page fault, which
/// reads it from the device if it is not cached, happens there instead of
/// in SQLite's first access to it).
unsafe extern "C" fn io_fetch(
    file: *mut sqlite3_file,
    offset: sqlite3_int64,
    amt: c_int,
    out: *mut *mut c_void,
) -> c_int {
    guard(SQLITE_IOERR, || {
        // SAFETY: a file opened by `shim_open`; the real fetch gets exactly
        // SQLite's arguments.
        let fetch = || unsafe {
            let real = real_file(file);
            match (*(*real).pMethods).xFetch {
                Some(fetch) => fetch(real, offset, amt, out),
                None => SQLITE_IOERR,
            }
        };
        // SAFETY: the observer is ours or null and lives until `io_close`.
        let observer = unsafe { (*file.cast::<ShimFile>()).observer.as_ref() };
        let Some(observer) = observer.filter(|_| amt >= MIN_PAGE && offset >= 0 && !out.is_null()) else {
            return fetch();
        };
        guard((), || observer.before_read(offset as u64, amt as usize));
        let start = std::time::Instant::now();
        let rc = fetch();
        // SAFETY: `out` is SQLite's slot, written by the real fetch.
        let page = unsafe { *out };
        if rc == SQLITE_OK && !page.is_null() {
            // SAFETY: on SQLITE_OK with a pointer, the real VFS mapped all
            // `amt` bytes of the file there, which SQLite is about to read
            // and we only read (the first byte now, so that the fault
            // falls in the timed span).
            let bytes = unsafe {
                std::ptr::read_volatile(page.cast::<u8>());
                std::slice::from_raw_parts(page.cast::<u8>().cast_const(), amt as usize)
            };
            let elapsed = start.elapsed();
            guard((), || observer.after_read(offset as u64, bytes, elapsed));
        }
        rc
    })
}

/// The real file's read.
///
/// # Safety
///
/// `file` was opened by `shim_open`; `buf` holds `amt` bytes.
unsafe fn real_read(file: *mut sqlite3_file, buf: *mut c_void, amt: c_int, offset: sqlite3_int64) -> c_int {
    // SAFETY: per the caller; the real file's methods are set.
    unsafe {
        let real = real_file(file);
        match (*(*real).pMethods).xRead {
            Some(read) => read(real, buf, amt, offset),
            None => SQLITE_IOERR,
        }
    }
}

/// Where in the database file the page lies that a read of `amt` bytes at
/// `offset` of a WAL file reads: `None` unless the read is exactly the page
/// of one frame (`amt` a page size, `offset` past a frame header), whose
/// page number is then read from the frame header (4 bytes, an extra read
/// of ours, of the bytes just before SQLite's; the frame is in SQLite's
/// snapshot, so it does not change meanwhile).
///
/// # Safety
///
/// `file` was opened by `shim_open`.
unsafe fn wal_page_offset(file: *mut sqlite3_file, amt: c_int, offset: sqlite3_int64) -> Option<sqlite3_int64> {
    let page_size = sqlite3_int64::from(amt);
    if amt < MIN_PAGE || !u32::try_from(amt).is_ok_and(u32::is_power_of_two) || offset < WAL_HEADER + WAL_FRAME_HEADER {
        return None;
    }
    if (offset - WAL_HEADER - WAL_FRAME_HEADER) % (page_size + WAL_FRAME_HEADER) != 0 {
        return None;
    }
    let mut page_no = [0u8; 4];
    // SAFETY: per the caller; `page_no` holds the 4 bytes asked for.
    let rc = unsafe { real_read(file, page_no.as_mut_ptr().cast(), 4, offset - WAL_FRAME_HEADER) };
    let page_no = sqlite3_int64::from(u32::from_be_bytes(page_no));
    (rc == SQLITE_OK && page_no > 0).then(|| (page_no - 1) * page_size)
}

const fn io_methods(version: c_int) -> sqlite3_io_methods {
    sqlite3_io_methods {
        iVersion: version,
        xClose: Some(io_close),
        xRead: Some(io_read),
        xWrite: Some(io_write),
        xTruncate: Some(io_truncate),
        xSync: Some(io_sync),
        xFileSize: Some(io_file_size),
        xLock: Some(io_lock),
        xUnlock: Some(io_unlock),
        xCheckReservedLock: Some(io_check_reserved_lock),
        xFileControl: Some(io_file_control),
        xSectorSize: Some(io_sector_size),
        xDeviceCharacteristics: Some(io_device_characteristics),
        xShmMap: Some(io_shm_map),
        xShmLock: Some(io_shm_lock),
        xShmBarrier: Some(io_shm_barrier),
        xShmUnmap: Some(io_shm_unmap),
        xFetch: Some(io_fetch),
        xUnfetch: Some(io_unfetch),
    }
}

/// Our methods, by the real file's `iVersion` (1 to 3): SQLite only uses
/// the WAL and mmap methods the real file has.
static IO_METHODS: [sqlite3_io_methods; 3] = [io_methods(1), io_methods(2), io_methods(3)];

unsafe extern "C" fn shim_open(
    vfs: *mut sqlite3_vfs,
    name: *const c_char,
    file: *mut sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    guard(SQLITE_CANTOPEN, || {
        // SAFETY: SQLite gives us our VFS and an allocation of our szOsFile;
        // the real open gets the real VFS and the real part of that file.
        let (rc, opened) = unsafe {
            let shim = file.cast::<ShimFile>();
            (*shim).base.pMethods = ptr::null();
            (*shim).observer = ptr::null_mut();
            (*shim).wal_of = ptr::null();
            (*shim).checkpointing = AtomicBool::new(false);
            let real_vfs = real_vfs(vfs);
            let real = real_file(file);
            let Some(open) = (*real_vfs).xOpen else { return SQLITE_CANTOPEN };
            let rc = open(real_vfs, name, real, flags, out_flags);
            // Mirror the real file: if its methods are set, xClose is due
            // even when the open failed.
            let methods = (*real).pMethods;
            if !methods.is_null() {
                let version = (*methods).iVersion.clamp(1, 3) as usize;
                (*shim).base.pMethods = &IO_METHODS[version - 1];
            }
            (rc, !methods.is_null())
        };
        if rc == SQLITE_OK && opened && flags & SQLITE_OPEN_MAIN_DB != 0 && !name.is_null() {
            guard((), || {
                // SAFETY: a main database file's name is a NUL-terminated
                // path valid for the life of the file.
                let path = unsafe { CStr::from_ptr(name) };
                let Ok(path) = path.to_str() else { return };
                // The runtime starts at the first read from the device, not
                // here: a cached database never starts it.
                let observer = Box::into_raw(Box::new(SharedObserver::new(DbObserver::lazy(path))));
                // SAFETY: our part of the file, set before SQLite uses it.
                unsafe { (*file.cast::<ShimFile>()).observer = observer };
            });
        }
        if rc == SQLITE_OK && opened && flags & SQLITE_OPEN_WAL != 0 && !name.is_null() {
            // SAFETY: SQLite's name of a WAL file it is opening.
            let db = unsafe { wal_database(name) };
            // SAFETY: our part of the file, set before SQLite uses it.
            unsafe { (*file.cast::<ShimFile>()).wal_of = db };
        }
        rc
    })
}

/// The main database file, opened through the shim, whose WAL file SQLite
/// opens under `name` (`sqlite3_database_file_object`, SQLite 3.31 and
/// later); null if there is none.
///
/// # Safety
///
/// `name` is the name SQLite passed to `xOpen` for a WAL file.
unsafe fn wal_database(name: *const c_char) -> *const ShimFile {
    let api = API.load(Ordering::Acquire);
    if api.is_null() {
        return ptr::null();
    }
    // SAFETY: SQLite's routines table; `database_file_object` is only read
    // from a SQLite recent enough to have it in its table.
    unsafe {
        // An older SQLite's table ends before the field.
        if (*api).libversion_number.is_none_or(|version| version() < 3_031_000) {
            return ptr::null();
        }
        let Some(database_file_object) = (*api).database_file_object else { return ptr::null() };
        let db = database_file_object(name);
        // Ours only if its methods are ours (it was opened through the shim).
        if db.is_null() || !IO_METHODS.iter().any(|methods| ptr::eq((*db).pMethods, methods)) {
            return ptr::null();
        }
        db.cast_const().cast()
    }
}

/// Forwards one VFS method to the real VFS's.
macro_rules! forward_vfs {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $name(vfs: *mut sqlite3_vfs $(, $arg: $ty)*) -> $ret {
            guard($fallback, || {
                // SAFETY: SQLite calls us with our VFS; the method is only
                // installed when the real VFS has it.
                unsafe {
                    let real = real_vfs(vfs);
                    match (*real).$field {
                        Some(method) => method(real $(, $arg)*),
                        None => $fallback,
                    }
                }
            })
        }
    };
}

type DlSym = Option<unsafe extern "C" fn(*mut sqlite3_vfs, *mut c_void, *const c_char)>;

forward_vfs!(vfs_delete, xDelete, (name: *const c_char, sync_dir: c_int) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_access, xAccess, (name: *const c_char, flags: c_int, out: *mut c_int) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_full_pathname, xFullPathname, (name: *const c_char, n: c_int, out: *mut c_char) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_dl_open, xDlOpen, (name: *const c_char) -> *mut c_void, ptr::null_mut());
forward_vfs!(vfs_dl_error, xDlError, (n: c_int, out: *mut c_char) -> (), ());
forward_vfs!(vfs_dl_sym, xDlSym, (handle: *mut c_void, symbol: *const c_char) -> DlSym, None);
forward_vfs!(vfs_dl_close, xDlClose, (handle: *mut c_void) -> (), ());
forward_vfs!(vfs_randomness, xRandomness, (n: c_int, out: *mut c_char) -> c_int, 0);
forward_vfs!(vfs_sleep, xSleep, (micros: c_int) -> c_int, 0);
forward_vfs!(vfs_current_time, xCurrentTime, (out: *mut f64) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_get_last_error, xGetLastError, (n: c_int, out: *mut c_char) -> c_int, 0);
forward_vfs!(vfs_current_time_int64, xCurrentTimeInt64, (out: *mut sqlite3_int64) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_set_system_call, xSetSystemCall, (name: *const c_char, call: sqlite3_syscall_ptr) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_get_system_call, xGetSystemCall, (name: *const c_char) -> sqlite3_syscall_ptr, None);
forward_vfs!(vfs_next_system_call, xNextSystemCall, (name: *const c_char) -> *const c_char, ptr::null());

/// Builds our VFS over `real` (not registered yet).
fn shim_vfs(real: &sqlite3_vfs, real_ptr: *mut sqlite3_vfs) -> Option<sqlite3_vfs> {
    let size = c_int::try_from(SHIM_SIZE + usize::try_from(real.szOsFile).ok()?).ok()?;
    Some(sqlite3_vfs {
        iVersion: real.iVersion.clamp(1, 3),
        szOsFile: size,
        mxPathname: real.mxPathname,
        pNext: ptr::null_mut(),
        zName: VFS_NAME.as_ptr(),
        pAppData: real_ptr.cast(),
        xOpen: Some(shim_open),
        xDelete: real.xDelete.and(Some(vfs_delete)),
        xAccess: real.xAccess.and(Some(vfs_access)),
        xFullPathname: real.xFullPathname.and(Some(vfs_full_pathname)),
        xDlOpen: real.xDlOpen.and(Some(vfs_dl_open)),
        xDlError: real.xDlError.and(Some(vfs_dl_error)),
        xDlSym: real.xDlSym.and(Some(vfs_dl_sym)),
        xDlClose: real.xDlClose.and(Some(vfs_dl_close)),
        xRandomness: real.xRandomness.and(Some(vfs_randomness)),
        xSleep: real.xSleep.and(Some(vfs_sleep)),
        xCurrentTime: real.xCurrentTime.and(Some(vfs_current_time)),
        xGetLastError: real.xGetLastError.and(Some(vfs_get_last_error)),
        xCurrentTimeInt64: real.xCurrentTimeInt64.and(Some(vfs_current_time_int64)),
        xSetSystemCall: real.xSetSystemCall.and(Some(vfs_set_system_call)),
        xGetSystemCall: real.xGetSystemCall.and(Some(vfs_get_system_call)),
        xNextSystemCall: real.xNextSystemCall.and(Some(vfs_next_system_call)),
    })
}

/// Registers the shim over the current default VFS and makes it the
/// default. Idempotent: a second call re-registers the same shim.
///
/// # Safety
///
/// `api` must be the routines table SQLite passed to the entry point.
unsafe fn register(api: *const sqlite3_api_routines) -> Result<(), &'static str> {
    // SAFETY: `api` is SQLite's table (caller), valid for the process.
    let (find, reg) = unsafe { ((*api).vfs_find, (*api).vfs_register) };
    let (Some(find), Some(reg)) = (find, reg) else { return Err("sqlite3_vfs_find/register missing") };
    let ours = match VFS.get() {
        Some(&addr) => addr as *mut sqlite3_vfs,
        None => {
            // SAFETY: vfs_find(NULL) is the default VFS, valid while
            // registered (VFSes are never freed in practice).
            let real = unsafe { find(ptr::null()) };
            if real.is_null() {
                return Err("no default VFS");
            }
            // SAFETY: a registered VFS, read once.
            let Some(vfs) = shim_vfs(unsafe { &*real }, real) else { return Err("default VFS has a bad szOsFile") };
            let leaked = Box::into_raw(Box::new(vfs));
            let addr = *VFS.get_or_init(|| leaked as usize);
            if addr != leaked as usize {
                // SAFETY: ours, never registered.
                drop(unsafe { Box::from_raw(leaked) });
            }
            addr as *mut sqlite3_vfs
        }
    };
    // SAFETY: `ours` is leaked and lives for the process.
    if unsafe { reg(ours, 1) } != SQLITE_OK {
        return Err("sqlite3_vfs_register failed");
    }
    Ok(())
}

/// `predictio_stats()`: the embedded runtime's counters as JSON, after
/// waiting (up to 1 s) for the executor to drain its queue.
unsafe extern "C" fn stats_function(ctx: *mut sqlite3_context, _argc: c_int, _argv: *mut *mut sqlite3_value) {
    guard((), || {
        let json = match Prefetcher::global() {
            Ok(prefetcher) => {
                // Settle the queued requests so the counters are final.
                prefetcher.executor().wait_idle(std::time::Duration::from_secs(1));
                crate::json::to_string(&prefetcher.stats())
                    .unwrap_or_else(|err| crate::json::object_of_string("error", &err.to_string()))
            }
            Err(err) => crate::json::object_of_string("error", &err.to_string()),
        };
        let api = API.load(Ordering::Acquire);
        if api.is_null() {
            return;
        }
        // SAFETY: `api` is SQLite's table; `ctx` is the call's context; the
        // text is copied (SQLITE_TRANSIENT) before we drop it.
        unsafe {
            if let Some(result_text) = (*api).result_text {
                let len = c_int::try_from(json.len()).unwrap_or(0);
                result_text(ctx, json.as_ptr().cast(), len, libsqlite3_sys::SQLITE_TRANSIENT());
            }
        }
    });
}

/// The signature of an extension entry point.
type EntryPoint = unsafe extern "C" fn(*mut sqlite3, *mut *mut c_char, *const sqlite3_api_routines) -> c_int;

/// Writes `message` to `*err` in memory from `sqlite3_mprintf`.
///
/// # Safety
///
/// `api` is SQLite's table; `err` is null or writable.
unsafe fn set_error(api: *const sqlite3_api_routines, err: *mut *mut c_char, message: &CStr) {
    // SAFETY: per the caller; mprintf copies the message.
    unsafe {
        if !err.is_null()
            && let Some(mprintf) = (*api).mprintf
        {
            *err = mprintf(c"%s".as_ptr(), message.as_ptr());
        }
    }
}

/// The extension's entry point: registers the `predictio` VFS as the
/// default and the SQL function `predictio_stats()` on `db`. Stays loaded
/// for the life of the process (`SQLITE_OK_LOAD_PERMANENTLY`), as a VFS
/// must.
///
/// # Safety
///
/// Called by SQLite's extension loader with its arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_predictio_init(
    db: *mut sqlite3,
    err: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    guard(SQLITE_ERROR, || {
        if api.is_null() {
            return SQLITE_ERROR;
        }
        API.store(api.cast_mut(), Ordering::Release);
        // Nothing else here that can wait: no thread, no file, no runtime.
        // The runtime (and the warming of our own code) starts at the first
        // read of a database that came from the device.
        // SAFETY: `api` is SQLite's table.
        if let Err(message) = unsafe { register(api) } {
            let message = std::ffi::CString::new(message).unwrap_or_default();
            // SAFETY: SQLite's table and error slot.
            unsafe { set_error(api, err, &message) };
            return SQLITE_ERROR;
        }
        // SAFETY: SQLite's table and connection; the function has no user
        // data and no destructor.
        let rc = unsafe {
            match (*api).create_function_v2 {
                Some(create) if !db.is_null() => create(
                    db,
                    c"predictio_stats".as_ptr(),
                    0,
                    SQLITE_UTF8,
                    ptr::null_mut(),
                    Some(stats_function),
                    None,
                    None,
                    None,
                ),
                _ => SQLITE_OK,
            }
        };
        if rc != SQLITE_OK {
            return rc;
        }
        // Every later connection gets `predictio_stats()` too (SQLite
        // ignores a second registration of the same entry point).
        // SAFETY: SQLite's table; the entry point has the signature SQLite
        // calls auto extensions with, behind the `void(*)(void)` type.
        unsafe {
            if let Some(auto_extension) = (*api).auto_extension {
                let entry: EntryPoint = sqlite3_predictio_init;
                auto_extension(Some(std::mem::transmute::<EntryPoint, unsafe extern "C" fn()>(entry)));
            }
        }
        SQLITE_OK_LOAD_PERMANENTLY
    })
}

/// The entry point under the name SQLite derives from the file name
/// `libpredictio_sqlite.so` (`sqlite3_predictiosqlite_init`), so that
/// `.load` works without naming the entry point.
///
/// # Safety
///
/// As [`sqlite3_predictio_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_predictiosqlite_init(
    db: *mut sqlite3,
    err: *mut *mut c_char,
    api: *const sqlite3_api_routines,
) -> c_int {
    // SAFETY: the same contract.
    guard(SQLITE_ERROR, || unsafe { sqlite3_predictio_init(db, err, api) })
}
