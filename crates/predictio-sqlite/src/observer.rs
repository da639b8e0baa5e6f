//! The safe half of the adapter: page reads of one database file in,
//! `TreeChildEnter` events to an embedded runtime out.
//!
//! ```text
//!  xRead(offset, len), before the real read ─ DbObserver::before_read ─ Traversal (page number only) ─ TreeChildEnter ─ Prefetcher
//!  xRead(offset, bytes, time), after it ─ DbObserver::on_timed_read ─ WarmGate (stand aside on a warm cache)
//!                                         └ DbObserver::on_read ─ Header::parse (offset 0)
//!                                                               └ parse_page ─ Traversal::learn (interior pages; unchanged re-reads not parsed)
//!                                                                              (or, when not announced, Traversal ─ TreeChildEnter ─ Prefetcher)
//!  Prefetcher = Runtime + Executor (ExecutorConfig::embedded), btree policy; in the extension one per
//!               process, started at the first read from the device (DbObserver::lazy): a cached database never starts it
//! ```
//!
//! Reporting the descent before the read lets the prefetch of the pages
//! after it overlap that page's own I/O.
//!
//! Everything here only *looks* at bytes SQLite already received; nothing is
//! written back, and any page that does not parse is passed over.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use predictio::btree::rowid::{RowidConfig, RowidLookahead};
use predictio::btree::sqlite::{self, Geometry};
use predictio::btree::{DbPageLayout, Traversal};
use predictio::embedded::Embedded;
use predictio::executor::ExecutorError;
use predictio::file::{FileError, FileId};
use predictio::policies::btree::{BtreeConfig, BtreePolicy};
use predictio::policies::hints::HintPolicy;
use predictio::runtime::RuntimeStats;
use predictio::{Event, Executor, ExecutorConfig, FileRef};

/// Interior pages a [`Traversal`] remembers per file: the depth of a deep
/// tree plus a few concurrent cursors.
const TRAVERSAL_CAPACITY: usize = 32;

/// The `btree` policy's settings in the extension: the policy's defaults
/// (a point lookup requests nothing; a confirmed scan's window doubles, 2,
/// 4, … 64 children), the same as the daemon's, so that the adapter and the
/// no-change mode differ only in how they see the traversal.
/// `PREDICTIO_BTREE_GROWTH`, `PREDICTIO_BTREE_MAX_WINDOW`,
/// `PREDICTIO_BTREE_HISTORY`, `PREDICTIO_BTREE_CONFIRM`,
/// `PREDICTIO_BTREE_UPPER_PAGES`, `PREDICTIO_BTREE_UPPER_PAYBACK` and
/// `PREDICTIO_BTREE_TOP_UP` override the growth factor, the largest window,
/// the scans remembered to size a first window, the continuations before a
/// window opens, the budget of whole upper levels, the lookups that pay for
/// one and the share of the window used before it is topped up (for
/// experiments: on a device whose parallelism is small, faster growth mostly
/// adds waste).
pub fn scan_config() -> BtreeConfig {
    let defaults = BtreeConfig::default();
    let env = |name: &str, default: u32| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    BtreeConfig {
        growth_factor: env("PREDICTIO_BTREE_GROWTH", defaults.growth_factor),
        max_window: env("PREDICTIO_BTREE_MAX_WINDOW", defaults.max_window),
        history: env("PREDICTIO_BTREE_HISTORY", defaults.history as u32) as usize,
        confirm_after: env("PREDICTIO_BTREE_CONFIRM", defaults.confirm_after),
        upper_pages: env("PREDICTIO_BTREE_UPPER_PAGES", defaults.upper_pages),
        upper_payback: env("PREDICTIO_BTREE_UPPER_PAYBACK", defaults.upper_payback),
        top_up_divisor: env("PREDICTIO_BTREE_TOP_UP", defaults.top_up_divisor),
        ..defaults
    }
}

/// Whether the rowid lookups of index scans are predicted
/// ([`RowidLookahead`]): yes, unless `PREDICTIO_SQLITE_ROWIDS=0` (for
/// experiments).
fn rowid_lookahead() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("PREDICTIO_SQLITE_ROWIDS").map_or(true, |v| v != "0"))
}

/// How far ahead of an index scan its rowid lookups are predicted: the
/// defaults of [`RowidConfig`]; `PREDICTIO_SQLITE_ROWID_CONFIRM`,
/// `PREDICTIO_SQLITE_ROWID_WINDOW` and `PREDICTIO_SQLITE_ROWID_MAX_WINDOW`
/// override them (for experiments).
pub fn rowid_config() -> RowidConfig {
    let defaults = RowidConfig::default();
    let env = |name: &str, default: usize| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    RowidConfig {
        confirm: env("PREDICTIO_SQLITE_ROWID_CONFIRM", defaults.confirm as usize) as u32,
        first_window: env("PREDICTIO_SQLITE_ROWID_WINDOW", defaults.first_window),
        max_window: env("PREDICTIO_SQLITE_ROWID_MAX_WINDOW", defaults.max_window),
    }
}

