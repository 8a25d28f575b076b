// Runs the variants of a study and writes the results (docs/study-format.md, "Output layout"):
// DIR/results.csv and DIR/results.json (a row per variant), DIR/variants/NAME/{result.json,
// timeline.json, scenario.yaml}. Each variant runs its requested overlap policy and, by default, the
// other timelines (sequential, overlapped, ideal, and ideal with one chunk for the cost of chunking),
// each simulation in its own process. Files are written atomically; results are byte-identical for
// the same inputs except for the `run_info` block.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/replay.hpp"
#include "sim/study.hpp"

namespace moesim::sim {

struct VariantSummary {
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;  // s, step latency of the requested timeline
  double throughput = 0;        // tokens/s
  double token_tail = 0;        // s, mean over MoE layers of the per-layer tail
  double a2a_tail = 0;          // s, likewise for the all-to-all
  double a2a_avg = 0;
  double energy_per_step = 0;   // J, all GPUs
  double energy_per_token = 0;  // J
  double avg_power = 0;         // W, mean over GPUs over the measured time
  double peak_power = 0;        // W, max over GPUs
  double utilisation = 0;       // mean over GPUs of compute-busy / measured time
  double compute_slowdown = 0;  // (compute as simulated - alone) / alone, requested timeline
  double chunking_cost = 0;     // ideal with N chunks / ideal with one chunk - 1 (NaN when not run)
  double sequential_p50 = 0, overlapped_p50 = 0, ideal_p50 = 0;  // NaN when not run
};

struct VariantResult {
  std::string name;
  Scenario scenario;
  std::vector<std::pair<std::string, std::string>> assignments;
  std::string profile_name;
  std::vector<std::string> profile_sources;  // kinds of values the profile holds
  std::string placement_policy;
  nlohmann::json placement_report;
  // With RunOptions::placement_cache: the cached placement file the variant ran with (its SHA-256 is
  // inputs["placement_sha256"]), and whether this run solved it (false: an earlier variant had).
  std::string placement_file;
  bool placement_solved = false;
  std::vector<int> layer_chunks;
  nlohmann::json auto_decisions = nlohmann::json::array();
  std::vector<SimResult> timelines;  // the requested one first
  VariantSummary summary;
  nlohmann::json inputs;  // input hashes
};

struct RunOptions {
  std::string dump_activities;  // the requested timeline's activities go to this file ("" = none)
  // A folder of solved placements: a policy placement is solved once per distinct input (policy,
  // replicas, groups, seed, architecture, cluster, ep, tp, trace SHA-256) into
  // FOLDER/<policy>-<short hash>.yaml and read back from there by every variant with that input.
  // "" = solve in memory for each variant.
  std::string placement_cache;
};

// Runs one variant (every simulation in a child process). `progress` is told each finished timeline.
VariantResult run_variant(const Variant& variant, const std::function<void(const std::string&)>& progress = {},
                          const RunOptions& options = {});

nlohmann::json context_block(const Study& study);
nlohmann::json variant_json(const VariantResult& v, bool with_details);
// The inverse of variant_json for what results_csv, results_table and variant_json(v, false) read:
// builds a VariantResult from a result.json "variant" object, so tables can be made from the files on
// disk. Throws InputError naming `where` for a missing or mistyped field.
VariantResult variant_result_from_json(const nlohmann::json& variant, const std::string& where);
std::string results_csv(const std::vector<VariantResult>& results, const std::string& baseline);
std::string scenario_yaml(const Scenario& s);
// The console table.
std::string results_table(const std::vector<VariantResult>& results, const std::string& baseline);
// Writes DIR's files (DIR must exist). run_info holds what changes between identical runs.
void write_results(const std::string& dir, const Study& study, const std::vector<VariantResult>& results,
                   const nlohmann::json& run_info);
// Writes one variant's files into `vdir` (which must exist): timeline.json, scenario.yaml, then
// result.json ({schema_version, context, variant}) last, so a result.json means a complete folder.
void write_variant_files(const std::string& vdir, const nlohmann::json& context, const VariantResult& result);

double percentile(std::vector<double> values, double q);  // linear interpolation, q in [0, 1]
// CPUs this process may run on (its affinity mask: taskset, cpusets), else the hardware threads.
int usable_cpus();
// Simulations run at once: $MOESIM_JOBS, else usable_cpus().
int parallel_jobs();
// Build step graphs on a worker thread while the engine runs (SimOptions::build_ahead), with
// `processes` simulations at once: $MOESIM_BUILD_AHEAD (0 = off, else on), else on where there is
// a spare CPU for each simulation's builder (2 x processes <= usable_cpus()).
bool build_ahead(int processes);

}  // namespace moesim::sim
