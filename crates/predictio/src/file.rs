//! File identity and the descriptors the runtime holds.
//!
//! A file is identified by `(dev, ino)`; prefetching always goes through a
//! descriptor the runtime holds ([`FileRef`]). The executor never opens a path
//! on behalf of someone else: whoever builds a `FileRef` has proven they could
//! open the file (the security model of docs/DESIGN.md).

use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

/// A hash map keyed by kernel-given identities ([`FileId`]s, pids) that is
/// looked up on every observed event: foldhash's fast hasher, seeded at
/// random per map, costs a fraction of the standard SipHash per lookup.
/// Bounded wherever it is used, as every map here is.
pub type IdMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// A hash set of kernel-given identities (see [`IdMap`]).
pub type IdSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// A file's identity: device and inode numbers.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct FileId {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

impl fmt::Debug for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.dev, self.ino)
    }
}

impl fmt::Display for FileId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Errors building a [`FileRef`].
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path could not be opened for reading.
    #[error("cannot open {path} for reading: {source}")]
    Open {
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// `fstat` failed.
    #[error("cannot stat {path}: {source}")]
    Stat {
        /// The path, or `fd` for a descriptor.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Not a regular file (a directory, a device, a socket…).
    #[error("{path} is not a regular file")]
    NotRegular {
        /// The path.
        path: String,
    },
}

/// Opens `path` for reading as [`FileRef::open`] does — `O_PATH`, a
/// regular-file check, then a non-blocking reopen of the checked inode —
/// without marking the description for random access: for tools that read
/// a file themselves (`predictio read`, a profile import, a model's header).
pub fn open_regular(path: impl AsRef<Path>) -> Result<File, FileError> {
    open_checked(path.as_ref(), Follow::Links)
}

fn open_checked(path: &Path, follow: Follow) -> Result<File, FileError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let shown = path.display().to_string();
    let open_err = |source: rustix::io::Errno| FileError::Open { path: shown.clone(), source: source.into() };
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    let located = match follow {
        Follow::Links => rustix::fs::open(path, flags, Mode::empty()),
        Follow::Nothing => rustix::fs::openat2(
            rustix::fs::CWD,
            path,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
            ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        ),
    }
    .map_err(open_err)?;
    let stat = rustix::fs::fstat(&located).map_err(|e| FileError::Stat { path: shown.clone(), source: e.into() })?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(FileError::NotRegular { path: shown });
    }
    // Reopen the very inode that was checked, for reading. Through
    // /proc when it is mounted; else by the path again, checked below
    // to be the same file.
    let reopen = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let proc_path = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&located));
    let fd = match rustix::fs::open(proc_path.as_str(), reopen, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => match follow {
            Follow::Links => rustix::fs::open(path, reopen, Mode::empty()),
            Follow::Nothing => rustix::fs::openat2(
                rustix::fs::CWD,
                path,
                reopen | OFlags::NOFOLLOW,
                Mode::empty(),
                ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
            ),
        }
        .map_err(open_err)?,
        Err(err) => return Err(open_err(err)),
    };
    let again = rustix::fs::fstat(&fd).map_err(|e| FileError::Stat { path: shown.clone(), source: e.into() })?;
    if (again.st_dev, again.st_ino) != (stat.st_dev, stat.st_ino) {
        return Err(FileError::Open {
            path: shown,
            source: std::io::Error::other("the file changed while it was being opened"),
        });
    }
    Ok(File::from(fd))
}

/// Whether [`FileRef`]'s opens follow symbolic links.
#[derive(Clone, Copy)]
enum Follow {
    /// Any component may be a link.
    Links,
    /// No component may be a link.
    Nothing,
}

/// A file the runtime can prefetch: its identity plus a held, shared
/// descriptor. Cloning is cheap (an `Arc`).
#[derive(Clone)]
pub struct FileRef {
    id: FileId,
    file: Arc<File>,
}

