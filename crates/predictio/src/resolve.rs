//! Finding a descriptor for a file the kernel saw a process touch.
//!
//! Kernel observation names files by `(dev, ino)` only, and a policy can only
//! request files the runtime holds a descriptor for. The resolver finds one
//! through the process that touched the file: among `/proc/PID/fd/*` and
//! `/proc/PID/map_files/*` it looks for an entry whose target has that
//! identity and opens it (a new, read-only open file description of the very
//! file the process has open). It never opens a path a client named, and it
//! only runs in the daemon or `predictio run`, which observe with the
//! privileges that eBPF needs anyway.
//!
//! Nothing it opens can make it wait or open a device: an entry is a magic
//! link that must be followed, so it is opened as [`FileRef::open`] opens a
//! path — `O_PATH` first (no FIFO waited on, no driver's open called), a
//! regular-file check on that descriptor, then a non-blocking reopen of
//! the inode checked — and `maps` is opened non-blocking, without following
//! a link, and read only if it is a regular file. The dispatcher calls it
//! on the event path.
//!
//! Scanning `/proc` is not free, so the resolver is bounded: a negative cache
//! per file, at most one scan of a process's mappings per
//! [`ResolverConfig::rescan`] and of its descriptors per
//! [`ResolverConfig::rescan_descriptors`], and at most
//! [`ResolverConfig::max_scans_per_sec`] scans overall. Identities
//! seen in a scan are remembered briefly, so the next files of the same
//! process resolve without another scan. A scan looks only where the access
//! can name the file ([`Through`]): a `read()` through a descriptor, a fault
//! through a mapping. A process's mappings are one `PROCMAP_QUERY` each (a
//! debugger maps ~250), so a program reading files it closes at once (data,
//! scripts, locales: never found) cost a scan of them all per launch.
//!
//! A file kept in memory only (tmpfs, which holds every memfd; see
//! [`crate::sys::memory_only_fs`]) is never handed on: nothing of it is read
//! from storage. Once one is found, its device is not looked at again for
//! [`ResolverConfig::in_memory_ttl`], so that the memfds a browser maps by
//! the thousand cost one scan, not one each. (The eBPF observer leaves such
//! files out itself; this covers the other observers.)

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::file::{FileId, FileRef};
use crate::sys::FileMapping;

/// Bounds of a [`Resolver`].
#[derive(Clone, Debug, PartialEq)]
pub struct ResolverConfig {
    /// How long a file that could not be resolved is not tried again.
    pub negative_ttl: Duration,
    /// Least time between two scans of the same process's mappings (or of
    /// both, for a miss).
    pub rescan: Duration,
    /// Least time between two scans of the same process's descriptors
    /// alone (for a `read()`): a listing of `/proc/PID/fd`, tens of
    /// microseconds for most processes. Short, because a program that has
    /// just read files it closed at once (a Python script's imports) opens
    /// the file that matters (its database) a moment later, and its reads
    /// until the next scan go unseen: a 60 ms query was half over.
    pub rescan_descriptors: Duration,
    /// Scans per second over all processes.
    pub max_scans_per_sec: u32,
    /// How long identities seen in a scan are remembered.
    pub seen_ttl: Duration,
    /// Entries kept in the caches before they are cleared.
    pub max_entries: usize,
    /// How long a device found to keep its files in memory only is not
    /// looked at: its number may be given to another file system once it
    /// is unmounted, so the verdict is not kept for ever.
    pub in_memory_ttl: Duration,
}

impl Default for ResolverConfig {
    fn default() -> Self {
        Self {
            negative_ttl: Duration::from_secs(5),
            rescan: Duration::from_millis(100),
            rescan_descriptors: Duration::from_millis(5),
            max_scans_per_sec: 200,
            seen_ttl: Duration::from_secs(2),
            max_entries: 1 << 16,
            in_memory_ttl: Duration::from_secs(60),
        }
    }
}

/// Counters of a [`Resolver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ResolverStats {
    /// Files resolved to a held descriptor.
    pub resolved: u64,
    /// Lookups answered "no" from the negative cache or the rate limit.
    pub skipped: u64,
    /// `/proc/PID` scans made.
    pub scans: u64,
    /// Files not found in their process.
    pub not_found: u64,
    /// Files left alone because their file system keeps them in memory
    /// only (tmpfs, memfds).
    #[serde(default)]
    pub in_memory: u64,
}

