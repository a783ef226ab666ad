"""Compares the tensors of two safetensors files by name, dtype, shape and
raw bytes (the metadata may differ), reading the format directly: an
8-byte little-endian header length, the JSON header, then the data."""
import json
import struct
import sys


def tensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    return {k: (v["dtype"], v["shape"], blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in header.items()}


a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys():
    print("tensor names differ: %s" % sorted(a.keys() ^ b.keys()))
    sys.exit(1)
diff = [k for k in a if a[k] != b[k]]
if diff:
    print("%d of %d tensors differ, e.g. %s" % (len(diff), len(a), diff[0]))
    sys.exit(1)
print("%d tensors, %d bytes, identical" % (len(a), sum(len(v[2]) for v in a.values())))
