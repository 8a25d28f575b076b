#include "traces/import_common.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/import.hpp"

namespace moesim::traces {

namespace detail {

std::string layers_text(const std::vector<int>& layers) {
  if (layers.empty()) return "none";
  bool contiguous = true;
  for (std::size_t i = 1; i < layers.size(); ++i) contiguous = contiguous && layers[i] == layers[i - 1] + 1;
  if (contiguous && layers.size() > 2) return std::to_string(layers.front()) + ".." + std::to_string(layers.back());
  std::vector<std::string> parts;
  for (int l : layers) parts.push_back(std::to_string(l));
  return common::join(parts, ", ");
}

std::string short_name(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

int layer_index(const TraceShape& shape, std::int64_t layer) {
  for (std::size_t i = 0; i < shape.layers.size(); ++i)
    if (shape.layers[i] == layer) return static_cast<int>(i);
  return -1;
}

std::optional<std::int64_t> parse_int(std::string_view text, std::string& why) {
  if (text.empty()) {
    why = "an empty field";
    return std::nullopt;
  }
  std::int64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    why = common::quoted(text) + ", which is out of range";
    return std::nullopt;
  }
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) {
    why = common::quoted(text) + ", which is not an integer";
    return std::nullopt;
  }
  return v;
}

std::optional<float> parse_weight(std::string_view text, std::string& why) {
  if (text.empty()) {
    why = "an empty field";
    return std::nullopt;
  }
  float v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size() || !std::isfinite(v)) {
    why = common::quoted(text) + ", which is not a finite number";
    return std::nullopt;
  }
  return v;
}

}  // namespace detail

const std::vector<std::string>& import_format_names() {
  static const std::vector<std::string> names = {"esft", "jsonl", "npy", "counts"};
  return names;
}

ImportFormat parse_import_format(std::string_view name) {
  if (name == "esft") return ImportFormat::kEsft;
  if (name == "jsonl") return ImportFormat::kJsonl;
  if (name == "npy") return ImportFormat::kNpy;
  if (name == "counts") return ImportFormat::kCounts;
  throw common::UsageError("unknown import format " + common::quoted(name) +
                           common::did_you_mean(name, import_format_names()) +
                           "; valid formats: " + common::join(import_format_names(), ", "));
}

std::string_view import_format_name(ImportFormat format) {
  switch (format) {
    case ImportFormat::kEsft: return "esft";
    case ImportFormat::kJsonl: return "jsonl";
    case ImportFormat::kNpy: return "npy";
    case ImportFormat::kCounts: return "counts";
  }
  return "?";
}

ImportReport import_trace(ImportFormat format, const std::string& input, const TraceShape& shape,
                          const WriterFactory& make_writer, const ImportOptions& options) {
  switch (format) {
    case ImportFormat::kEsft: return import_esft(input, shape, make_writer, options);
    case ImportFormat::kJsonl: return import_jsonl(input, shape, make_writer, options);
    case ImportFormat::kNpy: return import_npy(input, shape, make_writer, options);
    case ImportFormat::kCounts:
      throw common::UsageError("the counts format holds per-step expert counts, not routes: import it with "
                               "import_counts, which writes a load-only trace");
  }
  throw common::UsageError("unknown import format");
}

WriterFactory file_writer_factory(const std::string& path, Encoding encoding, bool overwrite) {
  return [path, encoding, overwrite](const TraceMeta& meta) {
    return create_trace_writer(path, meta, encoding, overwrite);
  };
}

LoadWriterFactory load_file_writer_factory(const std::string& path, bool overwrite) {
  return [path, overwrite](const LoadTraceMeta& meta) { return create_load_trace_writer(path, meta, overwrite); };
}

}  // namespace moesim::traces
