#!/bin/sh
# Runs a moesim study on a Slurm cluster: a job array of N shards (one `moesim study --shard i/N`
# per array task, each into OUT/shard-i, sharing the placements solved once in OUT/placements), then
# a merge job that starts when every shard succeeded and writes OUT/all; a shard that fails cancels
# the merge (--kill-on-invalid-dep=yes). See docs/study-format.md, "A Slurm cluster".
#
# Usage: sh tools/slurm-study.sh STUDY.yaml OUT N [moesim study options, e.g. --set base.workload.steps=20]
# Environment: MOESIM (the moesim executable, default: moesim on PATH), SBATCH_ARGS (extra sbatch
# options for both jobs, e.g. "--partition=cpu --time=02:00:00 --cpus-per-task=8": a shard runs as
# many simulations at once as the CPUs Slurm gives its task, one by default). Paths are resolved before
# submitting, so the jobs may start in any folder. A shard task that is requeued or rerun resumes
# its folder (--resume), so finished variants are not simulated twice.
set -eu

moesim=${MOESIM:-moesim}

if [ -n "${SLURM_ARRAY_TASK_ID:-}" ] && [ "${MOESIM_SLURM_STEP:-}" = shard ]; then
  # One array task: shard SLURM_ARRAY_TASK_ID of the N given (not SLURM_ARRAY_TASK_COUNT, which is 1
  # when one task is resubmitted with sbatch --array=7).
  study=$1 out=$2 n=$3
  shift 3
  exec "$moesim" study "$study" -o "$out/shard-$SLURM_ARRAY_TASK_ID" --placements "$out/placements" \
    --shard "$SLURM_ARRAY_TASK_ID/$n" --resume --quiet "$@"
fi

if [ "${MOESIM_SLURM_STEP:-}" = merge ]; then
  out=$2 n=$3
  i=1
  set --
  while [ "$i" -le "$n" ]; do
    set -- "$@" "$out/shard-$i"
    i=$((i + 1))
  done
  exec "$moesim" study merge "$@" -o "$out/all" --force
fi

if [ "$#" -lt 3 ]; then
  echo "usage: sh tools/slurm-study.sh STUDY.yaml OUT N [moesim study options]" >&2
  exit 2
fi
case "$3" in
  '' | *[!0-9]* | 0) echo "slurm-study.sh: N must be a positive whole number, got \"$3\"" >&2; exit 2 ;;
esac
command -v sbatch >/dev/null 2>&1 || { echo "slurm-study.sh: sbatch not found: run this on a Slurm login node" >&2; exit 1; }

abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
study=$(abs "$1")
out=$(abs "$2")
n=$3
shift 3
[ -f "$study" ] || { echo "slurm-study.sh: $study: no such study file" >&2; exit 2; }
# Validate the study (and every --set) here, before anything is queued.
"$moesim" study "$study" --check "$@" >/dev/null
mkdir -p "$out/logs"
script=$(abs "$0")

# shellcheck disable=SC2086  # SBATCH_ARGS is a list of options
array=$(sbatch --parsable --export=ALL,MOESIM_SLURM_STEP=shard ${SBATCH_ARGS:-} \
  --array=1-"$n" --job-name=moesim-study --output="$out/logs/shard-%a.log" \
  "$script" "$study" "$out" "$n" "$@")
array_id=${array%%;*}
# shellcheck disable=SC2086
merge=$(sbatch --parsable --export=ALL,MOESIM_SLURM_STEP=merge ${SBATCH_ARGS:-} \
  --dependency=afterok:"$array_id" --kill-on-invalid-dep=yes --job-name=moesim-merge --output="$out/logs/merge.log" \
  "$script" "$study" "$out" "$n")
echo "submitted shards: job array $array_id (1-$n, logs in $out/logs/); merge: job ${merge%%;*} -> $out/all"
echo "a failed shard cancels the merge: fix it, then rerun this command (finished shards have nothing left to run)"
