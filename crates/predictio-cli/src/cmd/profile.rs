//! `predictio profile list|show|forget|export|import`: the launch profile
//! store.

use std::path::PathBuf;

use std::io::Write;

use anyhow::{Context, Result, bail};
use predictio::launch::{Freshness, Profile, WalkLimits};
use predictio_daemon::launch::store::DEFAULT_DIR;

use super::record::open_store;
use crate::units::printable;

/// Arguments of `profile`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The profile store's directory (before or after the action:
    /// `profile --store DIR list` and `profile list --store DIR` are the same).
    #[arg(long, global = true, default_value = DEFAULT_DIR, value_name = "DIR")]
    store: PathBuf,
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand, Debug)]
enum Action {
    /// One line per profile: runs, files, predicted size, stored size, the
    /// executable and the command shape it is for (a profile is replayed
    /// only for launches of its executable whose command line has its
    /// shape: the program's name, its options without their values, and
    /// its first argument — a script, a source file, `-c` code as a hash);
    /// then what the daemon measured of its replays: replays scored, the
    /// shares of the replayed pages the launches used, never touched
    /// (wasted) and still read from storage (late), the median replayed
    /// and cold launch in ms, and whether it was retired and why.
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// The profiles of an executable (one per command shape): files
    /// (changed ones marked), pages and triggers.
    Show {
        /// The executable (a path, or a name found on PATH).
        exe: String,
        /// Only the profile for this command shape (as `list` shows it).
        #[arg(long)]
        shape: Option<String>,
        /// The whole profile as JSON (one profile: with several shapes,
        /// give --shape).
        #[arg(long)]
        json: bool,
    },
    /// Delete the profiles of an executable.
    Forget {
        /// The executable (a path, or a name found on PATH).
        exe: String,
        /// Only the profile for this command shape.
        #[arg(long)]
        shape: Option<String>,
    },
    /// Write every profile to FILE as JSON ("-" for stdout).
    Export {
        /// Output file.
        file: PathBuf,
    },
    /// Read profiles written by `export` into the store (replacing
    /// profiles of the same executables).
    Import {
        /// Input file.
        file: PathBuf,
    },
}

/// The stored executable `exe` names (a path or a name on PATH, links
/// resolved; as given when it is not there), and for a `#!` script, which
/// is stored under its interpreter, the shape prefix of its own profiles
/// (`python3 /usr/bin/ipython3`): `show ipython3` is not every Python
/// program's profile.
fn key(exe: &str) -> (String, Option<String>) {
    match predictio::launch::command::launch_of(&[exe]) {
        Ok(launch) => {
            // A script's command line starts with its interpreter instead.
            let script = launch.argv.first().is_none_or(|first| first.as_os_str() != std::ffi::OsStr::new(exe));
            (launch.exe.path, script.then_some(launch.shape))
        }
        Err(_) => (exe.to_owned(), None),
    }
}

/// Whether `shape` is the script's (`prefix`) or a longer one of it.
fn of_script(shape: &str, prefix: Option<&str>) -> bool {
    prefix.is_none_or(|p| shape == p || shape.strip_prefix(p).is_some_and(|rest| rest.starts_with(' ')))
}

/// The stored executables whose file name is `exe`'s: what the user may have
/// meant when `exe` (a name looked up on PATH, or a path) has no profile —
/// `python3.11` on PATH may be a pyenv shim while the profile is of
/// `/usr/bin/python3.11`.
fn same_name(store: &predictio_daemon::launch::store::Store, exe: &str) -> Result<Vec<String>> {
    let name = std::path::Path::new(exe).file_name().map(|n| n.to_os_string());
    let mut found: Vec<String> = store
        .list()?
        .into_iter()
        .map(|s| s.exe)
        .filter(|path| name.is_some() && std::path::Path::new(path).file_name().map(|n| n.to_os_string()) == name)
        .collect();
    found.sort();
    Ok(found)
}

/// "no profile for K", naming the shapes K has (when one was asked for)
/// or the stored executables of the same name.
fn no_profile(
    store: &predictio_daemon::launch::store::Store,
    exe: &str,
    k: &str,
    shape: Option<&str>,
) -> anyhow::Error {
    if let Some(shape) = shape {
        let shapes: Vec<String> = store.list().map_or_else(
            |_| Vec::new(),
            |list| list.into_iter().filter(|s| s.exe == k).map(|s| shown_shape(&s.shape)).collect(),
        );
        if !shapes.is_empty() {
            return anyhow::anyhow!("no profile for {k} with shape \"{shape}\"; its shapes: {}", shapes.join(", "));
        }
    }
    match same_name(store, exe) {
        Ok(found) if !found.is_empty() => {
            anyhow::anyhow!("no profile for {k}; profiles of that name: {} (give the path)", found.join(", "))
        }
        _ => anyhow::anyhow!("no profile for {k} (see `predictio profile list`)"),
    }
}

