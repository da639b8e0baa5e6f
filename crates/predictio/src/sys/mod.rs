//! The syscall edge: every `unsafe` block of the core crate lives here, each
//! with a `SAFETY:` comment. Everything above this module is safe Rust over
//! typed wrappers that take `BorrowedFd`, never raw descriptors.
//!
//! System calls go through [`rustix`] wherever it has them. `libc` is left
//! for the calls rustix 1.x does not wrap: `cachestat(2)`, `readahead(2)`,
//! `mincore(2)`, `ioprio_set(2)`/`ioprio_get(2)`, `open_by_handle_at(2)`,
//! and the hint socket's `recvmsg(2)` ([`socket`] says why).
//!
//! # References
//! - `cachestat(2)`, `mincore(2)`, `posix_fadvise(2)`, `readahead(2)`,
//!   `madvise(2)`, `lseek(2)` (`SEEK_DATA`/`SEEK_HOLE`), `mmap(2)`.
//! - `PROCMAP_QUERY`: <https://docs.kernel.org/filesystems/proc.html> and
//!   `struct procmap_query` in `include/uapi/linux/fs.h` (Linux 6.11).

#[cfg(feature = "uring")]
pub mod bigread;
#[cfg(not(feature = "uring"))]
mod no_uring;
mod ring;
pub mod socket;
#[cfg(feature = "uring")]
pub mod uring;
#[cfg(not(feature = "uring"))]
pub use no_uring::{bigread, uring};

use std::ffi::c_void;
use std::fs::File;
use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::ptr::NonNull;

use rustix::io::Errno;

use crate::page::PageRange;

/// A call of a newer kernel that this process can be told to treat as
/// absent ([`assume_missing`]), so that a test profile of an older kernel
/// runs every fallback on a newer one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NewerCall {
    /// `cachestat(2)` (Linux 6.5): answers `ENOSYS`, as before 6.5;
    /// residency is then counted with `mincore(2)`.
    Cachestat,
    /// io_uring: ring set-up answers `EPERM`, as under
    /// `kernel.io_uring_disabled = 2`; the executor issues through fadvise.
    IoUring,
    /// The `PROCMAP_QUERY` ioctl (Linux 6.11): answers `ENOTTY`, as before
    /// 6.11; mappings are read from the text of `/proc/PID/maps`.
    ProcmapQuery,
}

impl NewerCall {
    fn bit(self) -> u8 {
        match self {
            NewerCall::Cachestat => 1,
            NewerCall::IoUring => 2,
            NewerCall::ProcmapQuery => 4,
        }
    }
}

/// The calls [`assume_missing`] took away, as bits of [`NewerCall::bit`].
static ASSUMED_MISSING: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Makes `call` fail in this whole process from now on as on a kernel
/// without it, so that every caller takes its fallback. For test profiles
/// of older kernels (the daemon's `[observe] assume_missing`); there is no
/// way back.
pub fn assume_missing(call: NewerCall) {
    ASSUMED_MISSING.fetch_or(call.bit(), std::sync::atomic::Ordering::Relaxed);
}

/// Whether [`assume_missing`] took `call` away.
pub fn assumed_missing(call: NewerCall) -> bool {
    ASSUMED_MISSING.load(std::sync::atomic::Ordering::Relaxed) & call.bit() != 0
}

/// `EPERM` where io_uring is [assumed missing](assume_missing), as ring
/// set-up answers under `kernel.io_uring_disabled = 2`.
#[cfg(feature = "uring")]
fn refuse_if_assumed_missing() -> io::Result<()> {
    if assumed_missing(NewerCall::IoUring) {
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "io_uring assumed disabled"));
    }
    Ok(())
}

/// `cachestat(2)`'s syscall number (the same on every architecture since 6.5).
const SYS_CACHESTAT: libc::c_long = 451;

/// Page-cache state of a byte range, from `cachestat(2)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct CacheStat {
    /// Pages in the page cache.
    pub nr_cache: u64,
    /// Dirty pages.
    pub nr_dirty: u64,
    /// Pages under writeback.
    pub nr_writeback: u64,
    /// Pages evicted from the cache.
    pub nr_evicted: u64,
    /// Pages evicted recently (would still be in a larger cache).
    pub nr_recently_evicted: u64,
}

