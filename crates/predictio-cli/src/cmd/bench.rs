//! `predictio bench …`: runs the `predictio-bench` binary, which holds the
//! benchmark suite so that this binary does not link it.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::{Result, bail};

/// Arguments of `bench`: handed to `predictio-bench` as they are.
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct Args {
    /// The workload and its options; `predictio bench --help` lists them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    args: Vec<String>,
}

/// `predictio-bench` beside this binary, else on `PATH`.
fn bench_binary() -> Option<PathBuf> {
    let beside = std::env::current_exe().ok()?.with_file_name("predictio-bench");
    if beside.is_file() {
        return Some(beside);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join("predictio-bench"))
        .find(|p| p.is_file())
}

/// Runs `bench`: replaces this process with `predictio-bench ARGS`.
pub fn run(args: Args) -> Result<()> {
    let Some(bench) = bench_binary() else {
        bail!(
            "predictio-bench not found beside {} or on PATH: build it with `cargo build --release -p predictio-bench`",
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "predictio".into())
        );
    };
    let typed: Vec<String> =
        args.args.iter().map(|a| if a.contains(' ') { format!("{a:?}") } else { a.clone() }).collect();
    let command = format!("predictio bench {}", typed.join(" "));
    let mut child = std::process::Command::new(&bench);
    child.args(&args.args).env("PREDICTIO_BENCH_COMMAND", command.trim_end());
    // The benches run `predictio` as users type it: the front.
    if std::env::var_os("PREDICTIO_BIN").is_none()
        && let Ok(front) = crate::handoff::beside(crate::handoff::FRONT_BINARY)
    {
        child.env("PREDICTIO_BIN", front);
    }
    let err = child.exec();
    bail!("running {}: {err}", bench.display())
}
