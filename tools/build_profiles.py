#!/usr/bin/env python3
"""Builds the reference GPU profiles (configs/profiles/{h100-sxm,h200,a100-sxm,h800}.yaml) from the published
tables shipped under models/reference (see its SOURCES.md) and the shipped architectures.

Python 3 standard library only. Rerunnable and deterministic: the committed YAML files are its output.
    tools/build_profiles.py                 # rewrite configs/profiles/*.yaml
    tools/build_profiles.py --check         # exit 1 if the committed files differ from a fresh build
    tools/build_profiles.py --report        # also print the GEMM fits and their residuals
    tools/build_profiles.py --tile-model    # the persistent-tile GEMM model: its fit and held-out errors
Every derivation below is restated in the generated files' `source` entries and in docs/profile-format.md.
"""

import argparse
import csv
import glob
import math
import os
import re
import statistics
import sys
from collections import defaultdict

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_REFERENCE = os.path.join(REPO, "models", "reference")

AZURE = "Azure/AI-benchmarking-guide @8fd0c6e1, Azure_Results/{file} (reference/azure/{file})"
GPUS_MD = "reference/gpus.md"
DEEPGEMM = "deepseek-ai/DeepGEMM @327ec92f README (reference/deepgemm/README_at_327ec92.md), H800 SXM5"
DEEPEP = "deepseek-ai/DeepEP @dd758caf docs/legacy.md (reference/deepep/legacy.md), H800"
ZEUS_NSDI = ("ml-energy/zeus @75a8b939 examples/research_reproducibility/zeus_nsdi23/trace/summary_power_*.csv "
             "(reference/zeus)")
ZEUS_SOSP = ("ml-energy/zeus @38cb3f90 sosp24_data/emulation/stage_profile/{gpt3-175b,bloom}+a100_sxm_bf16.csv "
             "(reference/zeus)")
PAPERS = "the overlap paper, arXiv:2507.03114 (Lee et al., 2025)"

M_GRID = [2 ** i for i in range(17)]  # 1 .. 65536 tokens
TP_DEGREES = [1, 2, 4]


def fail(message):
    sys.exit("build_profiles.py: " + message)


# --- reading the published files ---------------------------------------------------------------------

def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def md_rows(text, heading):
    """Rows of the first markdown table after `heading`, as lists of stripped cells."""
    at = text.find(heading)
    if at < 0:
        fail(f"heading {heading!r} not found")
    rows, started = [], False
    for line in text[at:].splitlines()[1:]:
        line = line.strip()
        if line.startswith("|"):
            started = True
            cells = [c.strip() for c in line.strip("|").split("|")]
            if all(re.fullmatch(r":?-+:?|\\-+", c) or not c for c in cells):
                continue
            rows.append(cells)
        elif started:
            break
    return rows


def number_in(cell):
    m = re.search(r"[-+]?\d+(?:\.\d+)?", cell)
    if not m:
        fail(f"no number in {cell!r}")
    return float(m.group(0))


SIZE_LABEL = {"K": 10, "M": 20, "G": 30}


def size_label_bytes(label):
    # Azure's labels are rounded powers of two: 65K = 2^16, 132K = 2^17, 524K = 2^19, 33M = 2^25 ...
    m = re.fullmatch(r"(\d+)([KMG])", label)
    if not m:
        fail(f"unexpected message size label {label!r}")
    value = int(m.group(1)) * 2 ** SIZE_LABEL[m.group(2)]
    power = round(math.log2(value))
    if abs(value / 2 ** power - 1) > 0.05:
        fail(f"size label {label!r} is not a rounded power of two")
    return 2 ** power


def read_azure(reference, file):
    text = read(os.path.join(reference, "azure", file))
    spec = {r[0]: r[1] for r in md_rows(text, "## System Specifications")}
    gemm = []
    for r in md_rows(text, "### GEMM CuBLASLt"):
        if r[0].isdigit():
            gemm.append((int(r[0]), int(r[1]), int(r[2]), float(r[3]) * 1e12))
    def figures(heading, scale):
        return {r[0]: float(r[1]) * scale for r in md_rows(text, heading) if re.fullmatch(r"[\d.]+", r[1])}
    hbm = figures("### HBM Bandwidth", 1e12)
    fa = figures("### Flash Attention 2.0", 1e12)
    nv = figures("### NV Bandwidth", 1e9)
    nccl = [(size_label_bytes(r[0]), float(r[1]) * 1e9) for r in md_rows(text, "## NCCL Bandwidth")
            if re.fullmatch(r"\d+[KMG]", r[0])]
    dtype = re.search(r"random initialization[^,]*, (FP8|FP16)", text).group(1).lower()
    fa_head_dim = int(re.search(r"Flash Attention 2\.0\s+The performance .*?head dimension of (\d+)", text,
                                re.S).group(1))
    if len(nccl) != 24 or [b for b, _ in nccl] != [2 ** i for i in range(10, 34)]:
        fail(f"{file}: expected the all-reduce curve 1K..8G in 24 powers of two")
    return {"file": file, "spec": spec, "gemm": gemm, "gemm_dtype": dtype, "hbm": hbm, "fa": fa,
            "fa_head_dim": fa_head_dim, "nv": nv, "nccl": nccl}


def read_gpus_md(reference):
    text = read(os.path.join(reference, "gpus.md"))
    rows = md_rows(text, "Datasheet figures")
    header = rows[0]
    cols = {"a100-sxm": header.index("A100 SXM 80GB"), "h100-sxm": header.index("H100 SXM5 80GB"),
            "h200": header.index("H200 SXM 141GB"), "h800": header.index("H800 SXM5 80GB")}
    table = {r[0]: r for r in rows[1:]}
    text = re.sub(r"\s+", " ", text)  # the prose figures may wrap across lines
    sheet = {}
    for gpu, c in cols.items():
        def cell(name):
            return table[name][c]
        fp8 = cell("FP8 tensor")
        sheet[gpu] = {
            "sms": int(number_in(cell("SMs"))),
            "fp32": number_in(cell("FP32")) * 1e12,
            "tf32": number_in(cell("TF32 tensor")) * 1e12,
            "bf16": number_in(cell("BF16 / FP16 tensor")) * 1e12,
            "fp8": None if "—" in fp8 else number_in(fp8) * 1e12,
            "memory_gb": number_in(cell("memory").split(",")[0]),
            "hbm_peak": number_in(cell("memory").split(",")[1]) * 1e12,
            "tdp": number_in(cell("max board power (TDP)").replace("up to", "")),
            "nvlink_total": number_in(cell("NVLink (total, both directions)")) * 1e9,
            "pcie_total": number_in(cell("PCIe").split(",")[1]) * 1e9,
        }
    m = re.search(r"bf16 8192 x 8192 x 8192 matrix product: (\d+) to (\d+) TFLOP/s", text)
    h200_bf16 = ((float(m.group(1)) + float(m.group(2))) / 2) * 1e12
    clock = float(re.search(r"SM clock (\d+) MHz under load", text).group(1)) * 1e6
    mamf = float(re.search(r"best achievable BF16 matmul about ([\d.]+) TFLOP/s", text).group(1)) * 1e12
    m = re.search(r"H200 all-gather / reduce-scatter about (\d+) / (\d+) GB/s", text)
    h200_ag, h200_rs = float(m.group(1)) * 1e9, float(m.group(2)) * 1e9
    h100_coll = float(re.search(r"non-all-reduce collectives about (\d+) GB/s busbw", text).group(1)) * 1e9
    m = re.search(r"about (\d+)-(\d+) GB/s per 400 Gb/s ConnectX-7", text)
    nic = (float(m.group(1)) + float(m.group(2))) / 2 * 1e9
    return {"sheet": sheet, "h200_bf16_8192": h200_bf16, "h200_clock": clock, "mamf_bf16": mamf,
            "h200_ag": h200_ag, "h200_rs": h200_rs, "h100_coll": h100_coll, "nic_a2a": nic}


def read_deepgemm(reference):
    text = read(os.path.join(reference, "deepgemm", "README_at_327ec92.md"))
    points = []
    for r in md_rows(text, "### Normal GEMMs for dense models"):
        if r[0].isdigit():
            points.append((int(r[0]), int(r[1]), int(r[2]), number_in(r[3]) * 1e12))
    if len(points) != 18:
        fail("DeepGEMM: expected 18 dense GEMM rows")
    return points


