//! Reading model headers for an event path: from the page cache only,
//! within a byte budget, the rest handed to one bounded background reader.
//!
//! The dispatcher recognises model files among the files it comes to hold
//! and turns their headers into `TensorLayout` events. A header can be tens
//! of MiB (a safetensors JSON up to [`MAX_HEADER_BYTES`]), and a read that
//! waits for storage would stall every event behind it. So
//! [`HeaderReader::read`] copies only bytes the page cache holds
//! ([`ModelLayout::read_resident`]: `cachestat`, then
//! `preadv2(RWF_NOWAIT)`), at most [`EVENT_PATH_BYTES_PER_SEC`] a second
//! in all; a header not cached yet, or past that budget, goes to a
//! background thread ([`BACKGROUND_QUEUE`] files waiting at most, one read
//! at a time, at most [`BACKGROUND_BYTES_PER_MIN`] read a minute; past
//! either bound it is skipped, counted), whose layouts the dispatcher
//! collects with [`HeaderReader::finished`]. The background thread reads
//! with ordinary reads: what a loader reads of its own header anyway.

use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{LoadOrder, MAX_HEADER_BYTES, ModelError, ModelFormat, ModelLayout};
use crate::event::Event;
use crate::file::{FileId, FileRef};
use crate::page::ByteRange;

/// Header bytes the event path copies from the page cache a second, at
/// most (a 64 MiB header is ~10 ms of copying; a user who writes many
/// fake headers must not turn the dispatcher into a memcpy loop).
pub const EVENT_PATH_BYTES_PER_SEC: u64 = 32 << 20;

/// Files waiting for the background reader, at most.
pub const BACKGROUND_QUEUE: usize = 4;

/// Header bytes the background reader reads a minute, at most.
pub const BACKGROUND_BYTES_PER_MIN: u64 = 256 << 20;

/// Counters of a [`HeaderReader`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeaderStats {
    /// Headers (and Parquet footers) parsed from the page cache on the
    /// event path.
    pub cached: u64,
    /// Headers handed to the background reader.
    pub deferred: u64,
    /// Headers left unread: the background queue full, or its byte budget
    /// spent; Parquet footers over the event path's budget.
    pub skipped: u64,
    /// Headers that did not parse (not a model after all, malformed).
    pub failed: u64,
}

/// What the background reader hands back: a file and its layout.
type Done = (FileId, Result<ModelLayout, ModelError>);

/// The background reader, as its user holds it. Dropped, its queue and its
/// answers close, and its thread ends after the read in progress (not
/// waited for: a read may wait on storage).
struct Background {
    jobs: Option<SyncSender<FileRef>>,
    done: Receiver<Done>,
    _thread: Option<JoinHandle<()>>,
}

/// What [`HeaderReader::read`] found.
#[derive(Debug)]
pub enum Header {
    /// A model, its header parsed from the page cache.
    Layout(ModelLayout),
    /// Its first bytes, cached, are no model's.
    NotAModel,
    /// Not known now: its first bytes are not cached, its header went to
    /// the background reader, or could not be parsed.
    Unknown,
}

/// What [`HeaderReader::read_parquet`] found.
#[derive(Debug)]
pub enum Tail {
    /// A Parquet file, its footer parsed from the page cache.
    Parquet(crate::parquet::ParquetLayout),
    /// Its last bytes, cached, are no Parquet file's.
    NotParquet,
    /// It ends like a Parquet file, but its footer is not all cached yet
    /// (its reader is reading it now).
    NotYet,
    /// Not known now: its last bytes are not cached, its footer is not (or
    /// is over the event path's budget), or it could not be parsed.
    Unknown,
}

/// Reads model headers for the dispatcher (see the module docs).
pub struct HeaderReader {
    /// The event path's budget: since when, and bytes copied since then.
    window: (Instant, u64),
    background: Option<Background>,
    stats: HeaderStats,
}

impl Default for HeaderReader {
    fn default() -> Self {
        Self { window: (Instant::now(), 0), background: None, stats: HeaderStats::default() }
    }
}

