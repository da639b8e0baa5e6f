#!/usr/bin/env bash
# What loading predictio's SQLite extension costs a program: a cold `.load`
# (whole fresh sqlite3 process after dropping the page cache) and a point
# read of a cached database (whole process, and per query inside one),
# each with and without the extension, interleaved.
#
#   sudo ./scripts/sqlite-load-cost.sh [ROUNDS] [DIR]
#
# ROUNDS (default 9) rounds of each series; the order inside a round
# alternates. DIR (default /var/tmp/predictio-sqlite-load-cost) keeps the
# table of the point reads (100,000 rows, built once). Needs root for
# drop_caches, the sqlite3 shell, and /usr/bin/python3 with
# load_extension for the per-query series (skipped otherwise). Every timed
# process runs at nice -15; each timed series holds /tmp/bench.lock (other
# benchmarks on the machine take it too).
#
# Extra extensions to time in the same cold rounds, each loaded through
# the entry point sqlite3_predictio_init: COMPARE="label=/path/to.so ...".
# With a C compiler and sqlite3ext.h, a minimal C extension (an entry point
# that returns SQLITE_OK) is timed too: the floor of any extension file on
# this machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-9}
dir=${2:-/var/tmp/predictio-sqlite-load-cost}
target=${CARGO_TARGET_DIR:-$root/target}
ext=$target/release/libpredictio_sqlite.so
rows=100000
db=$dir/points-$rows.db
lock=/tmp/bench.lock

