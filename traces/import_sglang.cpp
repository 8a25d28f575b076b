// SGLang's recorded routing (FORMAT.md "Serving-engine formats"), from the public sgl-project/sglang
// sources:
// - sglang-routed: the per-request `meta_info["routed_experts"]` of a server started with
//   --enable-return-routed-experts (python/sglang/srt/layers/moe/routed_experts_capturer.py,
//   RoutedExpertsCapturer; encoded in python/sglang/srt/managers/tokenizer_manager.py,
//   convert_to_meta_info / the detokenizer): base64 of a little-endian int32 array
//   [tokens][num_hidden_layers][num_experts_per_tok], one response (or meta_info) per JSON line.
// - sglang-per-token / sglang-stat: the dump of /dump_expert_distribution_record
//   (python/sglang/srt/eplb/expert_distribution.py, _DetailAccumulator.dump and _StatAccumulator.dump),
//   which SGLang writes only with torch.save; accepted here as the same dict converted to JSON
//   (tensors as nested lists), never as a pickle.
// Ids SGLang records after its logical -> physical dispatch are folded back with a physical -> logical map.
#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/base64.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/format_lines.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {

using nlohmann::json;

constexpr const char* kConvertHint =
    "convert SGLang's .pt dump once with: python -c \"import torch,json,sys; json.dump(torch.load(sys.argv[1], "
    "weights_only=False), open(sys.argv[2], 'w'), default=lambda t: t.tolist())\" DUMP.pt DUMP.json";

json parse_json_file(const std::string& path, const char* expected) {
  const std::string text = common::read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw common::InputError(path + ": empty file, expected " + expected);
  if (text.size() >= 2 && static_cast<unsigned char>(text[0]) == 0x80)
    throw common::InputError(path + ": a Python pickle (torch.save), which moesim does not read; " + kConvertHint);
  if (text.size() >= 4 && text.compare(0, 4, "PK\x03\x04") == 0)
    throw common::InputError(path + ": a torch.save zip archive, which moesim does not read; " + kConvertHint);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
    throw common::InputError(path + ": not valid JSON (" + e.what() + "); expected " + expected);
  }
}

// One token's ids at one MoE layer, from the engine's int32 row of `columns` (>= top_k) values into
// `out` (top_k logical ids). Returns false when the token has no expert there (all -1: SGLang's
// fill value for a layer the token did not pass). Throws for any other bad value.
template <typename Where>
bool layer_ids(const std::int64_t* row, std::size_t columns, const TraceShape& shape, const detail::ExpertMap& map,
               std::size_t axis_layer, std::uint16_t* out, const Where& where) {
  const auto k = static_cast<std::size_t>(shape.top_k);
  if (std::all_of(row, row + columns, [](std::int64_t v) { return v == -1; })) return false;
  for (std::size_t j = 0; j < columns; ++j) {
    const std::int64_t v = row[j];
    if (j >= k) {
      if (v != -1)
        throw common::InputError(where() + ": column " + std::to_string(j) + " holds expert " + std::to_string(v) +
                                 ", but " + shape.architecture + " routes top_k = " + std::to_string(k) +
                                 " (columns past top_k hold -1); pass the architecture the routing was recorded on");
      continue;
    }
    std::int64_t id = v;
    if (!map.empty()) {
      id = map.logical(axis_layer, v);
      if (id < 0)
        throw common::InputError(where() + ": column " + std::to_string(j) + ": physical expert " + std::to_string(v) +
                                 " is outside the physical -> logical map (0.." +
                                 std::to_string(map.physical_slots() - 1) + ")");
    } else if (v < 0 || v >= shape.num_experts) {
      throw common::InputError(where() + ": column " + std::to_string(j) + ": expert " + std::to_string(v) +
                               " is out of range 0.." + std::to_string(shape.num_experts - 1) +
                               " (ids past the logical experts are physical slots of redundant experts: pass the "
                               "physical -> logical map with --expert-map)");
    }
    out[j] = static_cast<std::uint16_t>(id);
  }
  return true;
}

