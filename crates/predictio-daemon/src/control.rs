//! The control socket: a Unix stream socket, one line in (`status`), one JSON
//! document out. Mode 0600: the status names files (per-file counters), so
//! only their owner's peer — root — may read it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use super::status::Status;

/// Errors of the control socket, serving or asking.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The socket's directory could not be created.
    #[error("creating {path}: {source}", path = path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A live daemon answers on the socket already.
    #[error("{path} is in use: is another predictio daemon running?", path = path.display())]
    InUse {
        /// The socket.
        path: PathBuf,
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
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket) and answers with `status()`.
    pub fn start(path: &Path, status: impl Fn() -> Status + Send + 'static) -> Result<Self, ControlError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ControlError::CreateDir { path: dir.into(), source })?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(ControlError::InUse { path: path.into() });
            }
            std::fs::remove_file(path).map_err(|source| ControlError::RemoveStale { path: path.into(), source })?;
        }
        let bind = |source| ControlError::Bind { path: path.into(), source };
        let listener = UnixListener::bind(path).map_err(bind)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind)?;
        listener.set_nonblocking(true).map_err(bind)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new().name("predictio-control".into()).spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        if let Err(err) = answer(stream, &status) {
                            tracing::debug!(%err, "control request failed");
                        }
                    }
                    Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => super::wait_for_connection(&listener),
                    Err(err) => {
                        tracing::warn!(%err, "control socket accept failed");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        });
        Ok(Self { path: path.to_path_buf(), stop, thread: Some(thread.map_err(ControlError::Thread)?) })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
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
