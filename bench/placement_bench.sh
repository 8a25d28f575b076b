#!/usr/bin/env bash
# Placement solver benchmark (docs/placement.md, "Benchmarks"): solve time, objective, bound and gap
# per stage for MoETuner on Mixtral-8x7B (4 and 8 ranks), DeepSeek-V2-Lite (8 and 16) and DeepSeek-V3
# (64), one core, a 60 s budget; then held-out max load and cross-node traffic against eplb and
# contiguous. Prints one markdown table per part.
#   bench/placement_bench.sh [BUILD_DIR]     (default: build-rel; a Release build gives the real times;
#   $MOESIM names another moesim executable)
# Traces: DeepSeek-V2-Lite: the shipped trace split by sequence (seed 1: profile half, held-out half).
# Mixtral: a synthetic 100k-token trace (moesim trace generate, seed 1, default popularity and
# affinity) split by sequence. DeepSeek-V3: synthetic, seed 1 to solve and seed 2 to evaluate.
# Policies: contiguous, eplb, moetuner, moetuner_equal, and eplb and moetuner_replicated with
# --replicas EP.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-rel}
moesim=${MOESIM:-$build/sim/moesim}
[[ -x $moesim ]] || { echo "no moesim at $moesim: build first (cmake --build $build --target moesim)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export MOESIM_JOBS=1
one_core() { taskset -c 0 "$@" 2>/dev/null || "$@"; }

# A 64-GPU cluster for DeepSeek-V3: 8 of the 8 x H200 nodes of h200-2x8-800g.
sed -e 's/^nodes: 2$/nodes: 8/' "$root/configs/clusters/h200-2x8-800g.yaml" > "$work/h200-8x8-800g.yaml"

"$moesim" trace split "$root/traces/data/deepseek-v2-lite-intent.mtr" --profile-out "$work/v2-profile.mtr" \
  --heldout-out "$work/v2-heldout.mtr" --seed 1 >/dev/null
"$moesim" trace generate --architecture mixtral-8x7b --tokens 100000 --seed 1 -o "$work/mixtral.mtr" >/dev/null
"$moesim" trace split "$work/mixtral.mtr" --profile-out "$work/mixtral-profile.mtr" --heldout-out "$work/mixtral-heldout.mtr" \
  --seed 1 >/dev/null
# DeepSeek-V3: seed 1 to solve, seed 2 to evaluate. The popularity ranking (which experts are hot)
# comes from --popularity-seed (default 1), not --seed, so both traces share their hot experts and
# differ in the sampled tokens. 64 sequences of 320 tokens: every one of the 64 ranks is the home of
# one sequence (sequence i lives on rank i mod 64), so the home-dispatch columns see every rank.
for seed in 1 2; do
  "$moesim" trace generate --architecture deepseek-v3 --tokens 20480 --seq-len 320 --seed $seed -o "$work/v3-$seed.mtr" >/dev/null
done

# name arch cluster tp ep solve-trace eval-trace
cases=(
  "mixtral-4  mixtral-8x7b     h100-sxm-8gpu             2 4  $work/mixtral-profile.mtr $work/mixtral-heldout.mtr"
  "mixtral-8  mixtral-8x7b     h200-2x8-800g             2 8  $work/mixtral-profile.mtr $work/mixtral-heldout.mtr"
  "v2lite-8   deepseek-v2-lite h100-sxm-8gpu             1 8  $work/v2-profile.mtr $work/v2-heldout.mtr"
  "v2lite-16  deepseek-v2-lite h200-2x8-800g             1 16 $work/v2-profile.mtr $work/v2-heldout.mtr"
  "v3-64      deepseek-v3      $work/h200-8x8-800g.yaml  1 64 $work/v3-1.mtr       $work/v3-2.mtr"
)
# Replicated variants get --replicas EP (one redundant slot per rank), the same for eplb and
# moetuner_replicated.
# CASES="mixtral-4 v3-64" runs only those cases.
if [[ -n ${CASES:-} ]]; then
  filtered=()
  for c in "${cases[@]}"; do
    if [[ " $CASES " == *" ${c%% *} "* ]]; then filtered+=("$c"); fi
  done
  cases=("${filtered[@]}")
fi
solve_table="| case | policy | experts x layers | ranks | stage | status | objective | bound | gap | proven parts | solve s |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
eval_table="| case | policy | held-out max/mean | worst layer | sum of layer max | off GPU | off node | hops off node | traffic objective s |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for c in "${cases[@]}"; do
  read -r name arch cluster tp ep solve_trace eval_trace <<<"$c"
  files=()
  labels=()
  for variant in contiguous eplb moetuner moetuner_equal eplb+r moetuner_replicated+r; do
    policy=${variant%+r}
    out=$work/$name-$variant.yaml
    extra=()
    label=$policy
    [[ $policy == moetuner* ]] && extra=(--time-limit 60s)
    [[ $variant == *+r ]] && extra+=(--replicas "$ep") && label="$policy --replicas $ep"
    t0=$(date +%s.%N)
    one_core "$moesim" place --trace "$solve_trace" --architecture "$arch" --cluster "$cluster" --tp "$tp" --ep "$ep" \
      --policy "$policy" "${extra[@]}" -o "$out" >/dev/null
    t1=$(date +%s.%N)
    files+=("$out")
    labels+=("$label")
    if [[ $policy == moetuner || $policy == moetuner_replicated ]]; then
      solve_table+=$'\n'$(python3 - "$out" "$name" "$label" "$ep" "$t0" "$t1" <<'PY'
import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
r = p["report"]
name, label, ep, t0, t1 = sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), float(sys.argv[6])
E = len(p["layers"][0]["ranks"]) and len({e for v in p["layers"][0]["ranks"].values() for e in v})
rows = []
for st in ("stage1", "stage2"):
    s = r[st]
    rows.append(f"| {name} | {label} | {E} x {len(p['layers'])} | {ep} | {st[-1]} | {s['status']} | {s['objective']:.6g} | {s['bound']:.6g} | {100*s['gap']:.2f}% | {s['parts_optimal']}/{s['parts']} | {s['seconds']:.2f} |")
rows[-1] += f" (wall {t1-t0:.1f} s)"
print("\n".join(rows))
PY
)
    fi
  done
  "$moesim" place compare --placements "${files[@]}" --trace "$eval_trace" --no-simulate --json > "$work/$name-eval.json"
  eval_table+=$'\n'$(python3 - "$name" "$work/$name-eval.json" "${labels[@]}" <<'PY'
import json, sys
name, path, labels = sys.argv[1], sys.argv[2], sys.argv[3:]
for label, p in zip(labels, json.load(open(path))["placements"]):
    print(f"| {name} | {label} | {p['mean_max_over_mean']:.3f} | {p['worst_max_over_mean']:.3f} | {p['sum_layer_max_load']:.0f} | {100*p['share_off_gpu']:.1f}% | {100*p['share_off_node']:.1f}% | {100*p['share_hops_off_node']:.1f}% | {p['traffic_objective_s']:.4g} |")
PY
)
done
echo "## Solve (one core, --time-limit 60s; gaps per stage)"
echo "$solve_table"
echo
echo "## Held-out evaluation (traffic the solver did not see)"
echo "$eval_table"
