//! `predictio`: the front of the command. It does one thing itself, the
//! start of `predictio run -- CMD`, and execs the whole command
//! (`predictio-full`, installed beside it) for everything else.
//!
//! A cold start reads a binary whole (the first fault's read-around), and
//! `run`'s own cost is what a user waits for before the command starts.
//! So the front starts the command at once:
//!
//! - beside a running daemon that replays launches, with `-q`, it becomes
//!   the command (the daemon observes and replays it as any program);
//! - otherwise, when the launch store has no profile of the command (a
//!   profile is replayed by the whole command as the command execs), it
//!   starts the command with a private hint socket, and if the command is
//!   still running after [`GRACE`], execs the whole command to
//!   follow it (`run --adopt`), handing over the socket.
//!
//! Anything else, and any argument it does not know, goes to the whole
//! command unchanged, which parses and reports as it always does.

mod handoff;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus};
use std::time::{Duration, Instant};

/// The whole command, installed beside the front.
pub const FULL_BINARY: &str = "predictio-full";

/// How long the front of `run` waits for a command before it starts the
/// runtime (reading the whole command, ~10 MB, and setting up its
/// executor and pipeline: ~15 ms cold). A command that ends sooner could
/// not have been helped: eBPF observation takes ~100 ms to load, and a
/// prefetch it hinted would not have landed in time. It runs meanwhile.
pub const GRACE: Duration = Duration::from_millis(20);

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if args.first().is_some_and(|a| a == "run")
        && let Some(run) = RunArgs::parse(&args[1..])
    {
        return run.start();
    }
    exec_full(&args)
}

/// Replaces this process with the whole command, given `args`. Returns
/// only if it cannot.
fn exec_full(args: &[OsString]) -> ExitCode {
    let full = match handoff::beside(FULL_BINARY) {
        Ok(path) => path,
        Err(err) => {
            eprintln!("predictio: cannot find this binary's path: {err}");
            return ExitCode::from(127);
        }
    };
    let err = Command::new(&full).arg0(handoff::FRONT_BINARY).args(args).exec();
    eprintln!("predictio: cannot run {}: {err}", full.display());
    ExitCode::from(127)
}

/// `run`'s arguments, when they are the few the front handles; otherwise
/// the whole command parses them.
struct RunArgs {
    quiet: bool,
    no_daemon: bool,
    config: Option<PathBuf>,
    command: Vec<OsString>,
    /// The arguments as given (after `run`), for the whole command.
    given: Vec<OsString>,
}

impl RunArgs {
    /// `[-q|--quiet] [--no-daemon] [--config FILE|--config=FILE] -- CMD...`
    /// in any order; `None` for anything else (other options, `--help`, a
    /// missing command, arguments that are not UTF-8).
    fn parse(args: &[OsString]) -> Option<Self> {
        let mut run = Self { quiet: false, no_daemon: false, config: None, command: Vec::new(), given: args.to_vec() };
        let mut rest = args.iter();
        while let Some(arg) = rest.next() {
            match arg.to_str()? {
                "-q" | "--quiet" => run.quiet = true,
                "--no-daemon" => run.no_daemon = true,
                "--config" if run.config.is_none() => run.config = Some(rest.next()?.into()),
                "--" => {
                    run.command = rest.cloned().collect();
                    break;
                }
                other => match other.strip_prefix("--config=") {
                    Some(path) if run.config.is_none() && !path.is_empty() => run.config = Some(path.into()),
                    _ => return None,
                },
            }
        }
        (!run.command.is_empty() && run.command.iter().all(|a| a.to_str().is_some())).then_some(run)
    }

