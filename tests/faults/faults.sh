#!/bin/sh
# Fault injection on the real moesim binary (docs/reliability.md): kill -9 and --resume, a full disk,
# a read-only folder, two writers on one folder, SIGINT/SIGTERM during every long command.
# usage: faults.sh CASE MOESIM TEST_DATA_DIR WORK_DIR; exit 0 pass, 1 fail, 77 skipped (with the reason).
# Never a fixed sleep alone: every signal is sent after a progress line or a temporary file is seen.
set -u
CASE=$1
MOESIM=$2
DATA=$3
WORK=$4/$CASE

STUDY=$DATA/studies/good_study_shards.yaml  # 6 variants of the tiny MoE model, a few seconds in all
ARCH=$DATA/placements/models/tiny-moe.yaml
export MOESIM_JOBS=2
export TMPDIR="$WORK/tmp"  # the simulation processes' result files go here: checked empty at the end

fail() {
  echo "FAIL ($CASE): $*" >&2
  exit 1
}
skip() {
  echo "SKIP ($CASE): $*" >&2
  exit 77
}

umount "$WORK/disk" 2>/dev/null  # left mounted by an aborted earlier run
umount "$WORK/ro" 2>/dev/null
rm -rf "$WORK"
mkdir -p "$TMPDIR" || fail "cannot create $TMPDIR"
# sh starts background commands with SIGINT ignored (moesim then keeps it ignored, as nohup wants):
# start them with the default action so that SIGINT reaches them as it would from a terminal.
env --default-signal=INT true 2>/dev/null || skip "env --default-signal (coreutils >= 8.31) is needed to send SIGINT"
BG="env --default-signal=INT,TERM,HUP"  # unquoted below, so that $! is moesim's pid (env execs it)

# wait_for FILE PATTERN: until FILE holds a line matching PATTERN (grep -E), at most 60 s.
wait_for() {
  n=0
  while ! grep -Eq -- "$2" "$1" 2>/dev/null; do
    n=$((n + 1))
    [ $n -le 1200 ] || fail "timed out waiting for \"$2\" in $1"
    sleep 0.05
  done
}
# wait_for_temp DIR PID: until DIR holds a hidden temporary (.NAME.tmp-...) or PID has ended.
wait_for_temp() {
  n=0
  while ! ls -A "$1" 2>/dev/null | grep -q '^\..*\.tmp-'; do
    kill -0 "$2" 2>/dev/null || return 1
    n=$((n + 1))
    [ $n -le 1200 ] || fail "timed out waiting for a temporary file in $1"
    sleep 0.01
  done
}

# The files of a study folder that must be byte-identical between runs: all but the run's date, host
# and wall times (run_info.json, results.json's run_info block, report.html's run date and folder).
snapshot() {
  (cd "$1" && find . -print | LC_ALL=C sort) || return 1
  (cd "$1" && find . -type f ! -name run_info.json ! -name results.json ! -name report.html -print | LC_ALL=C sort |
    while read -r f; do
      echo "== $f"
      cat "$f"
    done)
  [ -f "$1/results.json" ] && sed '/^  "run_info": {/,/^  },/d' "$1/results.json"
  [ -f "$1/report.html" ] &&
    sed -e "s|$1|DIR|g" -e 's/[0-9]\{4\}-[0-9][0-9]-[0-9][0-9]T[0-9:]*Z/DATE/g' "$1/report.html"
  return 0
}
same_results() {
  snapshot "$1" > "$WORK/a.snap"
  snapshot "$2" > "$WORK/b.snap"
  cmp -s "$WORK/a.snap" "$WORK/b.snap" || {
    diff "$WORK/a.snap" "$WORK/b.snap" | head -20 | cut -c1-200 >&2
    fail "$2 differs from the uninterrupted run $1"
  }
}
reference() {
  "$MOESIM" study "$STUDY" -o "$WORK/ref" -q > /dev/null 2> "$WORK/ref.err" || fail "the reference study failed"
}

# No file the user did not ask for: no hidden temporary or lock file in DIR, no result file in
# $TMPDIR, no moesim process still running on DIR.
no_leftovers() {
  hidden=$(find "$1" -name '.*' ! -name . -print 2>/dev/null)
  [ -z "$hidden" ] || fail "left behind in $1: $hidden"
  [ -z "$(ls -A "$TMPDIR")" ] || fail "left behind in $TMPDIR: $(ls -A "$TMPDIR")"
  n=0
  while ps -eo stat=,args= | grep -F -- "$1" | grep -v -e grep -e '^Z' -e faults.sh > /dev/null; do
    n=$((n + 1))
    [ $n -le 40 ] || fail "moesim processes still running on $1: $(ps -eo pid=,args= | grep -F -- "$1" | grep -v grep)"
    sleep 0.05
  done
}

