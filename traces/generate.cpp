#include "traces/generate.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

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

// Draws k-subsets of popularity ranks, in rank space (the same for every layer): the first layer by
// successive sampling with weights w0, later layers by following the parent's rank with probability
// `affinity`, else successive sampling with weights w1. Both weight vectors are calibrated by
// simulation so that each rank's inclusion probability matches k * share.
class RankSampler {
 public:
  RankSampler(const std::vector<double>& shares, int top_k, double affinity, Rng& rng)
      : experts_(static_cast<int>(shares.size())), top_k_(top_k), affinity_(affinity) {
    const auto n = shares.size();
    target_.resize(n);
    certain_.assign(n, false);
    std::vector<double> w(n, 0.0);
    for (std::size_t r = 0; r < n; ++r) {
      target_[r] = std::min(1.0, shares[r] * top_k);
      if (target_[r] >= 1.0 - 1e-12) {
        certain_[r] = true;
        certain_list_.push_back(static_cast<std::uint16_t>(r));
      } else if (target_[r] > 0.0) {
        // Rosen's approximation for successive sampling: inclusion ~ 1 - exp(-w).
        w[r] = -det_log(1.0 - target_[r]);
      }
    }
    w0_ = w;
    w1_ = w;
    if (certain_list_.size() == static_cast<std::size_t>(top_k_)) return;  // nothing left to draw
    rebuild();
    calibrate(rng);
  }

  void first(Rng& rng, std::uint16_t* out) const {
    int m = place_certain(out);
    while (m < top_k_) {
      out[m] = draw(alias0_, w0_, rng, out, m);
      ++m;
    }
  }

  void next(const std::uint16_t* parent, Rng& rng, std::uint16_t* out) const {
    int m = place_certain(out);
    for (int i = 0; i < top_k_ && m < top_k_; ++i) {
      const std::uint16_t p = parent[i];
      if (certain_[p]) continue;  // its successor is the certain rank, already placed
      if (affinity_ > 0.0 && rng.uniform() < affinity_ && !contains(out, m, p)) {
        out[m++] = p;
      } else {
        out[m] = draw(alias1_, w1_, rng, out, m);
        ++m;
      }
    }
  }

 private:
  int place_certain(std::uint16_t* out) const {
    int m = 0;
    for (std::uint16_t r : certain_list_) out[m++] = r;
    return m;
  }

  static bool contains(const std::uint16_t* set, int m, std::uint16_t r) {
    for (int i = 0; i < m; ++i)
      if (set[i] == r) return true;
    return false;
  }

  // Successive sampling: a weight-proportional draw among ranks not yet in `set`. Rejection first;
  // after kMaxRejections (weights concentrated on taken ranks) an exact scan over the rest.
  std::uint16_t draw(const AliasTable& alias, const std::vector<double>& w, Rng& rng, const std::uint16_t* set,
                     int m) const {
    for (int attempt = 0; attempt < kMaxRejections; ++attempt) {
      const auto r = static_cast<std::uint16_t>(alias.draw(rng));
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

  void rebuild() {
    alias0_ = AliasTable(w0_);
    alias1_ = AliasTable(w1_);
  }

  static void correct(std::vector<double>& w, const std::vector<double>& target, const std::vector<double>& seen,
                      const std::vector<bool>& certain) {
    for (std::size_t r = 0; r < w.size(); ++r) {
      if (certain[r] || target[r] <= 0.0) continue;
      const double ratio = seen[r] > 0.0 ? target[r] / seen[r] : 2.0;
      w[r] *= std::clamp(ratio, 0.5, 2.0);
    }
  }

  void calibrate(Rng& rng) {
    const auto k = static_cast<std::size_t>(top_k_);
    const auto n = static_cast<std::size_t>(experts_);
    std::vector<std::uint16_t> population(kCalibrationSets * k);
    std::vector<std::uint16_t> children(population.size());
    std::vector<double> seen(n);
    const double sets = kCalibrationSets;
    for (int round = 0; round < kCalibrationRounds; ++round) {
      std::fill(seen.begin(), seen.end(), 0.0);
      for (std::size_t s = 0; s < kCalibrationSets; ++s) {
        first(rng, population.data() + s * k);
        for (std::size_t i = 0; i < k; ++i) seen[population[s * k + i]] += 1.0 / sets;
      }
      correct(w0_, target_, seen, certain_);
      alias0_ = AliasTable(w0_);
    }
    // Later layers: the population walks on layer after layer, so it approaches the stationary
    // distribution while w1 is being corrected.
    if (affinity_ >= 1.0) return;
    for (int round = 0; round < kCalibrationRounds + 2; ++round) {
      std::fill(seen.begin(), seen.end(), 0.0);
      for (std::size_t s = 0; s < kCalibrationSets; ++s) {
        next(population.data() + s * k, rng, children.data() + s * k);
        for (std::size_t i = 0; i < k; ++i) seen[children[s * k + i]] += 1.0 / sets;
      }
      correct(w1_, target_, seen, certain_);
      alias1_ = AliasTable(w1_);
      population.swap(children);
    }
  }

  int experts_;
  int top_k_;
  double affinity_;
  std::vector<double> target_;  // per rank: inclusion probability
  std::vector<bool> certain_;   // ranks in every token's top-k
  std::vector<std::uint16_t> certain_list_;
  std::vector<double> w0_, w1_;
  AliasTable alias0_, alias1_;
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
  return problems;
}

std::vector<double> popularity_profile(const SyntheticParams& p) {
  const auto n = static_cast<std::size_t>(p.shape.num_experts);
  const auto hot = static_cast<std::size_t>(p.hot_experts);
  std::vector<double> shares(n, 0.0);
  const double cold_total = hot > 0 ? 1.0 - p.hot_share : 1.0;
  for (std::size_t r = 0; r < hot; ++r) shares[r] = p.hot_share / static_cast<double>(hot);
  double zipf_total = 0.0;
  for (std::size_t r = hot; r < n; ++r) {
    shares[r] = det_pow(static_cast<double>(r - hot + 1), -p.zipf);
    zipf_total += shares[r];
  }
  std::vector<std::size_t> cold;
  for (std::size_t r = hot; r < n; ++r) {
    shares[r] *= cold_total / zipf_total;
    cold.push_back(r);
  }
  cap_shares(shares, cold, 1.0 / p.shape.top_k);
  return shares;
}

TraceMeta synthetic_meta(const SyntheticParams& p) {
  TraceMeta meta;
  meta.shape = p.shape;
  meta.has_weights = p.weights;
  meta.token_count = p.tokens;
  std::ostringstream src;
  src << "moesim trace generate (synthetic): seed " << p.seed << ", zipf " << p.zipf;
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

  // Per layer, a random ranking: ranking[l][r] is the expert of popularity rank r.
  Rng ranking_rng(mix_seed(p.seed, kStreamRanking));
  std::vector<std::vector<std::uint16_t>> ranking(layers, std::vector<std::uint16_t>(n));
  for (auto& order : ranking) {
    for (std::size_t r = 0; r < n; ++r) order[r] = static_cast<std::uint16_t>(r);
    shuffle(order, ranking_rng);
  }
  Rng calibration_rng(mix_seed(p.seed, kStreamCalibration));
  const RankSampler sampler(popularity_profile(p), top_k, p.affinity, calibration_rng);

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
    for (std::size_t l = 1; l < layers; ++l) sampler.next(ranks.data() + (l - 1) * k, rng, ranks.data() + l * k);

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
