//! Helpers shared by the observation tests (eBPF and perf): a command held
//! until it is followed, page sets from access events, program lookup.
#![allow(dead_code, reason = "each test binary uses a different subset")]

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use predictio::event::AccessKind;
use predictio::{Event, FileId};
use predictio_bpf::Observer;
use predictio_bpf::fallback::FanotifyObserver;
use predictio_bpf::perf::PerfObserver;

/// An observer the tests can drain into a vector.
pub trait Drain {
    /// Polls once, waiting up to `timeout`, handing each event to `on_event`.
    fn poll_events(&mut self, timeout: Duration, on_event: &mut dyn FnMut(Event));

    /// Polls once (waiting up to 2 ms) and appends what arrived.
    fn drain_into(&mut self, out: &mut Vec<Event>) {
        self.poll_events(Duration::from_millis(2), &mut |e| out.push(e));
    }
}

impl Drain for Observer {
    fn poll_events(&mut self, timeout: Duration, on_event: &mut dyn FnMut(Event)) {
        self.poll(timeout, &mut |e| on_event(e)).expect("poll");
    }
}

impl Drain for PerfObserver {
    fn poll_events(&mut self, timeout: Duration, on_event: &mut dyn FnMut(Event)) {
        self.poll(timeout, &mut |e| on_event(e)).expect("poll");
    }
}

impl Drain for FanotifyObserver {
    fn poll_events(&mut self, timeout: Duration, on_event: &mut dyn FnMut(Event)) {
        self.poll(timeout, &mut |e| on_event(e)).expect("poll");
    }
}

/// Polls with 5 s timeouts until `pid`'s exec arrives (or 10 s pass):
/// the execs seen and how long it took.
pub fn wait_for_exec(observer: &mut impl Drain, pid: u32) -> (usize, Duration) {
    let start = Instant::now();
    let mut execs = 0;
    while execs == 0 && start.elapsed() < Duration::from_secs(10) {
        observer.poll_events(Duration::from_secs(5), &mut |e| {
            if matches!(e, Event::Exec { pid: p, .. } if p == pid) {
                execs += 1;
            }
        });
    }
    (execs, start.elapsed())
}

/// A command started blocked on its stdin (`read`), so that it can be
/// followed before it does anything; then `exec`s `argv`.
pub struct Held {
    /// The blocked shell.
    pub child: Child,
}

impl Held {
    /// Starts `argv` held.
    #[track_caller]
    pub fn spawn(argv: &[&str]) -> Held {
        let child = Command::new("sh")
            .arg("-c")
            .arg("read _ && exec \"$@\"")
            .arg("sh")
            .args(argv)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn sh");
        Held { child }
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets the command run.
    #[track_caller]
    pub fn release(&mut self) {
        self.child.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
    }

    /// Releases the command and collects `observer`'s events until it has
    /// exited and its `Exit` record has been seen (or 10 s pass).
    #[track_caller]
    pub fn run(self, observer: &mut impl Drain) -> Vec<Event> {
        let pid = self.pid();
        self.run_until(observer, |events| events.iter().any(|e| matches!(e, Event::Exit { pid: p, .. } if *p == pid)))
    }

    /// Releases the command and collects `observer`'s events until `done`
    /// holds for them (or 10 s pass); then checks that the command succeeded.
    #[track_caller]
    pub fn run_until(mut self, observer: &mut impl Drain, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
        self.release();
        let mut events = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(&events) && Instant::now() <= deadline {
            observer.drain_into(&mut events);
        }
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "{status}");
        events
    }
}

/// The pids `parent` forked, by the `Fork` events among `events`.
pub fn forked_children(events: &[Event], parent: u32) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Fork { parent: p, child, .. } if *p == parent => Some(*child),
            _ => None,
        })
        .collect()
}

/// Pages of `file` covered by access events of `kinds`, by `pid` if given.
pub fn pages_accessed(events: &[Event], file: FileId, kinds: &[AccessKind], pid: Option<u32>) -> BTreeSet<u64> {
    let mut set = BTreeSet::new();
    for event in events {
        if let Event::PageAccess { pid: p, file: f, pages, kind, .. } = event
            && *f == file
            && kinds.contains(kind)
            && pid.is_none_or(|want| want == *p)
        {
            set.extend(pages.start..pages.end);
        }
    }
    set
}

/// A path as `&str` (test paths are UTF-8).
pub fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// The full path of `program` on `PATH`.
pub fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{program} not on PATH"))
}
