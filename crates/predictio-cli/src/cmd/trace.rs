//! `predictio trace`: print the events predictio sees, as they happen.

use std::io::Write;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use predictio::Event;
use predictio_bpf::{Observer, ObserverConfig};

/// Arguments of `trace`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Trace every process (root), not just CMD's tree.
    #[arg(long)]
    all: bool,
    /// Only these event kinds (read, fault, map, miss, evict, exec-start:
    /// `execve` entered with an absolute path, exec: the program running,
    /// fork, exit, lookup: an absolute path the process opened, stat'ed or
    /// exec'd); repeatable. Default: all.
    #[arg(long = "kind", value_name = "KIND")]
    kinds: Vec<String>,
    /// Only this process id (and its events).
    #[arg(long)]
    pid: Option<u32>,
    /// Stop after this many seconds (with --all).
    #[arg(long, value_parser = crate::units::parse_seconds)]
    duration: Option<Duration>,
    /// One JSON object per line.
    #[arg(long)]
    json: bool,
    /// The command to run and trace (its whole process tree).
    #[arg(last = true)]
    command: Vec<String>,
}

const KINDS: [&str; 10] = ["read", "fault", "map", "miss", "evict", "exec-start", "exec", "fork", "exit", "lookup"];

fn kind_of(event: &Event) -> &'static str {
    use predictio::event::AccessKind;
    match event {
        Event::PageAccess { kind: AccessKind::Read, .. } => "read",
        Event::PageAccess { kind: AccessKind::Fault, .. } => "fault",
        Event::PageAccess { kind: AccessKind::MapPages, .. } => "map",
        Event::PageMiss { .. } => "miss",
        Event::PageEvict { .. } => "evict",
        Event::ExecStart { .. } => "exec-start",
        Event::Exec { .. } => "exec",
        Event::Fork { .. } => "fork",
        Event::Exit { .. } => "exit",
        Event::Lookup { .. } => "lookup",
        _ => "hint",
    }
}

fn pid_of(event: &Event) -> Option<u32> {
    match event {
        Event::PageAccess { pid, .. }
        | Event::PageMiss { pid, .. }
        | Event::Exec { pid, .. }
        | Event::ExecStart { pid, .. }
        | Event::Exit { pid, .. }
        | Event::FileOpen { pid, .. }
        | Event::Lookup { pid, .. } => Some(*pid),
        Event::Fork { child, .. } => Some(*child),
        _ => None,
    }
}

/// One line of text for an event.
pub fn describe(event: &Event) -> String {
    match event {
        Event::PageAccess { pid, file, pages, .. } => format!("{pid:>7} {:<5} {file} {pages}", kind_of(event)),
        Event::PageMiss { pid, file, pages, .. } => format!("{pid:>7} miss  {file} {pages}"),
        Event::PageEvict { file, pages, .. } => format!("{:>7} evict {file} {pages}", "-"),
        Event::Exec { pid, exe, shape, .. } => format!("{pid:>7} exec  {exe} {} \"{shape}\"", exe_path(*pid)),
        Event::ExecStart { pid, uid, path, shape, .. } => {
            format!("{pid:>7} exec-start {path} \"{shape}\" uid {uid}")
        }
        Event::Fork { parent, child, .. } => format!("{child:>7} fork  from {parent}"),
        Event::Exit { pid, .. } => format!("{pid:>7} exit"),
        Event::Lookup { pid, path, .. } => format!("{pid:>7} lookup {path}"),
        other => format!("{other:?}"),
    }
}

fn exe_path(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default()
}

fn json(event: &Event) -> serde_json::Value {
    let mut v = serde_json::json!({ "kind": kind_of(event) });
    if let Some(pid) = pid_of(event) {
        v["pid"] = pid.into();
    }
    if let Some(file) = event.file() {
        v["dev"] = file.dev.into();
        v["ino"] = file.ino.into();
    }
    match event {
        Event::PageAccess { pages, time_ns, .. }
        | Event::PageMiss { pages, time_ns, .. }
        | Event::PageEvict { pages, time_ns, .. } => {
            v["first"] = pages.start.into();
            v["end"] = pages.end.into();
            v["time_ns"] = (*time_ns).into();
        }
        Event::Fork { parent, .. } => v["parent"] = (*parent).into(),
        Event::Lookup { path, time_ns, .. } => {
            v["path"] = path.as_ref().into();
            v["time_ns"] = (*time_ns).into();
        }
        Event::ExecStart { uid, path, shape, time_ns, .. } => {
            v["uid"] = (*uid).into();
            v["path"] = path.as_ref().into();
            v["shape"] = shape.as_ref().into();
            v["time_ns"] = (*time_ns).into();
        }
        _ => {}
    }
    v
}

/// Runs `trace`.
pub fn run(args: Args) -> Result<()> {
    for k in &args.kinds {
        if !KINDS.contains(&k.as_str()) {
            bail!("unknown kind {k:?}; expected one of {}", KINDS.join(", "));
        }
    }
    if args.command.is_empty() && !args.all && args.pid.is_none() {
        bail!("say what to trace: -- CMD, --pid PID, or --all");
    }
    let config = ObserverConfig { follow_all: args.all || args.command.is_empty(), ..ObserverConfig::default() };
    let mut observer = Observer::load(config).context("loading the eBPF observer (needs root)")?;
    let me = std::process::id();
    let mut child = None;
    if !args.command.is_empty() {
        // Follow ourselves while forking so that the child is followed from
        // its first instruction; our own events are filtered out below.
        observer.follow(me).context("following the command")?;
        let spawned = Command::new(&args.command[0]).args(&args.command[1..]).spawn();
        let _ = observer.unfollow(me);
        child = Some(spawned.with_context(|| format!("starting {}", args.command[0]))?);
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let deadline = args.duration.map(|d| Instant::now() + d);
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    let mut status = None;
    let mut io_error = None;
    let mut print = |event: Event| {
        if pid_of(&event) == Some(me) || io_error.is_some() {
            return;
        }
        if args.pid.is_some_and(|p| pid_of(&event) != Some(p)) {
            return;
        }
        let kind = kind_of(&event);
        if !args.kinds.is_empty() && !args.kinds.iter().any(|k| k == kind) {
            return;
        }
        let line =
            if args.json { json(&event).to_string() } else { crate::units::printable(&describe(&event)).into_owned() };
        if let Err(err) = writeln!(out, "{line}") {
            io_error = Some(err);
        }
    };
    loop {
        observer.poll(Duration::from_millis(20), &mut print).context("reading events")?;
        if let Some(c) = child.as_mut()
            && let Some(s) = c.try_wait()?
        {
            status = Some(s);
            // Let the last records arrive.
            observer.poll(Duration::from_millis(20), &mut print)?;
            break;
        }
        if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
    }
    if let Some(err) = io_error {
        return Err(err.into());
    }
    out.flush()?;
    let stats = observer.stats();
    // Detaching the programs takes over a second here: a helper finishes it.
    observer.close_in_background();
    eprintln!("predictio trace: {} events from {} records, {} lost", stats.events, stats.records, stats.lost);
    if let Some(s) = status
        && !s.success()
    {
        bail!("{} exited with {s}", args.command[0]);
    }
    Ok(())
}
