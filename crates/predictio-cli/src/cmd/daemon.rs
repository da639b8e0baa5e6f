//! `predictio daemon`: the long-running service — event sources, policies,
//! the executor, the control socket and (opt-in) the metrics endpoint. The
//! service itself is the `predictio-daemon` library.
//!
//! `--check` validates the configuration and reports what the daemon would
//! run on this machine without starting it; `--print-config` prints the
//! effective configuration.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use predictio_daemon::config::Config;

/// Arguments of `daemon`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Configuration file (TOML). Default: /etc/predictio/predictio.toml if
    /// it exists, else built-in defaults (see dist/predictio.toml).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print the effective configuration and exit.
    #[arg(long, conflicts_with = "check")]
    print_config: bool,
    /// Validate the configuration and report what the daemon would run on
    /// this machine — executor backend, observation source and why, sockets
    /// and profile store — without starting it. Exits 0 when the
    /// configuration is valid.
    #[arg(long)]
    check: bool,
    /// With --check: the report as JSON.
    #[arg(long, requires = "check")]
    json: bool,
    /// Stop after this many seconds (tests, demos).
    #[arg(long, value_parser = crate::units::parse_seconds)]
    exit_after: Option<Duration>,
}

/// Runs `daemon`.
pub fn run(args: Args) -> Result<()> {
    let loaded = Config::load_from(args.config.as_deref());
    if args.check && args.json {
        return check_json(loaded);
    }
    // The error names the file (the default one, DEFAULT_PATH, unless
    // --config names another).
    let (config, path) = loaded.context("loading the daemon's configuration")?;
    if args.check {
        let report = predictio_daemon::check::check(&config, path.as_deref());
        print!("{report}");
        return Ok(());
    }
    if args.print_config {
        println!("{config:#?}");
        return Ok(());
    }
    predictio_daemon::service::run(&config, args.exit_after).context("running the daemon")
}

/// `--check --json`: the report, or `{"valid": false, "error": …}` and a
/// failure for an invalid configuration.
fn check_json(loaded: Result<(Config, Option<PathBuf>), predictio_daemon::config::ConfigError>) -> Result<()> {
    let document = match &loaded {
        Ok((config, path)) => {
            let report = predictio_daemon::check::check(config, path.as_deref());
            let mut value = serde_json::to_value(&report)?;
            value["valid"] = true.into();
            value["would_start"] = report.would_start().into();
            value
        }
        Err(err) => serde_json::json!({ "valid": false, "error": err.to_string() }),
    };
    println!("{}", serde_json::to_string_pretty(&document)?);
    loaded.map(drop).context("invalid configuration")
}
