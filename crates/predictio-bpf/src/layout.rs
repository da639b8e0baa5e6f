//! Start-up check of the tracepoint record layouts the BPF programs assume.
//!
//! Classic tracepoint programs read their record at offsets fixed when the C
//! was compiled (`src/bpf/kernel.h`). A kernel that moves a field would make
//! them report garbage silently, so before attaching, every field a program
//! reads is compared with the kernel's own description in
//! `TRACEFS/events/CATEGORY/NAME/format`. (The BTF-typed
//! programs on `mm_filemap_get_pages`, `_map_pages` and `_fault`, and kernel
//! structures read through CO-RE such as the task's `mm->exe_file`, need no
//! such check: the verifier knows their types and the loader relocates field
//! offsets by name against the kernel's BTF.)

use std::path::{Path, PathBuf};

use crate::BpfError;

/// One field a program reads: name, byte offset, byte size.
pub(crate) type Field = (&'static str, u32, u32);

/// The tracepoints the programs attach to, with the fields they always read.
pub(crate) const TRACEPOINTS: &[(&str, &str, &[Field])] = &[
    ("filemap", "mm_filemap_add_to_page_cache", &[("i_ino", 16, 8), ("index", 24, 8), ("s_dev", 32, 4)]),
    ("filemap", "mm_filemap_delete_from_page_cache", &[("i_ino", 16, 8), ("index", 24, 8), ("s_dev", 32, 4)]),
    ("sched", "sched_process_exec", &[]),
    ("sched", "sched_process_exit", &[]),
];

/// The path system calls whose `syscalls:sys_enter_CALL` tracepoint reports
/// lookups: the program, the call and the path argument it reads. A call
/// this kernel lacks (the legacy `open`, `stat`… exist only on some
/// architectures) is not attached; one whose path moved is refused.
pub(crate) const PATH_CALLS: &[(&str, &str, Field)] = &[
    ("pio_path_openat", "openat", ("filename", 24, 8)),
    ("pio_path_newfstatat", "newfstatat", ("filename", 24, 8)),
    ("pio_path_statx", "statx", ("filename", 24, 8)),
    ("pio_path_faccessat", "faccessat", ("filename", 24, 8)),
    ("pio_path_faccessat2", "faccessat2", ("filename", 24, 8)),
    ("pio_path_readlinkat", "readlinkat", ("pathname", 24, 8)),
    ("pio_path_execve", "execve", ("filename", 16, 8)),
    ("pio_path_open", "open", ("filename", 16, 8)),
    ("pio_path_newstat", "newstat", ("filename", 16, 8)),
    ("pio_path_newlstat", "newlstat", ("filename", 16, 8)),
    ("pio_path_access", "access", ("filename", 16, 8)),
    ("pio_path_readlink", "readlink", ("path", 16, 8)),
];

/// The exec calls whose `syscalls:sys_enter_CALL` tracepoint reports an exec
/// starting ([`predictio::Event::ExecStart`]): the program, the call and the
/// path and argument-vector arguments it reads. Attached with the path calls
/// (they need the same syscall tracing); a call this kernel lacks is not
/// attached, one whose arguments moved is refused.
pub(crate) const EXEC_START_CALLS: &[(&str, &str, [Field; 2])] = &[
    ("pio_exec_start", "execve", [("filename", 16, 8), ("argv", 24, 8)]),
    ("pio_exec_start_at", "execveat", [("filename", 24, 8), ("argv", 32, 8)]),
];

/// `sched:sched_process_exit`'s `group_dead` (Linux 6.16+): where the program
/// reads it. Older kernels lack it; the program then uses the leader's exit.
const GROUP_DEAD: Field = ("group_dead", 32, 1);

/// The folio tracepoints' `order` (newer kernels; the page-based ones of
/// Linux 5.14/5.15 lack it): where the programs read it. Without it a miss
/// or eviction is one page.
const FOLIO_ORDER: Field = ("order", 36, 1);

/// Where tracefs is mounted, if anywhere.
pub(crate) fn find_tracefs() -> Option<PathBuf> {
    ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.join("events").is_dir())
}

