#include "traces/generate.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "traces/sampling.hpp"

namespace moesim::traces {

namespace {

constexpr std::size_t kBlockTokens = 4096;
constexpr std::uint64_t kMaxTokens = 0xFFFFFFFFull;  // sequence ids and positions are uint32
constexpr int kCalibrationSets = 32768;
constexpr int kCalibrationRounds = 6;
constexpr int kMaxRejections = 64;

// Random streams, so that changing one use of randomness leaves the others as they were.
enum Stream : std::uint64_t { kStreamRanking = 1, kStreamCalibration = 2, kStreamTokens = 3 };

std::string format_number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// Caps every share of `shares[idx]` at `cap`, handing the excess to the uncapped ones in proportion
// (water-filling); their total is unchanged.
void cap_shares(std::vector<double>& shares, const std::vector<std::size_t>& idx, double cap) {
  std::vector<bool> capped(shares.size(), false);
  for (int round = 0; round < 64; ++round) {
    double excess = 0.0;
    double free_mass = 0.0;
    for (std::size_t i : idx) {
      if (capped[i]) continue;
      if (shares[i] > cap) {
        excess += shares[i] - cap;
        shares[i] = cap;
        capped[i] = true;
      } else {
        free_mass += shares[i];
      }
    }
    if (excess <= 0.0 || free_mass <= 0.0) return;
    for (std::size_t i : idx)
      if (!capped[i]) shares[i] += excess * shares[i] / free_mass;
  }
}

// How one layer's k-subsets of ranks are drawn: the inclusion probability each rank must reach, the
// ranks in every set, and the calibrated successive-sampling weights.
struct LayerDraw {
  std::vector<double> target;  // per rank: inclusion probability
  std::vector<bool> certain;   // ranks in every token's top-k
  std::vector<std::uint16_t> certain_list;
  std::vector<double> w;
  AliasTable alias;
  bool all_certain = false;  // nothing left to draw

  LayerDraw(const std::vector<double>& shares, int top_k) {
    const auto n = shares.size();
    target.resize(n);
    certain.assign(n, false);
    w.assign(n, 0.0);
    for (std::size_t r = 0; r < n; ++r) {
      target[r] = std::min(1.0, shares[r] * top_k);
      if (target[r] >= 1.0 - 1e-12) {
        certain[r] = true;
        certain_list.push_back(static_cast<std::uint16_t>(r));
      } else if (target[r] > 0.0) {
        // Rosen's approximation for successive sampling: inclusion ~ 1 - exp(-w).
        w[r] = -det_log(1.0 - target[r]);
      }
    }
    all_certain = certain_list.size() == static_cast<std::size_t>(top_k);
    if (!all_certain) alias = AliasTable(w);
  }

  void correct(const std::vector<double>& seen) {
    for (std::size_t r = 0; r < w.size(); ++r) {
      if (certain[r] || target[r] <= 0.0) continue;
      const double ratio = seen[r] > 0.0 ? target[r] / seen[r] : 2.0;
      w[r] *= std::clamp(ratio, 0.5, 2.0);
    }
    alias = AliasTable(w);
  }
};

// Draws k-subsets of popularity ranks, in rank space: the first layer by successive sampling, later
// layers by following the parent's rank with probability `affinity`, else successive sampling. The
// weights are calibrated by simulation so that each rank's inclusion probability matches k * share.
// With one share profile for all layers, later layers share one weight vector, calibrated on a
// population walked forward layer by layer; with a profile per layer, each layer's weights are
// calibrated on a population of the previous layer's sets.
class RankSampler {
 public:
  RankSampler(const std::vector<std::vector<double>>& profiles, std::size_t layers, int top_k, double affinity,
              Rng& rng)
      : experts_(static_cast<int>(profiles.front().size())),
        top_k_(top_k),
        affinity_(affinity),
        per_layer_(profiles.size() > 1) {
    if (per_layer_) {
      for (const auto& shares : profiles) draws_.emplace_back(shares, top_k);
    } else {
      draws_.emplace_back(profiles.front(), top_k);
      if (layers > 1) draws_.emplace_back(profiles.front(), top_k);
    }
    calibrate(layers, rng);
  }

