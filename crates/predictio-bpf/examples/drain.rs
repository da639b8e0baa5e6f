//! Runs a command under the observer and prints its events: how a daemon (or
//! `predictio run`) drains the ring buffer.
//!
//! ```text
//! cargo run -p predictio-bpf --example drain -- cat /etc/os-release
//! ```
//!
//! The command is started blocked on a pipe, followed, then released, so no
//! event of it is missed.

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use predictio_bpf::{Observer, ObserverConfig};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.is_empty() {
        return Err("usage: drain CMD [ARG...]".into());
    }
    let mut observer = Observer::load(ObserverConfig::default())?;
    // `read _` blocks the shell until we write a line; `exec` keeps its pid.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("read _ && exec \"$@\"")
        .arg("sh")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    observer.follow(child.id())?;
    child.stdin.take().ok_or("no stdin")?.write_all(b"go\n")?;

    let mut print = |event| println!("{event:?}");
    while child.try_wait()?.is_none() {
        observer.poll(observer.poll_interval(), &mut print)?;
    }
    // The exit record may still be in flight: one more short poll.
    observer.poll(Duration::from_millis(5), &mut print)?;
    eprintln!("{} {:?}", observer.source_name(), observer.stats());
    Ok(())
}
