//! Application launch (seeds 000 §4.1 / §6.2 and 001): learn what each
//! executable's launches read, keep it, and replay it at the next exec.
//!
//! - [`model`]: the per-file first-order Markov model over pages and its
//!   bounded walk into a sorted sparse page list.
//! - [`profile`]: a profile per executable — file identities, models, the
//!   order of first touches, Notifetcher-style triggers for later phases —
//!   and merging a run into it with aging.
//! - [`recorder`]: one launch window from kernel observation, and the
//!   floor under which a launch is too trivial to learn ([`LearnFloor`]).
//! - [`pacing`]: which replays ask for a narrower window ([`ReplayPacing`]).
//! - [`policy`]: the `launch` policy that turns an exec into requests.
//! - [`score`]: whether a profile's replays pay, and when one is retired.
//!
//! All of it is pure: nothing here opens a file. The daemon's launch
//! service (crate `predictio-daemon`) keeps the profile store, walks
//! profiles into [`Replay`]s that name their files, and runs the
//! [`ReplayJob`]s the policy hands it: it opens a replay's files when the
//! exec comes, off the event path.

pub mod command;
pub mod model;
pub mod naming;
pub mod pacing;
pub mod policy;
pub mod profile;
pub mod recorder;
pub mod score;
pub mod shape;

pub use model::{ModelLimits, PageModel, WalkLimits, Walked};
pub use pacing::ReplayPacing;
pub use policy::{
    LaunchKey, LaunchPolicy, PathLookup, Replay, ReplayBook, ReplayFile, ReplayJob, ReplayPart, replay_channel,
};
pub use profile::{FileIdentity, FirstRuns, Freshness, LaunchRun, LearnLimits, Profile};
pub use recorder::{AccessSource, LearnFloor, Recorder, WindowLimits};
pub use score::{Benefit, ReplayScore, RetireRule, Retired};
