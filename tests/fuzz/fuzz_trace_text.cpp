// Fuzz target: the text trace reader (traces/format_text.cpp): metadata line and token lines.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_traces.hpp"
#include "traces/format_text.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("input.txt", data, size);
  fuzz::expect_clean([&] { fuzz::drain(*traces::open_text_trace(path)); });
  return 0;
}
