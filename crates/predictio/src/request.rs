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
    /// Bulk data the program will map or read whole (model tensors): the
    /// executor streams its runs front to back through the kernel's own
    /// readahead, which caches them in large folios (see
    /// [`crate::executor::stream`]), instead of issuing them through its
    /// backend.
    pub sequential: bool,
    /// This request's own pacing window, in pages: while its reads are
    /// issued, at most this many pages of reads that report no completion
    /// may be in flight (0: the executor's own
    /// [`crate::executor::Limits::max_unsettled_pages`]; nothing when that
    /// is unbounded). A launch replay too small to be bound by the
    /// device's throughput asks for a narrower one, so the program's own
    /// reads wait behind less (see
    /// [`crate::launch::ReplayPacing::window_pages`]); the `columns`
    /// policy, whose reader reads exactly those pages next, for a wider one
    /// ([`crate::policies::columns::ColumnsConfig::pacing_bytes`]).
    pub window_pages: u64,
    /// The process the prediction is for, where known (a hint's sender, an
    /// observed process): the memory-pressure guard weighs the memory cgroup
    /// it runs in too ([`crate::pressure`]). `None`: only the executor's own
    /// cgroup and the machine.
    pub target_pid: Option<u32>,
}

impl Request {
    /// A speculative request.
    pub fn new(file: FileRef, ranges: Vec<PageRange>, origin: PolicyId) -> Self {
        Self {
            file,
            ranges,
            origin,
            urgency: Urgency::Speculative,
            sequential: false,
            window_pages: 0,
            target_pid: None,
        }
    }

    /// The same request, for process `pid` (see [`Request::target_pid`]; 0,
    /// a pid not visible here, names none).
    pub fn for_process(mut self, pid: u32) -> Self {
        self.target_pid = (pid != 0).then_some(pid);
        self
    }

    /// The same request with a narrower pacing window (see
    /// [`Request::window_pages`]).
    pub fn paced(mut self, window_pages: u64) -> Self {
        self.window_pages = window_pages;
        self
    }

    /// The same request, marked to be streamed (see [`Request::sequential`]).
    pub fn streamed(mut self) -> Self {
        self.sequential = true;
        self
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

/// A directory whose entries a launch looked up, held open by whoever
/// prepared the replay (so a metadata prefetch never resolves a path: it
/// lists the directory the descriptor names).
#[derive(Clone, Debug)]
pub struct MetaDir {
    dir: std::sync::Arc<std::fs::File>,
    path: std::sync::Arc<str>,
}

impl MetaDir {
    /// Opens the directory at `path`; fails (`ENOTDIR`) unless it is a
    /// directory (`O_DIRECTORY`: anything else — a FIFO, a device — is
    /// refused before it is opened, so trying a path has no side effect).
    pub fn open(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = path.as_ref();
        let dir = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY).open(path)?;
        Ok(Self { dir: std::sync::Arc::new(dir), path: path.to_string_lossy().into() })
    }

    /// [`MetaDir::open`] for a path from a record or a profile: no
    /// component may be a symbolic link (`openat2` with
    /// `RESOLVE_NO_SYMLINKS`), so nobody who can write a directory on the
    /// path can point the listing elsewhere.
    pub fn open_no_follow(path: impl AsRef<std::path::Path>) -> std::io::Result<Self> {
        use rustix::fs::{Mode, OFlags, ResolveFlags};
        let path = path.as_ref();
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
        let fd = rustix::fs::openat2(rustix::fs::CWD, path, flags, Mode::empty(), resolve)?;
        Ok(Self { dir: std::sync::Arc::new(std::fs::File::from(fd)), path: path.to_string_lossy().into() })
    }

    /// Whether the directory lives on a filesystem that keeps its data on
    /// storage: listing one in `/proc`, `/sys` or a tmpfs reads nothing
    /// from a device ([`crate::sys::memory_only_fs`]).
    pub fn on_storage(&self) -> bool {
        crate::sys::memory_only_fs(self.as_fd()).is_ok_and(|memory| !memory)
    }

    /// The path it was opened at (for display).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The held descriptor.
    pub fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.dir.as_fd()
    }
}

/// Names a launch looked up in one directory (some that do not exist), to
/// look up again: `fstatat` through the held descriptor, which reads the
/// directory blocks the lookup needs and, for a name that exists, its inode.
#[derive(Clone, Debug)]
pub struct MetaLookup {
    /// The directory.
    pub dir: MetaDir,
    /// Single path components (no `/`), in the order they were looked up.
    pub names: std::sync::Arc<[Box<str>]>,
}

/// A metadata prediction: these names will be looked up, these directories
/// searched (names looked up, some that do not exist; entries listed). The
/// executor's metadata threads look each name up again (`fstatat`) and list
/// each directory (`getdents64`), which brings their blocks into the cache;
/// nothing is returned to anyone.
#[derive(Clone, Debug)]
pub struct MetaRequest {
    /// Paths a program is being exec'd from, resolved first as the exec
    /// will resolve them: each path with its symbolic links, then its
    /// interpreter (a `#!` line's, an ELF file's dynamic loader) and so on
    /// ([`crate::exec_image`]), reading each file's first page. Absolute
    /// paths only; the rest are skipped.
    pub execs: Vec<std::sync::Arc<str>>,
    /// Names to look up, in the order they are expected to be looked up;
    /// done before the directories are listed.
    pub lookups: Vec<MetaLookup>,
    /// The directories, in the order they are expected to be searched.
    pub dirs: Vec<MetaDir>,
    /// The policy that made the prediction (for accounting).
    pub origin: PolicyId,
}
