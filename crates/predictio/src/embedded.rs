//! An embedded runtime: policies and one executor inside the application's
//! own process, for adapters that see the traversal themselves (a database
//! wrapper, a VFS shim) and need no daemon.
//!
//! ```text
//!  adapter ─ Event ─ Embedded::dispatch ─ Runtime (policies) ─ Request ─ Executor (worker thread) ─ page cache
//! ```
//!
//! [`Embedded::dispatch`] never blocks on I/O: the policies are pure logic
//! and the executor only queues (a full queue drops and counts). The
//! runtime sits behind a mutex so that one embedded runtime may serve every
//! thread of a process; a poisoned mutex (a policy panicked mid-event) is
//! taken over, since its state stays bounded and usable.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::Event;
use crate::executor::{Executor, ExecutorConfig, ExecutorError};
use crate::file::FileRef;
use crate::policy::Policy;
use crate::runtime::{Runtime, RuntimeStats};

/// Policies and an executor running in-process.
#[derive(Debug)]
pub struct Embedded {
    executor: Arc<Executor>,
    runtime: Mutex<Runtime>,
}

impl Embedded {
    /// Starts an executor with `config` and a runtime dispatching to
    /// `policies`.
    pub fn new(config: ExecutorConfig, policies: Vec<Box<dyn Policy>>) -> Result<Self, ExecutorError> {
        let executor = Arc::new(Executor::new(config)?);
        let mut runtime = Runtime::new(executor.clone());
        for policy in policies {
            runtime.add_policy(policy);
        }
        Ok(Self { executor, runtime: Mutex::new(runtime) })
    }

    /// Holds `file` so that the policies may prefetch it (requests for files
    /// not held are ignored).
    pub fn hold(&self, file: FileRef) {
        self.lock().hold_file(file);
    }

    /// Dispatches one event to the interested policies and queues their
    /// requests (non-blocking).
    pub fn dispatch(&self, event: &Event) {
        self.lock().dispatch(event);
    }

    /// The executor (its counters, `wait_idle`, hit accounting).
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// The runtime's counters.
    pub fn stats(&self) -> RuntimeStats {
        self.lock().stats()
    }

    fn lock(&self) -> MutexGuard<'_, Runtime> {
        self.runtime.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policies::btree::BtreePolicy;

    #[test]
    fn dispatches_to_its_policies_and_queues_requests() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("db");
        std::fs::write(&path, vec![7u8; 64 * 4096]).expect("write");
        let file = FileRef::open(&path).expect("open");
        let id = file.id();
        let embedded =
            Embedded::new(ExecutorConfig::default(), vec![Box::new(BtreePolicy::default())]).expect("executor");
        embedded.hold(file);
        let children: Arc<[u64]> = (10..40).collect();
        for position in 0..6 {
            embedded.dispatch(&Event::TreeChildEnter {
                file: id,
                parent: 1,
                children: children.clone(),
                position,
                child_pages: 1,
            });
        }
        let stats = embedded.stats();
        assert_eq!(stats.events, 6);
        assert!(stats.requests >= 2, "a scan of six children asks ahead: {stats:?}");
        assert!(embedded.executor().wait_idle(std::time::Duration::from_secs(5)));
        assert!(embedded.executor().stats().total.requested_pages >= 4);
    }
}
