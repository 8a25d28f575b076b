// Megatron-Core's router trace (FORMAT.md "megatron-router-trace"), from the public NVIDIA/Megatron-LM
// source megatron/core/transformer/moe/router_trace.py (RouterTracer._record, _make_index_record and
// _flush_records_to_disk; enabled with --moe-routing-trace-path): one JSONL file per rank,
// router_trace_rank{R}.jsonl, one record per (step, block, layer) holding that router call's top-k
// expert indices, num_tokens x topk. Megatron records no sequence identity: the records of one
// forward pass (a step, split again whenever a layer repeats within it, as micro-batches and
// recomputation do) become one sequence, its tokens in the router's order.
#include <map>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "traces/format_common.hpp"
#include "traces/format_lines.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {

using nlohmann::json;

class MegatronImporter {
 public:
  MegatronImporter(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer)
      : path_(path),
        shape_(shape),
        k_(static_cast<std::size_t>(shape.top_k)),
        sink_(shape, make_writer,
              "megatron-router-trace import of " + detail::short_name(path) +
                  " (moesim trace import --format megatron-router-trace)") {}

  ImportReport run() {
    LineReader lines(path_);
    if (lines.file_size() == 0)
      throw common::InputError(path_ + ": empty file, expected Megatron router-trace records, one per line");
    std::string_view line;
    while (lines.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      record(line, lines.where(), lines.line_number());
    }
    flush();
    if (records_ == 0) throw common::InputError(path_ + ": no records (only blank lines)");
    if (mtp_records_ > 0)
      sink_.note(std::to_string(mtp_records_) + " multi-token-prediction (block \"mtp\") records skipped");
    sink_.note(
        "each forward pass (a step, or a repeat of its layers) is one sequence: Megatron records no "
        "request or sample identity");
    return sink_.finish(path_);
  }

