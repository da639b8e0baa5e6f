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

/// The executor's unsettled window ([`crate::executor::Limits::max_unsettled_pages`])
/// for launch replays, in pages (16 MiB). A replay hands tens to hundreds of
/// MiB to `fadvise` at once; unpaced, the block layer queues it all and
/// every read of the program's own that is not in the profile — a
/// directory block or inode on the path of an exec it runs, a page no
/// profile predicted — waits behind it (measured on the launch bench: a
/// single directory lookup waited 80–150 ms). 16 MiB keeps the device at
/// full speed (it reaches its best bandwidth at 4 × 1 MiB in flight) while
/// such a read waits for at most about that much.
pub const REPLAY_MAX_UNSETTLED_PAGES: u64 = 4096;

pub use model::{ModelLimits, PageModel, WalkLimits};
pub use policy::{LaunchPolicy, Replay, ReplayBook};
pub use profile::{FileIdentity, Freshness, LaunchRun, LearnLimits, Profile};
pub use recorder::{AccessSource, Recorder, WindowLimits};
pub use store::{Store, StoreError};
