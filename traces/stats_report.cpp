#include "traces/stats_report.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <ostream>

#include "common/build_info.hpp"

namespace moesim::traces {

namespace {

constexpr const char* kProvenance = "computed from the trace";

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

nlohmann::json pair_json(const PairLift& p) {
  return {{"from_layer", p.from_layer}, {"to_layer", p.to_layer},   {"expert_from", p.expert_from},
          {"expert_to", p.expert_to},   {"together", p.together},   {"lift", p.lift}};
}

// Layers holding the smallest and the largest max/mean.
std::pair<const LayerStats*, const LayerStats*> max_mean_extremes(const TraceStats& s) {
  const LayerStats* lo = nullptr;
  const LayerStats* hi = nullptr;
  for (const auto& l : s.layers) {
    if (lo == nullptr || l.max_mean < lo->max_mean) lo = &l;
    if (hi == nullptr || l.max_mean > hi->max_mean) hi = &l;
  }
  return {lo, hi};
}

// The head every stats document has: schema, kind, the tool's context and where the numbers come from.
nlohmann::json stats_document() {
  nlohmann::json doc;
  doc["schema_version"] = kStatsSchemaVersion;
  doc["kind"] = "moesim trace stats";
  doc["context"] = {{"tool", "moesim"},
                    {"version", common::kVersion},
                    {"git_revision", common::kGitRevision},
                    {"build_type", common::kBuildType},
                    {"date", utc_now()}};
  doc["provenance"] = kProvenance;
  return doc;
}

}  // namespace

nlohmann::json stats_to_json(const TraceStats& s, const StatsReportInput& input) {
  nlohmann::json doc = stats_document();
  const auto& m = s.meta;
  doc["trace"] = {{"path", input.trace_path},
                  {"sha256", input.trace_sha256},
                  {"architecture", m.shape.architecture},
                  {"layers", m.shape.layers},
                  {"num_experts", m.shape.num_experts},
                  {"top_k", m.shape.top_k},
                  {"has_weights", m.has_weights},
                  {"source", m.source},
                  {"token_count", m.token_count},
                  {"sequence_count", m.sequence_count}};
  doc["options"] = {{"min_together", s.options.min_together}, {"top", s.options.top_pairs}};
  doc["halves"] = {{"first_tokens", s.first_half_tokens}, {"second_tokens", s.tokens - s.first_half_tokens}};
  auto& layers = doc["layers"] = nlohmann::json::array();
  for (const auto& l : s.layers)
    layers.push_back({{"layer", l.layer},
                      {"tokens", l.tokens},
                      {"max_mean", l.max_mean},
                      {"entropy_bits", l.entropy_bits},
                      {"entropy_normalized", l.entropy_normalized},
                      {"hottest_expert", l.hottest_expert},
                      {"hottest_share", l.hottest_share},
                      {"drift_tv", l.drift_tv},
                      {"loads", l.loads}});
  auto& pairs = doc["layer_pairs"] = nlohmann::json::array();
  for (const auto& p : s.layer_pairs)
    pairs.push_back({{"from_layer", p.from_layer},
                     {"to_layer", p.to_layer},
                     {"qualifying_pairs", p.qualifying_pairs},
                     {"strongest", p.strongest ? pair_json(*p.strongest) : nlohmann::json(nullptr)}});
  const auto [lo, hi] = max_mean_extremes(s);
  nlohmann::json top = nlohmann::json::array();
  for (const auto& p : s.top_pairs) top.push_back(pair_json(p));
  doc["summary"] = {
      {"max_mean",
       {{"min", s.max_mean.min},
        {"min_layer", lo ? lo->layer : 0},
        {"max", s.max_mean.max},
        {"max_layer", hi ? hi->layer : 0},
        {"mean", s.max_mean.mean},
        {"median", s.max_mean.median}}},
      {"strongest_pair_lift",
       {{"layer_pairs", s.strongest_lift.count},
        {"min", s.strongest_lift.min},
        {"max", s.strongest_lift.max},
        {"median", s.strongest_lift.median}}},
      {"pair_lift", {{"pairs", s.pair_lift.count}, {"median", s.pair_lift.median}, {"p99", s.pair_lift.p99}}},
      {"drift_tv_max", s.drift_tv_max},
      {"drift_tv_max_layer", s.drift_tv_max_layer},
      {"top_pairs", top}};
  return doc;
}

void print_stats_table(std::ostream& out, const TraceStats& s, const StatsReportInput& input) {
  const auto& m = s.meta;
  out << "Trace statistics of " << input.trace_path << " (every number " << kProvenance << ")\n";
  out << "  " << (m.shape.architecture.empty() ? "(no architecture)" : m.shape.architecture) << ": " << s.tokens
      << " tokens in " << m.sequence_count << " sequences, " << m.shape.layers.size() << " MoE layers, "
      << m.shape.num_experts << " experts, top-" << m.shape.top_k
      << (m.has_weights ? ", gate weights" : ", no gate weights") << "\n";
  out << "  lift over pairs seen together >= " << s.options.min_together << " times; drift: first "
      << s.first_half_tokens << " tokens vs the other " << (s.tokens - s.first_half_tokens) << "\n\n";

  const std::vector<std::pair<std::string, std::size_t>> columns = {
      {"layer", 6},  {"tokens", 10}, {"max/mean", 9}, {"entropy", 9}, {"H/Hmax", 7}, {"hottest (share)", 17},
      {"strongest pair to next (lift)", 31}, {"drift TV", 9}};
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const auto& [name, width] = columns[c];
    out << (c == 5 || c == 6 ? "  " + pad_right(name, width - 2) : pad_left(name, width));
  }
  out << "\n";
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const auto& l = s.layers[i];
    std::string pair = "-";
    if (i < s.layer_pairs.size() && s.layer_pairs[i].strongest) {
      const auto& p = *s.layer_pairs[i].strongest;
      pair = std::to_string(p.expert_from) + " -> " + std::to_string(p.expert_to) + " (" + fixed(p.lift, 2) + ")";
    } else if (i < s.layer_pairs.size()) {
      pair = "(none seen " + std::to_string(s.options.min_together) + "x)";
    }
    out << pad_left(std::to_string(l.layer), 6) << pad_left(std::to_string(l.tokens), 10)
        << pad_left(fixed(l.max_mean, 2), 9) << pad_left(fixed(l.entropy_bits, 2) + " b", 9)
        << pad_left(fixed(l.entropy_normalized, 3), 7) << "  "
        << pad_right(std::to_string(l.hottest_expert) + " (" + fixed(l.hottest_share, 3) + ")", 15) << "  "
        << pad_right(pair, 29) << pad_left(fixed(l.drift_tv, 4), 9) << "\n";
  }
  out << "\n";
  const auto [lo, hi] = max_mean_extremes(s);
  if (lo != nullptr)
    out << "max/mean load: " << fixed(lo->max_mean, 2) << " (layer " << lo->layer << ") to " << fixed(hi->max_mean, 2)
        << " (layer " << hi->layer << "), mean " << fixed(s.max_mean.mean, 2) << "\n";
  if (s.strongest_lift.count > 0)
    out << "strongest pair per layer pair: lift " << fixed(s.strongest_lift.min, 2) << " to "
        << fixed(s.strongest_lift.max, 2) << ", median " << fixed(s.strongest_lift.median, 2) << " ("
        << s.strongest_lift.count << " of " << s.layer_pairs.size() << " layer pairs have a pair seen "
        << s.options.min_together << " times)\n";
  else if (!s.layer_pairs.empty())
    out << "strongest pair per layer pair: no pair was seen together " << s.options.min_together
        << " times (lower --min-together)\n";
  if (s.pair_lift.count > 0)
    out << "all " << s.pair_lift.count << " pairs seen together >= " << s.options.min_together
        << " times: median lift " << fixed(s.pair_lift.median, 2) << ", p99 " << fixed(s.pair_lift.p99, 2) << "\n";
  out << "drift between the halves: max TV " << fixed(s.drift_tv_max, 4) << " (layer " << s.drift_tv_max_layer
      << ")\n";
  if (!s.top_pairs.empty()) {
    out << s.top_pairs.size() << " strongest pairs:\n";
    for (std::size_t i = 0; i < s.top_pairs.size(); ++i) {
      const auto& p = s.top_pairs[i];
      out << pad_left(std::to_string(i + 1), 4) << ". layer " << p.from_layer << " expert " << p.expert_from
          << " -> layer " << p.to_layer << " expert " << p.expert_to << ": lift " << fixed(p.lift, 2) << " ("
          << p.together << " tokens together)\n";
    }
  }
}

