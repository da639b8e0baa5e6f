//! The syscall edge of the client: rustix for the socket and the
//! descriptor checks (no `unsafe` needed), libc for `pthread_atfork(3)`
//! and `getauxval(3)`, which rustix does not wrap (libc functions, not
//! system calls).
//! The only `unsafe` code of this crate outside the C ABI's pointer
//! handling, each block with a `SAFETY:` comment.
//!
//! # References
//! - `unix(7)` (autobind, `SCM_RIGHTS`), `socket(2)`, `bind(2)`, `connect(2)`,
//!   `sendmsg(2)`, `cmsg(3)`, `fcntl(2)`, `fstat(2)`, `pthread_atfork(3)`,
//!   `getauxval(3)`.

use std::io;
use std::io::IoSlice;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;
use rustix::net::{
    AddressFamily, SendAncillaryBuffer, SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::protocol::MAX_FDS_PER_DATAGRAM;

/// A non-blocking, close-on-exec `AF_UNIX` datagram socket.
pub(crate) fn dgram_socket() -> io::Result<OwnedFd> {
    let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
    Ok(rustix::net::socket_with(AddressFamily::UNIX, SocketType::DGRAM, flags, None)?)
}

/// Binds `fd` to a kernel-chosen abstract address (`unix(7)`, "autobind"):
/// the daemon keys client state by sender address, so a client must have one.
pub(crate) fn autobind(fd: BorrowedFd<'_>) -> io::Result<()> {
    // An address of just the family asks the kernel to autobind.
    Ok(rustix::net::bind(fd, &SocketAddrUnix::new_unnamed())?)
}

/// Connects the datagram socket `fd` to the socket at `path`. A path that
/// is empty, holds a NUL byte, or leaves no room in `sun_path` for the
/// terminating NUL is `ENAMETOOLONG`.
pub(crate) fn connect(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    /// `sun_path`'s size.
    const SUN_PATH: usize = 108;
    let bytes = path.as_os_str().as_bytes();
    if bytes.is_empty() || bytes.len() >= SUN_PATH || bytes.contains(&0) {
        return Err(Errno::NAMETOOLONG.into());
    }
    Ok(rustix::net::connect(fd, &SocketAddrUnix::new(path)?)?)
}

/// Sends `bytes` as one datagram on the connected socket `fd`, passing `fds`
/// with `SCM_RIGHTS`. Never blocks (`MSG_DONTWAIT`) and never raises
/// `SIGPIPE` (`MSG_NOSIGNAL`).
pub(crate) fn send(fd: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS_PER_DATAGRAM {
        return Err(Errno::INVAL.into());
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_DATAGRAM))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        // Cannot happen: the buffer has room for MAX_FDS_PER_DATAGRAM.
        return Err(Errno::INVAL.into());
    }
    let flags = SendFlags::DONTWAIT | SendFlags::NOSIGNAL;
    rustix::net::sendmsg(fd, &[IoSlice::new(bytes)], &mut control, flags)?;
    Ok(())
}

