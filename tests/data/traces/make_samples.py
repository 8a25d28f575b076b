#!/usr/bin/env python3
"""Regenerates the trace test samples in this folder from the real ESFT trace.

Takes the first 12 tokens of the first 3 sequences of ../shared/data/routing/deepseek-v2-lite-intent/
at MoE layers 1..4 (the test architecture tiny-dsv2.yaml) and writes them as an ESFT folder, JSONL
records, .npy arrays, and a binary and a text moesim trace encoded here, independently of moesim,
from traces/FORMAT.md (so the tests check the documented byte layout). Then one bad input per
mistake (bad_*), each derived from a good sample. Standard library only (no NumPy).

Usage: tests/data/traces/make_samples.py [ESFT_DIR]   (run from anywhere; rewrites this folder's samples)
"""

import decimal
import json
import os
import shutil
import struct
import sys
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
DEFAULT_ESFT = os.path.join(os.path.dirname(REPO), "shared", "data", "routing", "deepseek-v2-lite-intent")

LAYERS = [1, 2, 3, 4]
SEQUENCES = 3
TOKENS = 12
K = 6
EXPERTS = 64


def read_esft(esft_dir):
    """{layer: [(ids, weight_texts) per sequence]} for the sample's sequences and tokens."""
    out = {}
    for layer in LAYERS:
        rows = []
        with open(os.path.join(esft_dir, f"expert_weights_{layer}.txt")) as f:
            for _ in range(SEQUENCES):
                ids_text, weights_text = f.readline().rstrip("\n").split("\t\t")
                ids = [int(x) for x in ids_text.split("\t")][: TOKENS * K]
                weights = weights_text.split("\t")[: TOKENS * K]
                rows.append((ids, weights))
        out[layer] = rows
    return out


def write(path, data, mode="w"):
    with open(os.path.join(HERE, path), mode) as f:
        f.write(data)


def write_esft_dir(name, data, tokens=None, edit=None):
    """An ESFT folder; `edit(layer, seq, ids, weights)` may change a line's fields (lists of str)."""
    path = os.path.join(HERE, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    for layer in LAYERS:
        lines = []
        for s, (ids, weights) in enumerate(data[layer]):
            n = (tokens or TOKENS) * K
            id_fields = [str(i) for i in ids[:n]]
            w_fields = list(weights[:n])
            line = "\t".join(id_fields) + "\t\t" + "\t".join(w_fields)
            if edit is not None:
                line = edit(layer, s, id_fields, w_fields, line)
            if line is not None:
                lines.append(line + "\n")
        with open(os.path.join(path, f"expert_weights_{layer}.txt"), "w") as f:
            f.writelines(lines)
    return path


def tokens_of(data):
    """[(sequence, position, [[ids] per layer], [[weights] per layer])] in trace order."""
    out = []
    for s in range(SEQUENCES):
        for t in range(TOKENS):
            ids = [data[l][s][0][t * K:(t + 1) * K] for l in LAYERS]
            ws = [[float(x) for x in data[l][s][1][t * K:(t + 1) * K]] for l in LAYERS]
            out.append((s, t, ids, ws))
    return out


def jsonl_records(data, weights=True, order="layer", key="token_idx", dataset=True, string_ids=False):
    lines = []
    for s in range(SEQUENCES):
        pairs = [(l, t) for l in LAYERS for t in range(TOKENS)] if order == "layer" else \
                [(l, t) for t in range(TOKENS) for l in LAYERS]
        for layer, t in pairs:
            ids, ws = data[layer][s]
            rec = {}
            if dataset:
                rec["dataset"] = "intent"
            rec["problem_id"] = f"p{s}" if string_ids else s
            rec[key] = t
            rec["layer"] = layer
            rec["experts"] = ids[t * K:(t + 1) * K]
            if weights:
                rec["gating_probs"] = [float(x) for x in ws[t * K:(t + 1) * K]]
            rec["rank"] = 0  # ignored by the importer
            lines.append(json.dumps(rec))
    return lines


def npy(dtype, shape, values, version=1, fortran=False):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        dtype, "True" if fortran else "False", ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else ""))
    fixed = 10 if version == 1 else 12
    pad = 64 - (fixed + len(header) + 1) % 64
    header = header + " " * pad + "\n"
    out = b"\x93NUMPY" + bytes([version, 0])
    out += struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    out += header.encode("latin1")
    code = {"i1": "b", "u1": "B", "i2": "h", "u2": "H", "i4": "i", "u4": "I", "i8": "q", "u8": "Q", "f4": "f"}[dtype[1:]]
    order = ">" if dtype[0] == ">" else "<"
    out += struct.pack(order + code * len(values), *values)
    return out