namespace {

constexpr const char* kNoAffinity =
    "load-only trace: per-step expert counts, no per-token routes, so no cross-layer affinity (lift, pairs)";

nlohmann::json summary_json(const Summary& s) {
  return {{"count", s.count}, {"min", s.min}, {"max", s.max}, {"mean", s.mean}, {"median", s.median}, {"p99", s.p99}};
}

}  // namespace

nlohmann::json load_stats_to_json(const LoadTraceStats& s, const StatsReportInput& input) {
  nlohmann::json doc = stats_document();
  doc["load_only"] = true;
  doc["note"] = kNoAffinity;
  const auto& m = s.meta;
  doc["trace"] = {{"path", input.trace_path},
                  {"sha256", input.trace_sha256},
                  {"architecture", m.shape.architecture},
                  {"layers", m.shape.layers},
                  {"num_experts", m.shape.num_experts},
                  {"top_k", m.shape.top_k},
                  {"source", m.source},
                  {"iterations", m.iterations},
                  {"token_count", m.total_tokens}};
  doc["halves"] = {{"first_iterations", s.first_half_iterations},
                   {"second_iterations", s.iterations - s.first_half_iterations}};
  doc["tokens_per_iteration"] = summary_json(s.tokens_per_iteration);
  auto& layers = doc["layers"] = nlohmann::json::array();
  for (const auto& l : s.layers)
    layers.push_back({{"layer", l.layer},
                      {"max_mean", l.max_mean},
                      {"step_max_mean_mean", l.step_max_mean_mean},
                      {"step_max_mean_max", l.step_max_mean_max},
                      {"entropy_bits", l.entropy_bits},
                      {"entropy_normalized", l.entropy_normalized},
                      {"hottest_expert", l.hottest_expert},
                      {"hottest_share", l.hottest_share},
                      {"drift_tv", l.drift_tv},
                      {"loads", l.loads}});
  doc["summary"] = {{"max_mean", summary_json(s.max_mean)},
                    {"step_max_mean", summary_json(s.step_max_mean)},
                    {"drift_tv_max", s.drift_tv_max},
                    {"drift_tv_max_layer", s.drift_tv_max_layer}};
  return doc;
}

