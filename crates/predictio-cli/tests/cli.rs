//! The `predictio` binary as a person uses it: clear errors on bad input,
//! evict → prefetch → residency on a real file, and a benchmark smoke run
//! that must produce a well-formed result file.

mod common;
use common::{bin, fails_with, ok};

use predictio::testing::{is_root, skip};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};

static CACHE: Mutex<()> = Mutex::new(());

fn cache_lock() -> MutexGuard<'static, ()> {
    CACHE.lock().unwrap_or_else(|e| e.into_inner())
}

fn pages(v: &serde_json::Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("a page count, not {v}"))
}

fn predictio(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run predictio")
}

fn write_file(path: &Path, bytes: usize) {
    let mut f = File::create(path).expect("create");
    let chunk: Vec<u8> = (0..1 << 20).map(|i| (i * 31 % 251) as u8).collect();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n]).expect("write");
        left -= n;
    }
    f.sync_all().expect("sync");
}

#[test]
fn missing_file_directory_and_empty_file_are_clear_errors() {
    let dir = common::disk_dir("predictio-cli");
    let missing = dir.path().join("nope");
    for cmd in ["prefetch", "residency", "evict"] {
        let out = predictio(&[cmd, missing.to_str().expect("utf8")]);
        fails_with(&out, "no such file");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.matches("no such file").count(), 1, "{cmd}: said once: {stderr}");
        fails_with(&predictio(&[cmd, dir.path().to_str().expect("utf8")]), "is a directory");
    }
    // Of several files, each failure is named and the summary counts them.
    let present = dir.path().join("present");
    write_file(&present, 4096);
    for (cmd, summary) in
        [("residency", "1 of 2 files could not be inspected"), ("evict", "1 of 2 files could not be evicted")]
    {
        let out = predictio(&[cmd, missing.to_str().expect("utf8"), present.to_str().expect("utf8")]);
        fails_with(&out, summary);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.matches("no such file").count(), 1, "{cmd}: said once: {stderr}");
    }
    let empty = dir.path().join("empty");
    File::create(&empty).expect("create");
    fails_with(&predictio(&["prefetch", empty.to_str().expect("utf8")]), "is empty");
}

