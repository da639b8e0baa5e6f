//! `predictio read FILE -o OUT` writes exactly the file's bytes, whichever
//! way each window is read: from the page cache (warm: `sendfile` or
//! `pread`), or cold by each `--cold` mode; to a regular file, to a pipe, to
//! a standard output that is a regular file, opened for appending or not.
//! Windows are 1 MiB here so that one run crosses many of them, and the
//! range starts and ends off page boundaries.

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::{Command, Stdio};

use common::{bin, disk_dir, fails_with, ok};

const LEN: usize = (9 << 20) + 4321;
const OFFSET: usize = 777;

fn content() -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..LEN)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// Drops the file's pages from the page cache; false where they stay (a
/// filesystem that keeps them, such as tmpfs).
fn evict(path: &Path) -> bool {
    let file = File::open(path).expect("open");
    file.sync_all().expect("sync");
    predictio::os::fadvise(file.as_fd(), 0, 0, predictio::os::Advice::DontNeed).expect("fadvise(DONTNEED)");
    let stat = predictio::os::cachestat(file.as_fd(), 0, LEN as u64).expect("cachestat");
    stat.nr_cache == 0
}

/// Reads the file whole, until `cachestat` finds all of it cached (a few
/// tries): in CI the kernel once let 2 of its 10 MiB go between this read
/// and the run that was to find it warm.
fn warm(path: &Path) {
    for _ in 0..5 {
        let mut bytes = Vec::new();
        let mut file = File::open(path).expect("open");
        file.read_to_end(&mut bytes).expect("read");
        let stat = predictio::os::cachestat(file.as_fd(), 0, LEN as u64).expect("cachestat");
        if stat.nr_cache * 4096 >= LEN as u64 {
            return;
        }
    }
    panic!("{} does not stay cached", path.display());
}

/// The JSON report of a run (on stdout, or on stderr with `-o -`).
#[track_caller]
fn report(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[track_caller]
fn check_report(json: &serde_json::Value, cached: bool, evicted: bool, what: &str) {
    let windows = json["windows"].as_u64().expect("windows");
    let resident = json["resident_windows"].as_u64().expect("resident_windows");
    assert_eq!(json["bytes_read"].as_u64(), Some((LEN - OFFSET) as u64), "{what}: {json}");
    assert!(windows >= 9, "{what}: {json}");
    if cached {
        assert_eq!(resident, windows, "{what}: every window was cached: {json}");
    } else if evicted {
        // Later windows may have been read in ahead (readahead) by the time
        // they are checked; the first one cannot.
        assert!(resident < windows, "{what}: the first window was not cached: {json}");
    }
}

#[test]
fn read_output_is_the_files_bytes_warm_and_cold() {
    let dir = disk_dir("predictio-read-output");
    let input = dir.path().join("input");
    let bytes = content();
    std::fs::write(&input, &bytes).expect("write input");
    let want = &bytes[OFFSET..];
    let input_arg = input.to_str().expect("utf-8 path");
    let mut evictions = 0;
    for cold in ["advised", "readahead", "parallel"] {
        for cached in [false, true] {
            let state = if cached { "warm" } else { "cold" };
            let common_args = ["read", input_arg, "--offset", "777", "--window", "1M", "--cold", cold, "--json"];

            // To a regular file named by -o.
            let evicted = if cached { false } else { evict(&input) };
            evictions += usize::from(evicted);
            if cached {
                warm(&input);
            }
            let out = dir.path().join("out");
            let run = Command::new(bin())
                .args(common_args)
                .args(["-o", out.to_str().expect("utf-8")])
                .output()
                .expect("run predictio");
            check_report(&report(&ok(&run)), cached, evicted, &format!("{cold} {state} -o FILE"));
            assert!(std::fs::read(&out).expect("output") == want, "{cold} {state} -o FILE: bytes differ");

            // To standard output, a pipe.
            let evicted = if cached { false } else { evict(&input) };
            if cached {
                warm(&input);
            }
            let run = Command::new(bin()).args(common_args).args(["-o", "-"]).output().expect("run predictio");
            assert!(run.status.success(), "{cold} {state} -o - | …: {}", String::from_utf8_lossy(&run.stderr));
            check_report(&report(&String::from_utf8_lossy(&run.stderr)), cached, evicted, "-o - to a pipe");
            assert!(run.stdout == want, "{cold} {state} -o - | …: bytes differ");

            // To standard output, a regular file (`> out`) and one opened
            // for appending (`>> out`), which refuses sendfile.
            for append in [false, true] {
                let evicted = if cached { false } else { evict(&input) };
                if cached {
                    warm(&input);
                }
                let mut file = File::create(&out).expect("create");
                if append {
                    file.write_all(b"head").expect("head");
                    file = std::fs::OpenOptions::new().append(true).open(&out).expect("append");
                }
                let run = Command::new(bin())
                    .args(common_args)
                    .args(["-o", "-"])
                    .stdout(Stdio::from(file))
                    .output()
                    .expect("run predictio");
                assert!(run.status.success(), "{cold} {state} > file: {}", String::from_utf8_lossy(&run.stderr));
                check_report(&report(&String::from_utf8_lossy(&run.stderr)), cached, evicted, "-o - to a file");
                let got = std::fs::read(&out).expect("output");
                let got = if append {
                    assert_eq!(&got[..4], b"head", "{cold} {state} >> file");
                    &got[4..]
                } else {
                    &got[..]
                };
                assert!(got == want, "{cold} {state} > file (append {append}): bytes differ");
            }
        }
    }
    if evictions == 0 {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "could not evict the input in CI");
        eprintln!("skipping the cold checks' residency: the input's pages could not be evicted here");
    }
}

/// A directory, a FIFO and a device are still refused.
#[test]
fn read_refuses_what_is_not_a_regular_file() {
    let dir = disk_dir("predictio-read-refuse");
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let out = Command::new(bin()).args(["read"]).arg(dir.path()).output().expect("run");
    fails_with(&out, "is a directory");
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let out = Command::new(bin()).args(["read"]).arg(path).args(["-o", "-"]).output().expect("run");
        fails_with(&out, "not a regular file");
    }
}
