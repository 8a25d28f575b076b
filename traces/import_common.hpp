// Helpers shared by the importers (internal to traces/): layer-list text for messages, the input's
// short name for a trace's `source`, strict integer and number parsing of text fields, and what the
// serving-engine importers share: the layer axis of an engine's arrays, base64, a physical -> logical
// expert map, and a way into the counts importer's checks for per-step counts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "traces/import.hpp"
#include "traces/trace.hpp"

namespace moesim::traces::detail {

// "1..26" for a contiguous list, else "0, 3, 7".
std::string layers_text(const std::vector<int>& layers);
// The last component of a path, without a trailing slash ("deepseek-v2-lite-intent").
std::string short_name(const std::string& path);
// Index of decoder layer `layer` in `shape.layers`, or -1.
int layer_index(const TraceShape& shape, std::int64_t layer);

// A whole text field as an integer; nullopt with `why` set when it is not one (or out of int64).
std::optional<std::int64_t> parse_int(std::string_view text, std::string& why);
// A whole text field as a finite float; nullopt with `why` set otherwise.
std::optional<float> parse_weight(std::string_view text, std::string& why);

// Where each MoE layer of `shape` sits on an engine array's layer axis of `axis_size` entries: the
// axis is either every decoder layer (`decoder_layers` of them, the MoE layers at their decoder
// index; dense layers ignored) or only the MoE layers, in order. Throws InputError (`where`) otherwise.
std::vector<std::size_t> layer_axis(const TraceShape& shape, std::size_t axis_size, int decoder_layers,
                                    const std::string& where);

// Standard base64 (RFC 4648, '=' padding) to bytes; InputError naming `where` and the offset.
std::vector<unsigned char> base64_decode(std::string_view text, const std::string& where);

// Physical expert slot -> logical expert, per entry of a layer axis (redundant experts of expert-parallel
// load balancing occupy extra slots). Empty: the ids are logical already.
class ExpertMap {
 public:
  ExpertMap() = default;
  // `doc`: rows x physical slots (one row per layer-axis entry) or one row for every layer; each value
  // a logical id 0..num_experts-1. `where` names the file for messages.
  ExpertMap(const nlohmann::json& doc, int num_experts, const std::string& where);
  bool empty() const { return rows_.empty(); }
  // Rows must be 1 or `axis_size`; InputError (`where`) otherwise.
  void check_rows(std::size_t axis_size, const std::string& where) const;
  std::size_t physical_slots() const { return rows_.empty() ? 0 : rows_.front().size(); }
  // The logical id of `physical` at axis entry `axis_layer`, or -1 when the slot is out of the map.
  int logical(std::size_t axis_layer, std::int64_t physical) const;

 private:
  std::vector<std::vector<int>> rows_;
};
// An ExpertMap from a JSON file: a nested array, or an object with "physical_to_logical_map" (or
// "last_physical_to_logical_map") holding one.
ExpertMap load_expert_map(const std::string& path, int num_experts);

// Per-step counts from an engine format through the counts importer's checks (import_counts.cpp):
// `next(counts, where)` fills one iteration ([MoE layer][expert], shape.layers x num_experts) and a
// description of it for messages, and returns false at the end. An all-zero iteration is skipped
// and counted in `skipped_empty`.
CountsImportReport write_count_iterations(
    const std::string& path, const TraceShape& shape, const LoadWriterFactory& make_writer,
    const std::string& input_kind, const std::string& source,
    const std::function<bool(std::vector<std::uint32_t>& counts, std::string& where)>& next,
    std::uint64_t* skipped_empty = nullptr);

}  // namespace moesim::traces::detail
