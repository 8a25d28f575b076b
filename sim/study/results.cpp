#include "sim/study/results.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <sstream>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/files.hpp"
#include "common/stats.hpp"
#include "sim/engine/engine.hpp"
#include "traces/load_trace.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using S = VariantSummary;

const std::array<MetricColumn, 19> kMetricColumns{{
    {&S::p50, "step_latency_s.p50", "step_p50_s", 1, "p50 ms", "", 10, 1e3, 3, false},
    {&S::p90, "step_latency_s.p90", "step_p90_s", 0, "", "", 0, 1, 0, false},
    {&S::p99, "step_latency_s.p99", "step_p99_s", 2, "p99 ms", "", 10, 1e3, 3, false},
    {&S::max, "step_latency_s.max", "step_max_s", 0, "", "", 0, 1, 0, false},
    {&S::mean, "step_latency_s.mean", "", 0, "", "", 0, 1, 0, false},
    {&S::throughput, "throughput_tokens_per_s", "throughput_tokens_per_s", 3, "tok/s", "", 10, 1, 0, false},
    {&S::token_tail, "token_tail_s", "token_tail_s", 5, "tok tail", "ms/layer", 11, 1e3, 4, false},
    {&S::a2a_tail, "a2a_tail_s", "a2a_tail_s", 4, "a2a tail", "ms/layer", 11, 1e3, 4, false},
    {&S::a2a_avg, "a2a_avg_s", "a2a_avg_s", 0, "", "", 0, 1, 0, false},
    {&S::energy_per_step, "energy_per_step_J", "energy_per_step_J", 0, "", "", 0, 1, 0, false},
    {&S::energy_per_token, "energy_per_token_J", "energy_per_token_J", 6, "mJ/token", "", 10, 1e3, 3, false},
    {&S::avg_power, "avg_power_W", "avg_power_W", 7, "avg W", "per GPU", 9, 1, 0, false},
    {&S::peak_power, "peak_power_W", "peak_power_W", 0, "", "", 0, 1, 0, false},
    {&S::utilisation, "utilisation", "utilisation", 0, "", "", 0, 1, 0, false},
    {&S::compute_slowdown, "compute_slowdown", "compute_slowdown", 8, "slowdown", "compute", 9, 100, 1, true},
    {&S::sequential_p50, "timelines_p50_s.sequential", "sequential_p50_s", 0, "", "", 0, 1, 0, false},
    {&S::overlapped_p50, "timelines_p50_s.overlapped", "overlapped_p50_s", 0, "", "", 0, 1, 0, false},
    {&S::ideal_p50, "timelines_p50_s.ideal", "ideal_p50_s", 0, "", "", 0, 1, 0, false},
    {&S::chunking_cost, "chunking_cost", "chunking_cost", 0, "", "", 0, 1, 0, false},
}};

