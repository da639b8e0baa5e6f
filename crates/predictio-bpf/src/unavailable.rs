//! The observer of a build without a BPF object (see `build.rs`): it has the
//! same API, and [`Observer::load`] always returns [`BpfError::Unavailable`].

use std::time::Duration;

use predictio::Event;

use crate::hooks::{Hook, MissingHook};
use crate::{BpfError, ObserverConfig, ObserverStats};

/// No value of this type exists.
#[derive(Debug)]
enum Never {}

/// Quiets a warm launch's hits (unavailable in this build: no value exists).
#[derive(Clone, Debug)]
pub struct Quieter {
    never: std::sync::Arc<Never>,
}

impl Quieter {
    /// Files of one launch listed at most.
    pub const MAX_FILES: usize = 4096;

    /// Hits of `pid` on `files` are not reported for `span`.
    pub fn quiet(
        &self,
        _pid: u32,
        _files: impl IntoIterator<Item = predictio::FileId>,
        _span: Duration,
    ) -> Result<usize, BpfError> {
        match *self.never {}
    }

    /// `pid` joins the files listed for `set`.
    pub fn join(&self, _pid: u32, _set: u32, _span: Duration) -> Result<(), BpfError> {
        match *self.never {}
    }
}

/// eBPF observation of page-cache accesses and process trees (unavailable in
/// this build: [`Observer::load`] says why).
#[derive(Debug)]
pub struct Observer {
    never: Never,
}

impl Observer {
    /// Always fails with [`BpfError::Unavailable`] naming what the build lacked.
    pub fn load(_config: ObserverConfig) -> Result<Observer, BpfError> {
        Err(BpfError::Unavailable { reason: env!("PREDICTIO_BPF_UNAVAILABLE") })
    }

    /// The name of this event source.
    pub fn source_name(&self) -> &'static str {
        match self.never {}
    }

    /// The hooks whose programs are attached.
    pub fn attached_hooks(&self) -> &[&'static Hook] {
        match self.never {}
    }

    /// The optional hooks this observer runs without, and why.
    pub fn missing_hooks(&self) -> &[MissingHook] {
        match self.never {}
    }

    /// The configured poll timeout.
    pub fn poll_interval(&self) -> Duration {
        match self.never {}
    }

    /// Follows process `pid` and its descendants.
    pub fn follow(&mut self, _pid: u32) -> Result<(), BpfError> {
        match self.never {}
    }

    /// Stops following `pid`.
    pub fn unfollow(&mut self, _pid: u32) -> Result<bool, BpfError> {
        match self.never {}
    }

    /// The handle that quiets warm launches' hits.
    pub fn quieter(&self) -> Quieter {
        match self.never {}
    }

    /// True when `pid` is followed.
    pub fn is_followed(&self, _pid: u32) -> bool {
        match self.never {}
    }

    /// Says whether the consumer is about to sleep on the emptied ring.
    pub fn set_sleeping(&mut self, _on: bool) -> Result<(), BpfError> {
        match self.never {}
    }

    /// Reports every process or only followed ones.
    pub fn follow_all(&mut self, _on: bool) -> Result<(), BpfError> {
        match self.never {}
    }

    /// Delivers buffered records without waiting.
    pub fn drain(&mut self, _on_event: &mut impl FnMut(Event)) -> usize {
        match self.never {}
    }

    /// Delivers records, waiting up to `timeout` for some.
    pub fn poll(&mut self, _timeout: Duration, _on_event: &mut impl FnMut(Event)) -> Result<usize, BpfError> {
        match self.never {}
    }

    /// Counters since load.
    pub fn stats(&self) -> ObserverStats {
        match self.never {}
    }

    /// Closes the observer without waiting for its programs to detach.
    pub fn close_in_background(self) -> Option<u32> {
        match self.never {}
    }
}

/// The ring buffer's descriptor (none in this build).
impl std::os::fd::AsFd for Observer {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self.never {}
    }
}
