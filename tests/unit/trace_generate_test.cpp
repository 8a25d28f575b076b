// The synthetic generator and fit-and-scale: determinism, the effect of each knob on the statistics
// it controls, parameter checks, and the accuracy of a 1M-token trace fitted to the shipped
// DeepSeek-V2-Lite trace (every layer's shares within 0.02 TV, the source's 20 strongest pairs within
// 10% lift). The deterministic math helpers are checked against libm.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "tests/support/test_support.hpp"
#include "traces/fit.hpp"
#include "traces/generate.hpp"
#include "traces/memory_trace.hpp"
#include "traces/sampling.hpp"
#include "traces/stats.hpp"
#include "traces/trace.hpp"

using namespace moesim;
using namespace moesim::traces;
using moesim::testing::TempDir;

namespace {

TraceShape deepseek_v2_lite_shape() {
  TraceShape shape;
  shape.architecture = "deepseek-v2-lite";
  for (int l = 1; l <= 26; ++l) shape.layers.push_back(l);
  shape.num_experts = 64;
  shape.top_k = 6;
  return shape;
}

SyntheticParams params(std::uint64_t tokens, std::uint64_t seed = 1) {
  SyntheticParams p;
  p.shape = deepseek_v2_lite_shape();
  p.tokens = tokens;
  p.seed = seed;
  return p;
}

MemoryTrace generate(const SyntheticParams& p) {
  MemoryTrace t;
  auto w = write_memory_trace(t, synthetic_meta(p));
  generate_synthetic(p, *w);
  w->finish();
  return t;
}

TraceStats stats_of(const SyntheticParams& p, std::uint64_t min_together = 50) {
  StatsOptions o;
  o.min_together = min_together;
  StatsWriter w(synthetic_meta(p), o);
  generate_synthetic(p, w);
  w.finish();
  return w.stats();
}

std::vector<double> shares(const LayerStats& l) {
  const double total = std::accumulate(l.loads.begin(), l.loads.end(), 0.0);
  std::vector<double> s;
  for (auto v : l.loads) s.push_back(static_cast<double>(v) / total);
  return s;
}

double tv(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) d += std::fabs(a[i] - b[i]);
  return d / 2.0;
}

std::string shipped_trace() { return (moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr").string(); }

bool has_problem(const std::vector<ParamProblem>& problems, const std::string& param) {
  return std::any_of(problems.begin(), problems.end(), [&](const ParamProblem& p) { return p.param == param; });
}

}  // namespace

TEST_CASE("sampling: the deterministic log and exp agree with libm to 1e-14") {
  for (double x : {1e-300, 1e-10, 0.001, 0.3, 0.7071, 1.0, 1.5, 2.0, 10.0, 12345.678, 1e200}) {
    CHECK(det_log(x) == doctest::Approx(std::log(x)).epsilon(1e-14));
  }
  CHECK(det_log(1.0) == 0.0);
  for (double x : {-700.0, -20.0, -1.0, -1e-9, 0.0, 0.5, 1.0, 3.7, 50.0, 700.0}) {
    CHECK(det_exp(x) == doctest::Approx(std::exp(x)).epsilon(1e-14));
  }
  CHECK(det_pow(2.0, 10.0) == doctest::Approx(1024.0).epsilon(1e-14));
  CHECK(det_pow(64.0, -1.2) == doctest::Approx(std::pow(64.0, -1.2)).epsilon(1e-14));
}

TEST_CASE("sampling: the integer and alias draws are unbiased and reproducible") {
  Rng a(42);
  Rng b(42);
  for (int i = 0; i < 100; ++i) CHECK(a.bits() == b.bits());
  Rng rng(7);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) ++counts[rng.below(6)];
  for (int c : counts) CHECK(std::abs(c - 10000) < 400);
  const AliasTable table({1.0, 0.0, 3.0, 6.0});
  std::vector<int> drawn(4, 0);
  for (int i = 0; i < 100000; ++i) ++drawn[table.draw(rng)];
  CHECK(drawn[1] == 0);
  CHECK(drawn[0] == doctest::Approx(10000).epsilon(0.05));
  CHECK(drawn[2] == doctest::Approx(30000).epsilon(0.03));
  CHECK(drawn[3] == doctest::Approx(60000).epsilon(0.02));
  // Geometric skips of p = 0.1 average (1 - p) / p = 9.
  double total = 0.0;
  for (int i = 0; i < 20000; ++i) total += static_cast<double>(geometric_skip(rng, 0.1));
  CHECK(total / 20000 == doctest::Approx(9.0).epsilon(0.05));
  CHECK(geometric_skip(rng, 1.0) == 0);
  // The stream is fixed by the standard: mt19937_64 seeded with 5489 gives this 10000th number.
  Rng standard(5489);
  std::uint64_t x = 0;
  for (int i = 0; i < 10000; ++i) x = standard.bits();
  CHECK(x == 9981545732273789042ull);
}

