#!/usr/bin/env bash
# Installs the programs the `launch` benchmark measures and compares with,
# if they are missing: headless Chromium (Debian's `chromium`), the `preload`
# daemon (the peer column, run by the bench itself, never as a service),
# gdb and clang; and the model-load bench's Python loaders (below). Only the
# benchmarks need them, so CI (scripts/deps.sh) does not install them:
# `predictio bench launch` skips a missing program with a note. Needs root
# to install; without root it only says what is missing.
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

# The model-load benchmark's loaders: real Python libraries (safetensors,
# gguf, DuckDB) in a virtual environment of their own, outside the
# repository. PREDICTIO_BENCH_PYTHON names another interpreter.
venv=/var/tmp/predictio-python
python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install "the model-load bench: python3-venv" python3-venv
if ! "$venv/bin/python" -c 'import numpy, safetensors, gguf, duckdb' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q numpy==2.4.6 safetensors==0.8.0 gguf==0.19.0 duckdb==2.0.1
fi
