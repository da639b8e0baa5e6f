//! Every SQL shape people use gives the same answer with the extension
//! loaded as without it, on a cold cache: descending scans, joins, GROUP BY,
//! secondary indexes of rowid and WITHOUT ROWID tables, covering indexes, a
//! WAL reader beside a concurrent writer, pages read from the WAL, mapped
//! pages, read-only opens, every page size and a change of it, ATTACH, temp
//! tables and in-memory databases. Each test builds real databases on disk
//! (under /var/tmp: a tmpfs has no device to be cold on), drops their pages
//! from the page cache before each run, runs the same script in the
//! unmodified `sqlite3` shell with and without `.load`, and compares stdout
//! and stderr byte for byte. Where the shape reads a main database from the
//! device, `predictio_stats()` shows the shim followed the descents (and, for
//! ascending scans long enough to confirm, that the policy asked for pages).
#![cfg(feature = "extension")]

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;
use common::{HANG_SECONDS, extension, have_sqlite3, run};

/// A directory on disk for the test's databases: /var/tmp, not a tmpfs
/// `TMPDIR`, whose pages cannot be dropped to make a cold cache.
fn disk_dir() -> tempfile::TempDir {
    std::fs::create_dir_all("/var/tmp").ok();
    tempfile::Builder::new().prefix("predictio-sqlite-shapes").tempdir_in("/var/tmp").expect("temp dir on disk")
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// Builds `dir/name` with `script` (plain sqlite3).
#[track_caller]
fn build(dir: &Path, name: &str, script: &str) -> PathBuf {
    let db = dir.join(name);
    let out = run(&[path_str(&db)], script);
    assert!(out.status.success() && out.stderr.is_empty(), "building {name}: {}", String::from_utf8_lossy(&out.stderr));
    db
}

/// Evicts the file's clean pages so that the next run reads it from the
/// device.
#[track_caller]
fn drop_cache(path: &Path) {
    let file = File::open(path).unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    predictio::os::fadvise(file.as_fd(), 0, 0, predictio::os::Advice::DontNeed).expect("posix_fadvise(DONTNEED)");
}

/// Where two outputs first differ, for a message that does not print
/// megabytes.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    let (mut la, mut lb) = (a.lines(), b.lines());
    for line in 1.. {
        match (la.next(), lb.next()) {
            (None, None) => return "no difference".to_owned(),
            (x, y) if x != y => {
                let cut = |s: Option<&str>| s.map(|s| s.chars().take(160).collect::<String>());
                return format!("line {line}: without {:?}, with {:?}", cut(x), cut(y));
            }
            _ => {}
        }
    }
    unreachable!()
}

/// `script` run twice on a cold cache (every file of `cold` dropped before
/// each run): without the extension on `open` (a database path, or
/// `:memory:`), then with it loaded into an in-memory connection that
/// `.open`s `open` afterwards (the shim wraps files opened after the load).
/// Asserts both succeed with the same stdout and stderr, and returns the
/// baseline's stdout and the extension's `predictio_stats()`.
#[track_caller]
fn compare(open: &str, cold: &[&Path], script: &str) -> (String, serde_json::Value) {
    for file in cold {
        drop_cache(file);
    }
    // Two comment lines stand in for `.load` and `.open`, so that the
    // shell's "near line N" messages match.
    let baseline = run(&[open], &format!("-- .load\n-- .open\n{script}"));
    assert!(
        baseline.status.success() && baseline.stderr.is_empty(),
        "without the extension: {}",
        String::from_utf8_lossy(&baseline.stderr)
    );
    for file in cold {
        drop_cache(file);
    }
    let full = format!(".load {}\n.open {open}\n{script}SELECT predictio_stats();\n", extension().display());
    let with = run(&[":memory:"], &full);
    let text = String::from_utf8(with.stdout).expect("utf-8 output");
    let (body, last) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim_end()));
    assert_eq!(
        String::from_utf8_lossy(&with.stderr),
        String::from_utf8_lossy(&baseline.stderr),
        "stderr differs with the extension loaded"
    );
    assert!(with.status.success(), "sqlite3 with the extension exited with {:?}", with.status);
    let body = if body.is_empty() { String::new() } else { format!("{body}\n") };
    assert!(
        body.as_bytes() == baseline.stdout,
        "answers differ with the extension loaded: {}",
        first_difference(&baseline.stdout, body.as_bytes())
    );
    let stats: serde_json::Value =
        serde_json::from_str(last).unwrap_or_else(|e| panic!("predictio_stats() gave {last:?}: {e}"));
    assert_eq!(counter(&stats, &["executor", "errors"]), 0, "{stats}");
    (String::from_utf8(baseline.stdout).expect("utf-8 output"), stats)
}