std::string decoder_layers_text(const ImportOptions& options) {
  return options.decoder_layers > 0 ? std::to_string(options.decoder_layers) : std::string("?");
}

// ---- sglang-routed ----------------------------------------------------------------------------

class RoutedImporter {
 public:
  RoutedImporter(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                 const ImportOptions& options)
      : path_(path),
        shape_(shape),
        options_(options),
        sink_(shape, make_writer,
              "sglang-routed import of " + detail::short_name(path) + " (moesim trace import --format sglang-routed)") {
    if (!options.expert_map_path.empty()) map_ = detail::load_expert_map(options.expert_map_path, shape.num_experts);
  }

  ImportReport run() {
    LineReader lines(path_);
    if (lines.file_size() == 0)
      throw common::InputError(path_ + ": empty file, expected one SGLang /generate response per line");
    std::string_view line;
    std::uint64_t records = 0;
    while (lines.next(line)) {
      if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
      json doc;
      try {
        doc = json::parse(line.begin(), line.end());
      } catch (const json::exception& e) {  // bad syntax, or a number too large (out_of_range)
        throw common::InputError(lines.where() + ": not a valid JSON record (" + e.what() +
                                 "); expected one /generate response per line");
      }
      if (doc.is_array()) {  // a batched /generate answers with an array of responses
        for (std::size_t i = 0; i < doc.size(); ++i)
          response(doc[i], lines.where() + ": response [" + std::to_string(i) + "]");
      } else {
        response(doc, lines.where());
      }
      ++records;
    }
    if (records == 0) throw common::InputError(path_ + ": no records (only blank lines)");
    if (mismatched_ > 0)
      sink_.note(std::to_string(mismatched_) +
                 " responses hold a token count other than prompt_tokens + "
                 "completion_tokens - 1 (the routing SGLang returns)");
    sink_.note("each response is one sequence, positions 0.. in order (prompt, then generated tokens)");
    return sink_.finish(path_);
  }

