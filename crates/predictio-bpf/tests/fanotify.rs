//! The fanotify fallback against the real kernel: opens and execs of real
//! processes. Needs `CAP_SYS_ADMIN` (root); without it each test prints why it
//! skips, and under `CI=true` a skip is a failure.

use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::Duration;

use predictio::{Event, FileId};
use predictio_bpf::fallback::{FanotifyConfig, FanotifyObserver};

mod common;
use common::{Held, which};

#[track_caller]
fn observer(mounts: Vec<PathBuf>) -> Option<FanotifyObserver> {
    match FanotifyObserver::new(&FanotifyConfig { mounts, whole_filesystems: false }) {
        Ok(observer) => Some(observer),
        Err(err) if err.is_unavailable() => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("CI=true and fanotify is unavailable: {err}");
            }
            eprintln!("skipping: fanotify unavailable: {err}");
            None
        }
        Err(err) => panic!("fanotify: {err}"),
    }
}

fn id_of(path: &std::path::Path) -> FileId {
    let meta = std::fs::metadata(path).expect("stat");
    FileId { dev: meta.dev(), ino: meta.ino() }
}

#[test]
fn opens_and_execs_are_reported_with_stat_identity() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let path = dir.path().join("data");
    std::fs::write(&path, b"hello").expect("write");
    let cat = which("cat");
    let Some(mut observer) = observer(vec![dir.path().to_owned(), cat.clone()]) else { return };
    let held = Held::spawn(&["cat", path.to_str().expect("utf-8")]);
    let pid = held.pid();
    let (data_id, cat_id) = (id_of(&path), id_of(&cat));
    let events = held.run_until(&mut observer, |events| {
        let opened = events.iter().any(|e| matches!(e, Event::FileOpen { file, .. } if *file == data_id));
        let execed = events.iter().any(|e| matches!(e, Event::Exec { exe, .. } if *exe == cat_id));
        opened && execed
    });
    assert!(
        events.iter().any(|e| matches!(e, Event::FileOpen { pid: p, file, .. } if *p == pid && *file == data_id)),
        "open of the data file by {pid}: {events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e, Event::Exec { pid: p, exe, .. } if *p == pid && *exe == cat_id)),
        "exec of cat by {pid}: {events:?}"
    );
    let stats = observer.stats();
    assert!(stats.opens > 0 && stats.execs > 0, "{stats:?}");
    assert_eq!(observer.source_name(), "fanotify");
}

#[test]
fn own_opens_are_not_reported() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let path = dir.path().join("own");
    std::fs::write(&path, b"x").expect("write");
    let Some(mut observer) = observer(vec![dir.path().to_owned()]) else { return };
    let id = id_of(&path);
    std::fs::read(&path).expect("read");
    let mut events = Vec::new();
    observer.poll(Duration::from_millis(20), &mut |e| events.push(e)).expect("poll");
    assert!(events.iter().all(|e| e.file() != Some(id)), "{events:?}");
}
