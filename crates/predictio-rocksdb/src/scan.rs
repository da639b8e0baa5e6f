//! Scans reported to predictio: the iterator wrapper and the map from key
//! ranges to SST file stretches.
//!
//! A scan is known by its start key, its bound (an upper bound going
//! forward, a lower bound going backward; none means "to the end") and its
//! direction. [`ScanReporter::plan`] turns that into the byte stretches of
//! the live SST files the scan reads if it runs to its bound, in the order
//! it reads them: the files whose key ranges overlap the scan, sorted by key,
//! each cut at the offsets RocksDB itself estimates for the start key and
//! the bound (`GetApproximateSizes`, which looks the keys up in each table's
//! index — held in memory, so no I/O). In a compacted database each key
//! range lives in one level and the offsets are those of the data blocks;
//! where levels overlap the estimate grows, which costs wasted prefetch,
//! never a wrong answer.
//!
//! [`HintedIter`] sends, before RocksDB reads anything, one
//! [`ScanStep::Segment`] per stretch and a [`ScanStep::Progress`] of 0; then,
//! as the scan goes, the bytes it has consumed (keys and values plus a
//! per-entry overhead — the data blocks are uncompressed) every
//! [`PROGRESS_BYTES`]; and [`ScanStep::End`] when it is dropped or
//! re-positioned. Sending never blocks (a full queue drops the event).

use std::sync::atomic::{AtomicU64, Ordering};

use predictio::FileRef;
use predictio::event::{Event, ScanStep};
use predictio::page::ByteRange;
use predictio::pipeline::EventSender;

use crate::RocksError;
use crate::db::{Db, DbIter, SstFile};

/// Bytes consumed between two progress reports.
pub const PROGRESS_BYTES: u64 = 64 << 10;

/// Bytes a key-value entry takes in a data block beyond its key and value
/// (the internal key's 8-byte sequence/type trailer and the entry's length
/// varints).
pub const ENTRY_OVERHEAD: u64 = 11;

/// A table file the reporter can name to predictio.
#[derive(Clone)]
struct Table {
    sst: SstFile,
    file: FileRef,
    /// Data bytes per file byte of its level: RocksDB scales its size
    /// estimates from data-block offsets up to whole-file bytes (index and
    /// meta blocks included); this scales them back to data offsets.
    data_share: f64,
}

/// `data block size=N` of a level's aggregated table properties, over the
/// bytes of that level's files: the share of file bytes that are data
/// blocks (1 where RocksDB does not say).
fn data_share(db: &Db, level: i32, files: &[SstFile]) -> f64 {
    let total: u64 = files.iter().filter(|f| f.level == level).map(|f| f.size).sum();
    let data = db.property(&format!("rocksdb.aggregated-table-properties-at-level{level}")).and_then(|p| {
        p.split("; ").find_map(|kv| kv.strip_prefix("data block size=")).and_then(|n| n.trim().parse::<u64>().ok())
    });
    match data {
        Some(data) if total > 0 && data > 0 && data <= total => data as f64 / total as f64,
        _ => 1.0,
    }
}

/// The live SST files of a database and where scans report to.
pub struct ScanReporter {
    tables: Vec<Table>,
    sender: EventSender,
    next_scan: AtomicU64,
    block_size: u64,
}

impl std::fmt::Debug for ScanReporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanReporter").field("tables", &self.tables.len()).finish_non_exhaustive()
    }
}

/// Which way a scan goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Ascending keys, from the start key up to the upper bound.
    Forward,
    /// Descending keys, from the start key down to the lower bound.
    Backward,
}

/// One stretch of a scan's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedSegment {
    /// The SST file.
    pub path: std::path::PathBuf,
    /// Its bytes the scan reads.
    pub range: ByteRange,
}

