//! The daemon's choice of kernel event source: eBPF when it can run, else
//! fanotify, and a typed reason when neither can. A missing source is never
//! silent: [`Source::source_name`] says which one runs, and
//! [`SourceError::NoneAvailable`] carries both reasons.

use std::time::Duration;

use predictio::Event;

use crate::fallback::{FanotifyConfig, FanotifyError, FanotifyObserver};
use crate::{BpfError, Observer, ObserverConfig};

/// A running kernel event source.
#[derive(Debug)]
pub enum Source {
    /// eBPF observation: page accesses, misses, evictions, process trees.
    Ebpf(Box<Observer>),
    /// fanotify: file opens and execs only.
    Fanotify {
        /// The observer.
        observer: FanotifyObserver,
        /// Why eBPF could not run.
        ebpf_unavailable: BpfError,
    },
}

/// Why no source could start, or a running one failed.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// eBPF failed for a reason other than being unavailable (a bug or a
    /// kernel that changed under us): not hidden behind a fallback.
    #[error(transparent)]
    Bpf(#[from] BpfError),
    /// fanotify failed while running, or for a reason other than being
    /// unavailable.
    #[error(transparent)]
    Fanotify(#[from] FanotifyError),
    /// Neither source can run here.
    #[error("no kernel event source: eBPF: {ebpf}; fanotify: {fanotify}")]
    NoneAvailable {
        /// Why eBPF could not run.
        ebpf: Box<BpfError>,
        /// Why fanotify could not run.
        fanotify: Box<FanotifyError>,
    },
}

impl Source {
    /// Starts eBPF observation; if it is unavailable here
    /// ([`BpfError::is_unavailable`]), starts fanotify on `fallback`'s mounts.
    pub fn open(config: ObserverConfig, fallback: &FanotifyConfig) -> Result<Source, SourceError> {
        let ebpf = match Observer::load(config) {
            Ok(observer) => return Ok(Source::Ebpf(Box::new(observer))),
            Err(err) if err.is_unavailable() => err,
            Err(err) => return Err(err.into()),
        };
        match FanotifyObserver::new(fallback) {
            Ok(observer) => {
                tracing::warn!(reason = %ebpf, "eBPF observation unavailable; running on fanotify (opens and execs only)");
                Ok(Source::Fanotify { observer, ebpf_unavailable: ebpf })
            }
            Err(fanotify) if fanotify.is_unavailable() || matches!(fanotify, FanotifyError::NoMounts) => {
                Err(SourceError::NoneAvailable { ebpf: Box::new(ebpf), fanotify: Box::new(fanotify) })
            }
            Err(err) => Err(err.into()),
        }
    }

    /// `"ebpf"` or `"fanotify"`.
    pub fn source_name(&self) -> &'static str {
        match self {
            Source::Ebpf(observer) => observer.source_name(),
            Source::Fanotify { observer, .. } => observer.source_name(),
        }
    }

    /// The eBPF observer, to follow processes; `None` on fanotify (which
    /// reports every process on its mounts).
    pub fn ebpf_mut(&mut self) -> Option<&mut Observer> {
        match self {
            Source::Ebpf(observer) => Some(&mut **observer),
            Source::Fanotify { .. } => None,
        }
    }

    /// Delivers pending events, waiting up to `timeout` if there are none.
    /// Returns the number delivered.
    pub fn poll(&mut self, timeout: Duration, on_event: &mut impl FnMut(Event)) -> Result<usize, SourceError> {
        match self {
            Source::Ebpf(observer) => Ok(observer.poll(timeout, on_event)?),
            Source::Fanotify { observer, .. } => Ok(observer.poll(timeout, on_event)?),
        }
    }
}
