//! The hint server: the daemon side of the hint socket.
//!
//! Programs send hint frames (the wire format of [`predictio_client::protocol`],
//! written down in `docs/protocol.md`) to a Unix datagram socket. The server
//! turns each valid frame into an [`Event`] for the runtime, paired with the
//! [`FileRef`] the event is about, and counts everything else.
//!
//! What it owns, and must never do:
//! - **Files only by descriptor.** A client registers a file by passing its
//!   open descriptor (`SCM_RIGHTS`) with a handle of its choosing; later frames
//!   name the handle. The server never opens a path for a client, and accepts
//!   only readable (not `O_PATH`, not write-only) descriptors of regular
//!   files, so a client can only cause prefetching of files it could read.
//! - **Peers by kernel-verified credentials.** `SO_PEERCRED` only describes
//!   the peer of a *connected* socket; an unconnected datagram socket has
//!   many peers, so the server sets `SO_PASSCRED` and reads `SCM_CREDENTIALS`
//!   on every datagram: its datagram equivalent, filled in by the kernel
//!   (an unprivileged sender cannot forge it). Client state (handles, rate
//!   budgets) is keyed by (sender address, pid); a client must therefore be
//!   bound (the client library autobinds). Handles are private to a client.
//! - **Bounded.** Per client: frames per second and bytes of prefetch asked
//!   for per second (token buckets), handles held. Overall: clients. Over a
//!   limit the frame is dropped and counted.
//! - **Never crashes on input.** Decoding is total (every failure is a typed
//!   [`DecodeError`]); every frame ends up in exactly one counter:
//!   `frames == accepted + rejected + rate_limited + volume_limited`.
//! - **Never busy-loops.** The socket is non-blocking; [`HintServer::recv`]
//!   sleeps in `poll(2)` when nothing is queued.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use predictio_client::protocol::{self, DecodeError, Frame, Handle};

use crate::event::Event;
use crate::file::{FileError, FileRef};
use crate::page::{ByteRange, PAGE_SIZE, PageRange};
use crate::sys::socket::{self as sock, Access, Credentials, SenderAddr};

/// Errors setting up or running the hint server.
#[derive(Debug, thiserror::Error)]
pub enum HintError {
    /// The socket's directory could not be created.
    #[error("cannot create directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// Another live server listens on the path.
    #[error("{path}: another hint server is listening there")]
    InUse {
        /// The socket path.
        path: String,
    },
    /// Something other than a socket exists at the path; it is left alone.
    #[error("{path} exists and is not a socket")]
    NotASocket {
        /// The path.
        path: String,
    },
    /// A syscall on the socket or its path failed.
    #[error("{call} on {path} failed: {source}")]
    Syscall {
        /// The failing call.
        call: &'static str,
        /// The socket path.
        path: String,
        /// Why.
        source: io::Error,
    },
}

/// Why a frame (or a whole datagram) was refused. Each reason has its own
/// counter in [`HintStats`]: the decoder's reasons first, then the server's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Reject {
    /// The frame's bytes do not decode (the decoder's reason).
    Decode(DecodeError),
    /// The datagram exceeded [`protocol::MAX_DATAGRAM`] (whole datagram).
    Truncated,
    /// More descriptors than one datagram may carry (whole datagram; the
    /// kernel closed the excess, the server closes the rest).
    ControlTruncated,
    /// No `SCM_CREDENTIALS` (whole datagram; should not happen on Linux).
    NoCredentials,
    /// The sender is not bound to an address (whole datagram).
    AnonymousSender,
    /// The client limit is reached and the sender is new (whole datagram).
    TooManyClients,
    /// A handle this client never registered (or unregistered).
    UnknownHandle,
    /// A `Register` frame without a descriptor left in its datagram.
    MissingDescriptor,
    /// The registered descriptor is not a regular file.
    NotRegular,
    /// The registered descriptor is `O_PATH` or write-only.
    NotReadable,
    /// `fstat`/`fcntl` on the registered descriptor failed.
    BadDescriptor,
    /// The client holds its maximum number of handles.
    TooManyHandles,
}