    /// Starts the command as the module describes.
    fn start(self) -> ExitCode {
        let Ok(settings) = predictio_daemon::config::Config::load(self.config.as_deref()) else {
            // The whole command says what is wrong with the configuration.
            return self.exec_full_run(Vec::new());
        };
        if self.quiet
            && !self.no_daemon
            && let Some(hint_socket) = handoff::daemon_hint_socket(&settings)
        {
            let err = handoff::exec_beside_daemon(&self.command, hint_socket.as_deref());
            return fail(format_args!("starting {}: {err}", self.command[0].display()));
        }
        let store = std::path::Path::new(predictio_daemon::launch::store::DEFAULT_DIR);
        if settings.launch.replay && predictio_daemon::launch::replay::may_have_profile(store, &self.command) {
            // Replayed as the command execs: the whole command starts it.
            return self.exec_full_run(Vec::new());
        }
        let dir = match handoff::HintDir::new() {
            Ok(dir) => dir,
            Err(_) => return self.exec_full_run(Vec::new()),
        };
        let socket_path = dir.socket();
        let socket = match bind(&socket_path) {
            Ok(socket) => socket,
            Err(_) => return self.exec_full_run(Vec::new()),
        };
        let started_ns = predictio_bpf::monotonic_now_ns();
        let started = Instant::now();
        let spawned =
            Command::new(&self.command[0]).args(&self.command[1..]).env("PREDICTIO_HINT_SOCK", &socket_path).spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(err) => return fail(format_args!("starting {}: {err}", self.command[0].display())),
        };
        if let Some(status) = wait_for(&mut child, GRACE) {
            drop(dir);
            if !self.quiet {
                eprintln!(
                    "\npredictio run: {} finished in {:.3} s ({status}), before predictio's runtime started: \
                     nothing was observed or prefetched",
                    self.command[0].display(),
                    started.elapsed().as_secs_f64()
                );
            }
            return exit_as(&self.command[0], status);
        }
        // Still running: the whole command follows it from here.
        handoff::block_run_signals(true);
        if rustix::io::fcntl_setfd(&socket, rustix::io::FdFlags::empty()).is_ok() {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
            let adopt: Vec<OsString> = vec![
                "--adopt".into(),
                child.id().to_string().into(),
                "--hint-fd".into(),
                fd.to_string().into(),
                "--hint-dir".into(),
                dir.path.clone().into(),
                "--started-ns".into(),
                started_ns.to_string().into(),
            ];
            // Returns only if it cannot: an exec runs no destructor, so the
            // directory is the whole command's to remove from here on.
            self.exec_full_run(adopt);
        }
        // The command runs on without us: wait for it as `run` would.
        handoff::block_run_signals(false);
        let status = child.wait();
        drop(dir);
        match status {
            Ok(status) => exit_as(&self.command[0], status),
            Err(err) => fail(format_args!("waiting for {}: {err}", self.command[0].display())),
        }
    }

    /// Execs `predictio-full run`, with `extra` (the hand-over's hidden
    /// arguments) before the arguments as given. Returns only if it cannot.
    fn exec_full_run(&self, extra: Vec<OsString>) -> ExitCode {
        let mut args: Vec<OsString> = vec!["run".into()];
        args.extend(extra);
        args.extend(self.given.iter().cloned());
        exec_full(&args)
    }
}

/// `run`'s private hint socket at `path` (in a directory of its own): a
/// datagram socket that any of the command's processes may write to
/// (mode 0666, inside the private directory).
fn bind(path: &std::path::Path) -> std::io::Result<std::os::unix::net::UnixDatagram> {
    use std::os::unix::fs::PermissionsExt;
    let socket = std::os::unix::net::UnixDatagram::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(socket)
}

/// Waits at most `grace` for `child` to end: its status if it did.
fn wait_for(child: &mut Child, grace: std::time::Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + grace;
    let pidfd = rustix::process::Pid::from_raw(child.id() as i32)
        .and_then(|pid| rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok());
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        match &pidfd {
            Some(pidfd) => {
                let mut fds = [rustix::event::PollFd::new(pidfd, rustix::event::PollFlags::IN)];
                let timeout = rustix::event::Timespec::try_from(left).ok();
                let _ = rustix::event::poll(&mut fds, timeout.as_ref());
            }
            // Kernels before 5.3 (no pidfd): look again shortly.
            None => std::thread::sleep(left.min(std::time::Duration::from_micros(500))),
        }
    }
}

/// Exits as `run` does when its command ends with `status`: with its exit
/// code, or as an error if a signal killed it.
fn exit_as(program: &OsStr, status: ExitStatus) -> ExitCode {
    match status.code() {
        Some(code) => ExitCode::from(code as u8),
        None => fail(format_args!("{} was killed ({status})", program.display())),
    }
}

/// Reports an error as the whole command does, and fails.
fn fail(message: std::fmt::Arguments<'_>) -> ExitCode {
    eprintln!("Error: {message}");
    ExitCode::FAILURE
}