/// Runs `profile`.
pub fn run(args: Args) -> Result<()> {
    let store = open_store(&args.store)?;
    let mut out = std::io::stdout().lock();
    let mib = |pages: u64| pages as f64 * 4096.0 / (1 << 20) as f64;
    match args.action {
        Action::List { json } => {
            let list = store.list()?;
            if json {
                writeln!(out, "{}", serde_json::to_string_pretty(&list)?)?;
            } else {
                writeln!(out, "{:>5} {:>6} {:>10} {:>10}  EXECUTABLE  SHAPE", "RUNS", "FILES", "PREDICTED", "STORED")?;
                for s in list {
                    writeln!(
                        out,
                        "{:>5} {:>6} {:>6.1} MiB {:>6.1} KiB  {}  {}",
                        s.runs,
                        s.files,
                        mib(s.pages),
                        s.stored_bytes as f64 / 1024.0,
                        printable(&s.exe),
                        shown_shape(&s.shape)
                    )?;
                    if let Some(b) = &s.benefit {
                        writeln!(out, "      {}", benefit_line(b))?;
                    }
                }
            }
            // Profiles this predictio cannot read (a newer one wrote them, or
            // they are damaged) are not in the list: say so, and why.
            for e in store.unreadable()? {
                eprintln!("predictio: not listed: {e}");
            }
        }
        Action::Show { exe, shape, json } => {
            let (k, script) = key(&exe);
            let profiles: Vec<Profile> = match &shape {
                Some(shape) => store.get(&k, shape)?.into_iter().collect(),
                None => store.of_exe(&k)?.into_iter().filter(|p| of_script(&p.shape, script.as_deref())).collect(),
            };
            if profiles.is_empty() {
                return Err(no_profile(&store, &exe, &k, shape.as_deref()));
            }
            if json {
                let [p] = &profiles[..] else {
                    let shapes: Vec<String> = profiles.iter().map(|p| format!("\"{}\"", p.shape)).collect();
                    bail!(
                        "{k} has {} profiles, one per command shape ({}): give --shape",
                        profiles.len(),
                        shapes.join(", ")
                    );
                };
                writeln!(out, "{}", serde_json::to_string_pretty(p)?)?;
                return Ok(());
            }
            for p in &profiles {
                show(&mut out, p)?;
            }
        }
        Action::Forget { exe, shape } => {
            let (k, script) = key(&exe);
            let forgotten = match (&shape, &script) {
                (None, Some(_)) => {
                    let mut n = 0;
                    for p in store.of_exe(&k)?.iter().filter(|p| of_script(&p.shape, script.as_deref())) {
                        n += store.remove(&k, Some(&p.shape))?;
                    }
                    n
                }
                _ => store.remove(&k, shape.as_deref())?,
            };
            if forgotten == 0 {
                return Err(no_profile(&store, &exe, &k, shape.as_deref()));
            }
            eprintln!("forgot {forgotten} profile(s) of {k}");
        }
        Action::Export { file } => {
            let (profiles, bad) = store.all()?;
            let text = serde_json::to_string_pretty(&profiles)?;
            if file.as_os_str() == "-" {
                writeln!(out, "{text}")?;
            } else {
                std::fs::write(&file, text).with_context(|| format!("writing {}", file.display()))?;
            }
            eprintln!(
                "exported {} profile(s){}",
                profiles.len(),
                if bad.is_empty() { String::new() } else { format!("; {} unreadable skipped", bad.len()) }
            );
        }
        Action::Import { file } => {
            let text = read_export(&file)?;
            let mut profiles: Vec<Profile> = serde_json::from_str(&text)
                .with_context(|| format!("{}: not a profile export (a JSON array of profiles)", file.display()))?;
            for p in &mut profiles {
                // An export of an older predictio is brought up to date; a
                // newer one's is refused, whole, before anything is written.
                let version = p.version;
                if !p.migrate() {
                    bail!(
                        "{}: profile of {} has version {version}; this predictio reads versions 1 to {}",
                        file.display(),
                        p.exe.path,
                        predictio::launch::profile::PROFILE_VERSION
                    );
                }
                for t in &p.triggers {
                    if t.on >= p.files.len() || t.then.iter().any(|&i| i >= p.files.len()) {
                        bail!("{}: profile of {} has a trigger naming no file", file.display(), p.exe.path);
                    }
                }
            }
            for p in &profiles {
                store.put(p)?;
            }
            let unshaped = profiles.iter().filter(|p| p.shape.is_empty()).count();
            eprintln!(
                "imported {} profile(s){}",
                profiles.len(),
                if unshaped == 0 {
                    String::new()
                } else {
                    format!("; {unshaped} learned before command shapes (no shape): kept and listed, never replayed")
                }
            );
        }
    }
    Ok(())
}

