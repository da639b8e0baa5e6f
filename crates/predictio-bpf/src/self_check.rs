//! The start-up self-check of kernel observation: does the observer just
//! opened report a page-cache miss of a known page of a known file, as
//! `stat` names the file?
//!
//! The tracepoints' layouts are checked against tracefs before anything is
//! attached (`layout.rs`, the perf decoder), but a kernel can still report
//! something else than what the programs assume: a field of the same name
//! and size that means something else, a device number encoded otherwise, a
//! backport that changed when a tracepoint fires. So before the daemon
//! hands an observer to its draining thread, it proves it on one read:
//!
//! 1. [`Probe::create`] makes a file of [`PROBE_PAGES`] pages in a
//!    directory on a disk file system (tmpfs pages never pass through
//!    `mm_filemap_add_to_page_cache`), unnamed (`O_TMPFILE`, or created
//!    with `O_EXCL` and unlinked at once), mode 0600, writes it, `fsync`s it
//!    and drops its pages (`POSIX_FADV_DONTNEED`, checked with `mincore`);
//!    readahead is off on it (`POSIX_FADV_RANDOM`).
//! 2. A forked child reads one page of it with one `pread` and exits. A
//!    child, because the daemon's eBPF observer drops the daemon's own
//!    page events in the kernel ([`crate::ObserverConfig::ignore_own_pages`],
//!    fixed at load).
//! 3. The observer is polled until that page's miss arrives, for at most
//!    [`WAIT`]; then [`verdict`] judges what the check's events say.
//! 4. The file is closed (its pages go with it) and what that reports is
//!    drained too.
//!
//! Every event of the check (the probe file's misses and evictions, the
//! child's fork, exit and misses) is kept from `on_other`, which gets the
//! rest. It takes a few milliseconds (a 256 KiB write and its `fsync`, a
//! fork, a one-page read).
//!
//! On btrfs and overlayfs `stat()` reports another device than the
//! superblock's, which the tracepoints carry; there the probe's misses are
//! matched by inode alone (see the crate documentation's "Device numbers").

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use predictio::{Event, FileId, FileRef, PAGE_SIZE, PageRange};

use crate::sys;

/// Pages of the probe file.
pub const PROBE_PAGES: u64 = 64;

/// How long the check waits for the read's miss to be reported.
pub const WAIT: Duration = Duration::from_secs(2);

/// The largest folio (in pages) a one-page read with readahead off may
/// plausibly bring in around its page: file systems whose blocks are
/// larger than a page (up to 64 KiB) cache whole blocks.
pub const MAX_FOLIO_PAGES: u64 = 16;

/// Which page the check reads and which page's miss it expects. They are
/// the same page ([`Default`]) except in a test of the refusal, which
/// expects a page the read does not touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The page the child reads (below [`PROBE_PAGES`]).
    pub read_page: u64,
    /// The page whose miss must be reported.
    pub expect_page: u64,
}

impl Default for ProbeSpec {
    /// Page 37: odd and away from both ends, so that a misread index is
    /// not taken for it.
    fn default() -> Self {
        Self { read_page: 37, expect_page: 37 }
    }
}

/// Why the check could not run (it says nothing about the observer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProbeError {
    /// No candidate directory is on a disk file system this process can
    /// create a file in; each tried directory and why it was passed over.
    #[error("no directory on a disk file system for the probe file: {tried}")]
    NoDirectory {
        /// `dir: why`, for each candidate.
        tried: String,
    },
    /// Writing, syncing or advising the probe file failed.
    #[error("probe file: {step}: {source}")]
    File {
        /// The step.
        step: &'static str,
        /// The error.
        source: std::io::Error,
    },
    /// The page to read stayed cached after `POSIX_FADV_DONTNEED`: its read
    /// would not miss.
    #[error("page {page} of the probe file stayed cached after POSIX_FADV_DONTNEED")]
    StillCached {
        /// The page.
        page: u64,
    },
    /// The reading child could not be forked or failed its read.
    #[error("the probe's reader: {0}")]
    Reader(String),
    /// The spec names a page outside the probe file.
    #[error("probe page {0} is outside the {PROBE_PAGES}-page probe file")]
    Spec(u64),
}

