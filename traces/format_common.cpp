#include "traces/format_common.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace moesim::traces {

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

namespace {

const std::vector<std::string>& meta_keys() {
  static const std::vector<std::string> keys = {"format_version", "architecture", "layers",     "num_experts",
                                                "top_k",          "has_weights",  "source"};
  return keys;
}

[[noreturn]] void meta_fail(std::string_view where, const std::string& what) {
  throw common::InputError(std::string(where) + ": metadata: " + what);
}

const nlohmann::json& require(const nlohmann::json& json, const char* key, std::string_view where) {
  auto it = json.find(key);
  if (it == json.end()) meta_fail(where, std::string("missing key \"") + key + "\"");
  return *it;
}

int require_int(const nlohmann::json& json, const char* key, std::string_view where) {
  const auto& v = require(json, key, where);
  if (!v.is_number_integer())
    meta_fail(where, std::string("\"") + key + "\": expected an integer, got " + json_shown(v));
  if (v.is_number_unsigned() ? v.get<std::uint64_t>() > 1'000'000'000u
                             : (v.get<std::int64_t>() < -1'000'000'000 || v.get<std::int64_t>() > 1'000'000'000))
    meta_fail(where, std::string("\"") + key + "\": value " + v.dump() + " is out of range");
  return static_cast<int>(v.get<std::int64_t>());
}

}  // namespace

std::string shape_problem(const TraceShape& shape) {
  if (shape.architecture.empty()) return "architecture is empty, expected a name";
  if (shape.layers.empty()) return "layers is empty, expected at least one MoE layer";
  for (std::size_t i = 0; i < shape.layers.size(); ++i) {
    if (shape.layers[i] < 0) return "layers[" + std::to_string(i) + "] is " + std::to_string(shape.layers[i]) +
                                    ", expected a decoder-layer index >= 0";
    if (i > 0 && shape.layers[i] <= shape.layers[i - 1])
      return "layers must be strictly ascending, got " + std::to_string(shape.layers[i - 1]) + " then " +
             std::to_string(shape.layers[i]);
  }
  if (shape.num_experts < 1 || shape.num_experts > kMaxExperts)
    return "num_experts is " + std::to_string(shape.num_experts) + ", expected 1.." + std::to_string(kMaxExperts);
  if (shape.top_k < 1 || shape.top_k > kMaxTopK || shape.top_k > shape.num_experts)
    return "top_k is " + std::to_string(shape.top_k) + ", expected 1.." +
           std::to_string(std::min(kMaxTopK, shape.num_experts)) + " (at most num_experts and " +
           std::to_string(kMaxTopK) + ")";
  return {};
}

void validate_shape(const TraceShape& shape, std::string_view where) {
  std::string problem = shape_problem(shape);
  if (!problem.empty()) throw common::InputError(std::string(where) + ": " + problem);
}

void shape_to_json(const TraceShape& shape, nlohmann::json& j) {
  j["architecture"] = shape.architecture;
  j["layers"] = shape.layers;
  j["num_experts"] = shape.num_experts;
  j["top_k"] = shape.top_k;
}

nlohmann::json meta_to_json(const TraceMeta& meta) {
  nlohmann::json j;
  j["format_version"] = kFormatVersion;
  shape_to_json(meta.shape, j);
  j["has_weights"] = meta.has_weights;
  j["source"] = meta.source;
  return j;
}

