//! `predictio doctor`: what of predictio works on this machine, and why the
//! rest does not.
//!
//! Every check asks the kernel the way the code that depends on it does:
//! the eBPF observer is loaded and attached (as the daemon loads it), the
//! perf fallback and fanotify are opened, `cachestat`, `preadv2(RWF_NOWAIT)`,
//! io_uring and `PROCMAP_QUERY` are called, and the tracepoints are checked
//! with the observer's own layout check ([`predictio_bpf::hooks`]). Each
//! check says what it affects and the fix; a summary says which of
//! predictio's capabilities work. The observer, perf events and fanotify
//! group are closed at once; the one lasting change is the daemon's own: as
//! root, loading the observer mounts tracefs where it is not mounted. The
//! command exits 0 whatever it finds.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use anyhow::Result;
use predictio::executor::BackendKind;
use predictio::os::NewerCall;
use predictio_bpf::FollowAllLookups;
use predictio_bpf::fallback::{FanotifyConfig, FanotifyObserver};
use predictio_bpf::hooks::{self, Attach};
use predictio_bpf::perf::{PerfConfig, PerfObserver};
use predictio_daemon::config::{AssumedMissing, Config};
use serde::Serialize;

/// Arguments of `doctor`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = AFTER_HELP)]
pub struct Args {
    /// Print one JSON object instead of text: `kernel`, `euid`, `checks`
    /// (each with `group`, `name`, `status` — ok, degraded or missing —,
    /// `detail`, `affects`, `fix`) and `capabilities` (`name`, `status`,
    /// `detail`).
    #[arg(long)]
    json: bool,
    /// The daemon's configuration, for its control socket, observation
    /// source, fanotify mounts and io_uring depth. Default:
    /// /etc/predictio/predictio.toml if it exists, else built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
}

const AFTER_HELP: &str = "\
Run it as root to see what the daemon (which runs as root) can do: as
another user, the privileged probes (eBPF, perf, fanotify, tracefs) report
what that user may do.

Statuses:
  ok        works here
  degraded  works, with a fallback or less information
  missing   does not work here; `fix` says what would make it work

The checks, by group:
  Observation  tracefs, the kernel's BTF, the BPF object in this binary,
               each tracepoint the eBPF observer attaches to (layouts checked
               as the observer checks them), the optional syscall
               tracepoints, and a real load of the eBPF observer and of each
               fallback (perf tracepoints)
  Calls        cachestat(2), on a file of its own and on another user's
               read-only file (as the daemon's unit would call it),
               preadv2(RWF_NOWAIT), io_uring, PROCMAP_QUERY, fanotify
  Privileges   euid, the capabilities the service uses (CapEff),
               kernel.unprivileged_bpf_disabled, kernel.perf_event_paranoid
  Resources    RLIMIT_MEMLOCK, the page size
  Cgroups      the hierarchy (v2, hybrid, v1), the memory controller (v2 or v1),
               PSI
  Daemon       the configuration, a running daemon (its control socket) and
               the observation source it would run on here

Examples:
  sudo predictio doctor
  sudo predictio doctor --json | jq '.checks[] | select(.status != \"ok\")'";

/// How a check came out.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Status {
    /// Works.
    Ok,
    /// Works with a fallback or less information.
    Degraded,
    /// Does not work here.
    Missing,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Degraded => "degraded",
            Status::Missing => "missing",
        }
    }
}

/// The section a check is printed under.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Group {
    Observation,
    Calls,
    Privileges,
    Resources,
    Cgroups,
    Daemon,
}

impl Group {
    const ALL: [Group; 6] =
        [Group::Observation, Group::Calls, Group::Privileges, Group::Resources, Group::Cgroups, Group::Daemon];

    fn title(self) -> &'static str {
        match self {
            Group::Observation => "Observation",
            Group::Calls => "Calls",
            Group::Privileges => "Privileges",
            Group::Resources => "Resources",
            Group::Cgroups => "Cgroups",
            Group::Daemon => "Daemon",
        }
    }
}

/// One thing looked at.
#[derive(Serialize, Debug)]
struct Check {
    group: Group,
    name: String,
    status: Status,
    /// What was found.
    detail: String,
    /// What in predictio depends on it.
    affects: String,
    /// What would make it work (none when it does).
    fix: Option<String>,
}

/// One of predictio's capabilities, and whether it works here.
#[derive(Serialize, Debug)]
struct Capability {
    name: &'static str,
    status: Status,
    detail: String,
}

/// Everything `doctor` found.
#[derive(Serialize, Debug)]
struct Report {
    /// `/proc/sys/kernel/osrelease`.
    kernel: String,
    /// The effective uid the probes ran as.
    euid: Option<u32>,
    /// The features the configuration's `[observe] assume_missing` takes
    /// away, as the daemon would run: each is reported missing.
    assumed_missing: Vec<&'static str>,
    checks: Vec<Check>,
    capabilities: Vec<Capability>,
}

/// Runs `doctor`.
pub fn run(args: Args) -> Result<()> {
    let report = examine(args.config.as_deref());
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        write_text(&mut out, &report)?;
    }
    Ok(())
}

/// What the capability summary is built from.
#[derive(Default, Clone, Copy)]
struct Found {
    ebpf: bool,
    /// The observer that opened reports page hits (the page-access
    /// tracepoints of Linux 6.11+ attached), not misses alone.
    hits: bool,
    perf: bool,
    fanotify: bool,
    cachestat: bool,
    /// `cachestat` answers on files the caller may not write.
    cachestat_read_only: bool,
    nowait: bool,
    psi: bool,
    memcg: bool,
    /// The memory controller is on cgroup v1 (limits, no per-cgroup PSI).
    memcg_v1: bool,
    ptrace_or_root: bool,
}

/// A check under construction: `ok`, `degraded` or `missing` fill in the
/// status, detail and fix.
struct Probe<'a> {
    checks: &'a mut Vec<Check>,
    group: Group,
}

impl Probe<'_> {
    fn add(&mut self, name: impl Into<String>, status: Status, detail: String, affects: &str, fix: Option<String>) {
        let fix = if status == Status::Ok { None } else { fix };
        self.checks.push(Check { group: self.group, name: name.into(), status, detail, affects: affects.into(), fix });
    }
}