def meta_json(source, weights=True):
    return json.dumps({"architecture": "tiny-dsv2", "format_version": 1, "has_weights": weights, "layers": LAYERS,
                       "num_experts": EXPERTS, "source": source, "top_k": K}, sort_keys=True, separators=(",", ":"))


def encode_mtr(tokens, source):
    """The binary encoding, byte by byte as FORMAT.md describes it (one block)."""
    meta = meta_json(source).encode()
    fixed = b"\x89MTR\r\n\x1a\n" + struct.pack("<III", 1, 1, len(meta))
    out = fixed + struct.pack("<I", zlib.crc32(fixed + meta)) + meta
    n = len(tokens)
    payload = struct.pack(f"<{n}I", *[t[0] for t in tokens]) + struct.pack(f"<{n}I", *[t[1] for t in tokens])
    payload += bytes(i for t in tokens for layer in t[2] for i in layer)
    payload += b"".join(struct.pack("<f", w) for t in tokens for layer in t[3] for w in layer)
    crc = zlib.crc32(payload)
    out += b"TBLK" + struct.pack("<III", n, len(payload), crc) + payload
    sequences = len({t[0] for t in tokens})
    trailer = b"TEND" + struct.pack("<IQQI", 1, n, sequences, zlib.crc32(struct.pack("<I", crc)))
    return out + trailer + struct.pack("<I", zlib.crc32(trailer))


def shortest_float32(w):
    """The shortest text that reads back as the same float32, fixed or scientific, whichever is
    shorter (fixed on a tie): what std::to_chars(float) writes."""
    f32 = struct.unpack("<f", struct.pack("<f", w))[0]
    for digits in range(1, 10):
        sci = "%.*e" % (digits - 1, f32)
        if struct.unpack("<f", struct.pack("<f", float(sci)))[0] == f32:
            break
    fixed = format(decimal.Decimal(sci), "f")
    if "." in fixed:
        fixed = fixed.rstrip("0").rstrip(".")
    return fixed if len(fixed) <= len(sci) else sci


def encode_text(tokens, source):
    lines = ["#moesim-trace 1", meta_json(source)]
    for s, p, ids, ws in tokens:
        groups = [" ".join(map(str, i)) + " : " + " ".join(shortest_float32(w) for w in wl) for i, wl in zip(ids, ws)]
        lines.append(f"{s} {p} | " + " | ".join(groups))
    lines.append(f"#end {len(tokens)} {len({t[0] for t in tokens})}")
    return "\n".join(lines) + "\n"


