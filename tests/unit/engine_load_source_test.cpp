// Steps from a load-only trace (make_load_source) and the placement counts of one
// (count_load_routing): every step gives each expert exactly its iteration's count at every layer,
// no token gets an expert twice, home ranks are balanced within one, the attention batches follow
// the documented prefill and decode layouts, and the trace starts again when it runs out.
#include <algorithm>
#include <filesystem>
#include <set>

#include "models/architecture.hpp"
#include "sim/engine/load_source.hpp"
#include "sim/placement/routing_counts.hpp"
#include "tests/support/test_support.hpp"
#include "traces/load_trace.hpp"

namespace fs = std::filesystem;
using namespace moesim;
using moesim::testing::TempDir;

namespace {

std::string shipped() {
  return (moesim::testing::test_data_dir() / "traces" / "load_dsv2_lite.mlt").string();
}

std::vector<std::vector<std::uint32_t>> read_all(traces::LoadTraceReader& reader) {
  std::vector<std::vector<std::uint32_t>> out;
  std::vector<std::uint32_t> counts;
  reader.rewind();
  while (reader.next(counts)) out.push_back(counts);
  reader.rewind();
  return out;
}

// Checks one step against the iteration's counts; returns its token count.
std::size_t check_step(const sim::StepBatch& step, const std::vector<std::uint32_t>& counts,
                       const traces::TraceShape& shape, int dp) {
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const auto k = static_cast<std::size_t>(shape.top_k);
  const std::size_t n = step.size();
  REQUIRE(n == traces::load_tokens(shape, counts));
  REQUIRE(step.experts.size() == n * layers * k);
  REQUIRE(step.token_index.size() == n);
  for (std::size_t l = 0; l < layers; ++l) {
    std::vector<std::uint32_t> got(experts, 0);
    for (std::size_t t = 0; t < n; ++t) {
      const std::uint16_t* ids = step.experts.data() + (t * layers + l) * k;
      CHECK(std::set<std::uint16_t>(ids, ids + k).size() == k);  // no expert twice for a token
      for (std::size_t j = 0; j < k; ++j) ++got[ids[j]];
    }
    CHECK(std::equal(got.begin(), got.end(), counts.begin() + static_cast<std::ptrdiff_t>(l * experts)));
  }
  std::vector<std::size_t> per_rank(static_cast<std::size_t>(dp), 0);
  for (std::size_t t = 0; t < n; ++t) {
    CHECK(step.home[t] == static_cast<int>(t % static_cast<std::size_t>(dp)));
    ++per_rank[static_cast<std::size_t>(step.home[t])];
  }
  const auto [lo, hi] = std::minmax_element(per_rank.begin(), per_rank.end());
  CHECK(*hi - *lo <= 1);
  // Every rank's attention covers exactly its tokens.
  REQUIRE(step.attention.size() == static_cast<std::size_t>(dp));
  for (int r = 0; r < dp; ++r) {
    long sum = 0;
    for (long t : step.attention[static_cast<std::size_t>(r)].new_tokens) sum += t;
    CHECK(sum == static_cast<long>(per_rank[static_cast<std::size_t>(r)]));
  }
  return n;
}

}  // namespace

TEST_CASE("load source: every step replays its iteration's counts exactly, then the trace starts again") {
  auto reader = traces::open_load_trace(shipped());
  const auto iterations = read_all(*reader);
  const traces::TraceShape shape = reader->meta().shape;
  for (int dp : {1, 3, 8}) {
    CAPTURE(dp);
    auto source = sim::make_load_source(*reader, false, dp, 16, 7);
    sim::StepBatch step;
    std::uint64_t index = 0;
    for (std::size_t i = 0; i < iterations.size() + 2; ++i) {
      CAPTURE(i);
      REQUIRE(source->next(step));
      const std::size_t n = check_step(step, iterations[i % iterations.size()], shape, dp);
      for (std::size_t t = 0; t < n; ++t) CHECK(step.token_index[t] == index++);
      CHECK(source->repeated() == (i >= iterations.size()));
    }
    reader->rewind();
  }
}

