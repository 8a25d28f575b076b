#!/bin/sh
# The project builds with Clang as well as GCC: configures and builds every target (libraries,
# executables, test suites; without the CUDA part) with Debian's clang++ and warnings as errors, in
# BUILD_DIR. Exits 77 (CTest: skipped) where clang++ is not installed (sh tools/setup.sh --test
# installs it).
# Usage: sh tests/build/clang_build.sh SOURCE_DIR BUILD_DIR
set -eu
src=${1:?usage: clang_build.sh SOURCE_DIR BUILD_DIR}
out=${2:?usage: clang_build.sh SOURCE_DIR BUILD_DIR}
if ! command -v clang++ >/dev/null 2>&1; then
  echo "clang_build: clang++ is not installed (sh tools/setup.sh --test installs it); skipped"
  exit 77
fi
clang++ --version | head -1
# -O0: this checks that Clang accepts the code and warns about nothing, not how fast it runs.
cmake -S "$src" -B "$out" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DMOESIM_CALIBRATE=OFF -DMOESIM_WERROR=ON > "$out.configure.log" 2>&1 || { cat "$out.configure.log"; exit 1; }
cmake --build "$out"
echo "clang_build: every target built with $(command -v clang++)"