/// Runs every check.
fn examine(config_path: Option<&Path>) -> Report {
    let kernel = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|_| "unknown".into());
    let version = kernel_version(&kernel);
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status_field(&status, "Uid:").and_then(|uids| uids.split_whitespace().nth(1)?.parse().ok());
    let caps = status_field(&status, "CapEff:").and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok());
    let has_cap = |bit: u32| caps.is_some_and(|c| c & (1 << bit) != 0);
    let loaded = Config::load_from(config_path);
    let config = loaded.as_ref().map(|(c, _)| c.clone()).unwrap_or_default();
    // As the daemon runs: the calls the configuration takes away fail from
    // here on, and the hooks it takes away are not attached.
    AssumedMissing::apply(&config.observe.assume_missing);
    let assumed_missing: Vec<&'static str> = config.observe.assume_missing.iter().map(|f| f.name()).collect();

    let mut checks = Vec::new();
    let mut found = Found { ptrace_or_root: euid == Some(0) || has_cap(CAP_SYS_PTRACE), ..Found::default() };
    observation(&mut Probe { checks: &mut checks, group: Group::Observation }, &config, &mut found);
    calls(&mut Probe { checks: &mut checks, group: Group::Calls }, &config, &mut found);
    privileges(&mut Probe { checks: &mut checks, group: Group::Privileges }, euid, caps);
    resources(&mut Probe { checks: &mut checks, group: Group::Resources }, version, has_cap(CAP_IPC_LOCK));
    cgroups(&mut Probe { checks: &mut checks, group: Group::Cgroups }, &mut found);
    daemon(&mut Probe { checks: &mut checks, group: Group::Daemon }, &loaded, &config, &found);
    let capabilities = capabilities(&found);
    Report { kernel, euid, assumed_missing, checks, capabilities }
}

// Capability bits (linux/capability.h).
const CAP_DAC_READ_SEARCH: u32 = 2;
const CAP_IPC_LOCK: u32 = 14;
const CAP_SYS_PTRACE: u32 = 19;
const CAP_SYS_ADMIN: u32 = 21;
const CAP_PERFMON: u32 = 38;
const CAP_BPF: u32 = 39;

const AS_ROOT: &str = "run as root: the systemd unit (dist/predictio.service) runs the daemon as root with \
                       CAP_BPF CAP_PERFMON CAP_SYS_ADMIN CAP_DAC_READ_SEARCH CAP_SYS_PTRACE CAP_FOWNER";

fn observation(p: &mut Probe<'_>, config: &Config, found: &mut Found) {
    let tracefs = hooks::find_tracefs();
    match &tracefs {
        Some(path) => p.add("tracefs", Status::Ok, format!("mounted at {}", path.display()), TRACEFS_AFFECTS, None),
        None => {
            let mounted = mount_of_type("tracefs");
            let (status, detail, fix) = match mounted {
                Some(at) => (
                    Status::Degraded,
                    format!("mounted at {at}, but its events/ cannot be read by this user"),
                    AS_ROOT.to_owned(),
                ),
                None => (
                    Status::Missing,
                    "not mounted at /sys/kernel/tracing or /sys/kernel/debug/tracing".to_owned(),
                    "mount -t tracefs nodev /sys/kernel/tracing (the daemon, as root, mounts it itself, and so \
                     does the eBPF observer check below)"
                        .to_owned(),
                ),
            };
            p.add("tracefs", status, detail, TRACEFS_AFFECTS, Some(fix));
        }
    }

    let btf = hooks::kernel_btf();
    let no_btf = config.observe.assume_missing.contains(&AssumedMissing::Btf);
    p.add(
        "BTF",
        if btf.is_ok() && !no_btf { Status::Ok } else { Status::Missing },
        match &btf {
            Ok(()) if no_btf => format!("{ASSUMED} (the kernel has it)"),
            Ok(()) => "/sys/kernel/btf/vmlinux read and parsed".into(),
            Err(err) => err.to_string(),
        },
        "eBPF observation: the BTF-typed page-access programs and the CO-RE reads of exec and fork",
        Some(if no_btf {
            "remove it from [observe] assume_missing".into()
        } else {
            "a kernel built with CONFIG_DEBUG_INFO_BTF=y (the stock kernels of RHEL 9, Ubuntu 22.04+ and \
             Debian 12 are); without it the daemon falls back to perf tracepoints"
                .into()
        }),
    );

    let built = predictio_bpf::available();
    p.add(
        "BPF object",
        if built.is_ok() { Status::Ok } else { Status::Missing },
        match built {
            Ok(()) => "built into this binary".into(),
            Err(why) => format!("not in this build: {why}"),
        },
        "eBPF observation",
        Some(
            "rebuild with clang and libbpf-dev installed (scripts/deps.sh); PREDICTIO_BPF_REQUIRE=1 makes a \
             build without them fail"
                .into(),
        ),
    );

    let assumed: Vec<String> = config.observe.assume_missing.iter().flat_map(|f| f.hooks()).collect();
    for hook in hooks::HOOKS {
        if assumed.contains(&hook.label()) {
            p.add(
                hook.label(),
                Status::Missing,
                format!("{ASSUMED} (the kernel has it)"),
                hook.feeds,
                Some("remove it from [observe] assume_missing".into()),
            );
        } else {
            tracepoint(p, tracefs.as_deref(), hook);
        }
    }
    syscall_tracepoints(p, tracefs.as_deref());

    // The real thing, as the daemon does it (every process, no lookups),
    // closed again without waiting for the kernel to detach.
    let ebpf =
        predictio_daemon::sources::load_observer_without(true, FollowAllLookups::None, &config.observe.assume_missing);
    found.ebpf = ebpf.is_ok();
    p.add(
        "eBPF observer",
        if found.ebpf { Status::Ok } else { Status::Missing },
        match ebpf {
            Ok(observer) => {
                let missing: Vec<String> = observer.missing_hooks().iter().map(|m| m.hook.label()).collect();
                found.hits = missing.is_empty();
                observer.close_in_background();
                if missing.is_empty() {
                    "loaded and attached to every tracepoint above (every process), then closed".into()
                } else {
                    format!("loaded and attached without {} (every process), then closed", missing.join(", "))
                }
            }
            Err(err) => format!("does not load: {err}"),
        },
        "the daemon's first choice of observation: page accesses, misses, evictions, execs, forks and exits \
         (launch learning, B-tree and tensor observation, waste accounting)",
        Some(format!("see the checks above it; {AS_ROOT}")),
    );

    let perf = PerfObserver::open(PerfConfig {
        follow_all: true,
        pid: None,
        assume_missing: assumed,
        ..PerfConfig::default()
    });
    found.perf = perf.is_ok();
    let perf_missing: Vec<String> =
        perf.as_ref().map(|o| o.missing_hooks().iter().map(|m| m.hook.label()).collect()).unwrap_or_default();
    if !found.ebpf {
        found.hits = found.perf && perf_missing.is_empty();
    }
    p.add(
        "perf tracepoints",
        if found.perf { Status::Ok } else { Status::Missing },
        match perf {
            Ok(_) if perf_missing.is_empty() => {
                "the same tracepoints opened with perf_event_open on every CPU, then closed".into()
            }
            Ok(_) => format!("opened on every CPU without {}, then closed", perf_missing.join(", ")),
            Err(err) => format!("do not open: {err}"),
        },
        "the first fallback source: the same events as eBPF at about twice the cost per record, with no \
         device or cgroup filter",
        Some(format!(
            "needs the sched tracepoints and filemap's add and delete ones above (the page-access ones \
             where the kernel has them), readable tracefs, and CAP_PERFMON (or \
             kernel.perf_event_paranoid=-1 for one command tree); {AS_ROOT}"
        )),
    );
}

