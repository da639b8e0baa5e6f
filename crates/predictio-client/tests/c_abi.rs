//! The C ABI from C: the committed header declares every `extern "C"`
//! function of the crate, and `examples/c/hint_example.c` compiles against
//! the header and the built library (static and shared) and runs, sending
//! one frame of every kind to a socket this test reads and decodes.
//! `tests/c/limits.c` checks the library's bounds from C (unknown handles,
//! running out of descriptors, the cap on kept duplicates), and
//! `tests/c/secure_env.c`, made set-user-ID root and run as uid 65534, that
//! `$PREDICTIO_HINT_SOCK` cannot point a privileged program's hints (and
//! descriptors) at its caller's socket. That one needs root: outside CI it
//! skips with a message, under `CI=true` a skip is a failure.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use predictio_client::protocol::{self, Kind};

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Names of the `#[unsafe(no_mangle)]` `extern "C"` functions (the exported
/// symbols) defined in the crate's sources.
fn exported_functions() -> Vec<String> {
    let mut names = Vec::new();
    let src = crate_dir().join("src");
    for entry in std::fs::read_dir(&src).expect("read src/") {
        let path = entry.expect("dir entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read source");
        let mut exported = false;
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            if line.starts_with("#[unsafe(no_mangle)]") || line.starts_with("#[no_mangle]") {
                exported = true;
                continue;
            }
            let was_exported = std::mem::replace(&mut exported, false);
            if let Some(at) = line.find("extern \"C\" fn ") {
                assert!(was_exported || !line.starts_with("pub "), "{line}: a pub extern \"C\" fn without no_mangle");
                if !was_exported {
                    continue;
                }
                let rest = &line[at + "extern \"C\" fn ".len()..];
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                names.push(name);
            }
        }
    }
    names.sort();
    names
}

#[test]
fn header_declares_every_extern_function() {
    let header = std::fs::read_to_string(crate_dir().join("include/predictio.h")).expect("read predictio.h");
    let names = exported_functions();
    assert!(names.len() >= 12, "found only {names:?}");
    for name in &names {
        assert!(
            header.contains(&format!(" {name}(")) || header.contains(&format!("*{name}(")),
            "predictio.h does not declare {name}"
        );
    }
    // And the header declares nothing the library lacks.
    for word in header.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '(')) {
        if let Some(name) = word.strip_suffix('(')
            && name.starts_with("predictio_")
        {
            assert!(names.iter().any(|n| n == name), "predictio.h declares {name}, which lib does not export");
        }
    }
    // Limits quoted in the header.
    assert!(header.contains(&format!("at most {}", protocol::MAX_PAIRS)));
    assert!(header.contains(&format!("at most {}", protocol::MAX_CHILDREN)));
}

/// The directory holding `libpredictio_client.{a,so}` of this very build.
/// Cargo builds the library unit with all its crate types (rlib, cdylib,
/// staticlib) into `<target>/<profile>/deps/`, next to this test binary; only
/// `cargo build` also copies them up to `<target>/<profile>/`, so `deps/` is
/// the one that is never stale.
fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("test binary has a directory");
    for name in ["libpredictio_client.a", "libpredictio_client.so"] {
        assert!(
            deps.join(name).exists(),
            "{name} not found next to the test binary in {}: the crate's cdylib/staticlib crate types produce it",
            deps.display()
        );
    }
    deps.to_path_buf()
}

/// A temporary directory removed on drop (the client crate keeps even its
/// dev-dependencies to std and libc).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("predictio-c-abi-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[track_caller]
fn compile(out: &Path, args: &[&str]) {
    compile_source(&crate_dir().join("examples/c/hint_example.c"), out, args);
}

/// Compiles `source` against the header and `args` (the library) into `out`.
#[track_caller]
fn compile_source(example: &Path, out: &Path, args: &[&str]) {
    let include = crate_dir().join("include");
    let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_GNU_SOURCE", "-o"])
        .arg(out)
        .arg("-I")
        .arg(&include)
        .arg(example)
        .args(args)
        .status()
        .expect("run cc (a C compiler is needed to test the C ABI)");
    assert!(status.success(), "cc failed: {status}");
}

#[test]
fn shared_library_exports_exactly_the_header() {
    let lib = library_dir().join("libpredictio_client.so");
    let out = Command::new("nm").args(["-D", "--defined-only"]).arg(&lib).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm failed");
    let mut symbols: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .filter(|name| name.starts_with("predictio_"))
        .map(str::to_owned)
        .collect();
    symbols.sort();
    assert_eq!(symbols, exported_functions(), "exported symbols differ from the no_mangle functions");
}