#[repr(C)]
struct CacheStatRange {
    off: u64,
    len: u64,
}

/// `cachestat(2)` over the bytes `[offset, offset + len)`. `len` must be
/// non-zero (the kernel reads 0 as "to end of file"; say so explicitly).
pub fn cachestat(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<CacheStat> {
    if assumed_missing(NewerCall::Cachestat) {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    let range = CacheStatRange { off: offset, len };
    let mut stat = CacheStat::default();
    // SAFETY: both pointers reference live, properly laid out #[repr(C)]
    // structs for the duration of the call; flags must be 0.
    let rc = unsafe {
        libc::syscall(SYS_CACHESTAT, fd.as_raw_fd(), &range as *const CacheStatRange, &mut stat as *mut CacheStat, 0u32)
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(stat) }
}

/// Advice for [`fadvise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advice {
    /// `POSIX_FADV_WILLNEED`: start reading the range into the cache.
    WillNeed,
    /// `POSIX_FADV_DONTNEED`: drop clean cached pages of the range.
    DontNeed,
    /// `POSIX_FADV_RANDOM`: no readahead on this open file description.
    Random,
}

/// `posix_fadvise(2)`. `len` 0 means to the end of the file. Offsets and
/// lengths past `i64::MAX` (negative to the kernel) are `EINVAL`.
pub fn fadvise(fd: BorrowedFd<'_>, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::WillNeed => rustix::fs::Advice::WillNeed,
        Advice::DontNeed => rustix::fs::Advice::DontNeed,
        Advice::Random => rustix::fs::Advice::Random,
    };
    check_off_t(offset)?;
    check_off_t(len)?;
    Ok(rustix::fs::fadvise(fd, offset, NonZeroU64::new(len), advice)?)
}

/// `EINVAL` for a file offset or length that `off_t` cannot hold.
fn check_off_t(value: u64) -> io::Result<()> {
    if i64::try_from(value).is_ok() { Ok(()) } else { Err(Errno::INVAL.into()) }
}

/// `sendfile(2)` of up to `len` bytes at `offset` of `input` to `output`,
/// without moving `input`'s file offset. Returns the bytes sent (0 at end of
/// file). With `/dev/null` as `output` this is a read through the page cache
/// that copies nothing: the kernel's own readahead brings the pages in.
pub fn sendfile_at(output: BorrowedFd<'_>, input: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<usize> {
    check_off_t(offset)?;
    let mut offset = offset;
    Ok(rustix::fs::sendfile(output, input, Some(&mut offset), len)?)
}

