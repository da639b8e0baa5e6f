//! Naming observed files: kernel observation reports `(dev, ino)`; a profile
//! needs a path to open the file again at the next launch.
//!
//! First through the process that touched the file (`/proc/PID/fd`,
//! `/proc/PID/map_files`, while it is alive), then by opening the inode
//! itself (`open_by_handle_at`, root only, ext4-style handles) and reading
//! the path of the dentry the kernel still has cached for it, and last by
//! the path it was named by before (a launch is named after it exited, and
//! the dentries of the files it closed may be reclaimed by then: a second
//! launch of a program names what its first could). Every name is checked:
//! the path must stat to the same `(dev, ino)`. Does I/O; used by the
//! recorder's owners, never by a policy.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;

use super::profile::FileIdentity;
use crate::file::FileId;

/// Paths a [`Namer`] remembers at most; when full it forgets them all
/// (about 100 bytes each).
const MAX_KNOWN: usize = 8192;

/// Names files (see the module docs). Caches mount descriptors per device
/// and the paths it found, by file.
#[derive(Debug, Default)]
pub struct Namer {
    mounts: HashMap<u64, Option<std::fs::File>>,
    known: HashMap<FileId, Box<str>>,
}

impl Namer {
    /// A namer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The identity of `file`, touched by `pid`, if a checked path is found.
    pub fn name(&mut self, file: FileId, pid: u32) -> Option<FileIdentity> {
        let found = self.through_process(file, pid).or_else(|| self.through_inode(file));
        let Some(found) = found else {
            return self.known.get(&file).and_then(|path| checked(path, file));
        };
        if self.known.len() >= MAX_KNOWN && !self.known.contains_key(&file) {
            self.known.clear();
        }
        self.known.insert(file, found.path.as_str().into());
        Some(found)
    }

    fn through_process(&self, file: FileId, pid: u32) -> Option<FileIdentity> {
        if pid == 0 {
            return None;
        }
        for dir in ["map_files", "fd"] {
            let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/{dir}")) else { continue };
            for entry in entries.flatten() {
                if let Ok(meta) = std::fs::metadata(entry.path())
                    && meta.dev() == file.dev
                    && meta.ino() == file.ino
                    && let Ok(target) = std::fs::read_link(entry.path())
                    && let Some(found) = checked(&target.to_string_lossy(), file)
                {
                    return Some(found);
                }
            }
        }
        None
    }

    fn through_inode(&mut self, file: FileId) -> Option<FileIdentity> {
        let mount = self.mounts.entry(file.dev).or_insert_with(|| mount_of(file.dev)).as_ref()?;
        use std::os::fd::AsFd;
        let opened = crate::sys::open_by_inode(mount.as_fd(), file.ino).ok()?;
        let target = std::fs::read_link(crate::sys::fd_path(opened.as_fd())).ok()?;
        checked(&target.to_string_lossy(), file)
    }
}

/// The identity at `path` when it is a regular file with identity `file`.
fn checked(path: &str, file: FileId) -> Option<FileIdentity> {
    if !path.starts_with('/') || path.ends_with(" (deleted)") {
        return None;
    }
    let meta = std::fs::metadata(path).ok()?;
    (meta.is_file() && meta.dev() == file.dev && meta.ino() == file.ino)
        .then(|| FileIdentity::from_metadata(path, &meta))
}

/// A descriptor on the root of some mount of device `dev` (from
/// `/proc/self/mountinfo`).
fn mount_of(dev: u64) -> Option<std::fs::File> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    for line in info.lines() {
        let mut fields = line.split(' ');
        let (Some(_), Some(_), Some(majmin), Some(_), Some(point)) =
            (fields.next(), fields.next(), fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let point = point.replace("\\040", " ");
        if let Ok(meta) = std::fs::metadata(&point)
            && meta.dev() == dev
            && majmin.contains(':')
        {
            return std::fs::File::open(&point).ok();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_file_this_process_has_open() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lib.so");
        std::fs::write(&path, b"x").unwrap();
        let held = std::fs::File::open(&path).unwrap();
        let meta = held.metadata().unwrap();
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        let found = Namer::new().name(id, std::process::id()).expect("named through /proc/self/fd");
        assert_eq!(found.path, path.canonicalize().unwrap().display().to_string());
    }

    #[test]
    fn names_a_closed_file_by_inode_as_root() {
        if !crate::testing::is_root() && crate::testing::skip("open_by_handle_at needs root") {
            return;
        }
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let path = dir.path().join("closed.so");
        std::fs::write(&path, b"x").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        // Nobody has it open: only the inode route can name it.
        let found = Namer::new().through_inode(id);
        let fs_type = std::process::Command::new("stat").args(["-f", "-c", "%T", "/var/tmp"]).output().unwrap();
        if String::from_utf8_lossy(&fs_type.stdout).trim() != "ext2/ext3" {
            eprintln!("/var/tmp is not ext4; inode naming result: {found:?}");
            return;
        }
        assert_eq!(found.expect("named by inode").path, path.canonicalize().unwrap().display().to_string());
        assert!(Namer::new().name(FileId { dev: meta.dev(), ino: u64::from(u32::MAX) }, 0).is_none());
    }

    /// Regression: a launch is named after it exited, by inode; with the
    /// dentries of the files it had closed reclaimed by then, most of its
    /// files went unnamed (gdb's first launch: 26 of 134), and a profile
    /// learned from such launches held only its shared libraries. A file
    /// named once is named by that path again, checked.
    #[test]
    fn a_file_named_once_is_named_again_by_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mod.py");
        std::fs::write(&path, b"x").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let id = FileId { dev: meta.dev(), ino: meta.ino() };
        let mut namer = Namer::new();
        {
            let _held = std::fs::File::open(&path).unwrap();
            namer.name(id, std::process::id()).expect("named while open");
        }
        // As if neither the process nor the inode route could name it now.
        let mut gone = id;
        gone.ino = u64::MAX;
        assert!(namer.name(gone, 0).is_none(), "never named: nothing to fall back on");
        namer.mounts.insert(id.dev, None);
        let again = namer.name(id, 0).expect("named by the path it had");
        assert_eq!(again.path, path.canonicalize().unwrap().display().to_string());
        // The path is checked: a file that is gone is not named.
        std::fs::remove_file(&path).unwrap();
        assert!(namer.name(id, 0).is_none(), "its path no longer stats to it");
    }
}