/// The detail of a feature the configuration takes away.
const ASSUMED: &str = "assumed missing ([observe] assume_missing)";

const TRACEFS_AFFECTS: &str = "eBPF and perf observation: tracepoint layouts and ids are read from it";

/// One tracepoint of the observer.
fn tracepoint(p: &mut Probe<'_>, tracefs: Option<&Path>, hook: &hooks::Hook) {
    let attach = match hook.attach {
        Attach::BtfTracepoint => "BTF-typed tracepoint",
        Attach::Tracepoint => "tracepoint, layout checked",
        Attach::RawTracepoint => "raw tracepoint",
    };
    let Some(tracefs) = tracefs else {
        p.add(
            hook.label(),
            Status::Degraded,
            "not checked: tracefs cannot be read here".into(),
            hook.feeds,
            Some("see tracefs above".into()),
        );
        return;
    };
    match hooks::check(tracefs, hook) {
        Ok(()) => {
            let mut detail = format!("present ({attach})");
            if hook.name == "sched_process_exit" && !hooks::exit_has_group_dead(tracefs) {
                detail.push_str("; no group_dead field (before Linux 6.16): a process's end is its leader's exit");
            }
            p.add(hook.label(), Status::Ok, detail, hook.feeds, None);
        }
        Err(err) => {
            let since = hook.since.map(|s| format!(" (added in {s})")).unwrap_or_default();
            let fix = match (&err, hook.since) {
                (predictio_bpf::BpfError::MissingTracepoint { .. }, Some(since)) => format!(
                    "a kernel with this tracepoint ({since} or later); without it the eBPF and perf observers \
                     run without its events (launches are learned from page-cache misses)"
                ),
                (predictio_bpf::BpfError::MissingTracepoint { .. }, None) => {
                    "a kernel built with CONFIG_TRACEPOINTS and CONFIG_FTRACE".into()
                }
                _ => "this kernel's record layout differs from the one the programs read: report it with the \
                      format file's text"
                    .into(),
            };
            p.add(hook.label(), Status::Missing, format!("{err}{since}"), hook.feeds, Some(fix));
        }
    }
}

/// The optional `syscalls:sys_enter_*` tracepoints.
fn syscall_tracepoints(p: &mut Probe<'_>, tracefs: Option<&Path>) {
    const NAME: &str = "syscalls:sys_enter_*";
    const AFFECTS: &str = "path lookups recorded by launch learning ([launch] lookups, predictio record) and \
                           replay at an exec's start (execve entered) rather than its end";
    let Some(tracefs) = tracefs else {
        p.add(NAME, Status::Degraded, "not checked: tracefs cannot be read here".into(), AFFECTS, None);
        return;
    };
    match hooks::syscall_hooks(tracefs) {
        Ok((present, all)) => {
            let absent: Vec<&str> = all.iter().filter(|c| !present.contains(c)).copied().collect();
            let status = if present.contains(&"execve") && present.contains(&"openat") {
                Status::Ok
            } else if present.is_empty() {
                Status::Missing
            } else {
                Status::Degraded
            };
            let mut detail = format!("{} of {} calls: {}", present.len(), all.len(), present.join(" "));
            if !absent.is_empty() {
                detail.push_str(&format!(
                    "; absent: {} (the legacy calls exist on some architectures only)",
                    absent.join(" ")
                ));
            }
            p.add(
                NAME,
                status,
                detail,
                AFFECTS,
                Some("a kernel built with CONFIG_FTRACE_SYSCALLS=y (stock distribution kernels are)".into()),
            );
        }
        Err(err) => p.add(
            NAME,
            Status::Missing,
            err.to_string(),
            AFFECTS,
            Some("this kernel's record layout differs from the one the programs read: report it".into()),
        ),
    }
}

