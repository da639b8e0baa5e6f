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

pub mod command;
pub mod model;
pub mod naming;
pub mod policy;
pub mod profile;
pub mod recorder;
pub mod shape;
pub mod store;

/// The executor's unsettled window ([`crate::executor::Limits::max_unsettled_pages`])
/// for launch replays, in pages (4 MiB). A replay hands tens to hundreds of
/// MiB to `fadvise` at once; unpaced, the block layer queues it all and
/// every read of the program's own that is not in the profile — a
/// directory block or inode on the path of an exec it runs, a page no
/// profile predicted — waits behind it (measured on the launch bench: a
/// single directory lookup waited 80–150 ms), and the scheduler, sorting
/// the queue by sector, undoes the replay's order of first use. This
/// machine's disk reaches its full bandwidth with about 1 MiB in flight
/// (one 1 MiB read at a time, or eight of 64 KiB); 4 MiB keeps it there
/// for replays of small scattered ranges too, with settled reads leaving
/// the window out of order ([`crate::executor::engine::SETTLE_SCAN`]).
/// Against 16 MiB on the launch bench (three runs each way, interleaved):
/// clang -c 101–110 → 87–89 ms, rustc, gdb, python3, ipython3 and
/// Chromium within noise.
pub const REPLAY_MAX_UNSETTLED_PAGES: u64 = 1024;

pub use model::{ModelLimits, PageModel, WalkLimits, Walked};
pub use policy::{LaunchKey, LaunchPolicy, Replay, ReplayBook};
pub use profile::{FileIdentity, FirstRuns, Freshness, LaunchRun, LearnLimits, Profile};
pub use recorder::{AccessSource, Recorder, WindowLimits};
pub use store::{Store, StoreError};
