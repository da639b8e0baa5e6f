//! How a launch replay is fed to the executor: how much of it may be in
//! flight at once. A replay hands tens to hundreds of MiB to `fadvise`;
//! unpaced, the block layer queues all of it, and every read of the
//! program's own that the replay does not cover — a directory block on the
//! path of an exec it runs, a page no profile predicted — waits behind it,
//! while the scheduler, sorting the queue by sector, undoes the replay's
//! order of first use. The executor bounds what is in flight
//! ([`crate::executor::Limits::max_unsettled_pages`], set for replays by
//! [`crate::executor::ExecutorConfig::replaying`]); a small replay asks for
//! a narrower window ([`crate::request::Request::window_pages`]). The
//! right depths depend on the device (how much in flight keeps it busy, how
//! long a read waits behind a MiB): they are settings, with defaults
//! measured on one machine (`docs/notes/2026-12-06-machine-tuned-defaults.md`).
//! Pure.

/// Which replays ask for a narrower window than the executor's, and how
/// narrow (see the module docs). The daemon reads it from its `[launch]`
/// settings, and so does `predictio run`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplayPacing {
    /// Replays of at most this many pages are small: the device fills them
    /// in less than the launch's own CPU time, so their launches are bound
    /// by their own reads waiting behind the window, not by throughput.
    pub small_pages: u64,
    /// The window of a small replay, in pages: narrower than the
    /// executor's, it trades some throughput for a shorter wait of the
    /// program's own reads and more of the replay's order kept.
    pub small_window_pages: u64,
}

impl Default for ReplayPacing {
    fn default() -> Self {
        Self { small_pages: 8192, small_window_pages: 512 }
    }
}

impl ReplayPacing {
    /// The pacing window a replay of `pages` pages asks for
    /// ([`crate::request::Request::window_pages`]): a small replay's, or 0
    /// (the executor's). The executor never lets a request widen its own.
    pub fn window_pages(&self, pages: u64) -> u64 {
        if pages <= self.small_pages { self.small_window_pages } else { 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_replays_get_the_narrow_window_and_large_ones_the_executors() {
        let pacing = ReplayPacing::default();
        assert_eq!(pacing.window_pages(1), pacing.small_window_pages);
        assert_eq!(pacing.window_pages(pacing.small_pages), pacing.small_window_pages);
        assert_eq!(pacing.window_pages(pacing.small_pages + 1), 0, "the executor's");
        let none_small = ReplayPacing { small_pages: 0, ..pacing };
        assert_eq!(none_small.window_pages(1), 0, "every replay in the executor's window");
        assert_eq!(none_small.window_pages(0), none_small.small_window_pages, "an empty replay paces nothing");
    }
}
