//! `libpredictio_sqlite.so`, the file a program loads: a VFS shim small
//! enough that loading it costs about what loading any extension costs,
//! which loads the runtime (`libpredictio_sqlite_runtime.so`, beside it)
//! only once the program's reads have waited long enough to pay for it.
//!
//! Built by the crate's `build.rs` with `rustc` alone: `no_std`, no
//! dependencies, `panic=abort` (nothing here can panic: no indexing, no
//! allocation but SQLite's). Everything in this file is the FFI edge with
//! SQLite and libc.
//!
//! - **The shim.** Registered as `predictio`, made the default, over the
//!   default VFS. Every method forwards to the real VFS; reads (and
//!   `xFetch`) of main database files, and pages SQLite reads from a main
//!   database's WAL (shown as the page they hold), are timed and shown to
//!   the runtime once it is loaded. SQLite's reads are never changed.
//! - **The gate.** Until the runtime is loaded, the time the process's
//!   slow database reads (from the device, [`SLOW_NS`]) took in transactions
//!   that read leaf after leaf ([`SCAN_LEAVES`]) is summed; when
//!   it reaches [`GATE_NS`] (about twice what a cold load of the runtime
//!   costs), one thread loads the runtime in the background while SQLite
//!   goes on. A process whose queries are short or whose database is cached
//!   never loads it.
//! - **The log.** Until then each database file keeps a list of its first
//!   pages read ([`LOG_PAGES`]): at the file's first read after the runtime
//!   is loaded they are shown to it in order, so that it knows the descent
//!   the scan started with. A page that came from the device, or from a
//!   WAL, is kept as a copy (at most [`LOG_BYTES`]); one the page cache
//!   served is only noted, and read again (from the cache, where it was a
//!   moment ago, if it was noted within [`NOTED_FRESH_NS`]) when it is
//!   shown: a process on a warm cache, which never loads the runtime,
//!   copies nothing.
//! - **Transactions.** The end of each (`xUnlock` to `NONE`; on a WAL
//!   database, its WAL read lock let go) is told to the runtime: an index
//!   scan does not go on past it.
//!
//! `PREDICTIO_SQLITE_RUNTIME` in the environment at load: `lazy` (the
//! default, as above), `eager` (load the runtime now, before returning)
//! or `off` (never load it: the shim only forwards).
#![no_std]
#![deny(unsafe_op_in_unsafe_fn)]

#[allow(dead_code)]
mod abi;

use core::cell::UnsafeCell;
use core::ffi::{CStr, c_char, c_int, c_long, c_ulong, c_void};
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU64, Ordering};

use abi::{
    File, Hooks, Int64, IoMethods, SQLITE_CANTOPEN, SQLITE_ERROR, SQLITE_IOERR, SQLITE_LOCK_NONE, SQLITE_NOTFOUND,
    SQLITE_OK, SQLITE_OK_LOAD_PERMANENTLY, SQLITE_OPEN_MAIN_DB, SQLITE_OPEN_WAL, SQLITE_SHM_EXCLUSIVE, SQLITE_SHM_LOCK,
    SQLITE_SHM_SHARED, SQLITE_SHM_UNLOCK, SQLITE_UTF8, Vfs, api,
};

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: abort has no preconditions. Nothing here panics (see the
    // module's documentation); this is the compiler's requirement.
    unsafe { abort() }
}

#[repr(C)]
struct Timespec {
    sec: c_long,
    nsec: c_long,
}

#[repr(C)]
struct DlInfo {
    fname: *const c_char,
    fbase: *mut c_void,
    sname: *const c_char,
    saddr: *mut c_void,
}

const CLOCK_MONOTONIC: c_int = 1;
const RTLD_NOW: c_int = 2;
const RTLD_NODELETE: c_int = 0x1000;

