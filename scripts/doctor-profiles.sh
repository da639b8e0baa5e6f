#!/usr/bin/env bash
# What `predictio doctor` reports under each kernel profile of this kernel
# ([observe] assume_missing; the profiles of tests/old_kernel.rs): the
# checks of Observation and Calls that are not ok, and what works. As root,
# with a built binary (cargo build --release -p predictio-cli). Its output
# is the "As on older kernels" section of docs/doctor.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PREDICTIO_BIN:-target/release/predictio}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
profile() {
  local name=$1 missing=$2
  printf '[observe]\nassume_missing = [%s]\n' "$missing" >"$dir/$name.toml"
  echo "### $name: assume_missing = [$missing]"
  echo
  echo '```text'
  "$bin" doctor --config "$dir/$name.toml" | awk '
    /^What works/ { works = 1 }
    /^Observation|^Calls|^What works/ { show = 1; print; next }
    /^Privileges|^Resources|^Cgroups|^Daemon/ { show = 0; next }
    !show { next }
    /^$/ || works { print; next }
    /^  (missing|degraded)/ || /eBPF observer|perf tracepoints/ { print; keep = 1; next }
    /^   +fix:/ && keep { print; next }
    { keep = 0 }'
  echo '```'
  echo
}
profile 6.8 '"filemap_access", "procmap_query"'
profile 5.15 '"filemap_access", "procmap_query", "cachestat"'
profile 5.15-no-btf '"filemap_access", "procmap_query", "cachestat", "btf"'