TraceMeta meta_from_json(const nlohmann::json& json, std::string_view where) {
  if (!json.is_object()) meta_fail(where, "expected a JSON object, got " + json_shown(json));
  for (const auto& [key, value] : json.items()) {
    const auto& keys = meta_keys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      meta_fail(where, "unknown key " + common::quoted(key) + common::did_you_mean(key, keys));
  }
  int version = require_int(json, "format_version", where);
  if (version != kFormatVersion)
    meta_fail(where, "format_version is " + std::to_string(version) + ", this moesim reads version " +
                         std::to_string(kFormatVersion));
  TraceMeta meta;
  const auto& arch = require(json, "architecture", where);
  if (!arch.is_string()) meta_fail(where, "\"architecture\": expected a string, got " + json_shown(arch));
  meta.shape.architecture = arch.get<std::string>();
  const auto& layers = require(json, "layers", where);
  if (!layers.is_array()) meta_fail(where, "\"layers\": expected an array of integers");
  for (const auto& l : layers) {
    if (!l.is_number_integer() || l.get<std::int64_t>() < 0 || l.get<std::int64_t>() > 1'000'000)
      meta_fail(where, "\"layers\": expected decoder-layer indices >= 0, got " + json_shown(l));
    meta.shape.layers.push_back(static_cast<int>(l.get<std::int64_t>()));
  }
  meta.shape.num_experts = require_int(json, "num_experts", where);
  meta.shape.top_k = require_int(json, "top_k", where);
  const auto& hw = require(json, "has_weights", where);
  if (!hw.is_boolean()) meta_fail(where, "\"has_weights\": expected true or false, got " + json_shown(hw));
  meta.has_weights = hw.get<bool>();
  const auto& src = require(json, "source", where);
  if (!src.is_string()) meta_fail(where, "\"source\": expected a string, got " + json_shown(src));
  meta.source = src.get<std::string>();
  std::string problem = shape_problem(meta.shape);
  if (!problem.empty()) meta_fail(where, problem);
  return meta;
}

TokenChecker::TokenChecker(const TraceShape& shape, bool has_weights)
    : shape_(shape), has_weights_(has_weights), stamp_(static_cast<std::size_t>(std::max(shape.num_experts, 0)), 0) {}

void TokenChecker::reset() {
  any_ = false;
  last_sequence_ = 0;
  last_position_ = 0;
  tokens_ = 0;
  sequences_ = 0;
}

std::string TokenChecker::layer_problem(const std::uint16_t* ids, const float* weights) {
  const auto k = static_cast<std::size_t>(shape_.top_k);
  const auto n = static_cast<std::uint32_t>(shape_.num_experts);
  if (++generation_ == 0) {  // wrapped: old stamps could collide with the new generation
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
  for (std::size_t j = 0; j < k; ++j) {
    const std::uint32_t e = ids[j];
    if (e >= n)
      return "expert id " + std::to_string(e) + " is out of range, expected 0.." + std::to_string(n - 1) +
             " (num_experts " + std::to_string(n) + ")";
    if (stamp_[e] == generation_) return "expert " + std::to_string(e) + " appears twice in one token's top-k";
    stamp_[e] = generation_;
  }
  if (weights != nullptr) {
    for (std::size_t j = 0; j < k; ++j) {
      if (!std::isfinite(weights[j])) {
        std::string w;
        append_float(w, weights[j]);
        return "gate weight " + w + " is not finite";
      }
    }
  }
  return {};
}

std::string TokenChecker::order_problem(std::uint32_t sequence, std::uint32_t position) {
  if (any_) {
    if (sequence < last_sequence_)
      return "sequence id " + std::to_string(sequence) + " follows sequence " + std::to_string(last_sequence_) +
             ": sequence ids must not decrease (each sequence is one run of tokens)";
    if (sequence == last_sequence_ && position <= last_position_)
      return "position " + std::to_string(position) + " follows position " + std::to_string(last_position_) +
             " in sequence " + std::to_string(sequence) + ": positions must increase within a sequence";
  }
  if (!any_ || sequence != last_sequence_) ++sequences_;
  any_ = true;
  last_sequence_ = sequence;
  last_position_ = position;
  ++tokens_;
  return {};
}

std::optional<TokenChecker::BlockProblem> TokenChecker::check_block(const TokenBlock& block) {
  const std::size_t n = block.sequence.size();
  const std::size_t per = ids_per_token(shape_);
  auto size_problem = [&](const char* field, std::size_t got, std::size_t want) {
    return BlockProblem{0, std::string("block field ") + field + " holds " + std::to_string(got) +
                               " values, expected " + std::to_string(want) + " for " + std::to_string(n) +
                               " tokens"};
  };
  if (block.position.size() != n) return size_problem("position", block.position.size(), n);
  if (block.experts.size() != n * per) return size_problem("experts", block.experts.size(), n * per);
  if (block.weights.size() != (has_weights_ ? n * per : 0))
    return size_problem("weights", block.weights.size(), has_weights_ ? n * per : 0);
  const std::size_t k = static_cast<std::size_t>(shape_.top_k);
  const std::size_t layers = shape_.layers.size();
  // A token is judged after all its layers, with no branch per id; only a token that fails is
  // checked again, slowly, for the message. Up to 64 experts, one bit per expert and (token,
  // layer): a bit already set is a repeat, a bit outside the range an id too large, an id of 64 or
  // more sets none. More experts: per expert, the (token, layer) that last saw it (a stamp); an id
  // out of range is counted and looked up as expert 0.
  const bool bits = shape_.num_experts <= 64;
  const std::uint64_t in_range = shape_.num_experts >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << shape_.num_experts) - 1;
  const auto experts = static_cast<std::uint32_t>(shape_.num_experts);
  for (std::size_t t = 0; t < n; ++t) {
    std::uint64_t bad = 0;
    const std::uint16_t* ids = block.experts.data() + t * per;
    if (bits) {
      for (std::size_t l = 0; l < layers; ++l, ids += k) {
        std::uint64_t seen = 0;
        for (std::size_t j = 0; j < k; ++j) {
          const std::uint64_t bit = ids[j] < 64 ? std::uint64_t{1} << ids[j] : 0;
          bad |= (seen & bit) | static_cast<std::uint64_t>(bit == 0);
          seen |= bit;
        }
        bad |= seen & ~in_range;
      }
    } else {
      if (generation_ > 0xffffffffU - static_cast<std::uint32_t>(layers) - 1) {
        std::fill(stamp_.begin(), stamp_.end(), 0);
        generation_ = 0;
      }
      for (std::size_t l = 0; l < layers; ++l, ids += k) {
        const std::uint32_t g = ++generation_;
        for (std::size_t j = 0; j < k; ++j) {
          const std::uint32_t e = ids[j];
          const bool out = e >= experts;
          const std::uint32_t at = out ? 0 : e;
          bad |= static_cast<std::uint64_t>(out) | static_cast<std::uint64_t>(stamp_[at] == g);
          stamp_[at] = g;
        }
      }
    }
    if (has_weights_) {
      const float* w = block.weights.data() + t * per;
      for (std::size_t i = 0; i < per; ++i) bad |= static_cast<std::uint64_t>(!std::isfinite(w[i]));
    }
    if (bad == 0) {
      std::string p = order_problem(block.sequence[t], block.position[t]);
      if (!p.empty()) return BlockProblem{t, p};
      continue;
    }
    for (std::size_t l = 0; l < layers; ++l) {
      const std::size_t off = t * per + l * k;
      std::string p = layer_problem(block.experts.data() + off, has_weights_ ? block.weights.data() + off : nullptr);
      if (!p.empty()) return BlockProblem{t, "layer " + std::to_string(shape_.layers[l]) + ": " + p};
    }
    std::string p = order_problem(block.sequence[t], block.position[t]);
    if (!p.empty()) return BlockProblem{t, p};
  }
  return std::nullopt;
}

