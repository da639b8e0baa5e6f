//! The Rust client: sends hint frames to the daemon without ever blocking.
//!
//! A [`Client`] owns one autobound, non-blocking datagram socket connected to
//! the daemon's hint socket. Every send is `MSG_DONTWAIT`: when the daemon is
//! busy (`EAGAIN`, `ENOBUFS`) or gone (`ECONNREFUSED`, `ENOENT`) the frame is
//! dropped and counted, and the call returns at once. While the daemon is
//! gone, the client tries to connect again at most once per retry interval;
//! in between a send costs a clock read and two atomic operations.
//!
//! The client keeps a duplicate of every registered descriptor so that a
//! daemon that restarts (and so forgot every handle) is told about the files
//! again on reconnection, at most [`MAX_REGISTERED`] of them (the daemon
//! holds no more per client either). Registrations that could not be sent
//! are kept pending and retried before the next frame. The client knows
//! its handles: a hint naming one it never issued, or one unregistered, is
//! refused here ([`SendError::UnknownHandle`]) and never sent.
//!
//! The daemon keys handles by (socket address, pid). After `fork(2)` the
//! child shares the socket but not the pid, so the client notices the fork
//! (a `pthread_atfork` child handler bumps a counter) and registers its
//! files again from the child before its next frame.
//!
//! All methods take `&self`: a client can be shared between threads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::protocol::{self, Ack, EncodeError, Frame, Handle, MAX_DATAGRAM, MAX_FDS_PER_DATAGRAM, PageList, RangeList};
use crate::sys;

/// How long a client waits between attempts to reach an absent daemon.
pub const DEFAULT_RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// Most files one client keeps registered (each a descriptor it holds a
/// duplicate of); the daemon's default per-client handle budget.
pub const MAX_REGISTERED: usize = 4096;

const CONNECTED: u8 = 0;
const ABSENT: u8 = 1;

/// Why a client could not be created. (A missing daemon is not one: the
/// client then starts disconnected and drops hints until it appears.)
#[derive(Debug)]
pub enum ClientError {
    /// A syscall setting up the client's own socket failed.
    Syscall {
        /// The failing call.
        call: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Syscall { call, source } => write!(f, "{call} failed: {source}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Syscall { source, .. } => Some(source),
        }
    }
}

/// Why a frame was not sent. [`SendError::is_drop`] tells the expected,
/// harmless outcomes (no daemon, daemon busy) from mistakes in the call.
#[derive(Debug)]
pub enum SendError {
    /// No daemon is listening; the frame was dropped and counted.
    NoDaemon,
    /// The daemon's queue is full (`EAGAIN`/`ENOBUFS`); dropped and counted.
    Busy,
    /// The frame is invalid (inverted range, too many elements); nothing sent.
    Encode(EncodeError),
    /// The handle was never registered with this client (or was unregistered).
    UnknownHandle(Handle),
    /// The client holds [`MAX_REGISTERED`] files already; nothing was
    /// registered.
    TooManyHandles {
        /// The bound.
        max: usize,
    },
    /// The descriptor could not be duplicated (`EMFILE`/`ENFILE`: the
    /// process or system is out of descriptors; `EBADF`: not an open
    /// descriptor); nothing was registered.
    Duplicate(io::Error),
    /// The descriptor cannot be registered: not a regular file, or not open
    /// for reading (the daemon would refuse it too).
    BadDescriptor {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A syscall failed for another reason; the frame was dropped and counted.
    Syscall {
        /// The failing call.
        call: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl SendError {
    /// True when the frame was valid but dropped on the way (no daemon, busy,
    /// another send failure): the program should carry on.
    pub fn is_drop(&self) -> bool {
        matches!(self, SendError::NoDaemon | SendError::Busy | SendError::Syscall { .. })
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::NoDaemon => write!(f, "send: no daemon listening (hint dropped)"),
            SendError::Busy => write!(f, "send: daemon busy (hint dropped)"),
            SendError::Encode(err) => write!(f, "{err}"),
            SendError::UnknownHandle(handle) => write!(f, "send: handle {} is not registered", handle.0),
            SendError::TooManyHandles { max } => write!(f, "register: this client holds {max} files already"),
            SendError::Duplicate(err) => write!(f, "register: cannot duplicate the descriptor: {err}"),
            SendError::BadDescriptor { reason } => write!(f, "register: descriptor is {reason}"),
            SendError::Syscall { call, source } => write!(f, "{call} failed: {source} (hint dropped)"),
        }
    }
}

impl std::error::Error for SendError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SendError::Encode(err) => Some(err),
            SendError::Syscall { source, .. } | SendError::Duplicate(source) => Some(source),
            _ => None,
        }
    }
}

