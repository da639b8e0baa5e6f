//! The daemon's parts that are not commands: configuration, the status
//! document, the control socket and the metrics endpoint.

pub mod config;
pub mod control;
pub mod launch;
pub mod metrics;
pub mod sources;
pub mod status;
