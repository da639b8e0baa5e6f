//! The kernel hooks kernel observation attaches to, named for diagnostics
//! (`predictio doctor`): which tracepoint, how it is attached, what event
//! it feeds, and whether this kernel has it in the shape the programs read.
//!
//! It owns no list of its own beyond the table below: the checks reuse the
//! layout check the observer runs before attaching ([`crate::Observer::load`]),
//! and a unit test holds [`HOOKS`] to the BPF sources' `SEC(…)` names, so
//! the table cannot drift from what is attached. It never loads anything.

use std::path::{Path, PathBuf};

use crate::{BpfError, layout};

/// How a program is attached to its tracepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attach {
    /// A BTF-typed tracepoint (`tp_btf`): needs the kernel's BTF; its
    /// arguments are typed, so no record layout is assumed.
    BtfTracepoint,
    /// A classic tracepoint: its record's fields are read at fixed offsets,
    /// checked against tracefs `format` at load.
    Tracepoint,
    /// A raw tracepoint: the arguments as the kernel passes them, read
    /// through CO-RE.
    RawTracepoint,
}

impl Attach {
    /// The `SEC()` prefix of this kind in the BPF C sources.
    pub fn name(self) -> &'static str {
        match self {
            Attach::BtfTracepoint => "tp_btf",
            Attach::Tracepoint => "tracepoint",
            Attach::RawTracepoint => "raw_tracepoint",
        }
    }
}

/// One tracepoint the eBPF observer attaches to (the perf fallback opens the
/// same ones, except `sched_process_fork`, whose processes it takes from
/// perf's own fork records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hook {
    /// Its tracefs category (`filemap`, `sched`).
    pub category: &'static str,
    /// Its name (`mm_filemap_get_pages`).
    pub name: &'static str,
    /// How the eBPF program attaches.
    pub attach: Attach,
    /// The events it feeds.
    pub feeds: &'static str,
    /// The first kernel that has it, where that is newer than the oldest
    /// kernels predictio runs on.
    pub since: Option<&'static str>,
    /// Whether the eBPF observer needs it to start. Without an optional hook
    /// it starts without that hook's events
    /// ([`crate::Observer::missing_hooks`] names what is missing).
    pub required: bool,
}

impl Hook {
    /// `category:name`, as tracefs and perf name it.
    pub fn label(&self) -> String {
        format!("{}:{}", self.category, self.name)
    }
}

/// Every tracepoint the eBPF observer attaches to, in its attach order. The
/// process-tree ones are required; the page-cache ones are attached where
/// the kernel has them (the perf fallback also requires misses and
/// evictions, and opens the page accesses where they exist). Launch
/// learning and replay need only misses (`mm_filemap_add_to_page_cache`) and
/// the process tree; page accesses (Linux 6.11+) add hits.
pub const HOOKS: &[Hook] = &[
    Hook {
        category: "sched",
        name: "sched_process_fork",
        attach: Attach::RawTracepoint,
        feeds: "Fork: process trees (the followed set, launch learning's children)",
        since: None,
        required: true,
    },
    Hook {
        category: "sched",
        name: "sched_process_exit",
        attach: Attach::Tracepoint,
        feeds: "Exit: the end of a process tree (a launch's end)",
        since: None,
        required: true,
    },
    Hook {
        category: "sched",
        name: "sched_process_exec",
        attach: Attach::Tracepoint,
        feeds: "Exec: launch replay and launch learning",
        since: None,
        required: true,
    },
    Hook {
        category: "filemap",
        name: "mm_filemap_get_pages",
        attach: Attach::BtfTracepoint,
        feeds: "PageAccess (buffered reads): stream, B-tree and launch replay pacing",
        since: Some("Linux 6.11"),
        required: false,
    },
    Hook {
        category: "filemap",
        name: "mm_filemap_fault",
        attach: Attach::BtfTracepoint,
        feeds: "PageAccess (page faults): mmap readers, model loaders",
        since: Some("Linux 6.11"),
        required: false,
    },
    Hook {
        category: "filemap",
        name: "mm_filemap_map_pages",
        attach: Attach::BtfTracepoint,
        feeds: "PageAccess (pages mapped around a fault): mmap readers",
        since: Some("Linux 6.11"),
        required: false,
    },
    Hook {
        category: "filemap",
        name: "mm_filemap_add_to_page_cache",
        attach: Attach::Tracepoint,
        feeds: "PageMiss: what a launch read from storage (launch learning)",
        since: None,
        required: false,
    },
    Hook {
        category: "filemap",
        name: "mm_filemap_delete_from_page_cache",
        attach: Attach::Tracepoint,
        feeds: "PageEvict: waste accounting (prefetched pages evicted unused)",
        since: None,
        required: false,
    },
];

/// A hook a loaded observer runs without, and why: absent from this kernel,
/// its record laid out otherwise, its program refused, or assumed missing
/// ([`crate::ObserverConfig::assume_missing`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MissingHook {
    /// The hook.
    pub hook: &'static Hook,
    /// Why it is not attached.
    pub reason: String,
}

/// The hook named `label` (`category:name`), if it is one of [`HOOKS`].
pub fn by_label(label: &str) -> Option<&'static Hook> {
    HOOKS.iter().find(|hook| label.split_once(':') == Some((hook.category, hook.name)))
}

/// The hooks that report page accesses (buffered reads, faults, mapped
/// pages: `PageAccess`), all added in Linux 6.11: what
/// `[observe] assume_missing = ["filemap_access"]` takes away.
pub fn filemap_access() -> impl Iterator<Item = &'static Hook> {
    HOOKS
        .iter()
        .filter(|hook| ["mm_filemap_get_pages", "mm_filemap_fault", "mm_filemap_map_pages"].contains(&hook.name))
}

