//! The profile store: one embedded database file (`redb`: copy-on-write
//! B-trees, ACID commits with fsync) under `/var/lib/predictio` by default.
//!
//! Crash safety comes from `redb`: a commit is either all there or not at
//! all, so a `kill -9` in the middle of a write leaves the previous committed
//! state, which the next open repairs to. The format is versioned (a `meta`
//! table holds [`STORE_VERSION`]; each profile carries
//! [`PROFILE_VERSION`]); a profile of an
//! older version is migrated when read, an other version is a typed error,
//! never a misread. The store is size-capped: after a write
//! the least recently used profiles are evicted until the values fit
//! [`Store::cap_bytes`]. Beside the profiles a `used` table holds each
//! profile's last use and stored size, so that eviction and
//! [`Store::touch`] read and write a few bytes per profile, never a
//! profile's JSON. The database file is locked while open, so holders
//! keep it open only for one operation.
//!
//! Profiles name the files and paths other users' launches touched, so the
//! store is root's alone: its directory must be the opener's and private
//! ([`predictio::secure_dir`]; created 0700), the database file is created
//! 0600 (an existing one is made so) and is never opened through a
//! symbolic link, nor if it is not a regular file of the opener's. A new
//! database is made under a temporary name and linked into place once it
//! is complete, so a disk that fills while it is made leaves no store
//! behind; a database file that is not a readable database (left broken by
//! an older version, say) is moved aside (`launch.redb.broken-SECONDS`)
//! with a warning, and a new one started.

use std::borrow::Cow;
use std::fs::File;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redb::{Database, ReadableTable, TableDefinition, TableHandle};

use predictio::launch::Benefit;
use predictio::launch::profile::{PROFILE_VERSION, Profile};
use predictio::launch::{FileIdentity, LaunchRun};

use super::keys;

/// Version of the store's layout: 1 held the profiles alone; 2 adds the
/// `used` table (a version-1 store is upgraded when opened).
pub const STORE_VERSION: u64 = 2;

/// Default directory.
pub const DEFAULT_DIR: &str = "/var/lib/predictio";

/// Default size cap of the profiles, bytes.
pub const DEFAULT_CAP_BYTES: u64 = 64 << 20;

/// File name of the database in its directory.
pub const FILE_NAME: &str = "launch.redb";

const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const PROFILES: TableDefinition<&str, &[u8]> = TableDefinition::new("profiles");
/// Per profile key: (last used, UNIX seconds; stored bytes of its profile).
/// Kept in the same commits as `profiles`, so the two always agree.
const USED: TableDefinition<&str, (u64, u64)> = TableDefinition::new("used");
/// Per profile key: what its replays gained ([`Benefit`], JSON: a few
/// hundred bytes). Written apart from the profile, removed with it. Added
/// within version 2: an older predictio leaves the table alone.
const SCORES: TableDefinition<&str, &[u8]> = TableDefinition::new("scores");
/// Per key: the first launch of a command shape no profile holds yet
/// ([`predictio::launch::FirstRuns`], kept in memory until the shape
/// launches again), saved at the daemon's stop so that it survives a
/// restart ([`KeptRun`], JSON). Rewritten whole at each stop. Added within
/// version 2: an older predictio leaves the table alone.
const FIRST_RUNS: TableDefinition<&str, &[u8]> = TableDefinition::new("first_runs");

/// One saved first run: its place in the oldest-first order, the
/// executable it was a launch of and the run (borrowed when written, owned
/// when read).
#[derive(serde::Serialize, serde::Deserialize)]
struct KeptRun<'a> {
    order: u64,
    exe: Cow<'a, FileIdentity>,
    run: Cow<'a, LaunchRun>,
}

/// Store errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The directory could not be created, or is not safe to use (not the
    /// opener's, or writable by others, or on a path others can redirect).
    #[error("profile store directory {0}")]
    Dir(#[from] predictio::secure_dir::UnsafeDir),
    /// The database file is not one to open: a symbolic link, not a
    /// regular file, not the opener's; or it could not be opened or made.
    #[error("profile store {path}: {why}")]
    File {
        /// The database file.
        path: String,
        /// Why.
        why: String,
    },
    /// The database failed.
    #[error("profile store {path}: {source}")]
    Db {
        /// The database file.
        path: String,
        /// Why.
        source: Box<redb::Error>,
    },
    /// The store was written by another version of predictio.
    #[error("profile store {path} has format version {found}, this predictio reads version {STORE_VERSION}")]
    Version {
        /// The database file.
        path: String,
        /// The version found.
        found: u64,
    },
    /// A profile could not be encoded or decoded.
    #[error("profile of {exe}: {reason}")]
    Profile {
        /// The executable.
        exe: String,
        /// Why.
        reason: String,
    },
}

/// Opens the database file `path` in `dir` (a checked directory) for
/// reading and writing: never through a symbolic link (`O_NOFOLLOW`),
/// never blocking, only a regular file of the opener's, made 0600 if it
/// was not. A missing one is made first ([`create_fresh`]).
fn open_file(dir: &Path, path: &Path) -> Result<File, StoreError> {
    let shown = || path.display().to_string();
    let flags = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    let open = || File::options().read(true).write(true).custom_flags(flags).open(path);
    let file = match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            create_fresh(dir, path)?;
            open()
        }
        other => other,
    }
    .map_err(|e| StoreError::File {
        path: shown(),
        why: if e.raw_os_error() == Some(libc::ELOOP) {
            "a symbolic link: the store is never opened through one".into()
        } else {
            format!("cannot be opened: {e}")
        },
    })?;
    let meta = file.metadata().map_err(|e| StoreError::File { path: shown(), why: format!("cannot stat: {e}") })?;
    if !meta.is_file() {
        return Err(StoreError::File { path: shown(), why: "not a regular file".into() });
    }
    let euid = predictio::secure_dir::euid();
    if meta.uid() != euid {
        return Err(StoreError::File { path: shown(), why: format!("owned by uid {}, not uid {euid}", meta.uid()) });
    }
    if meta.permissions().mode() & 0o777 != 0o600 {
        tracing::warn!(path = %shown(), mode = format!("{:04o}", meta.permissions().mode() & 0o7777), "profile store made private (0600)");
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| StoreError::File { path: shown(), why: format!("cannot make it private: {e}") })?;
    }
    Ok(file)
}