fn counter(stats: &serde_json::Value, path: &[&str]) -> u64 {
    path.iter().fold(stats, |v, k| &v[*k]).as_u64().unwrap_or_else(|| panic!("no counter {path:?} in {stats}"))
}

/// Asserts the shim followed descents of a cold database: the runtime
/// started (reads came from the device) and saw children entered.
#[track_caller]
fn assert_followed(what: &str, stats: &serde_json::Value) {
    eprintln!(
        "{what}: events {} requests {} issued pages {}",
        counter(stats, &["events"]),
        counter(stats, &["requests"]),
        counter(stats, &["executor", "issued_pages"])
    );
    assert!(counter(stats, &["events"]) > 0, "{what}: the shim followed no descent: {stats}");
}

/// As [`assert_followed`], and the policy asked for pages ahead of a scan.
#[track_caller]
fn assert_prefetched(what: &str, stats: &serde_json::Value) {
    assert_followed(what, stats);
    assert!(counter(stats, &["requests"]) > 0, "{what}: the policy asked for nothing: {stats}");
    assert!(counter(stats, &["executor", "requested_pages"]) > 0, "{what}: {stats}");
}

/// Asserts the query plan printed in `stdout` (`EXPLAIN QUERY PLAN`) has
/// `step`: the shape under test is the one SQLite runs.
#[track_caller]
fn assert_plan(stdout: &str, step: &str) {
    assert!(stdout.contains(step), "the plan has no {step:?}: {}", &stdout[..stdout.len().min(2000)]);
}

/// Rows of the test tables: with 200-byte values, ~2 MB; at 4 KiB pages
/// the table's b-tree has ~470 leaves under its root, the index's ~50
/// (more levels at smaller pages).
const ROWS: u32 = 8_000;

/// The numbers 0..n as a CTE `c(i)`, for `INSERT … SELECT … FROM c ORDER
/// BY random()` (keys `i * 7919 % n` are a permutation of 0..n: 7919 is a
/// prime that divides none of the `n` used here).
fn rows(n: u32) -> String {
    format!("WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i + 1 < {n})")
}

/// `t(id INTEGER PRIMARY KEY, k TEXT, v BLOB)` with `t_k ON t(k)`, rows
/// inserted in random key order (rowids in insertion order, so the index
/// order and the table order disagree), at `page_size`.
fn rowid_table(page_size: u32, n: u32) -> String {
    rowid_table_of(page_size, n, "randomblob(200)", "random()")
}

/// [`rowid_table`] with values `value` (of the row number `i`) inserted in
/// the order of `order`.
fn rowid_table_of(page_size: u32, n: u32, value: &str, order: &str) -> String {
    format!(
        "PRAGMA page_size = {page_size};
         CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);
         CREATE INDEX t_k ON t(k);
         {} INSERT INTO t(k, v) SELECT printf('key%08d', i * 7919 % {n}), {value} FROM c ORDER BY {order};\n",
        rows(n)
    )
}

/// `key%08d` of `i`.
fn key(i: u32) -> String {
    format!("key{i:08}")
}

#[test]
fn descending_scans_over_the_rowid_and_an_index() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(dir.path(), "desc.db", &rowid_table(4096, ROWS));
    let script = format!(
        "EXPLAIN QUERY PLAN SELECT id, k FROM t WHERE k <= '{k}' ORDER BY k DESC LIMIT 10;
         SELECT id, hex(v) FROM t ORDER BY id DESC LIMIT 3000;
         SELECT id, k, hex(v) FROM t WHERE id < 6000 ORDER BY id DESC LIMIT 500;
         SELECT k, id FROM t ORDER BY k DESC LIMIT 4000;
         SELECT k, id, hex(v) FROM t WHERE k <= '{k}' ORDER BY k DESC LIMIT 1000;
         SELECT id FROM t WHERE id BETWEEN 100 AND 7000 ORDER BY id DESC;
         SELECT max(id), max(k), min(k) FROM t;\n",
        k = key(5000)
    );
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    assert_plan(&out, "SEARCH t USING COVERING INDEX t_k (k<?)");
    assert!(out.lines().count() > 10_000, "{} lines", out.lines().count());
    // Backward scans are followed but not prefetched (the policy takes a
    // backward step for a new scan).
    assert_followed("descending scans", &stats);
}