impl std::fmt::Debug for HeaderReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeaderReader").field("stats", &self.stats).finish_non_exhaustive()
    }
}

impl HeaderReader {
    /// The counters.
    pub fn stats(&self) -> HeaderStats {
        self.stats
    }

    /// What `file` is: its layout ([`Header::Layout`]) if its first bytes
    /// are a model's and its whole header is in the page cache (within the
    /// event path's budget); [`Header::NotAModel`] if its first bytes, cached,
    /// are no model's. A model whose header is not cached (or is over
    /// budget) is handed to the background reader — its layout comes from
    /// [`HeaderReader::finished`] later — or skipped, counted. Never waits on
    /// storage; the first call that defers starts the background thread,
    /// which wakes the calling thread when it has a layout.
    pub fn read(&mut self, file: &FileRef, now: Instant) -> Header {
        use std::os::fd::AsFd;
        let mut first = [0u8; 16];
        let len = file.file().metadata().map_or(0, |m| m.len()).min(first.len() as u64) as usize;
        match crate::sys::pread_resident(file.as_fd(), &mut first[..len], 0) {
            Ok(Some(n)) if n == len => {
                if super::detect(&first[..n]).is_none() {
                    return Header::NotAModel;
                }
            }
            // Not even the first bytes cached: nothing says what it is.
            _ => return Header::Unknown,
        };
        let left = self.event_path_left(now);
        match ModelLayout::read_resident(file.file(), left) {
            Ok((layout, bytes)) => {
                self.window.1 += bytes;
                self.stats.cached += 1;
                Header::Layout(layout)
            }
            Err(ModelError::NotResident { .. } | ModelError::OverBudget { .. }) => {
                self.defer(file);
                Header::Unknown
            }
            Err(err) => {
                self.stats.failed += 1;
                tracing::debug!(file = %file.id(), %err, "model header not parsed");
                Header::Unknown
            }
        }
    }

    /// What `file` is at its end: a Parquet file whose footer the page
    /// cache holds ([`Tail::Parquet`], within the event path's budget, which
    /// it shares with [`HeaderReader::read`]), or [`Tail::NotParquet`] when
    /// its last bytes, cached, say it is none. Never waits on storage and
    /// never reads in the background: a Parquet reader reads the footer
    /// before anything else, so by the time its accesses are seen the
    /// footer is cached or the reader is not reading it.
    pub fn read_parquet(&mut self, file: &FileRef, now: Instant) -> Tail {
        use std::os::fd::AsFd;
        let len = file.file().metadata().map_or(0, |m| m.len());
        let mut last = [0u8; 4];
        if len < 12 {
            return Tail::NotParquet;
        }
        match crate::sys::pread_resident(file.as_fd(), &mut last, len - 4) {
            Ok(Some(4)) if crate::parquet::ends_like_parquet(&last) => {}
            Ok(Some(4)) => return Tail::NotParquet,
            _ => return Tail::Unknown,
        }
        let left = self.event_path_left(now);
        match crate::parquet::ParquetLayout::read_resident(file.file(), left) {
            Ok((layout, bytes)) => {
                self.window.1 += bytes;
                self.stats.cached += 1;
                Tail::Parquet(layout)
            }
            Err(crate::parquet::ParquetError::NotResident) => Tail::NotYet,
            Err(crate::parquet::ParquetError::OverBudget { .. }) => {
                self.stats.skipped += 1;
                Tail::Unknown
            }
            Err(err) => {
                self.stats.failed += 1;
                tracing::debug!(file = %file.id(), %err, "Parquet footer not parsed");
                Tail::Unknown
            }
        }
    }

    /// Bytes the event path may still copy this second ([`EVENT_PATH_BYTES_PER_SEC`]).
    fn event_path_left(&mut self, now: Instant) -> u64 {
        if now.duration_since(self.window.0) >= Duration::from_secs(1) {
            self.window = (now, 0);
        }
        EVENT_PATH_BYTES_PER_SEC.saturating_sub(self.window.1)
    }