# signal_study SIG CMD [group]: the study (or run) gets SIG after its second variant started (with
# "group": its whole process group, workers included, as Ctrl-C on a terminal does); then it must
# have stopped with SIG's status, said so in one line, left nothing, and a rerun completes it.
signal_study() {
  sig=$1
  cmd=$2
  out="$WORK/$cmd-$sig${3:-}"
  # Emptied first: the background job opens it a moment later, and wait_for must not read the last run's.
  rm -f "$WORK/$cmd.err"
  if [ "${3:-}" = group ]; then
    setsid $BG "$MOESIM" "$cmd" "$STUDY" -o "$out" > "$WORK/$cmd.out" 2> "$WORK/$cmd.err" &
  else
    $BG "$MOESIM" "$cmd" "$STUDY" -o "$out" > "$WORK/$cmd.out" 2> "$WORK/$cmd.err" &
  fi
  pid=$!
  wait_for "$WORK/$cmd.err" '\[2/6\] .*: started'
  if [ "${3:-}" = group ]; then kill -s "$sig" -- -$pid; else kill -s "$sig" $pid; fi
  wait $pid
  rc=$?
  case $sig in INT) want=130 ;; TERM) want=143 ;; esac
  [ $rc -eq $want ] || fail "$cmd after SIG$sig: exit $rc, expected $want; stderr: $(cat "$WORK/$cmd.err")"
  no_leftovers "$out"
  if [ "$cmd" = study ]; then
    grep -qF "moesim: interrupted by SIG$sig; finished variants are kept in $out; continue with --resume" \
      "$WORK/$cmd.err" || fail "study after SIG$sig did not say so: $(cat "$WORK/$cmd.err")"
    "$MOESIM" study "$STUDY" -o "$out" --resume -q > /dev/null 2> "$WORK/resume.err" || fail "--resume failed"
  else
    grep -q "^moesim: interrupted by SIG$sig" "$WORK/$cmd.err" || fail "run after SIG$sig did not say so"
    "$MOESIM" run "$STUDY" -o "$out" --force -q > /dev/null 2> "$WORK/resume.err" || fail "rerun with --force failed"
  fi
  no_leftovers "$out"
  [ "$cmd" = study ] && same_results "$WORK/ref" "$out"
  return 0
}

# signal_writer SIG OUT CMD...: CMD writes OUT; SIG arrives while OUT's temporary exists. Then either
# the command had finished (OUT equal to the reference OUT.ref) or it stopped with SIG's status and
# left no file at all.
signal_writer() {
  sig=$1
  target=$2
  shift 2
  $BG "$@" > "$WORK/w.out" 2> "$WORK/w.err" &
  pid=$!
  if wait_for_temp "$(dirname "$target")" $pid; then kill -s "$sig" $pid; fi
  wait $pid
  rc=$?
  case $sig in INT) want=130 ;; TERM) want=143 ;; esac
  if [ $rc -eq 0 ]; then
    cmp -s "$target" "$target.ref" || fail "$* finished before SIG$sig but wrote another $target"
    echo "note: $* finished before SIG$sig arrived" >&2
    rm -f "$target"
  else
    [ $rc -eq $want ] || fail "$* after SIG$sig: exit $rc, expected $want; stderr: $(cat "$WORK/w.err")"
    [ ! -e "$target" ] || fail "$* after SIG$sig left $target"
    no_leftovers "$(dirname "$target")"
    grep -q "^moesim: interrupted by SIG$sig" "$WORK/w.err" || fail "$* after SIG$sig did not say so"
  fi
  no_leftovers "$(dirname "$target")"
}

# make_jsonl FILE: routing of the tiny MoE model as a serving engine's hook records it (traces/FORMAT.md,
# jsonl): 200 sequences x 500 tokens x 3 MoE layers, top-2 of 8 experts; about 20 MB, a second to import.
make_jsonl() {
  awk 'BEGIN { for (p = 0; p < 200; p++) for (t = 0; t < 500; t++) for (l = 1; l <= 3; l++) {
    a = (p + t * l) % 8; b = (a + 1 + t % 7) % 8
    printf "{\"problem_id\": %d, \"token_idx\": %d, \"layer\": %d, \"experts\": [%d, %d]}\n", p, t, l, a, b } }' > "$1"
}

