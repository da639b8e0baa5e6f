//! The hint server's socket syscalls: `SO_PASSCRED`, `recvmsg(2)` with
//! `SCM_CREDENTIALS` and `SCM_RIGHTS`, `poll(2)`, `fcntl(F_GETFL)`.
//!
//! Received descriptors are wrapped in [`OwnedFd`] the moment they are parsed
//! out of the control message, so none can leak: whatever the caller does not
//! keep is closed when dropped. They are received with `MSG_CMSG_CLOEXEC`.
//!
//! # References
//! - `unix(7)` (`SO_PASSCRED`, `SCM_CREDENTIALS`, `SCM_RIGHTS`, autobind),
//!   `recvmsg(2)`, `cmsg(3)`, `poll(2)`, `fcntl(2)`.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Kernel-verified credentials of a datagram's sender (`struct ucred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Credentials {
    /// Process id (thread-group id), as seen from the receiver's pid
    /// namespace; 0 when the sender is not visible there.
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Longest `sun_path`.
pub const SUN_PATH_LEN: usize = 108;

/// A sender's socket address: the bytes of `sun_path` that the kernel
/// reported (an abstract address starts with a NUL byte). Empty when the
/// sender is unbound.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct SenderAddr {
    bytes: [u8; SUN_PATH_LEN],
    len: u8,
}

impl SenderAddr {
    /// The address bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// True for an unbound (anonymous) sender.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::hash::Hash for SenderAddr {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl std::fmt::Debug for SenderAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = self.as_bytes();
        match bytes.split_first() {
            Some((0, name)) => write!(f, "@{}", String::from_utf8_lossy(name)),
            _ => write!(f, "{}", String::from_utf8_lossy(bytes)),
        }
    }
}

/// What one `recvmsg` brought.
#[derive(Debug)]
pub struct Received {
    /// Bytes of payload in the buffer.
    pub len: usize,
    /// The datagram was larger than the buffer (`MSG_TRUNC`).
    pub truncated: bool,
    /// Control data did not fit (`MSG_CTRUNC`): the kernel closed the
    /// descriptors that did not fit.
    pub control_truncated: bool,
    /// `SCM_CREDENTIALS`, when present.
    pub credentials: Option<Credentials>,
    /// The sender's address.
    pub sender: SenderAddr,
}

/// Most descriptors accepted per datagram; more are closed by the kernel and
/// reported as `control_truncated`.
pub const MAX_FDS: usize = 16;

/// Control buffer: one `ucred` message plus [`MAX_FDS`] descriptors, with
/// `cmsghdr` alignment. CMSG_SPACE(12) = 32, CMSG_SPACE(64) = 80 on 64-bit.
#[repr(C, align(8))]
struct Control([u8; 112]);

/// The exact control length offered to the kernel.
fn control_len() -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    unsafe {
        libc::CMSG_SPACE(mem::size_of::<libc::ucred>() as u32) as usize
            + libc::CMSG_SPACE((MAX_FDS * mem::size_of::<RawFd>()) as u32) as usize
    }
}

fn set_int_option(fd: BorrowedFd<'_>, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `setsockopt(SO_PASSCRED, 1)`: every datagram then carries the sender's
/// kernel-verified `SCM_CREDENTIALS`, whether or not the sender attached them.
pub fn set_passcred(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_PASSCRED, 1)
}

/// Raises the receive buffer to `bytes` (`SO_RCVBUFFORCE` when privileged,
/// else `SO_RCVBUF`, which the kernel caps at `net.core.rmem_max`).
pub fn set_recv_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, value)
        .or_else(|_| set_int_option(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, value))
}

