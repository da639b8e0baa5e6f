//! The device-limit probe: how fast the block device under the bench
//! directory really is, measured the way a prefetcher could use it —
//! O_DIRECT reads through io_uring with a fixed number kept in flight.
//! For each queue depth it times random aligned 4 KiB reads (IOPS) and
//! 1 MiB reads (bandwidth). The result is the "limit" column of every
//! benchmark report (`BENCHMARKS.md`, rule 8).
//!
//! What it reads ([`ProbeKind`]): the block device itself, read-only, at
//! places chosen at random on every run — the 4 KiB reads anywhere on the
//! device, the 1 MiB reads sequentially from a randomly placed start. On a
//! virtual machine, dropping the guest's page cache leaves the host's
//! cache of the virtual disk, and a data file read by an earlier probe or
//! pass is served from it: random places are blocks the host has not
//! cached. Where the device cannot be opened (not root, a sandbox), the
//! probe reads a data file created once with real, non-zero blocks
//! (`DIR/device-probe.dat`) after reading it once, and the result says so
//! and why.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use io_uring::IoUring;

use crate::machine::{DepthPoint, DeviceLimit, ProbeKind};
use crate::sys::{AlignedBuf, DirectReads};

/// Name of the probe's data file inside [`ProbeOptions::dir`].
pub const PROBE_FILE: &str = "device-probe.dat";

/// Alignment (and granularity) of O_DIRECT buffers, offsets and lengths.
pub(crate) const ALIGN: usize = 4096;
const SMALL: usize = 4096;
const LARGE: usize = 1 << 20;
/// Deepest queue depth accepted.
const MAX_DEPTH: u32 = 4096;
/// How much of the device the 1 MiB reads of the block-device probe read
/// in order before they start again at another random place.
const SEQ_REGION: u64 = 1 << 30;
/// Smallest block device probed (smaller: the file is probed).
const MIN_DEVICE: u64 = 64 << 20;
/// Bytes at the start of each read checked for zeros.
const ZERO_CHECK: usize = 4096;
/// Largest share of the block device's reads that may return only zeros.
/// Blocks never written (or discarded) are answered without a read by a
/// thin-provisioned virtual disk, and by an SSD for unmapped blocks, far
/// faster than data: above this share the device's figures would be too
/// high, and the file is probed instead.
const ZERO_SHARE_MAX: f64 = 0.10;

/// What the probe reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ProbeSource {
    /// The block device holding [`ProbeOptions::dir`]
    /// ([`crate::machine::block_device_node`]); the probe file when there is
    /// none or it cannot be read (the reason is recorded in
    /// [`DeviceLimit::probe_fallback`]).
    #[default]
    Auto,
    /// This block device node; the probe file when it cannot be read.
    Device(PathBuf),
    /// The probe file.
    File,
}

/// Options of the device-limit probe.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Directory on the device to probe; the data file is created here.
    pub dir: PathBuf,
    /// Size of the data file in bytes (rounded down to whole MiB; at least
    /// 1 MiB). Default 1 GiB: large enough that a device-side cache does
    /// not serve most reads.
    pub file_size: u64,
    /// Seconds spent on each (depth, read size) point. Default 0.4.
    pub seconds_per_point: f64,
    /// Queue depths probed. Default `[1, 4, 16, 64]`.
    pub depths: Vec<u32>,
    /// What is read. Default [`ProbeSource::Auto`].
    pub source: ProbeSource,
}

impl Default for ProbeOptions {
    fn default() -> ProbeOptions {
        ProbeOptions {
            dir: PathBuf::from("."),
            file_size: 1 << 30,
            seconds_per_point: 0.4,
            depths: vec![1, 4, 16, 64],
            source: ProbeSource::Auto,
        }
    }
}