namespace {

std::string network_fidelity_ran(const std::vector<SimResult>& timelines) {
  auto any = [&](auto pred) { return std::any_of(timelines.begin(), timelines.end(), pred); };
  if (any([](const SimResult& t) { return t.port_activities > 0; })) return "ports";
  if (any([](const SimResult& t) { return t.aggregated_flows > 0; })) return "aggregated";
  if (any([](const SimResult& t) { return t.fluid_flows > 0; })) return "fluid";
  return "flow";
}

double network_tolerance_ran(const std::vector<SimResult>& timelines) {
  double t = 0.0;
  for (const auto& r : timelines) t = std::max(t, r.network_tolerance);
  return t;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// An optional number of a results object: NaN where the key is absent or not a number.
double number_or_nan(const nlohmann::json& obj, const char* key) {
  return obj.contains(key) && obj.at(key).is_number() ? obj.at(key).get<double>() : kNaN;
}

nlohmann::json jnum(double x) { return std::isnan(x) ? nlohmann::json(nullptr) : nlohmann::json(x); }

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  for (;;) {
    const auto dot = path.find('.', start);
    parts.emplace_back(path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) return parts;
    start = dot + 1;
  }
}

std::string num(double v) {
  if (std::isnan(v)) return "";
  std::ostringstream ss;
  ss << std::setprecision(17) << v;
  return ss.str();
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string joined(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

const VariantResult* find_baseline(const std::vector<VariantResult>& results, const std::string& baseline) {
  for (const auto& r : results)
    if (r.name == baseline) return &r;
  return nullptr;
}

// Reads a result.json "variant" object field by field, failing with the file and the JSON path.
class VariantReader {
 public:
  VariantReader(const nlohmann::json& j, std::string where) : j_(j), where_(std::move(where)) {}
  [[noreturn]] void fail(const std::string& what) const {
    throw common::InputError(where_ + ": " + what + "; it was not written by this version of moesim, or was edited: " +
                             "delete its variant folder and run again (--resume reruns it)");
  }
  const nlohmann::json& at(const nlohmann::json& obj, const std::string& key, const std::string& path) const {
    if (!obj.is_object() || !obj.contains(key)) fail("expected the key " + path + key + ", found none");
    return obj.at(key);
  }
  // Written by jnum: null stands for NaN (not run, or undefined).
  double number(const nlohmann::json& obj, const std::string& key, const std::string& path) const {
    const auto& x = at(obj, key, path);
    if (x.is_null()) return kNaN;
    if (!x.is_number()) fail("expected a number at " + path + key + ", found " + x.dump());
    return x.get<double>();
  }
  std::string text(const nlohmann::json& obj, const std::string& key, const std::string& path) const {
    const auto& x = at(obj, key, path);
    if (!x.is_string()) fail("expected a string at " + path + key + ", found " + x.dump());
    return x.get<std::string>();
  }
  int integer(const nlohmann::json& obj, const std::string& key, const std::string& path) const {
    const auto& x = at(obj, key, path);
    if (!x.is_number_integer()) fail("expected an integer at " + path + key + ", found " + x.dump());
    return x.get<int>();
  }
  template <typename E, std::size_t N>
  E enum_value(const nlohmann::json& obj, const std::string& key, const std::string& path,
               const std::array<common::EnumName<E>, N>& table) const {
    const std::string value = text(obj, key, path);
    if (auto e = common::enum_from_name<E>(table, value)) return *e;
    fail("unexpected value \"" + value + "\" at " + path + key);
  }
  double column(const MetricColumn& c) const {
    const auto parts = split_path(c.json_path);
    const nlohmann::json* obj = &j_;
    std::string path = "variant.";
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
      obj = &at(*obj, parts[i], path);
      path += parts[i] + ".";
    }
    return number(*obj, parts.back(), path);
  }

 private:
  const nlohmann::json& j_;
  std::string where_;
};

void read_inputs(const VariantReader& r, const nlohmann::json& in, VariantResult& v) {
  const std::string ip = "variant.inputs.";
  Scenario& s = v.scenario;
  s.architecture = r.text(in, "architecture", ip);
  s.cluster = r.text(in, "cluster", ip);
  v.profile_name = r.text(in, "profile", ip);
  for (const auto& k : r.at(in, "profile_sources", ip)) {
    if (!k.is_string()) r.fail("expected strings at " + ip + "profile_sources");
    v.profile_sources.push_back(k.get<std::string>());
  }
  s.tp = r.integer(in, "tp", ip);
  s.ep = r.integer(in, "ep", ip);
  s.workload.mode = r.enum_value(in, "mode", ip, kWorkloadModes);
  // Results written before trace: balanced existed replayed their trace.
  if (in.contains("routing")) s.balanced_routing = r.text(in, "routing", ip) == "balanced";
  // The label the tables print (a policy, or a placement file's name).
  s.placement.policy = r.text(in, "placement", ip);
  s.overlap.policy = r.enum_value(in, "overlap", ip, kOverlapPolicies);
  s.overlap.chunks = r.integer(in, "chunks", ip);
  s.dispatch = r.enum_value(in, "dispatch", ip, kDispatchModes);
  // Results written before network.fidelity existed ran with what is now "auto".
  if (in.contains("network_fidelity")) s.fidelity = r.enum_value(in, "network_fidelity", ip, kNetworkFidelities);
  // "auto", or the number asked for; results written before the key existed ran exact (0).
  if (!in.contains("network_tolerance"))
    s.network_tolerance = 0.0;
  else if (in.at("network_tolerance").is_string() && in.at("network_tolerance").get<std::string>() == "auto")
    s.network_tolerance = kAutoTolerance;
  else
    s.network_tolerance = r.number(in, "network_tolerance", ip);
  const double cap = r.number(in, "power_cap_W", ip);
  s.power_cap = std::isnan(cap) ? 0.0 : cap;
  s.workload.steps = r.integer(in, "steps", ip);
  v.inputs = r.at(in, "hashes", ip);
  if (in.contains("placement_file")) v.placement_file = r.text(in, "placement_file", ip);
}

}  // namespace

std::vector<const MetricColumn*> table_columns() {
  std::vector<const MetricColumn*> out;
  for (const auto& c : kMetricColumns)
    if (c.table > 0) out.push_back(&c);
  std::sort(out.begin(), out.end(), [](const MetricColumn* a, const MetricColumn* b) { return a->table < b->table; });
  return out;
}

std::string placement_label(const Scenario& s) {
  return s.placement.file.empty() ? s.placement.policy : fs::path(s.placement.file).filename().string();
}

nlohmann::json phase_summary(const Scenario& s, const SimResult& r) {
  nlohmann::json out = nlohmann::json::array();
  if (s.trace_mix != TraceMix::kPhases || s.trace_parts.empty()) return out;
  long cycle = 0;
  for (const TracePart& p : s.trace_parts) cycle += p.steps;
  std::vector<std::vector<double>> by_phase(s.trace_parts.size());
  for (std::size_t m = 0; m < r.step_latency.size(); ++m) {
    long at = (static_cast<long>(m) + s.workload.warmup_steps) % cycle;
    std::size_t i = 0;
    while (at >= s.trace_parts[i].steps) at -= s.trace_parts[i++].steps;
    by_phase[i].push_back(r.step_latency[m]);
  }
  for (std::size_t i = 0; i < by_phase.size(); ++i) {
    const auto& v = by_phase[i];
    double sum = 0.0;
    for (double x : v) sum += x;
    out.push_back({{"phase", i + 1},
                   {"trace", fs::path(s.trace_parts[i].path).filename().string()},
                   {"steps", v.size()},
                   {"p50_s", jnum(common::percentile(v, 0.5))},
                   {"p99_s", jnum(common::percentile(v, 0.99))},
                   {"mean_s", v.empty() ? nlohmann::json(nullptr) : nlohmann::json(sum / static_cast<double>(v.size()))}});
  }
  return out;
}

std::string format_metric(const MetricColumn& c, double value) {
  if (!std::isfinite(value)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f%s", c.decimals, value * c.scale, c.percent ? "%" : "");
  return buf;
}

std::string format_change(double ratio_minus_one) {
  if (!std::isfinite(ratio_minus_one)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * ratio_minus_one);
  return buf;
}

nlohmann::json context_block(const Study& study) {
  return {{"tool", "moesim"},
          {"version", common::kVersion},
          {"git_revision", common::kGitRevision},
          {"build_type", common::kBuildType},
          {"simgrid_version", simgrid_version()},
          {"study", study.name},
          {"study_sha256", study.sha256},
          {"description", study.description}};
}

nlohmann::json variant_json(const VariantResult& v, bool with_details) {
  nlohmann::json assignments = nlohmann::json::object();
  for (const auto& [k, val] : v.assignments) assignments[k] = val;
  const Scenario& sc = v.scenario;
  nlohmann::json j = {
      {"name", v.name},
      {"assignments", assignments},
      {"inputs",
       {{"architecture", sc.architecture},
        {"cluster", sc.cluster},
        {"profile", v.profile_name},
        {"profile_sources", v.profile_sources},
        {"tp", sc.tp},
        {"ep", sc.ep},
        {"mode", workload_mode_name(sc.workload.mode)},
        {"routing", sc.balanced_routing       ? "balanced"
                    : sc.trace.empty()          ? "none"
                    : sc.trace_mix == TraceMix::kOne && traces::is_load_trace(sc.trace) ? "counts"
                                                                                         : "trace"},
        {"placement", placement_label(sc)},
        {"overlap", overlap_policy_name(sc.overlap.policy)},
        {"chunks", sc.overlap.chunks},
        {"dispatch", dispatch_mode_name(sc.dispatch)},
        {"network_fidelity", network_fidelity_name(sc.fidelity)},
        {"network_tolerance", sc.network_tolerance == kAutoTolerance ? nlohmann::json("auto")
                                                                      : nlohmann::json(sc.network_tolerance)},
        {"power_cap_W", sc.power_cap > 0 ? nlohmann::json(sc.power_cap) : nlohmann::json(nullptr)},
        {"steps", sc.workload.steps},
        {"hashes", v.inputs}}},
      {"source", "predicted by the moesim simulator (model) from profile " + v.profile_name + " (" +
                     joined(v.profile_sources, ", ") + " values)"},
      {"trace_repeated", v.timelines.front().trace_repeated},
      {"dispatch_mode_ran", dispatch_mode_name(sc.dispatch)},
      // What the network fidelity resolved to: "aggregated" where some flow stood for several
      // transfers (the aggregated uniform all-to-all), else "fluid" where the engine's fluid network
      // moved the transfers, else "flow" (one SimGrid flow per transfer).
      {"network_fidelity_ran", network_fidelity_ran(v.timelines)},
      // The fluid network's tolerance as it ran (auto resolved; the largest of the timelines'): 0
      // exact max-min or SimGrid's flows, t > 0 epochs (docs/simulator.md, "Solving in epochs").
      {"network_tolerance_ran", network_tolerance_ran(v.timelines)},
  };
  for (const auto& c : kMetricColumns) {
    if (c.json_path.empty()) continue;
    nlohmann::json* obj = &j;
    const auto parts = split_path(c.json_path);
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) obj = &(*obj)[parts[i]];
    (*obj)[parts.back()] = jnum(v.summary.*c.field);
  }
  if (!v.placement_file.empty()) j["inputs"]["placement_file"] = v.placement_file;
  if (sc.trace_mix != TraceMix::kOne) {
    nlohmann::json parts = nlohmann::json::array();
    for (const TracePart& p : sc.trace_parts) {
      nlohmann::json x = {{"trace", fs::path(p.path).filename().string()}};
      if (sc.trace_mix == TraceMix::kPhases)
        x["steps"] = p.steps;
      else
        x["weight"] = p.weight;
      parts.push_back(std::move(x));
    }
    j["inputs"][sc.trace_mix == TraceMix::kPhases ? "trace_phases" : "trace_mix"] = std::move(parts);
    if (sc.trace_mix == TraceMix::kPhases) j["phases"] = v.phases;
  }
  if (std::isfinite(v.summary.sends_per_token_layer)) {
    const VariantSummary& m = v.summary;
    nlohmann::json x = {{"sends_per_token_layer", jnum(m.sends_per_token_layer)},
                        {"intra_node_bytes", jnum(m.intra_node_bytes)},
                        {"inter_node_bytes", jnum(m.inter_node_bytes)},
                        {"token_inter_node_bytes", jnum(m.token_inter_node_bytes)},
                        {"source", "model: the trace's tokens routed through the placement (a send: a token's hidden "
                                   "state to another EP rank, in a dispatch or a combine), bytes from the simulated "
                                   "transfers of the measured steps (intra/inter: every transfer, collectives at "
                                   "their ring transfers' sized bytes; token_inter_node: dispatch and combine "
                                   "payload between nodes)"}};
    if (std::isfinite(m.context_bytes)) x["replicated_context_bytes"] = jnum(m.context_bytes);
    if (std::isfinite(m.coherence_bytes_per_step)) x["coherence_bytes_per_step"] = jnum(m.coherence_bytes_per_step);
    j["traffic"] = std::move(x);
  }
  if (const RebalanceOptions& rb = sc.placement.rebalance; rb.every_steps > 0) {
    const VariantSummary& m = v.summary;
    nlohmann::json x = {{"every_steps", rb.every_steps},
                        {"window_steps", rb.window_steps},
                        {"migration", migration_mode_name(rb.migration)},
                        {"rebalances", jnum(m.rebalances)},
                        {"experts_moved", jnum(m.experts_moved)},
                        {"moved_bytes", jnum(m.moved_bytes)},
                        {"migration_s", jnum(m.migration_seconds)},
                        {"source", "model: the policy solved again on each window's routing, the moved experts' "
                                   "weights (architecture FFN size x dtype) sent over the cluster's links"}};
    // Each rebalance with the step latencies around it (measured steps only).
    const SimResult& t = v.timelines.front();
    nlohmann::json events = nlohmann::json::array();
    for (const auto& e : t.rebalances) {
      const long m_step = e.step - sc.workload.warmup_steps;
      auto latency = [&](long i) {
        return i >= 0 && i < static_cast<long>(t.step_latency.size()) ? nlohmann::json(t.step_latency[static_cast<std::size_t>(i)])
                                                                        : nlohmann::json(nullptr);
      };
      events.push_back({{"step", e.step},
                        {"measured_step", m_step},
                        {"experts_moved", e.experts_moved},
                        {"bytes", e.bytes},
                        {"seconds", e.seconds},
                        {"step_latency_before_s", latency(m_step - 1)},
                        {"step_latency_s", e.step_latency},
                        {"step_latency_after_s", latency(m_step + 1)}});
    }
    x["events"] = std::move(events);
    j["rebalance"] = std::move(x);
  }
  if (!v.auto_decisions.empty()) j["auto_decisions"] = v.auto_decisions;
  if (!with_details) return j;
  j["placement_policy"] = v.placement_policy;
  j["placement_report"] = v.placement_report;
  j["layer_chunks"] = v.layer_chunks;
  nlohmann::json tl = nlohmann::json::array();
  for (const auto& t : v.timelines) {
    auto x = to_json(t);
    x.erase("wall_s");
    x["compute_slowdown"] = t.compute_alone > 0 ? t.compute_actual / t.compute_alone - 1.0 : 0.0;
    x["step_p50_s"] = jnum(common::percentile(t.step_latency, 0.5));
    x["step_p99_s"] = jnum(common::percentile(t.step_latency, 0.99));
    x["step_activity"] = step_activity_json(t.timeline, t.gpus.size());  // the report's timeline chart
    tl.push_back(std::move(x));
  }
  j["timelines"] = tl;
  return j;
}

VariantResult variant_result_from_json(const nlohmann::json& j, const std::string& where) {
  const VariantReader r(j, where);
  VariantResult v;
  v.name = r.text(j, "name", "variant.");
  const auto& assignments = r.at(j, "assignments", "variant.");
  if (!assignments.is_object()) r.fail("expected an object at variant.assignments");
  for (const auto& [k, val] : assignments.items()) {
    if (!val.is_string()) r.fail("expected a string at variant.assignments." + k);
    v.assignments.emplace_back(k, val.get<std::string>());
  }
  read_inputs(r, r.at(j, "inputs", "variant."), v);
  if (j.contains("auto_decisions")) v.auto_decisions = j.at("auto_decisions");
  for (const auto& c : kMetricColumns)
    if (!c.json_path.empty()) v.summary.*c.field = r.column(c);
  if (j.contains("traffic") && j.at("traffic").is_object()) {
    const auto& tr = j.at("traffic");
    auto get = [&](const char* k) { return number_or_nan(tr, k); };
    v.summary.sends_per_token_layer = get("sends_per_token_layer");
    v.summary.intra_node_bytes = get("intra_node_bytes");
    v.summary.inter_node_bytes = get("inter_node_bytes");
    v.summary.token_inter_node_bytes = get("token_inter_node_bytes");
    v.summary.context_bytes = get("replicated_context_bytes");
    v.summary.coherence_bytes_per_step = get("coherence_bytes_per_step");
  }
  if (j.contains("rebalance") && j.at("rebalance").is_object()) {
    const auto& rb = j.at("rebalance");
    auto get = [&](const char* k) { return number_or_nan(rb, k); };
    v.summary.rebalances = get("rebalances");
    v.summary.experts_moved = get("experts_moved");
    v.summary.moved_bytes = get("moved_bytes");
    v.summary.migration_seconds = get("migration_s");
    // The table shows the migration columns for a variant that rebalances.
    RebalanceOptions& o = v.scenario.placement.rebalance;
    o.every_steps = static_cast<int>(get("every_steps"));
    o.window_steps = static_cast<int>(get("window_steps"));
    if (rb.contains("migration") && rb.at("migration").is_string())
      if (const auto mode = common::enum_from_name<MigrationMode>(kMigrationModes, rb.at("migration").get<std::string>()))
        o.migration = *mode;
  }
  if (j.contains("phases") && j.at("phases").is_array()) v.phases = j.at("phases");
  const auto& repeated = r.at(j, "trace_repeated", "variant.");
  if (!repeated.is_boolean()) r.fail("expected true or false at variant.trace_repeated");
  SimResult first;
  first.label = overlap_policy_name(v.scenario.overlap.policy);
  first.trace_repeated = repeated.get<bool>();
  v.timelines.push_back(std::move(first));
  return v;
}

std::optional<double> column_value(const nlohmann::json& row, const MetricColumn& c) {
  const nlohmann::json* obj = &row;
  for (const auto& part : split_path(c.json_path)) {
    if (!obj->is_object() || !obj->contains(part)) return std::nullopt;
    obj = &obj->at(part);
  }
  if (obj->is_null()) return kNaN;
  if (!obj->is_number()) return std::nullopt;
  return obj->get<double>();
}

nlohmann::json results_row(const nlohmann::json& variant, const VariantResult& result, const VariantResult* baseline) {
  nlohmann::json row = variant;
  for (const char* k : {"placement_policy", "placement_report", "layer_chunks", "timelines"}) row.erase(k);
  auto change = [&](double VariantSummary::*field) {
    if (!baseline) return nlohmann::json(nullptr);
    return jnum(result.summary.*field / baseline->summary.*field - 1.0);
  };
  row["p50_change_vs_baseline"] = change(&VariantSummary::p50);
  row["p99_change_vs_baseline"] = change(&VariantSummary::p99);
  return row;
}

std::string results_csv(const std::vector<VariantResult>& results, const std::string& baseline) {
  std::ostringstream out;
  out << "variant,baseline,architecture,cluster,profile,profile_sources,tp,ep,mode,placement,overlap,chunks,dispatch,"
         "power_cap_W,steps";
  for (const auto& c : kMetricColumns)
    if (!c.csv.empty()) out << "," << c.csv;
  out << ",p50_change_vs_baseline,p99_change_vs_baseline\n";
  const VariantResult* base = find_baseline(results, baseline);
  for (const auto& r : results) {
    const Scenario& sc = r.scenario;
    out << csv_field(r.name) << "," << (r.name == baseline ? "yes" : "no") << "," << csv_field(sc.architecture) << ","
        << csv_field(sc.cluster) << "," << csv_field(r.profile_name) << "," << joined(r.profile_sources, "+") << ","
        << sc.tp << "," << sc.ep << "," << workload_mode_name(sc.workload.mode) << ","
        << csv_field(placement_label(sc)) << "," << overlap_policy_name(sc.overlap.policy) << "," << sc.overlap.chunks
        << "," << dispatch_mode_name(sc.dispatch) << "," << (sc.power_cap > 0 ? num(sc.power_cap) : "") << ","
        << sc.workload.steps;
    for (const auto& c : kMetricColumns)
      if (!c.csv.empty()) out << "," << num(r.summary.*c.field);
    out << "," << (base ? num(r.summary.p50 / base->summary.p50 - 1.0) : "") << ","
        << (base ? num(r.summary.p99 / base->summary.p99 - 1.0) : "") << "\n";
  }
  return out.str();
}

std::string results_table(const std::vector<VariantResult>& results, const std::string& baseline) {
  std::ostringstream out;
  const VariantResult* base = find_baseline(results, baseline);
  if (!results.empty()) {
    const auto& r = results.front();
    out << "Predicted by the simulator (model) with profile " << r.profile_name << " ("
        << joined(r.profile_sources, " + ") << " values); " << r.scenario.workload.steps
        << " measured steps per variant.\n";
  }
  const auto columns = table_columns();
  char cell[128];
  std::string head = "variant", units;
  // The name column: 30 wide, or wider for longer names (" *" marks the baseline).
  int name_width = 30;
  for (const auto& r : results) name_width = std::max(name_width, static_cast<int>(r.name.size()) + 3);
  name_width = std::min(name_width, 100);
  std::snprintf(cell, sizeof cell, "%-*s", name_width, "variant");
  head = cell;
  std::snprintf(cell, sizeof cell, "%-*s", name_width, "");
  units = cell;
  for (const MetricColumn* c : columns) {
    std::snprintf(cell, sizeof cell, " %*s", c->width, std::string(c->label).c_str());
    head += cell;
    std::snprintf(cell, sizeof cell, " %*s", c->width, std::string(c->unit).c_str());
    units += cell;
  }
  // Online rebalancing's columns, when some variant rebalances.
  const bool moves = std::any_of(results.begin(), results.end(), [](const VariantResult& r) {
    return r.scenario.placement.rebalance.every_steps > 0;
  });
  if (moves) {
    std::snprintf(cell, sizeof cell, " %9s %9s", "migr ms", "moved");
    head += cell;
    std::snprintf(cell, sizeof cell, " %9s %9s", "total", "GB");
    units += cell;
  }
  out << head << " " << std::setw(8) << "vs base" << "\n" << units << " " << std::setw(8) << "p99" << "\n";
  for (const auto& r : results) {
    std::snprintf(cell, sizeof cell, "%-*s", name_width, (r.name + (r.name == baseline ? " *" : "")).c_str());
    std::string line = cell;
    for (const MetricColumn* c : columns) {
      std::snprintf(cell, sizeof cell, " %*s", c->width, format_metric(*c, r.summary.*c->field).c_str());
      line += cell;
    }
    if (moves) {
      auto shown = [](double v, double scale, int decimals) {
        char text[32];
        if (std::isnan(v)) return std::string("-");
        std::snprintf(text, sizeof text, "%.*f", decimals, v * scale);
        return std::string(text);
      };
      std::snprintf(cell, sizeof cell, " %9s %9s", shown(r.summary.migration_seconds, 1e3, 1).c_str(),
                    shown(r.summary.moved_bytes, 1e-9, 2).c_str());
      line += cell;
    }
    const std::string delta =
        r.name == baseline ? "base" : base ? format_change(r.summary.p99 / base->summary.p99 - 1.0) : "";
    std::snprintf(cell, sizeof cell, " %8s", delta.c_str());
    out << line << cell << "\n";
  }
  out << "(* baseline; a2a and token tails: mean over MoE layers of the slowest GPU per layer)\n";
  // Phased workloads: each phase's step latencies apart (results.json: "phases").
  const bool phased = std::any_of(results.begin(), results.end(), [](const VariantResult& r) { return !r.phases.empty(); });
  if (phased) {
    out << "Per phase, p50 / p99 ms of the measured steps in it:\n";
    for (const auto& r : results) {
      if (r.phases.empty()) continue;
      std::snprintf(cell, sizeof cell, "%-*s", name_width, r.name.c_str());
      std::string line = cell;
      for (const auto& p : r.phases) {
        auto ms = [](const nlohmann::json& x) {
          char text[32];
          if (!x.is_number()) return std::string("n/a");
          std::snprintf(text, sizeof text, "%.3f", x.get<double>() * 1e3);
          return std::string(text);
        };
        std::snprintf(cell, sizeof cell, "  %d %s: %s / %s", p.value("phase", 0), p.value("trace", std::string()).c_str(),
                      ms(p.value("p50_s", nlohmann::json())).c_str(), ms(p.value("p99_s", nlohmann::json())).c_str());
        line += cell;
      }
      out << line << "\n";
    }
  }
  return out.str();
}

void write_variant_files(const std::string& vdir, const nlohmann::json& context, const VariantResult& r) {
  const fs::path dir(vdir);
  const SimResult& t = r.timelines.front();
  common::write_file_atomic(dir / "timeline.json", chrome_trace_json(t.timeline, t.gpus.size(), {r.name, t.label}),
                            true);
  common::write_file_atomic(dir / "scenario.yaml", scenario_to_yaml(r.scenario), true);
  const nlohmann::json v = {{"schema_version", kResultSchemaVersion}, {"context", context}, {"variant", variant_json(r, true)}};
  common::write_file_atomic(dir / "result.json", v.dump(2) + "\n", true);
}

}  // namespace moesim::sim