impl ScanReporter {
    /// A reporter for `db`'s live SST files (a snapshot: call again after
    /// the database compacts), sending to `sender`. Holds a read-only
    /// descriptor of each file, which is what lets predictio prefetch it.
    pub fn new(db: &Db, sender: EventSender) -> Result<Self, RocksError> {
        let live = db.live_files();
        let mut tables = Vec::new();
        for sst in &live {
            let file = FileRef::open(&sst.path)?;
            tables.push(Table { sst: sst.clone(), file, data_share: data_share(db, sst.level, &live) });
        }
        tables.sort_by(|a, b| a.sst.smallest.cmp(&b.sst.smallest));
        Ok(Self { tables, sender, next_scan: AtomicU64::new(1), block_size: db.options().block_size })
    }

    /// Number of SST files known.
    pub fn tables(&self) -> usize {
        self.tables.len()
    }

    /// The stretches a scan from `start` to `bound` reads, in scan order,
    /// as indices into the tables and byte ranges.
    fn plan_indices(
        &self,
        db: &Db,
        start: &[u8],
        bound: Option<&[u8]>,
        direction: Direction,
    ) -> Result<Vec<(usize, ByteRange)>, RocksError> {
        // The block holding a bound key may hold keys the scan reads.
        let slack = self.block_size;
        let mut picked: Vec<usize> = (0..self.tables.len())
            .filter(|&i| {
                let t = &self.tables[i].sst;
                match direction {
                    Direction::Forward => {
                        t.largest.as_slice() >= start && bound.is_none_or(|u| t.smallest.as_slice() < u)
                    }
                    Direction::Backward => {
                        t.smallest.as_slice() <= start && bound.is_none_or(|l| t.largest.as_slice() >= l)
                    }
                }
            })
            .collect();
        if direction == Direction::Backward {
            picked.reverse();
        }
        // Per file: the offset of the near end and of the far end, each
        // from one approximate-size query [smallest, key).
        let mut queries: Vec<(&[u8], &[u8])> = Vec::with_capacity(picked.len() * 2);
        for &i in &picked {
            let t = &self.tables[i].sst;
            let (low_key, high_key) = match direction {
                Direction::Forward => (start.max(t.smallest.as_slice()), bound.unwrap_or(&t.largest).min(&t.largest)),
                Direction::Backward => (bound.unwrap_or(&t.smallest).max(&t.smallest), start.min(t.largest.as_slice())),
            };
            queries.push((&t.smallest, low_key));
            queries.push((&t.smallest, high_key));
        }
        let sizes = db.approximate_sizes(&queries)?;
        let mut out = Vec::with_capacity(picked.len());
        for (n, &i) in picked.iter().enumerate() {
            let table = &self.tables[i];
            let size = table.sst.size;
            let data_offset = |estimate: u64| (estimate as f64 * table.data_share) as u64;
            let begin = data_offset(sizes[2 * n]).min(size);
            let end = (data_offset(sizes[2 * n + 1]) + slack).min(size);
            if end > begin {
                out.push((i, ByteRange::new(begin, end - begin)));
            }
        }
        Ok(out)
    }

    /// The stretches of SST files a scan from `start` to `bound` reads if
    /// it runs to its bound, in scan order.
    pub fn plan(
        &self,
        db: &Db,
        start: &[u8],
        bound: Option<&[u8]>,
        direction: Direction,
    ) -> Result<Vec<PlannedSegment>, RocksError> {
        Ok(self
            .plan_indices(db, start, bound, direction)?
            .into_iter()
            .map(|(i, range)| PlannedSegment { path: self.tables[i].sst.path.clone(), range })
            .collect())
    }

    fn send(&self, scan: u64, step: ScanStep, file: Option<FileRef>) {
        // A full queue drops the event and counts it; the scan goes on.
        let _sent = self.sender.send(Event::Scan { scan, step }, file);
    }