fn calls(p: &mut Probe<'_>, config: &Config, found: &mut Found) {
    cachestat(p, found);
    // A file surely on a real filesystem and surely cached: this binary.
    match std::env::current_exe().and_then(std::fs::File::open) {
        Ok(file) => nowait(p, &file, found),
        Err(err) => p.add(
            "preadv2(RWF_NOWAIT)",
            Status::Missing,
            format!("not probed: cannot open this binary: {err}"),
            NOWAIT_AFFECTS,
            Some("run it from a readable binary".into()),
        ),
    }

    let executor = config.executor_config();
    let disabled = read_trimmed("/proc/sys/kernel/io_uring_disabled").ok();
    let (_backend, fallback) =
        predictio::executor::backend::open_backend(BackendKind::Uring, executor.io_depth, executor.limits.max_io_pages);
    let sysctl = match disabled.as_deref() {
        _ if predictio::os::assumed_missing(NewerCall::IoUring) => ASSUMED.to_owned(),
        Some(v) => format!("kernel.io_uring_disabled = {v}"),
        None => "no kernel.io_uring_disabled (before Linux 6.6: not restricted)".to_owned(),
    };
    let fix = match disabled.as_deref() {
        Some("2") => "sysctl kernel.io_uring_disabled=0 (2 refuses io_uring to everyone)".to_owned(),
        Some("1") => {
            "sysctl kernel.io_uring_disabled=0, or run as root or in the group kernel.io_uring_group names".to_owned()
        }
        _ => "Linux 5.1 or later with io_uring enabled; a container's seccomp profile may block io_uring_setup"
            .to_owned(),
    };
    p.add(
        "io_uring",
        if fallback.is_none() { Status::Ok } else { Status::Missing },
        match &fallback {
            None => format!("a ring of depth {} set up; {sysctl}", executor.io_depth),
            Some(why) => format!("{why}; {sysctl}"),
        },
        "the uring executor backend ([executor] backend = \"uring\", prefetch --backend uring; fadvise, the \
         default, needs nothing) and predictio read (pread threads without it)",
        Some(fix),
    );

    let procmap = std::fs::File::open("/proc/self/maps")
        .and_then(|maps| predictio::os::file_mappings(maps.as_fd(), 1, &mut Vec::new()));
    let (status, detail) = match procmap {
        Ok(()) => (Status::Ok, "answers on /proc/self/maps (Linux 6.11+)".to_owned()),
        Err(_) if predictio::os::assumed_missing(NewerCall::ProcmapQuery) => {
            (Status::Degraded, format!("{ASSUMED}: mapped files are found by reading the maps text"))
        }
        Err(err) if err.raw_os_error() == Some(libc::ENOTTY) => (
            Status::Degraded,
            "ENOTTY: not in this kernel (added in Linux 6.11); mapped files are found by reading the maps text"
                .to_owned(),
        ),
        Err(err) => (Status::Degraded, format!("fails ({err}); mapped files are found by reading the maps text")),
    };
    p.add(
        "PROCMAP_QUERY",
        status,
        detail,
        "resolving observed files that processes map (the daemon's CPU next to programs with many mappings)",
        Some("Linux 6.11 or later".into()),
    );

    let mounts = config.observe.fanotify_mounts.clone();
    let fanotify = FanotifyObserver::new(&FanotifyConfig { mounts: mounts.clone(), whole_filesystems: true });
    found.fanotify = fanotify.is_ok();
    let shown: Vec<String> = mounts.iter().map(|m| m.display().to_string()).collect();
    p.add(
        "fanotify",
        if found.fanotify { Status::Ok } else { Status::Missing },
        match fanotify {
            Ok(_) => format!("a group marking {} (whole filesystems) created, then closed", shown.join(" ")),
            Err(err) => err.to_string(),
        },
        "the last observation fallback: execs and file opens only (launch replay at exec, no learning)",
        Some(format!("CAP_SYS_ADMIN and a kernel with CONFIG_FANOTIFY; {AS_ROOT}")),
    );
}

const CACHESTAT_AFFECTS: &str = "residency (predictio residency, the executor's skip of resident pages; mincore \
                                 without it), and everything that reads cached pages only: B-tree observation, \
                                 model headers (tensor observation)";

/// `cachestat(2)`: whether the kernel has it (on a file of our own), and
/// whether it answers on a file the caller may not write. Newer kernels
/// (and their stable updates) restrict it, as `mincore` is, to files the
/// caller may write or owns (or `CAP_FOWNER`/`CAP_DAC_OVERRIDE`); the
/// daemon's unit grants `CAP_FOWNER` for it.
fn cachestat(p: &mut Probe<'_>, found: &mut Found) {
    let own = tempfile::NamedTempFile::new();
    let result = own
        .as_ref()
        .map_err(|err| std::io::Error::new(err.kind(), err.to_string()))
        .and_then(|file| predictio::os::cachestat(file.as_file().as_fd(), 0, predictio::PAGE_SIZE));
    found.cachestat = result.is_ok();
    let (status, detail, fix) = match result {
        Ok(_) => (Status::Ok, "answers (Linux 6.5+)".to_owned(), None),
        Err(_) if predictio::os::assumed_missing(NewerCall::Cachestat) => (
            Status::Missing,
            format!("{ASSUMED}: residency falls back to mincore(2)"),
            Some("remove it from [observe] assume_missing".to_owned()),
        ),
        Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => (
            Status::Missing,
            "ENOSYS: this kernel has no cachestat (added in Linux 6.5); residency falls back to mincore(2)".to_owned(),
            Some("Linux 6.5 or later".to_owned()),
        ),
        Err(err) => (
            Status::Missing,
            format!("fails on a file of this process's own: {err}"),
            Some("a seccomp filter may block it: allow cachestat (syscall 451)".to_owned()),
        ),
    };
    p.add("cachestat(2)", status, detail, CACHESTAT_AFFECTS, fix);

    const NAME: &str = "cachestat on read-only files";
    const AFFECTS: &str = "files the caller may not write: predictio residency as a user; for the daemon without \
                           CAP_FOWNER, other users' files: the executor's residency checks, B-tree observation and \
                           model headers (they read cached pages only after cachestat)";
    const FIX: &str = "CAP_FOWNER for the daemon (dist/predictio.service grants it); a user can only ask about \
                       files they may write";
    let Ok(own) = own else { return };
    if !found.cachestat {
        let detail = "not checked: cachestat does not answer at all".to_owned();
        p.add(NAME, Status::Missing, detail, AFFECTS, Some("see cachestat(2)".into()));
        return;
    }
    match foreign_cachestat(own.path()) {
        Ok(how) => {
            found.cachestat_read_only = true;
            p.add(NAME, Status::Ok, format!("answers ({how})"), AFFECTS, None);
        }
        Err(err) if err.raw_os_error() == Some(libc::EPERM) => p.add(
            NAME,
            Status::Degraded,
            format!(
                "EPERM: this kernel answers cachestat only for files the caller may write or owns, or with \
                 CAP_FOWNER, as for mincore (a permission check of newer kernels and their stable updates); tried as {}",
                if rustix::process::geteuid().is_root() {
                    "root with the systemd unit's capabilities (CAP_FOWNER, not CAP_DAC_OVERRIDE), on a file of \
                     another user"
                } else {
                    "this user on /etc/passwd"
                }
            ),
            AFFECTS,
            Some(FIX.into()),
        ),
        Err(err) => p.add(NAME, Status::Degraded, format!("not checked: {err}"), AFFECTS, None),
    }
}

