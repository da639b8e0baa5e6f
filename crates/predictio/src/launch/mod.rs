//! Application launch (seeds 000 §4.1 / §6.2 and 001): learn what each
//! executable's launches read, keep it, and replay it at the next exec.
//!
//! - [`model`]: the per-file first-order Markov model over pages and its
//!   bounded walk into a sorted sparse page list.
//! - [`profile`]: a profile per executable — file identities, models, the
//!   order of first touches, Notifetcher-style triggers for later phases —
//!   and merging a run into it with aging.
//! - [`recorder`]: one launch window from kernel observation.
//! - [`store`]: the crash-safe, versioned, size-capped profile store.
//! - [`policy`]: the `launch` policy that turns an exec into requests.
//!
//! The model, profile, recorder and policy are pure; files are opened and
//! checked only by [`policy::Replay::open`] and the store, which their owners
//! (the CLI, the daemon) call off the event path.

pub mod model;
pub mod naming;
pub mod policy;
pub mod profile;
pub mod recorder;
pub mod store;

pub use model::{ModelLimits, PageModel, WalkLimits};
pub use policy::{LaunchPolicy, Replay, ReplayBook};
pub use profile::{FileIdentity, Freshness, LaunchRun, LearnLimits, Profile};
pub use recorder::{Recorder, WindowLimits};
pub use store::{Store, StoreError};