// glibc 2.34 and later have dlopen and pthread_create in libc itself; on
// older ones any program that loads extensions has libdl and libpthread
// loaded already, where these resolve.
#[link(name = "c")]
unsafe extern "C" {
    fn abort() -> !;
    fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int;
    fn getenv(name: *const c_char) -> *const c_char;
    fn realpath(path: *const c_char, resolved: *mut c_char) -> *mut c_char;
    fn free(ptr: *mut c_void);
    fn usleep(micros: u32) -> c_int;
    fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    fn dlopen(file: *const c_char, mode: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
    fn pthread_create(
        thread: *mut c_ulong,
        attr: *const c_void,
        start: extern "C" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> c_int;
    fn pthread_detach(thread: c_ulong) -> c_int;
}

/// The runtime library's file name, looked for beside this file.
const RUNTIME_FILE: &[u8] = b"libpredictio_sqlite_runtime.so";

/// Read time, summed over the process's slow database reads, at which the
/// runtime is loaded: about twice what a cold load of it costs (1–1.5 ms
/// on a fast disk), so that a program never waits more for the loading
/// than it had waited for its reads.
const GATE_NS: u64 = 2_000_000;

/// A read at least this slow came from the device (a read from the page
/// cache takes a few microseconds): only those count toward [`GATE_NS`],
/// so that a process on a warm cache never loads the runtime.
const SLOW_NS: u64 = 15_000;

/// Leaves of one kind (table, or index) a transaction reads before its
/// slow reads count toward [`GATE_NS`]: a point lookup reads one of each
/// at most (an index's leaf, then its table's) and nothing can be read
/// ahead of it, every read depending on the one before, while a scan reads
/// leaf after leaf. Cold point queries, however many, then never load the
/// runtime, whose load (840 KB read while they wait on the device) made 300
/// of them through an index 6 % slower; a scan counts from its second leaf,
/// with what its transaction waited before.
const SCAN_LEAVES: u8 = 2;

/// B-tree page types (the first byte of a page's b-tree header).
const LEAF_TABLE: u8 = 0x0d;
const LEAF_INDEX: u8 = 0x0a;

/// Pages, and bytes, each database file keeps a copy of until the runtime
/// is loaded.
const LOG_PAGES: usize = 32;
const LOG_BYTES: usize = 256 << 10;

/// How long `predictio_stats()` waits for a load under way.
const STATS_WAIT_MS: u32 = 1000;

// ---------------------------------------------------------------------------
// Process state.

/// A static written once (before it is shared) and read after.
struct Once<T>(UnsafeCell<T>);

// SAFETY: every `Once` is written by one thread, the one that wins the
// `SETUP` or `STATE` transition, before that transition is published with
// Release; readers read it only after an Acquire load shows the transition.
unsafe impl<T> Sync for Once<T> {}

impl<T> Once<T> {
    fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// SQLite's routines table, as an array of pointers.
static API: AtomicPtr<*const c_void> = AtomicPtr::new(ptr::null_mut());

/// The one-time set-up: not begun, under way, done.
static SETUP: AtomicU8 = AtomicU8::new(0);

/// Where the runtime is in this process.
static STATE: AtomicU8 = AtomicU8::new(IDLE);
const IDLE: u8 = 0;
const LOADING: u8 = 1;
const LOADED: u8 = 2;
const FAILED: u8 = 3;
const OFF: u8 = 4;

/// The runtime's hooks, once `STATE` is `LOADED`.
static HOOKS: AtomicPtr<Hooks> = AtomicPtr::new(ptr::null_mut());

/// Nanoseconds the process's slow reads took before the runtime loaded.
static WAITED_NS: AtomicU64 = AtomicU64::new(0);

/// Of those, the nanoseconds that count toward [`GATE_NS`] (those of
/// scans' transactions, [`SCAN_LEAVES`]).
static GATED_NS: AtomicU64 = AtomicU64::new(0);

/// The runtime's path, NUL-terminated (set up once).
static RUNTIME_PATH: Once<[u8; 4096]> = Once(UnsafeCell::new([0; 4096]));

/// Why the runtime did not load (NUL-terminated), once `STATE` is `FAILED`.
static LOAD_ERROR: Once<[u8; 512]> = Once(UnsafeCell::new([0; 512]));

/// Our VFS, built once at set-up over the default VFS.
static VFS: Once<Vfs> = Once(UnsafeCell::new(EMPTY_VFS));

/// The routine at `index` of SQLite's table, as `F` (a function pointer
/// type), or `None` if the table has none there.
///
/// # Safety
///
/// `F` must be the routine's C signature; `index` one of [`api`]'s, and
/// below the table's length in this SQLite (every routine `api` names is
/// in SQLite 3.8 and later, but `DATABASE_FILE_OBJECT`, checked by
/// version).
unsafe fn routine<F: Copy>(index: usize) -> Option<F> {
    let table = API.load(Ordering::Acquire);
    if table.is_null() {
        return None;
    }
    // SAFETY: within the table (caller); a routine is one pointer.
    let entry = unsafe { *table.add(index) };
    if entry.is_null() {
        return None;
    }
    debug_assert_eq!(size_of::<F>(), size_of::<*const c_void>());
    // SAFETY: a non-null function pointer of signature `F` (caller).
    Some(unsafe { core::mem::transmute_copy::<*const c_void, F>(&entry) })
}

type Malloc64 = unsafe extern "C" fn(u64) -> *mut c_void;
type Free = unsafe extern "C" fn(*mut c_void);

/// `sqlite3_malloc64`; null on failure or without the routine.
fn sqlite_malloc(size: usize) -> *mut u8 {
    // SAFETY: the routine's signature.
    match unsafe { routine::<Malloc64>(api::MALLOC64) } {
        // SAFETY: any size; null on failure.
        Some(malloc) => unsafe { malloc(size as u64).cast() },
        None => ptr::null_mut(),
    }
}

/// `sqlite3_free` of what [`sqlite_malloc`] returned.
fn sqlite_free(p: *mut u8) {
    // SAFETY: the routine's signature; `p` is SQLite's or null.
    if let Some(free) = unsafe { routine::<Free>(api::FREE) } {
        // SAFETY: as above.
        unsafe { free(p.cast()) }
    }
}

fn now_ns() -> u64 {
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: `ts` is writable; CLOCK_MONOTONIC always exists.
    unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) };
    (ts.sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.nsec as u64)
}

// ---------------------------------------------------------------------------
// Loading the runtime.

/// The hooks, if the runtime is loaded.
fn hooks() -> Option<&'static Hooks> {
    if STATE.load(Ordering::Acquire) != LOADED {
        return None;
    }
    // SAFETY: set, to the runtime's static table, before `LOADED` was
    // published; the library is never unloaded (RTLD_NODELETE).
    unsafe { HOOKS.load(Ordering::Acquire).as_ref() }
}

/// Copies `parts` into `buf` as one NUL-terminated string, cut to fit.
fn write_cstr(buf: &mut [u8], parts: &[&[u8]]) -> bool {
    let mut at = 0;
    let mut fits = true;
    // The last byte is kept for the NUL.
    let room = buf.len().saturating_sub(1);
    for part in parts {
        for &b in *part {
            match buf.get_mut(at) {
                Some(slot) if at < room => {
                    *slot = b;
                    at += 1;
                }
                _ => fits = false,
            }
        }
    }
    if let Some(end) = buf.get_mut(at) {
        *end = 0;
    }
    fits
}

/// Records why the runtime did not load and publishes `FAILED`.
///
/// # Safety
///
/// Called only by the thread that moved `STATE` to `LOADING`.
unsafe fn fail(parts: &[&[u8]]) {
    // SAFETY: only the loading thread writes it, before publishing FAILED.
    write_cstr(unsafe { &mut *LOAD_ERROR.get() }, parts);
    STATE.store(FAILED, Ordering::Release);
}

/// Loads the runtime and publishes `LOADED` (or `FAILED`).
///
/// # Safety
///
/// Called only by the thread that moved `STATE` from `IDLE` to `LOADING`,
/// after set-up.
unsafe fn load_runtime() {
    // SAFETY: written at set-up, before any load.
    let path = unsafe { &*RUNTIME_PATH.get() };
    // SAFETY: a NUL-terminated path; the library stays loaded for the
    // life of the process.
    let handle = unsafe { dlopen(path.as_ptr().cast(), RTLD_NOW | RTLD_NODELETE) };
    if handle.is_null() {
        // SAFETY: no preconditions; the message is this thread's.
        let why = unsafe { dlerror() };
        let why = if why.is_null() {
            &b"dlopen failed"[..]
        } else {
            // SAFETY: dlerror's NUL-terminated message, valid until the
            // next dl call on this thread (it is copied before).
            unsafe { CStr::from_ptr(why) }.to_bytes()
        };
        // SAFETY: we are the loading thread.
        unsafe { fail(&[why]) };
        return;
    }
    // SAFETY: a handle from dlopen and a NUL-terminated name.
    let hooks = unsafe { dlsym(handle, abi::HOOKS_SYMBOL.as_ptr()) }.cast::<Hooks>();
    // SAFETY: the symbol is the runtime's static `Hooks` (checked by
    // version before any other field is used).
    if hooks.is_null() || unsafe { (*hooks).version } != abi::HOOKS_VERSION {
        // SAFETY: we are the loading thread.
        unsafe { fail(&[b"the runtime library is not of this loader's version: ", &path[..]]) };
        return;
    }
    HOOKS.store(hooks, Ordering::Release);
    STATE.store(LOADED, Ordering::Release);
}

extern "C" fn load_thread(_: *mut c_void) -> *mut c_void {
    // SAFETY: this thread was started by the one that moved STATE to
    // LOADING, for this.
    unsafe { load_runtime() };
    ptr::null_mut()
}

/// Starts loading the runtime in a thread of its own, if nothing has yet.
fn start_loading() {
    if STATE.compare_exchange(IDLE, LOADING, Ordering::AcqRel, Ordering::Relaxed).is_err() {
        return;
    }
    let mut thread: c_ulong = 0;
    // SAFETY: default attributes; `load_thread` takes no argument.
    let rc = unsafe { pthread_create(&mut thread, ptr::null(), load_thread, ptr::null_mut()) };
    if rc == 0 {
        // SAFETY: a thread just created, joined by no one.
        unsafe { pthread_detach(thread) };
    } else {
        // SAFETY: we moved STATE to LOADING.
        unsafe { fail(&[b"could not start a thread to load the runtime"]) };
    }
}

