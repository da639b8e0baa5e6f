//! The perf observer against the real kernel: each test opens its own
//! observer on a real process (or on all of them), runs it on real files and
//! checks the events.
//!
//! Needs root (or `CAP_PERFMON` with a readable tracefs). Without it each
//! test prints why it skips; under `CI=true` a skip is a failure. Test files
//! live under Cargo's target tmp dir (a disk file system: tmpfs reads do not
//! go through the filemap tracepoints).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use predictio::event::AccessKind;
use predictio::{Event, FileId, FileRef, PAGE_SIZE};
use predictio_bpf::perf::{PerfConfig, PerfObserver};

mod common;
use common::{Held, forked_children, pages_accessed, path_str, wait_for_exec, which};

/// Skips the test with a message (a panic under `CI=true`).
#[track_caller]
fn skip(why: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and the perf test cannot run: {why}");
    }
    eprintln!("skipping: {why}");
}

/// Whether this process may open perf tracepoint events: says why not
/// otherwise. Checked before a test creates files or processes.
#[track_caller]
fn privileged() -> bool {
    let root = rustix::process::geteuid().is_root();
    if !root {
        skip("needs root (CAP_PERFMON and a readable tracefs)");
    }
    root
}

/// Opens an observer, or says why not: `None` (skip) outside CI, a panic
/// under `CI=true`.
#[track_caller]
fn observer(config: PerfConfig) -> Option<PerfObserver> {
    if !privileged() {
        return None;
    }
    match PerfObserver::open(config) {
        Ok(observer) => Some(observer),
        Err(err) if err.is_unavailable() => {
            skip(&format!("perf observation unavailable: {err}"));
            None
        }
        Err(err) => panic!("opening the perf observer: {err}"),
    }
}

/// Follows `pid` with the default settings.
#[track_caller]
fn following(pid: u32) -> Option<PerfObserver> {
    observer(PerfConfig { pid: Some(pid), ..PerfConfig::default() })
}

/// A file of `pages` pages under the target tmp dir, written and synced.
struct TestFile {
    _dir: tempfile::TempDir,
    path: PathBuf,
    file: FileRef,
}

impl TestFile {
    #[track_caller]
    fn new(pages: u64) -> TestFile {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let path = dir.path().join("data");
        let mut out = File::create(&path).expect("create");
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for i in 0..pages {
            page.fill(i as u8 | 1);
            out.write_all(&page).expect("write");
        }
        out.sync_all().expect("fsync");
        let file = FileRef::open(&path).expect("open");
        TestFile { _dir: dir, path, file }
    }

    fn id(&self) -> FileId {
        self.file.id()
    }

    fn path(&self) -> &str {
        path_str(&self.path)
    }

    /// Drops the file's pages from the page cache.
    #[track_caller]
    fn evict(&self) {
        predictio::cache::evict(&self.file).expect("fadvise(DONTNEED)");
    }
}

fn file_id(path: &Path) -> FileId {
    let meta = std::fs::metadata(path).unwrap_or_else(|e| panic!("stat {}: {e}", path.display()));
    FileId { dev: meta.dev(), ino: meta.ino() }
}

#[test]
fn buffered_reads_report_the_file_and_exactly_the_pages_read() {
    if !privileged() {
        return;
    }
    let data = TestFile::new(64);
    // One 4 KiB read() per page, pages 8..24, and no read at end of file (the
    // perf records carry the pages asked for, unclamped: see `perf.rs`).
    let dd = ["dd", &format!("if={}", data.path()), "of=/dev/null", "bs=4096", "skip=8", "count=16", "status=none"];
    let held = Held::spawn(&dd);
    let pid = held.pid();
    let Some(mut observer) = following(pid) else { return };
    let events = held.run(&mut observer);
    let read = pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid));
    assert_eq!(read, (8..24).collect(), "pages read by dd");
    let reads = events
        .iter()
        .filter(|e| matches!(e, Event::PageAccess { file, kind: AccessKind::Read, .. } if *file == data.id()))
        .count();
    assert_eq!(reads, 16, "one record per read(), none twice");
    let stats = observer.stats();
    assert!(stats.reads >= 16 && stats.lost == 0 && stats.malformed == 0, "{stats:?}");
    assert_eq!(observer.source_name(), "perf");
}

