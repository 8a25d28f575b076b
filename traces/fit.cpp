#include "traces/fit.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/base64.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "traces/sampling.hpp"

namespace moesim::traces {

namespace {

constexpr std::size_t kBlockTokens = 4096;
constexpr int kCorrectionRounds = 8;
constexpr int kMaxRejections = 64;
constexpr int kSchemaVersion = 1;
constexpr const char* kModelKind = "moesim fitted routing model";

enum Stream : std::uint64_t { kStreamThinning = 10, kStreamSequences = 11, kStreamEvents = 12 };

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The mutation step replaces the expert in slot i of a source set S by a draw from q among the
// experts not in R = S \ {s_i}. To first order in the mutation probability (one replacement per set
// at a time), expert c is drawn with total expectation
//   D(c) = sum over sets and slots with c not in R of  q(c) / (1 - q(R)),
// and shares are unchanged when D(c) equals c's load. Fixed-point iteration q(c) *= load(c) / D(c),
// computed exactly over the source sets (no sampling noise).
std::vector<double> correct_mutation_weights(const std::vector<std::uint16_t>& experts, std::size_t tokens,
                                             std::size_t per_token, std::size_t layer_offset, int top_k,
                                             const std::vector<std::uint64_t>& loads) {
  const std::size_t n = loads.size();
  const auto k = static_cast<std::size_t>(top_k);
  double total = 0.0;
  for (auto v : loads) total += static_cast<double>(v);
  std::vector<double> q(n);
  for (std::size_t e = 0; e < n; ++e) q[e] = static_cast<double>(loads[e]) / total;
  if (static_cast<std::size_t>(top_k) >= n) return q;  // every expert in every set: nothing to replace
  std::vector<double> excluded(n);
  for (int round = 0; round < kCorrectionRounds; ++round) {
    std::fill(excluded.begin(), excluded.end(), 0.0);
    double all = 0.0;
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::uint16_t* set = experts.data() + t * per_token + layer_offset;
      double q_set = 0.0;
      for (std::size_t i = 0; i < k; ++i) q_set += q[set[i]];
      for (std::size_t i = 0; i < k; ++i) {
        const double inv = 1.0 / (1.0 - (q_set - q[set[i]]));
        all += inv;
        for (std::size_t j = 0; j < k; ++j)
          if (j != i) excluded[set[j]] += inv;
      }
    }
    double sum = 0.0;
    for (std::size_t e = 0; e < n; ++e) {
      if (loads[e] == 0) continue;
      const double expected = q[e] * (all - excluded[e]);
      if (expected > 0.0) q[e] *= static_cast<double>(loads[e]) / expected;
      sum += q[e];
    }
    for (auto& v : q) v /= sum;
  }
  return q;
}

// --- base64 (common/base64) of little-endian arrays, for the stored model ----------------------------

using common::base64_decode;
using common::base64_encode;

std::string encode_u16(const std::vector<std::uint16_t>& values) {
  std::vector<unsigned char> bytes(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    bytes[2 * i] = static_cast<unsigned char>(values[i] & 0xFF);
    bytes[2 * i + 1] = static_cast<unsigned char>(values[i] >> 8);
  }
  return base64_encode(bytes);
}

std::string encode_f32(const std::vector<float>& values) {
  std::vector<unsigned char> bytes(values.size() * 4);
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &values[i], 4);
    for (std::size_t b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<unsigned char>((bits >> (8 * b)) & 0xFF);
  }
  return base64_encode(bytes);
}

// --- JSON reading with messages that name the file and the key -------------------------------------

