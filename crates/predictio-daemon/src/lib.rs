//! The predictio daemon as a library: what `predictio daemon` runs as root.
//!
//! - [`config`]: the TOML configuration, every key optional, validated.
//! - [`sources`]: the event sources (eBPF, perf tracepoints or fanotify, and
//!   the hint socket) feeding the core's pipeline.
//! - [`launch`]: the launch service — the profile store, the learner that
//!   turns observed launches into profiles, and the opening of a profile's
//!   files into a replay — all off the event path.
//! - [`control`], [`metrics`], [`status`]: `predictio stat`/`top` over the
//!   control socket, and the Prometheus text endpoint.
//! - [`service`]: all of it wired together; [`notify`] tells systemd
//!   (`Type=notify`) once the sockets are bound.
//! - [`check`]: what a configuration would run on this machine, found
//!   without starting the service (`predictio daemon --check`).
//!
//! Errors are typed, one enum per module ([`config::ConfigError`],
//! [`sources::SourcesError`], [`control::ControlError`],
//! [`metrics::MetricsError`], and [`service::ServiceError`] over them),
//! each variant naming the operation and the path or key that failed.
//!
//! Prediction and prefetching live in the core crate (`predictio`); this
//! crate owns what a long-running root service adds around them: files
//! and sockets opened on its own authority, threads, and their lifetimes.
#![deny(unsafe_code)]

pub mod check;
pub mod config;
pub mod control;
pub mod launch;
pub mod metrics;
pub mod notify;
pub mod service;
pub mod sources;
pub mod status;

/// The stop signal of one of the daemon's threads, as a descriptor the
/// thread waits on together with its real source
/// ([`predictio::os::poll_readable_any`]): the thread holds the other end
/// of a socket pair, which becomes readable for good once this end is
/// closed ([`Stopper::stop`], or dropping it). No thread needs a timeout to
/// notice a stop, and none that looks late misses it.
#[derive(Debug)]
struct Stopper(Option<std::os::unix::net::UnixStream>);

impl Stopper {
    /// A stop signal, and the end its thread waits on.
    fn new() -> std::io::Result<(Self, std::os::unix::net::UnixStream)> {
        let (signal, wait) = std::os::unix::net::UnixStream::pair()?;
        Ok((Self(Some(signal)), wait))
    }

    /// Signals the stop (idempotent).
    fn stop(&mut self) {
        self.0 = None;
    }
}

/// Waits until `listener` has a connection to accept or `stop` is
/// signalled; true once stopped. An idle server sleeps in `poll(2)` and
/// wakes for nothing else.
fn wait_for_connection(listener: impl std::os::fd::AsFd, stop: impl std::os::fd::AsFd) -> bool {
    match predictio::os::poll_readable_any([listener.as_fd(), stop.as_fd()], None) {
        Ok([_, stopped]) => stopped,
        // Not expected (EBADF, ENOMEM): do not spin on it.
        Err(_) => {
            std::thread::sleep(std::time::Duration::from_millis(100));
            false
        }
    }
}