#[test]
fn ranges_past_eof_and_malformed_ranges_are_refused() {
    let dir = common::disk_dir("predictio-cli");
    let path = dir.path().join("f");
    write_file(&path, 1 << 20);
    let p = path.to_str().expect("utf8");
    fails_with(&predictio(&["prefetch", p, "--range", "2M..3M"]), "is only 1.0 MiB");
    fails_with(&predictio(&["prefetch", p, "--range", "5..2"]), "ends before it starts");
    fails_with(&predictio(&["prefetch", p, "--range", "banana"]), "not a range");
    fails_with(&predictio(&["prefetch", p, "--backend", "magic"]), "unknown backend");
    // A range running past EOF is clamped, with a note.
    let out = predictio(&["prefetch", p, "--range", "512K..4M"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("clamped"));
}

#[test]
fn no_permission_is_a_clear_error() {
    if !is_root() && skip("needs root to run the command as another user") {
        return;
    }
    let dir = common::disk_dir("predictio-cli");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let path = dir.path().join("secret");
    write_file(&path, 4096);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let out = Command::new(bin())
        .args(["prefetch", path.to_str().expect("utf8")])
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run as nobody");
    fails_with(&out, "permission denied");
}

#[test]
fn evict_prefetch_residency_round_trip() {
    let _lock = cache_lock();
    let dir = common::disk_dir("predictio-cli");
    let path = dir.path().join("big");
    write_file(&path, 64 << 20);
    let p = path.to_str().expect("utf8");
    for backend in ["fadvise", "uring", "readahead", "madvise"] {
        ok(&predictio(&["evict", p]));
        let before = ok(&predictio(&["residency", "--json", p]));
        let before: serde_json::Value = serde_json::from_str(&before).expect("json");
        assert!(before[0]["fraction"].as_f64().expect("fraction") < 0.05, "{backend}: {before}");
        let out = ok(&predictio(&["prefetch", p, "--backend", backend, "--json"]));
        let out: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(out["backend"], backend);
        // The machine's own reclaim may take a few of the new pages at once
        // (they sit unreferenced on the inactive list): allow 1 %.
        let (resident, wanted) = (pages(&out["resident_pages"]), pages(&out["wanted_pages"]));
        assert_eq!(wanted, 16384, "{backend}: {out}");
        assert!(resident * 100 >= wanted * 99, "{backend}: {out}");
        let after = ok(&predictio(&["residency", "--json", p]));
        let after: serde_json::Value = serde_json::from_str(&after).expect("json");
        let fraction = after[0]["fraction"].as_f64().expect("fraction");
        assert!(fraction >= 0.99, "{backend}: {fraction} resident after the prefetch: {after}");
    }
    // Ranges: only what was asked becomes resident.
    ok(&predictio(&["evict", p]));
    ok(&predictio(&["prefetch", p, "--range", "0..8M", "--range", "32M+8M"]));
    let after: serde_json::Value = serde_json::from_str(&ok(&predictio(&["residency", "--json", p]))).expect("json");
    let fraction = after[0]["fraction"].as_f64().expect("fraction");
    assert!((0.24..0.30).contains(&fraction), "16 of 64 MiB asked, {fraction} resident");
}

#[test]
fn bench_writes_a_result_file_in_the_documented_schema() {
    let _lock = cache_lock();
    let dir = common::disk_dir("predictio-cli");
    let out_dir = dir.path().join("results");
    let out = predictio(&[
        "bench",
        "control-path",
        "--quick",
        "--pairs",
        "1",
        "--no-progress",
        "--dir",
        dir.path().to_str().expect("utf8"),
        "--out",
        out_dir.to_str().expect("utf8"),
    ]);
    ok(&out);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("control-path.json")).expect("json written"))
            .expect("valid json");
    assert_eq!(json["workload"], "control-path");
    assert!(json["command"].as_str().expect("command").starts_with("predictio bench control-path"));
    assert!(json["machine"]["device_limit"]["rand4k_iops_qd64"].as_f64().expect("iops") > 0.0);
    assert!(json["machine"]["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    let cases = json["cases"].as_array().expect("cases");
    assert!(cases.len() >= 7);
    assert!(cases.iter().all(|c| c["value"].as_f64().is_some_and(|v| v > 0.0)));
    assert!(out_dir.join("control-path.md").exists());
    assert!(std::fs::read_to_string(out_dir.join("control-path.svg")).expect("svg").starts_with("<svg"));
}

#[test]
fn help_teaches() {
    let help = ok(&predictio(&["--help"]));
    for word in ["prefetch", "residency", "evict", "bench"] {
        assert!(help.contains(word), "--help lists {word}");
    }
    let help = ok(&predictio(&["prefetch", "--help"]));
    assert!(help.contains("--range") && help.contains("Examples"));
}

/// Runs predictio with `args` and a deadline: a command that hangs (a FIFO
/// opened for reading waits for a writer) fails the test instead of
/// hanging it.
fn predictio_within(args: &[&str], limit: std::time::Duration) -> Output {
    let mut child = Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run predictio");
    let start = std::time::Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("predictio {args:?} still running after {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Every command that opens a file the user names refuses a FIFO, a
/// device and a directory at once, without reading from it.
#[test]
fn fifos_and_devices_are_refused_without_hanging() {
    let dir = common::disk_dir("predictio-cli-fifo");
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().expect("mkfifo").success());
    let fifo = fifo.to_str().expect("utf8");
    let limit = std::time::Duration::from_secs(10);
    for args in [
        vec!["prefetch", fifo],
        vec!["residency", fifo],
        vec!["evict", fifo],
        vec!["read", fifo, "-o", "/dev/null"],
        vec!["model", fifo],
        vec!["hint", fifo],
        vec!["profile", "import", fifo],
        vec!["profile", "import", "/dev/zero"],
        vec!["read", "/dev/zero", "-o", "/dev/null"],
    ] {
        let out = predictio_within(&args, limit);
        fails_with(&out, "not a regular file");
    }
}

/// Durations are finite numbers of seconds: `nan`, `inf` and `1e30`
/// panicked or waited forever.
#[test]
fn durations_out_of_range_are_clear_errors() {
    let limit = std::time::Duration::from_secs(10);
    for value in ["nan", "inf", "1e30", "-1"] {
        let (timeout, interval, duration, exit_after) = (
            format!("--timeout={value}"),
            format!("--interval={value}"),
            format!("--duration={value}"),
            format!("--exit-after={value}"),
        );
        for args in [
            vec!["prefetch", "/proc/self/exe", &timeout],
            vec!["top", &interval],
            vec!["trace", "--all", &duration],
            vec!["daemon", &exit_after],
        ] {
            let out = predictio_within(&args, limit);
            assert!(!out.status.success(), "{args:?} succeeded");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(stderr.contains("out of range") || stderr.contains("not a number"), "{args:?}: {stderr}");
            assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        }
    }
}

/// A service manager stops `predictio run -- CMD` with SIGTERM: the command
/// gets it too (it used to be left running, orphaned), and `run` exits with
/// the command's status.
#[test]
fn sigterm_to_run_is_passed_on_to_the_command() {
    let dir = common::disk_dir("predictio-run-term");
    let ready = dir.path().join("ready");
    let script = format!("trap 'exit 7' TERM; touch {}; while :; do sleep 0.05; done", ready.display());
    let mut child = Command::new(bin())
        .args(["run", "--quiet", "--no-replay", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run predictio");
    let start = std::time::Instant::now();
    while !ready.exists() {
        assert!(start.elapsed() < std::time::Duration::from_secs(30), "the command did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let stopped = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if stopped.elapsed() > std::time::Duration::from_secs(10) {
            let _ = child.kill();
            panic!("predictio run still running 10 s after SIGTERM: the command never got it");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(7), "run exits with the command's status after its TERM trap");
}

/// `predictio model` on a Parquet file: its row groups and columns from the
/// footer, as text and JSON; a truncated one is a clear error.
#[test]
fn model_shows_a_parquet_files_column_chunks() {
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../predictio/tests/data/duckdb-3x3.parquet");
    let out = predictio(&["model", fixture, "--tensors"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Parquet, 6000 rows in 3 row groups of 3 columns"), "{text}");
    assert!(text.contains("27423"), "chunk (1, 1) listed: {text}");
    let out = predictio(&["model", fixture, "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["chunks"].as_array().map(Vec::len), Some(9));
    assert_eq!(json["chunks"][8]["offset"], 45919);

    let dir = tempfile::tempdir().expect("tempdir");
    let cut = dir.path().join("cut.parquet");
    let bytes = std::fs::read(fixture).expect("fixture");
    // The footer's length and magic kept, its first half gone.
    let mut broken = bytes[..bytes.len() - 600].to_vec();
    broken.extend_from_slice(&bytes[bytes.len() - 8..]);
    std::fs::write(&cut, broken).expect("write");
    let out = predictio(&["model", cut.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("reading the Parquet footer of"), "{err}");
}
