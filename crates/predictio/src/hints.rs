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
//! - **Bounded, per client, per user and in total** (the table is in
//!   `docs/DESIGN.md`, "Budgets"): frames per second and bytes per second
//!   (token buckets; every frame costs at least one frame and its own
//!   bytes, whatever it asks for, and a datagram refused whole costs a
//!   frame too; past the frame budget the rest of a datagram is dropped
//!   unread, as one outcome), handles held (descriptors), clients, and the bytes of
//!   accepted hints still waiting in the pipeline's queue ([`QueueCharge`]).
//!   The per-user budgets are what make the per-client ones mean anything:
//!   one user may run many clients. Over a limit the frame is dropped and
//!   counted; nothing blocks. The accounting is pure logic apart from the
//!   socket (`Budgets`), unit-tested without one.
//! - **Never crashes on input.** Decoding is total (every failure is a typed
//!   [`DecodeError`]); every frame ends up in exactly one counter:
//!   `frames == accepted + rejected + rate_limited + volume_limited +
//!   queue_limited`.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use predictio_client::protocol::{self, Ack, DecodeError, Frame, Handle};

use crate::event::{Event, shared_list_bytes};
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
    /// A socket handed over to be served is not the one bound at the path.
    #[error("the socket handed over is not the one bound at {path}")]
    NotBoundThere {
        /// The path it should be bound at.
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
    /// The client's user holds its maximum number of handles over all its
    /// clients ([`HintConfig::max_handles_per_uid`]).
    TooManyUserHandles,
    /// The server holds its maximum number of handles over all clients
    /// ([`HintConfig::max_handles`], lowered to fit `RLIMIT_NOFILE`).
    HandleTableFull,
}

