//! The executor's table of pages being read: a second request for them is
//! skipped instead of read twice.

use std::collections::{BTreeMap, HashMap};

use crate::file::FileId;
use crate::page::PageRange;

/// Per file, disjoint page spans in flight (start → end).
#[derive(Debug, Default)]
pub struct InFlight {
    files: HashMap<FileId, BTreeMap<u64, u64>>,
    pages: u64,
}

impl InFlight {
    /// Pages in flight over all files.
    pub fn pages(&self) -> u64 {
        self.pages
    }

    /// Appends to `out` the parts of `range` not in flight; returns how many
    /// pages were in flight.
    pub fn subtract(&self, file: FileId, range: PageRange, out: &mut Vec<PageRange>) -> u64 {
        let Some(spans) = self.files.get(&file) else {
            out.push(range);
            return 0;
        };
        let mut cursor = range.start;
        let mut skipped = 0;
        // The span starting at or before range.start may reach into it.
        let first = spans.range(..=range.start).next_back().map(|(s, e)| (*s, *e));
        let later = spans.range(range.start + 1..range.end).map(|(s, e)| (*s, *e));
        for (start, end) in first.into_iter().chain(later) {
            let overlap = PageRange::new(start, end).intersect(&range);
            if overlap.is_empty() {
                continue;
            }
            if cursor < overlap.start {
                out.push(PageRange::new(cursor, overlap.start));
            }
            skipped += overlap.len();
            cursor = cursor.max(overlap.end);
        }
        if cursor < range.end {
            out.push(PageRange::new(cursor, range.end));
        }
        skipped
    }

    /// Marks `range` in flight. The caller only inserts ranges it got from
    /// [`Self::subtract`], so spans stay disjoint.
    pub fn insert(&mut self, file: FileId, range: PageRange) {
        if range.is_empty() {
            return;
        }
        self.files.entry(file).or_default().insert(range.start, range.end);
        self.pages += range.len();
    }

    /// Unmarks a range inserted before.
    pub fn remove(&mut self, file: FileId, range: PageRange) {
        let Some(spans) = self.files.get_mut(&file) else { return };
        if spans.remove(&range.start).is_some() {
            self.pages -= range.len();
        }
        if spans.is_empty() {
            self.files.remove(&file);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const F: FileId = FileId { dev: 0, ino: 1 };

    #[test]
    fn subtract_and_remove() {
        let mut t = InFlight::default();
        t.insert(F, PageRange::new(10, 20));
        t.insert(F, PageRange::new(30, 40));
        let mut out = Vec::new();
        assert_eq!(t.subtract(F, PageRange::new(0, 50), &mut out), 20);
        assert_eq!(out, vec![PageRange::new(0, 10), PageRange::new(20, 30), PageRange::new(40, 50)]);
        out.clear();
        assert_eq!(t.subtract(F, PageRange::new(15, 35), &mut out), 10);
        assert_eq!(out, vec![PageRange::new(20, 30)]);
        out.clear();
        assert_eq!(t.subtract(FileId { dev: 0, ino: 2 }, PageRange::new(15, 35), &mut out), 0);
        assert_eq!(t.pages(), 20);
        t.remove(F, PageRange::new(10, 20));
        t.remove(F, PageRange::new(30, 40));
        assert_eq!(t.pages(), 0);
        out.clear();
        assert_eq!(t.subtract(F, PageRange::new(0, 50), &mut out), 0);
    }
}
