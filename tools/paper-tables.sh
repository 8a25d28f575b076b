#!/bin/sh
# Prints the markdown tables of docs/validation.md ("The papers") from the output folders of the
# paper studies (configs/papers/), between the marker comments tests/cli/papers_test.cpp reads.
# Usage: sh tools/paper-tables.sh KIND OUT_DIR [NAME]
#   KIND moetuner: one table NAME (default: the folder's name) of every placement against contiguous
#                  on the same trace: end-to-end (p50 step) speedup, all-to-all and token-processing
#                  tail and average latency (mean over MoE layers) changes.
#   KIND overlap:  one table per cluster, overlap-<gpu> (overlap-h100, overlap-a100): the three
#                  timelines, the compute slowdown and sequential vs overlapped; then the mean and
#                  maximum over all variants.
#   KIND power:    table NAME (default overlap-power-cap): overlapped step time under each cap vs the
#                  same GPU uncapped, sequential vs overlapped, peak power overlapped vs sequential.
# Paste the output over the marked tables, then run the papers test (ctest -R papers).
set -eu
kind=${1:?usage: sh tools/paper-tables.sh moetuner|overlap|power OUT_DIR [NAME]}
dir=${2:?usage: sh tools/paper-tables.sh moetuner|overlap|power OUT_DIR [NAME]}
name=${3:-}
exec python3 - "$kind" "$dir" "$name" <<'PY'
import csv, json, os, sys

kind, folder, name = sys.argv[1], sys.argv[2], sys.argv[3]
rows = list(csv.DictReader(open(os.path.join(folder, "results.csv"))))

def result(variant):
    with open(os.path.join(folder, "variants", variant, "result.json")) as f:
        return json.load(f)["variant"]

def pct(x):
    return "%+.1f%%" % (100.0 * x)

def table(marker, header, body):
    print("<!-- papers:%s:begin -->" % marker)
    print("| " + " | ".join(header) + " |")
    print("| " + " | ".join("---" for _ in header) + " |")
    for r in body:
        print("| " + " | ".join(r) + " |")
    print("<!-- papers:%s:end -->" % marker)

if kind == "moetuner":
    marker = name or os.path.basename(os.path.normpath(folder))
    def moe_mean(v, key):
        layers = [l for l in v["timelines"][0]["layers"] if l["moe"]]
        return sum(l[key] for l in layers) / len(layers)
    by_trace = {}
    for r in rows:
        suffix = "-" + r["placement"]
        trace = r["variant"][: -len(suffix)] if r["variant"].endswith(suffix) else ""
        v = result(r["variant"])
        by_trace.setdefault(trace, []).append((r, {k: moe_mean(v, k) for k in ("a2a_tail_s", "a2a_avg_s", "token_tail_s", "token_avg_s")}))
    body = []
    for trace, items in by_trace.items():
        base = [x for x in items if x[0]["placement"] == "contiguous"][0]
        b50 = float(base[0]["step_p50_s"])
        for r, m in items:
            p50 = float(r["step_p50_s"])
            cells = [trace or "(study trace)", r["placement"], "%.3f" % (1e3 * p50), pct(b50 / p50 - 1.0)]
            for k in ("a2a_tail_s", "a2a_avg_s", "token_tail_s", "token_avg_s"):
                cells.append("%.4f (%s)" % (1e3 * m[k], pct(m[k] / base[1][k] - 1.0)))
            body.append(cells)
    table(marker, ["trace", "placement", "step p50 ms", "end-to-end speedup", "a2a tail ms/layer",
                   "a2a avg ms/layer", "token tail ms/layer", "token avg ms/layer"], body)
elif kind == "overlap":
    groups = {}
    for r in rows:
        groups.setdefault(r["cluster"], []).append(r)
    slow, seq = [], []
    for cluster, items in groups.items():
        body = []
        for r in items:
            v = result(r["variant"])
            s = float(r["sequential_p50_s"]); o = float(r["overlapped_p50_s"]); i = float(r["ideal_p50_s"])
            slow.append(float(r["compute_slowdown"])); seq.append(s / o - 1.0)
            a = v["assignments"]
            body.append([r["architecture"], str(a.get("workload.sequence_length", "")), str(a.get("workload.batch", "")), "%.3f" % o, "%.3f" % i, "%.3f" % s,
                         pct(float(r["compute_slowdown"])), pct(s / o - 1.0), pct(o / i - 1.0)])
        table("overlap-" + cluster.split("-")[0], ["model", "sequence", "batch", "overlapped s", "ideal s", "sequential s",
              "compute slowdown", "sequential vs overlapped", "overlapped vs ideal"], body)
    print()
    print("over all %d variants: compute slowdown mean %s, max %s; sequential vs overlapped mean %s, max %s"
          % (len(slow), pct(sum(slow) / len(slow)), pct(max(slow)), pct(sum(seq) / len(seq)), pct(max(seq))))
elif kind == "power":
    marker = name or "overlap-power-cap"
    uncapped = {}
    for r in rows:
        if r["power_cap_W"] == "":
            uncapped[r["cluster"]] = float(r["overlapped_p50_s"])
    body = []
    for r in rows:
        v = result(r["variant"])
        peak = {t["label"]: max(g["peak_power_W"] for g in t["gpus"]) for t in v["timelines"]}
        o = float(r["overlapped_p50_s"]); s = float(r["sequential_p50_s"])
        body.append([r["variant"], r["power_cap_W"] and "%.0f W" % float(r["power_cap_W"]) or "none", "%.3f" % o,
                     pct(o / uncapped[r["cluster"]] - 1.0), pct(s / o - 1.0),
                     "%.0f / %.0f (%s)" % (peak["overlapped"], peak["sequential"], pct(peak["overlapped"] / peak["sequential"] - 1.0))])
    table(marker, ["variant", "power cap", "overlapped s", "vs uncapped", "sequential vs overlapped",
                   "peak W overlapped / sequential"], body)
else:
    sys.exit("paper-tables.sh: KIND must be moetuner, overlap or power, got " + kind)
PY
