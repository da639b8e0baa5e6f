//! The C ABI (`libpredictio_client.so` / `.a`, declared in
//! `include/predictio.h`): a thin layer over [`Client`].
//!
//! Every entry point runs inside [`std::panic::catch_unwind`] and turns a
//! panic into [`PredictioStatus::Panic`]; every pointer is checked for null;
//! list lengths are bounded before a slice is formed. The header is written by
//! hand and a test checks that it declares every `extern "C"` function here.
//!
//! A `predictio_client` may be used from several threads at once.

use std::ffi::{CStr, OsStr, c_char, c_int};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use crate::client::{Client, SendError};
use crate::protocol::{Frame, Handle, MAX_CHILDREN, MAX_PAIRS, RangeList};

/// Status codes returned by the C ABI (`predictio_status` in the header).
/// Negative values are mistakes in the call; `Dropped` is the expected,
/// harmless outcome when no daemon listens or it is busy.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(i32)]
pub enum PredictioStatus {
    /// Sent.
    Ok = 0,
    /// Valid, but dropped (no daemon, daemon busy); counted in the stats.
    Dropped = 1,
    /// A required pointer was null.
    NullArgument = -1,
    /// An invalid argument: inverted range, position out of range, too many
    /// elements, a bad descriptor.
    InvalidArgument = -2,
    /// The handle was never registered with this client, or was
    /// unregistered; nothing was sent.
    UnknownHandle = -3,
    /// predictio panicked (a bug); the call had no effect.
    Panic = -4,
    /// A system call failed.
    SystemError = -5,
    /// `predictio_register`: the client holds
    /// [`MAX_REGISTERED`](crate::client::MAX_REGISTERED) files already;
    /// nothing was registered.
    TooManyHandles = -6,
    /// `predictio_register`: the process (or system) is out of descriptors
    /// (`EMFILE`/`ENFILE`), so the library could not keep its duplicate;
    /// nothing was registered.
    OutOfDescriptors = -7,
}

/// The value `predictio_register` writes to `*handle_out` when it fails
/// (`PREDICTIO_NO_HANDLE` in the header): no handle is ever 0.
pub const NO_HANDLE: u32 = 0;

impl PredictioStatus {
    fn code(self) -> c_int {
        self as c_int
    }
}

/// Counters of a client (`predictio_stats` in the header).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct PredictioStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams dropped (no daemon, busy).
    pub dropped: u64,
    /// Calls refused as invalid.
    pub invalid: u64,
    /// Reconnections after the daemon was absent.
    pub reconnects: u64,
}

/// The opaque client type of the C ABI.
pub struct PredictioClient {
    client: Client,
}

fn guard(body: impl FnOnce() -> PredictioStatus) -> c_int {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or(PredictioStatus::Panic).code()
}

fn status(result: Result<(), SendError>) -> PredictioStatus {
    match result {
        Ok(()) => PredictioStatus::Ok,
        Err(err) if err.is_drop() => PredictioStatus::Dropped,
        Err(SendError::UnknownHandle(_)) => PredictioStatus::UnknownHandle,
        Err(SendError::Encode(_) | SendError::BadDescriptor { .. }) => PredictioStatus::InvalidArgument,
        Err(SendError::TooManyHandles { .. }) => PredictioStatus::TooManyHandles,
        Err(SendError::Duplicate(err)) => match err.raw_os_error() {
            Some(libc::EMFILE | libc::ENFILE) => PredictioStatus::OutOfDescriptors,
            Some(libc::EBADF) => PredictioStatus::InvalidArgument,
            _ => PredictioStatus::SystemError,
        },
        Err(_) => PredictioStatus::SystemError,
    }
}

/// The client behind `client`, or `None` for null.
///
/// # Safety
/// `client` is null or was returned by `predictio_client_new` and not freed.
unsafe fn client_ref<'a>(client: *const PredictioClient) -> Option<&'a Client> {
    // SAFETY: per the contract, non-null means a live PredictioClient.
    unsafe { client.as_ref() }.map(|c| &c.client)
}