void print_load_stats_table(std::ostream& out, const LoadTraceStats& s, const StatsReportInput& input) {
  const auto& m = s.meta;
  out << "Trace statistics of " << input.trace_path << " (every number " << kProvenance << ")\n";
  out << "  " << m.shape.architecture << ": load-only trace, " << s.iterations << " iterations, " << s.tokens
      << " tokens (per iteration " << fixed(s.tokens_per_iteration.min, 0) << " to "
      << fixed(s.tokens_per_iteration.max, 0) << ", mean " << fixed(s.tokens_per_iteration.mean, 1) << "), "
      << m.shape.layers.size() << " MoE layers, " << m.shape.num_experts << " experts, top-" << m.shape.top_k << "\n";
  out << "  " << kNoAffinity << "\n";
  out << "  step max/mean: each iteration's max/mean load at the layer; drift: first " << s.first_half_iterations
      << " iterations vs the other " << (s.iterations - s.first_half_iterations) << "\n\n";
  const std::vector<std::pair<std::string, std::size_t>> columns = {
      {"layer", 6}, {"max/mean", 9}, {"step mean", 10}, {"step max", 9}, {"entropy", 9}, {"H/Hmax", 7},
      {"hottest (share)", 17}, {"drift TV", 9}};
  for (std::size_t c = 0; c < columns.size(); ++c) {
    const auto& [name, width] = columns[c];
    out << (c == 6 ? "  " + pad_right(name, width - 2) : pad_left(name, width));
  }
  out << "\n";
  for (const auto& l : s.layers)
    out << pad_left(std::to_string(l.layer), 6) << pad_left(fixed(l.max_mean, 2), 9)
        << pad_left(fixed(l.step_max_mean_mean, 2), 10) << pad_left(fixed(l.step_max_mean_max, 2), 9)
        << pad_left(fixed(l.entropy_bits, 2) + " b", 9) << pad_left(fixed(l.entropy_normalized, 3), 7) << "  "
        << pad_right(std::to_string(l.hottest_expert) + " (" + fixed(l.hottest_share, 3) + ")", 15)
        << pad_left(fixed(l.drift_tv, 4), 9) << "\n";
  out << "\n";
  const LoadLayerStats* lo = nullptr;
  const LoadLayerStats* hi = nullptr;
  for (const auto& l : s.layers) {
    if (lo == nullptr || l.max_mean < lo->max_mean) lo = &l;
    if (hi == nullptr || l.max_mean > hi->max_mean) hi = &l;
  }
  if (lo != nullptr)
    out << "max/mean load: " << fixed(lo->max_mean, 2) << " (layer " << lo->layer << ") to " << fixed(hi->max_mean, 2)
        << " (layer " << hi->layer << "), mean " << fixed(s.max_mean.mean, 2) << "\n";
  out << "step max/mean over " << s.step_max_mean.count << " (iteration, layer) pairs: median "
      << fixed(s.step_max_mean.median, 2) << ", p99 " << fixed(s.step_max_mean.p99, 2) << ", max "
      << fixed(s.step_max_mean.max, 2) << "\n";
  out << "drift between the halves: max TV " << fixed(s.drift_tv_max, 4) << " (layer " << s.drift_tv_max_layer
      << ")\n";
}

}  // namespace moesim::traces