/// Takes one read of `db` (a page of type `kind`, read in `elapsed_ns`):
/// a slow read's time is added to the process's sum, and to the gate's once
/// its transaction is a scan's ([`SCAN_LEAVES`]), with the time held until
/// then; loads the runtime at the gate.
fn gate(db: &mut ShimFile, kind: u8, elapsed_ns: u64) {
    let leaves = match kind {
        LEAF_TABLE => db.leaves.get_mut(0),
        LEAF_INDEX => db.leaves.get_mut(1),
        _ => None,
    };
    if let Some(leaves) = leaves {
        *leaves = leaves.saturating_add(1);
    }
    if elapsed_ns >= SLOW_NS {
        WAITED_NS.fetch_add(elapsed_ns, Ordering::Relaxed);
        db.held_ns = db.held_ns.saturating_add(elapsed_ns);
    }
    if db.held_ns == 0 || db.leaves.iter().all(|&n| n < SCAN_LEAVES) {
        return;
    }
    let counted = core::mem::take(&mut db.held_ns);
    let before = GATED_NS.fetch_add(counted, Ordering::Relaxed);
    if before.saturating_add(counted) >= GATE_NS && STATE.load(Ordering::Relaxed) == IDLE {
        start_loading();
    }
}

// ---------------------------------------------------------------------------
// The shim's files.

/// A page read before the runtime was loaded, kept to show it later.
#[derive(Clone, Copy)]
struct Logged {
    offset: u64,
    /// A copy of the page; null for a page read from the page cache, read
    /// again when it is shown.
    data: *mut u8,
    len: usize,
    elapsed_ns: u64,
    /// When it was read (`CLOCK_MONOTONIC`, ns).
    at_ns: u64,
}

const NOT_LOGGED: Logged = Logged { offset: 0, data: ptr::null_mut(), len: 0, elapsed_ns: 0, at_ns: 0 };

/// A page noted without a copy is read again when it is shown only if it
/// was read this recently (ns): it is in the page cache still, most surely;
/// an older one may have been evicted, and reading it again would make the
/// read that shows the log wait for the device.
const NOTED_FRESH_NS: u64 = 1_000_000_000;

#[repr(C)]
struct ShimFile {
    base: File,
    /// For a main database: SQLite's name of it (valid while it is open);
    /// else null.
    path: *const c_char,
    /// The runtime's observer of this database, once attached; else null.
    observer: *mut c_void,
    /// Whether the runtime refused an observer for this file.
    refused: bool,
    /// For the WAL of a main database opened through the shim: that
    /// database's file (SQLite closes it after its WAL); else null.
    wal_of: *mut ShimFile,
    /// For a main database: whether its connection holds the WAL's
    /// checkpoint lock (its WAL reads then are not lookups).
    checkpointing: AtomicBool,
    /// For a main database, in its connection's current transaction: the
    /// table and the index leaves read, and the time of the slow reads not
    /// counted toward the gate yet (see [`SCAN_LEAVES`]).
    leaves: [u8; 2],
    held_ns: u64,
    log_len: usize,
    /// No more pages are noted (a WAL page did not fit).
    log_closed: bool,
    log: [Logged; LOG_PAGES],
}

/// Bytes before the real file: `ShimFile` rounded up to 16, so the real
/// file is as aligned as SQLite's own allocation.
const SHIM_SIZE: usize = size_of::<ShimFile>().next_multiple_of(16);

/// The real file following ours.
///
/// # Safety
///
/// `file` was allocated by SQLite with our VFS's `szOsFile`.
unsafe fn real_file(file: *mut File) -> *mut File {
    // SAFETY: in bounds of that allocation.
    unsafe { file.cast::<u8>().add(SHIM_SIZE).cast() }
}

/// The real VFS behind ours.
///
/// # Safety
///
/// `vfs` is our VFS.
unsafe fn real_vfs(vfs: *mut Vfs) -> *mut Vfs {
    // SAFETY: set at set-up.
    unsafe { (*vfs).app_data.cast() }
}

/// Notes a page read in `db`'s log, if it has room: with a copy of its
/// bytes if it came from the device (`elapsed_ns`) or from a WAL, else its
/// place alone (the file's page, cached now, is read again when the log is
/// shown). A page from the device past [`LOG_BYTES`] of copies is noted
/// too; one from a WAL that does not fit ends the log (the file holds
/// another version of it).
///
/// # Safety
///
/// `db` is a main database's `ShimFile`, used by one thread at a time (its
/// connection's); `data` holds `len` readable bytes.
unsafe fn log_read(db: *mut ShimFile, offset: u64, data: *const u8, len: usize, elapsed_ns: u64, from_wal: bool) {
    // SAFETY: per the caller.
    let db = unsafe { &mut *db };
    if db.log_len >= LOG_PAGES || db.log_closed {
        return;
    }
    let mut copy = ptr::null_mut();
    if from_wal || elapsed_ns >= SLOW_NS {
        let kept: usize =
            db.log.iter().take(db.log_len).filter(|entry| !entry.data.is_null()).map(|entry| entry.len).sum();
        if kept.saturating_add(len) <= LOG_BYTES {
            copy = sqlite_malloc(len);
            if !copy.is_null() {
                // SAFETY: `len` bytes each side, distinct allocations.
                unsafe { ptr::copy_nonoverlapping(data, copy, len) };
            }
        }
        if copy.is_null() && from_wal {
            db.log_closed = true;
            return;
        }
    }
    if let Some(slot) = db.log.get_mut(db.log_len) {
        *slot = Logged { offset, data: copy, len, elapsed_ns, at_ns: now_ns() };
        db.log_len += 1;
    } else {
        sqlite_free(copy);
    }
}

/// Frees `db`'s log.
fn clear_log(db: &mut ShimFile) {
    let len = db.log_len;
    for entry in db.log.iter_mut().take(len) {
        sqlite_free(entry.data);
        *entry = NOT_LOGGED;
    }
    db.log_len = 0;
}

/// The runtime's hooks and `db`'s observer, attaching one (and showing it
/// the log) at the first read after the runtime loaded.
///
/// # Safety
///
/// As [`log_read`].
unsafe fn attach(db: *mut ShimFile) -> Option<(&'static Hooks, *mut c_void)> {
    // SAFETY: per the caller.
    let (refused, observer, path) = unsafe { ((*db).refused, (*db).observer, (*db).path) };
    if refused {
        return None;
    }
    let hooks = hooks()?;
    if !observer.is_null() {
        return Some((hooks, observer));
    }
    // SAFETY: SQLite's name of the open database, NUL-terminated.
    let observer = unsafe { (hooks.open)(path) };
    if observer.is_null() {
        // SAFETY: per the caller.
        let shim = unsafe { &mut *db };
        shim.refused = true;
        clear_log(shim);
        return None;
    }
    // SAFETY: per the caller.
    unsafe { (*db).observer = observer };
    // SAFETY: per the caller; the observer is the runtime's for this file.
    unsafe { show_log(db, hooks, observer) };
    // SAFETY: per the caller.
    clear_log(unsafe { &mut *db });
    Some((hooks, observer))
}