/// `cachestat` on a file the caller may read but not write, as the daemon
/// under its unit would be: as root, `own` given to `nobody` (mode 0644)
/// and asked from a thread without `CAP_DAC_OVERRIDE`, which the unit
/// does not grant (capabilities are per thread); as another user, `/etc/passwd`. Says
/// what was tried.
fn foreign_cachestat(own: &Path) -> std::io::Result<&'static str> {
    use rustix::thread::{CapabilitySet, capabilities, set_capabilities};
    use std::os::unix::fs::PermissionsExt;
    if !rustix::process::geteuid().is_root() {
        let file = std::fs::File::open("/etc/passwd")?;
        predictio::os::cachestat(file.as_fd(), 0, predictio::PAGE_SIZE)?;
        return Ok("on /etc/passwd, which this user may not write");
    }
    const NOBODY: u32 = 65534;
    std::os::unix::fs::chown(own, Some(NOBODY), Some(NOBODY))?;
    std::fs::set_permissions(own, std::fs::Permissions::from_mode(0o644))?;
    let file = std::fs::File::open(own)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let mut sets = capabilities(None)?;
                sets.effective.remove(CapabilitySet::DAC_OVERRIDE);
                set_capabilities(None, sets)?;
                predictio::os::cachestat(file.as_fd(), 0, predictio::PAGE_SIZE)
            })
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the probe thread panicked")))
    })?;
    Ok("as root with the unit's capabilities (CAP_FOWNER, not CAP_DAC_OVERRIDE), on a file of another user")
}

const NOWAIT_AFFECTS: &str = "B-tree observation and model headers read from cached pages only (never causing I/O)";

/// `preadv2(RWF_NOWAIT)` on the first page of `file`, read first so that it
/// is cached: the call B-tree and model-header observation read with.
fn nowait(p: &mut Probe<'_>, file: &std::fs::File, found: &mut Found) {
    use std::os::unix::fs::FileExt;
    let mut buf = [0u8; 512];
    let warmed = file.read_at(&mut buf, 0);
    let read = warmed.map_err(|err| rustix::io::Errno::from_io_error(&err)).and_then(|_| {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        rustix::io::preadv2(file, &mut iov, 0, rustix::io::ReadWriteFlags::NOWAIT).map_err(Some)
    });
    found.nowait = read.is_ok();
    let (status, detail) = match read {
        Ok(n) => (Status::Ok, format!("read {n} cached bytes without waiting")),
        Err(Some(rustix::io::Errno::OPNOTSUPP)) => {
            (Status::Missing, "EOPNOTSUPP: this filesystem does not support RWF_NOWAIT".into())
        }
        Err(Some(err)) => (Status::Missing, format!("fails: {err}")),
        Err(None) => (Status::Missing, "not probed: reading the file failed".into()),
    };
    p.add(
        "preadv2(RWF_NOWAIT)",
        status,
        detail,
        NOWAIT_AFFECTS,
        Some("Linux 4.14 or later, on a filesystem that supports it (ext4, xfs, btrfs do)".into()),
    );
}

