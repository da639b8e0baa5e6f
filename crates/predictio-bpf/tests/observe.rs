//! The eBPF observer against the real kernel: each test loads its own
//! observer, runs real processes on real files and checks the events.
//!
//! Needs root (CAP_BPF + CAP_PERFMON) and a build with the BPF object. Without
//! them each test prints why it skips; under `CI=true` a skip is a failure.
//! Test files live under Cargo's target tmp dir (a disk file system: tmpfs
//! reads do not go through the filemap tracepoints).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write as _;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use predictio::event::AccessKind;
use predictio::{Event, FileId, FileRef, PAGE_SIZE};
use predictio_bpf::{FollowAllLookups, Observer, ObserverConfig};

mod common;
use common::{Drain as _, Held, forked_children, pages_accessed, path_str, wait_for_exec, which};

/// Loads an observer, or says why not: `None` (skip) outside CI, a panic
/// under `CI=true`.
#[track_caller]
fn observer(config: ObserverConfig) -> Option<Observer> {
    let skip = |why: String| {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and the eBPF test cannot run: {why}");
        }
        eprintln!("skipping: {why}");
        None
    };
    if !rustix::process::geteuid().is_root() {
        return skip("needs root (CAP_BPF and CAP_PERFMON)".into());
    }
    match Observer::load(config) {
        Ok(observer) => Some(observer),
        Err(err) if err.is_unavailable() => skip(format!("eBPF observation unavailable: {err}")),
        Err(err) => panic!("loading the observer: {err}"),
    }
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
        Self::new_bytes(pages * PAGE_SIZE)
    }

    /// A file of `len` bytes.
    #[track_caller]
    fn new_bytes(len: u64) -> TestFile {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
        let path = dir.path().join("data");
        let mut out = File::create(&path).expect("create");
        let mut page = vec![0u8; PAGE_SIZE as usize];
        for i in 0..len.div_ceil(PAGE_SIZE) {
            page.fill(i as u8 | 1);
            let n = (len - i * PAGE_SIZE).min(PAGE_SIZE) as usize;
            out.write_all(&page[..n]).expect("write");
        }
        out.sync_all().expect("fsync");
        let file = FileRef::open(&path).expect("open");
        TestFile { _dir: dir, path, file }
    }

    fn id(&self) -> FileId {
        self.file.id()
    }

    /// Drops the file's pages from the page cache.
    #[track_caller]
    fn evict(&self) {
        predictio::cache::evict(&self.file).expect("fadvise(DONTNEED)");
    }

    /// Reads the whole file into the page cache.
    #[track_caller]
    fn load(&self) {
        std::fs::read(&self.path).expect("read");
    }
}

fn all_pages(pages: u64) -> BTreeSet<u64> {
    (0..pages).collect()
}

/// Maps the first `pages` pages of `fd` and reads a byte of each through
/// the mapping (faults, and pages mapped around them); returns their sum.
fn read_through_a_mapping(fd: std::os::fd::BorrowedFd<'_>, pages: u64) -> u64 {
    let len = (pages * PAGE_SIZE) as usize;
    // Faulting pages through a mapping of our own is what the tests are
    // about, so this maps and reads raw memory (unsafe, unavoidably).
    use rustix::mm::{MapFlags, ProtFlags};
    // SAFETY: a fresh read-only private mapping of an open file, chosen by the
    // kernel; it aliases no Rust memory and is unmapped below.
    let base = unsafe { rustix::mm::mmap(std::ptr::null_mut(), len, ProtFlags::READ, MapFlags::PRIVATE, fd, 0) }
        .expect("mmap");
    let mut sum = 0u64;
    for page in 0..pages as usize {
        // SAFETY: the byte lies inside the live mapping of `len` bytes; the
        // caller's file is at least as long, so the access cannot SIGBUS.
        sum += u64::from(unsafe { std::ptr::read_volatile(base.cast::<u8>().add(page * PAGE_SIZE as usize)) });
    }
    // SAFETY: unmapping exactly the mapping made above; nothing refers to it.
    unsafe { rustix::mm::munmap(base, len) }.expect("munmap");
    sum
}

#[test]
fn buffered_read_reports_the_file_and_its_pages() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    // 61 pages and a half: the last page is partial.
    let data = TestFile::new_bytes(61 * PAGE_SIZE + PAGE_SIZE / 2);
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    let read = pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid));
    // Exactly the file's pages: cat asks for 128 KiB at a time and once more
    // at end of file, but only pages that exist are reported.
    assert_eq!(read, all_pages(62), "pages read by cat");
    let stats = observer.stats();
    assert!(stats.reads > 0 && stats.lost == 0, "{stats:?}");
    assert!(!observer.is_followed(pid), "exit must remove the pid from the followed set");
}