/// Where a process's access to a file can be traced back to the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Through {
    /// Its open descriptors (`/proc/PID/fd`): a `read()`, an open.
    Descriptors,
    /// Its mappings (`/proc/PID/maps`): a page fault, an exec.
    Mappings,
    /// Either (a miss, which reads and faults both cause).
    Either,
}

impl Through {
    fn descriptors(self) -> bool {
        self != Through::Mappings
    }

    fn mappings(self) -> bool {
        self != Through::Descriptors
    }
}

/// Resolves observed `(dev, ino)`s to descriptors through `/proc`.
#[derive(Debug)]
pub struct Resolver {
    config: ResolverConfig,
    negative: HashMap<(FileId, Through), Instant>,
    scanned: HashMap<(u32, Through), Instant>,
    seen: HashMap<FileId, (Seen, Instant)>,
    /// Devices whose files are kept in memory only, and since when known.
    in_memory: HashMap<u64, Instant>,
    /// Reused by every scan.
    mappings: Vec<FileMapping>,
    window: (Instant, u32),
    stats: ResolverStats,
    proc_root: PathBuf,
}

impl Resolver {
    /// A resolver over the real `/proc`.
    pub fn new(config: ResolverConfig) -> Self {
        Self::with_proc(config, "/proc")
    }

