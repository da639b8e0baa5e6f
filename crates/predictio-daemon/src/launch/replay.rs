//! Opening a profile for replay: the launch service's I/O, off the event
//! path. The `launch` policy replays [`Replay`]s it is handed; this module
//! is what makes them — it walks a profile into page lists, opens and
//! checks each profiled file against its learned identity, and holds the
//! directories the launch searched and looked up — and prepares the one
//! replay of `predictio run`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use predictio::FileRef;
use predictio::launch::profile::MAX_DIRS;
use predictio::launch::{
    Freshness, LaunchKey, Profile, Replay, ReplayBook, ReplayFile, ReplayPacing, WalkLimits, Walked,
};
use predictio::request::{MetaDir, MetaLookup};

use super::store::{self, Store};

/// Walks `profile` within `walk` and opens its files, leaving out (and
/// listing) every file whose inode, size or mtime changed — a stale profile
/// never replays pages of a different file; the replay asks for the window
/// `pacing` gives its size. Does I/O (open, fstat): call it off the event
/// path.
pub fn open_replay(profile: &Profile, walk: &WalkLimits, pacing: &ReplayPacing) -> Replay {
    let plan = profile.plan(walk);
    let latest = profile.files.iter().map(|f| f.first_touch_ms).fold(0.0f64, f64::max);
    let window = profile.learned_ms / f64::from(profile.runs.max(1));
    let mut replay = Replay {
        exe: profile.exe.path.clone(),
        wave_pages: walk.wave_pages,
        span_ms: window.max(latest),
        ..Replay::default()
    };
    let open_one = |index: usize, walked: Walked, replay: &mut Replay| -> Option<ReplayFile> {
        let identity = &profile.files[index].identity;
        let file = match FileRef::open(&identity.path) {
            Ok(file) => file,
            Err(_) => {
                replay.missing.push(identity.path.clone());
                return None;
            }
        };
        match file.file().metadata().map(|m| identity.compare(&m)) {
            Ok(Freshness::Fresh) => Some(ReplayFile {
                file,
                ranges: walked.ranges,
                first_touch_ms: profile.files[index].first_touch_ms,
                due_ms: walked.due_ms,
            }),
            Ok(_) => {
                replay.changed.push(identity.path.clone());
                None
            }
            Err(_) => {
                replay.missing.push(identity.path.clone());
                None
            }
        }
    };
    for (index, walked) in plan.at_exec {
        if let Some(f) = open_one(index, walked, &mut replay) {
            replay.at_exec.push(f);
        }
    }
    replay.dirs = profile.dirs.iter().filter_map(|d| MetaDir::open(d).ok()).collect();
    let listed = looked_up_dirs(&profile.lookups, &replay.dirs);
    replay.dirs.extend(listed);
    replay.lookups = lookups_of(&profile.lookups, &replay.dirs);
    for (on, files) in plan.on_trigger {
        let trigger = profile.files[on].identity.id();
        let opened: Vec<ReplayFile> = files.into_iter().filter_map(|(i, r)| open_one(i, r, &mut replay)).collect();
        if !opened.is_empty() {
            replay.on_trigger.push((trigger, opened));
        }
    }
    replay.window_pages = pacing.window_pages(replay.pages());
    replay
}

/// Whether a recorded `path` can be used as it is: absolute, without `.`
/// or `..` components (which would need resolving against what the launch
/// saw, not what is there now).
fn is_plain_absolute(path: &std::path::Path) -> bool {
    use std::path::Component;
    path.is_absolute() && !path.components().any(|c| matches!(c, Component::CurDir | Component::ParentDir))
}