TEST_CASE("generate: the same seed gives the same trace, another seed another") {
  SyntheticParams p = params(3000, 11);
  p.weights = true;
  p.drift = 0.3;
  p.seq_len_min = 50;
  p.seq_len_max = 400;
  const MemoryTrace a = generate(p);
  const MemoryTrace b = generate(p);
  CHECK(a.tokens.experts == b.tokens.experts);
  CHECK(a.tokens.weights == b.tokens.weights);
  CHECK(a.tokens.sequence == b.tokens.sequence);
  CHECK(a.tokens.position == b.tokens.position);
  p.seed = 12;
  const MemoryTrace c = generate(p);
  CHECK(c.tokens.experts != a.tokens.experts);
  CHECK(c.tokens.experts.size() == a.tokens.experts.size());
}

TEST_CASE("generate: the same seed gives byte-identical files") {
  TempDir dir;
  const SyntheticParams p = params(2000, 3);
  for (const char* name : {"a.mtr", "b.mtr"}) {
    auto w = create_trace_writer((dir / name).string(), synthetic_meta(p), Encoding::kBinary, false);
    generate_synthetic(p, *w);
    w->finish();
  }
  CHECK(moesim::testing::read_text(dir / "a.mtr") == moesim::testing::read_text(dir / "b.mtr"));
}

TEST_CASE("generate: tokens are valid top-k sets and sequences follow the length rule") {
  SyntheticParams p = params(5000);
  p.seq_len_min = 10;
  p.seq_len_max = 20;
  p.weights = true;
  const MemoryTrace t = generate(p);
  REQUIRE(t.tokens.size() == 5000);
  CHECK(t.meta.token_count == 5000);
  const std::size_t per_token = 26 * 6;
  for (std::size_t i = 0; i < t.tokens.size(); ++i)
    for (std::size_t l = 0; l < 26; ++l) {
      const auto* set = t.tokens.experts.data() + i * per_token + l * 6;
      std::vector<std::uint16_t> sorted(set, set + 6);
      std::sort(sorted.begin(), sorted.end());
      REQUIRE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
      REQUIRE(sorted.back() < 64);
      const float* w = t.tokens.weights.data() + i * per_token + l * 6;
      REQUIRE(std::accumulate(w, w + 6, 0.0) == doctest::Approx(1.0).epsilon(1e-5));
      REQUIRE(std::is_sorted(w, w + 6, [](float a, float b) { return a > b; }));
    }
  // Sequence lengths in [10, 20], except the last one, which is cut at the token count.
  std::vector<std::uint32_t> lengths;
  for (std::size_t i = 0; i < t.tokens.size(); ++i) {
    if (i == 0 || t.tokens.sequence[i] != t.tokens.sequence[i - 1]) {
      CHECK(t.tokens.position[i] == 0);
      lengths.push_back(0);
    }
    ++lengths.back();
  }
  for (std::size_t s = 0; s + 1 < lengths.size(); ++s) {
    CHECK(lengths[s] >= 10);
    CHECK(lengths[s] <= 20);
  }
  CHECK(std::set<std::uint32_t>(lengths.begin(), lengths.end() - 1).size() > 5);
  CHECK(t.meta.sequence_count == lengths.size());
}

TEST_CASE("generate: the realised shares follow the popularity profile") {
  SyntheticParams p = params(40000);
  p.zipf = 1.0;
  p.affinity = 0.5;
  const TraceStats s = stats_of(p);
  const std::vector<double> profile = popularity_profile(p);
  CHECK(std::accumulate(profile.begin(), profile.end(), 0.0) == doctest::Approx(1.0));
  for (const auto& l : s.layers) {
    std::vector<double> realised = shares(l);
    std::sort(realised.rbegin(), realised.rend());
    CHECK(tv(realised, profile) < 0.02);
  }
}