/// Where tracefs is mounted (`/sys/kernel/tracing`, else
/// `/sys/kernel/debug/tracing`), if anywhere.
pub fn find_tracefs() -> Option<PathBuf> {
    layout::find_tracefs()
}

/// Whether `hook` exists under `tracefs` and, for a classic tracepoint, has
/// every field the program reads where it reads it (the check
/// [`crate::Observer::load`] runs). The error names what is wrong;
/// [`BpfError::MissingTracepoint`] when the kernel lacks the tracepoint.
pub fn check(tracefs: &Path, hook: &Hook) -> Result<(), BpfError> {
    let path = tracefs.join("events").join(hook.category).join(hook.name).join("format");
    let format = std::fs::read_to_string(&path)
        .map_err(|source| BpfError::MissingTracepoint { tracepoint: hook.label(), source })?;
    let fields = layout::TRACEPOINTS
        .iter()
        .find(|(category, name, _)| *category == hook.category && *name == hook.name)
        .map_or(&[][..], |(_, _, fields)| *fields);
    layout::check(hook.category, hook.name, &format, fields)
}

/// Whether `sched:sched_process_exit` has `group_dead` (Linux 6.16+): with
/// it a process group's exit is seen when its last thread exits, without it
/// when its leader does.
pub fn exit_has_group_dead(tracefs: &Path) -> bool {
    layout::check_all(tracefs).is_ok_and(|layouts| layouts.exit_has_group_dead)
}

/// The optional system-call tracepoints (`syscalls:sys_enter_CALL`): the
/// path calls whose lookups launch learning records, and the exec calls
/// whose entry starts a replay before the exec completes. Returns the calls
/// this kernel has, checked, and all the calls the programs know; a call
/// whose arguments moved is an error. Without `CONFIG_FTRACE_SYSCALLS` none
/// is present.
pub fn syscall_hooks(tracefs: &Path) -> Result<(Vec<&'static str>, Vec<&'static str>), BpfError> {
    let path_calls = layout::PATH_CALLS.iter().map(|(p, c, f)| (*p, *c, std::slice::from_ref(f)));
    let exec_calls = layout::EXEC_START_CALLS.iter().map(|(p, c, f)| (*p, *c, &f[..]));
    let present = layout::syscalls_present(tracefs, path_calls.chain(exec_calls))?;
    // `execve` carries two programs (its path and the exec start): each
    // call is named once.
    let once = |calls: &mut Vec<&'static str>, call| {
        if !calls.contains(&call) {
            calls.push(call);
        }
    };
    let mut calls = Vec::new();
    for (_, call) in present {
        once(&mut calls, call);
    }
    let mut all = Vec::new();
    for call in layout::PATH_CALLS.iter().map(|(_, c, _)| *c).chain(layout::EXEC_START_CALLS.iter().map(|(_, c, _)| *c))
    {
        once(&mut all, call);
    }
    Ok((calls, all))
}

/// Reads and parses the kernel's BTF (`/sys/kernel/btf/vmlinux`), as
/// [`crate::Observer::load`] does before attaching the BTF-typed programs.
pub fn kernel_btf() -> Result<(), BpfError> {
    aya::Btf::from_sys_fs().map(drop).map_err(|source| BpfError::KernelBtf { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `SEC("tp_btf/…")`, `SEC("tracepoint/…")` (less the optional
    /// syscall ones) and `SEC("raw_tracepoint/…")` of the BPF source, as
    /// `(attach, category, name)`; `tp_btf` and raw names have no category.
    fn sections() -> Vec<(&'static str, Option<&'static str>, &'static str)> {
        let source = include_str!("bpf/observe.bpf.c");
        source
            .split("SEC(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter_map(|section| {
                let (kind, rest) = section.split_once('/')?;
                match rest.split_once('/') {
                    Some((category, name)) => Some((kind, Some(category), name)),
                    None => Some((kind, None, rest)),
                }
            })
            .filter(|(_, category, _)| *category != Some("syscalls"))
            .collect()
    }

    #[test]
    fn the_table_is_what_the_bpf_source_attaches() {
        let sections = sections();
        assert_eq!(sections.len(), HOOKS.len(), "{sections:?}");
        for hook in HOOKS {
            let found = sections.iter().any(|(kind, category, name)| {
                *kind == hook.attach.name() && *name == hook.name && category.is_none_or(|c| c == hook.category)
            });
            assert!(found, "{} ({}) is not a SEC() of observe.bpf.c: {sections:?}", hook.label(), hook.attach.name());
        }
    }

    #[test]
    fn every_checked_layout_is_a_hook() {
        for (category, name, _) in layout::TRACEPOINTS {
            assert!(HOOKS.iter().any(|h| h.category == *category && h.name == *name), "{category}:{name}");
        }
    }

    #[test]
    fn only_the_process_tree_is_required() {
        for hook in HOOKS {
            assert_eq!(hook.required, hook.category == "sched", "{}", hook.label());
        }
        let access: Vec<String> = filemap_access().map(Hook::label).collect();
        assert_eq!(access.len(), 3, "{access:?}");
        assert!(filemap_access().all(|hook| hook.since.is_some() && !hook.required));
        assert_eq!(by_label("filemap:mm_filemap_fault").map(|h| h.name), Some("mm_filemap_fault"));
        assert_eq!(by_label("mm_filemap_fault"), None);
    }

    #[test]
    fn a_missing_tracepoint_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = check(dir.path(), &HOOKS[3]).expect_err("empty tracefs");
        assert!(matches!(err, BpfError::MissingTracepoint { .. }), "{err}");
        assert!(err.to_string().contains("filemap:mm_filemap_get_pages"), "{err}");
    }
}
