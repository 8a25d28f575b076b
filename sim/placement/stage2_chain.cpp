// The exact stage-2 chain program for up to 5 ranks: layers in order, each state a layout of the
// layer and the experts every rank holds so far, pruned against an incumbent with the cost to go of
// the chain without the memory rows. Layer 0 keeps one layout per orbit of the fabric's symmetries.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <unordered_map>

#include "sim/placement/moetuner_stage2.hpp"

namespace moesim::sim {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

class ChainProgram {
 public:
  ChainProgram(const Stage2Problem& p, int lo, int hi, double incumbent)
      : p_(p),
        G_(static_cast<std::size_t>(p.ranks)),
        L_(p.sizes.size()),
        lo_(lo),
        hi_(hi),
        perms_(all_layouts(G_)),
        P_(perms_.size()),
        prune_(std::isfinite(incumbent)),
        cutoff_(incumbent + 1e-9 * std::max(1e-300, std::fabs(incumbent))) {}

  // Fills the tables and runs the layers; false when the entry limit stopped it.
  bool run(long entry_limit) {
    tables();
    seed();
    for (std::size_t l = 0; l + 1 < L_; ++l)
      if (!step(l, entry_limit)) return false;
    return true;
  }
  long entries() const { return entries_; }
  // The cheapest balanced chain found; false when there is none.
  bool best_chain(double& objective, std::vector<std::vector<int>>& cluster_on) const;

 private:
  using Counts = std::array<int, 5>;
  struct Layer {
    std::vector<Counts> counts;
    std::vector<double> cost;        // [state * P + layout]
    std::vector<std::int32_t> from;  // previous layer's state * P + layout, -1 at layer 0
  };
  using Index = std::unordered_map<std::uint64_t, std::size_t>;

  void tables();
  void seed();
  bool step(std::size_t l, long entry_limit);
  bool canonical(std::size_t i, const std::vector<std::vector<int>>& automorphisms) const;

  std::uint64_t key_of(const Counts& c) const {
    std::uint64_t k = 0;
    for (std::size_t g = 0; g + 1 < G_; ++g) k = (k << 16) | static_cast<std::uint64_t>(c[g]);
    return k;
  }
  bool admissible(const Counts& c, std::size_t l) const {
    for (std::size_t g = 0; g < G_; ++g)
      if (c[g] + rest_min_[l] > hi_ || c[g] + rest_max_[l] < lo_) return false;
    return true;
  }
  std::size_t add_state(Layer& layer, Index& index, const Counts& c) {
    const auto [it, inserted] = index.try_emplace(key_of(c), layer.counts.size());
    if (inserted) {
      layer.counts.push_back(c);
      layer.cost.resize(layer.cost.size() + P_, kInf);
      layer.from.resize(layer.from.size() + P_, -1);
      entries_ += static_cast<long>(P_);
    }
    return it->second;
  }

