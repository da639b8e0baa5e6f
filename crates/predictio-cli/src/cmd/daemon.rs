//! `predictio daemon`: the long-running service — event sources, policies,
//! the executor, the control socket and (opt-in) the metrics endpoint.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use predictio::Executor;
use predictio::pipeline::Pipeline;

use crate::daemon::config::Config;
use crate::daemon::control::ControlServer;
use crate::daemon::metrics::MetricsServer;
use crate::daemon::sources::Sources;
use crate::daemon::status::Status;

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
    #[arg(long)]
    exit_after: Option<f64>,
}

/// Runs `daemon`.
pub fn run(args: Args) -> Result<()> {
    let config = Config::load(args.config.as_deref())?;
    if args.print_config {
        println!("{config:#?}");
        return Ok(());
    }
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, Arc::clone(&stop)).context("installing signal handlers")?;
    }

    let executor = Arc::new(Executor::new(config.executor_config()?).context("starting the executor")?);
    if let Some(reason) = executor.fallback_reason() {
        tracing::warn!("{reason}");
    }
    let mut policies = config
        .policies
        .iter()
        .map(|name| predictio::policies::by_name(name).with_context(|| format!("unknown policy {name}")))
        .collect::<Result<Vec<_>>>()?;
    // Launch learning and replay: the policy in the dispatcher, the
    // learner (naming, store, opening files) on its own thread.
    let mut _learner = None;
    let mut _marker = None;
    if config.launch.learn || config.launch.replay {
        let book = predictio::launch::ReplayBook::default();
        // Learning alone (`replay = false`) books nothing: the learner
        // puts replays in the book only when replaying, and so does this.
        let loaded = if config.launch.replay {
            _marker = Some(crate::daemon::launch::start_use_marker(config.launch.clone(), book.clone())?);
            crate::daemon::launch::load_book(&config.launch, &book)
        } else {
            0
        };
        let policy = if config.launch.learn {
            let (tx, rx) = std::sync::mpsc::sync_channel(64);
            let limits = predictio::launch::WindowLimits {
                idle_ms: config.launch.idle_ms,
                cap_ms: config.launch.cap_ms,
                ..Default::default()
            };
            _learner = Some(crate::daemon::launch::start_learner(config.launch.clone(), rx, book.clone())?);
            predictio::launch::LaunchPolicy::learning(book, limits, config.launch.max_windows, tx)
        } else {
            predictio::launch::LaunchPolicy::new(book)
        };
        policies.push(Box::new(policy));
        tracing::info!(loaded, learn = config.launch.learn, store = %config.launch.store.display(), "launch profiles");
    }
    // Observed files get descriptors through the processes that touch them,
    // so that policies can act on kernel observation alone.
    let resolve = Some(predictio::resolve::ResolverConfig::default());
    let pipeline = Arc::new(
        Pipeline::start_with(Arc::clone(&executor), policies, 1 << 16, resolve).context("starting the pipeline")?,
    );
    let sources = Arc::new(Mutex::new(Sources::start(&config, pipeline.sender(), Arc::clone(&stop))?));
    let started = Instant::now();

    let status = {
        let pipeline = Arc::clone(&pipeline);
        let sources = Arc::clone(&sources);
        move || {
            let sources = sources.lock().unwrap_or_else(|e| e.into_inner());
            Status {
                version: env!("CARGO_PKG_VERSION").into(),
                pid: std::process::id(),
                uptime_s: started.elapsed().as_secs_f64(),
                backend: pipeline.executor().backend().to_string(),
                fallback: pipeline.executor().fallback_reason().map(str::to_owned),
                source: sources.source_name().into(),
                source_note: sources.source_note(),
                policies: pipeline.policies().to_vec(),
                executor: pipeline.executor().stats(),
                pipeline: pipeline.stats(),
                hints: sources.hint_stats(),
                observer: sources.observer_stats(),
            }
        }
    };
    let status = Arc::new(status);
    let _control = {
        let status = Arc::clone(&status);
        ControlServer::start(&config.control.socket, move || status())?
    };
    let _metrics = if config.metrics.listen.is_empty() {
        None
    } else {
        let status = Arc::clone(&status);
        let server = MetricsServer::start(&config.metrics.listen, move || status())?;
        tracing::info!(addr = %server.addr, "metrics endpoint up");
        Some(server)
    };
    {
        let s = sources.lock().unwrap_or_else(|e| e.into_inner());
        tracing::info!(
            backend = %executor.backend(),
            source = s.source_name(),
            hints = %config.hints.socket.display(),
            control = %config.control.socket.display(),
            policies = ?config.policies,
            "predictio daemon running"
        );
    }
    let deadline = args.exit_after.map(|s| started + Duration::from_secs_f64(s.max(0.0)));
    while !stop.load(Ordering::Relaxed) && deadline.is_none_or(|d| Instant::now() < d) {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    tracing::info!("predictio daemon stopping");
    sources.lock().unwrap_or_else(|e| e.into_inner()).stop();
    Ok(())
}
