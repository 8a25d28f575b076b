// Fuzz target: the architecture parser (models/architecture.cpp) on a file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/architecture.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("architecture.yaml", data, size);
  fuzz::expect_clean([&] { (void)models::load_architecture(path).trace_shape(); });
  return 0;
}