    /// Hands `file` to the background reader, or skips it.
    fn defer(&mut self, file: &FileRef) {
        let background = self.background.get_or_insert_with(start_background);
        let sent = match background.jobs.as_ref().map(|jobs| jobs.try_send(file.clone())) {
            Some(Ok(())) => true,
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => false,
        };
        if sent {
            self.stats.deferred += 1;
        } else {
            self.stats.skipped += 1;
        }
    }

    /// The layouts the background reader finished since the last call.
    pub fn finished(&mut self) -> Vec<(FileId, ModelLayout)> {
        let Some(background) = self.background.as_ref() else { return Vec::new() };
        let mut out = Vec::new();
        loop {
            match background.done.try_recv() {
                Ok((file, Ok(layout))) => out.push((file, layout)),
                Ok((file, Err(ModelError::OverBudget { .. }))) => {
                    self.stats.skipped += 1;
                    tracing::debug!(%file, "model header skipped: the background reader's budget is spent");
                }
                Ok((file, Err(err))) => {
                    self.stats.failed += 1;
                    tracing::debug!(%file, %err, "model header not parsed");
                }
                Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
            }
        }
        out
    }
}

/// Starts the background reader; it wakes the thread that started it (the
/// dispatcher) after each header.
fn start_background() -> Background {
    let (jobs, queue) = std::sync::mpsc::sync_channel::<FileRef>(BACKGROUND_QUEUE);
    let (done_tx, done) = std::sync::mpsc::sync_channel::<Done>(BACKGROUND_QUEUE);
    let caller = std::thread::current();
    let thread = std::thread::Builder::new().name("predictio-model".into()).spawn(move || {
        let mut window = (Instant::now(), 0u64);
        while let Ok(file) = queue.recv() {
            let now = Instant::now();
            if now.duration_since(window.0) >= Duration::from_secs(60) {
                window = (now, 0);
            }
            let left = BACKGROUND_BYTES_PER_MIN.saturating_sub(window.1).min(MAX_HEADER_BYTES);
            // What the read may cost is charged before it: a header that
            // fails still read its bytes.
            let bytes = file.file().metadata().map_or(0, |m| m.len()).min(MAX_HEADER_BYTES);
            let layout = if bytes > left {
                Err(ModelError::OverBudget { limit: left })
            } else {
                window.1 += bytes;
                ModelLayout::read(file.file())
            };
            if done_tx.send((file.id(), layout)).is_err() {
                break;
            }
            caller.unpark();
        }
    });
    match thread {
        Ok(thread) => Background { jobs: Some(jobs), done, _thread: Some(thread) },
        Err(err) => {
            tracing::warn!(%err, "cannot start the model header reader; uncached headers are skipped");
            Background { jobs: None, done, _thread: None }
        }
    }
}

/// The `TensorLayout` event of model `file` with `layout`: its tensors'
/// byte ranges in the order its loader reads them. GGUF is llama.cpp's
/// format: with or without mmap it walks tensors in the order it creates
/// them (embeddings, output, then layers; `--no-mmap` reads them, mmap
/// copies the repacked ones), and the first token's compute then follows
/// layers in that same order.
pub fn layout_event(file: FileId, layout: &ModelLayout) -> Event {
    let order = match layout.format {
        ModelFormat::Gguf { .. } => LoadOrder::LlamaCppRead,
        _ => LoadOrder::Compute,
    };
    let ranges: Vec<ByteRange> = layout.plan(order).iter().map(|r| ByteRange::new(r.offset, r.len)).collect();
    Event::TensorLayout { file, ranges: ranges.into() }
}

/// The `ColumnLayout` event of Parquet file `file` with `layout`.
pub fn column_event(file: FileId, layout: crate::parquet::ParquetLayout) -> Event {
    Event::ColumnLayout { file, file_len: layout.file_len, chunks: layout.chunks.into() }
}