#[test]
fn children_of_a_followed_process_are_followed() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(16);
    // `; true` keeps the shell from exec'ing cat: cat is a forked child.
    let script = format!("cat '{}'; true", path_str(&data.path));
    let held = Held::spawn(&["sh", "-c", &script]);
    let shell = held.pid();
    observer.follow(shell).expect("follow");
    let events = held.run(&mut observer);
    let children = forked_children(&events, shell);
    assert_eq!(children.len(), 1, "one fork of the shell: {events:?}");
    let cat = children[0];
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(cat)).is_superset(&all_pages(16)));
    assert!(events.iter().any(|e| matches!(e, Event::Exit { pid, .. } if *pid == cat)), "the child's exit");
}

#[test]
fn reading_an_evicted_file_reports_misses() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(32);
    data.evict();
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    let missed: BTreeSet<u64> = events
        .iter()
        .flat_map(|e| match e {
            Event::PageMiss { pid: p, file, pages, .. } if *file == data.id() && *p == pid => pages.start..pages.end,
            _ => 0..0,
        })
        .collect();
    assert_eq!(missed, all_pages(32), "every page of the evicted file must miss");
    // A folio's pages are one event, and folios added back to back join:
    // never more miss events than the kernel's records.
    let runs = events.iter().filter(|e| matches!(e, Event::PageMiss { file, .. } if *file == data.id())).count();
    let records = observer.stats().misses;
    assert!(runs as u64 <= records, "{runs} miss events from {records} records");
}

#[test]
fn evictions_are_reported_for_the_device() {
    let data = TestFile::new(16);
    let config =
        ObserverConfig { devices: vec![data.id().dev], evictions_any_process: true, ..ObserverConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    data.load();
    data.evict();
    let mut evicted = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while evicted.len() < 16 && Instant::now() < deadline {
        observer
            .poll(Duration::from_millis(2), &mut |e| {
                if let Event::PageEvict { file, pages, .. } = e
                    && file == data.id()
                {
                    evicted.extend(pages.start..pages.end);
                }
            })
            .expect("poll");
    }
    assert_eq!(evicted, all_pages(16));
}

#[test]
fn an_unrelated_process_is_not_reported() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let followed_file = TestFile::new(8);
    let other_file = TestFile::new(8);
    let mut other = Held::spawn(&["cat", path_str(&other_file.path)]);
    let held = Held::spawn(&["cat", path_str(&followed_file.path)]);
    let followed = held.pid();
    observer.follow(followed).expect("follow");
    other.release();
    let events = held.run(&mut observer);
    assert!(other.child.wait().expect("wait").success());
    observer.poll(Duration::from_millis(5), &mut |e| panic!("late event {e:?}")).expect("poll");
    assert!(!pages_accessed(&events, followed_file.id(), &[AccessKind::Read], None).is_empty());
    for event in &events {
        assert_ne!(event.file(), Some(other_file.id()), "{event:?}");
        let pid = match event {
            Event::PageAccess { pid, .. }
            | Event::PageMiss { pid, .. }
            | Event::Exec { pid, .. }
            | Event::Exit { pid, .. } => *pid,
            Event::Fork { parent, .. } => *parent,
            _ => followed,
        };
        assert_eq!(pid, followed, "{event:?}");
    }
}

#[test]
fn mmap_reads_report_faults_and_mapped_pages() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let pages = 64u64;
    let data = TestFile::new(pages);
    // Resident pages are mapped by fault-around (`map_pages`) without reaching
    // `filemap_fault`; evicted ones fault.
    data.evict();
    // This test's own process does the mapping: follow it (other tests'
    // threads may report too; the file filters them out).
    observer.follow(std::process::id()).expect("follow self");
    let sum = read_through_a_mapping(data.file.file().as_fd(), pages);
    assert!(sum > 0);
    let mut events = Vec::new();
    observer.poll(Duration::from_millis(5), &mut |e| events.push(e)).expect("poll");
    observer.unfollow(std::process::id()).expect("unfollow");
    let own = Some(std::process::id());
    let faulted = pages_accessed(&events, data.id(), &[AccessKind::Fault], own);
    let mapped = pages_accessed(&events, data.id(), &[AccessKind::Fault, AccessKind::MapPages], own);
    assert!(!faulted.is_empty(), "no fault on the mapping: {events:?}");
    assert!(mapped.is_superset(&all_pages(pages)), "pages faulted or mapped: {mapped:?}");
}

