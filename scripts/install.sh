#!/usr/bin/env bash
# Installs predictio from this source tree, for systems without Debian
# packages (on Debian and Ubuntu, `cargo deb -p predictio-cli` makes a .deb).
#
#   scripts/install.sh [--no-build]   build (unless --no-build), then install
#   scripts/install.sh --uninstall    remove what an install put in place
#
# Installs, under PREFIX (default /usr/local):
#   $PREFIX/bin/predictio             the small front users type
#   $PREFIX/bin/predictio-full        the whole command (the front execs it)
#   $PREFIX/share/doc/predictio/      README, design notes, protocol, licences
# and, whatever the prefix:
#   /etc/systemd/system/predictio.service   ExecStart pointing at $PREFIX/bin
#   /etc/predictio/predictio.toml           only if absent: an existing
#                                           configuration is never replaced
# The service is neither enabled nor started; see the message at the end.
#
# The build runs `cargo build --release --locked -p predictio-cli` as the
# invoking user; it requires the eBPF object (clang and libbpf headers:
# scripts/deps.sh installs them on Debian and Ubuntu). Set
# PREDICTIO_BPF_REQUIRE=0 to build without eBPF observation instead. To
# build as yourself and install as root:
#   cargo build --release --locked -p predictio-cli
#   sudo scripts/install.sh --no-build
#
# DESTDIR stages the whole install under another root (packaging); systemctl
# is then not called. --uninstall keeps the configuration (/etc/predictio)
# and the daemon's state (/var/lib/predictio); give it the same PREFIX and
# DESTDIR as the install.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
prefix=${PREFIX:-/usr/local}
destdir=${DESTDIR:-}
build=1
action=install

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

for arg in "$@"; do
  case $arg in
    --no-build) build=0 ;;
    --uninstall) action=uninstall ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      echo "install.sh: unknown argument: $arg (try --help)" >&2
      exit 2
      ;;
  esac
done

case $prefix in
  /*) ;;
  *)
    echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2
    exit 2
    ;;
esac
prefix=${prefix%/}

bin_path=$prefix/bin/predictio
full_path=$prefix/bin/predictio-full
doc_dir=$prefix/share/doc/predictio
unit_path=/etc/systemd/system/predictio.service
config_path=/etc/predictio/predictio.toml
docs=(README.md docs/DESIGN.md docs/protocol.md LICENSE-MIT LICENSE-APACHE)

say() { echo "install.sh: $*"; }

# systemctl only for a live install on a machine that runs systemd.
systemd_live() {
  [ -z "$destdir" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null
}

need_write() {
  local dir=$1
  while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
  if [ ! -w "$dir" ]; then
    echo "install.sh: cannot write to $dir: run as root (e.g. sudo $0 --no-build), or set PREFIX or DESTDIR" >&2
    exit 1
  fi
}

if [ "$action" = uninstall ]; then
  need_write "$destdir$prefix"
  need_write "$destdir/etc/systemd/system"
  if systemd_live && [ -e "$unit_path" ]; then
    say "stopping and disabling predictio.service"
    systemctl disable --now predictio.service >/dev/null 2>&1 || true
  fi
  for path in "$bin_path" "$full_path" "$unit_path"; do
    if [ -e "$destdir$path" ]; then
      rm -f "$destdir$path"
      say "removed $destdir$path"
    fi
  done
  for doc in "${docs[@]}"; do
    rm -f "$destdir$doc_dir/$(basename "$doc")"
  done
  if [ -d "$destdir$doc_dir" ]; then
    if rmdir "$destdir$doc_dir" 2>/dev/null; then
      say "removed $destdir$doc_dir"
    else
      say "kept $destdir$doc_dir (it holds files this script did not install)"
    fi
  fi
  if systemd_live; then
    systemctl daemon-reload
  fi
  say "kept the configuration ($destdir/etc/predictio) and the daemon's state ($destdir/var/lib/predictio); delete them by hand if they are no longer wanted"
  exit 0
fi

target_dir=${CARGO_TARGET_DIR:-$repo/target}
built=$target_dir/release/predictio
built_full=$target_dir/release/predictio-full
if [ "$build" = 1 ]; then
  command -v cargo >/dev/null || {
    echo "install.sh: cargo not found; build first as a user with Rust, then run: $0 --no-build" >&2
    exit 1
  }
  say "building: cargo build --release --locked -p predictio-cli"
  (cd "$repo" && PREDICTIO_BPF_REQUIRE=${PREDICTIO_BPF_REQUIRE:-1} cargo build --release --locked -p predictio-cli) || {
    echo "install.sh: the build failed (see above). If the BPF object could not be built, install clang and the" >&2
    echo "install.sh: libbpf headers (Debian/Ubuntu: scripts/deps.sh), or set PREDICTIO_BPF_REQUIRE=0 to build without eBPF." >&2
    exit 1
  }
fi
if [ ! -x "$built" ] || [ ! -x "$built_full" ]; then
  echo "install.sh: $built or $built_full is missing; build it (cargo build --release --locked -p predictio-cli) or drop --no-build" >&2
  exit 1
fi

need_write "$destdir$prefix"
need_write "$destdir/etc"

install -D -m 0755 "$built" "$destdir$bin_path"
install -D -m 0755 "$built_full" "$destdir$full_path"
# The release profile keeps line tables (~80% of the file); the installed
# copy drops them but keeps the symbols, so a backtrace still names functions.
if command -v strip >/dev/null; then
  strip --strip-debug "$destdir$bin_path" "$destdir$full_path"
fi
say "installed $destdir$bin_path and $destdir$full_path"

for doc in "${docs[@]}"; do
  install -D -m 0644 "$repo/$doc" "$destdir$doc_dir/$(basename "$doc")"
done
say "installed the documentation in $destdir$doc_dir"

# The packaged unit names /usr/bin and /usr/share/doc; point it at PREFIX.
unit_tmp=$(mktemp)
trap 'rm -f "$unit_tmp"' EXIT
sed -e "s#^ExecStart=/usr/bin/predictio #ExecStart=$bin_path #" \
  -e "s#^Documentation=file:///usr/share/doc/predictio/#Documentation=file://$doc_dir/#" \
  "$repo/dist/predictio.service" >"$unit_tmp"
grep -q "^ExecStart=$bin_path " "$unit_tmp" || {
  echo "install.sh: dist/predictio.service has no 'ExecStart=/usr/bin/predictio ...' line to rewrite" >&2
  exit 1
}
install -D -m 0644 "$unit_tmp" "$destdir$unit_path"
say "installed $destdir$unit_path (ExecStart=$bin_path)"

if [ -e "$destdir$config_path" ]; then
  say "kept the existing $destdir$config_path (the default is dist/predictio.toml)"
else
  install -D -m 0644 "$repo/dist/predictio.toml" "$destdir$config_path"
  say "installed the default configuration $destdir$config_path"
fi

if systemd_live; then
  systemctl daemon-reload
fi
if [ "$prefix" != /usr ] && [ -z "$destdir" ] && [ -x /usr/bin/predictio ]; then
  say "note: /usr/bin/predictio exists too (the Debian package?); the service runs $bin_path"
fi
if [ -n "$destdir" ]; then
  say "done: staged under $destdir"
  exit 0
fi
cat <<EOF
install.sh: done. predictio is installed but its service is not running. To start it now and at every boot:
  systemctl enable --now predictio
Then: predictio stat (counters), journalctl -u predictio (logs).
To remove: PREFIX=$prefix $0 --uninstall
EOF
