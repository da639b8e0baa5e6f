//! The launch profile store and replay on real files.
//!
//! `kill_during_writes_leaves_a_loadable_store` pins the crash-safety promise:
//! a writer process killed with SIGKILL in the middle of a stream of commits
//! must leave a store that opens and whose every profile decodes.
//! `changed_file_is_not_replayed` pins invalidation: a file rewritten after it
//! was learned contributes no request.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use predictio::event::Event;
use predictio::executor::RequestSink;
use predictio::launch::profile::{LaunchRun, RunFile};
use predictio::launch::{FileIdentity, LaunchPolicy, LearnLimits, Profile, ReplayBook, ReplayPacing, WalkLimits};
use predictio::page::PageRange;
use predictio::{Request, Runtime};
use predictio_daemon::launch::replay::{check_files, plan_replay, start_replayer};
use predictio_daemon::launch::store::Store;

const WRITER_ENV: &str = "PREDICTIO_TEST_STORE_WRITER";

fn profile_of(exe: &str, files: &[(&std::path::Path, Vec<u64>)], salt: u64) -> Profile {
    let ident = |p: &std::path::Path| {
        FileIdentity::of_path(p).unwrap_or(FileIdentity {
            path: p.display().to_string(),
            dev: 1,
            ino: salt,
            size: 1 << 20,
            mtime_ns: 0,
        })
    };
    let exe_identity = FileIdentity { path: exe.into(), dev: 1, ino: 1, size: 1, mtime_ns: 1 };
    let mut profile = Profile::new(exe_identity, "app --flag");
    let run = LaunchRun {
        files: files
            .iter()
            .enumerate()
            .map(|(i, (p, pages))| RunFile {
                identity: ident(p),
                first_touch_ms: i as f64,
                accesses: pages.iter().map(|&x| PageRange::page(x + salt % 3)).collect(),
                access_ms: Vec::new(),
            })
            .collect(),
        window_ms: 10.0,
        lookups: Vec::new(),
    };
    profile.merge(&run, &LearnLimits::default());
    profile
}

/// Not a test on its own: the body of the child process the crash test
/// kills. Without the environment variable it returns at once.
#[test]
fn store_writer_child() {
    let Ok(dir) = std::env::var(WRITER_ENV) else { return };
    let store = Store::open(&dir, 1 << 20, Duration::from_secs(5)).expect("open");
    let big: Vec<u64> = (0..2000).map(|i| i * 5).collect();
    for i in 0u64.. {
        let path = std::path::PathBuf::from(format!("/nonexistent/lib{}", i % 50));
        store.put(&profile_of(&format!("/bin/p{}", i % 40), &[(&path, big.clone())], i)).expect("put");
        if i == 20 {
            // Tell the parent we are well into writing.
            std::fs::write(std::path::Path::new(&dir).join("started"), b"1").expect("flag");
        }
    }
}

#[test]
fn kill_during_writes_leaves_a_loadable_store() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..3 {
        let _ = std::fs::remove_file(dir.path().join("started"));
        let mut child = Command::new(&exe)
            .args(["--exact", "store_writer_child", "--nocapture", "--test-threads=1"])
            .env(WRITER_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let started = std::time::Instant::now();
        while !dir.path().join("started").exists() {
            assert!(started.elapsed() < Duration::from_secs(60), "writer never got going");
            assert!(child.try_wait().unwrap().is_none(), "writer exited early");
            std::thread::sleep(Duration::from_millis(5));
        }
        // Let it get into the middle of some commit, differently each round.
        std::thread::sleep(Duration::from_millis(37 * (round + 1)));
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(!status.success(), "the writer was killed, not finished");

        let store = Store::open(dir.path(), 1 << 20, Duration::from_secs(5)).expect("store opens after kill -9");
        let (good, bad) = store.all().unwrap();
        assert!(bad.is_empty(), "undecodable profiles after kill -9: {bad:?}");
        assert!(!good.is_empty(), "committed profiles survive");
        assert!(store.list().unwrap().iter().map(|s| s.stored_bytes).sum::<u64>() <= 1 << 20, "cap kept");
        // And it still takes writes.
        store.put(&profile_of("/bin/after", &[], round)).unwrap();
    }
}

#[derive(Default)]
struct Collect(std::sync::Mutex<Vec<Request>>);

impl RequestSink for Collect {
    fn submit(&self, request: Request) -> Result<(), predictio::executor::SubmitError> {
        self.0.lock().expect("sink lock").push(request);
        Ok(())
    }
}

#[test]
fn changed_file_is_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("liba.so");
    let b = dir.path().join("libb.so");
    std::fs::write(&a, vec![1u8; 64 * 4096]).unwrap();
    std::fs::write(&b, vec![2u8; 64 * 4096]).unwrap();
    let profile = profile_of("/bin/app", &[(&a, vec![0, 5, 9]), (&b, vec![1, 2])], 0);

    let mut fresh = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
    check_files(&mut fresh);
    assert_eq!(fresh.at_exec.len(), 2);
    assert!(fresh.changed.is_empty());

    // b changes after it was learned (same size, new contents and mtime):
    // the replay, planned before, leaves it out when it opens it.
    let replay = plan_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(&b, vec![3u8; 64 * 4096]).unwrap();
    let mut checked = replay.clone();
    check_files(&mut checked);
    assert_eq!(checked.changed, vec![b.display().to_string()]);
    assert_eq!(checked.at_exec.len(), 1);

    let book = ReplayBook::default();
    let exe = predictio::FileId { dev: 1, ino: 1 };
    book.insert(predictio::launch::LaunchKey::new(exe, "app --flag"), replay);
    let sink = Arc::new(Collect::default());
    let (jobs, job_rx) = predictio::launch::replay_channel();
    let replayer = start_replayer(sink.clone(), job_rx).unwrap();
    let mut rt = Runtime::with_sink(sink.clone());
    rt.add_policy(Box::new(LaunchPolicy::new(book, jobs)));
    rt.dispatch(&Event::Exec { pid: 7, exe, shape: "app --flag".into(), time_ns: 1 });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while replayer.counts().jobs < 1 {
        assert!(std::time::Instant::now() < deadline, "the replay never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(replayer.counts().changed, 1);
    let requests = sink.0.lock().unwrap();
    assert_eq!(requests.len(), 1, "only the unchanged file is requested");
    let a_id = FileIdentity::of_path(&a).unwrap().id();
    assert_eq!(requests[0].file.id(), a_id);
    // Pages 0, 5 and 9: gaps of at most 4 pages are read through.
    assert_eq!(requests[0].ranges, vec![PageRange::new(0, 10)]);
    assert_eq!(requests[0].urgency, predictio::Urgency::Imminent);
    drop(requests);

    // An exec of another program replays nothing.
    rt.dispatch(&Event::Exec {
        pid: 8,
        exe: predictio::FileId { dev: 1, ino: 2 },
        shape: "app --flag".into(),
        time_ns: 2,
    });
    drop(rt);
    drop(replayer);
    assert_eq!(sink.0.lock().unwrap().len(), 1);
}