/// A memfd (tmpfs) read through a mapping reports nothing: none of it is
/// ever read from storage. A file on disk read the same way beside it does.
#[test]
fn files_kept_in_memory_only_are_not_reported() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let pages = 32u64;
    let memfd = rustix::fs::memfd_create("predictio-observe", rustix::fs::MemfdFlags::CLOEXEC).expect("memfd_create");
    let mut memfd = File::from(memfd);
    memfd.write_all(&vec![1u8; (pages * PAGE_SIZE) as usize]).expect("write the memfd");
    let meta = memfd.metadata().expect("fstat");
    let in_memory = FileId { dev: meta.dev(), ino: meta.ino() };
    let on_disk = TestFile::new(pages);
    observer.follow(std::process::id()).expect("follow self");
    let sum = read_through_a_mapping(memfd.as_fd(), pages) + read_through_a_mapping(on_disk.file.file().as_fd(), pages);
    assert!(sum > 0);
    let mut events = Vec::new();
    observer.poll(Duration::from_millis(5), &mut |e| events.push(e)).expect("poll");
    observer.unfollow(std::process::id()).expect("unfollow");
    let own = Some(std::process::id());
    let kinds = [AccessKind::Read, AccessKind::Fault, AccessKind::MapPages];
    assert!(!pages_accessed(&events, on_disk.id(), &kinds, own).is_empty(), "the file on disk: {events:?}");
    assert!(events.iter().all(|e| e.file() != Some(in_memory)), "the memfd was reported: {events:?}");
}

#[test]
fn exec_reports_the_executable_and_exit_follows() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(1);
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    let cat = which("cat");
    let meta = std::fs::metadata(&cat).expect("stat cat");
    let cat_id = FileId { dev: meta.dev(), ino: meta.ino() };
    let execs: Vec<(u32, FileId)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Exec { pid, exe, .. } => Some((*pid, *exe)),
            _ => None,
        })
        .collect();
    // The shell's own exec may or may not be seen: `spawn` returns once the
    // exec has closed its close-on-exec pipe, a little before the tracepoint.
    assert_eq!(execs.last(), Some(&(pid, cat_id)), "the exec of {}: {execs:?}", cat.display());
    assert!(execs.len() <= 2 && execs.iter().all(|(p, _)| *p == pid), "{execs:?}");
    let exits = events.iter().filter(|e| matches!(e, Event::Exit { pid: p, .. } if *p == pid)).count();
    assert_eq!(exits, 1);
    // The record carries the new program's command line, read in the
    // kernel at the exec: its shape is the one `predictio run` makes of
    // the same command, so a profile learned one way replays the other.
    let shape = events.iter().rev().find_map(|e| match e {
        Event::Exec { exe, shape, .. } if *exe == cat_id => Some(shape.to_string()),
        _ => None,
    });
    let expected = predictio::launch::shape::of_args(&["cat", path_str(&data.path)]);
    assert!(expected.starts_with("cat /"), "{expected}");
    assert_eq!(shape.as_deref(), Some(expected.as_str()));
}

#[test]
fn a_script_execs_as_its_interpreter_with_the_shape_record_and_run_expect() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    // `#!/usr/bin/env sh` too: env runs, then sh in the same process.
    for shebang in ["#!/bin/sh -e", "#!/usr/bin/env sh"] {
        let script = dir.path().join("tool.sh");
        std::fs::write(&script, format!("{shebang}\ntrue\n")).expect("write");
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
        let command = [path_str(&script), "--opt", "x.txt"];
        let expected = predictio::launch::command::launch_of(&command).expect("launch_of");
        let held = Held::spawn(&command);
        let pid = held.pid();
        observer.follow(pid).expect("follow");
        let events = held.run(&mut observer);
        let meta = std::fs::metadata(&expected.exe.path).expect("stat interpreter");
        let interpreter = FileId { dev: meta.dev(), ino: meta.ino() };
        // The holding shell's own exec may be seen first, and env execs
        // its command after: the script's exec is among them (the daemon
        // keys the launch by the first of its window).
        let execs: Vec<(FileId, String)> = events
            .iter()
            .filter_map(|e| match e {
                Event::Exec { pid: p, exe, shape, .. } if *p == pid => Some((*exe, shape.to_string())),
                _ => None,
            })
            .collect();
        assert!(execs.contains(&(interpreter, expected.shape.clone())), "{shebang}: {:?} in {execs:?}", expected.shape);
    }
}

