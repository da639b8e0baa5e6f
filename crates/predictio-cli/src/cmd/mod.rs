//! One module per subcommand.

pub mod bench;
pub mod daemon;
pub mod doctor;
pub mod evict;
pub mod hint;
pub mod model;
pub mod prefetch;
pub mod profile;
pub mod read;
pub mod record;
pub mod residency;
pub mod run;
pub mod stat;
pub mod top;
pub mod trace;

use anyhow::{Result, anyhow};
use predictio::FileRef;
use predictio::file::FileError;

/// Opens `path` for the executor with an error a person can act on.
pub fn open(path: &std::path::Path) -> Result<FileRef> {
    FileRef::open(path).map_err(|err| explain(path, err))
}

/// Opens `path` for reading (a regular file only; never blocks on a FIFO
/// or opens a device) with an error a person can act on.
pub fn open_file(path: &std::path::Path) -> Result<std::fs::File> {
    predictio::file::open_regular(path).map_err(|err| explain(path, err))
}

/// `err`, from opening `path`, in words a person can act on.
fn explain(path: &std::path::Path, err: FileError) -> anyhow::Error {
    match err {
        FileError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            anyhow!("{}: no such file", path.display())
        }
        FileError::Open { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            anyhow!("{}: permission denied (you can only prefetch files you can read)", path.display())
        }
        FileError::NotRegular { .. } => {
            let kind = std::fs::symlink_metadata(path)
                .and_then(|_| std::fs::metadata(path))
                .map(|m| if m.is_dir() { "is a directory, not a file" } else { "not a regular file" });
            anyhow!("{}: {}", path.display(), kind.unwrap_or("not a regular file"))
        }
        err => anyhow::Error::new(err).context(format!("opening {}", path.display())),
    }
}
