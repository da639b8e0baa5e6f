//! The few system calls the crate makes directly (everything else goes
//! through aya). The only module allowed `unsafe`.
//!
//! rustix wherever it has the call (`poll`, `mount`, `pipe2`, `read`,
//! `pread`, `waitpid`, `clock_gettime`, `mmap`/`munmap`, the perf
//! `ioctl`s, the page size);
//! libc for what rustix 1.x does not wrap: `fanotify_init(2)` and
//! `fanotify_mark(2)`, `perf_event_open(2)`, and `fork(2)`/`_exit(2)`
//! (rustix's `fork` is the raw system call, which skips the C library's
//! own bookkeeping in the child of a process that uses it).
#![expect(unsafe_code, reason = "the FFI edge of the crate")]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;

/// `ppoll(2)` on `fds` for up to `timeout`: the number of ready
/// descriptors, 0 on timeout or an interrupting signal. Nanosecond
/// precision, so a sub-millisecond timeout still waits instead of spinning.
fn poll(fds: &mut [PollFd<'_>], timeout: Duration) -> io::Result<usize> {
    // A timeout too large for a timespec (centuries) waits forever.
    let timeout = Timespec::try_from(timeout).ok();
    match rustix::event::poll(fds, timeout.as_ref()) {
        Ok(ready) => Ok(ready),
        Err(Errno::INTR) => Ok(0),
        Err(err) => Err(err.into()),
    }
}

/// Waits until `fd` is readable or `timeout` passes. `Ok(true)` when readable;
/// `Ok(false)` on timeout or an interrupting signal.
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    Ok(poll(&mut [PollFd::from_borrowed_fd(fd, PollFlags::IN)], timeout)? > 0)
}

/// Mounts tracefs at `target` (aya needs it to attach tracepoints; so do
/// the layout check and the perf observer).
pub(crate) fn mount_tracefs(target: &std::path::Path) -> io::Result<()> {
    let flags = rustix::mount::MountFlags::empty();
    Ok(rustix::mount::mount("nodev", target, "tracefs", flags, None)?)
}

/// `fanotify_init(2)`: a notification-class group whose events carry a
/// read-only descriptor of the file.
pub(crate) fn fanotify_init(flags: libc::c_uint) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as libc::c_uint;
    // SAFETY: plain system call with integer arguments.
    let fd = unsafe { libc::fanotify_init(flags, event_flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// `fanotify_mark(2)` adding `mask` for the object at `path`.
pub(crate) fn fanotify_mark(
    group: BorrowedFd<'_>,
    flags: libc::c_uint,
    mask: u64,
    path: &std::path::Path,
) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: `group` is an open fanotify descriptor (borrowed for the call);
    // `path` is a NUL-terminated string that outlives the call.
    let rc = unsafe { libc::fanotify_mark(group.as_raw_fd(), flags, mask, libc::AT_FDCWD, path.as_ptr()) };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// One fanotify event, its descriptor (if any) owned.
pub(crate) struct FanotifyRecord {
    /// `FAN_*` mask bits.
    pub mask: u64,
    /// Process that caused the event (thread-group id).
    pub pid: i32,
    /// The file, opened read-only by the kernel for us.
    pub file: Option<std::fs::File>,
}

/// Size of `struct fanotify_event_metadata`.
pub(crate) const FANOTIFY_METADATA_LEN: usize = 24;

/// The header fields of one `struct fanotify_event_metadata`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct FanotifyMetadata {
    pub event_len: usize,
    pub vers: u8,
    pub mask: u64,
    pub fd: i32,
    pub pid: i32,
}

impl FanotifyMetadata {
    /// Reads one header; `bytes` holds at least [`FANOTIFY_METADATA_LEN`].
    pub(crate) fn parse(bytes: &[u8]) -> FanotifyMetadata {
        let u32_at = |at: usize| u32::from_ne_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        FanotifyMetadata {
            event_len: u32_at(0) as usize,
            vers: bytes[4],
            mask: u64::from_ne_bytes(bytes[8..16].try_into().expect("8 bytes")),
            fd: u32_at(16) as i32,
            pid: u32_at(20) as i32,
        }
    }
}

/// One `read(2)` of a fanotify group into `buf`, each event handed to
/// `on_record` with its descriptor owned (closed when dropped). Returns the
/// number of bytes read (0: none queued, for a non-blocking group).
///
/// Reading and parsing are one step so that every descriptor in the buffer is
/// taken exactly once, which is what makes owning them sound.
pub(crate) fn read_fanotify(
    group: &std::fs::File,
    buf: &mut [u8],
    on_record: &mut dyn FnMut(FanotifyRecord),
) -> io::Result<usize> {
    use std::io::Read as _;
    use std::os::fd::FromRawFd;
    let mut reader = group;
    let len = match reader.read(buf) {
        Ok(len) => len,
        Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(0),
        Err(err) => return Err(err),
    };
    let mut at = 0;
    while at + FANOTIFY_METADATA_LEN <= len {
        let meta = FanotifyMetadata::parse(&buf[at..len]);
        if meta.vers != libc::FANOTIFY_METADATA_VERSION {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("fanotify metadata version {}, expected {}", meta.vers, libc::FANOTIFY_METADATA_VERSION),
            ));
        }
        let file = (meta.fd >= 0).then(|| {
            // SAFETY: the kernel installed this descriptor for us in the event
            // just read; this loop visits each event of the buffer once, so
            // nothing else owns or closes it.
            std::fs::File::from(unsafe { std::os::fd::OwnedFd::from_raw_fd(meta.fd) })
        });
        on_record(FanotifyRecord { mask: meta.mask, pid: meta.pid, file });
        if meta.event_len < FANOTIFY_METADATA_LEN {
            break; // malformed: never loop forever
        }
        at += meta.event_len;
    }
    Ok(len)
}

