// Helpers shared by the importers (internal to traces/): layer-list text for messages, the input's
// short name for a trace's `source`, strict integer and number parsing of text fields, and what the
// serving-engine importers share: the layer axis of an engine's arrays, base64, a physical -> logical
// expert map, and a way into the counts importer's checks for per-step counts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "traces/format_common.hpp"
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

// Tokens of one sequence at a time, checked and handed to the writer (created at the first token).
class RouteSink {
 public:
  RouteSink(const TraceShape& shape, const WriterFactory& make_writer, std::string source)
      : shape_(shape), make_writer_(make_writer), checker_(shape, false), per_(ids_per_token(shape)) {
    meta_.shape = shape;
    meta_.source = std::move(source);
  }

  std::size_t per_token() const { return per_; }

  // One token: `ids` holds layers x top_k logical ids. `where` is built only for a message.
  template <typename Where>
  void token(std::uint32_t position, const std::uint16_t* ids, const Where& where) {
    const auto k = static_cast<std::size_t>(shape_.top_k);
    for (std::size_t l = 0; l < shape_.layers.size(); ++l)
      if (std::string p = checker_.layer_problem(ids + l * k, nullptr); !p.empty())
        throw common::InputError(where() + ": MoE layer " + std::to_string(shape_.layers[l]) + ": " + p);
    if (!block_.position.empty() && position <= block_.position.back())
      throw common::InputError(where() + ": position " + std::to_string(position) + " follows position " +
                               std::to_string(block_.position.back()) +
                               " in the same sequence; positions must increase");
    block_.sequence.push_back(static_cast<std::uint32_t>(report_.sequences));
    block_.position.push_back(position);
    block_.experts.insert(block_.experts.end(), ids, ids + per_);
  }

  void drop(const std::string& why) {
    ++report_.dropped_tokens;
    for (auto& [reason, count] : report_.dropped_by_reason)
      if (reason == why) {
        ++count;
        return;
      }
    report_.dropped_by_reason.emplace_back(why, 1);
  }

  void end_sequence() {
    if (block_.sequence.empty()) return;
    if (!writer_) writer_ = make_writer_(meta_);
    writer_->write(block_);
    report_.tokens += block_.size();
    ++report_.sequences;
    block_.clear();
  }

  void note(std::string text) { report_.notes.push_back(std::move(text)); }

  ImportReport finish(const std::string& path) {
    end_sequence();
    if (report_.tokens == 0)
      throw common::InputError(path + ": no complete token: every token lacks an expert at some MoE layer of " +
                               shape_.architecture + " (" + detail::layers_text(shape_.layers) + ")");
    writer_->finish();
    report_.meta = meta_;
    report_.meta.token_count = report_.tokens;
    report_.meta.sequence_count = report_.sequences;
    return report_;
  }

 private:
  TraceShape shape_;
  const WriterFactory& make_writer_;
  TokenChecker checker_;
  std::size_t per_;
  TraceMeta meta_;
  std::unique_ptr<TraceWriter> writer_;
  TokenBlock block_;
  ImportReport report_;
};

}  // namespace moesim::traces::detail