    fn start(&self, db: &Db, start: &[u8], bound: Option<&[u8]>, direction: Direction) -> Result<u64, RocksError> {
        let scan = self.next_scan.fetch_add(1, Ordering::Relaxed);
        let backward = direction == Direction::Backward;
        for (i, range) in self.plan_indices(db, start, bound, direction)? {
            let file = &self.tables[i].file;
            self.send(scan, ScanStep::Segment { file: file.id(), range, backward }, Some(file.clone()));
        }
        self.send(scan, ScanStep::Progress { consumed: 0 }, None);
        Ok(scan)
    }
}

/// An iterator over one scan at a time that tells predictio where the scan
/// goes (see the module documentation). Without a reporter it is the plain
/// RocksDB iterator.
pub struct HintedIter<'a> {
    db: &'a Db,
    iter: DbIter<'a>,
    reporter: Option<&'a ScanReporter>,
    lower: Option<Vec<u8>>,
    upper: Option<Vec<u8>>,
    scan: Option<u64>,
    consumed: u64,
    reported: u64,
}

impl<'a> HintedIter<'a> {
    /// An iterator of `db` bounded to `[lower, upper)` where given,
    /// reporting to `reporter` when there is one.
    pub fn new(db: &'a Db, lower: Option<&[u8]>, upper: Option<&[u8]>, reporter: Option<&'a ScanReporter>) -> Self {
        Self {
            db,
            iter: db.iter(lower, upper),
            reporter,
            lower: lower.map(<[u8]>::to_vec),
            upper: upper.map(<[u8]>::to_vec),
            scan: None,
            consumed: 0,
            reported: 0,
        }
    }

    fn begin(&mut self, start: &[u8], direction: Direction) -> Result<(), RocksError> {
        self.end();
        if let Some(reporter) = self.reporter {
            let bound = match direction {
                Direction::Forward => self.upper.as_deref(),
                Direction::Backward => self.lower.as_deref(),
            };
            self.scan = Some(reporter.start(self.db, start, bound, direction)?);
        }
        Ok(())
    }

    /// Starts a forward scan at the first key `>= key`.
    pub fn seek(&mut self, key: &[u8]) -> Result<(), RocksError> {
        self.begin(key, Direction::Forward)?;
        self.iter.seek(key);
        self.count();
        self.iter.status()
    }

    /// Starts a backward scan at the last key `<= key`.
    pub fn seek_for_prev(&mut self, key: &[u8]) -> Result<(), RocksError> {
        self.begin(key, Direction::Backward)?;
        self.iter.seek_for_prev(key);
        self.count();
        self.iter.status()
    }

    /// Moves forward.
    #[expect(
        clippy::should_implement_trait,
        reason = "a cursor, like RocksDB's: next() moves it and key()/value() borrow the entry in place"
    )]
    pub fn next(&mut self) -> Result<(), RocksError> {
        self.iter.next();
        self.count();
        self.iter.status()
    }

    /// Moves backward.
    pub fn prev(&mut self) -> Result<(), RocksError> {
        self.iter.prev();
        self.count();
        self.iter.status()
    }

    /// Whether the iterator is at an entry.
    pub fn valid(&self) -> bool {
        self.iter.valid()
    }

    /// The current key.
    pub fn key(&self) -> &[u8] {
        self.iter.key()
    }

    /// The current value.
    pub fn value(&self) -> &[u8] {
        self.iter.value()
    }

    fn count(&mut self) {
        let (Some(scan), Some(reporter)) = (self.scan, self.reporter) else { return };
        if !self.iter.valid() {
            return;
        }
        self.consumed += (self.iter.key().len() + self.iter.value().len()) as u64 + ENTRY_OVERHEAD;
        if self.consumed - self.reported >= PROGRESS_BYTES {
            self.reported = self.consumed;
            reporter.send(scan, ScanStep::Progress { consumed: self.consumed }, None);
        }
    }

    fn end(&mut self) {
        if let (Some(scan), Some(reporter)) = (self.scan.take(), self.reporter) {
            reporter.send(scan, ScanStep::End, None);
        }
        self.consumed = 0;
        self.reported = 0;
    }
}

impl Drop for HintedIter<'_> {
    fn drop(&mut self) {
        self.end();
    }
}