/// Forks a helper that holds a copy of every descriptor of this process
/// until `release` runs, then exits; returns once `release` has run, with the
/// helper's pid. The kernel then finishes closing whatever `release` closed
/// (its last references are the helper's) in the helper's exit, which nobody
/// waits for. `Err` when the process cannot fork; `release` has not run then.
///
/// The helper closes its standard input, output and error at once, so a
/// reader of this process's output sees its end when this process exits.
#[cfg_attr(predictio_bpf_unavailable, allow(dead_code, reason = "used by the eBPF observer only"))]
pub(crate) fn release_in_helper(release: impl FnOnce()) -> io::Result<u32> {
    let (helper, hold) = fork_holder()?;
    release();
    // Dropping the write end lets the helper go.
    drop(hold);
    Ok(helper)
}

/// Forks a helper that holds a copy of every descriptor of this process
/// until this process exits, then exits itself: the kernel's closing of
/// what this process leaves (eBPF links, whose detaching takes a second
/// here) happens in the helper's exit, which nobody waits for, and not in
/// this one's. Returns the helper's pid.
pub(crate) fn hold_until_exit() -> io::Result<u32> {
    let (helper, hold) = fork_holder()?;
    // Closed by this process's exit, which is what the helper waits for.
    std::mem::forget(hold);
    Ok(helper)
}

/// Forks the helper of [`release_in_helper`] and [`hold_until_exit`]: it
/// closes its standard descriptors, then waits for the end of a pipe whose
/// only write end is returned here, and exits.
fn fork_holder() -> io::Result<(u32, std::os::fd::OwnedFd)> {
    // Both ends close when dropped, in the parent and (the write end) in
    // the child: `OwnedFd`'s drop is a bare close(2).
    let (read_end, write_end) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    // SAFETY: the child calls only async-signal-safe functions (close, read,
    // _exit, as raw system calls; no allocation, no lock) before it exits,
    // as a fork of a multi-threaded process must; it never returns into
    // Rust code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(write_end);
            // SAFETY: closes this process's standard descriptors, which no
            // Rust object of the child owns or uses before `_exit`.
            unsafe {
                libc::close(0);
                libc::close(1);
                libc::close(2);
            }
            // Blocks until every write end is closed (end of file).
            let mut byte = [0u8; 1];
            while rustix::io::read(&read_end, &mut byte) == Err(Errno::INTR) {}
            // SAFETY: ends the helper without running exit handlers or
            // unwinding, as the child of a fork must.
            unsafe { libc::_exit(0) }
        }
        child => {
            drop(read_end);
            Ok((child as u32, write_end))
        }
    }
}