/// Why the probe failed; each variant names the failing call and carries
/// the OS error as its `source()`.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The options cannot be probed (file too small, depth 0, ...).
    #[error("invalid device probe options: {0}")]
    InvalidOptions(String),
    /// `open(O_CREAT)` of the data file (or its temporary) failed.
    #[error("creating probe file {path}: open failed")]
    Create {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `write` to the data file failed (disk full?).
    #[error("writing probe file {path}: write failed")]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `fsync` of the data file failed.
    #[error("fsync of probe file {path} failed")]
    Fsync {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// `rename` of the finished data file into place failed.
    #[error("rename of probe file into {path} failed")]
    Rename {
        /// The destination.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The filesystem does not support O_DIRECT: `open(O_DIRECT)` or the
    /// first direct read returned `EINVAL`.
    #[error(
        "the filesystem holding {path} does not support O_DIRECT (EINVAL); \
         probe a directory on a real block-device filesystem"
    )]
    DirectUnsupported {
        /// The file.
        path: PathBuf,
        /// The OS error (`EINVAL`).
        source: io::Error,
    },
    /// `open(O_RDONLY | O_DIRECT)` failed for another reason.
    #[error("open(O_DIRECT) of {path} failed")]
    OpenDirect {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// Allocating an aligned read buffer failed.
    #[error("allocating a {size}-byte buffer aligned to {ALIGN} failed")]
    Alloc {
        /// Requested size in bytes.
        size: usize,
    },
    /// `io_uring_setup` failed (kernel without io_uring, or io_uring
    /// disabled by sysctl or seccomp).
    #[error("io_uring_setup with {entries} entries failed")]
    RingSetup {
        /// Requested ring size.
        entries: u32,
        /// The OS error.
        source: io::Error,
    },
    /// `io_uring_enter` (submit and wait) failed.
    #[error("io_uring_enter at queue depth {depth} failed")]
    Submit {
        /// Queue depth of the point being measured.
        depth: u32,
        /// The OS error.
        source: io::Error,
    },
    /// The submission queue was unexpectedly full.
    #[error("io_uring submission queue full at queue depth {depth}")]
    QueueFull {
        /// Queue depth of the point being measured.
        depth: u32,
    },
    /// A direct read completed with an error.
    #[error("O_DIRECT read of {len} bytes at offset {offset} (queue depth {depth}) failed")]
    Read {
        /// Queue depth of the point being measured.
        depth: u32,
        /// Read length.
        len: usize,
        /// File offset.
        offset: u64,
        /// The OS error (from the completion's `-errno`).
        source: io::Error,
    },
}

/// Reads the file at `path` once, whole, 1 MiB at a time with O_DIRECT (so
/// the guest's page cache is left as it was). On a virtual machine the host
/// caches the disk's file: a block read again comes back faster than the
/// first time (here ~107 against ~230 µs for a 4 KiB read). Workloads read
/// their files again and again, so the probe, and a workload's passes, are
/// made to start from that state for every side alike
/// ([`crate::harness::Harness::prime`]).
pub fn read_direct(path: &Path) -> Result<(), ProbeError> {
    let file = open_direct(path)?;
    let size = file.metadata().map_err(|source| ProbeError::OpenDirect { path: path.to_path_buf(), source })?.len();
    prime(&file, size)
}

/// Reads the first `file_size` bytes of `file` (O_DIRECT), 1 MiB at a time;
/// a last partial block is read as far as the file goes.
fn prime(file: &File, file_size: u64) -> Result<(), ProbeError> {
    use std::os::unix::fs::FileExt;
    let mut buf = AlignedBuf::new(LARGE)?;
    let mut offset = 0;
    while offset < file_size {
        let read = file.read_at(buf.as_mut_slice(), offset).map_err(|source| ProbeError::Read {
            depth: 1,
            len: LARGE,
            offset,
            source,
        })?;
        if read == 0 {
            break;
        }
        offset += LARGE as u64;
    }
    Ok(())
}

/// xorshift64* — small, fast, and good enough to spread offsets and fill
/// the data file.
struct XorShift(u64);

impl XorShift {
    fn new(seed: u64) -> XorShift {
        XorShift(if seed == 0 { 0x9E37_79B9_7F4A_7C15 } else { seed })
    }

    /// Never returns 0.
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D) | 1
    }

    /// Uniform-ish in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// How a point's reads are placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    /// Each read at a random multiple of the alignment.
    Random,
    /// Reads one after the other from a random start, for [`SEQ_REGION`]
    /// bytes, then again from another random start.
    Sequential,
}

/// The offsets of a point's reads: every one a multiple of `align`, with
/// the whole read inside `0..size`.
struct Offsets {
    size: u64,
    len: u64,
    align: u64,
    pattern: Pattern,
    /// Next sequential offset and the end of the current region.
    next: u64,
    end: u64,
    rng: XorShift,
}

impl Offsets {
    /// `None` unless `align` is a power of two dividing `len`, and a read
    /// of `len` fits in `size`.
    fn new(size: u64, len: u64, align: u64, pattern: Pattern, rng: XorShift) -> Option<Offsets> {
        let ok = align.is_power_of_two() && len > 0 && len.is_multiple_of(align) && len <= size;
        ok.then_some(Offsets { size, len, align, pattern, next: 0, end: 0, rng })
    }

