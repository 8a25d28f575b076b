// A variant's result and the files that hold it (docs/study-format.md, "Output layout"): one writer
// and one reader of result.json's "variant" object, results.json, results.csv and the console table,
// all driven by one column table (kMetricColumns): adding a metric is a field in VariantSummary, its
// computation in the runner and one row here. The report draws its table from the same columns.
#pragma once

#include <array>
#include <optional>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/result.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::sim {

inline constexpr int kResultSchemaVersion = 1;

inline constexpr double kNoValue = std::numeric_limits<double>::quiet_NaN();

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
  // Online rebalancing (requested timeline, measured steps): rebalances, expert copies moved, their
  // bytes and the seconds moving them took, summed; NaN without rebalancing. Not metric columns: the
  // variant's "rebalance" object holds them, and the console table shows them when a variant rebalances.
  double rebalances = kNoValue, experts_moved = kNoValue, moved_bytes = kNoValue, migration_seconds = kNoValue;
  // Where the tokens went (requested timeline, measured steps; NaN where no token was routed): token
  // sends per (token, MoE layer) (SimResult::token_sends), bytes between GPUs of one node and between
  // nodes (the traffic matrix), and, for residence dispatch, the replicated context per GPU. Not metric
  // columns: the variant's "traffic" object holds them.
  double sends_per_token_layer = kNoValue, intra_node_bytes = kNoValue, inter_node_bytes = kNoValue,
         context_bytes = kNoValue, coherence_bytes_per_step = kNoValue, token_inter_node_bytes = kNoValue;
};

struct VariantResult {
  std::string name;
  Scenario scenario;
  std::vector<std::pair<std::string, std::string>> assignments;
  std::string profile_name;
  std::vector<std::string> profile_sources;  // kinds of values the profile holds
  std::string placement_policy;
  nlohmann::json placement_report;
  // With a placement cache: the cached placement file the variant ran with (its SHA-256 is
  // inputs["placement_sha256"]), and whether this run solved it (false: an earlier variant had).
  std::string placement_file;
  bool placement_solved = false;
  std::vector<int> layer_chunks;
  nlohmann::json auto_decisions = nlohmann::json::array();
  std::vector<SimResult> timelines;  // the requested one first
  VariantSummary summary;
  nlohmann::json phases = nlohmann::json::array();  // phase_summary of the requested timeline (trace.phases)
  nlohmann::json inputs;  // input hashes
};

// One numeric result column: where it sits in a variant's JSON, its CSV name (with its unit), and
// how the console table and the report print it. Columns are listed in CSV order; `table` orders
// the printed ones (0 = not printed).
struct MetricColumn {
  double VariantSummary::*field;
  std::string_view json_path;  // dotted, in a result.json "variant" object / a results.json row
  std::string_view csv;        // "" = JSON only
  int table;                   // position in the console table and the report's table, 0 = not there
  std::string_view label;      // header ("p50 ms")
  std::string_view unit;       // second header line ("ms/layer", "per GPU")
  int width;                   // console width
  double scale;                // printed value = value x scale
  int decimals;
  bool percent;                // printed with a % sign
};
extern const std::array<MetricColumn, 19> kMetricColumns;
// The printed columns in table order.
std::vector<const MetricColumn*> table_columns();

// The label the tables print for a variant's placement (its policy, or its placement file's name).
std::string placement_label(const Scenario& s);
// Per phase of a phased workload (trace.phases), the step latencies of `r`'s measured steps that fall
// in it: {"phase", "trace", "steps", "p50_s", "p99_s", "mean_s"} per phase, phases that recur in
// the run counted together. Empty for other workloads.
nlohmann::json phase_summary(const Scenario& s, const SimResult& r);  // linear interpolation, q in [0, 1]; NaN when empty
// The printed text of column `c` for a value (NaN: "n/a"), and of a change against the baseline.
std::string format_metric(const MetricColumn& c, double value);
std::string format_change(double ratio_minus_one);  // "+3.1%"

// result.json's "variant" object. with_details adds what only the variant's own file holds (the
// placement report, chunks per layer, every timeline in full).
nlohmann::json variant_json(const VariantResult& v, bool with_details);
// The inverse for what the tables read: throws InputError naming `where` for a missing or
// mistyped field.
VariantResult variant_result_from_json(const nlohmann::json& variant, const std::string& where);
// A results.json row: the variant object without its details, plus its change against the baseline.
nlohmann::json results_row(const nlohmann::json& variant, const VariantResult& result, const VariantResult* baseline);
// The value of a column in a results.json row or variant object (NaN for null); nullopt when absent.
std::optional<double> column_value(const nlohmann::json& row, const MetricColumn& c);

std::string results_csv(const std::vector<VariantResult>& results, const std::string& baseline);
// The console table, headed by where its numbers come from.
std::string results_table(const std::vector<VariantResult>& results, const std::string& baseline);

// Writes one variant's files into `vdir` (which must exist): timeline.json, scenario.yaml, then
// result.json ({schema_version, context, variant}) last, so a result.json means a complete folder.
void write_variant_files(const std::string& vdir, const nlohmann::json& context, const VariantResult& result);

// The context block of every result file: tool, version, revision, SimGrid version, study and hash.
nlohmann::json context_block(const Study& study);

}  // namespace moesim::sim
