#include "sim/study/runner.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>
#include <thread>

#include "common/error.hpp"
#include "common/hash.hpp"
#include "common/stats.hpp"
#include "common/strings.hpp"
#include "traces/cached_reader.hpp"
#include "sim/engine/engine.hpp"
#include "sim/placement/policy.hpp"
#include "sim/study/inputs.hpp"
#include "sim/study/overlap.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kTimelineSteps = 3;  // steps each timeline records for timeline.json

// The engine's input for one timeline of a scenario.
EngineOptions engine_options(const Scenario& s, const TimelinePlan& plan) {
  EngineOptions o;
  o.layer_chunks = plan.chunks;
  o.micro_batches = plan.micro_batches;
  o.contention = plan.contention;
  o.dispatch = s.dispatch;
  o.dispatch_sms = s.dispatch_sms;
  o.forward_pieces = s.dispatch_pieces;
  o.power_cap = s.power_cap;
  o.clock_limit = s.clock_limit;
  o.steps = s.workload.steps;
  o.warmup_steps = s.workload.warmup_steps;
  o.timeline_steps = kTimelineSteps;
  o.simgrid_cfg = s.simgrid_cfg;
  o.fidelity = s.fidelity;
  o.network_tolerance = s.network_tolerance;
  o.label = plan.label;
  return o;
}

// The simulation of one timeline (or one step range of it), to run in a child process: it opens
// its own trace reader there. `ahead` is read when the job runs (set once every job is known).
std::function<SimResult()> timeline_job(const Scenario& s, const VariantInputs& in, EngineOptions options,
                                        const bool& ahead) {
  return [&s, &in, options = std::move(options), &ahead]() mutable {
    SourceReaders readers;
    std::unique_ptr<StepSource> source = make_scenario_source(s, in, readers);
    EngineInput ei;
    ei.arch = &in.arch;
    ei.cluster = &in.cluster;
    ei.profile = &in.profile;
    ei.placement = in.has_placement ? &in.placement : nullptr;
    ei.tp = in.tp;
    ei.ep = in.ep;
    ei.workload = &s.workload;
    ei.steps = source.get();
    options.build_ahead = ahead;
    options.rebalance = s.placement.rebalance;
    if (options.rebalance.every_steps > 0) {
      ei.resolve = [&s, &in](const RoutingCounts& window) { return solve_on_routing(s, in, window); };
      ei.resolve_pairs = default_placement_registry().create(s.placement.policy)->needs_pairs();
    }
    ei.options = std::move(options);
    return simulate(ei);
  };
}

// Runs plans in parallel child processes, each split into step ranges (docs/simulator.md, "Steps
// in parallel"), and merges each plan's ranges. `dump`: the first plan's activities go to this
// file, in one engine. `meanwhile` runs in this process while the children simulate.
std::vector<SimResult> run_plans(const Scenario& s, const VariantInputs& in, const std::vector<TimelinePlan>& plans,
                                 int steps, const std::string& dump, const std::function<void()>& meanwhile) {
  std::vector<std::function<SimResult()>> jobs;
  std::vector<std::size_t> first_job;  // per plan: its first job; its ranges follow
  bool ahead = false;
  const std::vector<StepRange> ranges = step_ranges(s.workload.warmup_steps, steps);
  for (const auto& plan : plans) {
    first_job.push_back(jobs.size());
    EngineOptions o = engine_options(s, plan);
    o.steps = steps;
    if (jobs.empty() && !dump.empty()) {
      o.dump_activities = dump;
      jobs.push_back(timeline_job(s, in, o, ahead));
      continue;
    }
    for (const auto& r : ranges) {
      EngineOptions part = o;
      part.first_step = r.first;
      part.end_step = r.end;
      jobs.push_back(timeline_job(s, in, part, ahead));
    }
  }
  first_job.push_back(jobs.size());
  const int processes = std::min(parallel_jobs(), static_cast<int>(jobs.size()));
  ahead = build_ahead(processes);
  const std::vector<SimResult> parts = run_isolated_all(jobs, processes, meanwhile);
  std::vector<SimResult> out;
  for (std::size_t t = 0; t + 1 < first_job.size(); ++t)
    out.push_back(merge_step_ranges(std::vector<SimResult>(parts.begin() + static_cast<std::ptrdiff_t>(first_job[t]),
                                                           parts.begin() + static_cast<std::ptrdiff_t>(first_job[t + 1]))));
  return out;
}

