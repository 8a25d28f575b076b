// Fuzz target: the megatron-router-trace importer (traces/import_megatron.cpp): Megatron-Core's
// router_trace_rank{R}.jsonl, one router call (step, block, layer, top_indices) per line, grouped into
// forward passes, into a trace held in memory, on the tiny test architecture.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("router_trace_rank0.jsonl", data, size);
  traces::ImportOptions options;
  options.decoder_layers = fuzz::tiny_decoder_layers();
  fuzz::expect_clean(
      [&] { traces::import_megatron_router_trace(path, fuzz::tiny_shape(), fuzz::memory_writer(), options); });
  return 0;
}