class JsonReader {
 public:
  explicit JsonReader(std::string name) : name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    throw common::InputError(name_ + ": " + key + ": " + what);
  }
  const nlohmann::json& at(const nlohmann::json& obj, const std::string& parent, const std::string& key) const {
    const std::string path = parent.empty() ? key : parent + "." + key;
    if (!obj.is_object()) fail(parent.empty() ? "(document)" : parent, "expected an object");
    auto it = obj.find(key);
    if (it == obj.end()) fail(path, "missing");
    return *it;
  }
  std::string string(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_string()) fail(key, "expected a string, got " + v.dump());
    return v.get<std::string>();
  }
  double number(const nlohmann::json& v, const std::string& key, double min, double max) const {
    if (!v.is_number()) fail(key, "expected a number, got " + short_dump(v));
    const double x = v.get<double>();
    if (!(x >= min && x <= max))
      fail(key, "expected a number in [" + format_number(min) + ", " + format_number(max) + "], got " + v.dump());
    return x;
  }
  std::uint64_t integer(const nlohmann::json& v, const std::string& key, std::uint64_t min, std::uint64_t max) const {
    if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
      fail(key, "expected a non-negative integer, got " + short_dump(v));
    const auto x = v.get<std::uint64_t>();
    if (x < min || x > max)
      fail(key, "expected an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "], got " + v.dump());
    return x;
  }
  bool boolean(const nlohmann::json& v, const std::string& key) const {
    if (!v.is_boolean()) fail(key, "expected true or false, got " + short_dump(v));
    return v.get<bool>();
  }
  const nlohmann::json& array(const nlohmann::json& v, const std::string& key, std::size_t size) const {
    if (!v.is_array()) fail(key, "expected an array, got " + short_dump(v));
    if (size != static_cast<std::size_t>(-1) && v.size() != size)
      fail(key, "expected " + std::to_string(size) + " entries, got " + std::to_string(v.size()));
    return v;
  }
  static std::string short_dump(const nlohmann::json& v) {
    std::string s = v.dump();
    return s.size() > 60 ? s.substr(0, 57) + "..." : s;
  }

 private:
  std::string name_;
};

}  // namespace

std::vector<ParamProblem> check_fit_options(const FitOptions& o) {
  std::vector<ParamProblem> problems;
  if (!std::isfinite(o.jump) || o.jump < 0.0 || o.jump > 1.0)
    problems.push_back({"fit-jump", "expected a probability in [0, 1], got " + format_number(o.jump)});
  if (!std::isfinite(o.mutation) || o.mutation < 0.0 || o.mutation > 1.0)
    problems.push_back({"fit-mutation", "expected a probability in [0, 1], got " + format_number(o.mutation)});
  if (o.max_source_tokens < 1)
    problems.push_back({"fit-max-tokens", "expected at least 1 token, got 0"});
  return problems;
}

FittedModel fit_model(TraceReader& source, const FitOptions& options) {
  const auto problems = check_fit_options(options);
  if (!problems.empty())
    throw common::InputError("fit option " + problems.front().param + ": " + problems.front().problem);
  const TraceMeta& meta = source.meta();
  FittedModel model;
  model.shape = meta.shape;
  model.has_weights = meta.has_weights;
  model.source = meta.source;
  model.source_token_count = meta.token_count;
  model.jump = options.jump;
  model.mutation = options.mutation;
  const std::size_t per_token = model.per_token();
  const auto n = static_cast<std::size_t>(meta.shape.num_experts);
  if (per_token == 0 || n == 0)
    throw common::InputError("cannot fit a routing model: the source trace has no MoE layers or no experts");

  // Thinning by whole sequences keeps sequence structure; the first sequence is always kept so that a
  // tiny keep probability still yields a model.
  const std::uint64_t cap = options.max_source_tokens;
  const double keep_probability =
      meta.token_count > cap ? static_cast<double>(cap) / static_cast<double>(meta.token_count) : 1.0;
  Rng thinning(mix_seed(options.seed, kStreamThinning));
  bool keeping = false;
  bool first_sequence = true;
  bool have_previous = false;
  std::uint32_t previous_sequence = 0;
  std::uint64_t kept = 0;
  TokenBlock block;
  while (source.next(block)) {
    if (block.experts.size() != block.size() * per_token)
      throw common::InputError("cannot fit a routing model: a block of " + std::to_string(block.size()) +
                               " tokens from the source holds " + std::to_string(block.experts.size()) +
                               " expert ids");
    for (std::size_t t = 0; t < block.size(); ++t) {
      if (!have_previous || block.sequence[t] != previous_sequence) {
        keeping = first_sequence || keep_probability >= 1.0 || thinning.uniform() < keep_probability;
        first_sequence = false;
        if (keeping && kept < cap) model.sequence_lengths.push_back(0);
      }
      have_previous = true;
      previous_sequence = block.sequence[t];
      if (!keeping || kept >= cap) continue;
      model.experts.insert(model.experts.end(), block.experts.begin() + static_cast<std::ptrdiff_t>(t * per_token),
                           block.experts.begin() + static_cast<std::ptrdiff_t>((t + 1) * per_token));
      if (model.has_weights)
        model.weights.insert(model.weights.end(), block.weights.begin() + static_cast<std::ptrdiff_t>(t * per_token),
                             block.weights.begin() + static_cast<std::ptrdiff_t>((t + 1) * per_token));
      ++model.sequence_lengths.back();
      ++kept;
    }
  }
  if (kept == 0) throw common::InputError("cannot fit a routing model: the source trace holds no tokens");

  const std::size_t layers = meta.shape.layers.size();
  const auto k = static_cast<std::size_t>(meta.shape.top_k);
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<std::uint64_t> loads(n, 0);
    for (std::size_t t = 0; t < kept; ++t)
      for (std::size_t i = 0; i < k; ++i) {
        const std::uint16_t e = model.experts[t * per_token + l * k + i];
        if (e >= n)
          throw common::InputError("cannot fit a routing model: source token " + std::to_string(t) + ", MoE layer " +
                                   std::to_string(meta.shape.layers[l]) + ": expert id " + std::to_string(e) +
                                   " is outside 0.." + std::to_string(n - 1));
        ++loads[e];
      }
    std::vector<double> shares(n);
    for (std::size_t e = 0; e < n; ++e) shares[e] = static_cast<double>(loads[e]) / static_cast<double>(kept * k);
    model.shares.push_back(std::move(shares));
    model.mutation_weights.push_back(correct_mutation_weights(model.experts, kept, per_token, l * k,
                                                              meta.shape.top_k, loads));
  }
  return model;
}

