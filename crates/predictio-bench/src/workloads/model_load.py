# The loaders of `predictio bench model-load`: real Python libraries reading
# a large structured file cold, each as a user's program would.
#
#   model_load.py safetensors MODEL [--peer]   safetensors.safe_open (numpy):
#                                              every tensor, in keys() order
#   model_load.py gguf MODEL [--peer]          gguf.GGUFReader (numpy memmap):
#                                              every tensor copied out
#   model_load.py duckdb FILE QUERY [--peer]   duckdb over a Parquet file
#   model_load.py make-parquet FILE ROWS GROUP writes the table (once)
#
# --peer starts a vLLM-style background prefetch as the loader starts: one
# thread reading the file from start to end in 16 MiB reads.
#
# Prints one JSON line: the loader's own seconds (after the imports, from
# just before the file is opened to the last byte used), and its answer (a
# digest that must be the same on every pass).
import json
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


def begin(path, use_peer):
    """The loader's clock starts; the peer, if asked for, with it."""
    start = time.perf_counter()
    if use_peer:
        peer(path)
    return start


def digest(check, data):
    """Folds an array's first and last 64 bytes into `check`."""
    raw = data.reshape(-1).view("uint8")
    return zlib.crc32(bytes(raw[:64]) + bytes(raw[-64:]), check)


def load_safetensors(path, use_peer):
    from safetensors import safe_open

    start = begin(path, use_peer)
    check, total = 0, 0
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            tensor = f.get_tensor(name)
            total += tensor.nbytes
            check = digest(check, tensor)
    return start, {"bytes": total, "crc32": check}


def load_gguf(path, use_peer):
    import numpy as np
    from gguf import GGUFReader

    start = begin(path, use_peer)
    reader = GGUFReader(path)
    check, total = 0, 0
    for tensor in reader.tensors:
        # What a loader does with a weight: copies it out of the mapping.
        data = np.array(tensor.data, copy=True)
        total += data.nbytes
        check = digest(check, data)
    return start, {"bytes": total, "crc32": check, "tensors": len(reader.tensors)}


QUERIES = {
    # 4 of the table's 10 columns.
    "group": "SELECT k, count(*), sum(v1), max(v2) FROM read_parquet('{f}') "
    "WHERE v3 % 4 = 0 GROUP BY k ORDER BY k",
    # 2 of 10.
    "sums": "SELECT count(*), sum(v7), sum(v8) FROM read_parquet('{f}')",
    # 1 of 10, half of the row groups (the table is ordered by id).
    "range": "SELECT count(*), sum(v5) FROM read_parquet('{f}') WHERE id >= {half}",
}


def load_duckdb(path, query, use_peer):
    import duckdb

    con = duckdb.connect()
    start = begin(path, use_peer)
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
    use_peer = "--peer" in argv
    args = [a for a in argv if a != "--peer"]
    kind = args[0]
    if kind == "make-parquet":
        make_parquet(args[1], args[2], args[3])
        return
    path = args[1]
    if kind == "safetensors":
        start, answer = load_safetensors(path, use_peer)
    elif kind == "gguf":
        start, answer = load_gguf(path, use_peer)
    elif kind == "duckdb":
        start, answer = load_duckdb(path, args[2], use_peer)
    else:
        raise SystemExit(f"unknown loader {kind!r}")
    print(json.dumps({"seconds": time.perf_counter() - start, "answer": answer}))


if __name__ == "__main__":
    main(sys.argv[1:])
