//! The control socket: a Unix stream socket, one line in (`status`), one JSON
//! document out. Mode 0600: the status names files (per-file counters), so
//! only their owner's peer — root — may read it.
//!
//! Its directory must be the daemon's and writable by no one else
//! ([`predictio::secure_dir`]; created 0755), or nobody could be sure the
//! socket root answers on is root's. What is at the path already is
//! replaced only if it is a socket (`lstat`) that nothing answers on: a
//! regular file, a symbolic link, or a live socket of any kind (the hint
//! socket, another daemon's) is left alone and the start refused.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Stopper;
use super::status::Status;

/// Errors of the control socket, serving or asking.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket's directory could not be created, or is not safe to use.
    #[error("control socket directory {0}")]
    Dir(#[from] predictio::secure_dir::UnsafeDir),
    /// A live daemon answers on the socket already.
    #[error("{path} is in use: is another predictio daemon running?", path = path.display())]
    InUse {
        /// The socket.
        path: PathBuf,
    },
    /// Something that is not a stale socket is at the path: it is never
    /// removed.
    #[error("{path} is {what}; the control socket replaces only a stale socket", path = path.display())]
    Occupied {
        /// The path.
        path: PathBuf,
        /// What is there.
        what: String,
    },
    /// A stale socket could not be removed.
    #[error("removing stale {path}: {source}", path = path.display())]
    RemoveStale {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Binding, restricting (mode 0600) or listening on the socket failed.
    #[error("binding {path}: {source}", path = path.display())]
    Bind {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The server thread could not be started.
    #[error("starting the control thread: {0}")]
    Thread(#[source] io::Error),
    /// No daemon answers at the socket.
    #[error(
        "cannot reach the predictio daemon at {path} (is `predictio daemon` running? root only): {source}",
        path = path.display()
    )]
    Connect {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The request or the answer failed in transit.
    #[error("talking to the daemon at {path}: {source}", path = path.display())]
    Io {
        /// The socket.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The daemon's answer is not a status document.
    #[error("the daemon's answer is not a status document: {0}")]
    Answer(#[source] serde_json::Error),
}

/// Serves status documents until dropped.
pub struct ControlServer {
    path: PathBuf,
    /// The bound socket's identity, so that only it is removed.
    bound: (u64, u64),
    stop: Stopper,
    thread: Option<JoinHandle<()>>,
}

/// Removes what is at `path` if it is a stale socket (see the module docs);
/// an error if something else is there or something answers.
fn clear_stale(path: &Path) -> Result<(), ControlError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(ControlError::Bind { path: path.into(), source }),
    };
    let kind = meta.file_type();
    if !kind.is_socket() {
        let what = if kind.is_symlink() {
            "a symbolic link"
        } else if kind.is_file() {
            "a regular file"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a socket"
        };
        return Err(ControlError::Occupied { path: path.into(), what: what.into() });
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(ControlError::InUse { path: path.into() }),
        Err(err) if err.raw_os_error() == Some(libc::ECONNREFUSED) => {
            std::fs::remove_file(path).map_err(|source| ControlError::RemoveStale { path: path.into(), source })
        }
        Err(err) => Err(ControlError::Occupied { path: path.into(), what: format!("a socket that answers ({err})") }),
    }
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket only) in a safe directory and
    /// answers with `status()`.
    pub fn start(path: &Path, status: impl Fn() -> Status + Send + 'static) -> Result<Self, ControlError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            predictio::secure_dir::prepare(dir, 0o755)?;
        }
        clear_stale(path)?;
        let bind = |source| ControlError::Bind { path: path.into(), source };
        let listener = UnixListener::bind(path).map_err(bind)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind)?;
        let meta = std::fs::symlink_metadata(path).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let (stop, stopped) = Stopper::new().map_err(ControlError::Thread)?;
        let thread = std::thread::Builder::new().name("predictio-control".into()).spawn(move || {
            // Asleep in poll(2) until a client connects or the server is
            // dropped: an idle control socket costs no wake-up.
            while !super::wait_for_connection(&listener, &stopped) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if let Err(err) = answer(stream, &status) {
                            tracing::debug!(%err, "control request failed");
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(err) => {
                        tracing::warn!(%err, "control socket accept failed");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        });
        let thread = Some(thread.map_err(ControlError::Thread)?);
        Ok(Self { path: path.to_path_buf(), bound: (meta.dev(), meta.ino()), stop, thread })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        // Only the socket bound here (a newer daemon may have replaced it).
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.bound) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

fn answer(stream: UnixStream, status: &impl Fn() -> Status) -> io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(stream.try_clone()?.take(256)).read_line(&mut line)?;
    let mut stream = stream;
    match line.trim() {
        "status" => {
            serde_json::to_writer(&mut stream, &status())?;
            stream.write_all(b"\n")?;
        }
        other => {
            writeln!(stream, "{{\"error\": \"unknown command {:?}; try status\"}}", other.escape_debug().to_string())?
        }
    }
    Ok(())
}

/// Asks the daemon at `path` for its status.
pub fn query(path: &Path) -> Result<Status, ControlError> {
    let mut stream = UnixStream::connect(path).map_err(|source| ControlError::Connect { path: path.into(), source })?;
    let mut text = String::new();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .and_then(|()| stream.write_all(b"status\n"))
        .and_then(|()| stream.read_to_string(&mut text))
        .map_err(|source| ControlError::Io { path: path.into(), source })?;
    serde_json::from_str(&text).map_err(ControlError::Answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: a `[control] socket` that named an existing file (or
    /// the hint socket) was deleted at start.
    #[test]
    fn only_a_stale_socket_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("precious");
        std::fs::write(&file, b"data").unwrap();
        let err = clear_stale(&file).unwrap_err();
        assert!(err.to_string().contains("a regular file"), "{err}");
        assert_eq!(std::fs::read(&file).unwrap(), b"data");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        assert!(clear_stale(&link).unwrap_err().to_string().contains("symbolic link"));
        assert!(link.exists());
        // A live datagram socket (the hint socket) answers a stream connect
        // with an error other than "refused": it is not stale.
        let hint = dir.path().join("hint.sock");
        let _live = std::os::unix::net::UnixDatagram::bind(&hint).unwrap();
        assert!(clear_stale(&hint).is_err());
        assert!(hint.exists());
        // A stream socket nobody listens on any more is stale.
        let stale = dir.path().join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        clear_stale(&stale).unwrap();
        assert!(!stale.exists());
    }
}