def read_deepgemm_grouped(reference):
    """(groups, M per group, N, K, FLOP/s, contiguous) of DeepGEMM's grouped tables."""
    text = read(os.path.join(reference, "deepgemm", "README_at_327ec92.md"))
    points = []
    for heading, contiguous in (("### Grouped GEMMs for MoE models (contiguous layout)", True),
                                ("### Grouped GEMMs for MoE models (masked layout)", False)):
        for r in md_rows(text, heading):
            if r[0].isdigit():
                points.append((int(r[0]), int(r[1]), int(r[2]), int(r[3]), number_in(r[4]) * 1e12, contiguous))
    if len(points) != 10:
        fail("DeepGEMM: expected 4 contiguous and 6 masked grouped GEMM rows")
    return points


def read_deepep(reference):
    text = read(os.path.join(reference, "deepep", "legacy.md"))
    rows = md_rows(text, "### Normal kernels with NVLink and RDMA forwarding")
    intra = [r for r in rows if r[0] == "Intranode"][0]
    link_max = float(re.search(r"~(\d+) GB/s NVLink maximum bandwidth", text).group(1)) * 1e9
    ll = md_rows(text, "### Low-latency kernels with pure RDMA")
    ep8 = [r for r in ll if r[0].strip() == "8"][0]
    setting = re.search(r"\((\d+) tokens per batch, (\d+) hidden, top-(\d+) experts", text)
    return {"dispatch": number_in(intra[2]) * 1e9, "combine": number_in(intra[4]) * 1e9, "nvlink_max": link_max,
            "ll_dispatch_ep8": number_in(ep8[1]) * 1e-6, "ll_combine_ep8": number_in(ep8[4]) * 1e-6,
            "ll_tokens": int(setting.group(1)), "ll_hidden": int(setting.group(2)), "ll_topk": int(setting.group(3))}


def read_deepep_forwarding(reference):
    """DeepEP's normal kernels on 2 x 8 H200 (deepep/forwarding_h200_2node.md): NVLink GB/s by (kernel, token)."""
    text = read(os.path.join(reference, "deepep", "forwarding_h200_2node.md"))
    rows = md_rows(text, "# DeepEP normal kernels on two H200 nodes")
    nvl = {(r[0].strip(), r[1].strip()): float(r[4]) * 1e9 for r in rows if len(r) >= 5 and r[0].strip() in ("dispatch", "combine")}
    if set(nvl) != {("dispatch", "FP8"), ("dispatch", "BF16"), ("combine", "BF16")}:
        fail("deepep/forwarding_h200_2node.md: expected dispatch FP8, dispatch BF16 and combine BF16 rows")
    return nvl


def read_zeus_caps(reference):
    """Per GPU, the median over training configurations of (speed, power / limit) at each power limit,
    for the transformer workload (bert_base_uncased); only GPUs whose transformer runs reach about 90%
    of their limit uncapped (so that a cap binds as it does for GEMM-bound serving)."""
    base = os.path.join(reference, "zeus", "examples", "research_reproducibility", "zeus_nsdi23", "trace")
    curves = {}
    for path in sorted(glob.glob(os.path.join(base, "summary_power_*.csv"))):
        gpu = re.search(r"summary_power_(\w+)\.csv", path).group(1)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        top = max(int(r["power_limit"]) for r in rows)
        groups = defaultdict(dict)
        for r in rows:
            if r["network"] != "bert_base_uncased":
                continue
            key = (r["dataset"], r["batch_size"], r["optimizer"])
            groups[key][int(r["power_limit"])] = (float(r["time_per_epoch"]), float(r["average_power"]))
        by_limit = defaultdict(list)
        for points in groups.values():
            if top not in points:
                continue
            t_top = points[top][0]
            for limit, (t, p) in points.items():
                by_limit[limit].append((t_top / t, p / top))
        curve = {limit / top: (statistics.median(s for s, _ in v), statistics.median(p for _, p in v))
                 for limit, v in sorted(by_limit.items())}
        curves[gpu] = {"top": top, "curve": curve}
    return curves


def read_zeus_clock(reference):
    base = os.path.join(reference, "zeus", "sosp24_data", "emulation", "stage_profile")
    time, energy = defaultdict(float), defaultdict(float)
    for name in ("gpt3-175b+a100_sxm_bf16.csv", "bloom+a100_sxm_bf16.csv"):
        with open(os.path.join(base, name), newline="") as f:
            for r in csv.DictReader(f):
                time[int(r["frequency"])] += float(r["time"])
                energy[int(r["frequency"])] += float(r["energy"])
    top = max(time)
    points = []
    for f in sorted(time):
        speed = time[top] / time[f]
        power = (energy[f] / time[f]) / (energy[top] / time[top])
        points.append((f / top, speed, power))
    return top * 1e6, points


# --- helpers -----------------------------------------------------------------------------------------

