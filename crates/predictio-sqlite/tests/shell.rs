//! The extension in the unmodified `sqlite3` shell: range scans, point
//! reads, writes and a corrupt database give byte-identical output with and
//! without `.load`, and the loaded shim really drove the `btree` policy.
#![cfg(feature = "extension")]

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use predictio::testing::skip;

mod common;
use common::{HUNG, Runtime, extension, have_sqlite3, run, run_in};

/// Rows in the test table: ~20k rows of 400-byte values, a 3-level tree.
const ROWS: u32 = 20_000;

/// Evicts the file's clean pages so that the next scan is cold.
fn drop_cache(path: &Path) {
    let file = File::open(path).expect("open db");
    predictio::os::fadvise(file.as_fd(), 0, 0, predictio::os::Advice::DontNeed).expect("posix_fadvise(DONTNEED)");
}

/// A YCSB-like table inserted in random key order, so that leaves are
/// scattered: `usertable(k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID`.
#[track_caller]
fn build_db(dir: &Path) -> PathBuf {
    let db = dir.join("ycsb.db");
    let script = format!(
        "PRAGMA page_size = 4096;
         CREATE TABLE usertable(k TEXT PRIMARY KEY, v BLOB) WITHOUT ROWID;
         WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < {ROWS})
         INSERT INTO usertable SELECT printf('user%010d', i * 7919 % {ROWS}), randomblob(400) FROM c ORDER BY random();"
    );
    let out = run(&[db.to_str().expect("utf-8 path")], &script);
    assert!(out.status.success(), "building the db: {}", String::from_utf8_lossy(&out.stderr));
    db
}

/// Range scans of 10 to 1 000 rows from several start keys, point reads,
/// and a full count.
fn queries() -> String {
    let mut script = String::new();
    for (start, limit) in [(123, 10), (4_567, 100), (9_000, 1_000), (17_777, 1_000), (19_990, 100)] {
        script.push_str(&format!(
            "SELECT k, hex(v) FROM usertable WHERE k >= 'user{start:010}' ORDER BY k LIMIT {limit};\n"
        ));
    }
    for key in [0, 42, 12_345, 19_999, 20_001] {
        script.push_str(&format!("SELECT k, length(v) FROM usertable WHERE k = 'user{key:010}';\n"));
    }
    script.push_str("SELECT count(*), sum(length(v)) FROM usertable;\n");
    script
}

/// `script` on `db` without the extension.
fn plain(db: &Path, script: &str) -> Output {
    drop_cache(db);
    run(&[db.to_str().expect("utf-8 path")], script)
}

/// `script` on `db` through the extension: load into an in-memory
/// connection, then `.open` the database (the shim wraps files opened after
/// the load). The last line of stdout is `predictio_stats()`.
fn loaded(db: &Path, script: &str) -> (Output, serde_json::Value) {
    drop_cache(db);
    let full = format!(".load {}\n.open {}\n{script}SELECT predictio_stats();\n", extension().display(), db.display());
    let mut out = run(&[":memory:"], &full);
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    let (body, last) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim_end()));
    let stats: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("predictio_stats() gave {last:?}: {e}"));
    out.stdout = if body.is_empty() { Vec::new() } else { format!("{body}\n").into_bytes() };
    (out, stats)
}

fn counter(stats: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter().fold(stats, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("no counter {path:?} in {stats}"))
}

#[test]
fn scans_through_the_extension_give_identical_answers_and_prefetch() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = build_db(dir.path());
    let script = queries();
    let baseline = plain(&db, &script);
    assert!(baseline.status.success(), "baseline: {}", String::from_utf8_lossy(&baseline.stderr));
    assert!(baseline.stdout.len() > 1_000_000, "baseline printed only {} bytes", baseline.stdout.len());
    let (with, stats) = loaded(&db, &script);
    assert!(with.status.success(), "with the extension: {}", String::from_utf8_lossy(&with.stderr));
    assert_eq!(String::from_utf8_lossy(&with.stderr), String::from_utf8_lossy(&baseline.stderr));
    assert!(with.stdout == baseline.stdout, "answers differ with the extension loaded");
    // The shim saw the descents and the executor issued reads of the cold
    // leaves ahead of the scan.
    assert!(counter(&stats, &["events"]) > 10, "{stats}");
    assert!(counter(&stats, &["requests"]) > 0, "{stats}");
    assert!(counter(&stats, &["executor", "requested_pages"]) > 0, "{stats}");
    assert!(counter(&stats, &["executor", "issued_pages"]) > 0, "{stats}");
    assert_eq!(counter(&stats, &["executor", "errors"]), 0, "{stats}");
}

