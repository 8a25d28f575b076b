// Writers for TraceStats, kept apart from the computation: a console table (rounded for reading) and
// a JSON document (full precision, schema_version, a context block, the trace's metadata and hash).
// Every number in both is computed from the trace; the table's header line and the JSON's
// "provenance" field say so.
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "traces/stats.hpp"

namespace moesim::traces {

inline constexpr int kStatsSchemaVersion = 1;

struct StatsReportInput {
  std::string trace_path;
  std::string trace_sha256;  // "" when not computed
};

nlohmann::json stats_to_json(const TraceStats& stats, const StatsReportInput& input);
void print_stats_table(std::ostream& out, const TraceStats& stats, const StatsReportInput& input);

}  // namespace moesim::traces
