//! Pure range arithmetic of the executor: clamping, residency runs,
//! coalescing. No syscalls here, so every rule is unit-tested directly.

use crate::page::PageRange;

/// Splits `range` at the end of a file of `size_pages` pages: returns the part
/// inside the file and the number of pages past its end.
pub fn clamp_to_eof(range: PageRange, size_pages: u64) -> (PageRange, u64) {
    let kept = PageRange::new(range.start, range.end.min(size_pages));
    (kept, range.len() - kept.len())
}

/// Appends to `out` the runs of pages of `range` that `residency` (one
/// `mincore` byte per page of `range`, bit 0 = resident) marks absent.
/// Returns the number of resident pages.
pub fn absent_runs(range: PageRange, residency: &[u8], out: &mut Vec<PageRange>) -> u64 {
    let mut resident = 0;
    let mut run_start: Option<u64> = None;
    for (i, byte) in residency.iter().enumerate().take(range.len() as usize) {
        let page = range.start + i as u64;
        if byte & 1 == 1 {
            resident += 1;
            if let Some(start) = run_start.take() {
                out.push(PageRange::new(start, page));
            }
        } else if run_start.is_none() {
            run_start = Some(page);
        }
    }
    // Pages past the residency map (the file shrank under us) are not absent:
    // they are not there at all.
    let end = range.start + (residency.len() as u64).min(range.len());
    if let Some(start) = run_start {
        out.push(PageRange::new(start, end));
    }
    resident
}

/// Merges neighbouring ranges (in the order given) and cuts them into I/Os of
/// at most `max_io_pages`, appending the I/Os to `out`. Order is kept: the
/// first range asked for is the first one issued.
#[derive(Debug)]
pub struct Coalescer {
    max_io_pages: u64,
    pending: Option<PageRange>,
}

impl Coalescer {
    /// A coalescer cutting at `max_io_pages` (at least 1).
    pub fn new(max_io_pages: u64) -> Self {
        Self { max_io_pages: max_io_pages.max(1), pending: None }
    }

    /// Adds the next range.
    pub fn push(&mut self, range: PageRange, out: &mut Vec<PageRange>) {
        if range.is_empty() {
            return;
        }
        match self.pending {
            Some(ref mut p) if p.end == range.start => p.end = range.end,
            Some(p) => {
                self.emit(p, out);
                self.pending = Some(range);
            }
            None => self.pending = Some(range),
        }
        // Emit whole I/Os as soon as they are full, keeping the tail pending.
        if let Some(p) = self.pending
            && p.len() >= self.max_io_pages
        {
            let whole = p.start + (p.len() / self.max_io_pages) * self.max_io_pages;
            self.emit(PageRange::new(p.start, whole), out);
            self.pending = (whole < p.end).then(|| PageRange::new(whole, p.end));
        }
    }

    /// Emits what is still pending.
    pub fn finish(&mut self, out: &mut Vec<PageRange>) {
        if let Some(p) = self.pending.take() {
            self.emit(p, out);
        }
    }

    fn emit(&self, range: PageRange, out: &mut Vec<PageRange>) {
        let mut start = range.start;
        while start < range.end {
            let end = (start + self.max_io_pages).min(range.end);
            out.push(PageRange::new(start, end));
            start = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clamp() {
        assert_eq!(clamp_to_eof(PageRange::new(0, 10), 4), (PageRange::new(0, 4), 6));
        assert_eq!(clamp_to_eof(PageRange::new(8, 10), 4), (PageRange::new(8, 8), 2));
        assert_eq!(clamp_to_eof(PageRange::new(0, 3), 4), (PageRange::new(0, 3), 0));
    }

    #[test]
    fn runs_of_absent_pages() {
        let mut out = Vec::new();
        let resident = absent_runs(PageRange::new(10, 18), &[1, 0, 0, 1, 1, 0, 0, 0], &mut out);
        assert_eq!(resident, 3);
        assert_eq!(out, vec![PageRange::new(11, 13), PageRange::new(15, 18)]);
        out.clear();
        assert_eq!(absent_runs(PageRange::new(0, 4), &[1, 1, 1, 1], &mut out), 4);
        assert!(out.is_empty());
        // A short map (file shrank): only mapped pages count.
        assert_eq!(absent_runs(PageRange::new(0, 4), &[0, 0], &mut out), 0);
        assert_eq!(out, vec![PageRange::new(0, 2)]);
    }

    #[test]
    fn coalesce_neighbours_and_cut() {
        let mut c = Coalescer::new(4);
        let mut out = Vec::new();
        for r in [PageRange::new(0, 2), PageRange::new(2, 3), PageRange::new(10, 11), PageRange::new(11, 21)] {
            c.push(r, &mut out);
        }
        c.finish(&mut out);
        assert_eq!(
            out,
            vec![PageRange::new(0, 3), PageRange::new(10, 14), PageRange::new(14, 18), PageRange::new(18, 21)]
        );
    }

    #[test]
    fn coalesce_keeps_order_of_need() {
        let mut c = Coalescer::new(64);
        let mut out = Vec::new();
        for r in [PageRange::new(50, 51), PageRange::new(3, 4), PageRange::new(4, 5)] {
            c.push(r, &mut out);
        }
        c.finish(&mut out);
        assert_eq!(out, vec![PageRange::new(50, 51), PageRange::new(3, 5)]);
    }
}