/// Receives one datagram without blocking into `buf`, appending any passed
/// descriptors to `fds` (close-on-exec). `Ok(None)` when nothing is queued
/// (or on `EINTR`).
pub fn recv_datagram(fd: BorrowedFd<'_>, buf: &mut [u8], fds: &mut Vec<OwnedFd>) -> io::Result<Option<Received>> {
    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: sockaddr_un and msghdr are plain old data; all-zero is valid.
    let mut addr: libc::sockaddr_un = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    let mut control = Control([0; 112]);
    let offered = control_len().min(control.0.len());
    msg.msg_name = (&mut addr as *mut libc::sockaddr_un).cast();
    msg.msg_namelen = mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.0.as_mut_ptr().cast();
    msg.msg_controllen = offered as _;
    // SAFETY: every pointer in `msg` references a live buffer of the stated
    // size for the duration of the call.
    let rc = unsafe { libc::recvmsg(fd.as_raw_fd(), &mut msg, libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            // Nothing queued (or a signal arrived first): the caller polls.
            Some(libc::EAGAIN | libc::EINTR) => Ok(None),
            _ => Err(err),
        };
    }
    let mut credentials = None;
    // SAFETY: the kernel filled at most msg_controllen bytes of `control`
    // with well-formed cmsghdrs; CMSG_FIRSTHDR/NXTHDR stay inside it.
    let mut cmsg = unsafe { libc::CMSG_FIRSTHDR(&msg) };
    while !cmsg.is_null() {
        // SAFETY: non-null headers returned by CMSG_FIRSTHDR/NXTHDR lie
        // inside `control`; reads are unaligned-safe.
        let header = unsafe { cmsg.read_unaligned() };
        // SAFETY: as above; CMSG_DATA points into the same message.
        let data = unsafe { libc::CMSG_DATA(cmsg) };
        // SAFETY: CMSG_LEN is pure arithmetic.
        let payload = (header.cmsg_len as usize).saturating_sub(unsafe { libc::CMSG_LEN(0) } as usize);
        if header.cmsg_level == libc::SOL_SOCKET && header.cmsg_type == libc::SCM_RIGHTS {
            for i in 0..payload / mem::size_of::<RawFd>() {
                // SAFETY: `i` indexes within the message's payload.
                let raw = unsafe { data.add(i * mem::size_of::<RawFd>()).cast::<RawFd>().read_unaligned() };
                if raw >= 0 {
                    // SAFETY: the kernel installed this descriptor for us just
                    // now; nothing else owns it.
                    fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
                }
            }
        } else if header.cmsg_level == libc::SOL_SOCKET
            && header.cmsg_type == libc::SCM_CREDENTIALS
            && payload >= mem::size_of::<libc::ucred>()
        {
            // SAFETY: the payload holds a whole ucred (checked above).
            let cred = unsafe { data.cast::<libc::ucred>().read_unaligned() };
            credentials = Some(Credentials { pid: cred.pid as u32, uid: cred.uid, gid: cred.gid });
        }
        // SAFETY: `cmsg` is a header inside `msg`'s control buffer.
        cmsg = unsafe { libc::CMSG_NXTHDR(&msg, cmsg) };
    }
    let mut sender = SenderAddr { bytes: [0; SUN_PATH_LEN], len: 0 };
    let family_len = mem::size_of::<libc::sa_family_t>();
    let name_len = (msg.msg_namelen as usize).min(mem::size_of::<libc::sockaddr_un>());
    if name_len > family_len {
        let path_len = (name_len - family_len).min(SUN_PATH_LEN);
        for (dst, src) in sender.bytes.iter_mut().zip(&addr.sun_path[..path_len]) {
            *dst = *src as u8;
        }
        // Pathname addresses may include their trailing NUL; drop it so that
        // the same socket always yields the same key.
        let mut len = path_len;
        if sender.bytes[0] != 0 {
            while len > 0 && sender.bytes[len - 1] == 0 {
                len -= 1;
            }
        }
        sender.len = len as u8;
    }
    Ok(Some(Received {
        len: (rc as usize).min(buf.len()),
        truncated: msg.msg_flags & libc::MSG_TRUNC != 0,
        control_truncated: msg.msg_flags & libc::MSG_CTRUNC != 0,
        credentials,
        sender,
    }))
}

/// Waits until `fd` is readable or `timeout` passes (`None`: forever).
/// Returns true when readable. `EINTR` counts as a timeout.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = match timeout {
        None => -1,
        // Round up so that a short timeout is not a busy loop.
        Some(t) => libc::c_int::try_from(t.as_nanos().div_ceil(1_000_000)).unwrap_or(libc::c_int::MAX),
    };
    // SAFETY: one live pollfd for the duration of the call.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        return if err.raw_os_error() == Some(libc::EINTR) { Ok(false) } else { Err(err) };
    }
    Ok(rc > 0)
}

/// How a received descriptor may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Opened for reading (`O_RDONLY` or `O_RDWR`).
    Readable,
    /// Opened write-only.
    WriteOnly,
    /// An `O_PATH` descriptor: names a file without granting access to its
    /// contents (one can be had for a file one may not read).
    PathOnly,
}

/// The access mode of `fd`'s open file description (`fcntl(F_GETFL)`).
pub fn access(fd: BorrowedFd<'_>) -> io::Result<Access> {
    // SAFETY: plain syscall on a borrowed descriptor; no memory is passed.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if flags & libc::O_PATH != 0 {
        Access::PathOnly
    } else if flags & libc::O_ACCMODE == libc::O_WRONLY {
        Access::WriteOnly
    } else {
        Access::Readable
    })
}
