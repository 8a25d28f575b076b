#!/usr/bin/env python3
"""Regenerates the load-only samples in this folder from the real ESFT trace.

Per-step expert counts for DeepSeek-V2-Lite (26 MoE layers 1..26, 64 experts, top-6): iteration i is
sequence i of ../shared/data/routing/deepseek-v2-lite-intent/ (its tokens counted at every expert of
every MoE layer), for the first ITERATIONS sequences. Writes the counts as a .npy array, a JSON object
and a CSV (the importer's three input layouts, traces/FORMAT.md "counts"), and the load-only trace that
`moesim trace import --format counts counts_dsv2_lite.npy` must produce, encoded here from FORMAT.md
alone ("Load-only traces"), independently of moesim. Standard library only (no NumPy).

Usage: tests/data/traces/make_load_samples.py [ESFT_DIR]
"""

import json
import os
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DEFAULT_ESFT = os.path.join(os.path.dirname(REPO), "shared", "data", "routing", "deepseek-v2-lite-intent")

LAYERS = list(range(1, 27))
EXPERTS = 64
K = 6
ITERATIONS = 4


def read_counts(esft_dir):
    """counts[iteration][layer index][expert]."""
    counts = [[[0] * EXPERTS for _ in LAYERS] for _ in range(ITERATIONS)]
    for li, layer in enumerate(LAYERS):
        with open(os.path.join(esft_dir, f"expert_weights_{layer}.txt")) as f:
            for i in range(ITERATIONS):
                ids_text = f.readline().rstrip("\n").split("\t\t")[0]
                for e in ids_text.split("\t"):
                    counts[i][li][int(e)] += 1
    return counts


def npy(values, shape):
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%s), }" % ", ".join(str(d) for d in shape)
    pad = 64 - (10 + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    out = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode("latin1")
    return out + struct.pack(f"<{len(values)}i", *values)


def encode_mlt(counts, source):
    """The load-only encoding, byte by byte as FORMAT.md describes it."""
    meta = json.dumps({"architecture": "deepseek-v2-lite", "format_version": 1, "layers": LAYERS,
                       "num_experts": EXPERTS, "source": source, "top_k": K},
                      sort_keys=True, separators=(",", ":")).encode()
    tokens = sum(sum(it[0]) // K for it in counts)
    fixed = b"MOESIMLT" + struct.pack("<IIQQI", 1, len(meta), len(counts), tokens, 0)
    out = fixed + struct.pack("<I", zlib.crc32(fixed + meta)) + meta
    for it in counts:
        record = struct.pack(f"<{len(LAYERS) * EXPERTS}I", *[c for row in it for c in row])
        out += record + struct.pack("<I", zlib.crc32(record))
    return out


def main():
    counts = read_counts(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_ESFT)
    flat = [c for it in counts for row in it for c in row]
    with open(os.path.join(HERE, "counts_dsv2_lite.npy"), "wb") as f:
        f.write(npy(flat, (ITERATIONS, len(LAYERS), EXPERTS)))
    with open(os.path.join(HERE, "counts_dsv2_lite.json"), "w") as f:
        f.write(json.dumps({"counts": counts}, separators=(",", ":")) + "\n")
    with open(os.path.join(HERE, "counts_dsv2_lite.csv"), "w") as f:
        f.write("iteration,layer," + ",".join(f"c{e}" for e in range(EXPERTS)) + "\n")
        for i, it in enumerate(counts):
            for li, row in enumerate(it):
                f.write(f"{i},{li}," + ",".join(str(c) for c in row) + "\n")
    source = "counts import of counts_dsv2_lite.npy (moesim trace import --format counts)"
    with open(os.path.join(HERE, "load_dsv2_lite.mlt"), "wb") as f:
        f.write(encode_mlt(counts, source))
    print("tokens per iteration:", [sum(it[0]) // K for it in counts])


if __name__ == "__main__":
    main()