impl Reject {
    /// The server's own reasons, in counter order (after the decoder's).
    const SERVER: [Reject; 11] = [
        Reject::Truncated,
        Reject::ControlTruncated,
        Reject::NoCredentials,
        Reject::AnonymousSender,
        Reject::TooManyClients,
        Reject::UnknownHandle,
        Reject::MissingDescriptor,
        Reject::NotRegular,
        Reject::NotReadable,
        Reject::BadDescriptor,
        Reject::TooManyHandles,
    ];

    /// Number of reasons.
    pub const COUNT: usize = DecodeError::ALL.len() + Self::SERVER.len();

    /// Every reason, in counter order.
    pub fn all() -> impl Iterator<Item = Reject> {
        DecodeError::ALL.into_iter().map(Reject::Decode).chain(Self::SERVER)
    }

    /// This reason's counter in [`HintStats::rejected`].
    pub const fn index(&self) -> usize {
        let decode = DecodeError::ALL.len();
        match self {
            Reject::Decode(err) => *err as usize,
            Reject::Truncated => decode,
            Reject::ControlTruncated => decode + 1,
            Reject::NoCredentials => decode + 2,
            Reject::AnonymousSender => decode + 3,
            Reject::TooManyClients => decode + 4,
            Reject::UnknownHandle => decode + 5,
            Reject::MissingDescriptor => decode + 6,
            Reject::NotRegular => decode + 7,
            Reject::NotReadable => decode + 8,
            Reject::BadDescriptor => decode + 9,
            Reject::TooManyHandles => decode + 10,
        }
    }

    /// A short stable name for counters and logs.
    pub const fn name(&self) -> &'static str {
        match self {
            Reject::Decode(err) => err.name(),
            Reject::Truncated => "truncated",
            Reject::ControlTruncated => "control_truncated",
            Reject::NoCredentials => "no_credentials",
            Reject::AnonymousSender => "anonymous_sender",
            Reject::TooManyClients => "too_many_clients",
            Reject::UnknownHandle => "unknown_handle",
            Reject::MissingDescriptor => "missing_descriptor",
            Reject::NotRegular => "not_regular",
            Reject::NotReadable => "not_readable",
            Reject::BadDescriptor => "bad_descriptor",
            Reject::TooManyHandles => "too_many_handles",
        }
    }
}

impl From<DecodeError> for Reject {
    fn from(err: DecodeError) -> Self {
        Reject::Decode(err)
    }
}

/// Limits and settings of a [`HintServer`].
#[derive(Clone, Debug)]
pub struct HintConfig {
    /// The socket path (default `/run/predictio/hint.sock`).
    pub path: PathBuf,
    /// Most clients tracked at once.
    pub max_clients: usize,
    /// Most clients one user (uid) may have tracked at once. A new client of
    /// a user at this limit replaces that user's least recently seen client,
    /// so one user cannot fill the table for everyone else.
    pub max_clients_per_uid: usize,
    /// Most handles one client may hold.
    pub max_handles_per_client: usize,
    /// Sustained frames per second per client (`u64::MAX`: no limit).
    pub frames_per_sec: u64,
    /// Frames a client may send at once (token-bucket depth).
    pub frame_burst: u64,
    /// Sustained bytes of prefetch a client may ask for per second (`Pages`,
    /// `ReadPlan`, `StreamRead`, `TreeChildEnter` children; a `TensorLayout`
    /// describes a model and is not charged: the tensor policy's own window
    /// bounds what is read from it). `u64::MAX`: no limit.
    pub bytes_per_sec: u64,
    /// Bytes a client may ask for at once (token-bucket depth). A frame
    /// asking for more than this is always dropped.
    pub byte_burst: u64,
    /// Most datagrams handled per [`HintServer::recv`] call.
    pub max_datagrams_per_recv: usize,
    /// Socket receive buffer to ask for.
    pub recv_buffer_bytes: usize,
    /// How often clients whose process is gone are forgotten.
    pub sweep_interval: Duration,
    /// Clients whose pid the server cannot see (another pid namespace) are
    /// forgotten after this long without a datagram.
    pub idle_timeout: Duration,
}