/// What the kernel's tracepoints offer beyond the required fields.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(crate) struct Layouts {
    /// `sched_process_exit` has `group_dead` where the program reads it.
    pub exit_has_group_dead: bool,
    /// `mm_filemap_add_to_page_cache` has `order` where the programs read
    /// it (false too when the tracepoint is absent).
    pub folio_has_order: bool,
    /// The [`PATH_CALLS`] this kernel has: (program, call).
    pub path_calls: Vec<(&'static str, &'static str)>,
    /// The [`EXEC_START_CALLS`] this kernel has: (program, call).
    pub exec_start_calls: Vec<(&'static str, &'static str)>,
}

/// Checks the tracepoints of [`TRACEPOINTS`] the observer needs (the
/// process tree's) under `tracefs`, and reads which optional fields this
/// kernel has. The optional tracepoints are checked one by one as they are
/// attached ([`crate::hooks::check`]).
pub(crate) fn check_all(tracefs: &Path) -> Result<Layouts, BpfError> {
    let mut exit_has_group_dead = false;
    let mut folio_has_order = false;
    for (category, name, fields) in TRACEPOINTS {
        let path = tracefs.join("events").join(category).join(name).join("format");
        let format = match std::fs::read_to_string(&path) {
            Ok(format) => format,
            Err(_) if *category == "filemap" => continue,
            Err(source) => {
                return Err(BpfError::MissingTracepoint { tracepoint: format!("{category}:{name}"), source });
            }
        };
        if *category != "filemap" {
            check(category, name, &format, fields)?;
        }
        if *name == "sched_process_exit" && parse_field(&format, GROUP_DEAD.0).is_some() {
            check(category, name, &format, &[GROUP_DEAD])?;
            exit_has_group_dead = true;
        }
        if *name == "mm_filemap_add_to_page_cache" && parse_field(&format, FOLIO_ORDER.0).is_some() {
            check(category, name, &format, &[FOLIO_ORDER])?;
            folio_has_order = true;
        }
    }
    let path_calls = syscalls_present(tracefs, PATH_CALLS.iter().map(|(p, c, f)| (*p, *c, std::slice::from_ref(f))))?;
    let exec_start_calls = syscalls_present(tracefs, EXEC_START_CALLS.iter().map(|(p, c, f)| (*p, *c, &f[..])))?;
    Ok(Layouts { exit_has_group_dead, folio_has_order, path_calls, exec_start_calls })
}

/// The (program, call) pairs of `calls` whose `syscalls:sys_enter_CALL`
/// tracepoint this kernel has, each checked against the fields its program
/// reads; a call the kernel lacks is left out, one whose fields moved is an
/// error.
pub(crate) fn syscalls_present<'a>(
    tracefs: &Path,
    calls: impl Iterator<Item = (&'static str, &'static str, &'a [Field])>,
) -> Result<Vec<(&'static str, &'static str)>, BpfError> {
    let mut present = Vec::new();
    for (program, call, fields) in calls {
        let name = format!("sys_enter_{call}");
        let path = tracefs.join("events/syscalls").join(&name).join("format");
        let Ok(format) = std::fs::read_to_string(&path) else { continue };
        check("syscalls", &name, &format, fields)?;
        present.push((program, call));
    }
    Ok(present)
}

/// Checks one tracepoint's `format` text against the fields a program reads.
pub(crate) fn check(category: &str, name: &str, format: &str, fields: &[Field]) -> Result<(), BpfError> {
    for &(field, offset, size) in fields {
        let found = parse_field(format, field);
        if found != Some((offset, size)) {
            return Err(BpfError::LayoutMismatch {
                tracepoint: format!("{category}:{name}"),
                field,
                expected: (offset, size),
                found,
            });
        }
    }
    Ok(())
}