  void first(Rng& rng, std::uint16_t* out) const {
    const LayerDraw& d = draws_.front();
    int m = place_certain(d, out);
    while (m < top_k_) {
      out[m] = draw(d, rng, out, m);
      ++m;
    }
  }

  // The set of MoE layer `layer` >= 1, given the parent set of layer - 1.
  void next(std::size_t layer, const std::uint16_t* parent, Rng& rng, std::uint16_t* out) const {
    const LayerDraw& d = draws_[per_layer_ ? layer : 1];
    int m = place_certain(d, out);
    for (int i = 0; i < top_k_ && m < top_k_; ++i) {
      const std::uint16_t p = parent[i];
      if (d.certain[p]) continue;  // its successor is a certain rank, already placed
      if (affinity_ > 0.0 && rng.uniform() < affinity_ && !contains(out, m, p)) {
        out[m++] = p;
      } else {
        out[m] = draw(d, rng, out, m);
        ++m;
      }
    }
  }

 private:
  static int place_certain(const LayerDraw& d, std::uint16_t* out) {
    int m = 0;
    for (std::uint16_t r : d.certain_list) out[m++] = r;
    return m;
  }

  static bool contains(const std::uint16_t* set, int m, std::uint16_t r) {
    for (int i = 0; i < m; ++i)
      if (set[i] == r) return true;
    return false;
  }

  // Successive sampling: a weight-proportional draw among ranks not yet in `set`. Rejection first;
  // after kMaxRejections (weights concentrated on taken ranks) an exact scan over the rest.
  std::uint16_t draw(const LayerDraw& d, Rng& rng, const std::uint16_t* set, int m) const {
    const auto& w = d.w;
    for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
      const auto r = static_cast<std::uint16_t>(d.alias.draw(rng));
      if (!contains(set, m, r)) return r;
    }
    double free_mass = 0.0;
    for (int r = 0; r < experts_; ++r)
      if (!contains(set, m, static_cast<std::uint16_t>(r))) free_mass += w[static_cast<std::size_t>(r)];
    double u = rng.uniform() * free_mass;
    int last = -1;
    for (int r = 0; r < experts_; ++r) {
      if (contains(set, m, static_cast<std::uint16_t>(r))) continue;
      if (w[static_cast<std::size_t>(r)] > 0.0) last = r;
      u -= w[static_cast<std::size_t>(r)];
      if (u < 0.0 && w[static_cast<std::size_t>(r)] > 0.0) return static_cast<std::uint16_t>(r);
    }
    if (last >= 0) return static_cast<std::uint16_t>(last);
    for (int r = 0; r < experts_; ++r)  // only zero-share ranks left: any free one
      if (!contains(set, m, static_cast<std::uint16_t>(r))) return static_cast<std::uint16_t>(r);
    return 0;
  }

