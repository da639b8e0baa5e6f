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

/// Where tracefs may be mounted, in the order they are tried: its own
/// mount point (Linux 4.1+), and the one under debugfs that older setups
/// (and some distributions' defaults) still use. The first is where it is
/// mounted when neither holds it.
pub(crate) const TRACEFS_MOUNTS: [&str; 2] = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"];

/// What one candidate mount point of tracefs holds.
#[derive(Debug)]
pub(crate) enum TracefsAt {
    /// tracefs, readable: its `events/` directory is there.
    Ready,
    /// Something this user may not look into (tracefs is root-only by
    /// default): mounting again would not help.
    Denied(std::io::Error),
    /// Nothing (not mounted, or not a directory at all).
    Absent,
}

impl TracefsAt {
    /// What `mount` holds, looked at on this machine.
    fn look(mount: &Path) -> TracefsAt {
        match std::fs::metadata(mount.join("events")) {
            Ok(meta) if meta.is_dir() => TracefsAt::Ready,
            Err(err) if err.kind() == std::io::ErrorKind::PermissionDenied => TracefsAt::Denied(err),
            _ => TracefsAt::Absent,
        }
    }
}

/// Which tracefs to read, from what each candidate holds
/// ([`TRACEFS_MOUNTS`], in order).
#[derive(Debug)]
pub(crate) enum TracefsChoice {
    /// Read the tracefs mounted here.
    Use(PathBuf),
    /// None is mounted: mount one here, then read it.
    Mount(PathBuf),
    /// The first candidate this user may not look into, and why.
    Denied(PathBuf, std::io::Error),
    /// None is mounted and mounting was not asked for.
    Absent,
}

/// The first readable tracefs; else, when one is there but unreadable, that
/// one (mounting another would not make it readable); else the first
/// candidate to mount it at, if `mount`.
pub(crate) fn choose_tracefs(candidates: Vec<(PathBuf, TracefsAt)>, mount: bool) -> TracefsChoice {
    let first = candidates.first().map(|(path, _)| path.clone());
    let mut denied = None;
    for (path, at) in candidates {
        match at {
            TracefsAt::Ready => return TracefsChoice::Use(path),
            TracefsAt::Denied(err) if denied.is_none() => denied = Some((path, err)),
            TracefsAt::Denied(_) | TracefsAt::Absent => {}
        }
    }
    match (denied, first) {
        (Some((path, err)), _) => TracefsChoice::Denied(path, err),
        (None, Some(path)) if mount => TracefsChoice::Mount(path),
        (None, _) => TracefsChoice::Absent,
    }
}

/// What each of [`TRACEFS_MOUNTS`] holds on this machine.
fn look_at_tracefs_mounts() -> Vec<(PathBuf, TracefsAt)> {
    TRACEFS_MOUNTS
        .into_iter()
        .map(|mount| {
            let path = PathBuf::from(mount);
            let at = TracefsAt::look(&path);
            (path, at)
        })
        .collect()
}

/// Where tracefs is mounted and readable, if anywhere.
pub(crate) fn find_tracefs() -> Option<PathBuf> {
    match choose_tracefs(look_at_tracefs_mounts(), false) {
        TracefsChoice::Use(path) => Some(path),
        _ => None,
    }
}

/// Where tracefs is mounted and readable; when it is mounted nowhere and
/// `mount` is set, mounts it at `/sys/kernel/tracing` first (needs
/// `CAP_SYS_ADMIN`). The error says which mount point was looked at.
pub(crate) fn find_or_mount_tracefs(mount: bool) -> std::io::Result<PathBuf> {
    let path = match choose_tracefs(look_at_tracefs_mounts(), mount) {
        TracefsChoice::Use(path) => return Ok(path),
        TracefsChoice::Denied(path, err) => {
            return Err(std::io::Error::new(err.kind(), format!("{}: {err}", path.display())));
        }
        TracefsChoice::Absent => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("mounted at neither {}", TRACEFS_MOUNTS.join(" nor ")),
            ));
        }
        TracefsChoice::Mount(path) => path,
    };
    crate::sys::mount_tracefs(&path)
        .map_err(|err| std::io::Error::new(err.kind(), format!("mounting it at {}: {err}", path.display())))?;
    match TracefsAt::look(&path) {
        TracefsAt::Ready => Ok(path),
        _ => Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("mounted at {}, but events/ is missing", path.display()),
        )),
    }
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

    fn candidates(states: Vec<TracefsAt>) -> Vec<(PathBuf, TracefsAt)> {
        TRACEFS_MOUNTS.into_iter().map(PathBuf::from).zip(states).collect()
    }

    fn denied() -> TracefsAt {
        TracefsAt::Denied(std::io::ErrorKind::PermissionDenied.into())
    }

    #[test]
    fn tracefs_is_read_where_it_is_mounted_and_mounted_only_where_it_is_nowhere() {
        use TracefsAt::{Absent, Ready};
        let chosen = |states, mount| match choose_tracefs(candidates(states), mount) {
            TracefsChoice::Use(path) => format!("use {}", path.display()),
            TracefsChoice::Mount(path) => format!("mount {}", path.display()),
            TracefsChoice::Denied(path, _) => format!("denied {}", path.display()),
            TracefsChoice::Absent => "absent".to_owned(),
        };
        assert_eq!(chosen(vec![Ready, Ready], true), "use /sys/kernel/tracing");
        // Only under debugfs (the automount of older setups): read there,
        // mount nothing.
        assert_eq!(chosen(vec![Absent, Ready], true), "use /sys/kernel/debug/tracing");
        assert_eq!(chosen(vec![denied(), Ready], true), "use /sys/kernel/debug/tracing");
        // Mounted but root-only: mounting again would not help.
        assert_eq!(chosen(vec![denied(), Absent], true), "denied /sys/kernel/tracing");
        assert_eq!(chosen(vec![Absent, denied()], true), "denied /sys/kernel/debug/tracing");
        // Nowhere: mounted at its own mount point, if asked to.
        assert_eq!(chosen(vec![Absent, Absent], true), "mount /sys/kernel/tracing");
        assert_eq!(chosen(vec![Absent, Absent], false), "absent");
        assert_eq!(chosen(vec![], true), "absent");
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
