//! Launch replay shared by `run` and the benchmark: a command's profile,
//! walked and opened, in a book for the `launch` policy.

use std::path::Path;

use predictio::launch::{LaunchKey, Replay, ReplayBook, WalkLimits};

/// The replay of the profile of `command` (the program and its arguments:
/// its executable and command shape) in the store at `dir`, if there is
/// one: the key the policy replays on, the book, and a line saying what
/// will be replayed. Problems (no store, no profile) mean no replay, never
/// an error: the command runs as it would without us.
pub fn prepare_replay(dir: &Path, command: &[String]) -> Option<(LaunchKey, ReplayBook, String)> {
    let launch = predictio::launch::command::launch_of(command).ok()?;
    let (exe, shape) = (launch.exe, launch.shape);
    let key = LaunchKey::new(exe.id(), &shape);
    if !dir.join(predictio::launch::store::FILE_NAME).exists() {
        return None;
    }
    let store = super::record::open_store(dir).ok()?;
    let profile = store.get(&exe.path, &shape).ok()??;
    if profile.exe != exe {
        return Some((key, ReplayBook::default(), format!("{} changed since it was learned; not replayed", exe.path)));
    }
    let _ = store.touch(&exe.path, &shape);
    drop(store);
    let replay = Replay::open(&profile, &WalkLimits::default());
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