/// Shows `db`'s log to its new observer, in order: the copies as kept,
/// the pages only noted read again (from the page cache, which served them
/// lately: [`NOTED_FRESH_NS`]) into one buffer; one that cannot be read, or
/// was noted too long ago, is passed over.
///
/// # Safety
///
/// As [`log_read`]; `observer` is the runtime's observer of `db`.
unsafe fn show_log(db: *mut ShimFile, hooks: &Hooks, observer: *mut c_void) {
    let mut buf: *mut u8 = ptr::null_mut();
    let mut buf_len = 0;
    let now = now_ns();
    // SAFETY: per the caller (read through the pointer, which also reaches
    // the real file after it).
    let log_len = unsafe { (*db).log_len };
    for i in 0..log_len {
        // SAFETY: as above; the log is not changed while it is shown.
        let Some(entry) = (unsafe { (*db).log.get(i).copied() }) else { break };
        let mut data = entry.data.cast_const();
        if data.is_null() {
            if now.saturating_sub(entry.at_ns) > NOTED_FRESH_NS {
                continue;
            }
            if buf_len < entry.len {
                sqlite_free(buf);
                buf = sqlite_malloc(entry.len);
                buf_len = if buf.is_null() { 0 } else { entry.len };
            }
            if buf.is_null() {
                continue;
            }
            let Ok(amt) = c_int::try_from(entry.len) else { continue };
            // SAFETY: `db` is a main database opened by `shim_open` (its
            // real file follows it); `buf` holds `entry.len` bytes.
            let rc = unsafe { real_read(db.cast(), buf.cast(), amt, entry.offset as Int64) };
            if rc != SQLITE_OK {
                continue;
            }
            data = buf.cast_const();
        }
        // SAFETY: the runtime's observer; `len` bytes at `data`.
        unsafe {
            (hooks.before_read)(observer, entry.offset, entry.len);
            (hooks.after_read)(observer, entry.offset, data, entry.len, entry.elapsed_ns);
        }
    }
    sqlite_free(buf);
}

/// Times `io` (SQLite's read or fetch of `len` bytes at `offset` of `db`,
/// whose bytes `bytes` gives after a success; `from_wal`: a page of its
/// WAL) and shows it to the runtime, or logs it and counts its time toward
/// the gate.
///
/// # Safety
///
/// As [`log_read`]; `bytes` returns null or a pointer to `len` bytes
/// readable until SQLite reads them.
unsafe fn observe(
    db: *mut ShimFile,
    offset: u64,
    len: usize,
    from_wal: bool,
    io: impl FnOnce() -> c_int,
    bytes: impl FnOnce() -> *const u8,
) -> c_int {
    // SAFETY: per the caller.
    let attached = unsafe { attach(db) };
    if let Some((hooks, observer)) = attached {
        // The descent is known from the offset alone: shown before the
        // read, so that prefetches overlap its own I/O.
        // SAFETY: an attached observer.
        unsafe { (hooks.before_read)(observer, offset, len) };
    }
    let start = now_ns();
    let rc = io();
    if rc != SQLITE_OK {
        return rc;
    }
    let data = bytes();
    let elapsed = now_ns().saturating_sub(start);
    if data.is_null() {
        return rc;
    }
    match attached {
        // SAFETY: an attached observer; `len` bytes at `data`.
        Some((hooks, observer)) => unsafe { (hooks.after_read)(observer, offset, data, len, elapsed) },
        None => {
            if STATE.load(Ordering::Relaxed) < LOADED {
                // SAFETY: per the caller.
                unsafe { log_read(db, offset, data, len, elapsed, from_wal) };
                // The page's type (page 1, the schema's, is no scan's leaf).
                // SAFETY: `len` bytes at `data`, per the caller.
                let kind = if offset > 0 && len > 0 { unsafe { *data } } else { 0 };
                // SAFETY: per the caller: the database's file, used by this
                // connection only.
                unsafe { gate(&mut *db, kind, elapsed) };
            }
        }
    }
    rc
}

/// Forwards one io method to the real file's; the fallback when it has none.
macro_rules! forward_io {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $name(file: *mut File $(, $arg: $ty)*) -> $ret {
            // SAFETY: SQLite calls us with a file opened by `shim_open`,
            // whose real file's methods are set (else ours would not be).
            unsafe {
                let real = real_file(file);
                match (*(*real).methods).$field {
                    Some(method) => method(real $(, $arg)*),
                    None => $fallback,
                }
            }
        }
    };
}