impl From<EncodeError> for SendError {
    fn from(err: EncodeError) -> Self {
        SendError::Encode(err)
    }
}

/// Why [`Client::sync`] has no answer.
#[derive(Debug)]
pub enum SyncError {
    /// The `Sync` frame (or what was buffered before it) was not sent.
    Send(SendError),
    /// Nothing answered within the time given.
    NoAnswer {
        /// How long it waited.
        waited: Duration,
    },
    /// Receiving failed.
    Syscall {
        /// The failing call.
        call: &'static str,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Send(err) => write!(f, "sync: {err}"),
            SyncError::NoAnswer { waited } => write!(f, "sync: no answer from the daemon within {waited:?}"),
            SyncError::Syscall { call, source } => write!(f, "sync: {call} failed: {source}"),
        }
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SyncError::Send(err) => Some(err),
            SyncError::Syscall { source, .. } => Some(source),
            SyncError::NoAnswer { .. } => None,
        }
    }
}

/// A client's counters. `sent` and `dropped` count datagrams: one frame
/// each, unless buffering or batching put several in one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Datagrams handed to the kernel.
    pub sent: u64,
    /// Datagrams dropped (no daemon, busy, send failure).
    pub dropped: u64,
    /// Calls refused as invalid before sending (bad range, unknown handle).
    pub invalid: u64,
    /// Successful connections after the daemon was absent.
    pub reconnects: u64,
}

/// Several frames to send as one datagram ([`Client::send_batch`]): the
/// cheapest way to send many hints. Holds at most [`MAX_DATAGRAM`] bytes.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    bytes: Vec<u8>,
    frames: usize,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `frame`. Fails, leaving the batch as it was, when the frame is
    /// invalid, is a `Register` (which needs a descriptor: use
    /// [`Client::register`]), or would make the datagram exceed
    /// [`MAX_DATAGRAM`].
    pub fn push(&mut self, frame: &Frame<'_>) -> Result<(), EncodeError> {
        if matches!(frame, Frame::Register { .. }) {
            return Err(EncodeError::NeedsDescriptor);
        }
        let len = frame.encoded_len();
        if self.bytes.len().saturating_add(len) > MAX_DATAGRAM {
            return Err(EncodeError::TooLarge { len: self.bytes.len().saturating_add(len) });
        }
        protocol::encode(frame, &mut self.bytes)?;
        self.frames += 1;
        Ok(())
    }

    /// Number of frames.
    pub fn len(&self) -> usize {
        self.frames
    }

    /// True when the batch holds no frame.
    pub fn is_empty(&self) -> bool {
        self.frames == 0
    }

    /// Encoded size in bytes.
    pub fn encoded_len(&self) -> usize {
        self.bytes.len()
    }

    /// The encoded datagram.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Empties the batch, keeping its buffer.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.frames = 0;
    }
}

struct Registered {
    fd: OwnedFd,
    /// The daemon may not know this handle yet (a send was dropped, or the
    /// daemon restarted).
    pending: bool,
}