#[test]
fn joins_by_index_nested_loop() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(
        dir.path(),
        "join.db",
        &format!(
            "PRAGMA page_size = 4096;
             CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT, region INT, bio BLOB);
             CREATE TABLE orders(id INTEGER PRIMARY KEY, cust INT, amount INT, note BLOB);
             CREATE INDEX orders_cust ON orders(cust);
             {} INSERT INTO customers SELECT i, printf('customer %d', i), i % 7, randomblob(150) FROM c ORDER BY random();
             {} INSERT INTO orders(cust, amount, note)
                SELECT i * 7919 % 3000, i % 1000, randomblob(100) FROM c ORDER BY random();\n",
            rows(3000),
            rows(ROWS * 2),
        ),
    );
    let script = "EXPLAIN QUERY PLAN SELECT c.id, count(o.id), sum(o.amount) FROM customers c LEFT JOIN orders o ON o.cust = c.id GROUP BY c.id;
        EXPLAIN QUERY PLAN SELECT o.id, c.name FROM orders o JOIN customers c ON c.id = o.cust WHERE o.id >= 2000;
        SELECT c.id, c.name, o.id, o.amount, hex(o.note) FROM customers c JOIN orders o ON o.cust = c.id
            WHERE c.id BETWEEN 500 AND 1500 ORDER BY c.id, o.id;
        SELECT o.id, c.name, hex(c.bio) FROM orders o JOIN customers c ON c.id = o.cust WHERE o.id >= 2000 ORDER BY o.id LIMIT 3000;
        SELECT c.id, count(o.id), sum(o.amount) FROM customers c LEFT JOIN orders o ON o.cust = c.id
            GROUP BY c.id ORDER BY c.id;
        SELECT count(*), sum(o.amount) FROM customers c, orders o WHERE o.cust = c.id AND c.region = 3;\n";
    let (out, stats) = compare(path_str(&db), &[&db], script);
    assert_plan(&out, "SEARCH o USING INDEX orders_cust (cust=?)");
    assert_plan(&out, "SEARCH c USING INTEGER PRIMARY KEY (rowid=?)");
    assert!(out.lines().count() > 6_000, "{} lines", out.lines().count());
    assert_prefetched("joins", &stats);
}

#[test]
fn group_by_and_order_by_over_an_index() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(
        dir.path(),
        "group.db",
        &format!(
            "PRAGMA page_size = 4096;
             CREATE TABLE sales(id INTEGER PRIMARY KEY, region TEXT, day INT, amount INT, note BLOB);
             CREATE INDEX sales_region_day ON sales(region, day);
             {} INSERT INTO sales(region, day, amount, note)
                SELECT printf('r%03d', i * 7919 % 120), i % 365, i % 997, randomblob(150) FROM c ORDER BY random();\n",
            rows(ROWS * 2)
        ),
    );
    let script = "EXPLAIN QUERY PLAN SELECT region, count(*), sum(amount) FROM sales GROUP BY region ORDER BY region;
        EXPLAIN QUERY PLAN SELECT region, day, count(*) FROM sales GROUP BY region, day ORDER BY region, day;
        SELECT region, count(*), sum(amount), sum(length(note)) FROM sales GROUP BY region ORDER BY region;
        SELECT region, day, count(*) FROM sales WHERE region >= 'r050' GROUP BY region, day ORDER BY region, day LIMIT 3000;
        SELECT day, count(*), max(amount) FROM sales GROUP BY day ORDER BY day;
        SELECT region, day, amount FROM sales ORDER BY region, day LIMIT 5000;
        SELECT DISTINCT region FROM sales ORDER BY region DESC;
        SELECT region, day, hex(note) FROM sales WHERE region = 'r077' ORDER BY day;\n";
    let (out, stats) = compare(path_str(&db), &[&db], script);
    assert_plan(&out, "SCAN sales USING INDEX sales_region_day");
    assert_plan(&out, "SCAN sales USING COVERING INDEX sales_region_day");
    assert_prefetched("GROUP BY and ORDER BY", &stats);
}

