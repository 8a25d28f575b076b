// Fuzz target: the JSONL routing importer (traces/import_jsonl.cpp), into a trace held in memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_support.hpp"
#include "tests/fuzz/fuzz_traces.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  const std::string path = fuzz::write_input("input.jsonl", data, size);
  fuzz::expect_clean([&] { traces::import_jsonl(path, fuzz::tiny_shape(), fuzz::memory_writer()); });
  fuzz::expect_clean([&] {
    traces::ImportOptions strict;
    strict.strict = true;
    traces::import_jsonl(path, fuzz::tiny_shape(), fuzz::memory_writer(), strict);
  });
  return 0;
}
