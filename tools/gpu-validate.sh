#!/bin/sh
# One prepared run on a GPU machine (one H200: under 8 minutes): the GPU smoke test, a quick
# calibration (GEMMs, the contention grid, power by state and kernel class) and `validate` (a real
# MoE expert layer alone, under communication, and as two micro-batches overlapping each other's
# dispatch and combine, against the profile just measured), with the profile, its raw JSON, the logs
# and the predicted-vs-measured table written to OUT.
#
# Usage: sh tools/gpu-validate.sh --build-only [--build DIR]     (here: build what travels)
#        sh tools/gpu-validate.sh [--out DIR] [--build DIR] [--fake] [--gpus N]   (there: measure)
#   --build-only configure and build the portable Release moesim-calibrate and the GPU smoke test
#                (libstdc++, yaml-cpp and Boost linked statically: they run on a GPU machine with no
#                Debian libraries) into DIR, print the two paths to carry there, and stop
#   --out DIR    where results go (default: $OUT, as the device machine sets it)
#   --build DIR  the build folder (default: build-gpu); when DIR/calibrate/moesim-calibrate exists
#                it is used as it is, else DIR is configured and built first (needs cmake, nvcc and
#                the Debian dev packages of tools/setup.sh)
#   --fake       measure calibrate/fake_device.hpp instead of a GPU (`--fake-device`): tests this
#                script anywhere; the smoke test, which needs a GPU, is skipped
#   --gpus N     GPUs to drive (NCCL ranks; default 1)
# Never changes clocks, power limits, persistence or compute mode (no --allow-set-* flag is passed).
# Exit status: 0 when every step ran and validation passed its goal, 1 when a step failed or the
# validation missed its goal, 2 on bad usage. OUT always gets summary.txt, even when a step fails.
# Files in OUT (8 at most, as the device machine returns): summary.txt, build.log, smoke.log,
# calibrate.log, profile.yaml, profile.raw.json, validation.txt, validation.json.
set -u

out=${OUT:-}
build=build-gpu
fake=""
gpus=1
build_only=
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --build) build=${2:?--build needs a folder}; shift 2 ;;
    --fake) fake=--fake-device; shift ;;
    --gpus) gpus=${2:?--gpus needs a number}; shift 2 ;;
    --build-only) build_only=1; shift ;;
    *) echo "gpu-validate.sh: unknown option $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
case "$gpus" in ''|*[!0-9]*|0) echo "gpu-validate.sh: --gpus: expected a positive integer, got $gpus" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) ;; *) build="$root/$build" ;; esac
configure_and_build() {
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMOESIM_BUILD_TESTS=OFF \
    -DMOESIM_BUILD_BENCH=OFF -DMOESIM_GPU_SMOKE=ON &&
    cmake --build "$build" --target moesim-calibrate moesim_calibrate_gpu_test
}
if [ -n "$build_only" ]; then
  configure_and_build || exit 1
  rel=${build#"$root"/}
  echo "gpu-validate.sh: built; carry $rel/calibrate/moesim-calibrate and $rel/calibrate/moesim_calibrate_gpu_test"
  exit 0
fi
if [ -z "$out" ]; then
  echo "gpu-validate.sh: no output folder: set OUT or give --out DIR" >&2
  exit 2
fi

mkdir -p "$out" || { echo "gpu-validate.sh: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
export MOESIM_CONFIG_DIR="$root/configs"
summary="$out/summary.txt"
status=0
start=$(date +%s)
{
  echo "# moesim gpu-validate: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# revision: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "# device: ${fake:+fake device (--fake), }$gpus GPU(s)"
  if command -v nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader 2>/dev/null |
      sed 's/^/# gpu: /'
  fi
  printf '%-10s %-8s %8s  %s\n' step status seconds log
} > "$summary"

# step NAME LIMIT_S LOG COMMAND...: runs COMMAND under a time limit, logs it, records the outcome.
step() {
  name=$1 limit=$2 log=$3
  shift 3
  t0=$(date +%s)
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  t=$(( $(date +%s) - t0 ))
  case $rc in
    0) result=ok ;;
    77) result=skipped ;;
    124) result="timeout"; status=1 ;;
    *) result="failed($rc)"; status=1 ;;
  esac
  printf '%-10s %-8s %8d  %s\n' "$name" "$result" "$t" "$(basename "$log")" >> "$summary"
  return $rc
}

bin="$build/calibrate/moesim-calibrate"
smoke="$build/calibrate/moesim_calibrate_gpu_test"
if [ -x "$bin" ]; then
  echo "using $bin as built (nothing to build)" > "$out/build.log"
  printf '%-10s %-8s %8d  %s\n' build reused 0 build.log >> "$summary"
else
  step build 300 "$out/build.log" sh "$root/tools/gpu-validate.sh" --build-only --build "$build"
fi
if [ ! -x "$bin" ]; then
  echo "# no moesim-calibrate at $bin: nothing measured (see build.log)" >> "$summary"
  cat "$summary"
  exit 1
fi

if [ -n "$fake" ]; then
  echo "skipped: the fake device has no GPU to smoke-test" > "$out/smoke.log"
  printf '%-10s %-8s %8d  %s\n' smoke skipped 0 smoke.log >> "$summary"
elif [ -x "$smoke" ]; then
  step smoke 60 "$out/smoke.log" "$smoke"
else
  echo "no smoke test at $smoke (build it with -DMOESIM_GPU_SMOKE=ON or the tests)" > "$out/smoke.log"
  printf '%-10s %-8s %8d  %s\n' smoke missing 0 smoke.log >> "$summary"
  status=1
fi

profile="$out/profile.yaml"
step calibrate 300 "$out/calibrate.log" "$bin" $fake --plan quick --gpus "$gpus" -o "$profile" \
  --raw "$out/profile.raw.json" --name gpu-validate --force
if [ -f "$profile" ]; then
  # Layers 0 and 13 of the shipped DeepSeek-V2-Lite trace, three window sizes off the profile's grid.
  step validate 120 "$out/validation.txt" "$bin" validate $fake --profile "$profile" \
    --trace "$root/traces/data/deepseek-v2-lite-intent.mtr" --layers 0,13 --json "$out/validation.json" --force
  # The verdict per kind of case (alone, traffic, two micro-batches), then over all of them.
  grep -E '^#   [a-z -]+ +[0-9]+ cases:' "$out/validation.txt" | sed 's/^#   /# validation:   /' >> "$summary"
  grep -E '^# [0-9]+ cases:' "$out/validation.txt" | sed 's/^# /# validation: /' >> "$summary"
  grep -q ': PASS' "$out/validation.txt" || status=1
else
  echo "# no profile was written: validation not run (see calibrate.log)" >> "$summary"
  status=1
fi
echo "# total: $(( $(date +%s) - start )) s, status $status" >> "$summary"
cat "$summary"
exit $status