impl Reject {
    /// The server's own reasons, in counter order (after the decoder's).
    const SERVER: [Reject; 13] = [
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
        Reject::TooManyUserHandles,
        Reject::HandleTableFull,
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
            Reject::TooManyUserHandles => decode + 11,
            Reject::HandleTableFull => decode + 12,
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
            Reject::TooManyUserHandles => "too_many_user_handles",
            Reject::HandleTableFull => "handle_table_full",
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
    /// Most handles one user (uid) may hold over all its clients.
    pub max_handles_per_uid: usize,
    /// Most handles held over all clients. Every handle is a descriptor the
    /// daemon holds, so [`HintServer::bind`] lowers this to three quarters
    /// of the soft `RLIMIT_NOFILE` ([`handle_table_size`]), the rest being
    /// the daemon's own (held files, the executor, the store, sockets).
    pub max_handles: usize,
    /// Sustained frames per second per client (`u64::MAX`: no limit). Every
    /// frame costs one, empty, malformed or refused, and so does a datagram
    /// refused whole.
    pub frames_per_sec: u64,
    /// Frames a client may send at once (token-bucket depth).
    pub frame_burst: u64,
    /// Sustained frames per second per user over all its clients
    /// (`u64::MAX`: no limit).
    pub frames_per_sec_per_uid: u64,
    /// Frames a user may send at once (token-bucket depth).
    pub frame_burst_per_uid: u64,
    /// Sustained bytes a client may send and ask for per second
    /// (`u64::MAX`: no limit). A frame costs its own encoded size (every
    /// kind: a `TensorLayout`'s ranges, a `ReadPlan`'s segments, a `Pages`
    /// list take memory whatever they describe) plus the prefetch it asks
    /// for directly: `Pages` and `ReadPlan` bytes, `StreamRead`'s length,
    /// `TreeChildEnter`'s children × 4 KiB, and for a `TensorLayout` its
    /// ranges' bytes up to [`TENSOR_LAYOUT_CHARGE`] (a layout describes a
    /// whole model; the tensor policy asks at once for the first window of
    /// it, 512 MiB ahead, and follows the loader from there).
    pub bytes_per_sec: u64,
    /// Bytes a client may use at once (token-bucket depth). A frame
    /// costing more than this is always dropped.
    pub byte_burst: u64,
    /// Sustained bytes per second per user over all its clients, charged
    /// as `bytes_per_sec` (`u64::MAX`: no limit).
    pub bytes_per_sec_per_uid: u64,
    /// Bytes a user may use at once (token-bucket depth).
    pub byte_burst_per_uid: u64,
    /// Most bytes of one user's accepted hints not yet dispatched by the
    /// pipeline ([`Event::footprint`] summed; see [`QueueCharge`]). Past it,
    /// the user's hints are dropped (`queue_limited`) until the pipeline
    /// catches up, so one user's flood neither holds memory nor delays other
    /// users' hints behind a long queue.
    pub max_queued_bytes_per_uid: u64,
    /// Most bytes of all users' accepted hints not yet dispatched.
    pub max_queued_bytes: u64,
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
            max_handles_per_uid: 4096,
            max_handles: 16384,
            // The daemon's `[hints]` defaults are these (written once, here).
            // 200 K frames/s: at 2 M/s one client's flood of empty frames
            // held ~1.2 cores of the daemon. The same per user: else 128
            // clients of one user would have 128 times that.
            frames_per_sec: 200_000,
            frame_burst: 400_000,
            frames_per_sec_per_uid: 200_000,
            frame_burst_per_uid: 400_000,
            bytes_per_sec: 4 << 30,
            byte_burst: 16 << 30,
            bytes_per_sec_per_uid: 4 << 30,
            byte_burst_per_uid: 16 << 30,
            // A large model's tensor list is ~16 KiB and an event ~64 bytes:
            // 1 MiB is thousands of a user's hints in flight; 8 MiB all
            // users' (the pipeline's own bound, for every source, is 64 MiB).
            max_queued_bytes_per_uid: 1 << 20,
            max_queued_bytes: 8 << 20,
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

    /// No rate, volume or queued-bytes limit, per client or per user
    /// (tests, benchmarks, `predictio run`'s private socket). Handles and
    /// clients stay bounded.
    pub fn unlimited(mut self) -> Self {
        self.frames_per_sec = u64::MAX;
        self.frame_burst = u64::MAX;
        self.frames_per_sec_per_uid = u64::MAX;
        self.frame_burst_per_uid = u64::MAX;
        self.bytes_per_sec = u64::MAX;
        self.byte_burst = u64::MAX;
        self.bytes_per_sec_per_uid = u64::MAX;
        self.byte_burst_per_uid = u64::MAX;
        self.max_queued_bytes_per_uid = u64::MAX;
        self.max_queued_bytes = u64::MAX;
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
    /// The event's bytes, held against its sender's (and the overall)
    /// queued-bytes budget until dropped: keep it with the event until the
    /// event has been handled ([`crate::pipeline::EventSender::send_hint`]
    /// does).
    pub charge: QueueCharge,
}

/// Bytes of an accepted hint counted against its user's and the server's
/// queued-bytes budgets ([`HintConfig::max_queued_bytes_per_uid`],
/// [`HintConfig::max_queued_bytes`]) for as long as it lives. Dropping it
/// gives them back; a clone is a charge of its own.
#[derive(Debug)]
pub struct QueueCharge {
    bytes: u64,
    user: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

impl QueueCharge {
    fn new(bytes: u64, user: &Arc<AtomicU64>, total: &Arc<AtomicU64>) -> Self {
        user.fetch_add(bytes, Ordering::Relaxed);
        total.fetch_add(bytes, Ordering::Relaxed);
        Self { bytes, user: Arc::clone(user), total: Arc::clone(total) }
    }

    /// The bytes charged.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Clone for QueueCharge {
    fn clone(&self) -> Self {
        Self::new(self.bytes, &self.user, &self.total)
    }
}

impl Drop for QueueCharge {
    fn drop(&mut self) {
        self.user.fetch_sub(self.bytes, Ordering::Relaxed);
        self.total.fetch_sub(self.bytes, Ordering::Relaxed);
    }
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
    /// Hints delivered: accepted frames other than `Register`,
    /// `Unregister` and `Sync` that ask for something (not an empty list).
    pub hints: u64,
    /// Frames refused, by [`Reject`] reason (index [`Reject::index`]).
    pub rejected: [u64; Reject::COUNT],
    /// Frames dropped over the frames-per-second budget (client's or user's).
    pub rate_limited: u64,
    /// Frames dropped over the bytes-per-second budget (client's or user's).
    pub volume_limited: u64,
    /// Hints dropped because their user's (or all users') accepted hints
    /// not yet dispatched were at the queued-bytes budget.
    pub queue_limited: u64,
    /// Passed descriptors that no well-formed `Register` frame took, or that
    /// came with a datagram refused whole (closed).
    pub descriptors_closed: u64,
    /// Clients tracked now.
    pub clients: usize,
    /// Handles held now, over all clients.
    pub handles: usize,
    /// Users (uids) with budgets tracked now.
    pub users: usize,
    /// Handles the server holds at most ([`HintConfig::max_handles`],
    /// lowered to fit `RLIMIT_NOFILE`).
    pub max_handles: usize,
    /// Bytes of accepted hints not yet dropped by whoever took them (the
    /// pipeline: not yet dispatched), over all users.
    pub queued_bytes: u64,
    /// The most `queued_bytes` ever charged at once (never above
    /// [`HintConfig::max_queued_bytes`]).
    pub queued_bytes_peak: u64,
    /// Clients forgotten because their process was gone or idle.
    pub clients_expired: u64,
    /// Clients replaced by a newer client of the same user at
    /// `max_clients_per_uid`.
    pub clients_evicted: u64,
    /// Answers to [`Frame::Sync`] sent.
    pub acks_sent: u64,
    /// Answers to [`Frame::Sync`] not sent: the client's queue was full, it
    /// was gone, or its address was not an abstract one.
    pub acks_dropped: u64,
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
        self.rejected_total() + self.rate_limited + self.volume_limited + self.queue_limited
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

    /// Gives back `cost` taken by [`Bucket::take`] (up to `burst`).
    fn refund(&mut self, cost: u64, rate: u64, burst: u64) {
        if rate != u64::MAX {
            self.tokens = self.tokens.saturating_add(cost).min(burst);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct ClientKey {
    addr: SenderAddr,
    pid: u32,
}

/// A client's own token buckets.
#[derive(Debug)]
struct ClientBudget {
    frames: Bucket,
    bytes: Bucket,
}

#[derive(Debug)]
struct ClientState {
    uid: u32,
    files: HashMap<u32, FileRef>,
    budget: ClientBudget,
    last_seen: Instant,
    /// What a [`Frame::Sync`] answers: this client's frame outcomes.
    outcomes: Ack,
}

/// One user's share: its token buckets over all its clients, the handles
/// its clients hold, and the bytes of its hints not yet dispatched.
#[derive(Debug)]
struct UserState {
    clients: usize,
    handles: usize,
    frames: Bucket,
    bytes: Bucket,
    queued: Arc<AtomicU64>,
}

/// The per-user and overall budgets of the server: pure accounting, apart
/// from the socket, so that it is unit-tested without one (and without
/// other users to send from). The server asks it before every frame, every
/// registration and every hint it hands on.
#[derive(Debug)]
struct Budgets {
    config: HintConfig,
    users: HashMap<u32, UserState>,
    /// Handles held over all clients.
    handles: usize,
    /// The effective [`HintConfig::max_handles`].
    max_handles: usize,
    /// Bytes of all users' hints not yet dispatched.
    queued: Arc<AtomicU64>,
    queued_peak: u64,
}

impl Budgets {
    fn new(config: HintConfig, max_handles: usize) -> Self {
        Self {
            config,
            users: HashMap::new(),
            handles: 0,
            max_handles,
            queued: Arc::new(AtomicU64::new(0)),
            queued_peak: 0,
        }
    }

    /// Clients `uid` has now.
    fn clients_of(&self, uid: u32) -> usize {
        self.users.get(&uid).map_or(0, |u| u.clients)
    }

    /// A new client of `uid`: its own full buckets; the user's are made
    /// full only when the user is new.
    fn add_client(&mut self, uid: u32, now: Instant) -> ClientBudget {
        let c = &self.config;
        let user = self.users.entry(uid).or_insert_with(|| UserState {
            clients: 0,
            handles: 0,
            frames: Bucket::full(c.frame_burst_per_uid, now),
            bytes: Bucket::full(c.byte_burst_per_uid, now),
            queued: Arc::new(AtomicU64::new(0)),
        });
        user.clients += 1;
        ClientBudget { frames: Bucket::full(c.frame_burst, now), bytes: Bucket::full(c.byte_burst, now) }
    }

    /// A client of `uid` holding `handles` handles is forgotten.
    fn remove_client(&mut self, uid: u32, handles: usize) {
        if let Some(user) = self.users.get_mut(&uid) {
            user.clients = user.clients.saturating_sub(1);
            user.handles = user.handles.saturating_sub(handles);
        }
        self.handles = self.handles.saturating_sub(handles);
    }

    /// Forgets users with no client and nothing queued. (A user with hints
    /// still queued is kept, so its share stays counted.)
    fn forget_idle_users(&mut self) {
        self.users.retain(|_, u| u.clients > 0 || u.queued.load(Ordering::Relaxed) > 0);
    }

    /// Takes `cost` from the client's bucket and then the user's, or from
    /// neither; `kind` chooses the frame or the byte buckets.
    fn take(&mut self, client: &mut ClientBudget, uid: u32, cost: u64, now: Instant, kind: BucketKind) -> bool {
        let c = &self.config;
        let (rate, burst, user_rate, user_burst) = match kind {
            BucketKind::Frames => (c.frames_per_sec, c.frame_burst, c.frames_per_sec_per_uid, c.frame_burst_per_uid),
            BucketKind::Bytes => (c.bytes_per_sec, c.byte_burst, c.bytes_per_sec_per_uid, c.byte_burst_per_uid),
        };
        let own = match kind {
            BucketKind::Frames => &mut client.frames,
            BucketKind::Bytes => &mut client.bytes,
        };
        if !own.take(cost, rate, burst, now) {
            return false;
        }
        let Some(user) = self.users.get_mut(&uid) else { return true };
        let shared = match kind {
            BucketKind::Frames => &mut user.frames,
            BucketKind::Bytes => &mut user.bytes,
        };
        if shared.take(cost, user_rate, user_burst, now) {
            true
        } else {
            own.refund(cost, rate, burst);
            false
        }
    }

    /// One frame from a client of `uid`: a frame token of each.
    fn frame(&mut self, client: &mut ClientBudget, uid: u32, now: Instant) -> bool {
        self.take(client, uid, 1, now, BucketKind::Frames)
    }

    /// A whole datagram refused from a known user (and client, when known):
    /// it costs a frame token all the same, so that refusals are no cheaper
    /// to flood with than frames. Returns whether there was one.
    fn refused_datagram(&mut self, client: Option<&mut ClientBudget>, uid: u32, now: Instant) -> bool {
        match client {
            Some(client) => self.frame(client, uid, now),
            None => match self.users.get_mut(&uid) {
                Some(user) => {
                    user.frames.take(1, self.config.frames_per_sec_per_uid, self.config.frame_burst_per_uid, now)
                }
                None => true,
            },
        }
    }

    /// `cost` bytes of volume from a client of `uid` and from the user.
    fn volume(&mut self, client: &mut ClientBudget, uid: u32, cost: u64, now: Instant) -> bool {
        self.take(client, uid, cost, now, BucketKind::Bytes)
    }

    /// Whether a client of `uid` holding `client_handles` may hold one more.
    fn may_add_handle(&self, uid: u32, client_handles: usize) -> Result<(), Reject> {
        if client_handles >= self.config.max_handles_per_client {
            return Err(Reject::TooManyHandles);
        }
        if self.users.get(&uid).is_some_and(|u| u.handles >= self.config.max_handles_per_uid) {
            return Err(Reject::TooManyUserHandles);
        }
        if self.handles >= self.max_handles {
            return Err(Reject::HandleTableFull);
        }
        Ok(())
    }

    /// One handle more (`added`) or fewer for `uid`.
    fn handles_changed(&mut self, uid: u32, added: bool) {
        let user = self.users.get_mut(&uid);
        if added {
            self.handles += 1;
            if let Some(user) = user {
                user.handles += 1;
            }
        } else {
            self.handles = self.handles.saturating_sub(1);
            if let Some(user) = user {
                user.handles = user.handles.saturating_sub(1);
            }
        }
    }

    /// A charge of `bytes` for a hint of `uid`, or `None` when the user's or
    /// the overall queued-bytes budget has no room for it.
    fn charge(&mut self, uid: u32, bytes: u64) -> Option<QueueCharge> {
        let user = self.users.get(&uid)?;
        let fits = |now: &AtomicU64, max: u64| now.load(Ordering::Relaxed).checked_add(bytes).is_some_and(|v| v <= max);
        if !fits(&user.queued, self.config.max_queued_bytes_per_uid)
            || !fits(&self.queued, self.config.max_queued_bytes)
        {
            return None;
        }
        let charge = QueueCharge::new(bytes, &user.queued, &self.queued);
        self.queued_peak = self.queued_peak.max(self.queued.load(Ordering::Relaxed));
        Some(charge)
    }
}

#[derive(Clone, Copy, Debug)]
enum BucketKind {
    Frames,
    Bytes,
}

/// The handles a server may hold: `configured`, but at most three quarters
/// of the soft `RLIMIT_NOFILE` (`None`: unlimited), so that a full table
/// leaves the daemon a quarter of its descriptors for its own work.
pub fn handle_table_size(configured: usize, soft_nofile: Option<u64>) -> usize {
    match soft_nofile {
        None => configured,
        Some(soft) => configured.min(usize::try_from(soft - soft / 4).unwrap_or(usize::MAX)),
    }
}

/// The hint server. See the module documentation.
pub struct HintServer {
    socket: UnixDatagram,
    path: PathBuf,
    /// (dev, ino) of the socket we bound, so that drop removes only ours.
    bound: (u64, u64),
    config: HintConfig,
    clients: HashMap<ClientKey, ClientState>,
    budgets: Budgets,
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
    /// descriptor, not per user) and turns on `SO_PASSCRED`. The handle
    /// table is sized here ([`handle_table_size`] of the soft
    /// `RLIMIT_NOFILE` now).
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
        Self::bound_at(config, socket)
    }

    /// Serves a socket bound already at `config.path`, as [`bind`](Self::bind)
    /// leaves it: `predictio run` binds its private socket and starts the
    /// command before its runtime starts, and hands the socket over across
    /// an `exec`. Clients may have queued datagrams on it since: they are
    /// served. Refused ([`HintError::NotBoundThere`]) unless the socket's
    /// own address is `config.path` and the socket file there is a socket.
    pub fn adopt(config: HintConfig, socket: UnixDatagram) -> Result<Self, HintError> {
        let path = config.path.clone();
        let address = socket.local_addr().map_err(syscall("getsockname", &path))?;
        let is_socket = std::fs::symlink_metadata(&path).is_ok_and(|meta| meta.file_type().is_socket());
        if address.as_pathname() != Some(path.as_path()) || !is_socket {
            return Err(HintError::NotBoundThere { path: path.display().to_string() });
        }
        Self::bound_at(config, socket)
    }

    /// The common end of [`bind`](Self::bind) and [`adopt`](Self::adopt):
    /// `socket` is bound at `config.path`.
    fn bound_at(config: HintConfig, socket: UnixDatagram) -> Result<Self, HintError> {
        let path = config.path.clone();
        let meta = std::fs::symlink_metadata(&path).map_err(syscall("stat", &path))?;
        socket.set_nonblocking(true).map_err(syscall("fcntl(O_NONBLOCK)", &path))?;
        sock::set_passcred(socket.as_fd()).map_err(syscall("setsockopt(SO_PASSCRED)", &path))?;
        if let Err(err) = sock::set_recv_buffer(socket.as_fd(), config.recv_buffer_bytes) {
            tracing::debug!(%err, "cannot raise the hint socket's receive buffer");
        }
        let soft_nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
        let max_handles = handle_table_size(config.max_handles, soft_nofile);
        if max_handles < config.max_handles {
            tracing::info!(
                configured = config.max_handles,
                max_handles,
                ?soft_nofile,
                "hint handles limited to three quarters of RLIMIT_NOFILE"
            );
        }
        let now = Instant::now();
        Ok(Self {
            socket,
            path,
            bound: (meta.dev(), meta.ino()),
            budgets: Budgets::new(config.clone(), max_handles),
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
        stats.handles = self.budgets.handles;
        stats.users = self.budgets.users.len();
        stats.max_handles = self.budgets.max_handles;
        stats.queued_bytes = self.budgets.queued.load(Ordering::Relaxed);
        stats.queued_bytes_peak = self.budgets.queued_peak;
        stats
    }

    /// Handles queued datagrams, calling `on_hint` for every accepted hint.
    /// When nothing is queued, waits up to `timeout` (`None`: indefinitely)
    /// for one. Handles at most `max_datagrams_per_recv` datagrams, then
    /// returns the number of hints delivered.
    pub fn recv(&mut self, timeout: Option<Duration>, on_hint: &mut impl FnMut(Hint)) -> Result<usize, HintError> {
        self.serve(on_hint, |socket| sock::poll_readable(socket, timeout))
    }

    /// As [`HintServer::recv`], waiting until a datagram comes or `stop`
    /// is readable (a closed pipe or socket pair, an eventfd), whichever
    /// is first: a server thread waits on both at once and wakes for
    /// nothing else. The one timeout is the next sweep of gone clients
    /// ([`HintConfig::sweep_interval`]), and only while there are clients
    /// or users to sweep: an idle server with none sleeps until a datagram
    /// or the stop. Returning says nothing of the stop: the caller knows
    /// why it signalled.
    pub fn recv_until(&mut self, stop: BorrowedFd<'_>, on_hint: &mut impl FnMut(Hint)) -> Result<usize, HintError> {
        let sweep = (!self.clients.is_empty() || !self.budgets.users.is_empty())
            .then(|| (self.last_sweep + self.config.sweep_interval).saturating_duration_since(Instant::now()));
        self.serve(on_hint, |socket| Ok(sock::poll_readable_any([socket, stop], sweep)?[0]))
    }

    /// Handles queued datagrams (see [`HintServer::recv`]); when none is
    /// queued, calls `wait` once with the socket, which says whether it
    /// became readable.
    fn serve(
        &mut self,
        on_hint: &mut impl FnMut(Hint),
        mut wait: impl FnMut(BorrowedFd<'_>) -> io::Result<bool>,
    ) -> Result<usize, HintError> {
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
                if !wait(self.socket.as_fd()).map_err(syscall("poll", &self.path))? {
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
    /// closed and counted. It costs its sender a frame token when the
    /// sender is known (`key`'s client, else `uid`'s user).
    fn reject_datagram(&mut self, reason: Reject, uid: Option<u32>, key: Option<ClientKey>, now: Instant) {
        if let Some(uid) = uid {
            let client = key.and_then(|key| self.clients.get_mut(&key)).map(|c| &mut c.budget);
            self.budgets.refused_datagram(client, uid, now);
        }
        self.stats.frames += 1;
        self.stats.rejected[reason.index()] += 1;
        self.stats.descriptors_closed += self.fds.len() as u64;
        self.fds.clear();
    }

    /// Forgets a client and gives back its share of its user's budgets.
    fn forget_client(&mut self, key: &ClientKey) {
        if let Some(state) = self.clients.remove(key) {
            self.budgets.remove_client(state.uid, state.files.len());
        }
    }

    /// Forgets `uid`'s least recently seen client.
    fn evict_least_recent(&mut self, uid: u32) {
        let oldest =
            self.clients.iter().filter(|(_, c)| c.uid == uid).min_by_key(|(_, c)| c.last_seen).map(|(k, _)| *k);
        if let Some(key) = oldest {
            self.forget_client(&key);
            self.stats.clients_evicted += 1;
        }
    }

    /// Forgets clients whose process is gone (or that idled out when their
    /// pid is not visible to us), then users left with no client and
    /// nothing queued.
    fn sweep(&mut self, now: Instant) {
        self.last_sweep = now;
        let idle = self.config.idle_timeout;
        let gone: Vec<ClientKey> = self
            .clients
            .iter()
            .filter(|(key, state)| {
                if key.pid == 0 {
                    now.saturating_duration_since(state.last_seen) >= idle
                } else {
                    !Path::new(&format!("/proc/{}", key.pid)).exists()
                }
            })
            .map(|(key, _)| *key)
            .collect();
        for key in &gone {
            self.forget_client(key);
        }
        self.stats.clients_expired += gone.len() as u64;
        self.budgets.forget_idle_users();
    }

    fn handle_datagram(&mut self, received: &sock::Received, on_hint: &mut impl FnMut(Hint)) -> usize {
        self.stats.datagrams += 1;
        let now = Instant::now();
        let uid = received.credentials.map(|c| c.uid);
        let key = received
            .credentials
            .filter(|_| !received.sender.is_empty())
            .map(|creds| ClientKey { addr: received.sender, pid: creds.pid });
        let refused = if received.truncated {
            Some(Reject::Truncated)
        } else if received.control_truncated {
            Some(Reject::ControlTruncated)
        } else if received.credentials.is_none() {
            Some(Reject::NoCredentials)
        } else if received.sender.is_empty() {
            Some(Reject::AnonymousSender)
        } else {
            None
        };
        let (Some(creds), Some(key), None) = (received.credentials, key, refused) else {
            self.reject_datagram(refused.unwrap_or(Reject::NoCredentials), uid, key, now);
            return 0;
        };
        if !self.clients.contains_key(&key) {
            if self.budgets.clients_of(creds.uid) >= self.config.max_clients_per_uid {
                self.evict_least_recent(creds.uid);
            }
            if self.clients.len() >= self.config.max_clients {
                if now.saturating_duration_since(self.last_sweep) >= Duration::from_secs(1) {
                    self.sweep(now);
                }
                if self.clients.len() >= self.config.max_clients {
                    self.reject_datagram(Reject::TooManyClients, Some(creds.uid), None, now);
                    return 0;
                }
            }
            let budget = self.budgets.add_client(creds.uid, now);
            let state =
                ClientState { uid: creds.uid, files: HashMap::new(), budget, last_seen: now, outcomes: Ack::default() };
            self.clients.insert(key, state);
        }
        let Some(client) = self.clients.get_mut(&key) else { return 0 };
        client.last_seen = now;
        let budgets = &mut self.budgets;
        let uid = creds.uid;
        let peer = PeerCred::from(creds);
        let mut fds = self.fds.drain(..);
        let mut hints = 0;
        let mut sync = None;
        for item in protocol::frames(&self.buf[..received.len]) {
            self.stats.frames += 1;
            // Counted as limited until it is known to be otherwise.
            client.outcomes.limited += 1;
            // A well-formed Register frame takes its descriptor whatever
            // becomes of it, so that the next one gets the next descriptor.
            let fd = if matches!(item, Ok(Frame::Register { .. })) { fds.next() } else { None };
            // Every frame, malformed, empty or not, costs a token of the
            // client's and of its user's: garbage floods are limited like
            // anything else, and a user's many clients share one budget.
            if !budgets.frame(&mut client.budget, uid, now) {
                // Out of frames: the rest of the datagram goes unread, as
                // this one outcome, so that a flood past its budget costs
                // a receive per datagram and not a look at each of its
                // (up to 5,461) frames.
                self.stats.rate_limited += 1;
                break;
            }
            let frame = match item {
                Ok(frame) => frame,
                Err(err) => {
                    self.stats.rejected[Reject::Decode(err).index()] += 1;
                    client.outcomes.limited -= 1;
                    client.outcomes.rejected += 1;
                    continue;
                }
            };
            if !budgets.volume(&mut client.budget, uid, volume_cost(&frame), now) {
                self.stats.volume_limited += 1;
                continue;
            }
            let outcome = match frame {
                Frame::Sync { token } => {
                    sync = Some(token);
                    Ok(None)
                }
                Frame::Register { handle } => register(client, budgets, handle, fd).map(|()| None),
                Frame::Unregister { handle } => match client.files.remove(&handle.0) {
                    Some(_) => {
                        budgets.handles_changed(uid, false);
                        Ok(None)
                    }
                    None => Err(Reject::UnknownHandle),
                },
                frame => match client.files.get(&frame.handle().0) {
                    None => Err(Reject::UnknownHandle),
                    // Taken, and paid for, but there is nothing to do.
                    Some(_) if asks_nothing(&frame) => Ok(None),
                    Some(file) => {
                        let Some(charge) = budgets.charge(uid, queued_cost(&frame)) else {
                            self.stats.queue_limited += 1;
                            continue;
                        };
                        Ok(Some((to_event(&frame, file), file.clone(), charge)))
                    }
                },
            };
            client.outcomes.limited -= 1;
            match outcome {
                Ok(None) => {
                    self.stats.accepted += 1;
                    client.outcomes.accepted += 1;
                }
                Ok(Some((event, file, charge))) => {
                    self.stats.accepted += 1;
                    client.outcomes.accepted += 1;
                    self.stats.hints += 1;
                    hints += 1;
                    on_hint(Hint { event, file, peer, charge });
                }
                Err(reason) => {
                    self.stats.rejected[reason.index()] += 1;
                    client.outcomes.rejected += 1;
                }
            }
        }
        let unused = fds.count();
        self.stats.descriptors_closed += unused as u64;
        if let Some(token) = sync {
            let ack = Ack { token, ..client.outcomes };
            self.answer(&received.sender, &ack);
        }
        hints
    }

    /// Sends `ack` to `sender`, without waiting: counted as sent, or as
    /// dropped when the client's queue is full or it is gone. Only to an
    /// abstract address (the client library autobinds one): sending to a
    /// pathname would have the daemon resolve, as root, a path the client
    /// controls and could point at another program's socket.
    fn answer(&mut self, sender: &SenderAddr, ack: &Ack) {
        let sent = sender.as_bytes().first() == Some(&0)
            && sock::send_to_abstract(self.socket.as_fd(), &sender.as_bytes()[1..], &ack.encode()).is_ok();
        if sent {
            self.stats.acks_sent += 1;
        } else {
            self.stats.acks_dropped += 1;
        }
    }
}

/// Registers `fd` as `handle` for `client`, after checking that it is a
/// readable regular file and that the client, its user and the server may
/// hold one more handle (a handle registered again replaces its file and
/// holds no more).
fn register(
    client: &mut ClientState,
    budgets: &mut Budgets,
    handle: Handle,
    fd: Option<OwnedFd>,
) -> Result<(), Reject> {
    let fd = fd.ok_or(Reject::MissingDescriptor)?;
    match sock::access(fd.as_fd()) {
        Ok(Access::Readable) => {}
        Ok(Access::WriteOnly | Access::PathOnly) => return Err(Reject::NotReadable),
        Err(_) => return Err(Reject::BadDescriptor),
    }
    let new = !client.files.contains_key(&handle.0);
    if new {
        budgets.may_add_handle(client.uid, client.files.len())?;
    }
    let file = FileRef::from_file(File::from(fd)).map_err(|err| match err {
        FileError::NotRegular { .. } => Reject::NotRegular,
        FileError::Open { .. } | FileError::Stat { .. } => Reject::BadDescriptor,
    })?;
    client.files.insert(handle.0, file);
    if new {
        budgets.handles_changed(client.uid, true);
    }
    Ok(())
}

/// The most a `TensorLayout` frame is charged for the bytes it describes:
/// what the tensor policy requests at once when it takes a layout (its
/// default window, `TensorConfig::ahead_bytes`). Taking a 4,095-tensor
/// layout costs the dispatcher ~1 ms, so a flood of layouts charged only
/// their list's bytes would buy a user a whole dispatcher thread.
pub const TENSOR_LAYOUT_CHARGE: u64 = 512 << 20;

/// Bytes of prefetch a frame asks for directly (see
/// [`HintConfig::bytes_per_sec`]).
fn prefetch_bytes(frame: &Frame<'_>) -> u64 {
    match frame {
        Frame::Pages { ranges, .. } => {
            ranges.iter().fold(0u64, |sum, (start, end)| sum.saturating_add((end - start).saturating_mul(PAGE_SIZE)))
        }
        Frame::ReadPlan { segments, .. } => segments.iter().fold(0u64, |sum, (_, len)| sum.saturating_add(len)),
        Frame::StreamRead { len, .. } => *len,
        Frame::TreeChildEnter { children, .. } => (children.len() as u64).saturating_mul(PAGE_SIZE),
        Frame::TensorLayout { ranges, .. } => {
            ranges.iter().fold(0u64, |sum, (_, len)| sum.saturating_add(len)).min(TENSOR_LAYOUT_CHARGE)
        }
        Frame::LayerStart { .. } | Frame::Register { .. } | Frame::Unregister { .. } | Frame::Sync { .. } => 0,
    }
}

/// What a frame costs of the byte budgets: its own encoded size, for every
/// kind, plus the prefetch it asks for directly.
fn volume_cost(frame: &Frame<'_>) -> u64 {
    (frame.encoded_len() as u64).saturating_add(prefetch_bytes(frame))
}

/// What the event of a hint frame will occupy while queued
/// ([`Event::footprint`] of [`to_event`]'s result), known before it is
/// built so that a hint over budget costs no allocation.
fn queued_cost(frame: &Frame<'_>) -> u64 {
    let payload = match frame {
        Frame::Pages { ranges, .. } => shared_list_bytes::<PageRange>(ranges.len()),
        Frame::ReadPlan { segments, .. } => shared_list_bytes::<ByteRange>(segments.len()),
        Frame::TensorLayout { ranges, .. } => shared_list_bytes::<ByteRange>(ranges.len()),
        Frame::TreeChildEnter { children, .. } => shared_list_bytes::<u64>(children.len()),
        Frame::StreamRead { .. }
        | Frame::LayerStart { .. }
        | Frame::Register { .. }
        | Frame::Unregister { .. }
        | Frame::Sync { .. } => 0,
    };
    (std::mem::size_of::<Event>() + payload) as u64
}

/// Whether a hint frame asks for nothing (an empty list, a read of no
/// bytes): it is taken, and costs its frame and bytes, but makes no event
/// for the pipeline to queue and dispatch.
fn asks_nothing(frame: &Frame<'_>) -> bool {
    match frame {
        Frame::Pages { ranges, .. } => ranges.iter().all(|(start, end)| start == end),
        Frame::ReadPlan { segments: ranges, .. } | Frame::TensorLayout { ranges, .. } => {
            ranges.iter().all(|(_, len)| len == 0)
        }
        Frame::StreamRead { len, .. } => *len == 0,
        _ => false,
    }
}

/// The event a valid hint frame stands for. Register, Unregister and Sync
/// never get here.
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
            // The protocol's children are 4 KiB page indices, one each.
            child_pages: 1,
        },
        Frame::TensorLayout { ranges, .. } => Event::TensorLayout { file, ranges: byte_ranges(ranges) },
        Frame::LayerStart { layer, .. } => Event::LayerStart { file, layer: *layer },
        // Not reachable: the caller handles these kinds itself. An empty page
        // list is the harmless answer.
        Frame::Register { .. } | Frame::Unregister { .. } | Frame::Sync { .. } => {
            Event::Pages { file, ranges: Arc::from([]) }
        }
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
        if let Ok(meta) = std::fs::symlink_metadata(&self.path)
            && (meta.dev(), meta.ino()) == self.bound
        {
            let _ = std::fs::remove_file(&self.path);
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

    use predictio_client::protocol::{PageList, RangeList};

    /// Budgets with no rate limits and the given changes.
    fn budgets(change: impl FnOnce(&mut HintConfig)) -> Budgets {
        let mut config = HintConfig::default().unlimited();
        change(&mut config);
        let max = config.max_handles;
        Budgets::new(config, max)
    }

    /// One user's many clients share the user's frame budget: with 128
    /// clients a user would otherwise have 128 times the per-client rate
    /// (25 M frames/s at the defaults).
    #[test]
    fn a_users_clients_share_one_frame_budget() {
        let mut b = budgets(|c| {
            (c.frames_per_sec, c.frame_burst) = (1, 10);
            (c.frames_per_sec_per_uid, c.frame_burst_per_uid) = (1, 15);
        });
        let now = Instant::now();
        let mut clients: Vec<ClientBudget> = (0..4).map(|_| b.add_client(1000, now)).collect();
        let mut accepted = 0;
        for client in &mut clients {
            accepted += (0..10).filter(|_| b.frame(client, 1000, now)).count();
        }
        assert_eq!(accepted, 15, "four clients of one user get the user's burst, not 4 x 10");
        // A refusal by the user's bucket costs the client nothing.
        let mut fresh = b.add_client(1000, now);
        assert!(!b.frame(&mut fresh, 1000, now));
        assert_eq!(fresh.frames.tokens, 10);
        // Another user is not touched.
        let mut root = b.add_client(0, now);
        assert_eq!((0..10).filter(|_| b.frame(&mut root, 0, now)).count(), 10);
        // The user's budget refills at the user's rate.
        let later = now + Duration::from_secs(2);
        assert_eq!((0..10).filter(|_| b.frame(&mut clients[0], 1000, later)).count(), 2);
    }

    /// A datagram refused whole (too large, too many descriptors, no room
    /// for a new client) costs a frame token like any frame.
    #[test]
    fn a_refused_datagram_costs_a_frame() {
        let mut b = budgets(|c| {
            (c.frames_per_sec, c.frame_burst) = (1, 5);
            (c.frames_per_sec_per_uid, c.frame_burst_per_uid) = (1, 8);
        });
        let now = Instant::now();
        let mut client = b.add_client(7, now);
        for _ in 0..5 {
            b.refused_datagram(Some(&mut client), 7, now);
        }
        assert!(!b.frame(&mut client, 7, now), "the client's budget went on refused datagrams");
        // With no client known (e.g. no room for a new one), the user pays.
        for _ in 0..3 {
            assert!(b.refused_datagram(None, 7, now));
        }
        assert!(!b.refused_datagram(None, 7, now));
        let mut other = b.add_client(7, now);
        assert!(!b.frame(&mut other, 7, now), "the user's budget went on refused datagrams");
    }

    /// Every frame kind costs its own bytes of the volume budget, whatever
    /// it asks for: empty lists and `TensorLayout`s included.
    #[test]
    fn every_frame_kind_costs_volume() {
        let empty: [(u64, u64); 0] = [];
        let big = [(0u64, u64::MAX / 2); 3];
        let children = [1u64, 2, 3];
        let h = Handle(1);
        let frames = [
            Frame::Register { handle: h },
            Frame::Unregister { handle: h },
            Frame::Pages { handle: h, ranges: RangeList::from_pairs(&empty) },
            Frame::ReadPlan { handle: h, segments: RangeList::from_pairs(&empty) },
            Frame::StreamRead { handle: h, offset: 0, len: 0 },
            Frame::TreeChildEnter { handle: h, parent_page: 0, position: 0, children: PageList::from_slice(&children) },
            Frame::TensorLayout { handle: h, ranges: RangeList::from_pairs(&empty) },
            Frame::TensorLayout { handle: h, ranges: RangeList::from_pairs(&big) },
            Frame::LayerStart { handle: h, layer: 0 },
        ];
        for frame in &frames {
            assert!(volume_cost(frame) >= frame.encoded_len() as u64, "{frame:?}");
            assert!(volume_cost(frame) >= protocol::HEADER_LEN as u64, "{frame:?}");
        }
        let layout = Frame::TensorLayout { handle: h, ranges: RangeList::from_pairs(&big) };
        assert_eq!(volume_cost(&layout), 16 + 3 * 16 + TENSOR_LAYOUT_CHARGE, "its list and the policy's first window");
        assert_eq!(TENSOR_LAYOUT_CHARGE, crate::policies::tensor::TensorConfig::default().ahead_bytes);
        let small = [(0u64, 4096u64)];
        let layout = Frame::TensorLayout { handle: h, ranges: RangeList::from_pairs(&small) };
        assert_eq!(volume_cost(&layout), 16 + 16 + 4096);
        let pages = [(0u64, 8u64)];
        let asked = Frame::Pages { handle: h, ranges: RangeList::from_pairs(&pages) };
        assert_eq!(volume_cost(&asked), 32 + 8 * PAGE_SIZE);
        // A user's clients share the byte budget too.
        let mut b = budgets(|c| {
            (c.bytes_per_sec, c.byte_burst) = (1, 1000);
            (c.bytes_per_sec_per_uid, c.byte_burst_per_uid) = (1, 1500);
        });
        let now = Instant::now();
        let (mut x, mut y) = (b.add_client(5, now), b.add_client(5, now));
        assert!(b.volume(&mut x, 5, 1000, now));
        assert!(!b.volume(&mut y, 5, 600, now));
        assert!(b.volume(&mut y, 5, 500, now));
    }

    /// Handles are descriptors the daemon holds: bounded per client, per
    /// user over all its clients, and in all.
    #[test]
    fn handles_are_capped_per_client_per_user_and_in_all() {
        let mut b = budgets(|c| {
            c.max_handles_per_client = 4;
            c.max_handles_per_uid = 6;
            c.max_handles = 8;
        });
        let now = Instant::now();
        b.add_client(1, now);
        b.add_client(1, now);
        b.add_client(2, now);
        let mut held = [0usize; 3];
        let mut add = |b: &mut Budgets, client: usize, uid: u32| {
            b.may_add_handle(uid, held[client]).map(|()| {
                held[client] += 1;
                b.handles_changed(uid, true);
            })
        };
        for _ in 0..4 {
            assert_eq!(add(&mut b, 0, 1), Ok(()));
        }
        assert_eq!(add(&mut b, 0, 1), Err(Reject::TooManyHandles));
        assert_eq!(add(&mut b, 1, 1), Ok(()));
        assert_eq!(add(&mut b, 1, 1), Ok(()));
        assert_eq!(add(&mut b, 1, 1), Err(Reject::TooManyUserHandles), "user 1's two clients hold 6");
        assert_eq!(add(&mut b, 2, 2), Ok(()));
        assert_eq!(add(&mut b, 2, 2), Ok(()));
        assert_eq!(add(&mut b, 2, 2), Err(Reject::HandleTableFull), "8 in all");
        assert_eq!(b.handles, 8);
        // A forgotten client gives its handles back to its user and to all.
        b.remove_client(1, 4);
        assert_eq!(b.handles, 4);
        assert_eq!(b.users[&1].handles, 2);
        assert_eq!(add(&mut b, 2, 2), Ok(()));
    }

    #[test]
    fn the_handle_table_leaves_a_quarter_of_the_descriptors() {
        assert_eq!(handle_table_size(16384, Some(65536)), 16384);
        assert_eq!(handle_table_size(16384, Some(20000)), 15000);
        assert_eq!(handle_table_size(16384, Some(1024)), 768);
        assert_eq!(handle_table_size(16384, None), 16384);
        assert_eq!(handle_table_size(16384, Some(0)), 0);
    }

    /// Accepted hints hold memory until the pipeline has dispatched them:
    /// bounded per user and in all, given back when the charge drops.
    #[test]
    fn queued_hint_bytes_are_capped_per_user_and_in_all() {
        let mut b = budgets(|c| {
            c.max_queued_bytes_per_uid = 1000;
            c.max_queued_bytes = 1500;
        });
        let now = Instant::now();
        b.add_client(1, now);
        b.add_client(2, now);
        let first = b.charge(1, 600).expect("fits");
        assert!(b.charge(1, 401).is_none(), "user 1 would pass 1000");
        let second = b.charge(1, 400).expect("fits exactly");
        assert!(b.charge(2, 501).is_none(), "all users would pass 1500");
        let third = b.charge(2, 500).expect("fits");
        assert_eq!(b.queued.load(Ordering::Relaxed), 1500);
        assert_eq!(b.queued_peak, 1500);
        drop(first);
        assert_eq!(b.queued.load(Ordering::Relaxed), 900);
        assert_eq!(b.users[&1].queued.load(Ordering::Relaxed), 400);
        let copy = third.clone();
        assert_eq!(b.users[&2].queued.load(Ordering::Relaxed), 1000, "a clone is a charge of its own");
        drop((second, third, copy));
        assert_eq!(b.queued.load(Ordering::Relaxed), 0);
        // A user with no client left is forgotten only once nothing of its
        // is queued.
        let held = b.charge(2, 10).expect("fits");
        b.remove_client(2, 0);
        b.forget_idle_users();
        assert!(b.users.contains_key(&2));
        drop(held);
        b.forget_idle_users();
        assert!(!b.users.contains_key(&2));
        assert!(b.users.contains_key(&1));
    }

    /// What a hint is charged while queued is its event's footprint,
    /// computed from the frame before the event is built.
    #[test]
    fn the_queued_cost_of_a_frame_is_its_events_footprint() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").expect("write");
        let file = FileRef::open(&path).expect("open");
        let pairs = [(1u64, 5u64), (9, 9), (100, 200)];
        let children = [3u64, 4, 5, 6];
        let h = Handle(1);
        for frame in [
            Frame::Pages { handle: h, ranges: RangeList::from_pairs(&pairs) },
            Frame::ReadPlan { handle: h, segments: RangeList::from_pairs(&pairs) },
            Frame::StreamRead { handle: h, offset: 1, len: 2 },
            Frame::TreeChildEnter { handle: h, parent_page: 1, position: 2, children: PageList::from_slice(&children) },
            Frame::TensorLayout { handle: h, ranges: RangeList::from_pairs(&pairs) },
            Frame::LayerStart { handle: h, layer: 3 },
        ] {
            assert_eq!(queued_cost(&frame), to_event(&frame, &file).footprint() as u64, "{frame:?}");
        }
    }
}
