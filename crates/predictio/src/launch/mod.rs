//! Application launch (seeds 000 §4.1 / §6.2 and 001): learn what each
//! executable's launches read, keep it, and replay it at the next exec.
//!
//! - [`model`]: the per-file first-order Markov model over pages and its
//!   bounded walk into a sorted sparse page list.
//! - [`profile`]: a profile per executable — file identities, models, the
//!   order of first touches, Notifetcher-style triggers for later phases —
//!   and merging a run into it with aging.
//! - [`recorder`]: one launch window from kernel observation.
//! - [`policy`]: the `launch` policy that turns an exec into requests.
//!
//! All of it is pure: nothing here opens a file. The daemon's launch
//! service (crate `predictio-daemon`) keeps the profile store and opens a
//! profile's files into a [`Replay`], off the event path.

pub mod command;
pub mod model;
pub mod naming;
pub mod policy;
pub mod profile;
pub mod recorder;
pub mod shape;

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

/// Replays of at most this many pages (32 MiB) are small: filled alone
/// in well under the launch's own CPU time on this disk (python3 14 MiB in
/// 27 ms against a 77 ms warm launch, gdb 20 MiB in 29 against 45 ms), so
/// what their launches wait for is not the device's throughput but each of
/// their own reads behind the window.
pub const REPLAY_SMALL_PAGES: u64 = 8192;

/// The pacing window of a small replay ([`REPLAY_SMALL_PAGES`]), in pages
/// (2 MiB).
pub const REPLAY_SMALL_WINDOW_PAGES: u64 = 512;

/// The pacing window a replay of `pages` pages asks for
/// ([`crate::request::Request::window_pages`]; 0: the executor's,
/// [`REPLAY_MAX_UNSETTLED_PAGES`]). A deep window buys throughput, which
/// the large replays are bound by; a shallow one makes each read of the
/// program's own wait behind less, and keeps more of the replay's order of
/// first use against the scheduler's sorting by sector, which is what the
/// small ones are bound by. On the launch bench (two rounds of 3 pairs
/// each way; per-pair ratio medians, 4 MiB → 2 MiB for every replay):
/// python3 1.27, 1.32 → 1.46, 1.41×; ipython3 1.28, 1.28 → 1.33, 1.32×;
/// gdb 1.80, 1.79 → 2.00, 2.00×; `rustc --version` (23 MiB) 5.92 → 5.58×
/// (one round); but rustc hello.rs (79 MiB) 3.08, 3.49 → 2.78, 3.27× and
/// clang (57 MiB) 2.83 → 2.69×; Chromium (157 MiB) 1.33 → 1.37×.
pub fn replay_window_pages(pages: u64) -> u64 {
    if pages <= REPLAY_SMALL_PAGES { REPLAY_SMALL_WINDOW_PAGES } else { 0 }
}

pub use model::{ModelLimits, PageModel, WalkLimits, Walked};
pub use policy::{LaunchKey, LaunchPolicy, Replay, ReplayBook, ReplayFile};
pub use profile::{FileIdentity, FirstRuns, Freshness, LaunchRun, LearnLimits, Profile};
pub use recorder::{AccessSource, Recorder, WindowLimits};