  void calibrate(std::size_t layers, Rng& rng) {
    const auto k = static_cast<std::size_t>(top_k_);
    const auto n = static_cast<std::size_t>(experts_);
    std::vector<std::uint16_t> population(kCalibrationSets * k);
    std::vector<std::uint16_t> children(population.size());
    std::vector<double> seen(n);
    const double sets = kCalibrationSets;
    auto tally = [&](const std::vector<std::uint16_t>& s) {
      std::fill(seen.begin(), seen.end(), 0.0);
      for (std::uint16_t r : s) seen[r] += 1.0 / sets;
    };
    auto draw_first = [&]() {
      for (std::size_t s = 0; s < kCalibrationSets; ++s) first(rng, population.data() + s * k);
    };
    auto draw_children = [&](std::size_t layer) {
      for (std::size_t s = 0; s < kCalibrationSets; ++s)
        next(layer, population.data() + s * k, rng, children.data() + s * k);
    };
    if (draws_.front().all_certain) {
      draw_first();
    } else {
      for (int round = 0; round < kCalibrationRounds; ++round) {
        draw_first();
        tally(population);
        draws_.front().correct(seen);
      }
    }
    if (layers < 2 || affinity_ >= 1.0) return;  // later layers copy their parents' ranks
    if (!per_layer_) {
      // The population walks on layer after layer, so it approaches the stationary distribution
      // while the shared weights are being corrected.
      if (draws_[1].all_certain) return;
      for (int round = 0; round < kCalibrationRounds + 2; ++round) {
        draw_children(1);
        tally(children);
        draws_[1].correct(seen);
        population.swap(children);
      }
      return;
    }
    for (std::size_t l = 1; l < layers; ++l) {
      if (!draws_[l].all_certain) {
        for (int round = 0; round < kCalibrationRounds + 2; ++round) {
          draw_children(l);
          tally(children);
          draws_[l].correct(seen);
        }
      }
      draw_children(l);  // the calibrated layer's sets, parents of the next
      population.swap(children);
    }
  }

  int experts_;
  int top_k_;
  double affinity_;
  bool per_layer_;
  std::vector<LayerDraw> draws_;  // one per layer, or (one profile) the first layer's and the rest's
};

void fill_weights(Rng& rng, int top_k, float* out) {
  // Spread like a softmax's top-k: a few large weights, a tail of small ones; largest first, so the
  // first expert drawn (the most probable) gets the largest weight.
  double x[kMaxTopK];
  double total = 0.0;
  for (int i = 0; i < top_k; ++i) {
    const double u = rng.uniform();
    x[i] = 0.02 + u * u;
    total += x[i];
  }
  std::sort(x, x + top_k, [](double a, double b) { return a > b; });
  for (int i = 0; i < top_k; ++i) out[i] = static_cast<float>(x[i] / total);
}

}  // namespace