 private:
  void response(const json& doc, const std::string& where) {
    if (!doc.is_object())
      throw common::InputError(where + ": expected a JSON object (a /generate response or its meta_info), got " +
                               json_shown(doc));
    const json& meta = doc.contains("meta_info") ? doc.at("meta_info") : doc;
    if (!meta.is_object())
      throw common::InputError(where + ": \"meta_info\": expected an object, got " + json_shown(meta));
    if (!meta.contains("routed_experts"))
      throw common::InputError(where +
                               ": no meta_info.routed_experts: start the SGLang server with "
                               "--enable-return-routed-experts and send \"return_routed_experts\": true");
    const json& re = meta.at("routed_experts");
    const std::string at = where + ": meta_info.routed_experts";
    const auto k = static_cast<std::size_t>(shape_.top_k);
    std::vector<std::int64_t> values;
    std::size_t axis = 0;
    std::size_t tokens = 0;
    if (re.is_string()) {
      const auto bytes = common::base64_decode(re.get_ref<const std::string&>(), at);
      if (bytes.size() % 4 != 0)
        throw common::InputError(at + ": " + std::to_string(bytes.size()) +
                                 " bytes, not a whole number of int32 values");
      values.resize(bytes.size() / 4);
      for (std::size_t i = 0; i < values.size(); ++i) {
        const std::uint32_t u =
            static_cast<std::uint32_t>(bytes[4 * i]) | (static_cast<std::uint32_t>(bytes[4 * i + 1]) << 8) |
            (static_cast<std::uint32_t>(bytes[4 * i + 2]) << 16) | (static_cast<std::uint32_t>(bytes[4 * i + 3]) << 24);
        values[i] = static_cast<std::int32_t>(u);
      }
      // The layer axis is num_hidden_layers (every decoder layer); fall back to the MoE layers alone.
      const std::size_t moe = shape_.layers.size();
      const auto dec = static_cast<std::size_t>(std::max(options_.decoder_layers, 0));
      if (dec > 0 && values.size() % (dec * k) == 0)
        axis = dec;
      else if (values.size() % (moe * k) == 0)
        axis = moe;
      else
        throw common::InputError(at + ": " + std::to_string(values.size()) +
                                 " int32 values, not a whole number of "
                                 "tokens of " +
                                 decoder_layers_text(options_) + " layers x top_k " + std::to_string(k) + " (" +
                                 shape_.architecture + "); pass the architecture the routing was recorded on");
      tokens = values.size() / (axis * k);
    } else if (re.is_array()) {  // tokens x layers x top_k as nested lists (a decoded copy)
      tokens = re.size();
      for (std::size_t t = 0; t < tokens; ++t) {
        const json& tok = re[t];
        if (!tok.is_array() || (t > 0 && tok.size() != axis))
          throw common::InputError(at + "[" + std::to_string(t) + "]: expected an array of " +
                                   (t > 0 ? std::to_string(axis) : std::string("per-layer")) + " layers, got " +
                                   json_shown(tok));
        axis = tok.size();
        for (std::size_t a = 0; a < axis; ++a) {
          const json& row = tok[a];
          if (!row.is_array() || row.size() != k)
            throw common::InputError(at + "[" + std::to_string(t) + "][" + std::to_string(a) + "]: expected " +
                                     std::to_string(k) + " expert ids (top_k of " + shape_.architecture + "), got " +
                                     json_shown(row));
          for (const json& v : row) {
            if (!v.is_number_integer())
              throw common::InputError(at + "[" + std::to_string(t) + "][" + std::to_string(a) +
                                       "]: expected integer expert ids, got " + json_shown(v));
            values.push_back(v.get<std::int64_t>());
          }
        }
      }
    } else {
      throw common::InputError(at + ": expected base64 text (int32 tokens x layers x top_k) or nested lists, got " +
                               json_shown(re));
    }
    if (tokens == 0) return;
    const auto axis_of = detail::layer_axis(shape_, axis, options_.decoder_layers, at);
    if (!map_.empty()) map_.check_rows(axis, options_.expert_map_path);
    if (meta.contains("prompt_tokens") && meta.contains("completion_tokens") &&
        meta.at("prompt_tokens").is_number_integer() && meta.at("completion_tokens").is_number_integer()) {
      // tokens == prompt + completion - 1, compared without overflow for any integers the response holds
      const std::int64_t prompt = meta.at("prompt_tokens").get<std::int64_t>();
      const std::int64_t completion = meta.at("completion_tokens").get<std::int64_t>();
      if (prompt < 0 || completion < 0 ||
          static_cast<std::uint64_t>(prompt) + static_cast<std::uint64_t>(completion) != tokens + 1)
        ++mismatched_;
    }
    ids_.resize(sink_.per_token());
    for (std::size_t t = 0; t < tokens; ++t) {
      bool complete = true;
      for (std::size_t l = 0; l < shape_.layers.size() && complete; ++l) {
        const std::int64_t* row = values.data() + (t * axis + axis_of[l]) * k;
        auto here = [&] {
          return at + ": token " + std::to_string(t) + ", layer " + std::to_string(axis_of[l]) + " (MoE layer " +
                 std::to_string(shape_.layers[l]) + ")";
        };
        complete = layer_ids(row, k, shape_, map_, axis_of[l], ids_.data() + l * k, here);
      }
      if (!complete) {
        sink_.drop("no experts at some MoE layer (-1)");
        continue;
      }
      sink_.token(static_cast<std::uint32_t>(t), ids_.data(), [&] { return at + ": token " + std::to_string(t); });
    }
    sink_.end_sequence();
  }

  std::string path_;
  TraceShape shape_;
  ImportOptions options_;
  detail::RouteSink sink_;
  detail::ExpertMap map_;
  std::vector<std::uint16_t> ids_;
  std::uint64_t mismatched_ = 0;
};

// ---- sglang-per-token -------------------------------------------------------------------------

const json& member(const json& obj, const char* key, const std::string& where, const char* what) {
  if (!obj.contains(key)) throw common::InputError(where + ": missing \"" + key + "\" (" + what + ")");
  return obj.at(key);
}

