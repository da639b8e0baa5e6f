//! `predictio daemon --check`: what a valid configuration would run on this
//! machine, found without starting the service.
//!
//! The executor backend is opened the way the executor opens it (io_uring,
//! else the fadvise fallback and why); the observation source is chosen
//! the way [`Sources::start`](crate::sources::Sources::start) chooses it
//! (eBPF programs loaded, tracepoints or fanotify opened, then closed
//! again); the sockets and the profile store are looked at, not bound or
//! created. Paths the daemon would create or use as root are worth a
//! warning when a user other than root could replace them: a parent
//! directory not owned by root, or writable by its group or by everyone.

use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixDatagram, UnixStream};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::config::Config;

/// What the daemon would run on here.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The file read; `None`: the built-in defaults (no file at the
    /// default path).
    pub config: Option<PathBuf>,
    /// Whether this check ran as root, as the daemon does: without it,
    /// eBPF, perf and fanotify are refused and the observation found is
    /// not the daemon's.
    pub root: bool,
    /// The executor's backend.
    pub backend: Choice,
    /// The kernel observation source.
    pub observation: Choice,
    /// The policies that would run.
    pub policies: Vec<String>,
    /// The sockets and the store directory.
    pub paths: Vec<PathCheck>,
    /// The metrics endpoint's address, if it is on.
    pub metrics: Option<String>,
    /// Everything worth a look, configuration warnings first.
    pub warnings: Vec<String>,
    /// Why the daemon would not start here although the configuration is
    /// valid (a named observation source that cannot open, a page size
    /// predictio does not support).
    pub errors: Vec<String>,
}

/// What was configured and what would run.
#[derive(Debug, Clone, Serialize)]
pub struct Choice {
    /// As configured.
    pub configured: String,
    /// What would run here (`"none"` for no observation).
    pub effective: String,
    /// Why it differs, or why it is none.
    pub note: Option<String>,
}

/// One socket or directory the daemon uses.
#[derive(Debug, Clone, Serialize)]
pub struct PathCheck {
    /// The configuration key, e.g. `[control] socket`.
    pub key: String,
    /// The path.
    pub path: PathBuf,
    /// What is there now, e.g. "absent; /run/predictio will be created".
    pub state: String,
    /// Concerns about it.
    pub warnings: Vec<String>,
}