    /// A random multiple of `align` at which `span` bytes fit in the device.
    fn random_start(&mut self, span: u64) -> u64 {
        self.rng.below((self.size - span) / self.align + 1) * self.align
    }

    fn next(&mut self) -> u64 {
        match self.pattern {
            Pattern::Random => self.random_start(self.len),
            Pattern::Sequential => {
                if self.next + self.len > self.end {
                    let region = SEQ_REGION.min(self.size) / self.len * self.len;
                    self.next = self.random_start(region);
                    self.end = self.next + region;
                }
                let offset = self.next;
                self.next += self.len;
                offset
            }
        }
    }
}

/// A seed that differs from one run to the next (std's per-process random
/// hash keys, and the time).
fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    hasher.write_u128(now);
    hasher.finish()
}

/// The block device the probe reads: opened read-only with O_DIRECT.
struct BlockDevice {
    file: File,
    /// Its size in bytes.
    size: u64,
    /// Offsets and lengths are multiples of this: its logical block size,
    /// at least 4 KiB.
    align: u64,
}

/// Opens the block device node `path` read-only for O_DIRECT reads
/// (`O_RDONLY | O_DIRECT | O_NONBLOCK | O_CLOEXEC`: a node that is not a
/// block device cannot make the open wait), checks with `fstat` that it is
/// a block device, then lets its reads wait (io_uring would fail a read of
/// a non-blocking file with `EAGAIN` instead). Never opened for writing.
/// The error is the reason, for the report.
fn open_block_device(path: &Path) -> Result<BlockDevice, String> {
    use rustix::fs::{FileType, Mode, OFlags, SeekFrom};
    let what = |call: &str, e: rustix::io::Errno| format!("{call} of {}: {e}", path.display());
    let fd =
        rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECT | OFlags::NONBLOCK | OFlags::CLOEXEC, Mode::empty())
            .map_err(|e| what("open(O_RDONLY | O_DIRECT)", e))?;
    let stat = rustix::fs::fstat(&fd).map_err(|e| what("fstat", e))?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::BlockDevice {
        return Err(format!("{} is not a block device", path.display()));
    }
    let flags = rustix::fs::fcntl_getfl(&fd).map_err(|e| what("fcntl(F_GETFL)", e))?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK).map_err(|e| what("fcntl(F_SETFL)", e))?;
    let size = rustix::fs::seek(&fd, SeekFrom::End(0)).map_err(|e| what("lseek(SEEK_END)", e))?;
    let logical = rustix::fs::ioctl_blksszget(&fd).map_err(|e| what("ioctl(BLKSSZGET)", e))?;
    let align = u64::from(logical).max(ALIGN as u64);
    if !align.is_power_of_two() || align > LARGE as u64 {
        return Err(format!("{}: logical block size {logical} is not probed", path.display()));
    }
    if size < MIN_DEVICE {
        return Err(format!("{} holds {size} bytes, less than the {MIN_DEVICE} probed", path.display()));
    }
    Ok(BlockDevice { file: File::from(fd), size, align })
}

/// True when `path` is a regular file of exactly `size` bytes with all its
/// blocks allocated (no holes).
fn probe_file_ok(path: &Path, size: u64) -> bool {
    match std::fs::metadata(path) {
        Ok(md) => md.is_file() && md.len() == size && md.blocks().saturating_mul(512) >= size,
        Err(_) => false,
    }
}

/// Creates `path` with `size` bytes of pseudo-random data through ordinary
/// writes, fsyncs it, drops it from the page cache, and renames it into
/// place.
fn create_probe_file(path: &Path, size: u64) -> Result<(), ProbeError> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let started = Instant::now();
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)
        .map_err(|source| ProbeError::Create { path: tmp.clone(), source })?;
    let mut rng = XorShift::new(0x5EED_DA7A_F11E_0001);
    let mut chunk = vec![0u8; LARGE];
    let mut written = 0u64;
    while written < size {
        for word in chunk.chunks_exact_mut(8) {
            word.copy_from_slice(&rng.next_u64().to_le_bytes());
        }
        // `size` is a whole number of MiB.
        f.write_all(&chunk).map_err(|source| ProbeError::Write { path: tmp.clone(), source })?;
        written += LARGE as u64;
    }
    f.sync_all().map_err(|source| ProbeError::Fsync { path: tmp.clone(), source })?;
    // Don't leave a file's worth of page cache behind (it would evict the
    // benchmarks' own pages). Advisory; failure is harmless.
    let _ = crate::sys::drop_cached(f.as_fd());
    drop(f);
    std::fs::rename(&tmp, path).map_err(|source| ProbeError::Rename { path: path.to_path_buf(), source })?;
    tracing::info!(
        path = %path.display(),
        bytes = size,
        secs = started.elapsed().as_secs_f64(),
        "created device probe file"
    );
    Ok(())
}