case $CASE in
kill9_resume)
  # kill -9 (no cleanup possible) while the first variant simulates, after two variants, after five.
  reference
  for point in '\[1/6\] .*: started' '\[2/6\] .*: finished' '\[5/6\] .*: finished'; do
    out="$WORK/killed"
    rm -rf "$out" "$WORK/k.err"
    "$MOESIM" study "$STUDY" -o "$out" > /dev/null 2> "$WORK/k.err" &
    pid=$!
    wait_for "$WORK/k.err" "$point"
    kill -9 $pid
    wait $pid
    "$MOESIM" study "$STUDY" -o "$out" --resume > /dev/null 2> "$WORK/r.err" ||
      fail "--resume after kill -9 at \"$point\": $(cat "$WORK/r.err")"
    rm -rf "$TMPDIR"/moesim-sim-*  # the killed run's workers' files: kill -9 allows no cleanup
    same_results "$WORK/ref" "$out"
  done
  ;;
disk_full)
  # A 1 MiB tmpfs: the study's first files fit, a 28 MB trace does not.
  mkdir -p "$WORK/disk"
  mount -t tmpfs -o size=1m tmpfs "$WORK/disk" 2>/dev/null ||
    skip "cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN)"
  trap 'umount "$WORK/disk" 2>/dev/null' EXIT
  "$MOESIM" trace generate --architecture "$ARCH" --tokens 2M -o "$WORK/disk/big.mtr" > /dev/null 2> "$WORK/g.err"
  rc=$?
  [ $rc -eq 1 ] || fail "trace generate on a full disk: exit $rc, expected 1"
  grep -q "big.mtr.*No space left on device" "$WORK/g.err" || fail "no OS reason and file name: $(cat "$WORK/g.err")"
  [ -z "$(ls -A "$WORK/disk")" ] || fail "trace generate left $(ls -A "$WORK/disk") on the full disk"
  make_jsonl "$WORK/in.jsonl"
  "$MOESIM" trace import --format jsonl --architecture "$ARCH" "$WORK/in.jsonl" -o "$WORK/disk/imp.txt" \
    > /dev/null 2> "$WORK/i.err"
  rc=$?
  [ $rc -eq 1 ] || fail "trace import on a full disk: exit $rc, expected 1"
  grep -q "imp.txt.*No space left on device" "$WORK/i.err" || fail "no OS reason and file name: $(cat "$WORK/i.err")"
  [ -z "$(ls -A "$WORK/disk")" ] || fail "trace import left $(ls -A "$WORK/disk") on the full disk"
  # A study on a disk half the size of its results, then --resume once there is room: the same results.
  umount "$WORK/disk"
  reference
  kb=$(du -sk "$WORK/ref" | cut -f1)
  mount -t tmpfs -o size=$((kb / 2))k tmpfs "$WORK/disk" || fail "cannot mount the tmpfs again"
  "$MOESIM" study "$STUDY" -o "$WORK/disk/out" -q > /dev/null 2> "$WORK/s.err"
  rc=$?
  [ $rc -eq 1 ] || fail "study on a full disk: exit $rc, expected 1; stderr: $(cat "$WORK/s.err")"
  grep -q "No space left on device" "$WORK/s.err" || fail "study on a full disk: no OS reason: $(cat "$WORK/s.err")"
  mount -o remount,size=$((kb * 4))k "$WORK/disk" || fail "cannot enlarge the tmpfs"
  "$MOESIM" study "$STUDY" -o "$WORK/disk/out" --resume -q > /dev/null 2> "$WORK/s.err" ||
    fail "--resume after the disk was freed: $(cat "$WORK/s.err")"
  no_leftovers "$WORK/disk/out"
  same_results "$WORK/ref" "$WORK/disk/out"
  ;;
readonly)
  mkdir -p "$WORK/ro"
  if [ "$(id -u)" = 0 ]; then
    # root writes through file modes: a read-only mount instead.
    mount -t tmpfs -o ro,size=64k tmpfs "$WORK/ro" 2>/dev/null || skip "cannot mount a read-only tmpfs here"
    trap 'umount "$WORK/ro" 2>/dev/null' EXIT
  else
    chmod 555 "$WORK/ro"
  fi
  "$MOESIM" study "$STUDY" -o "$WORK/ro/out" -q > /dev/null 2> "$WORK/s.err"
  rc=$?
  [ $rc -eq 1 ] || fail "study into a read-only folder: exit $rc, expected 1"
  grep -Eq "ro/out.*(Read-only file system|Permission denied)" "$WORK/s.err" ||
    fail "no reason named: $(cat "$WORK/s.err")"
  "$MOESIM" trace generate --architecture "$ARCH" --tokens 1k -o "$WORK/ro/t.mtr" > /dev/null 2> "$WORK/g.err"
  rc=$?
  [ $rc -eq 1 ] || fail "trace generate into a read-only folder: exit $rc, expected 1"
  grep -Eq "t.mtr.*(Read-only file system|Permission denied)" "$WORK/g.err" ||
    fail "no reason named: $(cat "$WORK/g.err")"
  [ -z "$(ls -A "$WORK/ro")" ] || fail "files appeared in the read-only folder"
  ;;
