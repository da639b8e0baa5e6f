//! The memory-pressure guard against memory cgroups, through the executor.
//!
//! A 512 MiB hint for a process in a 48 MiB memory cgroup was issued whole:
//! 131 K pages, 127 K of them evicted before they were used, and nothing
//! backed off, since the guard read only the machine's PSI and
//! `MemAvailable`. It now reads the memory cgroup chain of the process a
//! request is for ([`Request::target_pid`]): such a request issues at most a
//! quarter of the cgroup's headroom, the rest dropped and counted, and a
//! cgroup with no room left sheds it whole.
//!
//! The first tests run over a directory laid out like `/proc` and
//! `/sys/fs/cgroup`. The last makes a real 48 MiB memory cgroup and moves a
//! child process into it: it needs root (outside CI it skips with a message,
//! under `CI=true` a skip is a failure). It uses the hierarchy the guard
//! reads: cgroup v2 (enabling the memory controller at the root if it is
//! only not yet enabled there), or the cgroup v1 memory hierarchy of a
//! hybrid host such as this test machine's.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use predictio::accounting::Counters;
use predictio::executor::{Backend, BackendKind, Executor, ExecutorConfig, Issued, PageCache};
use predictio::file::FileRef;
use predictio::page::{PAGE_SIZE, PageRange};
use predictio::pressure::{CgroupFs, Hierarchy, MemoryState, PressureConfig, PressureGuard};
use predictio::request::Request;
use predictio::testing::{is_root, skip};

const MIB: u64 = 1 << 20;
/// The hint: 512 MiB.
const ASKED: u64 = 512 * MIB / PAGE_SIZE;

/// A file of [`ASKED`] pages with none cached.
struct ColdFile;

impl PageCache for ColdFile {
    fn size(&mut self, _: &FileRef) -> io::Result<u64> {
        Ok(ASKED * PAGE_SIZE)
    }
    fn has_holes(&mut self, _: &FileRef, _: u64) -> io::Result<bool> {
        Ok(false)
    }
    fn data_segments(&mut self, _: &FileRef, range: PageRange, out: &mut Vec<PageRange>) -> io::Result<u64> {
        out.push(range);
        Ok(0)
    }
    fn resident_pages(&mut self, _: &FileRef, _: PageRange) -> io::Result<u64> {
        Ok(0)
    }
    fn residency(&mut self, _: &FileRef, _: u64, range: PageRange, out: &mut Vec<u8>) -> io::Result<()> {
        out.clear();
        out.resize(range.len() as usize, 0);
        Ok(())
    }
}

/// Counts the pages it is asked to read, and reads none.
#[derive(Clone, Default)]
struct Counting(Arc<AtomicU64>);

impl Backend for Counting {
    fn kind(&self) -> BackendKind {
        BackendKind::Fadvise
    }
    fn issue(&mut self, _: &FileRef, range: PageRange, _: u64) -> io::Result<Issued> {
        self.0.fetch_add(range.len(), Ordering::Relaxed);
        Ok(Issued::Done)
    }
}

/// A machine with room to spare: only cgroups bound the prefetch.
fn roomy_machine() -> io::Result<MemoryState> {
    Ok(MemoryState { some_avg10: 0.0, available: 20 << 30, total: 24 << 30 })
}

/// The counters of one 512 MiB speculative request for `pid` through an
/// executor guarded by `guard`, and the pages its backend was asked to read.
#[track_caller]
fn prefetch_512_mib(guard: PressureGuard, pid: Option<u32>) -> (Counters, u64) {
    let backend = Counting::default();
    let config = ExecutorConfig { meta_threads: 0, ..ExecutorConfig::default() };
    let exec =
        Executor::with_parts(config, Box::new(ColdFile), Box::new(backend.clone()), guard, None).expect("executor");
    let origin = exec.register_origin("hint");
    let file = FileRef::open("/proc/self/exe").expect("own executable opens");
    let mut request = Request::new(file, vec![PageRange::new(0, ASKED)], origin);
    if let Some(pid) = pid {
        request = request.for_process(pid);
    }
    exec.submit(request).expect("accepted");
    assert!(exec.wait_idle(Duration::from_secs(30)), "the executor settles");
    (exec.stats().total, backend.0.load(Ordering::Relaxed))
}