/// Why an observer is refused: what it reported of the probe's read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// No miss of the expected page of the probe file arrived in time.
    /// `reader_misses` are the misses reported for the reading process on
    /// other files (`(file, page)`, the first few): a file identity read
    /// wrongly shows there.
    #[error(
        "no page-cache miss of page {page} of the probe file (dev {dev:#x}, ino {ino}) was reported within {WAIT:?}{}",
        describe_elsewhere(reader_misses)
    )]
    NoMiss {
        /// The expected page.
        page: u64,
        /// The probe file's device (`st_dev`).
        dev: u64,
        /// The probe file's inode.
        ino: u64,
        /// Misses of the reader on other files.
        reader_misses: Vec<(FileId, u64)>,
    },
    /// The probe file's misses are not the one page read (or a folio
    /// around it).
    #[error("the read of page {page} of the probe file was reported as misses of pages {pages:?}")]
    WrongPages {
        /// The page read.
        page: u64,
        /// The pages reported missed.
        pages: Vec<u64>,
    },
    /// Polling the observer failed.
    #[error("polling the observer: {0}")]
    Poll(String),
}

fn describe_elsewhere(misses: &[(FileId, u64)]) -> String {
    if misses.is_empty() {
        return String::new();
    }
    let shown: Vec<String> =
        misses.iter().map(|(file, page)| format!("dev {:#x} ino {} page {page}", file.dev, file.ino)).collect();
    format!("; the reader's misses were reported as {}", shown.join(", "))
}

/// What the check expects: the probe file, the page, and who read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The probe file, as `stat` names it.
    pub file: FileId,
    /// The page whose miss must be reported.
    pub page: u64,
    /// The reading process.
    pub reader: u32,
    /// Match the file by inode alone: its file system's `stat` device is
    /// not the superblock's (btrfs, overlayfs).
    pub any_device: bool,
}

impl Expected {
    /// Whether `file` is the probe file.
    fn is_probe(&self, file: &FileId) -> bool {
        file.ino == self.file.ino && (self.any_device || file.dev == self.file.dev)
    }

    /// Whether `event` belongs to the check: the probe file's, or the
    /// reading child's (its fork, misses, exit). Such events are the
    /// daemon's own and must not reach its policies.
    pub fn owns(&self, event: &Event) -> bool {
        match event {
            Event::PageAccess { pid, file, .. } | Event::PageMiss { pid, file, .. } => {
                *pid == self.reader || self.is_probe(file)
            }
            Event::PageEvict { file, .. } => self.is_probe(file),
            Event::Fork { child, .. } => *child == self.reader,
            Event::Exit { pid, .. } | Event::Exec { pid, .. } => *pid == self.reader,
            _ => false,
        }
    }
}

/// Judges the check's events (those [`Expected::owns`], from the read on):
/// passed when a miss of the expected page of the probe file is among them
/// and the probe file's misses all lie in one aligned folio of at most
/// [`MAX_FOLIO_PAGES`] pages around it (readahead is off: a one-page read
/// brings in that page, or the block holding it).
pub fn verdict(expected: &Expected, events: &[Event]) -> Result<(), Refusal> {
    let mut pages = std::collections::BTreeSet::new();
    let mut reader_misses = Vec::new();
    for event in events {
        if let Event::PageMiss { pid, file, pages: missed, .. } = event {
            if expected.is_probe(file) {
                // A probe file's run is a folio or a few: bounded by the
                // verdict below, so at most a block's pages are listed.
                pages.extend((missed.start..missed.end).take(MAX_FOLIO_PAGES as usize + 1));
            } else if *pid == expected.reader && reader_misses.len() < 4 {
                reader_misses.push((*file, missed.start));
            }
        }
    }
    if !pages.contains(&expected.page) {
        if pages.is_empty() {
            let FileId { dev, ino } = expected.file;
            return Err(Refusal::NoMiss { page: expected.page, dev, ino, reader_misses });
        }
        return Err(Refusal::WrongPages { page: expected.page, pages: pages.into_iter().collect() });
    }
    let (first, last) = (pages.first().copied().unwrap_or(0), pages.last().copied().unwrap_or(0));
    let in_one_folio = (0..=MAX_FOLIO_PAGES.trailing_zeros()).any(|order| {
        let start = expected.page & !((1u64 << order) - 1);
        first >= start && last < start + (1 << order)
    });
    if !in_one_folio {
        return Err(Refusal::WrongPages { page: expected.page, pages: pages.into_iter().collect() });
    }
    Ok(())
}