TraceMeta fitted_meta(const FittedModel& model, std::uint64_t tokens, std::uint64_t seed, double drift, int shift) {
  TraceMeta meta;
  meta.shape = model.shape;
  meta.has_weights = model.has_weights;
  meta.token_count = tokens;
  std::ostringstream src;
  src << "moesim trace generate (fitted): seed " << seed << ", jump " << model.jump << ", mutation "
      << model.mutation;
  if (drift > 0.0) src << ", drift " << drift;
  if (shift > 0) src << ", shift " << shift;
  src << ", model of " << model.tokens() << " tokens of [" << model.source << "]";
  meta.source = src.str();
  return meta;
}

void generate_fitted(const FittedModel& model, std::uint64_t tokens, std::uint64_t seed, TraceWriter& out,
                     double drift, int shift) {
  if (!(drift >= 0.0 && drift <= 1.0)) throw common::InputError("drift must be in [0, 1]");
  if (shift < 0 || shift >= model.shape.num_experts)
    throw common::InputError("shift must be in [0, " + std::to_string(model.shape.num_experts) + ")");
  const std::size_t layers = model.shape.layers.size();
  const auto k = static_cast<std::size_t>(model.shape.top_k);
  const auto n = static_cast<std::size_t>(model.shape.num_experts);
  const std::size_t per_token = model.per_token();
  const std::uint64_t source_tokens = model.tokens();
  if (source_tokens == 0) throw common::InputError("the routing model holds no tokens");

  // Per layer and expert, the source tokens whose set holds it (compressed rows).
  std::vector<std::vector<std::uint32_t>> row_start(layers, std::vector<std::uint32_t>(n + 1, 0));
  std::vector<std::vector<std::uint32_t>> holders(layers, std::vector<std::uint32_t>(source_tokens * k));
  for (std::size_t l = 0; l < layers; ++l) {
    auto& start = row_start[l];
    for (std::uint64_t t = 0; t < source_tokens; ++t)
      for (std::size_t i = 0; i < k; ++i) ++start[model.experts[t * per_token + l * k + i] + 1];
    for (std::size_t e = 0; e < n; ++e) start[e + 1] += start[e];
    std::vector<std::uint32_t> fill(start.begin(), start.end() - 1);
    for (std::uint64_t t = 0; t < source_tokens; ++t)
      for (std::size_t i = 0; i < k; ++i)
        holders[l][fill[model.experts[t * per_token + l * k + i]]++] = static_cast<std::uint32_t>(t);
  }
  std::vector<std::uint64_t> sequence_start(model.sequence_lengths.size());
  for (std::size_t s = 1; s < sequence_start.size(); ++s)
    sequence_start[s] = sequence_start[s - 1] + model.sequence_lengths[s - 1];
  std::vector<AliasTable> replacement;
  for (const auto& w : model.mutation_weights) replacement.emplace_back(w);

  Rng sequences(mix_seed(seed, kStreamSequences));
  Rng events(mix_seed(seed, kStreamEvents));
  std::uint64_t until_jump = geometric_skip(events, model.jump);
  std::uint64_t until_mutation = geometric_skip(events, model.mutation);

  TokenBlock block;
  std::vector<std::uint16_t> set(per_token);
  std::uint64_t written = 0;
  for (std::uint32_t sequence = 0; written < tokens; ++sequence) {
    const auto s = static_cast<std::size_t>(sequences.below(model.sequence_lengths.size()));
    const std::uint64_t length = std::min<std::uint64_t>(model.sequence_lengths[s], tokens - written);
    for (std::uint64_t position = 0; position < length; ++position) {
      std::uint64_t state = sequence_start[s] + position;
      const std::size_t weights_at = block.weights.size();
      if (model.has_weights) block.weights.resize(weights_at + per_token);
      for (std::size_t l = 0; l < layers; ++l) {
        if (l > 0) {
          if (until_jump == 0) {
            const std::uint16_t via = set[(l - 1) * k + sequences.below(k)];
            const std::uint32_t first = row_start[l - 1][via];
            const std::uint32_t count = row_start[l - 1][via + 1] - first;
            state = holders[l - 1][first + sequences.below(count)];
            until_jump = geometric_skip(events, model.jump);
          } else {
            --until_jump;
          }
        }
        std::uint16_t* out_set = set.data() + l * k;
        const std::uint16_t* source_set = model.experts.data() + state * per_token + l * k;
        std::copy(source_set, source_set + k, out_set);
        if (model.has_weights) {
          const float* w = model.weights.data() + state * per_token + l * k;
          std::copy(w, w + k, block.weights.begin() + static_cast<std::ptrdiff_t>(weights_at + l * k));
        }
        for (std::size_t i = 0; i < k; ++i) {
          if (until_mutation > 0) {
            --until_mutation;
            continue;
          }
          until_mutation = geometric_skip(events, model.mutation);
          auto taken = [&](std::uint16_t e) {
            for (std::size_t j = 0; j < k; ++j)
              if (j != i && out_set[j] == e) return true;
            return false;
          };
          std::uint16_t pick = out_set[i];
          bool found = false;
          for (int attempt = 0; attempt < kMaxRejections && !found; ++attempt) {
            pick = static_cast<std::uint16_t>(replacement[l].draw(sequences));
            found = !taken(pick);
          }
          if (found) out_set[i] = pick;  // else keep the source's expert: every draw collided
        }
      }
      block.sequence.push_back(sequence);
      block.position.push_back(static_cast<std::uint32_t>(position));
      if (drift > 0.0 || shift > 0) {
        const auto by = static_cast<std::uint64_t>(shift) +
                        static_cast<std::uint64_t>(std::floor(drift * static_cast<double>(n) *
                                                              static_cast<double>(written) / static_cast<double>(tokens)));
        for (auto& e : set) e = static_cast<std::uint16_t>((e + by) % n);
      }
      block.experts.insert(block.experts.end(), set.begin(), set.end());
      ++written;
      if (block.size() == kBlockTokens) {
        out.write(block);
        block.clear();
      }
    }
  }
  if (block.size() > 0) out.write(block);
}