std::vector<ParamProblem> check_synthetic_params(const SyntheticParams& p) {
  std::vector<ParamProblem> problems;
  auto add = [&](const std::string& param, const std::string& problem) { problems.push_back({param, problem}); };
  const auto& shape = p.shape;
  if (shape.layers.empty()) add("architecture", "the architecture has no MoE layers: a dense model has no routing to trace");
  for (std::size_t i = 1; i < shape.layers.size(); ++i)
    if (shape.layers[i] <= shape.layers[i - 1]) {
      add("architecture", "MoE layer indices must be ascending, got " + std::to_string(shape.layers[i - 1]) +
                              " before " + std::to_string(shape.layers[i]));
      break;
    }
  if (shape.num_experts < 1 || shape.num_experts > kMaxExperts)
    add("architecture", "expected 1 to " + std::to_string(kMaxExperts) + " experts, got " +
                            std::to_string(shape.num_experts));
  if (shape.top_k < 1 || shape.top_k > std::min(shape.num_experts, kMaxTopK))
    add("architecture", "expected top-k between 1 and min(experts, " + std::to_string(kMaxTopK) + "), got " +
                            std::to_string(shape.top_k));
  if (p.tokens < 1 || p.tokens > kMaxTokens)
    add("tokens", "expected 1 to " + std::to_string(kMaxTokens) + " tokens, got " + std::to_string(p.tokens));
  if (!std::isfinite(p.zipf) || p.zipf < 0.0 || p.zipf > 10.0)
    add("zipf", "expected an exponent in [0, 10], got " + format_number(p.zipf));
  if (!std::isfinite(p.affinity) || p.affinity < 0.0 || p.affinity > 1.0)
    add("affinity", "expected a strength in [0, 1], got " + format_number(p.affinity));
  if (!std::isfinite(p.drift) || p.drift < 0.0 || p.drift > 1.0)
    add("drift", "expected a fraction of the expert ranking in [0, 1], got " + format_number(p.drift));
  if (p.seq_len_min < 1 || p.seq_len_max < p.seq_len_min)
    add("seq-len", "expected lengths >= 1 with min <= max, got " + std::to_string(p.seq_len_min) + ":" +
                       std::to_string(p.seq_len_max));
  if (p.hot_experts < 0 || (shape.num_experts > 0 && p.hot_experts >= shape.num_experts))
    add("hot-experts", "expected 0 to " + std::to_string(std::max(0, shape.num_experts - 1)) + " experts, got " +
                           std::to_string(p.hot_experts));
  if (p.hot_experts > 0) {
    if (!std::isfinite(p.hot_share) || p.hot_share <= 0.0 || p.hot_share >= 1.0) {
      add("hot-share", "expected a share in (0, 1) of all assignments, got " + format_number(p.hot_share));
    } else if (shape.top_k >= 1 && shape.num_experts > p.hot_experts) {
      // An expert is in at most every token's top-k: a share of at most 1/k each.
      const double hot_max = static_cast<double>(p.hot_experts) / shape.top_k;
      const double cold_max = static_cast<double>(shape.num_experts - p.hot_experts) / shape.top_k;
      if (p.hot_share > hot_max + 1e-12)
        add("hot-share", format_number(p.hot_share) + " cannot go to " + std::to_string(p.hot_experts) +
                             " experts under top-" + std::to_string(shape.top_k) +
                             " routing (each expert gets at most 1/" + std::to_string(shape.top_k) +
                             " of the assignments): use at most " + format_number(hot_max) +
                             " or more --hot-experts");
      if (1.0 - p.hot_share > cold_max + 1e-12)
        add("hot-share", format_number(p.hot_share) + " leaves " + format_number(1.0 - p.hot_share) +
                             " of the assignments to " + std::to_string(shape.num_experts - p.hot_experts) +
                             " experts, more than they can take under top-" + std::to_string(shape.top_k) +
                             ": use at least " + format_number(1.0 - cold_max));
    }
  } else if (p.hot_share != 0.0) {
    add("hot-share", "given without --hot-experts: say how many experts receive the share");
  }
  if (!p.layer_shares.empty()) {
    if (p.layer_shares.size() != shape.layers.size()) {
      add("expert-counts", "expected shares for each of the " + std::to_string(shape.layers.size()) +
                               " MoE layers, got " + std::to_string(p.layer_shares.size()));
    } else {
      for (std::size_t l = 0; l < p.layer_shares.size(); ++l) {
        const auto& v = p.layer_shares[l];
        double total = 0.0;
        bool finite = v.size() == static_cast<std::size_t>(shape.num_experts);
        for (double x : v) {
          finite = finite && std::isfinite(x) && x >= 0.0;
          total += x;
        }
        if (!finite || std::abs(total - 1.0) > 1e-9) {
          add("expert-counts", "MoE layer " + std::to_string(shape.layers[l]) + ": expected " +
                                   std::to_string(shape.num_experts) + " non-negative shares summing to 1");
          break;
        }
      }
    }
  }
  return problems;
}

