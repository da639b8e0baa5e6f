# The loaders of `predictio bench model-load`: real Python libraries reading
# a large structured file cold, each as a user's program would.
#
#   model_load.py safetensors MODEL [--peer|--oracle]
#       safetensors.safe_open (numpy):
#                                            every tensor, in keys() order
#   model_load.py gguf MODEL [--peer|--oracle]
#       gguf.GGUFReader (numpy memmap):
#                                            every tensor copied out
#   model_load.py duckdb FILE QUERY [--peer|--oracle]
#       duckdb over a Parquet file
#   model_load.py make-parquet FILE ROWS GROUP writes the table (once)
#
# --peer starts a vLLM-style background prefetch as the loader starts: one
# thread reading the file from start to end in 16 MiB reads. --oracle starts
# a prefetch that knows what the load will read: one thread asking the
# kernel (fadvise WILLNEED) for those bytes in the order they are read, as
# the loader starts: every byte of a model, in 16 MiB pieces; the column
# chunks a query reads, row group by row group (found from the Parquet
# footer before the clock starts).
#
# Prints one JSON line: the loader's own seconds (after the imports, from
# just before the file is opened to the last byte used), and its answer (a
# digest that must be the same on every pass).
import json
import os
import sys
import threading
import time
import zlib

PEER_CHUNK = 16 << 20


def peer(path):
    """Reads `path` sequentially in 16 MiB reads in a background thread."""

    def run():
        buf = bytearray(PEER_CHUNK)
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass

    threading.Thread(target=run, daemon=True).start()


def oracle(path, ranges):
    """Asks for `ranges` ((offset, length), in order) in a background thread."""

    def run():
        fd = os.open(path, os.O_RDONLY)
        try:
            for offset, length in ranges:
                os.posix_fadvise(fd, offset, length, os.POSIX_FADV_WILLNEED)
        finally:
            os.close(fd)

    threading.Thread(target=run, daemon=True).start()


def whole_file(path):
    size = os.path.getsize(path)
    return [(at, min(PEER_CHUNK, size - at)) for at in range(0, size, PEER_CHUNK)]


def begin(path, side, ranges=None):
    """The loader's clock starts; the peer or the oracle, if asked for, with it."""
    start = time.perf_counter()
    if side == "peer":
        peer(path)
    elif side == "oracle":
        oracle(path, whole_file(path) if ranges is None else ranges)
    return start


def digest(check, data):
    """Folds an array's first and last 64 bytes into `check`."""
    raw = data.reshape(-1).view("uint8")
    return zlib.crc32(bytes(raw[:64]) + bytes(raw[-64:]), check)


def load_safetensors(path, side):
    from safetensors import safe_open

    start = begin(path, side)
    check, total = 0, 0
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            total += tensor.nbytes
            check = digest(check, tensor)
    return start, {"bytes": total, "crc32": check}


def load_gguf(path, side):
    import numpy as np
    from gguf import GGUFReader

    start = begin(path, side)
    reader = GGUFReader(path)
    check, total = 0, 0
    for tensor in reader.tensors:
        # What a loader does with a weight: copies it out of the mapping.
        data = np.array(tensor.data, copy=True)
        total += data.nbytes
        check = digest(check, data)
    return start, {"bytes": total, "crc32": check, "tensors": len(reader.tensors)}


# What each query reads: its columns, and whether only the second half of
# the row groups (the table is ordered by id).
READS = {"group": (["k", "v1", "v2", "v3"], False), "sums": (["v7", "v8"], False), "range": (["id", "v5"], True)}

QUERIES = {
    # 4 of the table's 10 columns.
    "group": "SELECT k, count(*), sum(v1), max(v2) FROM read_parquet('{f}') "
    "WHERE v3 % 4 = 0 GROUP BY k ORDER BY k",
    # 2 of 10.
    "sums": "SELECT count(*), sum(v7), sum(v8) FROM read_parquet('{f}')",
    # 1 of 10, half of the row groups (the table is ordered by id).
    "range": "SELECT count(*), sum(v5) FROM read_parquet('{f}') WHERE id >= {half}",
}


def load_duckdb(path, query, side):
    import duckdb

    con = duckdb.connect()
    ranges = None
    if side == "oracle":
        columns, second_half = READS[query]
        chunks = con.execute(
            "SELECT row_group_id, path_in_schema, coalesce(dictionary_page_offset, data_page_offset), "
            "total_compressed_size FROM parquet_metadata(?) ORDER BY row_group_id, column_id",
            [path],
        ).fetchall()
        groups = 1 + max(c[0] for c in chunks)
        first = groups // 2 if second_half else 0
        ranges = [(off, size) for group, name, off, size in chunks if name in columns and group >= first]
    start = begin(path, side, ranges)
    half = con.execute("SELECT num_rows FROM parquet_file_metadata(?)", [path]).fetchone()[0] // 2
    result = con.execute(QUERIES[query].format(f=path, half=half)).fetchall()
    text = json.dumps([[str(v) for v in row] for row in result])
    return start, {"rows": len(result), "crc32": zlib.crc32(text.encode())}


def make_parquet(path, rows, group):
    import duckdb

    con = duckdb.connect()
    values = ", ".join(f"(hash(i * 16 + {j}) >> 2)::BIGINT AS v{j}" for j in range(1, 9))
    con.execute(
        f"COPY (SELECT i AS id, (hash(i) % 1000)::INTEGER AS k, {values} FROM range({int(rows)}) t(i) ORDER BY i) "
        f"TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE {int(group)}, COMPRESSION snappy)"
    )


def main(argv):
    side = "peer" if "--peer" in argv else "oracle" if "--oracle" in argv else None
    args = [a for a in argv if a not in ("--peer", "--oracle")]
    kind = args[0]
    if kind == "make-parquet":
        make_parquet(args[1], args[2], args[3])
        return
    path = args[1]
    if kind == "safetensors":
        start, answer = load_safetensors(path, side)
    elif kind == "gguf":
        start, answer = load_gguf(path, side)
    elif kind == "duckdb":
        start, answer = load_duckdb(path, args[2], side)
    else:
        raise SystemExit(f"unknown loader {kind!r}")
    print(json.dumps({"seconds": time.perf_counter() - start, "answer": answer}))


if __name__ == "__main__":
    main(sys.argv[1:])