impl Default for HintConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from(protocol::DEFAULT_SOCKET_PATH),
            max_clients: 1024,
            max_clients_per_uid: 128,
            max_handles_per_client: 4096,
            // The daemon's `[hints]` defaults are these (written once, here).
            // 200 K frames/s: at 2 M/s one client's flood of empty frames
            // held ~1.2 cores of the daemon.
            frames_per_sec: 200_000,
            frame_burst: 400_000,
            bytes_per_sec: 4 << 30,
            byte_burst: 16 << 30,
            max_datagrams_per_recv: 1024,
            recv_buffer_bytes: 4 << 20,
            sweep_interval: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(600),
        }
    }
}

impl HintConfig {
    /// The defaults, at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into(), ..Self::default() }
    }

    /// No rate or volume limit (tests, benchmarks).
    pub fn unlimited(mut self) -> Self {
        self.frames_per_sec = u64::MAX;
        self.frame_burst = u64::MAX;
        self.bytes_per_sec = u64::MAX;
        self.byte_burst = u64::MAX;
        self
    }
}

/// The sender of a hint, from `SCM_CREDENTIALS`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PeerCred {
    /// Process id in the server's pid namespace (0 if not visible there).
    pub pid: u32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl From<Credentials> for PeerCred {
    fn from(c: Credentials) -> Self {
        Self { pid: c.pid, uid: c.uid, gid: c.gid }
    }
}

/// One accepted hint: the event, the file it is about (hold it so that
/// policies can request it), and who sent it.
#[derive(Clone, Debug)]
pub struct Hint {
    /// The event (`Pages`, `ReadPlan`, `StreamRead`, `TreeChildEnter`,
    /// `TensorLayout` or `LayerStart`).
    pub event: Event,
    /// The registered file; `event.file() == Some(file.id())`.
    pub file: FileRef,
    /// The sender.
    pub peer: PeerCred,
}

/// The server's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HintStats {
    /// Datagrams received.
    pub datagrams: u64,
    /// Frame outcomes: every frame, plus one per datagram refused whole.
    pub frames: u64,
    /// Frames accepted (including registrations).
    pub accepted: u64,
    /// Hints delivered (accepted frames other than `Register`/`Unregister`).
    pub hints: u64,
    /// Frames refused, by [`Reject`] reason (index [`Reject::index`]).
    pub rejected: [u64; Reject::COUNT],
    /// Frames dropped over the frames-per-second budget.
    pub rate_limited: u64,
    /// Frames dropped over the bytes-per-second budget.
    pub volume_limited: u64,
    /// Passed descriptors that no well-formed `Register` frame took, or that
    /// came with a datagram refused whole (closed).
    pub descriptors_closed: u64,
    /// Clients tracked now.
    pub clients: usize,
    /// Handles held now, over all clients.
    pub handles: usize,
    /// Clients forgotten because their process was gone or idle.
    pub clients_expired: u64,
    /// Clients replaced by a newer client of the same user at
    /// `max_clients_per_uid`.
    pub clients_evicted: u64,
}

impl HintStats {
    /// Frames refused for `reason`.
    pub fn rejected(&self, reason: Reject) -> u64 {
        self.rejected[reason.index()]
    }

    /// Frames refused for any reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }

    /// Frames not accepted for any reason (refused or over a limit).
    pub fn dropped_total(&self) -> u64 {
        self.rejected_total() + self.rate_limited + self.volume_limited
    }
}

/// A token bucket in integer arithmetic.
#[derive(Debug)]
struct Bucket {
    tokens: u64,
    last: Instant,
}

