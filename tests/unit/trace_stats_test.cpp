// Trace statistics: the definitions on a trace small enough to count by hand, independence from the
// block size, errors, the report writers, and the published numbers of the shipped DeepSeek-V2-Lite
// trace (max/mean 4.18 at layer 1 and 3.57 at layer 26; strongest pair per layer pair 15.2..43.4,
// median 22.3; the 20 strongest pairs 43.4 down to 22.6).
#include <cmath>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "models/architecture.hpp"
#include "tests/support/test_support.hpp"
#include "traces/import.hpp"
#include "traces/memory_trace.hpp"
#include "traces/stats.hpp"
#include "traces/stats_report.hpp"
#include "traces/trace.hpp"

using namespace moesim;
using namespace moesim::traces;

namespace {

// 2 MoE layers (decoder layers 3 and 5), 4 experts, top-2; tokens given as {a, b, c, d}: experts
// {a, b} at layer 3 and {c, d} at layer 5.
MemoryTrace tiny_trace(const std::vector<std::array<std::uint16_t, 4>>& tokens) {
  MemoryTrace t;
  t.meta.shape = {"tiny", {3, 5}, 4, 2};
  t.meta.source = "unit test";
  std::uint32_t pos = 0;
  for (const auto& tok : tokens) {
    t.tokens.sequence.push_back(0);
    t.tokens.position.push_back(pos++);
    t.tokens.experts.insert(t.tokens.experts.end(), tok.begin(), tok.end());
  }
  t.meta.token_count = tokens.size();
  t.meta.sequence_count = 1;
  return t;
}

std::string shipped_trace() { return (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(); }

double round_to(double v, int decimals) {
  const double f = std::pow(10.0, decimals);
  return std::round(v * f) / f;
}

}  // namespace

TEST_CASE("trace stats: every definition on a hand-counted trace") {
  // Layer 3 loads: e0 4, e1 2, e2 1, e3 1 (8 assignments); layer 5: e0 1, e1 1, e2 3, e3 3.
  const MemoryTrace t = tiny_trace({{0, 1, 2, 3}, {0, 1, 2, 3}, {0, 2, 0, 2}, {0, 3, 1, 3}});
  auto reader = read_memory_trace(t);
  StatsOptions options;
  options.min_together = 2;
  options.top_pairs = 3;
  const TraceStats s = compute_stats(*reader, options);
  REQUIRE(s.layers.size() == 2);
  CHECK(s.tokens == 4);
  CHECK(s.layers[0].layer == 3);
  CHECK(s.layers[0].loads == std::vector<std::uint64_t>{4, 2, 1, 1});
  CHECK(s.layers[1].loads == std::vector<std::uint64_t>{1, 1, 3, 3});
  CHECK(s.layers[0].max_mean == doctest::Approx(4.0 / 2.0));
  CHECK(s.layers[1].max_mean == doctest::Approx(3.0 / 2.0));
  // Shares 1/2, 1/4, 1/8, 1/8: entropy 1.75 bits of log2(4) = 2.
  CHECK(s.layers[0].entropy_bits == doctest::Approx(1.75));
  CHECK(s.layers[0].entropy_normalized == doctest::Approx(0.875));
  CHECK(s.layers[0].hottest_expert == 0);
  CHECK(s.layers[0].hottest_share == doctest::Approx(0.5));
  CHECK(s.layers[1].hottest_expert == 2);  // ties go to the lower id
  // Halves: tokens 0-1 vs 2-3. Layer 3: {1/2,1/2,0,0} vs {1/2,0,1/4,1/4}: TV 1/2.
  CHECK(s.first_half_tokens == 2);
  CHECK(s.layers[0].drift_tv == doctest::Approx(0.5));
  // Layer 5: {0,0,1/2,1/2} vs {1/4,1/4,1/4,1/4}: TV 1/2.
  CHECK(s.layers[1].drift_tv == doctest::Approx(0.5));
  // Together counts: (0 at 3, 2 at 5) in tokens 0,1,2 -> 3; (0,3): tokens 0,1,3 -> 3; (1,2): 0,1 -> 2;
  // (1,3): 0,1 -> 2. Lift = together * tokens / (load_from * load_to).
  CHECK(s.together_count(0, 0, 2) == 3);
  CHECK(s.together_count(0, 1, 3) == 2);
  CHECK(*s.lift(0, 0, 2) == doctest::Approx(3.0 * 4 / (4 * 3)));
  CHECK(*s.lift(0, 1, 2) == doctest::Approx(2.0 * 4 / (2 * 3)));
  CHECK(*s.lift(0, 2, 0) == doctest::Approx(1.0 * 4 / (1 * 1)));
  REQUIRE(s.layer_pairs.size() == 1);
  // Pairs seen >= 2 times: (0,2) 1.0, (0,3) 1.0, (1,2) 4/3, (1,3) 4/3: strongest (1,2), lower id first.
  CHECK(s.layer_pairs[0].qualifying_pairs == 4);
  REQUIRE(s.layer_pairs[0].strongest.has_value());
  CHECK(s.layer_pairs[0].strongest->expert_from == 1);
  CHECK(s.layer_pairs[0].strongest->expert_to == 2);
  CHECK(s.layer_pairs[0].strongest->lift == doctest::Approx(4.0 / 3.0));
  REQUIRE(s.top_pairs.size() == 3);
  CHECK(s.top_pairs[1].expert_to == 3);
  CHECK(s.top_pairs[2].lift == doctest::Approx(1.0));
  CHECK(s.pair_lift.count == 4);
  CHECK(s.pair_lift.median == doctest::Approx((1.0 + 4.0 / 3.0) / 2.0));
  CHECK(s.strongest_lift.count == 1);
  CHECK(s.drift_tv_max == doctest::Approx(0.5));
  CHECK(s.max_mean.max == doctest::Approx(2.0));
}

TEST_CASE("trace stats: pairs below the threshold get no lift, and the summaries say so") {
  const MemoryTrace t = tiny_trace({{0, 1, 2, 3}, {0, 2, 0, 1}});
  auto reader = read_memory_trace(t);
  const TraceStats s = compute_stats(*reader, {});  // default threshold 50
  CHECK(s.layer_pairs[0].qualifying_pairs == 0);
  CHECK_FALSE(s.layer_pairs[0].strongest.has_value());
  CHECK(s.top_pairs.empty());
  CHECK(s.strongest_lift.count == 0);
  std::ostringstream table;
  print_stats_table(table, s, {"tiny.mtr", ""});
  CHECK(table.str().find("no pair was seen together 50 times") != std::string::npos);
}

TEST_CASE("trace stats: the result does not depend on the block size") {
  auto reader = open_trace(shipped_trace());
  const TraceStats whole = compute_stats(*reader, {});
  reader->rewind();
  StatsAccumulator acc(reader->meta(), {});
  TokenBlock block;
  while (reader->next(block, 7)) acc.add(block);
  const TraceStats sliced = acc.finish();
  REQUIRE(sliced.layers.size() == whole.layers.size());
  for (std::size_t l = 0; l < whole.layers.size(); ++l) {
    CHECK(sliced.layers[l].loads == whole.layers[l].loads);
    CHECK(sliced.layers[l].drift_tv == whole.layers[l].drift_tv);
  }
  REQUIRE(sliced.top_pairs.size() == whole.top_pairs.size());
  for (std::size_t i = 0; i < whole.top_pairs.size(); ++i) CHECK(sliced.top_pairs[i].lift == whole.top_pairs[i].lift);
}

TEST_CASE("trace stats: the published numbers of the shipped DeepSeek-V2-Lite trace") {
  auto reader = open_trace(shipped_trace());
  const TraceStats s = compute_stats(*reader, {});
  CHECK(s.tokens == 8222);
  REQUIRE(s.layers.size() == 26);
  CHECK(s.layers.front().layer == 1);
  CHECK(s.layers.back().layer == 26);
  CHECK(round_to(s.layers.front().max_mean, 2) == doctest::Approx(4.18));
  CHECK(round_to(s.layers.back().max_mean, 2) == doctest::Approx(3.57));
  // SOURCES.md: max/mean ranges from 2.93 (layer 2) to 4.68 (layer 22).
  CHECK(round_to(s.max_mean.min, 2) == doctest::Approx(2.93));
  CHECK(round_to(s.max_mean.max, 2) == doctest::Approx(4.68));
  CHECK(round_to(s.layers[1].max_mean, 2) == doctest::Approx(2.93));
  CHECK(round_to(s.layers[21].max_mean, 2) == doctest::Approx(4.68));
  // Strongest pair of each of the 25 layer pairs: 15.2 .. 43.4, median 22.3.
  CHECK(s.strongest_lift.count == 25);
  CHECK(round_to(s.strongest_lift.min, 1) == doctest::Approx(15.2));
  CHECK(round_to(s.strongest_lift.max, 1) == doctest::Approx(43.4));
  CHECK(round_to(s.strongest_lift.median, 1) == doctest::Approx(22.3));
  // The 20 strongest overall: 43.4 down to 22.6, in order, each seen together >= 50 times.
  REQUIRE(s.top_pairs.size() == 20);
  CHECK(round_to(s.top_pairs.front().lift, 1) == doctest::Approx(43.4));
  CHECK(round_to(s.top_pairs.back().lift, 1) == doctest::Approx(22.6));
  for (std::size_t i = 0; i < s.top_pairs.size(); ++i) {
    CHECK(s.top_pairs[i].together >= 50);
    if (i > 0) CHECK(s.top_pairs[i].lift <= s.top_pairs[i - 1].lift);
    const auto& p = s.top_pairs[i];
    CHECK(*s.lift(p.pair_index, p.expert_from, p.expert_to) == doctest::Approx(p.lift));
  }
  // The strongest pair: layer 8 expert 23 -> layer 9 expert 29, 130 tokens together.
  CHECK(s.top_pairs.front().from_layer == 8);
  CHECK(s.top_pairs.front().expert_from == 23);
  CHECK(s.top_pairs.front().expert_to == 29);
  CHECK(s.top_pairs.front().together == 130);
  for (const auto& l : s.layers) {
    std::uint64_t total = 0;
    for (auto v : l.loads) total += v;
    CHECK(total == 8222u * 6u);
    CHECK(l.entropy_normalized > 0.0);
    CHECK(l.entropy_normalized < 1.0);
  }
}

TEST_CASE("trace stats: the shipped trace and a fresh import of the raw ESFT files agree") {
  MOESIM_REQUIRE_SHARED_DATA();
  MemoryTrace imported;
  const auto shape = models::load_architecture("deepseek-v2-lite").trace_shape();
  import_esft((moesim::testing::shared_data_dir() / "routing/deepseek-v2-lite-intent").string(), shape,
              [&](const TraceMeta& meta) { return write_memory_trace(imported, meta); });
  REQUIRE(imported.meta.token_count == 8222);
  auto reader = read_memory_trace(imported);
  const TraceStats fresh = compute_stats(*reader, {});
  auto shipped = open_trace(shipped_trace());
  const TraceStats s = compute_stats(*shipped, {});
  REQUIRE(fresh.layers.size() == s.layers.size());
  for (std::size_t l = 0; l < s.layers.size(); ++l) CHECK(fresh.layers[l].loads == s.layers[l].loads);
  REQUIRE(fresh.top_pairs.size() == s.top_pairs.size());
  for (std::size_t i = 0; i < s.top_pairs.size(); ++i) CHECK(fresh.top_pairs[i].lift == s.top_pairs[i].lift);
}

TEST_CASE("trace stats: a trace shorter or longer than its meta says is an error") {
  MemoryTrace t = tiny_trace({{0, 1, 2, 3}, {0, 2, 0, 1}});
  TraceMeta meta = t.meta;
  meta.token_count = 3;
  StatsAccumulator acc(meta, {});
  acc.add(t.tokens);
  CHECK_THROWS_WITH_AS(acc.finish(), doctest::Contains("declares 3 tokens but holds 2"), common::InputError);
}

TEST_CASE("trace stats: an expert id outside the shape is an error naming the token and layer") {
  MemoryTrace t = tiny_trace({{0, 1, 2, 3}, {0, 2, 0, 1}});
  t.tokens.experts[6] = 9;  // token 1, layer 5
  StatsAccumulator acc(t.meta, {});
  CHECK_THROWS_WITH_AS(acc.add(t.tokens), doctest::Contains("token 1 (sequence 0, position 1), MoE layer 5: expert id 9"),
                       common::InputError);
}

TEST_CASE("trace stats: the JSON document carries the same numbers at full precision") {
  auto reader = open_trace(shipped_trace());
  const TraceStats s = compute_stats(*reader, {});
  const auto doc = stats_to_json(s, {"x.mtr", "abc123"});
  CHECK(doc["schema_version"] == kStatsSchemaVersion);
  CHECK(doc["provenance"] == "computed from the trace");
  CHECK(doc["trace"]["sha256"] == "abc123");
  CHECK(doc["trace"]["token_count"] == 8222);
  CHECK(doc["trace"]["architecture"] == s.meta.shape.architecture);
  REQUIRE(doc["layers"].size() == 26);
  CHECK(doc["layers"][0]["max_mean"].get<double>() == s.layers[0].max_mean);
  CHECK(doc["layers"][25]["loads"].size() == 64);
  CHECK(doc["layer_pairs"].size() == 25);
  CHECK(doc["summary"]["top_pairs"].size() == 20);
  CHECK(doc["summary"]["top_pairs"][0]["lift"].get<double>() == s.top_pairs[0].lift);
  CHECK(doc["summary"]["strongest_pair_lift"]["median"].get<double>() == s.strongest_lift.median);
  CHECK(doc["summary"]["max_mean"]["max_layer"] == 22);
  // Round trip through text keeps every digit.
  const auto again = nlohmann::json::parse(doc.dump());
  CHECK(again["summary"]["pair_lift"]["p99"].get<double>() == s.pair_lift.p99);
}

TEST_CASE("trace stats: the table says where its numbers come from and rounds for reading") {
  auto reader = open_trace(shipped_trace());
  const TraceStats s = compute_stats(*reader, {});
  std::ostringstream out;
  print_stats_table(out, s, {"shipped.mtr", ""});
  const std::string text = out.str();
  CHECK(text.rfind("Trace statistics of shipped.mtr (every number computed from the trace)", 0) == 0);
  CHECK(text.find("4.18") != std::string::npos);
  CHECK(text.find("23 -> 29 (43.37)") != std::string::npos);
  CHECK(text.find("median 22.26") != std::string::npos);
  CHECK(text.find("20 strongest pairs:") != std::string::npos);
}

TEST_CASE("summarize: quantiles interpolate between order statistics") {
  const Summary s = summarize({4.0, 1.0, 3.0, 2.0});
  CHECK(s.count == 4);
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  CHECK(s.mean == doctest::Approx(2.5));
  CHECK(s.median == doctest::Approx(2.5));
  CHECK(s.p99 == doctest::Approx(3.97));
  CHECK(summarize({}).count == 0);
}
