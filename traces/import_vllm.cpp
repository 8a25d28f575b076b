// vLLM's EPLB expert load (FORMAT.md "vllm-eplb"), from the public vllm-project/vllm source
// vllm/distributed/eplb/eplb_state.py (EplbState / EplbModelState: expert_load_pass
// [num_moe_layers][num_physical_experts], the tokens this rank sent to each physical expert in one
// forward pass, and expert_load_window [window][num_moe_layers][num_physical_experts], the last passes in
// a circular buffer at expert_load_window_step; physical_to_logical_map [num_moe_layers][physical]).
// vLLM keeps them in GPU memory and logs only a balancedness figure, so the input is the state's tensors
// saved as JSON by the user (FORMAT.md gives the line). Counts are folded to logical experts and written
// as a load-only trace through the counts importer's checks.
#include <algorithm>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/files.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {
using nlohmann::json;
}  // namespace

CountsImportReport import_vllm_eplb(const std::string& path, const TraceShape& shape, const ImportOptions& options,
                                    const LoadWriterFactory& make_writer) {
  validate_shape(shape, "architecture " + shape.architecture);
  const std::string text = common::read_file(path);
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
    throw common::InputError(path + ": not valid JSON (" + e.what() +
                             "); expected vLLM's EPLB state saved as JSON "
                             "({\"expert_load_window\": ..., \"physical_to_logical_map\": ...})");
  }
  if (!doc.is_object())
    throw common::InputError(path + ": expected a JSON object with \"expert_load_window\" or \"expert_load_pass\"");
  json passes;
  std::size_t start = 0;  // the oldest pass of the circular window
  if (doc.contains("expert_load_window")) {
    // Moved, never copied: copying a JSON value recurses once per level of nesting, and a file may
    // nest deeper than the stack allows (the parser and the destructor do not recurse).
    passes = std::move(doc.at("expert_load_window"));
    if (doc.contains("expert_load_window_step")) {
      const json& s = doc.at("expert_load_window_step");
      if (!s.is_number_integer() || s.get<std::int64_t>() < 0 ||
          (passes.is_array() && s.get<std::size_t>() >= std::max<std::size_t>(passes.size(), 1)))
        throw common::InputError(path + ": \"expert_load_window_step\": expected an index into the window, got " +
                                 json_shown(s));
      start = s.get<std::size_t>();
    }
  } else if (doc.contains("expert_load_pass")) {
    passes = json::array();
    passes.push_back(std::move(doc.at("expert_load_pass")));
  } else {
    throw common::InputError(path +
                             ": no \"expert_load_window\" (window x MoE layers x physical experts) nor "
                             "\"expert_load_pass\" (MoE layers x physical experts)");
  }
  if (!passes.is_array() || passes.empty() || !passes[0].is_array() || passes[0].empty() || !passes[0][0].is_array())
    throw common::InputError(path + ": expected the load as nested arrays passes x layers x physical experts, got " +
                             json_shown(passes));
  const std::size_t axis = passes[0].size();
  const std::size_t physical = passes[0][0].size();
  const auto axis_of = detail::layer_axis(shape, axis, options.decoder_layers, path + ": expert_load_window[0]");
  detail::ExpertMap map;
  if (!options.expert_map_path.empty())
    map = detail::load_expert_map(options.expert_map_path, shape.num_experts);
  else if (doc.contains("physical_to_logical_map"))
    map = detail::ExpertMap(doc.at("physical_to_logical_map"), shape.num_experts, path + ": physical_to_logical_map");
  if (!map.empty()) {
    map.check_rows(axis, path);
    if (map.physical_slots() != physical)
      throw common::InputError(path + ": the load has " + std::to_string(physical) +
                               " physical experts, but the "
                               "physical -> logical map has " +
                               std::to_string(map.physical_slots()) + " slots");
  } else if (physical != static_cast<std::size_t>(shape.num_experts)) {
    throw common::InputError(path + ": " + std::to_string(physical) + " physical experts but " + shape.architecture +
                             " has " + std::to_string(shape.num_experts) +
                             " logical experts and no physical -> "
                             "logical map was given: save physical_to_logical_map with the load, or pass --expert-map");
  }
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  std::size_t i = 0;
  auto next = [&](std::vector<std::uint32_t>& out, std::string& where) {
    if (i >= passes.size()) return false;
    const std::size_t p = (start + i) % passes.size();
    const std::string at = path + ": expert_load_window[" + std::to_string(p) + "]";
    where = at + " (pass " + std::to_string(i) + " from the oldest)";
    const json& pass = passes[p];
    if (!pass.is_array() || pass.size() != axis)
      throw common::InputError(at + ": expected " + std::to_string(axis) + " layers (as in pass 0), got " +
                               json_shown(pass));
    std::fill(out.begin(), out.end(), 0);
    for (std::size_t l = 0; l < axis_of.size(); ++l) {
      const json& row = pass[axis_of[l]];
      const std::string at_l = at + "[" + std::to_string(axis_of[l]) + "]";
      if (!row.is_array() || row.size() != physical)
        throw common::InputError(at_l + ": expected " + std::to_string(physical) + " physical expert counts, got " +
                                 json_shown(row));
      for (std::size_t e = 0; e < physical; ++e) {
        const json& v = row[e];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
          throw common::InputError(at_l + "[" + std::to_string(e) + "]: expected a count >= 0, got " + json_shown(v));
        const std::size_t logical =
            map.empty() ? e : static_cast<std::size_t>(map.logical(axis_of[l], static_cast<std::int64_t>(e)));
        const std::uint64_t sum = out[l * experts + logical] + v.get<std::uint64_t>();
        if (sum > std::numeric_limits<std::uint32_t>::max())
          throw common::InputError(at_l + "[" + std::to_string(e) + "]: the count is out of range 0..4294967295");
        out[l * experts + logical] = static_cast<std::uint32_t>(sum);
      }
    }
    ++i;
    return true;
  };
  std::uint64_t empty = 0;
  CountsImportReport report = detail::write_count_iterations(
      path, shape, make_writer, "vllm-eplb",
      "vllm-eplb import of " + detail::short_name(path) + " (moesim trace import --format vllm-eplb)", next, &empty);
  if (empty > 0)
    report.notes.push_back(std::to_string(empty) +
                           " passes without tokens skipped (unfilled window slots or "
                           "dummy passes)");
  if (map.empty()) report.notes.push_back("no physical -> logical map: physical experts taken as logical");
  report.notes.push_back(
      "one rank's load: the tokens that rank dispatched (sum the ranks' files for the whole "
      "batch)");
  return report;
}

}  // namespace moesim::traces