forward_io!(io_write, write, (buf: *const c_void, amt: c_int, offset: Int64) -> c_int, SQLITE_IOERR);
forward_io!(io_truncate, truncate, (size: Int64) -> c_int, SQLITE_IOERR);
forward_io!(io_sync, sync, (flags: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_file_size, file_size, (size: *mut Int64) -> c_int, SQLITE_IOERR);
forward_io!(io_lock, lock, (level: c_int) -> c_int, SQLITE_IOERR);
forward_io!(real_unlock, unlock, (level: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_check_reserved_lock, check_reserved_lock, (out: *mut c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_file_control, file_control, (op: c_int, arg: *mut c_void) -> c_int, SQLITE_NOTFOUND);
forward_io!(io_sector_size, sector_size, () -> c_int, 4096);
forward_io!(io_device_characteristics, device_characteristics, () -> c_int, 0);
forward_io!(io_shm_map, shm_map, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void) -> c_int, SQLITE_IOERR);
forward_io!(io_shm_barrier, shm_barrier, () -> (), ());
forward_io!(io_shm_unmap, shm_unmap, (delete: c_int) -> c_int, SQLITE_IOERR);
forward_io!(io_unfetch, unfetch, (offset: Int64, p: *mut c_void) -> c_int, SQLITE_IOERR);
forward_io!(real_read, read, (buf: *mut c_void, amt: c_int, offset: Int64) -> c_int, SQLITE_IOERR);
forward_io!(real_fetch, fetch, (offset: Int64, amt: c_int, out: *mut *mut c_void) -> c_int, SQLITE_IOERR);
forward_io!(real_shm_lock, shm_lock, (offset: c_int, n: c_int, flags: c_int) -> c_int, SQLITE_IOERR);
forward_io!(real_close, close, () -> c_int, SQLITE_OK);

/// A main database's connection that lets go of its last lock has ended its
/// transaction: the runtime is told (a scan does not go on past it).
unsafe extern "C" fn io_unlock(file: *mut File, level: c_int) -> c_int {
    // SAFETY: a file opened by `shim_open`; SQLite's arguments.
    let rc = unsafe { real_unlock(file, level) };
    if level == SQLITE_LOCK_NONE {
        // SAFETY: as above, used by this connection.
        unsafe { transaction_ended(file) };
    }
    rc
}

/// Tells the runtime that the transaction on `file` (a main database) is
/// over, if it observes the file.
///
/// # Safety
///
/// `file` was opened by `shim_open` and is used by the calling connection.
unsafe fn transaction_ended(file: *mut File) {
    // SAFETY: our part of the file, used by this connection only; its
    // observer (if any) is the runtime's, used by this connection only.
    let observer = unsafe {
        let shim = file.cast::<ShimFile>();
        (*shim).leaves = [0; 2];
        (*shim).held_ns = 0;
        (*shim).observer
    };
    if !observer.is_null()
        && let Some(hooks) = hooks()
    {
        // SAFETY: an attached observer.
        unsafe { (hooks.unlocked)(observer) };
    }
}

/// The WAL-index read locks (`WAL_READ_LOCK(0..5)`), one held shared for
/// each read transaction on a WAL database.
const WAL_READ_LOCKS: core::ops::Range<c_int> = 3..8;

/// The WAL-index lock a checkpoint holds exclusively (`WAL_CKPT_LOCK`).
const WAL_CKPT_LOCK: c_int = 1;

unsafe extern "C" fn io_shm_lock(file: *mut File, offset: c_int, n: c_int, flags: c_int) -> c_int {
    // SAFETY: a file opened by `shim_open`; SQLite's arguments.
    let rc = unsafe { real_shm_lock(file, offset, n, flags) };
    // A WAL database keeps its lock on the file while open: the end of a
    // read transaction is its WAL read lock let go.
    if flags == SQLITE_SHM_UNLOCK | SQLITE_SHM_SHARED && WAL_READ_LOCKS.contains(&offset) {
        // SAFETY: a file opened by `shim_open`, used by this connection.
        unsafe { transaction_ended(file) };
    }
    // A checkpoint (or a recovery) holds the checkpoint lock exclusively
    // while it copies WAL frames to the database: its WAL reads are not
    // lookups.
    if offset <= WAL_CKPT_LOCK && WAL_CKPT_LOCK < offset.saturating_add(n) && flags & SQLITE_SHM_EXCLUSIVE != 0 {
        // SAFETY: our part of the file.
        let checkpointing = unsafe { &(*file.cast::<ShimFile>()).checkpointing };
        if flags & SQLITE_SHM_UNLOCK != 0 {
            checkpointing.store(false, Ordering::Relaxed);
        } else if flags & SQLITE_SHM_LOCK != 0 && rc == SQLITE_OK {
            checkpointing.store(true, Ordering::Relaxed);
        }
    }
    rc
}

unsafe extern "C" fn io_close(file: *mut File) -> c_int {
    // SAFETY: a file opened by `shim_open`; its observer (if any) is the
    // runtime's and is given back once; the log is ours.
    unsafe {
        let rc = real_close(file);
        let shim = &mut *file.cast::<ShimFile>();
        shim.wal_of = ptr::null_mut();
        if !shim.observer.is_null()
            && let Some(hooks) = hooks()
        {
            (hooks.close)(shim.observer);
        }
        shim.observer = ptr::null_mut();
        clear_log(shim);
        rc
    }
}

/// The smallest SQLite page: shorter reads past the header (the change
/// counter SQLite checks at every transaction) are not pages and pass
/// through untimed.
const MIN_PAGE: c_int = 512;

/// Bytes of a WAL file's header, and of each frame's header.
const WAL_HEADER: Int64 = 32;
const WAL_FRAME_HEADER: Int64 = 24;

unsafe extern "C" fn io_read(file: *mut File, buf: *mut c_void, amt: c_int, offset: Int64) -> c_int {
    // SAFETY: our part of a file opened by `shim_open`.
    let (path, wal_of) = unsafe {
        let shim = &*file.cast::<ShimFile>();
        (shim.path, shim.wal_of)
    };
    // SAFETY: a file opened by `shim_open`; SQLite's arguments.
    let read = || unsafe { real_read(file, buf, amt, offset) };
    let (db, db_offset, from_wal) = if !path.is_null() && amt > 0 && (offset == 0 || (offset > 0 && amt >= MIN_PAGE)) {
        (file.cast::<ShimFile>(), offset, false)
    // SAFETY: a WAL's database is open as long as the WAL is.
    } else if !wal_of.is_null() && unsafe { !(*wal_of).checkpointing.load(Ordering::Relaxed) } {
        // SAFETY: a file opened by `shim_open`.
        match unsafe { wal_page_offset(file, amt, offset) } {
            Some(db_offset) => (wal_of, db_offset, true),
            None => return read(),
        }
    } else {
        return read();
    };
    // SAFETY: the database's file, used by this connection only; on
    // SQLITE_OK the real read filled all `amt` bytes of `buf`.
    unsafe { observe(db, db_offset as u64, amt as usize, from_wal, read, || buf.cast_const().cast()) }
}

/// A page SQLite maps (`mmap_size` above 0) is shown as a read is, timed
/// up to the first touch of the page (where the fault reads it from the
/// device if it is not cached).
unsafe extern "C" fn io_fetch(file: *mut File, offset: Int64, amt: c_int, out: *mut *mut c_void) -> c_int {
    // SAFETY: a file opened by `shim_open`; SQLite's arguments.
    let fetch = || unsafe { real_fetch(file, offset, amt, out) };
    // SAFETY: our part of the file.
    let path = unsafe { (*file.cast::<ShimFile>()).path };
    if path.is_null() || amt < MIN_PAGE || offset < 0 || out.is_null() {
        return fetch();
    }
    let mapped = || {
        // SAFETY: SQLite's slot, written by the real fetch; a page, if
        // any, mapped whole, whose first byte is touched now so that the
        // fault falls in the timed span.
        unsafe {
            let page = (*out).cast::<u8>();
            if !page.is_null() {
                ptr::read_volatile(page);
            }
            page.cast_const()
        }
    };
    // SAFETY: the database's own file, used by this connection only.
    unsafe { observe(file.cast(), offset as u64, amt as usize, false, fetch, mapped) }
}

/// Where in the database the page lies that a read of `amt` bytes at
/// `offset` of a WAL reads: `None` unless the read is exactly the page of
/// one frame, whose page number is then read from the frame header (4
/// bytes just before SQLite's, an extra read of ours; the frame is in
/// SQLite's snapshot and does not change meanwhile).
///
/// # Safety
///
/// `file` was opened by `shim_open`.
unsafe fn wal_page_offset(file: *mut File, amt: c_int, offset: Int64) -> Option<Int64> {
    let page_size = Int64::from(amt);
    if amt < MIN_PAGE || amt & (amt - 1) != 0 || offset < WAL_HEADER + WAL_FRAME_HEADER {
        return None;
    }
    if (offset - WAL_HEADER - WAL_FRAME_HEADER) % (page_size + WAL_FRAME_HEADER) != 0 {
        return None;
    }
    let mut page_no = [0u8; 4];
    // SAFETY: per the caller; `page_no` holds the 4 bytes asked for.
    let rc = unsafe { real_read(file, page_no.as_mut_ptr().cast(), 4, offset - WAL_FRAME_HEADER) };
    let page_no = Int64::from(u32::from_be_bytes(page_no));
    (rc == SQLITE_OK && page_no > 0).then(|| (page_no - 1) * page_size)
}

const fn io_methods(version: c_int) -> IoMethods {
    IoMethods {
        version,
        close: Some(io_close),
        read: Some(io_read),
        write: Some(io_write),
        truncate: Some(io_truncate),
        sync: Some(io_sync),
        file_size: Some(io_file_size),
        lock: Some(io_lock),
        unlock: Some(io_unlock),
        check_reserved_lock: Some(io_check_reserved_lock),
        file_control: Some(io_file_control),
        sector_size: Some(io_sector_size),
        device_characteristics: Some(io_device_characteristics),
        shm_map: Some(io_shm_map),
        shm_lock: Some(io_shm_lock),
        shm_barrier: Some(io_shm_barrier),
        shm_unmap: Some(io_shm_unmap),
        fetch: Some(io_fetch),
        unfetch: Some(io_unfetch),
    }
}

/// Our methods, by the real file's version (1 to 3): SQLite only uses the
/// WAL and mmap methods the real file has.
static IO_METHODS: [IoMethods; 3] = [io_methods(1), io_methods(2), io_methods(3)];

/// Our methods for a real file with `methods`.
///
/// # Safety
///
/// `methods` is a real file's (non-null) methods.
unsafe fn ours_for(methods: *const IoMethods) -> &'static IoMethods {
    // SAFETY: per the caller.
    let version = unsafe { (*methods).version };
    match version {
        ..=1 => &IO_METHODS[0],
        2 => &IO_METHODS[1],
        _ => &IO_METHODS[2],
    }
}

unsafe extern "C" fn shim_open(
    vfs: *mut Vfs,
    name: *const c_char,
    file: *mut File,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    // SAFETY: SQLite gives us our VFS and an allocation of our szOsFile;
    // ours is initialised before the real open, which gets the real VFS
    // and the real part of the file.
    unsafe {
        let shim = file.cast::<ShimFile>();
        shim.write(ShimFile {
            base: File { methods: ptr::null() },
            path: ptr::null(),
            observer: ptr::null_mut(),
            refused: false,
            wal_of: ptr::null_mut(),
            checkpointing: AtomicBool::new(false),
            leaves: [0; 2],
            held_ns: 0,
            log_len: 0,
            log_closed: false,
            log: [NOT_LOGGED; LOG_PAGES],
        });
        let real_vfs = real_vfs(vfs);
        let real = real_file(file);
        let Some(open) = (*real_vfs).open else { return SQLITE_CANTOPEN };
        let rc = open(real_vfs, name, real, flags, out_flags);
        // Mirror the real file: if its methods are set, xClose is due even
        // when the open failed.
        let methods = (*real).methods;
        if methods.is_null() {
            return rc;
        }
        (*shim).base.methods = ours_for(methods);
        if rc == SQLITE_OK && !name.is_null() {
            if flags & SQLITE_OPEN_MAIN_DB != 0 {
                // A main database's name is valid for the life of the file.
                (*shim).path = name;
            } else if flags & SQLITE_OPEN_WAL != 0 {
                (*shim).wal_of = wal_database(name);
            }
        }
        rc
    }
}

type LibversionNumber = unsafe extern "C" fn() -> c_int;
type DatabaseFileObject = unsafe extern "C" fn(*const c_char) -> *mut File;

/// The main database file, opened through the shim, whose WAL SQLite opens
/// under `name` (`sqlite3_database_file_object`, SQLite 3.31 and later);
/// null if there is none.
///
/// # Safety
///
/// `name` is the name SQLite passed to `xOpen` for a WAL file.
unsafe fn wal_database(name: *const c_char) -> *mut ShimFile {
    // SAFETY: the routine's signature.
    let Some(version) = (unsafe { routine::<LibversionNumber>(api::LIBVERSION_NUMBER) }) else {
        return ptr::null_mut();
    };
    // SAFETY: SQLite's own function; an older SQLite's table ends before
    // `database_file_object`, which is read only from a newer one.
    unsafe {
        if version() < api::DATABASE_FILE_OBJECT_SINCE {
            return ptr::null_mut();
        }
        let Some(database_file_object) = routine::<DatabaseFileObject>(api::DATABASE_FILE_OBJECT) else {
            return ptr::null_mut();
        };
        let db = database_file_object(name);
        // Ours only if its methods are ours (opened through the shim).
        if db.is_null() || !IO_METHODS.iter().any(|methods| ptr::eq((*db).methods, methods)) {
            return ptr::null_mut();
        }
        db.cast()
    }
}

/// Forwards one VFS method to the real VFS's.
macro_rules! forward_vfs {
    ($name:ident, $field:ident, ($($arg:ident: $ty:ty),*) -> $ret:ty, $fallback:expr) => {
        unsafe extern "C" fn $name(vfs: *mut Vfs $(, $arg: $ty)*) -> $ret {
            // SAFETY: SQLite calls us with our VFS; the method is only
            // installed when the real VFS has it.
            unsafe {
                let real = real_vfs(vfs);
                match (*real).$field {
                    Some(method) => method(real $(, $arg)*),
                    None => $fallback,
                }
            }
        }
    };
}

forward_vfs!(vfs_delete, delete, (name: *const c_char, sync_dir: c_int) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_access, access, (name: *const c_char, flags: c_int, out: *mut c_int) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_full_pathname, full_pathname, (name: *const c_char, n: c_int, out: *mut c_char) -> c_int, SQLITE_IOERR);
forward_vfs!(vfs_dl_open, dl_open, (name: *const c_char) -> *mut c_void, ptr::null_mut());
forward_vfs!(vfs_dl_error, dl_error, (n: c_int, out: *mut c_char) -> (), ());
forward_vfs!(vfs_dl_sym, dl_sym, (handle: *mut c_void, symbol: *const c_char) -> abi::DlSym, None);
forward_vfs!(vfs_dl_close, dl_close, (handle: *mut c_void) -> (), ());
forward_vfs!(vfs_randomness, randomness, (n: c_int, out: *mut c_char) -> c_int, 0);
forward_vfs!(vfs_sleep, sleep, (micros: c_int) -> c_int, 0);
forward_vfs!(vfs_current_time, current_time, (out: *mut f64) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_get_last_error, get_last_error, (n: c_int, out: *mut c_char) -> c_int, 0);
forward_vfs!(vfs_current_time_int64, current_time_int64, (out: *mut Int64) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_set_system_call, set_system_call, (name: *const c_char, call: abi::SyscallPtr) -> c_int, SQLITE_ERROR);
forward_vfs!(vfs_get_system_call, get_system_call, (name: *const c_char) -> abi::SyscallPtr, None);
forward_vfs!(vfs_next_system_call, next_system_call, (name: *const c_char) -> *const c_char, ptr::null());

const EMPTY_VFS: Vfs = Vfs {
    version: 0,
    size_of_file: 0,
    max_pathname: 0,
    next: ptr::null_mut(),
    name: ptr::null(),
    app_data: ptr::null_mut(),
    open: None,
    delete: None,
    access: None,
    full_pathname: None,
    dl_open: None,
    dl_error: None,
    dl_sym: None,
    dl_close: None,
    randomness: None,
    sleep: None,
    current_time: None,
    get_last_error: None,
    current_time_int64: None,
    set_system_call: None,
    get_system_call: None,
    next_system_call: None,
};

/// The name the shim is registered under.
const VFS_NAME: &CStr = c"predictio";

/// Our VFS over `real`; `None` if its file size does not fit.
fn shim_vfs(real: &Vfs, real_ptr: *mut Vfs) -> Option<Vfs> {
    let size = SHIM_SIZE.checked_add(usize::try_from(real.size_of_file).ok()?)?;
    Some(Vfs {
        version: real.version.clamp(1, 3),
        size_of_file: c_int::try_from(size).ok()?,
        max_pathname: real.max_pathname,
        next: ptr::null_mut(),
        name: VFS_NAME.as_ptr(),
        app_data: real_ptr.cast(),
        open: Some(shim_open),
        delete: real.delete.and(Some(vfs_delete)),
        access: real.access.and(Some(vfs_access)),
        full_pathname: real.full_pathname.and(Some(vfs_full_pathname)),
        dl_open: real.dl_open.and(Some(vfs_dl_open)),
        dl_error: real.dl_error.and(Some(vfs_dl_error)),
        dl_sym: real.dl_sym.and(Some(vfs_dl_sym)),
        dl_close: real.dl_close.and(Some(vfs_dl_close)),
        randomness: real.randomness.and(Some(vfs_randomness)),
        sleep: real.sleep.and(Some(vfs_sleep)),
        current_time: real.current_time.and(Some(vfs_current_time)),
        get_last_error: real.get_last_error.and(Some(vfs_get_last_error)),
        current_time_int64: real.current_time_int64.and(Some(vfs_current_time_int64)),
        set_system_call: real.set_system_call.and(Some(vfs_set_system_call)),
        get_system_call: real.get_system_call.and(Some(vfs_get_system_call)),
        next_system_call: real.next_system_call.and(Some(vfs_next_system_call)),
    })
}

// ---------------------------------------------------------------------------
// Set-up and the entry points.

type VfsFind = unsafe extern "C" fn(*const c_char) -> *mut Vfs;
type VfsRegister = unsafe extern "C" fn(*mut Vfs, c_int) -> c_int;

/// Once per process: builds our VFS over the default one, finds the
/// runtime's path and reads the mode. `Err` if there is no default VFS.
fn set_up() -> Result<(), &'static CStr> {
    match SETUP.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(_) => {
            // Another thread sets up: wait for it (microseconds).
            while SETUP.load(Ordering::Acquire) == 1 {
                core::hint::spin_loop();
            }
            return if SETUP.load(Ordering::Acquire) == 2 { Ok(()) } else { Err(c"no default VFS") };
        }
    }
    // SAFETY: the routine's signature; vfs_find(NULL) is the default VFS,
    // valid while registered (VFSes are never freed in practice).
    let real = unsafe { routine::<VfsFind>(api::VFS_FIND).map_or(ptr::null_mut(), |find| find(ptr::null())) };
    // SAFETY: a registered VFS, read once.
    let Some(vfs) = (unsafe { real.as_ref() }).and_then(|r| shim_vfs(r, real)) else {
        SETUP.store(3, Ordering::Release);
        return Err(c"no default VFS (or one whose file size does not fit)");
    };
    // SAFETY: only this thread (which won SETUP) writes these, before
    // publishing 2.
    unsafe {
        *VFS.get() = vfs;
        find_runtime(&mut *RUNTIME_PATH.get());
    }
    let mode = mode();
    if mode == OFF {
        STATE.store(OFF, Ordering::Release);
    }
    SETUP.store(2, Ordering::Release);
    if mode == LOADING && STATE.compare_exchange(IDLE, LOADING, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
        // SAFETY: we moved STATE to LOADING, after set-up.
        unsafe { load_runtime() };
    }
    Ok(())
}

