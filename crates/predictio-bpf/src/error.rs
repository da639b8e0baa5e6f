//! Errors of the eBPF observer, each naming the step that failed.

use std::io;

/// Why the eBPF observer could not start or run.
///
/// [`BpfError::is_unavailable`] tells a caller whether to fall back to
/// another event source (this machine or build cannot run eBPF observation)
/// rather than report a bug.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// This build carries no BPF object (clang or headers were missing when
    /// it was compiled); `reason` says what was missing.
    #[error("eBPF observation unavailable in this build: {reason}")]
    Unavailable {
        /// What the build script reported.
        reason: &'static str,
    },
    /// tracefs cannot be read: mounted at neither `/sys/kernel/tracing` nor
    /// `/sys/kernel/debug/tracing` (and mounting it at the first failed or
    /// was not asked for), or not readable by this user.
    #[error("tracefs: {source}")]
    Tracefs {
        /// What was looked at and why it failed.
        source: io::Error,
    },
    /// A tracepoint the programs need does not exist on this kernel.
    #[error("tracepoint {tracepoint} not found: {source}")]
    MissingTracepoint {
        /// `category:name`.
        tracepoint: String,
        /// Reading its `format` file failed.
        source: io::Error,
    },
    /// A tracepoint record's field is not where the compiled program reads it.
    #[error(
        "tracepoint {tracepoint}: field `{field}` expected at (offset, size) {expected:?}, the kernel has {found:?}"
    )]
    LayoutMismatch {
        /// `category:name`.
        tracepoint: String,
        /// The field.
        field: &'static str,
        /// `(offset, size)` the program was compiled for.
        expected: (u32, u32),
        /// `(offset, size)` in the kernel's format file, `None` if absent.
        found: Option<(u32, u32)>,
    },
    /// The kernel's BTF (`/sys/kernel/btf/vmlinux`) could not be read.
    #[error("reading the kernel's BTF (/sys/kernel/btf/vmlinux): {source}")]
    KernelBtf {
        /// aya's error.
        source: aya::BtfError,
    },
    /// The configuration is invalid.
    #[error("invalid observer configuration: {0}")]
    Config(String),
    /// Loading the BPF object (parsing, CO-RE relocation, map creation).
    #[error("loading the BPF object: {0}")]
    Load(#[source] aya::EbpfError),
    /// Loading (verifying) or attaching one program.
    #[error("program {program}: {step}: {source}")]
    Program {
        /// The program (its C function name).
        program: &'static str,
        /// `load` or `attach`.
        step: &'static str,
        /// aya's error.
        source: aya::programs::ProgramError,
    },
    /// Opening or updating a map.
    #[error("map {map}: {step}: {source}")]
    Map {
        /// The map's name in the C source.
        map: &'static str,
        /// What was being done.
        step: &'static str,
        /// aya's error.
        source: aya::maps::MapError,
    },
    /// A system call failed.
    #[error("{call}: {source}")]
    Syscall {
        /// The call.
        call: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl BpfError {
    /// True when the error means "eBPF observation cannot run here" (no BPF
    /// object in this build, no privilege, a kernel without the tracepoints,
    /// tracepoint layouts or BPF features this build needs) rather than a
    /// misconfiguration: the caller should fall back to another event source
    /// and log the error (it names what is missing). Note that a verifier
    /// rejection (`EACCES`/`EINVAL`) counts as unavailable too: on an older
    /// kernel that is what it means; CI catches it on ours, where skipping is
    /// a failure.
    pub fn is_unavailable(&self) -> bool {
        match self {
            BpfError::Unavailable { .. }
            | BpfError::Tracefs { .. }
            | BpfError::MissingTracepoint { .. }
            | BpfError::KernelBtf { .. }
            | BpfError::LayoutMismatch { .. } => true,
            BpfError::Config(_) => false,
            other => {
                let mut source: Option<&(dyn std::error::Error + 'static)> = Some(other);
                while let Some(err) = source {
                    if let Some(io) = err.downcast_ref::<io::Error>() {
                        return matches!(
                            io.raw_os_error(),
                            Some(libc::EPERM | libc::EACCES | libc::ENOSYS | libc::EOPNOTSUPP | libc::EINVAL)
                        );
                    }
                    source = err.source();
                }
                false
            }
        }
    }
}