/// The shell's `.system` line that prints `LABEL tasks=N fds=N sockets=N`
/// for the sqlite3 process itself (the shell `system()` starts is its child).
fn census(label: &str) -> String {
    format!(
        ".system echo {label} tasks=$(ls /proc/$PPID/task | wc -l) fds=$(ls /proc/$PPID/fd | wc -l) sockets=$(ls -l /proc/$PPID/fd | grep -c socket:)\n"
    )
}

/// `name=N` of the census line labelled `label` in `stdout`.
#[track_caller]
fn census_count(stdout: &str, label: &str, name: &str) -> u64 {
    let line = stdout
        .lines()
        .find(|line| line.starts_with(&format!("{label} ")))
        .unwrap_or_else(|| panic!("no {label} line in {stdout:?}"));
    line.split_whitespace()
        .find_map(|field| field.strip_prefix(&format!("{name}=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
}

/// The shell's `.system` line that prints `LABEL runtime=N`: how many of
/// the sqlite3 process's mappings are of the runtime library.
fn runtime_mapped(label: &str) -> String {
    format!(".system echo {label} runtime=$(grep -c libpredictio_sqlite_runtime /proc/$PPID/maps)\n")
}

/// Loading the extension (the default, lazy loader) starts no thread, opens
/// no descriptor or socket and maps nothing else, and a point read of a
/// cached database through it starts no thread, holds no descriptor of its
/// own and never loads the runtime.
#[test]
fn loading_starts_no_thread_and_a_cached_point_read_none_either() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = build_db(dir.path());
    // Cached: read it whole once.
    std::fs::read(&db).expect("read db");
    let script = |load: &str| {
        format!(
            "{}{load}\n{}.open {}\nSELECT k, length(v) FROM usertable WHERE k = 'user0000012345';\n{}{}",
            census("before"),
            census("loaded"),
            db.display(),
            census("queried"),
            runtime_mapped("queried"),
        )
    };
    let out = run_in(Runtime::Lazy, &[":memory:"], &script(&format!(".load {}", extension().display())));
    assert!(out.status.success(), "sqlite3: {}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("queried runtime=0"), "a cached point read loaded the runtime: {stdout}");
    let plain = run_in(Runtime::Lazy, &[":memory:"], &script("-- no .load"));
    let plain = String::from_utf8_lossy(&plain.stdout);
    assert!(stdout.contains("user0000012345|400"), "{stdout}");
    let before = census_count(&stdout, "before", "tasks");
    assert_eq!(before, 1, "the sqlite3 shell is single-threaded: {stdout}");
    assert_eq!(census_count(&stdout, "loaded", "tasks"), before, "loading started a thread: {stdout}");
    assert_eq!(census_count(&stdout, "loaded", "fds"), census_count(&stdout, "before", "fds"), "{stdout}");
    assert_eq!(census_count(&stdout, "loaded", "sockets"), 0, "loading opened a socket: {stdout}");
    assert_eq!(census_count(&stdout, "queried", "tasks"), before, "a cached point read started a thread: {stdout}");
    assert_eq!(census_count(&stdout, "queried", "sockets"), 0, "{stdout}");
    // The runtime did not start: no descriptor beyond SQLite's own.
    assert_eq!(
        census_count(&stdout, "queried", "fds"),
        census_count(&plain, "queried", "fds"),
        "a cached point read left descriptors open: {stdout} (without the extension: {plain})"
    );
}

#[test]
fn writes_journals_and_wal_pass_through() {
    if !have_sqlite3() {
        return;
    }
    let script = "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);
        WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 5000)
        INSERT INTO t SELECT i, printf('%0300d', i) FROM c;
        BEGIN; UPDATE t SET v = 'x' || v WHERE k % 3 = 0; ROLLBACK;
        DELETE FROM t WHERE k % 7 = 0;
        SELECT count(*), sum(length(v)), min(k), max(k) FROM t;
        SELECT k, v FROM t WHERE k >= 2500 ORDER BY k LIMIT 50;
        PRAGMA integrity_check;\n";
    for mode in ["DELETE", "WAL"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a.db"), dir.path().join("b.db"));
        let script = format!("PRAGMA journal_mode = {mode};\n{script}");
        let baseline = run(&[a.to_str().expect("utf-8")], &script);
        assert!(baseline.status.success(), "{mode}: {}", String::from_utf8_lossy(&baseline.stderr));
        let full = format!(".load {}\n.open {}\n{script}", extension().display(), b.display());
        let with = run(&[":memory:"], &full);
        assert!(with.status.success(), "{mode} with the extension: {}", String::from_utf8_lossy(&with.stderr));
        assert_eq!(String::from_utf8_lossy(&with.stdout), String::from_utf8_lossy(&baseline.stdout), "{mode}");
        // And the file written through the shim reads back the same without it.
        let check = "SELECT count(*), sum(length(v)) FROM t; PRAGMA integrity_check;\n";
        assert_eq!(run(&[a.to_str().expect("utf-8")], check).stdout, run(&[b.to_str().expect("utf-8")], check).stdout);
    }
}

#[test]
fn a_corrupt_database_fails_as_it_would_without_us() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let db = build_db(dir.path());
    let mut image = std::fs::read(&db).expect("read db");
    // Random-looking bytes over the body of every interior page after the
    // root's header (keep the type byte so SQLite descends into them).
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut corrupted = 0;
    for page in image.chunks_mut(4096).skip(1) {
        if matches!(page[0], 0x02 | 0x05) {
            for byte in &mut page[8..64] {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *byte = seed as u8;
            }
            corrupted += 1;
        }
    }
    assert!(corrupted > 0, "no interior page found");
    std::fs::write(&db, &image).expect("write corrupt db");
    let script = "SELECT k, hex(v) FROM usertable WHERE k >= 'user0000005000' ORDER BY k LIMIT 500;
        SELECT count(*) FROM usertable;\nPRAGMA integrity_check;\n";
    // Two comment lines stand in for `.load` and `.open`, so that the
    // shell's "near line N" messages match.
    let baseline = plain(&db, &format!("-- .load\n-- .open\n{script}"));
    let full = format!(".load {}\n.open {}\n{script}", extension().display(), db.display());
    drop_cache(&db);
    let with = run(&[":memory:"], &full);
    // No hang, no crash (a signal would show as no code, or 128 + signal
    // through timeout): the same exit as without us.
    assert_ne!(with.status.code(), Some(HUNG), "sqlite3 hung on a corrupt database through the extension");
    assert_eq!(with.status.code(), baseline.status.code());
    assert!(with.stdout == baseline.stdout, "stdout differs on a corrupt database");
    assert_eq!(String::from_utf8_lossy(&with.stderr), String::from_utf8_lossy(&baseline.stderr));
}

/// The loader is small (what a cold `.load` reads), and with its default,
/// lazy loading a cold scan whose reads wait loads the runtime in the
/// background: the answers are the same, the runtime is mapped, and it
/// followed the scan and prefetched.
#[test]
fn a_cold_scan_loads_the_runtime_in_the_background() {
    if !have_sqlite3() {
        return;
    }
    let size = std::fs::metadata(extension()).expect("stat the loader").len();
    assert!(size < 64 * 1024, "the loader is {size} bytes: it is read whole by every cold load");
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let db = build_db(dir.path());
    lazy_scan(&db, |_| ());
}

/// Cold point reads, each its own statement, never load the runtime,
/// however long they wait in all: nothing can be read ahead of a lookup,
/// and loading the runtime while they wait on the device only slows them.
/// The answers are those without the extension.
#[test]
fn cold_point_reads_never_load_the_runtime() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let db = build_db(dir.path());
    let mut script = String::new();
    for i in 0..300 {
        let key = i * 6_151 % ROWS;
        script.push_str(&format!("SELECT k, length(v) FROM usertable WHERE k = 'user{key:010}';\n"));
    }
    let (mapped, stats) = cold_through_extension(&db, &script, |_| (), "queried");
    assert_eq!(mapped, "queried runtime=0", "point reads loaded the runtime");
    // They did wait on the device, past the gate a scan's reads load it at.
    assert!(counter(&stats, &["read_wait_us"]) >= 2_000, "the reads were not cold: {stats}");
}

