// Fuzz target: the vllm-eplb importer (traces/import_vllm.cpp): vLLM's EPLB state saved as JSON
// (expert_load_window or expert_load_pass, expert_load_window_step, physical_to_logical_map), folded to
// logical experts through the counts importer's checks into a load-only writer that checks and drops
// each iteration, on the tiny test architecture (5 decoder layers).
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("eplb_state.json", data, size);
  traces::ImportOptions options;
  options.decoder_layers = fuzz::tiny_decoder_layers();
  fuzz::expect_clean(
      [&] { traces::import_vllm_eplb(path, fuzz::tiny_shape(), options, fuzz::load_memory_writer()); });
  return 0;
}