/// The executor's settings in the extension: [`ExecutorConfig::embedded`];
/// `PREDICTIO_SQLITE_BACKEND` (fadvise, readahead, uring, madvise) picks the
/// backend.
pub fn executor_config() -> ExecutorConfig {
    let backend = std::env::var("PREDICTIO_SQLITE_BACKEND").ok().and_then(|b| b.parse().ok());
    ExecutorConfig { backend: backend.unwrap_or_default(), ..ExecutorConfig::embedded() }
}

/// Why the embedded runtime could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The executor did not start.
    #[error("starting the prefetch executor: {0}")]
    Executor(#[from] ExecutorError),
    /// The database file could not be opened for prefetching.
    #[error("opening the database for prefetch: {0}")]
    File(#[from] FileError),
    /// An earlier attempt to start the runtime failed; it is not retried.
    #[error("the embedded runtime failed to start earlier")]
    Unavailable,
}

/// Counters of the embedded runtime: the runtime's and the executor's.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PrefetchStats {
    /// `TreeChildEnter` events dispatched.
    pub events: u64,
    /// Requests the policy produced.
    pub requests: u64,
    /// Requests the executor refused.
    pub refused: u64,
    /// Page reads observed (parsed, placed, told to the policy).
    pub reads_observed: u64,
    /// Page reads only timed: the file's reads were coming from the page
    /// cache with nothing to prefetch (see `DbObserver::on_timed_read`).
    pub reads_unobserved: u64,
    /// Times an observer stood aside after a run of cached reads.
    pub warm_spells: u64,
    /// The executor's totals (requested, issued, skipped pages, …).
    pub executor: predictio::accounting::Counters,
}

/// The embedded runtime: one `btree` policy and one executor per process
/// (a [`predictio::embedded::Embedded`] with the extension's settings).
#[derive(Debug)]
pub struct Prefetcher {
    embedded: Embedded,
    reads_observed: AtomicU64,
    reads_unobserved: AtomicU64,
    warm_spells: AtomicU64,
}

static GLOBAL: OnceLock<Result<Prefetcher, String>> = OnceLock::new();

impl Prefetcher {
    /// A runtime of its own (tests; most users want [`Prefetcher::global`]).
    pub fn new(config: ExecutorConfig) -> Result<Self, Error> {
        // The btree policy follows the descents; the hint policy passes on
        // the table leaves of the rowids an index scan reaches next
        // ([`RowidLookahead`]), which the observer finds itself.
        let embedded =
            Embedded::new(config, vec![Box::new(BtreePolicy::new(scan_config())), Box::new(HintPolicy::default())])?;
        Ok(Self {
            embedded,
            reads_observed: AtomicU64::new(0),
            reads_unobserved: AtomicU64::new(0),
            warm_spells: AtomicU64::new(0),
        })
    }