/// A scan of a database whose first pages were cached (another process
/// had just read them): the loader only notes those reads, copies the
/// ones that wait, and when the runtime loads reads the noted pages again
/// for it, which then knows the file and follows the scan as if it had
/// been shown every read.
#[test]
fn a_scan_whose_first_pages_were_cached_is_still_followed() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let db = build_db(dir.path());
    lazy_scan(&db, |db| {
        let mut head = vec![0u8; 16 * 4096];
        File::open(db).and_then(|f| f.read_exact_at(&mut head, 0)).expect("read the database's first pages");
    });
}

/// `script` on `db` cold (with `warm` run between dropping its cache and the
/// script) through the extension's default (lazy) loader, after running it
/// without the extension: checks that the answers are the same and returns
/// the census line `label runtime=N` (the runtime's mappings) and
/// `predictio_stats()`.
#[track_caller]
fn cold_through_extension(
    db: &Path,
    script: &str,
    warm: impl FnOnce(&Path),
    label: &str,
) -> (String, serde_json::Value) {
    let baseline = plain(db, script);
    assert!(baseline.status.success(), "baseline: {}", String::from_utf8_lossy(&baseline.stderr));
    drop_cache(db);
    warm(db);
    let full = format!(
        ".load {}\n.open {}\n{script}{}SELECT predictio_stats();\n",
        extension().display(),
        db.display(),
        runtime_mapped(label)
    );
    let with = run_in(Runtime::Lazy, &[":memory:"], &full);
    assert!(with.status.success(), "with the extension: {}", String::from_utf8_lossy(&with.stderr));
    let text = String::from_utf8(with.stdout).expect("utf-8 output");
    let (body, last) = text.trim_end().rsplit_once('\n').expect("output and stats");
    let (answers, mapped) = body.rsplit_once('\n').expect("answers and the census");
    assert!(format!("{answers}\n").as_bytes() == baseline.stdout, "answers differ with the extension loaded");
    let stats = serde_json::from_str(last).unwrap_or_else(|e| panic!("predictio_stats() gave {last:?}: {e}"));
    (mapped.to_owned(), stats)
}