std::vector<double> popularity_profile(const SyntheticParams& p, std::size_t layer) {
  const auto n = static_cast<std::size_t>(p.shape.num_experts);
  const auto hot = static_cast<std::size_t>(p.hot_experts);
  std::vector<double> shares(n, 0.0);
  std::vector<std::size_t> hot_idx, cold;
  for (std::size_t r = 0; r < hot; ++r) hot_idx.push_back(r);
  for (std::size_t r = hot; r < n; ++r) cold.push_back(r);
  const double cold_total = hot > 0 ? 1.0 - p.hot_share : 1.0;
  if (!p.layer_shares.empty()) {
    // The given shares in decreasing order; a hot set takes hot_share in proportion to its shares.
    shares = p.layer_shares.at(layer);
    std::sort(shares.begin(), shares.end(), [](double x, double y) { return x > y; });
    auto rescale = [&](const std::vector<std::size_t>& idx, double total) {
      double sum = 0.0;
      for (std::size_t r : idx) sum += shares[r];
      for (std::size_t r : idx)
        shares[r] = sum > 0.0 ? shares[r] * total / sum : total / static_cast<double>(idx.size());
    };
    if (hot > 0) {
      rescale(hot_idx, p.hot_share);
      rescale(cold, cold_total);
      cap_shares(shares, hot_idx, 1.0 / p.shape.top_k);
    } else {
      rescale(cold, 1.0);
    }
    cap_shares(shares, cold, 1.0 / p.shape.top_k);
    return shares;
  }
  for (std::size_t r = 0; r < hot; ++r) shares[r] = p.hot_share / static_cast<double>(hot);
  double zipf_total = 0.0;
  for (std::size_t r = hot; r < n; ++r) {
    shares[r] = det_pow(static_cast<double>(r - hot + 1), -p.zipf);
    zipf_total += shares[r];
  }
  for (std::size_t r : cold) shares[r] *= cold_total / zipf_total;
  cap_shares(shares, cold, 1.0 / p.shape.top_k);
  return shares;
}

namespace {

// Per layer, ranking[l][r] is the expert of popularity rank r: by decreasing given share (ties by
// id), or a shuffle drawn from the popularity seed.
std::vector<std::vector<std::uint16_t>> rankings(const SyntheticParams& p) {
  const auto layers = p.shape.layers.size();
  const auto n = static_cast<std::size_t>(p.shape.num_experts);
  Rng ranking_rng(mix_seed(p.popularity_seed, kStreamRanking));
  std::vector<std::vector<std::uint16_t>> ranking(layers, std::vector<std::uint16_t>(n));
  for (std::size_t l = 0; l < layers; ++l) {
    auto& order = ranking[l];
    for (std::size_t r = 0; r < n; ++r) order[r] = static_cast<std::uint16_t>(r);
    if (p.layer_shares.empty()) {
      shuffle(order, ranking_rng);
    } else {
      const auto& given = p.layer_shares[l];
      std::stable_sort(order.begin(), order.end(), [&](std::uint16_t x, std::uint16_t y) { return given[x] > given[y]; });
    }
  }
  return ranking;
}

}  // namespace

std::vector<double> expert_shares(const SyntheticParams& p, std::size_t layer) {
  const auto order = rankings(p).at(layer);
  const auto profile = popularity_profile(p, layer);
  std::vector<double> shares(profile.size());
  for (std::size_t r = 0; r < profile.size(); ++r) shares[order[r]] = profile[r];
  return shares;
}