/// Most of it cut, counted, what is left within a quarter of `headroom`.
#[track_caller]
fn assert_cut(d: &Counters, read: u64, headroom: u64) {
    assert_eq!(d.issued_pages, read, "issued pages are the ones read");
    assert!(read > 0, "some of it issued: {d:?}");
    assert!(read <= headroom / 4 / PAGE_SIZE, "at most a quarter of the {} MiB headroom: {d:?}", headroom / MIB);
    assert_eq!(d.pressure_clamped_pages, ASKED - read, "the rest counted as clamped: {d:?}");
    assert_eq!(d.dropped_pages, ASKED - read, "and as dropped: {d:?}");
}

/// A directory laid out like `/proc` and a cgroup2 mount: this process at
/// the root, process 4,000,000,042 in `box`, limited to `max`.
struct Tree(tempfile::TempDir);

const PID: u32 = 4_000_000_042;

impl Tree {
    fn new(max: &str, current: u64) -> Self {
        let tree = Self(tempfile::tempdir().expect("tempdir"));
        tree.write("cg/cgroup.controllers", "cpuset cpu io memory pids\n");
        tree.write("proc/self/cgroup", "0::/\n");
        tree.write(&format!("proc/{PID}/cgroup"), "0::/box\n");
        tree.set("box", max, current);
        tree.write("cg/box/memory.high", "max\n");
        tree.write("cg/box/memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n");
        tree
    }

    fn write(&self, path: &str, text: &str) {
        let path = self.0.path().join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    fn set(&self, cgroup: &str, max: &str, current: u64) {
        self.write(&format!("cg/{cgroup}/memory.max"), &format!("{max}\n"));
        self.write(&format!("cg/{cgroup}/memory.current"), &format!("{current}\n"));
    }

    fn guard(&self) -> PressureGuard {
        let fs = CgroupFs::at(self.0.path().join("proc"), self.0.path().join("cg"));
        let guard = PressureGuard::with_source(PressureConfig::default(), roomy_machine).with_cgroups(fs);
        assert!(guard.watches_cgroups());
        guard
    }
}

#[test]
fn a_512_mib_hint_for_a_process_in_a_48_mib_cgroup_is_mostly_cut() {
    let tree = Tree::new(&(48 * MIB).to_string(), MIB);
    let (d, read) = prefetch_512_mib(tree.guard(), Some(PID));
    assert_cut(&d, read, 47 * MIB);
    assert_eq!(d.dropped_requests, 0, "not shed whole: there is room for some");
}

#[test]
fn the_same_hint_is_issued_whole_without_the_limit_or_without_a_target() {
    let tree = Tree::new("max", MIB);
    let (d, read) = prefetch_512_mib(tree.guard(), Some(PID));
    assert_eq!((d.issued_pages, read, d.dropped_pages), (ASKED, ASKED, 0), "{d:?}");
    let limited = Tree::new(&(48 * MIB).to_string(), MIB);
    let (d, read) = prefetch_512_mib(limited.guard(), None);
    assert_eq!((d.issued_pages, read), (ASKED, ASKED), "no target: this process's cgroup and the machine: {d:?}");
}

#[test]
fn a_cgroup_with_no_room_left_sheds_the_hint_whole() {
    let tree = Tree::new(&(48 * MIB).to_string(), 40 * MIB);
    let (d, read) = prefetch_512_mib(tree.guard(), Some(PID));
    assert_eq!((d.dropped_requests, d.pressure_dropped_pages, read), (1, ASKED, 0), "{d:?}");
}

#[test]
fn the_executors_own_cgroup_bounds_every_request() {
    let tree = Tree::new("max", 0);
    tree.write("proc/self/cgroup", "0::/daemon/predictio\n");
    tree.set("daemon", &(48 * MIB).to_string(), 0);
    tree.set("daemon/predictio", "max", 0);
    let (d, read) = prefetch_512_mib(tree.guard(), None);
    assert_cut(&d, read, 48 * MIB);
}

/// A cgroup made for the test, with a child process in it; on drop the
/// child is killed and reaped and the cgroup removed.
struct TestCgroup {
    dir: PathBuf,
    child: std::process::Child,
    /// `memory.max` (v2) or `memory.limit_in_bytes` (v1).
    limit: &'static str,
}

impl TestCgroup {
    #[track_caller]
    fn new(root: &Path, hierarchy: Hierarchy) -> Self {
        let dir = root.join(format!("predictio-test-{}", std::process::id()));
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
        let child = std::process::Command::new("sleep").arg("60").spawn().expect("sleep starts");
        let limit = match hierarchy {
            Hierarchy::V2 => "memory.max",
            Hierarchy::V1Memory => "memory.limit_in_bytes",
        };
        let cgroup = Self { dir, child, limit };
        cgroup.write(limit, &(48 * MIB).to_string());
        cgroup.write("cgroup.procs", &cgroup.child.id().to_string());
        cgroup
    }