/// Range scans `WHERE k >= ? ORDER BY k LIMIT n` of 10 to 5,000 rows from
/// several start keys, as `columns`.
fn range_scans(table: &str, column: &str, columns: &str) -> String {
    range_scans_where(table, "", column, columns)
}

/// [`range_scans`] of the rows that also match `filter` (`""`: all).
fn range_scans_where(table: &str, filter: &str, column: &str, columns: &str) -> String {
    let filter = if filter.is_empty() { String::new() } else { format!("{filter} AND ") };
    let mut script = String::new();
    for (start, limit) in [(123, 10), (4_567, 100), (2_000, 1_000), (7_000, 1_000), (500, 5_000), (7_990, 100)] {
        script.push_str(&format!(
            "SELECT {columns} FROM {table} WHERE {filter}{column} >= '{}' ORDER BY {column} LIMIT {limit};\n",
            key(start)
        ));
    }
    script
}

#[test]
fn a_rowid_table_through_a_secondary_index() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(dir.path(), "index.db", &rowid_table(4096, ROWS));
    let script = format!(
        "EXPLAIN QUERY PLAN SELECT id, k, v FROM t WHERE k >= 'key' ORDER BY k LIMIT 10;
         {}SELECT id, k, length(v) FROM t WHERE k = '{}';
         SELECT count(*) FROM t WHERE k >= '{}';\n",
        range_scans("t", "k", "id, k, hex(v)"),
        key(4_321),
        key(3_000),
    );
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    assert_plan(&out, "SEARCH t USING INDEX t_k (k>?)");
    assert!(out.lines().count() > 7_000, "{} lines", out.lines().count());
    assert_prefetched("rowid table through an index", &stats);
}

#[test]
fn a_without_rowid_table_through_a_secondary_index() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(
        dir.path(),
        "wr.db",
        &format!(
            "PRAGMA page_size = 4096;
             CREATE TABLE w(k TEXT PRIMARY KEY, s TEXT, v BLOB) WITHOUT ROWID;
             CREATE INDEX w_s ON w(s);
             {} INSERT INTO w SELECT printf('pk%08d', i), printf('key%08d', i * 7919 % {ROWS}), randomblob(200)
                FROM c ORDER BY random();\n",
            rows(ROWS)
        ),
    );
    let script = format!(
        "EXPLAIN QUERY PLAN SELECT k, s, v FROM w WHERE s >= 'key' ORDER BY s LIMIT 10;
         {}SELECT k, s, hex(v) FROM w WHERE k >= 'pk00004000' ORDER BY k LIMIT 2000;\n",
        range_scans("w", "s", "k, s, hex(v)")
    );
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    assert_plan(&out, "SEARCH w USING INDEX w_s (s>?)");
    assert!(out.lines().count() > 9_000, "{} lines", out.lines().count());
    assert_prefetched("WITHOUT ROWID table through an index", &stats);
}

#[test]
fn a_covering_index_query() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    // A longer key, so that the index alone has a multi-level tree.
    let db = build(
        dir.path(),
        "cover.db",
        &format!(
            "PRAGMA page_size = 4096;
             CREATE TABLE t(id INTEGER PRIMARY KEY, k TEXT, v BLOB);
             CREATE INDEX t_k ON t(k);
             {} INSERT INTO t(k, v) SELECT printf('key%08d', i * 7919 % {n}) || printf('%.40c', '-'), randomblob(100)
                FROM c ORDER BY random();\n",
            rows(ROWS * 2),
            n = ROWS * 2
        ),
    );
    let script = format!(
        "EXPLAIN QUERY PLAN SELECT k, id FROM t WHERE k >= 'key' ORDER BY k LIMIT 10;
         {}SELECT count(*), min(k), max(k) FROM t WHERE k >= '{}';\n",
        range_scans("t", "k", "k, id"),
        key(9_000)
    );
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    assert_plan(&out, "SEARCH t USING COVERING INDEX t_k (k>?)");
    assert_prefetched("covering index", &stats);
}

/// Rows below this id are committed before the writer starts and never
/// change.
const WATERMARK: u32 = ROWS;

/// A writer beside the reader: a `sqlite3` shell (with the extension loaded,
/// so the shim carries writes and checkpoints too) fed statements until
/// told to stop, each its own transaction: inserts above the watermark, and
/// every tenth a delete of the newest row above it. Its WAL fills and is
/// checkpointed into the database file while the reader runs.
struct Writer {
    child: Child,
    feeder: std::thread::JoinHandle<u64>,
    stop: Arc<AtomicBool>,
}