def main():
    esft_dir = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_ESFT
    data = read_esft(esft_dir)
    tokens = tokens_of(data)

    # Good samples.
    write_esft_dir("esft_small", data)
    write("routing_small.jsonl", "\n".join(jsonl_records(data)) + "\n")
    write("routing_no_weights.jsonl",
          "\n".join(jsonl_records(data, weights=False, order="token", key="token_pos", dataset=False,
                                  string_ids=True)) + "\n")
    first = [r for r in jsonl_records(data) if json.loads(r)["problem_id"] == 0]
    write("routing_repeat.jsonl", "\n".join(first + first) + "\n")
    missing = [r for r in jsonl_records(data)
               if not (json.loads(r)["problem_id"] == 1 and json.loads(r)["token_idx"] == 5 and
                       json.loads(r)["layer"] == 3)]
    flat = [i for t in tokens for layer in t[2] for i in layer]
    top1 = [layer[0] for t in tokens for layer in t[2]]
    n = len(tokens)
    write("routing_small.npy", npy("<i8", (n, len(LAYERS), K), flat), "wb")
    write("routing_small_v2_u2.npy", npy("<u2", (n, len(LAYERS), K), flat, version=2), "wb")
    write("routing_top1_u1.npy", npy("|u1", (n, len(LAYERS)), top1), "wb")
    write("lengths_small.npy", npy("<i4", (SEQUENCES,), [TOKENS] * SEQUENCES), "wb")
    source = "esft import of esft_small/ (moesim trace import --format esft)"
    mtr = encode_mtr(tokens, source)
    write("sample_small.mtr", mtr, "wb")
    text = encode_text(tokens, source)
    write("sample_small.txt", text)

    # Bad inputs, one mistake each. ESFT mistakes are folders (the input is a folder).
    for old in os.listdir(HERE):
        if old.startswith("bad_"):
            p = os.path.join(HERE, old)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)

    def esft_bad(name, edit=None, tokens=3, drop_layer=None, extra_layer=None):
        p = write_esft_dir(name, {l: data[l][:2] for l in LAYERS}, tokens=tokens, edit=edit)
        if drop_layer:
            os.remove(os.path.join(p, f"expert_weights_{drop_layer}.txt"))
        if extra_layer is not None:
            shutil.copy(os.path.join(p, "expert_weights_1.txt"), os.path.join(p, f"expert_weights_{extra_layer}.txt"))

    def field(layer_at, seq_at, index, value, weights=False):
        def edit(layer, s, ids, ws, line):
            if layer == layer_at and s == seq_at:
                (ws if weights else ids)[index] = value
                return "\t".join(ids) + "\t\t" + "\t".join(ws)
            return line
        return edit

    esft_bad("bad_esft_missing_layer", drop_layer=3)
    esft_bad("bad_esft_extra_layer", extra_layer=0)
    esft_bad("bad_esft_line_counts", edit=lambda l, s, i, w, line: None if (l == 3 and s == 1) else line)
    esft_bad("bad_esft_ragged",
             edit=lambda l, s, i, w, line: "\t".join(i[:-K]) + "\t\t" + "\t".join(w[:-K]) if (l == 2 and s == 1) else line)
    esft_bad("bad_esft_id_range", edit=field(1, 0, 7, "64"))
    esft_bad("bad_esft_negative", edit=field(4, 1, 0, "-1"))
    esft_bad("bad_esft_not_integer", edit=field(2, 0, 3, "7.5"))
    esft_bad("bad_esft_huge", edit=field(2, 1, 4, "99999999999999999999"))
    esft_bad("bad_esft_duplicate",  # token 1, second expert = its first
             edit=lambda l, s, i, w, line: "\t".join(i[:7] + [i[6]] + i[8:]) + "\t\t" + "\t".join(w)
             if (l == 3 and s == 0) else line)
    esft_bad("bad_esft_bad_weight", edit=field(1, 1, 2, "abc", weights=True))
    esft_bad("bad_esft_weight_count",
             edit=lambda l, s, i, w, line: "\t".join(i) + "\t\t" + "\t".join(w[:-1]) if (l == 2 and s == 0) else line)
    esft_bad("bad_esft_no_separator",
             edit=lambda l, s, i, w, line: "\t".join(i + w) if (l == 4 and s == 0) else line)
    esft_bad("bad_esft_empty", edit=lambda l, s, i, w, line: None)
    esft_bad("bad_esft_empty_line", edit=lambda l, s, i, w, line: "" if (l == 1 and s == 1) else line)
    esft_bad("bad_esft_empty_ids", edit=lambda l, s, i, w, line: "\t\t" + "\t".join(w) if (l == 1 and s == 1) else line)

    good = jsonl_records(data)[:8]

    def jsonl_bad(name, index, transform):
        lines = list(good)
        lines[index] = transform(lines[index])
        write(name, "\n".join(lines) + "\n")

    def rec_edit(f):
        def t(line):
            r = json.loads(line)
            f(r)
            return json.dumps(r)
        return t

    jsonl_bad("bad_jsonl_malformed.jsonl", 2, lambda line: line[:-5])
    jsonl_bad("bad_jsonl_not_object.jsonl", 1, lambda line: "[1, 2, 3]")
    jsonl_bad("bad_jsonl_missing_field.jsonl", 1, rec_edit(lambda r: r.pop("experts")))
    jsonl_bad("bad_jsonl_missing_position.jsonl", 3, rec_edit(lambda r: r.pop("token_idx")))
    jsonl_bad("bad_jsonl_missing_problem.jsonl", 0, rec_edit(lambda r: r.pop("problem_id")))
    jsonl_bad("bad_jsonl_wrong_type.jsonl", 4, rec_edit(lambda r: r.update(layer="2")))
    jsonl_bad("bad_jsonl_experts_type.jsonl", 5, rec_edit(lambda r: r["experts"].__setitem__(2, "x")))
    jsonl_bad("bad_jsonl_id_range.jsonl", 2, rec_edit(lambda r: r["experts"].__setitem__(1, 64)))
    jsonl_bad("bad_jsonl_negative.jsonl", 6, rec_edit(lambda r: r["experts"].__setitem__(0, -2)))
    jsonl_bad("bad_jsonl_duplicate.jsonl", 3, rec_edit(lambda r: r["experts"].__setitem__(1, r["experts"][0])))
    jsonl_bad("bad_jsonl_top_k.jsonl", 1, rec_edit(lambda r: r["experts"].pop()))
    jsonl_bad("bad_jsonl_not_moe_layer.jsonl", 2, rec_edit(lambda r: r.update(layer=0)))
    jsonl_bad("bad_jsonl_huge.jsonl", 4, rec_edit(lambda r: r.update(token_idx=99999999999)))
    jsonl_bad("bad_jsonl_mixed_weights.jsonl", 5, rec_edit(lambda r: r.pop("gating_probs")))
    jsonl_bad("bad_jsonl_probs_length.jsonl", 7, rec_edit(lambda r: r["gating_probs"].append(0.5)))
    write("bad_jsonl_empty.jsonl", "")
    # Token 5 of sequence 1 lacks layer 3: dropped and counted normally, an error with --strict.
    write("bad_jsonl_missing_layer_strict.jsonl", "\n".join(missing) + "\n")

    few = flat[: 4 * len(LAYERS) * K]
    write("bad_npy_fortran.npy", npy("<i8", (4, len(LAYERS), K), few, fortran=True), "wb")
    write("bad_npy_float.npy", npy("<f4", (4, len(LAYERS), K), [float(x) for x in few]), "wb")
    write("bad_npy_bigendian.npy", npy(">i4", (4, len(LAYERS), K), few), "wb")
    write("bad_npy_truncated.npy", npy("<i8", (4, len(LAYERS), K), few)[:-12], "wb")
    write("bad_npy_id_range.npy", npy("<i4", (4, len(LAYERS), K), few[:30] + [64] + few[31:]), "wb")
    write("bad_npy_negative.npy", npy("|i1", (4, len(LAYERS), K), few[:50] + [-1] + few[51:]), "wb")
    write("bad_npy_duplicate.npy", npy("<i2", (4, len(LAYERS), K), few[:13] + [few[12]] + few[14:]), "wb")
    write("bad_npy_layers.npy", npy("<i8", (4, 3, 8), few[:96]), "wb")
    write("bad_npy_ndim.npy", npy("<i8", (len(few),), few), "wb")
    write("bad_npy_magic.npy", b"PK\x03\x04 this is a zip file, not an npy array\n", "wb")
    write("bad_npy_empty.npy", b"", "wb")

    # Traces: binary and text, one mistake each.
    meta_len = struct.unpack("<I", mtr[16:20])[0]
    block = 24 + meta_len
    flipped = bytearray(mtr)
    flipped[block + 16 + 40] ^= 0x04
    write("bad_trace_flipped.mtr", bytes(flipped), "wb")
    write("bad_trace_truncated.mtr", mtr[: len(mtr) - 40], "wb")
    write("bad_trace_magic.mtr", b"\x89MTX" + mtr[4:], "wb")
    write("bad_trace_version.mtr", mtr[:8] + struct.pack("<I", 2) + mtr[12:], "wb")
    write("bad_trace_empty.mtr", b"", "wb")
    lines = text.split("\n")

    def text_bad(name, index, new):
        ls = list(lines)
        if new is None:
            del ls[index]
        else:
            ls[index] = new(ls[index]) if callable(new) else new
        write(name, "\n".join(ls))

    def first_group(line, edit):
        parts = line.split(" | ")
        ids = parts[1].split(" ")
        edit(ids)
        parts[1] = " ".join(ids)
        return " | ".join(parts)

    text_bad("bad_trace_text_id.txt", 4, lambda l: first_group(l, lambda ids: ids.__setitem__(0, "64")))
    text_bad("bad_trace_text_duplicate.txt", 5, lambda l: first_group(l, lambda ids: ids.__setitem__(1, ids[0])))
    text_bad("bad_trace_text_ragged.txt", 6, lambda l: " | ".join(l.split(" | ")[:-1]))
    text_bad("bad_trace_text_meta.txt", 1, lambda l: l[:-3])
    text_bad("bad_trace_text_truncated.txt", len(lines) - 2, None)
    text_bad("bad_trace_text_not_integer.txt", 3, lambda l: l.replace(" | ", " | x", 1))


if __name__ == "__main__":
    main()
