//! The workloads, one module each.

pub mod access_patterns;
pub mod backends;
pub mod control_path;
pub mod daemon_cost;
pub mod event_path;
pub mod large_read;
pub mod launch;
pub mod launch_daemon;
pub mod launch_preload;
pub mod llm_load;
pub mod lmdb_scan;
pub mod model_load;
pub mod no_structure;
pub mod reader_sides;
pub mod rocksdb;
pub mod seq_read;
pub mod shuffle_read;
pub mod sqlite_scan;
