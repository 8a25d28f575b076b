#include "traces/sampling.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace moesim::traces {

namespace {
constexpr double kLn2 = 0.693147180559945309417232121458176568;
// ln 2 split so that n * kLn2Hi is exact for |n| < 2^11 (Cody and Waite, as in fdlibm).
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kSqrtHalf = 0.707106781186547524400844362104849039;
}  // namespace

std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t stream) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (stream + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace {
// 64 x 64 -> 128-bit product, portable (no __int128).
void multiply_wide(std::uint64_t a, std::uint64_t b, std::uint64_t& hi, std::uint64_t& lo) {
  const std::uint64_t a_lo = a & 0xFFFFFFFFull, a_hi = a >> 32;
  const std::uint64_t b_lo = b & 0xFFFFFFFFull, b_hi = b >> 32;
  const std::uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
  const std::uint64_t mid = (p0 >> 32) + (p1 & 0xFFFFFFFFull) + (p2 & 0xFFFFFFFFull);
  lo = (mid << 32) | (p0 & 0xFFFFFFFFull);
  hi = p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
}
}  // namespace

std::uint64_t Rng::below(std::uint64_t n) {
  if (n == 0) throw std::invalid_argument("Rng::below(0)");
  std::uint64_t hi = 0;
  std::uint64_t lo = 0;
  multiply_wide(engine_(), n, hi, lo);
  if (lo < n) {
    const std::uint64_t threshold = (0 - n) % n;
    while (lo < threshold) multiply_wide(engine_(), n, hi, lo);
  }
  return hi;
}

double det_log(double x) {
  if (!(x > 0.0)) throw std::invalid_argument("det_log of a non-positive number");
  if (std::isinf(x)) return x;
  int exponent = 0;
  double m = std::frexp(x, &exponent);  // exact: x = m * 2^exponent, m in [0.5, 1)
  if (m < kSqrtHalf) {
    m *= 2.0;
    exponent -= 1;
  }
  // log(m) = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.172: the odd series converges fast.
  const double t = (m - 1.0) / (m + 1.0);
  const double t2 = t * t;
  double term = t;
  double sum = 0.0;
  for (int n = 1; n <= 41; n += 2) {
    sum += term / n;
    term *= t2;
  }
  return exponent * kLn2Hi + (exponent * kLn2Lo + 2.0 * sum);
}

double det_exp(double x) {
  if (std::isnan(x)) return x;
  if (x > 709.0) return std::numeric_limits<double>::infinity();
  if (x < -745.0) return 0.0;
  const double n = std::floor(x / kLn2 + 0.5);
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2 / 2 (plus rounding)
  double term = 1.0;
  double sum = 1.0;
  for (int i = 1; i <= 24; ++i) {
    term *= r / i;
    sum += term;
  }
  return std::ldexp(sum, static_cast<int>(n));
}

double det_pow(double base, double exponent) {
  if (exponent == 0.0) return 1.0;
  return det_exp(exponent * det_log(base));
}

std::uint64_t geometric_skip(Rng& rng, double p) {
  if (p >= 1.0) return 0;
  if (!(p > 0.0)) return std::numeric_limits<std::uint64_t>::max();
  const double skip = std::floor(det_log(rng.uniform_open0()) / det_log(1.0 - p));
  if (skip >= 9.0e18) return std::numeric_limits<std::uint64_t>::max();
  return static_cast<std::uint64_t>(skip);
}

AliasTable::AliasTable(const std::vector<double>& weights) {
  const std::size_t n = weights.size();
  if (n == 0) throw std::invalid_argument("AliasTable of no weights");
  double total = 0.0;
  for (double w : weights) {
    if (!(w >= 0.0) || std::isinf(w)) throw std::invalid_argument("AliasTable weight not finite and >= 0");
    total += w;
  }
  if (!(total > 0.0)) throw std::invalid_argument("AliasTable weights all zero");
  prob_.assign(n, 1.0);
  alias_.resize(n);
  std::vector<double> scaled(n);
  std::vector<std::uint32_t> small;
  std::vector<std::uint32_t> large;
  for (std::size_t i = 0; i < n; ++i) {
    alias_[i] = static_cast<std::uint32_t>(i);
    scaled[i] = weights[i] * static_cast<double>(n) / total;
    (scaled[i] < 1.0 ? small : large).push_back(static_cast<std::uint32_t>(i));
  }
  while (!small.empty() && !large.empty()) {
    const std::uint32_t s = small.back();
    small.pop_back();
    const std::uint32_t l = large.back();
    prob_[s] = scaled[s];
    alias_[s] = l;
    scaled[l] = (scaled[l] + scaled[s]) - 1.0;
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // Whatever is left is 1 up to rounding; a zero weight must still never be drawn.
  std::uint32_t some_positive = 0;
  while (weights[some_positive] <= 0.0) ++some_positive;
  for (std::uint32_t i : small) {
    prob_[i] = weights[i] > 0.0 ? 1.0 : 0.0;
    alias_[i] = some_positive;
  }
  for (std::uint32_t i : large) prob_[i] = 1.0;
}

}  // namespace moesim::traces
