# The model loader of `predictio bench daemon-cost`: reads a safetensors
# file's tensors one by one with read(), in the order of their names (what
# safetensors' own loaders do), and prints how many bytes it read and a
# CRC-32 of each tensor's first and last 64 bytes.
#
#   daemon_cost_model.py MODEL
import json
import struct
import sys
import zlib


def main(path):
    check, total = 0, 0
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name in sorted(k for k in header if k != "__metadata__"):
            start, end = header[name]["data_offsets"]
            f.seek(base + start)
            data = f.read(end - start)
            total += len(data)
            check = zlib.crc32(data[:64] + data[-64:], check)
    print(json.dumps({"bytes": total, "crc32": check}))


if __name__ == "__main__":
    main(sys.argv[1])
