#!/usr/bin/env python3
"""Independent safetensors writer for amc's reader tests (Python 3 standard library only).

Writes the format byte by byte with json and struct, so that the C++ reader is checked against
a file it did not produce. The tensors and values are fixed; tests/test_safetensors.cpp expects
exactly these.

usage: write_safetensors.py OUTPUT [--no-pad]
         write the fixed sample; --no-pad leaves the header unpadded, so the data buffer may
         start at any file offset
       write_safetensors.py --describe INPUT OUTPUT
         check INPUT (a file amc wrote) against the format independently and write one line per
         tensor in data order, "name|DTYPE|d0,d1,...|hex bytes", then "__metadata__|key|value"
         lines sorted by key; exit 1 with a message on the first violation
"""

import json
import struct
import sys


def bf16_bytes(values):
    # Every value below is exactly representable in bfloat16: keep the upper 16 bits of f32.
    out = b""
    for value in values:
        (bits,) = struct.unpack("<I", struct.pack("<f", value))
        assert bits & 0xFFFF == 0, value
        out += struct.pack("<H", bits >> 16)
    return out


DTYPE_SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2,
               "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}


def describe(source, output):
    def reject_duplicates(pairs):
        keys = [key for key, _ in pairs]
        if len(keys) != len(set(keys)):
            raise ValueError("duplicate key")
        return dict(pairs)

    with open(source, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    text = blob[8:8 + n]
    if len(text) != n or n % 8 != 0:
        return "header length %d is not a multiple of 8 within the file" % n
    if n - len(text.rstrip(b" ")) >= 8:
        return "header padded with 8 or more spaces"
    header = json.loads(text.decode("utf-8"), object_pairs_hook=reject_duplicates)
    metadata = header.pop("__metadata__", {})
    data = blob[8 + n:]
    entries = sorted(header.items(), key=lambda item: tuple(item[1]["data_offsets"]))
    lines = []
    covered = 0
    for name, entry in entries:
        begin, end = entry["data_offsets"]
        count = 1
        for dim in entry["shape"]:
            count *= dim
        if begin != covered or end - begin != count * DTYPE_SIZES[entry["dtype"]]:
            return "tensor %r: bad data_offsets %r" % (name, entry["data_offsets"])
        covered = end
        shape = ",".join(str(dim) for dim in entry["shape"])
        lines.append("%s|%s|%s|%s" % (name, entry["dtype"], shape, data[begin:end].hex()))
    if covered != len(data):
        return "tensors cover %d of %d data bytes" % (covered, len(data))
    for key in sorted(metadata):
        lines.append("__metadata__|%s|%s" % (key, metadata[key]))
    with open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return None


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--describe":
        problem = describe(sys.argv[2], sys.argv[3])
        if problem:
            sys.stderr.write("write_safetensors.py --describe: %s\n" % problem)
            return 1
        return 0
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--no-pad"):
        sys.stderr.write(__doc__)
        return 2
    output = sys.argv[1]
    pad = len(sys.argv) == 2

    # (name, dtype, shape, bytes), in the order the bytes are laid out in the data buffer.
    tensors = [
        ("d.i32", "I32", [2, 2], struct.pack("<4i", -1, 2, -3, 4)),
        ("a.f32", "F32", [2, 3], struct.pack("<6f", 0.0, 0.5, 1.0, 1.5, -2.0, 2.5)),
        ("b.bf16", "BF16", [4], bf16_bytes([1.0, -2.5, 0.15625, 65536.0])),
        ("f.empty", "U8", [0, 5], b""),
        ("c.f16", "F16", [3], struct.pack("<3e", 1.0, -0.5, 65504.0)),
        ("e.scalar", "F64", [], struct.pack("<d", 3.25)),
        ("g.i64", "I64", [2], struct.pack("<2q", -(2**40), 7)),
        ("h.\u540d\u524d", "U8", [3], bytes([1, 2, 3])),
    ]

    entries = {}
    offset = 0
    for name, dtype, shape, data in tensors:
        entries[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)

    # Header keys in an order unrelated to the data layout; the reader must sort by offset.
    header = {"__metadata__": {"format": "pt", "writer": "python-struct"}}
    for name in sorted(entries, reverse=True):
        header[name] = entries[name]
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    if pad:
        text += b" " * (-len(text) % 8)

    with open(output, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, data in tensors:
            f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
