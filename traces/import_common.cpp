#include "traces/import_common.hpp"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <system_error>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
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

std::vector<std::size_t> layer_axis(const TraceShape& shape, std::size_t axis_size, int decoder_layers,
                                    const std::string& where) {
  std::vector<std::size_t> at(shape.layers.size());
  if (decoder_layers > 0 && axis_size == static_cast<std::size_t>(decoder_layers)) {
    for (std::size_t l = 0; l < at.size(); ++l) at[l] = static_cast<std::size_t>(shape.layers[l]);
    return at;
  }
  if (axis_size == shape.layers.size()) {
    for (std::size_t l = 0; l < at.size(); ++l) at[l] = l;
    return at;
  }
  throw common::InputError(where + ": a layer axis of " + std::to_string(axis_size) + " entries, but " +
                           shape.architecture + " has " + std::to_string(decoder_layers) + " decoder layers and " +
                           std::to_string(shape.layers.size()) + " MoE layers (" + layers_text(shape.layers) +
                           "); pass the architecture the routing was recorded on");
}

ExpertMap::ExpertMap(const nlohmann::json& doc, int num_experts, const std::string& where) {
  if (!doc.is_array() || doc.empty())
    throw common::InputError(where + ": expected the physical -> logical expert map as a non-empty array (one row "
                             "per layer, or one row for all), got " + json_shown(doc));
  const bool one_row = !doc.front().is_array();
  const std::size_t rows = one_row ? 1 : doc.size();
  for (std::size_t r = 0; r < rows; ++r) {
    const nlohmann::json& row = one_row ? doc : doc[r];
    const std::string at = where + ": physical_to_logical_map[" + std::to_string(r) + "]";
    if (!row.is_array() || row.empty())
      throw common::InputError(at + ": expected an array of logical expert ids, got " + json_shown(row));
    if (!rows_.empty() && row.size() != rows_.front().size())
      throw common::InputError(at + ": " + std::to_string(row.size()) + " physical slots, but row 0 has " +
                               std::to_string(rows_.front().size()) + "; every layer has the same slots");
    std::vector<int> ids(row.size());
    for (std::size_t p = 0; p < row.size(); ++p) {
      const nlohmann::json& v = row[p];
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= num_experts)
        throw common::InputError(at + "[" + std::to_string(p) + "]: expected a logical expert id 0.." +
                                 std::to_string(num_experts - 1) + ", got " + json_shown(v) +
                                 " (is the map for this architecture?)");
      ids[p] = static_cast<int>(v.get<std::int64_t>());
    }
    rows_.push_back(std::move(ids));
  }
}

void ExpertMap::check_rows(std::size_t axis_size, const std::string& where) const {
  if (rows_.size() != 1 && rows_.size() != axis_size)
    throw common::InputError(where + ": the physical -> logical expert map has " + std::to_string(rows_.size()) +
                             " rows, but the routing has " + std::to_string(axis_size) +
                             " layers; give one row per layer (or one row for all)");
}

int ExpertMap::logical(std::size_t axis_layer, std::int64_t physical) const {
  const auto& row = rows_.size() == 1 ? rows_.front() : rows_[axis_layer];
  if (physical < 0 || static_cast<std::size_t>(physical) >= row.size()) return -1;
  return row[static_cast<std::size_t>(physical)];
}

ExpertMap load_expert_map(const std::string& path, int num_experts) {
  const std::string text = common::read_file(path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // bad syntax, or a number too large (out_of_range)
    throw common::InputError(path + ": not valid JSON: " + e.what());
  }
  if (doc.is_object()) {
    for (const char* key : {"physical_to_logical_map", "last_physical_to_logical_map"})
      if (doc.contains(key)) return ExpertMap(doc[key], num_experts, path);
    throw common::InputError(path + ": the JSON object has no \"physical_to_logical_map\"; expected that key or a "
                             "bare array (layers x physical slots) of logical expert ids");
  }
  return ExpertMap(doc, num_experts, path);
}

}  // namespace detail