two_writers)
  reference
  out="$WORK/shared"
  rm -f "$WORK/a.err"
  "$MOESIM" study "$STUDY" -o "$out" > /dev/null 2> "$WORK/a.err" &
  pid=$!
  wait_for "$WORK/a.err" '\[1/6\] .*: started'
  # Held stopped while the second writers try: a fast machine could otherwise finish the study before
  # the last of them, which would then rightly succeed. (Woken and ended if a check below fails.)
  trap 'kill -CONT $pid 2>/dev/null; kill $pid 2>/dev/null' EXIT
  kill -STOP $pid
  for second in "study $STUDY -o $out --resume" "study $STUDY -o $out --force" "run $STUDY -o $out --force" \
    "study merge $out -o $WORK/merged" "study merge $WORK/ref -o $out --force"; do
    # shellcheck disable=SC2086
    "$MOESIM" $second > /dev/null 2> "$WORK/b.err"
    rc=$?
    [ $rc -eq 2 ] || fail "moesim $second while pid $pid writes $out: exit $rc, expected 2"
    grep -q "is in use by another moesim process (pid $pid" "$WORK/b.err" ||
      fail "moesim $second: the refusal does not name pid $pid: $(cat "$WORK/b.err")"
    ! grep -q "started" "$WORK/b.err" || fail "moesim $second simulated variants in a folder being written"
  done
  kill -0 $pid 2>/dev/null || fail "the first study ended before the second writers were tried (too fast to test)"
  kill -CONT $pid
  trap - EXIT
  wait $pid || fail "the first study failed: $(cat "$WORK/a.err")"
  [ "$(grep -c ': started' "$WORK/a.err")" -eq 6 ] || fail "the first study did not run its 6 variants once each"
  no_leftovers "$out"
  same_results "$WORK/ref" "$out"
  # Two fresh runs started together on a folder that does not exist yet: one runs, one is refused.
  out="$WORK/race"
  "$MOESIM" study "$STUDY" -o "$out" > /dev/null 2> "$WORK/r1.err" &
  p1=$!
  "$MOESIM" study "$STUDY" -o "$out" > /dev/null 2> "$WORK/r2.err" &
  p2=$!
  wait $p1
  rc1=$?
  wait $p2
  rc2=$?
  [ "$rc1$rc2" = 02 ] || [ "$rc1$rc2" = 20 ] ||
    fail "two fresh runs on one folder: exits $rc1 and $rc2, expected 0 and 2"
  [ "$(cat "$WORK/r1.err" "$WORK/r2.err" | grep -c ': started')" -eq 6 ] || fail "two fresh runs duplicated work"
  no_leftovers "$out"
  same_results "$WORK/ref" "$out"
  ;;
signals_study)
  reference
  signal_study INT study
  signal_study TERM study
  if command -v setsid > /dev/null; then signal_study INT study group; fi
  ;;
signals_run)
  signal_study INT run
  signal_study TERM run
  ;;
signals_trace_generate)
  mkdir -p "$WORK/gen"
  for enc in mtr txt; do
    "$MOESIM" trace generate --architecture "$ARCH" --tokens 1M -o "$WORK/gen/t.$enc.ref" --encoding \
      "$([ $enc = mtr ] && echo binary || echo text)" > /dev/null 2>&1 || fail "reference trace generate failed"
    for sig in INT TERM; do
      signal_writer $sig "$WORK/gen/t.$enc" "$MOESIM" trace generate --architecture "$ARCH" --tokens 1M \
        -o "$WORK/gen/t.$enc"
    done
    mv "$WORK/gen/t.$enc.ref" "$WORK/t.$enc.ref"
  done
  ;;
signals_trace_import)
  mkdir -p "$WORK/imp"
  make_jsonl "$WORK/in.jsonl"
  for enc in mtr txt; do
    "$MOESIM" trace import --format jsonl --architecture "$ARCH" "$WORK/in.jsonl" -o "$WORK/t.$enc" > /dev/null 2>&1 ||
      fail "reference trace import failed"
    mv "$WORK/t.$enc" "$WORK/imp/t.$enc.ref"
    for sig in INT TERM; do
      signal_writer $sig "$WORK/imp/t.$enc" "$MOESIM" trace import --format jsonl --architecture "$ARCH" \
        "$WORK/in.jsonl" -o "$WORK/imp/t.$enc"
    done
    mv "$WORK/imp/t.$enc.ref" "$WORK/t.$enc.ref"
  done
  ;;
*)
  fail "unknown case $CASE"
  ;;
esac
echo "ok ($CASE)"
exit 0
