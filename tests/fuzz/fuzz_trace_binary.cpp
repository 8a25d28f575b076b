// Fuzz target: the binary trace reader (traces/format_binary.cpp): header, metadata, token records.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_traces.hpp"
#include "traces/format_binary.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("input.mtr", data, size);
  fuzz::expect_clean([&] { fuzz::drain(*traces::open_binary_trace(path)); });
  return 0;
}
