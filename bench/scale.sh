#!/bin/bash
# Large-cluster benchmark (issue: large clusters at analytical speed). Prints one table.
#   bash bench/scale.sh BUILD_DIR [case ...]
# cases: prefill-64 decode-64 prefill-256 decode-256 prefill-1024 decode-1024 synthetic-64 synthetic-256
# (default: all). Every trace-driven case runs DeepSeek-V3 (a generated trace) on H200 nodes of 8 GPUs
# with one 400 Gb/s NIC each on a rail-optimized network (bench/configs/h200-{8,32,128}x8.yaml),
# EP = GPUs, once per dispatch mode in SCALE_DISPATCH (default "flat hierarchical"; low_latency too)
# and per network fidelity in SCALE_FIDELITIES (default "auto flow"; any value of the study key
# network.fidelity: auto, fluid, flow, ports); SCALE_TOLERANCE sets
# network.tolerance (the fluid network's epochs) on the auto and fluid runs. Prefill: one step
# of 128 tokens per GPU; decode: 2 steps of 32 sequences per GPU. The synthetic cases are the fixed
# workload of the side-by-side comparison in docs/simulator.md (58 layers x 10 steps of 300 us
# compute and an 8 MiB-per-GPU all-to-all on one switch, 450 GB/s and 1 us links).
#
# Each run is limited to SCALE_TIMEOUT seconds of wall time (default 600); a run that does not
# finish prints "timeout" and its limit. Columns: CPU s (user + sys of the whole run, children
# included), wall s, peak MiB (largest resident set), simulated step (mean, ms), ran (the fidelity
# results.json says ran: ports, aggregated, fluid or flow), vs flow (the step time against the same case's flow
# run, when both ran). One simulation process (MOESIM_JOBS=1): CPU and wall measure the same work.
set -euo pipefail
build=${1:?usage: bash bench/scale.sh BUILD_DIR [case ...]}
shift
cases=${*:-prefill-64 decode-64 prefill-256 decode-256 prefill-1024 decode-1024 synthetic-64 synthetic-256}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
moesim="$build/sim/moesim"
[ -x "$moesim" ] || { echo "no moesim binary at $moesim (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
limit=${SCALE_TIMEOUT:-600}
dispatches=${SCALE_DISPATCH:-flat hierarchical}
fidelities=${SCALE_FIDELITIES:-auto flow}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MOESIM_JOBS=1

# study NAME ARCH CLUSTER TRACE WORKLOAD DISPATCH FIDELITY: SCALE_TOLERANCE (network.tolerance) applies
# to the fluid network's runs (auto, fluid), never to flow's.
study() {
  local tol=""
  [ "$7" = flow ] || tol=${SCALE_TOLERANCE:-}
  bench_study "$tmp/$1.yaml" "$1" "$2" "$3" "$4" "$5" sequential "$6" "$7" "$tol"
}

declare -A flow_step
# run NAME LABEL KEY FIDELITY: runs the study under the time limit, prints a table row. KEY names the
# case without its fidelity (the auto row is compared with the flow row of the same KEY, run first).
run() {
  local status=0
  timeout -k 10 "$limit" /usr/bin/time -f "%U %S %e %M" -o "$tmp/$1.time" \
    "$moesim" run "$tmp/$1.yaml" -o "$tmp/$1.out" -q --force > /dev/null 2> "$tmp/$1.err" || status=$?
  if [ "$status" -ne 0 ]; then
    if [ "$status" -eq 137 ] || [ "$status" -eq 124 ]; then
      printf '| %-58s | %-5s | timeout (%s s) | | | | | |\n' "$2" "$4" "$limit"
    else
      printf '| %-58s | %-5s | failed (exit %s): %s | | | | | |\n' "$2" "$4" "$status" "$(tail -1 "$tmp/$1.err")"
    fi
    return 0
  fi
  read -r user sys wall rss < "$tmp/$1.time"
  local row
  row=$(python3 - "$tmp/$1.out/results.json" "$user" "$sys" "$wall" "$rss" "$2" "$4" "${flow_step[$3]:-}" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
v = doc["variants"][0]
step = v["step_latency_s"]["mean"]
cpu = float(sys.argv[2]) + float(sys.argv[3])
flow = sys.argv[8]
vs = f"{100 * (step / float(flow) - 1):+.3f}%" if flow and sys.argv[7] != "flow" else ""
print(f"| {sys.argv[6]:<58} | {sys.argv[7]:<5} | {cpu:>8.1f} | {float(sys.argv[4]):>8.1f} | {int(sys.argv[5]) / 1024:>8.0f} "
      f"| {step * 1e3:>10.3f} | {v['network_fidelity_ran']:<10} | {vs:>8} |")
print(f"STEP {step!r}")
PY
)
  echo "$row" | grep -v '^STEP'
  if [ "$4" = flow ]; then flow_step[$3]=$(echo "$row" | sed -n 's/^STEP //p'); fi
}

# Runs the flow fidelity first, so that the auto row can say its error against it.
ordered_fidelities() {
  for f in $fidelities; do [ "$f" = flow ] && echo flow; done
  for f in $fidelities; do [ "$f" != flow ] && echo "$f"; done
  return 0
}

trace="$tmp/dsv3.mtr"
echo "| case | fidelity | CPU s | wall s | peak MiB | step ms | ran | vs flow |"
echo "| --- | --- | ---: | ---: | ---: | ---: | --- | ---: |"
for c in $cases; do
  case $c in
    prefill-64 | decode-64 | prefill-256 | decode-256 | prefill-1024 | decode-1024)
      mode=${c%-*}
      n=${c#*-}
      nodes=$((n / 8))
      if [ "$mode" = prefill ]; then
        workload="{mode: prefill, tokens_per_step: $((128 * n)), steps: 1}"
        what="$((128 * n)) tokens, 1 step"
      else
        workload="{mode: decode, batch_sequences: $((32 * n)), steps: 2}"
        what="$((32 * n)) sequences, 2 steps"
      fi
      # One trace for every case: enough tokens for the largest prefill step and decode batch.
      [ -f "$trace" ] || "$moesim" trace generate --architecture deepseek-v3 --tokens 400000 --seed 1 --zipf 1.0 \
        --affinity 0.5 -o "$trace" > /dev/null
      for d in $dispatches; do
        for f in $(ordered_fidelities); do
          name="$c-$d-$f"
          study "$name" deepseek-v3 "$root/bench/configs/h200-${nodes}x8.yaml" "$trace" "$workload" "$d" "$f"
          run "$name" "DeepSeek-V3 $mode, $n GPUs, $d, $what" "$c-$d" "$f"
        done
      done
      ;;
    synthetic-64 | synthetic-256)
      n=${c#*-}
      for f in $(ordered_fidelities); do
        name="$c-$f"
        study "$name" mixtral-8x7b "$root/bench/configs/switch-$n.yaml" none \
          "{mode: synthetic, steps: 10, synthetic: {compute: 300us, a2a_bytes: 8MiB, layers: 58}}" flat "$f"
        run "$name" "synthetic, $n GPUs on one switch, 58 layers x 10 steps" "$c" "$f"
      done
      ;;
    *) echo "unknown case $c (cases: prefill-64 decode-64 prefill-256 decode-256 prefill-1024 decode-1024 synthetic-64 synthetic-256)" >&2
       exit 2 ;;
  esac
done
