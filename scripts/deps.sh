#!/usr/bin/env bash
# Installs what building and testing predictio needs from the system, if it
# is missing: clang and the libbpf headers (the BPF programs of
# crates/predictio-bpf), a C compiler (the C ABI example), sync(1), and the
# sqlite3 shell (tests build real SQLite files to check the page parser),
# and RocksDB (crates/predictio-rocksdb links Debian's librocksdb).
# Needs root to install; without root it only says what is missing (the
# workspace still builds without clang: eBPF observation is then left out and
# predictio says so at run time).
set -euo pipefail
need=()
command -v clang >/dev/null || need+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
[ -f /usr/include/linux/bpf.h ] || need+=(linux-libc-dev)
command -v cc >/dev/null || need+=(gcc)
command -v sync >/dev/null || need+=(coreutils)
command -v sqlite3 >/dev/null || need+=(sqlite3)
# The launch tests record a real interpreter's start (Debian's python3).
[ -x /usr/bin/python3 ] || need+=(python3)
[ -f /usr/include/rocksdb/c.h ] || need+=(librocksdb-dev)
. "$(dirname "$0")/apt-install.sh"
apt_install "system packages" "${need[@]}"
