//! The daemon's status document: what `predictio stat` and `top` show and the
//! metrics endpoint exports.

use predictio::accounting::{Counters, Stats};
use predictio::pipeline::PipelineStats;
use serde::{Deserialize, Serialize};

use crate::launch::replay::ReplayCounts;
use crate::launch::store::BenefitSummary;

/// Everything the daemon reports.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Status {
    /// predictio's version.
    pub version: String,
    /// The daemon's pid.
    pub pid: u32,
    /// Seconds since start.
    pub uptime_s: f64,
    /// The executor's backend.
    pub backend: String,
    /// Why the configured backend was replaced, if it was.
    pub fallback: Option<String>,
    /// The observation source in use: "ebpf", "fanotify" or "none".
    pub source: String,
    /// Why observation runs on a fallback or not at all.
    pub source_note: Option<String>,
    /// The kernel features the daemon runs as if absent (`[observe]
    /// assume_missing`), by name.
    #[serde(default)]
    pub assumed_missing: Vec<String>,
    /// Running policies.
    pub policies: Vec<String>,
    /// Executor accounting: total, per origin, per file.
    pub executor: Stats,
    /// The event pipeline.
    pub pipeline: PipelineStats,
    /// The hint server's counters (free-form: the server's own schema).
    pub hints: serde_json::Value,
    /// The observer's counters (free-form).
    pub observer: serde_json::Value,
    /// The launch service: its replayer and what each profile's replays
    /// gained (`None`: launch learning and replay are off).
    #[serde(default)]
    pub launch: Option<LaunchStatus>,
}

/// The launch service's part of the status.
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct LaunchStatus {
    /// Shadow mode (`[launch] shadow`): replays are scored, never issued.
    pub shadow: bool,
    /// What the replayer's jobs did (in shadow mode: counted as shadowed,
    /// nothing opened or requested).
    pub replayer: ReplayCounts,
    /// Per profile scored or retired, by executable and shape: its benefit.
    pub profiles: Vec<ProfileBenefit>,
}

/// One profile's line in [`LaunchStatus`].
#[derive(Debug, Clone, Serialize, Deserialize, Default, PartialEq)]
pub struct ProfileBenefit {
    /// The executable's path.
    pub exe: String,
    /// The command shape.
    pub shape: String,
    /// What its replays gained.
    #[serde(flatten)]
    pub benefit: BenefitSummary,
}

/// The counters worth a line of their own, in display order.
pub fn headline(c: &Counters) -> [(&'static str, u64); 9] {
    [
        ("requested_pages", c.requested_pages),
        ("skipped_resident_pages", c.skipped_resident_pages),
        ("skipped_inflight_pages", c.skipped_inflight_pages),
        ("issued_pages", c.issued_pages),
        ("completed_pages", c.completed_pages),
        ("hit_pages", c.hit_pages),
        ("wasted_pages", c.wasted_pages),
        ("dropped_pages", c.dropped_pages),
        ("errors", c.errors),
    ]
}
