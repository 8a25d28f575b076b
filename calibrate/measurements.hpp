// Everything one calibration run measured, as plain records filled by the runner and read by the
// fitting, the console tables and the raw JSON writer. Times in seconds, bytes, watts, hertz.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/device.hpp"
#include "calibrate/stats.hpp"

namespace moesim::calibrate {

struct GemmRecord {
  GemmOp op;
  std::vector<double> samples;
  Summary time;
  double tflops() const;  // at the median
};
struct GroupedRecord {
  std::string label;
  GemmWork work;
  std::vector<double> samples;
  Summary time;
  double singles_sum = 0.0;  // s: the same GEMMs measured one by one, summed (medians)
};
struct CollectiveRecord {
  Traffic traffic;
  std::string label;
  std::vector<double> samples;
  Summary time;
  long wrong = 0;
  bool inter_node = false;  // its ranks span several nodes
  double algbw() const;
  double busbw() const;
};
struct TrafficRecord {
  Traffic traffic;
  std::vector<double> samples;
  Summary time;
  double rate() const;  // bytes / s at the median
};
struct ContentionRecord {
  GemmWork gemm;
  models::Dtype dtype = models::Dtype::kBf16;
  Traffic traffic;
  bool in_grid = false;  // a point of a profile grid; false: a sweep point kept only in the raw JSON
  std::optional<models::CollectiveOp> comm_op;  // its grid: the op, or nullopt for "any"
  OverlapRun run;
  Summary gemm_alone, comm_alone, gemm_overlapped, comm_overlapped;
  double compute_slowdown() const;  // median overlapped / median alone
  double comm_slowdown() const;
  bool overlapped(double threshold = 0.9) const;
};
struct PowerRecord {
  PowerState state;
  PowerRun run;
  double power_limit = 0.0;  // W in force (0: as found)
  double clock_limit = 0.0;  // Hz in force (0: none)
};

struct Measurements {
  DeviceInfo device;
  std::string plan;  // "quick", "full"
  std::string started, finished;  // ISO 8601 UTC
  std::vector<GemmRecord> gemms;
  std::vector<GroupedRecord> grouped;
  std::vector<CollectiveRecord> collectives;
  std::vector<TrafficRecord> traffic;
  std::vector<ContentionRecord> contention;
  std::vector<PowerRecord> power;        // the states, as found
  std::vector<PowerRecord> power_sweep;  // under power or clock limits (when allowed)
  int ranks = 1;  // processes whose measurements were merged (calibrate/merge.hpp); 1: one process
  int nodes = 1;
};

// The raw JSON: a context block (tool, build, device, libraries), schema_version and every sample.
nlohmann::json measurements_to_json(const Measurements& m);
// The inverse (the ranks of a cluster run send their records to rank 0 this way); RunError naming the
// field on a document it cannot read.
Measurements measurements_from_json(const nlohmann::json& j);
std::string utc_now();

}  // namespace moesim::calibrate
