//! The machine a benchmark ran on: kernel, CPUs, memory, the block device
//! holding the bench directory with its `read_ahead_kb`, and that device's
//! measured limits (filled by [`crate::device::probe`]). Also the helpers
//! that find the block device behind a path through sysfs and read or set
//! its `queue/read_ahead_kb`.

use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Device throughput at one queue depth.
#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct DepthPoint {
    /// Reads kept in flight.
    pub depth: u32,
    /// Random aligned 4 KiB O_DIRECT reads per second.
    pub rand4k_iops: f64,
    /// Random aligned 1 MiB O_DIRECT reads, in MB/s (10^6 bytes per second).
    pub rand1m_MBps: f64,
}

/// What the device can do, measured with O_DIRECT reads through io_uring,
/// after the probe file was read once (the device as workloads that read
/// their files again and again see it, see [`crate::device::probe`]).
#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct DeviceLimit {
    /// best 1 MiB O_DIRECT bandwidth over the depths probed (MB/s, 10^6 bytes per second)
    pub seq_MBps: f64,
    /// Random 4 KiB reads per second at queue depth 1.
    pub rand4k_iops_qd1: f64,
    /// Random 4 KiB reads per second at the deepest depth probed (64 by default).
    pub rand4k_iops_qd64: f64,
    /// Every depth probed, shallowest first.
    pub by_depth: Vec<DepthPoint>,
}

/// The machine and the block device holding the bench directory.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Machine {
    /// Kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `MemTotal` in bytes.
    pub mem_bytes: u64,
    /// Block device name backing the bench directory, e.g. `vda`; `unknown`
    /// when none was found (overlay, tmpfs).
    pub device: String,
    /// That device's `queue/read_ahead_kb` (0 when unknown).
    pub read_ahead_kb: u64,
    /// The device's measured limits.
    pub device_limit: DeviceLimit,
}

impl Machine {
    /// Describes this machine and the block device that holds `dir` (device_limit left default; the caller fills it).
    ///
    /// When no block device can be found for `dir` (overlay, tmpfs, or `dir`
    /// missing) this still succeeds, with device `unknown` and
    /// `read_ahead_kb` 0. Fails only when `/proc` cannot be read.
    pub fn describe(dir: &Path) -> io::Result<Machine> {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")?.trim().to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mem_bytes = mem_total(&std::fs::read_to_string("/proc/meminfo")?).unwrap_or(0);
        let (device, read_ahead_kb) = match block_device_of(dir) {
            Ok((name, queue)) => {
                let ra = read_u64(&queue.join("read_ahead_kb")).unwrap_or(0);
                (name, ra)
            }
            Err(e) => {
                tracing::debug!(dir = %dir.display(), error = %e, "no block device found");
                ("unknown".to_string(), 0)
            }
        };
        Ok(Machine { kernel, cpus, mem_bytes, device, read_ahead_kb, device_limit: DeviceLimit::default() })
    }
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut fields = line.split_whitespace().skip(1);
    let n: u64 = fields.next()?.parse().ok()?;
    let mult = match fields.next() {
        Some("kB") | Some("KB") => 1024,
        None => 1,
        Some(_) => return None,
    };
    n.checked_mul(mult)
}

fn read_u64(path: &Path) -> io::Result<u64> {
    let s = std::fs::read_to_string(path)?;
    s.trim().parse().map_err(|e| {
        io::Error::new(io::ErrorKind::InvalidData, format!("{}: {:?} is not a number: {e}", path.display(), s.trim()))
    })
}

/// The sysfs directory of block device `major:minor`, resolved; the whole
/// disk's directory when it is a partition.
fn sysfs_disk_dir(major: u32, minor: u32) -> io::Result<PathBuf> {
    let link = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    let mut dir = std::fs::canonicalize(&link)
        .map_err(|e| io::Error::new(e.kind(), format!("no block device {major}:{minor} ({}: {e})", link.display())))?;
    if dir.join("partition").exists() {
        dir = dir
            .parent()
            .ok_or_else(|| io::Error::other(format!("{}: partition without parent", dir.display())))?
            .to_path_buf();
    }
    Ok(dir)
}

