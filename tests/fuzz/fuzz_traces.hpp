// Trace helpers of the fuzz targets: the tiny test architecture's routing shape and decoder layers
// (tests/data/traces/tiny-dsv2.yaml, the shape of the seed inputs), writers that keep an import in memory,
// and a reader drain that touches every token.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "traces/import.hpp"
#include "traces/memory_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::fuzz {

inline const traces::TraceShape& tiny_shape() {
  static const traces::TraceShape shape =
      models::load_architecture(std::string(MOESIM_FUZZ_DATA_DIR) + "/traces/tiny-dsv2.yaml").trace_shape();
  return shape;
}

// Its decoder layers (Architecture::num_layers), as the engine importers take them (ImportOptions::decoder_layers).
inline int tiny_decoder_layers() {
  static const int layers =
      models::load_architecture(std::string(MOESIM_FUZZ_DATA_DIR) + "/traces/tiny-dsv2.yaml").num_layers;
  return layers;
}

// Each call's target lives until the next call (the fuzz targets run one input at a time).
inline traces::WriterFactory memory_writer() {
  static traces::MemoryTrace target;
  return [](const traces::TraceMeta& meta) {
    target = {};
    return traces::write_memory_trace(target, meta);
  };
}

// Counts are checked by the writer and then dropped.
class DiscardLoadWriter final : public traces::LoadTraceWriter {
 public:
  explicit DiscardLoadWriter(traces::TraceShape shape) : shape_(std::move(shape)) {}
  void write(const std::vector<std::uint32_t>& counts) override {
    std::uint64_t tokens = 0;
    const std::string problem = traces::load_problem(shape_, counts, tokens);
    if (!problem.empty()) throw common::InputError("load writer: " + problem);
  }
  void finish() override {}

 private:
  traces::TraceShape shape_;
};

inline traces::LoadWriterFactory load_memory_writer() {
  return [](const traces::LoadTraceMeta& meta) { return std::make_unique<DiscardLoadWriter>(meta.shape); };
}

// Reads every token (at most a million, so that a huge declared count cannot stall the fuzzer), then
// rewinds and reads the first block again.
inline void drain(traces::TraceReader& reader) {
  traces::TokenBlock block;
  std::uint64_t seen = 0;
  while (seen < 1'000'000 && reader.next(block)) seen += block.size();
  reader.rewind();
  reader.next(block);
}

}  // namespace moesim::fuzz
