//! Policies that ship with the core.
//!
//! | policy | wants | does |
//! | --- | --- | --- |
//! | [`hints::HintPolicy`] (`hints`) | `Pages` | asks for exactly the pages a program named, as imminent |
//! | [`btree::BtreePolicy`] (`btree`) | `TreeChildEnter` | a growing window of the upcoming children of a B-tree scan, recent duplicates suppressed |
//! | [`stream::StreamPolicy`] (`stream`) | `PageAccess` (reads), `StreamRead`, `Exit` | confirms sequential and strided readers, keeps a window ahead of each that grows while it is read and shrinks on waste; speculative |
//! | [`readplan::ReadPlanPolicy`] (`readplan`) | `ReadPlan`, `PageAccess`, `StreamRead` | fetches planned segments in order, a bounded distance ahead of the reader, with a bound shared by all files; imminent |

pub mod btree;
pub mod hints;
pub mod readplan;
pub mod stream;

use crate::policy::Policy;

/// Names of the policies [`by_name`] knows.
pub const NAMES: [&str; 4] = ["hints", "btree", "stream", "readplan"];

/// The policies the daemon and `predictio run` start with: the ones driven by
/// what programs say (hints, read plans, B-tree traversals). `stream`
/// speculates from observed reads and is opt-in until its benchmarks show it
/// never slows a reader the kernel's readahead already serves.
pub const DEFAULT: [&str; 3] = ["hints", "readplan", "btree"];

/// A policy by its name.
pub fn by_name(name: &str) -> Option<Box<dyn Policy>> {
    match name {
        "hints" => Some(Box::new(hints::HintPolicy::default())),
        "btree" => Some(Box::new(btree::BtreePolicy::default())),
        "stream" => Some(Box::new(stream::StreamPolicy::default())),
        "readplan" => Some(Box::new(readplan::ReadPlanPolicy::default())),
        _ => None,
    }
}