#[test]
fn an_exec_with_a_long_command_line_carries_its_first_bytes() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(1);
    // 2 KiB of options after the file: only the first bytes count, as in
    // `launch::shape::of_args` (which the kernel's copy must match).
    let options: Vec<String> = (0..200).map(|i| format!("-{}", ['u', 's', 'v'][i % 3])).collect();
    let mut args: Vec<&str> = vec!["cat", path_str(&data.path)];
    args.extend(options.iter().map(String::as_str));
    let held = Held::spawn(&args);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    let shapes: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Exec { pid: p, shape, .. } if *p == pid => Some(shape.to_string()),
            _ => None,
        })
        .collect();
    let expected = predictio::launch::shape::of_args(&args);
    assert_eq!(expected.split(' ').count(), 2 + predictio::launch::shape::MAX_OPTIONS, "{expected}");
    assert_eq!(shapes.last(), Some(&expected), "{shapes:?}");
}

#[test]
fn follow_all_reports_processes_never_followed() {
    let Some(mut observer) = observer(ObserverConfig { follow_all: true, ..ObserverConfig::default() }) else {
        return;
    };
    let data = TestFile::new(4);
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    let events = held.run(&mut observer);
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid)).is_superset(&all_pages(4)));
    observer.follow_all(false).expect("follow_all(false)");
    let quiet = Held::spawn(&["cat", path_str(&data.path)]);
    let mut quiet = quiet;
    quiet.release();
    assert!(quiet.child.wait().expect("wait").success());
    let mut late = Vec::new();
    observer.poll(Duration::from_millis(5), &mut |e| late.push(e)).expect("poll");
    assert!(late.iter().all(|e| e.file() != Some(data.id())), "{late:?}");
}

#[test]
fn follow_all_can_leave_out_its_own_processs_pages() {
    let me = std::process::id();
    for ignore_own_pages in [false, true] {
        let config = ObserverConfig { follow_all: true, ignore_own_pages, ..ObserverConfig::default() };
        let Some(mut observer) = observer(config) else { return };
        let data = TestFile::new(8);
        data.evict();
        data.load(); // read (and missed) by this very process
        let held = Held::spawn(&["cat", path_str(&data.path)]);
        let cat = held.pid();
        let events = held.run(&mut observer);
        let own = events
            .iter()
            .filter(|e| {
                matches!(e, Event::PageAccess { pid, file, .. } | Event::PageMiss { pid, file, .. }
                    if *pid == me && *file == data.id())
            })
            .count();
        if ignore_own_pages {
            assert_eq!(own, 0, "none of this process's page events: {events:?}");
        } else {
            assert!(own > 0, "this process's reads and misses are reported by default");
        }
        assert!(
            pages_accessed(&events, data.id(), &[AccessKind::Read], Some(cat)).is_superset(&all_pages(8)),
            "other processes' pages are reported either way"
        );
    }
}

#[test]
fn a_full_ring_counts_lost_records() {
    let config = ObserverConfig { ring_bytes: 4096, ..ObserverConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    let data = TestFile::new(512);
    // One 4 KiB read() per page: 512 records into a ring that holds ~70.
    let mut held =
        Held::spawn(&["dd", &format!("if={}", path_str(&data.path)), "of=/dev/null", "bs=4096", "status=none"]);
    observer.follow(held.pid()).expect("follow");
    held.release();
    assert!(held.child.wait().expect("wait").success());
    let mut delivered = 0;
    observer.poll(Duration::from_millis(1), &mut |_| delivered += 1).expect("poll");
    let stats = observer.stats();
    assert!(stats.lost > 0, "{stats:?}");
    assert!(stats.records + stats.lost >= 512, "{stats:?}");
}

#[test]
fn the_device_filter_excludes_other_devices() {
    let data = TestFile::new(4);
    // A device number no file of the test lives on.
    let other_dev = libc::makedev(4095, 4095);
    let config = ObserverConfig { devices: vec![other_dev], ..ObserverConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    observer.follow(held.pid()).expect("follow");
    let events = held.run(&mut observer);
    assert!(events.iter().all(|e| !matches!(e, Event::PageAccess { .. } | Event::PageMiss { .. })), "{events:?}");
    assert!(events.iter().any(|e| matches!(e, Event::Exit { .. })), "process events are not device-filtered");
}

/// The cgroup v2 hierarchy's mount point (`/sys/fs/cgroup` on a unified
/// system, `/sys/fs/cgroup/unified` on a hybrid one).
fn cgroup2_mount() -> Option<PathBuf> {
    std::fs::read_to_string("/proc/self/mounts").ok()?.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
        (fstype == "cgroup2").then(|| PathBuf::from(target))
    })
}