    /// A resolver over another procfs-shaped tree (tests).
    pub fn with_proc(config: ResolverConfig, proc_root: impl Into<PathBuf>) -> Self {
        Self {
            config,
            negative: HashMap::new(),
            scanned: HashMap::new(),
            seen: HashMap::new(),
            in_memory: HashMap::new(),
            mappings: Vec::new(),
            window: (Instant::now(), 0),
            stats: ResolverStats::default(),
            proc_root: proc_root.into(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> ResolverStats {
        self.stats
    }

    /// A descriptor for `file`, found through process `pid` where `through`
    /// says the access came from, if it can be found within the bounds and
    /// its file system does not keep it in memory only.
    pub fn resolve(&mut self, pid: u32, file: FileId, through: Through) -> Option<FileRef> {
        let now = Instant::now();
        if self.in_memory.get(&file.dev).is_some_and(|t| now.duration_since(*t) < self.config.in_memory_ttl) {
            self.stats.in_memory += 1;
            return None;
        }
        let found = self.find(pid, file, through, now)?;
        if crate::sys::memory_only_fs(std::os::fd::AsFd::as_fd(&found)).unwrap_or(false) {
            self.in_memory.insert(file.dev, now);
            self.stats.in_memory += 1;
            return None;
        }
        self.stats.resolved += 1;
        Some(found)
    }

    /// [`Self::resolve`] before the file system is looked at.
    fn find(&mut self, pid: u32, file: FileId, through: Through, now: Instant) -> Option<FileRef> {
        if self.negative.get(&(file, through)).is_some_and(|t| now.duration_since(*t) < self.config.negative_ttl) {
            self.stats.skipped += 1;
            return None;
        }
        if let Some(found) = self.open_seen(file, now) {
            return Some(found);
        }
        let interval =
            if through == Through::Descriptors { self.config.rescan_descriptors } else { self.config.rescan };
        let recently = self.scanned.get(&(pid, through)).is_some_and(|t| now.duration_since(*t) < interval);
        if recently || !self.take_scan_budget(now) {
            self.stats.skipped += 1;
            return None;
        }
        self.trim();
        self.scanned.insert((pid, through), now);
        self.scan(pid, through, now);
        match self.open_seen(file, now) {
            Some(found) => Some(found),
            None => {
                self.stats.not_found += 1;
                self.negative.insert((file, through), now);
                None
            }
        }
    }

    fn take_scan_budget(&mut self, now: Instant) -> bool {
        if now.duration_since(self.window.0) >= Duration::from_secs(1) {
            self.window = (now, 0);
        }
        if self.window.1 >= self.config.max_scans_per_sec {
            return false;
        }
        self.window.1 += 1;
        true
    }

    fn trim(&mut self) {
        if self.negative.len() + self.scanned.len() + self.seen.len() + self.in_memory.len() > self.config.max_entries {
            self.negative.clear();
            self.scanned.clear();
            self.seen.clear();
            self.in_memory.clear();
        }
    }

    fn open_seen(&mut self, file: FileId, now: Instant) -> Option<FileRef> {
        let (seen, at) = self.seen.get(&file)?;
        if now.duration_since(*at) >= self.config.seen_ttl {
            return None;
        }
        let path = match seen {
            Seen::Fd(path) => path.clone(),
            Seen::Mapped { pid, start, end } => self.proc_root.join(format!("{pid}/map_files/{start:x}-{end:x}")),
        };
        // A magic link: followed, but opened `O_PATH` first and checked to
        // be a regular file before the non-blocking reopen for reading.
        match FileRef::open(&path) {
            Ok(found) if found.id() == file => {
                for through in [Through::Descriptors, Through::Mappings, Through::Either] {
                    self.negative.remove(&(file, through));
                }
                Some(found)
            }
            _ => {
                self.seen.remove(&file);
                None
            }
        }
    }

    /// Remembers the identity of every regular file `pid` has open or mapped.
    /// Mappings come from the `PROCMAP_QUERY` ioctl on `/proc/PID/maps`
    /// (Linux 6.11), which gives each file mapping's device and inode
    /// without formatting its path, and on older kernels from reading
    /// `maps`, which names them too. Reading `maps` was most of the daemon
    /// dispatcher's CPU next to a warm headless Chromium (a stat of every
    /// `map_files` entry, before it, more still). Its `map_files` entry is
    /// opened only for the file asked for (the open checks the identity and
    /// that it is a regular file).
    fn scan(&mut self, pid: u32, through: Through, now: Instant) {
        self.stats.scans += 1;
        let base = self.proc_root.join(pid.to_string());
        if through.descriptors()
            && let Ok(entries) = std::fs::read_dir(base.join("fd"))
        {
            for entry in entries.flatten() {
                let path = entry.path();
                // metadata() follows the magic link to the file itself.
                if let Ok(meta) = std::fs::metadata(&path)
                    && meta.file_type().is_file()
                {
                    self.seen.insert(FileId { dev: meta.dev(), ino: meta.ino() }, (Seen::Fd(path), now));
                }
            }
        }
        if !through.mappings() {
            return;
        }
        let Some(maps) = open_regular_nonblocking(&base.join("maps")) else { return };
        self.mappings.clear();
        use std::os::fd::AsFd;
        match crate::sys::file_mappings(maps.as_fd(), MAX_MAPPINGS, &mut self.mappings) {
            Ok(()) => {}
            Err(err) if err.raw_os_error() == Some(libc::ENOTTY) => {
                let Ok(text) = std::io::read_to_string(maps) else { return };
                self.mappings.extend(text.lines().filter_map(mapped_file));
            }
            Err(_) => return,
        }
        for m in &self.mappings {
            let seen = Seen::Mapped { pid, start: m.start, end: m.end };
            self.seen.entry(FileId { dev: m.dev, ino: m.ino }).or_insert((seen, now));
        }
    }
}

/// `path` opened for reading without blocking (`O_NONBLOCK`: a FIFO there
/// does not wait for a writer) or following a final symbolic link, if it is
/// a regular file (procfs's `maps` is one).
fn open_regular_nonblocking(path: &std::path::Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let flags = libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC;
    let file = std::fs::File::options().read(true).custom_flags(flags).open(path).ok()?;
    file.metadata().is_ok_and(|m| m.is_file()).then_some(file)
}

/// Mappings of one process looked at in a scan, at most (a process has a
/// few thousand; the kernel's own limit is 65,530 by default).
const MAX_MAPPINGS: usize = 1 << 16;

/// Where a scan saw a file.
#[derive(Debug)]
enum Seen {
    /// A `/proc/PID/fd/N` entry.
    Fd(PathBuf),
    /// A mapping, whose `/proc/PID/map_files/START-END` entry opens it.
    Mapped { pid: u32, start: u64, end: u64 },
}

/// `start-end` in hex, as `maps` and `map_files` write an address range.
fn parse_range(range: &str) -> Option<(u64, u64)> {
    let (start, end) = range.split_once('-')?;
    Some((u64::from_str_radix(start, 16).ok()?, u64::from_str_radix(end, 16).ok()?))
}

/// The file mapping of one `/proc/PID/maps` line (`start-end perms offset
/// major:minor inode path`), if it maps a file.
fn mapped_file(line: &str) -> Option<FileMapping> {
    let mut fields = line.split_whitespace();
    let (start, end) = parse_range(fields.next()?)?;
    let _perms = fields.next()?;
    let _offset = fields.next()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let ino: u64 = fields.next()?.parse().ok()?;
    if ino == 0 {
        return None;
    }
    let major = u32::from_str_radix(major, 16).ok()?;
    let minor = u32::from_str_radix(minor, 16).ok()?;
    Some(FileMapping { start, end, dev: libc::makedev(major, minor), ino })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_a_file_this_process_has_open() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello").expect("write");
        let held = std::fs::File::open(&path).expect("open");
        let meta = held.metadata().expect("stat");
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        let mut r = Resolver::new(ResolverConfig::default());
        let found = r.resolve(std::process::id(), id, Through::Descriptors).expect("found through /proc/self/fd");
        assert_eq!(found.id(), id);
        assert_eq!(r.stats().resolved, 1);
    }

    #[test]
    fn unknown_files_are_negatively_cached_and_scans_bounded() {
        let mut r = Resolver::new(ResolverConfig { max_scans_per_sec: 2, ..ResolverConfig::default() });
        let ghost = FileId { dev: u64::MAX, ino: 1 };
        assert!(r.resolve(std::process::id(), ghost, Through::Either).is_none());
        assert!(r.resolve(std::process::id(), ghost, Through::Either).is_none());
        let s = r.stats();
        assert_eq!((s.scans, s.not_found, s.skipped), (1, 1, 1));
        // Other files of the same pid within `rescan` do not rescan.
        assert!(r.resolve(std::process::id(), FileId { dev: u64::MAX, ino: 2 }, Through::Either).is_none());
        assert_eq!(r.stats().scans, 1);
    }

    /// A file opened just after its process was scanned (a database opened
    /// after a script's imports) is found by its next read once
    /// `rescan_descriptors` has passed, while a miss or a fault still
    /// waits out `rescan`.
    #[test]
    fn a_file_opened_after_a_scan_is_found_by_the_next_descriptor_scan() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = ResolverConfig {
            rescan: Duration::from_secs(3600),
            rescan_descriptors: Duration::ZERO,
            ..ResolverConfig::default()
        };
        let mut r = Resolver::new(config);
        let me = std::process::id();
        let ghost = FileId { dev: u64::MAX, ino: 3 };
        assert!(r.resolve(me, ghost, Through::Descriptors).is_none());
        assert!(r.resolve(me, ghost, Through::Either).is_none());
        assert_eq!(r.stats().scans, 2);
        let path = dir.path().join("opened-later");
        std::fs::write(&path, b"db").expect("write");
        let held = std::fs::File::open(&path).expect("open");
        let meta = held.metadata().expect("stat");
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        assert!(r.resolve(me, id, Through::Either).is_none(), "a miss waits out `rescan`");
        assert_eq!(r.stats().scans, 2);
        let found = r.resolve(me, id, Through::Descriptors).expect("a read rescans the descriptors");
        assert_eq!(found.id(), id);
        assert_eq!(r.stats().scans, 3);
    }

    #[test]
    fn resolves_a_file_this_process_only_has_mapped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mapped");
        std::fs::write(&path, vec![7u8; 8192]).expect("write");
        let (id, _mapping) = {
            let file = std::fs::File::open(&path).expect("open");
            let meta = file.metadata().expect("stat");
            use std::os::fd::AsFd;
            let mapping = crate::sys::Mapping::map(file.as_fd(), 8192).expect("mmap");
            (FileId { dev: meta.dev(), ino: meta.ino() }, mapping)
        }; // the descriptor is closed: only the mapping is left
        let mut r = Resolver::new(ResolverConfig::default());
        let found =
            r.resolve(std::process::id(), id, Through::Mappings).expect("found through /proc/self/maps and map_files");
        assert_eq!(found.id(), id);
    }

