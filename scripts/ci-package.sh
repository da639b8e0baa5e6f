#!/usr/bin/env bash
# CI (as root): builds the Debian package, installs it and checks the
# installed product, then removes it again.
#  - cargo-deb from crates.io if missing;
#  - `cargo deb -p predictio-cli` after a release build (the eBPF object
#    required);
#  - dpkg -i, then: `predictio --version` from /usr/bin, `predictio daemon
#    --check` on the installed configuration, `systemd-analyze verify` of the
#    installed unit (and its `systemd-analyze security` exposure, printed);
#  - scripts/check-msrv.sh;
#  - the installed binary links neither librocksdb nor liblmdb (the storage
#    engine adapters belong to the benchmarks, not to the product).
# Every check runs; the script fails if any failed. On exit the package is
# removed (purged, unless a configuration was already at
# /etc/predictio/predictio.toml before: that file is then left as it was).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

if [ "$(id -u)" -ne 0 ]; then
  echo "ci-package: needs root (dpkg -i)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
. scripts/apt-install.sh

failed=()
check() {
  local what=$1
  shift
  echo "ci-package: $what: $*"
  if "$@"; then
    echo "ci-package: $what: ok"
  else
    echo "ci-package: $what: FAILED" >&2
    failed+=("$what")
  fi
}

# cargo-deb 3 reads [package.metadata.deb] of crates/predictio-cli.
deb_major=$(cargo deb --version 2>/dev/null | sed -n 's/^cargo-deb[^0-9]*\([0-9]*\)\..*/\1/p' || true)
if [ -z "$deb_major" ] || [ "$deb_major" -lt 3 ]; then
  echo "ci-package: installing cargo-deb 3 from crates.io"
  cargo install cargo-deb --locked --version '^3.8'
fi
command -v systemd-analyze >/dev/null || apt_install "systemd-analyze" systemd

PREDICTIO_BPF_REQUIRE=1 cargo build --release --locked -p predictio-cli
built=$(PREDICTIO_BPF_REQUIRE=1 cargo deb -p predictio-cli --no-build --locked)
deb=$(printf '%s\n' "$built" | grep '\.deb$' | tail -n 1)
[ -f "$deb" ] || {
  echo "ci-package: cargo deb made no .deb (it said: $built)" >&2
  exit 1
}
echo "ci-package: built $deb"

config=/etc/predictio/predictio.toml
had_config=0
[ -e "$config" ] && had_config=1
cleanup() {
  if dpkg-query -W -f='${Status}' predictio 2>/dev/null | grep -q 'ok installed'; then
    if [ "$had_config" = 1 ]; then dpkg -r predictio; else dpkg -P predictio; fi >/dev/null
    echo "ci-package: removed the predictio package"
  fi
}
trap cleanup EXIT

# An existing configuration is kept, not replaced.
dpkg -i --force-confdef --force-confold "$deb"

check "version" /usr/bin/predictio --version
check "run through the front" /usr/bin/predictio run -q --no-daemon -- true
check "daemon --check" /usr/bin/predictio daemon --check --config "$config"
check "unit" systemd-analyze verify /usr/lib/systemd/system/predictio.service
# The exposure score, for the log (older systemd has no --offline).
systemd-analyze security --offline=true /usr/lib/systemd/system/predictio.service 2>/dev/null | tail -n 1 || true
check "rust-version" bash scripts/check-msrv.sh

echo "ci-package: ldd /usr/bin/predictio-full"
ldd /usr/bin/predictio-full
no_engine_libraries() {
  ! ldd /usr/bin/predictio /usr/bin/predictio-full | grep -E 'librocksdb|liblmdb'
}
check "no storage engine libraries" no_engine_libraries

if [ ${#failed[@]} -gt 0 ]; then
  echo "ci-package: failed: ${failed[*]}" >&2
  exit 1
fi
echo "ci-package: the package installs and every check passed"