 private:
  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw common::InputError(where + ": " + what);
  }

  static std::int64_t integer(const json& rec, const char* key, const std::string& where) {
    if (!rec.contains(key)) fail(where, std::string("missing field \"") + key + "\"");
    const json& v = rec.at(key);
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
      fail(where, std::string("\"") + key + "\": expected a non-negative integer, got " + json_shown(v));
    return v.get<std::int64_t>();
  }

  void record(std::string_view line, const std::string& where, std::uint64_t line_number) {
    json rec;
    try {
      rec = json::parse(line.begin(), line.end());
    } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
      fail(where, std::string("not a valid JSON record (") + e.what() + ")");
    }
    if (!rec.is_object()) fail(where, "expected a JSON object (one router call per line), got " + json_shown(rec));
    ++records_;
    if (auto b = rec.find("block"); b != rec.end() && *b != "decoder") {
      if (*b == "mtp") {
        ++mtp_records_;
        return;
      }
      fail(where, "\"block\": expected \"decoder\" or \"mtp\", got " + json_shown(*b));
    }
    const std::int64_t step = integer(rec, "step", where);
    const std::int64_t layer = integer(rec, "layer", where);
    const int li = detail::layer_index(shape_, layer);
    if (li < 0)
      fail(where, "\"layer\": " + std::to_string(layer) + " is not an MoE layer of " + shape_.architecture +
                      " (its MoE layers are " + detail::layers_text(shape_.layers) +
                      "); pass the architecture the trace was recorded on");
    if (rec.contains("topk") && integer(rec, "topk", where) != static_cast<std::int64_t>(k_))
      fail(where, "\"topk\": " + rec.at("topk").dump() + ", but " + shape_.architecture +
                      " routes top_k = " + std::to_string(k_) + "; pass the architecture the trace was recorded on");
    if (!rec.contains("top_indices")) fail(where, "missing field \"top_indices\" (num_tokens x topk expert ids)");
    const json& top = rec.at("top_indices");
    if (!top.is_array()) fail(where, "\"top_indices\": expected an array num_tokens x topk, got " + json_shown(top));
    if (rec.contains("num_tokens") && integer(rec, "num_tokens", where) != static_cast<std::int64_t>(top.size()))
      fail(where, "\"num_tokens\" is " + rec.at("num_tokens").dump() + ", but \"top_indices\" holds " +
                      std::to_string(top.size()) + " rows");

    const auto l = static_cast<std::size_t>(li);
    if (have_pass_ && (step != step_ || !pass_[l].empty() || seen_[l])) flush();
    if (!have_pass_) {
      have_pass_ = true;
      step_ = step;
      tokens_ = top.size();
      first_line_ = line_number;
      pass_.assign(shape_.layers.size(), {});
      seen_.assign(shape_.layers.size(), false);
    }
    if (top.size() != tokens_)
      fail(where, "layer " + std::to_string(layer) + " has " + std::to_string(top.size()) +
                      " tokens, but the forward pass that started at line " + std::to_string(first_line_) + " has " +
                      std::to_string(tokens_) + " (every MoE layer of a pass routes the same tokens)");
    auto& ids = pass_[l];
    ids.resize(tokens_ * k_);
    for (std::size_t t = 0; t < tokens_; ++t) {
      const json& row = top[t];
      if (!row.is_array() || row.size() != k_)
        fail(where, "\"top_indices\"[" + std::to_string(t) + "]: expected " + std::to_string(k_) + " expert ids, got " +
                        json_shown(row));
      for (std::size_t j = 0; j < k_; ++j) {
        const json& v = row[j];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() >= shape_.num_experts)
          fail(where, "\"top_indices\"[" + std::to_string(t) + "][" + std::to_string(j) +
                          "]: expected an expert id 0.." + std::to_string(shape_.num_experts - 1) + ", got " +
                          json_shown(v));
        ids[t * k_ + j] = static_cast<std::uint16_t>(v.get<std::int64_t>());
      }
    }
    seen_[l] = true;
  }

  void flush() {
    if (!have_pass_) return;
    have_pass_ = false;
    const std::size_t layers = shape_.layers.size();
    bool complete = true;
    for (std::size_t l = 0; l < layers; ++l) complete = complete && seen_[l];
    if (!complete) {
      for (std::size_t t = 0; t < tokens_; ++t) sink_.drop("the forward pass lacks some MoE layers");
      return;
    }
    token_ids_.resize(layers * k_);
    for (std::size_t t = 0; t < tokens_; ++t) {
      for (std::size_t l = 0; l < layers; ++l)
        std::copy_n(pass_[l].begin() + static_cast<std::ptrdiff_t>(t * k_), k_,
                    token_ids_.begin() + static_cast<std::ptrdiff_t>(l * k_));
      sink_.token(static_cast<std::uint32_t>(t), token_ids_.data(), [&] {
        return path_ + ":" + std::to_string(first_line_) + ": forward pass of step " + std::to_string(step_) +
               ", token " + std::to_string(t);
      });
    }
    sink_.end_sequence();
  }

  std::string path_;
  TraceShape shape_;
  std::size_t k_;
  detail::RouteSink sink_;
  std::uint64_t records_ = 0;
  std::uint64_t mtp_records_ = 0;
  bool have_pass_ = false;
  std::int64_t step_ = 0;
  std::size_t tokens_ = 0;
  std::uint64_t first_line_ = 0;
  std::vector<std::vector<std::uint16_t>> pass_;  // per MoE layer: tokens x k ids
  std::vector<bool> seen_;
  std::vector<std::uint16_t> token_ids_;
};

}  // namespace

ImportReport import_megatron_router_trace(const std::string& path, const TraceShape& shape,
                                          const WriterFactory& make_writer, const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 || !options.sequence_lengths_path.empty() || options.strict ||
      !options.expert_map_path.empty())
    throw common::UsageError(
        "--sequence-length, --sequence-lengths, --strict and --expert-map do not apply to "
        "--format megatron-router-trace");
  return MegatronImporter(path, shape, make_writer).run();
}

}  // namespace moesim::traces
