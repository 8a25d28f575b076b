// The NumPy importer: a .npy integer array [tokens, layers] (top-1) or [tokens, layers, k], C order
// (FORMAT.md "npy"). The header is parsed by traces/npy.cpp (no NumPy); the data is read in chunks of tokens.
// The whole array is one sequence unless ImportOptions cuts it (fixed length or a lengths array).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"
#include "traces/npy.hpp"

namespace moesim::traces {

namespace {

// Sequence lengths from a 1-D integer .npy.
std::vector<std::uint64_t> read_lengths(const std::string& path, std::uint64_t tokens) {
  detail::FileCloser f(std::fopen(path.c_str(), "rb"));
  if (f.get() == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  detail::NpyArray a = detail::read_npy_header(path, f.get());
  if (a.shape.size() != 1)
    throw common::InputError(path + ": sequence lengths must be a 1-D array, got shape " +
                             detail::npy_shape_text(a.shape));
  std::vector<unsigned char> data(a.elements * a.item_bytes);
  if (fseeko(f.get(), static_cast<off_t>(a.data_offset), SEEK_SET) != 0 ||
      std::fread(data.data(), 1, data.size(), f.get()) != data.size())
    throw common::InputError(path + ": cannot read the data");
  std::vector<std::uint64_t> lengths;
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < a.elements; ++i) {
    const std::int64_t v = detail::npy_integer(data.data() + i * a.item_bytes, a);
    if (v < 1 || v > UINT32_MAX)
      throw common::InputError(path + ": byte offset " + std::to_string(a.data_offset + i * a.item_bytes) +
                               ": element " + std::to_string(i) + ": sequence length " + std::to_string(v) +
                               ", expected 1.." + std::to_string(UINT32_MAX));
    sum += static_cast<std::uint64_t>(v);
    lengths.push_back(static_cast<std::uint64_t>(v));
  }
  if (sum != tokens)
    throw common::InputError(path + ": the sequence lengths sum to " + std::to_string(sum) + ", but the routing array "
                             "holds " + std::to_string(tokens) + " tokens");
  return lengths;
}

}  // namespace

ImportReport import_npy(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                        const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 && !options.sequence_lengths_path.empty())
    throw common::UsageError("give --sequence-length or --sequence-lengths, not both");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw common::InputError(path + ": is a folder, expected a .npy file");
  detail::FileCloser f(std::fopen(path.c_str(), "rb"));
  if (f.get() == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  const detail::NpyArray a = detail::read_npy_header(path, f.get());
  if (a.shape.size() != 2 && a.shape.size() != 3)
    throw common::InputError(path + ": npy shape " + detail::npy_shape_text(a.shape) +
                             ": expected [tokens, layers] (top-1) or [tokens, layers, k]");
  const std::uint64_t tokens = a.shape[0];
  const std::size_t layers = shape.layers.size();
  const std::uint64_t k = a.shape.size() == 3 ? a.shape[2] : 1;
  if (a.shape[1] != layers)
    throw common::InputError(path + ": npy shape " + detail::npy_shape_text(a.shape) + ": " +
                             std::to_string(a.shape[1]) +
                             " layers, but " + shape.architecture + " has " + std::to_string(layers) +
                             " MoE layers (" + detail::layers_text(shape.layers) + ")");
  if (k == 0 || k > static_cast<std::uint64_t>(shape.top_k))
    throw common::InputError(path + ": npy shape " + detail::npy_shape_text(a.shape) + ": k = " + std::to_string(k) +
                             ", expected 1.." + std::to_string(shape.top_k) + " (top_k of " + shape.architecture + ")");
  if (tokens == 0) throw common::InputError(path + ": npy shape " + detail::npy_shape_text(a.shape) + ": no tokens");
  if (options.sequence_length > UINT32_MAX) throw common::UsageError("--sequence-length is too large");
  std::vector<std::uint64_t> lengths;
  if (!options.sequence_lengths_path.empty()) lengths = read_lengths(options.sequence_lengths_path, tokens);
  else if (options.sequence_length == 0 && tokens > UINT32_MAX)
    throw common::InputError(path + ": more than 2^32-1 tokens in one sequence; cut it with --sequence-length");

  TraceMeta meta;
  meta.shape = shape;
  meta.shape.top_k = static_cast<int>(k);
  meta.has_weights = false;
  meta.source = "npy import of " + detail::short_name(path) + " (moesim trace import --format npy)";
  ImportReport report;
  if (k < static_cast<std::uint64_t>(shape.top_k))
    report.notes.push_back("the array holds top-" + std::to_string(k) + " routing of a top-" +
                           std::to_string(shape.top_k) + " model: the trace has top_k = " + std::to_string(k));
  std::unique_ptr<TraceWriter> writer = make_writer(meta);

  TokenChecker checker(meta.shape, false);
  const std::size_t per = layers * k;
  const std::size_t chunk = std::max<std::size_t>(1, (std::size_t{1} << 20) / (per * a.item_bytes));
  std::vector<unsigned char> data;
  TokenBlock block;
  std::vector<std::uint16_t> ids(k);
  std::uint64_t sequence = 0, position = 0;
  std::size_t length_index = 0;
  if (fseeko(f.get(), static_cast<off_t>(a.data_offset), SEEK_SET) != 0)
    throw common::InputError(path + ": cannot seek to the data");
  for (std::uint64_t first = 0; first < tokens; first += chunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, tokens - first));
    data.resize(n * per * a.item_bytes);
    if (std::fread(data.data(), 1, data.size(), f.get()) != data.size())
      throw common::InputError(path + ": read error in the data");
    block.clear();
    block.experts.resize(n * per);
    for (std::size_t t = 0; t < n; ++t) {
      const std::uint64_t token = first + t;
      for (std::size_t l = 0; l < layers; ++l) {
        for (std::size_t j = 0; j < k; ++j) {
          const std::size_t e = (t * layers + l) * k + j;
          const std::int64_t v = detail::npy_integer(data.data() + e * a.item_bytes, a);
          if (v < 0 || v >= shape.num_experts)
            throw common::InputError(
                path + ": byte offset " + std::to_string(a.data_offset + ((token * layers + l) * k + j) * a.item_bytes) +
                ": element [" + std::to_string(token) + ", " + std::to_string(l) +
                (a.shape.size() == 3 ? ", " + std::to_string(j) : std::string()) + "] (token " +
                std::to_string(token) + ", MoE layer " + std::to_string(shape.layers[l]) + "): expert id " +
                std::to_string(v) + " is out of range, expected 0.." + std::to_string(shape.num_experts - 1));
          ids[j] = static_cast<std::uint16_t>(v);
        }
        std::string problem = checker.layer_problem(ids.data(), nullptr);
        if (!problem.empty())
          throw common::InputError(path + ": byte offset " +
                                   std::to_string(a.data_offset + (token * layers + l) * k * a.item_bytes) +
                                   ": elements [" + std::to_string(token) + ", " + std::to_string(l) + ", :] (token " +
                                   std::to_string(token) + ", MoE layer " + std::to_string(shape.layers[l]) +
                                   "): " + problem);
        std::copy(ids.begin(), ids.end(), block.experts.begin() + static_cast<std::ptrdiff_t>(t * per + l * k));
      }
      block.sequence.push_back(static_cast<std::uint32_t>(sequence));
      block.position.push_back(static_cast<std::uint32_t>(position));
      ++position;
      const bool end_of_sequence = !lengths.empty() ? position == lengths[length_index]
                                   : options.sequence_length != 0 ? position == options.sequence_length
                                                                  : false;
      if (end_of_sequence) {
        ++sequence;
        ++length_index;
        position = 0;
      }
    }
    writer->write(block);
  }
  writer->finish();
  report.tokens = tokens;
  report.sequences = position == 0 ? sequence : sequence + 1;
  report.meta = meta;
  report.meta.token_count = report.tokens;
  report.meta.sequence_count = report.sequences;
  return report;
}

}  // namespace moesim::traces
