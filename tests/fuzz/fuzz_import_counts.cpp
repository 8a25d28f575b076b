// Fuzz target: the per-step expert-count importer (traces/import_counts.cpp). Built three times, as
// import_counts_npy, _json and _csv: MOESIM_FUZZ_COUNTS_EXT is the extension that picks the input kind.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input(std::string("counts.") + MOESIM_FUZZ_COUNTS_EXT, data, size);
  fuzz::expect_clean([&] { traces::import_counts(path, fuzz::tiny_shape(), fuzz::load_memory_writer()); });
  return 0;
}
