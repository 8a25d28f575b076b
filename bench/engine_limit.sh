#!/bin/bash
# The engine's limit (issue: the simulator): moesim's wall time against SimGrid alone running the same
# activities. Each case runs `moesim run` (ideal timeline, contention off, so both do the same work)
# once without and once with --dump-activities, replays the dump with moesim-replay, and prints one row:
#   bash bench/engine_limit.sh BUILD_DIR [case ...]     cases: dsv2-prefill mixtral-decode synthetic-64
# moesim wall: the variant's wall time without a dump (run_info.variant_wall_s: reading the trace,
# placement, building the step graphs, the engine, in a child process; the graphs are built ahead on
# a second thread where the machine has a spare core, MOESIM_BUILD_AHEAD=0 measures one core).
# replay wall: moesim-replay's engine_wall_s (platform + run; reading the dump is reported apart).
# Goal: ratio <= 1.5.
# On a shared machine wall time measures the neighbours: the CPU columns give user + sys seconds of
# the whole `moesim run` (GNU time: inputs, trace hashing, placement, graph building, engine) and
# moesim-replay's engine_cpu_s; their ratio overstates moesim's share (the whole run against the
# engine alone).
# Use a release build (CMAKE_BUILD_TYPE=Release, MOESIM_SANITIZE=OFF) for meaningful numbers.
set -euo pipefail
build=${1:?usage: bash bench/engine_limit.sh BUILD_DIR [case ...]}
shift
cases=${*:-dsv2-prefill mixtral-decode synthetic-64}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
moesim="$build/sim/moesim"
replay="$build/bench/replay/moesim-replay"
tracegen=${SIM_BENCH_TRACE_TOOL:-$moesim}  # another moesim to generate the traces with (same traces for two builds)
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
for b in "$moesim" "$replay"; do
  [ -x "$b" ] || { echo "missing $b: build the moesim and moesim-replay targets in $build" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MOESIM_JOBS=1

study() {  # name architecture cluster trace workload-yaml
  bench_study "$tmp/$1.yaml" "$1" "$2" "$3" "$4" "$5" ideal
}

# row NAME LABEL
row() {
  /usr/bin/time -f "%U %S" -o "$tmp/$1.cpu" "$moesim" run "$tmp/$1.yaml" -o "$tmp/$1.plain" -q --force > /dev/null
  "$moesim" run "$tmp/$1.yaml" -o "$tmp/$1.dump" -q --force --dump-activities "$tmp/$1.acts" > /dev/null
  "$replay" "$tmp/$1.acts" > "$tmp/$1.replay"
  python3 - "$tmp/$1.plain/results.json" "$tmp/$1.dump/variants/base/result.json" "$tmp/$1.replay" "$2" \
    "$(stat -c %s "$tmp/$1.acts")" "$tmp/$1.cpu" <<'PY'
import json, sys
plain = json.load(open(sys.argv[1]))
user, system = open(sys.argv[6]).read().split()[-2:]
moesim_cpu = float(user) + float(system)
moesim_wall = plain["run_info"]["variant_wall_s"]["base"]
tl = json.load(open(sys.argv[2]))["variant"]["timelines"][0]
rep = {}
for line in open(sys.argv[3]):
    k, *v = line.split()
    rep[k] = v
sim_moesim, sim_replay = tl["measured_time_s"], float(rep["measured_s"][0])
rel = abs(sim_moesim - sim_replay) / max(abs(sim_moesim), 1e-300)
engine, parse = float(rep["engine_wall_s"][0]), float(rep["parse_wall_s"][0])
engine_cpu = float(rep["engine_cpu_s"][0])
print(f"| {sys.argv[4]:<44} | {int(rep['tasks'][0]):>9} | {int(rep['activities'][0]):>10} | {int(sys.argv[5])/2**20:>8.1f} "
      f"| {moesim_wall:>9.2f} | {engine:>9.2f} | {parse:>8.2f} | {moesim_wall/engine:>5.2f} "
      f"| {moesim_cpu:>8.2f} | {engine_cpu:>8.2f} | {moesim_cpu/engine_cpu:>5.2f} | {rel:>8.1e} |")
PY
}

echo "| case | tasks | activities | dump MiB | moesim s | replay s | parse s | ratio | moesim CPU s | replay CPU s | CPU ratio | sim rel diff |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for c in $cases; do
  case $c in
    dsv2-prefill)
      "$tracegen" trace generate --architecture deepseek-v2-lite --tokens 200000 --seed 1 -o "$tmp/dsv2.mtr" > /dev/null
      study dsv2 deepseek-v2-lite h100-sxm-8gpu "$tmp/dsv2.mtr" "{mode: prefill, tokens_per_step: 8192, steps: 20}"
      row dsv2 "DeepSeek-V2-Lite EP8, 8192-token prefill x 20"
      ;;
    mixtral-decode)
      "$tracegen" trace generate --architecture mixtral-8x7b --tokens 300000 --seed 1 --zipf 1.0 --affinity 0.5 -o "$tmp/mixtral.mtr" > /dev/null
      study mixdec mixtral-8x7b h100-sxm-8gpu "$tmp/mixtral.mtr" "{mode: decode, batch_sequences: 64, steps: 100}"
      row mixdec "Mixtral-8x7B EP8, 64-sequence decode x 100"
      ;;
    synthetic-64)
      study syn64 mixtral-8x7b "$root/bench/configs/switch-64.yaml" "" \
        "{mode: synthetic, steps: 3, synthetic: {compute: 300us, a2a_bytes: 8MiB, layers: 16}}"
      row syn64 "synthetic, 64 GPUs, 16 layers x 3 steps"
      ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
done
