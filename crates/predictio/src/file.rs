//! File identity and the descriptors the runtime holds.
//!
//! A file is identified by `(dev, ino)`; prefetching always goes through a
//! descriptor the runtime holds ([`FileRef`]). The executor never opens a path
//! on behalf of someone else: whoever builds a `FileRef` has proven they could
//! open the file (that is the security model of DESIGN.md).

use std::fmt;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

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

/// A file the runtime can prefetch: its identity plus a held, shared
/// descriptor. Cloning is cheap (an `Arc`).
#[derive(Clone)]
pub struct FileRef {
    id: FileId,
    file: Arc<File>,
}

impl FileRef {
    /// Opens `path` read-only and wraps it. Fails on a directory or any other
    /// non-regular file.
    ///
    /// The new open file description belongs to the runtime alone, so it is
    /// marked `POSIX_FADV_RANDOM`: the executor's reads then bring in exactly
    /// the pages asked for, with no kernel readahead of their own on top.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, FileError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let file = File::open(path).map_err(|source| FileError::Open { path: shown.clone(), source })?;
        let file = Self::from_file_named(file, shown)?;
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
