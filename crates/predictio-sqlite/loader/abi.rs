//! What the loader (`loader.rs`, built on its own without std) and the
//! runtime library share: the parts of SQLite's C ABI the loader uses,
//! declared by hand (the loader has no dependencies), and the table of
//! functions the runtime library exports to the loader.
//!
//! Only `core` is used here, so both sides compile this one file. The
//! SQLite declarations are checked against `libsqlite3-sys` by the crate's
//! tests (`tests/abi.rs`).

use core::ffi::{CStr, c_char, c_int, c_void};

/// `sqlite3_int64`.
pub type Int64 = i64;

pub const SQLITE_OK: c_int = 0;
pub const SQLITE_ERROR: c_int = 1;
pub const SQLITE_NOTFOUND: c_int = 12;
pub const SQLITE_IOERR: c_int = 10;
pub const SQLITE_CANTOPEN: c_int = 14;
pub const SQLITE_OK_LOAD_PERMANENTLY: c_int = 256;
pub const SQLITE_OPEN_MAIN_DB: c_int = 0x0000_0100;
pub const SQLITE_OPEN_WAL: c_int = 0x0008_0000;
pub const SQLITE_SHM_UNLOCK: c_int = 1;
pub const SQLITE_SHM_LOCK: c_int = 2;
pub const SQLITE_SHM_SHARED: c_int = 4;
pub const SQLITE_SHM_EXCLUSIVE: c_int = 8;
pub const SQLITE_UTF8: c_int = 1;
pub const SQLITE_LOCK_NONE: c_int = 0;

/// `sqlite3_file`: the methods pointer every VFS file starts with.
#[repr(C)]
pub struct File {
    pub methods: *const IoMethods,
}

/// `sqlite3_io_methods`, version 3.
#[repr(C)]
pub struct IoMethods {
    pub version: c_int,
    pub close: Option<unsafe extern "C" fn(*mut File) -> c_int>,
    pub read: Option<unsafe extern "C" fn(*mut File, *mut c_void, c_int, Int64) -> c_int>,
    pub write: Option<unsafe extern "C" fn(*mut File, *const c_void, c_int, Int64) -> c_int>,
    pub truncate: Option<unsafe extern "C" fn(*mut File, Int64) -> c_int>,
    pub sync: Option<unsafe extern "C" fn(*mut File, c_int) -> c_int>,
    pub file_size: Option<unsafe extern "C" fn(*mut File, *mut Int64) -> c_int>,
    pub lock: Option<unsafe extern "C" fn(*mut File, c_int) -> c_int>,
    pub unlock: Option<unsafe extern "C" fn(*mut File, c_int) -> c_int>,
    pub check_reserved_lock: Option<unsafe extern "C" fn(*mut File, *mut c_int) -> c_int>,
    pub file_control: Option<unsafe extern "C" fn(*mut File, c_int, *mut c_void) -> c_int>,
    pub sector_size: Option<unsafe extern "C" fn(*mut File) -> c_int>,
    pub device_characteristics: Option<unsafe extern "C" fn(*mut File) -> c_int>,
    pub shm_map: Option<unsafe extern "C" fn(*mut File, c_int, c_int, c_int, *mut *mut c_void) -> c_int>,
    pub shm_lock: Option<unsafe extern "C" fn(*mut File, c_int, c_int, c_int) -> c_int>,
    pub shm_barrier: Option<unsafe extern "C" fn(*mut File)>,
    pub shm_unmap: Option<unsafe extern "C" fn(*mut File, c_int) -> c_int>,
    pub fetch: Option<unsafe extern "C" fn(*mut File, Int64, c_int, *mut *mut c_void) -> c_int>,
    pub unfetch: Option<unsafe extern "C" fn(*mut File, Int64, *mut c_void) -> c_int>,
}

/// `sqlite3_syscall_ptr`.
pub type SyscallPtr = Option<unsafe extern "C" fn()>;
/// What `xDlSym` returns.
pub type DlSym = Option<unsafe extern "C" fn(*mut Vfs, *mut c_void, *const c_char)>;

