//! The calls of newer kernels taken away ([`predictio::os::assume_missing`],
//! the daemon's `[observe] assume_missing`), as on Linux 5.14–6.4: every
//! caller must take its fallback and get the same answers. One test, in a
//! binary of its own: taking a call away is for the whole process, and the
//! answers with the call are taken first, to compare.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use predictio::executor::{BackendKind, Executor, ExecutorConfig};
use predictio::model::{ModelError, ModelLayout};
use predictio::os::{Advice, NewerCall, assume_missing, assumed_missing, fadvise};
use predictio::{FileRef, PAGE_SIZE};

/// A safetensors file of one float16 tensor of `elements` elements.
fn safetensors(path: &std::path::Path, elements: u64) {
    let bytes = elements * 2;
    let header = format!(r#"{{"w":{{"dtype":"F16","shape":[{elements}],"data_offsets":[0,{bytes}]}}}}"#);
    let mut file = std::fs::File::create(path).expect("create");
    file.write_all(&(header.len() as u64).to_le_bytes()).expect("write");
    file.write_all(header.as_bytes()).expect("write");
    file.write_all(&vec![7u8; bytes as usize]).expect("write");
    file.sync_all().expect("fsync");
}

/// Drops `file`'s pages, then reads pages `pages` of it through a
/// descriptor without readahead, so that exactly those are cached.
fn cache_only(path: &std::path::Path, pages: std::ops::Range<u64>) {
    let file = std::fs::File::open(path).expect("open");
    fadvise(file.as_fd(), 0, 0, Advice::DontNeed).expect("DONTNEED");
    fadvise(file.as_fd(), 0, 0, Advice::Random).expect("RANDOM");
    let mut page = vec![0u8; PAGE_SIZE as usize];
    for p in pages {
        file.read_exact_at(&mut page, p * PAGE_SIZE).expect("read");
    }
}

#[test]
fn without_cachestat_io_uring_or_procmap_query_every_caller_falls_back_to_the_same_answers() {
    // /var/tmp: a disk filesystem on the machines this runs on (tmpfs pages
    // are not evicted by DONTNEED, which the residency checks need).
    let dir = tempfile::Builder::new().prefix("predictio-older-kernel").tempdir_in("/var/tmp").expect("tempdir");
    let data = dir.path().join("data");
    std::fs::write(&data, vec![1u8; 64 * PAGE_SIZE as usize]).expect("write");
    std::fs::File::open(&data).expect("open").sync_all().expect("fsync");
    let model = dir.path().join("model.safetensors");
    safetensors(&model, 64 * 1024);

    // With the calls, first.
    cache_only(&data, 8..24);
    let with = predictio::cache::residency(&FileRef::open(&data).expect("open")).expect("residency");
    let has_cachestat = predictio::os::cachestat(FileRef::open(&data).expect("open").as_fd(), 0, PAGE_SIZE).is_ok();

    for call in [NewerCall::Cachestat, NewerCall::IoUring, NewerCall::ProcmapQuery] {
        assume_missing(call);
        assert!(assumed_missing(call));
    }

    // cachestat answers as before Linux 6.5, and residency is counted with
    // mincore: the same pages.
    let file = FileRef::open(&data).expect("open");
    let err = predictio::os::cachestat(file.as_fd(), 0, PAGE_SIZE).expect_err("cachestat is taken away");
    assert_eq!(err.raw_os_error(), Some(libc::ENOSYS));
    cache_only(&data, 8..24);
    let without = predictio::cache::residency(&file).expect("residency through mincore");
    assert_eq!(without.resident, 16, "mincore counts the 16 pages read");
    if has_cachestat {
        assert_eq!(with.resident, without.resident, "cachestat and mincore agree");
    }

    // A model header is read from cached pages only, checked with mincore.
    let model_file = std::fs::File::open(&model).expect("open model");
    cache_only(&model, 0..0);
    assert!(
        matches!(ModelLayout::read_resident(&model_file, 1 << 20), Err(ModelError::NotResident { .. })),
        "an evicted header is not read"
    );
    cache_only(&model, 0..1);
    let (layout, read) = ModelLayout::read_resident(&model_file, 1 << 20).expect("a cached header is read");
    assert_eq!(layout.tensors.len(), 1);
    assert!(read > 0 && read <= PAGE_SIZE, "{read} bytes");

    // The io_uring executor issues through fadvise, and says why.
    let config = ExecutorConfig { backend: BackendKind::Uring, ..ExecutorConfig::default() };
    let executor = Executor::new(config).expect("executor");
    let reason = executor.fallback_reason().expect("io_uring falls back");
    assert!(reason.contains("io_uring"), "{reason}");

    // PROCMAP_QUERY answers as before Linux 6.11.
    let maps = std::fs::File::open("/proc/self/maps").expect("maps");
    let err = predictio::os::file_mappings(maps.as_fd(), 8, &mut Vec::new()).expect_err("PROCMAP_QUERY is taken away");
    assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
}
