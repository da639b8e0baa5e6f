//! `predictio hint FILE --range …`: ask the daemon (or the `predictio run`
//! around us) to prefetch ranges of a file, through the hint socket. The file
//! is opened here, with the caller's rights, and its descriptor is passed to
//! the daemon: nobody can hint a file they cannot read.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use predictio::PAGE_SIZE;
use predictio_client::Client;

use crate::units::parse_range;

/// Arguments of `hint`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The file.
    file: PathBuf,
    /// Byte range START..END or START+LEN (repeatable). Default: the whole
    /// file.
    #[arg(long = "range", value_name = "RANGE")]
    ranges: Vec<String>,
    /// Send the ranges as a read plan (segments read in this order) rather
    /// than plain page ranges.
    #[arg(long)]
    plan: bool,
    /// The hint socket. Default: $PREDICTIO_HINT_SOCK, else
    /// /run/predictio/hint.sock.
    #[arg(long)]
    socket: Option<PathBuf>,
}

/// Runs `hint`.
pub fn run(args: Args) -> Result<()> {
    let file = super::open(&args.file)?;
    let size = file.file().metadata()?.len();
    let mut spans = Vec::new();
    for text in &args.ranges {
        let span = parse_range(text)?;
        if span.start >= size {
            bail!("range {text:?} starts past the end of {} ({size} bytes)", args.file.display());
        }
        spans.push((span.start, span.end.min(size)));
    }
    if spans.is_empty() {
        spans.push((0, size));
    }
    let socket = args.socket.unwrap_or_else(predictio_client::protocol::default_socket_path);
    let client = Client::connect(&socket).with_context(|| format!("creating a client of {}", socket.display()))?;
    if !client.is_connected() {
        bail!("no predictio daemon at {} (start `predictio daemon`, or run under `predictio run`)", socket.display());
    }
    let handle = client.register(file.file()).context("registering the file")?;
    let sent = if args.plan {
        let segments: Vec<(u64, u64)> = spans.iter().map(|&(s, e)| (s, e - s)).collect();
        client.read_plan(handle, &segments)
    } else {
        let pages: Vec<(u64, u64)> = spans.iter().map(|&(s, e)| (s / PAGE_SIZE, e.div_ceil(PAGE_SIZE))).collect();
        client.pages(handle, &pages)
    };
    sent.context("sending the hint")?;
    let stats = client.stats();
    if stats.dropped > 0 {
        bail!("the daemon did not take the hint (socket busy or gone)");
    }
    // The hint socket is one-way; ask the daemon what it made of ours.
    let ack = client.sync(ANSWER_WITHIN).with_context(|| {
        format!(
            "the daemon at {} did not say whether it took the hint (busy, over budget, or too old)",
            socket.display()
        )
    })?;
    if ack.refused() > 0 {
        bail!(
            "the daemon refused {} of {} frames ({} invalid or not allowed, {} over this user's budget); \
             `predictio stat` shows the reasons",
            ack.refused(),
            // The count includes the Sync frame, which was taken.
            ack.refused() + ack.accepted.saturating_sub(1),
            ack.rejected,
            ack.limited
        );
    }
    Ok(())
}

/// How long `hint` waits for the daemon to say what it took.
const ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);
