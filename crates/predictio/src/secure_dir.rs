//! Directories a privileged process may trust: its own, and on a path that
//! nobody else can redirect.
//!
//! The daemon runs as root and keeps its sockets and its profile store in
//! directories named by its configuration. If someone else could write one
//! of them, or any directory on the way to it, they could swap a socket
//! for their own (and be handed what was meant for the daemon's), or put a
//! symbolic link where the store is written (and have root overwrite any
//! file). [`check`] refuses such a directory, saying which path and why;
//! [`prepare`] creates what is missing first, with the mode asked for.
//!
//! The rules, for the process's effective user (root, for the daemon):
//!
//! - the directory itself is owned by that user and writable by no one
//!   else (no group or world write bit);
//! - every directory on the way to it is owned by root or by that user and
//!   is not writable by others, unless it is sticky (`/tmp`: others cannot
//!   rename or remove what is not theirs there);
//! - a symbolic link on the way is followed only if root or that user owns
//!   it (in a sticky directory, its owner could still point it elsewhere),
//!   and its target is checked by the same rules.
//!
//! Once a directory passes, nothing in it or on the way to it can be
//! replaced by anyone but root or its owner, so using its paths afterwards
//! is safe.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Symbolic links followed on one path at most (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// A directory that is not safe to use, and why.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}", path = path.display())]
pub struct UnsafeDir {
    /// The offending path (the directory, or the one on its way that fails).
    pub path: PathBuf,
    /// Why, for a person.
    pub why: String,
}

