//! One module per subcommand.

pub mod bench;
pub mod daemon;
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

use anyhow::{Context, Result, bail};
use predictio::FileRef;
use predictio::file::FileError;

/// Opens `path` for the executor with an error a person can act on.
pub fn open(path: &std::path::Path) -> Result<FileRef> {
    match FileRef::open(path) {
        Ok(file) => Ok(file),
        Err(FileError::Open { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            bail!("{}: no such file", path.display())
        }
        Err(FileError::Open { source, .. }) if source.kind() == std::io::ErrorKind::PermissionDenied => {
            bail!("{}: permission denied (you can only prefetch files you can read)", path.display())
        }
        Err(FileError::Open { source, .. }) if source.raw_os_error() == Some(libc::EISDIR) => {
            bail!("{}: is a directory, not a file", path.display())
        }
        Err(FileError::NotRegular { .. }) => {
            let kind = std::fs::metadata(path)
                .map(|m| if m.is_dir() { "is a directory, not a file" } else { "not a regular file" });
            bail!("{}: {}", path.display(), kind.unwrap_or("not a regular file"))
        }
        Err(err) => Err(err).with_context(|| format!("opening {}", path.display())),
    }
}
