//! `hints`: programs that know what they will read say so; this policy turns
//! their plain page ranges into imminent requests, unchanged. (Read plans —
//! segments to be read in order — go to the `readplan` policy, which paces
//! them ahead of the reader.)
//! It predicts nothing itself — the program did — so there is nothing to get
//! wrong but the bounds, which the executor keeps.

use crate::event::{Event, EventKind, EventKinds};
use crate::page::PageRange;
use crate::policy::{Policy, PolicyContext};
use crate::request::Urgency;

/// Passes `Pages` hints to the executor.
#[derive(Debug, Default)]
pub struct HintPolicy {
    forwarded: u64,
    unknown_file: u64,
}

impl HintPolicy {
    /// Hints forwarded, and hints for files the runtime holds no descriptor
    /// for (ignored).
    pub fn counts(&self) -> (u64, u64) {
        (self.forwarded, self.unknown_file)
    }
}

impl Policy for HintPolicy {
    fn name(&self) -> &str {
        "hints"
    }

    fn interests(&self) -> EventKinds {
        EventKinds::of(&[EventKind::Pages])
    }

    fn on_event(&mut self, event: &Event, ctx: &mut PolicyContext<'_>) {
        let Event::Pages { file, ranges } = event else { return };
        let (file, ranges): (_, Vec<PageRange>) = (*file, ranges.to_vec());
        if ctx.request(file, ranges, Urgency::Imminent) {
            self.forwarded += 1;
        } else {
            self.unknown_file += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::file::{FileId, FileRef};
    use crate::policy::{FileTable, PolicyId};

    #[test]
    fn forwards_held_files_only() {
        let file = FileRef::open("/proc/self/exe").expect("open");
        let mut files = FileTable::default();
        files.insert(file.clone());
        let mut out = Vec::new();
        let mut policy = HintPolicy::default();
        let plan = Event::Pages { file: file.id(), ranges: vec![PageRange::new(2, 3)].into() };
        policy.on_event(&plan, &mut PolicyContext::new(&files, &mut out, PolicyId(3)));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ranges, vec![PageRange::new(2, 3)]);
        assert_eq!(out[0].urgency, Urgency::Imminent);
        assert_eq!(out[0].origin, PolicyId(3));
        let stranger = Event::Pages { file: FileId { dev: 9, ino: 9 }, ranges: vec![PageRange::new(0, 1)].into() };
        policy.on_event(&stranger, &mut PolicyContext::new(&files, &mut out, PolicyId(3)));
        assert_eq!(out.len(), 1, "no descriptor, no request");
        assert_eq!(policy.counts(), (1, 1));
    }
}