TEST_CASE("generate: a larger Zipf exponent raises max/mean") {
  double previous = 0.0;
  for (double zipf : {0.0, 0.6, 1.2}) {
    SyntheticParams p = params(20000);
    p.zipf = zipf;
    const TraceStats s = stats_of(p);
    CAPTURE(zipf);
    CHECK(s.max_mean.mean > previous * 1.2);
    if (zipf == 0.0) CHECK(s.max_mean.max < 1.3);  // uniform: only sampling noise
    previous = s.max_mean.mean;
  }
}

TEST_CASE("generate: hot experts receive their share") {
  SyntheticParams p = params(30000);
  p.zipf = 0.5;  // the other experts stay below the hot ones' 0.1 each
  p.hot_experts = 4;
  p.hot_share = 0.4;
  const TraceStats s = stats_of(p);
  for (const auto& l : s.layers) {
    std::vector<double> realised = shares(l);
    std::sort(realised.rbegin(), realised.rend());
    CHECK(realised[0] + realised[1] + realised[2] + realised[3] == doctest::Approx(0.4).epsilon(0.03));
  }
}

TEST_CASE("generate: affinity 0 leaves lifts near 1, affinity raises the top lifts") {
  SyntheticParams p = params(60000);
  p.affinity = 0.0;
  const TraceStats independent = stats_of(p);
  CHECK(independent.pair_lift.median == doctest::Approx(1.0).epsilon(0.05));
  CHECK(independent.pair_lift.p99 < 1.35);
  CHECK(independent.strongest_lift.max < 2.2);  // noise on pairs seen ~50 times
  p.tokens = 30000;
  p.affinity = 0.5;
  const TraceStats linked = stats_of(p);
  CHECK(linked.strongest_lift.median > 3.0 * independent.strongest_lift.median);
  CHECK(linked.top_pairs.front().lift > 5.0);
  p.affinity = 0.9;
  const TraceStats tight = stats_of(p);
  CHECK(tight.strongest_lift.median > linked.strongest_lift.median);
}

TEST_CASE("generate: drift raises the difference between the halves") {
  SyntheticParams p = params(40000);
  const TraceStats still = stats_of(p);
  p.drift = 0.25;
  const TraceStats moving = stats_of(p);
  CHECK(still.drift_tv_max < 0.05);
  CHECK(moving.drift_tv_max > 0.15);
  for (std::size_t l = 0; l < still.layers.size(); ++l) CHECK(moving.layers[l].drift_tv > still.layers[l].drift_tv);
}

TEST_CASE("generate: parameters out of range are reported by name") {
  SyntheticParams p = params(100);
  CHECK(check_synthetic_params(p).empty());
  auto problems_with = [&](auto change) {
    SyntheticParams q = p;
    change(q);
    return check_synthetic_params(q);
  };
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.zipf = -0.5; }), "zipf"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.zipf = std::nan(""); }), "zipf"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.affinity = 1.5; }), "affinity"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.drift = -0.1; }), "drift"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.tokens = 0; }), "tokens"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.seq_len_min = 0; }), "seq-len"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.seq_len_max = 3; q.seq_len_min = 5; }), "seq-len"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.hot_experts = 64; }), "hot-experts"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.hot_share = 0.3; }), "hot-share"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.hot_experts = 2; q.hot_share = 0.0; }), "hot-share"));
  // 2 experts can take at most 2/6 of top-6 assignments.
  const auto too_hot = problems_with([](SyntheticParams& q) { q.hot_experts = 2; q.hot_share = 0.5; });
  REQUIRE(has_problem(too_hot, "hot-share"));
  CHECK(too_hot.front().problem.find("at most 0.333333") != std::string::npos);
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.shape.layers.clear(); }), "architecture"));
  CHECK(has_problem(problems_with([](SyntheticParams& q) { q.shape.top_k = 65; }), "architecture"));
  SyntheticParams bad = p;
  bad.affinity = 2.0;
  StatsWriter sink(synthetic_meta(bad));
  CHECK_THROWS_WITH_AS(generate_synthetic(bad, sink), doctest::Contains("affinity"), common::InputError);
}

