// Fuzz target: the load-only trace reader (traces/load_trace.cpp): per-iteration expert counts.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.hpp"
#include "traces/load_trace.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("input.mlt", data, size);
  fuzz::expect_clean([&] {
    auto reader = traces::open_load_trace(path);
    std::vector<std::uint32_t> counts;
    for (int i = 0; i < 100000 && reader->next(counts); ++i) {
    }
    reader->rewind();
    reader->next(counts);
  });
  return 0;
}
