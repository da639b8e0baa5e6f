//! The daemon against an unprivileged user, end to end: what a user can put
//! in its way (profiles of thousands of their own files, a FIFO or a
//! symbolic link where a file or the store was, a socket or store directory
//! of their own, a regular file named as the control socket, a disk that
//! fills) must neither hang it, nor exhaust its descriptors, nor make root
//! read or write through it. The hostile part runs as uid 65534 (`setpriv`)
//! where it matters who does it; the parts that need root skip outside it
//! with a message, and fail under `CI=true`.

mod common;
use common::{bin, ok};

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

/// `n` one-page files named `prefix{i}` in `dir`.
fn page_files(dir: &Path, prefix: &str, n: usize) -> Vec<PathBuf> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("{prefix}{i}"));
            std::fs::write(&path, vec![i as u8; 4096]).expect("write");
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
    let requested = |d: &Daemon| {
        d.status()["executor"]["origins"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["name"] == "launch")
            .and_then(|o| o["counters"]["requested_pages"].as_u64())
            .unwrap_or(0)
    };
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