double mean_over_moe(const SimResult& r, double LayerResult::*field) {
  double sum = 0;
  int n = 0;
  for (const auto& l : r.layers)
    if (l.moe) {
      sum += l.*field;
      ++n;
    }
  return n ? sum / n : 0.0;
}

nlohmann::json input_hashes(const Scenario& s, const VariantInputs& in) {
  // Content hashes, not paths: results do not depend on where the inputs sit.
  nlohmann::json h = {{"architecture_sha256", common::sha256_file(in.arch.source_file)},
                      {"cluster_sha256", common::sha256_file(in.cluster.source_file)},
                      {"profile_sha256", common::sha256_file(in.profile.source_file)}};
  if (!s.placement.file.empty()) h["placement_sha256"] = common::sha256_file(s.placement.file);
  if (!in.placement_file.empty()) h["placement_sha256"] = common::sha256_file(in.placement_file);
  return h;
}

}  // namespace

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n >= 1) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int parallel_jobs() {
  const char* env = std::getenv("MOESIM_JOBS");
  if (!env || !*env) return usable_cpus();
  const std::string_view text(env);
  int n = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < 1 || n > kMaxJobs)
    throw common::UsageError("MOESIM_JOBS=" + common::quoted(text, 40) +
                             ": expected a whole number of simulation processes from 1 to " + std::to_string(kMaxJobs) +
                             "; unset it to use every usable CPU (" + std::to_string(usable_cpus()) + ")");
  return n;
}

bool build_ahead(int processes) {
  if (const char* env = std::getenv("MOESIM_BUILD_AHEAD"); env && *env) return std::string_view(env) != "0";
  return std::max(1, processes) * 2 <= usable_cpus();
}

VariantSummary summarise(const std::vector<SimResult>& timelines, WorkloadMode mode) {
  const SimResult& r = timelines.front();
  VariantSummary sum;
  sum.p50 = common::percentile(r.step_latency, 0.5);
  sum.p90 = common::percentile(r.step_latency, 0.9);
  sum.p99 = common::percentile(r.step_latency, 0.99);
  sum.max = r.step_latency.empty() ? kNaN : *std::max_element(r.step_latency.begin(), r.step_latency.end());
  sum.mean = r.step_latency.empty() ? kNaN : r.measured_time / static_cast<double>(r.step_latency.size());
  sum.throughput = r.measured_time > 0 ? static_cast<double>(r.tokens) / r.measured_time : 0.0;
  sum.token_tail = mean_over_moe(r, &LayerResult::token_tail);
  sum.a2a_tail = mean_over_moe(r, &LayerResult::a2a_tail);
  sum.a2a_avg = mean_over_moe(r, &LayerResult::a2a_avg);
  double energy = 0, peak = 0, busy = 0;
  for (const auto& g : r.gpus) {
    energy += g.energy;
    peak = std::max(peak, g.peak_power);
    busy += g.compute_busy;
  }
  const double G = std::max<double>(1.0, static_cast<double>(r.gpus.size()));
  sum.energy_per_step = r.step_latency.empty() ? 0.0 : energy / static_cast<double>(r.step_latency.size());
  sum.energy_per_token = r.tokens ? energy / static_cast<double>(r.tokens) : kNaN;
  sum.avg_power = r.measured_time > 0 ? energy / r.measured_time / G : 0.0;
  sum.peak_power = peak;
  sum.utilisation = r.measured_time > 0 ? busy / r.measured_time / G : 0.0;
  sum.compute_slowdown = r.compute_alone > 0 ? r.compute_actual / r.compute_alone - 1.0 : 0.0;
  auto of = [&](const std::string& label, bool p50) {
    for (const auto& t : timelines)
      if (t.label == label) return p50 ? common::percentile(t.step_latency, 0.5) : t.measured_time;
    return kNaN;
  };
  sum.sequential_p50 = of("sequential", true);
  sum.overlapped_p50 = of("overlapped", true);
  sum.ideal_p50 = of("ideal", true);
  // Chunks exist only in the MoE all-to-all of inference steps.
  const bool chunked = mode == WorkloadMode::kPrefill || mode == WorkloadMode::kDecode;
  sum.chunking_cost = chunked ? of("ideal", false) / of("ideal-1-chunk", false) - 1.0 : kNaN;
  return sum;
}

