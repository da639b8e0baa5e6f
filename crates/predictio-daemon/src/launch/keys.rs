//! The store's key index: `launch.keys` beside the database, the hashes of
//! the keys of every stored profile, so that a command with no profile
//! (most of them) is told so by reading one small file, without opening
//! the database (whose open and close cost two or more fsyncs and, cold,
//! tens of milliseconds).
//!
//! It is a hint, never trusted over the database: the
//! [`Store`](super::store::Store) removes it before every commit that adds
//! or removes profiles and writes it again after (and on open when it is
//! missing), so that an index that is there lists every stored key, even
//! after a crash between the two. [`may_hold`] answers "no" only from such
//! an index; anything else (no index, a malformed one, a hash that is
//! there) sends the caller to the database.
//!
//! Format: the 8 bytes `PIOKEYS1`, a little-endian `u64` count, then that
//! many little-endian `u64` FNV-1a hashes of the keys, sorted.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use super::store::key;

/// File name of the index in the store's directory.
pub const KEYS_FILE: &str = "launch.keys";

const MAGIC: &[u8; 8] = b"PIOKEYS1";

/// The most keys an index is read with: far beyond what the store's size
/// cap lets it hold (a profile is hundreds of bytes at least).
const MAX_KEYS: u64 = 1 << 20;

/// FNV-1a, 64 bits: stable across builds and versions, as a file format
/// needs.
fn hash(key: &str) -> u64 {
    key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Writes the index of `keys` in `dir`: under a temporary name, then
/// renamed into place, so that a reader sees an old index or the new one.
/// Not synced: an index lost or torn by a crash reads as missing.
pub(crate) fn write<'a>(dir: &Path, keys: impl Iterator<Item = &'a str>) -> std::io::Result<()> {
    let mut hashes: Vec<u64> = keys.map(hash).collect();
    hashes.sort_unstable();
    hashes.dedup();
    let mut bytes = Vec::with_capacity(16 + 8 * hashes.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(hashes.len() as u64).to_le_bytes());
    for h in &hashes {
        bytes.extend_from_slice(&h.to_le_bytes());
    }
    let tmp = dir.join(format!("{KEYS_FILE}.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let written = File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut file| file.write_all(&bytes))
        .and_then(|()| std::fs::rename(&tmp, dir.join(KEYS_FILE)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether the index in `dir` is missing.
pub(crate) fn missing(dir: &Path) -> bool {
    std::fs::symlink_metadata(dir.join(KEYS_FILE)).is_err()
}

/// Removes the index in `dir` before a commit that changes the stored
/// keys: until it is written again, readers go to the database.
pub(crate) fn invalidate(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(dir.join(KEYS_FILE)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Whether the store in `dir` may hold a profile of `exe` with command
/// shape `shape`: `Some(false)` when the index does not list its key,
/// `Some(true)` when it does, `None` when there is no index to go by
/// (missing, not a private regular file of this user's, or malformed). Only `Some(false)` may be
/// acted on: it is a reason not to open the database.
pub fn may_hold(dir: &Path, exe: &str, shape: &str) -> Option<bool> {
    let path = dir.join(KEYS_FILE);
    let mut file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.uid() != predictio::secure_dir::euid() || meta.mode() & 0o077 != 0 {
        return None;
    }
    if meta.len() < 16 || meta.len() > 16 + 8 * MAX_KEYS {
        return None;
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    Read::by_ref(&mut file).take(16 + 8 * MAX_KEYS).read_to_end(&mut bytes).ok()?;
    parse(&bytes).map(|hashes| hashes.binary_search(&hash(&key(exe, shape))).is_ok())
}

/// The sorted hashes of an index, or `None` when it is malformed.
fn parse(bytes: &[u8]) -> Option<Vec<u64>> {
    let (magic, rest) = bytes.split_first_chunk::<8>()?;
    let (count, rest) = rest.split_first_chunk::<8>()?;
    let count = u64::from_le_bytes(*count);
    if magic != MAGIC || count > MAX_KEYS || rest.len() as u64 != 8 * count {
        return None;
    }
    let hashes: Vec<u64> = rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
    hashes.is_sorted().then_some(hashes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_answers_for_its_keys_and_reads_nothing_else_as_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(missing(dir.path()));
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), None);
        let keys = [key("/usr/bin/cc", "c"), key("/usr/bin/true", "")];
        write(dir.path(), keys.iter().map(String::as_str)).expect("write");
        assert!(!missing(dir.path()));
        assert_eq!(may_hold(dir.path(), "/usr/bin/cc", "c"), Some(true));
        assert_eq!(may_hold(dir.path(), "/usr/bin/true", ""), Some(true));
        assert_eq!(may_hold(dir.path(), "/usr/bin/cc", "S"), Some(false));
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), Some(false));

        // Invalidated before a commit: no answer until written again.
        invalidate(dir.path()).expect("invalidate");
        invalidate(dir.path()).expect("invalidating no index is no error");
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), None);
    }

    #[test]
    fn a_malformed_or_shared_index_is_no_answer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let index = dir.path().join(KEYS_FILE);
        for bytes in [&b"PIOKEYS1"[..], b"PIOKEYS1\x01\0\0\0\0\0\0\0", b"XXXXXXXX\0\0\0\0\0\0\0\0"] {
            std::fs::write(&index, bytes).expect("write");
            std::fs::set_permissions(&index, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
            assert_eq!(may_hold(dir.path(), "/bin/ls", ""), None, "{bytes:?}");
        }
        let mut unsorted = MAGIC.to_vec();
        unsorted.extend_from_slice(&2u64.to_le_bytes());
        unsorted.extend_from_slice(&9u64.to_le_bytes());
        unsorted.extend_from_slice(&3u64.to_le_bytes());
        assert_eq!(parse(&unsorted), None);

        write(dir.path(), std::iter::empty()).expect("write");
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), Some(false));
        std::fs::set_permissions(&index, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), None, "an index others may write is not used");
        std::fs::remove_file(&index).expect("rm");
        std::os::unix::fs::symlink("/dev/null", &index).expect("symlink");
        assert_eq!(may_hold(dir.path(), "/bin/ls", ""), None, "never read through a link");
    }
}
