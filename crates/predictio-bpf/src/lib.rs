//! eBPF observation: page-cache accesses, misses and evictions and process
//! trees, seen by the kernel and delivered as core [`predictio::Event`]s.
//!
//! # What it owns
//!
//! The BPF programs (`src/bpf/observe.bpf.c`), the record they share with Rust
//! (`src/bpf/observe.h`), their loader ([`Observer`]) and the conversion of
//! records into events. It never prefetches and never decides anything: it
//! reports, and the runtime's policies decide.
//!
//! | tracepoint | event |
//! | --- | --- |
//! | `filemap:mm_filemap_get_pages` | `PageAccess { kind: Read }` (buffered read, pages `index..=last_index` clamped to the file's size) |
//! | `filemap:mm_filemap_fault` | `PageAccess { kind: Fault }` (one page) |
//! | `filemap:mm_filemap_map_pages` | `PageAccess { kind: MapPages }` (pages mapped around a fault, clamped likewise) |
//! | `filemap:mm_filemap_add_to_page_cache` | `PageMiss` of the folio's pages (back-to-back folios joined) |
//! | `filemap:mm_filemap_delete_from_page_cache` | `PageEvict` of the folio's pages (joined likewise) |
//! | `sched:sched_process_exec` | `Exec` (the executable's `FileId` from the task's `mm->exe_file`, read in the kernel through CO-RE: exact even for a process that is gone when user space reads the record, unlike a `stat` of `/proc/PID/exe`) |
//! | `sched:sched_process_fork` (raw tracepoint: it tells processes from threads) | `Fork` |
//! | `sched:sched_process_exit` (last thread of a group) | `Exit` |
//!
//! # Older kernels
//!
//! The process-tree tracepoints are required; the page-cache ones are
//! attached where the kernel has them ([`hooks::HOOKS`]' `required`). Before
//! Linux 6.11 there is no `mm_filemap_get_pages`, `_fault` or `_map_pages`:
//! the observer loads without those programs, reports misses, evictions and
//! the process tree (all launch learning and replay need) but no hits, and
//! names what it runs without ([`Observer::missing_hooks`]). The page-based
//! miss and eviction records of Linux 5.14/5.15 carry no folio order; each
//! is one page there. [`ObserverConfig::assume_missing`] makes a newer
//! kernel behave so, for tests. The [`perf`] fallback does the same with the
//! page-access tracepoints ([`perf::PerfObserver::missing_hooks`]).
//!
//! tracefs is read where it is mounted, `/sys/kernel/tracing` or (older
//! setups) `/sys/kernel/debug/tracing`; only where it is mounted at neither
//! is it mounted at the first ([`ObserverConfig::mount_tracefs`]).
//!
//! The layout checks catch fields that moved, not a kernel that reports
//! something else under the same names. So the daemon proves an observer
//! before using it: [`self_check`] has a forked child read one page of a
//! probe file whose pages were dropped, and the observer must report that
//! page's miss for that file's [`predictio::FileId`]. An observer that does
//! not is refused, and the daemon falls back to the next source (perf, then
//! fanotify) and says why in its status.
//!
//! # Filtering in the kernel
//!
//! Each program first asks whether the current process is observed: either
//! "follow all" is on (the daemon) or its thread-group id is in the
//! `followed` hash map (a command tree: a fork of a followed process adds the
//! child in the kernel, the group's exit removes it). Then the optional cgroup
//! filter (`bpf_get_current_ancestor_cgroup_id`) and device filter apply. An
//! unrelated process costs an array lookup and a hash lookup per tracepoint
//! hit and touches no ring buffer. Pids are those of the initial pid
//! namespace. Evictions can optionally skip the process
//! filter ([`ObserverConfig::evictions_any_process`]): reclaim runs in
//! `kswapd`, not in the process whose pages go.
//!
//! # Device numbers
//!
//! The filemap tracepoints and `super_block::s_dev` hold the kernel's internal
//! `dev_t` (`major << 20 | minor`); events carry the `st_dev` encoding, so an
//! event's [`predictio::FileId`] equals the one `stat()` and
//! [`predictio::FileRef`] give for the same file ([`kernel_dev_to_user`]).
//! (On btrfs subvolumes and overlayfs, `stat()` reports a device other than
//! the superblock's; files there will not match.)
//!
//! # Notification: throughput with bounded latency
//!
//! Records are submitted with `BPF_RB_NO_WAKEUP`; only when the unread data
//! crosses a multiple of [`ObserverConfig::wakeup_bytes`] does a record wake
//! the consumer (and an exec, rare and the start of launch prefetching, always
//! does). The consumer calls [`Observer::poll`] with a short timeout
//! ([`ObserverConfig::poll_interval`], 1 ms by default) and drains whatever is
//! there when it expires. Waking on every record costs a traced reader many
//! times its speed (measured below); this scheme bounds notification latency
//! by the poll timeout at a fraction of that cost. Records the kernel could
//! not reserve (ring full) are counted per CPU and reported in
//! [`ObserverStats::lost`].
//!
//! # Cost, measured
//!
//! On the development machine (2 vCPUs, Linux 6.18, retpolines), the
//! `overhead` example (`dd bs=4096` over a cached 256 MiB file: one `read()`
//! and one record per page, the worst case for per-record cost), 11
//! interleaved rounds per run, four runs on a machine shared with another
//! engineer's builds (so medians are noisy; the best round is the cleaner
//! figure):
//!
//! | reader | best round, ratio to no observer | median round |
//! | --- | --- | --- |
//! | observer loaded, reader not followed | 1.08–1.14× | 0.97–1.18× |
//! | followed, batched wake-ups (default) | 1.25–1.33× | 1.10–1.34× |
//! | followed, wake on every record (`wakeup_bytes: 0`) | 13–14× | 13–19× |
//!
//! Two traced readers at once (both cores): 0.7–2.3 M records/s delivered,
//! none lost (the readers, sharing the two cores with the consumer, were the
//! limit). Notification latency of a trickle of records with the 1 ms poll
//! timeout: p50 0.3–0.5 ms, p99 1.1–3.5 ms (scheduling noise from the other
//! builds); an exec wakes the consumer at once.
//! A reader not followed pays the tracepoint's BPF invocation and two map
//! lookups (about 25 ns of the program's ~75 ns per hit); a followed one adds
//! the ring-buffer reservation and a timestamp. A read of many pages costs
//! the same per call as a read of one, so larger reads see proportionally
//! less.
//!
//! # Why aya loading a clang-built object (and not libbpf-rs skeletons)
//!
//! - The user-space side is pure Rust: no libbpf, libelf or zlib to build or
//!   link, so the crate builds on any machine and, without clang, still
//!   compiles with an [`Observer::load`] that returns
//!   [`BpfError::Unavailable`] (a skeleton crate cannot compile without its
//!   generated skeleton, and `libbpf-sys` needs a C toolchain and libelf
//!   either way).
//! - The BPF side is ordinary C built by clang with libbpf's headers, exactly
//!   as a libbpf user would write it; aya performs the CO-RE relocations
//!   against `/sys/kernel/btf/vmlinux` and sets the `const volatile`
//!   settings ([`aya::EbpfLoader::override_global`]).
//! - Kernel structures are declared by hand, field by field, with
//!   `preserve_access_index` (`src/bpf/kernel.h`) instead of a multi-megabyte
//!   generated `vmlinux.h`: CO-RE relocates by field name, so nothing is
//!   pinned to one kernel's layout.
//! - The hot paths (`mm_filemap_get_pages`, `_fault`, `_map_pages`) are
//!   BTF-typed tracepoints (`tp_btf`): no record is formatted before the
//!   program runs (cheaper for every process, followed or not), and the
//!   verifier checks each argument's type against the kernel's BTF, so no
//!   layout can drift. The classic tracepoints that remain (misses,
//!   evictions, exec, exit) have the fields they read checked against
//!   tracefs `format` files at load (`layout.rs`); `sched_process_fork` is a
//!   raw tracepoint read through CO-RE.
//!
//! # Falling back
//!
//! Where eBPF cannot run (no BPF object in this build, no privilege, no BTF
//! or tracepoints: [`BpfError::is_unavailable`]), [`perf`] reads the same
//! tracepoints through `perf_event_open`, and [`fallback`] observes opens
//! and execs with fanotify. Which one runs is the daemon's choice
//! (`predictio-daemon`'s `sources` module, from its `[observe] source`),
//! made in one place. Classic tracepoint programs return 1, so that a loaded
//! observer leaves the perf events on the same tracepoints their records
//! (the kernel drops them when a program returns 0).
//!
//! # Build
//!
//! `build.rs` compiles the C with `clang -target bpf` (packages: `clang`,
//! `libbpf-dev`, `linux-libc-dev`). Without them the build succeeds with a
//! warning and [`available`] returns the reason; `PREDICTIO_BPF_REQUIRE=1`
//! makes that a build failure instead.
//!
//! # Example: the daemon's draining loop
//!
//! ```no_run
//! use predictio_bpf::{Observer, ObserverConfig};
//!
//! let mut observer = match Observer::load(ObserverConfig { follow_all: true, ..Default::default() }) {
//!     Ok(observer) => observer,
//!     Err(err) if err.is_unavailable() => {
//!         eprintln!("eBPF observation unavailable ({err}); falling back to fanotify");
//!         return Ok(());
//!     }
//!     Err(err) => return Err(err),
//! };
//! let timeout = observer.poll_interval();
//! for _ in 0..1000 {
//!     observer.poll(timeout, &mut |event| {
//!         // runtime.dispatch(&event) in the daemon
//!         let _ = event;
//!     })?;
//! }
//! println!("{} events from {}", observer.stats().events, observer.source_name());
//! # Ok::<(), predictio_bpf::BpfError>(())
//! ```
#![deny(unsafe_code)]

