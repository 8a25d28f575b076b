#!/bin/sh
# Builds the libFuzzer targets (Clang, -DMOESIM_FUZZ=ON, ASan and UBSan) in BUILD_DIR and runs each for
# SECONDS from its seeds (BUILD_DIR/tests/fuzz/seeds/TARGET.txt), the regression inputs under
# tests/data/fuzz/TARGET/ and the corpus it grew in earlier runs (BUILD_DIR/corpus/TARGET). Prints, per
# target, the executions, the coverage (libFuzzer's "cov": edges reached) and the corpus size. A crash,
# a leak, a sanitizer report, an input slower than 30 s or over 2 GB, or an exception other than a clear
# input error fails the run; the input is kept as BUILD_DIR/artifacts/TARGET/crash-* and belongs under
# tests/data/fuzz/TARGET/ (named for what it found) once fixed, so that every test build replays it.
# Exits 77 (CTest: skipped) where clang++ is not installed (sh tools/setup.sh --test installs it).
# Usage: sh tests/fuzz/run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS] [TARGET...]
#   SECONDS defaults to $MOESIM_FUZZ_SECONDS, else 30 (21 targets: about 11 minutes of fuzzing in CI, a
#   smoke run; real campaigns give each target 600); TARGETs default to every target.
set -eu
src=${1:?usage: run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS] [TARGET...]}
out=${2:?usage: run_fuzz.sh SOURCE_DIR BUILD_DIR [SECONDS] [TARGET...]}
seconds=${3:-${MOESIM_FUZZ_SECONDS:-30}}
[ $# -ge 3 ] && shift 3 || shift $#
if ! command -v clang++ >/dev/null 2>&1; then
  echo "run_fuzz: clang++ is not installed (sh tools/setup.sh --test installs it); skipped"
  exit 77
fi
case $seconds in
  ''|*[!0-9]*) echo "run_fuzz: SECONDS must be a whole number of seconds, got '$seconds'" >&2; exit 2 ;;
esac
mkdir -p "$out"
# -O1 -g: fast enough to explore, precise enough to read a report.
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DMOESIM_FUZZ=ON \
  -DMOESIM_BUILD_TESTS=OFF -DMOESIM_BUILD_BENCH=OFF -DMOESIM_CALIBRATE=OFF > "$out.configure.log" 2>&1 ||
  { cat "$out.configure.log"; exit 1; }
cmake --build "$out" --target moesim_fuzz
if [ $# -eq 0 ]; then
  set -- $(cd "$out/tests/fuzz/seeds" && ls ./*.txt | sed 's|^\./||; s|\.txt$||')
fi
status=0
printf '%-20s %12s %8s %8s  %s\n' target executions cov corpus result
for target in "$@"; do
  exe="$out/tests/fuzz/fuzz_$target"
  [ -x "$exe" ] || { echo "run_fuzz: no target '$target' (see tests/fuzz/CMakeLists.txt)" >&2; exit 2; }
  corpus="$out/corpus/$target"
  artifacts="$out/artifacts/$target"
  mkdir -p "$corpus" "$artifacts"
  # libFuzzer reads seeds from folders: the listed seed files are copied in (names are kept unique).
  seeds="$out/seeds-run/$target"
  rm -rf "$seeds"
  mkdir -p "$seeds"
  n=0
  while IFS= read -r seed; do
    [ -n "$seed" ] || continue
    n=$((n + 1))
    cp "$seed" "$seeds/$n-$(basename "$seed")"
  done < "$out/tests/fuzz/seeds/$target.txt"
  regressions="$src/tests/data/fuzz/$target"
  [ -d "$regressions" ] || regressions=""
  log="$out/logs/$target.log"
  mkdir -p "$out/logs"
  result=ok
  ASAN_OPTIONS=abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$exe" "$corpus" "$seeds" $regressions -max_total_time="$seconds" -timeout=30 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$artifacts/" > "$log" 2>&1 || result=FAILED
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | sed 's/cov: //')
  printf '%-20s %12s %8s %8s  %s\n' "$target" "${execs:-?}" "${cov:-?}" "$(ls "$corpus" | wc -l)" "$result"
  if [ "$result" != ok ]; then
    status=1
    echo "---- $target: the end of $log ----"
    tail -40 "$log"
    echo "---- the input is under $artifacts; once fixed, add it to tests/data/fuzz/$target/ ----"
  fi
done
exit $status