/// `PREDICTIO_SQLITE_RUNTIME`: `LOADING` for `eager`, `OFF` for `off`,
/// else `IDLE` (lazy).
fn mode() -> u8 {
    // SAFETY: a NUL-terminated name; getenv's value is read at once.
    let value = unsafe { getenv(c"PREDICTIO_SQLITE_RUNTIME".as_ptr()) };
    if value.is_null() {
        return IDLE;
    }
    // SAFETY: a NUL-terminated string from the environment.
    match unsafe { CStr::from_ptr(value) }.to_bytes() {
        b"eager" => LOADING,
        b"off" => OFF,
        _ => IDLE,
    }
}

/// Writes the runtime's path to `out`: beside this file (its directory
/// resolved now, so that a later `chdir` does not matter), or the bare file
/// name (found as this file was) if this file's path has no directory.
fn find_runtime(out: &mut [u8]) {
    let mut info = DlInfo { fname: ptr::null(), fbase: ptr::null_mut(), sname: ptr::null(), saddr: ptr::null_mut() };
    let here = sqlite3_predictio_init as *const c_void;
    // SAFETY: `info` is writable; `here` is in this file.
    let found = unsafe { dladdr(here, &mut info) } != 0 && !info.fname.is_null();
    // SAFETY: the loader's NUL-terminated path of this file; realpath
    // allocates its answer (freed below).
    let resolved = if found { unsafe { realpath(info.fname, ptr::null_mut()) } } else { ptr::null_mut() };
    if resolved.is_null() {
        write_cstr(out, &[RUNTIME_FILE]);
        return;
    }
    // SAFETY: realpath's NUL-terminated answer.
    let path = unsafe { CStr::from_ptr(resolved) }.to_bytes();
    let dir = match path.iter().rposition(|&b| b == b'/') {
        Some(slash) => path.get(..=slash).unwrap_or(b"/"),
        None => b"",
    };
    if !write_cstr(out, &[dir, RUNTIME_FILE]) {
        write_cstr(out, &[RUNTIME_FILE]);
    }
    // SAFETY: realpath's allocation, no longer used.
    unsafe { free(resolved.cast()) };
}

