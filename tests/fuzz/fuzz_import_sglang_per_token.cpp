// Fuzz target: the sglang-per-token importer (traces/import_sglang.cpp, per_token): SGLang's per_token
// expert-distribution dump converted to JSON ("records" of forward passes, topk_ids_of_layer, positions,
// extend_seq_lens, last_physical_to_logical_map), into a trace held in memory, on the tiny test
// architecture (5 decoder layers).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("per_token.json", data, size);
  traces::ImportOptions options;
  options.decoder_layers = fuzz::tiny_decoder_layers();
  fuzz::expect_clean(
      [&] { traces::import_sglang_per_token(path, fuzz::tiny_shape(), fuzz::memory_writer(), options); });
  return 0;
}