#[test]
fn c_example_builds_and_runs_against_static_and_shared_library() {
    let lib = library_dir();
    let dir = TempDir::new();
    let static_bin = dir.path().join("hint_example_static");
    compile(
        &static_bin,
        &[
            lib.join("libpredictio_client.a").to_str().expect("utf-8 path"),
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ],
    );
    let shared_bin = dir.path().join("hint_example_shared");
    let rpath = format!("-Wl,-rpath,{}", lib.display());
    let libdir = format!("-L{}", lib.display());
    compile(&shared_bin, &[&libdir, "-lpredictio_client", &rpath]);

    let data = dir.path().join("data");
    std::fs::write(&data, vec![7u8; 1 << 16]).expect("write data file");
    let socket_path = dir.path().join("hint.sock");

    // The shared build finds its library through its rpath alone; cargo's
    // LD_LIBRARY_PATH may name an older copy in <target>/<profile>/.
    let run = |bin: &Path| Command::new(bin).env_remove("LD_LIBRARY_PATH").arg(&socket_path).arg(&data).output();
    for bin in [&static_bin, &shared_bin] {
        // No daemon: every hint is dropped, the program still succeeds.
        let out = run(bin).expect("run example");
        assert!(
            out.status.success(),
            "{} without daemon: {}: {}{}",
            bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );

        // A stand-in daemon: the frames arrive, one of each kind, in order.
        let server = UnixDatagram::bind(&socket_path).expect("bind stand-in daemon");
        server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let out = run(bin).expect("run example");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{} with daemon: {stdout}", bin.display());
        assert!(stdout.contains("sent=9 dropped=0"), "{stdout}");
        let mut kinds = Vec::new();
        let mut buf = vec![0u8; protocol::MAX_DATAGRAM];
        for _ in 0..9 {
            let n = server.recv(&mut buf).expect("receive a datagram from the C example");
            let frames: Vec<_> = protocol::frames(&buf[..n]).collect::<Result<_, _>>().expect("valid frames");
            if frames.len() > 1 {
                // The buffered datagram: 100 StreamRead frames.
                assert_eq!(frames.len(), 100);
                assert!(frames.iter().all(|f| f.kind() == Kind::StreamRead));
                continue;
            }
            kinds.push(frames[0].kind());
        }
        assert_eq!(
            kinds,
            [
                Kind::Register,
                Kind::Pages,
                Kind::ReadPlan,
                Kind::StreamRead,
                Kind::TreeChildEnter,
                Kind::TensorLayout,
                Kind::LayerStart,
                Kind::Unregister
            ]
        );
        drop(server);
        std::fs::remove_file(&socket_path).expect("remove socket");
    }
}

/// The arguments that link a C program against this build's static library.
fn static_link_args(lib: &Path) -> Vec<String> {
    let mut args = vec![lib.join("libpredictio_client.a").to_str().expect("utf-8 path").to_owned()];
    args.extend(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"].map(str::to_owned));
    args
}

/// Whether this process runs as root (real uid 0).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Skips a test for `reason` (as `predictio::testing::skip`, which this
/// std-only crate cannot depend on): prints it, or panics under `CI=true`.
#[track_caller]
fn skip(reason: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("under CI=true this test must run, but: {reason}");
    }
    eprintln!("skipping: {reason}");
    true
}

/// Regression: unknown handles were sent (and dropped as "no daemon")
/// instead of reported; on EMFILE `predictio_register` returned DROPPED and
/// left the handle unwritten; and the library kept a duplicate of every
/// registered descriptor without bound.
#[test]
fn c_program_sees_unknown_handles_descriptor_exhaustion_and_the_handle_cap() {
    let lib = library_dir();
    let dir = TempDir::new();
    let bin = dir.path().join("limits");
    let args = static_link_args(&lib);
    compile_source(&crate_dir().join("tests/c/limits.c"), &bin, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let data = dir.path().join("data");
    std::fs::write(&data, vec![7u8; 4096]).expect("write data file");
    let out = Command::new(&bin).arg(dir.path().join("none.sock")).arg(&data).output().expect("run limits");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(3) && skip(stdout.trim()) {
        return;
    }
    assert!(out.status.success(), "limits.c: {}\n{stdout}{stderr}", out.status);
    assert!(stdout.contains("limits ok"), "{stdout}");
}

/// Regression: the library honoured `$PREDICTIO_HINT_SOCK` in set-user-ID
/// programs, so their caller could have their hints, and the descriptors of
/// files only the program may open, sent to a socket of the caller's. Now
/// it is ignored when `AT_SECURE` is set (`secure_getenv(3)`). The control:
/// the same program without the set-user-ID bit honours it.
#[test]
fn a_set_user_id_program_ignores_the_socket_variable() {
    if !is_root() && skip("needs root to make a set-user-ID root program and run it as uid 65534") {
        return;
    }
    let lib = library_dir();
    let dir = TempDir::new();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod dir");
    let bin = dir.path().join("secure_env");
    let args = static_link_args(&lib);
    compile_source(
        &crate_dir().join("tests/c/secure_env.c"),
        &bin,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let data = dir.path().join("data");
    std::fs::write(&data, vec![7u8; 4096]).expect("write data file");
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o644)).expect("chmod data");
    let callers = dir.path().join("callers.sock");
    let socket = UnixDatagram::bind(&callers).expect("bind the caller's socket");
    std::fs::set_permissions(&callers, std::fs::Permissions::from_mode(0o666)).expect("chmod socket");
    socket.set_read_timeout(Some(Duration::from_millis(500))).expect("timeout");
    let run = || {
        let out = Command::new(&bin)
            .arg(&data)
            .env(protocol::SOCKET_ENV, &callers)
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run secure_env");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "secure_env: {}\n{stdout}{}", out.status, String::from_utf8_lossy(&out.stderr));
        stdout
    };
    let mut buf = vec![0u8; protocol::MAX_DATAGRAM];
    let mut received = || {
        let mut kinds = Vec::new();
        while let Ok(n) = socket.recv(&mut buf) {
            kinds.extend(protocol::frames(&buf[..n]).filter_map(Result::ok).map(|f| f.kind()));
        }
        kinds
    };

    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let stdout = run();
    assert!(stdout.contains("euid 65534 uid 65534"), "{stdout}");
    assert!(received().contains(&Kind::Register), "the control: a plain program honours the variable");

    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o4755)).expect("chmod u+s");
    let stdout = run();
    assert!(stdout.contains("euid 0 uid 65534"), "not set-user-ID root: {stdout}");
    let kinds = received();
    assert!(kinds.is_empty(), "a set-user-ID program sent {kinds:?} to the socket its caller named");
}
