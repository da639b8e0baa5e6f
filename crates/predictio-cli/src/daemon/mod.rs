//! The daemon's parts that are not commands: configuration, the status
//! document, the control socket and the metrics endpoint.

pub mod config;
pub mod control;
pub mod launch;
pub mod metrics;
pub mod sources;
pub mod status;

/// Waits until `listener` has a connection to accept, or 200 ms (so that an
/// accept loop sees its stop flag): an idle server sleeps in `poll(2)`
/// rather than waking every few milliseconds.
fn wait_for_connection(listener: impl std::os::fd::AsFd) {
    let _ = predictio::sys::socket::poll_readable(listener.as_fd(), Some(std::time::Duration::from_millis(200)));
}
