#!/bin/bash
# Trace-library benchmarks (issue: the foundation). Prints one table.
#   bash bench/trace_bench.sh BUILD_DIR
# Import + stats of the shipped trace; binary read throughput (expert ids per second) of
# `trace stats` on a generated 10M-token trace; peak memory of `trace stats` at 100k vs 10M tokens.
set -euo pipefail
build=${1:?usage: bash bench/trace_bench.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
moesim="$build/sim/moesim"
shared="$root/../shared/data/routing/deepseek-v2-lite-intent"
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

timed() {  # label ids command...: prints a row with wall time, throughput and peak memory
  local label=$1 ids=$2
  shift 2
  /usr/bin/time -f "%e %M" -o "$tmp/t" "$@" > /dev/null
  read -r wall rss < "$tmp/t"
  python3 -c "
import sys
wall, rss, ids = float('$wall'), int('$rss'), float('$ids')
rate = f'{ids / wall / 1e6:.1f}' if ids > 0 and wall > 0 else '-'
print(f'| {\"$label\":<52} | {wall:>7.2f} | {rate:>10} | {rss / 1024:>8.1f} |')"
}

echo "| step | wall s | M ids/s | peak MiB |"
echo "| --- | ---: | ---: | ---: |"
ids_shipped=$((8222 * 26 * 6))
if [ -d "$shared" ]; then
  timed "import esft (DeepSeek-V2-Lite intent, 8,222 tokens)" $ids_shipped \
    "$moesim" trace import --format esft --architecture deepseek-v2-lite "$shared" -o "$tmp/imported.mtr"
else
  echo "| import esft: skipped (no ../shared/data) | - | - | - |"
fi
timed "trace stats, shipped trace" $ids_shipped "$moesim" trace stats "$root/traces/data/deepseek-v2-lite-intent.mtr"
"$moesim" trace generate --architecture deepseek-v2-lite --tokens 100000 --seed 1 -o "$tmp/small.mtr" > /dev/null
timed "generate 10M tokens (DeepSeek-V2-Lite shape)" $((10000000 * 26 * 6)) \
  "$moesim" trace generate --architecture deepseek-v2-lite --tokens 10000000 --seed 1 -o "$tmp/big.mtr"
timed "trace stats, 100k generated tokens" $((100000 * 26 * 6)) "$moesim" trace stats "$tmp/small.mtr"
timed "trace stats, 10M generated tokens" $((10000000 * 26 * 6)) "$moesim" trace stats "$tmp/big.mtr"
