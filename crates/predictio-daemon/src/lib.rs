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

/// Waits until `listener` has a connection to accept, or 200 ms (so that an
/// accept loop sees its stop flag): an idle server sleeps in `poll(2)`
/// rather than waking every few milliseconds.
fn wait_for_connection(listener: impl std::os::fd::AsFd) {
    let _ = predictio::os::poll_readable(listener.as_fd(), Some(std::time::Duration::from_millis(200)));
}