impl Writer {
    fn start(db: &Path) -> Self {
        let mut child = Command::new("timeout")
            .env("PREDICTIO_SQLITE_RUNTIME", "eager")
            .args([HANG_SECONDS, "sqlite3", ":memory:"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn the writer");
        let mut stdin = child.stdin.take().expect("stdin");
        let stop = Arc::new(AtomicBool::new(false));
        let header = format!(
            ".load {}\n.open {}\n.timeout 10000\nPRAGMA synchronous = OFF;\n",
            extension().display(),
            db.display()
        );
        let feeder = std::thread::spawn({
            let stop = Arc::clone(&stop);
            move || {
                stdin.write_all(header.as_bytes()).expect("writer header");
                let mut statements = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let insert =
                        "INSERT INTO t(k, v) VALUES (printf('new%08d', abs(random()) % 100000000), randomblob(300));\n";
                    let batch = format!(
                        "{}DELETE FROM t WHERE id = (SELECT max(id) FROM t) AND id > {WATERMARK};\n",
                        insert.repeat(9)
                    );
                    if stdin.write_all(batch.as_bytes()).is_err() {
                        break;
                    }
                    statements += 10;
                    std::thread::sleep(Duration::from_millis(1));
                }
                statements
            }
        });
        Self { child, feeder, stop }
    }

    /// Stops feeding, waits for the shell to finish, asserts it had no
    /// error; returns the statements fed.
    fn finish(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let statements = self.feeder.join().expect("writer feeder");
        let out = self.child.wait_with_output().expect("writer output");
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "the writer failed ({:?}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        statements
    }
}

/// Rows committed in `db` now (a plain reader).
#[track_caller]
fn committed_rows(db: &Path) -> u64 {
    let out = run(&[path_str(db)], ".timeout 10000\nSELECT count(*) FROM t;\n");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count")
}

#[test]
fn a_wal_reader_beside_a_concurrent_writer() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(
        dir.path(),
        "wal.db",
        &format!("PRAGMA journal_mode = WAL;\n{}PRAGMA wal_checkpoint(TRUNCATE);\n", rowid_table(4096, WATERMARK)),
    );
    let before = committed_rows(&db);
    assert_eq!(before, u64::from(WATERMARK));
    // One read transaction: every answer is of rows at or below the
    // watermark, committed before the writer started, so it is the same
    // whatever the writer committed before the snapshot; and the snapshot
    // holds (the same count and newest row at its end as at its start)
    // while the writer commits and checkpoints.
    let script = format!(
        ".timeout 10000
         BEGIN;
         CREATE TEMP TABLE snap AS SELECT count(*) AS n, max(id) AS m FROM t;
         SELECT count(*), sum(length(v)) FROM t WHERE id <= {w};
         {}SELECT id, hex(v) FROM t WHERE id BETWEEN 1000 AND 3000 ORDER BY id;
         SELECT id, k FROM t WHERE id <= {w} ORDER BY id DESC LIMIT 1000;
         SELECT (SELECT count(*) FROM t) = n, (SELECT max(id) FROM t) = m FROM snap;
         COMMIT;\n",
        range_scans_where("t", &format!("id <= {WATERMARK}"), "k", "id, k, hex(v)"),
        w = WATERMARK,
    );
    let writer = Writer::start(&db);
    // The writer is under way before either reader starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed_rows(&db) <= before + 20 {
        assert!(Instant::now() < deadline, "the writer committed nothing in 30 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let started = committed_rows(&db);
    let wal = dir.path().join("wal.db-wal");
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    let ended = committed_rows(&db);
    assert!(wal.exists(), "no WAL file: not in WAL mode");
    let statements = writer.finish();
    eprintln!("writer: {statements} statements; rows {started} when the readers started, {ended} after");
    assert!(ended > started, "the writer committed nothing while the readers ran");
    assert!(out.lines().count() > 7_000, "{} lines", out.lines().count());
    assert!(out.trim_end().ends_with("1|1"), "the snapshot moved: {}", &out[out.len().saturating_sub(200)..]);
    assert_prefetched("WAL reader beside a writer", &stats);
    // The writer's inserts and deletes through the shim left a sound file.
    let check = run(&[path_str(&db)], "PRAGMA integrity_check;\nSELECT count(*) > 0 FROM t WHERE id > 8000;\n");
    assert_eq!(String::from_utf8_lossy(&check.stdout), "ok\n1\n", "{}", String::from_utf8_lossy(&check.stderr));
}

/// A WAL database `name` in `dir` of [`ROWS`] rows, checkpointed, then
/// appended to by a connection that leaves its WAL as it is on closing:
/// rows added after the checkpoint put new leaves under the roots of the
/// table and of its index, so their newest versions are in the WAL.
/// Returns the database and its WAL.
fn wal_with_new_roots(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let db = build(
        dir,
        name,
        &format!("PRAGMA journal_mode = WAL;\n{}PRAGMA wal_checkpoint(TRUNCATE);\n", rowid_table(4096, ROWS)),
    );
    let append = ".dbconfig no_ckpt_on_close on
        INSERT INTO t(k, v) SELECT 'zz' || k, randomblob(200) FROM t WHERE id <= 300;\n";
    let out = run(&[path_str(&db)], append);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let wal = dir.join(format!("{name}-wal"));
    assert!(std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0), "the appended rows are not in the WAL");
    (db, wal)
}

