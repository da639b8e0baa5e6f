//! The service: everything `predictio daemon` runs, wired together.

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use predictio::Executor;
use predictio::executor::ExecutorError;
use predictio::pipeline::Pipeline;

use crate::config::{AssumedMissing, Config, Invalid};
use crate::control::{ControlError, ControlServer};
use crate::metrics::{MetricsError, MetricsServer};
use crate::sources::{Sources, SourcesError};
use crate::status::Status;

/// Why the service could not start. Each variant names the part that
/// failed; what it runs into while running is logged, not returned.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The configuration has settings that cannot work
    /// ([`Config::validate`]).
    #[error("invalid configuration: {0}")]
    Config(#[from] Invalid),
    /// SIGTERM/SIGINT handlers could not be installed.
    #[error("installing signal handlers: {0}")]
    Signals(#[source] io::Error),
    /// The executor could not start.
    #[error("starting the executor: {0}")]
    Executor(#[from] ExecutorError),
    /// A configured policy has no implementation in the core.
    #[error("policy {0} is not in this build")]
    UnknownPolicy(crate::config::PolicyName),
    /// A directory the daemon would use (a socket's, the profile store's)
    /// is not safe for root to use: not root's, or writable by others, or
    /// on a path others can redirect.
    #[error("{key}: {source}")]
    Path {
        /// The configuration key naming it.
        key: &'static str,
        /// Which directory and why.
        source: predictio::secure_dir::UnsafeDir,
    },
    /// The profile store cannot be used (see
    /// [`crate::launch::store::Store::open`]).
    #[error("[launch] store: {0}")]
    Store(#[from] crate::launch::store::StoreError),
    /// A thread of the launch service (learner, use marker, replayer)
    /// could not start.
    #[error("starting the launch {what} thread: {source}")]
    LaunchThread {
        /// "learner", "use marker" or "replayer".
        what: &'static str,
        /// Why.
        source: io::Error,
    },
    /// The event pipeline could not start.
    #[error("starting the pipeline: {0}")]
    Pipeline(#[source] io::Error),
    /// The hint socket or the kernel event source could not start.
    #[error(transparent)]
    Sources(#[from] SourcesError),
    /// The control socket could not be bound.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The metrics endpoint could not be bound.
    #[error(transparent)]
    Metrics(#[from] MetricsError),
}

/// Runs the daemon with `config` until SIGTERM or SIGINT, or until
/// `exit_after` has passed (tests, demos): the executor, the policies (the
/// launch service among them), the event sources (the hint socket bound),
/// the stored launch profiles, the control socket and the metrics
/// endpoint, in that order; it stops the sources on the way out. While
/// nothing happens every thread sleeps, each woken only by its source (a
/// socket, a channel, the eBPF ring, a queue) or its stop, none by a timer
/// (timeouts are kept for real deadlines: `exit_after`, the sweep of gone
/// hint clients, the expiry of unhit prefetches, the marking of replayed
/// profiles a minute after a replay). The
/// configuration is validated first ([`Config::validate`]) and its warnings
/// ([`Config::warnings`]) logged; then every directory it will use is
/// checked (created if missing: the sockets' 0755, the store's 0700) and
/// the store opened, and the start refused, naming the path and why, if one
/// is not the daemon's alone ([`predictio::secure_dir`]) or the store
/// cannot be used.
pub fn run(config: &Config, exit_after: Option<Duration>) -> Result<(), ServiceError> {
    config.validate()?;
    for warning in config.warnings() {
        tracing::warn!("{warning}");
    }
    // Before anything calls them: the executor, the observer and the
    // policies all take their fallbacks from here on.
    AssumedMissing::apply(&config.observe.assume_missing);
    let stop = Arc::new(AtomicBool::new(false));
    // SIGTERM and SIGINT write to a socket pair the main thread sleeps on.
    let (signalled, signal_end) = std::os::unix::net::UnixStream::pair().map_err(ServiceError::Signals)?;
    let mut handlers = Vec::new();
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        let end = signal_end.try_clone().map_err(ServiceError::Signals)?;
        handlers.push(signal_hook::low_level::pipe::register(signal, end).map_err(ServiceError::Signals)?);
    }
    drop(signal_end);

    let launch = config.launch.learn || config.launch.replay;
    let dirs = [
        (config.hints.enabled, "[hints] socket", config.hints.socket.parent()),
        (true, "[control] socket", config.control.socket.parent()),
    ];
    for (key, dir) in dirs.into_iter().filter_map(|(used, key, dir)| used.then_some((key, dir?))) {
        predictio::secure_dir::prepare(dir, 0o755).map_err(|source| ServiceError::Path { key, source })?;
    }
    if launch {
        predictio::secure_dir::prepare(&config.launch.store, 0o700)
            .map_err(|source| ServiceError::Path { key: "[launch] store", source })?;
        crate::launch::check_store(&config.launch)?;
    }

    let executor = Arc::new(Executor::new(config.executor_config())?);
    if let Some(reason) = executor.fallback_reason() {
        tracing::warn!("{reason}");
    }
    let mut policies = config
        .policies
        .iter()
        .map(|&name| name.build().ok_or(ServiceError::UnknownPolicy(name)))
        .collect::<Result<Vec<_>, _>>()?;
    // Launch learning and replay: the policy in the dispatcher, the
    // learner (naming, store, planning replays) and the replayer (opening
    // a replay's files at its exec) on threads of their own. The stored
    // profiles are booked once the sockets are bound.
    let mut _learner = None;
    let mut _marker = None;
    let mut _replayer = None;
    let mut book = None;
    let scores = crate::launch::Scores::new(config.launch.shadow);
    // Set once observation runs on eBPF: the replayer quiets the hits of the
    // launches it finds warm.
    let quiet_slot: Arc<std::sync::OnceLock<predictio_bpf::Quieter>> = Arc::default();
    if launch {
        let booked = predictio::launch::ReplayBook::default();
        let (jobs, job_rx) = predictio::launch::replay_channel();
        // Learning alone (`replay = false`) books nothing: the learner
        // puts replays in the book only when replaying, and so does this.
        if config.launch.replay {
            let marker = crate::launch::start_use_marker(config.launch.clone(), booked.clone())
                .map_err(|source| ServiceError::LaunchThread { what: "use marker", source })?;
            // The marker sleeps until a replay ran.
            let wakeup = Arc::clone(marker.wakeup());
            _marker = Some(marker);
            let sink: Arc<dyn predictio::executor::RequestSink> = executor.clone();
            let shadow = config.launch.shadow;
            let slot = Arc::clone(&quiet_slot);
            let on_warm = move |job: &predictio::launch::ReplayJob, set: u32| {
                if let Some(quieter) = slot.get() {
                    crate::launch::replay::quiet_warm(quieter, job, set);
                }
            };
            let replayer =
                crate::launch::replay::start_replayer_with(sink, job_rx, shadow, move || wakeup.nudge(), on_warm)
                    .map_err(|source| ServiceError::LaunchThread { what: "replayer", source })?;
            scores.follow(replayer.totals());
            _replayer = Some(replayer);
            book = Some(booked.clone());
        }
        let policy = if config.launch.learn {
            let (tx, rx) = std::sync::mpsc::sync_channel(64);
            let limits = predictio::launch::WindowLimits {
                idle_ms: config.launch.idle_ms,
                cap_ms: config.launch.cap_ms,
                ..Default::default()
            };
            let learner = crate::launch::start_learner(config.launch.clone(), rx, booked.clone(), scores.clone());
            _learner = Some(learner.map_err(|source| ServiceError::LaunchThread { what: "learner", source })?);
            predictio::launch::LaunchPolicy::learning(booked, limits, config.launch.max_windows, tx).replaying_to(jobs)
        } else {
            predictio::launch::LaunchPolicy::new(booked, jobs)
        };
        policies.push(Box::new(policy));
    }
    // Observed files get descriptors through the processes that touch them,
    // so that policies can act on kernel observation alone.
    let resolve = Some(predictio::resolve::ResolverConfig::default());
    let pipeline = Arc::new(
        Pipeline::start_with(Arc::clone(&executor), policies, 1 << 16, resolve).map_err(ServiceError::Pipeline)?,
    );
    let sources = Sources::start(config, pipeline.sender(), Arc::clone(&stop))?;
    if let Some(quieter) = sources.quieter() {
        let _ = quiet_slot.set(quieter);
    }
    let sources = Arc::new(Mutex::new(sources));
    let started = Instant::now();
    // The stored profiles, once the hint socket is bound and observation
    // runs (booking opens no file, so it cannot keep a socket from binding)
    // and before the control socket, which tools take as the daemon being
    // up: the first exec a client starts after it appears is replayed.
    if launch {
        let loaded = match &book {
            Some(book) => crate::launch::load_book(&config.launch, book, &scores)?,
            None => 0,
        };
        tracing::info!(loaded, learn = config.launch.learn, store = %config.launch.store.display(), "launch profiles");
    }

    let status = {
        let pipeline = Arc::clone(&pipeline);
        let sources = Arc::clone(&sources);
        let assumed: Vec<String> = config.observe.assume_missing.iter().map(|f| f.name().to_owned()).collect();
        let scores = launch.then(|| scores.clone());
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
                assumed_missing: assumed.clone(),
                policies: pipeline.policies().to_vec(),
                executor: pipeline.executor().stats(),
                pipeline: pipeline.stats(),
                hints: sources.hint_stats(),
                observer: sources.observer_stats(),
                launch: scores.as_ref().map(crate::launch::Scores::status),
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
    // Sockets bound, sources started: what is ordered after us may start.
    crate::notify::ready();
    // Asleep until a signal comes (or `exit_after` passes): the main thread
    // has nothing else to do, and no other thread wakes on a timer either.
    let deadline = exit_after.map(|d| started + d);
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        if left.is_some_and(|left| left.is_zero()) {
            break;
        }
        match predictio::os::poll_readable(signalled.as_fd(), left) {
            Ok(true) => break,
            Ok(false) => {}
            Err(err) => {
                tracing::warn!(%err, "waiting for a signal");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    for handler in handlers {
        signal_hook::low_level::unregister(handler);
    }
    stop.store(true, Ordering::Relaxed);
    crate::notify::stopping();
    tracing::info!("predictio daemon stopping");
    sources.lock().unwrap_or_else(|e| e.into_inner()).stop();
    Ok(())
}
