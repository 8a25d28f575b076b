// The engine's routing kernels (sim/engine/routing.hpp) against the plain token-by-token rule: every
// fast path (single holders on <= 8 ranks, replicated experts on <= 8 ranks, bit sets up to 64
// ranks, membership marks beyond) must give the same per-chunk sends, expert tokens and per-node
// sends as route_layer_reference, on random routing with replicas, several nodes and chunks; and
// LayerRouter::count_pairs its (token, expert) pairs per (home, rank).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sim/engine/routing.hpp"
#include "sim/placement/placement.hpp"

using namespace moesim;

namespace {

struct Case {
  int ep, experts, top_k, ranks_per_node, chunks;
  bool replicas;
};

sim::Placement random_placement(const Case& c, int layers, std::mt19937& rng) {
  sim::Placement p;
  p.ep = c.ep;
  p.ranks.assign(static_cast<std::size_t>(layers), {});
  for (auto& layer : p.ranks)
    for (int e = 0; e < c.experts; ++e) {
      std::vector<int> holders{static_cast<int>(rng() % static_cast<unsigned>(c.ep))};
      if (c.replicas && e % 3 == 0)
        for (int extra = 0; extra < 2; ++extra) {
          const int r = static_cast<int>(rng() % static_cast<unsigned>(c.ep));
          if (std::find(holders.begin(), holders.end(), r) == holders.end()) holders.push_back(r);
        }
      layer.push_back(holders);
    }
  return p;
}

void check_case(const Case& c) {
  CAPTURE(c.ep);
  CAPTURE(c.replicas);
  CAPTURE(c.chunks);
  std::mt19937 rng(static_cast<unsigned>(c.ep * 131 + c.chunks * 7 + (c.replicas ? 1 : 0)));
  const int layers = 3;
  const std::size_t tokens = 700;
  const sim::Placement p = random_placement(c, layers, rng);
  std::vector<int> rank_node(static_cast<std::size_t>(c.ep));
  for (int r = 0; r < c.ep; ++r) rank_node[static_cast<std::size_t>(r)] = r / c.ranks_per_node;
  std::vector<int> home(tokens);
  std::vector<std::uint64_t> index(tokens);
  std::vector<long> home_count(static_cast<std::size_t>(c.ep), 0);
  for (std::size_t i = 0; i < tokens; ++i) {
    home[i] = static_cast<int>(rng() % static_cast<unsigned>(c.ep));
    ++home_count[static_cast<std::size_t>(home[i])];
    index[i] = 1000 + i * 3;
  }
  std::vector<std::uint8_t> chunk;
  sim::token_chunks(home, home_count, c.chunks, chunk);
  sim::LayerRouter router(p, rank_node, c.experts, c.top_k);
  for (int l = 0; l < layers; ++l) {
    std::vector<std::uint16_t> ids;
    for (std::size_t i = 0; i < tokens; ++i) {
      std::vector<std::uint16_t> chosen;
      while (chosen.size() < static_cast<std::size_t>(c.top_k)) {
        const auto e = static_cast<std::uint16_t>(rng() % static_cast<unsigned>(c.experts));
        if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
      }
      ids.insert(ids.end(), chosen.begin(), chosen.end());
    }
    const sim::LayerTokens t{ids.data(), home, index, chunk};
    sim::LayerCounts fast, plain;
    router.route(static_cast<std::size_t>(l), t, c.chunks, fast);
    sim::route_layer_reference(p, rank_node, static_cast<std::size_t>(l), c.experts, c.top_k, t, c.chunks, plain);
    CHECK(fast.sends == plain.sends);
    CHECK(fast.expert_tokens == plain.expert_tokens);
    CHECK(fast.node_sends == plain.node_sends);
    CHECK(fast.pair_sends.empty());  // only count_pairs fills them
    router.count_pairs(static_cast<std::size_t>(l), t, fast);
    CHECK(fast.pair_sends == plain.pair_sends);
    long total = 0, pairs = 0;
    for (const auto& row : plain.expert_tokens)
      for (long n : row) total += n;
    for (const auto& row : fast.pair_sends)
      for (long n : row) pairs += n;
    CHECK(total == static_cast<long>(tokens) * c.top_k);
    CHECK(pairs == total);  // one copy per (token, expert), the home rank's own included
  }
}

}  // namespace

TEST_CASE("routing kernels equal the token-by-token rule on every path") {
  for (const Case& c : {Case{4, 16, 2, 4, 1, false}, Case{8, 64, 6, 4, 2, false}, Case{8, 64, 6, 2, 3, true},
                        Case{6, 24, 4, 3, 4, true}, Case{16, 64, 8, 8, 2, false}, Case{48, 96, 8, 8, 1, true},
                        Case{80, 256, 8, 8, 2, false}, Case{80, 256, 8, 8, 3, true}})
    check_case(c);
}

TEST_CASE("token_chunks splits each home rank's tokens into equal consecutive runs") {
  const std::vector<int> home{0, 1, 0, 0, 1, 0, 1, 0};
  const std::vector<long> count{5, 3};
  std::vector<std::uint8_t> chunk;
  sim::token_chunks(home, count, 2, chunk);
  // Rank 0's tokens at positions 0..4: chunk floor(p * 2 / 5) = 0,0,0,1,1; rank 1's 0..2: 0,0,1.
  CHECK(chunk == std::vector<std::uint8_t>{0, 0, 0, 0, 0, 1, 1, 1});
  sim::token_chunks(home, count, 1, chunk);
  CHECK(chunk == std::vector<std::uint8_t>(8, 0));
}
