//! `predictio evict FILE…`

use std::path::PathBuf;

use anyhow::{Context, Result};

/// Arguments of `evict`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Files to drop from the page cache.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print nothing on success.
    #[arg(short, long)]
    quiet: bool,
}

/// Runs `evict`.
pub fn run(args: Args) -> Result<()> {
    let mut failures = 0;
    for path in &args.files {
        let result = super::open(path).and_then(|file| {
            let before = predictio::cache::residency(&file).context("cachestat")?;
            predictio::cache::evict(&file).with_context(|| format!("evicting {}", path.display()))?;
            let after = predictio::cache::residency(&file).context("cachestat")?;
            Ok((before, after))
        });
        match result {
            Ok((before, after)) => {
                if !args.quiet {
                    println!(
                        "{}: {:.1}% -> {:.1}% resident ({} pages dropped{})",
                        path.display(),
                        before.fraction() * 100.0,
                        after.fraction() * 100.0,
                        before.resident.saturating_sub(after.resident),
                        if after.resident > 0 { "; the rest is mapped or locked by a process" } else { "" }
                    );
                }
            }
            Err(err) => {
                eprintln!("predictio: {}", crate::error_message(&err));
                failures += 1;
            }
        }
    }
    if failures > 0 {
        anyhow::bail!("{failures} of {} files could not be evicted", args.files.len());
    }
    Ok(())
}