impl Report {
    /// Whether the daemon would start with this configuration here.
    pub fn would_start(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Checks `config` (valid: see [`Config::validate`]), read from `path`
/// (`None`: built-in defaults), against this machine.
pub fn check(config: &Config, path: Option<&Path>) -> Report {
    let mut warnings: Vec<String> = config.warnings().iter().map(ToString::to_string).collect();
    let mut errors = Vec::new();

    let executor = config.executor_config();
    if predictio::os::page_size() != predictio::PAGE_SIZE {
        errors.push(format!(
            "the kernel's page size is {} bytes; predictio supports {}-byte pages only",
            predictio::os::page_size(),
            predictio::PAGE_SIZE
        ));
    }
    let (backend, fallback) =
        predictio::executor::backend::open_backend(executor.backend, executor.io_depth, executor.limits.max_io_pages);
    let backend =
        Choice { configured: executor.backend.name().into(), effective: backend.kind().name().into(), note: fallback };

    let observation = match crate::sources::probe_observation(config) {
        Ok((source, note)) => {
            Choice { configured: config.observe.source.name().into(), effective: source.into(), note }
        }
        Err(err) => {
            errors.push(format!("the daemon would not start: {err}"));
            Choice {
                configured: config.observe.source.name().into(),
                effective: "none".into(),
                note: Some(err.to_string()),
            }
        }
    };
    let root = effective_uid() == Some(0);
    if !root && observation.effective != "ebpf" && config.observe.source != crate::config::SourceChoice::None {
        warnings
            .push("not checked as root: the daemon runs as root, and observation here may differ from its own".into());
    }

    let mut paths = Vec::new();
    if config.hints.enabled {
        paths.push(socket("[hints] socket", &config.hints.socket, Kind::Datagram));
    }
    paths.push(socket("[control] socket", &config.control.socket, Kind::Stream));
    if config.launch.learn || config.launch.replay {
        paths.push(directory("[launch] store", &config.launch.store));
    }
    for p in &paths {
        warnings.extend(p.warnings.iter().map(|w| format!("{} {}: {w}", p.key, p.path.display())));
    }
    if root {
        errors.extend(refused_paths(config).into_iter().map(|e| format!("the daemon would not start: {e}")));
    }

    let metrics = Some(config.metrics.listen.trim().to_owned()).filter(|l| !l.is_empty());
    Report {
        config: path.map(Path::to_path_buf),
        root,
        backend,
        observation,
        policies: config.policies.iter().map(|p| p.name().to_owned()).collect(),
        paths,
        metrics,
        warnings,
        errors,
    }
}

/// What kind of socket a path is for.
#[derive(Clone, Copy)]
enum Kind {
    Datagram,
    Stream,
}

/// A socket path: whether something answers there now, and its directory.
fn socket(key: &str, path: &Path, kind: Kind) -> PathCheck {
    let mut warnings = Vec::new();
    let state = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            let live = match kind {
                Kind::Datagram => UnixDatagram::unbound().and_then(|s| s.connect(path)).is_ok(),
                Kind::Stream => UnixStream::connect(path).is_ok(),
            };
            if live {
                warnings.push("a server answers there: is a predictio daemon running already?".into());
                "in use".into()
            } else {
                "a stale socket (replaced at start)".into()
            }
        }
        Ok(_) => {
            warnings.push("something other than a socket is there: the daemon would not replace it".into());
            "not a socket".into()
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => "absent (created at start)".into(),
        Err(err) => {
            warnings.push(format!("cannot be inspected: {err}"));
            "unknown".into()
        }
    };
    let state = match path.parent() {
        Some(dir) => parent(dir, state, &mut warnings),
        None => state,
    };
    PathCheck { key: key.into(), path: path.into(), state, warnings }
}

/// The profile store's directory.
fn directory(key: &str, path: &Path) -> PathCheck {
    let mut warnings = Vec::new();
    let state = match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {
            warnings.extend(tamper_risks(path, &meta));
            "exists".to_owned()
        }
        Ok(_) => {
            warnings.push("not a directory: the profile store cannot open".into());
            "not a directory".into()
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => {
            let state = "absent (created at start, mode 0700)".to_owned();
            match path.parent() {
                Some(dir) => parent(dir, state, &mut warnings),
                None => state,
            }
        }
        Err(err) => {
            warnings.push(format!("cannot be inspected: {err}"));
            "unknown".into()
        }
    };
    PathCheck { key: key.into(), path: path.into(), state, warnings }
}

/// Adds to `state` what the nearest existing ancestor of `dir` says, and
/// its warnings.
fn parent(dir: &Path, state: String, warnings: &mut Vec<String>) -> String {
    let mut existing = dir;
    loop {
        match std::fs::metadata(existing) {
            Ok(meta) if meta.is_dir() => {
                warnings.extend(tamper_risks(existing, &meta));
                return if existing == dir {
                    state
                } else {
                    format!("{state}; {} will be created in {}", dir.display(), existing.display())
                };
            }
            Ok(_) => {
                warnings.push(format!("{} is not a directory", existing.display()));
                return state;
            }
            Err(_) => match existing.parent() {
                Some(up) => existing = up,
                None => return state,
            },
        }
    }
}

/// What the daemon refuses at start (see [`crate::service::run`]): an
/// existing socket or store directory that is not root's alone
/// ([`predictio::secure_dir::check`]), a store file that is a symbolic link
/// or not a regular file.
fn refused_paths(config: &Config) -> Vec<String> {
    let launch = config.launch.learn || config.launch.replay;
    let dirs = [
        (config.hints.enabled, "[hints] socket", config.hints.socket.parent()),
        (true, "[control] socket", config.control.socket.parent()),
        (launch, "[launch] store", Some(config.launch.store.as_path())),
    ];
    let mut refused = Vec::new();
    for (key, dir) in dirs.into_iter().filter_map(|(used, key, dir)| used.then_some((key, dir?))) {
        if dir.exists()
            && let Err(err) = predictio::secure_dir::check(dir)
        {
            refused.push(format!("{key}: {err}"));
        }
    }
    let store = config.launch.store.join(crate::launch::store::FILE_NAME);
    if launch && let Ok(meta) = std::fs::symlink_metadata(&store) {
        if meta.file_type().is_symlink() {
            refused.push(format!("[launch] store: {} is a symbolic link", store.display()));
        } else if !meta.is_file() {
            refused.push(format!("[launch] store: {} is not a regular file", store.display()));
        }
    }
    refused
}

/// Why a directory the daemon uses as root could be tampered with.
fn tamper_risks(dir: &Path, meta: &std::fs::Metadata) -> Vec<String> {
    let mut warnings = Vec::new();
    if meta.uid() != 0 {
        warnings.push(format!("{} is owned by uid {}, not root", dir.display(), meta.uid()));
    }
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        let who = if mode & 0o002 != 0 { "everyone" } else { "its group" };
        let sticky = if mode & 0o1000 != 0 { " (sticky)" } else { "" };
        warnings.push(format!("{} is writable by {who}{sticky} (mode {:04o})", dir.display(), mode & 0o7777));
    }
    warnings
}

