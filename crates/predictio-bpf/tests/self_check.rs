//! The start-up self-check against the real kernel, with the observers as
//! the daemon opens them (every process; the eBPF one ignoring this
//! process's own pages): the read of the probe page passes, and a probe
//! expecting a page the read did not touch is refused.
//!
//! Needs root. Without it each test prints why it skips; under `CI=true`
//! a skip is a failure.

use std::path::PathBuf;
use std::time::Duration;

use predictio::Event;
use predictio::testing::{is_root, skip};
use predictio_bpf::perf::{PerfConfig, PerfObserver};
use predictio_bpf::self_check::{Outcome, Poll, ProbeSpec, Refusal, run};
use predictio_bpf::{Observer, ObserverConfig};

/// Where the probe file goes: Cargo's target tmp dir (a disk file system).
fn dirs() -> Vec<PathBuf> {
    vec![PathBuf::from(env!("CARGO_TARGET_TMPDIR"))]
}

/// The expected page passes; one the read did not touch is refused.
fn check(poll: &mut Poll<'_>, name: &str) {
    let mut others = 0usize;
    match run(&dirs(), ProbeSpec::default(), poll, &mut |_| others += 1) {
        Outcome::Passed { took } => {
            eprintln!("{name}: passed in {took:?} ({others} other events handed on)");
            assert!(took < Duration::from_secs(1), "{name}: {took:?}");
        }
        other => panic!("{name}: {other:?}"),
    }
    let wrong = ProbeSpec { read_page: 37, expect_page: 38 };
    match run(&dirs(), wrong, poll, &mut |_| {}) {
        Outcome::Refused(refusal @ Refusal::WrongPages { page: 38, .. }) => {
            assert_eq!(refusal.to_string(), format!("{refusal}"));
            assert!(refusal.to_string().contains("[37]"), "{name}: {refusal}");
        }
        other => panic!("{name}: a read of page 37 must not pass for page 38: {other:?}"),
    }
}

#[test]
fn the_ebpf_observer_passes_and_a_wrong_expectation_is_refused() {
    if !is_root() {
        skip("needs root (eBPF)");
        return;
    }
    if let Err(why) = predictio_bpf::available() {
        skip(&format!("needs the BPF object: {why}"));
        return;
    }
    let config = ObserverConfig {
        follow_all: true,
        path_calls: false,
        evictions_any_process: true,
        ignore_own_pages: true,
        ..ObserverConfig::default()
    };
    let mut observer = Observer::load(config).expect("eBPF observer loads as root");
    let mut poll =
        |timeout, on: &mut dyn FnMut(Event)| observer.poll(timeout, &mut |e| on(e)).map_err(|e| e.to_string());
    check(&mut poll, "ebpf");
}

#[test]
fn the_perf_observer_passes_and_a_wrong_expectation_is_refused() {
    if !is_root() {
        skip("needs root (perf tracepoint events)");
        return;
    }
    let mut observer =
        PerfObserver::open(PerfConfig { follow_all: true, ..PerfConfig::default() }).expect("perf opens as root");
    let mut poll =
        |timeout, on: &mut dyn FnMut(Event)| observer.poll(timeout, &mut |e| on(e)).map_err(|e| e.to_string());
    check(&mut poll, "perf");
}

/// As on a kernel before 6.11: the check needs misses only.
#[test]
fn the_perf_observer_without_page_accesses_passes() {
    if !is_root() {
        skip("needs root (perf tracepoint events)");
        return;
    }
    let assume_missing = predictio_bpf::hooks::filemap_access().map(|h| h.label()).collect();
    let config = PerfConfig { follow_all: true, assume_missing, ..PerfConfig::default() };
    let mut observer = PerfObserver::open(config).expect("perf opens as root");
    assert_eq!(observer.missing_hooks().len(), 3);
    let mut accesses = 0;
    let mut poll = |timeout, on: &mut dyn FnMut(Event)| {
        observer
            .poll(timeout, &mut |e| {
                accesses += usize::from(matches!(e, Event::PageAccess { .. }));
                on(e)
            })
            .map_err(|e| e.to_string())
    };
    match run(&dirs(), ProbeSpec::default(), &mut poll, &mut |_| {}) {
        Outcome::Passed { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(accesses, 0, "no page-access tracepoint is open");
}