nlohmann::json model_to_json(const FittedModel& m) {
  nlohmann::json doc;
  doc["schema_version"] = kSchemaVersion;
  doc["kind"] = kModelKind;
  doc["model"] = "first-order Markov chain over top-k sets with shared-expert back-off and marginal "
                 "mutation (docs/trace-generator.md)";
  doc["shape"] = {{"architecture", m.shape.architecture},
                  {"layers", m.shape.layers},
                  {"num_experts", m.shape.num_experts},
                  {"top_k", m.shape.top_k}};
  doc["has_weights"] = m.has_weights;
  doc["source"] = {{"description", m.source}, {"sha256", m.source_sha256}, {"token_count", m.source_token_count}};
  doc["jump"] = m.jump;
  doc["mutation"] = m.mutation;
  doc["sequence_lengths"] = m.sequence_lengths;
  doc["routing"] = {{"encoding", "base64 of little-endian uint16 expert ids, [token][layer][k]"},
                    {"data", encode_u16(m.experts)}};
  if (m.has_weights)
    doc["gate_weights"] = {{"encoding", "base64 of little-endian float32, [token][layer][k]"},
                           {"data", encode_f32(m.weights)}};
  doc["mutation_weights"] = m.mutation_weights;
  doc["layer_shares"] = m.shares;
  return doc;
}

