#!/usr/bin/env bash
# One all-to-all dispatch phase under four models (bench/ptask/ptask_phase.cpp says what each is):
# SimGrid's flows, moesim's fluid network (both exact max-min), and SimGrid's parallel-task model
# (host/model:ptask_L07) with one task per source GPU or one for the phase. Prints a table: CPU s of
# the simulation, the phase's end, and each destination's arrival against the exact one (flows where
# it ran, else fluid).
#   bash bench/ptask_bench.sh BUILD_DIR            # the table in docs/simulator.md, "Scale"
# PTASK_CASES overrides the cases ("GPUS:TOKENS:ZIPF" ...); PTASK_TIMEOUT the limit of one run (s).
set -euo pipefail
build=${1:?usage: bash bench/ptask_bench.sh BUILD_DIR}
bin="$build/bench/ptask/moesim-ptask-phase"
[ -x "$bin" ] || { echo "no $bin (build with MOESIM_BUILD_BENCH=ON)" >&2; exit 2; }
cases=${PTASK_CASES:-64:32:1.0 64:128:1.0 64:512:0.0 256:32:1.0 256:128:1.0}
limit=${PTASK_TIMEOUT:-600}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| GPUs | tokens/GPU | Zipf | transfers | model | CPU s | end us | end vs exact | mean arrival | worst arrival |"
echo "| ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
for c in $cases; do
  IFS=: read -r gpus tokens zipf <<< "$c"
  ref=""
  for m in flows fluid ptask-rows ptask-phase; do
    out="$tmp/$c-$m.txt"
    if ! line=$(timeout -k 5 "$limit" "$bin" "$m" "$gpus" "$tokens" "$zipf" 1 "$out"); then
      printf '| %s | %s | %s | | %s | > %s (time limit) | | | | |\n' "$gpus" "$tokens" "$zipf" "$m" "$limit"
      continue
    fi
    [ -z "$ref" ] && ref="$out"
    python3 - "$ref" "$out" "$gpus" "$tokens" "$zipf" $line <<'PY'
import sys
ref, out, gpus, tokens, zipf, model, transfers, cpu, end = sys.argv[1:10]
a = [float(x) for x in open(ref)]
b = [float(x) for x in open(out)]
errs = [y / x - 1 for x, y in zip(a, b) if x > 0]
same = ref == out
print(f"| {gpus} | {tokens} | {zipf} | {transfers} | {model}{' (exact)' if same else ''} | {float(cpu):.3f} | "
      f"{float(end) * 1e6:.1f} | {'' if same else f'{100 * (max(b) / max(a) - 1):+.3f}%'} | "
      f"{'' if same else f'{100 * sum(errs) / len(errs):+.2f}%'} | "
      f"{'' if same else f'{100 * max(errs, key=abs):+.2f}%'} |")
PY
  done
done
