//! Fallback observation with fanotify, for machines where eBPF cannot run
//! (no BPF in the kernel or container, BPF locked down, a build without
//! clang) but `CAP_SYS_ADMIN` is available.
//!
//! It sees much less than eBPF: which process opened which file
//! ([`Event::FileOpen`]) and which executable a process started
//! ([`Event::Exec`]), on the mounts it was asked to watch; no page accesses,
//! misses, evictions, forks or exits. That is enough for trigger-based launch
//! prefetching (seed 001): an exec or the open of a known file starts a
//! replay.
//!
//! Each event carries a descriptor of the file; [`FanotifyObserver`] reads
//! `(st_dev, st_ino)` from it with `fstat` and closes it at once, so its
//! [`FileId`]s are exactly those of `stat()`. It never reads file data. Its
//! own opens are not reported.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use predictio::{Event, FileId};

use crate::sys;

/// What a [`FanotifyObserver`] watches.
#[derive(Clone, Debug, Default)]
pub struct FanotifyConfig {
    /// Paths whose mounts are watched (any path inside a mount marks the
    /// whole mount), e.g. `/` and `/home`.
    pub mounts: Vec<PathBuf>,
    /// Mark whole file systems (`FAN_MARK_FILESYSTEM`: every mount and bind
    /// mount of them) instead of single mounts.
    pub whole_filesystems: bool,
}

/// Why the fanotify observer could not start or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FanotifyError {
    /// `fanotify_init` failed (`EPERM` without `CAP_SYS_ADMIN`, `ENOSYS`
    /// without fanotify).
    #[error("fanotify_init: {source}")]
    Init {
        /// The error.
        source: io::Error,
    },
    /// `fanotify_mark` on a path failed.
    #[error("fanotify_mark {path}: {source}")]
    Mark {
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// No path to watch was given.
    #[error("no mount to watch")]
    NoMounts,
    /// Reading or polling the fanotify descriptor failed.
    #[error("{call}: {source}")]
    Read {
        /// The call.
        call: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The kernel's event records are not in the format this code reads.
    #[error("fanotify event format: {0}")]
    Format(String),
}

impl FanotifyError {
    /// True when fanotify cannot run here (no privilege, no kernel support):
    /// the caller should run without kernel observation and say so.
    pub fn is_unavailable(&self) -> bool {
        match self {
            FanotifyError::Init { source } | FanotifyError::Mark { source, .. } => {
                matches!(source.raw_os_error(), Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EINVAL))
            }
            _ => false,
        }
    }
}

/// Counters of a [`FanotifyObserver`].
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct FanotifyStats {
    /// Events delivered.
    pub events: u64,
    /// `FileOpen` events.
    pub opens: u64,
    /// `Exec` events.
    pub execs: u64,
    /// Times the kernel's queue overflowed (events were lost).
    pub overflows: u64,
    /// Events skipped: not a regular file, our own opens, unreadable.
    pub skipped: u64,
}

/// fanotify observation of file opens and execs on a set of mounts.
#[derive(Debug)]
pub struct FanotifyObserver {
    group: File,
    buf: Vec<u8>,
    own_pid: u32,
    stats: FanotifyStats,
}

impl FanotifyObserver {
    /// Creates the fanotify group and marks the mounts. Needs `CAP_SYS_ADMIN`.
    pub fn new(config: &FanotifyConfig) -> Result<FanotifyObserver, FanotifyError> {
        if config.mounts.is_empty() {
            return Err(FanotifyError::NoMounts);
        }
        let group: OwnedFd = sys::fanotify_init(libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC | libc::FAN_NONBLOCK)
            .map_err(|source| FanotifyError::Init { source })?;
        let scope = if config.whole_filesystems { libc::FAN_MARK_FILESYSTEM } else { libc::FAN_MARK_MOUNT };
        for path in &config.mounts {
            sys::fanotify_mark(group.as_fd(), libc::FAN_MARK_ADD | scope, libc::FAN_OPEN | libc::FAN_OPEN_EXEC, path)
                .map_err(|source| FanotifyError::Mark { path: path.clone(), source })?;
        }
        Ok(FanotifyObserver {
            group: File::from(group),
            buf: vec![0; 64 << 10],
            own_pid: std::process::id(),
            stats: FanotifyStats::default(),
        })
    }

