//! Page ranges: the unit of every prediction.
//!
//! A [`PageRange`] is a half-open interval of page indices `[start, end)` in one
//! file. Policies speak in pages, not bytes, so that the executor can compare a
//! prediction directly with page-cache residency.

use std::fmt;

/// The page size predictio works in. The executor refuses to start on a kernel
/// whose page size differs (see [`crate::executor::Executor::new`]).
pub const PAGE_SIZE: u64 = 4096;

/// log2 of [`PAGE_SIZE`].
pub const PAGE_SHIFT: u32 = 12;

/// A half-open range of page indices `[start, end)` within one file.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, serde::Serialize, serde::Deserialize)]
pub struct PageRange {
    /// First page index.
    pub start: u64,
    /// One past the last page index.
    pub end: u64,
}

impl PageRange {
    /// The pages `[start, end)`. An inverted range is empty.
    pub const fn new(start: u64, end: u64) -> Self {
        Self { start, end: if end < start { start } else { end } }
    }

    /// One page.
    pub const fn page(index: u64) -> Self {
        Self { start: index, end: index.saturating_add(1) }
    }

    /// The smallest page range that covers the bytes `[offset, offset + len)`.
    pub const fn covering_bytes(offset: u64, len: u64) -> Self {
        let end_byte = offset.saturating_add(len);
        Self::new(offset >> PAGE_SHIFT, end_byte.div_ceil(PAGE_SIZE))
    }

    /// Number of pages.
    pub const fn len(&self) -> u64 {
        self.end - self.start
    }

    /// True when the range holds no page.
    pub const fn is_empty(&self) -> bool {
        self.end <= self.start
    }

    /// Byte offset of the first page.
    pub const fn byte_offset(&self) -> u64 {
        self.start << PAGE_SHIFT
    }

    /// Length in bytes.
    pub const fn byte_len(&self) -> u64 {
        self.len() << PAGE_SHIFT
    }

    /// The pages both ranges hold (possibly empty).
    pub fn intersect(&self, other: &PageRange) -> PageRange {
        PageRange::new(self.start.max(other.start), self.end.min(other.end))
    }

    /// True when `page` lies in the range.
    pub const fn contains(&self, page: u64) -> bool {
        page >= self.start && page < self.end
    }
}

/// Appends `pages` to `ranges`, merged into the last range when it starts
/// inside it or right where it ends (pages in the order they are wanted:
/// neighbours, or a page two pieces share, become one range; a range that
/// starts earlier stays a range of its own). Empty ranges are left out.
pub fn push_merged(ranges: &mut Vec<PageRange>, pages: PageRange) {
    if !pages.is_empty() && !merge_into_last(ranges, pages) {
        ranges.push(pages);
    }
}

/// Merges `pages` into the last of `ranges` when it starts inside it or
/// right where it ends (as [`push_merged`] does); false, and nothing
/// changed, otherwise: the caller decides whether it may append.
pub fn merge_into_last(ranges: &mut [PageRange], pages: PageRange) -> bool {
    match ranges.last_mut() {
        Some(last) if last.start <= pages.start && pages.start <= last.end => {
            last.end = last.end.max(pages.end);
            true
        }
        _ => false,
    }
}

impl fmt::Debug for PageRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pages {}..{}", self.start, self.end)
    }
}

impl fmt::Display for PageRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A byte range `[offset, offset + len)` within one file, as hints speak it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct ByteRange {
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

impl ByteRange {
    /// The bytes `[offset, offset + len)`.
    pub const fn new(offset: u64, len: u64) -> Self {
        Self { offset, len }
    }

    /// The pages that cover these bytes.
    pub const fn pages(&self) -> PageRange {
        PageRange::covering_bytes(self.offset, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pushed_neighbours_and_shared_pages_merge_and_nothing_else_does() {
        let mut ranges = Vec::new();
        for (start, end) in [(10, 20), (20, 25), (24, 30), (30, 30), (5, 8), (8, 9), (40, 41)] {
            push_merged(&mut ranges, PageRange::new(start, end));
        }
        assert_eq!(ranges, vec![PageRange::new(10, 30), PageRange::new(5, 9), PageRange::new(40, 41)]);
        // A range inside the last one adds nothing.
        push_merged(&mut ranges, PageRange::new(40, 41));
        assert_eq!(ranges.len(), 3);
    }

    #[test]
    fn covering_bytes_rounds_outward() {
        assert_eq!(PageRange::covering_bytes(0, 1), PageRange::new(0, 1));
        assert_eq!(PageRange::covering_bytes(4095, 2), PageRange::new(0, 2));
        assert_eq!(PageRange::covering_bytes(8192, 4096), PageRange::new(2, 3));
        assert!(PageRange::covering_bytes(8192, 0).is_empty());
    }

    #[test]
    fn inverted_is_empty_and_intersect() {
        assert!(PageRange::new(5, 3).is_empty());
        assert_eq!(PageRange::new(0, 10).intersect(&PageRange::new(5, 20)), PageRange::new(5, 10));
        assert!(PageRange::new(0, 5).intersect(&PageRange::new(5, 9)).is_empty());
    }
}