#[test]
fn the_cgroup_filter_reports_only_processes_inside() {
    let Some(root) = cgroup2_mount() else {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and no cgroup2 mount for the cgroup filter test");
        }
        eprintln!("skipping: no cgroup2 mount");
        return;
    };
    let cgroup = root.join(format!("predictio-bpf-test-{}", std::process::id()));
    if let Err(err) = std::fs::create_dir(&cgroup) {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and cannot create {}: {err}", cgroup.display());
        }
        eprintln!("skipping: cannot create {}: {err}", cgroup.display());
        return;
    }
    struct RemoveOnDrop(PathBuf);
    impl Drop for RemoveOnDrop {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _cleanup = RemoveOnDrop(cgroup.clone());
    let config = ObserverConfig { follow_all: true, cgroup: Some(cgroup.clone()), ..ObserverConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    let data = TestFile::new(4);
    let inside = Held::spawn(&["cat", path_str(&data.path)]);
    std::fs::write(cgroup.join("cgroup.procs"), inside.pid().to_string()).expect("move into the cgroup");
    let inside_pid = inside.pid();
    let mut outside = Held::spawn(&["cat", path_str(&data.path)]);
    let outside_pid = outside.pid();
    outside.release();
    assert!(outside.child.wait().expect("wait").success());
    let events = inside.run(&mut observer);
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(inside_pid)).is_superset(&all_pages(4)));
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(outside_pid)).is_empty(), "{events:?}");
}

#[test]
fn a_full_followed_set_counts_children_not_followed() {
    let Some(mut observer) = observer(ObserverConfig { max_followed: 1, ..ObserverConfig::default() }) else { return };
    // `cat` is not a shell builtin: the shell forks for it.
    let held = Held::spawn(&["sh", "-c", "cat /dev/null; true"]);
    observer.follow(held.pid()).expect("follow");
    let events = held.run(&mut observer);
    assert!(events.iter().any(|e| matches!(e, Event::Fork { .. })), "{events:?}");
    assert!(observer.stats().lost_follows >= 1, "{:?}", observer.stats());
}

#[test]
fn an_exec_wakes_a_long_poll_at_once() {
    // A threshold the test never reaches: only the exec's own wake-up can end
    // the poll before its timeout.
    let config = ObserverConfig { wakeup_bytes: 1 << 30, ring_bytes: 1 << 22, ..ObserverConfig::default() };
    let Some(mut observer) = observer(config) else { return };
    let mut held = Held::spawn(&["true"]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    held.release();
    let (execs, waited) = wait_for_exec(&mut observer, pid);
    assert_eq!(execs, 1);
    assert!(waited < Duration::from_secs(2), "the exec did not wake the poll: {waited:?}");
    assert!(held.child.wait().expect("wait").success());
}

#[test]
fn follow_and_unfollow_report_membership() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    // A pid above any the kernel hands out (pid_max is at most 2^22).
    let pid = (1 << 22) + 17;
    assert!(!observer.is_followed(pid));
    assert!(!observer.unfollow(pid).expect("unfollow an unknown pid"));
    observer.follow(pid).expect("follow");
    assert!(observer.is_followed(pid));
    assert!(observer.unfollow(pid).expect("unfollow"));
    assert!(!observer.is_followed(pid));
}

/// The absolute paths `pid` looked up, in order.
fn lookups_of(events: &[Event], pid: u32) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Lookup { pid: p, path, .. } if *p == pid => Some(path.to_string()),
            _ => None,
        })
        .collect()
}

#[test]
fn path_lookups_of_a_followed_process_are_reported_in_order() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(1);
    let dir = data.path.parent().expect("parent");
    let missing = dir.join("no-such-name");
    // A stat of a name that does not exist (the shell's `test`), an open
    // of an absolute path, and one of a relative path (not reported: its
    // directory is the process's, gone by the time a recording is named).
    let script = format!(
        "test -e '{}'; cat '{}' >/dev/null; cd '{}' && cat data >/dev/null",
        path_str(&missing),
        path_str(&data.path),
        path_str(dir)
    );
    let held = Held::spawn(&["sh", "-c", &script]);
    let shell = held.pid();
    observer.follow(shell).expect("follow");
    let events = held.run(&mut observer);
    let mut seen: Vec<String> = lookups_of(&events, shell);
    for child in forked_children(&events, shell) {
        seen.extend(lookups_of(&events, child));
    }
    let at = |p: &std::path::Path| seen.iter().position(|s| s == path_str(p));
    let (Some(m), Some(d)) = (at(&missing), at(&data.path)) else { panic!("both lookups: {seen:?}") };
    assert!(m < d, "in order: {seen:?}");
    assert!(seen.iter().all(|s| s.starts_with('/')), "only absolute paths: {seen:?}");
    assert!(observer.stats().lookups >= 2);
}

