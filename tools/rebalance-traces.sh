#!/bin/sh
# Generates the second-phase trace the online-rebalancing study (configs/studies/rebalance.yaml)
# replays after the shipped DeepSeek-V2-Lite "intent" trace: a trace fitted to that real trace
# (fit-and-scale: the same per-layer expert shares and cross-layer pair statistics,
# docs/trace-generator.md) with drift 0.5, so that as it advances its popularity rotates by half the
# experts (token i of N relabels expert e as (e + floor(0.5 x 64 x i / N)) mod 64): the same skew and
# affinity, other experts hot. 60,000 tokens, seed 2: long enough that the study's second phase
# (1,200 decode steps of 48 sequences) reads it once, without starting again. Synthetic: it is
# derived from a real trace, not recorded. Deterministic: the same moesim gives the same bytes.
# Usage: sh tools/rebalance-traces.sh [OUT_DIR (default out/rebalance-traces)]
# The moesim binary: $MOESIM, else build/sim/moesim under the repository root.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-out/rebalance-traces}
moesim=${MOESIM:-$root/build/sim/moesim}
[ -x "$moesim" ] || { echo "rebalance-traces.sh: no moesim binary at $moesim; build it or set MOESIM" >&2; exit 2; }
mkdir -p "$out"
"$moesim" trace generate --fit "$root/traces/data/deepseek-v2-lite-intent.mtr" --drift 0.5 --tokens 60000 --seed 2 \
  -o "$out/intent-drift.mtr" --force