#[cfg_attr(predictio_bpf_unavailable, allow(dead_code, reason = "used by the eBPF observer only"))]
mod cgroup;
mod config;
mod error;
pub mod fallback;
pub mod hooks;
#[cfg_attr(predictio_bpf_unavailable, allow(dead_code, reason = "used by the eBPF observer only"))]
mod layout;
#[cfg(not(predictio_bpf_unavailable))]
mod observer;
#[cfg(predictio_bpf_unavailable)]
#[path = "unavailable.rs"]
mod observer;
pub mod perf;
#[cfg_attr(predictio_bpf_unavailable, allow(dead_code, reason = "used by the eBPF observer only"))]
mod record;
pub mod self_check;
mod sys;

pub use config::{FollowAllLookups, ObserverConfig, ObserverStats};
pub use error::BpfError;
pub use observer::{Observer, Quieter};
pub use record::{kernel_dev_to_user, user_dev_to_kernel};

/// Now on the clock of events' `time_ns` (`CLOCK_MONOTONIC`, what
/// `bpf_ktime_get_ns` reads): subtract an event's time to get its
/// notification latency.
pub fn monotonic_now_ns() -> u64 {
    sys::monotonic_ns()
}

/// Hands every descriptor this process holds to a helper process that
/// keeps them until this process has exited: for a process that ends while
/// an observer is still being loaded on another thread, whose exit would
/// otherwise wait for the kernel to detach each program attached so far
/// (over a second on a two-core VM). Returns the helper's pid, or `None`
/// when the process cannot fork (the exit then waits).
pub fn release_at_exit() -> Option<u32> {
    match sys::hold_until_exit() {
        Ok(helper) => Some(helper),
        Err(err) => {
            tracing::debug!("holding descriptors past exit: cannot fork ({err})");
            None
        }
    }
}

/// Whether this build carries the BPF object: `Err` names what the build
/// lacked (e.g. clang). A machine may still refuse to load it at run time.
pub fn available() -> Result<(), &'static str> {
    #[cfg(predictio_bpf_unavailable)]
    return Err(env!("PREDICTIO_BPF_UNAVAILABLE"));
    #[cfg(not(predictio_bpf_unavailable))]
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon runs each source on a thread of its own.
    #[test]
    fn sources_can_move_to_a_thread() {
        fn send<T: Send>() {}
        send::<Observer>();
        send::<fallback::FanotifyObserver>();
        send::<perf::PerfObserver>();
        // Errors cross threads and convert into `anyhow::Error` in the CLI.
        fn error<T: std::error::Error + Send + Sync + 'static>() {}
        error::<BpfError>();
        error::<fallback::FanotifyError>();
        error::<perf::PerfError>();
    }

    #[test]
    fn load_names_the_reason_when_the_build_has_no_bpf_object() {
        let Err(reason) = available() else { return };
        let err = Observer::load(ObserverConfig::default()).expect_err("no BPF object in this build");
        assert!(err.is_unavailable(), "{err}");
        assert!(err.to_string().contains(reason), "{err}");
    }
}