#[test]
fn follow_all_reports_lookups_only_when_asked() {
    let data = TestFile::new(1);
    let window = FollowAllLookups::Launches { window: Duration::from_secs(10), per_launch: 1 << 14 };
    for (lookups, reported) in [(FollowAllLookups::None, false), (FollowAllLookups::All, true), (window, true)] {
        let config = ObserverConfig { follow_all: true, follow_all_lookups: lookups, ..ObserverConfig::default() };
        let Some(mut observer) = observer(config) else { return };
        let held = Held::spawn(&["cat", path_str(&data.path)]);
        let pid = held.pid();
        // Never followed explicitly: reported through follow-all.
        let events = held.run(&mut observer);
        let looked_up = lookups_of(&events, pid).iter().any(|p| p == path_str(&data.path));
        assert_eq!(looked_up, reported, "{lookups:?}: {:?}", lookups_of(&events, pid));
        assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid)).is_superset(&all_pages(1)));
    }
}

#[test]
fn follow_all_launch_lookups_stop_when_the_launch_window_ends() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let name = |n: &str| dir.path().join(n);
    let (early, late, forked, before) = (name("early"), name("late"), name("forked"), name("before"));
    // Started before the observer loads: its exec is not seen, so it is not
    // in a launch and its lookups are not reported.
    let mut old = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("read _; test -e '{}'; true", path_str(&before)))
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sh");
    let config = ObserverConfig {
        follow_all: true,
        follow_all_lookups: FollowAllLookups::Launches { window: Duration::from_millis(400), per_launch: 1 << 14 },
        ..ObserverConfig::default()
    };
    let Some(mut observer) = observer(config) else {
        let _ = old.kill();
        let _ = old.wait();
        return;
    };
    old.stdin.take().expect("stdin").write_all(b"go\n").expect("release");
    assert!(old.wait().expect("wait").success());
    // `test` is the shell's own stat: the first inside the window, the
    // second 1 s after the exec; the subshell forked inside the window does
    // its lookup after it.
    let script = format!(
        "test -e '{}'; (sleep 1; test -e '{}') & sleep 1; test -e '{}'; wait",
        path_str(&early),
        path_str(&forked),
        path_str(&late)
    );
    let held = Held::spawn(&["sh", "-c", &script]);
    let shell = held.pid();
    let mut events = held.run(&mut observer);
    observer.drain_into(&mut events);
    // Every process's lookups in its launch are reported: keep this test's.
    let ours = path_str(dir.path());
    let seen: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            Event::Lookup { path, .. } if path.starts_with(ours) => Some(path.to_string()),
            _ => None,
        })
        .collect();
    assert!(lookups_of(&events, shell).iter().any(|p| p == path_str(&early)), "inside the window: {seen:?}");
    for (path, what) in
        [(&late, "after the window"), (&forked, "a child's, after the window"), (&before, "exec unseen")]
    {
        assert!(!seen.iter().any(|p| p == path_str(path)), "{what} ({}): {seen:?}", path.display());
    }
}

#[test]
fn follow_all_launch_lookups_stop_at_the_launch_budget() {
    let budget = 40;
    let config = ObserverConfig {
        follow_all: true,
        follow_all_lookups: FollowAllLookups::Launches { window: Duration::from_secs(10), per_launch: budget },
        ..ObserverConfig::default()
    };
    let Some(mut observer) = observer(config) else { return };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    // A hundred stats of absolute paths by the shell itself, after the
    // loader's own few lookups (without cargo's library path): more than the
    // budget.
    let script = format!("for i in $(seq 100); do test -e '{}'/n$i; done; true", path_str(dir.path()));
    let held = Held::spawn(&["env", "-u", "LD_LIBRARY_PATH", "sh", "-c", &script]);
    let shell = held.pid();
    let events = held.run(&mut observer);
    // Before the last exec, `env` looked `sh` up on its PATH; the budget
    // counts from that exec.
    let exec_ns = events
        .iter()
        .filter_map(|e| match e {
            Event::Exec { pid, time_ns, .. } if *pid == shell => Some(*time_ns),
            _ => None,
        })
        .max()
        .expect("the exec is reported");
    let after: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::Lookup { pid, path, time_ns } if *pid == shell && *time_ns > exec_ns => Some(&**path),
            _ => None,
        })
        .collect();
    assert_eq!(after.len(), budget as usize, "{after:?}");
    assert!(
        after.iter().any(|p| p.starts_with(path_str(dir.path()))),
        "the script's own stats are among them: {after:?}"
    );
}