/// A hint client. See the module documentation.
pub struct Client {
    socket: OwnedFd,
    path: PathBuf,
    retry_interval: Duration,
    epoch: Instant,
    state: AtomicU8,
    /// Nanoseconds since `epoch` before which no reconnection is tried.
    next_retry_ns: AtomicU64,
    reconnecting: AtomicBool,
    any_pending: AtomicBool,
    /// [`sys::fork_generation`] when registrations were last valid.
    fork_generation: AtomicU64,
    registered: Mutex<HashMap<u32, Registered>>,
    /// Frames held back while buffering ([`Client::set_buffering`]).
    buffering: AtomicBool,
    buffer: Mutex<Batch>,
    next_handle: AtomicU32,
    /// The next [`Frame::Sync`] token.
    next_token: AtomicU32,
    sent: AtomicU64,
    dropped: AtomicU64,
    invalid: AtomicU64,
    reconnects: AtomicU64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client").field("path", &self.path).field("stats", &self.stats()).finish()
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(512));
}

impl Client {
    /// A client of the daemon at `path`. A daemon that is not (yet) there is
    /// not an error: the client drops hints until it appears, trying again at
    /// most every [`DEFAULT_RETRY_INTERVAL`].
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, ClientError> {
        Self::connect_with_retry(path, DEFAULT_RETRY_INTERVAL)
    }

    /// A client of the daemon at `$PREDICTIO_HINT_SOCK`, else at
    /// [`DEFAULT_SOCKET_PATH`](protocol::DEFAULT_SOCKET_PATH) (see
    /// [`protocol::default_socket_path`]).
    pub fn connect_default() -> Result<Self, ClientError> {
        Self::connect(protocol::default_socket_path())
    }

    /// Like [`Client::connect`], trying an absent daemon again at most every
    /// `retry_interval`.
    pub fn connect_with_retry(path: impl AsRef<Path>, retry_interval: Duration) -> Result<Self, ClientError> {
        let socket = sys::dgram_socket().map_err(|source| ClientError::Syscall { call: "socket", source })?;
        sys::autobind(socket.as_fd()).map_err(|source| ClientError::Syscall { call: "bind", source })?;
        let client = Self {
            socket,
            path: path.as_ref().to_path_buf(),
            retry_interval,
            epoch: Instant::now(),
            state: AtomicU8::new(ABSENT),
            next_retry_ns: AtomicU64::new(0),
            reconnecting: AtomicBool::new(false),
            any_pending: AtomicBool::new(false),
            fork_generation: AtomicU64::new(sys::fork_generation()),
            registered: Mutex::new(HashMap::new()),
            buffering: AtomicBool::new(false),
            buffer: Mutex::new(Batch::new()),
            next_handle: AtomicU32::new(1),
            next_token: AtomicU32::new(1),
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
        };
        client.try_reconnect(true);
        Ok(client)
    }

    /// The daemon socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True while the client believes a daemon is listening.
    pub fn is_connected(&self) -> bool {
        self.state.load(Ordering::Relaxed) == CONNECTED
    }