fn privileges(p: &mut Probe<'_>, euid: Option<u32>, caps: Option<u64>) {
    match euid {
        Some(0) => p.add("euid", Status::Ok, "0 (root)".into(), "", None),
        Some(uid) => p.add(
            "euid",
            Status::Degraded,
            format!(
                "{uid}: not root; the daemon runs as root, so the privileged checks here show what this user can do"
            ),
            "every privileged probe of this report",
            Some("sudo predictio doctor".into()),
        ),
        None => p.add("euid", Status::Degraded, "unknown (/proc/self/status unreadable)".into(), "", None),
    }
    let held = |bit: u32| caps.is_some_and(|c| c & (1 << bit) != 0);
    let caps_list: [(u32, &str, &str); 5] = [
        (CAP_BPF, "CAP_BPF", "loading the eBPF programs and maps (with CAP_PERFMON)"),
        (CAP_PERFMON, "CAP_PERFMON", "attaching tracing programs; perf tracepoints of every process"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN", "fanotify, /proc/PID/map_files, mounting tracefs, the real-time I/O class"),
        (
            CAP_DAC_READ_SEARCH,
            "CAP_DAC_READ_SEARCH",
            "opening the files it prefetches whatever their mode, and observed files by inode (launch learning names them)",
        ),
        (
            CAP_SYS_PTRACE,
            "CAP_SYS_PTRACE",
            "/proc/PID/fd, maps and exe of other users' processes (resolving observed files, exec identities)",
        ),
    ];
    for (bit, name, affects) in caps_list {
        let (status, detail) = match caps {
            None => (Status::Degraded, "unknown (no CapEff in /proc/self/status)".to_owned()),
            Some(_) if held(bit) => (Status::Ok, "held".to_owned()),
            Some(_) => (Status::Missing, "not held".to_owned()),
        };
        p.add(name, status, detail, affects, Some(AS_ROOT.into()));
    }

    let (status, detail) = match read_trimmed("/proc/sys/kernel/unprivileged_bpf_disabled") {
        Ok(v) => (
            Status::Ok,
            format!(
                "{v}: {}; it changes nothing for predictio, whose tracing programs need CAP_BPF and CAP_PERFMON \
                 in any case",
                if v == "0" { "unprivileged BPF allowed" } else { "unprivileged BPF off" }
            ),
        ),
        Err(err) => (Status::Degraded, format!("unreadable: {err}")),
    };
    p.add("kernel.unprivileged_bpf_disabled", status, detail, "nothing in predictio (see detail)", None);

    let perfmon = held(CAP_PERFMON) || held(CAP_SYS_ADMIN);
    let paranoid = read_trimmed("/proc/sys/kernel/perf_event_paranoid");
    let (status, detail) = match (&paranoid, perfmon) {
        (Ok(v), true) => (Status::Ok, format!("{v}; CAP_PERFMON is held, which overrides it")),
        (Ok(v), false) if v.parse::<i32>().is_ok_and(|n| n <= -1) => {
            (Status::Ok, format!("{v}: raw tracepoint samples allowed without CAP_PERFMON"))
        }
        (Ok(v), false) => (Status::Missing, format!("{v}: raw tracepoint samples need -1 without CAP_PERFMON")),
        (Err(err), _) => (Status::Degraded, format!("unreadable: {err}")),
    };
    p.add(
        "kernel.perf_event_paranoid",
        status,
        detail,
        "the perf fallback run without CAP_PERFMON (following one command tree)",
        Some("sysctl kernel.perf_event_paranoid=-1, or run as root".into()),
    );
}

fn resources(p: &mut Probe<'_>, version: Option<(u32, u32)>, ipc_lock: bool) {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    let show = |v: Option<u64>| v.map_or("unlimited".to_owned(), crate::units::human);
    let limits = format!("soft {}, hard {}", show(limit.current), show(limit.maximum));
    // Linux 5.11 charges BPF maps to the memory cgroup instead.
    let memcg_accounting = version.is_some_and(|v| v >= (5, 11));
    // The eBPF observer's maps: the 8 MiB ring and the followed and launch
    // tables come to about 16 MiB.
    let enough = limit.current.is_none_or(|soft| soft >= 64 << 20);
    let (status, detail) = if memcg_accounting {
        (
            Status::Ok,
            format!(
                "{limits}; since Linux 5.11 BPF maps are charged to the memory cgroup, not to this limit; perf \
                 rings beyond kernel.perf_event_mlock_kb count against it{}",
                if ipc_lock { " (not here: CAP_IPC_LOCK is held)" } else { " unless CAP_IPC_LOCK is held" }
            ),
        )
    } else if enough {
        (Status::Ok, format!("{limits}: enough for the BPF maps (charged to it before Linux 5.11)"))
    } else {
        (Status::Missing, format!("{limits}: before Linux 5.11 the BPF maps (~16 MiB) are charged to it"))
    };
    p.add(
        "RLIMIT_MEMLOCK",
        status,
        detail,
        "loading the eBPF maps on kernels before 5.11; the perf fallback's rings",
        Some("LimitMEMLOCK=infinity in the unit (dist/predictio.service sets it), or ulimit -l unlimited".into()),
    );

    let page = predictio::os::page_size();
    p.add(
        "page size",
        if page == predictio::PAGE_SIZE { Status::Ok } else { Status::Missing },
        format!("{page} bytes"),
        "everything: predictio supports 4096-byte pages only",
        Some("a kernel with 4 KiB pages".into()),
    );
}

fn cgroups(p: &mut Probe<'_>, found: &mut Found) {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let typed = |fstype: &str| -> Vec<String> {
        mounts
            .lines()
            .filter_map(|line| {
                let mut fields = line.split_whitespace();
                let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
                (kind == fstype).then(|| target.to_owned())
            })
            .collect()
    };
    let v2 = typed("cgroup2");
    let v1 = typed("cgroup");
    let (status, detail) = match (v2.first(), v1.is_empty()) {
        (Some(at), true) => (Status::Ok, format!("cgroup v2 only (unified), at {at}")),
        (Some(at), false) => {
            (Status::Degraded, format!("hybrid: cgroup v2 at {at} beside {} cgroup v1 hierarchies", v1.len()))
        }
        (None, false) => (Status::Degraded, format!("cgroup v1 only ({} hierarchies)", v1.len())),
        (None, true) => (Status::Missing, "no cgroup filesystem is mounted".into()),
    };
    p.add(
        "hierarchy",
        status,
        detail,
        "the pressure guard reads cgroup limits and pressure from cgroup v2, and limits alone from v1",
        Some("boot with systemd.unified_cgroup_hierarchy=1 (the default of RHEL 9, Ubuntu 22.04+, Debian 12)".into()),
    );

    let memory = predictio::pressure::CgroupFs::system().and_then(|fs| {
        fs.memory_controller()?;
        Ok(fs)
    });
    let v1_memory = matches!(&memory, Ok(fs) if fs.hierarchy() == predictio::pressure::Hierarchy::V1Memory);
    found.memcg = memory.is_ok();
    found.memcg_v1 = v1_memory;
    p.add(
        "memory controller",
        match (found.memcg, v1_memory) {
            (true, false) => Status::Ok,
            (true, true) => Status::Degraded,
            (false, _) => Status::Missing,
        },
        match memory {
            Ok(fs) if v1_memory => format!(
                "cgroup v1, at {}: limits and usage are read, but v1 has no per-cgroup pressure (PSI)",
                fs.cgroup_root().display()
            ),
            Ok(fs) => format!("cgroup v2, enabled in {}", fs.cgroup_root().display()),
            Err(why) => why,
        },
        "the pressure guard's cgroup limits (v2: memory.max, memory.high, memory.current, memory.pressure; v1: \
         memory.limit_in_bytes, memory.usage_in_bytes) of the daemon's cgroup and of the process a prefetch is for \
         (without it: the machine's memory only)",
        Some(
            "a unified hierarchy (systemd.unified_cgroup_hierarchy=1), or cgroup_no_v1=memory on a hybrid host".into(),
        ),
    );

    let psi = std::fs::read_to_string("/proc/pressure/memory");
    found.psi = psi.is_ok();
    p.add(
        "PSI",
        if found.psi { Status::Ok } else { Status::Missing },
        match psi {
            Ok(text) => format!("/proc/pressure/memory: {}", text.lines().next().unwrap_or_default()),
            Err(err) => format!("/proc/pressure/memory: {err}"),
        },
        "the pressure guard's stall signal (some avg10); without it MemAvailable alone",
        Some("boot with psi=1 (RHEL kernels build PSI in but off by default); needs CONFIG_PSI=y".into()),
    );
}

