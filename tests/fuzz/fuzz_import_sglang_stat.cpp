// Fuzz target: the sglang-stat importer (traces/import_sglang.cpp, import_sglang_stat): SGLang's
// stat-mode dump converted to JSON (logical_count, passes x layers x experts), through the counts
// importer's checks into a load-only writer that checks and drops each iteration, on the tiny test
// architecture (5 decoder layers).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("stat.json", data, size);
  fuzz::expect_clean([&] {
    traces::import_sglang_stat(path, fuzz::tiny_shape(), fuzz::tiny_decoder_layers(), fuzz::load_memory_writer());
  });
  return 0;
}
