// One layer's layout given its neighbours: exactly by threshold matchings (up to 16 ranks), or as an
// assignment ILP on GLPK with the memory rows (beyond).
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <utility>

#include "sim/placement/glpk_mip.hpp"
#include "sim/placement/moetuner_stage2.hpp"
#include "sim/placement/stage2_parts.hpp"

namespace moesim::sim {

namespace {

// Perfect matchings of clusters to ranks over the entries with allowed, left <= a and right <= b,
// kept up to date as a grows and b shrinks (Kuhn's augmenting paths).
class ThresholdMatching {
 public:
  ThresholdMatching(std::size_t G, const std::vector<double>& left, const std::vector<double>& right,
                    const std::vector<char>& allowed)
      : G_(G), left_(left), right_(right), allowed_(allowed), rank_of_(G, -1), cluster_on_(G, -1), seen_(G, 0) {}
  void set(double a, double b) {
    a_ = a;
    b_ = b;
    for (std::size_t c = 0; c < G_; ++c) {
      const int g = rank_of_[c];
      if (g >= 0 && !usable(c, static_cast<std::size_t>(g))) {
        cluster_on_[static_cast<std::size_t>(g)] = -1;
        rank_of_[c] = -1;
      }
    }
  }
  bool complete() {
    for (std::size_t c = 0; c < G_; ++c) {
      if (rank_of_[c] >= 0) continue;
      std::fill(seen_.begin(), seen_.end(), 0);
      if (!augment(c)) return false;
    }
    return true;
  }
  const std::vector<int>& cluster_on() const { return cluster_on_; }