/// Makes a new, empty store at `path`: built under a temporary name in
/// `dir` (mode 0600), committed (redb syncs a commit to storage), then
/// linked to `path` (which never replaces a file another opener made in
/// between) and the directory synced. Whatever fails on the way (a full
/// disk), no file is left at `path` and the temporary one is removed.
fn create_fresh(dir: &Path, path: &Path) -> Result<(), StoreError> {
    let tmp = dir.join(format!(".{FILE_NAME}.new-{}", std::process::id()));
    let failed = |what: &str, e: &dyn std::fmt::Display| StoreError::File {
        path: path.display().to_string(),
        why: format!("cannot be created ({what} {}): {e}", tmp.display()),
    };
    let _ = std::fs::remove_file(&tmp);
    let made = (|| {
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
            .map_err(|e| failed("opening", &e))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| failed("chmod of", &e))?;
        let db = redb::Builder::new().create_file(file).map_err(|e| failed("making", &e))?;
        let txn = db.begin_write().map_err(|e| failed("writing", &e))?;
        {
            let mut meta = txn.open_table(META).map_err(|e| failed("writing", &e))?;
            meta.insert("version", STORE_VERSION).map_err(|e| failed("writing", &e))?;
            txn.open_table(PROFILES).map_err(|e| failed("writing", &e))?;
            txn.open_table(USED).map_err(|e| failed("writing", &e))?;
            txn.open_table(SCORES).map_err(|e| failed("writing", &e))?;
        }
        txn.commit().map_err(|e| failed("committing", &e))?;
        drop(db);
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(failed("linking", &e)),
        }
        File::open(dir).and_then(|d| d.sync_all()).map_err(|e| failed("syncing the directory of", &e))
    })();
    let _ = std::fs::remove_file(&tmp);
    made
}

/// Whether `err`, opening a database file, says the file is not a readable
/// database (as opposed to busy, or out of reach).
fn is_broken(err: &redb::DatabaseError) -> bool {
    use std::io::ErrorKind;
    match err {
        redb::DatabaseError::Storage(redb::StorageError::Corrupted(_)) => true,
        redb::DatabaseError::Storage(redb::StorageError::Io(e)) => {
            matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::UnexpectedEof)
        }
        _ => false,
    }
}

/// Moves the broken database file `path` aside, to
/// `launch.redb.broken-SECONDS` beside it, saying so.
fn set_aside_broken(path: &Path, why: &redb::DatabaseError) -> Result<(), StoreError> {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut aside = path.with_file_name(format!("{FILE_NAME}.broken-{now}"));
    for n in 1.. {
        if std::fs::symlink_metadata(&aside).is_err() {
            break;
        }
        aside = path.with_file_name(format!("{FILE_NAME}.broken-{now}-{n}"));
    }
    std::fs::rename(path, &aside).map_err(|e| StoreError::File {
        path: path.display().to_string(),
        why: format!("not a readable database ({why}), and it cannot be moved aside: {e}"),
    })?;
    tracing::warn!(
        store = %path.display(),
        moved_to = %aside.display(),
        %why,
        "the profile store was not a readable database: moved aside, a new one is started"
    );
    Ok(())
}

/// The key of the profile of `exe`'s launches with command shape `shape`
/// ([`predictio::launch::shape`]): the path alone for an unshaped profile (as profiles
/// before shapes were keyed), else the path, a NUL and the shape, so that
/// every profile of one executable sorts together.
pub fn key(exe: &str, shape: &str) -> String {
    if shape.is_empty() { exe.to_owned() } else { format!("{exe}\0{shape}") }
}

/// The executable path and command shape of a [`key`] (the shape empty
/// for a profile learned before shapes).
fn split_key(key: &str) -> (&str, &str) {
    key.split_once('\0').unwrap_or((key, ""))
}

/// A key as shown in messages: its NUL as a space.
fn shown_key(key: &str) -> String {
    key.replace('\0', " ")
}

/// One line of [`Store::list`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Summary {
    /// The executable's path.
    pub exe: String,
    /// The command shape ([`Profile::shape`]; empty: learned before shapes,
    /// not replayed).
    pub shape: String,
    /// Launches learned.
    pub runs: u32,
    /// Files in the profile.
    pub files: usize,
    /// Pages its models cover.
    pub pages: u64,
    /// Bytes stored.
    pub stored_bytes: u64,
    /// Last learned or replayed (UNIX seconds).
    pub last_used_s: u64,
    /// What its replays gained ([`BenefitSummary`]; `None`: never scored
    /// nor learned cold since scoring began).
    pub benefit: Option<BenefitSummary>,
}

/// What a profile's replays gained, as `profile list` and `stat` show it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BenefitSummary {
    /// Replays scored in all.
    pub replays_scored: u64,
    /// Of the pages its last replays asked for, the share its launches
    /// used, never accessed, and still read from storage themselves
    /// (`None`: not known; used and wasted are not when only misses were
    /// observed).
    pub used_share: Option<f64>,
    /// See `used_share`.
    pub wasted_share: Option<f64>,
    /// See `used_share`.
    pub late_share: Option<f64>,
    /// Median duration of its last replayed launches, ms.
    pub replayed_ms: Option<u32>,
    /// Median duration of its last cold launches without a replay, ms.
    pub cold_ms: Option<u32>,
    /// Why it was retired, if it is.
    pub retired: Option<String>,
    /// When it was retired, UNIX seconds.
    pub retired_at_s: Option<u64>,
}

impl BenefitSummary {
    /// The summary of `b`.
    pub fn of(b: &Benefit) -> Self {
        Self {
            replays_scored: b.scored,
            used_share: b.used_share(),
            wasted_share: b.wasted_share(),
            late_share: b.late_share(),
            replayed_ms: b.median_replayed_ms(),
            cold_ms: b.median_cold_ms(),
            retired: b.retired.as_ref().map(|r| r.why.clone()),
            retired_at_s: b.retired.as_ref().map(|r| r.at_s),
        }
    }
}

