//! `predictio stat`: the daemon's counters, per policy and per file.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use predictio::accounting::Counters;

use crate::units::human;
use predictio_daemon::control;
use predictio_daemon::status::Status;

/// Arguments of `stat`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon's control socket.
    #[arg(long, default_value = predictio_daemon::config::DEFAULT_CONTROL_SOCKET)]
    control: PathBuf,
    /// Print the whole status document as JSON.
    #[arg(long)]
    json: bool,
    /// Files to list (most issued first).
    #[arg(long, default_value_t = 10)]
    files: usize,
}

/// Runs `stat`.
pub fn run(args: Args) -> Result<()> {
    let status = control::query(&args.control)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &status)?;
        writeln!(out)?;
        return Ok(());
    }
    write_text(&mut out, &status, args.files)?;
    Ok(())
}

/// The human-readable status.
pub fn write_text(out: &mut impl Write, s: &Status, files: usize) -> std::io::Result<()> {
    writeln!(
        out,
        "predictio {} (pid {}), up {:.0} s; backend {}; observation {}; policies: {}",
        s.version,
        s.pid,
        s.uptime_s,
        s.backend,
        s.source,
        s.policies.join(", ")
    )?;
    for note in [&s.fallback, &s.source_note].into_iter().flatten() {
        writeln!(out, "note: {note}")?;
    }
    if !s.assumed_missing.is_empty() {
        writeln!(out, "running as if the kernel lacked: {}", s.assumed_missing.join(", "))?;
    }
    let p = &s.pipeline;
    writeln!(
        out,
        "events: {} queued, {} dropped, {} dispatched; {} requests, {} refused; observed files resolved {}, not {}",
        p.queued, p.dropped, p.dispatched, p.requests, p.refused, p.resolved, p.unresolved
    )?;
    writeln!(out)?;
    writeln!(out, "{:<14} {}", "ORIGIN", COLUMNS)?;
    writeln!(out, "{:<14} {}", "all", row(&s.executor.total))?;
    for o in s.executor.origins.iter().filter(|o| o.counters != Counters::default()) {
        writeln!(out, "{:<14} {}", o.name, row(&o.counters))?;
    }
    if let Some(launch) = &s.launch {
        let r = &launch.replayer;
        writeln!(out)?;
        writeln!(
            out,
            "launch replays{}: {} jobs, {} files opened, {} requests, {} shadowed (issued nothing), {} found warm \
             (replayed nothing, hits quieted); {} repeats within 200 ms (not replayed again)",
            if launch.shadow { " (shadow mode: scored, never issued)" } else { "" },
            r.jobs,
            r.opened,
            r.requests,
            r.shadowed,
            r.warm,
            r.repeats
        )?;
        for p in &launch.profiles {
            writeln!(
                out,
                "  {} {}: {}",
                crate::units::printable(&p.exe),
                crate::units::printable(&p.shape),
                super::profile::benefit_line(&p.benefit)
            )?;
        }
    }
    if files > 0 && !s.executor.files.is_empty() {
        writeln!(out)?;
        writeln!(out, "{:<14} {}", "FILE dev:ino", COLUMNS)?;
        for f in s.executor.files.iter().take(files) {
            writeln!(out, "{:<14} {}", f.file.to_string(), row(&f.counters))?;
        }
    }
    Ok(())
}

const COLUMNS: &str = "  REQUESTED   RESIDENT   INFLIGHT     ISSUED       HITS      WASTE    DROPPED  ERRORS";

fn row(c: &Counters) -> String {
    let b = |pages: u64| human(pages * predictio::PAGE_SIZE);
    format!(
        "{:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
        b(c.requested_pages),
        b(c.skipped_resident_pages),
        b(c.skipped_inflight_pages),
        b(c.issued_pages),
        b(c.hit_pages),
        b(c.wasted_pages),
        b(c.dropped_pages),
        c.errors
    )
}
