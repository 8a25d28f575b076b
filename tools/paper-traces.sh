#!/bin/sh
# Generates the synthetic Mixtral-8x7B routing traces the MoETuner studies (configs/papers/) replay:
# per-layer expert shares from the published Wikipedia counts (traces/data/olmoe-mixtral-counts/,
# layers 0, 7 and 15; interpolated between, held after 15), 100k tokens, seed 1, at three cross-layer
# affinities and one high-skew variant (two experts per layer take two thirds of the tokens). They are
# synthetic: no per-token Mixtral trace is published. Deterministic: the same moesim gives the same
# bytes. Usage: sh tools/paper-traces.sh [OUT_DIR (default out/paper-traces)]
# The moesim binary: $MOESIM, else build/sim/moesim under the repository root.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-out/paper-traces}
moesim=${MOESIM:-$root/build/sim/moesim}
tokens=${PAPER_TRACE_TOKENS:-100000}
counts=$root/traces/data/olmoe-mixtral-counts/mistral/expert_counts/wikipedia.json
[ -x "$moesim" ] || { echo "paper-traces.sh: no moesim binary at $moesim; build it or set MOESIM" >&2; exit 2; }
mkdir -p "$out"
gen() {
  name=$1
  shift
  "$moesim" trace generate --architecture mixtral-8x7b --expert-counts "$counts" --tokens "$tokens" --seed 1 \
    "$@" -o "$out/$name.mtr" --force
}
gen mixtral-wiki-a0 --affinity 0
gen mixtral-wiki-a0.3 --affinity 0.3
gen mixtral-wiki-a0.6 --affinity 0.6
gen mixtral-wiki-hot --affinity 0.3 --hot-experts 2 --hot-share 0.667