impl Bucket {
    fn full(burst: u64, now: Instant) -> Self {
        Self { tokens: burst, last: now }
    }

    /// Refills at `rate` per second up to `burst`, then takes `cost` if there
    /// are that many tokens.
    fn take(&mut self, cost: u64, rate: u64, burst: u64, now: Instant) -> bool {
        if rate == u64::MAX {
            return true;
        }
        let elapsed = now.saturating_duration_since(self.last);
        if !elapsed.is_zero() {
            let add =
                u64::try_from(elapsed.as_nanos().saturating_mul(u128::from(rate)) / 1_000_000_000).unwrap_or(u64::MAX);
            if add > 0 {
                self.tokens = self.tokens.saturating_add(add).min(burst);
                self.last = now;
            }
        }
        if self.tokens >= cost {
            self.tokens -= cost;
            true
        } else {
            false
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct ClientKey {
    addr: SenderAddr,
    pid: u32,
}

#[derive(Debug)]
struct ClientState {
    uid: u32,
    files: HashMap<u32, FileRef>,
    frames: Bucket,
    bytes: Bucket,
    last_seen: Instant,
}

/// The hint server. See the module documentation.
pub struct HintServer {
    socket: UnixDatagram,
    path: PathBuf,
    /// (dev, ino) of the socket we bound, so that drop removes only ours.
    bound: (u64, u64),
    config: HintConfig,
    clients: HashMap<ClientKey, ClientState>,
    stats: HintStats,
    buf: Vec<u8>,
    fds: Vec<OwnedFd>,
    last_sweep: Instant,
}

impl std::fmt::Debug for HintServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HintServer").field("path", &self.path).field("stats", &self.stats()).finish()
    }
}

fn syscall<'p>(call: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> HintError + 'p {
    move |source| HintError::Syscall { call, path: path.display().to_string(), source }
}

impl HintServer {
    /// Binds the hint socket at `config.path`: creates its directory (mode
    /// 0755) if needed, removes a stale socket left by a dead server (but not
    /// a live one, nor anything that is not a socket), makes the socket
    /// writable by every user (mode 0666: who may hint is decided per
    /// descriptor, not per user) and turns on `SO_PASSCRED`.
    pub fn bind(config: HintConfig) -> Result<Self, HintError> {
        let path = config.path.clone();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|source| HintError::CreateDir { path: dir.display().to_string(), source })?;
        }
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_socket() => {
                let probe = UnixDatagram::unbound().map_err(syscall("socket", &path))?;
                match probe.connect(&path) {
                    Ok(()) => return Err(HintError::InUse { path: path.display().to_string() }),
                    Err(err) if err.raw_os_error() == Some(libc::ECONNREFUSED) => {
                        std::fs::remove_file(&path).map_err(syscall("unlink", &path))?;
                    }
                    Err(err) => return Err(syscall("connect", &path)(err)),
                }
            }
            Ok(_) => return Err(HintError::NotASocket { path: path.display().to_string() }),
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(syscall("stat", &path)(err)),
        }
        let socket = UnixDatagram::bind(&path).map_err(syscall("bind", &path))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).map_err(syscall("chmod", &path))?;
        let meta = std::fs::symlink_metadata(&path).map_err(syscall("stat", &path))?;
        socket.set_nonblocking(true).map_err(syscall("fcntl(O_NONBLOCK)", &path))?;
        sock::set_passcred(socket.as_fd()).map_err(syscall("setsockopt(SO_PASSCRED)", &path))?;
        if let Err(err) = sock::set_recv_buffer(socket.as_fd(), config.recv_buffer_bytes) {
            tracing::debug!(%err, "cannot raise the hint socket's receive buffer");
        }
        let now = Instant::now();
        Ok(Self {
            socket,
            path,
            bound: (meta.dev(), meta.ino()),
            config,
            clients: HashMap::new(),
            stats: HintStats::default(),
            buf: vec![0; protocol::MAX_DATAGRAM],
            fds: Vec::with_capacity(sock::MAX_FDS),
            last_sweep: now,
        })
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The configuration.
    pub fn config(&self) -> &HintConfig {
        &self.config
    }

    /// The server's counters.
    pub fn stats(&self) -> HintStats {
        let mut stats = self.stats;
        stats.clients = self.clients.len();
        stats.handles = self.clients.values().map(|c| c.files.len()).sum();
        stats
    }

    /// Handles queued datagrams, calling `on_hint` for every accepted hint.
    /// When nothing is queued, waits up to `timeout` (`None`: indefinitely)
    /// for one. Handles at most `max_datagrams_per_recv` datagrams, then
    /// returns the number of hints delivered.
    pub fn recv(&mut self, timeout: Option<Duration>, on_hint: &mut impl FnMut(Hint)) -> Result<usize, HintError> {
        let mut hints = 0;
        let mut waited = false;
        let mut handled = 0;
        while handled < self.config.max_datagrams_per_recv {
            self.fds.clear();
            let received = sock::recv_datagram(self.socket.as_fd(), &mut self.buf, &mut self.fds)
                .map_err(syscall("recvmsg", &self.path))?;
            let Some(received) = received else {
                if handled > 0 || waited {
                    break;
                }
                waited = true;
                if !sock::poll_readable(self.socket.as_fd(), timeout).map_err(syscall("poll", &self.path))? {
                    break;
                }
                continue;
            };
            handled += 1;
            hints += self.handle_datagram(&received, on_hint);
        }
        self.fds.clear();
        let now = Instant::now();
        if now.saturating_duration_since(self.last_sweep) >= self.config.sweep_interval {
            self.sweep(now);
        }
        Ok(hints)
    }

    /// Refuses a whole datagram: one frame outcome; its descriptors are
    /// closed and counted.
    fn reject_datagram(&mut self, reason: Reject) {
        self.stats.frames += 1;
        self.stats.rejected[reason.index()] += 1;
        self.stats.descriptors_closed += self.fds.len() as u64;
        self.fds.clear();
    }

    /// Forgets `uid`'s least recently seen client.
    fn evict_least_recent(&mut self, uid: u32) {
        let oldest =
            self.clients.iter().filter(|(_, c)| c.uid == uid).min_by_key(|(_, c)| c.last_seen).map(|(k, _)| *k);
        if let Some(key) = oldest {
            self.clients.remove(&key);
            self.stats.clients_evicted += 1;
        }
    }

    /// Forgets clients whose process is gone (or that idled out when their
    /// pid is not visible to us).
    fn sweep(&mut self, now: Instant) {
        self.last_sweep = now;
        let idle = self.config.idle_timeout;
        let before = self.clients.len();
        self.clients.retain(|key, state| {
            if key.pid == 0 {
                now.saturating_duration_since(state.last_seen) < idle
            } else {
                Path::new(&format!("/proc/{}", key.pid)).exists()
            }
        });
        self.stats.clients_expired += (before - self.clients.len()) as u64;
    }

    fn handle_datagram(&mut self, received: &sock::Received, on_hint: &mut impl FnMut(Hint)) -> usize {
        self.stats.datagrams += 1;
        if received.truncated {
            self.reject_datagram(Reject::Truncated);
            return 0;
        }
        if received.control_truncated {
            self.reject_datagram(Reject::ControlTruncated);
            return 0;
        }
        let Some(creds) = received.credentials else {
            self.reject_datagram(Reject::NoCredentials);
            return 0;
        };
        if received.sender.is_empty() {
            self.reject_datagram(Reject::AnonymousSender);
            return 0;
        }
        let key = ClientKey { addr: received.sender, pid: creds.pid };
        let now = Instant::now();
        if !self.clients.contains_key(&key) {
            let same_user = self.clients.values().filter(|c| c.uid == creds.uid).count();
            if same_user >= self.config.max_clients_per_uid {
                self.evict_least_recent(creds.uid);
            }
            if self.clients.len() >= self.config.max_clients {
                if now.saturating_duration_since(self.last_sweep) >= Duration::from_secs(1) {
                    self.sweep(now);
                }
                if self.clients.len() >= self.config.max_clients {
                    self.reject_datagram(Reject::TooManyClients);
                    return 0;
                }
            }
            let state = ClientState {
                uid: creds.uid,
                files: HashMap::new(),
                frames: Bucket::full(self.config.frame_burst, now),
                bytes: Bucket::full(self.config.byte_burst, now),
                last_seen: now,
            };
            self.clients.insert(key, state);
        }
        let Some(client) = self.clients.get_mut(&key) else { return 0 };
        client.last_seen = now;
        let peer = PeerCred::from(creds);
        let mut fds = self.fds.drain(..);
        let mut hints = 0;
        for item in protocol::frames(&self.buf[..received.len]) {
            self.stats.frames += 1;
            // A well-formed Register frame takes its descriptor whatever
            // becomes of it, so that the next one gets the next descriptor.
            let fd = if matches!(item, Ok(Frame::Register { .. })) { fds.next() } else { None };
            // Every frame, malformed or not, costs a token: garbage floods
            // are limited like anything else.
            if !client.frames.take(1, self.config.frames_per_sec, self.config.frame_burst, now) {
                self.stats.rate_limited += 1;
                continue;
            }
            let frame = match item {
                Ok(frame) => frame,
                Err(err) => {
                    self.stats.rejected[Reject::Decode(err).index()] += 1;
                    continue;
                }
            };
            let outcome = match frame {
                Frame::Register { handle } => {
                    register(client, handle, fd, self.config.max_handles_per_client).map(|()| None)
                }
                Frame::Unregister { handle } => match client.files.remove(&handle.0) {
                    Some(_) => Ok(None),
                    None => Err(Reject::UnknownHandle),
                },
                frame => match client.files.get(&frame.handle().0) {
                    None => Err(Reject::UnknownHandle),
                    Some(file) => {
                        let cost = prefetch_bytes(&frame);
                        if cost > 0 && !client.bytes.take(cost, self.config.bytes_per_sec, self.config.byte_burst, now)
                        {
                            self.stats.volume_limited += 1;
                            continue;
                        }
                        Ok(Some((to_event(&frame, file), file.clone())))
                    }
                },
            };
            match outcome {
                Ok(None) => self.stats.accepted += 1,
                Ok(Some((event, file))) => {
                    self.stats.accepted += 1;
                    self.stats.hints += 1;
                    hints += 1;
                    on_hint(Hint { event, file, peer });
                }
                Err(reason) => self.stats.rejected[reason.index()] += 1,
            }
        }
        let unused = fds.count();
        self.stats.descriptors_closed += unused as u64;
        hints
    }
}

