#!/usr/bin/env bash
# The unmodified sqlite3 shell gets faster by `.load`ing predictio's SQLite
# extension: a cold range scan over a fragmented table, without and with the
# extension, the same answer both times.
#
#   sudo ./scripts/sqlite-demo.sh [DIR] [ROWS]
#
# Builds target/release/libpredictio_sqlite.so (cargo), a table of ROWS rows
# (default 300000: ~150 MB) of 400-byte values inserted in random key order
# under DIR (default /var/tmp/predictio-sqlite-demo, reused when present),
# then, each time after dropping the page cache (root: drop_caches; else
# fadvise(DONTNEED) of the database), runs the same scan of 20,000 rows in
# the sqlite3 shell with `.timer on`: first plain, then with
# `.load libpredictio_sqlite.so` before `.open`. Prints both timings and
# compares the output (a checksum of every row).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-/var/tmp/predictio-sqlite-demo}
rows=${2:-300000}
target=${CARGO_TARGET_DIR:-$root/target}
ext=$target/release/libpredictio_sqlite.so
db=$dir/demo-$rows.db

command -v sqlite3 >/dev/null || { echo "needs the sqlite3 shell (apt-get install sqlite3)" >&2; exit 1; }
(cd "$root" && cargo build --release -q -p predictio-sqlite)
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

cold
echo "== plain sqlite3 (cold cache)"
# (Statements from standard input, as typed at the prompt: `.timer` only
# times those.)
plain=$(printf '.timer on\n%s\n' "$sql" | sqlite3 -readonly "$db")
echo "$plain"

cold
echo "== sqlite3 with .load $ext (cold cache)"
# The extension registers its VFS as the default: open the database after
# loading it.
loaded=$(printf '.load %s\n.open --readonly %s\n.timer on\n%s\n' "$ext" "$db" "$sql" | sqlite3 :memory:)
echo "$loaded"

# The answers (everything but the timer lines) must be identical.
if [ "$(grep -v '^Run Time' <<<"$plain")" = "$(grep -v '^Run Time' <<<"$loaded")" ]; then
  echo "== identical answers"
else
  echo "== ANSWERS DIFFER" >&2
  exit 1
fi
t0=$(awk '/^Run Time/ {print $4}' <<<"$plain")
t1=$(awk '/^Run Time/ {print $4}' <<<"$loaded")
awk -v a="$t0" -v b="$t1" 'BEGIN { if (b > 0) printf "== %.3f s -> %.3f s: %.2fx\n", a, b, a / b }'