ImportReport per_token(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                       const ImportOptions& options) {
  const json doc = parse_json_file(path, "SGLang's per_token expert-distribution dump converted to JSON");
  if (!doc.is_object() || !doc.contains("records"))
    throw common::InputError(path +
                             ": expected an object with \"records\" (the per_token mode dump of "
                             "/dump_expert_distribution_record)" +
                             (doc.is_object() && doc.contains("logical_count")
                                  ? std::string("; this is a stat-mode dump: use --format sglang-stat")
                                  : std::string()));
  const json& records = doc.at("records");
  if (!records.is_array() || records.empty())
    throw common::InputError(path + ": \"records\": expected a non-empty array of forward passes, got " +
                             json_shown(records));
  detail::ExpertMap map;
  if (doc.contains("last_physical_to_logical_map") && !doc.at("last_physical_to_logical_map").is_null())
    map = detail::ExpertMap(doc.at("last_physical_to_logical_map"), shape.num_experts,
                            path + ": last_physical_to_logical_map");
  if (!options.expert_map_path.empty()) map = detail::load_expert_map(options.expert_map_path, shape.num_experts);
  detail::RouteSink sink(
      shape, make_writer,
      "sglang-per-token import of " + detail::short_name(path) + " (moesim trace import --format sglang-per-token)");
  const auto k = static_cast<std::size_t>(shape.top_k);
  std::vector<std::uint16_t> ids(sink.per_token());
  std::vector<std::int64_t> row;
  std::uint64_t decode_passes = 0;
  for (std::size_t r = 0; r < records.size(); ++r) {
    const json& rec = records[r];
    const std::string at = path + ": records[" + std::to_string(r) + "]";
    if (!rec.is_object())
      throw common::InputError(at + ": expected an object (one forward pass), got " + json_shown(rec));
    const json& topk = member(rec, "topk_ids_of_layer", at, "layers x tokens x top-k expert ids");
    const json& positions = member(rec, "positions", at, "each token's position in its request");
    if (!positions.is_array())
      throw common::InputError(at + ": \"positions\": expected an array, got " + json_shown(positions));
    const std::size_t tokens = positions.size();
    if (!topk.is_array() || topk.empty())
      throw common::InputError(at + ": \"topk_ids_of_layer\": expected an array layers x tokens x top-k, got " +
                               json_shown(topk));
    const auto axis_of = detail::layer_axis(shape, topk.size(), options.decoder_layers, at + ": topk_ids_of_layer");
    if (!map.empty()) map.check_rows(topk.size(), at + ": topk_ids_of_layer");
    std::size_t columns = 0;
    for (std::size_t a = 0; a < topk.size(); ++a) {
      const json& layer = topk[a];
      if (!layer.is_array() || layer.size() != tokens)
        throw common::InputError(at + ": topk_ids_of_layer[" + std::to_string(a) + "]: expected " +
                                 std::to_string(tokens) + " tokens (the length of \"positions\"), got " +
                                 json_shown(layer));
      for (std::size_t t = 0; t < tokens; ++t) {
        const json& ids_row = layer[t];
        if (!ids_row.is_array() || ids_row.size() < k || (columns != 0 && ids_row.size() != columns))
          throw common::InputError(
              at + ": topk_ids_of_layer[" + std::to_string(a) + "][" + std::to_string(t) + "]: expected " +
              (columns != 0 ? std::to_string(columns) : "at least " + std::to_string(k)) + " expert ids (top_k of " +
              shape.architecture + " is " + std::to_string(k) + "), got " + json_shown(ids_row));
        columns = ids_row.size();
        for (const json& v : ids_row)
          if (!v.is_number_integer())
            throw common::InputError(at + ": topk_ids_of_layer[" + std::to_string(a) + "][" + std::to_string(t) +
                                     "]: expected integer expert ids, got " + json_shown(v));
      }
    }
    // Requests of the pass: extend_seq_lens splits a prefill (extend) pass; a decode pass has one token each.
    std::vector<std::size_t> lengths;
    if (rec.contains("extend_seq_lens") && !rec.at("extend_seq_lens").is_null()) {
      const json& lens = rec.at("extend_seq_lens");
      std::size_t sum = 0;
      if (!lens.is_array())
        throw common::InputError(at + ": \"extend_seq_lens\": expected an array or null, got " + json_shown(lens));
      for (const json& v : lens) {
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0)
          throw common::InputError(at + ": \"extend_seq_lens\": expected non-negative integers, got " + json_shown(v));
        lengths.push_back(v.get<std::size_t>());
        if (lengths.back() > std::numeric_limits<std::size_t>::max() - sum)
          throw common::InputError(at + ": \"extend_seq_lens\" sum past " +
                                   std::to_string(std::numeric_limits<std::size_t>::max()) +
                                   " tokens, but the pass has " + std::to_string(tokens) +
                                   " (the length of \"positions\")");
        sum += lengths.back();
      }
      if (sum != tokens)
        throw common::InputError(at + ": \"extend_seq_lens\" sum to " + std::to_string(sum) +
                                 " tokens, but the pass "
                                 "has " +
                                 std::to_string(tokens) + " (the length of \"positions\")");
    } else {
      lengths.assign(tokens, 1);
      ++decode_passes;
    }
    std::size_t t = 0;
    for (std::size_t length : lengths) {
      for (std::size_t end = t + length; t < end; ++t) {
        const json& pos = positions[t];
        if (!pos.is_number_integer() || pos.get<std::int64_t>() < 0 ||
            pos.get<std::int64_t>() > std::numeric_limits<std::uint32_t>::max())
          throw common::InputError(at + ": positions[" + std::to_string(t) +
                                   "]: expected a position 0..4294967295, "
                                   "got " +
                                   json_shown(pos));
        bool complete = true;
        for (std::size_t l = 0; l < shape.layers.size() && complete; ++l) {
          const json& src = topk[axis_of[l]][t];
          row.assign(columns, 0);
          for (std::size_t j = 0; j < columns; ++j) row[j] = src[j].get<std::int64_t>();
          auto here = [&] {
            return at + ": topk_ids_of_layer[" + std::to_string(axis_of[l]) + "][" + std::to_string(t) +
                   "] (MoE layer " + std::to_string(shape.layers[l]) + ")";
          };
          complete = layer_ids(row.data(), columns, shape, map, axis_of[l], ids.data() + l * k, here);
        }
        if (!complete) {
          sink.drop("no experts at some MoE layer (-1)");
          continue;
        }
        sink.token(static_cast<std::uint32_t>(pos.get<std::int64_t>()), ids.data(),
                   [&] { return at + ": token " + std::to_string(t); });
      }
      sink.end_sequence();
    }
  }
  sink.note(
      "each request of a prefill pass is one sequence (extend_seq_lens); SGLang does not record which "
      "request a token belongs to across passes");
  if (decode_passes > 0)
    sink.note(std::to_string(decode_passes) + (decode_passes == 1 ? " decode pass" : " decode passes") +
              ": each of its tokens is a sequence of its own");
  if (map.empty()) sink.note("no physical -> logical map in the dump: expert ids taken as logical");
  return sink.finish(path);
}

}  // namespace