/// Registers `fd` as `handle` for `client`, after checking that it is a
/// readable regular file.
fn register(client: &mut ClientState, handle: Handle, fd: Option<OwnedFd>, max_handles: usize) -> Result<(), Reject> {
    let fd = fd.ok_or(Reject::MissingDescriptor)?;
    match sock::access(fd.as_fd()) {
        Ok(Access::Readable) => {}
        Ok(Access::WriteOnly | Access::PathOnly) => return Err(Reject::NotReadable),
        Err(_) => return Err(Reject::BadDescriptor),
    }
    if !client.files.contains_key(&handle.0) && client.files.len() >= max_handles {
        return Err(Reject::TooManyHandles);
    }
    let file = FileRef::from_file(File::from(fd)).map_err(|err| match err {
        FileError::NotRegular { .. } => Reject::NotRegular,
        FileError::Open { .. } | FileError::Stat { .. } => Reject::BadDescriptor,
    })?;
    client.files.insert(handle.0, file);
    Ok(())
}

/// Bytes of prefetch a frame asks for, charged to the client's volume budget.
fn prefetch_bytes(frame: &Frame<'_>) -> u64 {
    match frame {
        Frame::Pages { ranges, .. } => {
            ranges.iter().fold(0u64, |sum, (start, end)| sum.saturating_add((end - start).saturating_mul(PAGE_SIZE)))
        }
        Frame::ReadPlan { segments, .. } => segments.iter().fold(0u64, |sum, (_, len)| sum.saturating_add(len)),
        Frame::StreamRead { len, .. } => *len,
        Frame::TreeChildEnter { children, .. } => (children.len() as u64).saturating_mul(PAGE_SIZE),
        Frame::TensorLayout { .. } | Frame::LayerStart { .. } | Frame::Register { .. } | Frame::Unregister { .. } => 0,
    }
}

