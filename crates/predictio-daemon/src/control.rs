//! The control socket: a Unix stream socket, one line in (`status`), one JSON
//! document out. Mode 0600: the status names files (per-file counters), so
//! only their owner's peer — root — may read it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use super::status::Status;

/// Serves status documents until dropped.
pub struct ControlServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl ControlServer {
    /// Binds `path` (replacing a stale socket) and answers with `status()`.
    pub fn start(path: &Path, status: impl Fn() -> Status + Send + 'static) -> Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                bail!("{} is in use: is another predictio daemon running?", path.display());
            }
            std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
        }
        let listener = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        listener.set_nonblocking(true)?;
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
        })?;
        Ok(Self { path: path.to_path_buf(), stop, thread: Some(thread) })
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

fn answer(stream: UnixStream, status: &impl Fn() -> Status) -> Result<()> {
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
pub fn query(path: &Path) -> Result<Status> {
    let mut stream = UnixStream::connect(path).with_context(|| {
        format!("cannot reach the predictio daemon at {} (is `predictio daemon` running? root only)", path.display())
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.write_all(b"status\n")?;
    let mut text = String::new();
    stream.read_to_string(&mut text)?;
    serde_json::from_str(&text).context("the daemon's answer is not a status document")
}