FittedModel model_from_json(const nlohmann::json& doc, const std::string& name) {
  const JsonReader r(name);
  FittedModel m;
  const auto version = r.integer(r.at(doc, "", "schema_version"), "schema_version", 0, 1u << 30);
  if (version != kSchemaVersion)
    r.fail("schema_version", "expected " + std::to_string(kSchemaVersion) + " (this moesim's model format), got " +
                                 std::to_string(version));
  if (r.string(r.at(doc, "", "kind"), "kind") != kModelKind)
    r.fail("kind", std::string("expected \"") + kModelKind + "\": this is not a fitted routing model");
  const auto& shape = r.at(doc, "", "shape");
  m.shape.architecture = r.string(r.at(shape, "shape", "architecture"), "shape.architecture");
  const auto& layers = r.array(r.at(shape, "shape", "layers"), "shape.layers", static_cast<std::size_t>(-1));
  if (layers.empty()) r.fail("shape.layers", "expected at least one MoE layer");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto key = "shape.layers[" + std::to_string(i) + "]";
    m.shape.layers.push_back(static_cast<int>(r.integer(layers[i], key, 0, 1u << 20)));
    if (i > 0 && m.shape.layers[i] <= m.shape.layers[i - 1]) r.fail(key, "expected ascending layer indices");
  }
  m.shape.num_experts = static_cast<int>(r.integer(r.at(shape, "shape", "num_experts"), "shape.num_experts", 1, kMaxExperts));
  m.shape.top_k = static_cast<int>(r.integer(r.at(shape, "shape", "top_k"), "shape.top_k", 1,
                                             static_cast<std::uint64_t>(std::min(m.shape.num_experts, kMaxTopK))));
  m.has_weights = r.boolean(r.at(doc, "", "has_weights"), "has_weights");
  const auto& source = r.at(doc, "", "source");
  m.source = r.string(r.at(source, "source", "description"), "source.description");
  m.source_sha256 = r.string(r.at(source, "source", "sha256"), "source.sha256");
  m.source_token_count = r.integer(r.at(source, "source", "token_count"), "source.token_count", 0, UINT64_MAX);
  m.jump = r.number(r.at(doc, "", "jump"), "jump", 0.0, 1.0);
  m.mutation = r.number(r.at(doc, "", "mutation"), "mutation", 0.0, 1.0);
  const auto& lengths = r.array(r.at(doc, "", "sequence_lengths"), "sequence_lengths", static_cast<std::size_t>(-1));
  if (lengths.empty()) r.fail("sequence_lengths", "expected at least one sequence");
  std::uint64_t tokens = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    m.sequence_lengths.push_back(static_cast<std::uint32_t>(
        r.integer(lengths[i], "sequence_lengths[" + std::to_string(i) + "]", 1, 0xFFFFFFFFu)));
    tokens += m.sequence_lengths.back();
  }
  const std::size_t per_token = m.per_token();
  const auto k = static_cast<std::size_t>(m.shape.top_k);
  const auto n = static_cast<std::size_t>(m.shape.num_experts);
  const std::size_t entries = static_cast<std::size_t>(tokens) * per_token;

  const auto& routing = r.at(doc, "", "routing");
  const auto bytes = base64_decode(r.string(r.at(routing, "routing", "data"), "routing.data"), name + ": routing.data");
  if (bytes.size() != entries * 2)
    r.fail("routing.data", "expected " + std::to_string(entries * 2) + " bytes (" + std::to_string(tokens) +
                               " tokens x " + std::to_string(per_token) + " ids), got " + std::to_string(bytes.size()));
  m.experts.resize(entries);
  for (std::size_t i = 0; i < entries; ++i)
    m.experts[i] = static_cast<std::uint16_t>(bytes[2 * i] | (bytes[2 * i + 1] << 8));
  std::vector<std::vector<bool>> occurs(m.shape.layers.size(), std::vector<bool>(n, false));
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t l = 0; l < m.shape.layers.size(); ++l) {
      const std::uint16_t* set = m.experts.data() + t * per_token + l * k;
      for (std::size_t i = 0; i < k; ++i) {
        if (set[i] >= n)
          r.fail("routing.data", "token " + std::to_string(t) + ", MoE layer " + std::to_string(m.shape.layers[l]) +
                                     ": expert id " + std::to_string(set[i]) + " is outside 0.." +
                                     std::to_string(n - 1));
        for (std::size_t j = 0; j < i; ++j)
          if (set[j] == set[i])
            r.fail("routing.data", "token " + std::to_string(t) + ", MoE layer " +
                                       std::to_string(m.shape.layers[l]) + ": expert " + std::to_string(set[i]) +
                                       " appears twice in one top-k set");
        occurs[l][set[i]] = true;
      }
    }
  if (m.has_weights) {
    const auto& gw = r.at(doc, "", "gate_weights");
    const auto wbytes = base64_decode(r.string(r.at(gw, "gate_weights", "data"), "gate_weights.data"),
                                      name + ": gate_weights.data");
    if (wbytes.size() != entries * 4)
      r.fail("gate_weights.data", "expected " + std::to_string(entries * 4) + " bytes, got " +
                                      std::to_string(wbytes.size()));
    m.weights.resize(entries);
    for (std::size_t i = 0; i < entries; ++i) {
      std::uint32_t bits = 0;
      for (std::size_t b = 0; b < 4; ++b) bits |= static_cast<std::uint32_t>(wbytes[4 * i + b]) << (8 * b);
      std::memcpy(&m.weights[i], &bits, 4);
      if (!std::isfinite(m.weights[i]))
        r.fail("gate_weights.data", "entry " + std::to_string(i) + " is not a finite number");
    }
  }
  for (const char* key : {"mutation_weights", "layer_shares"}) {
    const auto& rows = r.array(r.at(doc, "", key), key, m.shape.layers.size());
    auto& target = std::string(key) == "mutation_weights" ? m.mutation_weights : m.shares;
    for (std::size_t l = 0; l < rows.size(); ++l) {
      const auto row_key = std::string(key) + "[" + std::to_string(l) + "]";
      const auto& row = r.array(rows[l], row_key, n);
      std::vector<double> values;
      double sum = 0.0;
      for (std::size_t e = 0; e < n; ++e) {
        const auto entry_key = row_key + "[" + std::to_string(e) + "]";
        values.push_back(r.number(row[e], entry_key, 0.0, 1.0));
        if (values.back() > 0.0 && !occurs[l][e])
          r.fail(entry_key, "expected 0 for an expert that never occurs at MoE layer " +
                                std::to_string(m.shape.layers[l]) + " in routing.data, got " + row[e].dump());
        sum += values.back();
      }
      if (!(sum > 0.0)) r.fail(row_key, "expected some positive weight, got all zeros");
      target.push_back(std::move(values));
    }
  }
  return m;
}

void save_model(const FittedModel& model, const std::string& path, bool overwrite) {
  common::write_file_atomic(path, model_to_json(model).dump(1) + "\n", overwrite);
}

FittedModel load_model(const std::string& path) {
  const std::string text = common::read_file(path);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw common::InputError(path + ": not valid JSON (byte " + std::to_string(e.byte) +
                             "): expected a model written by `moesim trace generate --save-model`");
  } catch (const nlohmann::json::out_of_range& e) {  // a number too large for a double
    throw common::InputError(path + ": a number out of range (" + e.what() +
                             "): expected a model written by `moesim trace generate --save-model`");
  }
  return model_from_json(doc, path);
}

}  // namespace moesim::traces
