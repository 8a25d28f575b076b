// TensorRT-LLM's expert statistic (FORMAT.md "trtllm-expert-statistic"), from the public NVIDIA/TensorRT-LLM
// source tensorrt_llm/_torch/expert_statistic.py (ExpertStatistic._maybe_add_info and _write; enabled with
// EXPERT_STATISTIC_ITER_RANGE=A-B, written to EXPERT_STATISTIC_PATH): meta_info.json ({"num_experts",
// "num_experts_per_token"}, from rank 0) and one rank{R}.safetensors per rank whose tensors, named
// "{iteration}_{layer}", are the per-expert token counts (torch.bincount, int64) of that iteration and
// layer. Safetensors is read directly (an 8-byte header length, a JSON header, raw little-endian data).
// Iterations become a load-only trace through the counts importer's checks.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/files.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// iteration -> MoE layer position -> counts (num_experts of the file)
using Records = std::map<std::int64_t, std::map<std::size_t, std::vector<std::uint64_t>>>;

void read_safetensors(const std::string& path, const TraceShape& shape, std::size_t slots, Records& records) {
  const std::string bytes = common::read_file(path);
  if (bytes.size() < 8) throw common::InputError(path + ": too short for a safetensors file (no header length)");
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<unsigned char>(bytes[static_cast<std::size_t>(i)]);
  if (header_len > bytes.size() - 8)
    throw common::InputError(path + ": safetensors header length " + std::to_string(header_len) +
                             " runs past the end of the file (" + std::to_string(bytes.size()) + " bytes)");
  json header;
  try {
    header = json::parse(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
    throw common::InputError(path + ": the safetensors header is not valid JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw common::InputError(path + ": the safetensors header is not a JSON object");
  const std::size_t data = 8 + static_cast<std::size_t>(header_len);
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    const std::string at = path + ": tensor \"" + name + "\"";
    const auto sep = name.find('_');
    std::string why;
    const auto iter = sep == std::string::npos ? std::nullopt : detail::parse_int(name.substr(0, sep), why);
    const auto layer = sep == std::string::npos ? std::nullopt : detail::parse_int(name.substr(sep + 1), why);
    if (!iter || !layer)
      throw common::InputError(at + ": expected a name \"ITERATION_LAYER\" (as ExpertStatistic writes)");
    const int li = detail::layer_index(shape, *layer);
    if (li < 0)
      throw common::InputError(at + ": layer " + std::to_string(*layer) + " is not an MoE layer of " +
                               shape.architecture + " (" + detail::layers_text(shape.layers) +
                               "); pass the architecture the statistic was recorded on");
    if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
      throw common::InputError(at + ": expected \"dtype\", \"shape\" and \"data_offsets\", got " + json_shown(info));
    const std::string dtype = info["dtype"].is_string() ? info["dtype"].get<std::string>() : "";
    const std::size_t width = dtype == "I64" ? 8 : dtype == "I32" ? 4 : 0;
    if (width == 0) throw common::InputError(at + ": dtype " + json_shown(info["dtype"]) + ", expected I64 or I32");
    const json& sh = info["shape"];
    if (!sh.is_array() || sh.size() != 1 || !sh[0].is_number_unsigned() || sh[0].get<std::size_t>() != slots)
      throw common::InputError(at + ": shape " + json_shown(sh) + ", expected [" + std::to_string(slots) +
                               "] (num_experts of meta_info.json, or the architecture's experts)");
    const json& off = info["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned() ||
        off[1].get<std::uint64_t>() < off[0].get<std::uint64_t>() ||
        off[1].get<std::uint64_t>() - off[0].get<std::uint64_t>() != slots * width ||
        off[1].get<std::uint64_t>() > bytes.size() - data)
      throw common::InputError(at + ": data_offsets " + json_shown(off) + " do not hold " + std::to_string(slots) +
                               " values of " + dtype + " inside the file");
    auto& counts = records[*iter][static_cast<std::size_t>(li)];
    counts.resize(slots, 0);
    const char* p = bytes.data() + data + off[0].get<std::size_t>();
    for (std::size_t e = 0; e < slots; ++e) {
      std::int64_t v = 0;
      if (width == 8) {
        std::uint64_t u = 0;
        for (int b = 7; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(p[e * 8 + static_cast<std::size_t>(b)]);
        v = static_cast<std::int64_t>(u);
      } else {
        std::uint32_t u = 0;
        for (int b = 3; b >= 0; --b) u = (u << 8) | static_cast<unsigned char>(p[e * 4 + static_cast<std::size_t>(b)]);
        v = static_cast<std::int32_t>(u);
      }
      if (v < 0)
        throw common::InputError(at + ": value " + std::to_string(e) + " is negative (" + std::to_string(v) + ")");
      // Kept within 0..4294967295 (the trace's range) so that tensors of one iteration and layer (from
      // several ranks, or names such as "1_1" and "01_1") cannot wrap the sum.
      if (static_cast<std::uint64_t>(v) > 0xffffffffULL - counts[e])
        throw common::InputError(at + ": value " + std::to_string(e) + " brings the count of iteration " +
                                 std::to_string(*iter) + ", layer " + std::to_string(*layer) +
                                 " out of range 0..4294967295");
      counts[e] += static_cast<std::uint64_t>(v);
    }
  }
}

}  // namespace

CountsImportReport import_trtllm_expert_statistic(const std::string& path, const TraceShape& shape,
                                                  const ImportOptions& options, const LoadWriterFactory& make_writer) {
  validate_shape(shape, "architecture " + shape.architecture);
  std::error_code ec;
  std::vector<std::string> files;
  fs::path folder;
  if (fs::is_directory(path, ec)) {
    folder = path;
    for (const auto& entry : fs::directory_iterator(path, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.starts_with("rank") && name.ends_with(".safetensors")) files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw common::InputError(path +
                               ": no rank*.safetensors in the folder (EXPERT_STATISTIC_PATH of a run with "
                               "EXPERT_STATISTIC_ITER_RANGE set)");
  } else {
    if (!fs::exists(path, ec)) throw common::InputError(path + ": no such file or folder");
    files.push_back(path);
    folder = fs::path(path).parent_path();
  }
  std::size_t slots = static_cast<std::size_t>(shape.num_experts);
  const fs::path meta_path = folder / "meta_info.json";
  if (fs::exists(meta_path, ec)) {
    json meta;
    try {
      meta = json::parse(common::read_file(meta_path));
    } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
      throw common::InputError(meta_path.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (meta.contains("num_experts_per_token") &&
        meta["num_experts_per_token"] != json(static_cast<std::int64_t>(shape.top_k)))
      throw common::InputError(meta_path.string() + ": num_experts_per_token " +
                               json_shown(meta["num_experts_per_token"]) + ", but " + shape.architecture +
                               " routes top_k = " + std::to_string(shape.top_k) +
                               "; pass the architecture the statistic was recorded on");
    if (meta.contains("num_experts")) {
      if (!meta["num_experts"].is_number_unsigned() || meta["num_experts"].get<std::size_t>() == 0)
        throw common::InputError(meta_path.string() + ": num_experts: expected a positive integer, got " +
                                 json_shown(meta["num_experts"]));
      slots = meta["num_experts"].get<std::size_t>();
    }
  }
  detail::ExpertMap map;
  if (!options.expert_map_path.empty()) {
    map = detail::load_expert_map(options.expert_map_path, shape.num_experts);
    if (map.physical_slots() != slots)
      throw common::InputError(options.expert_map_path + ": the map has " + std::to_string(map.physical_slots()) +
                               " slots, but the statistic counts " + std::to_string(slots));
  } else if (slots != static_cast<std::size_t>(shape.num_experts)) {
    throw common::InputError(meta_path.string() + ": num_experts " + std::to_string(slots) + ", but " +
                             shape.architecture + " has " + std::to_string(shape.num_experts) +
                             " experts: the counts are per load-balancer slot; pass the slot -> expert map with "
                             "--expert-map");
  }
  Records records;
  for (const auto& f : files) read_safetensors(f, shape, slots, records);
  if (records.empty()) throw common::InputError(path + ": no expert statistic tensors");
  if (!map.empty()) map.check_rows(shape.layers.size(), options.expert_map_path);
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  auto it = records.begin();
  auto next = [&](std::vector<std::uint32_t>& out, std::string& where) {
    if (it == records.end()) return false;
    where = path + ": iteration " + std::to_string(it->first);
    std::fill(out.begin(), out.end(), 0);
    for (std::size_t l = 0; l < shape.layers.size(); ++l) {
      auto found = it->second.find(l);
      if (found == it->second.end())
        throw common::InputError(where + ": no tensor \"" + std::to_string(it->first) + "_" +
                                 std::to_string(shape.layers[l]) + "\" (MoE layer " + std::to_string(shape.layers[l]) +
                                 "); every recorded iteration needs every MoE layer");
      for (std::size_t s = 0; s < slots; ++s) {
        const std::size_t e = map.empty() ? s : static_cast<std::size_t>(map.logical(l, static_cast<std::int64_t>(s)));
        const std::uint64_t sum = out[l * experts + e] + found->second[s];
        if (sum > 0xffffffffULL) throw common::InputError(where + ": a count is out of range 0..4294967295");
        out[l * experts + e] = static_cast<std::uint32_t>(sum);
      }
    }
    ++it;
    return true;
  };
  std::uint64_t empty = 0;
  CountsImportReport report =
      detail::write_count_iterations(path, shape, make_writer, "trtllm-expert-statistic",
                                     "trtllm-expert-statistic import of " + detail::short_name(path) +
                                         " (moesim trace import --format trtllm-expert-statistic)",
                                     next, &empty);
  if (files.size() > 1)
    report.notes.push_back("summed over " + std::to_string(files.size()) +
                           " rank files: where ranks saw the same "
                           "tokens (no attention data parallelism), import one rank's file instead");
  if (empty > 0) report.notes.push_back(std::to_string(empty) + " iterations without tokens skipped");
  return report;
}

}  // namespace moesim::traces
