// Writers for TraceStats, kept apart from the computation: a console table (rounded for reading) and
// a JSON document (full precision, schema_version, a context block, the trace's metadata and hash).
// Every number in both is computed from the trace; the table's header line and the JSON's
// "provenance" field say so.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "traces/load_stats.hpp"
#include "traces/stats.hpp"

namespace moesim::traces {

inline constexpr int kStatsSchemaVersion = 1;

struct StatsReportInput {
  std::string trace_path;
  std::string trace_sha256;  // "" when not computed
};

nlohmann::json stats_to_json(const TraceStats& stats, const StatsReportInput& input);
void print_stats_table(std::ostream& out, const TraceStats& stats, const StatsReportInput& input);

// The same for a load-only trace: "load_only": true, per-layer loads and imbalance, per-step
// imbalance and tokens per iteration; no pair or lift figures (the trace has no per-token routes).
nlohmann::json load_stats_to_json(const LoadTraceStats& stats, const StatsReportInput& input);
void print_load_stats_table(std::ostream& out, const LoadTraceStats& stats, const StatsReportInput& input);

}  // namespace moesim::traces