  const Stage2Problem& p_;
  std::size_t G_, L_;
  int lo_, hi_;
  std::vector<std::vector<int>> perms_;
  std::size_t P_;
  bool prune_;
  double cutoff_;
  // pair_[l][i * P + j]: the pair objective with layouts i and j; togo_[l][i]: the cheapest rest of the
  // chain from layout i of layer l without the memory rows (prunes, exactly, against the incumbent).
  std::vector<std::vector<double>> pair_, togo_;
  std::vector<int> rest_min_, rest_max_;  // experts each rank may still receive after layer l
  std::vector<Layer> layers_;
  long entries_ = 0;
};

void ChainProgram::tables() {
  pair_.assign(L_ > 0 ? L_ - 1 : 0, std::vector<double>(P_ * P_));
  for (std::size_t l = 0; l + 1 < L_; ++l)
    for (std::size_t i = 0; i < P_; ++i)
      for (std::size_t j = 0; j < P_; ++j) pair_[l][i * P_ + j] = stage2_pair_objective(p_, l, perms_[i], perms_[j]);
  togo_.assign(L_, std::vector<double>(P_, 0.0));
  for (std::size_t l = L_ - 1; l-- > 0;)
    for (std::size_t i = 0; i < P_; ++i) {
      double best = kInf;
      for (std::size_t j = 0; j < P_; ++j) best = std::min(best, pair_[l][i * P_ + j] + togo_[l + 1][j]);
      togo_[l][i] = best;
    }
  rest_min_.assign(L_, 0);
  rest_max_.assign(L_, 0);
  for (std::size_t l = L_ - 1; l-- > 0;) {
    rest_min_[l] = rest_min_[l + 1] + *std::min_element(p_.sizes[l + 1].begin(), p_.sizes[l + 1].end());
    rest_max_[l] = rest_max_[l + 1] + *std::max_element(p_.sizes[l + 1].begin(), p_.sizes[l + 1].end());
  }
  layers_.assign(L_, {});
}

// Layout i is the least of its orbit under the rank permutations that keep every link's cost
// (relabelling the ranks of every layer at once by such a permutation changes neither objective nor
// balance).
bool ChainProgram::canonical(std::size_t i, const std::vector<std::vector<int>>& automorphisms) const {
  for (const auto& s : automorphisms) {
    std::vector<int> moved(G_);
    for (std::size_t g = 0; g < G_; ++g) moved[static_cast<std::size_t>(s[g])] = perms_[i][g];
    if (moved < perms_[i]) return false;
  }
  return true;
}

void ChainProgram::seed() {
  std::vector<std::vector<int>> automorphisms;
  for (const auto& s : perms_) {
    bool keeps = true;
    for (std::size_t a = 0; a < G_ && keeps; ++a)
      for (std::size_t b = 0; b < G_ && keeps; ++b)
        keeps = p_.cost[static_cast<std::size_t>(s[a]) * G_ + static_cast<std::size_t>(s[b])] == p_.cost[a * G_ + b];
    if (keeps) automorphisms.push_back(s);
  }
  Index index;
  for (std::size_t i = 0; i < P_; ++i) {
    if (!canonical(i, automorphisms) || (prune_ && togo_[0][i] > cutoff_)) continue;
    Counts c{};
    for (std::size_t g = 0; g < G_; ++g) c[g] = p_.sizes[0][static_cast<std::size_t>(perms_[i][g])];
    if (!admissible(c, 0)) continue;
    const std::size_t s = add_state(layers_[0], index, c);
    layers_[0].cost[s * P_ + i] = 0.0;
  }
}

bool ChainProgram::step(std::size_t l, long entry_limit) {
  std::vector<double> best(P_);
  std::vector<std::size_t> arg(P_);
  Index index;
  Layer& cur = layers_[l];
  Layer& next = layers_[l + 1];
  for (std::size_t s = 0; s < cur.counts.size(); ++s) {
    std::fill(best.begin(), best.end(), kInf);
    for (std::size_t i = 0; i < P_; ++i) {
      const double c0 = cur.cost[s * P_ + i];
      if (!std::isfinite(c0)) continue;
      const double* row = &pair_[l][i * P_];
      for (std::size_t j = 0; j < P_; ++j)
        if (c0 + row[j] < best[j]) best[j] = c0 + row[j], arg[j] = i;
    }
    for (std::size_t j = 0; j < P_; ++j) {
      if (!std::isfinite(best[j]) || (prune_ && best[j] + togo_[l + 1][j] > cutoff_)) continue;
      Counts c = cur.counts[s];
      for (std::size_t g = 0; g < G_; ++g) c[g] += p_.sizes[l + 1][static_cast<std::size_t>(perms_[j][g])];
      if (!admissible(c, l + 1)) continue;
      const std::size_t t = add_state(next, index, c);
      if (entries_ > entry_limit || entries_ >= std::numeric_limits<std::int32_t>::max()) return false;
      if (best[j] < next.cost[t * P_ + j]) {
        next.cost[t * P_ + j] = best[j];
        next.from[t * P_ + j] = static_cast<std::int32_t>(s * P_ + arg[j]);
      }
    }
  }
  return true;
}

bool ChainProgram::best_chain(double& objective, std::vector<std::vector<int>>& cluster_on) const {
  const Layer& last = layers_[L_ - 1];
  std::int64_t at = -1;
  double found = kInf;
  for (std::size_t k = 0; k < last.cost.size(); ++k)
    if (last.cost[k] < found) found = last.cost[k], at = static_cast<std::int64_t>(k);
  if (at < 0) return false;
  objective = found;
  cluster_on.assign(L_, {});
  for (std::size_t l = L_; l-- > 0;) {
    const auto k = static_cast<std::size_t>(at);
    cluster_on[l] = perms_[k % P_];
    at = layers_[l].from[k];
  }
  return true;
}

}  // namespace

ChainDpResult stage2_chain_dp(const Stage2Problem& p, int lo, int hi, double incumbent, long entry_limit) {
  ChainDpResult out;
  const auto G = static_cast<std::size_t>(p.ranks);
  const std::size_t L = p.sizes.size();
  if (G < 1 || G > 5 || L == 0) return out;
  long max_total = 0;
  for (const auto& s : p.sizes) max_total += *std::max_element(s.begin(), s.end());
  if (max_total > 65535) return out;  // counts are packed in 16 bits
  ChainProgram program(p, lo, hi, incumbent);
  if (!program.run(entry_limit)) return out;
  out.completed = true;
  out.entries = program.entries();
  // No chain: none balanced at or below the incumbent.
  out.feasible = program.best_chain(out.objective, out.cluster_on);
  return out;
}

}  // namespace moesim::sim