command -v sqlite3 >/dev/null || { echo "needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 1; }
[ -w /proc/sys/vm/drop_caches ] || { echo "needs root (drop_caches)" >&2; exit 1; }
(cd "$root" && cargo build --release --locked -q -p predictio-sqlite)
mkdir -p "$dir"
# Loaded as installed: the loader and the runtime copied into a directory of
# their own (a cold lookup in target/release, thousands of entries, reads
# more directory blocks than the loader has bytes).
mkdir -p "$dir/installed"
for f in libpredictio_sqlite.so libpredictio_sqlite_runtime.so; do
  cp "$target/release/$f" "$dir/installed/.$f.tmp" && mv "$dir/installed/.$f.tmp" "$dir/installed/$f"
done
ext=$dir/installed/libpredictio_sqlite.so
# Every timed process at nice -15, the same for every side, so that other
# work on the machine (builds) perturbs the series less.
renice -n -15 $$ >/dev/null

# The extensions of the cold series: label and path.
labels=(plain predictio)
paths=("" "$ext")
for pair in ${COMPARE:-}; do
  labels+=("${pair%%=*}")
  paths+=("${pair#*=}")
done
if command -v cc >/dev/null && [ -f /usr/include/sqlite3ext.h ]; then
  mkdir -p "$dir/floor"
  cat > "$dir/floor/floor.c" <<'C'
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1
int sqlite3_predictio_init(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
  SQLITE_EXTENSION_INIT2(api);
  return SQLITE_OK;
}
C
  cc -O2 -shared -fPIC -o "$dir/floor/libfloor.so" "$dir/floor/floor.c"
  labels+=(minimal-C)
  paths+=("$dir/floor/libfloor.so")
fi

median() { sort -n | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# Median over rounds of file $2's value minus (op -) or divided by (op /)
# file $1's of the same round: paired, so that drifts of the machine's load
# cancel.
paired() { paste "$1" "$2" | awk -v op="$3" '{print (op == "/") ? $1 / $2 : $2 - $1}' | median; }
ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f\n", (b - a) * 1000}'; }
cold() { sync; echo 3 > /proc/sys/vm/drop_caches; }

# One sqlite3 process loading $1 (none when empty), then running the rest.
shell() {
  local so=$1; shift
  if [ -z "$so" ]; then sqlite3 :memory: "$@"; else sqlite3 :memory: ".load $so sqlite3_predictio_init" "$@"; fi
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Runs "$@" holding the benchmark lock.
locked() { exec 9>>"$lock"; flock 9; "$@"; flock -u 9; exec 9>&-; }

# --- cold .load: drop every cache, time a whole fresh process ---
cold_series() {
  local n=${#labels[@]} i k j
  for ((i = 1; i <= rounds; i++)); do
    for ((j = 0; j < n; j++)); do
      # Rotate the order every round.
      k=$(((j + i) % n))
      cold
      local t0=$EPOCHREALTIME
      shell "${paths[$k]}" 'select 1' >/dev/null
      local t1=$EPOCHREALTIME
      ms "$t0" "$t1" >> "$work/cold.$k"
    done
  done
}
locked cold_series

# --- the extension's own file cold, everything else cached: less noisy ---
evicted_series() {
  local n=${#labels[@]} i k j
  for ((k = 0; k < n; k++)); do shell "${paths[$k]}" 'select 1' >/dev/null; done
  for ((i = 1; i <= 3 * rounds; i++)); do
    for ((j = 0; j < n; j++)); do
      k=$(((j + i) % n))
      # Drops the file's cached pages (GNU dd: nocache with count=0).
      [ -n "${paths[$k]}" ] && dd if="${paths[$k]}" iflag=nocache count=0 status=none
      local t0=$EPOCHREALTIME
      shell "${paths[$k]}" 'select 1' >/dev/null
      local t1=$EPOCHREALTIME
      ms "$t0" "$t1" >> "$work/evicted.$k"
    done
  done
}
locked evicted_series

# Blocks read from the disk and major faults of one cold load (untimed).
io_of() {
  local load=()
  [ -n "$1" ] && load=(".load $1 sqlite3_predictio_init")
  cold
  /usr/bin/time -f '%I %F' -o "$work/io" sqlite3 :memory: "${load[@]}" 'select 1' >/dev/null
  cat "$work/io"
}

# --- a point read of a cached database ---
if [ ! -s "$db" ]; then
  sqlite3 "$db.tmp" >/dev/null <<SQL
PRAGMA page_size = 4096; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF;
CREATE TABLE usertable (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL);
WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < $rows - 1)
INSERT INTO usertable SELECT i, printf('user%010d', i), randomblob(400) FROM c ORDER BY random();
SQL
  mv "$db.tmp" "$db"
fi
cat "$db" > /dev/null
point="SELECT key, length(value) FROM usertable WHERE id = 54321;"
want=$(shell "" ".open --readonly $db" "$point")
[ "$(shell "$ext" ".open --readonly $db" "$point")" = "$want" ] || { echo "answers differ" >&2; exit 1; }

# Whole processes on a warm cache are short: five times the rounds.
warm_series() {
  local i
  shell "" 'select 1' >/dev/null; shell "$ext" 'select 1' >/dev/null
  for ((i = 1; i <= 5 * rounds; i++)); do
    for side in $((i % 2)) $(((i + 1) % 2)); do
      local so=""; [ "$side" = 1 ] && so=$ext
      local t0=$EPOCHREALTIME
      shell "$so" ".open --readonly $db" "$point" >/dev/null
      local t1=$EPOCHREALTIME
      ms "$t0" "$t1" >> "$work/warm.$side"
    done
  done
}
locked warm_series

# Per query, inside one process: python3's sqlite3 (the first point read of
# a fresh connection, and the median of 2,000 more), with and without.
python=/usr/bin/python3
per_query=$work/per_query.py
cat > "$per_query" <<'PY'
import random, sqlite3, sys, time
ext, db = sys.argv[1], sys.argv[2]
if ext:
    loader = sqlite3.connect(":memory:")
    loader.enable_load_extension(True)
    loader.load_extension(ext)
c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
q = "SELECT key, length(value) FROM usertable WHERE id = ?"
t0 = time.perf_counter_ns(); c.execute(q, (54321,)).fetchone(); first = time.perf_counter_ns() - t0
rng = random.Random(7); times = []
for _ in range(2000):
    k = rng.randrange(100000)
    t0 = time.perf_counter_ns(); c.execute(q, (k,)).fetchone(); times.append(time.perf_counter_ns() - t0)
times.sort()
print(f"{first / 1000:.1f} {times[len(times) // 2] / 1000:.2f}")
PY
have_python=no
if [ -x "$python" ] && "$python" -c 'import sqlite3; sqlite3.connect(":memory:").enable_load_extension' 2>/dev/null; then
  have_python=yes
  query_series() {
    local i
    for ((i = 1; i <= rounds; i++)); do
      for side in $((i % 2)) $(((i + 1) % 2)); do
        local so=""; [ "$side" = 1 ] && so=$ext
        read -r first each < <("$python" "$per_query" "$so" "$db")
        echo "$first" >> "$work/first.$side"; echo "$each" >> "$work/each.$side"
      done
    done
  }
  locked query_series
fi

# --- the table ---
size() { stat -c %s "$1"; }
echo "== cold .load, whole fresh process: sync; echo 3 > /proc/sys/vm/drop_caches; sqlite3 :memory: '.load EXT sqlite3_predictio_init' 'select 1'"
echo "== $rounds rounds, order rotated each round; median (min-max) ms; disk reads (KiB) and major faults: median of 3 more cold runs"
echo "== 'ext only cold': the extension's file alone evicted (dd iflag=nocache count=0), sqlite3 cached; $((3 * rounds)) rounds"
echo "== +plain: median over rounds of (this - plain) in the same round"
printf '%-10s %9s | %8s %15s %8s %8s %6s | %14s %8s\n' extension "file (B)" median "min-max" "+plain" "read" majflt "ext only cold" "+plain"
for ((k = 0; k < ${#labels[@]}; k++)); do
  m=$(median < "$work/cold.$k")
  e=$(median < "$work/evicted.$k")
  range="$(sort -n "$work/cold.$k" | head -1 | cut -c1-6)-$(sort -n "$work/cold.$k" | tail -1 | cut -c1-6)"
  : > "$work/blocks"; : > "$work/faults"
  for _ in 1 2 3; do
    read -r blocks faults < <(io_of "${paths[$k]}")
    echo $((blocks / 2)) >> "$work/blocks"; echo "$faults" >> "$work/faults"
  done
  file=-; [ -n "${paths[$k]}" ] && file=$(size "${paths[$k]}")
  printf '%-10s %9s | %8.2f %15s %8.2f %8s %6s | %14.3f %8.3f\n' "${labels[$k]}" "$file" "$m" "$range" \
    "$(paired "$work/cold.0" "$work/cold.$k" -)" "$(median < "$work/blocks")" "$(median < "$work/faults")" \
    "$e" "$(paired "$work/evicted.0" "$work/evicted.$k" -)"
done
echo
echo "== point read of a cached database ($rows rows), interleaved: $((5 * rounds)) whole processes, $rounds python3 processes a side"
echo "== medians; plain/with: median over rounds of plain / with in the same round (>= 1: not slower with the extension)"
wp=$(median < "$work/warm.0"); wl=$(median < "$work/warm.1")
printf '%-42s %10s %10s %10s\n' "" plain predictio "plain/with"
printf '%-42s %10.3f %10.3f %10.3f\n' "whole fresh sqlite3 process (ms)" "$wp" "$wl" "$(paired "$work/warm.0" "$work/warm.1" /)"
if [ "$have_python" = yes ]; then
  fp=$(median < "$work/first.0"); fl=$(median < "$work/first.1")
  ep=$(median < "$work/each.0"); el=$(median < "$work/each.1")
  printf '%-42s %10.1f %10.1f %10.3f\n' "python3: first point read (µs)" "$fp" "$fl" "$(paired "$work/first.0" "$work/first.1" /)"
  printf '%-42s %10.2f %10.2f %10.3f\n' "python3: point read, median of 2,000 (µs)" "$ep" "$el" "$(paired "$work/each.0" "$work/each.1" /)"
else
  echo "(per-query series skipped: $python cannot load SQLite extensions)"
fi
