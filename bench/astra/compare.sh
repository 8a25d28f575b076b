#!/bin/bash
# moesim and ASTRA-sim side by side on the same trace-driven task graph (docs/simulator.md, "ASTRA-sim
# side by side"). Prints one table.
#   bash bench/astra/compare.sh BUILD_DIR ASTRA_SIM_DIR [64|256 ...]
# ASTRA_SIM_DIR: an ASTRA-sim source tree built with build/astra_analytical/build.sh (congestion-aware
# backend); it is never part of this repository. Each case runs a DeepSeek-V3 prefill (the bench's
# generated trace: 400k tokens, Zipf 1.0, affinity 0.5) with flat dispatch on one switch of 64 or 256
# GPUs (bench/configs/switch-{64,256}.yaml: 450 GB/s, 2 us per route), policy sequential: moesim under
# network.fidelity auto (its default tolerance), fluid with tolerance 0 (exact) and flow (SimGrid's
# flows) (ASTRA_FIDELITIES; the 256-GPU case runs auto alone unless it is set: exact takes minutes
# there and flow did not finish in 15); then moesim's activity dump of the first run becomes Chakra
# execution traces
# (bench/astra/dump_to_chakra.py, one per GPU) that ASTRA-sim's analytical congestion-aware backend
# runs on a 1-dimension Switch topology of the same GPUs (450 GB/s, 1000 ns per link: 2 us a route).
# The 256-GPU case gives ASTRA-sim the first ASTRA_TRANSFERS (default 100000) transfers of the step
# (a prefix of the graph: the first few layers) and compares CPU time per transfer.
# Columns: CPU s (user + sys), transfers simulated, CPU us per transfer, simulated ms (moesim: the
# step; ASTRA-sim: the last GPU's finish, cycles read as ns).
set -euo pipefail
build=${1:?usage: bash bench/astra/compare.sh BUILD_DIR ASTRA_SIM_DIR [64|256 ...]}
astra=${2:?usage: bash bench/astra/compare.sh BUILD_DIR ASTRA_SIM_DIR [64|256 ...]}
shift 2
cases=${*:-64 256}
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/lib.sh"
moesim="$build/sim/moesim"
bin="$astra/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Aware"
proto="$astra/extern/graph_frontend/chakra/schema/protobuf"
[ -x "$moesim" ] || { echo "no moesim binary at $moesim (build first)" >&2; exit 2; }
[ -x "$bin" ] || { echo "no ASTRA-sim binary at $bin (run build/astra_analytical/build.sh there)" >&2; exit 2; }
[ -f "$proto/et_def_pb2.py" ] || { echo "no $proto/et_def_pb2.py (ASTRA-sim's build makes it)" >&2; exit 2; }
/usr/bin/python3 -c "import google.protobuf" 2>/dev/null || { echo "needs python3-protobuf (apt-get install python3-protobuf)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
limit=${ASTRA_TRANSFERS:-100000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export MOESIM_JOBS=1
trace="$tmp/dsv3.mtr"
"$moesim" trace generate --architecture deepseek-v3 --tokens 400000 --seed 1 --zipf 1.0 --affinity 0.5 -o "$trace" > /dev/null
printf '{\n "scheduling-policy": "LIFO",\n "endpoint-delay": 10,\n "active-chunks-per-dimension": 2,\n "preferred-dataset-splits": 4,\n "all-reduce-implementation": ["ring"],\n "all-gather-implementation": ["ring"],\n "reduce-scatter-implementation": ["ring"],\n "all-to-all-implementation": ["ring"],\n "collective-optimization": "localBWAware",\n "local-mem-bw": 3350,\n "boost-mode": 0\n}\n' > "$tmp/system.json"
printf '{\n "memory-type": "NO_MEMORY_EXPANSION"\n}\n' > "$tmp/memory.json"

echo "| case | simulator | CPU s | transfers | CPU us / transfer | simulated ms |"
echo "| --- | --- | ---: | ---: | ---: | ---: |"
row() { printf '| %s | %s | %.2f | %s | %.2f | %s |\n' "$1" "$2" "$3" "$4" "$(python3 -c "print($3 * 1e6 / $4)")" "$5"; }
for n in $cases; do
  case $n in 64 | 256) ;; *) echo "unknown case $n (64 or 256)" >&2; exit 2 ;; esac
  tokens=$((128 * n))
  label="DeepSeek-V3 prefill, $n GPUs, one switch, flat, $tokens tokens"
  fidelities=${ASTRA_FIDELITIES:-auto exact flow}
  [ "$n" = 256 ] && fidelities=${ASTRA_FIDELITIES:-auto}
  for f in $fidelities; do
    case $f in auto) fid=auto tol="" ;; exact) fid=fluid tol=0 ;; flow) fid=flow tol="" ;; esac
    bench_study "$tmp/$n-$f.yaml" "p$n-$f" deepseek-v3 "$root/bench/configs/switch-$n.yaml" "$trace" \
      "{mode: prefill, tokens_per_step: $tokens, steps: 1}" sequential flat "$fid" "$tol"
    dump=()
    [ "$f" = "${fidelities%% *}" ] && dump=(--dump-activities "$tmp/$n.dump")
    /usr/bin/time -f "%U %S" -o "$tmp/$n-$f.time" "$moesim" run "$tmp/$n-$f.yaml" -o "$tmp/$n-$f.out" -q --force \
      "${dump[@]}" > /dev/null
    read -r user sys < "$tmp/$n-$f.time"
    step=$(python3 -c "import json; print('%.3f' % (json.load(open('$tmp/$n-$f.out/results.json'))['variants'][0]['step_latency_s']['mean'] * 1e3))")
    transfers=$(grep -c '^C ' "$tmp/$n.dump")
    row "$label" "moesim $f" "$(python3 -c "print($user + $sys)")" "$transfers" "$step"
  done
  # ASTRA-sim on the same graph (the 256-GPU case on its first $limit transfers).
  if [ "$n" = 256 ]; then
    awk -v max="$limit" '/^(E|C|J) /{ if (c >= max) exit; if ($1 == "C") c++; print; next } { print }' \
      "$tmp/$n.dump" > "$tmp/$n.head"
    mv "$tmp/$n.head" "$tmp/$n.dump"
  fi
  /usr/bin/python3 "$root/bench/astra/dump_to_chakra.py" "$tmp/$n.dump" "$tmp/et$n/p" "$proto" > /dev/null
  printf 'topology: [ Switch ]\nnpus_count: [ %s ]\nbandwidth: [ 450.0 ]  # GB/s\nlatency: [ 1000.0 ]  # ns\n' "$n" > "$tmp/net$n.yml"
  status=0
  # (in $tmp: ASTRA-sim writes its log/ folder into the current directory)
  (cd "$tmp" && /usr/bin/time -f "%U %S" -o "$tmp/astra$n.time" "$bin" --workload-configuration="$tmp/et$n/p" \
    --system-configuration="$tmp/system.json" --remote-memory-configuration="$tmp/memory.json" \
    --network-configuration="$tmp/net$n.yml" > "$tmp/astra$n.log" 2>&1) || status=$?
  if [ "$status" -ne 0 ]; then
    printf '| %s | ASTRA-sim | failed (exit %s): %s | | | |\n' "$label" "$status" "$(grep -v '^Command' "$tmp/astra$n.log" | tail -1)"
    continue
  fi
  read -r user sys < <(tail -1 "$tmp/astra$n.time")
  end=$(sed -n 's/.*sys\[[0-9]*\] finished, \([0-9]*\) cycles.*/\1/p' "$tmp/astra$n.log" | sort -n | tail -1)
  transfers=$(grep -c '^C ' "$tmp/$n.dump")
  what="$(python3 -c "print('%.3f' % ($end / 1e6))")"
  [ "$n" = 256 ] && what="$what (first $transfers transfers)"
  row "$label" "ASTRA-sim" "$(python3 -c "print($user + $sys)")" "$transfers" "$what"
done