/// Finds `field:TYPE NAME; offset:N; size:M;` (tab-separated) in a format file.
fn parse_field(format: &str, wanted: &str) -> Option<(u32, u32)> {
    for line in format.lines() {
        let mut parts = line.trim().split(';').map(str::trim);
        let Some(decl) = parts.next().and_then(|d| d.strip_prefix("field:")) else { continue };
        // The name is the last word of the declaration, less any `[N]`.
        let name = decl.rsplit(' ').next().unwrap_or("");
        let name = name.split('[').next().unwrap_or("");
        if name != wanted {
            continue;
        }
        let mut offset = None;
        let mut size = None;
        for part in parts {
            if let Some(v) = part.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = part.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        return offset.zip(size);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const GET_PAGES: &str = "name: mm_filemap_get_pages
ID: 470
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:unsigned long i_ino;	offset:8;	size:8;	signed:0;
	field:dev_t s_dev;	offset:16;	size:4;	signed:0;
	field:unsigned long index;	offset:24;	size:8;	signed:0;
	field:unsigned long last_index;	offset:32;	size:8;	signed:0;
";

    const GET_PAGES_FIELDS: &[Field] = &[("i_ino", 8, 8), ("s_dev", 16, 4), ("index", 24, 8), ("last_index", 32, 8)];

    #[test]
    fn accepts_matching_layout() {
        check("filemap", "mm_filemap_get_pages", GET_PAGES, GET_PAGES_FIELDS).expect("layout of Linux 6.18");
    }

    #[test]
    fn rejects_moved_or_missing_field() {
        let moved = GET_PAGES.replace("offset:24;", "offset:28;");
        let err = check("filemap", "mm_filemap_get_pages", &moved, GET_PAGES_FIELDS).expect_err("moved");
        assert!(matches!(err, BpfError::LayoutMismatch { field: "index", found: Some((28, 8)), .. }), "{err}");
        let err = check("filemap", "x", GET_PAGES, &[("group_dead", 32, 1)]).expect_err("missing");
        assert!(matches!(err, BpfError::LayoutMismatch { found: None, .. }), "{err}");
    }

    /// Linux 5.15's record of `mm_filemap_add_to_page_cache`: pages, no
    /// order; what the programs always read is where they read it.
    #[test]
    fn a_page_record_without_order_passes() {
        let page = "\tfield:unsigned long pfn;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned long i_ino;\toffset:16;\tsize:8;\tsigned:0;
\tfield:unsigned long index;\toffset:24;\tsize:8;\tsigned:0;
\tfield:dev_t s_dev;\toffset:32;\tsize:4;\tsigned:0;";
        let (_, _, fields) = TRACEPOINTS[0];
        check("filemap", "mm_filemap_add_to_page_cache", page, fields).expect("5.15 layout");
        assert_eq!(parse_field(page, FOLIO_ORDER.0), None);
    }

    #[test]
    fn array_field_names() {
        let exit = "\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;";
        assert_eq!(parse_field(exit, "comm"), Some((8, 16)));
        assert_eq!(parse_field(exit, "group_dead"), Some((32, 1)));
    }

    #[test]
    fn this_kernel_matches() {
        match find_tracefs() {
            Some(tracefs) => {
                let layouts = check_all(&tracefs).expect("this kernel's layouts");
                let add = tracefs.join("events/filemap/mm_filemap_add_to_page_cache/format");
                let has_order = std::fs::read_to_string(add).is_ok_and(|f| f.contains(" order;"));
                assert_eq!(layouts.folio_has_order, has_order);
                let calls: Vec<&str> = layouts.path_calls.iter().map(|(_, call)| *call).collect();
                for call in ["openat", "newfstatat", "execve"] {
                    assert!(calls.contains(&call), "{call} not among {calls:?}");
                }
                let starts: Vec<&str> = layouts.exec_start_calls.iter().map(|(_, call)| *call).collect();
                assert_eq!(starts, ["execve", "execveat"]);
            }
            None => eprintln!("skipping: tracefs is not mounted"),
        }
    }
}
