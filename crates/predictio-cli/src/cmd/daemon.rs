//! `predictio daemon`: the long-running service — event sources, policies,
//! the executor, the control socket and (opt-in) the metrics endpoint. The
//! service itself is the `predictio-daemon` library.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use predictio_daemon::config::Config;

/// Arguments of `daemon`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML). Default: /etc/predictio/predictio.toml if
    /// it exists, else built-in defaults (see dist/predictio.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long)]
    print_config: bool,
    /// Stop after this many seconds (tests, demos).
    #[arg(long, value_parser = parse_seconds)]
    exit_after: Option<Duration>,
}

/// A duration in seconds: finite, not negative, at most a year.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !secs.is_finite() || !(0.0..=365.0 * 86400.0).contains(&secs) {
        return Err(format!("{text} seconds is out of range (0 to one year)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Runs `daemon`.
pub fn run(args: Args) -> Result<()> {
    let config = Config::load(args.config.as_deref())?;
    if args.print_config {
        println!("{config:#?}");
        return Ok(());
    }
    predictio_daemon::service::run(&config, args.exit_after)
}