type ResultText = unsafe extern "C" fn(*mut c_void, *const c_char, c_int, isize);
type SqlFunction = unsafe extern "C" fn(*mut c_void, c_int, *mut *mut c_void);
type CreateFunctionV2 = unsafe extern "C" fn(
    *mut c_void,
    *const c_char,
    c_int,
    c_int,
    *mut c_void,
    Option<SqlFunction>,
    Option<SqlFunction>,
    Option<unsafe extern "C" fn(*mut c_void)>,
    Option<unsafe extern "C" fn(*mut c_void)>,
) -> c_int;
type AutoExtension = unsafe extern "C" fn(Option<unsafe extern "C" fn()>) -> c_int;
type Mprintf = unsafe extern "C" fn(*const c_char, ...) -> *mut c_char;

/// `SQLITE_TRANSIENT`: SQLite copies the text before the call returns.
/// (A destructor argument; passed as the pointer-sized integer -1, the
/// same register a pointer goes in.)
const SQLITE_TRANSIENT: isize = -1;

/// A small JSON writer on a stack buffer (for the counters the loader
/// itself has).
struct Json {
    buf: [u8; 768],
    len: usize,
}

impl Json {
    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
        }
    }

    fn string(&mut self, s: &[u8]) {
        self.push(b"\"");
        for &b in s {
            match b {
                b'"' => self.push(b"\\\""),
                b'\\' => self.push(b"\\\\"),
                0..0x20 => self.push(b" "),
                _ => self.push(&[b]),
            }
        }
        self.push(b"\"");
    }

    fn number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            if let Some(d) = digits.get_mut(at) {
                *d = b'0' + (n % 10) as u8;
            }
            n /= 10;
            if n == 0 || at == 0 {
                break;
            }
        }
        self.push(digits.get(at..).unwrap_or_default());
    }
}