const std::vector<std::string>& import_format_names() {
  static const std::vector<std::string> names = {"esft",          "jsonl",           "npy",        "counts",
                                                 "sglang-routed", "sglang-per-token", "sglang-stat",
                                                 "megatron-router-trace", "vllm-eplb",
                                                 "trtllm-expert-statistic"};
  return names;
}

bool is_load_only_format(ImportFormat format) {
  return format == ImportFormat::kCounts || format == ImportFormat::kSglangStat || format == ImportFormat::kVllmEplb ||
         format == ImportFormat::kTrtllmExpertStatistic;
}

ImportFormat parse_import_format(std::string_view name) {
  if (name == "esft") return ImportFormat::kEsft;
  if (name == "jsonl") return ImportFormat::kJsonl;
  if (name == "npy") return ImportFormat::kNpy;
  if (name == "counts") return ImportFormat::kCounts;
  if (name == "sglang-routed") return ImportFormat::kSglangRouted;
  if (name == "sglang-per-token") return ImportFormat::kSglangPerToken;
  if (name == "sglang-stat") return ImportFormat::kSglangStat;
  if (name == "megatron-router-trace") return ImportFormat::kMegatronRouterTrace;
  if (name == "vllm-eplb") return ImportFormat::kVllmEplb;
  if (name == "trtllm-expert-statistic") return ImportFormat::kTrtllmExpertStatistic;
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
    case ImportFormat::kSglangRouted: return "sglang-routed";
    case ImportFormat::kSglangPerToken: return "sglang-per-token";
    case ImportFormat::kSglangStat: return "sglang-stat";
    case ImportFormat::kMegatronRouterTrace: return "megatron-router-trace";
    case ImportFormat::kVllmEplb: return "vllm-eplb";
    case ImportFormat::kTrtllmExpertStatistic: return "trtllm-expert-statistic";
  }
  return "?";
}

ImportReport import_trace(ImportFormat format, const std::string& input, const TraceShape& shape,
                          const WriterFactory& make_writer, const ImportOptions& options) {
  switch (format) {
    case ImportFormat::kEsft: return import_esft(input, shape, make_writer, options);
    case ImportFormat::kJsonl: return import_jsonl(input, shape, make_writer, options);
    case ImportFormat::kNpy: return import_npy(input, shape, make_writer, options);
    case ImportFormat::kSglangRouted: return import_sglang_routed(input, shape, make_writer, options);
    case ImportFormat::kSglangPerToken: return import_sglang_per_token(input, shape, make_writer, options);
    case ImportFormat::kMegatronRouterTrace: return import_megatron_router_trace(input, shape, make_writer, options);
    case ImportFormat::kCounts:
    case ImportFormat::kSglangStat:
    case ImportFormat::kVllmEplb:
    case ImportFormat::kTrtllmExpertStatistic:
      throw common::UsageError("the " + std::string(import_format_name(format)) + " format holds per-step expert "
                               "counts, not routes: import it with import_load_only, which writes a load-only trace");
  }
  throw common::UsageError("unknown import format");
}

CountsImportReport import_load_only(ImportFormat format, const std::string& path, const TraceShape& shape,
                                    const ImportOptions& options, const LoadWriterFactory& make_writer) {
  if (format == ImportFormat::kCounts) return import_counts(path, shape, make_writer);
  if (format == ImportFormat::kSglangStat)
    return import_sglang_stat(path, shape, options.decoder_layers, make_writer);
  if (format == ImportFormat::kVllmEplb) return import_vllm_eplb(path, shape, options, make_writer);
  if (format == ImportFormat::kTrtllmExpertStatistic)
    return import_trtllm_expert_statistic(path, shape, options, make_writer);
  throw common::UsageError("the " + std::string(import_format_name(format)) +
                           " format holds per-token routes: import it with import_trace");
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
