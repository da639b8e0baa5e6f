//! Link settings of the loadable extension (`libpredictio_sqlite.so`, the
//! cdylib only; the rlib and the tests are linked as usual).
//!
//! Every process that `.load`s the extension reads the whole file on a cold
//! cache (the first page fault's read-around covers it), so its size is the
//! load's cost:
//!
//! - release builds drop the symbol table (`--strip-all`): a quarter of the
//!   file, which nothing at run time reads;
//! - the unwinder is linked in (`libgcc_eh.a`, as `-static-libgcc` does)
//!   instead of loading `libgcc_s.so.1`, a second file to open, map and
//!   relocate at every load; panics are still caught at the FFI edge;
//! - symbols of the linked libraries are not exported (`--exclude-libs`):
//!   the extension's interface is its two entry points, and the client
//!   library's C API (linked through the core) would otherwise be exported
//!   and kept.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CC");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    if var("CARGO_CFG_TARGET_OS") != "linux" || var("CARGO_CFG_TARGET_ENV") != "gnu" {
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

/// The C compiler's `libgcc_eh.a`, if it has one (else the extension keeps
/// needing `libgcc_s.so.1`, as any Rust cdylib does).
fn static_unwinder() -> Option<PathBuf> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc).arg("-print-file-name=libgcc_eh.a").output().ok()?;
    let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    (out.status.success() && path.is_absolute() && path.is_file()).then_some(path)
}
