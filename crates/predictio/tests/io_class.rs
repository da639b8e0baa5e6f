//! The metadata threads' I/O class, read back from the kernel. A file of
//! its own, so that its process holds no other test's executor threads.
//! Needs root (`CAP_SYS_ADMIN` for the real-time class); outside CI it
//! skips with a message, under `CI=true` a skip is a failure.

use std::time::{Duration, Instant};

use predictio::Executor;
use predictio::executor::ExecutorConfig;
use predictio::testing::{is_root, skip};

/// The threads of this process named `name`.
fn threads_named(name: &str) -> Vec<u32> {
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task").flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end().starts_with(name)
            && let Some(tid) = entry.file_name().to_str().and_then(|t| t.parse().ok())
        {
            tids.push(tid);
        }
    }
    tids
}

#[test]
fn metadata_threads_read_in_the_realtime_class_as_root() {
    use predictio::os::{IoPriority, thread_io_priority};
    if !is_root() && skip("needs root (CAP_SYS_ADMIN) for the real-time I/O class") {
        return;
    }
    for realtime in [true, false] {
        let exec = Executor::new(ExecutorConfig { meta_realtime_io: realtime, ..ExecutorConfig::default() })
            .expect("executor");
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut classes = Vec::new();
        while Instant::now() < deadline {
            classes = threads_named("predictio-meta")
                .into_iter()
                .map(|tid| thread_io_priority(tid).expect("ioprio_get").class)
                .collect();
            if classes.len() >= exec.meta_threads() && classes.iter().all(|&c| (c == IoPriority::REALTIME) == realtime)
            {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(classes.len() >= exec.meta_threads(), "{classes:?}");
        assert!(
            classes.iter().all(|&c| (c == IoPriority::REALTIME) == realtime),
            "meta_realtime_io {realtime}: classes {classes:?}"
        );
        drop(exec);
        // The pool's threads are gone with it, so the next round sees its own.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !threads_named("predictio-meta").is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