TEST_CASE("load source: prefill packs each rank's tokens into prompts, decode staggers one token per sequence") {
  auto reader = traces::open_load_trace(shipped());
  const auto iterations = read_all(*reader);
  const auto n = static_cast<std::size_t>(traces::load_tokens(reader->meta().shape, iterations[0]));
  REQUIRE(n == 64);
  sim::StepBatch step;
  // Prefill, 3 ranks, prompts of 10: rank 0 holds tokens 0, 3, ..., 63 (22): prompts 10, 10, 2.
  auto prefill = sim::make_load_source(*reader, false, 3, 10, 1);
  REQUIRE(prefill->next(step));
  CHECK(step.attention[0].new_tokens == std::vector<long>{10, 10, 2});
  CHECK(step.attention[0].context == std::vector<long>{0, 0, 0});
  CHECK(step.attention[1].new_tokens == std::vector<long>{10, 10, 1});
  CHECK(step.attention[2].new_tokens == std::vector<long>{10, 10, 1});
  REQUIRE(step.logits.size() == 3);
  CHECK(step.logits[0] == std::vector<std::uint8_t>{1, 1, 1});
  CHECK(prefill->sequences_started() == 9);

  // Decode, 2 ranks, sequence length 100: each rank's 32 tokens at contexts floor(j x 100 / 32).
  reader->rewind();
  auto decode = sim::make_load_source(*reader, true, 2, 100, 1);
  REQUIRE(decode->next(step));
  for (std::size_t r = 0; r < 2; ++r) {
    REQUIRE(step.attention[r].new_tokens.size() == 32);
    for (std::size_t j = 0; j < 32; ++j) {
      CHECK(step.attention[r].new_tokens[j] == 1);
      CHECK(step.attention[r].context[j] == static_cast<long>(j * 100 / 32));
    }
  }
  CHECK(decode->sequences_started() == 64);
  CHECK_THROWS_AS(sim::make_load_source(*reader, true, 0, 100, 1), common::InputError);
  CHECK_THROWS_AS(sim::make_load_source(*reader, true, 2, 0, 1), common::InputError);
}

TEST_CASE("load source: the seed decides which tokens share an expert, layer by layer, never the counts") {
  TempDir dir;
  // One iteration of 8 tokens with the same counts at every layer: a fixed token order would give
  // every token the same experts at every layer (an affinity the trace does not record).
  const traces::TraceShape shape{"small", {0, 1, 2, 3}, 8, 2};
  const std::vector<std::uint32_t> layer = {4, 4, 2, 2, 1, 1, 1, 1};
  std::vector<std::uint32_t> counts;
  for (int l = 0; l < 4; ++l) counts.insert(counts.end(), layer.begin(), layer.end());
  {
    auto writer = traces::create_load_trace_writer((dir / "t.mlt").string(), {shape, "test", 0, 0}, false);
    writer->write(counts);
    writer->finish();
  }
  auto reader = traces::open_load_trace((dir / "t.mlt").string());
  auto experts_of = [&](std::uint64_t seed) {
    reader->rewind();
    auto source = sim::make_load_source(*reader, false, 2, 4, seed);
    sim::StepBatch step;
    REQUIRE(source->next(step));
    check_step(step, counts, shape, 2);
    return step.experts;
  };
  const auto a = experts_of(1);
  CHECK(a == experts_of(1));  // deterministic
  CHECK(a != experts_of(2));
  // Some token's experts differ between layers 0 and 1.
  bool differs = false;
  for (std::size_t t = 0; t < 8; ++t) {
    const auto* token = a.data() + t * 8;
    differs = differs || std::set<std::uint16_t>(token, token + 2) != std::set<std::uint16_t>(token + 2, token + 4);
  }
  CHECK(differs);
}

TEST_CASE("count_load_routing: loads summed over the iterations, no cross-layer pairs") {
  auto reader = traces::open_load_trace(shipped());
  const auto iterations = read_all(*reader);
  std::vector<std::uint32_t> skip;
  reader->next(skip);  // count_load_routing rewinds first
  const sim::RoutingCounts c = sim::count_load_routing(*reader, "abc");
  CHECK(c.layers == models::load_architecture("deepseek-v2-lite").trace_shape().layers);
  CHECK(c.num_experts == 64);
  CHECK(c.top_k == 6);
  CHECK(c.tokens == 263);
  CHECK(c.trace_sha256 == "abc");
  REQUIRE(c.load.size() == 26);
  for (std::size_t l = 0; l < 26; ++l) {
    double total = 0;
    for (std::size_t e = 0; e < 64; ++e) {
      double want = 0;
      for (const auto& it : iterations) want += it[l * 64 + e];
      CHECK(c.load[l][e] == want);
      total += c.load[l][e];
    }
    CHECK(total == 263.0 * 6);
  }
  REQUIRE(c.next.size() == 25);
  for (const auto& m : c.next) {
    CHECK(m.size() == 64u * 64u);
    CHECK(std::all_of(m.begin(), m.end(), [](double v) { return v == 0.0; }));
  }
}