/// The lookups of `paths` (absolute), by directory: each path's deepest
/// directory that exists now, held open, and the name looked up in it — the
/// path's last component, or for a path whose parent is gone the first
/// component that is missing, where that lookup stopped. Directories keep
/// the order of their first path, names theirs; a pair appears once. Paths
/// with `.` or `..` components are left out, and lookups in more than
/// [`MAX_DIRS`] directories beyond those of `held`, which are used as they
/// are instead of being opened again. Does I/O (opens directories): call it
/// off the event path.
pub fn lookups_of(paths: &[String], held: &[MetaDir]) -> Vec<MetaLookup> {
    use std::path::Path;
    let mut opened: HashMap<&Path, Option<MetaDir>> =
        held.iter().map(|d| (Path::new(d.path()), Some(d.clone()))).collect();
    let mut newly_opened = 0;
    let mut by_dir: Vec<(MetaDir, Vec<Box<str>>)> = Vec::new();
    let mut slot: HashMap<&Path, usize> = HashMap::new();
    let mut seen: std::collections::HashSet<(usize, &str)> = std::collections::HashSet::new();
    for path in paths {
        let path = Path::new(path.as_str());
        if !is_plain_absolute(path) {
            continue;
        }
        let mut name = path.file_name();
        let mut dir = path.parent();
        while let (Some(d), Some(_)) = (dir, name) {
            if !opened.contains_key(d) {
                if newly_opened >= MAX_DIRS {
                    dir = None;
                    break;
                }
                newly_opened += 1;
            }
            if opened.entry(d).or_insert_with(|| MetaDir::open(d).ok()).is_some() {
                break;
            }
            name = d.file_name();
            dir = d.parent();
        }
        let (Some(dir), Some(name)) = (dir, name.and_then(|n| n.to_str())) else { continue };
        let Some(Some(held)) = opened.get(dir) else { continue };
        let i = *slot.entry(dir).or_insert_with(|| {
            by_dir.push((held.clone(), Vec::new()));
            by_dir.len() - 1
        });
        if seen.insert((i, name)) {
            by_dir[i].1.push(name.into());
        }
    }
    by_dir.into_iter().map(|(dir, names)| MetaLookup { dir, names: names.into() }).collect()
}

/// The directories among the lookups `paths` (absolute), held open, to be
/// listed too: a launch that looks a directory up usually lists it (a
/// browser its profile's component directories, an interpreter its search
/// path), and a directory it opened nothing in is not among the profile's
/// [`Profile::dirs`]. Leaves out those of `held` (listed already), paths
/// with `.` or `..`, directories of in-memory filesystems (`/proc`, a
/// tmpfs: listing them reads nothing from storage), and any beyond
/// [`MAX_DIRS`] in all. Opening with `O_DIRECTORY` refuses anything else
/// before it is opened. Does I/O (opens): call it off the event path.
pub fn looked_up_dirs(paths: &[String], held: &[MetaDir]) -> Vec<MetaDir> {
    use std::path::{Path, PathBuf};
    let mut seen: HashSet<PathBuf> = held.iter().map(|d| PathBuf::from(d.path())).collect();
    let mut dirs = Vec::new();
    for path in paths {
        if held.len() + dirs.len() >= MAX_DIRS {
            break;
        }
        let path = Path::new(path.as_str());
        if !is_plain_absolute(path) {
            continue;
        }
        // `a/b/` and `a/b` are one directory.
        if !seen.insert(path.components().collect()) {
            continue;
        }
        if let Ok(dir) = MetaDir::open(path)
            && dir.on_storage()
        {
            dirs.push(dir);
        }
    }
    dirs
}

