//! The libc edge of the client: the only `unsafe` code of this crate outside
//! the C ABI's pointer handling, each block with a `SAFETY:` comment.
//!
//! # References
//! - `unix(7)` (autobind, `SCM_RIGHTS`), `socket(2)`, `bind(2)`, `connect(2)`,
//!   `sendmsg(2)`, `cmsg(3)`.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::protocol::MAX_FDS_PER_DATAGRAM;

/// A non-blocking, close-on-exec `AF_UNIX` datagram socket.
pub(crate) fn dgram_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; no memory is passed.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket returned a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Binds `fd` to a kernel-chosen abstract address (`unix(7)`, "autobind"):
/// the daemon keys client state by sender address, so a client must have one.
pub(crate) fn autobind(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let len = mem::size_of::<libc::sa_family_t>() as libc::socklen_t;
    // SAFETY: `addr` is a live sockaddr_un and `len` does not exceed its size;
    // an address of just the family asks the kernel to autobind.
    let rc = unsafe { libc::bind(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Connects the datagram socket `fd` to the socket at `path`.
pub(crate) fn connect(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    // SAFETY: sockaddr_un is plain old data; all-zero is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    let len = (mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    // SAFETY: `addr` is a live, NUL-terminated sockaddr_un of at least `len`
    // bytes.
    let rc = unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Control-message space for [`MAX_FDS_PER_DATAGRAM`] descriptors, aligned for
/// `cmsghdr`.
#[repr(C, align(8))]
struct CmsgSpace([u8; 128]);

/// Sends `bytes` as one datagram on the connected socket `fd`, passing `fds`
/// with `SCM_RIGHTS`. Never blocks (`MSG_DONTWAIT`) and never raises
/// `SIGPIPE` (`MSG_NOSIGNAL`).
pub(crate) fn send(fd: BorrowedFd<'_>, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_DATAGRAM {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut iov = libc::iovec { iov_base: bytes.as_ptr() as *mut libc::c_void, iov_len: bytes.len() };
    // SAFETY: msghdr is plain old data; all-zero is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut space = CmsgSpace([0; 128]);
    if !fds.is_empty() {
        let data_len = mem::size_of_val(fds) as u32;
        // SAFETY: CMSG_SPACE is pure arithmetic.
        let needed = unsafe { libc::CMSG_SPACE(data_len) } as usize;
        debug_assert!(needed <= space.0.len());
        msg.msg_control = space.0.as_mut_ptr().cast();
        msg.msg_controllen = needed as _;
        // SAFETY: msg_control points at `needed` writable, aligned bytes, so
        // the first header fits and CMSG_FIRSTHDR returns it (non-null).
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(data_len) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(cmsg), data_len as usize);
        }
    }
    // SAFETY: `msg` points at live iovec/control buffers for the duration of
    // the call; the kernel only reads them.
    let rc = unsafe { libc::sendmsg(fd.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A close-on-exec duplicate of `fd`, kept so that a restarted daemon can be
/// told about the file again.
pub(crate) fn dup_cloexec(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// Checks, as the daemon will, that `fd` is a regular file open for reading
/// (not `O_PATH`, not write-only). Returns what is wrong otherwise.
pub(crate) fn check_registrable(fd: BorrowedFd<'_>) -> Result<(), &'static str> {
    // SAFETY: plain syscall on a borrowed descriptor; no memory is passed.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err("not an open descriptor");
    }
    if flags & libc::O_PATH != 0 || flags & libc::O_ACCMODE == libc::O_WRONLY {
        return Err("not open for reading");
    }
    // SAFETY: `struct stat` is plain old data; all-zero is a valid value.
    let mut st: libc::stat = unsafe { mem::zeroed() };
    // SAFETY: `st` is a live, writable struct stat.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err("not an open descriptor");
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file");
    }
    Ok(())
}

/// Incremented in the child after every `fork(2)`.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

extern "C" fn after_fork_in_child() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// How many times this process is a fork child of a process that used the
/// client (0 in the original process). A client compares it with the value
/// it saw last to notice that it now runs in a child: the daemon keys
/// handles by pid, so the child must register its files again.
pub(crate) fn fork_generation() -> u64 {
    ATFORK.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic, which is
        // async-signal-safe and valid in a fork child. The handler lives in
        // this library's code, which stays mapped while clients exist.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_in_child));
        }
    });
    FORK_GENERATION.load(Ordering::Relaxed)
}
