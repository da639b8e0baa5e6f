//! `predictio top`: a live view of the daemon, like `cachetop`: per policy
//! and per file, what is issued, hit, wasted and dropped per second.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Result;
use predictio::accounting::Counters;

use crate::units::human;
use predictio_daemon::control;
use predictio_daemon::status::Status;

/// Arguments of `top`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The daemon's control socket.
    #[arg(long, default_value = predictio_daemon::config::DEFAULT_CONTROL_SOCKET)]
    control: PathBuf,
    /// Seconds between refreshes.
    #[arg(long, default_value = "1", value_parser = crate::units::parse_seconds)]
    interval: Duration,
    /// Show one sample (over one interval) and exit; no screen clearing.
    #[arg(long)]
    once: bool,
    /// Files to list.
    #[arg(long, default_value_t = 10)]
    files: usize,
}

/// Runs `top`.
pub fn run(args: Args) -> Result<()> {
    let interval = args.interval.clamp(Duration::from_millis(100), Duration::from_secs(3600));
    let mut before = control::query(&args.control)?;
    let mut at = Instant::now();
    loop {
        std::thread::sleep(interval);
        let now = control::query(&args.control)?;
        let secs = at.elapsed().as_secs_f64();
        at = Instant::now();
        let frame = render(&before, &now, secs, args.files);
        let mut out = std::io::stdout().lock();
        if !args.once {
            write!(out, "\x1b[2J\x1b[H")?;
        }
        out.write_all(frame.as_bytes())?;
        out.flush()?;
        if args.once {
            return Ok(());
        }
        before = now;
    }
}

fn delta(a: &Counters, b: &Counters) -> Counters {
    let d = |x: u64, y: u64| y.saturating_sub(x);
    Counters {
        requested_pages: d(a.requested_pages, b.requested_pages),
        skipped_resident_pages: d(a.skipped_resident_pages, b.skipped_resident_pages),
        issued_pages: d(a.issued_pages, b.issued_pages),
        hit_pages: d(a.hit_pages, b.hit_pages),
        wasted_pages: d(a.wasted_pages, b.wasted_pages),
        dropped_pages: d(a.dropped_pages, b.dropped_pages),
        errors: d(a.errors, b.errors),
        ..Counters::default()
    }
}

/// One frame: rates between two status documents `secs` apart.
pub fn render(before: &Status, now: &Status, secs: f64, files: usize) -> String {
    let rate =
        |pages: u64| format!("{}/s", human((pages as f64 * predictio::PAGE_SIZE as f64 / secs.max(1e-6)) as u64));
    let line = |name: &str, c: &Counters, total: &Counters| {
        format!(
            "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>12}\n",
            name,
            rate(c.requested_pages),
            rate(c.skipped_resident_pages),
            rate(c.issued_pages),
            rate(c.hit_pages),
            rate(c.wasted_pages),
            rate(c.dropped_pages),
            human(total.hit_pages * predictio::PAGE_SIZE),
            human(total.wasted_pages * predictio::PAGE_SIZE),
        )
    };
    let mut out = format!(
        "predictio top — pid {} up {:.0} s, backend {}, observation {}, {:.1} s sample; events {:.0}/s, {} dropped\n\n",
        now.pid,
        now.uptime_s,
        now.backend,
        now.source,
        secs,
        now.pipeline.dispatched.saturating_sub(before.pipeline.dispatched) as f64 / secs.max(1e-6),
        now.pipeline.dropped
    );
    out.push_str(&format!(
        "{:<16} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>12}\n",
        "POLICY", "REQUESTED", "RESIDENT", "ISSUED", "HITS", "WASTE", "DROPPED", "HITS(ALL)", "WASTE(ALL)"
    ));
    out.push_str(&line("all", &delta(&before.executor.total, &now.executor.total), &now.executor.total));
    let old: HashMap<&str, &Counters> =
        before.executor.origins.iter().map(|o| (o.name.as_str(), &o.counters)).collect();
    for o in &now.executor.origins {
        if o.counters == Counters::default() {
            continue;
        }
        let zero = Counters::default();
        out.push_str(&line(
            &o.name,
            &delta(old.get(o.name.as_str()).copied().unwrap_or(&zero), &o.counters),
            &o.counters,
        ));
    }
    if files > 0 {
        out.push_str(&format!(
            "\n{:<16} {:>12} {:>12} {:>12} {:>12} {:>12} {:>10} {:>12} {:>12}\n",
            "FILE dev:ino", "REQUESTED", "RESIDENT", "ISSUED", "HITS", "WASTE", "DROPPED", "HITS(ALL)", "WASTE(ALL)"
        ));
        let old: HashMap<_, _> = before.executor.files.iter().map(|f| (f.file, &f.counters)).collect();
        let mut rows: Vec<(Counters, &predictio::accounting::FileStats)> = now
            .executor
            .files
            .iter()
            .map(|f| (delta(old.get(&f.file).copied().unwrap_or(&Counters::default()), &f.counters), f))
            .collect();
        rows.sort_by(|a, b| {
            b.0.issued_pages.cmp(&a.0.issued_pages).then(b.1.counters.issued_pages.cmp(&a.1.counters.issued_pages))
        });
        for (d, f) in rows.into_iter().take(files) {
            out.push_str(&line(&f.file.to_string(), &d, &f.counters));
        }
    }
    out
}
