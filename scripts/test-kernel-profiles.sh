#!/usr/bin/env bash
# The daemon under each kernel profile ([observe] assume_missing, see
# crates/predictio-cli/tests/old_kernel.rs): "full" (this kernel), "6.8"
# (no page-access tracepoints, no PROCMAP_QUERY: Ubuntu 24.04), "5.15"
# (also no cachestat: RHEL 9, Ubuntu 22.04, Debian 12), "5.15-no-btf" (also
# no BTF: observation through perf). Each run checks what
# the daemon and doctor report and that a learned clang -c launch is faster.
# Needs root (eBPF, drop_caches); CI runs it after the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
for profile in full 6.8 5.15 5.15-no-btf; do
  echo "== kernel profile $profile"
  PREDICTIO_KERNEL_PROFILE=$profile cargo test --release --locked -p predictio-cli --test old_kernel -- --nocapture
done