    /// The process's runtime, started on first use with the default
    /// executor settings (in the extension: at the first read of a database
    /// that came from the device, see [`DbObserver::lazy`], or at the first
    /// `predictio_stats()`). Starting it starts no thread (the executor's
    /// worker starts with the first request it has to queue).
    pub fn global() -> Result<&'static Prefetcher, Error> {
        GLOBAL
            .get_or_init(|| {
                // The cache is cold: bring the rest of our own code in now,
                // not page by page inside the queries to come.
                #[cfg(feature = "extension")]
                warm_own_code(warm_own_code as *const () as usize);
                Prefetcher::new(executor_config()).map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(|err| {
                tracing::warn!(%err, "predictio-sqlite: no prefetching");
                Error::Unavailable
            })
    }

    /// Whether the process's runtime ([`Self::global`]) has been started.
    pub fn global_started() -> bool {
        GLOBAL.get().is_some()
    }

    /// Starts the process's runtime ([`Self::global`]) on a thread of its
    /// own, once, and returns at once: setting it up (the executor reads
    /// the mounts and the cgroup's memory, probes `cachestat`, allocates its
    /// queues; our own code is brought in) takes a cold process a
    /// millisecond or two, which a query would otherwise wait for. Without
    /// a thread it is started here.
    fn start_in_background() {
        static STARTING: AtomicBool = AtomicBool::new(false);
        if GLOBAL.get().is_some() || STARTING.swap(true, Ordering::AcqRel) {
            return;
        }
        let spawned = std::thread::Builder::new().name("predictio-start".into()).spawn(|| {
            let _ = Prefetcher::global();
        });
        if spawned.is_err() {
            let _ = Prefetcher::global();
        }
    }

    /// Holds `file` so that the policy may prefetch it.
    pub fn hold(&self, file: FileRef) {
        self.embedded.hold(file);
    }

    /// Dispatches one event (non-blocking: requests are queued).
    pub fn dispatch(&self, event: &Event) {
        self.embedded.dispatch(event);
    }

    /// The executor.
    pub fn executor(&self) -> &Arc<Executor> {
        self.embedded.executor()
    }

    /// Current counters.
    pub fn stats(&self) -> PrefetchStats {
        let RuntimeStats { events, requests, refused, .. } = self.embedded.stats();
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        PrefetchStats {
            events,
            requests,
            refused,
            reads_observed: load(&self.reads_observed),
            reads_unobserved: load(&self.reads_unobserved),
            warm_spells: load(&self.warm_spells),
            executor: self.executor().stats().total,
        }
    }
}

/// A read of one page that took longer than this came from the device, not
/// the page cache (a cached 4 KiB `pread` takes 1–3 µs here, a device read
/// 70 µs or more; a cached read preempted can take longer, hence
/// [`SLOW_READS_APART`]).
const SLOW_READ: Duration = Duration::from_micros(40);

/// Bytes of interior pages a lazy observer keeps, unparsed, until its
/// runtime starts ([`DbObserver::lazy`]); past them it parses as it reads.
const STASH_BYTES: usize = 1 << 20;

/// Reads in a row that came from the page cache, with no request of the
/// policy queued meanwhile, after which the observer stands aside.
const WARM_AFTER_READS: u32 = 256;

/// Two slow reads at most this many reads apart are the device's; a slow
/// read farther from any other is taken for a cached read that was
/// preempted or faulted (about one read in a thousand on this VM, more in a
/// process's first queries) and changes nothing.
const SLOW_READS_APART: u32 = 32;

/// Whether the file's reads are being served by the page cache on their
/// own, so that observing them would only cost time.
///
/// On a warm cache the adapter cannot help, and watching every read
/// (parsing interior pages, running the policy, screening its requests)
/// made SQLite's cached lookups 40–80 % slower (python3's `sqlite3`, 1 M
/// rows: a point read 6 → 9 µs). So after [`WARM_AFTER_READS`] reads in a
/// row with no two slow ones close together ([`SLOW_READ`],
/// [`SLOW_READS_APART`]) while the executor queued nothing (every request
/// the policy made was found cached already, or it made none) the observer
/// stands aside: it only times reads. Two slow reads close together put it
/// back, and from the second on it watches again. Prefetched reads are
/// fast too, but then the executor queued work, so a scan being prefetched
/// never looks warm.
#[derive(Debug)]
struct WarmGate {
    warm: bool,
    /// Reads in the current run (watching).
    run: u32,
    /// Reads since the last slow one.
    since_slow: u32,
    queued_at: u64,
}

impl Default for WarmGate {
    fn default() -> Self {
        Self { warm: false, run: 0, since_slow: u32::MAX, queued_at: 0 }
    }
}

impl WarmGate {
    /// Takes one read's time and the executor's count of queued requests;
    /// returns whether the read should be observed.
    fn after_read(&mut self, elapsed: Duration, queued: u64) -> bool {
        let device = if elapsed > SLOW_READ {
            let close = self.since_slow < SLOW_READS_APART;
            self.since_slow = 0;
            close
        } else {
            self.since_slow = self.since_slow.saturating_add(1);
            false
        };
        if self.warm {
            if device {
                *self = Self { queued_at: queued, since_slow: 0, ..Self::default() };
                return true;
            }
            return false;
        }
        if device || queued != self.queued_at {
            self.run = 0;
            self.queued_at = queued;
            return true;
        }
        self.run += 1;
        if self.run >= WARM_AFTER_READS {
            self.warm = true;
            self.run = 0;
        }
        true
    }
}

/// What is known of the file once its header parsed.
#[derive(Debug)]
struct Known {
    geometry: Geometry,
    /// The identity the traversal's events name.
    id: FileId,
    traversal: Traversal,
    /// The rowid lookups of index scans, followed and predicted.
    rowids: RowidLookahead,
}

impl Known {
    /// Learns an interior page read earlier (a lazy observer's, kept until
    /// its runtime started): the rowid map and the traversal take it in as
    /// they would have at its read, and no event is made of it.
    fn learn_interior(&mut self, page_no: u32, bytes: &[u8]) {
        if rowid_lookahead() {
            let _ = self.rowids.on_page(page_no, bytes);
        }
        if let Ok(interior) = sqlite::parse_page(bytes, page_no, &self.geometry) {
            let page = u64::from(page_no);
            self.traversal.learn(page, interior);
            self.traversal.keep_bytes(page, bytes);
        }
    }

