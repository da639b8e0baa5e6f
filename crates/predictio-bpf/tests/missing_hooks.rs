//! The eBPF observer on a kernel without its optional hooks, as on Linux
//! 6.1 or 6.8 (no `mm_filemap_get_pages`, `_fault`, `_map_pages`): the real
//! kernel with those hooks assumed missing
//! ([`ObserverConfig::assume_missing`]). The observer must still load, say
//! what it runs without, and deliver what launch learning needs: misses of
//! a cold read and the process tree (exec, fork, exit).
//!
//! Needs root (CAP_BPF + CAP_PERFMON) and a build with the BPF object.
//! Without them each test prints why it skips; under `CI=true` a skip is a
//! failure.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::MetadataExt;

use predictio::{Event, FileId, FileRef, PAGE_SIZE};
use predictio_bpf::{BpfError, Observer, ObserverConfig, hooks};

mod common;
use common::{Held, forked_children, path_str, which};

/// Skips (`None`) outside CI with the reason printed; panics under `CI=true`.
fn skip<T>(why: String) -> Option<T> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("CI=true and the eBPF test cannot run: {why}");
    }
    eprintln!("skipping: {why}");
    None
}

/// Loads an observer, or says why not.
#[track_caller]
fn observer(config: ObserverConfig) -> Option<Observer> {
    if !rustix::process::geteuid().is_root() {
        return skip("needs root (CAP_BPF and CAP_PERFMON)".into());
    }
    match Observer::load(config) {
        Ok(observer) => Some(observer),
        Err(err) if err.is_unavailable() => skip(format!("eBPF observation unavailable: {err}")),
        Err(err) => panic!("loading the observer: {err}"),
    }
}

/// The page-access hooks' labels.
fn filemap_access() -> Vec<String> {
    hooks::filemap_access().map(hooks::Hook::label).collect()
}

/// As the daemon's `[observe] assume_missing = ["filemap_access"]`.
fn without_access() -> ObserverConfig {
    ObserverConfig { assume_missing: filemap_access(), ..ObserverConfig::default() }
}

#[test]
fn without_page_access_hooks_the_observer_loads_and_names_them() {
    let Some(observer) = observer(without_access()) else { return };
    let missing: Vec<String> = observer.missing_hooks().iter().map(|m| m.hook.label()).collect();
    assert_eq!(missing, filemap_access());
    assert!(observer.missing_hooks().iter().all(|m| m.reason.contains("assumed missing")), "{observer:?}");
    let attached: Vec<String> = observer.attached_hooks().iter().map(|h| h.label()).collect();
    for label in [
        "sched:sched_process_fork",
        "sched:sched_process_exit",
        "sched:sched_process_exec",
        "filemap:mm_filemap_add_to_page_cache",
        "filemap:mm_filemap_delete_from_page_cache",
    ] {
        assert!(attached.iter().any(|a| a == label), "{label} not among {attached:?}");
    }
    assert!(attached.iter().all(|a| !missing.contains(a)), "{attached:?} {missing:?}");
}

#[test]
fn with_every_hook_present_none_is_missing() {
    let Some(observer) = observer(ObserverConfig::default()) else { return };
    let tracefs = hooks::find_tracefs().expect("the observer loaded, so tracefs is mounted");
    if !tracefs.join("events/filemap/mm_filemap_get_pages").is_dir() {
        eprintln!("this kernel lacks the page-access hooks: checking only that they are named");
        assert_eq!(observer.missing_hooks().len(), 3, "{observer:?}");
        return;
    }
    assert!(observer.missing_hooks().is_empty(), "{observer:?}");
    assert_eq!(observer.attached_hooks().len(), hooks::HOOKS.len());
}

#[test]
fn without_page_access_hooks_a_cold_read_still_reports_misses_and_the_process_tree() {
    let Some(mut observer) = observer(without_access()) else { return };
    // A 24-page file under the target tmp dir (a disk file system: tmpfs
    // reads do not go through the page cache's tracepoints), written,
    // synced and evicted.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir");
    let path = dir.path().join("data");
    let pages = 24u64;
    let mut out = File::create(&path).expect("create");
    out.write_all(&vec![7u8; (pages * PAGE_SIZE) as usize]).expect("write");
    out.sync_all().expect("fsync");
    let file = FileRef::open(&path).expect("open");
    predictio::cache::evict(&file).expect("fadvise(DONTNEED)");

    // `; true` keeps the shell from exec'ing cat: cat is a forked child.
    let script = format!("cat '{}'; true", path_str(&path));
    let held = Held::spawn(&["sh", "-c", &script]);
    let pid = held.pid();
    observer.follow(pid).expect("follow");
    let events = held.run(&mut observer);

    let children = forked_children(&events, pid);
    assert_eq!(children.len(), 1, "one forked child (cat): {events:?}");
    let cat = children[0];
    let meta = std::fs::metadata(which("cat")).expect("stat cat");
    let cat_id = FileId { dev: meta.dev(), ino: meta.ino() };
    assert!(
        events.iter().any(|e| matches!(e, Event::Exec { pid, exe, .. } if *pid == cat && *exe == cat_id)),
        "cat's exec: {events:?}"
    );
    assert!(events.iter().any(|e| matches!(e, Event::Exit { pid, .. } if *pid == cat)), "cat's exit");
    assert!(events.iter().any(|e| matches!(e, Event::Exit { pid: p, .. } if *p == pid)), "the shell's exit");

    let missed: BTreeSet<u64> = events
        .iter()
        .flat_map(|e| match e {
            Event::PageMiss { pid, file: f, pages, .. } if *f == file.id() && *pid == cat => pages.start..pages.end,
            _ => 0..0,
        })
        .collect();
    assert_eq!(missed, (0..pages).collect(), "every page of the cold file must miss");
    // No hit is reported: the programs that report them are not attached.
    assert!(!events.iter().any(|e| matches!(e, Event::PageAccess { .. })), "{events:?}");
    let stats = observer.stats();
    assert_eq!((stats.reads, stats.faults, stats.map_pages), (0, 0, 0), "{stats:?}");
    assert!(stats.misses > 0 && stats.lost == 0, "{stats:?}");
}

#[test]
fn only_optional_hooks_may_be_assumed_missing() {
    if let Err(why) = predictio_bpf::available() {
        eprintln!("skipping: no BPF object in this build ({why})");
        return;
    }
    // The configuration is checked before anything is loaded: no privilege
    // needed.
    for (label, says) in [
        ("sched:sched_process_exec", "required"),
        ("filemap:mm_filemap_nonesuch", "filemap:mm_filemap_get_pages"),
        ("mm_filemap_fault", "optional hooks"),
    ] {
        let config = ObserverConfig { assume_missing: vec![label.into()], ..ObserverConfig::default() };
        let err = Observer::load(config).expect_err(label);
        assert!(matches!(err, BpfError::Config(_)), "{label}: {err}");
        assert!(!err.is_unavailable(), "{label}: {err}");
        let text = err.to_string();
        assert!(text.contains(label) && text.contains(says), "{label}: {text}");
    }
}
