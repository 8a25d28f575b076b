// Fuzz target: the sglang-routed importer (traces/import_sglang.cpp, RoutedImporter): one SGLang
// /generate response (or a batched array of them) per JSON line, its meta_info.routed_experts as base64
// int32 or nested lists. Each input is imported twice into a trace held in memory: with no expert map
// (ids must be logical) and with the shipped physical -> logical map tests/data/traces/engines/
// sglang_expert_map.json (--expert-map; the map itself is not fuzzed), on the tiny test architecture
// (5 decoder layers).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("routed.jsonl", data, size);
  traces::ImportOptions options;
  options.decoder_layers = fuzz::tiny_decoder_layers();
  fuzz::expect_clean([&] { traces::import_sglang_routed(path, fuzz::tiny_shape(), fuzz::memory_writer(), options); });
  options.expert_map_path = std::string(MOESIM_FUZZ_DATA_DIR) + "/traces/engines/sglang_expert_map.json";
  fuzz::expect_clean([&] { traces::import_sglang_routed(path, fuzz::tiny_shape(), fuzz::memory_writer(), options); });
  return 0;
}