    /// Takes in the table interior pages the rowid lookahead asked for once
    /// their prefetch brought them into the page cache (looked at without
    /// waiting: [`predictio::cache::read_cached`]), and what it then asks
    /// for, as one event.
    fn take_in_waiting(&mut self, file: &FileRef) -> Option<Event> {
        if self.rowids.waiting().is_empty() {
            return None;
        }
        let size = self.geometry.page_size as usize;
        let ahead = self.rowids.take_in_waiting(&mut vec![0u8; size], |page, buf| {
            let offset = u64::from(page.saturating_sub(1)) * size as u64;
            matches!(predictio::cache::read_cached(file, buf, offset), Ok(Some(n)) if n == size)
        });
        ahead.event(self.id, self.traversal.layout())
    }
}

/// Observes the page reads of one main database file.
#[derive(Debug)]
pub struct DbObserver {
    path: PathBuf,
    /// The runtime fed; `None` until a lazy observer's first device read.
    prefetcher: Option<&'static Prefetcher>,
    file: Option<FileRef>,
    known: Option<Known>,
    /// The page [`Self::before_read`] placed last, whose bytes
    /// [`Self::on_read`] will show next.
    announced: Option<u32>,
    /// Set once opening the file for prefetch failed: never retried.
    disabled: bool,
    /// A lazy observer saw reads from the device: its runtime is being
    /// started ([`Prefetcher::start_in_background`]) and is attached at
    /// the first read after it is up.
    starting: bool,
    /// Whether reads are left unobserved for now (a warm cache).
    gate: WarmGate,
    /// Interior pages a lazy observer read before its runtime started, kept
    /// as read (at most [`STASH_BYTES`] of them, each a whole page): learnt
    /// when it starts.
    stash: Vec<(u32, Box<[u8]>)>,
    /// The index leaf read last before the runtime started, taken in when
    /// it starts.
    last_index_leaf: Option<(u32, Box<[u8]>)>,
}

impl DbObserver {
    /// An observer of the database at `path`, feeding `prefetcher`. The file
    /// is opened (read-only, a descriptor of our own) on the first read of
    /// its header.
    pub fn new(path: impl Into<PathBuf>, prefetcher: &'static Prefetcher) -> Self {
        Self::with(path.into(), Some(prefetcher))
    }

    /// An observer of the database at `path` that feeds the process's
    /// runtime ([`Prefetcher::global`]) but starts it (on a thread of its
    /// own) only at the first read [`Self::on_timed_read`] takes for one
    /// from the device: a
    /// program whose database is cached never starts it. Until then the
    /// observer keeps the interior pages it sees as they were read (up to
    /// 1 MiB; past that it parses them as it reads) and learns the tree
    /// from them when the runtime starts: parsing them, and mapping every
    /// child to its parent, would cost a warm process's first hundred
    /// queries tens of microseconds each for a prefetch that never comes.
    /// It holds no descriptor of the file (it opens one when the runtime
    /// starts). If the runtime cannot start, the observer stops observing.
    pub fn lazy(path: impl Into<PathBuf>) -> Self {
        Self::with(path.into(), None)
    }

    fn with(path: PathBuf, prefetcher: Option<&'static Prefetcher>) -> Self {
        Self {
            path,
            prefetcher,
            file: None,
            known: None,
            announced: None,
            disabled: false,
            starting: false,
            gate: WarmGate::default(),
            stash: Vec::new(),
            last_index_leaf: None,
        }
    }

    /// Whether the header has been seen and parsed.
    pub fn knows_header(&self) -> bool {
        self.known.is_some()
    }

    /// Interior pages kept as read, to be learnt when the runtime starts (a
    /// [`Self::lazy`] observer's, before its first read from the device).
    pub fn pages_kept_unparsed(&self) -> usize {
        self.stash.len()
    }

    /// Whether this observer feeds a runtime (always for [`Self::new`]; for
    /// [`Self::lazy`], once a read from the device started it).
    pub fn feeds_runtime(&self) -> bool {
        self.prefetcher.is_some()
    }

    /// Dispatches `event` to the runtime, if there is one yet.
    fn dispatch(&self, event: &Event) {
        if let Some(prefetcher) = self.prefetcher {
            prefetcher.dispatch(event);
        }
    }

    /// Starts the process's runtime for a lazy observer and, if the header
    /// was seen, opens the file for it (a runtime that cannot start, or a
    /// file that cannot be opened, disables the observer).
    fn start_runtime(&mut self) {
        let Ok(prefetcher) = Prefetcher::global() else {
            self.disabled = true;
            return;
        };
        self.prefetcher = Some(prefetcher);
        if self.known.is_none() {
            // Opened with the header.
            return;
        }
        let Some(id) = self.open_file(prefetcher) else { return };
        let (stash, last_index_leaf) = (std::mem::take(&mut self.stash), self.last_index_leaf.take());
        let Some(known) = self.known.as_mut() else { return };
        if known.id != id {
            // Another file under the same name since the header was read:
            // the tree is learnt again.
            known.traversal = Traversal::new(id, *known.traversal.layout(), TRAVERSAL_CAPACITY);
            known.rowids = RowidLookahead::new(known.geometry, rowid_config());
            known.id = id;
            return;
        }
        for (page_no, bytes) in stash {
            known.learn_interior(page_no, &bytes);
        }
        if let Some((page_no, bytes)) = last_index_leaf
            && rowid_lookahead()
        {
            let _ = known.rowids.on_page(page_no, &bytes);
        }
    }

