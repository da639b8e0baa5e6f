//! The few system calls the crate makes directly (everything else goes
//! through aya). The only module allowed `unsafe`.
#![expect(unsafe_code, reason = "the FFI edge of the crate")]

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Waits until `fd` is readable or `timeout` passes. `Ok(true)` when readable;
/// `Ok(false)` on timeout or an interrupting signal.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    // poll(2) counts in milliseconds: round up so that a sub-millisecond
    // timeout still waits instead of spinning.
    let ms = timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int;
    // SAFETY: `pollfd` is a valid, initialised array of one element that lives
    // across the call; the descriptor is borrowed, so it stays open.
    let rc = unsafe { libc::poll(&mut pollfd, 1, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return if err.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(err) };
    }
    Ok(rc > 0)
}

/// Mounts tracefs at `/sys/kernel/tracing` (aya needs it to attach
/// tracepoints; so does the layout check).
#[cfg_attr(predictio_bpf_unavailable, allow(dead_code, reason = "used by the eBPF observer only"))]
pub(crate) fn mount_tracefs() -> io::Result<()> {
    const SOURCE: &CStr = c"nodev";
    const TARGET: &CStr = c"/sys/kernel/tracing";
    const FSTYPE: &CStr = c"tracefs";
    // SAFETY: all strings are NUL-terminated constants; `data` may be null.
    let rc = unsafe { libc::mount(SOURCE.as_ptr(), TARGET.as_ptr(), FSTYPE.as_ptr(), 0, std::ptr::null()) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// `fanotify_init(2)`: a notification-class group whose events carry a
/// read-only descriptor of the file.
pub(crate) fn fanotify_init(flags: libc::c_uint) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as libc::c_uint;
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::fanotify_init(flags, event_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(2)` adding `mask` for the object at `path`.
pub(crate) fn fanotify_mark(
    group: BorrowedFd<'_>,
    flags: libc::c_uint,
    mask: u64,
    path: &std::path::Path,
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `group` is an open fanotify descriptor (borrowed for the call);
    // `path` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::fanotify_mark(group.as_raw_fd(), flags, mask, libc::AT_FDCWD, path.as_ptr()) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// One fanotify event, its descriptor (if any) owned.
pub(crate) struct FanotifyRecord {
    /// `FAN_*` mask bits.
    pub mask: u64,
    /// Process that caused the event (thread-group id).
    pub pid: i32,
    /// The file, opened read-only by the kernel for us.
    pub file: Option<std::fs::File>,
}

/// Size of `struct fanotify_event_metadata`.
pub(crate) const FANOTIFY_METADATA_LEN: usize = 24;

/// The header fields of one `struct fanotify_event_metadata`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FanotifyMetadata {
    pub event_len: usize,
    pub vers: u8,
    pub mask: u64,
    pub fd: i32,
    pub pid: i32,
}

impl FanotifyMetadata {
    /// Reads one header; `bytes` holds at least [`FANOTIFY_METADATA_LEN`].
    pub(crate) fn parse(bytes: &[u8]) -> FanotifyMetadata {
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        FanotifyMetadata {
            event_len: u32_at(0) as usize,
            vers: bytes[4],
            mask: u64::from_ne_bytes(bytes[8..16].try_into().expect("8 bytes")),
            fd: u32_at(16) as i32,
            pid: u32_at(20) as i32,
        }
    }
}

/// One `read(2)` of a fanotify group into `buf`, each event handed to
/// `on_record` with its descriptor owned (closed when dropped). Returns the
/// number of bytes read (0: none queued, for a non-blocking group).
///
/// Reading and parsing are one step so that every descriptor in the buffer is
/// taken exactly once, which is what makes owning them sound.
pub(crate) fn read_fanotify(
    group: &std::fs::File,
    buf: &mut [u8],
    on_record: &mut dyn FnMut(FanotifyRecord),
) -> io::Result<usize> {
    use std::io::Read as _;
    use std::os::fd::FromRawFd;
    let mut reader = group;
    let len = match reader.read(buf) {
        Ok(len) => len,
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut at = 0;
    while at + FANOTIFY_METADATA_LEN <= len {
        let meta = FanotifyMetadata::parse(&buf[at..len]);
        if meta.vers != libc::FANOTIFY_METADATA_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fanotify metadata version {}, expected {}", meta.vers, libc::FANOTIFY_METADATA_VERSION),
            ));
        }
        let file = (meta.fd >= 0).then(|| {
            // SAFETY: the kernel installed this descriptor for us in the event
            // just read; this loop visits each event of the buffer once, so
            // nothing else owns or closes it.
            std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(meta.fd) })
        });
        on_record(FanotifyRecord { mask: meta.mask, pid: meta.pid, file });
        if meta.event_len < FANOTIFY_METADATA_LEN {
            break; // malformed: never loop forever
        }
        at += meta.event_len;
    }
    Ok(len)
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