    /// The name of this event source, for logs and `predictio stat`.
    pub fn source_name(&self) -> &'static str {
        "fanotify"
    }

    /// Delivers the queued events; if there are none, waits up to `timeout`
    /// for some. Returns the number of events delivered.
    pub fn poll(&mut self, timeout: Duration, on_event: &mut impl FnMut(Event)) -> Result<usize, FanotifyError> {
        let delivered = self.drain(on_event)?;
        if delivered > 0 || timeout.is_zero() {
            return Ok(delivered);
        }
        sys::poll_readable(self.group.as_fd(), timeout)
            .map_err(|source| FanotifyError::Read { call: "poll", source })?;
        self.drain(on_event)
    }

    /// Delivers the queued events without waiting.
    pub fn drain(&mut self, on_event: &mut impl FnMut(Event)) -> Result<usize, FanotifyError> {
        let mut delivered = 0;
        loop {
            let time_ns = sys::monotonic_ns();
            let Self { group, buf, own_pid, stats } = self;
            let read = sys::read_fanotify(group, buf, &mut |record| {
                if let Some(event) = to_event(record, *own_pid, time_ns, stats) {
                    delivered += 1;
                    on_event(event);
                }
            });
            match read {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if err.kind() == io::ErrorKind::InvalidData => {
                    return Err(FanotifyError::Format(err.to_string()));
                }
                Err(source) => return Err(FanotifyError::Read { call: "read", source }),
            }
        }
        self.stats.events += delivered as u64;
        Ok(delivered)
    }

    /// Counters since creation.
    pub fn stats(&self) -> FanotifyStats {
        self.stats
    }
}

/// The group's descriptor, for a consumer that waits on it together with
/// descriptors of its own (a stop signal): readable while events are
/// queued, every event waking a wait on it.
impl AsFd for FanotifyObserver {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.group.as_fd()
    }
}

/// The event a fanotify record reports, if any (counted in `stats`).
fn to_event(record: sys::FanotifyRecord, own_pid: u32, time_ns: u64, stats: &mut FanotifyStats) -> Option<Event> {
    if record.mask & libc::FAN_Q_OVERFLOW != 0 {
        stats.overflows += 1;
        return None;
    }
    let pid = u32::try_from(record.pid).unwrap_or(0);
    // The descriptor is closed when `record.file` drops, at the end of this call.
    let stat = record.file.as_ref().and_then(|f| f.metadata().ok());
    let Some(stat) = stat.filter(|s| s.file_type().is_file() && pid != own_pid) else {
        stats.skipped += 1;
        return None;
    };
    let file = FileId { dev: stat.dev(), ino: stat.ino() };
    if record.mask & libc::FAN_OPEN_EXEC != 0 {
        stats.execs += 1;
        Some(Event::Exec { pid, exe: file, shape: crate::record::shape_of_process(pid), time_ns })
    } else {
        stats.opens += 1;
        Some(Event::FileOpen { pid, file, time_ns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_layout() {
        use sys::{FANOTIFY_METADATA_LEN, FanotifyMetadata};
        assert_eq!(size_of::<libc::fanotify_event_metadata>(), FANOTIFY_METADATA_LEN);
        let mut bytes = vec![0u8; FANOTIFY_METADATA_LEN];
        bytes[0..4].copy_from_slice(&24u32.to_ne_bytes());
        bytes[4] = 3;
        bytes[8..16].copy_from_slice(&(libc::FAN_OPEN | libc::FAN_OPEN_EXEC).to_ne_bytes());
        bytes[16..20].copy_from_slice(&(-1i32).to_ne_bytes());
        bytes[20..24].copy_from_slice(&77i32.to_ne_bytes());
        let meta = FanotifyMetadata::parse(&bytes);
        let want =
            FanotifyMetadata { event_len: 24, vers: 3, mask: libc::FAN_OPEN | libc::FAN_OPEN_EXEC, fd: -1, pid: 77 };
        assert_eq!(meta, want);
    }

    #[test]
    fn overflow_and_descriptorless_records_are_counted_not_reported() {
        let mut stats = FanotifyStats::default();
        let overflow = sys::FanotifyRecord { mask: libc::FAN_Q_OVERFLOW, pid: 0, file: None };
        assert_eq!(to_event(overflow, 1, 0, &mut stats), None);
        let no_fd = sys::FanotifyRecord { mask: libc::FAN_OPEN, pid: 5, file: None };
        assert_eq!(to_event(no_fd, 1, 0, &mut stats), None);
        assert_eq!((stats.overflows, stats.skipped), (1, 1));
    }

    #[test]
    fn no_mounts_is_an_error() {
        assert!(matches!(FanotifyObserver::new(&FanotifyConfig::default()), Err(FanotifyError::NoMounts)));
    }
}