/// Receives one datagram of at most `buf.len()` bytes on the connected
/// socket `fd` (which the kernel only lets its peer, the daemon, send to),
/// waiting at most `timeout`. `Ok(None)` when nothing came in time; a
/// longer datagram is cut to `buf` and its real length returned, so the
/// caller can tell it is not what it expects.
pub(crate) fn recv_within(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    timeout: std::time::Duration,
) -> io::Result<Option<usize>> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    use rustix::net::RecvFlags;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match rustix::net::recv(fd, &mut *buf, RecvFlags::DONTWAIT | RecvFlags::TRUNC) {
            Ok((_, len)) => return Ok(Some(len)),
            Err(Errno::AGAIN) => {}
            Err(Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(None);
        }
        let left = Timespec::try_from(left).map_err(|_| io::Error::from(Errno::INVAL))?;
        let mut fds = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        match rustix::event::poll(&mut fds, Some(&left)) {
            Ok(_) | Err(Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
    }
}

/// A close-on-exec duplicate of `fd`, kept so that a restarted daemon can be
/// told about the file again.
pub(crate) fn dup_cloexec(fd: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    fd.try_clone_to_owned()
}

/// Checks, as the daemon will, that `fd` is a regular file open for reading
/// (not `O_PATH`, not write-only). Returns what is wrong otherwise.
pub(crate) fn check_registrable(fd: BorrowedFd<'_>) -> Result<(), &'static str> {
    use rustix::fs::{FileType, OFlags};
    let flags = rustix::fs::fcntl_getfl(fd).map_err(|_| "not an open descriptor")?;
    if flags.contains(OFlags::PATH) || flags & OFlags::ACCMODE == OFlags::WRONLY {
        return Err("not open for reading");
    }
    let st = rustix::fs::fstat(fd).map_err(|_| "not an open descriptor")?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Err("not a regular file");
    }
    Ok(())
}

/// Whether the process runs in secure-execution mode (`getauxval(3)`
/// `AT_SECURE`: a set-user-ID or set-group-ID program, file capabilities,
/// an LSM transition), in which its environment comes from a less
/// privileged caller and names nothing to trust (`secure_getenv(3)`).
pub(crate) fn secure_execution() -> bool {
    // SAFETY: getauxval only reads the process's auxiliary vector; it takes
    // no pointer and returns 0 for a missing entry.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
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

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::os::fd::AsFd;
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    use std::os::unix::net::UnixDatagram;

    use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};

    use super::*;

    /// A fresh directory for one test, removed on drop (the client crate
    /// keeps its dev-dependencies to std).
    struct TempDir(std::path::PathBuf);

    impl TempDir {
        fn new(test: &str) -> Self {
            let path = std::env::temp_dir().join(format!("predictio-client-sys-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("create temp dir");
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Receives one datagram on `rx` (which has no `SO_PASSCRED`: only
    /// `SCM_RIGHTS` can arrive), returning its bytes and descriptors.
    fn receive(rx: &UnixDatagram) -> (Vec<u8>, Vec<OwnedFd>, bool) {
        let mut buf = [0u8; 256];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS_PER_DATAGRAM))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [io::IoSliceMut::new(&mut buf)];
        let got = rustix::net::recvmsg(rx, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC).expect("recvmsg");
        let mut fds = Vec::new();
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        let truncated = got.flags.contains(rustix::net::ReturnFlags::CTRUNC);
        (buf[..got.bytes].to_vec(), fds, truncated)
    }

    fn id(fd: BorrowedFd<'_>) -> (u64, u64) {
        let st = rustix::fs::fstat(fd).expect("fstat");
        (st.st_dev, st.st_ino)
    }

    #[test]
    fn sent_descriptors_arrive_as_the_same_files() {
        let (rx, tx) = UnixDatagram::pair().expect("socketpair");
        let exe = File::open("/proc/self/exe").expect("open exe");
        let dir = File::open("/").expect("open /");
        send(tx.as_fd(), b"frame", &[exe.as_fd(), dir.as_fd()]).expect("send");
        let (bytes, fds, truncated) = receive(&rx);
        assert_eq!(bytes, b"frame");
        assert!(!truncated);
        assert_eq!(fds.len(), 2);
        let meta = exe.metadata().expect("stat");
        assert_eq!(id(fds[0].as_fd()), (meta.dev(), meta.ino()), "the same file, not a copy of its path");
        assert_eq!(id(fds[1].as_fd()), id(dir.as_fd()));

        send(tx.as_fd(), b"plain", &[]).expect("send without descriptors");
        let (bytes, fds, _) = receive(&rx);
        assert_eq!((bytes.as_slice(), fds.len()), (&b"plain"[..], 0));

        let all: Vec<BorrowedFd<'_>> = (0..MAX_FDS_PER_DATAGRAM).map(|_| exe.as_fd()).collect();
        send(tx.as_fd(), b"full", &all).expect("send the most descriptors a datagram carries");
        let (_, fds, truncated) = receive(&rx);
        assert_eq!((fds.len(), truncated), (MAX_FDS_PER_DATAGRAM, false));
        let too_many: Vec<BorrowedFd<'_>> = (0..=MAX_FDS_PER_DATAGRAM).map(|_| exe.as_fd()).collect();
        let err = send(tx.as_fd(), b"x", &too_many).expect_err("one descriptor too many");
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn send_never_blocks_on_a_full_socket() {
        let (_rx, tx) = UnixDatagram::pair().expect("socketpair");
        // The socket itself blocks; MSG_DONTWAIT must make this send fail.
        let err = loop {
            if let Err(err) = send(tx.as_fd(), &[0; 1024], &[]) {
                break err;
            }
        };
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
    }

    #[test]
    fn the_socket_autobinds_to_an_abstract_address_and_refuses_bad_paths() {
        let socket = dgram_socket().expect("socket");
        let flags = rustix::fs::fcntl_getfl(&socket).expect("F_GETFL");
        assert!(flags.contains(rustix::fs::OFlags::NONBLOCK));
        assert!(rustix::io::fcntl_getfd(&socket).expect("F_GETFD").contains(rustix::io::FdFlags::CLOEXEC));
        autobind(socket.as_fd()).expect("bind");
        let addr = rustix::net::getsockname(&socket).expect("getsockname");
        let addr = SocketAddrUnix::try_from(addr).expect("AF_UNIX");
        assert!(addr.abstract_name().is_some_and(|name| !name.is_empty()), "autobound: {addr:?}");
        for path in ["", "/tmp/a\0b", &format!("/{}", "x".repeat(107))] {
            let err = connect(socket.as_fd(), Path::new(path)).expect_err(path);
            assert_eq!(err.raw_os_error(), Some(libc::ENAMETOOLONG), "{path:?}");
        }
        let dir = TempDir::new("autobind");
        let server = UnixDatagram::bind(dir.0.join("s")).expect("bind server");
        connect(socket.as_fd(), &dir.0.join("s")).expect("connect");
        send(socket.as_fd(), b"hi", &[]).expect("send");
        let mut buf = [0u8; 8];
        let (n, from) = server.recv_from(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"hi");
        use std::os::linux::net::SocketAddrExt;
        assert!(from.as_abstract_name().is_some(), "the daemon sees the autobound address");
    }

    #[test]
    fn only_readable_regular_files_are_registrable() {
        let exe = File::open("/proc/self/exe").expect("open exe");
        assert_eq!(check_registrable(exe.as_fd()), Ok(()));
        let path_only = File::options().read(true).custom_flags(libc::O_PATH).open("/proc/self/exe").expect("O_PATH");
        assert_eq!(check_registrable(path_only.as_fd()), Err("not open for reading"));
        let dir = TempDir::new("registrable");
        let write_only = File::create(dir.0.join("w")).expect("create");
        assert_eq!(check_registrable(write_only.as_fd()), Err("not open for reading"));
        let null = File::open("/dev/null").expect("open /dev/null");
        assert_eq!(check_registrable(null.as_fd()), Err("not a regular file"));
        assert_eq!(check_registrable(File::open("/").expect("open /").as_fd()), Err("not a regular file"));
    }
}
