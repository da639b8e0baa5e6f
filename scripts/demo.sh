#!/usr/bin/env bash
# The main job: build predictio and show what it buys on this machine.
#
# 1. A real, unmodified program: the sqlite3 shell scanning 20,000 rows of a
#    fragmented 150 MB table from a cold cache, plain and with predictio's
#    SQLite extension loaded (scripts/sqlite-demo.sh): interleaved pairs,
#    the whole process timed, answers compared.
# 2. The mechanism on a built-in workload (`predictio bench access-patterns
#    --quick`): 4,096 jumpy page reads of a cold file, kernel readahead alone
#    vs the executor fed by an oracle policy.
#
# Run as root for honest cold caches (drop_caches); without root the
# workloads' own files are evicted instead and the reports say so.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
bash scripts/deps.sh
cargo build --release --locked -p predictio-cli -p predictio-bench
# The extension on its own: built alone, it links only what it uses.
cargo build --release --locked -p predictio-sqlite
echo
echo "### 1. sqlite3, unmodified, with and without predictio's extension"
bash scripts/sqlite-demo.sh
echo
echo "### 2. jumpy reads of a cold file: kernel readahead vs predictio's executor"
out=target/demo
./target/release/predictio bench access-patterns --quick --out "$out" "$@"
echo
echo "Full report: $out/access-patterns.md (JSON and SVG beside it)."
echo "Committed full runs: docs/results/."
