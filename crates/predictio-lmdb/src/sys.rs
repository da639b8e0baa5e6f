//! The one unsafe edge of the adapter (its `sys` module): finding LMDB's
//! read-only map of the data file in this process, advising the kernel
//! about it (`madvise(2)` through rustix) and copying pages out of it.
//!
//! LMDB maps the data file once per environment (`mmap(NULL, mapsize,
//! PROT_READ, MAP_SHARED, fd, 0)`) and hands out keys and values as pointers
//! into that map. The map is found by the data file's inode in
//! `/proc/self/maps`. Pages are only ever read below the file's end (a read
//! past it would fault with `SIGBUS`) and inside the mapping; whoever holds
//! a [`Map`] must keep the environment open (the adapter holds a clone of
//! the `Env`) and must not resize it.

use std::io;
use std::path::Path;

use predictio::PAGE_SIZE;

/// LMDB pages the adapter reads: the kernel's page size (LMDB's default).
pub const LMDB_PAGE: usize = PAGE_SIZE as usize;

/// The address range of one environment's map. Crate-private: copying a
/// page out of it is sound only while the environment that made the map is
/// open and not resized, which the adapter guarantees by holding a clone
/// of the environment beside its one `Map`; no one outside the crate can
/// hold a `Map` past that.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Map {
    base: usize,
    len: usize,
}

impl Map {
    /// Finds the shared read-only mapping of the file `(dev, ino)` at file
    /// offset 0 in `/proc/self/maps`: the inode alone could name a file of
    /// another filesystem mapped by the same process.
    pub(crate) fn find(dev: u64, ino: u64) -> io::Result<Option<Map>> {
        let maps = std::fs::read_to_string(Path::new("/proc/self/maps"))?;
        let dev = (rustix::fs::major(dev), rustix::fs::minor(dev));
        Ok(maps.lines().find_map(|line| parse_line(line, dev, ino)))
    }

    /// The LMDB page an address inside the map falls in.
    pub(crate) fn page_of(&self, addr: usize) -> Option<u64> {
        let offset = addr.checked_sub(self.base)?;
        (offset < self.len).then_some((offset / LMDB_PAGE) as u64)
    }

    /// `madvise(MADV_RANDOM)` over the whole map: the kernel stops reading
    /// around each page fault (what LMDB's `MDB_NORDAHEAD` does at open).
    /// Advice only: what the map holds and what reads return is unchanged.
    pub(crate) fn advise_random(&self) -> io::Result<()> {
        let base = self.base as *mut std::ffi::c_void;
        // SAFETY: madvise with MADV_RANDOM only sets a readahead hint on the
        // VMAs of `base .. base + len`, a live mapping (see the module's
        // contract); it changes no memory contents and no protections.
        Ok(unsafe { rustix::mm::madvise(base, self.len, rustix::mm::Advice::Random) }?)
    }

    /// Copies page `page` into `out` if the page lies inside both the
    /// mapping and the first `file_pages` pages of the file; false otherwise.
    pub(crate) fn copy_page(&self, page: u64, file_pages: u64, out: &mut [u8; LMDB_PAGE]) -> bool {
        if page >= file_pages {
            return false;
        }
        let Some(offset) = usize::try_from(page).ok().and_then(|p| p.checked_mul(LMDB_PAGE)) else {
            return false;
        };
        if offset.checked_add(LMDB_PAGE).is_none_or(|end| end > self.len) {
            return false;
        }
        let src = (self.base + offset) as *const u8;
        // SAFETY: `src .. src + LMDB_PAGE` lies inside a live mapping of the
        // data file (checked against the mapping's length above; the holder
        // keeps the environment, hence the mapping, alive) and below the
        // file's end (checked against `file_pages`), so every byte is
        // readable without a fault. The destination is a distinct local
        // buffer. Another process may be writing pages that this
        // transaction's snapshot does not reach; such bytes are copied as
        // they are and the parser treats every page as untrusted.
        unsafe { std::ptr::copy_nonoverlapping(src, out.as_mut_ptr(), LMDB_PAGE) };
        true
    }
}

/// One line of `/proc/PID/maps`:
/// `start-end perms offset major:minor inode [path]` (numbers in hex but
/// the inode), for the file of device `(major, minor)` and inode `ino`.
fn parse_line(line: &str, dev: (u32, u32), ino: u64) -> Option<Map> {
    let mut fields = line.split_whitespace();
    let range = fields.next()?;
    let perms = fields.next()?;
    let offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let line_dev = (u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?);
    let inode: u64 = fields.next()?.parse().ok()?;
    if inode != ino || line_dev != dev || u64::from_str_radix(offset, 16).ok()? != 0 || !perms.starts_with('r') {
        return None;
    }
    let (start, end) = range.split_once('-')?;
    let start = usize::from_str_radix(start, 16).ok()?;
    let end = usize::from_str_radix(end, 16).ok()?;
    (end > start).then_some(Map { base: start, len: end - start })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let line = "7f1000000000-7f1040000000 r--s 00000000 fd:00 1234     /var/tmp/db/data.mdb";
        let dev = (0xfd, 0);
        assert_eq!(parse_line(line, dev, 1234), Some(Map { base: 0x7f10_0000_0000, len: 0x4000_0000 }));
        assert_eq!(parse_line(line, dev, 1235), None);
        assert_eq!(parse_line(line, (0xfd, 1), 1234), None, "same inode number on another device");
        let shifted = "7f1000000000-7f1040000000 r--s 00001000 fd:00 1234 /x";
        assert_eq!(parse_line(shifted, dev, 1234), None);
        assert_eq!(parse_line("garbage", dev, 1), None);
        let map = Map { base: 0x10000, len: 0x4000 };
        assert_eq!(map.page_of(0x10000), Some(0));
        assert_eq!(map.page_of(0x12fff), Some(2));
        assert_eq!(map.page_of(0x14000), None);
        assert_eq!(map.page_of(0xffff), None);
    }

    #[test]
    fn copies_only_inside_the_file_and_the_mapping() {
        // A map over a real file of 3 pages: this test's own mapping.
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let mut bytes = vec![0u8; 3 * LMDB_PAGE];
        bytes[LMDB_PAGE] = 0xAB;
        std::fs::write(&path, &bytes).expect("write");
        let data = std::fs::read(&path).expect("read");
        let map = Map { base: data.as_ptr() as usize, len: data.len() };
        let mut out = [0u8; LMDB_PAGE];
        assert!(map.copy_page(1, 3, &mut out));
        assert_eq!(out[0], 0xAB);
        assert!(!map.copy_page(3, 4, &mut out), "past the mapping");
        assert!(!map.copy_page(2, 2, &mut out), "past the file");
        assert!(!map.copy_page(u64::MAX, u64::MAX, &mut out));
    }
}