impl FileRef {
    /// Opens `path` read-only and wraps it. Fails on a directory or any other
    /// non-regular file, without ever opening one for reading: the path is
    /// first opened with `O_PATH` (no open of a device's driver, no wait on
    /// a FIFO), checked to be a regular file, and only then reopened for
    /// reading through that descriptor, `O_NONBLOCK | O_NOCTTY`. Symbolic
    /// links are followed: for paths a person typed.
    ///
    /// The new open file description belongs to the runtime alone, so it is
    /// marked `POSIX_FADV_RANDOM`: the executor's reads then bring in exactly
    /// the pages asked for, with no kernel readahead of their own on top.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FileError> {
        Self::open_with(path.as_ref(), Follow::Links)
    }

    /// [`FileRef::open`] for a path that came from a record, a profile or a
    /// configuration file rather than from the person running the command:
    /// no component may be a symbolic link (`openat2` with
    /// `RESOLVE_NO_SYMLINKS`), so that nobody who can write a directory on
    /// the path can point it elsewhere.
    pub fn open_no_follow(path: impl AsRef<Path>) -> Result<Self, FileError> {
        Self::open_with(path.as_ref(), Follow::Nothing)
    }

    fn open_with(path: &Path, follow: Follow) -> Result<Self, FileError> {
        let shown = path.display().to_string();
        let file = Self::from_file_named(open_checked(path, follow)?, shown)?;
        if let Err(err) = crate::sys::fadvise(file.as_fd(), 0, 0, crate::sys::Advice::Random) {
            tracing::debug!(%err, "fadvise(RANDOM) refused; executor reads may read ahead");
        }
        Ok(file)
    }

    /// Wraps a descriptor someone already opened (an application's hint, a
    /// descriptor received over a socket). Fails unless it is a regular file.
    /// The descriptor's open file description may be shared with its owner,
    /// so its readahead mode is left alone.
    pub fn from_file(file: File) -> Result<Self, FileError> {
        Self::from_file_named(file, "fd".to_owned())
    }

    fn from_file_named(file: File, shown: String) -> Result<Self, FileError> {
        let meta = file.metadata().map_err(|source| FileError::Stat { path: shown.clone(), source })?;
        if !meta.file_type().is_file() {
            return Err(FileError::NotRegular { path: shown });
        }
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        Ok(Self { id, file: Arc::new(file) })
    }

    /// The file's identity.
    pub fn id(&self) -> FileId {
        self.id
    }

    /// The held descriptor.
    pub fn file(&self) -> &File {
        &self.file
    }
}

impl AsFd for FileRef {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }
}

impl fmt::Debug for FileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRef").field("id", &self.id).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_regular_file_opens_and_keeps_its_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("write");
        let meta = std::fs::metadata(&path).expect("stat");
        for file in [FileRef::open(&path).expect("open"), FileRef::open_no_follow(&path).expect("no-follow open")] {
            assert_eq!(file.id(), FileId { dev: meta.dev(), ino: meta.ino() });
        }
    }

    /// A FIFO swapped in where a file was expected must neither hang the
    /// open (a blocking open for reading waits for a writer) nor be read.
    #[test]
    fn a_fifo_is_refused_without_waiting_for_a_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, rustix::fs::FileType::Fifo, rustix::fs::Mode::RUSR, 0)
            .expect("mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let _ = tx.send((FileRef::open(&path).is_err(), FileRef::open_no_follow(&path).is_err()));
        });
        let refused = rx.recv_timeout(std::time::Duration::from_secs(5)).expect("opening a FIFO must not block");
        assert_eq!(refused, (true, true));
        assert!(matches!(FileRef::open(&fifo), Err(FileError::NotRegular { .. })));
    }

    #[test]
    fn devices_and_directories_are_refused() {
        for path in ["/dev/null", "/dev/zero", "/"] {
            assert!(matches!(FileRef::open(path), Err(FileError::NotRegular { .. })), "{path}");
        }
    }

    /// A path from a record may not lead through a symbolic link, even to
    /// a regular file; a path a person typed may.
    #[test]
    fn a_symbolic_link_is_followed_only_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let target = dir.path().join("target");
        std::fs::write(&target, b"x").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("symlink");
        let linked_dir = dir.path().join("dirlink");
        std::os::unix::fs::symlink(dir.path(), &linked_dir).expect("symlink");
        assert!(FileRef::open(&link).is_ok());
        // The link itself (`O_PATH | O_NOFOLLOW` names the link, not a
        // regular file) and a link among the directories.
        assert!(matches!(FileRef::open_no_follow(&link), Err(FileError::NotRegular { .. })));
        assert!(matches!(FileRef::open_no_follow(linked_dir.join("target")), Err(FileError::Open { .. })));
        assert!(FileRef::open_no_follow(&target).is_ok());
    }
}
