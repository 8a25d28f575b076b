#!/bin/bash
# Checksum throughput: MB/s of SHA-256 (common::Sha256, OpenSSL's libcrypto; and sha256_file on a file
# in the page cache) and CRC-32 (common::crc32, zlib's crc32_z, against a bytewise table loop), then
# the CPU seconds of two `moesim run` studies whose time they are part of.
#   bash bench/hash_bench.sh BUILD_DIR [--no-studies]
# The rates come from a small program compiled here against BUILD_DIR's libmoesim_common.a (no new
# target in the build); each is the best of 5 runs over 64 MiB (one cache-resident 1 MiB buffer 64
# times, as the callers feed 1 MiB reads and trace blocks), in process CPU time, so neighbours on a
# shared machine slow it less than they would wall time. Use a Release build.
set -euo pipefail
build=${1:?usage: bash bench/hash_bench.sh BUILD_DIR [--no-studies]}
studies=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/bench/lib.sh"
moesim="$build/sim/moesim"
lib="$build/common/libmoesim_common.a"
for f in "$moesim" "$lib"; do
  [ -e "$f" ] || { echo "missing $f: build the moesim target in $build" >&2; exit 2; }
done
[ -x /usr/bin/time ] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
cxx=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat > "$tmp/hash_rate.cpp" <<'CPP'
#include <array>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "common/hash.hpp"

namespace {

double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

template <typename F>
double best_mb_s(std::size_t bytes, F&& f) {
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double t0 = cpu_s();
    f();
    const double dt = cpu_s() - t0;
    if (dt > 0) best = std::max(best, static_cast<double>(bytes) / 1e6 / dt);
  }
  return best;
}

std::uint32_t crc32_bytewise(const unsigned char* p, std::size_t n, std::uint32_t seed) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = ~seed;
  for (std::size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xffu] ^ (c >> 8);
  return ~c;
}

void row(const char* what, double mb_s, const char* note) {
  if (mb_s > 0)
    std::printf("| %-44s | %9.0f | %s |\n", what, mb_s, note);
  else
    std::printf("| %-44s | %9s | %s |\n", what, "-", note);
}

}  // namespace

int main(int, char** argv) {
  const std::size_t chunk = std::size_t{1} << 20, repeats = 64, n = chunk * repeats;
  std::vector<unsigned char> data(chunk);
  std::mt19937_64 rng(1);
  for (auto& b : data) b = static_cast<unsigned char>(rng());
  volatile std::uint32_t sink = 0;
  std::string digest;
  // Each rate is taken before its note is chosen: the note compares the result the timing produced.
  std::printf("| checksum | MB/s | note |\n| --- | ---: | --- |\n");
  const double sha = best_mb_s(n, [&] {
    moesim::common::Sha256 s;
    for (std::size_t i = 0; i < repeats; ++i) s.update(data.data(), data.size());
    digest = s.hex_digest();
  });
  row("SHA-256 (common::Sha256, libcrypto)", sha, "measured, 64 x 1 MiB in memory");
  const std::size_t file_bytes = static_cast<std::size_t>(std::stoull(argv[2]));
  const double sha_file = best_mb_s(
      file_bytes, [&] { sink = static_cast<std::uint32_t>(moesim::common::sha256_file(argv[1]).size()); });
  row("sha256_file (page cache)", sha_file, "measured, the study's trace file");
  // Seeded chunk after chunk: the CRC of the 64 MiB stream.
  const auto crc_stream = [&](auto&& crc) {
    std::uint32_t c = 0;
    for (std::size_t i = 0; i < repeats; ++i) c = crc(data.data(), chunk, c);
    return c;
  };
  std::uint32_t want = 0, got = 0;
  const double crc_bytewise = best_mb_s(n, [&] { want = crc_stream(crc32_bytewise); });
  row("CRC-32, bytewise table loop", crc_bytewise, "measured, 64 x 1 MiB in memory");
  const auto zlib = [](const void* p, std::size_t size, std::uint32_t seed) {
    return moesim::common::crc32(p, size, seed);
  };
  const double crc_zlib = best_mb_s(n, [&] { got = crc_stream(zlib); });
  row("CRC-32 (common::crc32, zlib)", crc_zlib,
      got == want ? "measured; same value as bytewise" : "VALUE DIFFERS FROM BYTEWISE");
  return got == want && digest.size() == 64 ? 0 : 1;
}
CPP

"$cxx" -std=c++20 -O2 -DNDEBUG -I"$root" "$tmp/hash_rate.cpp" "$lib" -lcrypto -lz -o "$tmp/hash_rate"
export MOESIM_JOBS=1
"$moesim" trace generate --architecture deepseek-v2-lite --tokens 200000 --seed 1 -o "$tmp/dsv2.mtr" > /dev/null
nice "$tmp/hash_rate" "$tmp/dsv2.mtr" "$(stat -c %s "$tmp/dsv2.mtr")"
[ "$studies" = "--no-studies" ] && exit 0

study() {  # name architecture trace workload overlap-policy
  bench_study "$tmp/$1.yaml" "$1" "$2" h100-sxm-8gpu "$3" "$4" "$5"
}
cpu_row() {  # name label: best of 3 user + sys seconds of the whole `moesim run`
  local best=""
  for _ in 1 2 3; do
    /usr/bin/time -f "%U %S" -o "$tmp/cpu" "$moesim" run "$tmp/$1.yaml" -o "$tmp/$1.out" -q --force > /dev/null
    best=$(awk -v b="$best" '{s = $1 + $2; if (b == "" || s < b) b = s; print b}' "$tmp/cpu")
  done
  printf '| %-58s | %6.2f |\n' "$2" "$best"
}
"$moesim" trace generate --architecture mixtral-8x7b --tokens 300000 --seed 1 --zipf 1.0 --affinity 0.5 \
  -o "$tmp/mix.mtr" > /dev/null
study dsv2 deepseek-v2-lite "$tmp/dsv2.mtr" "{mode: prefill, tokens_per_step: 8192, steps: 20}" ideal
study mix mixtral-8x7b "$tmp/mix.mtr" "{mode: decode, batch_sequences: 64, steps: 100}" sequential
echo
echo "| study (MOESIM_JOBS=1, measured: GNU time user + sys, best of 3) | CPU s |"
echo "| --- | ---: |"
cpu_row dsv2 "DeepSeek-V2-Lite EP8, 8192-token prefill x 20 ($(($(stat -c %s "$tmp/dsv2.mtr") / 1000000)) MB trace)"
cpu_row mix "Mixtral-8x7B, decode 64 sequences x 100 ($(($(stat -c %s "$tmp/mix.mtr") / 1000000)) MB trace)"