/// [`queries`] on `db` cold, with `warm` run between dropping its cache and
/// the scan, through the extension's default (lazy) loader: checks that the
/// answers are those without it, that the runtime was loaded, and that it
/// followed the scans and prefetched without an error.
#[track_caller]
fn lazy_scan(db: &Path, warm: impl FnOnce(&Path)) {
    let (mapped, stats) = cold_through_extension(db, &queries(), warm, "scanned");
    assert!(mapped.starts_with("scanned runtime=") && mapped != "scanned runtime=0", "runtime not loaded: {mapped}");
    assert!(counter(&stats, &["events"]) > 10, "{stats}");
    assert!(counter(&stats, &["executor", "issued_pages"]) > 0, "{stats}");
    assert_eq!(counter(&stats, &["executor", "errors"]), 0, "{stats}");
}

/// With `PREDICTIO_SQLITE_RUNTIME=off` the shim only forwards: same
/// answers, no runtime, and `predictio_stats()` says so.
#[test]
fn the_runtime_can_be_turned_off() {
    if !have_sqlite3() {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let db = build_db(dir.path());
    let script = queries();
    let baseline = plain(&db, &script);
    drop_cache(&db);
    let full = format!(".load {}\n.open {}\n{script}SELECT predictio_stats();\n", extension().display(), db.display());
    let with = run_in(Runtime::Off, &[":memory:"], &full);
    assert!(with.status.success(), "with the extension: {}", String::from_utf8_lossy(&with.stderr));
    let text = String::from_utf8(with.stdout).expect("utf-8 output");
    let (body, last) = text.trim_end().rsplit_once('\n').expect("output and stats");
    assert!(format!("{body}\n").as_bytes() == baseline.stdout, "answers differ with the extension loaded");
    assert_eq!(last, r#"{"runtime":"off","read_wait_us":0}"#);
}

#[test]
fn python_load_extension() {
    if !have_sqlite3() {
        return;
    }
    let code = format!(
        "import sqlite3, sys
m = sqlite3.connect(':memory:')
if not hasattr(m, 'enable_load_extension'):
    print('skip'); sys.exit(0)
m.enable_load_extension(True)
m.load_extension({:?})
c = sqlite3.connect(sys.argv[1])
print(c.execute('SELECT count(*) FROM usertable').fetchone()[0])
print(c.execute('SELECT predictio_stats()').fetchone()[0])",
        extension().display().to_string()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let db = build_db(dir.path());
    // Debian's python3 is built with load_extension; a python3 earlier on
    // PATH (pyenv) may not be.
    let python = if Path::new("/usr/bin/python3").exists() { "/usr/bin/python3" } else { "python3" };
    let Ok(out) = Command::new(python).env("PREDICTIO_SQLITE_RUNTIME", "eager").arg("-c").arg(&code).arg(&db).output()
    else {
        skip("needs python3");
        return;
    };
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    if text.trim() == "skip" {
        skip("this python3's sqlite3 module was built without load_extension");
        return;
    }
    assert!(text.starts_with(&format!("{ROWS}\n")), "{text}");
    assert!(text.contains("\"events\""), "{text}");
}