TEST_CASE("generate: shapes from one expert to hundreds work") {
  const std::vector<std::tuple<int, int, int>> shapes = {{1, 1, 2}, {8, 2, 32}, {8, 8, 3}, {256, 8, 4}};
  for (const auto& shape : shapes) {
    const int experts = std::get<0>(shape);
    const int top_k = std::get<1>(shape);
    const int layers = std::get<2>(shape);
    SyntheticParams p;
    for (int l = 0; l < layers; ++l) p.shape.layers.push_back(l);
    p.shape.num_experts = experts;
    p.shape.top_k = top_k;
    p.tokens = 2000;
    p.zipf = 2.0;  // capped shares where top_k / experts is large
    const TraceStats s = stats_of(p, 1);
    CAPTURE(experts);
    CHECK(s.tokens == 2000);
    for (const auto& l : s.layers) CHECK(std::accumulate(l.loads.begin(), l.loads.end(), std::uint64_t{0}) == 2000u * top_k);
  }
}

TEST_CASE("fit: a 1M-token trace fitted to DeepSeek-V2-Lite keeps shares and the strongest pairs") {
  const auto started = std::chrono::steady_clock::now();
  auto source = open_trace(shipped_trace());
  const TraceStats src = compute_stats(*source, {});
  source->rewind();
  const FittedModel model = fit_model(*source, {});
  CHECK(model.tokens() == 8222);
  CHECK(model.sequence_lengths.size() == 127);
  const std::uint64_t tokens = 1000000;
  StatsWriter sink(fitted_meta(model, tokens, 1), {});
  generate_fitted(model, tokens, 1, sink);
  sink.finish();
  const TraceStats& gen = sink.stats();
  CHECK(gen.tokens == tokens);
  double worst_tv = 0.0;
  for (std::size_t l = 0; l < src.layers.size(); ++l) {
    const double d = tv(shares(src.layers[l]), shares(gen.layers[l]));
    CAPTURE(l);
    CHECK(d <= 0.02);
    worst_tv = std::max(worst_tv, d);
  }
  double worst_ratio = 1.0;
  REQUIRE(src.top_pairs.size() == 20);
  for (const auto& p : src.top_pairs) {
    const auto lift = gen.lift(p.pair_index, p.expert_from, p.expert_to);
    REQUIRE(lift.has_value());
    const double ratio = *lift / p.lift;
    CAPTURE(p.from_layer);
    CAPTURE(p.expert_from);
    CAPTURE(p.expert_to);
    CHECK(ratio >= 0.9);
    CHECK(ratio <= 1.1);
    if (std::fabs(ratio - 1.0) > std::fabs(worst_ratio - 1.0)) worst_ratio = ratio;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  MESSAGE("fit-and-scale to 1M tokens: worst share TV " << worst_tv << ", worst lift ratio " << worst_ratio << ", "
                                                         << seconds << " s");
}

TEST_CASE("fit: generation is deterministic and the saved model regenerates the same trace") {
  auto source = open_trace(shipped_trace());
  FitOptions small;
  small.max_source_tokens = 1500;  // keeps the JSON round trip quick
  const FittedModel model = fit_model(*source, small);
  CHECK(model.tokens() <= 1500);
  auto run = [](const FittedModel& m, std::uint64_t seed) {
    MemoryTrace t;
    auto w = write_memory_trace(t, fitted_meta(m, 3000, seed));
    generate_fitted(m, 3000, seed, *w);
    w->finish();
    return t;
  };
  const MemoryTrace a = run(model, 5);
  CHECK(a.meta.has_weights == source->meta().has_weights);
  CHECK(a.tokens.weights.size() == (a.meta.has_weights ? a.tokens.experts.size() : 0));
  CHECK(run(model, 5).tokens.experts == a.tokens.experts);
  CHECK(run(model, 6).tokens.experts != a.tokens.experts);
  TempDir dir;
  save_model(model, (dir / "m.json").string(), false);
  CHECK_THROWS_AS(save_model(model, (dir / "m.json").string(), false), common::UsageError);
  const FittedModel loaded = load_model((dir / "m.json").string());
  CHECK(loaded.experts == model.experts);
  CHECK(loaded.mutation_weights == model.mutation_weights);
  const MemoryTrace b = run(loaded, 5);
  CHECK(b.tokens.experts == a.tokens.experts);
  CHECK(b.tokens.weights == a.tokens.weights);
  CHECK(b.tokens.sequence == a.tokens.sequence);
  // Generated sequences take source sequence lengths (the last one cut at the token count).
  std::set<std::uint32_t> source_lengths(model.sequence_lengths.begin(), model.sequence_lengths.end());
  std::uint32_t run_length = 0;
  for (std::size_t i = 0; i < a.tokens.size(); ++i) {
    if (i > 0 && a.tokens.sequence[i] != a.tokens.sequence[i - 1]) {
      CHECK(source_lengths.count(run_length) == 1);
      run_length = 0;
    }
    ++run_length;
  }
}

TEST_CASE("fit: without jumps and mutations the generator replays source sequences") {
  auto source = open_trace(shipped_trace());
  FitOptions o;
  o.jump = 0.0;
  o.mutation = 0.0;
  const FittedModel model = fit_model(*source, o);
  MemoryTrace t;
  auto w = write_memory_trace(t, fitted_meta(model, 500, 1));
  generate_fitted(model, 500, 1, *w);
  w->finish();
  // Every generated token is some source token, layer for layer.
  std::set<std::vector<std::uint16_t>> paths;
  const std::size_t per_token = model.per_token();
  for (std::size_t i = 0; i < model.tokens(); ++i)
    paths.insert({model.experts.begin() + static_cast<std::ptrdiff_t>(i * per_token),
                  model.experts.begin() + static_cast<std::ptrdiff_t>((i + 1) * per_token)});
  for (std::size_t i = 0; i < t.tokens.size(); ++i)
    CHECK(paths.count({t.tokens.experts.begin() + static_cast<std::ptrdiff_t>(i * per_token),
                       t.tokens.experts.begin() + static_cast<std::ptrdiff_t>((i + 1) * per_token)}) == 1);
}

TEST_CASE("fit: mutation keeps the shares; the correction is what makes it so") {
  auto source = open_trace(shipped_trace());
  const TraceStats src = compute_stats(*source, {});
  source->rewind();
  FitOptions o;
  o.jump = 0.0;
  o.mutation = 0.1;  // strong, so that an uncorrected replacement would show
  const FittedModel model = fit_model(*source, o);
  StatsWriter sink(fitted_meta(model, 100000, 2), {});
  generate_fitted(model, 100000, 2, sink);
  sink.finish();
  for (std::size_t l = 0; l < src.layers.size(); ++l) CHECK(tv(shares(src.layers[l]), shares(sink.stats().layers[l])) < 0.02);
  // The corrected weights differ from the plain shares: popular experts are drawn more often, as a
  // draw that collides with the rest of the set is rejected.
  const auto& q = model.mutation_weights[0];
  const auto& share = model.shares[0];
  const auto hottest = static_cast<std::size_t>(std::max_element(share.begin(), share.end()) - share.begin());
  CHECK(q[hottest] > share[hottest] * 1.05);
}

TEST_CASE("fit: a large source is thinned by whole sequences") {
  SyntheticParams p = params(20000);
  p.seq_len_min = p.seq_len_max = 100;
  MemoryTrace t = generate(p);
  auto reader = read_memory_trace(t);
  FitOptions o;
  o.max_source_tokens = 5000;
  const FittedModel model = fit_model(*reader, o);
  CHECK(model.tokens() <= 5000);
  CHECK(model.tokens() >= 2500);
  CHECK(model.source_token_count == 20000);
  for (std::size_t s = 0; s + 1 < model.sequence_lengths.size(); ++s) CHECK(model.sequence_lengths[s] == 100);
  CHECK(model.sequence_lengths.back() <= 100);  // the last one may be cut at the cap
}

TEST_CASE("fit: bad options and bad stored models are rejected with the key at fault") {
  FitOptions o;
  o.jump = 1.5;
  CHECK(check_fit_options(o).front().param == "fit-jump");
  o = {};
  o.mutation = -1;
  CHECK(check_fit_options(o).front().param == "fit-mutation");
  auto source = open_trace(shipped_trace());
  FitOptions small;
  small.max_source_tokens = 300;
  const FittedModel model = fit_model(*source, small);
  const nlohmann::json good = model_to_json(model);
  CHECK_NOTHROW(model_from_json(good, "m.json"));
  auto broken = [&](auto change) {
    nlohmann::json doc = good;
    change(doc);
    return doc;
  };
  CHECK_THROWS_WITH_AS(model_from_json(broken([](nlohmann::json& d) { d["schema_version"] = 7; }), "m.json"),
                       doctest::Contains("m.json: schema_version: expected 1"), common::InputError);
  CHECK_THROWS_WITH_AS(model_from_json(broken([](nlohmann::json& d) { d.erase("jump"); }), "m.json"),
                       doctest::Contains("m.json: jump: missing"), common::InputError);
  CHECK_THROWS_WITH_AS(model_from_json(broken([](nlohmann::json& d) { d["shape"]["top_k"] = 0; }), "m.json"),
                       doctest::Contains("shape.top_k: expected an integer in [1, 64]"), common::InputError);
  CHECK_THROWS_WITH_AS(model_from_json(broken([](nlohmann::json& d) { d["routing"]["data"] = "AAA"; }), "m.json"),
                       doctest::Contains("routing.data: expected base64"), common::InputError);
  CHECK_THROWS_WITH_AS(
      model_from_json(broken([](nlohmann::json& d) { d["sequence_lengths"][0] = d["sequence_lengths"][0].get<int>() + 1; }),
                      "m.json"),
      doctest::Contains("routing.data: expected"), common::InputError);
  CHECK_THROWS_WITH_AS(model_from_json(broken([](nlohmann::json& d) { d["mutation_weights"][3] = {1.0}; }), "m.json"),
                       doctest::Contains("mutation_weights[3]: expected 64 entries"), common::InputError);
  TempDir dir;
  moesim::testing::write_text(dir / "bad.json", "{ not json");
  CHECK_THROWS_WITH_AS(load_model((dir / "bad.json").string()), doctest::Contains("not valid JSON"), common::InputError);
}

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The experts of the n largest loads (ties by id), as a set.
std::set<int> top_experts(const std::vector<double>& loads, std::size_t n) {
  std::vector<int> order(loads.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return loads[static_cast<std::size_t>(a)] > loads[static_cast<std::size_t>(b)]; });
  return std::set<int>(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n));
}