/// The pages a writer changed since the last checkpoint are read from the
/// WAL: here the roots of the table and of its index (rows appended after
/// the checkpoint added leaves under them). The observer is shown those
/// pages too, or it knows no parent of the leaves read from the database
/// file and follows no descent at all (it did not, before the shim looked
/// at WAL reads). Every connection leaves the WAL as it is on closing
/// (`no_ckpt_on_close`), so both runs read the same WAL.
#[test]
fn a_wal_database_whose_upper_pages_are_in_the_wal() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let (db, wal) = wal_with_new_roots(dir.path(), "walroots.db");
    let script = format!(
        ".dbconfig no_ckpt_on_close on
         {}SELECT id, hex(v) FROM t WHERE id >= 1000 ORDER BY id LIMIT 3000;
         SELECT count(*), sum(length(v)) FROM t;\n",
        range_scans("t", "k", "id, k, hex(v)")
    );
    let (out, stats) = compare(path_str(&db), &[&db, &wal], &script);
    assert!(out.lines().count() > 9_000, "{} lines", out.lines().count());
    assert_prefetched("upper pages in the WAL", &stats);
    assert!(counter(&stats, &["events"]) > 100, "few descents followed: {stats}");
}

/// Pages SQLite maps (`mmap_size`, `xFetch`) rather than reads give the
/// same answers, and the shim sees them as it sees reads.
#[test]
fn memory_mapped_pages() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(dir.path(), "mapped.db", &rowid_table(4096, ROWS));
    let queries = format!(
        "{}SELECT id, hex(v) FROM t WHERE id >= 1000 ORDER BY id LIMIT 2000;
         SELECT count(*), sum(length(v)) FROM t;\n",
        range_scans("t", "k", "id, k, hex(v)")
    );
    // Whether the runtime starts here depends on the kernel: a page fault
    // reads the pages around it too (`read_ahead_kb`, 8 MiB on some VMs:
    // then the first fault reads the whole file and nothing is left to
    // prefetch).
    let (out, _) = compare(path_str(&db), &[&db], &format!("PRAGMA mmap_size = 268435456;\n{queries}"));
    assert!(out.lines().count() > 9_000, "{} lines", out.lines().count());

    // So that the mapped pages can be seen observed: lookups read first
    // (from the device: the runtime starts), then a scan of other rows
    // mapped. The observer counted the mapped pages as reads.
    drop_cache(&db);
    let keys: Vec<String> = (0..40).map(|i| format!("'{}'", key(i * 197 % ROWS))).collect();
    let script = format!(
        ".load {}\n.open {}
         PRAGMA mmap_size = 0;
         SELECT count(*), sum(length(v)) FROM t WHERE k IN ({});
         SELECT predictio_stats();
         PRAGMA mmap_size = 268435456;
         SELECT count(*), sum(length(v)) FROM (SELECT v FROM t WHERE k >= '{}' ORDER BY k LIMIT 1500);
         SELECT predictio_stats();\n",
        extension().display(),
        db.display(),
        keys.join(", "),
        key(5_000)
    );
    let out = run(&[":memory:"], &script);
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).expect("utf-8 output");
    let stats: Vec<serde_json::Value> = text
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect();
    let [read, mapped] = &stats[..] else { panic!("two predictio_stats() expected: {text}") };
    let seen = |stats: &serde_json::Value| counter(stats, &["reads_observed"]) + counter(stats, &["reads_unobserved"]);
    assert!(seen(read) > 0, "the lookups' reads did not start the runtime: {read}");
    assert!(seen(mapped) > seen(read) + 100, "mapped pages were not seen: {read} then {mapped}");
}