    /// The client's counters.
    pub fn stats(&self) -> ClientStats {
        ClientStats {
            sent: self.sent.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            invalid: self.invalid.load(Ordering::Relaxed),
            reconnects: self.reconnects.load(Ordering::Relaxed),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn registered(&self) -> MutexGuard<'_, HashMap<u32, Registered>> {
        // A panic while holding the lock leaves the map consistent (every
        // mutation is a single insert/remove/flag store).
        self.registered.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Connects when the daemon was absent and the retry interval elapsed
    /// (or `force`). Returns true when connected afterwards.
    fn try_reconnect(&self, force: bool) -> bool {
        if !force && self.now_ns() < self.next_retry_ns.load(Ordering::Relaxed) {
            return false;
        }
        if self.reconnecting.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        let connected = match sys::connect(self.socket.as_fd(), &self.path) {
            Ok(()) => {
                // A (possibly new) daemon knows none of our handles.
                let mut registered = self.registered();
                for entry in registered.values_mut() {
                    entry.pending = true;
                }
                if !registered.is_empty() {
                    self.any_pending.store(true, Ordering::Release);
                }
                drop(registered);
                if !force {
                    self.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                self.state.store(CONNECTED, Ordering::Release);
                true
            }
            Err(_) => {
                self.mark_absent();
                false
            }
        };
        self.reconnecting.store(false, Ordering::Release);
        connected
    }

    fn mark_absent(&self) {
        self.next_retry_ns.store(
            self.now_ns().saturating_add(u64::try_from(self.retry_interval.as_nanos()).unwrap_or(u64::MAX)),
            Ordering::Relaxed,
        );
        self.state.store(ABSENT, Ordering::Release);
    }

    /// One datagram to the kernel, or a counted drop. Reconnects first when
    /// the daemon was absent and the retry interval has passed, and then
    /// re-sends the registrations the (possibly new) daemon lacks.
    fn transmit(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
        if self.state.load(Ordering::Acquire) != CONNECTED {
            if !self.try_reconnect(false) {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                return Err(SendError::NoDaemon);
            }
            if self.any_pending.load(Ordering::Acquire) {
                self.flush_pending();
            }
        }
        self.send_now(bytes, fds)
    }

    /// `sendmsg` on the connected socket, with counting; never reconnects
    /// (so it may be called with the registration map locked).
    fn send_now(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
        match sys::send(self.socket.as_fd(), bytes, fds) {
            Ok(()) => {
                self.sent.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            Err(err) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                match err.raw_os_error() {
                    Some(libc::EAGAIN | libc::ENOBUFS) => Err(SendError::Busy),
                    Some(libc::ECONNREFUSED | libc::ENOTCONN | libc::ECONNRESET | libc::EPIPE | libc::ENOENT) => {
                        self.mark_absent();
                        Err(SendError::NoDaemon)
                    }
                    _ => Err(SendError::Syscall { call: "sendmsg", source: err }),
                }
            }
        }
    }

    /// Sends registrations the daemon may not have; clears the flag when all
    /// went out. Stops at the first failure (the rest stay pending).
    fn flush_pending(&self) {
        if !self.is_connected() {
            return;
        }
        let mut registered = self.registered();
        let mut all_sent = true;
        let mut frame = Vec::with_capacity(protocol::HEADER_LEN);
        for (&handle, entry) in registered.iter_mut().filter(|(_, e)| e.pending) {
            frame.clear();
            if protocol::encode(&Frame::Register { handle: Handle(handle) }, &mut frame).is_err() {
                continue;
            }
            match self.send_now(&frame, &[entry.fd.as_fd()]) {
                Ok(()) => entry.pending = false,
                Err(_) => {
                    all_sent = false;
                    break;
                }
            }
        }
        if all_sent {
            self.any_pending.store(false, Ordering::Release);
        }
    }

    /// Before a frame goes out: sends the registrations the daemon lacks (in
    /// a fork child, or after the daemon restarted), when it is connected.
    fn catch_up(&self) {
        self.check_fork();
        if self.any_pending.load(Ordering::Acquire) && self.is_connected() {
            self.flush_pending();
        }
    }

    /// In a fork child the daemon sees a new pid, hence a new client without
    /// handles: mark every registration pending so it is sent again.
    fn check_fork(&self) {
        let generation = sys::fork_generation();
        if self.fork_generation.load(Ordering::Relaxed) != generation {
            self.fork_generation.store(generation, Ordering::Relaxed);
            let mut registered = self.registered();
            for entry in registered.values_mut() {
                entry.pending = true;
            }
            if !registered.is_empty() {
                self.any_pending.store(true, Ordering::Release);
            }
        }
    }

    fn buffer(&self) -> MutexGuard<'_, Batch> {
        // A panic while holding the lock leaves at worst a batch to clear.
        self.buffer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Turns buffering on or off. While on, hint frames (and `Unregister`)
    /// are appended to one datagram that is sent when it is full (64 KiB,
    /// ~2 300 small frames) or on [`Client::flush`]: one `sendmsg` for many
    /// hints, the way to send millions per second. Hints then reach the
    /// daemon only when flushed; `Register` is always sent at once. Turning
    /// buffering off flushes.
    pub fn set_buffering(&self, on: bool) -> Result<(), SendError> {
        self.buffering.store(on, Ordering::Relaxed);
        if on { Ok(()) } else { self.flush() }
    }

    /// True while buffering.
    pub fn is_buffering(&self) -> bool {
        self.buffering.load(Ordering::Relaxed)
    }

    /// Sends the buffered frames now (nothing to do when none are).
    pub fn flush(&self) -> Result<(), SendError> {
        let mut buffer = self.buffer();
        self.flush_buffer(&mut buffer)
    }

    fn flush_buffer(&self, buffer: &mut Batch) -> Result<(), SendError> {
        if buffer.is_empty() {
            return Ok(());
        }
        let result = self.send_batch(buffer);
        buffer.clear();
        result
    }

    /// Refuses (and counts) a frame naming a handle this client did not
    /// issue or has unregistered: the daemon would refuse it too, and a
    /// program should hear of its mistake.
    fn check_handle(&self, frame: &Frame<'_>) -> Result<(), SendError> {
        let handle = frame.handle();
        if self.registered().contains_key(&handle.0) {
            Ok(())
        } else {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            Err(SendError::UnknownHandle(handle))
        }
    }

    /// Encodes `frame` into a per-thread buffer and sends it (or appends it
    /// to the buffer while buffering). `Unregister` frames come from
    /// [`Client::unregister`], which has already forgotten the handle; any
    /// other frame must name a registered handle.
    fn send_frame(&self, frame: &Frame<'_>) -> Result<(), SendError> {
        if !matches!(frame, Frame::Unregister { .. } | Frame::Sync { .. }) {
            self.check_handle(frame)?;
        }
        if self.buffering.load(Ordering::Relaxed) {
            let mut buffer = self.buffer();
            return match buffer.push(frame) {
                Ok(()) => Ok(()),
                Err(EncodeError::TooLarge { .. }) if !buffer.is_empty() => {
                    // The datagram is full: send it (a drop is counted in the
                    // stats) and start the next one with this frame.
                    let _ = self.flush_buffer(&mut buffer);
                    buffer.push(frame).map_err(|err| {
                        self.invalid.fetch_add(1, Ordering::Relaxed);
                        SendError::Encode(err)
                    })
                }
                Err(err) => {
                    self.invalid.fetch_add(1, Ordering::Relaxed);
                    Err(SendError::Encode(err))
                }
            };
        }
        self.catch_up();
        let result = SCRATCH.try_with(|scratch| {
            let Ok(mut buf) = scratch.try_borrow_mut() else {
                return self.send_frame_fresh(frame);
            };
            buf.clear();
            if let Err(err) = protocol::encode(frame, &mut buf) {
                self.invalid.fetch_add(1, Ordering::Relaxed);
                return Err(SendError::Encode(err));
            }
            self.transmit(&buf, &[])
        });
        result.unwrap_or_else(|_| self.send_frame_fresh(frame))
    }

    fn send_frame_fresh(&self, frame: &Frame<'_>) -> Result<(), SendError> {
        let mut buf = Vec::new();
        if let Err(err) = protocol::encode(frame, &mut buf) {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::Encode(err));
        }
        self.transmit(&buf, &[])
    }

    /// Registers the open file `fd` with the daemon and returns the handle that
    /// names it in later hints. The daemon receives the descriptor itself
    /// (`SCM_RIGHTS`), so it can only prefetch files this program could open.
    ///
    /// The client keeps a close-on-exec duplicate of `fd` until
    /// [`Client::unregister`], so that a daemon that appears or restarts later
    /// is told about the file again. An error means nothing was registered:
    /// the client holds [`MAX_REGISTERED`] files already, the descriptor
    /// could not be duplicated (out of descriptors), or it is not a regular
    /// file open for reading (which the daemon would refuse); a missing
    /// daemon is not an error.
    pub fn register(&self, fd: &impl AsFd) -> Result<Handle, SendError> {
        let refuse = |err: SendError| {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            Err(err)
        };
        if self.registered().len() >= MAX_REGISTERED {
            return refuse(SendError::TooManyHandles { max: MAX_REGISTERED });
        }
        let dup = match sys::dup_cloexec(fd.as_fd()) {
            Ok(dup) => dup,
            Err(err) => return refuse(SendError::Duplicate(err)),
        };
        if let Err(reason) = sys::check_registrable(dup.as_fd()) {
            return refuse(SendError::BadDescriptor { reason });
        }
        self.check_fork();
        if !self.is_connected() && self.try_reconnect(false) && self.any_pending.load(Ordering::Acquire) {
            self.flush_pending();
        }
        // Send with the map locked, so that the duplicate cannot be closed
        // (by a concurrent unregister) between taking its number and sending.
        let mut registered = self.registered();
        if registered.len() >= MAX_REGISTERED {
            drop(registered);
            return refuse(SendError::TooManyHandles { max: MAX_REGISTERED });
        }
        // Handles count from 1 (0 is never one: the C ABI's "no handle")
        // and are not reused while registered, even after 2^32 of them.
        let handle = loop {
            let handle = self.next_handle.fetch_add(1, Ordering::Relaxed);
            if handle != 0 && !registered.contains_key(&handle) {
                break handle;
            }
        };
        let mut frame = Vec::with_capacity(protocol::HEADER_LEN);
        protocol::encode(&Frame::Register { handle: Handle(handle) }, &mut frame)?;
        let entry = registered.entry(handle).or_insert(Registered { fd: dup, pending: true });
        let sent = if self.is_connected() {
            // send_now counts a failure itself.
            self.send_now(&frame, &[entry.fd.as_fd()]).is_ok()
        } else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            false
        };
        if sent {
            entry.pending = false;
        } else {
            self.any_pending.store(true, Ordering::Release);
        }
        Ok(Handle(handle))
    }

    /// Forgets `handle` here and at the daemon (which closes its descriptor).
    pub fn unregister(&self, handle: Handle) -> Result<(), SendError> {
        if self.registered().remove(&handle.0).is_none() {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::UnknownHandle(handle));
        }
        self.send_frame(&Frame::Unregister { handle })
    }

