// The JSONL importer: one JSON record per (token, layer), as a serving engine's routing hook writes
// them (FORMAT.md "jsonl"). Records of one sequence are buffered until the sequence key changes or
// a (token, layer) repeats (a new pass over the same sequence), so memory holds one sequence.
#include <map>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/format_lines.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {

using nlohmann::json;

struct PendingToken {
  std::vector<std::uint16_t> experts;  // layers * k
  std::vector<float> weights;          // layers * k when weights are present
  std::vector<bool> has_layer;
  std::size_t layers_seen = 0;
  std::uint64_t first_line = 0;
};

class JsonlImporter {
 public:
  JsonlImporter(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                const ImportOptions& options)
      : path_(path), shape_(shape), make_writer_(make_writer), options_(options), checker_(shape, false) {
    k_ = static_cast<std::size_t>(shape.top_k);
    per_ = ids_per_token(shape);
  }

  ImportReport run() {
    LineReader lines(path_);
    if (lines.file_size() == 0) throw common::InputError(path_ + ": empty file, expected JSON records, one per line");
    std::string_view line;
    while (lines.next(line)) {
      if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
      record(line, lines.where(), lines.line_number());
    }
    flush();
    if (records_ == 0) throw common::InputError(path_ + ": no records (only blank lines)");
    if (report_.tokens == 0)
      throw common::InputError(path_ + ": no complete token: every token lacks some of the " +
                               std::to_string(shape_.layers.size()) + " MoE layers (" +
                               detail::layers_text(shape_.layers) + ") of " + shape_.architecture);
    writer_->finish();
    if (report_.dropped_tokens > 0)
      report_.dropped_by_reason.emplace_back("missing some MoE layers", report_.dropped_tokens);
    report_.meta = meta_;
    report_.meta.token_count = report_.tokens;
    report_.meta.sequence_count = report_.sequences;
    return report_;
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw common::InputError(where + ": " + what);
  }