/// A read-only open of a WAL database whose roots are in the WAL.
#[test]
fn a_read_only_open_of_a_wal_database() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let (db, wal) = wal_with_new_roots(dir.path(), "readonly.db");
    // Opened from the in-memory connection in both runs (after the load in
    // the second).
    let script = format!(
        ".open --readonly {}
         {}SELECT id, hex(v) FROM t WHERE id >= 1000 ORDER BY id LIMIT 2000;
         SELECT count(*) FROM t;\n",
        db.display(),
        range_scans("t", "k", "id, k, hex(v)")
    );
    let (out, stats) = compare(":memory:", &[&db, &wal], &script);
    assert!(out.lines().count() > 9_000, "{} lines", out.lines().count());
    assert_prefetched("read-only WAL", &stats);
}

#[test]
fn every_page_size() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    for page_size in [512, 1024, 4096, 8192, 16384, 32768, 65536] {
        // At 512-byte pages the 200-byte values overflow: overflow pages too.
        let n = if page_size >= 32768 { ROWS * 2 } else { ROWS };
        let db = build(dir.path(), &format!("p{page_size}.db"), &rowid_table(page_size, n));
        let script = format!(
            "PRAGMA page_size;
             {}SELECT id, hex(v) FROM t WHERE id >= 1234 ORDER BY id LIMIT 3000;
             SELECT id, k FROM t ORDER BY id DESC LIMIT 500;
             SELECT count(*), sum(length(v)) FROM t;
             PRAGMA integrity_check;\n",
            range_scans("t", "k", "id, k, hex(v)")
        );
        let (out, stats) = compare(path_str(&db), &[&db], &script);
        assert!(out.starts_with(&format!("{page_size}\n")), "{page_size}: {}", &out[..out.len().min(100)]);
        assert!(out.trim_end().ends_with("\nok"), "{page_size}: integrity_check failed");
        assert_prefetched(&format!("page size {page_size}"), &stats);
    }
}

/// A database whose page size changes under the shim (VACUUM after
/// `PRAGMA page_size`) reads back the same.
#[test]
fn a_page_size_changed_by_vacuum() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let queries = format!(
        "{}SELECT count(*), sum(length(v)) FROM t;\nPRAGMA integrity_check;\n",
        range_scans("t", "k", "id, k, hex(v)")
    );
    let db = build(dir.path(), "vacuum.db", &rowid_table(4096, ROWS));
    let script = format!("{queries}PRAGMA page_size = 1024;\nVACUUM;\nPRAGMA page_size;\n{queries}");
    // Each run changes the file: the second runs on a copy as it was.
    let copy = dir.path().join("vacuum-copy.db");
    std::fs::copy(&db, &copy).expect("copy db");
    drop_cache(&db);
    let baseline = run(&[path_str(&db)], &format!("-- .load\n-- .open\n{script}"));
    assert!(baseline.status.success() && baseline.stderr.is_empty(), "{}", String::from_utf8_lossy(&baseline.stderr));
    drop_cache(&copy);
    let with = run(&[":memory:"], &format!(".load {}\n.open {}\n{script}", extension().display(), copy.display()));
    assert_eq!(String::from_utf8_lossy(&with.stderr), "");
    assert!(with.stdout == baseline.stdout, "{}", first_difference(&baseline.stdout, &with.stdout));
    assert!(String::from_utf8_lossy(&with.stdout).contains("\n1024\n"), "the page size did not change");
}