/// `sqlite3_vfs`, version 3.
#[repr(C)]
pub struct Vfs {
    pub version: c_int,
    pub size_of_file: c_int,
    pub max_pathname: c_int,
    pub next: *mut Vfs,
    pub name: *const c_char,
    pub app_data: *mut c_void,
    pub open: Option<unsafe extern "C" fn(*mut Vfs, *const c_char, *mut File, c_int, *mut c_int) -> c_int>,
    pub delete: Option<unsafe extern "C" fn(*mut Vfs, *const c_char, c_int) -> c_int>,
    pub access: Option<unsafe extern "C" fn(*mut Vfs, *const c_char, c_int, *mut c_int) -> c_int>,
    pub full_pathname: Option<unsafe extern "C" fn(*mut Vfs, *const c_char, c_int, *mut c_char) -> c_int>,
    pub dl_open: Option<unsafe extern "C" fn(*mut Vfs, *const c_char) -> *mut c_void>,
    pub dl_error: Option<unsafe extern "C" fn(*mut Vfs, c_int, *mut c_char)>,
    pub dl_sym: Option<unsafe extern "C" fn(*mut Vfs, *mut c_void, *const c_char) -> DlSym>,
    pub dl_close: Option<unsafe extern "C" fn(*mut Vfs, *mut c_void)>,
    pub randomness: Option<unsafe extern "C" fn(*mut Vfs, c_int, *mut c_char) -> c_int>,
    pub sleep: Option<unsafe extern "C" fn(*mut Vfs, c_int) -> c_int>,
    pub current_time: Option<unsafe extern "C" fn(*mut Vfs, *mut f64) -> c_int>,
    pub get_last_error: Option<unsafe extern "C" fn(*mut Vfs, c_int, *mut c_char) -> c_int>,
    pub current_time_int64: Option<unsafe extern "C" fn(*mut Vfs, *mut Int64) -> c_int>,
    pub set_system_call: Option<unsafe extern "C" fn(*mut Vfs, *const c_char, SyscallPtr) -> c_int>,
    pub get_system_call: Option<unsafe extern "C" fn(*mut Vfs, *const c_char) -> SyscallPtr>,
    pub next_system_call: Option<unsafe extern "C" fn(*mut Vfs, *const c_char) -> *const c_char>,
}

/// Indexes, in pointers, of the routines the loader calls in
/// `sqlite3_api_routines`, the table SQLite hands an extension (every
/// field of it is one pointer). Fields are only ever appended to it.
pub mod api {
    pub const FREE: usize = 58;
    pub const LIBVERSION_NUMBER: usize = 67;
    pub const MPRINTF: usize = 69;
    pub const RESULT_TEXT: usize = 85;
    pub const VFS_FIND: usize = 141;
    pub const VFS_REGISTER: usize = 142;
    pub const CREATE_FUNCTION_V2: usize = 162;
    pub const AUTO_EXTENSION: usize = 192;
    pub const MALLOC64: usize = 197;
    pub const DATABASE_FILE_OBJECT: usize = 251;
    /// The first SQLite whose table has `database_file_object`.
    pub const DATABASE_FILE_OBJECT_SINCE: i32 = 3_031_000;
}

/// The symbol under which the runtime library exports its [`Hooks`].
pub const HOOKS_SYMBOL: &CStr = c"predictio_sqlite_runtime_hooks";

/// The version of [`Hooks`] both sides must agree on.
pub const HOOKS_VERSION: u32 = 2;

/// What the runtime library offers the loader. An observer is an opaque
/// pointer from `open`, used by one SQLite file at a time and given back
/// to `close` once.
#[repr(C)]
pub struct Hooks {
    /// [`HOOKS_VERSION`].
    pub version: u32,
    /// An observer of the main database file at `path` (NUL-terminated),
    /// or null if none could be made.
    pub open: unsafe extern "C" fn(path: *const c_char) -> *mut c_void,
    /// SQLite is about to read `len` bytes at `offset`.
    pub before_read: unsafe extern "C" fn(observer: *mut c_void, offset: u64, len: usize),
    /// SQLite read `len` bytes at `offset` into `bytes`, in `elapsed_ns`.
    pub after_read:
        unsafe extern "C" fn(observer: *mut c_void, offset: u64, bytes: *const u8, len: usize, elapsed_ns: u64),
    /// The connection released its last lock on the file (`xUnlock` to
    /// `SQLITE_LOCK_NONE`): its transaction is over, and no statement's
    /// cursor goes on past it.
    pub unlocked: unsafe extern "C" fn(observer: *mut c_void),
    /// The file is closed: the observer is dropped.
    pub close: unsafe extern "C" fn(observer: *mut c_void),
    /// Writes the runtime's counters as JSON to `out` (at most `cap`
    /// bytes, not NUL-terminated) after letting queued prefetches settle;
    /// returns the JSON's full length (more than `cap`: call again with
    /// room for it).
    pub stats: unsafe extern "C" fn(out: *mut u8, cap: usize) -> usize,
}
