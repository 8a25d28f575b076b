#!/bin/sh
# DeepSeek-V3 on H800 as published (configs/papers/deepseek-v3-{prefill,decode}.yaml): each study's
# cost on ONE core (taskset -c 0, so one simulation and no graph builder thread), against the target
# of 5 minutes per study (docs/validation.md, "A whole deployment: DeepSeek-V3 on H800").
# Usage: sh bench/deepseek.sh BUILD_DIR   (a Release build)
set -eu
build=${1:?usage: sh bench/deepseek.sh BUILD_DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
moesim="$build/sim/moesim"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "| study | steps | CPU s | wall s | peak MiB | step p50 ms | tok/s per GPU | target |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for s in prefill decode; do
  out="$tmp/$s"
  /usr/bin/time -f "%U %S %e %M" -o "$tmp/time" taskset -c 0 "$moesim" run "$root/configs/papers/deepseek-v3-$s.yaml" \
    -o "$out" -q > /dev/null
  python3 - "$out/results.json" "$tmp/time" "$s" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))["variants"][0]
user, system, wall, kb = open(sys.argv[2]).read().split()
cpu = float(user) + float(system)
gpus = v["inputs"]["ep"] * v["inputs"]["tp"]
print("| deepseek-v3-%s | %d | %.1f | %.1f | %.0f | %.2f | %.0f | %s |" % (
    sys.argv[3], v["inputs"]["steps"], cpu, float(wall), int(kb) / 1024, 1e3 * v["step_latency_s"]["p50"],
    v["throughput_tokens_per_s"] / gpus, "met (< 300 s)" if cpu < 300 else "MISSED (>= 300 s)"))
PY
done