/// The event a valid hint frame stands for. Register/Unregister never get
/// here.
fn to_event(frame: &Frame<'_>, file: &FileRef) -> Event {
    let file = file.id();
    let byte_ranges = |list: &protocol::RangeList<'_>| -> Arc<[ByteRange]> {
        list.iter().map(|(offset, len)| ByteRange::new(offset, len)).collect()
    };
    match frame {
        Frame::Pages { ranges, .. } => {
            Event::Pages { file, ranges: ranges.iter().map(|(start, end)| PageRange::new(start, end)).collect() }
        }
        Frame::ReadPlan { segments, .. } => Event::ReadPlan { file, segments: byte_ranges(segments) },
        Frame::StreamRead { offset, len, .. } => Event::StreamRead { file, offset: *offset, len: *len },
        Frame::TreeChildEnter { parent_page, position, children, .. } => Event::TreeChildEnter {
            file,
            parent: *parent_page,
            children: children.iter().collect(),
            position: *position,
        },
        Frame::TensorLayout { ranges, .. } => Event::TensorLayout { file, ranges: byte_ranges(ranges) },
        Frame::LayerStart { layer, .. } => Event::LayerStart { file, layer: *layer },
        // Not reachable: the caller handles these kinds itself. An empty page
        // list is the harmless answer.
        Frame::Register { .. } | Frame::Unregister { .. } => Event::Pages { file, ranges: Arc::from([]) },
    }
}

