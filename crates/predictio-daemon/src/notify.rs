//! Readiness for the service manager (`sd_notify(3)`'s protocol, without
//! libsystemd): one datagram of `KEY=VALUE` lines to the socket named by
//! `$NOTIFY_SOCKET`, a path or, with a leading `@`, an abstract name. The
//! unit is `Type=notify`: systemd starts what is ordered after predictio
//! only once its sockets exist.
//!
//! Without `$NOTIFY_SOCKET` (not under systemd, or `NotifyAccess=none`)
//! every call does nothing. A failure to notify is logged, never fatal: the
//! daemon works the same either way.

use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable systemd sets for a `Type=notify` service.
const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Tells the service manager the daemon is ready: its sockets are bound
/// and its sources started.
pub fn ready() {
    send("READY=1\nSTATUS=serving hints and observing\n");
}

/// Tells the service manager the daemon is stopping.
pub fn stopping() {
    send("STOPPING=1\n");
}

fn send(state: &str) {
    let Some(target) = std::env::var_os(NOTIFY_SOCKET) else { return };
    if let Err(err) = send_to(&target, state) {
        tracing::warn!(%err, socket = ?target, "notifying the service manager");
    }
}

/// Sends `state` to the notification socket `target` (`$NOTIFY_SOCKET`).
fn send_to(target: &std::ffi::OsStr, state: &str) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = target.as_bytes();
    let addr = match bytes.split_first() {
        Some((b'@', name)) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name)?
        }
        Some((b'/', _)) => SocketAddr::from_pathname(std::path::Path::new(target))?,
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "NOTIFY_SOCKET is neither an absolute path nor an abstract name",
            ));
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reaches_a_path_socket_and_an_abstract_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        send_to(path.as_os_str(), "READY=1\n").expect("send");
        let mut buf = [0u8; 64];
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"READY=1\n");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("predictio-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let listener = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        send_to(std::ffi::OsStr::new(&format!("@{name}")), "STOPPING=1\n").expect("send");
        let n = listener.recv(&mut buf).expect("recv");
        assert_eq!(&buf[..n], b"STOPPING=1\n");
    }

    #[test]
    fn a_relative_notify_socket_is_refused() {
        assert!(send_to(std::ffi::OsStr::new("relative/notify"), "READY=1\n").is_err());
        assert!(send_to(std::ffi::OsStr::new(""), "READY=1\n").is_err());
    }
}