/// Forks a child that reads `len` bytes at `offset` of `file` with one
/// `pread(2)` and exits, and waits for it: a read by another process than
/// this one, which an observer ignoring this process's own pages
/// ([`crate::ObserverConfig::ignore_own_pages`]) still reports. Returns the
/// child's pid and whether it read all `len` bytes (`None`: its status
/// could not be collected, as when `SIGCHLD` is ignored).
pub(crate) fn pread_in_child(file: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<(u32, Option<bool>)> {
    // Allocated before the fork: the child must not allocate.
    let mut buf = vec![0u8; len];
    // SAFETY: the child calls only async-signal-safe functions (pread and
    // _exit, as raw system calls; no allocation, no lock: the buffer exists
    // already) before it exits, as a fork of a multi-threaded process must;
    // it never returns into Rust code.
    let pid = unsafe { libc::fork() };
    match pid {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            let read = rustix::io::pread(file, &mut buf[..], offset);
            let status = if read == Ok(len) { 0 } else { 1 };
            // SAFETY: ends the child without running exit handlers or
            // unwinding, as the child of a fork must.
            unsafe { libc::_exit(status) }
        }
        child => {
            let pid = rustix::process::Pid::from_raw(child).ok_or_else(|| io::Error::other("fork returned pid 0"))?;
            let status = loop {
                match rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()) {
                    Ok(Some((_, status))) => break status.exit_status().map(|code| code == 0),
                    Ok(None) => break None,
                    Err(Errno::INTR) => {}
                    // Reaped already (SIGCHLD ignored): it has exited.
                    Err(Errno::CHILD) => break None,
                    Err(err) => return Err(err.into()),
                }
            };
            Ok((child as u32, status))
        }
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

// ---- perf_event_open(2): the perf observer's edge (`crate::perf`) ----

/// `struct perf_event_attr` through `sample_max_stack`
/// (`PERF_ATTR_SIZE_VER5`, Linux 4.8+): everything the perf observer sets.
/// The bit fields of the kernel's struct are the one word `flags`
/// (`PERF_ATTR_FLAG_*`).
///
/// # References
///
/// - [`perf_event_open(2)`](https://man7.org/linux/man-pages/man2/perf_event_open.2.html)
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PerfEventAttr {
    pub kind: u32,
    pub size: u32,
    pub config: u64,
    pub sample_period: u64,
    pub sample_type: u64,
    pub read_format: u64,
    pub flags: u64,
    /// `wakeup_events`, or `wakeup_watermark` (bytes) with `PERF_ATTR_FLAG_WATERMARK`.
    pub wakeup: u32,
    pub bp_type: u32,
    pub config1: u64,
    pub config2: u64,
    pub branch_sample_type: u64,
    pub sample_regs_user: u64,
    pub sample_stack_user: u32,
    pub clockid: i32,
    pub sample_regs_intr: u64,
    pub aux_watermark: u32,
    pub sample_max_stack: u16,
    pub reserved_2: u16,
}

/// `PERF_ATTR_SIZE_VER5`.
pub(crate) const PERF_ATTR_SIZE: u32 = 112;
const _: () = assert!(size_of::<PerfEventAttr>() == PERF_ATTR_SIZE as usize);

/// Bits of [`PerfEventAttr::flags`] (the kernel's bit-field order).
pub(crate) const PERF_ATTR_FLAG_DISABLED: u64 = 1 << 0;
pub(crate) const PERF_ATTR_FLAG_INHERIT: u64 = 1 << 1;
pub(crate) const PERF_ATTR_FLAG_TASK: u64 = 1 << 13;
pub(crate) const PERF_ATTR_FLAG_WATERMARK: u64 = 1 << 14;
pub(crate) const PERF_ATTR_FLAG_USE_CLOCKID: u64 = 1 << 25;

/// `perf_event_open(attr, pid, cpu, group_fd = -1, PERF_FLAG_FD_CLOEXEC)`.
pub(crate) fn perf_event_open(attr: &PerfEventAttr, pid: i32, cpu: i32) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
    // SAFETY: `attr` points to a live, initialised struct whose `size` field
    // the caller sets to at most its size (the kernel reads `size` bytes and
    // writes `size` back only on E2BIG, which is within the struct too);
    // the other arguments are integers.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            std::ptr::from_ref(attr),
            pid as libc::c_int,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us; nobody else owns it.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// The `ioctl`s the perf observer makes on a perf event descriptor.
pub(crate) enum PerfIoctl<'fd> {
    /// `PERF_EVENT_IOC_ENABLE`.
    Enable,
    /// `PERF_EVENT_IOC_SET_OUTPUT`: write this event's records into the ring
    /// of the given event (same CPU).
    SetOutput(BorrowedFd<'fd>),
}

/// One perf `ioctl` (the enum keeps each request paired with the argument
/// type the kernel expects).
pub(crate) fn perf_ioctl(event: BorrowedFd<'_>, request: PerfIoctl<'_>) -> io::Result<()> {
    use rustix::ioctl::{IntegerSetter, NoArg, Opcode, ioctl, opcode};
    /// `_IO('$', 0)`: its argument (0: this event only) is an integer.
    const PERF_EVENT_IOC_ENABLE: Opcode = opcode::none(b'$', 0);
    /// `_IO('$', 5)`: its argument is a descriptor, an integer.
    const PERF_EVENT_IOC_SET_OUTPUT: Opcode = opcode::none(b'$', 5);
    match request {
        // SAFETY: ENABLE takes no pointer; the argument NoArg passes (0)
        // enables this event only, and no user memory is touched.
        PerfIoctl::Enable => unsafe { ioctl(event, NoArg::<PERF_EVENT_IOC_ENABLE>::new()) }?,
        PerfIoctl::SetOutput(output) => {
            let output = output.as_raw_fd() as usize;
            // SAFETY: SET_OUTPUT takes a descriptor as an integer, borrowed
            // (hence open) for the call; no user memory is touched.
            unsafe { ioctl(event, IntegerSetter::<PERF_EVENT_IOC_SET_OUTPUT>::new_usize(output)) }?
        }
    }
    Ok(())
}

/// `poll(2)` on several descriptors; `revents` are written into `fds`.
/// Returns how many are ready (0 on timeout or an interrupting signal).
pub(crate) fn poll_many(fds: &mut [PollFd<'_>], timeout: Duration) -> io::Result<usize> {
    poll(fds, timeout)
}

/// A perf event's mmap'ed ring: the control page (`struct
/// perf_event_mmap_page`) and `2^n` data pages, shared with the kernel,
/// which writes records at `data_head` while we read from `data_tail`.
///
/// Drop order: the mapping is unmapped when this drops; the event's
/// descriptor may be closed before or after (the mapping holds its own
/// reference to the buffer).
pub(crate) struct PerfRing {
    base: std::ptr::NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping is owned by this value alone (no aliasing Rust
// references exist); the kernel side is synchronised through the atomic
// head/tail words, so moving the owner to another thread is sound.
unsafe impl Send for PerfRing {}

/// Offsets in `struct perf_event_mmap_page`.
const PERF_MMAP_DATA_HEAD: usize = 1024;
const PERF_MMAP_DATA_TAIL: usize = 1032;
const PERF_MMAP_DATA_OFFSET: usize = 1040;
const PERF_MMAP_DATA_SIZE: usize = 1048;

impl PerfRing {
    /// Maps the ring of `event` with `data_pages` data pages (a power of two).
    pub(crate) fn map(event: BorrowedFd<'_>, data_pages: usize) -> io::Result<PerfRing> {
        use rustix::mm::{MapFlags, ProtFlags};
        let page = page_size();
        let map_len = (data_pages + 1) * page;
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a fresh shared mapping chosen by the kernel (no address
        // hint), aliasing no Rust memory; the descriptor is borrowed for the
        // call only (the mapping keeps the buffer alive).
        let base = unsafe { rustix::mm::mmap(std::ptr::null_mut(), map_len, prot, MapFlags::SHARED, event, 0) }?;
        let base = std::ptr::NonNull::new(base.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        let mut ring = PerfRing { base, map_len, data_offset: page, data_size: data_pages * page };
        // Linux 4.1+ says where the data area is; older kernels leave zeros
        // and use the page after the control page.
        let (offset, size) = (ring.control_word(PERF_MMAP_DATA_OFFSET), ring.control_word(PERF_MMAP_DATA_SIZE));
        if size != 0 && (offset as usize).saturating_add(size as usize) <= map_len && size.is_power_of_two() {
            ring.data_offset = offset as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    /// An 8-byte word of the control page, as an atomic (the kernel writes
    /// `data_head` concurrently; we write `data_tail`).
    fn control_atomic(&self, offset: usize) -> &std::sync::atomic::AtomicU64 {
        debug_assert!(offset.is_multiple_of(8) && offset + 8 <= page_size());
        // SAFETY: `offset` is an 8-aligned offset inside the control page,
        // which is mapped (page-aligned) for as long as `self` lives; the
        // kernel only ever accesses these words atomically, and AtomicU64 has
        // the layout of u64.
        unsafe { &*self.base.as_ptr().add(offset).cast::<std::sync::atomic::AtomicU64>() }
    }

    fn control_word(&self, offset: usize) -> u64 {
        self.control_atomic(offset).load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes in the data area (a power of two).
    pub(crate) fn data_size(&self) -> u64 {
        self.data_size as u64
    }

    /// Where the kernel has written up to (acquire: the records before it
    /// are visible once this is read).
    pub(crate) fn head(&self) -> u64 {
        self.control_atomic(PERF_MMAP_DATA_HEAD).load(std::sync::atomic::Ordering::Acquire)
    }

    /// Where we have read up to.
    pub(crate) fn tail(&self) -> u64 {
        self.control_word(PERF_MMAP_DATA_TAIL)
    }

    /// Hands the bytes before `tail` back to the kernel (release: our reads
    /// of them are done before the kernel may overwrite them).
    pub(crate) fn set_tail(&self, tail: u64) {
        self.control_atomic(PERF_MMAP_DATA_TAIL).store(tail, std::sync::atomic::Ordering::Release);
    }

    /// Copies `out.len()` bytes starting at ring position `position` (a
    /// free-running counter, wrapped here) into `out`. The caller reads only
    /// between `tail()` and a `head()` it has loaded, which the kernel does
    /// not write until the tail moves past them.
    ///
    /// # Panics
    ///
    /// If `out` is longer than the data area.
    pub(crate) fn copy_out(&self, position: u64, out: &mut [u8]) {
        assert!(out.len() <= self.data_size, "copy of {} bytes from a {}-byte ring", out.len(), self.data_size);
        let start = (position as usize) & (self.data_size - 1);
        let first = out.len().min(self.data_size - start);
        // SAFETY: `data_offset + start + first <= data_offset + data_size <=
        // map_len` and the wrapped rest is `< data_size`, so both source
        // ranges lie inside the live mapping; `out` is a distinct Rust
        // buffer. The kernel does not write these bytes while they are
        // between tail and head (see above), so the copy reads stable data.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            std::ptr::copy_nonoverlapping(data.add(start), out.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, out.as_mut_ptr().add(first), out.len() - first);
        }
    }
}

impl Drop for PerfRing {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping made in `map`; no reference
        // into it outlives `self` (all accessors borrow `self`). An error
        // (none is possible for our own mapping) would leave it mapped.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.map_len) };
    }
}

/// The system page size (`AT_PAGESZ`).
pub(crate) fn page_size() -> usize {
    rustix::param::page_size()
}