std::vector<std::vector<double>> load_expert_count_shares(const std::string& path, const TraceShape& shape,
                                                          std::vector<int>* counted_layers) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw common::InputError(path + ": cannot open the expert-count file");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw common::InputError(path + ": expected a JSON expert-count file (keys \"layer0\", ... mapping expert ids to "
                             "counts), got text that is not JSON (" + std::string(e.what()) + ")");
  } catch (const nlohmann::json::out_of_range& e) {  // a number too large for a double
    throw common::InputError(path + ": a number out of range (" + std::string(e.what()) + "); counts must be finite");
  }
  const std::string want = "expected an object with keys \"layerN\" (N a MoE layer of " + shape.architecture +
                           ") mapping each expert id \"0\" .. \"" + std::to_string(shape.num_experts - 1) +
                           "\" to its count";
  if (!doc.is_object()) throw common::InputError(path + ": " + want + ", got a JSON " + doc.type_name());
  std::map<int, std::vector<double>> counted;  // decoder layer -> counts
  for (const auto& [key, value] : doc.items()) {
    const std::string where = path + ": key \"" + key + "\"";
    int layer = -1;
    if (key.rfind("layer", 0) == 0 && key.size() > 5 && key.size() < 12 &&
        std::all_of(key.begin() + 5, key.end(), [](char c) { return c >= '0' && c <= '9'; }))
      layer = std::stoi(key.substr(5));
    if (layer < 0) throw common::InputError(where + ": " + want + "; rename or remove the key");
    if (std::find(shape.layers.begin(), shape.layers.end(), layer) == shape.layers.end())
      throw common::InputError(where + ": layer " + std::to_string(layer) + " is not a MoE layer of " +
                               shape.architecture + " (MoE layers " + std::to_string(shape.layers.front()) + ".." +
                               std::to_string(shape.layers.back()) + "); use counts of this architecture");
    if (!value.is_object())
      throw common::InputError(where + ": expected an object mapping expert ids to counts, got a JSON " +
                               value.type_name());
    std::vector<double> counts(static_cast<std::size_t>(shape.num_experts), -1.0);
    for (const auto& [id, count] : value.items()) {
      const std::string at = where + ", expert \"" + id + "\"";
      int e = -1;
      if (!id.empty() && id.size() < 7 && std::all_of(id.begin(), id.end(), [](char c) { return c >= '0' && c <= '9'; }))
        e = std::stoi(id);
      if (e < 0 || e >= shape.num_experts)
        throw common::InputError(at + ": expected an expert id 0 .. " + std::to_string(shape.num_experts - 1) + " of " +
                                 shape.architecture + ", got \"" + id + "\"; counts of another model?");
      if (!count.is_number() || !std::isfinite(count.get<double>()) || count.get<double>() < 0.0)
        throw common::InputError(at + ": expected a non-negative count, got " + count.dump());
      counts[static_cast<std::size_t>(e)] = count.get<double>();
    }
    for (std::size_t e = 0; e < counts.size(); ++e)
      if (counts[e] < 0.0)
        throw common::InputError(where + ": expected a count for every expert 0 .. " +
                                 std::to_string(shape.num_experts - 1) + ", got none for expert " + std::to_string(e) +
                                 "; add \"" + std::to_string(e) + "\": 0 if it received no tokens");
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    if (!(total > 0.0)) throw common::InputError(where + ": expected some non-zero count, got all zero");
    for (double& c : counts) c /= total;
    counted[layer] = std::move(counts);
  }
  const std::string first_key = "layer" + std::to_string(shape.layers.front());
  if (counted.empty() || counted.begin()->first != shape.layers.front())
    throw common::InputError(path + ": key \"" + first_key + "\" missing: expected the counts of the first MoE layer (" +
                             first_key + "), from which the shares of the layers up to the next counted one are "
                             "interpolated; add it");
  if (counted_layers) {
    counted_layers->clear();
    for (const auto& [layer, counts] : counted) counted_layers->push_back(layer);
  }
  std::vector<std::vector<double>> shares;
  for (int layer : shape.layers) {
    auto hi = counted.lower_bound(layer);
    if (hi == counted.end()) {  // after the last counted layer: hold its shares
      shares.push_back(std::prev(hi)->second);
      continue;
    }
    if (hi->first == layer) {
      shares.push_back(hi->second);
      continue;
    }
    const auto lo = std::prev(hi);
    const double t = static_cast<double>(layer - lo->first) / static_cast<double>(hi->first - lo->first);
    std::vector<double> mix(lo->second.size());
    for (std::size_t e = 0; e < mix.size(); ++e) mix[e] = (1.0 - t) * lo->second[e] + t * hi->second[e];
    shares.push_back(std::move(mix));
  }
  return shares;
}

