//! Helpers for predictio's own tests across its crates: knowing whether the
//! test runs as root, and skipping a test that needs more than it has —
//! with a message outside CI, and as a failure under `CI=true`, where every
//! test must run for real.

/// Whether this process runs as root (real uid 0).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Skips a test for `reason`: prints it and returns true, or panics under
/// `CI=true`. Use as `if !is_root() && skip("needs root") { return; }`.
#[track_caller]
pub fn skip(reason: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("under CI=true this test must run, but: {reason}");
    }
    eprintln!("skipping: {reason}");
    true
}

/// Writes `text` to `dir/name` as an executable (mode 755) and returns its
/// path: a script for exec and launch tests.
pub fn executable_script(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("the script is written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("the script is made executable");
    path
}

/// A real SQLite database made by the `sqlite3` shell in `dir`: 5,000 rows
/// of 700 bytes inserted in a scattered order, so a root over a few interior
/// pages over ~1,000 leaves spread over the file. `None` when the shell is
/// missing or fails (callers skip).
pub fn scattered_sqlite_db(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let db = dir.join("t.db");
    let sql = "PRAGMA page_size=4096; CREATE TABLE t(id INTEGER PRIMARY KEY, v BLOB);\
               WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c WHERE i < 4999)\
               INSERT INTO t SELECT (i * 7919) % 5000, randomblob(700) FROM c;";
    let out = std::process::Command::new("sqlite3").arg(&db).arg(sql).output().ok()?;
    out.status.success().then_some(db)
}

/// xorshift64*: a small seeded generator for tests and fuzz loops, so that a
/// failure replays from its seed.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (`0` when `n` is 0), in `n`'s own integer type.
    pub fn below<N>(&mut self, n: N) -> N
    where
        N: Copy + Default + TryInto<u64> + TryFrom<u64>,
    {
        let m = n.try_into().unwrap_or(u64::MAX).max(1);
        N::try_from(self.next() % m).unwrap_or_default()
    }
}
