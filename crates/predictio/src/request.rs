//! Requests: what policies ask the executor to bring into the page cache.

use crate::file::FileRef;
use crate::page::PageRange;
use crate::policy::PolicyId;

/// How sure and how soon: decides what the executor sheds first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug, Default, serde::Serialize, serde::Deserialize)]
pub enum Urgency {
    /// A guess (history, detected stream). Dropped first under memory
    /// pressure.
    #[default]
    Speculative,
    /// The program said it is about to read these pages (a read plan, a
    /// B-tree child it is descending into). Fetching them takes no memory the
    /// program's own read would not take, so memory pressure does not shed
    /// them; every other bound still applies.
    Imminent,
}

/// A prediction: these pages of this file will be read.
#[derive(Clone, Debug)]
pub struct Request {
    /// The file, with a descriptor the runtime holds.
    pub file: FileRef,
    /// Pages, in the order they are expected to be needed.
    pub ranges: Vec<PageRange>,
    /// The policy that made the prediction (for accounting).
    pub origin: PolicyId,
    /// How sure and how soon.
    pub urgency: Urgency,
}

impl Request {
    /// A speculative request.
    pub fn new(file: FileRef, ranges: Vec<PageRange>, origin: PolicyId) -> Self {
        Self { file, ranges, origin, urgency: Urgency::Speculative }
    }

    /// The same request with another urgency.
    pub fn with_urgency(mut self, urgency: Urgency) -> Self {
        self.urgency = urgency;
        self
    }

    /// Total pages over all ranges (ranges may overlap; this is what was asked).
    pub fn pages(&self) -> u64 {
        self.ranges.iter().map(PageRange::len).sum()
    }
}