/// Opens `path` for O_DIRECT reads.
fn open_direct(path: &Path) -> Result<File, ProbeError> {
    OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).map_err(|source| {
        if source.raw_os_error() == Some(libc::EINVAL) {
            ProbeError::DirectUnsupported { path: path.to_path_buf(), source }
        } else {
            ProbeError::OpenDirect { path: path.to_path_buf(), source }
        }
    })
}

/// Result of one (depth, read size) point.
struct Point {
    ops: u64,
    bytes: u64,
    secs: f64,
    /// Reads whose first [`ZERO_CHECK`] bytes were all zeros.
    zero_reads: u64,
}

/// Keeps `depth` reads of `offsets.len` bytes, at the offsets `offsets`
/// gives, in flight on `file` for `duration`, then drains them.
fn run_point(
    file: &File,
    path: &Path,
    depth: u32,
    offsets: &mut Offsets,
    duration: Duration,
) -> Result<Point, ProbeError> {
    let entries = depth.next_power_of_two();
    let ring = IoUring::new(entries).map_err(|source| ProbeError::RingSetup { entries, source })?;
    let slots = depth as usize;
    let len = offsets.len as usize;
    let bufs = (0..slots).map(|_| AlignedBuf::aligned(len, offsets.align as usize)).collect::<Result<Vec<_>, _>>()?;
    // The buffers belong to `reads` from here on: it lends one out only
    // between reads, and leaks them if dropped with reads in flight.
    let mut reads = DirectReads::new(ring, bufs, len as u32);
    let mut in_slot = vec![0u64; slots];

    // Queues a read into `slot` at the next offset; false if the SQ is full.
    let mut push = |reads: &mut DirectReads, in_slot: &mut [u64], slot: usize| -> bool {
        let off = offsets.next();
        in_slot[slot] = off;
        reads.push(file.as_fd(), slot, off)
    };

    let start = Instant::now();
    let deadline = start + duration;
    let mut in_flight = 0usize;
    let mut error: Option<ProbeError> = None;
    for slot in 0..slots {
        if push(&mut reads, &mut in_slot, slot) {
            in_flight += 1;
        } else {
            error = Some(ProbeError::QueueFull { depth });
            break;
        }
    }
    let (mut ops, mut bytes, mut zero_reads) = (0u64, 0u64, 0u64);
    let mut done: Vec<(usize, i32)> = Vec::with_capacity(slots);
    while in_flight > 0 {
        match reads.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)) => {}
            Err(source) => {
                // Reads may still be in flight into the buffers: dropping
                // `reads` leaks them.
                return Err(ProbeError::Submit { depth, source });
            }
        }
        done.clear();
        reads.reap(&mut done);
        let keep_going = error.is_none() && Instant::now() < deadline;
        for &(slot, res) in &done {
            in_flight -= 1;
            if res < 0 {
                if error.is_none() {
                    let source = io::Error::from_raw_os_error(-res);
                    error = Some(if res == -libc::EINVAL && ops == 0 {
                        ProbeError::DirectUnsupported { path: path.to_path_buf(), source }
                    } else {
                        ProbeError::Read { depth, len, offset: in_slot.get(slot).copied().unwrap_or(0), source }
                    });
                }
                continue;
            }
            ops += 1;
            bytes += res as u64;
            if let Some(buf) = reads.buf(slot) {
                // The read into it has completed and the next is not queued yet.
                let head = &buf[..(res as usize).min(ZERO_CHECK)];
                zero_reads += u64::from(head.iter().all(|&b| b == 0));
            }
            if keep_going && slot < slots {
                if push(&mut reads, &mut in_slot, slot) {
                    in_flight += 1;
                } else if error.is_none() {
                    error = Some(ProbeError::QueueFull { depth });
                }
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    drop(reads);
    match error {
        Some(e) => Err(e),
        None => Ok(Point { ops, bytes, secs, zero_reads }),
    }
}

/// Measures the device's limits with O_DIRECT reads through io_uring: for
/// each depth, random 4 KiB reads for `seconds_per_point`, then 1 MiB reads
/// likewise, `depth` reads kept in flight the whole time.
///
/// What is read follows [`ProbeOptions::source`]. The block device (see
/// the module's documentation) is opened read-only and read without being
/// read first: 4 KiB reads at random places over the whole device, 1 MiB
/// reads in order from a random place (1 GiB at a time), the places
/// different on every run. Otherwise, or when the device cannot be found,
/// opened or read, or more than a tenth of its reads return only zeros
/// (the reason goes into [`DeviceLimit::probe_fallback`]),
/// `DIR/device-probe.dat` is read: created once (if missing or of the wrong
/// size) with non-zero pseudo-random data through ordinary writes and
/// fsync, so reads hit real blocks, read once whole, untimed, then read at
/// random places (4 KiB and 1 MiB reads aligned to their size).
///
/// Depths are probed in ascending order (duplicates dropped). `seq_MBps`
/// is the best 1 MiB bandwidth over all depths; `rand4k_iops_qd1` is the
/// 4 KiB rate at depth 1 (or the shallowest depth probed if 1 is not
/// among them); `rand4k_iops_qd64` is the 4 KiB rate at the deepest depth
/// probed. With the defaults the probe takes about 3.5 s, plus, for the
/// file, the read before and the one-time creation of the 1 GiB file,
/// which is left in place for the next run.
pub fn probe(opts: &ProbeOptions) -> Result<DeviceLimit, ProbeError> {
    let file_size = opts.file_size / LARGE as u64 * LARGE as u64;
    if file_size == 0 {
        return Err(ProbeError::InvalidOptions(format!("file_size {} is below 1 MiB", opts.file_size)));
    }
    if !(opts.seconds_per_point.is_finite() && opts.seconds_per_point > 0.0) {
        return Err(ProbeError::InvalidOptions(format!(
            "seconds_per_point {} is not a positive number",
            opts.seconds_per_point
        )));
    }
    let mut depths = opts.depths.clone();
    depths.sort_unstable();
    depths.dedup();
    match (depths.first(), depths.last()) {
        (Some(&lo), Some(&hi)) if lo >= 1 && hi <= MAX_DEPTH => {}
        _ => {
            return Err(ProbeError::InvalidOptions(format!(
                "depths {:?} must be non-empty and within 1..={MAX_DEPTH}",
                opts.depths
            )));
        }
    }
    let per_point = Duration::from_secs_f64(opts.seconds_per_point);
    std::fs::create_dir_all(&opts.dir).map_err(|source| ProbeError::Create { path: opts.dir.clone(), source })?;
    let device = match &opts.source {
        ProbeSource::Auto => crate::machine::block_device_node(&opts.dir)
            .map_err(|e| format!("no block device node for {}: {e}", opts.dir.display())),
        ProbeSource::Device(path) => Ok(path.clone()),
        ProbeSource::File => Err(String::new()),
    };
    let fallback = match device {
        Ok(node) => match probe_block_device(&node, &depths, per_point) {
            Ok(limit) => return Ok(limit),
            Err(reason) => Some(reason),
        },
        Err(reason) => (!reason.is_empty()).then_some(reason),
    };
    if let Some(reason) = &fallback {
        tracing::info!(%reason, "device-limit probe: reading the probe file instead of the block device");
    }
    let path = opts.dir.join(PROBE_FILE);
    if !probe_file_ok(&path, file_size) {
        create_probe_file(&path, file_size)?;
    }
    let file = open_direct(&path)?;
    prime(&file, file_size)?;
    let seed = 0xD1CE_0000_0000_0001 ^ file_size;
    let small = Offsets::new(file_size, SMALL as u64, SMALL as u64, Pattern::Random, XorShift::new(seed));
    let large = Offsets::new(file_size, LARGE as u64, LARGE as u64, Pattern::Random, XorShift::new(!seed));
    let (Some(mut small), Some(mut large)) = (small, large) else {
        return Err(ProbeError::InvalidOptions(format!("file_size {file_size} cannot hold a 1 MiB read")));
    };
    let mut limit = measure(&file, &path, &depths, per_point, &mut small, &mut large)?;
    limit.probe = ProbeKind::File;
    limit.probe_path = path.display().to_string();
    limit.probe_fallback = fallback;
    Ok(limit)
}

/// The probe of the block device node `node`; the reason, for the report,
/// when it cannot be opened or read.
fn probe_block_device(node: &Path, depths: &[u32], per_point: Duration) -> Result<DeviceLimit, String> {
    let device = open_block_device(node)?;
    let seed = fresh_seed();
    let small = Offsets::new(device.size, SMALL as u64, device.align, Pattern::Random, XorShift::new(seed));
    let large = Offsets::new(device.size, LARGE as u64, device.align, Pattern::Sequential, XorShift::new(!seed));
    let (Some(mut small), Some(mut large)) = (small, large) else {
        return Err(format!("{}: {} bytes cannot be probed", node.display(), device.size));
    };
    let mut limit = measure(&device.file, node, depths, per_point, &mut small, &mut large).map_err(|e| {
        let source = std::error::Error::source(&e).map(|s| format!(": {s}")).unwrap_or_default();
        format!("reading {}: {e}{source}", node.display())
    })?;
    let zeros = limit.zero_read_share.unwrap_or(0.0);
    if zeros > ZERO_SHARE_MAX {
        return Err(format!(
            "{:.0} % of the reads of {} returned only zeros (blocks never written, which a thin-provisioned disk \
             answers without reading: {:.0} K IOPS at QD{}, {:.0} MB/s would be too high)",
            zeros * 100.0,
            node.display(),
            limit.rand4k_iops_qd64 / 1e3,
            limit.by_depth.last().map_or(0, |p| p.depth),
            limit.seq_MBps,
        ));
    }
    limit.probe = ProbeKind::BlockDevice;
    limit.probe_path = node.display().to_string();
    tracing::debug!(device = %node.display(), bytes = device.size, align = device.align, "probed the block device");
    Ok(limit)
}

/// Times the points of every depth: 4 KiB reads at `small`'s offsets, then
/// 1 MiB reads at `large`'s.
fn measure(
    file: &File,
    path: &Path,
    depths: &[u32],
    per_point: Duration,
    small: &mut Offsets,
    large: &mut Offsets,
) -> Result<DeviceLimit, ProbeError> {
    let mut limit = DeviceLimit::default();
    let (mut reads, mut zero_reads) = (0u64, 0u64);
    for &depth in depths {
        let s = run_point(file, path, depth, small, per_point)?;
        let l = run_point(file, path, depth, large, per_point)?;
        reads += s.ops + l.ops;
        zero_reads += s.zero_reads + l.zero_reads;
        let point = DepthPoint {
            depth,
            rand4k_iops: s.ops as f64 / s.secs.max(1e-9),
            read1m_MBps: l.bytes as f64 / 1e6 / l.secs.max(1e-9),
        };
        tracing::debug!(
            depth,
            rand4k_iops = point.rand4k_iops,
            read1m_MBps = point.read1m_MBps,
            small_ops = s.ops,
            large_ops = l.ops,
            zero_reads = s.zero_reads + l.zero_reads,
            "device probe point"
        );
        limit.by_depth.push(point);
    }
    let shallow = limit.by_depth.iter().find(|p| p.depth == 1).or(limit.by_depth.first());
    limit.rand4k_iops_qd1 = shallow.map_or(0.0, |p| p.rand4k_iops);
    limit.rand4k_iops_qd64 = limit.by_depth.last().map_or(0.0, |p| p.rand4k_iops);
    limit.seq_MBps = limit.by_depth.iter().map(|p| p.read1m_MBps).fold(0.0, f64::max);
    limit.zero_read_share = Some(if reads > 0 { zero_reads as f64 / reads as f64 } else { 0.0 });
    Ok(limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_spreads() {
        let mut r = XorShift::new(0);
        let mut seen = [0u32; 8];
        for _ in 0..8000 {
            let x = r.below(8);
            assert!(x < 8);
            seen[x as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
        assert_ne!(r.next_u64(), 0);
    }

    #[test]
    fn offsets_stay_inside_and_aligned() {
        // Sizes that are and are not multiples of the alignment or the read.
        for size in [1 << 20, (1 << 20) + 4096, 5 << 30, 256 << 30, (256 << 30) + 512, 3 * (1 << 20) + 7] {
            for (len, align) in [(4096, 4096), (4096, 512), (1 << 20, 4096), (1 << 20, 1 << 20), (8192, 8192)] {
                for pattern in [Pattern::Random, Pattern::Sequential] {
                    let Some(mut o) = Offsets::new(size, len, align, pattern, XorShift::new(fresh_seed())) else {
                        assert!(len > size, "{size} {len} {align}");
                        continue;
                    };
                    let mut last: Option<u64> = None;
                    for _ in 0..20_000 {
                        let end_before = o.end;
                        let off = o.next();
                        assert_eq!(off % align, 0, "{pattern:?} {size} {len} {align}: {off}");
                        assert!(off + len <= size, "{pattern:?} {size} {len} {align}: {off}");
                        if pattern == Pattern::Sequential
                            && let Some(prev) = last
                            && off != prev + len
                        {
                            // A new region starts only where the last one had no room left.
                            assert!(prev + 2 * len > end_before, "{size} {len}: {prev} -> {off}");
                        }
                        last = Some(off);
                    }
                }
            }
        }
    }

    #[test]
    fn random_offsets_spread_over_the_whole_device() {
        let size: u64 = 256 << 30;
        let mut o = Offsets::new(size, 4096, 4096, Pattern::Random, XorShift::new(fresh_seed())).expect("offsets");
        let mut tenths = [0u32; 10];
        for _ in 0..10_000 {
            tenths[(o.next() * 10 / size) as usize] += 1;
        }
        assert!(tenths.iter().all(|&n| n > 800), "{tenths:?}");
    }

    #[test]
    fn sequential_reads_follow_on_within_a_region() {
        let size: u64 = 64 << 30;
        let len = 1 << 20;
        let mut o = Offsets::new(size, len, 4096, Pattern::Sequential, XorShift::new(7)).expect("offsets");
        let first = o.next();
        for k in 1..(SEQ_REGION / len) {
            assert_eq!(o.next(), first + k * len);
        }
        // The region is used up: the next read starts somewhere else.
        let again = o.next();
        assert_ne!(again, first + SEQ_REGION);
        assert_eq!(o.next(), again + len);
    }

    #[test]
    fn offsets_refuse_what_cannot_be_read() {
        let rng = || XorShift::new(1);
        assert!(Offsets::new(4095, 4096, 4096, Pattern::Random, rng()).is_none(), "read larger than the device");
        assert!(Offsets::new(1 << 20, 4096, 3000, Pattern::Random, rng()).is_none(), "alignment not a power of two");
        assert!(Offsets::new(1 << 20, 4096, 8192, Pattern::Random, rng()).is_none(), "read not a multiple of it");
        assert!(Offsets::new(1 << 20, 0, 4096, Pattern::Random, rng()).is_none());
        assert!(Offsets::new(4096, 4096, 4096, Pattern::Sequential, rng()).is_some_and(|mut o| o.next() == 0));
    }

    #[test]
    fn runs_place_their_reads_differently() {
        assert_ne!(fresh_seed(), fresh_seed());
    }

    #[test]
    fn a_node_that_is_not_a_block_device_is_refused() {
        let dir = std::env::temp_dir().join(format!("predictio-probe-node-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("mkdir");
        let regular = dir.join("regular");
        std::fs::write(&regular, vec![1u8; 1 << 20]).expect("write");
        let refused = open_block_device(&regular).err();
        let missing = open_block_device(&dir.join("missing")).err();
        let _ = std::fs::remove_dir_all(&dir);
        // tmpfs refuses O_DIRECT before fstat can: either reason names the file.
        let refused = refused.expect("a regular file is not probed as a device");
        assert!(refused.contains("regular"), "{refused}");
        assert!(missing.expect("no such node").contains("missing"));
    }

    #[test]
    fn aligned_buffers() {
        let b = AlignedBuf::new(4096).expect("alloc");
        assert_eq!(b.as_mut_ptr() as usize % ALIGN, 0);
        let b = AlignedBuf::new(1 << 20).expect("alloc");
        assert_eq!(b.as_mut_ptr() as usize % ALIGN, 0);
    }

    #[test]
    fn invalid_options() {
        let base = ProbeOptions { dir: std::env::temp_dir(), ..ProbeOptions::default() };
        let bad = [
            ProbeOptions { file_size: 1000, ..base.clone() },
            ProbeOptions { depths: vec![], ..base.clone() },
            ProbeOptions { depths: vec![0, 4], ..base.clone() },
            ProbeOptions { seconds_per_point: 0.0, ..base.clone() },
        ];
        for o in &bad {
            assert!(matches!(probe(o), Err(ProbeError::InvalidOptions(_))), "{o:?}");
        }
    }

    #[test]
    fn a_device_that_cannot_be_read_falls_back_to_the_file_and_says_why() {
        let dir = std::env::temp_dir().join(format!("predictio-probe-fallback-test-{}", std::process::id()));
        let missing = dir.join("no-such-device");
        let opts = ProbeOptions {
            dir: dir.clone(),
            file_size: 16 << 20,
            seconds_per_point: 0.02,
            depths: vec![1, 4],
            source: ProbeSource::Device(missing.clone()),
        };
        let result = probe(&opts);
        let _ = std::fs::remove_dir_all(&dir);
        match result {
            Ok(limit) => {
                assert_eq!(limit.probe, ProbeKind::File);
                assert!(limit.probe_path.ends_with(PROBE_FILE), "{limit:?}");
                let why = limit.probe_fallback.clone().expect("the reason is recorded");
                assert!(why.contains("no-such-device"), "{why}");
                let json = serde_json::to_value(&limit).expect("json");
                assert_eq!(json["probe"], serde_json::json!("file"));
            }
            // tmpfs (no O_DIRECT) or no io_uring: the file probe itself cannot run here.
            Err(e @ (ProbeError::DirectUnsupported { .. } | ProbeError::RingSetup { .. })) => {
                if std::env::var("CI").is_ok_and(|v| v == "true") {
                    panic!("the fallback test cannot be skipped under CI=true: {e}");
                }
                eprintln!("skipping the fallback check: {e}");
            }
            Err(e) => panic!("the file probe failed: {e}"),
        }
    }

    /// The block-device probe on a device named by
    /// `PREDICTIO_TEST_BLOCK_DEVICE` (root; e.g. a read-only loop device:
    /// `losetup -r -f --show FILE`): it is read, not the file.
    #[test]
    #[ignore = "needs a readable block device in PREDICTIO_TEST_BLOCK_DEVICE"]
    fn probe_named_block_device() {
        let node = PathBuf::from(std::env::var_os("PREDICTIO_TEST_BLOCK_DEVICE").expect("PREDICTIO_TEST_BLOCK_DEVICE"));
        let opts = ProbeOptions {
            dir: std::env::temp_dir(),
            seconds_per_point: 0.1,
            depths: vec![1, 16, 64],
            source: ProbeSource::Device(node.clone()),
            ..ProbeOptions::default()
        };
        let limit = probe(&opts).expect("probe");
        eprintln!("{limit:?}");
        assert_eq!(limit.probe, ProbeKind::BlockDevice, "{limit:?}");
        assert_eq!(limit.probe_path, node.display().to_string());
        assert!(limit.rand4k_iops_qd64 > 0.0 && limit.seq_MBps > 0.0, "{limit:?}");
        assert!(limit.zero_read_share.is_some());
    }

    #[test]
    fn probe_tiny() {
        let dir = std::env::temp_dir().join(format!("predictio-probe-test-{}", std::process::id()));
        let opts = ProbeOptions {
            dir: dir.clone(),
            file_size: 64 << 20,
            seconds_per_point: 0.05,
            depths: vec![1, 8],
            source: ProbeSource::Auto,
        };
        let result = probe(&opts);
        let second = result.is_ok().then(|| probe(&opts)); // reuses the file
        let _ = std::fs::remove_dir_all(&dir);
        let skip = |why: String| {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("device probe test cannot be skipped under CI=true: {why}");
            }
            eprintln!("skipping device probe test: {why}");
        };
        match result {
            Ok(limit) => {
                assert_eq!(limit.by_depth.len(), 2);
                assert_eq!(limit.by_depth[1].depth, 8);
                assert!(limit.by_depth[1].rand4k_iops > 0.0, "{limit:?}");
                assert!(limit.rand4k_iops_qd64 > 0.0, "{limit:?}");
                assert!(limit.rand4k_iops_qd1 > 0.0, "{limit:?}");
                assert!(limit.seq_MBps > 0.0, "{limit:?}");
                assert!(!limit.probe_path.is_empty(), "{limit:?}");
                match limit.probe {
                    ProbeKind::BlockDevice => assert!(limit.probe_fallback.is_none(), "{limit:?}"),
                    // Auto tries the device first: a file probe says why it was not read.
                    ProbeKind::File => assert!(limit.probe_fallback.is_some(), "{limit:?}"),
                }
                eprintln!("{limit:?}");
                assert!(matches!(second, Some(Ok(_))), "{second:?}");
            }
            Err(e @ ProbeError::DirectUnsupported { .. }) => skip(e.to_string()),
            Err(ProbeError::RingSetup { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) =>
            {
                skip(format!("io_uring unavailable: {source}"))
            }
            Err(e) => panic!("device probe failed: {e}: {:?}", std::error::Error::source(&e)),
        }
    }
}