TraceShape mixtral_shape() {
  TraceShape shape;
  shape.architecture = "mixtral-8x7b";
  for (int l = 0; l < 32; ++l) shape.layers.push_back(l);
  shape.num_experts = 8;
  shape.top_k = 2;
  return shape;
}

std::string shipped_counts() {
  return (moesim::testing::source_dir() / "traces/data/olmoe-mixtral-counts/mistral/expert_counts/wikipedia.json").string();
}

// The counts of one layer of the shipped file, as shares in expert order.
std::vector<double> counted_shares(const std::string& layer) {
  const auto doc = nlohmann::json::parse(moesim::testing::read_text(shipped_counts()));
  std::vector<double> s(8);
  double total = 0.0;
  for (int e = 0; e < 8; ++e) total += s[static_cast<std::size_t>(e)] = doc.at(layer).at(std::to_string(e)).get<double>();
  for (double& v : s) v /= total;
  return s;
}

SyntheticParams mixtral_counts_params(std::uint64_t tokens, double affinity) {
  SyntheticParams p;
  p.shape = mixtral_shape();
  p.tokens = tokens;
  p.affinity = affinity;
  p.layer_shares = load_expert_count_shares(shipped_counts(), p.shape);
  return p;
}

}  // namespace

TEST_CASE("generate: the popularity ranking follows --popularity-seed; --seed only samples") {
  SyntheticParams p = params(20000, 1);
  const TraceStats one = stats_of(p);
  const MemoryTrace one_tokens = generate(p);
  p.seed = 2;
  const TraceStats two = stats_of(p);
  const MemoryTrace two_tokens = generate(p);
  CHECK(one_tokens.tokens.experts != two_tokens.tokens.experts);
  const std::uint64_t default_popularity_seed = p.popularity_seed;
  CHECK(default_popularity_seed == SyntheticParams{}.seed);  // one default for both seeds
  p.popularity_seed = 7;
  const TraceStats other = stats_of(p);
  int layers_differing = 0;
  for (std::size_t l = 0; l < one.layers.size(); ++l) {
    CAPTURE(l);
    const auto a = top_experts(shares(one.layers[l]), 5);
    CHECK(a == top_experts(shares(two.layers[l]), 5));
    // The shares the generator predicts name the same hot experts.
    p.popularity_seed = default_popularity_seed;
    CHECK(a == top_experts(expert_shares(p, l), 5));
    if (a != top_experts(shares(other.layers[l]), 5)) ++layers_differing;
  }
  CHECK(layers_differing > 20);
}