    #[track_caller]
    fn write(&self, name: &str, value: &str) {
        let path = self.dir.join(name);
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("writing {value} to {}: {e}", path.display()));
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A reaped process leaves the cgroup at once, but removal may race
        // with the kernel's own bookkeeping: a few tries.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// Whether the memory controller is bound to a cgroup v1 hierarchy
/// (`/proc/cgroups`: a non-zero hierarchy id).
fn memory_bound_to_v1() -> bool {
    std::fs::read_to_string("/proc/cgroups").is_ok_and(|text| {
        text.lines().any(|line| {
            let mut fields = line.split_whitespace();
            fields.next() == Some("memory") && fields.next().is_some_and(|id| id != "0")
        })
    })
}

fn words(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().split_whitespace().map(str::to_owned).collect()
}

#[test]
fn a_real_48_mib_cgroup_cuts_a_512_mib_prefetch_for_its_process() {
    if !is_root() && skip("needs root to make a memory cgroup") {
        return;
    }
    let fs = match CgroupFs::system() {
        Ok(fs) => fs,
        Err(reason) => {
            skip(&format!("no cgroup v2 hierarchy: {reason}"));
            return;
        }
    };
    let root = fs.cgroup_root().to_path_buf();
    match fs.hierarchy() {
        Hierarchy::V2 => {
            if !words(&root.join("cgroup.controllers")).iter().any(|c| c == "memory") {
                skip(&format!("the memory controller is not in {}/cgroup.controllers", root.display()));
                return;
            }
            if !words(&root.join("cgroup.subtree_control")).iter().any(|c| c == "memory") {
                std::fs::write(root.join("cgroup.subtree_control"), "+memory").expect("enabling the memory controller");
            }
        }
        Hierarchy::V1Memory => {
            assert!(memory_bound_to_v1(), "a v1 memory hierarchy where /proc/cgroups says there is none");
            eprintln!("the memory controller is bound to cgroup v1 here: the guard reads {}", root.display());
        }
    }
    assert!(PressureGuard::new(PressureConfig::default()).watches_cgroups(), "the executor's guard reads cgroups here");
    let cgroup = TestCgroup::new(&root, fs.hierarchy());
    let pid = cgroup.child.id();
    let own = fs.cgroup_of(Some(pid)).expect("the child's cgroup");
    assert_eq!(root.join(own), cgroup.dir, "the child is in the test's cgroup");
    // The machine stands aside (its PSI and MemAvailable are the host's
    // business): the cgroup alone bounds the prefetch.
    let guard = || PressureGuard::with_source(PressureConfig::default(), roomy_machine).with_cgroups(fs.clone());
    let (d, read) = prefetch_512_mib(guard(), Some(pid));
    assert_cut(&d, read, 48 * MIB);
    eprintln!("48 MiB cgroup: {read} of {ASKED} pages issued, {} clamped", d.pressure_clamped_pages);

    cgroup.write(cgroup.limit, if fs.hierarchy() == Hierarchy::V2 { "max" } else { "-1" });
    let (d, read) = prefetch_512_mib(guard(), Some(pid));
    assert_eq!((d.issued_pages, read, d.dropped_pages), (ASKED, ASKED, 0), "without the limit: {d:?}");
}