/// The source device of the mount whose `st_dev` is `major:minor`, from
/// `/proc/self/mountinfo` — for filesystems such as btrfs whose files
/// report an anonymous device number rather than the disk's.
fn mount_source_of(major: u32, minor: u32) -> Option<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = format!("{major}:{minor}");
    info.lines().find_map(|line| {
        let mut fields = line.split(' ');
        if fields.nth(2)? != want {
            return None;
        }
        // After the optional fields comes "-", then fstype, then source.
        let mut rest = line.split(" - ").nth(1)?.split(' ');
        let _fstype = rest.next()?;
        let source = rest.next()?;
        source.starts_with("/dev/").then(|| PathBuf::from(source))
    })
}

/// The block device (e.g. "vda") holding `path` and its sysfs queue dir: stat st_dev -> /sys/dev/block/MAJ:MIN (resolve symlink; if it is a partition, i.e. has a `partition` file, use the parent dir) -> queue/.
///
/// When `st_dev` has no sysfs entry (btrfs and other filesystems with
/// anonymous device numbers), the mount's source device from
/// `/proc/self/mountinfo` is tried. Errors with `NotFound` for filesystems
/// with no block device (overlay, tmpfs).
pub fn block_device_of(path: &Path) -> io::Result<(String, PathBuf)> {
    let dev = std::fs::metadata(path)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let disk = match sysfs_disk_dir(major, minor) {
        Ok(d) => d,
        Err(first) => {
            let source = mount_source_of(major, minor).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "{} is not on a block device (st_dev {major}:{minor}; overlay or tmpfs?): {first}",
                        path.display()
                    ),
                )
            })?;
            let rdev = std::fs::metadata(&source)?.rdev();
            sysfs_disk_dir(libc::major(rdev), libc::minor(rdev))?
        }
    };
    let name = disk
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| io::Error::other(format!("{}: no device name", disk.display())))?
        .to_string();
    let queue = disk.join("queue");
    if !queue.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{}: block device {name} has no queue directory", queue.display()),
        ));
    }
    Ok((name, queue))
}

/// Reads queue/read_ahead_kb of the device holding `path`.
pub fn read_ahead_kb(path: &Path) -> io::Result<u64> {
    let (_, queue) = block_device_of(path)?;
    read_u64(&queue.join("read_ahead_kb"))
}

/// Sets queue/read_ahead_kb of the device holding `path` (root); returns the previous value.
pub fn set_read_ahead_kb(path: &Path, kb: u64) -> io::Result<u64> {
    let (name, queue) = block_device_of(path)?;
    let file = queue.join("read_ahead_kb");
    let previous = read_u64(&file)?;
    std::fs::write(&file, format!("{kb}\n")).map_err(|e| {
        io::Error::new(e.kind(), format!("setting {name} read_ahead_kb to {kb} ({}): {e}", file.display()))
    })?;
    Ok(previous)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_device_of_root_does_not_panic() {
        match block_device_of(Path::new("/")) {
            Ok((name, queue)) => {
                assert!(!name.is_empty());
                assert!(queue.ends_with("queue"));
                assert!(read_ahead_kb(Path::new("/")).is_ok());
            }
            Err(e) => eprintln!("no block device for /: {e}"),
        }
        assert!(block_device_of(Path::new("/nonexistent/predictio")).is_err());
    }

    #[test]
    fn describe_succeeds() {
        let m = Machine::describe(Path::new("/")).expect("describe /");
        assert!(!m.kernel.is_empty());
        assert!(m.cpus >= 1);
        assert!(m.mem_bytes > 0);
        assert!(!m.device.is_empty());
        // /proc has no block device: still succeeds.
        let p = Machine::describe(Path::new("/proc")).expect("describe /proc");
        assert_eq!(p.device, "unknown");
        assert_eq!(p.read_ahead_kb, 0);
    }

    #[test]
    fn meminfo_parse() {
        assert_eq!(mem_total("MemTotal:        8039732 kB\nMemFree: 1 kB\n"), Some(8_039_732 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }
}