    /// A memfd this process has mapped is found, and left alone: tmpfs
    /// keeps it in memory. Another memfd (the same device) then costs no
    /// scan, while a file on disk is still found.
    #[test]
    fn files_kept_in_memory_only_are_left_alone_and_their_device_is_not_scanned_again() {
        use std::os::fd::AsFd;
        let memfd = |name: &std::ffi::CStr| {
            let file = crate::sys::memfd(name).expect("memfd_create");
            file.set_len(8192).expect("ftruncate");
            let meta = file.metadata().expect("fstat");
            let mapping = crate::sys::Mapping::map(file.as_fd(), 8192).expect("mmap");
            (FileId { dev: meta.dev(), ino: meta.ino() }, mapping)
        }; // each descriptor is closed: only the mapping is left
        let (first, _first_mapping) = memfd(c"predictio-resolve-1");
        let (second, _second_mapping) = memfd(c"predictio-resolve-2");
        assert_eq!(first.dev, second.dev);
        let config = ResolverConfig { rescan: Duration::ZERO, ..ResolverConfig::default() };
        let mut r = Resolver::new(config);
        let me = std::process::id();
        assert!(r.resolve(me, first, Through::Mappings).is_none(), "a memfd is not handed on");
        assert_eq!((r.stats().scans, r.stats().in_memory, r.stats().resolved), (1, 1, 0));
        assert!(r.resolve(me, second, Through::Mappings).is_none());
        assert_eq!((r.stats().scans, r.stats().in_memory), (1, 2), "its device is not scanned again");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("on-disk");
        std::fs::write(&path, vec![7u8; 4096]).expect("write");
        let held = std::fs::File::open(&path).expect("open");
        let meta = held.metadata().expect("stat");
        let on_disk = FileId { dev: meta.dev(), ino: meta.ino() };
        if crate::sys::memory_only_fs(held.as_fd()).expect("fstatfs") {
            eprintln!("skipping the on-disk half: the temporary directory is in memory");
            return;
        }
        let found = r.resolve(me, on_disk, Through::Descriptors).expect("a file on disk is found");
        assert_eq!(found.id(), on_disk);
        assert_eq!(r.stats().resolved, 1);
    }