impl AsFd for HintServer {
    /// The socket, for callers that poll it together with other sources.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

impl Drop for HintServer {
    fn drop(&mut self) {
        // Remove the socket only if it is still the one we bound (a newer
        // server may have replaced it).
        if let Ok(meta) = std::fs::symlink_metadata(&self.path) {
            if (meta.dev(), meta.ino()) == self.bound {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_refills_at_rate_up_to_burst() {
        let start = Instant::now();
        let mut bucket = Bucket::full(10, start);
        for _ in 0..10 {
            assert!(bucket.take(1, 1000, 10, start));
        }
        assert!(!bucket.take(1, 1000, 10, start));
        // 5 ms at 1000/s = 5 tokens.
        let later = start + Duration::from_millis(5);
        for _ in 0..5 {
            assert!(bucket.take(1, 1000, 10, later));
        }
        assert!(!bucket.take(1, 1000, 10, later));
        // Never above burst, even at absurd rates.
        let mut fast = Bucket::full(0, start);
        assert!(fast.take(u64::MAX / 4, u64::MAX / 4, u64::MAX / 4, start + Duration::from_secs(3)));
        // u64::MAX is no limit at all.
        assert!(fast.take(u64::MAX, u64::MAX, 0, start));
        let much_later = start + Duration::from_secs(100);
        assert!(!bucket.take(11, 1000, 10, much_later));
        assert!(bucket.take(10, 1000, 10, much_later));
    }

    #[test]
    fn reject_indices_cover_every_counter_once() {
        let indices: Vec<usize> = Reject::all().map(|r| r.index()).collect();
        assert_eq!(indices, (0..Reject::COUNT).collect::<Vec<_>>());
        for err in DecodeError::ALL {
            assert_eq!(Reject::from(err).name(), err.name());
            assert_eq!(Reject::Decode(err).index(), err as usize);
        }
    }
}
