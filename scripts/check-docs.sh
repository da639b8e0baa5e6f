#!/usr/bin/env bash
# Docs stay a guide and a map: README.md at most 250 lines, docs/DESIGN.md
# at most 600, and the README's table of headline numbers exactly what
# `predictio-bench summary` renders from docs/results/*.json (so that a
# number in the README cannot drift from the result it comes from).
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
check_lines() {
  local file=$1 max=$2 n
  n=$(wc -l < "$file")
  if [ "$n" -gt "$max" ]; then
    echo "check-docs: $file is $n lines; at most $max" >&2
    fail=1
  else
    echo "check-docs: $file: $n lines (at most $max)"
  fi
}
check_lines README.md 250
check_lines docs/DESIGN.md 600
bench=${CARGO_TARGET_DIR:-target}/release/predictio-bench
[ -x "$bench" ] || cargo build --release --locked -q -p predictio-bench
if "$bench" summary --check README.md; then
  echo "check-docs: README's results table matches docs/results/"
else
  fail=1
fi
exit "$fail"
