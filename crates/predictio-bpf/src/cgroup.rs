//! Resolving a cgroup v2 directory into what the BPF filter compares: its id
//! (the directory's inode number, which `bpf_get_current_cgroup_id` returns)
//! and its depth below the cgroup2 mount (for
//! `bpf_get_current_ancestor_cgroup_id`).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::BpfError;

/// `(id, level)` of the cgroup at `path`.
pub(crate) fn resolve(path: &Path) -> Result<(u64, u32), BpfError> {
    let shown = path.display();
    let path = path.canonicalize().map_err(|e| BpfError::Config(format!("cgroup {shown}: {e}")))?;
    let meta = std::fs::metadata(&path).map_err(|e| BpfError::Config(format!("cgroup {shown}: {e}")))?;
    if !meta.is_dir() {
        return Err(BpfError::Config(format!("cgroup {shown} is not a directory")));
    }
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map_err(|source| BpfError::Syscall { call: "read /proc/self/mounts", source })?;
    let root = cgroup2_root(&mounts, &path)
        .ok_or_else(|| BpfError::Config(format!("cgroup {shown} is not under a cgroup2 mount")))?;
    let level = path.strip_prefix(&root).map(|rest| rest.components().count()).unwrap_or(0);
    Ok((meta.ino(), level as u32))
}

/// The deepest cgroup2 mount point that holds `path`.
fn cgroup2_root(mounts: &str, path: &Path) -> Option<PathBuf> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let (_, target, fstype) = (fields.next()?, fields.next()?, fields.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(target))
        })
        .filter(|root| path.starts_with(root))
        .max_by_key(|root| root.components().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_and_level() {
        let mounts = "sysfs /sys sysfs rw 0 0\ncgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n";
        let root = cgroup2_root(mounts, Path::new("/sys/fs/cgroup/a/b")).expect("under the mount");
        assert_eq!(root, Path::new("/sys/fs/cgroup"));
        assert_eq!(cgroup2_root(mounts, Path::new("/tmp")), None);
    }

    #[test]
    fn resolve_this_process_cgroup() {
        let (Ok(own), Ok(mounts)) =
            (std::fs::read_to_string("/proc/self/cgroup"), std::fs::read_to_string("/proc/self/mounts"))
        else {
            return;
        };
        let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) else { return };
        let Some(root) = mounts.lines().find_map(|l| {
            let mut f = l.split_whitespace();
            let (_, target, fstype) = (f.next()?, f.next()?, f.next()?);
            (fstype == "cgroup2").then(|| PathBuf::from(target))
        }) else {
            eprintln!("skipping: no cgroup2 mount");
            return;
        };
        let dir = root.join(rel.trim_start_matches('/'));
        let (id, level) = resolve(&dir).expect("own cgroup");
        assert!(id > 0);
        assert_eq!(level as usize, Path::new(rel).components().count().saturating_sub(1));
    }
}
