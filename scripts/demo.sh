#!/usr/bin/env bash
# The main job: build predictio and show what prefetching buys on this
# machine, on a built-in workload (seed 000 Figure 1: 4,096 jumpy page reads
# of a cold file, kernel readahead alone vs the executor fed by an oracle
# policy). Run as root for honest cold caches (drop_caches); without root the
# workload's own files are evicted instead and the report says so.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
bash scripts/deps.sh
cargo build --release --locked -p predictio-cli
out=target/demo
./target/release/predictio bench access-patterns --quick --out "$out" "$@"
echo
echo "Full report: $out/access-patterns.md (JSON and SVG beside it)."
echo "Committed full runs: docs/results/."