/// A slice of `n` values at `ptr`; `None` for null with `n > 0`.
///
/// # Safety
/// `ptr` is null or points at `n` readable, initialized `u64`s that stay
/// valid and unmodified for `'a`. `n` is bounded by the caller.
unsafe fn slice<'a>(ptr: *const u64, n: usize) -> Option<&'a [u64]> {
    if n == 0 {
        return Some(&[]);
    }
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null, `n` elements readable per the contract, and `n` is at
    // most MAX_PAIRS/MAX_CHILDREN so the byte length fits isize.
    Some(unsafe { std::slice::from_raw_parts(ptr, n) })
}

/// Creates a client of the daemon socket at `path` (NULL: the default,
/// `/run/predictio/hint.sock`). A missing daemon is not an error. Returns
/// NULL only when the client's own socket cannot be created.
///
/// # Safety
/// `path` is null or a valid NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_client_new(path: *const c_char) -> *mut PredictioClient {
    catch_unwind(AssertUnwindSafe(|| {
        let default;
        let path = if path.is_null() {
            default = crate::protocol::default_socket_path();
            default.as_path()
        } else {
            // SAFETY: non-null and NUL-terminated per the contract.
            Path::new(OsStr::from_bytes(unsafe { CStr::from_ptr(path) }.to_bytes()))
        };
        match Client::connect(path) {
            Ok(client) => Box::into_raw(Box::new(PredictioClient { client })),
            Err(_) => std::ptr::null_mut(),
        }
    }))
    .unwrap_or(std::ptr::null_mut())
}

/// Frees a client (NULL is ignored). Registered descriptors' duplicates are
/// closed; the daemon forgets the client's handles when the process exits.
///
/// # Safety
/// `client` is null or was returned by `predictio_client_new` and is not used
/// again.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_client_free(client: *mut PredictioClient) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if !client.is_null() {
            // SAFETY: per the contract, a pointer from Box::into_raw, freed once.
            drop(unsafe { Box::from_raw(client) });
        }
    }));
}

/// Registers the open descriptor `fd` and writes its handle to `handle_out`.
/// The daemon receives the descriptor itself; a missing daemon still yields a
/// handle (the file is registered when the daemon appears). On any failure
/// `*handle_out` is set to [`NO_HANDLE`] (when `handle_out` is not null).
///
/// # Safety
/// `client` as for `predictio_client_free`; `handle_out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_register(client: *const PredictioClient, fd: c_int, handle_out: *mut u32) -> c_int {
    guard(|| {
        if handle_out.is_null() {
            return PredictioStatus::NullArgument;
        }
        // SAFETY: non-null and writable per the contract. Written first, so
        // that every failure below (a panic included) leaves it defined.
        unsafe { handle_out.write(NO_HANDLE) };
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        if fd < 0 {
            return PredictioStatus::InvalidArgument;
        }
        // SAFETY: `fd` is only borrowed for this call (to duplicate and send
        // it); an fd the caller does not own fails with EBADF, reported below.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        match client.register(&borrowed) {
            Ok(handle) => {
                // SAFETY: non-null and writable per the contract.
                unsafe { handle_out.write(handle.0) };
                PredictioStatus::Ok
            }
            Err(err) => status(Err(err)),
        }
    })
}

/// Forgets `handle` here and at the daemon.
///
/// # Safety
/// `client` as for `predictio_client_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_unregister(client: *const PredictioClient, handle: u32) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        status(client.unregister(Handle(handle)))
    })
}

