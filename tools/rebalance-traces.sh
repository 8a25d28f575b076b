#!/bin/sh
# Generates the second-phase trace the online-rebalancing study (configs/studies/rebalance.yaml)
# replays after the shipped DeepSeek-V2-Lite "intent" trace: a trace fitted to that real trace
# (fit-and-scale: the same per-layer expert shares and cross-layer pair statistics,
# docs/trace-generator.md) with every expert id shifted by 32 of 64 (expert e becomes (e + 32) mod 64
# in every layer): the same skew and affinity, other experts hot. This is the end state of a drift of
# 0.5 held for the whole trace: a drift advancing over the trace would jump back each time the study
# reads the trace again. 20,000 tokens, seed 2. Synthetic: derived from a real trace, not recorded.
# Deterministic: the same moesim gives the same bytes.
# Usage: sh tools/rebalance-traces.sh [OUT_DIR (default out/rebalance-traces)]
# The moesim binary: $MOESIM, else build/sim/moesim under the repository root.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-out/rebalance-traces}
moesim=${MOESIM:-$root/build/sim/moesim}
[ -x "$moesim" ] || { echo "rebalance-traces.sh: no moesim binary at $moesim; build it or set MOESIM" >&2; exit 2; }
mkdir -p "$out"
"$moesim" trace generate --fit "$root/traces/data/deepseek-v2-lite-intent.mtr" --shift 32 --tokens 20000 --seed 2 \
  -o "$out/intent-shift.mtr" --force