fn daemon(
    p: &mut Probe<'_>,
    loaded: &Result<(Config, Option<PathBuf>), predictio_daemon::config::ConfigError>,
    config: &Config,
    found: &Found,
) {
    match loaded {
        Ok((_, Some(path))) => p.add("configuration", Status::Ok, format!("{} (valid)", path.display()), "", None),
        Ok((_, None)) => p.add(
            "configuration",
            Status::Ok,
            format!("built-in defaults (no {})", predictio_daemon::config::DEFAULT_PATH),
            "",
            None,
        ),
        Err(err) => p.add(
            "configuration",
            Status::Degraded,
            format!("{err}; the checks used the built-in defaults"),
            "the daemon does not start with an invalid configuration",
            Some("fix the file (predictio daemon --check names each problem)".into()),
        ),
    }

    let socket = &config.control.socket;
    match predictio_daemon::control::query(socket) {
        Ok(s) => {
            let mut detail = format!(
                "predictio {} (pid {}) answers at {}, up {:.0} s; observation {}; backend {}",
                s.version,
                s.pid,
                socket.display(),
                s.uptime_s,
                s.source,
                s.backend
            );
            if let Some(note) = s.source_note.as_ref().or(s.fallback.as_ref()) {
                detail.push_str(&format!(" ({note})"));
            }
            p.add("daemon", Status::Ok, detail, DAEMON_AFFECTS, None);
        }
        Err(err) => p.add(
            "daemon",
            Status::Missing,
            format!("none answers: {}", crate::error_message(&anyhow::Error::new(err))),
            DAEMON_AFFECTS,
            Some("systemctl enable --now predictio (or run predictio daemon)".into()),
        ),
    }

    let configured = config.observe.source.name();
    let effective = source_here(configured, found);
    let (status, fix) = match effective {
        "ebpf" => (Status::Ok, None),
        "none" if configured == "none" => {
            (Status::Degraded, Some("[observe] source = \"auto\" in the configuration".to_owned()))
        }
        "none" => (Status::Missing, Some("see the Observation checks".to_owned())),
        _ => (Status::Degraded, Some("see the Observation checks: eBPF sees the most, at the least cost".to_owned())),
    };
    p.add(
        "observation source",
        status,
        format!("configured {configured}; it would run on {effective} here"),
        "what the daemon observes (see the capabilities below)",
        fix,
    );
}

const DAEMON_AFFECTS: &str = "launch replay, observed prefetching, hints and predictio stat/top need a running \
                              daemon (predictio run and record work without one)";

/// The source the daemon would run on, from what opened here, in the order
/// its `auto` tries them (`predictio_daemon::sources`: eBPF, perf,
/// fanotify); a named source runs only if it opened.
fn source_here(configured: &str, found: &Found) -> &'static str {
    let opened = [("ebpf", found.ebpf), ("perf", found.perf), ("fanotify", found.fanotify)];
    match configured {
        "auto" => opened.iter().find(|(_, ok)| *ok).map_or("none", |(name, _)| name),
        named => opened.iter().find(|(name, ok)| *name == named && *ok).map_or("none", |(name, _)| name),
    }
}

/// Which of predictio's capabilities work, from the checks.
fn capabilities(f: &Found) -> Vec<Capability> {
    let pages = if f.ebpf {
        Some("eBPF")
    } else if f.perf {
        Some("perf tracepoints")
    } else {
        None
    };
    let mut out = Vec::new();
    out.push(match (pages, f.fanotify) {
        (Some(source), _) => Capability {
            name: "launch learning + replay",
            status: Status::Ok,
            detail: format!("learned from {source} (misses, execs, forks, exits), replayed at exec"),
        },
        (None, true) => Capability {
            name: "launch learning + replay",
            status: Status::Degraded,
            detail: "fanotify only: stored or imported profiles are replayed at exec; nothing is learned".into(),
        },
        (None, false) => Capability {
            name: "launch learning + replay",
            status: Status::Missing,
            detail: "no observation source opens here".into(),
        },
    });

    let mut lacking = Vec::new();
    if pages.is_none() {
        lacking.push("page-access observation (eBPF or perf)");
    } else if !f.hits {
        lacking.push("page hits (the filemap page-access tracepoints of Linux 6.11+; the SQLite, LMDB and RocksDB adapters work without them)");
    }
    if !f.nowait {
        lacking.push("preadv2(RWF_NOWAIT)");
    }
    if !f.ptrace_or_root {
        lacking.push("root or CAP_SYS_PTRACE to resolve observed files");
    }
    const OWN_FILES: &str = "; only of files the daemon may write or owns (cachestat is refused on the others)";
    let own_files_only = match (f.cachestat, f.cachestat_read_only) {
        (true, true) => "",
        (true, false) => OWN_FILES,
        (false, _) => "; cached pages found with mincore (no cachestat before Linux 6.5)",
    };
    out.push(Capability {
        name: "B-tree observation",
        status: match (lacking.is_empty(), f.cachestat && f.cachestat_read_only) {
            (true, true) => Status::Ok,
            (true, false) => Status::Degraded,
            (false, _) => Status::Missing,
        },
        detail: if lacking.is_empty() {
            format!("SQLite and LMDB pages that programs read are parsed from the page cache{own_files_only}")
        } else {
            format!("needs {}", lacking.join(", "))
        },
    });

    out.push(if !f.nowait {
        Capability {
            name: "tensor observation",
            status: Status::Missing,
            detail: "model headers and Parquet footers are read from cached pages only, which needs \
                     preadv2(RWF_NOWAIT)"
                .into(),
        }
    } else if pages.is_none() || !f.hits || !f.ptrace_or_root {
        Capability {
            name: "tensor observation",
            status: Status::Degraded,
            detail: "models handed over by hints only: no observed reads or faults (they need page hits, the \
                     filemap page-access tracepoints of Linux 6.11+)"
                .into(),
        }
    } else {
        Capability {
            name: "tensor observation",
            status: if f.cachestat && f.cachestat_read_only { Status::Ok } else { Status::Degraded },
            detail: format!(
                "model and Parquet files recognised among observed files; model loads followed (Parquet queries \
                 with the opt-in columns policy){own_files_only}"
            ),
        }
    });

    out.push(Capability {
        name: "residency checks",
        status: if f.cachestat && f.cachestat_read_only { Status::Ok } else { Status::Degraded },
        detail: match (f.cachestat, f.cachestat_read_only) {
            (true, true) => "cachestat: resident, dirty, writeback and evicted pages".into(),
            (true, false) => "cachestat on files the caller may write or owns; refused on the others".into(),
            (false, _) => "mincore(2): resident pages only, through a mapping of the file".into(),
        },
    });

    let mut guard = vec!["MemAvailable"];
    if f.psi {
        guard.push("PSI");
    }
    if f.memcg {
        guard.push(if f.memcg_v1 { "cgroup v1 memory limits" } else { "cgroup v2 memory limits and pressure" });
    }
    out.push(Capability {
        name: "pressure guard",
        status: if f.psi && f.memcg && !f.memcg_v1 { Status::Ok } else { Status::Degraded },
        detail: format!("watches {}", guard.join(", ")),
    });
    out
}