/// `readahead(2)`: synchronous submission of reads of the range. (libc:
/// rustix has no `readahead`.)
pub fn readahead(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a borrowed descriptor; no memory is passed.
    let rc = unsafe { libc::readahead(fd.as_raw_fd(), offset, len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// `lseek(2)` to `pos`; `ENXIO` (no data, or past EOF) is `None`. Moving
/// the file position of our shared descriptor is harmless: nothing in
/// predictio uses it (all our reads are positional).
fn lseek(fd: BorrowedFd<'_>, pos: rustix::fs::SeekFrom) -> io::Result<Option<u64>> {
    match rustix::fs::seek(fd, pos) {
        Ok(at) => Ok(Some(at)),
        Err(Errno::NXIO) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// `lseek(SEEK_DATA)`: the first data byte at or after `offset`, or `None`
/// when only a hole (or EOF) follows.
pub fn seek_data(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    check_off_t(offset)?;
    lseek(fd, rustix::fs::SeekFrom::Data(offset))
}

/// `lseek(SEEK_HOLE)`: the first hole byte at or after `offset` (EOF counts
/// as a hole), or `None` when `offset` is at or past EOF.
pub fn seek_hole(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    check_off_t(offset)?;
    lseek(fd, rustix::fs::SeekFrom::Hole(offset))
}

/// ramfs's `f_type` (include/uapi/linux/magic.h; libc does not name it).
const RAMFS_MAGIC: libc::c_long = 0x8584_58f6_u32 as libc::c_long;

/// Whether the filesystem holding `fd` makes its files up or keeps them in
/// memory only (proc, sysfs, tmpfs and devtmpfs, ramfs, devpts, cgroup,
/// debugfs, tracefs, securityfs, bpf, hugetlbfs), so reading it never reaches
/// storage (`fstatfs(2)`'s `f_type`).
pub fn memory_only_fs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = rustix::fs::fstatfs(fd)?;
    // The magic numbers are libc's constants (rustix names only two).
    Ok(matches!(
        st.f_type,
        libc::PROC_SUPER_MAGIC
            | libc::SYSFS_MAGIC
            | libc::TMPFS_MAGIC
            | RAMFS_MAGIC
            | libc::DEVPTS_SUPER_MAGIC
            | libc::CGROUP_SUPER_MAGIC
            | libc::CGROUP2_SUPER_MAGIC
            | libc::DEBUGFS_MAGIC
            | libc::TRACEFS_MAGIC
            | libc::SECURITYFS_MAGIC
            | libc::BPF_FS_MAGIC
            | libc::HUGETLBFS_MAGIC
    ))
}

/// Sets the calling thread's nice value (Linux: `PRIO_PROCESS` with id 0 is
/// the calling thread). Lowering it below 0 needs `CAP_SYS_NICE`.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // `None` is who = 0: on Linux, the calling thread.
    Ok(rustix::process::setpriority_process(None, nice)?)
}

/// A thread's block I/O class (`IOPRIO_CLASS_*`: 0 none — best-effort by
/// its nice value —, 1 real-time, 2 best-effort, 3 idle) and level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoPriority {
    /// The class.
    pub class: u8,
    /// The level within it (0 highest).
    pub level: u8,
}

impl IoPriority {
    /// `IOPRIO_CLASS_RT`.
    pub const REALTIME: u8 = 1;
}

const IOPRIO_CLASS_SHIFT: u32 = 13;
const IOPRIO_WHO_PROCESS: libc::c_long = 1;

/// Puts the calling thread's block I/O in the real-time class at `level`
/// (0 highest, 7 lowest): `ioprio_set(IOPRIO_WHO_PROCESS, 0, …)` names the
/// calling thread. Schedulers that honour classes (mq-deadline, bfq)
/// dispatch its reads ahead of queued best-effort ones. Needs
/// `CAP_SYS_ADMIN`; `EPERM` otherwise. (libc: rustix has no `ioprio_*`.)
pub fn set_thread_io_realtime(level: u8) -> io::Result<()> {
    let prio = (libc::c_long::from(IoPriority::REALTIME) << IOPRIO_CLASS_SHIFT) | libc::c_long::from(level.min(7));
    // SAFETY: ioprio_set takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0 as libc::c_long, prio) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The block I/O priority of thread `tid` (`ioprio_get`).
pub fn thread_io_priority(tid: u32) -> io::Result<IoPriority> {
    // SAFETY: ioprio_get takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::syscall(libc::SYS_ioprio_get, IOPRIO_WHO_PROCESS, libc::c_long::from(tid)) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let class = (rc >> IOPRIO_CLASS_SHIFT) as u8;
    Ok(IoPriority { class, level: (rc & 0x7) as u8 })
}

/// The kernel's page size (from the auxiliary vector, `AT_PAGESZ`).
pub fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// A new anonymous memory-backed file (`memfd_create(2)`), used by feature
/// probes.
pub fn memfd(name: &std::ffi::CStr) -> io::Result<File> {
    Ok(File::from(rustix::fs::memfd_create(name, rustix::fs::MemfdFlags::CLOEXEC)?))
}

/// A read-only shared mapping of a whole file, used to ask `mincore(2)` which
/// pages are resident and to `madvise` ranges. Mapping costs address space
/// only: no page is faulted in by predictio, ever.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is never dereferenced by Rust code; it is only passed to
// mincore/madvise, which are thread-safe, so sharing or sending the address is
// sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; all methods take &self and only make syscalls.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps the first `len` bytes of `fd` read-only and shared. `len` must be
    /// non-zero.
    pub fn map(fd: BorrowedFd<'_>, len: u64) -> io::Result<Self> {
        let len = usize::try_from(len).map_err(|_| io::Error::from(Errno::INVAL))?;
        if len == 0 {
            return Err(Errno::INVAL.into());
        }
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) over an open
        // descriptor; it aliases no Rust memory.
        let ptr = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::SHARED, fd, 0) }?;
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from(Errno::NOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The byte span of `range` inside the mapping, clamped to it.
    fn span(&self, range: PageRange) -> Option<(*mut c_void, usize)> {
        let start = usize::try_from(range.byte_offset()).ok()?;
        if start >= self.len {
            return None;
        }
        let end = usize::try_from(range.byte_offset().saturating_add(range.byte_len())).unwrap_or(usize::MAX);
        let len = end.min(self.len) - start;
        // wrapping_add: the result stays within the mapping (start < len).
        Some((self.ptr.as_ptr().cast::<u8>().wrapping_add(start).cast(), len))
    }

    /// `mincore(2)` over `range`: fills `out` with one byte per page (bit 0
    /// set = resident and up to date). Pages past the mapping are left out.
    /// (libc: rustix has no `mincore`.)
    pub fn residency(&self, range: PageRange, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        let Some((addr, len)) = self.span(range) else { return Ok(()) };
        let pages = len.div_ceil(crate::page::PAGE_SIZE as usize);
        out.resize(pages, 0);
        // SAFETY: addr..addr+len lies inside our live mapping (page aligned,
        // as range offsets are page multiples); `out` has room for one byte
        // per page of that span.
        let rc = unsafe { libc::mincore(addr, len, out.as_mut_ptr().cast()) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// `madvise(MADV_WILLNEED)` over `range`: start reading it.
    pub fn will_need(&self, range: PageRange) -> io::Result<()> {
        let Some((addr, len)) = self.span(range) else { return Ok(()) };
        // SAFETY: the span lies inside our live, page-aligned mapping;
        // WILLNEED changes no memory contents.
        Ok(unsafe { rustix::mm::madvise(addr, len, rustix::mm::Advice::WillNeed) }?)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing references
        // the mapping once its owner drops it. An error (none is possible
        // for a mapping we made) would leave address space mapped, nothing
        // worse.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr(), self.len) };
    }
}

/// Reads `buf.len()` bytes at `offset` only if they are already in the page
/// cache. Returns the bytes read (short when only a prefix of the range is
/// cached or the file ends), or `None` when the first page is not cached (or
/// the filesystem does not support `RWF_NOWAIT`).
///
/// `RWF_NOWAIT` alone is not enough: it fails with `EAGAIN` on a page that is
/// not cached, but the kernel starts readahead for it first (since Linux 5.9,
/// for io_uring's sake). So the range is checked with `cachestat(2)` first
/// (`mincore(2)` before Linux 6.5) and only cached pages are read; `RWF_NOWAIT` then covers a page evicted or
/// still being read in between (`EAGAIN`, no wait). Looking at a page a
/// program just read therefore never reads an absent page in.
pub fn pread_resident(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<Option<usize>> {
    if buf.is_empty() {
        return Ok(Some(0));
    }
    let Some(len) = cached_prefix(fd, offset, buf.len() as u64)? else {
        return Ok(None);
    };
    let buf = &mut buf[..len];
    check_off_t(offset)?;
    let mut iov = [io::IoSliceMut::new(buf)];
    match rustix::io::preadv2(fd, &mut iov, offset, rustix::io::ReadWriteFlags::NOWAIT) {
        Ok(read) => Ok(Some(read)),
        Err(Errno::AGAIN | Errno::OPNOTSUPP) => Ok(None),
        Err(err) => Err(err.into()),
    }
}

/// How many bytes from `offset` (at most `len`) lie on cached pages: all of
/// them when every page of the range is cached, else those on the first page,
/// else `None`.
fn cached_prefix(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<Option<usize>> {
    const PAGE: u64 = 4096;
    let first = offset - offset % PAGE;
    let end = offset.saturating_add(len);
    let pages = end.div_ceil(PAGE) - first / PAGE;
    let (all, head) = match cachestat(fd, first, pages * PAGE) {
        Ok(whole) if whole.nr_cache >= pages => (true, true),
        Ok(_) => (false, pages > 1 && cachestat(fd, first, PAGE)?.nr_cache >= 1),
        Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => {
            // Before Linux 6.5: mincore over a mapping of the range. It
            // reports the page cache of a file the caller owns or may
            // write, or with CAP_FOWNER (the daemon's unit grants it).
            let mapping = Mapping::map(fd, first + pages * PAGE)?;
            let mut resident = Vec::new();
            mapping.residency(PageRange::new(first / PAGE, first / PAGE + pages), &mut resident)?;
            let all = resident.len() as u64 == pages && resident.iter().all(|b| b & 1 == 1);
            (all, resident.first().is_some_and(|b| b & 1 == 1))
        }
        Err(err) => return Err(err),
    };
    Ok(if all {
        Some(len as usize)
    } else if head && pages > 1 {
        Some((first + PAGE - offset) as usize)
    } else {
        None
    })
}

/// `struct file_handle` with room for the 8-byte `FILEID_INO32_GEN` handle.
#[repr(C)]
struct InodeHandle {
    handle_bytes: libc::c_uint,
    handle_type: libc::c_int,
    f_handle: [u32; 2],
}

/// `FILEID_INO32_GEN` (include/linux/exportfs.h): a 32-bit inode number and
/// a generation; ext2/3/4 (among others) decode it, and a zero generation
/// means "any generation".
const FILEID_INO32_GEN: libc::c_int = 1;

/// Opens inode `ino` of the filesystem `mount` is on, read-only, through
/// `open_by_handle_at(2)` with an `FILEID_INO32_GEN` handle and generation 0
/// (needs `CAP_DAC_READ_SEARCH`; libc: rustix has no `open_by_handle_at`). The launch recorder uses it to name files
/// that kernel observation reported by `(dev, ino)` after the process that
/// touched them has closed them. Filesystems that encode handles otherwise
/// answer `EINVAL`/`ESTALE`.
pub fn open_by_inode(mount: BorrowedFd<'_>, ino: u64) -> io::Result<File> {
    let ino = u32::try_from(ino).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    let mut handle = InodeHandle { handle_bytes: 8, handle_type: FILEID_INO32_GEN, f_handle: [ino, 0] };
    // SAFETY: `handle` is a valid `struct file_handle` whose `handle_bytes`
    // (8) matches the bytes that follow its header; the kernel only reads it.
    // The descriptor returned is new and owned by nobody else.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_open_by_handle_at,
            mount.as_raw_fd(),
            &mut handle as *mut InodeHandle,
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor from the syscall above, owned by us alone.
    Ok(unsafe { File::from_raw_fd(fd as i32) })
}

/// One file-backed mapping of a process, as `PROCMAP_QUERY` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileMapping {
    /// First address of the mapping.
    pub start: u64,
    /// One past its last address.
    pub end: u64,
    /// The mapped file's device (`st_dev`).
    pub dev: u64,
    /// The mapped file's inode number.
    pub ino: u64,
}

/// `struct procmap_query` of `<linux/fs.h>` (Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

// The kernel's struct is 104 bytes; a mismatch would be a wrong ioctl number.
const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);

/// `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: rustix::ioctl::Opcode = rustix::ioctl::opcode::read_write::<ProcmapQuery>(b'f', 17);
/// The mapping at the address, or else the next one above it.
const PROCMAP_QUERY_COVERING_OR_NEXT_VMA: u64 = 0x10;
/// File-backed mappings only.
const PROCMAP_QUERY_FILE_BACKED_VMA: u64 = 0x20;

/// Appends to `out` the file-backed mappings of the process whose
/// `/proc/PID/maps` is open as `maps`, in address order, at most `max` of
/// them, through the `PROCMAP_QUERY` ioctl: one call per file mapping and
/// no path formatted, where reading `maps` formats every mapping's line and
/// path. Kernels before 6.11 (and anything that is not a procfs `maps`)
/// answer `ENOTTY`; a process that exited answers `ESRCH`.
pub fn file_mappings(maps: BorrowedFd<'_>, max: usize, out: &mut Vec<FileMapping>) -> io::Result<()> {
    if assumed_missing(NewerCall::ProcmapQuery) {
        return Err(io::Error::from_raw_os_error(libc::ENOTTY));
    }
    let mut addr = 0u64;
    for _ in 0..max {
        let mut query = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA | PROCMAP_QUERY_FILE_BACKED_VMA,
            query_addr: addr,
            ..ProcmapQuery::default()
        };
        // SAFETY: PROCMAP_QUERY takes a `struct procmap_query`, which
        // `ProcmapQuery` is (#[repr(C)], size checked above), live and
        // exclusively borrowed for the call; its `size` field says how many
        // bytes the kernel may read and write; name and build-id sizes are
        // 0, so the kernel writes no buffer of ours beyond the struct.
        let result = unsafe {
            rustix::ioctl::ioctl(maps, rustix::ioctl::Updater::<PROCMAP_QUERY, ProcmapQuery>::new(&mut query))
        };
        match result {
            Ok(()) => {}
            Err(Errno::NOENT) => return Ok(()),
            Err(err) => return Err(err.into()),
        }
        if query.vma_end <= addr {
            // Never loop on a kernel that does not move forward.
            return Ok(());
        }
        addr = query.vma_end;
        out.push(FileMapping {
            start: query.vma_start,
            end: query.vma_end,
            dev: rustix::fs::makedev(query.dev_major, query.dev_minor),
            ino: query.inode,
        });
    }
    Ok(())
}

/// The `/proc/self/fd` path of `fd`: opening it gives a new open file
/// description of the same file (its own offset and readahead state);
/// reading it as a link gives the file's path.
pub fn fd_path(fd: BorrowedFd<'_>) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// Lists the directory `fd` names (a fresh directory stream through
/// [`fd_path`], so concurrent listings never share an offset), reading at
/// most `max_entries` entries, and returns how many were read. Only the
/// directory's own blocks are read: entries are not stat'ed.
pub fn list_dir(fd: BorrowedFd<'_>, max_entries: u64) -> io::Result<u64> {
    let mut n = 0;
    for entry in std::fs::read_dir(fd_path(fd))? {
        entry?;
        n += 1;
        if n >= max_entries {
            break;
        }
    }
    Ok(n)
}

/// Looks `name` (one path component) up in the directory `dir`, without
/// following a final symbolic link (`fstatat(AT_SYMLINK_NOFOLLOW)`), and
/// returns whether it exists. Reads what the lookup needs: the directory's
/// blocks, and the inode of a name that exists.
pub fn look_up(dir: BorrowedFd<'_>, name: &str) -> bool {
    // A name with a NUL byte is EINVAL: false, as for a missing name.
    rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    const PAGE: u64 = 4096;

    /// A 64-page file of distinct bytes, and whether its filesystem keeps
    /// it in memory (where `DONTNEED` drops nothing).
    fn data_file(dir: &std::path::Path) -> (File, Vec<u8>, bool) {
        let path = dir.join("data");
        let bytes: Vec<u8> = (0..64 * PAGE).map(|i| (i % 251) as u8).collect();
        let mut file = File::create(&path).expect("create");
        file.write_all(&bytes).expect("write");
        file.sync_all().expect("fsync");
        let file = File::open(&path).expect("open");
        let in_memory = memory_only_fs(file.as_fd()).expect("fstatfs");
        (file, bytes, in_memory)
    }

    fn cached(file: &File) -> u64 {
        cachestat(file.as_fd(), 0, 64 * PAGE).expect("cachestat").nr_cache
    }

    #[test]
    fn fadvise_drops_and_reads_pages_and_refuses_negative_offsets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _, in_memory) = data_file(dir.path());
        fadvise(file.as_fd(), 0, 0, Advice::DontNeed).expect("DONTNEED");
        if !in_memory {
            assert_eq!(cached(&file), 0, "DONTNEED of a clean file leaves nothing cached");
        }
        fadvise(file.as_fd(), 0, 16 * PAGE, Advice::WillNeed).expect("WILLNEED");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while cached(&file) < 16 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(cached(&file) >= 16, "WILLNEED reads the range in");
        fadvise(file.as_fd(), 0, 0, Advice::Random).expect("RANDOM");
        for (offset, len) in [(u64::MAX, 1), (0, u64::MAX)] {
            let err = fadvise(file.as_fd(), offset, len, Advice::WillNeed).expect_err("past off_t");
            assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
        }
    }

    #[test]
    fn sendfile_reads_at_an_offset_without_moving_the_file_position() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _, _) = data_file(dir.path());
        let null = File::options().write(true).open("/dev/null").expect("/dev/null");
        assert_eq!(sendfile_at(null.as_fd(), file.as_fd(), 60 * PAGE, 8 * PAGE as usize).expect("sendfile"), 16384);
        assert_eq!(sendfile_at(null.as_fd(), file.as_fd(), 64 * PAGE, 4096).expect("at EOF"), 0);
        assert_eq!(rustix::fs::seek(&file, rustix::fs::SeekFrom::Current(0)).expect("tell"), 0);
        readahead(file.as_fd(), 0, 4 * PAGE).expect("readahead");
    }

    #[test]
    fn seek_data_and_hole_find_the_extents_of_a_sparse_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("sparse");
        let file = File::create(&path).expect("create");
        use std::os::unix::fs::FileExt;
        file.write_all_at(&[1; 4096], 1 << 20).expect("write");
        file.set_len(2 << 20).expect("extend");
        let fd = file.as_fd();
        // Filesystems without hole tracking report the whole file as data.
        let data = seek_data(fd, 0).expect("SEEK_DATA").expect("data exists");
        assert!(data == 0 || data == 1 << 20, "{data}");
        let hole = seek_hole(fd, 1 << 20).expect("SEEK_HOLE").expect("EOF is a hole");
        assert!(hole > 1 << 20 && hole <= 2 << 20, "{hole}");
        assert_eq!(seek_data(fd, 2 << 20).expect("at EOF"), None);
        assert_eq!(seek_hole(fd, 3 << 20).expect("past EOF"), None);
        assert_eq!(seek_data(fd, u64::MAX).expect_err("past off_t").raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn memory_only_filesystems_are_told_apart() {
        let proc = File::open("/proc/self/status").expect("open /proc");
        assert!(memory_only_fs(proc.as_fd()).expect("fstatfs /proc"));
        let memfd = memfd(c"predictio-test").expect("memfd");
        assert!(memory_only_fs(memfd.as_fd()).expect("fstatfs memfd"), "a memfd lives on tmpfs");
        let exe = File::open(std::env::current_exe().expect("exe")).expect("open exe");
        let exe_in_memory = memory_only_fs(exe.as_fd()).expect("fstatfs exe");
        let statfs = rustix::fs::fstatfs(&exe).expect("fstatfs");
        assert_eq!(exe_in_memory, statfs.f_type == libc::TMPFS_MAGIC);
    }

    #[test]
    fn memfd_is_a_close_on_exec_regular_file() {
        let file = memfd(c"predictio-test").expect("memfd");
        assert!(file.metadata().expect("stat").is_file());
        let flags = rustix::io::fcntl_getfd(&file).expect("F_GETFD");
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
    }

    #[test]
    fn thread_nice_is_set_for_the_calling_thread_only() {
        // getpriority(PRIO_PROCESS, 0) reads the calling thread's nice value.
        let nice = std::thread::spawn(|| {
            set_thread_nice(19).expect("raise nice");
            rustix::process::getpriority_process(None).expect("getpriority")
        })
        .join()
        .expect("thread");
        assert_eq!(nice, 19);
        assert_ne!(rustix::process::getpriority_process(None).expect("getpriority"), 19);
    }

    #[test]
    fn page_size_is_the_kernels() {
        assert_eq!(page_size(), crate::page::PAGE_SIZE);
    }

    #[test]
    fn a_mapping_reports_residency_and_reads_ahead() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _, in_memory) = data_file(dir.path());
        let map = Mapping::map(file.as_fd(), 64 * PAGE).expect("mmap");
        assert_eq!(map.len(), 64 * PAGE as usize);
        assert_eq!(Mapping::map(file.as_fd(), 0).expect_err("empty").raw_os_error(), Some(libc::EINVAL));
        fadvise(file.as_fd(), 0, 0, Advice::DontNeed).expect("DONTNEED");
        let mut resident = Vec::new();
        map.residency(PageRange::new(0, 64), &mut resident).expect("mincore");
        assert_eq!(resident.len(), 64);
        if !in_memory {
            assert!(resident.iter().all(|&r| r & 1 == 0), "nothing resident after DONTNEED");
        }
        map.will_need(PageRange::new(8, 16)).expect("MADV_WILLNEED");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            map.residency(PageRange::new(8, 16), &mut resident).expect("mincore");
            if resident.iter().all(|&r| r & 1 == 1) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "WILLNEED read nothing in: {resident:?}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        map.residency(PageRange::new(60, 70), &mut resident).expect("clamped");
        assert_eq!(resident.len(), 4, "pages past the mapping are left out");
        map.residency(PageRange::new(64, 65), &mut resident).expect("past the end");
        assert!(resident.is_empty());
    }

    #[test]
    fn pread_resident_reads_cached_bytes_and_never_reads_absent_ones_in() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, bytes, in_memory) = data_file(dir.path());
        let fd = file.as_fd();
        let mut buf = vec![0u8; 3 * PAGE as usize];
        assert_eq!(pread_resident(fd, &mut [], 0).expect("empty"), Some(0));
        if !in_memory {
            fadvise(fd, 0, 0, Advice::DontNeed).expect("DONTNEED");
            assert_eq!(pread_resident(fd, &mut buf, 10 * PAGE).expect("absent"), None);
            assert_eq!(cached(&file), 0, "looking read nothing in");
            // Only the first page cached: the read stops at its end.
            std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf[..1], 10 * PAGE).expect("read one");
            let got = pread_resident(fd, &mut buf, 10 * PAGE + 100).expect("prefix");
            assert_eq!(got, Some(PAGE as usize - 100));
            assert_eq!(&buf[..PAGE as usize - 100], &bytes[(10 * PAGE + 100) as usize..(11 * PAGE) as usize]);
        }
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut buf, 20 * PAGE).expect("read in");
        buf.fill(0);
        assert_eq!(pread_resident(fd, &mut buf, 20 * PAGE).expect("cached"), Some(buf.len()));
        assert_eq!(&buf[..], &bytes[(20 * PAGE) as usize..(23 * PAGE) as usize]);
    }

    #[test]
    fn file_mappings_list_this_process_mapped_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, _, _) = data_file(dir.path());
        let map = Mapping::map(file.as_fd(), 64 * PAGE).expect("mmap");
        let maps = File::open("/proc/self/maps").expect("open maps");
        let mut out = Vec::new();
        match file_mappings(maps.as_fd(), 100_000, &mut out) {
            Err(err) if err.raw_os_error() == Some(libc::ENOTTY) => return, // before Linux 6.11
            result => result.expect("PROCMAP_QUERY"),
        }
        let meta = file.metadata().expect("stat");
        let start = map.ptr.as_ptr() as u64;
        let ours = out.iter().find(|m| m.start == start).expect("our mapping is listed");
        assert_eq!((ours.end, ours.dev, ours.ino), (start + 64 * PAGE, meta.dev(), meta.ino()));
        assert!(out.windows(2).all(|w| w[0].end <= w[1].start), "address order");
        let mut few = Vec::new();
        file_mappings(maps.as_fd(), 1, &mut few).expect("one");
        assert_eq!(few.len(), 1);
        assert_eq!(few[0], out[0]);
    }

    #[test]
    fn look_up_finds_names_without_following_links() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("present"), b"x").expect("write");
        std::os::unix::fs::symlink("/nonexistent/target", dir.path().join("dangling")).expect("symlink");
        let d = File::open(dir.path()).expect("open dir");
        assert!(look_up(d.as_fd(), "present"));
        assert!(look_up(d.as_fd(), "dangling"), "the link itself exists");
        assert!(!look_up(d.as_fd(), "absent"));
        assert!(!look_up(d.as_fd(), "nul\0byte"));
        assert_eq!(list_dir(d.as_fd(), 100).expect("list"), 2);
    }
}
