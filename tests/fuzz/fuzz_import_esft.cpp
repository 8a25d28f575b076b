// Fuzz target: the ESFT importer (traces/import_esft.cpp). The input is the folder's four layer files
// (expert_weights_1.txt .. _4.txt, the tiny test architecture's MoE layers 1..4) joined by 0x01 bytes; a
// fifth part, if any, becomes expert_weights_5.txt (a layer that is not an MoE layer).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const auto parts = fuzz::split_input(data, size, '\x01', 5);
  std::filesystem::remove_all(fuzz::scratch_dir() / "esft");
  for (std::size_t i = 0; i < parts.size(); ++i)
    fuzz::write_input("esft/expert_weights_" + std::to_string(i + 1) + ".txt",
                      reinterpret_cast<const std::uint8_t*>(parts[i].data()), parts[i].size());
  const std::string dir = (fuzz::scratch_dir() / "esft").string();
  fuzz::expect_clean([&] { traces::import_esft(dir, fuzz::tiny_shape(), fuzz::memory_writer()); });
  return 0;
}
