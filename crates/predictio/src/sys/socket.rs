//! The hint server's socket syscalls: `SO_PASSCRED`, `recvmsg(2)` with
//! `SCM_CREDENTIALS` and `SCM_RIGHTS`, `sendto(2)` (answers to `Sync`),
//! `poll(2)`, `fcntl(F_GETFL)`.
//!
//! Received descriptors are wrapped in [`OwnedFd`] the moment they are parsed
//! out of the control message, so none can leak: whatever the caller does not
//! keep is closed when dropped. They are received with `MSG_CMSG_CLOEXEC`.
//!
//! The socket options, `sendto`, `poll` and `fcntl` go through rustix. `recvmsg` does
//! not: rustix 1.x parses every control message of a
//! `RecvAncillaryBuffer` (when drained, and again when dropped), and reads
//! `SCM_CREDENTIALS` into a `UCred` whose `pid` is a non-zero type, while
//! the kernel reports pid 0 for a sender outside our pid namespace (a
//! daemon in a container, a client on the host). Building that value would
//! be undefined behaviour on input any local user controls, so the control
//! buffer is walked here with libc's `CMSG_*` and `ucred`, where pid 0 is
//! an ordinary value.
//!
//! # References
//! - `unix(7)` (`SO_PASSCRED`, `SCM_CREDENTIALS`, `SCM_RIGHTS`, autobind),
//!   `recvmsg(2)`, `cmsg(3)`, `poll(2)`, `fcntl(2)`.
//! - `pid_vnr()` in `kernel/pid.c`: 0 for a pid not visible in the caller's
//!   namespace.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use rustix::io::Errno;

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

/// `setsockopt(SO_PASSCRED, 1)`: every datagram then carries the sender's
/// kernel-verified `SCM_CREDENTIALS`, whether or not the sender attached them.
pub fn set_passcred(fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_passcred(fd, true)?)
}