  std::int64_t integer(const json& rec, const char* key, const std::string& where, std::int64_t min, std::int64_t max) {
    const json& v = rec.at(key);
    if (!v.is_number_integer())
      fail(where, std::string("\"") + key + "\": expected an integer, got " + json_shown(v));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(max))
      fail(where, std::string("\"") + key + "\": " + v.dump() + " is out of range, expected " + std::to_string(min) +
                      ".." + std::to_string(max));
    const std::int64_t x = v.get<std::int64_t>();
    if (x < min || x > max)
      fail(where, std::string("\"") + key + "\": " + std::to_string(x) + " is out of range, expected " +
                      std::to_string(min) + ".." + std::to_string(max));
    return x;
  }

  void record(std::string_view line, const std::string& where, std::uint64_t line_number) {
    json rec;
    try {
      rec = json::parse(line.begin(), line.end());
    } catch (const json::out_of_range& e) {  // a number too large for a double
      fail(where, std::string("a number out of range: ") + e.what());
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
      fail(where, "not a valid JSON record: " + what);
    }
    if (!rec.is_object()) fail(where, "expected a JSON object (one record per line), got " + json_shown(rec));
    ++records_;
    for (const char* key : {"layer", "experts"})
      if (!rec.contains(key)) fail(where, std::string("missing field \"") + key + "\"");
    if (!rec.contains("problem_id"))
      fail(where, "missing field \"problem_id\" (the sequence key, with \"dataset\" when present)");
    const char* pos_key = rec.contains("token_pos") ? "token_pos" : "token_idx";
    if (!rec.contains(pos_key)) fail(where, "missing field \"token_idx\" or \"token_pos\" (the token's position)");

    const std::int64_t layer = integer(rec, "layer", where, 0, 1'000'000);
    const int li = detail::layer_index(shape_, layer);
    if (li < 0)
      fail(where, "\"layer\": " + std::to_string(layer) + " is not an MoE layer of " + shape_.architecture +
                      " (its MoE layers are " + detail::layers_text(shape_.layers) + ")");
    const auto position = static_cast<std::uint32_t>(integer(rec, pos_key, where, 0, UINT32_MAX));

    const json& pid = rec.at("problem_id");
    if (!pid.is_string() && !pid.is_number_integer())
      fail(where, "\"problem_id\": expected a string or an integer, got " + json_shown(pid));
    std::string key = pid.dump();
    std::string key_shown = "problem_id " + json_shown(pid);
    if (auto ds = rec.find("dataset"); ds != rec.end()) {
      if (!ds->is_string()) fail(where, "\"dataset\": expected a string, got " + json_shown(*ds));
      key = ds->get<std::string>() + '\x1f' + key;
      key_shown = "dataset " + json_shown(*ds) + ", " + key_shown;
    }

    const json& ex = rec.at("experts");
    if (!ex.is_array()) fail(where, "\"experts\": expected an array of expert ids, got " + json_shown(ex));
    if (ex.size() != k_)
      fail(where, "\"experts\": " + std::to_string(ex.size()) + " ids, expected top_k = " + std::to_string(k_) +
                      " for " + shape_.architecture);
    ids_.resize(k_);
    for (std::size_t j = 0; j < k_; ++j) {
      const json& e = ex[j];
      if (!e.is_number_integer())
        fail(where, "\"experts\"[" + std::to_string(j) + "]: expected an integer expert id, got " +
                        json_shown(e));
      if (e.is_number_unsigned() ? e.get<std::uint64_t>() >= static_cast<std::uint64_t>(shape_.num_experts)
                                 : (e.get<std::int64_t>() < 0 || e.get<std::int64_t>() >= shape_.num_experts))
        fail(where, "\"experts\"[" + std::to_string(j) + "]: expert id " + e.dump() + " is out of range, expected 0.." +
                        std::to_string(shape_.num_experts - 1));
      ids_[j] = static_cast<std::uint16_t>(e.get<std::int64_t>());
    }

    const bool has_probs = rec.contains("gating_probs") && !rec.at("gating_probs").is_null();
    if (!weights_known_) {
      weights_known_ = true;
      has_weights_ = has_probs;
      weights_line_ = line_number;
      checker_ = TokenChecker(shape_, has_weights_);
    } else if (has_probs != has_weights_) {
      fail(where, std::string(has_probs ? "has" : "lacks") + " \"gating_probs\", but the first record (line " +
                      std::to_string(weights_line_) + ") " + (has_weights_ ? "has" : "lacks") +
                      " them: either every record carries gate weights or none does");
    }
    probs_.resize(k_);
    if (has_probs) {
      const json& g = rec.at("gating_probs");
      if (!g.is_array() || g.size() != k_)
        fail(where, "\"gating_probs\": expected an array of " + std::to_string(k_) + " numbers (one per expert), got " +
                        json_shown(g));
      for (std::size_t j = 0; j < k_; ++j) {
        if (!g[j].is_number())
          fail(where, "\"gating_probs\"[" + std::to_string(j) + "]: expected a number, got " +
                          json_shown(g[j]));
        probs_[j] = static_cast<float>(g[j].get<double>());
      }
    }
    std::string problem = checker_.layer_problem(ids_.data(), has_probs ? probs_.data() : nullptr);
    if (!problem.empty()) fail(where, "layer " + std::to_string(layer) + ": " + problem);

    if (!have_sequence_ || key != key_) {
      flush();
      key_ = key;
      key_shown_ = key_shown;
      have_sequence_ = true;
    }
    auto it = tokens_.find(position);
    if (it != tokens_.end() && it->second.has_layer[static_cast<std::size_t>(li)]) {
      // The same (sequence, token, layer) again: a new pass over the sequence starts here.
      flush();
      key_ = key;
      have_sequence_ = true;
      it = tokens_.end();
    }
    if (it == tokens_.end()) {
      PendingToken t;
      t.experts.resize(per_);
      if (has_weights_) t.weights.resize(per_);
      t.has_layer.assign(shape_.layers.size(), false);
      t.first_line = line_number;
      it = tokens_.emplace(position, std::move(t)).first;
    }
    PendingToken& t = it->second;
    const std::size_t off = static_cast<std::size_t>(li) * k_;
    std::copy(ids_.begin(), ids_.end(), t.experts.begin() + static_cast<std::ptrdiff_t>(off));
    if (has_weights_) std::copy(probs_.begin(), probs_.end(), t.weights.begin() + static_cast<std::ptrdiff_t>(off));
    t.has_layer[static_cast<std::size_t>(li)] = true;
    ++t.layers_seen;
  }

  void flush() {
    if (tokens_.empty()) return;
    if (!writer_) {
      meta_.shape = shape_;
      meta_.has_weights = has_weights_;
      meta_.source = "jsonl import of " + detail::short_name(path_) + " (moesim trace import --format jsonl)";
      writer_ = make_writer_(meta_);
    }
    block_.clear();
    const std::uint32_t sequence = static_cast<std::uint32_t>(report_.sequences);
    for (auto& [position, t] : tokens_) {
      if (t.layers_seen != shape_.layers.size()) {
        if (options_.strict) {
          std::vector<int> missing;
          for (std::size_t l = 0; l < shape_.layers.size(); ++l)
            if (!t.has_layer[l]) missing.push_back(shape_.layers[l]);
          throw common::InputError(path_ + ":" + std::to_string(t.first_line) + ": the token at position " +
                                   std::to_string(position) + " of the sequence (" + key_shown_ + ") lacks MoE layer" +
                                   (missing.size() > 1 ? "s " : " ") + detail::layers_text(missing) +
                                   " (--strict; without it such tokens are dropped and counted)");
        }
        ++report_.dropped_tokens;
        continue;
      }
      block_.sequence.push_back(sequence);
      block_.position.push_back(position);
      block_.experts.insert(block_.experts.end(), t.experts.begin(), t.experts.end());
      if (has_weights_) block_.weights.insert(block_.weights.end(), t.weights.begin(), t.weights.end());
    }
    tokens_.clear();
    if (block_.sequence.empty()) return;
    writer_->write(block_);
    report_.tokens += block_.size();
    ++report_.sequences;
  }

  std::string path_;
  TraceShape shape_;
  const WriterFactory& make_writer_;
  ImportOptions options_;
  TokenChecker checker_;
  std::size_t k_ = 0;
  std::size_t per_ = 0;
  bool weights_known_ = false;
  bool has_weights_ = false;
  std::uint64_t weights_line_ = 0;
  std::vector<std::uint16_t> ids_;
  std::vector<float> probs_;
  bool have_sequence_ = false;
  std::string key_;
  std::string key_shown_;  // the key as messages show it
  std::map<std::uint32_t, PendingToken> tokens_;  // the current sequence, by position
  std::uint64_t records_ = 0;
  TraceMeta meta_;
  std::unique_ptr<TraceWriter> writer_;
  TokenBlock block_;
  ImportReport report_;
};

}  // namespace

ImportReport import_jsonl(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                          const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 || !options.sequence_lengths_path.empty())
    throw common::UsageError("--sequence-length and --sequence-lengths apply to --format npy only");
  return JsonlImporter(path, shape, make_writer, options).run();
}

}  // namespace moesim::traces