#[test]
fn children_of_the_followed_process_are_followed() {
    if !privileged() {
        return;
    }
    let data = TestFile::new(16);
    // `; true` keeps the shell from exec'ing cat: cat is a forked child.
    let script = format!("cat '{}'; true", data.path());
    let held = Held::spawn(&["sh", "-c", &script]);
    let shell = held.pid();
    let Some(mut observer) = following(shell) else { return };
    let events = held.run(&mut observer);
    let children = forked_children(&events, shell);
    assert_eq!(children.len(), 1, "one fork of the shell: {events:?}");
    let cat = children[0];
    let read = pages_accessed(&events, data.id(), &[AccessKind::Read], Some(cat));
    assert!(read.is_superset(&(0..16).collect()), "pages read by the child: {read:?}");
    assert!(events.iter().any(|e| matches!(e, Event::Exit { pid, .. } if *pid == cat)), "the child's exit");
    let fork_at = events.iter().position(|e| matches!(e, Event::Fork { .. })).expect("fork");
    let first_read = events.iter().position(|e| matches!(e, Event::PageAccess { pid, .. } if *pid == cat));
    assert!(first_read.is_some_and(|at| at > fork_at), "events in time order: the fork before the child's reads");
}

#[test]
fn reading_an_evicted_file_reports_misses() {
    if !privileged() {
        return;
    }
    let data = TestFile::new(32);
    data.evict();
    let held = Held::spawn(&["cat", data.path()]);
    let pid = held.pid();
    let Some(mut observer) = following(pid) else { return };
    let events = held.run(&mut observer);
    let missed: BTreeSet<u64> = events
        .iter()
        .flat_map(|e| match e {
            Event::PageMiss { pid: p, file, pages, .. } if *file == data.id() && *p == pid => pages.start..pages.end,
            _ => 0..0,
        })
        .collect();
    assert_eq!(missed, (0..32).collect(), "every page of the evicted file must miss");
    assert!(observer.stats().misses > 0);
}

#[test]
fn exec_reports_the_executable_and_exit_follows() {
    if !privileged() {
        return;
    }
    let data = TestFile::new(1);
    let held = Held::spawn(&["cat", data.path()]);
    let pid = held.pid();
    let Some(mut observer) = following(pid) else { return };
    let events = held.run(&mut observer);
    let cat = which("cat");
    let execs: Vec<(u32, FileId)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Exec { pid, exe, .. } => Some((*pid, *exe)),
            _ => None,
        })
        .collect();
    // The observer opens after the shell's own exec: only cat's is seen.
    assert_eq!(execs, [(pid, file_id(&cat))], "the exec of {}", cat.display());
    let exits = events.iter().filter(|e| matches!(e, Event::Exit { pid: p, .. } if *p == pid)).count();
    assert_eq!(exits, 1);
    let exec_at = events.iter().position(|e| matches!(e, Event::Exec { .. })).expect("exec");
    assert!(matches!(events.last(), Some(Event::Exit { .. })) && exec_at < events.len() - 1, "{events:?}");
}

#[test]
fn follow_all_reports_processes_never_followed() {
    let Some(mut observer) = observer(PerfConfig { follow_all: true, ..PerfConfig::default() }) else { return };
    let data = TestFile::new(4);
    let held = Held::spawn(&["cat", data.path()]);
    let pid = held.pid();
    let events = held.run(&mut observer);
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid)).is_superset(&(0..4).collect()));
    assert!(events.iter().any(|e| matches!(e, Event::Exec { pid: p, .. } if *p == pid)), "cat's exec");
}

#[test]
fn a_full_ring_counts_lost_records() {
    if !privileged() {
        return;
    }
    use std::io::BufRead as _;
    let data = TestFile::new(512);
    // One 4 KiB read() per page: 512 records into one page of ring (~60).
    // The kernel reports a loss with the next record it manages to write
    // into the same CPU's ring, so after draining, the shell does one more
    // thing (`cat /dev/null`), and the whole tree is pinned to one CPU.
    let script =
        format!("read _; dd if='{}' of=/dev/null bs=4096 status=none; echo filled; read _; cat /dev/null", data.path());
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn sh");
    pin_to_cpu_0(child.id());
    let config = PerfConfig { pid: Some(child.id()), ring_pages: 1, ..PerfConfig::default() };
    let Some(mut observer) = observer(config) else {
        child.kill().expect("kill");
        child.wait().expect("wait");
        return;
    };
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"go\n").expect("release");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("dd done");
    assert_eq!(line, "filled\n");
    observer.poll(Duration::ZERO, &mut |_| {}).expect("drain the full ring");
    stdin.write_all(b"go\n").expect("release again");
    drop(stdin);
    assert!(child.wait().expect("wait").success());
    observer.poll(Duration::from_millis(1), &mut |_| {}).expect("poll");
    let stats = observer.stats();
    assert!(stats.lost > 0, "{stats:?}");
    assert!(stats.reads + stats.lost >= 512, "{stats:?}");
}