    /// Asks for the half-open page ranges `(start_page, end_page)` of the file.
    pub fn pages(&self, handle: Handle, ranges: &[(u64, u64)]) -> Result<(), SendError> {
        self.send_frame(&Frame::Pages { handle, ranges: RangeList::from_pairs(ranges) })
    }

    /// Reports the byte segments `(offset, len)` the program will read next,
    /// in order.
    pub fn read_plan(&self, handle: Handle, segments: &[(u64, u64)]) -> Result<(), SendError> {
        self.send_frame(&Frame::ReadPlan { handle, segments: RangeList::from_pairs(segments) })
    }

    /// Reports a read of `len` bytes at `offset`.
    pub fn stream_read(&self, handle: Handle, offset: u64, len: u64) -> Result<(), SendError> {
        self.send_frame(&Frame::StreamRead { handle, offset, len })
    }

    /// Reports a B-tree descent from `parent_page` into `children[position]`.
    pub fn tree_child_enter(
        &self,
        handle: Handle,
        parent_page: u64,
        position: u32,
        children: &[u64],
    ) -> Result<(), SendError> {
        self.send_frame(&Frame::TreeChildEnter {
            handle,
            parent_page,
            position,
            children: PageList::from_slice(children),
        })
    }

    /// Reports a model's tensor byte ranges `(offset, len)` in load order.
    pub fn tensor_layout(&self, handle: Handle, ranges: &[(u64, u64)]) -> Result<(), SendError> {
        self.send_frame(&Frame::TensorLayout { handle, ranges: RangeList::from_pairs(ranges) })
    }