/// The effective uid of this process.
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| l.strip_prefix("Uid:"))?.split_whitespace().nth(1)?.parse().ok()
}

impl std::fmt::Display for Report {
    /// The report for a person: one line per subject, warnings last.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.config {
            Some(path) => writeln!(f, "configuration: {} (valid)", path.display())?,
            None => writeln!(f, "configuration: built-in defaults (no {})", crate::config::DEFAULT_PATH)?,
        }
        let choice = |f: &mut std::fmt::Formatter<'_>, what: &str, c: &Choice| {
            write!(f, "{what}: {}", c.effective)?;
            if c.effective != c.configured {
                write!(f, " (configured: {})", c.configured)?;
            }
            if let Some(note) = &c.note {
                write!(f, "\n  {note}")?;
            }
            writeln!(f)
        };
        choice(f, "executor backend", &self.backend)?;
        choice(f, "observation", &self.observation)?;
        writeln!(f, "policies: {}", self.policies.join(", "))?;
        for p in &self.paths {
            writeln!(f, "{}: {} — {}", p.key, p.path.display(), p.state)?;
        }
        match &self.metrics {
            Some(addr) => writeln!(f, "metrics: {addr}")?,
            None => writeln!(f, "metrics: off")?,
        }
        if !self.root {
            writeln!(f, "checked as: not root (the daemon runs as root)")?;
        }
        for w in &self.warnings {
            writeln!(f, "warning: {w}")?;
        }
        for e in &self.errors {
            writeln!(f, "error: {e}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_writable_or_foreign_directory_is_a_warning() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
        let sock = dir.path().join("sub").join("c.sock");
        let c = socket("[control] socket", &sock, Kind::Stream);
        assert!(c.state.contains("will be created in"), "{}", c.state);
        assert!(c.warnings.iter().any(|w| w.contains("writable by everyone")), "{:?}", c.warnings);
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
        let c = socket("[control] socket", &sock, Kind::Stream);
        assert!(!c.warnings.iter().any(|w| w.contains("writable")), "{:?}", c.warnings);
        assert_eq!(c.warnings.iter().any(|w| w.contains("not root")), effective_uid() != Some(0), "{:?}", c.warnings);
    }

    #[test]
    fn a_live_socket_is_reported_in_use() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("c.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
        let c = socket("[control] socket", &path, Kind::Stream);
        assert_eq!(c.state, "in use");
        assert!(c.warnings.iter().any(|w| w.contains("daemon running already")), "{:?}", c.warnings);
        std::fs::write(dir.path().join("file"), b"x").expect("write");
        let c = socket("[hints] socket", &dir.path().join("file"), Kind::Datagram);
        assert_eq!(c.state, "not a socket");
    }

    #[test]
    fn the_report_names_the_backend_and_the_source() {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = format!(
            "[hints]\nsocket = \"{d}/h.sock\"\n[control]\nsocket = \"{d}/c.sock\"\n[observe]\nsource = \"none\"\n[launch]\nstore = \"{d}/store\"\n",
            d = dir.path().display()
        );
        let config = Config::parse(&text).expect("parses");
        let report = check(&config, None);
        assert!(report.would_start(), "{report}");
        assert_eq!(report.backend.effective, "fadvise");
        assert_eq!(report.observation.effective, "none");
        assert_eq!(report.paths.len(), 3);
        let text = report.to_string();
        assert!(text.contains("executor backend: fadvise") && text.contains("observation: none"), "{text}");
        assert!(!dir.path().join("store").exists(), "the check creates nothing");
    }
}