    #[test]
    fn the_ioctl_and_the_maps_text_agree_on_this_processs_file_mappings() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("mapped");
        std::fs::write(&path, vec![7u8; 3 * 4096]).expect("write");
        let file = std::fs::File::open(&path).expect("open");
        use std::os::fd::AsFd;
        let _mapping = crate::sys::Mapping::map(file.as_fd(), 3 * 4096).expect("mmap");
        let maps = std::fs::File::open("/proc/self/maps").expect("open maps");
        let mut queried = Vec::new();
        crate::sys::file_mappings(maps.as_fd(), MAX_MAPPINGS, &mut queried).expect("PROCMAP_QUERY (Linux 6.11)");
        let text = std::fs::read_to_string("/proc/self/maps").expect("read maps");
        let listed: Vec<FileMapping> = text.lines().filter_map(mapped_file).collect();
        let meta = file.metadata().expect("stat");
        assert!(queried.iter().any(|q| (q.dev, q.ino) == (meta.dev(), meta.ino())), "our mapping is reported");
        // The two reads are not atomic (this test's threads may map in
        // between), so compare the file mappings both saw.
        for q in &queried {
            if let Some(l) = listed.iter().find(|l| l.start == q.start) {
                assert_eq!(l, q, "the same mapping, device and inode");
            }
        }
        assert!(queried.len() * 2 >= listed.len(), "{} queried against {} listed", queried.len(), listed.len());
        assert_eq!(parse_range("7f37cc000000-7f37cc021000"), Some((0x7f37cc000000, 0x7f37cc021000)));
        assert_eq!(parse_range("nonsense"), None);
    }

    #[test]
    fn a_maps_file_that_is_not_procfs_is_read_as_text() {
        // A procfs-shaped tree (as the tests of other modules build): the
        // ioctl answers ENOTTY on a regular file and the text is parsed.
        let root = tempfile::tempdir().expect("tempdir");
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("lib");
        std::fs::write(&target, b"x").expect("write");
        let meta = std::fs::metadata(&target).expect("stat");
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        let pid_dir = root.path().join("42");
        std::fs::create_dir_all(pid_dir.join("map_files")).expect("mkdir");
        let major = libc::major(meta.dev());
        let minor = libc::minor(meta.dev());
        std::fs::write(
            pid_dir.join("maps"),
            format!("1000-2000 r--p 00000000 {major:x}:{minor:x} {} /lib\n", meta.ino()),
        )
        .expect("write maps");
        std::os::unix::fs::symlink(&target, pid_dir.join("map_files/1000-2000")).expect("symlink");
        let mut r = Resolver::with_proc(ResolverConfig::default(), root.path());
        let found = r.resolve(42, id, Through::Mappings).expect("found through the maps text and map_files");
        assert_eq!(found.id(), id);
    }

    /// A scan looks where the access came from: a file a process has only
    /// open is not found through its mappings (and `maps` is not read),
    /// one it has only mapped not through its descriptors; each is found
    /// where it is, and by a miss (either).
    #[test]
    fn a_scan_looks_only_where_the_access_can_name_the_file() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = tempfile::tempdir().expect("tempdir");
        let id_of = |path: &std::path::Path| {
            let meta = std::fs::metadata(path).expect("stat");
            FileId { dev: meta.dev(), ino: meta.ino() }
        };
        let (open, mapped) = (dir.path().join("open"), dir.path().join("mapped"));
        std::fs::write(&open, b"o").expect("write");
        std::fs::write(&mapped, b"m").expect("write");
        let (open_id, mapped_id) = (id_of(&open), id_of(&mapped));
        let pid_dir = root.path().join("42");
        std::fs::create_dir_all(pid_dir.join("fd")).expect("mkdir");
        std::fs::create_dir_all(pid_dir.join("map_files")).expect("mkdir");
        std::os::unix::fs::symlink(&open, pid_dir.join("fd/3")).expect("symlink");
        let dev = std::fs::metadata(&mapped).expect("stat").dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        std::fs::write(
            pid_dir.join("maps"),
            format!("1000-2000 r--p 00000000 {major:x}:{minor:x} {} /m\n", mapped_id.ino),
        )
        .expect("write maps");
        std::os::unix::fs::symlink(&mapped, pid_dir.join("map_files/1000-2000")).expect("symlink");
        // A resolver each: what one scan saw, it remembers for any access.
        let resolve = |id, through| {
            Resolver::with_proc(ResolverConfig::default(), root.path()).resolve(42, id, through).map(|f| f.id())
        };
        assert_eq!(resolve(mapped_id, Through::Descriptors), None, "mapped only: not among descriptors");
        assert_eq!(resolve(open_id, Through::Mappings), None, "open only: not among mappings");
        assert_eq!(resolve(mapped_id, Through::Mappings), Some(mapped_id));
        assert_eq!(resolve(open_id, Through::Descriptors), Some(open_id));
        assert_eq!(resolve(mapped_id, Through::Either), Some(mapped_id));
        assert_eq!(resolve(open_id, Through::Either), Some(open_id));
    }

    /// A procfs-shaped tree whose `maps` is a FIFO and whose `fd` entry
    /// turns into a FIFO between the scan and the open: resolving neither
    /// waits for a writer nor reads it, on the event path.
    #[test]
    fn fifos_in_place_of_proc_entries_never_make_it_wait() {
        let root = tempfile::tempdir().expect("tempdir");
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("lib");
        std::fs::write(&target, b"x").expect("write");
        let meta = std::fs::metadata(&target).expect("stat");
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        let fifo = dir.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
        let pid_dir = root.path().join("42");
        std::fs::create_dir_all(pid_dir.join("fd")).expect("mkdir");
        assert!(std::process::Command::new("mkfifo").arg(pid_dir.join("maps")).status().expect("mkfifo").success());
        std::os::unix::fs::symlink(&target, pid_dir.join("fd/3")).expect("symlink");
        let proc_root = root.path().to_path_buf();
        let swap = pid_dir.join("fd/3");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut r = Resolver::with_proc(ResolverConfig::default(), proc_root);
            let first = r.resolve(42, id, Through::Either).map(|f| f.id());
            // The entry now leads to a FIFO: the remembered path is tried
            // again without a scan.
            std::fs::remove_file(&swap).expect("rm");
            std::os::unix::fs::symlink(&fifo, &swap).expect("symlink");
            let second = r.resolve(42, id, Through::Either).map(|f| f.id());
            let _ = tx.send((first, second));
        });
        let got = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("resolving must never wait on a FIFO");
        assert_eq!(got, (Some(id), None));
    }

    #[test]
    fn maps_lines_name_the_mapped_files() {
        let line = "7f37cc000000-7f37cc021000 r--p 00000000 fe:00 247076                     /usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(
            mapped_file(line),
            Some(FileMapping { start: 0x7f37cc000000, end: 0x7f37cc021000, dev: libc::makedev(0xfe, 0), ino: 247076 })
        );
        assert_eq!(mapped_file(line).map(|m| m.dev), Some(65024), "st_dev of device fe:00");
        let nvme = "55d0a000-55d0b000 r-xp 00001000 103:02 12 /opt/bin/x";
        assert_eq!(mapped_file(nvme).map(|m| m.dev), Some(libc::makedev(259, 2)));
        assert_eq!(mapped_file("7ffd1000-7ffd2000 rw-p 00000000 00:00 0                          [stack]"), None);
        assert_eq!(mapped_file("7ffd1000-7ffd2000 rw-p 00000000 00:00 0"), None, "anonymous");
        assert_eq!(mapped_file("garbage"), None);
    }
}