    /// Reports that the model loader starts layer `layer`.
    pub fn layer_start(&self, handle: Handle, layer: u32) -> Result<(), SendError> {
        self.send_frame(&Frame::LayerStart { handle, layer })
    }

    /// Asks the daemon how many of this client's frames it took and
    /// refused so far, and waits at most `timeout` for its [`Ack`]. Sends
    /// whatever is buffered first. The hint protocol is one-way apart from
    /// this: programs never need it; a tool that must report whether its
    /// hints were taken (`predictio hint`) ends with it.
    ///
    /// [`SyncError::NoAnswer`] when nothing came in time: no daemon, a
    /// daemon too old to answer, or the `Sync` frame itself was over the
    /// client's budget.
    pub fn sync(&self, timeout: Duration) -> Result<Ack, SyncError> {
        self.flush().map_err(SyncError::Send)?;
        // Answers to earlier calls that came too late are still queued:
        // each call's token is new, and those are skipped below.
        let token = self.next_token.fetch_add(1, Ordering::Relaxed);
        // Never buffered, and naming no handle: sent as it is, after any
        // registrations a (new) daemon lacks.
        self.catch_up();
        self.send_frame_fresh(&Frame::Sync { token }).map_err(SyncError::Send)?;
        let deadline = Instant::now() + timeout;
        let mut buf = [0u8; protocol::ACK_LEN + 1];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let received = sys::recv_within(self.socket.as_fd(), &mut buf, left)
                .map_err(|source| SyncError::Syscall { call: "recv", source })?;
            let Some(len) = received else { return Err(SyncError::NoAnswer { waited: timeout }) };
            if let Some(ack) = buf.get(..len).and_then(Ack::decode)
                && ack.token == token
            {
                return Ok(ack);
            }
        }
    }

    /// Sends any frame except `Register` (which needs a descriptor: use
    /// [`Client::register`]); an `Unregister` is [`Client::unregister`].
    pub fn send(&self, frame: &Frame<'_>) -> Result<(), SendError> {
        match frame {
            Frame::Register { .. } => {
                self.invalid.fetch_add(1, Ordering::Relaxed);
                Err(SendError::Encode(EncodeError::NeedsDescriptor))
            }
            Frame::Unregister { handle } => self.unregister(*handle),
            frame => self.send_frame(frame),
        }
    }

    /// Sends every frame of `batch` as one datagram, at once (whether or not
    /// the client is buffering).
    pub fn send_batch(&self, batch: &Batch) -> Result<(), SendError> {
        if batch.is_empty() {
            return Ok(());
        }
        self.catch_up();
        self.transmit(batch.as_bytes(), &[])
    }

    /// Sends `datagram` as it is, with `fds` attached (at most
    /// [`MAX_FDS_PER_DATAGRAM`]). For tools and tests that need to put
    /// arbitrary bytes on the wire; programs use the typed methods.
    pub fn send_raw(&self, datagram: &[u8], fds: &[BorrowedFd<'_>]) -> Result<(), SendError> {
        if fds.len() > MAX_FDS_PER_DATAGRAM {
            self.invalid.fetch_add(1, Ordering::Relaxed);
            return Err(SendError::Syscall { call: "sendmsg", source: io::Error::from_raw_os_error(libc::EINVAL) });
        }
        self.transmit(datagram, fds)
    }
}