    /// Before the runtime of a lazy observer starts: keeps an interior page
    /// to learn later, and says whether the read is done with (a leaf, or a
    /// page kept). With the stash full, the page is left to be parsed now.
    fn stash_before_start(&mut self, page_no: u32, bytes: &[u8]) -> bool {
        if self.prefetcher.is_some() {
            return false;
        }
        if !is_interior(page_no, bytes) {
            // Nothing to learn from a leaf while nothing is prefetched, but
            // the index leaf read last: a scan through an index may be in
            // it when the runtime starts (a 100-row scan reads one), and
            // its rowids name the table leaves ahead.
            if is_index_leaf(page_no, bytes) {
                self.last_index_leaf = Some((page_no, bytes.into()));
            }
            return true;
        }
        if self.stash.iter().any(|(p, kept)| *p == page_no && **kept == *bytes) {
            return true;
        }
        // Every kept read is one whole page of the file.
        if (self.stash.len() + 1) * bytes.len() > STASH_BYTES {
            return false;
        }
        self.stash.push((page_no, bytes.into()));
        true
    }

    /// Opens the database for prefetch (a descriptor of our own, once) and
    /// holds it in `prefetcher`; `None`, with the observer disabled, if it
    /// cannot be opened.
    fn open_file(&mut self, prefetcher: &'static Prefetcher) -> Option<FileId> {
        if let Some(file) = self.file.as_ref() {
            return Some(file.id());
        }
        match FileRef::open(&self.path) {
            Ok(file) => {
                prefetcher.hold(file.clone());
                let id = file.id();
                self.file = Some(file);
                Some(id)
            }
            Err(err) => {
                tracing::debug!(path = %self.path.display(), %err, "cannot open for prefetch");
                self.disabled = true;
                None
            }
        }
    }

    /// The file's identity without opening it (a lazy observer before its
    /// runtime starts: following the tree needs no descriptor).
    fn stat_id(&mut self) -> Option<FileId> {
        use std::os::unix::fs::MetadataExt;
        match std::fs::metadata(&self.path) {
            Ok(meta) => Some(FileId { dev: meta.dev(), ino: meta.ino() }),
            Err(err) => {
                tracing::debug!(path = %self.path.display(), %err, "cannot stat for prefetch");
                self.disabled = true;
                None
            }
        }
    }

    /// Reports that SQLite is about to read `len` bytes at `offset`. Where
    /// the page is a child of a remembered interior page, the descent is
    /// dispatched now, so that the prefetch of the pages after it is issued
    /// while this page's own read is in flight rather than after it (placing
    /// a child needs its page number only). Optional: [`Self::on_read`]
    /// alone reports the same descents, one read later.
    pub fn before_read(&mut self, offset: u64, len: usize) {
        self.announced = None;
        if self.disabled {
            return;
        }
        let Some(known) = self.known.as_mut() else { return };
        let Some(page_no) = page_number(known.geometry.page_size, offset, len) else { return };
        if let Some(event) = known.traversal.on_read(u64::from(page_no), None) {
            self.dispatch(&event);
        }
        self.announced = Some(page_no);
    }

    /// Whether reads are being observed now: false while the page cache
    /// serves them on its own (see [`Self::on_timed_read`]); then
    /// [`Self::before_read`] need not be called.
    pub fn watching(&self) -> bool {
        !self.gate.warm
    }

    /// [`Self::on_read`] for a read that took `elapsed`: once the file's
    /// reads have come from the page cache for a while with nothing for the
    /// executor to do, they are only timed, not observed, until one comes
    /// from the device again. The header (offset 0) is always observed.
    ///
    /// A [`Self::lazy`] observer starts the runtime at the first read from
    /// the device: the second of two reads close together that each took
    /// longer than a cached read does (40 µs). A lone slow read, a cached
    /// read preempted, does not start it. The process's runtime is set up
    /// on a thread of its own; the observer attaches to it at its first
    /// read after that (until then it keeps interior pages as before).
    pub fn on_timed_read(&mut self, offset: u64, bytes: &[u8], elapsed: Duration) {
        let device = elapsed > SLOW_READ && self.gate.since_slow < SLOW_READS_APART;
        let queued = self.prefetcher.map_or(0, |p| p.executor().queued_requests());
        let was_warm = self.gate.warm;
        let observe = self.gate.after_read(elapsed, queued) || offset == 0;
        if device {
            self.starting = true;
        }
        if self.starting && self.prefetcher.is_none() && !self.disabled {
            match GLOBAL.get() {
                Some(Ok(_)) => self.start_runtime(),
                Some(Err(_)) => self.disabled = true,
                None => Prefetcher::start_in_background(),
            }
        }
        let count = |counter: fn(&Prefetcher) -> &AtomicU64| {
            if let Some(prefetcher) = self.prefetcher {
                counter(prefetcher).fetch_add(1, Ordering::Relaxed);
            }
        };
        if self.gate.warm && !was_warm {
            count(|p| &p.warm_spells);
        }
        if observe {
            count(|p| &p.reads_observed);
            self.on_read(offset, bytes);
        } else {
            count(|p| &p.reads_unobserved);
            self.announced = None;
        }
    }