/// What [`run`] found.
#[derive(Debug)]
pub enum Outcome {
    /// The observer reported the read as expected.
    Passed {
        /// How long the check took.
        took: Duration,
    },
    /// The observer reported something else: do not use it.
    Refused(Refusal),
    /// The check could not run here; nothing is known about the observer.
    Unchecked(ProbeError),
}

/// The probe file: unnamed (or unlinked), cached pages dropped, readahead
/// off. Closed (and gone) when dropped.
#[derive(Debug)]
pub struct Probe {
    file: FileRef,
    any_device: bool,
}

/// `fstatfs` magic numbers of file systems whose pages never go through
/// the page-cache insertion tracepoint (shmem, ramfs).
const IN_MEMORY: [u64; 2] = [libc::TMPFS_MAGIC as u64, 0x8584_58f6 /* RAMFS_MAGIC */];

/// File systems whose `stat` device differs from the superblock's.
const OWN_DEVICE: [u64; 2] = [libc::BTRFS_SUPER_MAGIC as u64, libc::OVERLAYFS_SUPER_MAGIC as u64];

impl Probe {
    /// Makes the probe file in the first of `dirs` that is on a disk file
    /// system and lets this process create a file.
    pub fn create(dirs: &[PathBuf]) -> Result<Probe, ProbeError> {
        let mut tried = Vec::new();
        for dir in dirs {
            match Self::create_in(dir) {
                Ok(probe) => return Ok(probe),
                Err(why) => tried.push(format!("{}: {why}", dir.display())),
            }
        }
        Err(ProbeError::NoDirectory { tried: tried.join("; ") })
    }

    fn create_in(dir: &Path) -> Result<Probe, String> {
        let kind = rustix::fs::statfs(dir).map_err(|e| e.to_string())?.f_type as u64;
        if IN_MEMORY.contains(&kind) {
            return Err("in memory (tmpfs or ramfs)".into());
        }
        let file = open_unnamed(dir).map_err(|e| e.to_string())?;
        let kind = rustix::fs::fstatfs(&file).map_err(|e| e.to_string())?.f_type as u64;
        if IN_MEMORY.contains(&kind) {
            return Err("in memory (tmpfs or ramfs)".into());
        }
        let file = FileRef::from_file(file).map_err(|e| e.to_string())?;
        Ok(Probe { file, any_device: OWN_DEVICE.contains(&kind) })
    }

    /// The probe file, as `stat` names it.
    pub fn id(&self) -> FileId {
        self.file.id()
    }

    /// Writes the file, syncs it, drops its cached pages and turns
    /// readahead off; checks that `page` is not cached.
    fn prepare(&self, page: u64) -> Result<(), ProbeError> {
        use std::io::Write as _;
        let step = |step| move |source| ProbeError::File { step, source };
        let data: Vec<u8> = (0..PROBE_PAGES * PAGE_SIZE).map(|i| (i / PAGE_SIZE) as u8).collect();
        let mut file = self.file.file();
        file.write_all(&data).map_err(step("write"))?;
        file.sync_all().map_err(step("fsync"))?;
        let fd = self.file.as_fd();
        predictio::os::fadvise(fd, 0, 0, predictio::os::Advice::Random).map_err(step("fadvise RANDOM"))?;
        // A page still on a per-CPU list may survive the first advice.
        for _ in 0..3 {
            predictio::os::fadvise(fd, 0, 0, predictio::os::Advice::DontNeed).map_err(step("fadvise DONTNEED"))?;
            let cached = predictio::cache::uptodate_pages(&self.file, &[PageRange::new(page, page + 1)])
                .map_err(step("mincore"))?;
            if cached == 0 {
                return Ok(());
            }
        }
        Err(ProbeError::StillCached { page })
    }
}

