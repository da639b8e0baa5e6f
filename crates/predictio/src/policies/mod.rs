//! Policies that ship with the core.
//!
//! | policy | wants | does |
//! | --- | --- | --- |
//! | [`hints::HintPolicy`] (`hints`) | `Pages` | asks for exactly the pages a program named, as imminent |
//! | [`btree::BtreePolicy`] (`btree`) | `TreeChildEnter` | a growing window of the upcoming children of a B-tree scan, recent duplicates suppressed |
//! | [`stream::StreamPolicy`] (`stream`) | `PageAccess` (reads), `StreamRead`, `Exit` | confirms sequential and strided readers, keeps a window ahead of each that grows while it is read and shrinks on waste; speculative |
//! | [`readplan::ReadPlanPolicy`] (`readplan`) | `ReadPlan`, `PageAccess`, `StreamRead` | fetches planned segments in order, a bounded distance ahead of the reader, with a bound shared by all files; imminent |
//! | [`tensor::TensorPolicy`] (`tensor`) | `TensorLayout`, `LayerStart`, `PageAccess`, `PageMiss`, `StreamRead` | a model file's tensors in load order, at most 512 MiB ahead of the loader (reads and mmap faults; `LayerStart` jumps to a layer) and 1 GiB over all files, each tensor once; imminent |
//! | [`scan::ScanPolicy`] (`scan`) | `Scan` | a storage engine's iterator readahead (RocksDB's): nothing for one-block scans, bounded scans fetched whole, a window doubling ahead of longer scans up to their bound; imminent |
//! | [`columns::ColumnsPolicy`] (`columns`) | `ColumnLayout`, `PageAccess`, `StreamRead` | a Parquet reader's columns (those it touched) in the row groups past the furthest it reached, at most 64 MiB ahead per file and 512 MiB in all, each chunk once, 32 MiB of it in flight; speculative, opt-in |
//! | [`learned::LearnedPolicy`] (`learned`) | `PageAccess` (reads, faults), `StreamRead`, `Exit` | a per-reader delta-correlation model (DCPT) that predicts up to 16 next accesses of repeating, even irregular, patterns; requests only after its forecasts were right three times in a row, so random readers get none; speculative |

pub mod btree;
pub mod columns;
pub mod hints;
pub mod learned;
pub mod readplan;
pub mod scan;
pub mod stream;
pub mod tensor;

use crate::policy::Policy;

/// Names of the policies [`by_name`] knows.
pub const NAMES: [&str; 8] = ["hints", "btree", "stream", "readplan", "learned", "tensor", "scan", "columns"];

/// The policies the daemon and `predictio run` start with: the ones driven by
/// what programs say (hints, read plans, B-tree traversals, tensor layouts,
/// engine scans).
/// `stream` speculates from observed reads and is opt-in until its benchmarks show it
/// never slows a reader the kernel's readahead already serves; `columns`
/// likewise, until it never slows a Parquet query that DuckDB's own reading
/// threads already keep the device busy for (docs/notes/2026-12-07-parquet.md).
pub const DEFAULT: [&str; 5] = ["hints", "readplan", "btree", "tensor", "scan"];

/// A policy by its name.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "hints" => Some(Box::new(hints::HintPolicy::default())),
        "btree" => Some(Box::new(btree::BtreePolicy::default())),
        "stream" => Some(Box::new(stream::StreamPolicy::default())),
        "readplan" => Some(Box::new(readplan::ReadPlanPolicy::default())),
        "learned" => Some(Box::new(learned::LearnedPolicy::default())),
        "tensor" => Some(Box::new(tensor::TensorPolicy::default())),
        "scan" => Some(Box::new(scan::ScanPolicy::default())),
        "columns" => Some(Box::new(columns::ColumnsPolicy::default())),
        _ => None,
    }
}