#[test]
fn without_the_path_call_programs_no_lookups_are_reported() {
    let data = TestFile::new(1);
    let Some(mut observer) = observer(ObserverConfig { path_calls: false, ..ObserverConfig::default() }) else {
        return;
    };
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    assert!(!events.iter().any(|e| matches!(e, Event::Lookup { .. })), "{:?}", lookups_of(&events, pid));
    assert_eq!(observer.stats().lookups, 0);
    assert!(
        !events.iter().any(|e| matches!(e, Event::ExecStart { .. })),
        "the exec-start programs are path-call programs"
    );
    assert_eq!(observer.stats().exec_starts, 0);
    assert!(pages_accessed(&events, data.id(), &[AccessKind::Read], Some(pid)).is_superset(&all_pages(1)));
}

#[test]
fn an_exec_start_is_reported_before_its_exec() {
    let data = TestFile::new(1);
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let held = Held::spawn(&["cat", path_str(&data.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    let cat = which("cat");
    // The shell's own exec may be seen too (see
    // `exec_reports_the_executable_and_exit_follows`): cat's is the last.
    // The shell tries each directory of its PATH: the last start before it
    // is the one that ran.
    let exec_at = events.iter().rposition(|e| matches!(e, Event::Exec { pid: p, .. } if *p == pid)).expect("exec");
    let start = events[..exec_at].iter().rev().find_map(|e| match e {
        Event::ExecStart { pid: p, uid, path, shape, .. } if *p == pid => Some((*uid, path.clone(), shape.clone())),
        _ => None,
    });
    let Some((uid, path, shape)) = start else { panic!("no exec start before the exec: {events:?}") };
    assert_eq!(std::fs::canonicalize(path.as_ref()).ok(), std::fs::canonicalize(&cat).ok(), "{path}");
    assert_eq!(uid, rustix::process::getuid().as_raw());
    // The command line as the caller passed it, shaped like the exec's.
    let Event::Exec { shape: exec_shape, .. } = &events[exec_at] else { unreachable!() };
    assert_eq!(shape, *exec_shape);
    assert!(observer.stats().exec_starts >= 1);
}

#[test]
fn closing_in_the_background_returns_before_the_programs_are_detached() {
    let Some(observer) = observer(ObserverConfig::default()) else { return };
    let started = Instant::now();
    let helper = observer.close_in_background().expect("a helper is forked");
    let returned = started.elapsed();
    let pid = rustix::process::Pid::from_raw(helper as i32).expect("a child's pid is positive");
    let reaped = rustix::process::waitpid(Some(pid), rustix::process::WaitOptions::empty()).expect("waitpid");
    // The helper exits once the kernel has released the last references:
    // the programs are detached by now.
    let detached = started.elapsed();
    let (reaped, status) = reaped.expect("the helper was reaped");
    assert_eq!(reaped, pid);
    assert_eq!(status.exit_status(), Some(0), "status {status:?}");
    eprintln!("returned after {returned:?}, detached after {detached:?}");
    assert!(returned * 2 < detached, "returned after {returned:?}, detached after {detached:?}");
}

/// A consumer about to sleep on the emptied ring says so
/// (`Observer::set_sleeping`): the next record, however small, wakes it.
/// Without that, a record under the wake-up threshold waits in the ring
/// until something else wakes the consumer. The reader is a shell that
/// reads one line of the file with its `read` builtin when told to (no
/// exec, whose record would wake the consumer anyway), followed alone.
#[test]
fn a_sleeping_consumer_is_woken_by_the_next_record() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let data = TestFile::new(8);
    // Woken: the poll ended before its timeout.
    let sleep_on_ring = |observer: &Observer, timeout: Duration| -> (bool, Duration) {
        let start = Instant::now();
        predictio::os::poll_readable_any([observer.as_fd()], Some(timeout)).expect("poll");
        let waited = start.elapsed();
        (waited < timeout - Duration::from_millis(100), waited)
    };
    let round = |observer: &mut Observer, sleeping: bool, timeout: Duration| -> (bool, Duration, usize) {
        data.evict();
        let script = format!("read go; read line < '{}'; read done", path_str(&data.path));
        let mut shell = Command::new("sh").args(["-c", &script]).stdin(Stdio::piped()).spawn().expect("sh runs");
        let pid = shell.id();
        std::thread::sleep(Duration::from_millis(100));
        observer.follow(pid).expect("follow the shell");
        observer.drain(&mut |_| {});
        if sleeping {
            observer.set_sleeping(true).expect("set sleeping");
        }
        let mut stdin = shell.stdin.take().expect("stdin");
        let go = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            stdin.write_all(b"go\n").expect("go");
            stdin
        });
        let (woken, waited) = sleep_on_ring(observer, timeout);
        let mut stdin = go.join().expect("go");
        stdin.write_all(b"done\n").expect("done");
        drop(stdin);
        shell.wait().expect("sh exits");
        let mut missed = 0;
        observer.drain(&mut |e| missed += usize::from(matches!(e, Event::PageMiss { file, .. } if file == data.id())));
        let _ = observer.unfollow(pid);
        (woken, waited, missed)
    };

    // Not said: the read's few records do not end the sleep.
    let (woken, waited, missed) = round(&mut observer, false, Duration::from_secs(1));
    assert!(!woken, "a record under the threshold woke the consumer after {waited:?}");
    assert!(missed > 0, "the read's misses were in the ring all along");

    // Said: the first record ends the sleep.
    let (woken, waited, missed) = round(&mut observer, true, Duration::from_secs(3));
    assert!(woken, "not woken: slept {waited:?}");
    assert!(missed > 0, "the record that woke the consumer is the read's miss");
}

