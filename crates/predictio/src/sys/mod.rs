//! The syscall edge: every `unsafe` block of the core crate lives here, each
//! with a `SAFETY:` comment. Everything above this module is safe Rust over
//! typed wrappers that take `BorrowedFd`, never raw descriptors.
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
pub mod socket;
#[cfg(feature = "uring")]
pub mod uring;
#[cfg(not(feature = "uring"))]
pub use no_uring::{bigread, uring};

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::ptr::NonNull;

use crate::page::PageRange;

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

/// `posix_fadvise(2)`. `len` 0 means to the end of the file.
pub fn fadvise(fd: BorrowedFd<'_>, offset: u64, len: u64, advice: Advice) -> io::Result<()> {
    let advice = match advice {
        Advice::WillNeed => libc::POSIX_FADV_WILLNEED,
        Advice::DontNeed => libc::POSIX_FADV_DONTNEED,
        Advice::Random => libc::POSIX_FADV_RANDOM,
    };
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a borrowed (hence open) descriptor; no memory
    // is passed.
    let rc = unsafe { libc::posix_fadvise(fd.as_raw_fd(), offset, len, advice) };
    if rc != 0 { Err(io::Error::from_raw_os_error(rc)) } else { Ok(()) }
}

/// `sendfile(2)` of up to `len` bytes at `offset` of `input` to `output`,
/// without moving `input`'s file offset. Returns the bytes sent (0 at end of
/// file). With `/dev/null` as `output` this is a read through the page cache
/// that copies nothing: the kernel's own readahead brings the pages in.
pub fn sendfile_at(output: BorrowedFd<'_>, input: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<usize> {
    let mut offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: both descriptors are borrowed (hence open); `offset` is a live
    // local the kernel reads and updates for the duration of the call only.
    let rc = unsafe { libc::sendfile(output.as_raw_fd(), input.as_raw_fd(), &mut offset, len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc as usize) }
}

/// `readahead(2)`: synchronous submission of reads of the range.
pub fn readahead(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a borrowed descriptor; no memory is passed.
    let rc = unsafe { libc::readahead(fd.as_raw_fd(), offset, len) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

fn lseek(fd: BorrowedFd<'_>, offset: u64, whence: libc::c_int) -> io::Result<Option<u64>> {
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: plain syscall on a borrowed descriptor; no memory is passed.
    // lseek on our shared descriptor moves its file position, which nothing in
    // predictio uses (all our reads are positional).
    let rc = unsafe { libc::lseek(fd.as_raw_fd(), offset, whence) };
    if rc < 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENXIO) { Ok(None) } else { Err(err) }
    } else {
        Ok(Some(rc as u64))
    }
}

/// `lseek(SEEK_DATA)`: the first data byte at or after `offset`, or `None`
/// when only a hole (or EOF) follows.
pub fn seek_data(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    lseek(fd, offset, libc::SEEK_DATA)
}

/// `lseek(SEEK_HOLE)`: the first hole byte at or after `offset` (EOF counts
/// as a hole), or `None` when `offset` is at or past EOF.
pub fn seek_hole(fd: BorrowedFd<'_>, offset: u64) -> io::Result<Option<u64>> {
    lseek(fd, offset, libc::SEEK_HOLE)
}

