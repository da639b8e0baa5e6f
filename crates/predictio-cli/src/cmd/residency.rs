//! `predictio residency FILE…`

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::units::human;

/// Arguments of `residency`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Files to inspect.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Print JSON (one object per file, in a list).
    #[arg(long)]
    json: bool,
}

#[derive(serde::Serialize)]
struct Row {
    file: String,
    #[serde(flatten)]
    residency: predictio::cache::Residency,
    fraction: f64,
}

/// Runs `residency`.
pub fn run(args: Args) -> Result<()> {
    let mut rows = Vec::new();
    let mut failed = None;
    let mut failures = 0;
    for path in &args.files {
        match super::open(path).and_then(|f| predictio::cache::residency(&f).context("cachestat")) {
            Ok(residency) => {
                rows.push(Row { file: crate::units::path_text(path), fraction: residency.fraction(), residency })
            }
            Err(err) if args.files.len() == 1 => failed = Some(err),
            Err(err) => {
                eprintln!("predictio: {}", crate::error_message(&err));
                failures += 1;
            }
        }
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
    } else if !rows.is_empty() {
        writeln!(
            out,
            "{:>10} {:>10} {:>10} {:>7} {:>8} {:>8}  FILE",
            "SIZE", "PAGES", "RESIDENT", "RES%", "DIRTY", "EVICTED"
        )?;
        for row in &rows {
            let r = &row.residency;
            writeln!(
                out,
                "{:>10} {:>10} {:>10} {:>6.1}% {:>8} {:>8}  {}",
                human(r.size),
                r.pages,
                r.resident,
                row.fraction * 100.0,
                r.dirty,
                r.evicted,
                row.file
            )?;
        }
    }
    match failed {
        Some(err) => Err(err),
        None if failures > 0 => anyhow::bail!("{failures} of {} files could not be inspected", args.files.len()),
        None => Ok(()),
    }
}
