//! Embeds the git revision the bench is built from, so that every result
//! file names the code that produced it (`report::GIT_REVISION`).
//!
//! The revision is `git rev-parse HEAD`, with `-dirty` appended when tracked
//! files differ from it (`git status --porcelain --untracked-files=no`);
//! `unknown` when the source is not a git checkout or git is missing.
//! `PREDICTIO_GIT_REVISION`, when set, is used as it is (a build from a
//! tarball, or a packager who knows better).
//!
//! The script runs again when HEAD, the branch it points at, the index or a
//! tracked file of the workspace's crates or manifests changes: an edit to
//! the code marks the build dirty even when no git command has touched the
//! index since. A change to a tracked file outside those (documentation,
//! results) is seen at the next build that reruns the script; it does not
//! change the code the revision names.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The variable the crate reads the revision from.
const OUT_VAR: &str = "PREDICTIO_BENCH_GIT_REVISION";
/// Overrides the revision.
const OVERRIDE_VAR: &str = "PREDICTIO_GIT_REVISION";

fn main() {
    println!("cargo:rerun-if-env-changed={OVERRIDE_VAR}");
    let revision = match std::env::var(OVERRIDE_VAR) {
        Ok(v) if !v.trim().is_empty() => v.trim().to_owned(),
        _ => {
            let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| ".".into()));
            git_revision(&dir).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    println!("cargo:rustc-env={OUT_VAR}={revision}");
}

/// Runs git in `dir`; its stdout, trimmed, when it succeeds.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `HEAD`'s commit, `-dirty` when tracked files differ from it; `None` when
/// `dir` is not in a git checkout. Prints the rerun-if-changed lines.
fn git_revision(dir: &Path) -> Option<String> {
    let top = PathBuf::from(git(dir, &["rev-parse", "--show-toplevel"])?);
    // The files whose change means another commit or another index: HEAD,
    // the branch it points at (its loose ref or the packed refs) and the
    // index. `--git-path` resolves each in a linked worktree too.
    let mut watch = vec!["HEAD".to_owned(), "index".to_owned(), "packed-refs".to_owned()];
    if let Some(branch) = git(dir, &["symbolic-ref", "-q", "HEAD"]) {
        watch.push(branch);
    }
    for name in &watch {
        if let Some(path) = git(dir, &["rev-parse", "--path-format=absolute", "--git-path", name]) {
            // A path that does not exist would make cargo rerun the script on
            // every build.
            if Path::new(&path).exists() {
                println!("cargo:rerun-if-changed={path}");
            }
        }
    }
    // Tracked sources and manifests: an edit to one is a dirty build even
    // before git has looked at it.
    if let Some(files) = git(&top, &["ls-files", "-z", "--", "crates", "Cargo.toml", "Cargo.lock"]) {
        for file in files.split('\0').filter(|f| !f.is_empty()) {
            let path = top.join(file);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let head = git(dir, &["rev-parse", "HEAD"])?;
    // `--no-optional-locks`: status does not rewrite the index it reads (a
    // rewrite would make the next build run this script again).
    let status = git(dir, &["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])?;
    Some(if status.is_empty() { head } else { format!("{head}-dirty") })
}
