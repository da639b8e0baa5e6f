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
    /// 1 MiB O_DIRECT reads, in MB/s (10^6 bytes per second): sequential
    /// from a randomly placed start (block-device probe), or at random
    /// places in the probe file (file probe).
    #[serde(alias = "rand1m_MBps")]
    pub read1m_MBps: f64,
}

/// What the device-limit probe read.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ProbeKind {
    /// The block device under the bench directory, read-only, at places
    /// chosen at random on every run: on a virtual machine, blocks the host
    /// has not cached.
    BlockDevice,
    /// A data file in the bench directory, read once before it is timed:
    /// the device as workloads that read their files again and again see
    /// it (on a virtual machine, largely the host's cache).
    #[default]
    File,
}

/// What the device can do, measured with O_DIRECT reads through io_uring
/// (see [`crate::device::probe`]).
#[allow(non_snake_case)]
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct DeviceLimit {
    /// What was read: the block device or the probe file (result files
    /// from before the block-device probe have none: they read the file).
    #[serde(default)]
    pub probe: ProbeKind,
    /// The device node or file read.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub probe_path: String,
    /// Why the block device was not read, when the file was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe_fallback: Option<String>,
    /// Share of the probe's reads whose first 4 KiB were all zeros. On a
    /// thin-provisioned virtual disk such blocks may never have been
    /// written, and the host answers them without reading its disk: a
    /// large share makes the limits too high.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zero_read_share: Option<f64>,
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

/// The device node of the block device holding `path` (its filesystem's
/// own device: a partition or a device-mapper target, not the disk under
/// it), e.g. `/dev/vda1` or `/dev/dm-0`.
///
/// `st_dev` of `path` is looked up in `/sys/dev/block/MAJ:MIN/uevent`
/// (`DEVNAME`), then `/dev/block/MAJ:MIN`; when `st_dev` has no sysfs entry
/// (btrfs), the mount's source from `/proc/self/mountinfo`. A candidate is
/// returned only if it is a block device whose `st_rdev` is the device
/// sought. Errors with `NotFound` when there is none (overlay, tmpfs, a
/// container's `/dev` without it).
pub fn block_device_node(path: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    let dev = std::fs::metadata(path)?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let is_node = |candidate: &Path, rdev: u64| {
        std::fs::metadata(candidate).is_ok_and(|m| m.file_type().is_block_device() && m.rdev() == rdev)
    };
    let mut candidates = Vec::new();
    if let Ok(uevent) = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/uevent"))
        && let Some(name) = uevent_devname(&uevent)
    {
        candidates.push(PathBuf::from("/dev").join(name));
    }
    candidates.push(PathBuf::from(format!("/dev/block/{major}:{minor}")));
    if let Some(found) = candidates.iter().find(|c| is_node(c, dev)) {
        return Ok(found.clone());
    }
    // btrfs and other filesystems whose files report an anonymous device:
    // the device the mount came from.
    if let Some(source) = mount_source_of(major, minor)
        && let Ok(meta) = std::fs::metadata(&source)
        && meta.file_type().is_block_device()
    {
        return Ok(std::fs::canonicalize(&source).unwrap_or(source));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        format!(
            "no device node for {} (st_dev {major}:{minor}; tried {candidates:?} and the mount source)",
            path.display()
        ),
    ))
}

/// `DEVNAME` of a sysfs `uevent` text (`vda1`, `dm-0`); `None` when it is
/// missing or would name a path outside `/dev`.
fn uevent_devname(uevent: &str) -> Option<&str> {
    uevent
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(str::trim)
        .filter(|n| !n.is_empty() && !n.split('/').any(|part| part == ".." || part.is_empty()))
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
    fn device_node_of_root() {
        use std::os::unix::fs::FileTypeExt;
        match block_device_node(Path::new("/")) {
            Ok(node) => {
                let meta = std::fs::metadata(&node).expect("stat the node");
                assert!(meta.file_type().is_block_device(), "{}", node.display());
                assert!(node.starts_with("/dev"), "{}", node.display());
            }
            Err(e) => eprintln!("no device node for /: {e}"),
        }
        assert!(block_device_node(Path::new("/proc")).is_err(), "procfs has no block device");
    }

    #[test]
    fn result_files_from_before_the_block_device_probe_parse() {
        let old = r#"{"seq_MBps": 1333.5, "rand4k_iops_qd1": 16444.5, "rand4k_iops_qd64": 70024.0,
            "by_depth": [{"depth": 1, "rand4k_iops": 16444.5, "rand1m_MBps": 998.2}]}"#;
        let limit: DeviceLimit = serde_json::from_str(old).expect("parse");
        assert_eq!(limit.probe, ProbeKind::File, "the old probe read the file");
        assert_eq!(limit.by_depth[0].read1m_MBps, 998.2);
        assert_eq!(limit.probe_fallback, None);
        let json = serde_json::to_value(DeviceLimit { probe: ProbeKind::BlockDevice, ..limit }).expect("json");
        assert_eq!(json["probe"], serde_json::json!("block-device"));
        assert!(json.get("probe_fallback").is_none());
    }

    #[test]
    fn uevent_names() {
        assert_eq!(uevent_devname("MAJOR=254\nMINOR=1\nDEVNAME=vda1\nDEVTYPE=partition\n"), Some("vda1"));
        assert_eq!(uevent_devname("MAJOR=253\nDEVNAME=dm-0\n"), Some("dm-0"));
        assert_eq!(uevent_devname("MAJOR=1\n"), None);
        assert_eq!(uevent_devname("DEVNAME=../sda\n"), None);
        assert_eq!(uevent_devname("DEVNAME=\n"), None);
    }

    #[test]
    fn meminfo_parse() {
        assert_eq!(mem_total("MemTotal:        8039732 kB\nMemFree: 1 kB\n"), Some(8_039_732 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }
}