TEST_CASE("generate: expert counts set layers 0, 7 and 15; layers between are interpolated, later ones held") {
  const SyntheticParams p = mixtral_counts_params(100000, 0.3);
  REQUIRE(check_synthetic_params(p).empty());
  const TraceStats s = stats_of(p);
  REQUIRE(s.layers.size() == 32);
  const auto l0 = counted_shares("layer0");
  const auto l7 = counted_shares("layer7");
  const auto l15 = counted_shares("layer15");
  CHECK(tv(shares(s.layers[0]), l0) < 0.01);
  CHECK(tv(shares(s.layers[7]), l7) < 0.01);
  CHECK(tv(shares(s.layers[15]), l15) < 0.01);
  // The counts' shares differ by more than the tolerance, so the checks above tell the layers apart.
  CHECK(tv(l0, l15) > 0.03);
  for (int l : {2, 4, 5}) {
    CAPTURE(l);
    const auto realised = shares(s.layers[static_cast<std::size_t>(l)]);
    for (std::size_t e = 0; e < 8; ++e) {
      CAPTURE(e);
      CHECK(realised[e] >= std::min(l0[e], l7[e]) - 0.004);
      CHECK(realised[e] <= std::max(l0[e], l7[e]) + 0.004);
    }
  }
  for (int l : {10, 12}) {
    const auto realised = shares(s.layers[static_cast<std::size_t>(l)]);
    for (std::size_t e = 0; e < 8; ++e) {
      CHECK(realised[e] >= std::min(l7[e], l15[e]) - 0.004);
      CHECK(realised[e] <= std::max(l7[e], l15[e]) + 0.004);
    }
  }
  for (int l : {16, 24, 31}) CHECK(tv(shares(s.layers[static_cast<std::size_t>(l)]), l15) < 0.01);
  // Layer 3 lies 3/7 of the way from layer 0 to layer 7.
  const auto target3 = expert_shares(p, 3);
  for (std::size_t e = 0; e < 8; ++e) CHECK(target3[e] == doctest::Approx(l0[e] * 4.0 / 7.0 + l7[e] * 3.0 / 7.0));
  CHECK(contains(synthetic_meta(p).source, "per-layer shares"));
}