def isotonic(values, weights=None):
    """Pool-adjacent-violators: the non-decreasing sequence closest (least squares) to `values`."""
    weights = weights or [1.0] * len(values)
    blocks = []
    for v, w in zip(values, weights):
        blocks.append([v * w, w, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w2, n = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w2
            blocks[-1][2] += n
    out = []
    for s, w, n in blocks:
        out += [s / w] * n
    return out


def g5(x):
    return f"{x:.5g}"


def g6(x):
    return f"{x:.6g}"


def flow(values, fmt=g5):
    return "[" + ", ".join(fmt(v) for v in values) + "]"


def quote(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def source(kind, detail):
    key = {"measured": "method", "published": "reference", "model": "derivation"}[kind]
    return "{kind: " + kind + ", " + key + ": " + quote(detail) + "}"


# --- architectures -----------------------------------------------------------------------------------

def read_simple_yaml(path):
    """The subset of YAML the architecture files use: nested maps by indentation, scalars, comments."""
    root, stack = {}, [(-1, None)]
    stack[0] = (-1, root)
    for raw in read(path).splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        value = value.strip()
        if value == "":
            parent[key] = {}
            stack.append((indent, parent[key]))
        else:
            value = value.strip('"')
            parent[key] = int(value) if re.fullmatch(r"\d+", value) else value
    return root


def ceil_div(a, b):
    return -(-a // b)


def architecture_shapes(arch_dir):
    """(n, k) of every projection GEMM the cost models ask for (models/costs.cpp), TP 1, 2 and 4."""
    shapes, names = set(), []
    for path in sorted(glob.glob(os.path.join(arch_dir, "*.yaml"))):
        a = read_simple_yaml(path)
        names.append(os.path.splitext(os.path.basename(path))[0])
        hidden = a["hidden_size"]
        ffns = []
        moe = a.get("moe", {})
        if moe:
            ffns.append(moe["expert_ffn_size"])
            if moe.get("shared_experts", 0):
                ffns += [moe["shared_expert_ffn_size"], moe["shared_experts"] * moe["shared_expert_ffn_size"]]
        if "dense_ffn_size" in a:
            ffns.append(a["dense_ffn_size"])
        att = a["attention"]
        for tp in TP_DEGREES:
            for ffn in ffns:
                shard = ceil_div(ffn, tp)
                shapes.add((shard, hidden))
                shapes.add((hidden, shard))
            heads = ceil_div(att["num_heads"], tp)
            if att["kind"] == "mla":
                qk = att["qk_nope_head_dim"] + att["qk_rope_head_dim"]
                if att.get("q_lora_rank", 0):  # the query's and the KV's down-projections fused (models/costs.cpp)
                    shapes.add((att["q_lora_rank"] + att["kv_lora_rank"] + att["qk_rope_head_dim"], hidden))
                    shapes.add((heads * qk, att["q_lora_rank"]))
                else:
                    shapes.add((heads * qk, hidden))
                    shapes.add((att["kv_lora_rank"] + att["qk_rope_head_dim"], hidden))
                shapes.add((heads * (att["qk_nope_head_dim"] + att["v_head_dim"]), att["kv_lora_rank"]))
                shapes.add((hidden, heads * att["v_head_dim"]))
            else:
                kv = ceil_div(att.get("num_kv_heads", att["num_heads"]), tp)
                d = att["head_dim"]
                shapes.add(((heads + 2 * kv) * d, hidden))
                shapes.add((hidden, heads * d))
            shapes.add((ceil_div(a["vocab_size"], tp), hidden))  # the LM head
    return sorted(shapes), names


# --- the GEMM model ----------------------------------------------------------------------------------
# time(M, N, K) = t0 + max(2MNK / (peak * e * g(M) g(N) g(K)), bytes / hbm),  g(x) = x / (x + h),
# bytes = in_bytes (MK + KN) + out_bytes MN. e: the large-GEMM efficiency; h: the size at which a
# dimension halves it (tile and wave quantisation); t0: a launch and pipeline floor.

def gemm_model(m, n, k, e, h, t0, peak, hbm, in_bytes, out_bytes):
    def g(x):
        return x / (x + h)
    compute = 2.0 * m * n * k / (peak * e * g(m) * g(n) * g(k))
    memory = (in_bytes * (m * k + k * n) + out_bytes * m * n) / hbm
    return t0 + max(compute, memory)


def nelder_mead(f, x0, steps, iterations=4000):
    pts = [list(x0)]
    for i, s in enumerate(steps):
        p = list(x0)
        p[i] += s
        pts.append(p)
    vals = [f(p) for p in pts]
    for _ in range(iterations):
        order = sorted(range(len(pts)), key=lambda i: vals[i])
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if vals[-1] - vals[0] < 1e-14:
            break
        centroid = [sum(p[j] for p in pts[:-1]) / (len(pts) - 1) for j in range(len(x0))]

        def towards(c):
            return [centroid[j] + c * (pts[-1][j] - centroid[j]) for j in range(len(x0))]
        r = towards(-1.0)
        fr = f(r)
        if fr < vals[0]:
            e = towards(-2.0)
            fe = f(e)
            pts[-1], vals[-1] = (e, fe) if fe < fr else (r, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = r, fr
        else:
            c = towards(0.5)
            fc = f(c)
            if fc < vals[-1]:
                pts[-1], vals[-1] = c, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = [pts[0][j] + 0.5 * (pts[i][j] - pts[0][j]) for j in range(len(x0))]
                    vals[i] = f(pts[i])
    best = min(range(len(pts)), key=lambda i: vals[i])
    return pts[best], vals[best]


def fit_gemm(point_sets, peak, in_bytes, out_bytes):
    """Fits (e, h, t0) to sets of published (M, N, K, FLOP/s, hbm) points, each set weighted equally,
    minimising the squared log error of the time."""
    weighted = []
    for points in point_sets:
        for (m, n, k, flops, hbm) in points:
            weighted.append((m, n, k, 2.0 * m * n * k / flops, hbm, 1.0 / len(points)))

    def unpack(x):
        return 1.0 / (1.0 + math.exp(-x[0])), math.exp(x[1]), math.exp(x[2]) * 1e-6

    def loss(x):
        e, h, t0 = unpack(x)
        return sum(w * math.log(gemm_model(m, n, k, e, h, t0, peak, hbm, in_bytes, out_bytes) / t) ** 2
                   for m, n, k, t, hbm, w in weighted)

    best = None
    for start in ([0.5, math.log(128), 0.0], [1.5, math.log(512), math.log(3)], [0.0, math.log(32), math.log(8)]):
        x, v = nelder_mead(loss, start, [0.5, 0.7, 0.7])
        if best is None or v < best[1]:
            best = (x, v)
    e, h, t0 = unpack(best[0])
    total_weight = sum(w for *_, w in weighted)
    rms = math.sqrt(best[1] / total_weight)
    residuals = [(m, n, k, gemm_model(m, n, k, e, h, t0, peak, hbm, in_bytes, out_bytes) / t - 1.0)
                 for m, n, k, t, hbm, w in weighted]
    return {"e": e, "h": h, "t0": t0, "rms_log": rms, "residuals": residuals}


def efficiency_for(target_flops, m, n, k, h, t0, peak):
    """The e at which the model's compute-bound time of (m, n, k) gives `target_flops`."""
    t = 2.0 * m * n * k / target_flops
    g = (m / (m + h)) * (n / (n + h)) * (k / (k + h))
    return 2.0 * m * n * k / ((t - t0) * peak * g)


# --- the FP8 GEMM model: DeepGEMM's persistent-tile kernel on the SMs ---------------------------------
# The Hopper profiles' FP8 tables (DeepGEMM, the FP8 library of DeepSeek-V3-style serving; docs/validation.md,
# GEMMs). DeepGEMM's block choice (deepseek-ai/DeepGEMM @327ec92f, deep_gemm/jit_kernels/gemm.py,
# get_best_configs; read, not copied): BLOCK_M from {64, 128, 256} (128 only for the contiguous layout),
# BLOCK_N from 16..128 in steps of 8 plus 144 and 160 (at most 128 when BLOCK_M is 256); the fewest waves of
# tiles over the SMs, then the fullest last wave, then on ties a smaller block on the shared side or a larger
# BLOCK_N.
# time = t0 + fill + max(waves (max(compute, load) + store), unique bytes / hbm), per tile:
#   compute = 2 BM BN K / (peak / SMs * e)          the tile's FLOPs at the SM's share of the peak
#   load    = (R + BN) K in_bytes / L               its operands through the SM's load path (L per SM),
#                                                   R = min(M, BM): below one block only M rows exist
#   store   = BM BN out_bytes / (hbm / SMs)         the epilogue writes at the SM's share of HBM
#   fill    = (R + BN) 128 in_bytes / (hbm / SMs)   the first BLOCK_K stage before any MMA can start
# e, L and t0 fitted (least squares in log time): e to the M = 4096 points, L and t0 to the M <= 128
# points, alternately until they settle. The same (e, L, t0) serve every Hopper GPU (same SMs and clocks);
# hbm is each GPU's own.

DEEPGEMM_BLOCK_N = tuple(range(16, 129, 8)) + (144, 160)


def deepgemm_blocks(m, n, groups, sms, contiguous=False):
    block_ms = (128,) if contiguous else (64, 128, 256)

    def tiles(bm, bn):
        return ceil_div(m, bm) * ceil_div(n, bn) * groups

    def waves(bm, bn):
        return ceil_div(tiles(bm, bn), sms)

    def last(bm, bn):
        return tiles(bm, bn) % sms or sms
    best = None
    for bm in block_ms:
        for bn in (b for b in DEEPGEMM_BLOCK_N if bm <= 128 or b <= 128):
            if best is None or waves(bm, bn) < waves(*best):
                best = (bm, bn)
            elif waves(bm, bn) == waves(*best):
                u, bu = last(bm, bn), last(*best)
                if u > bu or (u == bu and ((bm == best[0] and bn < best[1]) or (bn == best[1] and bm < best[0]) or
                                           (bm != best[0] and bn > best[1]))):
                    best = (bm, bn)
    bm, bn = best
    return bm, bn, tiles(bm, bn), waves(bm, bn)


def tile_model(m, n, k, params, hw, groups=1, contiguous=False):
    e, load_bw, t0 = params
    sms, peak, hbm, in_b, out_b = hw
    bm, bn, _, waves = deepgemm_blocks(m, n, groups, sms, contiguous)
    rows = min(m, bm)  # below one block, TMA fetches only the rows there are (the MMA still runs the whole block)
    compute = 2.0 * bm * bn * k / (peak / sms * e)
    load = (rows + bn) * k * in_b / load_bw
    store = bm * bn * out_b / (hbm / sms)
    fill = (rows + bn) * 128 * in_b / (hbm / sms)
    unique = groups * (in_b * (m * k + k * n) + out_b * m * n)
    return t0 + fill + max(waves * (max(compute, load) + store), unique / hbm)


def fit_tile_model(points, hw, rounds=30):
    """points: (m, n, k, seconds). e from the M > 128 points, (L, t0) from the M <= 128 ones, alternately."""
    small = [p for p in points if p[0] <= 128]
    large = [p for p in points if p[0] > 128]
    e, load_bw, t0 = 0.8, 75e9, 1e-6

    def loss(pts, params):
        return sum(math.log(tile_model(m, n, k, params, hw) / t) ** 2 for m, n, k, t in pts)
    if not small:  # no small-M data (Azure's smallest M is 1024): all three at once
        x, _ = nelder_mead(lambda x: loss(large, (1 / (1 + math.exp(-x[0])), math.exp(x[1]) * 1e9,
                                                  math.exp(x[2]) * 1e-6)), [1.5, math.log(75), 0.0], [0.5, 0.5, 0.7])
        return 1 / (1 + math.exp(-x[0])), math.exp(x[1]) * 1e9, math.exp(x[2]) * 1e-6
    for _ in range(rounds):
        x, _ = nelder_mead(lambda x: loss(large, (1 / (1 + math.exp(-x[0])), load_bw, t0)),
                           [math.log(e / (1 - e))], [0.3])
        e = 1 / (1 + math.exp(-x[0]))
        x, _ = nelder_mead(lambda x: loss(small, (e, math.exp(x[0]) * 1e9, math.exp(x[1]) * 1e-6)),
                           [math.log(load_bw / 1e9), math.log(t0 * 1e6)], [0.3, 0.3])
        load_bw, t0 = math.exp(x[0]) * 1e9, math.exp(x[1]) * 1e-6
    return e, load_bw, t0


def tile_model_report(ref):
    """Prints the tile model's fit and its errors on what it was not fitted to (TFLOP/s error, model / published - 1)."""
    sheet = ref["gpus"]["sheet"]["h100-sxm"]
    hw = ref["tile_hw"]
    dense = [(m, n, k, 2.0 * m * n * k / f) for m, n, k, f in ref["deepgemm"]]
    grouped = [(g, m, n, k, 2.0 * g * m * n * k / f, c) for g, m, n, k, f, c in ref["deepgemm_grouped"]]

    def line(errs):
        a = [abs(x) for x in errs]
        return f"mean {100 * sum(a) / len(a):.1f}%, worst {100 * max(a):.1f}%"

    def err(t, model):
        return t / model - 1.0
    params = ref["tile_fp8"]  # the shipped fit (main)
    out = [f"tile model, h100-sxm FP8, fitted to DeepGEMM's 18 dense points: e={params[0]:.3f} "
           f"L={params[1] / 1e9:.1f} GB/s per SM t0={params[2] * 1e6:.2f} us"]
    res = [err(t, tile_model(m, n, k, params, hw)) for m, n, k, t in dense]
    out.append("  dense, fit residuals: " + line(res) + " [" + " ".join(f"{100 * r:+.1f}" for r in res) + "]")
    held = []
    for shape in sorted({(n, k) for _, n, k, _ in dense}):
        q = fit_tile_model([p for p in dense if (p[1], p[2]) != shape], hw)
        held += [err(t, tile_model(m, n, k, q, hw)) for m, n, k, t in dense if (n, k) == shape]
    out.append("  dense, each (N, K) shape held out in turn: " + line(held))
    for mh in sorted({p[0] for p in dense}):
        q = fit_tile_model([p for p in dense if p[0] != mh], hw, rounds=30)
        out.append(f"  dense, M = {mh} held out: " +
                   line([err(t, tile_model(m, n, k, q, hw)) for m, n, k, t in dense if m == mh]))
    floor = params[2]

    def one(m, n, k):
        return tile_model(m, n, k, params, hw)
    rules = {
        "every group's GEMM, one launch floor (grouped: launches)":
            lambda g, m, n, k: g * (one(m, n, k) - floor) + floor,
        "one persistent kernel over all groups' tiles (DeepGEMM's own schedule)":
            lambda g, m, n, k, c=False: tile_model(g * m if c else m, n, k, params, hw, 1 if c else g, c),
        "the GEMM of all rows, plus every further group's weights read from HBM (grouped: persistent, shipped)":
            lambda g, m, n, k: one(g * m, n, k) + (g - 1) * n * k / hw[2],
    }
    for name, rule in rules.items():
        if "own schedule" in name:  # the only rule that reads the layout
            errs = [err(t, rule(g, m, n, k, c)) for g, m, n, k, t, c in grouped]
        else:
            errs = [err(t, rule(g, m, n, k)) for g, m, n, k, t, c in grouped]
        out.append(f"  grouped (not fitted), {name}: " + line(errs) + " [" +
                   " ".join(f"{100 * r:+.1f}" for r in errs) + "]")
    for gpu in ("h100-sxm", "h200"):
        hw_g = (sheet["sms"], sheet["fp8"], ref["azure"][gpu]["hbm"]["Copy"], 1, 2)
        errs = [err(2.0 * m * n * k / f, tile_model(m, n, k, params, hw_g)) for m, n, k, f in ref["azure"][gpu]["gemm"]]
        out.append(f"  Azure {gpu} cuBLASLt FP8 (another library, not fitted): " + line(errs) + " [" +
                   " ".join(f"{100 * r:+.1f}" for r in errs) + "]")
        q = fit_tile_model([(m, n, k, 2.0 * m * n * k / f) for m, n, k, f in ref["azure"][gpu]["gemm"]], hw_g)
        errs = [err(2.0 * m * n * k / f, tile_model(m, n, k, q, hw_g)) for m, n, k, f in ref["azure"][gpu]["gemm"]]
        out.append(f"    refitted to those points alone (all three at once): e={q[0]:.3f} L={q[1] / 1e9:.1f} GB/s t0={q[2] * 1e6:.2f} us, "
                   f"residuals " + line(errs))
    return "\n".join(out)


# --- one profile -------------------------------------------------------------------------------------

GPU_NAMES = {"h100-sxm": "NVIDIA H100 80GB HBM3", "h200": "NVIDIA H200 141GB", "a100-sxm": "NVIDIA A100-SXM4-80GB",
             "h800": "NVIDIA H800 80GB HBM3"}
# The H800 SXM5 is the H100 SXM5's die with its NVLink cut (reference/gpus.md); Azure publishes no H800 node, so
# whatever its profile takes from Azure is the H100's, and says so.
AZURE_FILES = {"h100-sxm": "ND_H100_v5_results.md", "h200": "ND_H200_v5_results.md",
               "a100-sxm": "ND_A100_v4_results.md", "h800": "ND_H100_v5_results.md"}
SAME_DIE = " (H100 SXM, same die: the H100's figures carried over)"


def build(gpu, ref, shapes, arch_names, report):
    sheet = ref["gpus"]["sheet"][gpu]
    az = ref["azure"][gpu]
    gpus = ref["gpus"]
    hbm = az["hbm"]["Copy"]
    hopper = gpu != "a100-sxm"
    h800 = gpu == "h800"
    azure = AZURE.format(file=az["file"]) + (SAME_DIE if h800 else "")
    out = []
    w = out.append
    w(f"# Reference profile for {GPU_NAMES[gpu]}: published measurements and documented models, no GPU needed.")
    w("# Generated by tools/build_profiles.py from models/reference (do not edit by hand: change the")
    w("# converter and rerun it). Format and derivations: docs/profile-format.md.")
    w("schema_version: 1")
    w("kind: profile")
    w("description: " + quote(f"{GPU_NAMES[gpu]}: published tables (Azure, DeepEP, DeepGEMM, datasheets, the overlap "
                              f"paper) and models fitted to them"))

    # Device.
    if gpu == "h200":
        clock, clock_src = gpus["h200_clock"], "the SM clock under load measured on the lent H200 (gpus.md)"
    elif gpu in ("h100-sxm", "h800"):
        clock, clock_src = gpus["h200_clock"], "model: the H200's measured 1980 MHz (same GH100 die and boost clock)"
    else:
        clock, clock_src = ref["zeus_clock"][0], "the highest SM clock of zeus's A100-SXM profiles (1410 MHz)"
    memory_gib = sheet["memory_gb"]
    w("device:")
    w(f"  name: {quote(GPU_NAMES[gpu])}")
    w(f"  sm_count: {sheet['sms']}")
    w(f"  memory: {g5(memory_gib)}GiB")
    w(f"  hbm_bandwidth: {g5(hbm / 1e9)}GBps")
    w(f"  sm_clock: {g5(clock / 1e6)}MHz")
    spec = az["spec"]
    w("  extra: {" + ", ".join(f"{k}: {quote(spec[v])}" for k, v in
                               (("azure_gpu", "GPU"), ("cuda", "CUDA"), ("driver", "NVIDIA Driver"), ("nccl", "NCCL"))) +
      "}")
    w("  source: " + source("published",
                            f"SMs and memory: datasheet ({GPUS_MD}); hbm_bandwidth: STREAM Copy on {azure} "
                            f"(datasheet peak {g5(sheet['hbm_peak'] / 1e12)} TB/s); sm_clock: {clock_src}; memory in GiB as the "
                            f"drivers report it; extra: the system of the Azure measurements"))

    # GEMM tables.
    fits = {}
    if hopper:
        fp8_points = [[(m, n, k, f, hbm) for m, n, k, f in az["gemm"]],
                      [(m, n, k, f, ref["azure"]["h100-sxm"]["hbm"]["Copy"]) for m, n, k, f in ref["deepgemm"]]]
        fp8 = fit_gemm(fp8_points, sheet["fp8"], 1, 2)
        fits["fp8"] = fp8
        e16 = efficiency_for(gpus["h200_bf16_8192"], 8192, 8192, 8192, fp8["h"], fp8["t0"], sheet["bf16"])
        fits["bf16"] = {"e": e16, "h": fp8["h"], "t0": fp8["t0"]}
        deepgemm_note = (f"measured on this GPU; its HBM3 is the H100's, {g5(hbm / 1e12)} TB/s" if h800 else
                         f"H800 has the H100's SMs and HBM3, so those points use the H100's "
                         f"{g5(ref['azure']['h100-sxm']['hbm']['Copy'] / 1e12)} TB/s")
        fit_text = (f"a fit of this form to {len(az['gemm'])} cuBLASLt FP8 points ({azure}) and "
                    f"18 DeepGEMM FP8 points ({DEEPGEMM}; {deepgemm_note}), each set weighted equally, least "
                    f"squares in log time: e={fp8['e']:.4f}, h={fp8['h']:.1f}, t0={fp8['t0'] * 1e6:.3f} us, rms log "
                    f"error {fp8['rms_log']:.3f}")
        e_t, l_t, t0_t = ref["tile_fp8"]
        hw = (sheet["sms"], sheet["fp8"], hbm, 1, 2)
        tile_res = [2.0 * m * n * k / f / tile_model(m, n, k, ref["tile_fp8"], ref["tile_hw"]) - 1.0
                    for m, n, k, f in ref["deepgemm"]]
        tile_text = ("DeepGEMM's persistent-tile kernel (tools/build_profiles.py, the FP8 GEMM model; block choice "
                     "from deepseek-ai/DeepGEMM @327ec92f deep_gemm/jit_kernels/gemm.py get_best_configs): time = t0 + "
                     "fill + max(waves (max(compute, load) + store), unique bytes / hbm_bandwidth) over "
                     f"{sheet['sms']} SMs, compute = 2 BM BN K / (peak e / SMs), load = (min(M, BM) + BN) K / L, store "
                     "= 2 BM BN / (hbm_bandwidth / SMs), fill = (min(M, BM) + BN) 128 / (hbm_bandwidth / SMs); in 1 "
                     f"byte, out bf16; e={e_t:.4f}, L={l_t / 1e9:.2f} GB/s per SM, t0={t0_t * 1e6:.3f} us fitted to "
                     f"DeepGEMM's 18 dense points ({DEEPGEMM}; "
                     + ("measured on this GPU" if h800 else "the H100's SMs, clocks and HBM3") +
                     f"): e to M = 4096, L and t0 to M <= 128, least squares in log time; residuals mean "
                     f"{100 * statistics.mean(abs(r) for r in tile_res):.1f}%, worst "
                     f"{100 * max(abs(r) for r in tile_res):.1f}% (TFLOP/s)"
                     + ("" if gpu in ("h100-sxm", "h800") else "; this GPU has the same SMs and clocks, so (e, L, t0) "
                        "carry over with its own hbm_bandwidth") +
                     "; grouped: one persistent kernel over every group's rows (the GEMM of all rows, plus every further "
                     "group's weights read from HBM)")
    else:
        fp16 = fit_gemm([[(m, n, k, f, hbm) for m, n, k, f in az["gemm"]]], sheet["bf16"], 2, 2)
        fits["bf16"] = fp16
        fit_text = (f"fitted to the {len(az['gemm'])} cuBLASLt FP16 points of {AZURE.format(file=az['file'])}, least "
                    f"squares in log time: e={fp16['e']:.4f}, h={fp16['h']:.1f}, t0={fp16['t0'] * 1e6:.3f} us, rms log "
                    f"error {fp16['rms_log']:.3f}")
    if report:
        for dt, fit in fits.items():
            print(f"{gpu} {dt}: e={fit['e']:.4f} h={fit['h']:.1f} t0={fit['t0'] * 1e6:.3f}us", file=sys.stderr)
            for m, n, k, r in fit.get("residuals", []):
                print(f"    {m}x{n}x{k}: model/published - 1 = {r:+.3f}", file=sys.stderr)
    rule = ("time = t0 + max(2MNK / (peak e g(M) g(N) g(K)), bytes / hbm_bandwidth), g(x) = x / (x + h), bytes = "
            "in_bytes (MK + KN) + out_bytes MN; ")
    tables = []
    b16 = fits["bf16"]
    if hopper:
        bf16_text = (f"{rule}h and t0 from the FP8 fit ({fit_text}); e={b16['e']:.4f} chosen so that 8192^3 gives "
                     f"{g5(gpus['h200_bf16_8192'] / 1e12)} TFLOP/s, the middle of the 769-798 measured on the lent H200 "
                     f"({GPUS_MD}; the public best, MAMF, is {g5(gpus['mamf_bf16'] / 1e12)})")
        tables.append(("bf16", sheet["bf16"], b16, 2, 2, bf16_text))
        tables.append(("fp16", sheet["bf16"], b16, 2, 2, "as bf16 (same tensor-core rate): " + bf16_text))
        tables.append(("fp8", sheet["fp8"], {"t0": t0_t, "tile": hw}, 1, 2, tile_text))
    else:
        tables.append(("fp16", sheet["bf16"], b16, 2, 2, rule + fit_text))
        tables.append(("bf16", sheet["bf16"], b16, 2, 2, "as fp16 (same tensor-core rate): " + rule + fit_text))
    simt_text = ("the 16-bit table's e, h and t0 (no published {dt} GEMM figures: an assumption) at the datasheet's "
                 "{dt} peak, 4-byte operands; " + rule)
    tables.append(("tf32", sheet["tf32"], b16, 4, 4, simt_text.format(dt="TF32")))
    tables.append(("fp32", sheet["fp32"], b16, 4, 4, simt_text.format(dt="FP32 (SIMT)")))
    w("gemm:")
    for dtype, peak, fit, in_b, out_b, text in tables:
        w(f"  - dtype: {dtype}")
        w(f"    peak_tflops: {g6(peak / 1e12)}")
        w(f"    launch_floor: {fit['t0'] * 1e6:.4g}us")
        if "tile" in fit:
            w("    grouped: persistent")
        w("    source: " + source("model", f"{text}; peak {g6(peak / 1e12)} TFLOP/s dense ({GPUS_MD}); shapes: every "
                                           f"projection of {', '.join(arch_names)} at TP 1, 2, 4 (models/costs.cpp)"))
        w(f"    m: {flow(M_GRID, lambda v: str(v))}")
        w("    shapes:")
        for n, k in shapes:
            if "tile" in fit:
                times = [tile_model(m, n, k, ref["tile_fp8"], fit["tile"]) * 1e6 for m in M_GRID]
            else:
                times = [gemm_model(m, n, k, fit["e"], fit["h"], fit["t0"], peak, hbm, in_b, out_b) * 1e6 for m in M_GRID]
            w(f"      - {{n: {n}, k: {k}, time_us: {flow(times)}}}")

    # Collectives.
    w("collectives:")
    ar = az["nccl"]
    sizes = [b for b, _ in ar]
    ar_factor = 2 * 7 / 8
    raw_times = [b * ar_factor / bw for b, bw in ar]
    # Least squares in log time (pool adjacent violators, isotonic below): a dip is averaged with its
    # neighbours instead of lifted to the previous value.
    ar_times = [math.exp(v) for v in isotonic([math.log(t) for t in raw_times])]
    adjusted = sum(1 for a, b in zip(raw_times, ar_times) if abs(a / b - 1) > 1e-12)
    worst = max(abs(b / a - 1) for a, b in zip(raw_times, ar_times))
    ar_peak = max(b * ar_factor / t for b, t in zip(sizes, ar_times))
    if gpu in ("h100-sxm", "h800"):
        ag_peak = rs_peak = gpus["h100_coll"]
        coll_text = f"{g5(ag_peak / 1e9)} GB/s busbw for H100 NVLink4 collectives other than all-reduce ({GPUS_MD}, nccl-tests issue 212)"
    elif gpu == "h200":
        ag_peak, rs_peak = gpus["h200_ag"], gpus["h200_rs"]
        coll_text = (f"H200 all-gather {g5(ag_peak / 1e9)} / reduce-scatter {g5(rs_peak / 1e9)} GB/s busbw at 16 GiB "
                     f"on 8 GPUs ({GPUS_MD})")
    else:
        ag_peak = rs_peak = ar_peak
        coll_text = ("no published A100 all-gather/reduce-scatter figure: the all-reduce asymptote (A100 has no NVLS: "
                     "every collective rings over the same links)")
    dep = ref["deepep"]
    a2a_eff = (dep["dispatch"] + dep["combine"]) / 2 / dep["nvlink_max"]
    p2p_peak = (ag_peak + rs_peak) / 2
    a2a_peak = a2a_eff * p2p_peak
    # The H800: no NCCL tables are published. Each curve is the H100's (built above from the H100's figures)
    # with its latency part kept and its bandwidth part moved to the H800's NVLink:
    # time(S) = time_H100(S) + S f (1 / peak - 1 / peak_H100), f the op's nccl-tests busbw factor.
    link_rate = dep["nvlink_max"] if h800 else p2p_peak  # the achievable one-direction NVLink rate
    link_ratio = link_rate / p2p_peak

    def moved(times, f, peak, new_peak=None):
        """An H100 curve's (times, asymptote) on this GPU; unchanged unless it is the H800."""
        if not h800:
            return times, peak
        new_peak = new_peak or peak * link_ratio
        return [t + b * f * (1 / new_peak - 1 / peak) for b, t in zip(sizes, times)], new_peak

    def move_text(f, peak, new_peak, why=None):
        why = why or (f"peak_H100 x {g5(link_rate / 1e9)} / {g5(p2p_peak / 1e9)}: DeepEP's ~"
                      f"{g5(dep['nvlink_max'] / 1e9)} GB/s achievable NVLink on H800 ({DEEPEP}) / the H100's "
                      f"achievable one-direction rate ({coll_text})")
        return (f"; no H800 NCCL tables are published: moved to this GPU's NVLink, time(S) = time_H100(S) + S f "
                f"(1/peak - 1/peak_H100), f = {f} (the nccl-tests busbw factor), peak_H100 = {g5(peak / 1e9)} GB/s, "
                f"peak = {g5(new_peak / 1e9)} GB/s = {why}: the latency-bound small sizes keep the H100's times, the "
                f"bandwidth-bound large ones run at this GPU's rate")

    ar_text = (f"NCCL all-reduce bus bandwidth, in place, one 8-GPU node, {azure}; sizes are the table's rounded "
               f"labels read as powers of two (1K = 2^10 ... 65K = 2^16, 132K = 2^17 ... 8G = 2^33); where a time fell "
               f"below the previous size's (noise in the latency-bound range), the least-squares monotone fit in log "
               f"time (pool adjacent violators) replaces the {adjusted} points involved, each moved by at most "
               f"{worst * 100:.1f}%")
    h100_ar = ar_times
    ar_times, ar_peak8 = moved(h100_ar, ar_factor, ar_peak)
    w("  - op: all_reduce")
    w("    ranks: 8")
    w("    scope: intra_node")
    if h800:
        w("    source: " + source("model", f"the H100 SXM's curve ({ar_text})" +
                                          move_text("2 x 7/8", ar_peak, ar_peak8)))
    else:
        w("    source: " + source("published", ar_text))
    w(f"    bytes: {flow(sizes, lambda v: str(v))}")
    w(f"    busbw_GBps: {flow([b * ar_factor / t / 1e9 for b, t in zip(sizes, ar_times)], g6)}")

    shape_rule = ("busbw(S) = the all-reduce busbw curve (above) scaled to this op's asymptote, {peak} GB/s: {why}")
    a2a_why = (f"DeepEP's intranode EP8 dispatch/combine reach {g5(dep['dispatch'] / 1e9)}/"
               f"{g5(dep['combine'] / 1e9)} GB/s of H800's ~{g5(dep['nvlink_max'] / 1e9)} GB/s NVLink "
               f"({DEEPEP}): {a2a_eff:.3f} of the link, applied to this GPU's "
               f"{g5(p2p_peak / 1e9)} GB/s collective rate")
    derived = [
        ("all_gather", ag_peak, coll_text, None),
        ("reduce_scatter", rs_peak, coll_text, None),
        # On the H800 DeepEP's figures are the GPU's own: their mean is the asymptote, not scaled.
        ("all_to_all", a2a_peak, a2a_why, (dep["dispatch"] + dep["combine"]) / 2),
    ]
    curves8 = {"all_reduce": (ar_times, ar_peak8)}
    for op, peak, why, own_peak in derived:
        factor = 7 / 8
        busbw = [b * ar_factor / t * peak / ar_peak for b, t in zip(sizes, h100_ar)]
        times = [b * factor / bw for b, bw in zip(sizes, busbw)]
        times, peak8 = moved(times, factor, peak, own_peak)
        curves8[op] = (times, peak8)
        text = shape_rule.format(peak=g5(peak / 1e9), why=why)
        if h800:
            own = None
            if own_peak:
                own = (f"the mean of DeepEP's intranode EP8 dispatch and combine on H800, "
                       f"{g5(dep['dispatch'] / 1e9)} and {g5(dep['combine'] / 1e9)} GB/s ({DEEPEP}), published "
                       f"for this GPU and not scaled")
            text = text.replace("the all-reduce busbw curve (above)", "the H100 SXM's all-reduce busbw curve")
            text = f"the H100 SXM's curve ({text.replace('this GPU', 'the H100')})" + move_text("7/8", peak, peak8, own)
        w(f"  - op: {op}")
        w("    ranks: 8")
        w("    scope: intra_node")
        w("    source: " + source("model", text))
        w(f"    bytes: {flow(sizes, lambda v: str(v))}")
        w(f"    busbw_GBps: {flow([b * factor / t / 1e9 for b, t in zip(sizes, times)], g6)}")
    for n in (2, 4):
        for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
            times8, peak = curves8[op]
            f8 = ar_factor if op == "all_reduce" else 7 / 8
            fn = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
            c = n / 8
            times = [c * t + b * (fn - c * f8) / peak for b, t in zip(sizes, times8)]
            w(f"  - op: {op}")
            w(f"    ranks: {n}")
            w("    scope: intra_node")
            w("    source: " + source("model", f"from the 8-rank curve: time_n(S) = (n/8) time_8(S) + S (f_n - (n/8) "
                                               f"f_8) / busbw_max, busbw_max = {g5(peak / 1e9)} GB/s, f the nccl-tests "
                                               f"busbw factor: the latency part scales with n (n-1 ring steps and one "
                                               f"launch), the bandwidth part keeps the 8-rank bus bandwidth"))
            w(f"    bytes: {flow(sizes, lambda v: str(v))}")
            w(f"    busbw_GBps: {flow([b * fn / t / 1e9 for b, t in zip(sizes, times)], g6)}")
    sr = [b * ar_factor / t * p2p_peak / ar_peak for b, t in zip(sizes, h100_ar)]
    sr_times, sr_peak = moved([b / bw for b, bw in zip(sizes, sr)], 1, p2p_peak)
    sr_text = (f"busbw(S) = the 8-rank all-reduce busbw curve scaled to {g5(p2p_peak / 1e9)} GB/s, "
               f"the GPU's achievable one-direction NVLink rate (its ring collectives' busbw: {coll_text})")
    if h800:
        sr_text = (f"the H100 SXM's curve ({sr_text.replace('the GPU', 'the H100')})" +
                   move_text("1", p2p_peak, sr_peak))
    w("  - op: send_recv")
    w("    ranks: 2")
    w("    scope: intra_node")
    w("    source: " + source("model", sr_text))
    w(f"    bytes: {flow(sizes, lambda v: str(v))}")
    w(f"    busbw_GBps: {flow([b / t / 1e9 for b, t in zip(sizes, sr_times)], g6)}")

    # Links.
    nominal = sheet["nvlink_total"] / 2
    pcie_dir = sheet["pcie_total"] / 2
    if gpu == "a100-sxm":
        h2d, pcie_note = az["nv"]["Host to Device"], "host-to-device (the device-to-host figure, 6.27 GB/s, looks like pageable memory)"
    else:
        h2d = (az["nv"]["Host to Device"] + az["nv"]["Device to Host"]) / 2
        pcie_note = "the mean of host-to-device and device-to-host"
    w("links:")
    link_latency = ("latency: no point-to-point latency is published for this GPU, so none is added to the cluster "
                    "file's hop latency; an operation's own latency (launch, protocol, synchronisation) is in its "
                    "collective table, to which the simulator sizes its transfers (docs/simulator.md, Collectives)")
    if h800:
        w(f"  nvlink: {{bandwidth_efficiency: {link_rate / nominal:.4f}, latency: 0us, source: " +
          source("published", f"efficiency: DeepEP's ~{g5(link_rate / 1e9)} GB/s NVLink maximum bandwidth on H800 "
                              f"({DEEPEP}) / {g5(nominal / 1e9)} GB/s nominal per direction ({GPUS_MD}); "
                              f"{link_latency}") + "}")
    else:
        w(f"  nvlink: {{bandwidth_efficiency: {p2p_peak / nominal:.4f}, latency: 0us, source: " +
          source("model", f"efficiency: {g5(p2p_peak / 1e9)} GB/s achievable ({coll_text}) / {g5(nominal / 1e9)} GB/s "
                          f"nominal per direction ({GPUS_MD}); {link_latency}") + "}")
    w(f"  pcie: {{bandwidth_efficiency: {h2d / pcie_dir:.4f}, latency: 0us, source: " +
      source("published", f"{g5(h2d / 1e9)} GB/s ({pcie_note}, NV Bandwidth, {azure}) / "
                          f"{g5(pcie_dir / 1e9)} GB/s per direction ({GPUS_MD}); no latency published: none added to the "
                          f"cluster file's") + "}")
    nic_text = (f"inter-node all-to-all tops out near {g5(gpus['nic_a2a'] / 1e9)} GB/s per 400 Gb/s (50 GB/s) "
                f"ConnectX-7 ({GPUS_MD}, nccl-tests issue 267); DeepEP's RDMA EP16 normal kernels reach 43 GB/s")
    if gpu == "a100-sxm":
        w(f"  nic: {{bandwidth_efficiency: {gpus['nic_a2a'] / 50e9:.4f}, latency: 0us, source: " +
          source("model", "no A100 figure: the Hopper nodes' " + nic_text + "; no latency published") + "}")
    else:
        w(f"  nic: {{bandwidth_efficiency: {gpus['nic_a2a'] / 50e9:.4f}, latency: 0us, source: " +
          source("published", nic_text + "; no latency published: none added to the cluster file's") + "}")

    # Contention: a mechanism, not the overlap paper's measured mean (which docs/validation.md compares
    # against instead). A communication kernel holding s of the GPU's S SMs leaves a compute-bound
    # kernel S - s of them; a memory-bound kernel shares HBM with the communication, which reads what
    # it sends and writes what it receives at the link rate each way.
    sms_total = sheet["sms"]
    comm_hbm = 2 * link_rate
    mem_slow = hbm / (hbm - comm_hbm)
    w("contention:")
    w("  source: " + source("model", f"compute-bound kernels: S / (S - s) with S = {sms_total} SMs ({GPUS_MD}) and s "
                                    f"the SMs the communication's kernels hold (its grid); memory-bound kernels: "
                                    f"hbm / (hbm - r), hbm = {g5(hbm / 1e9)} GB/s (the STREAM copy above) and r = "
                                    f"{g5(comm_hbm / 1e9)} GB/s, the HBM traffic of communication at the achievable "
                                    f"NVLink rate, {g5(link_rate / 1e9)} GB/s each way (read what is sent, write what "
                                    f"is received); no dependence on sizes is modelled; communication holding no SM "
                                    f"(a copy engine, RDMA) slows no compute (docs/simulator.md, Contention)"))
    w("  comm_source: " + source("model", "not published: the communication is assumed to lose half as much as the "
                                          "compute, comm = 1 + (compute - 1) / 2 (both contend for SMs, HBM and L2, but "
                                          "the communication's kernels hold their SMs and are bound by the links)"))
    w("  comm_sms: 20")
    w("  comm_sms_source: " + source("published", "20 SMs saturate NVLink and InfiniBand in DeepSeek-V3's all-to-all "
                                                  "kernels (DeepSeek-V3 technical report, arXiv:2412.19437, "
                                                  "section 3.2.2); taken for NCCL's collectives too, whose channel "
                                                  "count is not published per operation"))
    w("  grids:")
    for cls in ("compute_bound", "memory_bound"):
        for sms in (10, 20, 40):
            f = sms_total / (sms_total - sms) if cls == "compute_bound" else mem_slow
            w("    - comm_op: any")
            w(f"      compute: {cls}")
            w(f"      comm_sms: {sms}")
            w(f"      comm_bytes: [{128 * 2 ** 20}]")
            w("      gemm_flop: [1e12]")
            w(f"      compute_slowdown: [[{g5(f)}]]")
            w(f"      comm_slowdown: [[{g5(1 + (f - 1) / 2)}]]")

    # Power.
    caps = ref["zeus_caps"]
    used = [gpu_name for gpu_name, c in sorted(caps.items()) if c["curve"][1.0][1] >= 0.85]
    uncapped = statistics.median(caps[g]["curve"][1.0][1] for g in used)
    pts = sorted((frac, speed) for g in used for frac, (speed, _) in caps[g]["curve"].items() if frac < 1.0)
    fracs, speeds = [p[0] for p in pts], isotonic([p[1] for p in pts])
    merged = {}
    for f, s in zip(fracs, speeds):
        merged.setdefault(round(f, 3), []).append(s)
    cap_x = sorted(merged) + [1.0]
    cap_y = [round(statistics.mean(merged[x]), 3) for x in cap_x[:-1]] + [1.0]
    cap_y = isotonic(cap_y)
    tdp = sheet["tdp"]
    idle = 0.10 * tdp
    compute = uncapped * tdp
    comm = idle + 0.25 * (compute - idle)
    both = min(tdp, compute + comm - idle)
    dtypes = [t[0] for t in tables]
    w("power:")
    w("  source: " + source("model", f"no {GPU_NAMES[gpu]} power tables are published ({GPUS_MD}): max_power is the "
                                     f"datasheet TDP ({g5(tdp)} W); compute = {uncapped:.3f} TDP, the median fraction of "
                                     f"the power limit drawn uncapped by the transformer (bert_base_uncased) training "
                                     f"runs on {', '.join(used)} ({ZEUS_NSDI}), the same for every dtype (no per-dtype "
                                     f"data); idle = 0.10 TDP (assumed: SXM boards idle at 10-15% of TDP); "
                                     f"communication = idle + 0.25 (compute - idle) (NCCL's channels occupy about a "
                                     f"quarter of the SMs); overlapped = min(TDP, compute + communication - idle); "
                                     f"min_power_limit = the lowest cap fraction of the zeus curves ({cap_x[0]:.3f}) x TDP"))
    w(f"  max_power: {g5(tdp)}W")
    w(f"  min_power_limit: {g5(cap_x[0] * tdp)}W")
    w(f"  idle: {g5(idle)}W")
    w("  compute: {" + ", ".join(f"{d}: {g5(compute)}W" for d in sorted(dtypes)) + "}")
    w(f"  communication: {g5(comm)}W")
    w("  overlapped: {" + ", ".join(f"{d}: {g5(both)}W" for d in sorted(dtypes)) + "}")
    w("  cap_curve:")
    w("    source: " + source("model", f"speed (time uncapped / time capped) against cap / max limit, from {ZEUS_NSDI}: "
                                       f"per GPU ({', '.join(used)}) the median over bert_base_uncased training "
                                       f"configurations at each limit, pooled, made non-decreasing (pool adjacent "
                                       f"violators) and averaged where fractions coincide; applied to this GPU as a "
                                       f"fraction of its TDP"))
    w(f"    cap_fraction: {flow(cap_x, lambda v: f'{v:.3f}')}")
    w(f"    speed_fraction: {flow(cap_y, lambda v: f'{v:.3f}')}")
    top_clock, clock_pts = ref["zeus_clock"]
    sub = clock_pts[::3] if clock_pts[-1] in clock_pts[::3] else clock_pts[::3] + [clock_pts[-1]]
    cx = [p[0] for p in sub]
    cs = isotonic([p[1] for p in sub])
    cp = isotonic([p[2] for p in sub])
    clock_kind = "published" if gpu == "a100-sxm" else "model"
    clock_text = (f"A100-SXM bf16 training, GPT-3 175B and BLOOM pipeline stages, {ZEUS_SOSP}: time and energy summed "
                  f"over stages and passes at each SM clock from 855 to {g5(top_clock / 1e6)} MHz (every third clock); "
                  f"speed = time at the top clock / time, power = average power / that at the top clock, made "
                  f"non-decreasing")
    if gpu != "a100-sxm":
        clock_text = "the A100's curve applied as a fraction of this GPU's sm_clock (no Hopper data): " + clock_text
    w("  clock_curve:")
    w("    source: " + source(clock_kind, clock_text))
    w(f"    clock_fraction: {flow(cx, lambda v: f'{v:.4f}')}")
    w(f"    speed_fraction: {flow([min(1.0, v) for v in cs], lambda v: f'{v:.4f}')}")
    w(f"    power_fraction: {flow([min(1.0, v) for v in cp], lambda v: f'{v:.4f}')}")

    # Attention core.
    fa = az["fa"]["Flash Attention 2.0"]
    w("attention:")
    w(f"  flops_efficiency: {fa / sheet['bf16']:.4f}")
    w("  source: " + source("published", f"Flash Attention 2.0, {g5(fa / 1e12)} TFLOP/s (head dim {az['fa_head_dim']}, "
                                         f"batch 2, sequence 8192), {azure}, / the "
                                         f"{g5(sheet['bf16'] / 1e12)} TFLOP/s 16-bit peak"))

    # Low-latency expert-parallel kernels (SM90 only: DeepEP's low-latency kernels need Hopper).
    if gpu in ("h100-sxm", "h200", "h800"):
        tokens, hidden, topk = dep["ll_tokens"], dep["ll_hidden"], dep["ll_topk"]
        copies = tokens * topk * 7 / 8  # (token, expert) copies to the 7 other GPUs of EP8, uniform routing
        fp8_message = hidden + hidden / 128 * 4 + 16  # DeepEP's test: FP8 data, a scale per 128, 16 B of indices
        bf16_message = hidden * 2
        fixed = {}
        for phase, message in (("dispatch", fp8_message), ("combine", bf16_message)):
            stream = copies * message / dep["nvlink_max"]
            fixed[phase] = (dep[f"ll_{phase}_ep8"] - stream, stream)
        w("low_latency_kernels:")
        w(f"  dispatch_latency: {g5(fixed['dispatch'][0] * 1e6)}us")
        w(f"  combine_latency: {g5(fixed['combine'][0] * 1e6)}us")
        text = (f"each kernel's fixed cost = DeepEP's low-latency EP8 time ({DEEPEP}: dispatch "
                f"{g5(dep['ll_dispatch_ep8'] * 1e6)} us, combine {g5(dep['ll_combine_ep8'] * 1e6)} us; {tokens} tokens "
                f"per GPU, hidden {hidden}, top-{topk}, one copy per (token, expert), FP8 dispatch, BF16 combine) "
                f"minus the time its copies to the 7 other GPUs take over NVLink at the published ~"
                f"{g5(dep['nvlink_max'] / 1e9)} GB/s (dispatch {g5(fixed['dispatch'][1] * 1e6)} us, combine "
                f"{g5(fixed['combine'][1] * 1e6)} us): launch, count exchange and the receiver's wait, on H800 (SM90)")
        if gpu not in ("h100-sxm", "h800"):
            text += "; this GPU has the same SMs (SM90), so the H800 figure is carried over"
        w("  source: " + source("model", text))

        # Normal kernels: forwarding bound by the kernel's SMs (measured on H200, same SM90 SMs and clocks).
        fwd = ref["deepep_forwarding"]
        b_fp8, b_bf16 = hidden + hidden / 128 * 4, 2 * hidden
        # A token of b bytes takes c + b / B: two sizes, two unknowns.
        t_fp8, t_bf16 = b_fp8 / fwd[("dispatch", "FP8")], b_bf16 / fwd[("dispatch", "BF16")]
        bw = (b_bf16 - b_fp8) / (t_bf16 - t_fp8)
        per_token = t_fp8 - b_fp8 / bw
        w("normal_kernels:")
        w(f"  dispatch_forward_bandwidth: {g5(bw / 1e9)}GBps")
        w(f"  dispatch_forward_per_token: {g5(per_token * 1e9)}ns")
        w(f"  combine_forward_bandwidth: {g5(fwd[('combine', 'BF16')] / 1e9)}GBps")
        text = (f"DeepEP's normal kernels on 2 x 8 H200 with one 400 Gb/s CX7 per GPU, EP16, 24 SMs "
                f"(deepseek-ai/DeepEP issue #493, test_internode.py at a84a248; reference/deepep/forwarding_h200_2node.md): "
                f"NVLink {g5(fwd[('dispatch', 'FP8')] / 1e9)} GB/s for FP8 dispatch ({g5(b_fp8)} B tokens), "
                f"{g5(fwd[('dispatch', 'BF16')] / 1e9)} GB/s for BF16 dispatch ({g5(b_bf16)} B), "
                f"{g5(fwd[('combine', 'BF16')] / 1e9)} GB/s for combine; the H200's NVLink carries 450 GB/s per "
                f"direction, so these are the kernels' forwarding rates, bound by their SMs; dispatch: a token "
                f"of b bytes takes per_token + b / bandwidth, solved from the two token sizes; combine: its one "
                f"measured rate")
        if gpu != "h200":
            text += "; this GPU has the same SMs (SM90) and clocks, so the H200 figures are carried over"
        w("  source: " + source("model", text))

    # Elementwise kernels (norms, activations, quantisation, permutation): memory-bound, so their bytes
    # move at hbm_bandwidth; each kernel's fixed cost is the smallest launch floor of the GEMM models above.
    floor_dtype, floor = min(((t[0], t[2]["t0"]) for t in tables), key=lambda x: x[1])
    w("elementwise:")
    w(f"  launch_floor: {floor * 1e6:.4g}us")
    w("  source: " + source("model", f"launch_floor: the smallest fixed cost of this profile's GEMM models (the "
                                     f"{floor_dtype} table's launch_floor above), for a kernel that is mostly launch "
                                     f"and tail; bytes at device.hbm_bandwidth (STREAM copy); which kernels and bytes: "
                                     f"docs/simulator.md, Elementwise kernels (models/costs.hpp)"))
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=DEFAULT_REFERENCE, help="the folder of published reference data")
    parser.add_argument("--architectures", default=os.path.join(REPO, "configs", "architectures"))
    parser.add_argument("--out", default=os.path.join(REPO, "configs", "profiles"))
    parser.add_argument("--check", action="store_true", help="compare with the files in --out instead of writing")
    parser.add_argument("--report", action="store_true", help="print the GEMM fits' residuals to stderr")
    parser.add_argument("--tile-model", action="store_true",
                        help="print the persistent-tile FP8 GEMM model's fit, its held-out errors and the grouped "
                             "rules' errors, and exit")
    args = parser.parse_args()
    if not os.path.isdir(args.reference):
        fail(f"no reference data at {args.reference} (give --reference)")

    gpus = read_gpus_md(args.reference)
    ref = {
        "gpus": gpus,
        "azure": {gpu: read_azure(args.reference, f) for gpu, f in AZURE_FILES.items()},
        "deepgemm": read_deepgemm(args.reference),
        "deepgemm_grouped": read_deepgemm_grouped(args.reference),
        "deepep": read_deepep(args.reference),
        "deepep_forwarding": read_deepep_forwarding(args.reference),
        "zeus_caps": read_zeus_caps(args.reference),
        "zeus_clock": read_zeus_clock(args.reference),
    }
    expected = {"h100-sxm": "fp8", "h200": "fp8", "a100-sxm": "fp16", "h800": "fp8"}
    for gpu, dtype in expected.items():
        if ref["azure"][gpu]["gemm_dtype"] != dtype:
            fail(f"{AZURE_FILES[gpu]}: expected {dtype} GEMM figures")
    shapes, arch_names = architecture_shapes(args.architectures)
    sheet = gpus["sheet"]["h100-sxm"]
    ref["tile_hw"] = (sheet["sms"], sheet["fp8"], ref["azure"]["h100-sxm"]["hbm"]["Copy"], 1, 2)
    ref["tile_fp8"] = fit_tile_model([(m, n, k, 2.0 * m * n * k / f) for m, n, k, f in ref["deepgemm"]], ref["tile_hw"])
    if args.tile_model:
        print(tile_model_report(ref))
        return 0

    stale = []
    for gpu in ("h100-sxm", "h200", "a100-sxm", "h800"):
        text = build(gpu, ref, shapes, arch_names, args.report)
        path = os.path.join(args.out, gpu + ".yaml")
        if args.check:
            old = read(path) if os.path.exists(path) else None
            if old != text:
                stale.append(path)
            continue
        os.makedirs(args.out, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
        print(f"wrote {path} ({len(text)} bytes, {len(shapes)} GEMM shapes)")
    if stale:
        print("out of date (rerun tools/build_profiles.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