    /// `count` reads, none of the header, that came from the page cache
    /// while the observer stood aside: what [`Self::on_timed_read`] would
    /// have done with each, at once ([`SharedObserver`] counts them without
    /// taking the observer's lock).
    fn on_fast_reads_aside(&mut self, count: u64) {
        self.gate.since_slow = self.gate.since_slow.saturating_add(u32::try_from(count).unwrap_or(u32::MAX));
        if let Some(prefetcher) = self.prefetcher {
            prefetcher.reads_unobserved.fetch_add(count, Ordering::Relaxed);
        }
        self.announced = None;
    }

    /// Reports that the connection's transaction on the file is over (it
    /// let go of its lock): a scan through an index followed, or an index
    /// leaf read since which no table leaf was, ends with it, so that the
    /// lookups of the next statement are not taken for its.
    pub fn on_unlocked(&mut self) {
        self.last_index_leaf = None;
        if let Some(known) = self.known.as_mut() {
            known.rowids.end_of_transaction();
        }
    }

    /// Reports that SQLite read `bytes` at `offset` and got all of them.
    pub fn on_read(&mut self, offset: u64, bytes: &[u8]) {
        let announced = self.announced.take();
        if self.disabled {
            return;
        }
        if offset == 0 && bytes.len() >= sqlite::HEADER_SIZE {
            self.on_header(bytes);
        }
        let Some(page_size) = self.known.as_ref().map(|k| k.geometry.page_size) else { return };
        let Some(page_no) = page_number(page_size, offset, bytes.len()) else { return };
        if self.stash_before_start(page_no, bytes) {
            return;
        }
        let Some(known) = self.known.as_mut() else { return };
        let page = u64::from(page_no);
        // An interior page read again unchanged (SQLite re-reads the upper
        // levels on most lookups) is not parsed again.
        if known.traversal.reread_unchanged(page, bytes) {
            if announced != Some(page_no)
                && let Some(event) = known.traversal.on_read(page, None)
                && let Some(prefetcher) = self.prefetcher
            {
                prefetcher.dispatch(&event);
            }
            return;
        }
        if rowid_lookahead() {
            let ahead = known.rowids.on_page(page_no, bytes);
            if let Some(prefetcher) = self.prefetcher {
                if let Some(event) = ahead.event(known.id, known.traversal.layout()) {
                    prefetcher.dispatch(&event);
                }
                if let Some(file) = self.file.as_ref()
                    && let Some(event) = known.take_in_waiting(file)
                {
                    prefetcher.dispatch(&event);
                }
            }
        }
        let parsed = sqlite::parse_page(bytes, page_no, &known.geometry).ok();
        let interior = parsed.is_some();
        if announced == Some(page_no) {
            // The descent into it was reported before the read.
            if let Some(interior) = parsed {
                known.traversal.learn(page, interior);
            }
        } else if let Some(event) = known.traversal.on_read(page, parsed)
            && let Some(prefetcher) = self.prefetcher
        {
            prefetcher.dispatch(&event);
        }
        if interior {
            known.traversal.keep_bytes(page, bytes);
        }
    }

    fn on_header(&mut self, bytes: &[u8]) {
        let header = match sqlite::Header::parse(bytes) {
            Ok(header) => header,
            Err(err) => {
                tracing::debug!(path = %self.path.display(), %err, "not a usable SQLite header; passed over");
                self.known = None;
                return;
            }
        };
        let geometry = header.geometry();
        if let Some(known) = self.known.as_mut()
            && known.geometry.page_size == geometry.page_size
        {
            // Same layout: keep the traversal, take the new page count.
            known.geometry = geometry;
            known.rowids.set_geometry(geometry);
            return;
        }
        let Ok(layout) = DbPageLayout::new(predictio::btree::Engine::Sqlite, geometry.page_size) else {
            self.known = None;
            return;
        };
        let id = match (self.prefetcher, self.file.as_ref()) {
            (_, Some(file)) => Some(file.id()),
            (Some(prefetcher), None) => self.open_file(prefetcher),
            (None, None) => self.stat_id(),
        };
        let Some(id) = id else { return };
        self.known = Some(Known {
            geometry,
            id,
            traversal: Traversal::new(id, layout, TRAVERSAL_CAPACITY),
            rowids: RowidLookahead::new(geometry, rowid_config()),
        });
    }
}

/// A [`DbObserver`] shared by the threads that read one file (the VFS
/// shim's state of an open main database). While the observer stands aside
/// on a warm cache, a read costs two clock readings and two atomic
/// operations: the observer's lock is taken only for a slow read (or the
/// header), and the fast reads in between are handed to it then, in one
/// count, with the same effect as one by one.
#[derive(Debug)]
pub struct SharedObserver {
    /// Whether the observer stood aside after the last read it saw.
    aside: AtomicBool,
    /// Fast reads since then, not yet handed to the observer.
    fast_aside: AtomicU64,
    observer: Mutex<DbObserver>,
}

impl SharedObserver {
    /// Shares `observer`.
    pub fn new(observer: DbObserver) -> Self {
        Self { aside: AtomicBool::new(false), fast_aside: AtomicU64::new(0), observer: Mutex::new(observer) }
    }

