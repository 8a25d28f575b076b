// Fuzz target: the npy routing importer (traces/import_npy.cpp, traces/npy.cpp), into a trace held in memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("input.npy", data, size);
  fuzz::expect_clean([&] { traces::import_npy(path, fuzz::tiny_shape(), fuzz::memory_writer()); });
  fuzz::expect_clean([&] {
    traces::ImportOptions cut;
    cut.sequence_length = 3;
    traces::import_npy(path, fuzz::tiny_shape(), fuzz::memory_writer(), cut);
  });
  return 0;
}