impl UnsafeDir {
    fn new(path: &Path, why: impl Into<String>) -> Self {
        Self { path: path.to_path_buf(), why: why.into() }
    }
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks that `dir` is a directory the process can trust (see the module
/// docs).
pub fn check(dir: &Path) -> Result<(), UnsafeDir> {
    walk(dir, true)
}

/// Creates what is missing of `dir` (each new directory with exactly
/// `mode`, whatever the umask), then [`check`]s it. The directories that
/// exist on the way are checked before anything is created in them.
pub fn prepare(dir: &Path, mode: u32) -> Result<(), UnsafeDir> {
    if !dir.is_absolute() {
        return Err(UnsafeDir::new(dir, "not an absolute path"));
    }
    let mut missing = Vec::new();
    let mut existing = dir;
    while std::fs::symlink_metadata(existing).is_err() {
        missing.push(existing);
        match existing.parent() {
            Some(up) => existing = up,
            None => break,
        }
    }
    if !missing.is_empty() {
        walk(existing, false)?;
        for path in missing.into_iter().rev() {
            match std::fs::DirBuilder::new().mode(mode).create(path) {
                Ok(()) => std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                    .map_err(|e| UnsafeDir::new(path, format!("cannot set its mode: {e}")))?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(UnsafeDir::new(path, format!("cannot be created: {e}"))),
            }
        }
    }
    check(dir)
}

/// Resolves `dir` component by component, checking each directory (the
/// last strictly when `strict`) and each symbolic link on the way.
fn walk(dir: &Path, strict: bool) -> Result<(), UnsafeDir> {
    if !dir.is_absolute() {
        return Err(UnsafeDir::new(dir, "not an absolute path"));
    }
    let euid = euid();
    let mut todo: VecDeque<OsString> = names(dir);
    let mut at = PathBuf::from("/");
    let mut links = 0;
    ancestor(&at, euid, todo.is_empty() && strict)?;
    while let Some(name) = todo.pop_front() {
        if name == ".." {
            at.pop();
            continue;
        }
        let next = at.join(&name);
        let meta = std::fs::symlink_metadata(&next).map_err(|e| UnsafeDir::new(&next, e.to_string()))?;
        if meta.file_type().is_symlink() {
            links += 1;
            if links > MAX_LINKS {
                return Err(UnsafeDir::new(dir, "too many symbolic links"));
            }
            if meta.uid() != 0 && meta.uid() != euid {
                return Err(UnsafeDir::new(
                    &next,
                    format!("a symbolic link owned by uid {}, who could point it elsewhere", meta.uid()),
                ));
            }
            let target = std::fs::read_link(&next).map_err(|e| UnsafeDir::new(&next, e.to_string()))?;
            if target.is_absolute() {
                at = PathBuf::from("/");
            }
            for part in names(&target).into_iter().rev() {
                todo.push_front(part);
            }
            continue;
        }
        at = next;
        ancestor(&at, euid, todo.is_empty() && strict)?;
    }
    Ok(())
}

/// The components of `path` to walk: names and `..`, in order.
fn names(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// Checks the directory `path` (already resolved): the last one (`own`)
/// must be the process's user's and private to writes; one on the way,
/// root's or that user's, and sticky if others may write it.
fn ancestor(path: &Path, euid: u32, own: bool) -> Result<(), UnsafeDir> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| UnsafeDir::new(path, e.to_string()))?;
    if !meta.is_dir() {
        return Err(UnsafeDir::new(path, "not a directory"));
    }
    let mode = meta.permissions().mode();
    let others_write = mode & 0o022 != 0;
    if own {
        if meta.uid() != euid {
            return Err(UnsafeDir::new(path, format!("owned by uid {}, not by uid {euid} (this process)", meta.uid())));
        }
        if others_write {
            return Err(UnsafeDir::new(
                path,
                format!("writable by its group or by everyone (mode {:04o}); it must be private", mode & 0o7777),
            ));
        }
        return Ok(());
    }
    if meta.uid() != 0 && meta.uid() != euid {
        return Err(UnsafeDir::new(path, format!("owned by uid {}, who could replace what is under it", meta.uid())));
    }
    if others_write && mode & 0o1000 == 0 {
        return Err(UnsafeDir::new(
            path,
            format!("writable by its group or by everyone and not sticky (mode {:04o})", mode & 0o7777),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn a_private_directory_passes_and_a_writable_one_is_refused() {
        let root = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let dir = root.path().join("own");
        prepare(&dir, 0o700).expect("created and checked");
        assert_eq!(std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o777, 0o700);
        chmod(&dir, 0o770);
        let err = check(&dir).expect_err("group-writable");
        assert_eq!(err.path, dir);
        assert!(err.why.contains("mode 0770"), "{err}");
        chmod(&dir, 0o755);
        check(&dir).expect("readable by others is fine");
        // A directory on the way that others may write (not sticky).
        chmod(root.path(), 0o777);
        let err = check(&dir).expect_err("world-writable parent");
        assert_eq!(err.path, root.path());
        chmod(root.path(), 0o1777);
        check(&dir).expect("a sticky parent is fine (like /tmp)");
        chmod(root.path(), 0o700);
        assert!(check(Path::new("relative")).is_err());
        assert!(check(&root.path().join("missing")).is_err());
    }

    #[test]
    fn new_directories_get_the_mode_asked_for_whatever_the_umask() {
        let root = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let dir = root.path().join("a/b");
        prepare(&dir, 0o755).expect("created");
        for d in [root.path().join("a"), dir] {
            assert_eq!(std::fs::metadata(&d).expect("stat").permissions().mode() & 0o7777, 0o755);
        }
    }

    #[test]
    fn symbolic_links_on_the_way_are_followed_and_checked() {
        let root = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let real = root.path().join("real");
        prepare(&real, 0o700).expect("created");
        let link = root.path().join("link");
        std::os::unix::fs::symlink("real", &link).expect("symlink");
        check(&link).expect("a link of this user to a good directory");
        chmod(&real, 0o777);
        let err = check(&link).expect_err("the target is checked");
        assert_eq!(err.path, real);
        chmod(&real, 0o700);
        let file = root.path().join("file");
        std::fs::write(&file, b"x").expect("write");
        assert!(check(&file).expect_err("a file").why.contains("not a directory"));
    }

    /// Everything but the root-owned checks runs as any user; as root, a
    /// directory (or a link) owned by someone else is refused too.
    #[test]
    fn directories_and_links_of_other_users_are_refused() {
        if euid() != 0 {
            crate::testing::skip("needs root to make files of another user");
            return;
        }
        let root = tempfile::tempdir_in("/var/tmp").expect("tempdir");
        let theirs = root.path().join("theirs");
        prepare(&theirs, 0o700).expect("created");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let err = check(&theirs).expect_err("owned by nobody");
        assert!(err.why.contains("uid 65534"), "{err}");
        let inside = theirs.join("run");
        assert!(prepare(&inside, 0o755).is_err(), "nothing is created in another user's directory");
        assert!(!inside.exists());
        let own = root.path().join("own");
        prepare(&own, 0o700).expect("created");
        let link = root.path().join("link");
        std::os::unix::fs::symlink(&own, &link).expect("symlink");
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).expect("lchown");
        let err = check(&link).expect_err("a link of nobody's");
        assert_eq!(err.path, link);
    }
}
