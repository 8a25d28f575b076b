#include "sim/study/placement_sim.hpp"

#include <filesystem>

#include "common/files.hpp"
#include "models/cluster.hpp"
#include "sim/study/runner.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;

void simulate_placement(const CheckedPlacement& c, const std::string& trace, const PlacementSimOptions& options,
                        PlacementEvaluation& e) {
  const std::string study_path =
      options.study.empty() ? (common::config_root() / "studies" / "default.yaml").string() : options.study;
  const Study study = load_study(study_path);
  const Variant* base = nullptr;
  for (const auto& v : study.variants)
    if (v.name == study.baseline) base = &v;
  if (!base) base = &study.variants.front();
  Variant v;
  v.name = e.label;
  v.scenario = base->scenario;
  Scenario& s = v.scenario;
  const bool same_cluster = models::load_cluster(s.cluster).name == c.cluster.name;
  s.architecture = c.arch.source_file.empty() ? c.arch.name : c.arch.source_file;
  s.cluster = c.cluster.source_file.empty() ? c.cluster.name : c.cluster.source_file;
  if (!same_cluster) s.profile = "";  // the study's GPU profile belongs to its cluster
  s.tp = c.placement.tp;
  s.ep = c.placement.ep;
  s.trace = fs::absolute(trace).lexically_normal().string();
  s.trace_mix = TraceMix::kOne;  // the held-out trace alone
  s.trace_parts.clear();
  s.placement.file = c.path;
  s.placement.rebalance = RebalanceOptions{};  // the placement as the file holds it
  s.overlap.timelines = Timelines::kRequested;
  if (s.workload.mode != WorkloadMode::kPrefill && s.workload.mode != WorkloadMode::kDecode)
    s.workload.mode = WorkloadMode::kDecode;
  if (options.steps > 0) s.workload.steps = options.steps;
  if (options.residence) {
    s.dispatch = DispatchMode::kResidence;
    if (s.overlap.policy == OverlapPolicy::kTbo) s.overlap.policy = OverlapPolicy::kSequential;
  }
  s = revalidate_scenario(s, "the scenario of study " + study.name + " with placement " + c.path);
  const VariantResult r = run_variant(v);
  e.simulated = true;
  e.study = study.name;
  e.step_p50 = r.summary.p50;
  e.step_p99 = r.summary.p99;
  e.energy_per_step = r.summary.energy_per_step;
  e.energy_per_token = r.summary.energy_per_token;
  for (const auto& layer : r.timelines.front().layers)
    if (layer.moe) {
      e.layer_token_tail.push_back(layer.token_tail);
      e.layer_a2a_tail.push_back(layer.a2a_tail);
    }
}

}  // namespace moesim::sim