#[test]
fn an_attached_database() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let main = build(dir.path(), "main.db", &rowid_table(4096, ROWS));
    let aux = build(
        dir.path(),
        "aux.db",
        &format!(
            "PRAGMA page_size = 8192;
             CREATE TABLE a(k TEXT PRIMARY KEY, extra BLOB) WITHOUT ROWID;
             {} INSERT INTO a SELECT printf('key%08d', i * 7919 % {ROWS}), randomblob(250) FROM c ORDER BY random();\n",
            rows(ROWS)
        ),
    );
    let script = format!(
        "ATTACH '{}' AS aux;
         {}SELECT t.id, t.k, hex(a.extra) FROM t JOIN aux.a a ON a.k = t.k WHERE t.k >= '{}' ORDER BY t.k LIMIT 2000;
         SELECT count(*) FROM aux.a WHERE k NOT IN (SELECT k FROM main.t);
         CREATE TABLE aux.copy AS SELECT id, k FROM main.t WHERE id % 3 = 0;
         SELECT count(*), sum(id) FROM aux.copy;
         DROP TABLE aux.copy;
         DETACH aux;\n",
        aux.display(),
        range_scans("aux.a", "k", "k, hex(extra)"),
        key(3_000),
    );
    let (out, stats) = compare(path_str(&main), &[&main, &aux], &script);
    assert!(out.lines().count() > 9_000, "{} lines", out.lines().count());
    assert_prefetched("ATTACH", &stats);
    // The attached file written and written back through the shim is sound.
    let check = run(&[path_str(&aux)], "SELECT count(*) FROM a;\nPRAGMA integrity_check;\n");
    assert_eq!(String::from_utf8_lossy(&check.stdout), format!("{ROWS}\nok\n"));
}

#[test]
fn temp_tables_and_temp_files() {
    if !have_sqlite3() {
        return;
    }
    let dir = disk_dir();
    let db = build(dir.path(), "temp.db", &rowid_table(4096, ROWS));
    // A small cache, so that the temp database and the sorters spill to
    // their temporary files (which pass through the shim unobserved): the
    // two ORDER BY v sorts write 25 and 1,196 pages to theirs. The first
    // query looks rows up through the index, reads from the device
    // scattered enough that the observer starts its runtime (a scan in
    // rowid order reads the file in order, which the kernel's readahead
    // serves from the cache).
    let script = format!(
        "PRAGMA temp_store = FILE;
         PRAGMA cache_size = 50;
         PRAGMA temp.cache_size = 50;
         SELECT count(*), sum(length(v)) FROM t WHERE k >= '{}' AND k < '{}';
         CREATE TEMP TABLE tt AS SELECT id, k, v FROM t WHERE id % 2 = 0;
         CREATE INDEX temp.tt_k ON tt(k);
         {}SELECT tt.id, t.id FROM tt JOIN t ON t.k = tt.k WHERE tt.k >= '{}' ORDER BY tt.k LIMIT 1000;
         SELECT id, length(v) FROM t ORDER BY v LIMIT 10 OFFSET 7000;
         SELECT count(*) FROM (SELECT id, hex(v) FROM t ORDER BY v);
         UPDATE tt SET v = randomblob(10) WHERE id % 4 = 0;
         SELECT count(*), sum(length(v)) FROM tt;
         DROP TABLE tt;
         SELECT count(*) FROM temp.sqlite_schema;\n",
        key(1_000),
        key(2_000),
        range_scans("tt", "k", "id, k, hex(v)"),
        key(1_000),
    );
    let (out, stats) = compare(path_str(&db), &[&db], &script);
    assert!(out.lines().count() > 5_000, "{} lines", out.lines().count());
    assert_followed("temp tables", &stats);
}

#[test]
fn an_in_memory_database() {
    if !have_sqlite3() {
        return;
    }
    let script = format!(
        "{}{}SELECT id, k FROM t ORDER BY id DESC LIMIT 100;
         ATTACH ':memory:' AS m2;
         CREATE TABLE m2.u AS SELECT id, k FROM t WHERE id % 5 = 0;
         SELECT count(*), min(k), max(k) FROM m2.u;
         SELECT t.id, hex(t.v) FROM t JOIN m2.u ON u.id = t.id ORDER BY t.k LIMIT 300;
         PRAGMA integrity_check;\n",
        // Built in each run: values and order that do not change between
        // runs, still scattered.
        rowid_table_of(4096, ROWS, "zeroblob(150) || CAST(i AS BLOB)", &format!("i * 104729 % {ROWS}")),
        range_scans("t", "k", "id, k, hex(v)"),
    );
    let (out, stats) = compare(":memory:", &[], &script);
    assert!(out.lines().count() > 7_000, "{} lines", out.lines().count());
    // Nothing read from a file: nothing observed.
    assert_eq!(counter(&stats, &["reads_observed"]), 0, "{stats}");
    assert_eq!(counter(&stats, &["events"]), 0, "{stats}");
}