/// Whether the filesystem holding `fd` makes its files up or keeps them in
/// memory only (proc, sysfs, tmpfs and devtmpfs, devpts, cgroup, debugfs,
/// tracefs, securityfs, bpf, hugetlbfs), so reading it never reaches
/// storage (`fstatfs(2)`'s `f_type`).
pub fn memory_only_fs(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `fd` is open for the borrow's lifetime; fstatfs writes one
    // whole `statfs` into the buffer it is given and nothing else.
    let rc = unsafe { libc::fstatfs(fd.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatfs succeeded, so it initialised the buffer.
    let st = unsafe { st.assume_init() };
    Ok(matches!(
        st.f_type,
        libc::PROC_SUPER_MAGIC
            | libc::SYSFS_MAGIC
            | libc::TMPFS_MAGIC
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
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let rc = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
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
/// `CAP_SYS_ADMIN`; `EPERM` otherwise.
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

/// The kernel's page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory effects.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size <= 0 { 4096 } else { size as u64 }
}

/// A new anonymous memory-backed file (`memfd_create(2)`), used by feature
/// probes.
pub fn memfd(name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: `name` is a valid NUL-terminated string for the call.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// A read-only shared mapping of a whole file, used to ask `mincore(2)` which
/// pages are resident and to `madvise` ranges. Mapping costs address space
/// only: no page is faulted in by predictio, ever.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<libc::c_void>,
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
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if len == 0 {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL) over an open
        // descriptor; it aliases no Rust memory.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(ptr).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Self { ptr, len })
    }

    /// Mapped length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for an empty mapping (never: `map` refuses length 0).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The byte span of `range` inside the mapping, clamped to it.
    fn span(&self, range: PageRange) -> Option<(*mut libc::c_void, usize)> {
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
        let rc = unsafe { libc::madvise(addr, len, libc::MADV_WILLNEED) };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned; nothing references
        // the mapping once its owner drops it.
        unsafe {
            libc::munmap(self.ptr.as_ptr(), self.len);
        }
    }
}

/// Reads `buf.len()` bytes at `offset` only if they are already in the page
/// cache. Returns the bytes read (short when only a prefix of the range is
/// cached or the file ends), or `None` when the first page is not cached (or
/// the filesystem does not support `RWF_NOWAIT`).
///
/// `RWF_NOWAIT` alone is not enough: it fails with `EAGAIN` on a page that is
/// not cached, but the kernel starts readahead for it first (since Linux 5.9,
/// for io_uring's sake). So the range is checked with `cachestat(2)` first and
/// only cached pages are read; `RWF_NOWAIT` then covers a page evicted or
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
    let offset = i64::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
    // SAFETY: one iovec over `buf`, which is live and writable for the call;
    // the descriptor is borrowed, hence open.
    let rc = unsafe { libc::preadv2(fd.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
    if rc >= 0 {
        return Ok(Some(rc as usize));
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EOPNOTSUPP) => Ok(None),
        _ => Err(err),
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
    let whole = cachestat(fd, first, pages * PAGE)?;
    if whole.nr_cache >= pages {
        return Ok(Some(len as usize));
    }
    if pages > 1 && cachestat(fd, first, PAGE)?.nr_cache >= 1 {
        return Ok(Some((first + PAGE - offset) as usize));
    }
    Ok(None)
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
/// (needs `CAP_DAC_READ_SEARCH`). The launch recorder uses it to name files
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
const PROCMAP_QUERY: u64 = (3 << 30) | ((std::mem::size_of::<ProcmapQuery>() as u64) << 16) | ((b'f' as u64) << 8) | 17;
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
    let mut addr = 0u64;
    for _ in 0..max {
        let mut query = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_flags: PROCMAP_QUERY_COVERING_OR_NEXT_VMA | PROCMAP_QUERY_FILE_BACKED_VMA,
            query_addr: addr,
            ..ProcmapQuery::default()
        };
        // SAFETY: `query` is a live, #[repr(C)] `struct procmap_query` whose
        // `size` field says how many bytes the kernel may read and write;
        // name and build-id sizes are 0, so the kernel writes no buffer of
        // ours beyond the struct.
        let rc =
            unsafe { libc::ioctl(maps.as_raw_fd(), PROCMAP_QUERY as libc::Ioctl, &mut query as *mut ProcmapQuery) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return if err.raw_os_error() == Some(libc::ENOENT) { Ok(()) } else { Err(err) };
        }
        if query.vma_end <= addr {
            // Never loop on a kernel that does not move forward.
            return Ok(());
        }
        addr = query.vma_end;
        out.push(FileMapping {
            start: query.vma_start,
            end: query.vma_end,
            dev: libc::makedev(query.dev_major, query.dev_minor),
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
    let Ok(name) = std::ffi::CString::new(name) else { return false };
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is an open descriptor for the call's duration, `name` a
    // NUL-terminated string that outlives it, and `st` room for one `stat`,
    // which the kernel only writes; it is never read.
    unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW) == 0 }
}