/// Restricts `pid` (and the children it forks from now on) to CPU 0.
#[track_caller]
fn pin_to_cpu_0(pid: u32) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(0);
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("a positive pid");
    rustix::thread::sched_setaffinity(Some(pid), &set).expect("sched_setaffinity");
}

#[test]
fn an_exec_wakes_a_long_poll_at_once() {
    if !privileged() {
        return;
    }
    let mut held = Held::spawn(&["true"]);
    let pid = held.pid();
    // A threshold the test never reaches: only the exec ring's own wake-up
    // can end the poll before its timeout.
    let config = PerfConfig { pid: Some(pid), wakeup_bytes: 256 << 10, ring_pages: 128, ..PerfConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    held.release();
    let (execs, waited) = wait_for_exec(&mut observer, pid);
    assert_eq!(execs, 1);
    assert!(waited < Duration::from_secs(2), "the exec did not wake the poll: {waited:?}");
    assert!(held.child.wait().expect("wait").success());
}

#[test]
fn a_pid_that_does_not_exist_is_an_error_not_unavailable() {
    if !privileged() {
        return;
    }
    // A pid above any the kernel hands out (pid_max is at most 2^22).
    let err = PerfObserver::open(PerfConfig { pid: Some((1 << 22) + 17), ..PerfConfig::default() })
        .expect_err("no such process");
    assert!(!err.is_unavailable(), "{err}");
    assert!(err.to_string().contains("perf_event_open"), "{err}");
}

/// What perf observation costs a traced reader, beside eBPF's: `dd bs=4096`
/// over a cached 256 MiB file (one `read()` and one record per page, the
/// worst case for per-record cost), rounds interleaved. Not a pass/fail
/// test: run it by hand and read the output.
///
/// ```text
/// cargo test --release -p predictio-bpf --test perf -- --ignored --nocapture overhead
/// ```
#[test]
#[ignore = "a measurement (about 20 s), not a check"]
fn overhead_of_a_traced_reader() {
    if !privileged() {
        return;
    }
    let data = TestFile::new(65536);
    std::fs::read(&data.path).expect("load into the page cache");
    let dd = ["dd", &format!("if={}", data.path()), "of=/dev/null", "bs=4096", "status=none"];
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Untraced,
        Perf,
        PerfWakeEveryRecord,
        Ebpf,
    }
    let modes = [Mode::Untraced, Mode::Perf, Mode::PerfWakeEveryRecord, Mode::Ebpf];
    let mut seconds: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let mut records = [0u64; 4];
    for _round in 0..5 {
        for (i, &mode) in modes.iter().enumerate() {
            let mut held = Held::spawn(&dd);
            let pid = held.pid();
            let mut perf = match mode {
                Mode::Perf => Some(PerfObserver::open(PerfConfig { pid: Some(pid), ..PerfConfig::default() })),
                Mode::PerfWakeEveryRecord => {
                    Some(PerfObserver::open(PerfConfig { pid: Some(pid), wakeup_bytes: 1, ..PerfConfig::default() }))
                }
                _ => None,
            }
            .map(|opened| opened.expect("open perf"));
            if mode == Mode::Ebpf && predictio_bpf::available().is_err() {
                continue; // a build without clang: perf beside no observer only
            }
            let mut ebpf = (mode == Mode::Ebpf).then(|| {
                let mut observer =
                    predictio_bpf::Observer::load(predictio_bpf::ObserverConfig::default()).expect("eBPF observer");
                observer.follow(pid).expect("follow");
                observer
            });
            let start = Instant::now();
            held.release();
            let mut count = 0u64;
            loop {
                let done = held.child.try_wait().expect("try_wait").is_some();
                if let Some(observer) = perf.as_mut() {
                    observer.poll(Duration::from_millis(1), &mut |_| count += 1).expect("poll");
                } else if let Some(observer) = ebpf.as_mut() {
                    observer.poll(Duration::from_millis(1), &mut |_| count += 1).expect("poll");
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
                if done {
                    break;
                }
            }
            seconds[i].push(start.elapsed().as_secs_f64());
            records[i] += count;
            if let Some(observer) = &perf {
                assert_eq!(observer.stats().lost, 0, "{:?}", observer.stats());
            }
        }
    }
    let base = seconds[0].iter().copied().fold(f64::INFINITY, f64::min);
    for (i, mode) in modes.iter().enumerate().filter(|(i, _)| !seconds[*i].is_empty()) {
        let mut s = seconds[i].clone();
        s.sort_by(f64::total_cmp);
        println!(
            "{mode:?}: best {:.3} s ({:.2}x), median {:.3} s ({:.2}x), {} events/round",
            s[0],
            s[0] / base,
            s[s.len() / 2],
            s[s.len() / 2] / base,
            records[i] / 5
        );
    }
}
