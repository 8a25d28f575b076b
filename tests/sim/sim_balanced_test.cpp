// trace: balanced: sequences with no recorded routing, every step's routing perfectly balanced per
// home rank and layer (docs/simulator.md, "Balanced routing").
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <set>

#include "sim/engine/step_source.hpp"
#include "traces/trace.hpp"

using namespace moesim;

namespace {

constexpr int kExperts = 16;
constexpr int kTopK = 3;  // 16 is no multiple of 3: decks run out in the middle of a token

traces::TraceShape shape() { return {"toy", {1, 2}, kExperts, kTopK}; }

std::unique_ptr<sim::StepSource> balanced(traces::TraceReader& reader, bool decode, std::uint64_t seed) {
  auto inner = decode ? sim::make_decode_source(reader, 4, 64) : sim::make_prefill_source(reader, 4, 400);
  return sim::make_balanced_source(std::move(inner), shape(), seed);
}

}  // namespace

TEST_CASE("balanced routing: every expert gets each rank's tokens evenly, no expert twice for a token") {
  for (bool decode : {false, true}) {
    CAPTURE(decode);
    auto reader = sim::make_sequence_reader(shape(), 100);
    auto source = balanced(*reader, decode, 7);
    sim::StepBatch step;
    for (int s = 0; s < 3; ++s) {
      REQUIRE(source->next(step));
      const std::size_t per = 2 * kTopK;
      REQUIRE(step.experts.size() == step.size() * per);
      // Per (home, layer): counts per expert differ by at most one.
      std::map<std::pair<int, int>, std::map<int, int>> counts;
      std::map<int, int> tokens_of;
      for (std::size_t t = 0; t < step.size(); ++t) {
        ++tokens_of[step.home[t]];
        for (int l = 0; l < 2; ++l) {
          const auto* e = step.experts.data() + t * per + static_cast<std::size_t>(l * kTopK);
          std::set<int> distinct(e, e + kTopK);
          CHECK(distinct.size() == static_cast<std::size_t>(kTopK));
          for (int j = 0; j < kTopK; ++j) {
            CHECK(e[j] < kExperts);
            ++counts[{step.home[t], l}][e[j]];
          }
        }
      }
      for (const auto& [key, c] : counts) {
        const int n = tokens_of[key.first] * kTopK;
        int lo = n, hi = 0, sum = 0;
        for (int e = 0; e < kExperts; ++e) {
          const int v = c.count(e) ? c.at(e) : 0;
          lo = std::min(lo, v);
          hi = std::max(hi, v);
          sum += v;
        }
        CHECK(sum == n);
        CHECK(hi - lo <= 1);
        CHECK(lo == n / kExperts);
      }
    }
    CHECK_FALSE(source->repeated());
  }
}

TEST_CASE("balanced routing: a seed and a step fix the routing; other steps and seeds differ") {
  auto r1 = sim::make_sequence_reader(shape(), 100);
  auto r2 = sim::make_sequence_reader(shape(), 100);
  auto r3 = sim::make_sequence_reader(shape(), 100);
  auto a = balanced(*r1, false, 7);
  auto b = balanced(*r2, false, 7);
  auto c = balanced(*r3, false, 8);
  sim::StepBatch sa, sb, sc;
  REQUIRE(a->next(sa));
  REQUIRE(b->next(sb));
  REQUIRE(c->next(sc));
  CHECK(sa.experts == sb.experts);
  CHECK(sa.experts != sc.experts);
  const auto first = sa.experts;
  REQUIRE(a->next(sa));
  CHECK(sa.experts != first);
}

TEST_CASE("balanced routing: the sequences have the given length and the attention sees it") {
  auto reader = sim::make_sequence_reader(shape(), 100);
  CHECK(reader->meta().token_count == 100);
  // Prefill of 400 tokens a step: 4 whole sequences, one per home rank, contexts 0.
  auto source = balanced(*reader, false, 1);
  sim::StepBatch step;
  REQUIRE(source->next(step));
  REQUIRE(step.attention.size() == 4);
  for (const auto& att : step.attention) {
    CHECK(att.new_tokens == std::vector<long>{100});
    CHECK(att.context == std::vector<long>{0});
  }
  CHECK_THROWS_AS(sim::make_sequence_reader(shape(), 0), std::exception);
}
