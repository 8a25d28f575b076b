// Fuzz target: the trtllm-expert-statistic importer (traces/import_trtllm.cpp) on an EXPERT_STATISTIC_PATH
// folder. The input is the folder's meta_info.json, a 0x01 byte, then rank0.safetensors (split at the first
// 0x01 only: the safetensors part is binary and keeps any later 0x01 bytes). An empty first part writes no
// meta_info.json (the architecture's experts are taken); an input without 0x01 gives a folder with no
// safetensors file. Seeds are written at configure time from tests/data/traces/engines/
// trtllm_expert_statistic (with and without its meta_info.json). Load-only iterations go to a writer that
// checks and drops them, on the tiny test architecture.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const auto parts = fuzz::split_input(data, size, '\x01', 2);
  std::filesystem::remove_all(fuzz::scratch_dir() / "trtllm");
  std::filesystem::create_directories(fuzz::scratch_dir() / "trtllm");
  if (!parts[0].empty())
    fuzz::write_input("trtllm/meta_info.json", reinterpret_cast<const std::uint8_t*>(parts[0].data()),
                      parts[0].size());
  if (parts.size() > 1)
    fuzz::write_input("trtllm/rank0.safetensors", reinterpret_cast<const std::uint8_t*>(parts[1].data()),
                      parts[1].size());
  const std::string dir = (fuzz::scratch_dir() / "trtllm").string();
  traces::ImportOptions options;
  options.decoder_layers = fuzz::tiny_decoder_layers();
  fuzz::expect_clean([&] {
    traces::import_trtllm_expert_statistic(dir, fuzz::tiny_shape(), options, fuzz::load_memory_writer());
  });
  return 0;
}
