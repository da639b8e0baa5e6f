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
