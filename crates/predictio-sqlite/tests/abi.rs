//! The loader's hand-written declarations of SQLite's C ABI
//! (`loader/abi.rs`) agree with `libsqlite3-sys`'s: the routines table's
//! indexes, the structs' layouts and the constants.
#![cfg(feature = "extension")]

use std::mem::{offset_of, size_of};

use libsqlite3_sys as ffi;

#[path = "../loader/abi.rs"]
#[allow(dead_code)]
mod abi;

/// The index, in pointers, of a field of `sqlite3_api_routines`.
macro_rules! index_of {
    ($field:ident) => {
        offset_of!(ffi::sqlite3_api_routines, $field) / size_of::<usize>()
    };
}

#[test]
fn the_routines_are_where_sqlite_has_them() {
    assert_eq!(abi::api::FREE, index_of!(free));
    assert_eq!(abi::api::LIBVERSION_NUMBER, index_of!(libversion_number));
    assert_eq!(abi::api::MPRINTF, index_of!(mprintf));
    assert_eq!(abi::api::RESULT_TEXT, index_of!(result_text));
    assert_eq!(abi::api::VFS_FIND, index_of!(vfs_find));
    assert_eq!(abi::api::VFS_REGISTER, index_of!(vfs_register));
    assert_eq!(abi::api::CREATE_FUNCTION_V2, index_of!(create_function_v2));
    assert_eq!(abi::api::AUTO_EXTENSION, index_of!(auto_extension));
    assert_eq!(abi::api::MALLOC64, index_of!(malloc64));
    assert_eq!(abi::api::DATABASE_FILE_OBJECT, index_of!(database_file_object));
    // Every field is one pointer, so an index is an offset.
    assert_eq!(size_of::<ffi::sqlite3_api_routines>() % size_of::<usize>(), 0);
}

#[test]
fn the_structs_have_sqlites_layout() {
    assert_eq!(size_of::<abi::Vfs>(), size_of::<ffi::sqlite3_vfs>());
    assert_eq!(offset_of!(abi::Vfs, size_of_file), offset_of!(ffi::sqlite3_vfs, szOsFile));
    assert_eq!(offset_of!(abi::Vfs, app_data), offset_of!(ffi::sqlite3_vfs, pAppData));
    assert_eq!(offset_of!(abi::Vfs, open), offset_of!(ffi::sqlite3_vfs, xOpen));
    assert_eq!(offset_of!(abi::Vfs, current_time_int64), offset_of!(ffi::sqlite3_vfs, xCurrentTimeInt64));
    assert_eq!(offset_of!(abi::Vfs, next_system_call), offset_of!(ffi::sqlite3_vfs, xNextSystemCall));
    assert_eq!(size_of::<abi::IoMethods>(), size_of::<ffi::sqlite3_io_methods>());
    assert_eq!(offset_of!(abi::IoMethods, read), offset_of!(ffi::sqlite3_io_methods, xRead));
    assert_eq!(offset_of!(abi::IoMethods, shm_lock), offset_of!(ffi::sqlite3_io_methods, xShmLock));
    assert_eq!(offset_of!(abi::IoMethods, fetch), offset_of!(ffi::sqlite3_io_methods, xFetch));
    assert_eq!(offset_of!(abi::IoMethods, unfetch), offset_of!(ffi::sqlite3_io_methods, xUnfetch));
    assert_eq!(size_of::<abi::File>(), size_of::<ffi::sqlite3_file>());
}

#[test]
fn the_constants_are_sqlites() {
    assert_eq!(abi::SQLITE_OK, ffi::SQLITE_OK);
    assert_eq!(abi::SQLITE_ERROR, ffi::SQLITE_ERROR);
    assert_eq!(abi::SQLITE_NOTFOUND, ffi::SQLITE_NOTFOUND);
    assert_eq!(abi::SQLITE_IOERR, ffi::SQLITE_IOERR);
    assert_eq!(abi::SQLITE_CANTOPEN, ffi::SQLITE_CANTOPEN);
    assert_eq!(abi::SQLITE_OK_LOAD_PERMANENTLY, ffi::SQLITE_OK_LOAD_PERMANENTLY);
    assert_eq!(abi::SQLITE_OPEN_MAIN_DB, ffi::SQLITE_OPEN_MAIN_DB);
    assert_eq!(abi::SQLITE_OPEN_WAL, ffi::SQLITE_OPEN_WAL);
    assert_eq!(abi::SQLITE_SHM_UNLOCK, ffi::SQLITE_SHM_UNLOCK);
    assert_eq!(abi::SQLITE_LOCK_NONE, ffi::SQLITE_LOCK_NONE);
    assert_eq!(abi::SQLITE_SHM_SHARED, ffi::SQLITE_SHM_SHARED);
    assert_eq!(abi::SQLITE_SHM_LOCK, ffi::SQLITE_SHM_LOCK);
    assert_eq!(abi::SQLITE_SHM_EXCLUSIVE, ffi::SQLITE_SHM_EXCLUSIVE);
    assert_eq!(abi::SQLITE_UTF8, ffi::SQLITE_UTF8);
    assert_eq!(ffi::SQLITE_TRANSIENT().map(|f| f as usize as isize), Some(-1));
}
