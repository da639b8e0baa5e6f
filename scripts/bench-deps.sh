#!/usr/bin/env bash
# Installs the programs the `launch` benchmark measures and compares with,
# if they are missing: headless Chromium (Debian's `chromium`), the `preload`
# daemon (the peer column, run by the bench itself, never as a service),
# gdb and clang. Only the benchmark needs them, so CI (scripts/deps.sh) does
# not install them: `predictio bench launch` skips a missing program with a
# note. Needs root to install; without root it only says what is missing.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
[ -x /usr/sbin/preload ] || need+=(preload)
command -v gdb >/dev/null || need+=(gdb)
command -v clang >/dev/null || need+=(clang)
. "$(dirname "$0")/apt-install.sh"
apt_install "the launch bench: programs" "${need[@]}"
# Debian starts preload as a service on install where there is an init
# system; the bench runs its own instance with its own state file.
if command -v systemctl >/dev/null && systemctl is-active --quiet preload 2>/dev/null; then
  systemctl disable --now preload || true
fi