ImportReport import_sglang_routed(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                                  const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 || !options.sequence_lengths_path.empty() || options.strict)
    throw common::UsageError(
        "--sequence-length, --sequence-lengths and --strict do not apply to --format "
        "sglang-routed: each response is one sequence");
  return RoutedImporter(path, shape, make_writer, options).run();
}

ImportReport import_sglang_per_token(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                                     const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 || !options.sequence_lengths_path.empty() || options.strict)
    throw common::UsageError(
        "--sequence-length, --sequence-lengths and --strict do not apply to --format "
        "sglang-per-token: the dump's extend_seq_lens give the sequences");
  return per_token(path, shape, make_writer, options);
}

// ---- sglang-stat ------------------------------------------------------------------------------

CountsImportReport import_sglang_stat(const std::string& path, const TraceShape& shape, int decoder_layers,
                                      const LoadWriterFactory& make_writer) {
  validate_shape(shape, "architecture " + shape.architecture);
  const json doc = parse_json_file(path, "SGLang's stat-mode expert-distribution dump converted to JSON");
  if (doc.is_object() && doc.contains("records"))
    throw common::InputError(path + ": a per_token mode dump (it has \"records\"): use --format sglang-per-token");
  const json* counts = &doc;
  if (doc.is_object()) {
    if (!doc.contains("logical_count"))
      throw common::InputError(path +
                               ": the JSON object has no \"logical_count\" (forward passes x layers x "
                               "logical experts, the stat-mode dump of /dump_expert_distribution_record)");
    counts = &doc.at("logical_count");
  }
  if (!counts->is_array() || counts->empty())
    throw common::InputError(path + ": logical_count: expected a non-empty array passes x layers x experts, got " +
                             json_shown(*counts));
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const std::size_t axis = (*counts)[0].is_array() ? (*counts)[0].size() : 0;
  const auto axis_of = detail::layer_axis(shape, axis, decoder_layers, path + ": logical_count[0]");
  std::vector<bool> is_moe(axis, false);
  for (std::size_t a : axis_of) is_moe[a] = true;
  std::size_t i = 0;
  auto next = [&](std::vector<std::uint32_t>& out, std::string& where) {
    if (i >= counts->size()) return false;
    const json& pass = (*counts)[i];
    const std::string at = path + ": logical_count[" + std::to_string(i) + "]";
    where = at + " (forward pass " + std::to_string(i) + ")";
    if (!pass.is_array() || pass.size() != axis)
      throw common::InputError(at + ": expected " + std::to_string(axis) + " layers (as in pass 0), got " +
                               json_shown(pass));
    std::fill(out.begin(), out.end(), 0);
    std::vector<std::uint32_t> layer(experts);
    for (std::size_t a = 0; a < axis; ++a) {
      const json& row = pass[a];
      const std::string at_a = at + "[" + std::to_string(a) + "]";
      if (!row.is_array() || row.size() != experts)
        throw common::InputError(at_a + ": expected " + std::to_string(experts) + " logical expert counts (" +
                                 shape.architecture + " has " + std::to_string(experts) + " experts), got " +
                                 json_shown(row));
      for (std::size_t e = 0; e < experts; ++e) {
        const json& v = row[e];
        if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
            v.get<std::int64_t>() > std::numeric_limits<std::uint32_t>::max())
          throw common::InputError(at_a + "[" + std::to_string(e) + "]: expected a count 0..4294967295, got " +
                                   json_shown(v));
        layer[e] = static_cast<std::uint32_t>(v.get<std::int64_t>());
        if (!is_moe[a] && layer[e] != 0)
          throw common::InputError(at_a + "[" + std::to_string(e) + "]: " + std::to_string(layer[e]) +
                                   " tokens at decoder layer " + std::to_string(a) + ", which is not an MoE layer of " +
                                   shape.architecture + " (" + detail::layers_text(shape.layers) +
                                   "); pass the architecture the counts were recorded on");
      }
      for (std::size_t l = 0; l < axis_of.size(); ++l)
        if (axis_of[l] == a)
          std::copy(layer.begin(), layer.end(), out.begin() + static_cast<std::ptrdiff_t>(l * experts));
    }
    ++i;
    return true;
  };
  std::uint64_t empty = 0;
  CountsImportReport report = detail::write_count_iterations(
      path, shape, make_writer, "sglang-stat",
      "sglang-stat import of " + detail::short_name(path) + " (moesim trace import --format sglang-stat)", next,
      &empty);
  if (empty > 0)
    report.notes.push_back(std::to_string(empty) +
                           " forward passes without tokens skipped (unused slots of "
                           "SGLang's circular buffer, or idle passes)");
  report.notes.push_back(
      "pass order follows SGLang's buffer: with a bounded --expert-distribution-recorder-"
      "buffer-size, the oldest pass need not come first");
  return report;
}

}  // namespace moesim::traces