std::string describe_token(std::uint64_t index, std::uint32_t sequence, std::uint32_t position) {
  return "token " + std::to_string(index) + " (sequence " + std::to_string(sequence) + ", position " +
         std::to_string(position) + ")";
}

namespace {

// Appends `value`'s compact JSON text (as dump() writes it) to `out`, stopping once `out` holds more than
// `limit` characters: what is written is then a prefix of dump() longer than `limit`. Every level of
// nesting adds a bracket first, so the recursion is at most `limit` deep: a value nested a million levels
// deep (which json::parse accepts, and on which dump() runs out of stack) is shown safely.
void append_shown(const nlohmann::json& value, std::string& out, std::size_t limit) {
  constexpr auto replace = nlohmann::json::error_handler_t::replace;
  if (value.is_array() || value.is_object()) {
    out += value.is_array() ? '[' : '{';
    bool first = true;
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (out.size() > limit) return;
      if (!first) out += ',';
      first = false;
      if (value.is_object()) out += nlohmann::json(it.key()).dump(-1, ' ', false, replace) + ":";
      append_shown(it.value(), out, limit);
    }
    out += value.is_array() ? ']' : '}';
  } else {
    out += value.dump(-1, ' ', false, replace);
  }
}

}  // namespace

std::string json_shown(const nlohmann::json& value) {
  std::string s;
  append_shown(value, s, 60);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

void append_float(std::string& out, float value) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

void append_uint(std::string& out, std::uint64_t value) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, value);
  out.append(buf, r.ptr);
}

}  // namespace moesim::traces
