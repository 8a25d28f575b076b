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
#   KIND deepseek: OUT_DIR of configs/papers/deepseek-v3-prefill.yaml, NAME the folder of
#                  deepseek-v3-decode.yaml: table deepseek-v3 (predicted tokens/s per GPU against
#                  DeepSeek's published figures) and deepseek-v3-breakdown (per MoE layer, from the
#                  timeline of the first measured steps and the GPUs' busy times).
#   KIND modes:    table NAME (default: the folder's name) of a study sweeping dispatch.mode flat and
#                  residence: per workload and trace, each placement's step p50, speedup vs flat contiguous,
#                  token sends per token and MoE layer, dispatch and combine MB between nodes per step, all
#                  inter-node MB per step (collectives included) and coherence MB per step.
#   KIND tbo-sweep: OUT_DIR of a study sweeping overlap.policy over sequential and tbo (the
#                  deepseek-v3-*-sweep studies): per setting, both policies' tokens/s per GPU and the gain.
# Paste the output over the marked tables, then run the papers test (ctest -R papers).
set -eu
kind=${1:?usage: sh tools/paper-tables.sh moetuner|overlap|power|deepseek|tbo-sweep|modes OUT_DIR [NAME]}
dir=${2:?usage: sh tools/paper-tables.sh moetuner|overlap|power|deepseek|tbo-sweep|modes OUT_DIR [NAME]}
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
elif kind == "deepseek":
    # Published by DeepSeek (deepseek-ai/profile-data; docs/validation.md, "DeepSeek-V3 on H800").
    published = {"deepseek-v3-prefill": 7839.0, "deepseek-v3-decode": 2325.0}
    folders = [folder] + ([name] if name else [])
    summary, breakdown = [], []
    for f in folders:
        doc = json.load(open(os.path.join(f, "results.json")))
        study = doc["context"]["study"]
        with open(os.path.join(f, "variants", doc["variants"][0]["name"], "result.json")) as r:
            v = json.load(r)["variant"]
        gpus = v["inputs"]["ep"] * v["inputs"]["tp"]
        tl = v["timelines"][0]
        steps = v["inputs"]["steps"]
        per_gpu = v["throughput_tokens_per_s"] / gpus
        pub = published[study]
        summary.append([study, str(gpus), "{:,.0f}".format(pub), "{:,.0f}".format(per_gpu), pct(per_gpu / pub - 1.0),
                        "%.2f" % (1e3 * v["step_latency_s"]["p50"]), str(steps), tl["label"]])
        # Per MoE layer and GPU, both micro-batches: the timeline's first measured steps.
        with open(os.path.join(f, "variants", v["name"], "timeline.json")) as t:
            events = [e for e in json.load(t)["traceEvents"] if e.get("ph") == "X"]
        moe = {l["layer"] for l in tl["layers"] if l["moe"]}
        timeline_steps = len({e["args"]["step"] for e in events})
        ngpu = len({e["pid"] for e in events})
        sums = {}
        for e in events:
            if " L" in e["name"] and int(e["name"].rsplit(" L", 1)[1]) in moe:
                sums[e["cat"]] = sums.get(e["cat"], 0.0) + e["dur"]
        scale = 1e-3 / (timeline_steps * ngpu * len(moe))  # us -> ms per MoE layer and GPU
        busy = lambda k: sum(g[k] for g in tl["gpus"]) / len(tl["gpus"]) / steps / len(moe) * 1e3
        hidden = busy("both_busy_s")
        exposed = busy("comm_busy_s") - hidden
        breakdown.append([study] + ["%.3f" % (sums.get(c, 0.0) * scale)
                                    for c in ("attention", "shared_experts", "experts", "dispatch", "combine")] +
                         ["%.3f" % hidden, "%.3f" % exposed, "%.3f" % (1e3 * v["step_latency_s"]["p50"] / len(tl["layers"])),
                          pct(v["compute_slowdown"] if abs(v["compute_slowdown"]) > 1e-6 else 0.0)])
    table("deepseek-v3", ["study", "GPUs", "published tok/s per GPU", "predicted tok/s per GPU", "error",
                          "step p50 ms", "steps", "timeline"], summary)
    print()
    table("deepseek-v3-breakdown", ["study", "attention", "shared expert", "routed experts", "dispatch", "combine",
                                    "comm hidden", "comm exposed", "step / layers", "compute slowdown"], breakdown)
elif kind == "tbo-sweep":
    groups = {}
    for r in rows:
        v = result(r["variant"])
        key = tuple(sorted((k, str(x)) for k, x in v["assignments"].items() if k != "overlap.policy"))
        gpus = v["inputs"]["ep"] * v["inputs"]["tp"]
        groups.setdefault(key, {})[v["inputs"]["overlap"]] = (float(r["step_p50_s"]), v["throughput_tokens_per_s"] / gpus)
    body = []
    for key, by in groups.items():
        s, t = by["sequential"], by["tbo"]
        body.append([", ".join("%s=%s" % kv for kv in key) or "(base)", "%.2f" % (1e3 * s[0]), "{:,.0f}".format(s[1]),
                     "%.2f" % (1e3 * t[0]), "{:,.0f}".format(t[1]), pct(t[1] / s[1] - 1.0)])
    table(name or os.path.basename(os.path.normpath(folder)),
          ["setting", "sequential p50 ms", "sequential tok/s per GPU", "tbo p50 ms", "tbo tok/s per GPU",
           "tbo gain"], body)
elif kind == "modes":
    # Per (workload, trace): every placement in both dispatch modes, against flat contiguous.
    items = []
    for r in rows:
        v = result(r["variant"])
        t = v.get("traffic", {})
        a = v["assignments"]
        trace = os.path.splitext(os.path.basename(a.get("trace", "")))[0] or "(study trace)"
        items.append(((v["inputs"]["mode"], trace), v["inputs"]["dispatch"], v["inputs"]["placement"],
                      float(r["step_p50_s"]), v["inputs"]["steps"], t))
    base = {key: p50 for key, d, pl, p50, _, _ in items if d == "flat" and pl == "contiguous"}
    body = []
    for key, d, pl, p50, steps, t in items:
        coh = t.get("coherence_bytes_per_step")
        body.append([key[0], key[1], d, pl, "%.3f" % (1e3 * p50), pct(base[key] / p50 - 1.0),
                     "%.3f" % t["sends_per_token_layer"], "%.2f" % (t["token_inter_node_bytes"] / steps / 1e6),
                     "%.1f" % (t["inter_node_bytes"] / steps / 1e6),
                     "%.1f" % (coh / 1e6) if coh else "-"])
    table(name or os.path.basename(os.path.normpath(folder)),
          ["mode", "trace", "dispatch", "placement", "step p50 ms", "speedup vs flat contiguous",
           "sends / token / layer", "token inter-node MB / step", "all inter-node MB / step",
           "coherence MB / step"], body)
else:
    sys.exit("paper-tables.sh: KIND must be moetuner, overlap, power, deepseek, tbo-sweep or modes, got " + kind)
PY