/// Writes one profile, as `show` shows it.
fn show(out: &mut impl Write, p: &Profile) -> Result<()> {
    let mib = |pages: u64| pages as f64 * 4096.0 / (1 << 20) as f64;
    let plan = p.plan(&WalkLimits::default());
    writeln!(
        out,
        "{} ({}): {} runs, {} files, {:.1} MiB modelled, {:.1} MiB replayed, {} trigger(s), {} directories, {} \
         lookups, learned over {:.0} ms",
        printable(&p.exe.path),
        shown_shape(&p.shape),
        p.runs,
        p.files.len(),
        mib(p.pages()),
        mib(plan.pages()),
        p.triggers.len(),
        p.dirs.len(),
        p.lookups.len(),
        p.learned_ms
    )?;
    writeln!(out, "{:>9} {:>6} {:>6} {:>9}  FILE", "FIRST(ms)", "NODES", "EDGES", "REPLAY")?;
    for (i, f) in p.files.iter().enumerate() {
        let replay: u64 = plan
            .at_exec
            .iter()
            .chain(plan.on_trigger.iter().flat_map(|t| t.1.iter()))
            .filter(|(j, _)| *j == i)
            .flat_map(|(_, w)| &w.ranges)
            .map(|r| r.len())
            .sum();
        let state = match f.identity.check() {
            Freshness::Fresh => "",
            Freshness::Changed => "  (changed since learned: not replayed)",
            Freshness::Missing => "  (missing: not replayed)",
        };
        writeln!(
            out,
            "{:>9.1} {:>6} {:>6} {:>5.1} MiB  {}{state}",
            f.first_touch_ms,
            f.model.nodes.len(),
            f.model.edges.len(),
            mib(replay),
            printable(&f.identity.path)
        )?;
    }
    for t in &p.triggers {
        let then: Vec<_> = t.then.iter().map(|&i| printable(&p.files[i].identity.path)).collect();
        writeln!(out, "trigger: first touch of {} -> {}", printable(&p.files[t.on].identity.path), then.join(", "))?;
    }
    Ok(())
}

/// The largest profile export `import` reads: far above any real one (a
/// profile is capped at a few MiB), so that `/dev/zero` or a runaway file is
/// refused instead of read into memory without end.
const MAX_EXPORT_BYTES: u64 = 256 << 20;

/// Reads a profile export: a regular file (opened without blocking, never
/// a FIFO or a device) of at most [`MAX_EXPORT_BYTES`].
fn read_export(path: &std::path::Path) -> Result<String> {
    use std::io::Read;
    let file = super::open_file(path)?;
    let mut text = String::new();
    file.take(MAX_EXPORT_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading {} (a profile export is UTF-8 JSON)", path.display()))?;
    if text.len() as u64 > MAX_EXPORT_BYTES {
        bail!("{}: larger than {} MiB; not a profile export", path.display(), MAX_EXPORT_BYTES >> 20);
    }
    Ok(text)
}

/// What a profile's replays gained, in one line (`list`, and `stat`).
pub fn benefit_line(b: &predictio_daemon::launch::store::BenefitSummary) -> String {
    let pct = |share: Option<f64>| share.map_or_else(|| "?".to_owned(), |s| format!("{:.0} %", s * 100.0));
    let ms = |ms: Option<u32>| ms.map_or_else(|| "?".to_owned(), |ms| format!("{ms} ms"));
    let mut line = format!(
        "{} replays scored: used {}, wasted {}, late {}; median launch {} replayed, {} cold",
        b.replays_scored,
        pct(b.used_share),
        pct(b.wasted_share),
        pct(b.late_share),
        ms(b.replayed_ms),
        ms(b.cold_ms)
    );
    if let Some(why) = &b.retired {
        line.push_str(&format!("; RETIRED: {why}"));
    }
    line
}

/// A shape as `list` and `show` print it.
fn shown_shape(shape: &str) -> String {
    if shape.is_empty() {
        "(no shape: learned before command shapes, not replayed)".into()
    } else {
        format!("\"{}\"", printable(shape))
    }
}
