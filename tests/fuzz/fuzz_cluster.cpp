// Fuzz target: the cluster parser (models/cluster.cpp) on a file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/cluster.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("cluster.yaml", data, size);
  fuzz::expect_clean([&] { (void)models::load_cluster(path); });
  return 0;
}
