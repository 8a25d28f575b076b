// Deterministic randomness for the trace generators: the same seed gives the same numbers on every
// machine. Only std::mt19937_64 (whose output the C++ standard fixes) is taken from the library; the
// distributions, and the log/exp they need, are computed here with IEEE basic arithmetic only, because
// std::uniform_*_distribution, std::discrete_distribution and libm's log/exp/pow may differ between
// implementations.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace moesim::traces {

// SplitMix64 finaliser: derives independent sub-stream seeds from one user seed.
std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream);

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  std::uint64_t bits() { return engine_(); }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe to take the logarithm of.
  double uniform_open0() { return static_cast<double>((engine_() >> 11) + 1) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0, without bias (Lemire's multiply-and-reject).
  std::uint64_t below(std::uint64_t n);
  bool bernoulli(double p) { return uniform() < p; }

 private:
  std::mt19937_64 engine_;
};

// Natural logarithm and exponential from basic arithmetic (relative error below 1e-15): the same
// result everywhere. det_log needs x > 0; det_pow needs base > 0.
double det_log(double x);
double det_exp(double x);
double det_pow(double base, double exponent);

// Number of failures before the first success of Bernoulli(p) trials, drawn by inversion: lets a
// caller skip over runs of rare events instead of drawing once per trial. p in (0, 1]; p >= 1 gives 0.
std::uint64_t geometric_skip(Rng& rng, double p);

// Walker/Vose alias table: draws index i with probability weights[i] / sum(weights) in O(1).
class AliasTable {
 public:
  AliasTable() = default;
  explicit AliasTable(const std::vector<double>& weights);  // weights >= 0, not all zero
  std::size_t size() const { return prob_.size(); }
  std::uint32_t draw(Rng& rng) const {
    const auto i = static_cast<std::uint32_t>(rng.below(prob_.size()));
    return rng.uniform() < prob_[i] ? i : alias_[i];
  }

 private:
  std::vector<double> prob_;
  std::vector<std::uint32_t> alias_;
};

// In-place Fisher-Yates shuffle driven by `rng`.
template <typename T>
void shuffle(std::vector<T>& v, Rng& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace moesim::traces