impl Drop for Client {
    /// Tells the daemon, best effort and without blocking, to close the
    /// descriptors it holds for this client.
    fn drop(&mut self) {
        let _ = self.flush();
        if !self.is_connected() || self.fork_generation.load(Ordering::Relaxed) != sys::fork_generation() {
            return;
        }
        let registered = std::mem::take(&mut *self.registered());
        let mut batch = Batch::new();
        for (&handle, _) in registered.iter().filter(|(_, entry)| !entry.pending) {
            let frame = Frame::Unregister { handle: Handle(handle) };
            if batch.push(&frame).is_err() {
                let _ = self.send_now(batch.as_bytes(), &[]);
                batch.clear();
                let _ = batch.push(&frame);
            }
        }
        if !batch.is_empty() {
            let _ = self.send_now(batch.as_bytes(), &[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_daemon_drops_and_counts() {
        let dir = std::env::temp_dir().join(format!("predictio-client-unit-{}", std::process::id()));
        let client = Client::connect_with_retry(dir.join("none.sock"), Duration::from_secs(60)).expect("client");
        assert!(!client.is_connected());
        let file = std::fs::File::open("/proc/self/exe").expect("open");
        let handle = client.register(&file).expect("register without daemon");
        assert_eq!(handle, Handle(1));
        for _ in 0..1000 {
            assert!(matches!(client.stream_read(handle, 0, 4096), Err(SendError::NoDaemon)));
        }
        assert!(matches!(client.pages(handle, &[(5, 1)]), Err(SendError::Encode(_))));
        assert!(matches!(client.unregister(Handle(99)), Err(SendError::UnknownHandle(_))));
        let stats = client.stats();
        assert_eq!(stats.sent, 0);
        assert_eq!(stats.dropped, 1001);
        assert_eq!(stats.invalid, 2);
    }

    /// The client knows its handles: one it never issued, or one it has
    /// unregistered, is refused before anything is sent (and counted as
    /// invalid, not as a drop).
    #[test]
    fn unknown_and_unregistered_handles_are_refused_unsent() {
        let client =
            Client::connect_with_retry("/nonexistent/predictio.sock", Duration::from_secs(60)).expect("client");
        let unknown = |result: Result<(), SendError>| matches!(result, Err(SendError::UnknownHandle(_)));
        assert!(unknown(client.stream_read(Handle(1), 0, 1)));
        assert!(unknown(client.send(&Frame::LayerStart { handle: Handle(0), layer: 0 })));
        let file = std::fs::File::open("/proc/self/exe").expect("open");
        let handle = client.register(&file).expect("register");
        assert!(matches!(client.layer_start(handle, 1), Err(SendError::NoDaemon)), "a known handle is sent");
        client.set_buffering(true).expect("buffering");
        assert!(unknown(client.layer_start(Handle(handle.0 + 1), 1)), "buffered or not");
        client.set_buffering(false).expect("nothing was buffered to flush");
        assert!(matches!(client.send(&Frame::Unregister { handle }), Err(SendError::NoDaemon)));
        assert!(unknown(client.pages(handle, &[(0, 1)])), "unregistered");
        assert!(unknown(client.unregister(handle)));
        let stats = client.stats();
        assert_eq!(stats.invalid, 5, "{stats:?}");
        assert_eq!(stats.dropped, 3, "the registration, the hint, the unregistration: {stats:?}");
    }

    #[test]
    fn register_refuses_what_the_daemon_would() {
        use std::os::unix::fs::OpenOptionsExt;
        let client = Client::connect("/nonexistent/predictio.sock").expect("client");
        let dir = std::fs::File::open("/").expect("open /");
        let null = std::fs::File::open("/dev/null").expect("open /dev/null");
        let path_only =
            std::fs::OpenOptions::new().read(true).custom_flags(libc::O_PATH).open("/proc/self/exe").expect("O_PATH");
        for fd in [dir.as_fd(), null.as_fd(), path_only.as_fd()] {
            assert!(matches!(client.register(&fd), Err(SendError::BadDescriptor { .. })));
        }
        assert_eq!(client.stats().invalid, 3);
    }

    #[test]
    fn batch_bounds() {
        let mut batch = Batch::new();
        assert_eq!(batch.push(&Frame::Register { handle: Handle(1) }), Err(EncodeError::NeedsDescriptor));
        let frame = Frame::StreamRead { handle: Handle(1), offset: 0, len: 1 };
        while batch.push(&frame).is_ok() {}
        assert!(batch.encoded_len() <= MAX_DATAGRAM);
        assert_eq!(batch.len(), MAX_DATAGRAM / frame.encoded_len());
        let decoded = protocol::frames(batch.as_bytes()).filter(Result::is_ok).count();
        assert_eq!(decoded, batch.len());
    }
}
