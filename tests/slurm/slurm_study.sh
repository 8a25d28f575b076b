#!/bin/sh
# tools/slurm-study.sh on a real Slurm: starts a one-node cluster on this machine from Debian's
# packages (munged, slurmctld and slurmd as root, state in a temporary folder, ports of its own), then
#   1. runs a 3-shard study through the script and checks the merged results.csv against an unsharded
#      run, and that the shards shared their placements (each solved once, in OUT/placements);
#   2. makes shard 2 fail: the merge must be cancelled (DependencyNeverSatisfied), not left pending;
#      the same command run again after the fix must finish the study;
#   3. resubmits one task alone (sbatch --array=2): it must still be shard 2 of 3.
# Usage: sh tests/slurm/slurm_study.sh SOURCE_DIR MOESIM STUDY.yaml
# Exits 77 (CTest: skipped), saying why, where it is not root or Slurm/munge are not installed
# (sh tools/setup.sh --test installs slurmctld, slurmd, slurm-client and munge).
set -eu
src=${1:?usage: slurm_study.sh SOURCE_DIR MOESIM STUDY.yaml}
moesim=${2:?usage: slurm_study.sh SOURCE_DIR MOESIM STUDY.yaml}
study=${3:?usage: slurm_study.sh SOURCE_DIR MOESIM STUDY.yaml}
skip() { echo "skipped: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "needs root: it starts munged, slurmctld and slurmd on this machine"
for b in munged munge slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$b" >/dev/null 2>&1 ||
    skip "$b is not installed (sh tools/setup.sh --test installs slurmctld, slurmd, slurm-client and munge)"
done

t=$(mktemp -d /tmp/moesim-slurm.XXXXXX)
chmod 755 "$t"  # munged needs its socket's folders searchable by all
stop() {
  for pidfile in "$t/slurmd.pid" "$t/slurmctld.pid" "$t/munge/pid"; do
    [ -s "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  sleep 1
  rm -rf "$t"
}
trap stop EXIT
trap 'exit 1' INT TERM
fail() {
  echo "FAIL: $*" >&2
  for f in "$t"/slurmctld.log "$t"/slurmd.log "$t"/munge/log "$t"/*/logs/*.log; do
    [ -f "$f" ] && { echo "--- $f" >&2; tail -n 20 "$f" >&2; }
  done
  exit 1
}

mkdir -p "$t/munge" "$t/state" "$t/spool"
dd if=/dev/urandom of="$t/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$t/munge.key"
munged --key-file="$t/munge.key" --socket="$t/munge/sock" --pid-file="$t/munge/pid" \
  --log-file="$t/munge/log" --seed-file="$t/munge/seed" || fail "munged did not start"
# Ports of its own, so that a Slurm already running here is left alone.
port=$((20000 + $$ % 20000))
cat > "$t/slurm.conf" <<CONF
ClusterName=moesimtest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$t/munge/sock
CredType=cred/munge
StateSaveLocation=$t/state
SlurmdSpoolDir=$t/spool
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd.pid
SlurmctldLogFile=$t/slurmctld.log
SlurmdLogFile=$t/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
MinJobAge=3600
NodeName=localhost NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=moesim Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF="$t/slurm.conf"
slurmctld -i -c || fail "slurmctld did not start"
slurmd -N localhost || fail "slurmd did not start"
i=0
until sinfo -h -o %t 2>/dev/null | grep -qx idle; do
  i=$((i + 1))
  [ "$i" -le 60 ] || fail "the node did not come up idle in 60 s: $(sinfo 2>&1)"
  sleep 1
done

# The state of job $1 once it has left the queue (COMPLETED, FAILED, CANCELLED, ...), within $2 s.
final_state() {
  i=0
  while :; do
    s=$(scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort -u)
    case "$s" in
      *PENDING* | *RUNNING* | *CONFIGURING* | *COMPLETING* | '') ;;
      *) echo "$s"; return 0 ;;
    esac
    i=$((i + 1))
    [ "$i" -le "$2" ] || { echo "TIMEOUT($s)"; return 0; }
    sleep 1
  done
}
submit() {  # OUT [MOESIM]: runs tools/slurm-study.sh, prints the merge job's id
  MOESIM=${2:-$moesim} SBATCH_ARGS="--cpus-per-task=1" sh "$src/tools/slurm-study.sh" "$study" "$1" 3 \
    --set base.workload.steps=2 > "$t/submit.out" || fail "slurm-study.sh failed: $(cat "$t/submit.out")"
  sed -n 's/.*merge: job \([0-9]*\) .*/\1/p' "$t/submit.out"
}

"$moesim" study "$study" -o "$t/whole" -q --set base.workload.steps=2 > /dev/null || fail "the unsharded run failed"

# 1. The study through Slurm, merged, equals the unsharded run; placements solved once and shared.
merge=$(submit "$t/run")
state=$(final_state "$merge" 300)
[ "$state" = COMPLETED ] || fail "the merge job ended $state"
cmp -s "$t/run/all/results.csv" "$t/whole/results.csv" || fail "merged results.csv differs from the unsharded run's"
n=$(find "$t/run/placements" -name 'greedy-*.yaml' | wc -l)
[ "$n" -eq 1 ] || fail "expected one shared greedy placement in $t/run/placements, found $n"
[ -z "$(find "$t/run/placements" -name '*.lock')" ] || fail "a placement lock was left behind"
for f in "$t"/run/shard-*/placements/*.yaml; do
  cmp -s "$f" "$t/run/placements/$(basename "$f")" || fail "$f differs from the shared placement"
done
echo "ok: 3 shards and the merge ran under Slurm; merged results.csv equals the unsharded run's; one shared placement"

# 2. A failed shard cancels the merge; the same command again finishes the study.
cat > "$t/flaky-moesim" <<WRAP
#!/bin/sh
if [ -e "$t/break-shard-2" ] && [ "\${SLURM_ARRAY_TASK_ID:-}" = 2 ]; then
  echo "injected failure of shard 2" >&2
  exit 3
fi
exec "$moesim" "\$@"
WRAP
chmod +x "$t/flaky-moesim"
touch "$t/break-shard-2"
merge=$(submit "$t/flaky" "$t/flaky-moesim")
state=$(final_state "$merge" 300)
[ "$state" = CANCELLED ] || fail "with shard 2 failed, the merge job ended $state (expected CANCELLED)"
scontrol show job "$merge" | grep -q "Reason=DependencyNeverSatisfied" || fail "the merge was cancelled for another reason"
rm "$t/break-shard-2"
merge=$(submit "$t/flaky" "$t/flaky-moesim")
state=$(final_state "$merge" 300)
[ "$state" = COMPLETED ] || fail "after the fix, the merge job ended $state"
cmp -s "$t/flaky/all/results.csv" "$t/whole/results.csv" || fail "the rerun's results.csv differs from the unsharded run's"
echo "ok: a failed shard cancelled the merge; the same command finished the study"

# 3. One task resubmitted alone is still shard 2 of 3.
job=$(MOESIM="$moesim" sbatch --parsable --array=2 --export=ALL,MOESIM_SLURM_STEP=shard \
  --output="$t/one.log" "$src/tools/slurm-study.sh" "$study" "$t/one" 3 --set base.workload.steps=2)
state=$(final_state "${job%%;*}" 300)
[ "$state" = COMPLETED ] || fail "the resubmitted task ended $state: $(cat "$t/one.log" 2>/dev/null)"
grep -q '"count": 3' "$t/one/shard-2/study.json" || fail "the resubmitted task did not run shard 2/3: $(cat "$t/one/shard-2/study.json")"
echo "ok: a task resubmitted with sbatch --array=2 ran shard 2/3"
