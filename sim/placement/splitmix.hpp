// splitmix64, the pseudo-random stream the placement code draws from (the random policy, the
// solvers' perturbation rounds): the same numbers on every platform, which std:: distributions do not
// promise. below(n) is next() mod n, for n >= 1.
#pragma once

#include <cstddef>
#include <cstdint>

namespace moesim::sim {

class SplitMix {
 public:
  explicit SplitMix(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(next() % n); }

 private:
  std::uint64_t state_;
};

}  // namespace moesim::sim
