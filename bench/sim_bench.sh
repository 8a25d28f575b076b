#!/bin/bash
# Simulator benchmarks (issue: the simulator). Prints one table; takes several minutes.
#   bash bench/sim_bench.sh BUILD_DIR [case ...]     cases: mixtral dsv3-64 dsv3-256 synthetic memory
# SIM_BENCH_TRACE_TOOL=PATH generates the traces with another moesim binary (comparing two builds
# on identical traces). SIM_BENCH_SYNTHETIC_GPUS="8 64" limits the synthetic case to those GPU
# counts (default 8 64 256).
# Speed = simulated time / CPU time, CPU time = user + sys of the whole run (GNU time, children
# included): on a shared machine wall time measures the neighbours, CPU time the simulator. Run it
# under `nice`; SIM_BENCH_JOBS=N (below) lets N step ranges run at once. Peak memory is the largest resident set of the run (the
# simulations run in child processes; GNU time reports the largest of them).
set -euo pipefail
build=${1:?usage: bash bench/sim_bench.sh BUILD_DIR [case ...]}
shift
cases=${*:-mixtral dsv3-64 dsv3-256 synthetic memory}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
moesim="$build/sim/moesim"
tracegen=${SIM_BENCH_TRACE_TOOL:-$moesim}
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Step ranges run in parallel child processes (docs/simulator.md, "Steps in parallel"): the
# sim/wall column shows what SIM_BENCH_JOBS processes at once buy (default 1, so that CPU and wall
# measure the same work); the results are the same whatever the number.
export MOESIM_JOBS=${SIM_BENCH_JOBS:-1}

study() {  # name architecture cluster trace workload-yaml dispatch
  bench_study "$tmp/$1.yaml" "$1" "$2" "$3" "$4" "$5" sequential "${6:-flat}"
}

# run NAME LABEL: runs the study, prints a table row.
run() {
  /usr/bin/time -f "%U %S %e %M" -o "$tmp/$1.time" "$moesim" run "$tmp/$1.yaml" -o "$tmp/$1.out" -q --force > /dev/null
  read -r user sys wall rss < "$tmp/$1.time"
  python3 - "$tmp/$1.out/results.json" "$user" "$sys" "$wall" "$rss" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
v = doc["variants"][0]
steps = v["inputs"]["steps"]
sim = v["step_latency_s"]["mean"] * steps
cpu = max(float(sys.argv[2]) + float(sys.argv[3]), 0.01)
wall = float(sys.argv[4])
print(f"| {sys.argv[6]:<46} | {steps:>5} | {sim*1e3:>12.3f} | {cpu:>8.2f} | {wall:>8.2f} | {sim/cpu:>10.4f} "
      f"| {sim/max(wall, 0.01):>10.4f} | {cpu/steps:>9.4f} | {int(sys.argv[5])/1024:>8.1f} |")
PY
}

echo "| case | steps | simulated ms | CPU s | wall s | sim/CPU | sim/wall | CPU s/step | peak MiB |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for c in $cases; do
  case $c in
    mixtral)
      "$tracegen" trace generate --architecture mixtral-8x7b --tokens 300000 --seed 1 --zipf 1.0 --affinity 0.5 -o "$tmp/mixtral.mtr" > /dev/null
      study mixtral-prefill mixtral-8x7b h100-sxm-8gpu "$tmp/mixtral.mtr" "{mode: prefill, tokens_per_step: 4096, steps: 20}"
      run mixtral-prefill "Mixtral-8x7B EP8, 4096-token prefill"
      study mixtral-decode mixtral-8x7b h100-sxm-8gpu "$tmp/mixtral.mtr" "{mode: decode, batch_sequences: 64, steps: 100}"
      run mixtral-decode "Mixtral-8x7B EP8, 64-sequence decode"
      ;;
    dsv3-64 | dsv3-256)
      n=${c#dsv3-}
      nodes=$((n / 8))
      [ -f "$tmp/dsv3.mtr" ] || "$tracegen" trace generate --architecture deepseek-v3 --tokens 24576 --seed 1 --zipf 1.0 --affinity 0.5 -o "$tmp/dsv3.mtr" > /dev/null
      study "dsv3-$n" deepseek-v3 "$root/bench/configs/h200-${nodes}x8.yaml" "$tmp/dsv3.mtr" "{mode: prefill, tokens_per_step: 8192, steps: 3}" hierarchical
      run "dsv3-$n" "DeepSeek-V3 on $n GPUs, 8192-token prefill, hier."
      ;;
    synthetic)
      for n in ${SIM_BENCH_SYNTHETIC_GPUS:-8 64 256}; do
        study "synthetic-$n" mixtral-8x7b "$root/bench/configs/switch-$n.yaml" "" "{mode: synthetic, steps: 10, synthetic: {compute: 300us, a2a_bytes: 8MiB, layers: 58}}"
        run "synthetic-$n" "synthetic, $n GPUs, 58 layers x 10 steps"
      done
      ;;
    memory)
      "$tracegen" trace generate --architecture deepseek-v2-lite --tokens 2000000 --seed 1 -o "$tmp/long.mtr" > /dev/null
      for steps in 10 200; do
        study "memory-$steps" deepseek-v2-lite h100-sxm-8gpu "$tmp/long.mtr" "{mode: prefill, tokens_per_step: 8192, steps: $steps}"
        run "memory-$steps" "DeepSeek-V2-Lite prefill, $steps steps (memory)"
      done
      ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
