//! The FFI edge: the runtime's functions for the loader
//! (`libpredictio_sqlite.so`, `loader/loader.rs`), exported as one table,
//! [`predictio_sqlite_runtime_hooks`]. The only module with `unsafe`.
//!
//! The loader is the VFS shim: it times SQLite's reads of main database
//! files and, once it has loaded this library, gives each file an
//! observer ([`DbObserver::lazy`] behind a [`SharedObserver`]) and shows it
//! the pages read. Every function runs inside `catch_unwind`: a panic
//! while observing is swallowed and never reaches SQLite.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::time::Duration;

use crate::abi::{HOOKS_VERSION, Hooks};
use crate::observer::{DbObserver, Prefetcher, SharedObserver};

/// Runs `f`, turning a panic into `fallback`.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// The table the loader looks up (by this name, `abi::HOOKS_SYMBOL`) after
/// loading this library.
#[unsafe(no_mangle)]
#[allow(non_upper_case_globals)]
pub static predictio_sqlite_runtime_hooks: Hooks =
    Hooks { version: HOOKS_VERSION, open, before_read, after_read, unlocked, close, stats };

/// A lazy observer of the database at `path`, or null (a path that is not
/// UTF-8, or a panic).
unsafe extern "C" fn open(path: *const c_char) -> *mut c_void {
    guard(ptr::null_mut(), || {
        if path.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: the loader passes SQLite's NUL-terminated name of a main
        // database file, valid during the call.
        let Ok(path) = unsafe { CStr::from_ptr(path) }.to_str() else { return ptr::null_mut() };
        // The runtime starts at the first read from the device, not here: a
        // cached database never starts it.
        Box::into_raw(Box::new(SharedObserver::new(DbObserver::lazy(path)))).cast()
    })
}

/// The observer behind `observer`.
///
/// # Safety
///
/// `observer` came from [`open`] and has not been given to [`close`].
unsafe fn observer<'a>(observer: *mut c_void) -> &'a SharedObserver {
    // SAFETY: per the caller.
    unsafe { &*observer.cast::<SharedObserver>() }
}

unsafe extern "C" fn before_read(observer_ptr: *mut c_void, offset: u64, len: usize) {
    // SAFETY: the loader passes an observer from `open`, not yet closed.
    guard((), || unsafe { observer(observer_ptr) }.before_read(offset, len));
}

unsafe extern "C" fn after_read(observer_ptr: *mut c_void, offset: u64, bytes: *const u8, len: usize, elapsed_ns: u64) {
    guard((), || {
        if bytes.is_null() {
            return;
        }
        // SAFETY: the loader passes `len` bytes SQLite just read (or its
        // copy of them), which we only read during the call.
        let bytes = unsafe { std::slice::from_raw_parts(bytes, len) };
        // SAFETY: an observer from `open`, not yet closed.
        unsafe { observer(observer_ptr) }.after_read(offset, bytes, Duration::from_nanos(elapsed_ns));
    });
}

unsafe extern "C" fn unlocked(observer_ptr: *mut c_void) {
    // SAFETY: the loader passes an observer from `open`, not yet closed.
    guard((), || unsafe { observer(observer_ptr) }.unlocked());
}

unsafe extern "C" fn close(observer_ptr: *mut c_void) {
    guard((), || {
        if !observer_ptr.is_null() {
            // SAFETY: from `open` (Box::into_raw), given back once.
            drop(unsafe { Box::from_raw(observer_ptr.cast::<SharedObserver>()) });
        }
    });
}

/// The runtime's counters as JSON, after waiting (up to 1 s) for the
/// executor to drain its queue.
unsafe extern "C" fn stats(out: *mut u8, cap: usize) -> usize {
    guard(0, || {
        let json = match Prefetcher::global() {
            Ok(prefetcher) => {
                // Settle the queued requests so the counters are final.
                prefetcher.executor().wait_idle(Duration::from_secs(1));
                crate::json::to_string(&prefetcher.stats())
                    .unwrap_or_else(|err| crate::json::object_of_string("error", &err.to_string()))
            }
            Err(err) => crate::json::object_of_string("error", &err.to_string()),
        };
        if !out.is_null() && json.len() <= cap {
            // SAFETY: the loader's buffer holds `cap` bytes.
            unsafe { ptr::copy_nonoverlapping(json.as_ptr(), out, json.len()) };
        }
        json.len()
    })
}