/// Raises the receive buffer to `bytes` (`SO_RCVBUFFORCE` when privileged,
/// else `SO_RCVBUF`, which the kernel caps at `net.core.rmem_max`).
pub fn set_recv_buffer(fd: BorrowedFd<'_>, bytes: usize) -> io::Result<()> {
    // The option is a C int: ask for at most its largest value.
    let bytes = bytes.min(i32::MAX as usize);
    rustix::net::sockopt::set_socket_recv_buffer_size_force(fd, bytes)
        .or_else(|_| rustix::net::sockopt::set_socket_recv_buffer_size(fd, bytes))
        .map_err(io::Error::from)
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

/// Sends `bytes` as one datagram from `fd` to the abstract address `name`
/// (without its leading NUL byte). Never blocks (`MSG_DONTWAIT`): a full
/// receive queue is `EAGAIN`.
pub fn send_to_abstract(fd: BorrowedFd<'_>, name: &[u8], bytes: &[u8]) -> io::Result<()> {
    use rustix::net::{SendFlags, SocketAddrUnix};
    let addr = SocketAddrUnix::new_abstract_name(name)?;
    rustix::net::sendto(fd, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL, &addr)?;
    Ok(())
}

/// Waits until `fd` is readable or `timeout` passes (`None`: forever).
/// Returns true when readable. `EINTR` counts as a timeout.
pub fn poll_readable(fd: BorrowedFd<'_>, timeout: Option<Duration>) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    // ppoll(2) keeps nanoseconds, so a short timeout still sleeps. One too
    // large for a timespec (centuries) waits forever.
    let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
    match rustix::event::poll(&mut fds, timeout.as_ref()) {
        Ok(ready) => Ok(ready > 0),
        Err(Errno::INTR) => Ok(false),
        Err(err) => Err(err.into()),
    }
}

/// Waits until one of `fds` is readable (or hung up, or in error: a read
/// would not block) or `timeout` passes (`None`: forever), and says which
/// are: all false on timeout or an interrupting signal. One wait on a
/// thread's real source and its stop descriptor together, so that neither
/// needs a timeout to be noticed.
pub fn poll_readable_any<const N: usize>(fds: [BorrowedFd<'_>; N], timeout: Option<Duration>) -> io::Result<[bool; N]> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut polled = fds.map(|fd| PollFd::from_borrowed_fd(fd, PollFlags::IN));
    let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
    match rustix::event::poll(&mut polled, timeout.as_ref()) {
        Ok(_) => Ok(polled.map(|p| !p.revents().is_empty())),
        Err(Errno::INTR) => Ok([false; N]),
        Err(err) => Err(err.into()),
    }
}

/// [`poll_readable_any`] over a list whose length is known only at run
/// time (one descriptor per CPU, and a stop).
pub fn poll_readable_list(fds: &[BorrowedFd<'_>], timeout: Option<Duration>) -> io::Result<Vec<bool>> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN)).collect();
    let timeout = timeout.and_then(|t| Timespec::try_from(t).ok());
    match rustix::event::poll(&mut polled, timeout.as_ref()) {
        Ok(_) => Ok(polled.iter().map(|p| !p.revents().is_empty()).collect()),
        Err(Errno::INTR) => Ok(vec![false; fds.len()]),
        Err(err) => Err(err.into()),
    }
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
    use rustix::fs::OFlags;
    let flags = rustix::fs::fcntl_getfl(fd)?;
    Ok(if flags.contains(OFlags::PATH) {
        Access::PathOnly
    } else if flags & OFlags::ACCMODE == OFlags::WRONLY {
        Access::WriteOnly
    } else {
        Access::Readable
    })
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::IoSlice;
    use std::mem::MaybeUninit;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::net::UnixDatagram;

    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

    use super::*;

    /// A receiving socket with `SO_PASSCRED`, and a sender connected to it.
    fn pair() -> (UnixDatagram, UnixDatagram) {
        let (rx, tx) = UnixDatagram::pair().expect("socketpair");
        set_passcred(rx.as_fd()).expect("SO_PASSCRED");
        (rx, tx)
    }

    fn send_fds(tx: &UnixDatagram, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(20))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
        rustix::net::sendmsg(tx, &[IoSlice::new(bytes)], &mut control, SendFlags::empty()).expect("sendmsg");
    }

    fn same_file(a: BorrowedFd<'_>, b: &File) -> bool {
        let (a, b) = (rustix::fs::fstat(a).expect("fstat"), b.metadata().expect("stat"));
        (a.st_dev, a.st_ino) == (b.dev(), b.ino())
    }

    #[test]
    fn passed_descriptors_arrive_as_the_same_files_with_credentials() {
        let (rx, tx) = pair();
        let file = File::open("/proc/self/exe").expect("open exe");
        let path_only = File::options().read(true).custom_flags(libc::O_PATH).open("/proc/self/exe").expect("O_PATH");
        let write_only = File::options().write(true).open("/dev/null").expect("/dev/null");
        send_fds(&tx, b"hello", &[file.as_fd(), path_only.as_fd(), write_only.as_fd()]);
        let (mut buf, mut fds) = ([0u8; 64], Vec::new());
        let got = recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").expect("queued");
        assert_eq!(&buf[..got.len], b"hello");
        assert!(!got.truncated && !got.control_truncated);
        assert_eq!(fds.len(), 3);
        assert!(same_file(fds[0].as_fd(), &file) && same_file(fds[1].as_fd(), &file));
        assert_eq!(access(fds[0].as_fd()).expect("F_GETFL"), Access::Readable);
        assert_eq!(access(fds[1].as_fd()).expect("F_GETFL"), Access::PathOnly, "O_PATH is told apart");
        assert_eq!(access(fds[2].as_fd()).expect("F_GETFL"), Access::WriteOnly);
        for fd in &fds {
            let flags = rustix::io::fcntl_getfd(fd).expect("F_GETFD");
            assert!(flags.contains(rustix::io::FdFlags::CLOEXEC), "received close-on-exec");
        }
        let me = rustix::process::getpid().as_raw_pid() as u32;
        let creds = got.credentials.expect("SCM_CREDENTIALS");
        assert_eq!(creds.pid, me);
        assert_eq!((creds.uid, creds.gid), (rustix::process::getuid().as_raw(), rustix::process::getgid().as_raw()));
        assert!(got.sender.is_empty(), "a socketpair peer has no address");
        assert!(recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").is_none(), "nothing queued");
    }

    #[test]
    fn descriptors_past_max_fds_truncate_the_control_data_and_leak_none() {
        let (rx, tx) = pair();
        // Pass a pipe's write end: the read end sees end of file only once
        // every copy of it is closed.
        let (reader, writer) = std::io::pipe().expect("pipe");
        let flags = rustix::fs::fcntl_getfl(&reader).expect("F_GETFL");
        rustix::fs::fcntl_setfl(&reader, flags | rustix::fs::OFlags::NONBLOCK).expect("F_SETFL");
        let fds_sent: Vec<BorrowedFd<'_>> = (0..=MAX_FDS).map(|_| writer.as_fd()).collect();
        send_fds(&tx, b"x", &fds_sent);
        drop(writer);
        let (mut buf, mut fds) = ([0u8; 8], Vec::new());
        let got = recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").expect("queued");
        assert!(got.control_truncated, "{} descriptors fit, {} were sent", MAX_FDS, MAX_FDS + 1);
        assert_eq!(fds.len(), MAX_FDS, "the kernel installs those that fit");
        assert!(got.credentials.is_some(), "credentials come first and fit");
        let mut byte = [0u8; 1];
        assert_eq!(rustix::io::read(&reader, &mut byte).err(), Some(Errno::AGAIN), "writers still open");
        fds.clear();
        assert_eq!(rustix::io::read(&reader, &mut byte).expect("read"), 0, "every copy closed");
    }

    #[test]
    fn a_long_datagram_is_reported_truncated() {
        let (rx, tx) = pair();
        tx.send(&[7u8; 100]).expect("send");
        let (mut buf, mut fds) = ([0u8; 10], Vec::new());
        let got = recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").expect("queued");
        assert!(got.truncated);
        assert_eq!(got.len, 10);
    }

    #[test]
    fn a_bound_sender_is_known_by_its_address() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rx = UnixDatagram::bind(dir.path().join("rx")).expect("bind rx");
        set_passcred(rx.as_fd()).expect("SO_PASSCRED");
        let tx = UnixDatagram::bind(dir.path().join("tx")).expect("bind tx");
        tx.send_to(b"a", dir.path().join("rx")).expect("send");
        let (mut buf, mut fds) = ([0u8; 8], Vec::new());
        let got = recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").expect("queued");
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(got.sender.as_bytes(), dir.path().join("tx").as_os_str().as_bytes(), "no trailing NUL");
    }

    /// Environment variable that turns the helper test below into the
    /// receiver in a new pid namespace (its value: the socket path).
    const PID_NS_HELPER: &str = "PREDICTIO_SOCKET_PID_NS_HELPER";

    /// The receiving half of the next test, run by it under
    /// `unshare --pid --fork`: does nothing otherwise.
    #[test]
    fn helper_receive_in_a_new_pid_namespace() {
        let Ok(path) = std::env::var(PID_NS_HELPER) else { return };
        let rx = UnixDatagram::unbound().expect("socket");
        set_passcred(rx.as_fd()).expect("SO_PASSCRED");
        let addr = rustix::net::SocketAddrUnix::new(path.as_str()).expect("address");
        rustix::net::bind(&rx, &addr).expect("bind");
        assert!(poll_readable(rx.as_fd(), Some(Duration::from_secs(10))).expect("poll"), "nothing sent");
        let (mut buf, mut fds) = ([0u8; 8], Vec::new());
        let got = recv_datagram(rx.as_fd(), &mut buf, &mut fds).expect("recvmsg").expect("queued");
        let creds = got.credentials.expect("SCM_CREDENTIALS");
        println!("received credentials {creds:?}");
        assert_eq!((creds.pid, creds.uid), (0, 0));
    }

    /// The kernel reports pid 0 for a sender outside the receiver's pid
    /// namespace (a daemon in a container, a client on the host). The
    /// credentials must still arrive, with pid 0 as a value: the reason
    /// `recv_datagram` parses `SCM_CREDENTIALS` itself (rustix's `UCred`
    /// cannot hold pid 0).
    #[test]
    fn a_sender_outside_our_pid_namespace_has_pid_0() {
        use crate::testing::{is_root, skip};
        if !is_root() && skip("needs root to make a pid namespace") {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rx.sock");
        let exe = std::env::current_exe().expect("current_exe");
        let child = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(&exe)
            .args(["--exact", "sys::socket::tests::helper_receive_in_a_new_pid_namespace", "--nocapture"])
            .env(PID_NS_HELPER, &path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn();
        let Ok(child) = child else {
            skip("no unshare(1)");
            return;
        };
        let start = std::time::Instant::now();
        while !path.exists() {
            assert!(start.elapsed() < Duration::from_secs(10), "the helper never bound its socket");
            std::thread::sleep(Duration::from_millis(10));
        }
        UnixDatagram::unbound().expect("socket").send_to(b"x", &path).expect("send");
        let out = child.wait_with_output().expect("helper");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "helper failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("received credentials"), "the helper did not run: {stdout}");
    }

    #[test]
    fn poll_waits_for_a_datagram_or_the_timeout() {
        let (rx, tx) = pair();
        let start = std::time::Instant::now();
        assert!(!poll_readable(rx.as_fd(), Some(Duration::from_millis(30))).expect("poll"));
        assert!(start.elapsed() >= Duration::from_millis(30));
        tx.send(b"x").expect("send");
        assert!(poll_readable(rx.as_fd(), Some(Duration::from_secs(5))).expect("poll"));
        assert!(poll_readable(rx.as_fd(), None).expect("poll forever returns at once"));
    }

    /// A thread blocked on its source and its stop descriptor wakes for
    /// either, says which, and the closed end of a stop pair stays
    /// readable (a stop is not missed by whoever looks later).
    #[test]
    fn poll_any_wakes_for_the_source_or_the_stop() {
        let (rx, tx) = pair();
        let (stop_rx, stop_tx) = std::os::unix::net::UnixStream::pair().expect("pair");
        let none = poll_readable_any([rx.as_fd(), stop_rx.as_fd()], Some(Duration::from_millis(20))).expect("poll");
        assert_eq!(none, [false, false]);
        tx.send(b"x").expect("send");
        assert_eq!(poll_readable_any([rx.as_fd(), stop_rx.as_fd()], None).expect("poll"), [true, false]);
        assert_eq!(poll_readable_list(&[stop_rx.as_fd(), rx.as_fd()], None).expect("poll"), [false, true]);
        let waiter = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let ready = poll_readable_any([stop_rx.as_fd()], None).expect("poll");
            (ready, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        drop(stop_tx);
        let (ready, waited) = waiter.join().expect("the waiter");
        assert_eq!(ready, [true]);
        assert!(waited >= Duration::from_millis(40), "it waited for the stop: {waited:?}");
    }

    #[test]
    fn recv_buffer_is_raised() {
        let (rx, _tx) = pair();
        set_recv_buffer(rx.as_fd(), 1 << 20).expect("SO_RCVBUF");
        // The kernel doubles the value; unprivileged, it caps it at rmem_max.
        assert!(rustix::net::sockopt::socket_recv_buffer_size(&rx).expect("getsockopt") >= 4096);
        set_recv_buffer(rx.as_fd(), usize::MAX).expect("clamped to a C int");
    }
}
