//! What the reader workloads (`seq-read`, `no-structure`) share: three sides
//! reading the same offsets — plain `pread`s, and [`PrefetchingReader`] with
//! the `stream` or the `learned` policy — interleaved in a balanced order,
//! cold before every pass, with the reader's statistics kept per side.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use predictio::policies::learned::LearnedConfig;
use predictio::reader::{PrefetchingReader, ReaderConfig, ReaderStats, Speculation};

use crate::harness::{BenchError, Harness, IoContext};

/// One side of a reader workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Plain `pread`s: the kernel's readahead alone.
    Baseline,
    /// The reader with the `stream` policy (the treatment).
    Stream,
    /// The reader with the `learned` policy.
    Learned,
}

/// Every side, in report order (baseline, treatment, peer).
pub const SIDES: [Side; 3] = [Side::Baseline, Side::Stream, Side::Learned];

impl Side {
    /// The side's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Side::Baseline => "baseline",
            Side::Stream => "stream",
            Side::Learned => "learned",
        }
    }
}

/// A file opened for one pass of a side: `pread`s go through the reader
/// when the side has one, else straight to the file.
pub struct PassFile {
    file: File,
    reader: Option<PrefetchingReader>,
}

impl PassFile {
    /// Opens `path` for `side`; the reader (if any) checks residency before
    /// each read when `check_residency` (hit accounting, at a cost per read).
    pub fn open(path: &Path, side: Side, check_residency: bool) -> Result<Self, BenchError> {
        let file = File::open(path).doing(|| format!("opening {}", path.display()))?;
        let speculation = match side {
            Side::Baseline => return Ok(Self { file, reader: None }),
            Side::Stream => ReaderConfig::default().speculation,
            Side::Learned => Speculation::Learned(LearnedConfig::default()),
        };
        let plain = file.try_clone().doing(|| "duplicating the descriptor".into())?;
        let config = ReaderConfig { speculation, check_residency, ..ReaderConfig::default() };
        let reader = PrefetchingReader::new(plain, config).map_err(reader_error)?;
        Ok(Self { file, reader: Some(reader) })
    }

    /// `pread` at `offset`; bytes read (0 at the end of the file).
    pub fn read_at(&mut self, buf: &mut [u8], offset: u64) -> Result<usize, BenchError> {
        match &mut self.reader {
            Some(r) => r.read_at(buf, offset).map_err(reader_error),
            None => self.file.read_at(buf, offset).doing(|| format!("reading at {offset}")),
        }
    }

    /// Reads exactly `buf.len()` bytes at `offset`.
    pub fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> Result<(), BenchError> {
        match &mut self.reader {
            Some(r) => r.read_exact_at(buf, offset).map_err(reader_error),
            None => self.file.read_exact_at(buf, offset).doing(|| format!("reading at {offset}")),
        }
    }

    /// Ends the pass: the reader's statistics, if the side has a reader.
    pub fn finish(self) -> Option<ReaderStats> {
        self.reader.map(PrefetchingReader::finish)
    }
}

fn reader_error(err: predictio::reader::ReaderError) -> BenchError {
    BenchError::Options(format!("prefetching reader: {err}"))
}

/// One timed pass.
pub struct Pass {
    /// Time of the reads.
    pub seconds: f64,
    /// Checksum of the bytes read (the same on every side).
    pub checksum: u64,
    /// The reader's statistics (reader sides only).
    pub reader: Option<ReaderStats>,
}

/// The passes of one case, per side (indexed like [`SIDES`]).
pub struct Runs {
    /// Seconds of each pass.
    pub secs: Vec<Vec<f64>>,
    /// Reader statistics of each pass.
    pub stats: Vec<Vec<ReaderStats>>,
    /// Every pass's checksum, in run order.
    pub sums: Vec<u64>,
    /// The largest resident fraction of `path` seen right before a pass.
    pub resident_before: f64,
    /// A warm pass (baseline, after one pass to fill the cache).
    pub warm: Pass,
}

/// Runs `pairs` interleaved rounds of every side (rotated each pair, `path`
/// made cold before each pass), then a warm baseline pass.
pub fn interleave(
    h: &Harness,
    path: &Path,
    name: &str,
    pairs: usize,
    mut pass: impl FnMut(Side) -> Result<Pass, BenchError>,
) -> Result<Runs, BenchError> {
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); SIDES.len()];
    let mut stats: Vec<Vec<ReaderStats>> = vec![Vec::new(); SIDES.len()];
    let mut sums = Vec::new();
    let mut resident_before: f64 = 0.0;
    for pair in 0..pairs {
        let resident = h.round(pair, SIDES.len(), &[path], |s| {
            let p = pass(SIDES[s])?;
            secs[s].push(p.seconds);
            sums.push(p.checksum);
            if let Some(r) = p.reader {
                stats[s].push(r);
            }
            h.step(format!("{name} pair {}/{pairs}: {}", pair + 1, SIDES[s].name()));
            Ok(())
        })?;
        resident_before = resident_before.max(resident);
    }
    pass(Side::Baseline)?;
    let warm = pass(Side::Baseline)?;
    h.step(format!("{name} warm"));
    Ok(Runs { secs, stats, sums, resident_before, warm })
}