/// The human-readable report.
fn write_text(out: &mut impl Write, r: &Report) -> std::io::Result<()> {
    let who = match r.euid {
        Some(0) => "as root".to_owned(),
        Some(uid) => format!("as uid {uid} (not root: run it as root to see what the daemon can do)"),
        None => "as an unknown user".to_owned(),
    };
    writeln!(out, "predictio doctor: Linux {}, {who}", r.kernel)?;
    if !r.assumed_missing.is_empty() {
        writeln!(out, "as if the kernel lacked: {} ([observe] assume_missing)", r.assumed_missing.join(", "))?;
    }
    let width = r.checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for group in Group::ALL {
        writeln!(out, "\n{}", group.title())?;
        for c in r.checks.iter().filter(|c| c.group == group) {
            writeln!(out, "  {:<8}  {:<width$}  {}", c.status.word(), c.name, c.detail)?;
            if c.status != Status::Ok {
                let pad = " ".repeat(14 + width);
                if !c.affects.is_empty() {
                    writeln!(out, "{pad}affects: {}", c.affects)?;
                }
                if let Some(fix) = &c.fix {
                    writeln!(out, "{pad}fix: {fix}")?;
                }
            }
        }
    }
    writeln!(out, "\nWhat works here")?;
    let width = r.capabilities.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for c in &r.capabilities {
        writeln!(out, "  {:<8}  {:<width$}  {}", c.status.word(), c.name, c.detail)?;
    }
    Ok(())
}

/// A procfs file's text, trimmed.
fn read_trimmed(path: &str) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_owned())
}

/// The value of `key` (e.g. `CapEff:`) in a `/proc/PID/status` text.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|line| line.strip_prefix(key)).map(str::trim)
}

/// Where a filesystem of type `fstype` is mounted, if anywhere.
fn mount_of_type(fstype: &str) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, target, kind) = (fields.next()?, fields.next()?, fields.next()?);
        (kind == fstype).then(|| target.to_owned())
    })
}

/// `(major, minor)` of a kernel release such as `6.8.0-45-generic`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(kernel_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(kernel_version("5.14.0-427.el9.x86_64"), Some((5, 14)));
        assert_eq!(kernel_version("6.18.44-fc-v1272"), Some((6, 18)));
        assert_eq!(kernel_version("garbage"), None);
    }

    #[test]
    fn the_source_follows_the_daemons_order() {
        let found = Found { perf: true, fanotify: true, ..Found::default() };
        assert_eq!(source_here("auto", &found), "perf");
        assert_eq!(source_here("ebpf", &found), "none");
        assert_eq!(source_here("fanotify", &found), "fanotify");
        assert_eq!(source_here("none", &found), "none");
    }

    #[test]
    fn capabilities_without_newer_calls_say_what_is_lacking() {
        // As root without eBPF or perf (fanotify only) and without cachestat.
        let found = Found { fanotify: true, nowait: true, psi: true, ptrace_or_root: true, ..Found::default() };
        let caps = capabilities(&found);
        let get = |name: &str| caps.iter().find(|c| c.name == name).expect(name);
        assert_eq!(get("launch learning + replay").status, Status::Degraded);
        assert_eq!(get("B-tree observation").status, Status::Missing);
        assert!(get("B-tree observation").detail.contains("page-access"), "{:?}", get("B-tree observation"));
        assert_eq!(get("tensor observation").status, Status::Degraded);
        assert_eq!(get("residency checks").status, Status::Degraded);
        assert_eq!(get("pressure guard").status, Status::Degraded);

        // A 5.15 kernel as root: eBPF, but no cachestat: cached pages are
        // found with mincore.
        let caps = capabilities(&Found { ebpf: true, hits: true, ..found });
        let get = |name: &str| caps.iter().find(|c| c.name == name).expect(name);
        assert_eq!(get("launch learning + replay").status, Status::Ok);
        assert_eq!(get("B-tree observation").status, Status::Degraded);
        assert!(get("B-tree observation").detail.contains("mincore"), "{:?}", get("B-tree observation"));
        assert_eq!(get("tensor observation").status, Status::Degraded);
        assert!(get("tensor observation").detail.contains("mincore"), "{:?}", get("tensor observation"));
        assert!(get("residency checks").detail.contains("mincore"), "{:?}", get("residency checks"));

        // Without preadv2(RWF_NOWAIT), nothing reads cached pages.
        let caps = capabilities(&Found { ebpf: true, hits: true, nowait: false, ..found });
        let get = |name: &str| caps.iter().find(|c| c.name == name).expect(name);
        assert_eq!(get("B-tree observation").status, Status::Missing);
        assert_eq!(get("tensor observation").status, Status::Missing);

        // Before Linux 6.11 (no page hits): launches only, from misses.
        let caps = capabilities(&Found { ebpf: true, ..found });
        let get = |name: &str| caps.iter().find(|c| c.name == name).expect(name);
        assert_eq!(get("launch learning + replay").status, Status::Ok);
        assert_eq!(get("B-tree observation").status, Status::Missing);
        assert!(get("B-tree observation").detail.contains("6.11"), "{:?}", get("B-tree observation"));
        assert_eq!(get("tensor observation").status, Status::Degraded);
        assert!(get("tensor observation").detail.contains("hints only"), "{:?}", get("tensor observation"));
    }

    #[test]
    fn cachestat_refused_on_read_only_files_limits_what_reads_cached_pages() {
        let all = Found {
            ebpf: true,
            hits: true,
            cachestat: true,
            cachestat_read_only: true,
            nowait: true,
            ptrace_or_root: true,
            ..Found::default()
        };
        let status = |found: &Found, name: &str| capabilities(found).into_iter().find(|c| c.name == name).expect(name);
        for name in ["B-tree observation", "tensor observation", "residency checks"] {
            assert_eq!(status(&all, name).status, Status::Ok, "{name}");
            let refused = Found { cachestat_read_only: false, ..all };
            let c = status(&refused, name);
            assert_eq!(c.status, Status::Degraded, "{name}");
            assert!(c.detail.contains("refused"), "{c:?}");
        }
    }
}
