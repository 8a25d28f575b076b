// One profile from a cluster run: every rank measured its own GPU and its share of the collectives;
// rank 0 merges the ranks' records into one Measurements and reports how far each GPU is from it.
// Rule: a merged record's samples are the ranks' medians, so its median is the median over the ranks
// of each rank's median (robust to one odd GPU, which the spread then names). A send/recv is merged
// over the two ranks that took part. Deviations are rank value / merged value - 1.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/measurements.hpp"

namespace moesim::calibrate {

struct RankMeasurements {
  int rank = 0;
  std::string host;
  std::string node;
  Measurements m;
};

// `ranks` by rank (rank 0 first). The merged device is rank 0's, with gpu_count = the number of ranks.
Measurements merge_measurements(const std::vector<RankMeasurements>& ranks, int nodes);

// One measured quantity across the ranks.
struct SpreadItem {
  std::string part;      // gemm, grouped_gemm, collectives, copy_traffic, contention, power
  std::string quantity;  // "bf16 m=1 n=4096 k=4096 time", ...
  double merged = 0.0;
  std::vector<double> by_rank;  // NaN where the rank has no value (a send/recv it took no part in)
  int worst_rank = 0;
  double worst_deviation = 0.0;  // signed, largest in magnitude
};
struct Spread {
  std::vector<SpreadItem> items;
  std::vector<std::string> parts;  // in the order measured
};
Spread gpu_spread(const std::vector<RankMeasurements>& ranks, const Measurements& merged);
// The console table: per part, the worst GPU's deviation and where; per rank, its median deviation per part.
void print_spread(std::ostream& out, const Spread& spread, const std::vector<RankMeasurements>& ranks);
nlohmann::json spread_to_json(const Spread& spread);

}  // namespace moesim::calibrate