/// Sends one frame built from a pair list given as two arrays.
///
/// # Safety
/// `client` as for `predictio_client_free`; `first`/`second` null or `n`
/// readable values each.
unsafe fn send_pairs(
    client: *const PredictioClient,
    first: *const u64,
    second: *const u64,
    n: usize,
    build: impl FnOnce(RangeList<'_>) -> Frame<'_>,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        if n > MAX_PAIRS {
            return PredictioStatus::InvalidArgument;
        }
        // SAFETY: forwarded contract; n is bounded above.
        let (Some(first), Some(second)) = (unsafe { slice(first, n) }, unsafe { slice(second, n) }) else {
            return PredictioStatus::NullArgument;
        };
        let Some(list) = RangeList::from_split(first, second) else { return PredictioStatus::InvalidArgument };
        status(client.send(&build(list)))
    })
}

/// Asks for the half-open page ranges `[starts[i], ends[i])`, `i < n`.
///
/// # Safety
/// `client` as for `predictio_client_free`; `starts` and `ends` point at `n`
/// readable values each (may be null when `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_pages(
    client: *const PredictioClient,
    handle: u32,
    starts: *const u64,
    ends: *const u64,
    n: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { send_pairs(client, starts, ends, n, |ranges| Frame::Pages { handle: Handle(handle), ranges }) }
}

/// Reports the byte segments `[offsets[i], offsets[i] + lens[i])` the program
/// will read next, in order.
///
/// # Safety
/// As for `predictio_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_read_plan(
    client: *const PredictioClient,
    handle: u32,
    offsets: *const u64,
    lens: *const u64,
    n: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { send_pairs(client, offsets, lens, n, |segments| Frame::ReadPlan { handle: Handle(handle), segments }) }
}

/// Reports a read of `len` bytes at `offset`.
///
/// # Safety
/// `client` as for `predictio_client_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_stream_read(
    client: *const PredictioClient,
    handle: u32,
    offset: u64,
    len: u64,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        status(client.stream_read(Handle(handle), offset, len))
    })
}

/// Reports a B-tree descent from `parent_page` into `children[position]`,
/// where `children` holds the parent's `n` child pages in key order.
///
/// # Safety
/// `client` as for `predictio_client_free`; `children` points at `n` readable
/// values (may be null when `n == 0`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_tree_child_enter(
    client: *const PredictioClient,
    handle: u32,
    parent_page: u64,
    position: u32,
    children: *const u64,
    n: usize,
) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        if n > MAX_CHILDREN {
            return PredictioStatus::InvalidArgument;
        }
        // SAFETY: forwarded contract; n is bounded above.
        let Some(children) = (unsafe { slice(children, n) }) else { return PredictioStatus::NullArgument };
        status(client.tree_child_enter(Handle(handle), parent_page, position, children))
    })
}

/// Reports a model's tensor byte ranges `[offsets[i], offsets[i] + lens[i])`
/// in load order.
///
/// # Safety
/// As for `predictio_pages`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_tensor_layout(
    client: *const PredictioClient,
    handle: u32,
    offsets: *const u64,
    lens: *const u64,
    n: usize,
) -> c_int {
    // SAFETY: forwarded contract.
    unsafe { send_pairs(client, offsets, lens, n, |ranges| Frame::TensorLayout { handle: Handle(handle), ranges }) }
}

/// Reports that the model loader starts layer `layer`.
///
/// # Safety
/// `client` as for `predictio_client_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_layer_start(client: *const PredictioClient, handle: u32, layer: u32) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        status(client.layer_start(Handle(handle), layer))
    })
}

/// Turns buffering on (`on != 0`) or off. While on, hints are collected into
/// one datagram sent when full (~2 300 small hints) or on `predictio_flush`;
/// the hint functions then return `PREDICTIO_OK` once the hint is buffered.
/// Turning buffering off flushes (and returns the flush's status).
///
/// # Safety
/// `client` as for `predictio_client_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_set_buffering(client: *const PredictioClient, on: c_int) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        status(client.set_buffering(on != 0))
    })
}

/// Sends the buffered hints now.
///
/// # Safety
/// `client` as for `predictio_client_free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_flush(client: *const PredictioClient) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        status(client.flush())
    })
}

