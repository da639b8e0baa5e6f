//! predictio's core: typed workload events, prediction policies, the runtime that
//! dispatches one to the other, and the executor — the only code that prefetches.
//!
//! The flow is `Event → Runtime → Policy::on_event → Request → Executor`.
//! Policies are pure logic: they never issue I/O and never touch the page cache.
//! The [`executor::Executor`] validates each [`Request`], clamps it to the end of
//! the file, skips holes, resident pages and pages already in flight, coalesces
//! what is left into bounded I/Os and issues them through one of its backends.
//! It is bounded everywhere and never blocks a caller: when full it drops work
//! and counts the drop.
//!
//! All `unsafe` code lives in [`sys`], the syscall edge; everything above it is
//! safe Rust.
#![deny(unsafe_code)]

pub mod accounting;
pub mod btree;
pub mod cache;
pub mod embedded;
pub mod event;
pub(crate) mod exec_image;
pub mod executor;
pub mod file;
pub mod hints;
pub mod largeread;
pub mod launch;
pub mod model;
pub mod page;
pub mod parquet;
pub mod pipeline;
pub mod policies;
pub mod policy;
pub mod pressure;
pub mod reader;
pub mod request;
pub mod resolve;
pub mod runtime;
pub mod secure_dir;
#[allow(unsafe_code)]
pub(crate) mod sys;
#[doc(hidden)]
pub mod testing;

/// The few typed system calls the adapters and tools built on predictio
/// share with it (advice to the kernel, page-cache state, thread
/// priorities, readiness). Everything else at the syscall edge stays
/// private to the core.
pub mod os {
    pub use crate::sys::socket::{poll_readable, poll_readable_any, poll_readable_list};
    pub use crate::sys::{
        Advice, CacheStat, FileMapping, IoPriority, NewerCall, assume_missing, assumed_missing, cachestat, fadvise,
        file_mappings, page_size, set_thread_nice, thread_io_priority,
    };
}

pub use event::{Event, EventKind, EventKinds};
pub use executor::{Executor, ExecutorConfig};
pub use file::{FileId, FileRef};
pub use page::{PAGE_SIZE, PageRange};
pub use policy::{Policy, PolicyId};
pub use request::{MetaDir, MetaRequest, Request, Urgency};
pub use runtime::Runtime;
