//! Builds the loader and sets how the runtime library is linked.
//!
//! **The loader** (`libpredictio_sqlite.so`, the file programs load) is
//! `loader/loader.rs`, compiled here with `rustc` alone: `no_std`,
//! `panic=abort`, no dependencies (a cdylib with std carries std's panic
//! machinery, ~300 KB, and a cold load reads the whole file). It is
//! written into the profile's directory (`target/release/`, beside the
//! runtime library cargo puts there) and into its `deps/` (beside the
//! runtime library of this very build, where the tests load it from).
//!
//! **The runtime library** (`libpredictio_sqlite_runtime.so`, the cdylib;
//! the rlib and the tests are linked as usual):
//!
//! - release builds drop the symbol table (`--strip-all`), which nothing at
//!   run time reads;
//! - the unwinder is linked in (`libgcc_eh.a`, as `-static-libgcc` does)
//!   instead of loading `libgcc_s.so.1`, a second file to open, map and
//!   relocate; panics are still caught at the FFI edge;
//! - symbols of the linked libraries are not exported (`--exclude-libs`):
//!   its interface is the loader's table of functions.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed=loader/loader.rs");
    println!("cargo::rerun-if-changed=loader/abi.rs");
    println!("cargo::rerun-if-env-changed=CC");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" {
        return;
    }
    if var("CARGO_FEATURE_EXTENSION").is_empty() {
        return;
    }
    build_loader();
    if var("CARGO_CFG_TARGET_ENV") != "gnu" {
        return;
    }
    let link_arg = |arg: &str| println!("cargo::rustc-cdylib-link-arg={arg}");
    if var("PROFILE") == "release" {
        link_arg("-Wl,--strip-all");
    }
    if let Some(unwinder) = static_unwinder() {
        link_arg(&format!("-Wl,--push-state,--whole-archive,{},--pop-state", unwinder.display()));
    }
    link_arg("-Wl,--exclude-libs,ALL");
}

/// Compiles `loader/loader.rs` into `OUT_DIR`, then copies it to the
/// profile's directory and its `deps/`. Fails the build if it does not
/// compile: the extension is this crate's product.
fn build_loader() {
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let built = out_dir.join("libpredictio_sqlite.so");
    let mut cmd = Command::new(rustc);
    cmd.arg(manifest.join("loader/loader.rs"))
        .args(["--edition=2024", "--crate-type=cdylib", "--crate-name=predictio_sqlite"])
        .args(["-Cpanic=abort", "-Copt-level=s", "-Ccodegen-units=1", "-Cdebuginfo=0", "-Cstrip=symbols"])
        .args(["-Dwarnings", "-Dunsafe_op_in_unsafe_fn"])
        .arg("-o")
        .arg(&built);
    let (target, host) = (std::env::var("TARGET").unwrap_or_default(), std::env::var("HOST").unwrap_or_default());
    if !target.is_empty() && target != host {
        cmd.args(["--target", &target]);
    }
    // The rustflags cargo would give a crate of this build (a linker
    // choice, for one), minus what only makes sense with cargo's own.
    if let Ok(flags) = std::env::var("CARGO_ENCODED_RUSTFLAGS") {
        cmd.args(flags.split('\x1f').filter(|f| !f.is_empty()));
    }
    let status = cmd.status().expect("running rustc for the loader");
    assert!(status.success(), "the loader (loader/loader.rs) did not compile");
    // OUT_DIR is <target>/<profile>/build/<package>-<hash>/out.
    let Some(profile_dir) = out_dir.ancestors().nth(3).filter(|dir| dir.join("deps").is_dir()) else {
        println!("cargo::warning=the loader is only in {}: no profile directory above it", built.display());
        return;
    };
    for dir in [profile_dir.to_path_buf(), profile_dir.join("deps")] {
        copy(&built, &dir.join("libpredictio_sqlite.so"));
    }
}

/// Copies `from` over `to` through a temporary file renamed into place, so
/// that a process loading `to` meanwhile sees one whole file or the other.
fn copy(from: &Path, to: &Path) {
    let tmp = to.with_extension("so.tmp");
    std::fs::copy(from, &tmp).and_then(|_| std::fs::rename(&tmp, to)).unwrap_or_else(|err| {
        panic!("copying the loader to {}: {err}", to.display());
    });
}

/// The C compiler's `libgcc_eh.a`, if it has one (else the runtime library
/// keeps needing `libgcc_s.so.1`, as any Rust cdylib does).
fn static_unwinder() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc).arg("-print-file-name=libgcc_eh.a").output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}
