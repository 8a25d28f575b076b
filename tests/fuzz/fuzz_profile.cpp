// Fuzz target: the GPU profile parser (models/profile.cpp) on a file, bases merged, written back.
#include <cstddef>
#include <cstdint>
#include <string>

#include "models/profile.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("profile.yaml", data, size);
  fuzz::expect_clean([&] { (void)models::profile_to_yaml(models::load_profile(path)); });
  return 0;
}