void summarise_rebalances(const SimResult& r, VariantSummary& sum) {
  sum.rebalances = static_cast<double>(r.rebalances.size());
  sum.experts_moved = sum.moved_bytes = sum.migration_seconds = 0.0;
  for (const auto& e : r.rebalances) {
    sum.experts_moved += e.experts_moved;
    sum.moved_bytes += e.bytes;
    sum.migration_seconds += e.seconds;
  }
}

void summarise_traffic(const SimResult& r, int gpus_per_node, VariantSummary& sum) {
  if (r.token_layers == 0) return;
  sum.sends_per_token_layer = static_cast<double>(r.token_sends) / static_cast<double>(r.token_layers);
  sum.intra_node_bytes = sum.inter_node_bytes = 0.0;
  const auto per_node = static_cast<std::size_t>(std::max(1, gpus_per_node));
  for (std::size_t a = 0; a < r.traffic.size(); ++a)
    for (std::size_t b = 0; b < r.traffic[a].size(); ++b)
      if (a != b) (a / per_node == b / per_node ? sum.intra_node_bytes : sum.inter_node_bytes) += r.traffic[a][b];
  if (r.context_bytes > 0.0) sum.context_bytes = r.context_bytes;
  sum.token_inter_node_bytes = r.token_inter_node_bytes;
  if (r.coherence_bytes > 0.0 && !r.step_latency.empty())
    sum.coherence_bytes_per_step = r.coherence_bytes / static_cast<double>(r.step_latency.size());
}

VariantResult run_variant(const Variant& variant, const std::function<void(const std::string&)>& progress,
                          const RunOptions& options) {
  const Scenario& s = variant.scenario;
  VariantResult out;
  out.name = variant.name;
  out.scenario = s;
  out.assignments = variant.assignments;
  VariantInputs in = load_inputs(s, options.placement_cache);
  out.profile_name = in.profile.name;
  out.profile_sources = in.profile.source_kinds();
  out.placement_file = in.placement_file;
  out.placement_solved = in.placement_solved;
  out.placement_policy = in.has_placement ? in.placement.policy : "";
  out.placement_report = in.has_placement ? in.placement.report : nlohmann::json::object();
  out.inputs = input_hashes(s, in);

  const int layers = s.workload.mode == WorkloadMode::kSynthetic ? s.workload.synthetic_layers : in.arch.num_layers;
  const OverlapPolicy req = s.overlap.policy;
  const bool one_chunk = req == OverlapPolicy::kSequential || req == OverlapPolicy::kTbo;
  std::vector<int> requested(static_cast<std::size_t>(layers), one_chunk ? 1 : std::max(1, s.overlap.chunks));
  if (req == OverlapPolicy::kAuto) {
    const SimulatePlans simulate = [&](const std::vector<TimelinePlan>& plans, int steps) {
      return run_plans(s, in, plans, steps, "", {});
    };
    requested = choose_auto_chunks(s, layers, in.arch.moe_layers, simulate, out.auto_decisions);
  }
  out.layer_chunks = requested;
  // The trace's hash goes into the results only: computed here while the children simulate.
  const bool hash_trace = needs_trace(s, in.arch) && !s.trace.empty();
  const std::vector<TimelinePlan> plans = plan_timelines(s, layers, requested);
  out.timelines = run_plans(s, in, plans, s.workload.steps, options.dump_activities, [&] {
    if (hash_trace && in.trace_sha256.empty()) in.trace_sha256 = cached_sha256(s.trace);
  });
  if (!s.trace.empty()) out.inputs["trace_sha256"] = in.trace_sha256;
  if (progress)
    for (const auto& p : plans) progress(variant.name + ": " + p.label);
  out.summary = summarise(out.timelines, s.workload.mode);
  if (s.placement.rebalance.every_steps > 0) summarise_rebalances(out.timelines.front(), out.summary);
  summarise_traffic(out.timelines.front(), in.cluster.gpus_per_node, out.summary);
  out.phases = phase_summary(s, out.timelines.front());
  return out;
}

}  // namespace moesim::sim
