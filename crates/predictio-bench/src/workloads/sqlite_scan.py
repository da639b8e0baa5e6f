# The SQLite program of `predictio bench sqlite-scan` (run by Debian's
# /usr/bin/python3, whose sqlite3 module can load extensions). Two modes:
#
#   build DB ROWS VALUE_BYTES SEED
#       creates the YCSB-style table: keys user%010d, VALUE_BYTES random
#       bytes each, inserted in a shuffled order (one transaction) so that
#       the table's leaves are scattered over the file.
#   query DB LIMIT IDS [EXTENSION]
#       opens DB (after loading EXTENSION, when given, so its VFS shim wraps
#       the file), then times, with time.perf_counter and nothing else in the
#       timed region, one `SELECT ... WHERE id >= ? ORDER BY id LIMIT LIMIT`
#       per start id in IDS (comma separated; LIMIT 1 with `=` is a point
#       read). Prints one JSON line: elapsed seconds, rows, a SHA-256 of
#       every row returned, and the extension's counters when loaded.
#
# The table is a rowid table whose rowid is the key's number: keys are
# zero-padded, so rowid order is key order, and the table b-tree is the
# one a range scan walks (a TEXT primary key would add an index whose rows
# point back into the table in insertion order).
import hashlib
import json
import random
import sqlite3
import sys
import time

SETTLE_S = 0.25


def build(path, rows, value_bytes, seed):
    rng = random.Random(seed)
    ids = list(range(rows))
    rng.shuffle(ids)
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size = 4096")
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -1048576")
    db.execute("CREATE TABLE usertable (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL)")
    db.execute("BEGIN")
    batch = []
    for i in ids:
        batch.append((i, "user%010d" % i, rng.randbytes(value_bytes)))
        if len(batch) == 10000:
            db.executemany("INSERT INTO usertable VALUES (?, ?, ?)", batch)
            batch.clear()
    db.executemany("INSERT INTO usertable VALUES (?, ?, ?)", batch)
    db.execute("COMMIT")
    (count,) = db.execute("SELECT count(*) FROM usertable").fetchone()
    db.close()
    print(json.dumps({"rows": count}))


def query(path, limit, ids, extension):
    stats = None
    if extension:
        loader = sqlite3.connect(":memory:")
        loader.enable_load_extension(True)
        loader.load_extension(extension)
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    # Untimed: the schema (page 1 and sqlite_master) is read here.
    db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    # Untimed, every side alike: a program that opened its database a
    # moment ago, not this instant (the no-change mode finds a process's
    # files through /proc/PID/fd at most once per 100 ms per process).
    time.sleep(SETTLE_S)
    if limit == 1:
        sql = "SELECT key, value FROM usertable WHERE id = ?"
    else:
        sql = "SELECT key, value FROM usertable WHERE id >= ? ORDER BY id LIMIT %d" % limit
    results = []
    start = time.perf_counter()
    for i in ids:
        results.append(db.execute(sql, (i,)).fetchall())
    elapsed = time.perf_counter() - start
    digest = hashlib.sha256()
    rows = 0
    for result in results:
        for key, value in result:
            digest.update(key.encode())
            digest.update(value)
            rows += 1
    if extension:
        stats = json.loads(db.execute("SELECT predictio_stats()").fetchone()[0])
    db.close()
    print(json.dumps({"elapsed_s": elapsed, "rows": rows, "sha256": digest.hexdigest(), "extension": stats}))


def main(argv):
    if len(argv) >= 5 and argv[1] == "build":
        build(argv[2], int(argv[3]), int(argv[4]), int(argv[5]) if len(argv) > 5 else 1)
    elif len(argv) >= 5 and argv[1] == "query":
        ids = [int(x) for x in argv[4].split(",") if x]
        query(argv[2], int(argv[3]), ids, argv[5] if len(argv) > 5 else None)
    else:
        sys.exit("usage: sqlite_scan.py build DB ROWS VALUE_BYTES [SEED] | query DB LIMIT IDS [EXTENSION]")


if __name__ == "__main__":
    main(sys.argv)