/// An unnamed file in `dir` (`O_TMPFILE`), or, where the file system
/// cannot make one, a new file (`O_EXCL`, never an existing one or a
/// link) unlinked at once. Mode 0600 either way.
fn open_unnamed(dir: &Path) -> std::io::Result<File> {
    let unnamed =
        std::fs::OpenOptions::new().read(true).write(true).custom_flags(libc::O_TMPFILE).mode(0o600).open(dir);
    match unnamed {
        Ok(file) => return Ok(file),
        Err(err) if matches!(err.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)) => {}
        Err(err) => return Err(err),
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    let path = dir.join(format!(".predictio-self-check-{}-{nanos}", std::process::id()));
    let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(file)
}

/// How [`run`] polls the observer under check: `poll(timeout, on_event)`
/// delivers what the observer has, waiting up to `timeout` when it has
/// nothing (as [`crate::Observer::poll`] and
/// [`crate::perf::PerfObserver::poll`] do).
pub type Poll<'a> = dyn FnMut(Duration, &mut dyn FnMut(Event)) -> Result<usize, String> + 'a;

/// Runs the check on an observer reporting every process (see the module
/// documentation): makes the probe file in the first usable of `dirs`,
/// reads `spec.read_page` of it in a child, and judges whether the
/// observer reported a miss of `spec.expect_page`. Every event the check
/// does not own goes to `on_other`, in order.
pub fn run(dirs: &[PathBuf], spec: ProbeSpec, poll: &mut Poll<'_>, on_other: &mut dyn FnMut(Event)) -> Outcome {
    let started = Instant::now();
    for page in [spec.read_page, spec.expect_page] {
        if page >= PROBE_PAGES {
            return Outcome::Unchecked(ProbeError::Spec(page));
        }
    }
    let probe = match Probe::create(dirs) {
        Ok(probe) => probe,
        Err(err) => return Outcome::Unchecked(err),
    };
    let file = probe.id();
    // Before the read: only the probe file's events are the check's.
    let before = Expected { file, page: spec.expect_page, reader: 0, any_device: probe.any_device };
    let prepared = probe.prepare(spec.read_page);
    if let Err(err) = drain(poll, &before, &mut Vec::new(), on_other) {
        return Outcome::Refused(err);
    }
    if let Err(err) = prepared {
        return Outcome::Unchecked(err);
    }
    let offset = spec.read_page * PAGE_SIZE;
    let reader = match sys::pread_in_child(probe.file.as_fd(), offset, PAGE_SIZE as usize) {
        Ok((pid, Some(false))) => return Outcome::Unchecked(ProbeError::Reader(format!("pid {pid}: its read failed"))),
        Ok((pid, _)) => pid,
        Err(err) => return Outcome::Unchecked(ProbeError::Reader(format!("fork: {err}"))),
    };
    let expected = Expected { reader, ..before };
    let mut owned = Vec::new();
    let deadline = started + WAIT;
    let seen = |owned: &[Event]| {
        owned.iter().any(
            |e| matches!(e, Event::PageMiss { file, pages, .. } if expected.is_probe(file) && pages.contains(expected.page)),
        )
    };
    // The child has exited: its read's records are in the observer's
    // buffers already. Polling waits only for an observer that is slow
    // to hand them over (or never will).
    let mut polled = drain(poll, &expected, &mut owned, on_other);
    while polled.is_ok() && !seen(&owned) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        polled = poll_once(poll, left.min(Duration::from_millis(10)), &expected, &mut owned, on_other);
    }
    let judged = polled.and_then(|()| verdict(&expected, &owned));
    // Closing the file drops its pages: those evictions are the check's too.
    drop(probe);
    let closed = drain(poll, &expected, &mut Vec::new(), on_other);
    match judged.and(closed) {
        Ok(()) => Outcome::Passed { took: started.elapsed() },
        Err(refusal) => Outcome::Refused(refusal),
    }
}

