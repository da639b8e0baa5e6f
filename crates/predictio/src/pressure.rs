//! The memory-pressure guard: stop speculative prefetching before it evicts
//! pages someone is using.
//!
//! Two signals, read from procfs at most every [`PressureConfig::recheck`]:
//! PSI (`/proc/pressure/memory`, the share of time tasks stalled on memory in
//! the last 10 s) and `MemAvailable` from `/proc/meminfo`. Either over its
//! threshold means "under pressure": the executor then drops speculative
//! requests and counts them.

use std::io;
use std::time::{Duration, Instant};

/// A reading of the machine's memory state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MemoryState {
    /// PSI `some avg10` of `/proc/pressure/memory`, in percent (0 where PSI
    /// is unavailable).
    pub some_avg10: f64,
    /// `MemAvailable`, bytes.
    pub available: u64,
    /// `MemTotal`, bytes.
    pub total: u64,
}

impl MemoryState {
    /// Reads `/proc/pressure/memory` (optional: missing PSI reads as 0) and
    /// `/proc/meminfo`.
    pub fn read() -> io::Result<Self> {
        let meminfo = std::fs::read_to_string("/proc/meminfo")?;
        let psi = std::fs::read_to_string("/proc/pressure/memory").unwrap_or_default();
        Ok(Self::parse(&meminfo, &psi))
    }

    /// Parses the two procfs files' text.
    pub fn parse(meminfo: &str, psi: &str) -> Self {
        let kib = |key: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|line| line.strip_prefix(key))
                .and_then(|rest| rest.trim_start_matches(':').split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0)
                .saturating_mul(1024)
        };
        let some_avg10 = psi
            .lines()
            .find(|line| line.starts_with("some"))
            .and_then(|line| line.split_whitespace().find_map(|f| f.strip_prefix("avg10=")))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0);
        Self { some_avg10, available: kib("MemAvailable"), total: kib("MemTotal") }
    }
}

/// Thresholds of the guard.
#[derive(Clone, Debug, PartialEq)]
pub struct PressureConfig {
    /// Under pressure when PSI `some avg10` exceeds this (percent).
    pub max_some_avg10: f64,
    /// Under pressure when `MemAvailable` falls below this share of
    /// `MemTotal`…
    pub min_available_fraction: f64,
    /// …or below this many bytes, whichever is larger.
    pub min_available_bytes: u64,
    /// How often to re-read procfs.
    pub recheck: Duration,
}

impl Default for PressureConfig {
    fn default() -> Self {
        Self {
            max_some_avg10: 10.0,
            min_available_fraction: 0.05,
            min_available_bytes: 256 << 20,
            recheck: Duration::from_millis(100),
        }
    }
}

impl PressureConfig {
    /// Whether `state` counts as memory pressure.
    pub fn is_pressure(&self, state: &MemoryState) -> bool {
        let floor = ((state.total as f64 * self.min_available_fraction) as u64).max(self.min_available_bytes);
        state.some_avg10 > self.max_some_avg10 || (state.total > 0 && state.available < floor)
    }
}

/// A cached verdict over a memory-state source.
pub struct PressureGuard {
    config: PressureConfig,
    source: Box<dyn FnMut() -> io::Result<MemoryState> + Send>,
    checked: Option<Instant>,
    under: bool,
}

impl std::fmt::Debug for PressureGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PressureGuard").field("config", &self.config).field("under", &self.under).finish()
    }
}

impl PressureGuard {
    /// A guard over procfs.
    pub fn new(config: PressureConfig) -> Self {
        Self::with_source(config, MemoryState::read)
    }

    /// A guard over another source (tests).
    pub fn with_source(
        config: PressureConfig,
        source: impl FnMut() -> io::Result<MemoryState> + Send + 'static,
    ) -> Self {
        Self { config, source: Box::new(source), checked: None, under: false }
    }

    /// Whether the machine is under memory pressure now. An unreadable
    /// source counts as no pressure (and is retried at the next recheck).
    pub fn under_pressure(&mut self, now: Instant) -> bool {
        let stale = self.checked.is_none_or(|at| now.duration_since(at) >= self.config.recheck);
        if stale {
            self.checked = Some(now);
            self.under = match (self.source)() {
                Ok(state) => self.config.is_pressure(&state),
                Err(err) => {
                    tracing::debug!(%err, "memory state unreadable; assuming no pressure");
                    false
                }
            };
        }
        self.under
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:  1 kB\nMemAvailable:   20000000 kB\n";

    #[test]
    fn parses_procfs() {
        let psi = "some avg10=12.50 avg60=0.00 avg300=0.00 total=5\nfull avg10=1.00 avg60=0.00 avg300=0.00 total=0\n";
        let state = MemoryState::parse(MEMINFO, psi);
        assert_eq!(state.total, 24_000_000 * 1024);
        assert_eq!(state.available, 20_000_000 * 1024);
        assert!((state.some_avg10 - 12.5).abs() < 1e-9);
    }

    #[test]
    fn thresholds() {
        let cfg = PressureConfig::default();
        let calm = MemoryState { some_avg10: 0.0, available: 20 << 30, total: 24 << 30 };
        assert!(!cfg.is_pressure(&calm));
        assert!(cfg.is_pressure(&MemoryState { some_avg10: 50.0, ..calm }));
        assert!(cfg.is_pressure(&MemoryState { available: 100 << 20, ..calm }));
    }

    #[test]
    fn guard_caches_and_rechecks() {
        let mut calls = 0;
        let mut guard = PressureGuard::with_source(PressureConfig::default(), move || {
            calls += 1;
            Ok(MemoryState { some_avg10: if calls > 1 { 99.0 } else { 0.0 }, available: 1 << 40, total: 1 << 40 })
        });
        let t0 = Instant::now();
        assert!(!guard.under_pressure(t0));
        assert!(!guard.under_pressure(t0 + Duration::from_millis(10)), "cached within recheck");
        assert!(guard.under_pressure(t0 + Duration::from_millis(200)));
    }
}