/// A quieted launch: the process and what it forks report no hits on the
/// files listed while the quiet lasts, and every other file, process and
/// miss as ever; once it is over, the same reads are reported again.
#[test]
fn a_quieted_launch_reports_no_hits_on_its_files() {
    let Some(mut observer) = observer(ObserverConfig::default()) else { return };
    let (listed, other) = (TestFile::new(16), TestFile::new(16));
    listed.load();
    other.load();
    let script = format!("cat '{}' '{}'; true", path_str(&listed.path), path_str(&other.path));
    let read_by =
        |events: &[Event], file: &TestFile, pid| pages_accessed(events, file.id(), &[AccessKind::Read], Some(pid));
    let quieter = observer.quieter();
    let held = Held::spawn(&["sh", "-c", &script]);
    let shell = held.pid();
    observer.follow(shell).expect("follow");
    assert_eq!(quieter.quiet(shell, [listed.id()], Duration::from_secs(30)).expect("quiet"), 1);
    let events = held.run(&mut observer);
    let children = forked_children(&events, shell);
    assert_eq!(children.len(), 1, "cat, forked: {events:?}");
    assert!(read_by(&events, &listed, children[0]).is_empty(), "the listed file's hits are quiet: {events:?}");
    assert_eq!(read_by(&events, &other, children[0]), all_pages(16), "another file's are reported");
    // Another process reading the listed file is reported.
    let held = Held::spawn(&["cat", path_str(&listed.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);
    assert_eq!(read_by(&events, &listed, pid), all_pages(16), "not quieted");
    // A repeat of the launch joins its files.
    let held = Held::spawn(&["cat", path_str(&listed.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    quieter.join(pid, shell, Duration::from_secs(30)).expect("join");
    let events = held.run(&mut observer);
    assert!(read_by(&events, &listed, pid).is_empty(), "a joined process is quiet on the set's files");
    // A quiet that is over (a zero span) quiets nothing.
    let held = Held::spawn(&["cat", path_str(&listed.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    quieter.quiet(pid, [listed.id()], Duration::ZERO).expect("quiet");
    let events = held.run(&mut observer);
    assert_eq!(read_by(&events, &listed, pid), all_pages(16), "the quiet is over");
    // A miss of a quieted process is reported: its hits only are quiet.
    listed.evict();
    let held = Held::spawn(&["cat", path_str(&listed.path)]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    quieter.quiet(pid, [listed.id()], Duration::from_secs(30)).expect("quiet");
    let events = held.run(&mut observer);
    let missed =
        events.iter().any(|e| matches!(e, Event::PageMiss { file, pid: p, .. } if *file == listed.id() && *p == pid));
    assert!(missed, "misses are reported: {events:?}");
    assert!(read_by(&events, &listed, pid).is_empty(), "its reads are not");
}