/// The profile store (see the module docs).
pub struct Store {
    db: Database,
    path: PathBuf,
    cap_bytes: u64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).field("cap_bytes", &self.cap_bytes).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, capped at `cap_bytes`
    /// of profiles. Waits up to `wait` for another holder to let go.
    /// The directory must be the opener's and private; missing directories
    /// are created 0700 (see the module docs for the database file).
    pub fn open(dir: impl AsRef<Path>, cap_bytes: u64, wait: Duration) -> Result<Store, StoreError> {
        let dir = dir.as_ref();
        predictio::secure_dir::prepare(dir, 0o700)?;
        let path = dir.join(FILE_NAME);
        let shown = path.display().to_string();
        let err = |e: redb::Error| StoreError::Db { path: shown.clone(), source: Box::new(e) };
        let deadline = Instant::now() + wait;
        let mut set_aside = false;
        let db = loop {
            match redb::Builder::new().create_file(open_file(dir, &path)?) {
                Ok(db) => break db,
                Err(redb::DatabaseError::DatabaseAlreadyOpen) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) if !set_aside && is_broken(&e) => {
                    set_aside_broken(&path, &e)?;
                    set_aside = true;
                }
                Err(e) => return Err(err(e.into())),
            }
        };
        // A store of this version with every table is only read: a write
        // transaction costs a commit (fsyncs) on each open.
        let current = (|| -> Result<bool, StoreError> {
            let txn = db.begin_read().map_err(|e| err(e.into()))?;
            let version = match txn.open_table(META) {
                Ok(meta) => meta.get("version").map_err(|e| err(e.into()))?.map(|v| v.value()),
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(err(e.into())),
            };
            let tables: Vec<String> =
                txn.list_tables().map_err(|e| err(e.into()))?.map(|t| t.name().to_owned()).collect();
            let has = |name: &str| tables.iter().any(|t| t == name);
            Ok(version == Some(STORE_VERSION) && has(PROFILES.name()) && has(USED.name()) && has(SCORES.name()))
        })()?;
        if !current {
            let txn = db.begin_write().map_err(|e| err(e.into()))?;
            {
                let mut meta = txn.open_table(META).map_err(|e| err(e.into()))?;
                let found = meta.get("version").map_err(|e| err(e.into()))?.map(|v| v.value());
                let profiles = txn.open_table(PROFILES).map_err(|e| err(e.into()))?;
                let mut used = txn.open_table(USED).map_err(|e| err(e.into()))?;
                txn.open_table(SCORES).map_err(|e| err(e.into()))?;
                match found {
                    Some(STORE_VERSION) => {}
                    // Version 1: build the `used` table from the profiles, the
                    // one time every profile is decoded for it.
                    Some(1) => {
                        for item in profiles.iter().map_err(|e| err(e.into()))? {
                            let (k, v) = item.map_err(|e| err(e.into()))?;
                            let last = Self::decode(k.value(), v.value()).map_or(0, |p| p.last_used_s);
                            used.insert(k.value(), (last, v.value().len() as u64)).map_err(|e| err(e.into()))?;
                        }
                        meta.insert("version", STORE_VERSION).map_err(|e| err(e.into()))?;
                    }
                    Some(v) => return Err(StoreError::Version { path: shown, found: v }),
                    None => {
                        meta.insert("version", STORE_VERSION).map_err(|e| err(e.into()))?;
                    }
                }
            }
            txn.commit().map_err(|e| err(e.into()))?;
        }
        let store = Store { db, path, cap_bytes };
        if keys::missing(dir) {
            store.index();
        }
        Ok(store)
    }

    /// Removes the key index before a commit that changes the stored keys
    /// ([`keys`]): an index that cannot be removed would go on saying that
    /// a profile about to be written is not there.
    fn unindex(&self) -> Result<(), StoreError> {
        let Some(dir) = self.path.parent() else { return Ok(()) };
        keys::invalidate(dir).map_err(|e| StoreError::File {
            path: dir.join(keys::KEYS_FILE).display().to_string(),
            why: format!("the key index cannot be removed before a write: {e}"),
        })
    }

    /// Writes the key index ([`keys`]) of the profiles stored now. A
    /// failure is logged: without an index, readers open the database.
    fn index(&self) {
        let Some(dir) = self.path.parent() else { return };
        let listed = (|| -> Result<(), StoreError> {
            let txn = self.db.begin_read().map_err(|e| self.err(e))?;
            let used = txn.open_table(USED).map_err(|e| self.err(e))?;
            let mut names = Vec::new();
            for item in used.iter().map_err(|e| self.err(e))? {
                names.push(item.map_err(|e| self.err(e))?.0.value().to_owned());
            }
            keys::write(dir, names.iter().map(String::as_str)).map_err(|e| StoreError::File {
                path: dir.join(keys::KEYS_FILE).display().to_string(),
                why: e.to_string(),
            })
        })();
        if let Err(err) = listed {
            tracing::warn!(%err, "the profile store's key index was not written");
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The size cap.
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    fn err(&self, e: impl Into<redb::Error>) -> StoreError {
        StoreError::Db { path: self.path.display().to_string(), source: Box::new(e.into()) }
    }

    fn decode(key: &str, bytes: &[u8]) -> Result<Profile, StoreError> {
        let mut profile: Profile = serde_json::from_slice(bytes)
            .map_err(|e| StoreError::Profile { exe: shown_key(key), reason: e.to_string() })?;
        if !profile.migrate() {
            return Err(StoreError::Profile {
                exe: shown_key(key),
                reason: format!(
                    "profile version {}; this predictio reads versions 1 to {PROFILE_VERSION} (a newer predictio wrote it?)",
                    profile.version
                ),
            });
        }
        Ok(profile)
    }

    /// Writes `profile` (keyed by its executable's path and its shape,
    /// [`key`]) in one commit, then evicts least recently used profiles
    /// beyond the cap (never the one just written). Returns the keys
    /// evicted, each shown as the path and the shape. Eviction reads the
    /// `used` table only: no stored profile is decoded.
    pub fn put(&self, profile: &Profile) -> Result<Vec<String>, StoreError> {
        let key = key(&profile.exe.path, &profile.shape);
        let exe = key.as_str();
        let bytes = serde_json::to_vec(profile)
            .map_err(|e| StoreError::Profile { exe: shown_key(exe), reason: e.to_string() })?;
        self.unindex()?;
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut evicted = Vec::new();
        {
            let mut table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
            let mut used = txn.open_table(USED).map_err(|e| self.err(e))?;
            let mut scores = txn.open_table(SCORES).map_err(|e| self.err(e))?;
            table.insert(exe, bytes.as_slice()).map_err(|e| self.err(e))?;
            used.insert(exe, (profile.last_used_s, bytes.len() as u64)).map_err(|e| self.err(e))?;
            let mut sizes: Vec<(u64, u64, String)> = Vec::new();
            let mut total = 0u64;
            for item in used.iter().map_err(|e| self.err(e))? {
                let (k, v) = item.map_err(|e| self.err(e))?;
                let (last, len) = v.value();
                total += len;
                if k.value() != exe {
                    sizes.push((last, len, k.value().to_owned()));
                }
            }
            sizes.sort();
            for (_, len, key) in sizes {
                if total <= self.cap_bytes {
                    break;
                }
                table.remove(key.as_str()).map_err(|e| self.err(e))?;
                used.remove(key.as_str()).map_err(|e| self.err(e))?;
                scores.remove(key.as_str()).map_err(|e| self.err(e))?;
                total -= len;
                evicted.push(shown_key(&key));
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        self.index();
        Ok(evicted)
    }

    /// Merges one run of `exe` with command shape `shape` into their
    /// profile (a new profile when there is none, or when the executable
    /// itself changed) and writes it. Returns the profile as stored.
    pub fn merge_run(
        &self,
        exe: &predictio::launch::profile::FileIdentity,
        shape: &str,
        run: &predictio::launch::profile::LaunchRun,
        limits: &predictio::launch::profile::LearnLimits,
    ) -> Result<Profile, StoreError> {
        self.merge_runs(self.learned(exe, shape)?, exe, shape, std::slice::from_ref(run), limits)
    }

    /// The stored profile of `exe`'s launches with shape `shape`, when it
    /// was learned of this very executable: `None` when there is none, it
    /// cannot be read, or the executable changed since.
    pub fn learned(
        &self,
        exe: &predictio::launch::profile::FileIdentity,
        shape: &str,
    ) -> Result<Option<Profile>, StoreError> {
        match self.get(&exe.path, shape) {
            Ok(Some(p)) if p.exe == *exe => Ok(Some(p)),
            Ok(_) | Err(StoreError::Profile { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Merges `runs` of `exe` with shape `shape` into `learned` (what
    /// [`Store::learned`] returned; a new profile for `None`) and writes it.
    /// Returns the profile as stored.
    pub fn merge_runs(
        &self,
        learned: Option<Profile>,
        exe: &predictio::launch::profile::FileIdentity,
        shape: &str,
        runs: &[predictio::launch::profile::LaunchRun],
        limits: &predictio::launch::profile::LearnLimits,
    ) -> Result<Profile, StoreError> {
        let mut profile = learned.unwrap_or_else(|| Profile::new(exe.clone(), shape));
        for run in runs {
            profile.merge(run, limits);
        }
        self.put(&profile)?;
        Ok(profile)
    }

    /// Marks the profile of `exe` with shape `shape` used now (for
    /// least-recently-used eviction). Writes its `used` entry only.
    pub fn touch(&self, exe: &str, shape: &str) -> Result<(), StoreError> {
        self.touch_all(&[(exe, shape)]).map(|_| ())
    }

    /// Marks the profiles of these (executable path, shape) pairs used now,
    /// in one commit that writes their `used` entries only. Pairs with no
    /// stored profile are passed over. Returns how many were marked.
    pub fn touch_all(&self, profiles: &[(&str, &str)]) -> Result<usize, StoreError> {
        let now = predictio::launch::profile::now_s();
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut marked = 0;
        {
            let mut used = txn.open_table(USED).map_err(|e| self.err(e))?;
            for (exe, shape) in profiles {
                let key = key(exe, shape);
                let len = used.get(key.as_str()).map_err(|e| self.err(e))?.map(|v| v.value().1);
                if let Some(len) = len {
                    used.insert(key.as_str(), (now, len)).map_err(|e| self.err(e))?;
                    marked += 1;
                }
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        Ok(marked)
    }

    /// Writes what the replays of these profiles (executable path, shape)
    /// gained, in one commit; pairs with no stored profile (evicted or
    /// forgotten meanwhile) are passed over. Returns how many were written.
    pub fn put_benefits(&self, benefits: &[(&str, &str, &Benefit)]) -> Result<usize, StoreError> {
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut written = 0;
        {
            let used = txn.open_table(USED).map_err(|e| self.err(e))?;
            let mut scores = txn.open_table(SCORES).map_err(|e| self.err(e))?;
            for (exe, shape, benefit) in benefits {
                let key = key(exe, shape);
                if used.get(key.as_str()).map_err(|e| self.err(e))?.is_none() {
                    continue;
                }
                let bytes = serde_json::to_vec(benefit)
                    .map_err(|e| StoreError::Profile { exe: shown_key(&key), reason: e.to_string() })?;
                scores.insert(key.as_str(), bytes.as_slice()).map_err(|e| self.err(e))?;
                written += 1;
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        Ok(written)
    }

    /// Replaces the saved first runs with `runs` (oldest first: executable,
    /// command shape, run), in one commit, keeping the newest that fit in
    /// `max_bytes` of JSON. Returns how many were written.
    pub fn put_first_runs(
        &self,
        runs: &[(&FileIdentity, &str, &LaunchRun)],
        max_bytes: usize,
    ) -> Result<usize, StoreError> {
        let mut rows = Vec::new();
        let mut bytes = 0;
        for (order, (exe, shape, run)) in runs.iter().enumerate().rev() {
            let key = key(&exe.path, shape);
            let kept = KeptRun { order: order as u64, exe: Cow::Borrowed(*exe), run: Cow::Borrowed(*run) };
            let json = serde_json::to_vec(&kept)
                .map_err(|e| StoreError::Profile { exe: shown_key(&key), reason: e.to_string() })?;
            bytes += key.len() + json.len();
            if bytes > max_bytes {
                break;
            }
            rows.push((key, json));
        }
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut table = txn.open_table(FIRST_RUNS).map_err(|e| self.err(e))?;
            table.retain(|_, _| false).map_err(|e| self.err(e))?;
            for (key, json) in &rows {
                table.insert(key.as_str(), json.as_slice()).map_err(|e| self.err(e))?;
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        Ok(rows.len())
    }

    /// The saved first runs, oldest first: executable, command shape and
    /// run. Unreadable ones are left out (the shape starts again).
    pub fn first_runs(&self) -> Result<Vec<(FileIdentity, String, LaunchRun)>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = match txn.open_table(FIRST_RUNS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(self.err(e)),
        };
        let mut kept = Vec::new();
        for item in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let Ok(run) = serde_json::from_slice::<KeptRun>(v.value()) else { continue };
            let (_, shape) = split_key(k.value());
            if key(&run.exe.path, shape) != k.value() {
                // Not the key it was saved under.
                continue;
            }
            kept.push((run.order, run.exe.into_owned(), shape.to_owned(), run.run.into_owned()));
        }
        kept.sort_by_key(|(order, ..)| *order);
        Ok(kept.into_iter().map(|(_, exe, shape, run)| (exe, shape, run)).collect())
    }

    /// What the replays of the profile of `exe` with shape `shape` gained
    /// (`None`: never scored, or not readable).
    pub fn benefit(&self, exe: &str, shape: &str) -> Result<Option<Benefit>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let scores = txn.open_table(SCORES).map_err(|e| self.err(e))?;
        let found = scores.get(key(exe, shape).as_str()).map_err(|e| self.err(e))?;
        Ok(found.and_then(|v| serde_json::from_slice(v.value()).ok()))
    }

    /// Every stored benefit, by (executable path, shape). Unreadable ones
    /// are left out (they start again).
    pub fn benefits(&self) -> Result<Vec<(String, String, Benefit)>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let scores = txn.open_table(SCORES).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for item in scores.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            let Ok(benefit) = serde_json::from_slice::<Benefit>(v.value()) else { continue };
            let (exe, shape) = split_key(k.value());
            out.push((exe.to_owned(), shape.to_owned(), benefit));
        }
        Ok(out)
    }

    /// Decodes a stored profile and gives it its last use from `used`
    /// (which [`Store::touch`] moves without rewriting the profile).
    fn read(
        &self,
        key: &str,
        bytes: &[u8],
        used: &impl ReadableTable<&'static str, (u64, u64)>,
    ) -> Result<Profile, StoreError> {
        let mut profile = Self::decode(key, bytes)?;
        if let Some(v) = used.get(key).map_err(|e| self.err(e))? {
            profile.last_used_s = profile.last_used_s.max(v.value().0);
        }
        Ok(profile)
    }

    /// The profile of the executable at `exe` for command shape `shape`.
    pub fn get(&self, exe: &str, shape: &str) -> Result<Option<Profile>, StoreError> {
        let key = key(exe, shape);
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
        let used = txn.open_table(USED).map_err(|e| self.err(e))?;
        let found = table.get(key.as_str()).map_err(|e| self.err(e))?;
        found.map(|v| self.read(&key, v.value(), &used)).transpose()
    }

    /// The keys of every profile of the executable at `exe`, whatever its
    /// shape (an unshaped one first).
    fn keys_of(&self, exe: &str) -> Result<Vec<String>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
        // `exe` itself, then `exe\0...`: nothing else sorts in between.
        let end = format!("{exe}\u{1}");
        let mut keys = Vec::new();
        for item in table.range(exe..end.as_str()).map_err(|e| self.err(e))? {
            keys.push(item.map_err(|e| self.err(e))?.0.value().to_owned());
        }
        Ok(keys)
    }

    /// Every profile of the executable at `exe`, one per command shape.
    /// A profile that cannot be read is this error.
    pub fn of_exe(&self, exe: &str) -> Result<Vec<Profile>, StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
        let used = txn.open_table(USED).map_err(|e| self.err(e))?;
        let end = format!("{exe}\u{1}");
        let mut out = Vec::new();
        for item in table.range(exe..end.as_str()).map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            out.push(self.read(k.value(), v.value(), &used)?);
        }
        Ok(out)
    }

    /// Forgets the profile of `exe` for shape `shape`, or with `None` every
    /// profile of `exe`. Returns how many were forgotten.
    pub fn remove(&self, exe: &str, shape: Option<&str>) -> Result<usize, StoreError> {
        let keys = match shape {
            Some(shape) => vec![key(exe, shape)],
            None => self.keys_of(exe)?,
        };
        self.unindex()?;
        let txn = self.db.begin_write().map_err(|e| self.err(e))?;
        let mut removed = 0;
        {
            let mut table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
            let mut used = txn.open_table(USED).map_err(|e| self.err(e))?;
            let mut scores = txn.open_table(SCORES).map_err(|e| self.err(e))?;
            for key in &keys {
                removed += usize::from(table.remove(key.as_str()).map_err(|e| self.err(e))?.is_some());
                used.remove(key.as_str()).map_err(|e| self.err(e))?;
                scores.remove(key.as_str()).map_err(|e| self.err(e))?;
            }
        }
        txn.commit().map_err(|e| self.err(e))?;
        self.index();
        Ok(removed)
    }

    /// Calls `f` with every stored profile, decoded (or why it is not),
    /// and its stored size, in one read transaction.
    fn each(&self, mut f: impl FnMut(&str, Result<Profile, StoreError>, u64)) -> Result<(), StoreError> {
        let txn = self.db.begin_read().map_err(|e| self.err(e))?;
        let table = txn.open_table(PROFILES).map_err(|e| self.err(e))?;
        let used = txn.open_table(USED).map_err(|e| self.err(e))?;
        for item in table.iter().map_err(|e| self.err(e))? {
            let (k, v) = item.map_err(|e| self.err(e))?;
            f(k.value(), self.read(k.value(), v.value(), &used), v.value().len() as u64);
        }
        Ok(())
    }

    /// Every profile that decodes, and the keys of those that do not.
    pub fn all(&self) -> Result<(Vec<Profile>, Vec<String>), StoreError> {
        let (mut good, mut bad) = (Vec::new(), Vec::new());
        self.each(|exe, decoded, _| match decoded {
            Ok(p) => good.push(p),
            Err(_) => bad.push(exe.to_owned()),
        })?;
        Ok((good, bad))
    }

    /// The stored profiles that cannot be read — written by a newer
    /// predictio (a version this one does not know) or damaged — each with
    /// why. [`Store::list`] and [`Store::all`] pass over them; `get` of one
    /// is this error.
    pub fn unreadable(&self) -> Result<Vec<StoreError>, StoreError> {
        let mut out = Vec::new();
        self.each(|_, decoded, _| out.extend(decoded.err()))?;
        Ok(out)
    }

    /// One summary per stored profile that can be read (see
    /// [`Store::unreadable`] for the others).
    pub fn list(&self) -> Result<Vec<Summary>, StoreError> {
        let mut out = Vec::new();
        let mut benefits: std::collections::HashMap<String, Benefit> =
            self.benefits()?.into_iter().map(|(exe, shape, b)| (key(&exe, &shape), b)).collect();
        self.each(|k, decoded, stored_bytes| {
            if let Ok(p) = decoded {
                out.push(Summary {
                    benefit: benefits.remove(k).map(|b| BenefitSummary::of(&b)),
                    exe: p.exe.path.clone(),
                    shape: p.shape.clone(),
                    runs: p.runs,
                    files: p.files.len(),
                    pages: p.pages(),
                    stored_bytes,
                    last_used_s: p.last_used_s,
                });
            }
        })?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use predictio::PageRange;
    use predictio::launch::profile::{FileIdentity, LaunchRun, LearnLimits, RunFile};

    fn profile(exe: &str, pages: u64, last_used_s: u64) -> Profile {
        let ident = FileIdentity { path: exe.into(), dev: 1, ino: 2, size: 1 << 30, mtime_ns: 3 };
        let mut p = Profile::new(ident.clone(), "");
        let accesses = (0..pages).map(|i| PageRange::page(i * 7)).collect();
        p.merge(
            &LaunchRun {
                files: vec![RunFile { identity: ident, first_touch_ms: 0.0, accesses, access_ms: Vec::new() }],
                window_ms: 5.0,
                lookups: Vec::new(),
            },
            &LearnLimits::default(),
        );
        p.last_used_s = last_used_s;
        p
    }

    #[test]
    fn a_new_store_directory_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("a/store");
        Store::open(&store_dir, 1 << 20, Duration::from_secs(1)).unwrap();
        let mode = std::fs::metadata(&store_dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
    }

    /// Regression: the database file was created 0644 (by the umask) in a
    /// directory the unit's StateDirectory= had made 0755, so every user
    /// could read which files other users' launches touched.
    #[test]
    fn the_store_file_is_private_and_an_existing_one_is_made_so() {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap());
        let path = dir.path().join(FILE_NAME);
        assert_eq!(mode(&path), 0o600);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        drop(Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap());
        assert_eq!(mode(&path), 0o600, "an existing readable store is made private");
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        names.sort();
        assert_eq!(names, [keys::KEYS_FILE, FILE_NAME], "no temporary file is left behind");
        assert_eq!(mode(&dir.path().join(keys::KEYS_FILE)), 0o600);
    }

    /// The key index follows every write that adds or removes profiles, so
    /// that a command without a profile is told so without the database.
    #[test]
    fn the_key_index_lists_what_the_store_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", "x"), Some(false), "a new store's index is empty");
        store.put(&profile("/usr/bin/a", 3, 1)).unwrap();
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", ""), Some(true));
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", "x"), Some(false));
        store.touch("/usr/bin/a", "").unwrap();
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", ""), Some(true), "a touch keeps the index");
        store.remove("/usr/bin/a", None).unwrap();
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", ""), Some(false));
        drop(store);

        // An index lost (a crash between removing it and writing it again)
        // is written again on open.
        std::fs::remove_file(dir.path().join(keys::KEYS_FILE)).unwrap();
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", "x"), None);
        drop(Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap());
        assert_eq!(keys::may_hold(dir.path(), "/usr/bin/a", "x"), Some(false));
    }

    /// Regression: the database was opened by its path, following a
    /// symbolic link put there, and root overwrote the file it named.
    #[test]
    fn a_symbolic_link_or_a_fifo_as_the_store_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"root's file").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join(FILE_NAME)).unwrap();
        let err = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's file", "the link's target is untouched");
        std::fs::remove_file(dir.path().join(FILE_NAME)).unwrap();
        assert!(std::process::Command::new("mkfifo").arg(dir.path().join(FILE_NAME)).status().unwrap().success());
        let (tx, rx) = std::sync::mpsc::channel();
        let at = dir.path().to_path_buf();
        std::thread::spawn(move || {
            let _ = tx.send(Store::open(&at, DEFAULT_CAP_BYTES, Duration::ZERO).map(drop).map_err(|e| e.to_string()));
        });
        let opened = rx.recv_timeout(Duration::from_secs(10)).expect("opening a FIFO must not wait");
        assert!(opened.as_ref().is_err_and(|e| e.contains("not a regular file")), "{opened:?}");
    }

    #[test]
    fn a_store_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("store");
        std::fs::create_dir(&store_dir).unwrap();
        std::fs::set_permissions(&store_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = Store::open(&store_dir, DEFAULT_CAP_BYTES, Duration::ZERO).unwrap_err();
        let text = err.to_string();
        assert!(text.contains(&store_dir.display().to_string()) && text.contains("mode 0777"), "{text}");
        assert!(!store_dir.join(FILE_NAME).exists(), "nothing is written there");
    }

    /// Regression: a disk that filled while the store was being made left a
    /// database file that stayed unreadable ("invalid data") after space
    /// was freed, and learning stayed off. Such a file (here: what that
    /// left, a header cut short over zeros) is moved aside and a new store
    /// started.
    #[test]
    fn a_broken_store_is_moved_aside_and_a_new_one_started() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let mut broken = vec![0u8; 1_589_248];
        broken[..32].copy_from_slice(&[
            0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 16, 0, 0, 0x82, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 1, 1, 0, 0,
        ]);
        broken[32] = 0;
        broken[33] = 1;
        broken[64] = 2;
        std::fs::write(&path, &broken).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(Database::create(&path).is_err(), "redb itself cannot open it");
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).expect("a new store");
        store.put(&profile("/x/a", 10, 1)).unwrap();
        drop(store);
        let aside: Vec<PathBuf> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("launch.redb.broken-"))
            .collect();
        assert_eq!(aside.len(), 1, "the broken file is kept aside");
        assert_eq!(std::fs::read(&aside[0]).unwrap(), broken);
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        assert!(store.get("/x/a", "").unwrap().is_some());
    }

    #[test]
    fn roundtrip_list_remove() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        let p = profile("/usr/bin/a", 50, 10);
        store.put(&p).unwrap();
        drop(store);
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        assert_eq!(store.get("/usr/bin/a", "").unwrap().as_ref(), Some(&p));
        assert_eq!(store.get("/usr/bin/b", "").unwrap(), None);
        let list = store.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!((list[0].runs, list[0].files, list[0].pages), (1, 1, 50));
        assert_eq!(store.remove("/usr/bin/a", Some("")).unwrap(), 1);
        assert_eq!(store.remove("/usr/bin/a", Some("")).unwrap(), 0);
        assert!(store.all().unwrap().0.is_empty());
    }

    #[test]
    fn each_command_shape_has_its_own_profile() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        let shaped = |exe: &str, shape: &str, pages| Profile { shape: shape.into(), ..profile(exe, pages, 5) };
        let version = shaped("/x/rustc", "rustc --version", 10);
        let hello = shaped("/x/rustc", "rustc hello.rs", 20);
        for p in [&version, &hello, &profile("/x/rustc", 30, 5), &shaped("/x/rustc-ish", "rustc --version", 40)] {
            store.put(p).unwrap();
        }
        assert_eq!(store.get("/x/rustc", "rustc --version").unwrap().as_ref(), Some(&version));
        assert_eq!(store.get("/x/rustc", "rustc hello.rs").unwrap().as_ref(), Some(&hello));
        assert_eq!(store.get("/x/rustc", "rustc -V").unwrap(), None);
        let shapes: Vec<String> = store.of_exe("/x/rustc").unwrap().into_iter().map(|p| p.shape).collect();
        assert_eq!(shapes, ["", "rustc --version", "rustc hello.rs"], "the unshaped one first, no sibling path");
        assert_eq!(store.remove("/x/rustc", None).unwrap(), 3);
        let left: Vec<(String, String)> = store.list().unwrap().into_iter().map(|s| (s.exe, s.shape)).collect();
        assert_eq!(left, [("/x/rustc-ish".to_owned(), "rustc --version".to_owned())]);
    }

    #[test]
    fn cap_evicts_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&profile("/x/p0", 200, 0)).unwrap().len() as u64;
        let store = Store::open(dir.path(), one * 3 + one / 2, Duration::ZERO).unwrap();
        for (i, last) in [(0, 50), (1, 10), (2, 40)] {
            assert!(store.put(&profile(&format!("/x/p{i}"), 200, last)).unwrap().is_empty());
        }
        let evicted = store.put(&profile("/x/p3", 200, 60)).unwrap();
        assert_eq!(evicted, vec!["/x/p1".to_owned()], "the least recently used goes first");
        let mut left: Vec<String> = store.list().unwrap().into_iter().map(|s| s.exe).collect();
        left.sort();
        assert_eq!(left, vec!["/x/p0", "/x/p2", "/x/p3"]);
    }

    #[test]
    fn a_touch_moves_the_last_use_without_rewriting_the_profile() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&profile("/x/p0", 200, 0)).unwrap().len() as u64;
        let store = Store::open(dir.path(), one * 2 + one / 2, Duration::ZERO).unwrap();
        store.put(&profile("/x/old", 200, 10)).unwrap();
        store.put(&profile("/x/mid", 200, 20)).unwrap();
        let stored = |store: &Store| {
            let txn = store.db.begin_read().unwrap();
            let table = txn.open_table(PROFILES).unwrap();
            table.get("/x/old").unwrap().unwrap().value().to_vec()
        };
        let before = stored(&store);
        store.touch("/x/old", "").unwrap();
        assert_eq!(stored(&store), before, "the profile's bytes are not rewritten");
        let old = store.get("/x/old", "").unwrap().unwrap();
        assert!(old.last_used_s > 1_000_000_000, "get sees the touch: {}", old.last_used_s);
        let listed = store.list().unwrap();
        assert!(listed.iter().any(|s| s.exe == "/x/old" && s.last_used_s == old.last_used_s), "{listed:?}");
        // /x/mid is now the least recently used.
        let evicted = store.put(&profile("/x/new", 200, 30)).unwrap();
        assert_eq!(evicted, vec!["/x/mid".to_owned()]);
        store.touch("/x/missing", "").unwrap();
        assert_eq!(store.get("/x/missing", "").unwrap(), None, "a touch of no profile makes none");
    }

    #[test]
    fn touch_all_marks_the_stored_ones_in_one_commit() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        for (exe, last) in [("/x/a", 10), ("/x/b", 20), ("/x/c", 30)] {
            store.put(&profile(exe, 50, last)).unwrap();
        }
        let marked = store.touch_all(&[("/x/a", ""), ("/x/gone", ""), ("/x/c", ""), ("/x/a", "other shape")]).unwrap();
        assert_eq!(marked, 2);
        let last = |exe: &str| store.get(exe, "").unwrap().unwrap().last_used_s;
        assert!(last("/x/a") > 1_000_000_000 && last("/x/c") > 1_000_000_000);
        assert_eq!(last("/x/b"), 20, "untouched");
        assert_eq!(store.get("/x/gone", "").unwrap(), None);
        assert_eq!(store.touch_all(&[]).unwrap(), 0);
    }

    /// A profile's benefit is kept beside it, listed with it, and goes
    /// with it when it is forgotten or evicted; none is written for a
    /// profile that is not stored.
    #[test]
    fn benefits_are_kept_beside_their_profile_and_go_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&profile("/x/p0", 200, 0)).unwrap().len() as u64;
        let store = Store::open(dir.path(), one * 2 + one / 2, Duration::ZERO).unwrap();
        store.put(&profile("/x/a", 200, 10)).unwrap();
        store.put(&profile("/x/b", 200, 20)).unwrap();
        let mut b = Benefit::default();
        b.add_cold(300);
        b.add_replay(predictio::launch::ReplayScore { replayed: 10, used: Some(1), wasted: Some(9), late: 0, ms: 40 });
        b.retired = Some(predictio::launch::Retired { why: "no use".into(), at_s: 5 });
        assert_eq!(store.put_benefits(&[("/x/a", "", &b), ("/x/gone", "", &b)]).unwrap(), 1);
        assert_eq!(store.benefit("/x/a", "").unwrap().as_ref(), Some(&b));
        assert_eq!(store.benefit("/x/gone", "").unwrap(), None, "no profile, no benefit");
        drop(store);
        let store = Store::open(dir.path(), one * 2 + one / 2, Duration::ZERO).unwrap();
        let listed = store.list().unwrap();
        let a = listed.iter().find(|s| s.exe == "/x/a").unwrap().benefit.clone().expect("listed with its benefit");
        assert_eq!((a.replays_scored, a.cold_ms, a.retired.as_deref()), (1, Some(300), Some("no use")));
        assert!(a.used_share.is_some_and(|u| (u - 0.1).abs() < 1e-9));
        assert_eq!(listed.iter().find(|s| s.exe == "/x/b").unwrap().benefit, None);
        // Evicted (least recently used), its benefit goes with it.
        store.put(&profile("/x/c", 200, 30)).unwrap();
        assert_eq!(store.get("/x/a", "").unwrap(), None);
        assert_eq!(store.benefit("/x/a", "").unwrap(), None);
        store.put_benefits(&[("/x/c", "", &b)]).unwrap();
        assert_eq!(store.remove("/x/c", None).unwrap(), 1);
        assert!(store.benefits().unwrap().is_empty(), "forgotten with its profile");
    }

    #[test]
    fn a_version_1_store_is_upgraded_with_its_last_uses() {
        let dir = tempfile::tempdir().unwrap();
        let one = serde_json::to_vec(&profile("/x/p0", 200, 0)).unwrap().len() as u64;
        let (a, b) = (profile("/x/a", 200, 50), profile("/x/b", 200, 10));
        {
            // A store as version 1 wrote it: the profiles table alone.
            let db = Database::create(dir.path().join(FILE_NAME)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("version", 1).unwrap();
            {
                let mut table = txn.open_table(PROFILES).unwrap();
                for p in [&a, &b] {
                    table.insert(p.exe.path.as_str(), serde_json::to_vec(p).unwrap().as_slice()).unwrap();
                }
            }
            txn.commit().unwrap();
        }
        let store = Store::open(dir.path(), one * 2 + one / 2, Duration::ZERO).unwrap();
        assert_eq!(store.get("/x/a", "").unwrap().as_ref(), Some(&a));
        let evicted = store.put(&profile("/x/c", 200, 60)).unwrap();
        assert_eq!(evicted, vec!["/x/b".to_owned()], "the upgrade kept each profile's last use and size");
        drop(store);
        let db = Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_read().unwrap();
        let version = txn.open_table(META).unwrap().get("version").unwrap().unwrap().value();
        assert_eq!(version, STORE_VERSION);
    }

    #[test]
    fn other_version_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Database::create(dir.path().join(FILE_NAME)).unwrap();
            let txn = db.begin_write().unwrap();
            txn.open_table(META).unwrap().insert("version", 99).unwrap();
            txn.commit().unwrap();
        }
        let err = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap_err();
        assert!(matches!(err, StoreError::Version { found: 99, .. }), "{err}");
        assert!(err.to_string().contains("version 99"));
    }

    #[test]
    fn unreadable_profiles_are_listed_apart_with_why() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), DEFAULT_CAP_BYTES, Duration::ZERO).unwrap();
        store.put(&profile("/x/good", 10, 0)).unwrap();
        let mut newer = serde_json::to_value(profile("/x/newer", 10, 0)).unwrap();
        newer["version"] = 99.into();
        {
            let txn = store.db.begin_write().unwrap();
            {
                let mut table = txn.open_table(PROFILES).unwrap();
                table.insert("/x/newer", serde_json::to_vec(&newer).unwrap().as_slice()).unwrap();
                table.insert("/x/garbage", b"{ not json".as_slice()).unwrap();
            }
            txn.commit().unwrap();
        }
        let listed: Vec<String> = store.list().unwrap().into_iter().map(|s| s.exe).collect();
        assert_eq!(listed, vec!["/x/good"]);
        let bad: Vec<String> = store.unreadable().unwrap().iter().map(|e| e.to_string()).collect();
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad.iter().any(|e| e.contains("/x/newer") && e.contains("version 99")), "{bad:?}");
        assert!(bad.iter().any(|e| e.starts_with("profile of /x/garbage")), "{bad:?}");
        assert!(store.get("/x/newer", "").is_err(), "get of an unreadable profile is its error");
    }
}
