#!/usr/bin/env bash
# The unmodified sqlite3 shell gets faster by `.load`ing predictio's SQLite
# extension: a cold range scan over a fragmented table, without and with the
# extension, the same answer both times.
#
#   sudo ./scripts/sqlite-demo.sh [DIR] [ROWS] [PAIRS]
#
# Builds target/release/libpredictio_sqlite.so (cargo), a table of ROWS rows
# (default 300000: ~150 MB) of 400-byte values inserted in random key order
# under DIR (default /var/tmp/predictio-sqlite-demo, reused when present),
# then, each time after dropping the page cache (root: drop_caches; else
# fadvise(DONTNEED) of the database), runs the same scan of 20,000 rows in
# a fresh sqlite3 shell: plain, and with `.load libpredictio_sqlite.so`
# before `.open`, in PAIRS interleaved pairs (default 3; the order inside a
# pair alternates). Each time is the whole sqlite3 process, the extension's
# load included. Prints every pair, the median ratio, and checks that the
# output (a checksum of every row) is identical.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/var/tmp/predictio-sqlite-demo}
rows=${2:-300000}
pairs=${3:-3}
target=${CARGO_TARGET_DIR:-$root/target}
ext=$target/release/libpredictio_sqlite.so
db=$dir/demo-$rows.db

command -v sqlite3 >/dev/null || { echo "needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 1; }
(cd "$root" && cargo build --release --locked -q -p predictio-sqlite)
mkdir -p "$dir"
if [ ! -s "$db" ]; then
  echo "building $db ($rows rows in random key order; once)..."
  # Keys are numbered; inserting them in a shuffled order scatters the
  # table's leaves over the file, as after years of random inserts.
  sqlite3 "$db.tmp" >/dev/null <<SQL
PRAGMA page_size = 4096; PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -1000000;
CREATE TABLE usertable (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL);
WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM c WHERE i < $rows - 1)
INSERT INTO usertable SELECT i, printf('user%010d', i), randomblob(400) FROM c ORDER BY random();
SQL
  mv "$db.tmp" "$db"
fi

cold() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then
    echo 3 > /proc/sys/vm/drop_caches
  else
    python3 -c 'import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$db"
  fi
}

# The scan: 20,000 rows from the middle of the key range, reduced to a
# SHA3 of every row (the shell's sha3_query) so that the output is small and
# comparable.
start=$((rows / 3))
sql="SELECT hex(sha3_query('SELECT key, value FROM usertable WHERE id >= $start ORDER BY id LIMIT 20000'));"

# One cold run of a fresh sqlite3 process: prints "SECONDS ANSWER".
run() {
  local t0 t1 out
  cold
  t0=$(date +%s%N)
  if [ "$1" = plain ]; then
    out=$(printf '%s\n' "$sql" | sqlite3 -readonly "$db")
  else
    # The extension registers its VFS as the default: open the database
    # after loading it.
    out=$(printf '.load %s\n.open --readonly %s\n%s\n' "$ext" "$db" "$sql" | sqlite3 :memory:)
  fi
  t1=$(date +%s%N)
  echo "$(( (t1 - t0) / 1000 )) $out"
}

echo "== $pairs interleaved pairs, cold cache before each run, whole sqlite3 process timed"
ratios=()
answer=""
for ((i = 1; i <= pairs; i++)); do
  if ((i % 2)); then p=$(run plain); l=$(run loaded); else l=$(run loaded); p=$(run plain); fi
  for a in "${p#* }" "${l#* }"; do
    if [ -z "$answer" ]; then answer=$a; elif [ "$a" != "$answer" ]; then echo "== ANSWERS DIFFER" >&2; exit 1; fi
  done
  pu=${p%% *}; lu=${l%% *}
  ratio=$(awk -v a="$pu" -v b="$lu" 'BEGIN { printf "%.2f", a / b }')
  ratios+=("$ratio")
  printf 'pair %d: plain sqlite3 %.3f s, with .load predictio %.3f s: %sx\n' "$i" "$(awk -v u="$pu" 'BEGIN{print u/1e6}')" "$(awk -v u="$lu" 'BEGIN{print u/1e6}')" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}')
echo "== identical answers in every run; median speed-up ${median}x"