/// Delivers what the observer has now, without waiting.
fn drain(
    poll: &mut Poll<'_>,
    expected: &Expected,
    owned: &mut Vec<Event>,
    on_other: &mut dyn FnMut(Event),
) -> Result<(), Refusal> {
    // A bounded number of rounds: a busy machine keeps the buffers filling.
    for _ in 0..64 {
        let mut delivered = 0;
        poll_counted(poll, Duration::ZERO, expected, owned, on_other, &mut delivered)?;
        if delivered == 0 {
            break;
        }
    }
    Ok(())
}

fn poll_once(
    poll: &mut Poll<'_>,
    timeout: Duration,
    expected: &Expected,
    owned: &mut Vec<Event>,
    on_other: &mut dyn FnMut(Event),
) -> Result<(), Refusal> {
    poll_counted(poll, timeout, expected, owned, on_other, &mut 0)
}

fn poll_counted(
    poll: &mut Poll<'_>,
    timeout: Duration,
    expected: &Expected,
    owned: &mut Vec<Event>,
    on_other: &mut dyn FnMut(Event),
    delivered: &mut usize,
) -> Result<(), Refusal> {
    *delivered = poll(timeout, &mut |event| {
        if expected.owns(&event) {
            owned.push(event);
        } else {
            on_other(event);
        }
    })
    .map_err(Refusal::Poll)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const PROBE: FileId = FileId { dev: 0x803, ino: 1234 };

    /// A temporary directory on a disk file system: under /var/tmp, or the
    /// crate's own directory where /var/tmp is in memory.
    fn disk_dir() -> tempfile::TempDir {
        let var_tmp = rustix::fs::statfs("/var/tmp").is_ok_and(|fs| !IN_MEMORY.contains(&(fs.f_type as u64)));
        let parent = if var_tmp { "/var/tmp" } else { env!("CARGO_MANIFEST_DIR") };
        tempfile::Builder::new().prefix("predictio-self-check").tempdir_in(parent).expect("tempdir")
    }
    const READER: u32 = 4321;

    fn expected() -> Expected {
        Expected { file: PROBE, page: 37, reader: READER, any_device: false }
    }

    fn miss(file: FileId, page: u64) -> Event {
        Event::PageMiss { pid: READER, file, pages: PageRange::page(page), time_ns: 1 }
    }

    #[test]
    fn the_page_read_passes_alone_or_in_its_folio() {
        assert_eq!(verdict(&expected(), &[miss(PROBE, 37)]), Ok(()));
        // An order-2 folio (36..40) and a 16-page block (32..48) hold it.
        let folio: Vec<Event> = (36..40).map(|p| miss(PROBE, p)).collect();
        assert_eq!(verdict(&expected(), &folio), Ok(()));
        let block: Vec<Event> = (32..48).map(|p| miss(PROBE, p)).collect();
        assert_eq!(verdict(&expected(), &block), Ok(()));
        // Other processes' events on other files do not matter.
        let mut busy =
            vec![Event::PageMiss { pid: 1, file: FileId { dev: 1, ino: 2 }, pages: PageRange::page(0), time_ns: 0 }];
        busy.push(miss(PROBE, 37));
        assert_eq!(verdict(&expected(), &busy), Ok(()));
    }

    #[test]
    fn a_missing_or_wrong_report_is_refused() {
        let err = verdict(&expected(), &[]).expect_err("nothing");
        assert!(matches!(err, Refusal::NoMiss { page: 37, .. }), "{err}");
        // Another page, pages before it beyond a folio, readahead.
        for pages in [vec![38], vec![5, 37], (37..69).collect::<Vec<u64>>(), vec![30, 37]] {
            let events: Vec<Event> = pages.iter().map(|&p| miss(PROBE, p)).collect();
            let err = verdict(&expected(), &events).expect_err("wrong pages");
            assert!(matches!(err, Refusal::WrongPages { page: 37, .. }), "{pages:?}: {err}");
        }
        // The right page on a wrong file (a device or inode read wrongly):
        // the reader's misses elsewhere are named.
        let elsewhere = FileId { dev: 0x800003, ino: 1234 };
        let err = verdict(&expected(), &[miss(elsewhere, 37)]).expect_err("wrong device");
        assert!(err.to_string().contains("dev 0x800003 ino 1234 page 37"), "{err}");
        // ... unless the file system's stat device is not the superblock's.
        let btrfs = Expected { any_device: true, ..expected() };
        assert_eq!(verdict(&btrfs, &[miss(elsewhere, 37)]), Ok(()));
    }

    #[test]
    fn the_check_owns_the_probe_file_s_and_the_reader_s_events() {
        let e = expected();
        let other = FileId { dev: 0x803, ino: 99 };
        assert!(e.owns(&miss(PROBE, 3)));
        assert!(e.owns(&miss(other, 3)), "the reader's");
        assert!(e.owns(&Event::PageEvict { file: PROBE, pages: PageRange::page(3), time_ns: 0 }));
        assert!(e.owns(&Event::Fork { parent: 1, child: READER, time_ns: 0 }));
        assert!(e.owns(&Event::Exit { pid: READER, time_ns: 0 }));
        assert!(!e.owns(&Event::PageMiss { pid: 1, file: other, pages: PageRange::page(3), time_ns: 0 }));
        assert!(!e.owns(&Event::PageEvict { file: other, pages: PageRange::page(3), time_ns: 0 }));
        assert!(!e.owns(&Event::Exit { pid: 1, time_ns: 0 }));
    }

    #[test]
    fn the_probe_file_is_unnamed_private_and_on_disk() {
        let disk = disk_dir();
        let in_memory = PathBuf::from("/dev/shm");
        let dirs = [in_memory.clone(), disk.path().to_owned()];
        let probe = match Probe::create(&dirs) {
            Ok(probe) => probe,
            Err(err) => panic!("{err}"),
        };
        let meta = probe.file.file().metadata().expect("fstat");
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert_eq!(meta.nlink(), 0, "no name left behind");
        assert_eq!(std::fs::read_dir(disk.path()).expect("ls").count(), 0);
        probe.prepare(37).expect("written, synced, dropped");
        assert_eq!(probe.file.file().metadata().expect("fstat").len(), PROBE_PAGES * PAGE_SIZE);
        let err = Probe::create(&[in_memory]).expect_err("tmpfs only");
        assert!(err.to_string().contains("in memory"), "{err}");
    }

    /// A fake observer that reports nothing of the read: the refusal path,
    /// without a kernel.
    #[test]
    fn run_refuses_an_observer_that_reports_nothing() {
        let disk = disk_dir();
        let dirs = [disk.path().to_owned()];
        let mut others = 0;
        // Nothing reported at all.
        let mut silent = |_: Duration, on: &mut dyn FnMut(Event)| {
            on(Event::Exit { pid: 1, time_ns: 0 });
            Ok(0)
        };
        let started = Instant::now();
        match run(&dirs, ProbeSpec::default(), &mut silent, &mut |_| others += 1) {
            Outcome::Refused(Refusal::NoMiss { page: 37, .. }) => {}
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() >= WAIT, "it waited for the miss");
        assert!(others > 0, "other events are handed on");
        let err = run(&dirs, ProbeSpec { read_page: 64, expect_page: 0 }, &mut silent, &mut |_| {});
        assert!(matches!(err, Outcome::Unchecked(ProbeError::Spec(64))), "{err:?}");
    }
}