TraceMeta synthetic_meta(const SyntheticParams& p) {
  TraceMeta meta;
  meta.shape = p.shape;
  meta.has_weights = p.weights;
  meta.token_count = p.tokens;
  std::ostringstream src;
  src << "moesim trace generate (synthetic): seed " << p.seed;
  if (p.layer_shares.empty())
    src << ", popularity seed " << p.popularity_seed << ", zipf " << p.zipf;
  else
    src << ", per-layer shares from " << (p.layer_shares_source.empty() ? "given shares" : p.layer_shares_source);
  if (p.hot_experts > 0) src << ", hot experts " << p.hot_experts << " with share " << p.hot_share;
  src << ", affinity " << p.affinity << ", drift " << p.drift << ", sequence length ";
  if (p.seq_len_min == p.seq_len_max)
    src << p.seq_len_min;
  else
    src << p.seq_len_min << ".." << p.seq_len_max;
  src << (p.weights ? ", with gate weights" : ", no gate weights");
  meta.source = src.str();
  if (p.seq_len_min == p.seq_len_max && p.seq_len_min > 0)
    meta.sequence_count = (p.tokens + static_cast<std::uint64_t>(p.seq_len_min) - 1) / static_cast<std::uint64_t>(p.seq_len_min);
  return meta;
}

void generate_synthetic(const SyntheticParams& p, TraceWriter& out) {
  const auto problems = check_synthetic_params(p);
  if (!problems.empty())
    throw common::InputError("synthetic trace parameter " + problems.front().param + ": " + problems.front().problem);

  const auto layers = p.shape.layers.size();
  const int top_k = p.shape.top_k;
  const auto k = static_cast<std::size_t>(top_k);
  const int experts = p.shape.num_experts;
  const auto n = static_cast<std::size_t>(experts);

  const auto ranking = rankings(p);
  std::vector<std::vector<double>> profiles;
  if (p.layer_shares.empty()) {
    profiles.push_back(popularity_profile(p));
  } else {
    for (std::size_t l = 0; l < layers; ++l) profiles.push_back(popularity_profile(p, l));
  }
  // The calibration is part of the popularity model, not of the sample: it follows the popularity seed.
  Rng calibration_rng(mix_seed(p.popularity_seed, kStreamCalibration));
  const RankSampler sampler(profiles, layers, top_k, p.affinity, calibration_rng);

  Rng rng(mix_seed(p.seed, kStreamTokens));
  TokenBlock block;
  std::vector<std::uint16_t> ranks(layers * k);
  std::uint32_t sequence = 0;
  std::uint32_t position = 0;
  std::uint64_t length = 0;
  auto draw_length = [&]() -> std::uint64_t {
    if (p.seq_len_min == p.seq_len_max) return static_cast<std::uint64_t>(p.seq_len_min);
    return static_cast<std::uint64_t>(p.seq_len_min) +
           rng.below(static_cast<std::uint64_t>(p.seq_len_max - p.seq_len_min) + 1);
  };
  length = draw_length();
  const double rotation = p.drift * experts;  // ranks rotated by the last token
  for (std::uint64_t t = 0; t < p.tokens; ++t) {
    if (position == length) {
      ++sequence;
      position = 0;
      length = draw_length();
    }
    // The token's rotation: a whole number of ranks, the fraction taken with that probability so
    // that popularity moves smoothly even when drift * E is small.
    std::size_t shift = 0;
    if (rotation > 0.0) {
      const double x = rotation * static_cast<double>(t) / static_cast<double>(p.tokens);
      const double whole = std::floor(x);
      shift = static_cast<std::size_t>(whole) + (rng.uniform() < x - whole ? 1 : 0);
    }
    sampler.first(rng, ranks.data());
    for (std::size_t l = 1; l < layers; ++l) sampler.next(l, ranks.data() + (l - 1) * k, rng, ranks.data() + l * k);

    block.sequence.push_back(sequence);
    block.position.push_back(position);
    for (std::size_t l = 0; l < layers; ++l)
      for (std::size_t i = 0; i < k; ++i)
        block.experts.push_back(ranking[l][(ranks[l * k + i] + shift) % n]);
    if (p.weights) {
      const std::size_t at = block.weights.size();
      block.weights.resize(at + layers * k);
      for (std::size_t l = 0; l < layers; ++l) fill_weights(rng, top_k, block.weights.data() + at + l * k);
    }
    ++position;
    if (block.size() == kBlockTokens) {
      out.write(block);
      block.clear();
    }
  }
  if (block.size() > 0) out.write(block);
}

}  // namespace moesim::traces