    /// Before a read of `len` bytes at `offset`: [`DbObserver::before_read`]
    /// while the observer watches, nothing while it stands aside.
    pub fn before_read(&self, offset: u64, len: usize) {
        if self.aside.load(Ordering::Relaxed) {
            return;
        }
        let mut observer = self.lock();
        if observer.watching() {
            observer.before_read(offset, len);
        }
    }

    /// After a read that returned `bytes` at `offset` in `elapsed`:
    /// [`DbObserver::on_timed_read`], or only a count while the observer
    /// stands aside and the read was fast.
    pub fn after_read(&self, offset: u64, bytes: &[u8], elapsed: Duration) {
        if offset != 0 && elapsed <= SLOW_READ && self.aside.load(Ordering::Relaxed) {
            self.fast_aside.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let mut observer = self.lock();
        let fast = self.fast_aside.swap(0, Ordering::Relaxed);
        if fast > 0 {
            observer.on_fast_reads_aside(fast);
        }
        observer.on_timed_read(offset, bytes, elapsed);
        self.aside.store(!observer.watching(), Ordering::Relaxed);
    }

    /// The connection's transaction on the file is over
    /// ([`DbObserver::on_unlocked`]).
    pub fn unlocked(&self) {
        self.lock().on_unlocked();
    }

    /// Whether reads are being observed now (see [`DbObserver::watching`]).
    pub fn watching(&self) -> bool {
        !self.aside.load(Ordering::Relaxed)
    }

    /// The observer (a panic while it was locked left it usable: its state
    /// stays bounded).
    pub fn lock(&self) -> MutexGuard<'_, DbObserver> {
        self.observer.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The B-tree page flag of database page `page_no` (its `bytes`): the
/// first byte of its page header, after the file header on page 1.
fn page_flag(page_no: u32, bytes: &[u8]) -> Option<u8> {
    bytes.get(if page_no == 1 { sqlite::HEADER_SIZE } else { 0 }).copied()
}

/// Whether database page `page_no` is a leaf of an index B-tree, by its
/// flag alone.
fn is_index_leaf(page_no: u32, bytes: &[u8]) -> bool {
    page_flag(page_no, bytes) == Some(sqlite::LEAF_INDEX)
}

/// Whether database page `page_no` is an interior page of a table or an
/// index B-tree, by its flag alone.
fn is_interior(page_no: u32, bytes: &[u8]) -> bool {
    matches!(page_flag(page_no, bytes), Some(sqlite::INTERIOR_TABLE | sqlite::INTERIOR_INDEX))
}

/// The number of the database page a read of `len` bytes at `offset` is,
/// when it is exactly one page.
fn page_number(page_size: u32, offset: u64, len: usize) -> Option<u32> {
    let page_size = u64::from(page_size);
    if len as u64 != page_size || !offset.is_multiple_of(page_size) {
        return None;
    }
    u32::try_from(offset / page_size + 1).ok()
}

/// Asks the kernel to start reading the parts of the shared object holding
/// `address` (this extension) that the process has mapped, so that the
/// adapter's own code is in the page cache before SQLite's first queries
/// run through it. Without this, a process started with a cold cache pays a
/// page fault (one synchronous random read) for each page of our code the
/// first query touches, inside that query. Best effort: asynchronous
/// (`fadvise(WILLNEED)`), bounded to the mapped ranges, silent on failure.
pub fn warm_own_code(address: usize) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return };
    // Lines: "start-end perms offset dev inode path".
    let parse = |line: &str| -> Option<(usize, usize, u64, String)> {
        let mut parts = line.split_whitespace();
        let (start, end) = parts.next()?.split_once('-')?;
        let _perms = parts.next()?;
        let offset = u64::from_str_radix(parts.next()?, 16).ok()?;
        let path = parts.nth(2)?.to_owned();
        Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?, offset, path))
    };
    let mappings: Vec<_> = maps.lines().filter_map(parse).filter(|(_, _, _, path)| path.starts_with('/')).collect();
    let Some((_, _, _, ours)) = mappings.iter().find(|(start, end, _, _)| (*start..*end).contains(&address)) else {
        return;
    };
    let Ok(file) = std::fs::File::open(ours) else { return };
    for (start, end, offset, path) in &mappings {
        if path == ours {
            let _ = predictio::os::fadvise(
                std::os::fd::AsFd::as_fd(&file),
                *offset,
                (end - start) as u64,
                predictio::os::Advice::WillNeed,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: Duration = Duration::from_micros(2);
    const SLOW: Duration = Duration::from_micros(200);

    #[test]
    fn the_gate_stands_aside_after_a_run_of_cached_reads_with_nothing_queued() {
        let mut gate = WarmGate::default();
        for _ in 0..WARM_AFTER_READS {
            assert!(gate.after_read(FAST, 0), "watching until the run is long enough");
        }
        assert!(gate.warm);
        assert!(!gate.after_read(FAST, 0), "then reads are only timed");
    }

    #[test]
    fn queued_work_or_device_reads_restart_the_run_a_lone_slow_read_does_not() {
        let mut gate = WarmGate::default();
        for i in 0..(3 * WARM_AFTER_READS) {
            // A request queued every 16 reads: a scan being prefetched,
            // whose reads are fast because of it.
            assert!(gate.after_read(FAST, u64::from(i / 16)));
        }
        assert!(!gate.warm, "prefetching is not a warm cache");
        // Lone slow reads (a cached read preempted) amid fast ones (the
        // first read sees the count of queued requests change: it starts
        // the run).
        for i in 0..=WARM_AFTER_READS {
            let elapsed = if i % 100 == 50 { SLOW } else { FAST };
            assert!(gate.after_read(elapsed, 100));
        }
        assert!(gate.warm, "lone slow reads do not keep the observer watching");
        let mut gate = WarmGate::default();
        for _ in 0..(WARM_AFTER_READS - 2) {
            gate.after_read(FAST, 100);
        }
        assert!(gate.after_read(SLOW, 100));
        assert!(gate.after_read(SLOW, 100), "device reads are observed");
        assert!(gate.after_read(FAST, 100));
        assert!(!gate.warm, "and restart the run");
    }

    /// The shared observer's lock-free count of fast reads while aside
    /// leaves the gate where reads one by one would have.
    #[test]
    fn fast_reads_counted_aside_move_the_gate_as_reads_one_by_one() {
        let bytes = [0u8; 4096];
        let shared = SharedObserver::new(DbObserver::lazy("/nonexistent/predictio-test.db"));
        let mut alone = DbObserver::lazy("/nonexistent/predictio-test.db");
        let mut script: Vec<Duration> = vec![FAST; WARM_AFTER_READS as usize + 5];
        // A lone slow read, a run longer than SLOW_READS_APART, another
        // lone one, then two close together (device reads).
        script.push(SLOW);
        script.extend(std::iter::repeat_n(FAST, 2 * SLOW_READS_APART as usize));
        script.push(SLOW);
        script.extend(std::iter::repeat_n(FAST, 5));
        script.extend([SLOW, FAST, SLOW, FAST]);
        for (i, &elapsed) in script.iter().enumerate() {
            let offset = 4096 * (i as u64 + 1);
            shared.before_read(offset, bytes.len());
            shared.after_read(offset, &bytes, elapsed);
            alone.on_timed_read(offset, &bytes, elapsed);
            assert_eq!(shared.watching(), alone.watching(), "read {i}");
            let locked = shared.lock();
            if elapsed > SLOW_READ {
                assert_eq!(locked.gate.since_slow, alone.gate.since_slow, "read {i}");
            }
        }
        assert!(shared.watching(), "two slow reads close together bring it back");
        assert!(shared.fast_aside.load(Ordering::Relaxed) == 0);
    }

    #[test]
    fn two_slow_reads_close_together_put_the_observer_back_one_alone_does_not() {
        let mut gate = WarmGate::default();
        for _ in 0..WARM_AFTER_READS {
            gate.after_read(FAST, 0);
        }
        assert!(gate.warm);
        // One slow read (a cached read preempted), then a long fast run.
        assert!(!gate.after_read(SLOW, 0));
        for _ in 0..(2 * SLOW_READS_APART) {
            assert!(!gate.after_read(FAST, 0));
        }
        assert!(!gate.after_read(SLOW, 0), "too far apart: still aside");
        // A cold scan: slow reads one after another.
        assert!(!gate.after_read(FAST, 0));
        assert!(gate.after_read(SLOW, 0), "the second slow read close by is observed");
        assert!(!gate.warm);
        assert!(gate.after_read(FAST, 0), "and every read after it");
    }
}