/// Writes the client's counters to `out`.
///
/// # Safety
/// `client` as for `predictio_client_free`; `out` null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn predictio_client_stats(client: *const PredictioClient, out: *mut PredictioStats) -> c_int {
    guard(|| {
        // SAFETY: forwarded contract.
        let Some(client) = (unsafe { client_ref(client) }) else { return PredictioStatus::NullArgument };
        if out.is_null() {
            return PredictioStatus::NullArgument;
        }
        let stats = client.stats();
        let value = PredictioStats {
            sent: stats.sent,
            dropped: stats.dropped,
            invalid: stats.invalid,
            reconnects: stats.reconnects,
        };
        // SAFETY: non-null and writable per the contract.
        unsafe { out.write(value) };
        PredictioStatus::Ok
    })
}

/// A static, NUL-terminated description of a status code (never NULL).
#[unsafe(no_mangle)]
pub extern "C" fn predictio_status_str(status: c_int) -> *const c_char {
    let text: &'static CStr = match status {
        0 => c"ok",
        1 => c"dropped (no daemon or daemon busy)",
        -1 => c"null argument",
        -2 => c"invalid argument",
        -3 => c"unknown handle",
        -4 => c"internal panic",
        -5 => c"system error",
        -6 => c"too many handles (the client holds 4096 files)",
        -7 => c"out of file descriptors (EMFILE/ENFILE); nothing registered",
        _ => c"unknown status",
    };
    text.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_arguments_are_refused() {
        use std::os::fd::AsRawFd;
        // SAFETY: null pointers are part of every function's contract.
        unsafe {
            assert_eq!(predictio_stream_read(std::ptr::null(), 1, 0, 1), PredictioStatus::NullArgument.code());
            let client = predictio_client_new(c"/nonexistent/predictio.sock".as_ptr());
            assert!(!client.is_null());
            assert_eq!(predictio_register(client, 0, std::ptr::null_mut()), PredictioStatus::NullArgument.code());
            assert_eq!(
                predictio_pages(client, 1, std::ptr::null(), std::ptr::null(), 3),
                PredictioStatus::NullArgument.code()
            );
            assert_eq!(
                predictio_pages(client, 1, std::ptr::null(), std::ptr::null(), 0),
                PredictioStatus::UnknownHandle.code(),
                "handle 1 was never registered"
            );
            let starts = [5u64];
            let ends = [1u64];
            let mut handle = 77;
            let file = std::fs::File::open("/proc/self/exe").expect("open");
            assert_eq!(predictio_register(client, file.as_raw_fd(), &mut handle), PredictioStatus::Ok.code());
            assert_eq!(handle, 1);
            assert_eq!(
                predictio_pages(client, 1, starts.as_ptr(), ends.as_ptr(), 1),
                PredictioStatus::InvalidArgument.code()
            );
            assert_eq!(
                predictio_pages(client, 1, starts.as_ptr(), ends.as_ptr(), usize::MAX),
                PredictioStatus::InvalidArgument.code()
            );
            let mut handle = 99;
            assert_eq!(predictio_register(client, -1, &mut handle), PredictioStatus::InvalidArgument.code());
            assert_eq!(handle, NO_HANDLE, "a failed registration writes a defined handle");
            assert_eq!(predictio_unregister(client, 42), PredictioStatus::UnknownHandle.code());
            let mut stats = PredictioStats::default();
            assert_eq!(predictio_client_stats(client, &mut stats), 0);
            assert_eq!(stats.dropped, 1, "the registration, made with no daemon");
            assert_eq!(stats.invalid, 3, "the unknown handles 1 and 42, the inverted range");
            predictio_client_free(client);
            predictio_client_free(std::ptr::null_mut());
        }
    }

    #[test]
    fn panics_become_status() {
        assert_eq!(guard(|| panic!("boom")), PredictioStatus::Panic.code());
    }
}