TEST_CASE("generate: with counts and two hot experts, the top two take two thirds") {
  SyntheticParams p = mixtral_counts_params(100000, 0.3);
  p.hot_experts = 2;
  p.hot_share = 0.667;
  REQUIRE(check_synthetic_params(p).empty());
  const TraceStats s = stats_of(p);
  const auto l0 = counted_shares("layer0");
  for (std::size_t l = 0; l < s.layers.size(); ++l) {
    CAPTURE(l);
    std::vector<double> realised = shares(s.layers[l]);
    const auto hot = top_experts(realised, 2);
    std::sort(realised.rbegin(), realised.rend());
    CHECK(realised[0] + realised[1] == doctest::Approx(0.667).epsilon(0.015));
    CHECK(realised[2] < 0.1);
    // The hot pair is the layer's two most-counted experts.
    CHECK(hot == top_experts(p.layer_shares[l], 2));
  }
  CHECK(top_experts(l0, 2) == std::set<int>{0, 5});
}

TEST_CASE("generate: a malformed expert-count file is an input error naming the file and the key") {
  TempDir dir;
  const TraceShape shape = mixtral_shape();
  const std::string good = R"("0": 5, "1": 5, "2": 5, "3": 5, "4": 5, "5": 5, "6": 5, "7": 5)";
  auto load = [&](const std::string& name, const std::string& text) {
    const std::string path = (dir / name).string();
    moesim::testing::write_text(dir / name, text);
    return path;
  };
  struct Case {
    const char* name;
    std::string text;
    std::vector<std::string> says;
  };
  const std::vector<Case> cases = {
      {"no-layer0.json", "{\"layer7\": {" + good + "}}", {"\"layer0\"", "missing"}},
      {"empty.json", "{}", {"\"layer0\"", "missing"}},
      {"bad-id.json", "{\"layer0\": {" + good + ", \"8\": 3}}", {"\"layer0\"", "expert \"8\"", "0 .. 7"}},
      {"word-id.json", "{\"layer0\": {" + good + ", \"x\": 3}}", {"\"layer0\"", "expert \"x\""}},
      {"negative.json", R"({"layer0": {"0": 5, "1": -2, "2": 5, "3": 5, "4": 5, "5": 5, "6": 5, "7": 5}})",
       {"expert \"1\"", "non-negative", "-2"}},
      {"missing-expert.json", R"({"layer0": {"0": 5, "1": 5, "2": 5, "3": 5, "4": 5, "5": 5, "6": 5}})",
       {"\"layer0\"", "expert 7"}},
      {"not-json.json", "layer0: {0: 5}", {"not JSON"}},
      {"array.json", "[1, 2]", {"expected an object"}},
      {"bad-layer.json", "{\"layer0\": {" + good + "}, \"layer40\": {" + good + "}}", {"\"layer40\"", "not a MoE layer"}},
      {"bad-key.json", "{\"layer0\": {" + good + "}, \"lay7\": {" + good + "}}", {"\"lay7\""}},
      {"zero.json", R"({"layer0": {"0": 0, "1": 0, "2": 0, "3": 0, "4": 0, "5": 0, "6": 0, "7": 0}})", {"all zero"}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string path = load(c.name, c.text);
    const std::string message = moesim::testing::error_of([&] { load_expert_count_shares(path, shape); });
    CAPTURE(message);
    CHECK_FALSE(message.empty());
    CHECK(message.rfind("usage: ", 0) == std::string::npos);  // an InputError
    CHECK(contains(message, path));
    for (const auto& s : c.says) CHECK(contains(message, s));
  }
  const std::string missing = (dir / "absent.json").string();
  CHECK_THROWS_AS(load_expert_count_shares(missing, shape), common::InputError);
  // A single counted layer holds for all.
  const auto held = load_expert_count_shares(load("one.json", "{\"layer0\": {" + good + "}}"), shape);
  REQUIRE(held.size() == 32);
  for (const auto& l : held) CHECK(l == std::vector<double>(8, 0.125));
}

TEST_CASE("fit: shift and drift relabel the experts of the same generated tokens, token by token") {
  auto source = open_trace(shipped_trace());
  const FittedModel model = fit_model(*source, {});
  const std::uint64_t n = 3000;
  const auto E = static_cast<std::uint64_t>(model.shape.num_experts);
  auto generate = [&](double drift, int shift) {
    MemoryTrace t;
    auto w = write_memory_trace(t, fitted_meta(model, n, 4, drift, shift));
    generate_fitted(model, n, 4, *w, drift, shift);
    w->finish();
    return t;
  };
  const MemoryTrace plain = generate(0.0, 0), shifted = generate(0.0, 32), drifted = generate(0.5, 5);
  REQUIRE(shifted.tokens.size() == n);
  REQUIRE(drifted.tokens.size() == n);
  CHECK(shifted.tokens.sequence == plain.tokens.sequence);
  CHECK(shifted.tokens.weights == plain.tokens.weights);
  const std::size_t per = model.per_token();
  for (std::uint64_t i = 0; i < n; ++i) {
    const auto by = 5 + static_cast<std::uint64_t>(std::floor(0.5 * static_cast<double>(E * i) / static_cast<double>(n)));
    for (std::size_t j = 0; j < per; ++j) {
      const std::uint64_t e = plain.tokens.experts[i * per + j];
      CHECK(shifted.tokens.experts[i * per + j] == (e + 32) % E);
      CHECK(drifted.tokens.experts[i * per + j] == (e + by) % E);
    }
  }
  CHECK(fitted_meta(model, n, 4, 0.0, 32).source.find("shift 32") != std::string::npos);
  CHECK_THROWS_AS(generate(0.0, static_cast<int>(E)), common::InputError);
  CHECK_THROWS_AS(generate(1.5, 0), common::InputError);
}
