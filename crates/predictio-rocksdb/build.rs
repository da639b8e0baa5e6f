//! Links the system's RocksDB (Debian: `librocksdb-dev`, installed by
//! `scripts/deps.sh`). `ROCKSDB_LIB_DIR` points at another build of it.

fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_LIB_DIR");
    if let Ok(dir) = std::env::var("ROCKSDB_LIB_DIR") {
        println!("cargo:rustc-link-search=native={dir}");
    }
    println!("cargo:rustc-link-lib=dylib=rocksdb");
}
