//! predictio's hint protocol and client.
//!
//! Programs know things about their future reads that the kernel cannot see:
//! the segments of a read plan, the B-tree page they are about to descend
//! into, the tensor layout of the model they load. This crate lets them say
//! so to the predictio daemon, cheaply and without risk:
//!
//! - [`protocol`]: the wire format, shared with the daemon (which decodes with
//!   the same code). Written down in `docs/protocol.md`.
//! - [`Client`]: the Rust API. Sends never block; a missing, busy or killed
//!   daemon costs the program a dropped (counted) hint and nothing else.
//! - [`ffi`]: the C ABI over the same client, declared in
//!   `include/predictio.h`.
//!
//! Files are never named by path: a client passes the open descriptor once
//! (`SCM_RIGHTS`) with a handle of its choosing, so the daemon can only
//! prefetch files the program could open itself.
//!
//! ```
//! use predictio_client::Client;
//!
//! # let path = "/nonexistent/predictio/hint.sock";
//! let client = Client::connect(path)?; // or Client::connect_default()
//! let file = std::fs::File::open("/proc/self/exe")?;
//! let handle = client.register(&file)?;
//! // Each call returns at once; with no daemon the hint is dropped, counted.
//! let _ = client.read_plan(handle, &[(0, 1 << 20), (8 << 20, 1 << 20)]);
//! let _ = client.stream_read(handle, 0, 65536);
//! assert_eq!(client.stats().sent, 0);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! This crate depends on `rustix` (its `event`, `fs` and `net` modules) and `libc`
//! only. Its `unsafe` code lives in two modules, each block with a
//! `SAFETY:` comment: `sys`, the syscall edge (rustix for the socket and
//! descriptor checks, libc for `pthread_atfork`), and [`ffi`], the C ABI,
//! whose exported functions take raw pointers and descriptors from C and
//! are this crate's FFI edge.

#![deny(unsafe_code)]

pub mod client;
#[allow(unsafe_code)]
pub mod ffi;
pub mod protocol;
#[allow(unsafe_code)]
mod sys;

pub use client::{Batch, Client, ClientError, ClientStats, DEFAULT_RETRY_INTERVAL, SendError, SyncError};
pub use protocol::{Ack, DEFAULT_SOCKET_PATH, DecodeError, EncodeError, Frame, Handle, Kind, PageList, RangeList};
