//! What the two binaries of the command share: the small front,
//! `predictio`, and the whole command, `predictio-full`, which the front
//! execs for everything it does not do itself.
//!
//! A cold start of a binary reads it whole here (the first fault's
//! read-around is `read_ahead_kb`, 8 MiB on the bench machine), so the
//! binary a user types stays small: it starts a command under `predictio
//! run` at once, and the whole command follows only when there is work for
//! it.

use std::path::{Path, PathBuf};

/// The front, which users type.
pub const FRONT_BINARY: &str = "predictio";

/// The name of `run`'s private hint socket in its directory.
pub const HINT_SOCKET: &str = "hint.sock";

/// Signals that `run` passes on to its command ([`FORWARDED`]) or outlives
/// (the terminal sends SIGINT and SIGQUIT to the command itself). The front
/// blocks them across its exec of the whole command, which unblocks them
/// once its handlers are installed: none is lost and none kills `run` in
/// between.
pub const FORWARDED: [i32; 3] = [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1];
/// See [`FORWARDED`].
pub const OUTLIVED: [i32; 2] = [libc::SIGINT, libc::SIGQUIT];

/// The other binary of the command, beside this one.
pub fn beside(name: &str) -> std::io::Result<PathBuf> {
    Ok(std::env::current_exe()?.with_file_name(name))
}

/// Blocks (or unblocks) [`FORWARDED`] and [`OUTLIVED`] in this thread; a
/// thread started later inherits its mask, and an exec keeps it.
#[allow(unsafe_code)]
pub fn block_run_signals(block: bool) {
    // SAFETY: `set` is a local sigset_t, initialised by sigemptyset before
    // any other use; pthread_sigmask only reads it (the old mask is not
    // asked for). Every signal added is a valid signal number.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in FORWARDED.into_iter().chain(OUTLIVED) {
            libc::sigaddset(&mut set, signal);
        }
        let how = if block { libc::SIG_BLOCK } else { libc::SIG_UNBLOCK };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Whether to hand `run`'s command to a running daemon, and if so the hint
/// socket to give it (`None` when the daemon takes no hints): when the
/// daemon of `settings` (the configuration it runs with) replays launches
/// and its control socket accepts a connection. The daemon observes every
/// program and replays its launch at exec anyway: both doing it would do
/// the work twice.
pub fn daemon_hint_socket(settings: &predictio_daemon::config::Config) -> Option<Option<PathBuf>> {
    if !settings.launch.replay || !answers(&settings.control.socket) {
        return None;
    }
    Some(settings.hints.enabled.then(|| settings.hints.socket.clone()))
}

/// Whether a listener at `path` accepts a connection now. Non-blocking: a
/// daemon whose queue of connections is full (wedged) is not waited for.
pub fn answers(path: &Path) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let flags = SocketFlags::NONBLOCK | SocketFlags::CLOEXEC;
    let Ok(socket) = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, flags, None) else {
        return false;
    };
    SocketAddrUnix::new(path).is_ok_and(|address| rustix::net::connect(&socket, &address).is_ok())
}

/// Becomes `command` (the program and its arguments) with `hint_socket`, if
/// any, in its `PREDICTIO_HINT_SOCK`: `run` beside a daemon
/// ([`daemon_hint_socket`]). Returns only if the command could not be
/// started.
pub fn exec_beside_daemon<S: AsRef<std::ffi::OsStr>>(command: &[S], hint_socket: Option<&Path>) -> std::io::Error {
    use std::os::unix::process::CommandExt;
    let mut cmd = std::process::Command::new(&command[0]);
    cmd.args(&command[1..]);
    if let Some(socket) = hint_socket {
        cmd.env("PREDICTIO_HINT_SOCK", socket);
    }
    cmd.exec()
}

/// The private directory of `run`'s hint socket ([`HINT_SOCKET`]), removed
/// when dropped: the socket and the directory, never anything else in it.
pub struct HintDir {
    /// The directory.
    pub path: PathBuf,
}

impl HintDir {
    /// A new private directory (mode 0700) under the temporary directory.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self { path: tempfile::Builder::new().prefix("predictio-run").tempdir()?.keep() })
    }

    /// The socket's path in it.
    pub fn socket(&self) -> PathBuf {
        self.path.join(HINT_SOCKET)
    }
}

impl Drop for HintDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.socket());
        let _ = std::fs::remove_dir(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listening socket answers; a socket file nobody listens on (a
    /// daemon gone) and a missing path do not.
    #[test]
    fn a_daemon_answers_only_while_it_listens() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("control.sock");
        assert!(!answers(&path), "no socket");
        let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        assert!(answers(&path), "listening");
        drop(listener);
        assert!(path.exists());
        // Another test of this binary that spawns a process holds a copy of
        // the listener between its fork and its exec (close-on-exec closes
        // it there): the socket stops answering once that exec is done.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while answers(&path) && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!answers(&path), "a socket left behind");
    }
}