/// The replay of the profile of `command` (the program and its arguments:
/// its executable and command shape) in the store at `dir`, if there is
/// one, walked and paced as [`open_replay`] does: the key the policy
/// replays on, the book, and a line saying what will be replayed. Problems
/// (no store, no profile) mean no replay, never an error: the command runs
/// as it would without us.
pub fn prepare_replay(
    dir: &Path,
    command: &[String],
    walk: &WalkLimits,
    pacing: &ReplayPacing,
) -> Option<(LaunchKey, ReplayBook, String)> {
    let launch = predictio::launch::command::launch_of(command).ok()?;
    let (exe, shape) = (launch.exe, launch.shape);
    let key = LaunchKey::new(exe.id(), &shape);
    if !dir.join(store::FILE_NAME).exists() {
        return None;
    }
    let store = Store::open(dir, store::DEFAULT_CAP_BYTES, std::time::Duration::from_secs(10)).ok()?;
    let profile = store.get(&exe.path, &shape).ok()??;
    if profile.exe != exe {
        return Some((key, ReplayBook::default(), format!("{} changed since it was learned; not replayed", exe.path)));
    }
    let _ = store.touch(&exe.path, &shape);
    drop(store);
    let replay = open_replay(&profile, walk, pacing);
    let note = format!(
        "replaying {:.1} MiB of {} files learned over {} run(s){}",
        replay.pages() as f64 * 4096.0 / (1 << 20) as f64,
        replay.at_exec.len() + replay.on_trigger.iter().map(|t| t.1.len()).sum::<usize>(),
        profile.runs,
        if replay.changed.is_empty() && replay.missing.is_empty() {
            String::new()
        } else {
            format!("; {} changed and {} missing files left out", replay.changed.len(), replay.missing.len())
        }
    );
    let book = ReplayBook::default();
    book.insert(key.clone(), replay);
    Some((key, book, note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use predictio::PageRange;

    #[test]
    fn lookups_are_grouped_by_the_deepest_directory_that_exists() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/f"), b"x").unwrap();
        let root = dir.path().to_str().unwrap();
        let paths: Vec<String> = [
            format!("{root}/sub/f"),
            format!("{root}/top-missing"),
            format!("{root}/sub/missing"),
            format!("{root}/gone/deeper/name"), // stops at "gone"
            format!("{root}/sub/f"),            // again
            format!("{root}/sub/../sub/f"),     // not normal
            "relative/path".to_string(),
        ]
        .into();
        let held = vec![MetaDir::open(dir.path()).unwrap()];
        let lookups = lookups_of(&paths, &held);
        use std::os::fd::AsRawFd;
        assert_eq!(
            lookups[1].dir.as_fd().as_raw_fd(),
            held[0].as_fd().as_raw_fd(),
            "a held directory is used, not opened again"
        );
        let got: Vec<(String, Vec<String>)> = lookups
            .iter()
            .map(|l| (l.dir.path().to_string(), l.names.iter().map(|n| n.to_string()).collect()))
            .collect();
        assert_eq!(
            got,
            vec![
                (format!("{root}/sub"), vec!["f".to_string(), "missing".to_string()]),
                (root.to_string(), vec!["top-missing".to_string(), "gone".to_string()]),
            ]
        );
    }
    #[test]
    fn looked_up_directories_on_storage_are_listed_once() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        let root = dir.path().to_str().unwrap();
        std::fs::create_dir(dir.path().join("comp")).unwrap();
        std::fs::create_dir(dir.path().join("held")).unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let held = vec![MetaDir::open(dir.path().join("held")).unwrap()];
        let paths: Vec<String> = [
            "comp",      // a directory: listed
            "comp/",     // the same one again
            "held",      // listed already
            "f",         // a file
            "missing",   // gone
            "comp/../f", // not resolved
        ]
        .iter()
        .map(|p| format!("{root}/{p}"))
        .chain(["/proc".to_string(), "/dev".to_string(), "relative".to_string()])
        .collect();
        let listed = looked_up_dirs(&paths, &held);
        assert_eq!(listed.iter().map(MetaDir::path).collect::<Vec<_>>(), vec![format!("{root}/comp")]);
        assert!(MetaDir::open("/proc").is_ok_and(|d| !d.on_storage()), "procfs reads nothing from storage");
        assert!(MetaDir::open("/dev").is_ok_and(|d| !d.on_storage()), "nor does devtmpfs");
        assert!(MetaDir::open(dir.path()).is_ok_and(|d| d.on_storage()));
    }

    #[test]
    fn replay_lists_the_directories_its_launch_looked_up() {
        let dir = tempfile::tempdir_in("/var/tmp").unwrap();
        std::fs::create_dir(dir.path().join("comp")).unwrap();
        let mut profile = Profile::new(predictio::launch::FileIdentity::of_path("/bin/sh").unwrap(), "sh");
        profile.lookups = vec![dir.path().join("comp").to_string_lossy().into_owned()];
        let replay = open_replay(&profile, &WalkLimits::default(), &ReplayPacing::default());
        let listed: Vec<&str> = replay.dirs.iter().map(MetaDir::path).collect();
        assert!(listed.contains(&dir.path().join("comp").to_str().unwrap()), "{listed:?}");
    }

    #[test]
    fn replay_open_holds_the_profile_directories_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("lib");
        std::fs::create_dir(&lib).unwrap();
        let file = lib.join("a.so");
        std::fs::write(&file, vec![1u8; 8192]).unwrap();
        let ident = predictio::launch::FileIdentity::of_path(&file).unwrap();
        let mut profile = Profile::new(ident.clone(), "prog");
        let run = predictio::launch::LaunchRun {
            files: vec![predictio::launch::profile::RunFile {
                identity: ident,
                first_touch_ms: 0.0,
                accesses: vec![PageRange::page(0)],
                access_ms: Vec::new(),
            }],
            window_ms: 1.0,
            lookups: Vec::new(),
        };
        profile.merge(&run, &predictio::launch::LearnLimits::default());
        profile.dirs.push("/nonexistent-predictio-dir".into());
        let pacing = ReplayPacing::default();
        let replay = open_replay(&profile, &WalkLimits::default(), &pacing);
        assert_eq!(replay.window_pages, pacing.small_window_pages, "one page: a small replay");
        let none_small = ReplayPacing { small_pages: 0, ..pacing };
        let replay = open_replay(&profile, &WalkLimits::default(), &none_small);
        assert_eq!(replay.window_pages, 0, "the pacing is the caller's: the executor's window");
        let held: Vec<&str> = replay.dirs.iter().map(MetaDir::path).collect();
        assert!(held.contains(&lib.to_str().unwrap()) && held.contains(&"/"), "{held:?}");
        assert!(!held.contains(&"/nonexistent-predictio-dir"));
    }
}
