# The SQLite program of `predictio bench sqlite-scan` (run by Debian's
# /usr/bin/python3, whose sqlite3 module can load extensions). Modes:
#
#   build DB ROWS VALUE_BYTES SEED
#       creates the YCSB-style table: keys user%010d, VALUE_BYTES random
#       bytes each, inserted in a shuffled order (one transaction) so that
#       the table's leaves are scattered over the file.
#   build-16k DB ROWS VALUE_BYTES SEED
#       the same table with 16 KiB pages (each leaf spans four 4 KiB pages
#       of the page cache).
#   build-index DB ROWS VALUE_BYTES SEED
#       creates the ordinary rowid table with a secondary index:
#       t(id INTEGER PRIMARY KEY, k TEXT, v BLOB), CREATE INDEX t_k ON t(k),
#       page_size 8192, rows inserted in a random order of k (k = key(id),
#       16 hex digits): each row of a k-range scan is a rowid lookup at a
#       random place in the table.
#   fresh SCHEMA DB LIMIT ID [EXTENSION]
#       one query in this new process, timed from before the extension's
#       load (when given) to the last row: load, open, schema, query.
#       SCHEMA is rowid (the YCSB table; rowid-16k, the same of 16 KiB
#       pages) or index (the table above).
#   query SCHEMA DB LIMIT IDS [EXTENSION]
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


def create(path, page_size, schema, table, rows):
    """Creates a database of `page_size` pages with the statements of
    `schema`, inserts `rows` (an iterable of tuples, drawn as inserted) into
    `table` in one transaction, 10,000 at a time, and prints the row count."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA page_size = %d" % page_size)
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA cache_size = -1048576")
    for statement in schema:
        db.execute(statement)
    db.execute("BEGIN")
    insert = "INSERT INTO %s VALUES (?, ?, ?)" % table
    batch = []
    for row in rows:
        batch.append(row)
        if len(batch) == 10000:
            db.executemany(insert, batch)
            batch.clear()
    db.executemany(insert, batch)
    db.execute("COMMIT")
    (count,) = db.execute("SELECT count(*) FROM %s" % table).fetchone()
    db.close()
    print(json.dumps({"rows": count}))


def build(path, rows, value_bytes, seed, page_size=4096):
    rng = random.Random(seed)
    ids = list(range(rows))
    rng.shuffle(ids)
    create(
        path,
        page_size,
        ["CREATE TABLE usertable (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value BLOB NOT NULL)"],
        "usertable",
        ((i, "user%010d" % i, rng.randbytes(value_bytes)) for i in ids),
    )


def key(i):
    # A bijection of 64-bit ids (an odd multiplier), so keys are unique and
    # their order unrelated to the rowids.
    return "%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)


def build_index(path, rows, value_bytes, seed):
    rng = random.Random(seed)
    ids = list(range(1, rows + 1))
    # Rowids in insertion order, keys in a random order of k.
    order = list(ids)
    rng.shuffle(order)
    create(
        path,
        8192,
        ["CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v BLOB)", "CREATE INDEX t_k ON t(k)"],
        "t",
        ((rowid, key(i), rng.randbytes(value_bytes)) for rowid, i in zip(ids, order)),
    )


def fresh(schema, path, limit, start_id, extension):
    start = time.perf_counter()
    if extension:
        loader = sqlite3.connect(":memory:")
        loader.enable_load_extension(True)
        loader.load_extension(extension)
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    sql = statement(schema, limit)
    arg = key(start_id) if schema == "index" else start_id
    result = db.execute(sql, (arg,)).fetchall()
    elapsed = time.perf_counter() - start
    digest = hashlib.sha256()
    for k, value in result:
        digest.update(str(k).encode())
        digest.update(value)
    stats = json.loads(db.execute("SELECT predictio_stats()").fetchone()[0]) if extension else None
    db.close()
    print(json.dumps({"elapsed_s": elapsed, "rows": len(result), "sha256": digest.hexdigest(), "extension": stats}))


def statement(schema, limit):
    if schema == "index":
        if limit == 1:
            return "SELECT k, v FROM t WHERE k = ?"
        return "SELECT k, v FROM t WHERE k >= ? ORDER BY k LIMIT %d" % limit
    if limit == 1:
        return "SELECT key, value FROM usertable WHERE id = ?"
    return "SELECT key, value FROM usertable WHERE id >= ? ORDER BY id LIMIT %d" % limit


def query(schema, path, limit, ids, extension):
    stats = None
    if extension:
        loader = sqlite3.connect(":memory:")
        loader.enable_load_extension(True)
        loader.load_extension(extension)
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
    # Untimed: the schema (page 1 and sqlite_master) is read here.
    db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    # Untimed, every side alike: a program that opened its database a
    # moment ago, not this instant (the fresh-* cases time the other).
    time.sleep(SETTLE_S)
    sql = statement(schema, limit)
    args = [key(i) if schema == "index" else i for i in ids]
    results = []
    start = time.perf_counter()
    for arg in args:
        results.append(db.execute(sql, (arg,)).fetchall())
    elapsed = time.perf_counter() - start
    digest = hashlib.sha256()
    rows = 0
    for result in results:
        for k, value in result:
            digest.update(k.encode())
            digest.update(value)
            rows += 1
    if extension:
        stats = json.loads(db.execute("SELECT predictio_stats()").fetchone()[0])
    db.close()
    print(json.dumps({"elapsed_s": elapsed, "rows": rows, "sha256": digest.hexdigest(), "extension": stats}))


def main(argv):
    if len(argv) >= 5 and argv[1] == "build":
        build(argv[2], int(argv[3]), int(argv[4]), int(argv[5]) if len(argv) > 5 else 1)
    elif len(argv) >= 5 and argv[1] == "build-16k":
        build(argv[2], int(argv[3]), int(argv[4]), int(argv[5]) if len(argv) > 5 else 1, 16384)
    elif len(argv) >= 5 and argv[1] == "build-index":
        build_index(argv[2], int(argv[3]), int(argv[4]), int(argv[5]) if len(argv) > 5 else 1)
    elif len(argv) >= 6 and argv[1] == "fresh":
        fresh(argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6] if len(argv) > 6 else None)
    elif len(argv) >= 6 and argv[1] == "query":
        ids = [int(x) for x in argv[5].split(",") if x]
        query(argv[2], argv[3], int(argv[4]), ids, argv[6] if len(argv) > 6 else None)
    else:
        sys.exit(
            "usage: sqlite_scan.py build|build-16k|build-index DB ROWS VALUE_BYTES [SEED]"
            " | query rowid|rowid-16k|index DB LIMIT IDS [EXTENSION] | fresh rowid|rowid-16k|index DB LIMIT ID [EXTENSION]"
        )


if __name__ == "__main__":
    main(sys.argv)
