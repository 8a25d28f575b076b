// Fuzz target: the placement parser (sim/placement/placement.cpp) on a file, written back.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sim/placement/placement.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("placement.yaml", data, size);
  fuzz::expect_clean([&] { (void)sim::placement_to_yaml(sim::load_placement(path)); });
  return 0;
}