 private:
  bool usable(std::size_t c, std::size_t g) const {
    const std::size_t i = c * G_ + g;
    return allowed_[i] && left_[i] <= a_ && right_[i] <= b_;
  }
  bool augment(std::size_t c) {
    for (std::size_t g = 0; g < G_; ++g) {
      if (seen_[g] || !usable(c, g)) continue;
      seen_[g] = 1;
      const int holder = cluster_on_[g];
      if (holder < 0 || augment(static_cast<std::size_t>(holder))) {
        cluster_on_[g] = static_cast<int>(c);
        rank_of_[c] = static_cast<int>(g);
        return true;
      }
    }
    return false;
  }
  std::size_t G_;
  const std::vector<double>& left_;
  const std::vector<double>& right_;
  const std::vector<char>& allowed_;
  std::vector<int> rank_of_, cluster_on_;
  std::vector<char> seen_;
  double a_ = 0.0, b_ = 0.0;
};

std::vector<double> distinct_values(const std::vector<double>& w, const std::vector<char>& allowed) {
  std::vector<double> v;
  for (std::size_t i = 0; i < w.size(); ++i)
    if (allowed[i]) v.push_back(w[i]);
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// The assignment ILP: y[c * G + g] binary (cluster c on rank g), tl / tr bound the slowest transfer
// from the left / to the right (columns only for the neighbours given), weights scaled to O(1).
struct AssignmentMip {
  MipModel model;
  std::vector<int> y;
  int tl = 0, tr = 0;
  double scale = 1.0;
};

AssignmentMip assignment_mip(const Stage2Problem& p, std::size_t l, const std::vector<double>* left,
                             const std::vector<double>* right, const std::vector<int>* lo, const std::vector<int>* hi) {
  const auto G = static_cast<std::size_t>(p.ranks);
  AssignmentMip mip;
  MipModel& m = mip.model;
  mip.y.resize(G * G);
  for (std::size_t i = 0; i < G * G; ++i) mip.y[i] = m.add_col(0.0, 1.0, true, 0.0);
  mip.tl = left ? m.add_col(0.0, std::numeric_limits<double>::infinity(), false, 1.0) : 0;
  mip.tr = right ? m.add_col(0.0, std::numeric_limits<double>::infinity(), false, 1.0) : 0;
  for (std::size_t c = 0; c < G; ++c) {
    const int r = m.add_row(RowBound::kFixed, 1.0, 1.0);
    for (std::size_t g = 0; g < G; ++g) m.add(r, mip.y[c * G + g], 1.0);
  }
  for (std::size_t g = 0; g < G; ++g) {
    const int r = m.add_row(RowBound::kFixed, 1.0, 1.0);
    for (std::size_t c = 0; c < G; ++c) m.add(r, mip.y[c * G + g], 1.0);
  }
  // Scaled to O(1): GLPK's tolerances are absolute.
  double scale = 0.0;
  for (const auto* w : {left, right})
    if (w) scale = std::max(scale, *std::max_element(w->begin(), w->end()));
  mip.scale = scale > 0 ? 1.0 / scale : 1.0;
  for (const auto& [w, t] : {std::pair{left, mip.tl}, std::pair{right, mip.tr}}) {
    if (!w) continue;
    for (std::size_t g = 0; g < G; ++g) {
      const int r = m.add_row(RowBound::kLower, 0.0, 0.0);
      m.add(r, t, 1.0);
      for (std::size_t c = 0; c < G; ++c) m.add(r, mip.y[c * G + g], -(*w)[c * G + g] * mip.scale);
    }
  }
  if (lo && hi)
    for (std::size_t g = 0; g < G; ++g) {
      const double a = (*lo)[g], b = (*hi)[g];
      const int r = a == b ? m.add_row(RowBound::kFixed, a, a) : m.add_row(RowBound::kRange, a, b);
      for (std::size_t c = 0; c < G; ++c) m.add(r, mip.y[c * G + g], p.sizes[l][c]);
    }
  return mip;
}

// The ILP's columns for the layout `current`.
std::vector<double> assignment_start(const AssignmentMip& mip, std::size_t G, const std::vector<double>* left,
                                     const std::vector<double>* right, const std::vector<int>& current) {
  std::vector<double> warm(static_cast<std::size_t>(mip.model.cols()), 0.0);
  double wl = 0.0, wr = 0.0;
  for (std::size_t g = 0; g < G; ++g) {
    const auto c = static_cast<std::size_t>(current[g]);
    warm[static_cast<std::size_t>(mip.y[c * G + g] - 1)] = 1.0;
    if (left) wl = std::max(wl, (*left)[c * G + g] * mip.scale);
    if (right) wr = std::max(wr, (*right)[c * G + g] * mip.scale);
  }
  if (mip.tl) warm[static_cast<std::size_t>(mip.tl - 1)] = wl;
  if (mip.tr) warm[static_cast<std::size_t>(mip.tr - 1)] = wr;
  return warm;
}

}  // namespace

std::vector<int> stage2_layer_exact(std::size_t G, const std::vector<double>* left, const std::vector<double>* right,
                                    const std::vector<char>& allowed) {
  const std::vector<double> zero(G * G, 0.0);
  const std::vector<double>& wl = left ? *left : zero;
  const std::vector<double>& wr = right ? *right : zero;
  if (wl.size() != G * G || wr.size() != G * G || allowed.size() != G * G)
    throw std::logic_error("stage2_layer_exact: sizes");
  const std::vector<double> as = distinct_values(wl, allowed);
  const std::vector<double> bs = distinct_values(wr, allowed);  // ascending; b walks down from the top
  if (as.empty() || bs.empty()) return {};
  ThresholdMatching m(G, wl, wr, allowed);
  std::size_t j = bs.size() - 1;
  double best = std::numeric_limits<double>::infinity();
  std::vector<int> best_on;
  for (double a : as) {
    if (a >= best) break;
    m.set(a, bs[j]);
    if (!m.complete()) continue;
    // Lower b while a perfect matching survives; b only ever goes down as a goes up.
    while (j > 0) {
      m.set(a, bs[j - 1]);
      if (m.complete()) {
        --j;
        continue;
      }
      m.set(a, bs[j]);
      m.complete();  // feasible at the previous b: restores a perfect matching
      break;
    }
    if (a + bs[j] < best) {
      best = a + bs[j];
      best_on = m.cluster_on();
    }
  }
  return best_on;
}

namespace stage2 {

std::vector<double> left_weights(const Stage2Problem& p, std::size_t l, const std::vector<int>& prev) {
  const auto G = static_cast<std::size_t>(p.ranks);
  std::vector<double> w(G * G, 0.0);  // [c * G + g]
  const auto& t = p.traffic[l - 1];
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t g = 0; g < G; ++g) {
      double worst = 0.0;
      for (std::size_t g1 = 0; g1 < G; ++g1)
        if (g1 != g) worst = std::max(worst, t[static_cast<std::size_t>(prev[g1]) * G + c] * p.cost[g1 * G + g]);
      w[c * G + g] = worst;
    }
  return w;
}

std::vector<double> right_weights(const Stage2Problem& p, std::size_t l, const std::vector<int>& next) {
  const auto G = static_cast<std::size_t>(p.ranks);
  std::vector<double> w(G * G, 0.0);
  const auto& t = p.traffic[l];
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t g = 0; g < G; ++g) {
      double worst = 0.0;
      for (std::size_t g2 = 0; g2 < G; ++g2)
        if (g2 != g) worst = std::max(worst, t[c * G + static_cast<std::size_t>(next[g2])] * p.cost[g * G + g2]);
      w[c * G + g] = worst;
    }
  return w;
}

LayerAssignment layer_assignment(const Stage2Problem& p, std::size_t l, const std::vector<double>* left,
                                 const std::vector<double>* right, const std::vector<int>& current,
                                 const std::vector<int>* lo, const std::vector<int>* hi, const SolverLimits& limits,
                                 double seconds) {
  const auto G = static_cast<std::size_t>(p.ranks);
  const AssignmentMip mip = assignment_mip(p, l, left, right, lo, hi);
  LayerAssignment out;
  out.cluster_on = current;
  const MipOutcome r = solve_mip(mip.model, assignment_start(mip, G, left, right, current), limits.node_limit, seconds);
  out.limit_hit = !r.ran || r.limit_hit;
  out.optimal = r.ran && r.optimal;
  if (!r.has_solution) return out;
  std::vector<int> on(G, -1);
  for (std::size_t c = 0; c < G; ++c)
    for (std::size_t g = 0; g < G; ++g)
      if (r.x[static_cast<std::size_t>(mip.y[c * G + g] - 1)] > 0.5) on[g] = static_cast<int>(c);
  if (std::find(on.begin(), on.end(), -1) != on.end()) return out;
  out.cluster_on = std::move(on);
  out.improved = out.cluster_on != current;
  return out;
}

}  // namespace stage2

}  // namespace moesim::sim