/// `predictio_stats()`: the runtime's counters as JSON once it is loaded
/// (a load under way is waited for, up to a second); before that, why not
/// and how long the reads have waited so far.
unsafe extern "C" fn stats_function(ctx: *mut c_void, _argc: c_int, _argv: *mut *mut c_void) {
    // SAFETY: the routine's signature.
    let Some(result_text) = (unsafe { routine::<ResultText>(api::RESULT_TEXT) }) else { return };
    let mut waited_ms = 0;
    while STATE.load(Ordering::Acquire) == LOADING && waited_ms < STATS_WAIT_MS {
        // SAFETY: no preconditions.
        unsafe { usleep(1000) };
        waited_ms += 1;
    }
    if let Some(hooks) = hooks() {
        let mut cap = 4096;
        for _ in 0..2 {
            let buf = sqlite_malloc(cap);
            if buf.is_null() {
                return;
            }
            // SAFETY: `buf` has room for `cap` bytes.
            let len = unsafe { (hooks.stats)(buf, cap) };
            if len <= cap {
                // SAFETY: `len` bytes of text at `buf`, copied by SQLite.
                unsafe { result_text(ctx, buf.cast(), c_int::try_from(len).unwrap_or(0), SQLITE_TRANSIENT) };
                sqlite_free(buf);
                return;
            }
            sqlite_free(buf);
            cap = len;
        }
        return;
    }
    let mut json = Json { buf: [0; 768], len: 0 };
    json.push(b"{\"runtime\":");
    match STATE.load(Ordering::Acquire) {
        FAILED => {
            json.string(b"failed");
            json.push(b",\"error\":");
            // SAFETY: written before FAILED was published.
            let error = unsafe { &*LOAD_ERROR.get() };
            let len = error.iter().position(|&b| b == 0).unwrap_or(error.len());
            json.string(error.get(..len).unwrap_or_default());
        }
        OFF => json.string(b"off"),
        LOADING => json.string(b"loading"),
        _ => json.string(b"not loaded"),
    }
    json.push(b",\"read_wait_us\":");
    json.number(WAITED_NS.load(Ordering::Relaxed) / 1000);
    json.push(b"}");
    // SAFETY: `json.len` bytes of text, copied by SQLite.
    unsafe { result_text(ctx, json.buf.as_ptr().cast(), json.len as c_int, SQLITE_TRANSIENT) };
}

/// Writes `message` to `*err` in memory from `sqlite3_mprintf`.
///
/// # Safety
///
/// `err` is null or SQLite's writable error slot.
unsafe fn set_error(err: *mut *mut c_char, message: &CStr) {
    // SAFETY: the routine's signature; mprintf copies the message.
    unsafe {
        if !err.is_null()
            && let Some(mprintf) = routine::<Mprintf>(api::MPRINTF)
        {
            *err = mprintf(c"%s".as_ptr(), message.as_ptr());
        }
    }
}

/// The signature of an extension entry point.
type EntryPoint = unsafe extern "C" fn(*mut c_void, *mut *mut c_char, *const *const c_void) -> c_int;

/// The extension's entry point: registers the `predictio` VFS as the
/// default (once per process) and `predictio_stats()` on `db`. Stays loaded
/// for the life of the process (`SQLITE_OK_LOAD_PERMANENTLY`), as a VFS
/// must. Starts nothing, unless `PREDICTIO_SQLITE_RUNTIME=eager`.
///
/// # Safety
///
/// Called by SQLite's extension loader with its arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_predictio_init(
    db: *mut c_void,
    err: *mut *mut c_char,
    table: *const *const c_void,
) -> c_int {
    if table.is_null() {
        return SQLITE_ERROR;
    }
    API.store(table.cast_mut(), Ordering::Release);
    if let Err(message) = set_up() {
        // SAFETY: SQLite's error slot.
        unsafe { set_error(err, message) };
        return SQLITE_ERROR;
    }
    // SAFETY: the routine's signature; our VFS is built and lives for the
    // process (registering it again only makes it the default again).
    let registered = unsafe { routine::<VfsRegister>(api::VFS_REGISTER).map(|register| register(VFS.get(), 1)) };
    if registered != Some(SQLITE_OK) {
        // SAFETY: SQLite's error slot.
        unsafe { set_error(err, c"sqlite3_vfs_register failed") };
        return SQLITE_ERROR;
    }
    // SAFETY: the routine's signature; SQLite's connection; the function
    // has no user data and no destructor.
    let rc = unsafe {
        match routine::<CreateFunctionV2>(api::CREATE_FUNCTION_V2) {
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
    // Every later connection gets `predictio_stats()` too (SQLite ignores a
    // second registration of the same entry point).
    // SAFETY: the routine's signature; the entry point has the signature
    // SQLite calls auto extensions with, behind the `void(*)(void)` type.
    unsafe {
        if let Some(auto_extension) = routine::<AutoExtension>(api::AUTO_EXTENSION) {
            let entry: EntryPoint = sqlite3_predictio_init;
            auto_extension(Some(core::mem::transmute::<EntryPoint, unsafe extern "C" fn()>(entry)));
        }
    }
    SQLITE_OK_LOAD_PERMANENTLY
}

/// The entry point under the name SQLite derives from the file name
/// `libpredictio_sqlite.so`, so that `.load` needs no entry point name.
///
/// # Safety
///
/// As [`sqlite3_predictio_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_predictiosqlite_init(
    db: *mut c_void,
    err: *mut *mut c_char,
    table: *const *const c_void,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { sqlite3_predictio_init(db, err, table) }
}
