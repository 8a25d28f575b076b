// What one calibration run measures (plans quick and full), message sizes given as nccl-tests'
// -b/-e/-f, and how long the plan should take (the --dry-run estimate, from a reference profile's
// cost models). Sizes are bytes ("1K" = 1024 as in nccl-tests); durations seconds.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "calibrate/device.hpp"
#include "models/profile.hpp"

namespace moesim::calibrate {

enum class PlanKind { kQuick, kFull };
PlanKind parse_plan_kind(std::string_view text);  // UsageError naming the valid plans
std::string plan_kind_name(PlanKind kind);

// "1024", "1K", "64M", "1G" (binary multiples, as nccl-tests' -b/-e); UsageError naming `option`.
double parse_size(std::string_view text, std::string_view option);
struct SizeRange {
  double begin = 1024.0;
  double end = 1073741824.0;
  double factor = 2.0;
};
// begin, begin*f, ... up to end inclusive (nccl-tests' -f); UsageError when begin > end or f <= 1.
std::vector<double> expand_sizes(const SizeRange& range);

// In the order the full plan measures them and fitted profiles list their tables.
inline const std::vector<models::Dtype> kAllDtypes = {models::Dtype::kFp32, models::Dtype::kTf32, models::Dtype::kBf16,
                                                      models::Dtype::kFp16, models::Dtype::kFp8};
// "bf16,fp8" -> {kBf16, kFp8}; UsageError for an unknown or repeated dtype (closest suggested).
std::vector<models::Dtype> parse_dtypes(std::string_view text);

struct GemmCurveCase {
  models::Dtype dtype = models::Dtype::kBf16;
  long n = 0;
  long k = 0;
  std::vector<long> m;  // increasing
};
// A grouped expert GEMM: one projection of `experts` experts with different token counts.
struct GroupedCase {
  models::Dtype dtype = models::Dtype::kBf16;
  std::string label;
  GemmWork work;
};
struct CollectiveCase {
  Traffic traffic;  // bytes: the first size; the case runs every size in `sizes`
  std::vector<double> sizes;
  std::string label;  // "uniform", "matrix"
  bool inter_node = false;  // its ranks span several nodes (the profile's scope inter_node)
};
struct ContentionCase {
  GemmWork gemm;
  models::Dtype dtype = models::Dtype::kBf16;
  Traffic traffic;
  bool in_grid = false;  // a point of a profile grid; false: a sweep point kept only in the raw JSON
  std::optional<models::CollectiveOp> comm_op;  // its grid: the op, or nullopt for "any" (single-GPU traffic)
};

struct PlanOptions {
  PlanKind kind = PlanKind::kQuick;
  int gpus = 1;
  std::vector<models::Dtype> dtypes;  // empty: the plan's default
  std::optional<SizeRange> sizes;   // empty: the plan's default
  std::vector<std::string> architectures;  // shapes to cover; empty: every shipped architecture
  std::vector<double> traffic_matrix;      // all_to_all matrix (gpus x gpus), empty: a skewed default
  bool fp8_supported = true;
  bool allow_set_power_limit = false;
  bool allow_set_clocks = false;
  // One process per GPU (calibrate/cluster.hpp): the node of each rank, `gpus` entries; empty: one
  // process drives `gpus` GPUs of one node. Send/recv then pairs rank 0 with the next rank of its
  // node (NVLink) and with the first rank of another node (the NIC).
  std::vector<int> node_of_rank;
};

struct Plan {
  PlanKind kind = PlanKind::kQuick;
  int gpus = 1;
  std::vector<models::Dtype> dtypes;
  Timing gemm_timing;
  Timing comm_timing;
  std::vector<GemmCurveCase> gemms;
  std::vector<GroupedCase> grouped;
  std::vector<CollectiveCase> collectives;     // empty on one GPU
  std::vector<Traffic> single_gpu_traffic;     // copy kernel and copy engine alone (HBM and PCIe rates)
  std::vector<ContentionCase> contention;
  std::vector<PowerState> power;
  std::vector<double> power_limit_fractions;  // of the default limit; empty unless allowed
  std::vector<double> clock_fractions;        // of the max SM clock; empty unless allowed
  double power_state_seconds = 1.0;
  std::size_t gemm_count() const;  // single GEMM measurements
};

// The GEMM shapes (n, k) the plan covers: models::gemm_shapes of the architectures at TP 1 (quick)
// or 1, 2 and 4 (full), plus square shapes for the device's peak.
Plan make_plan(const PlanOptions& options);

// Estimated wall time of each part and in all, on a device like `reference` (its GEMM tables and
// collective curves), with a fixed per-measurement overhead (setup, heuristics, synchronisation).
struct PlanEstimate {
  double gemm = 0.0, grouped = 0.0, collectives = 0.0, contention = 0.0, power = 0.0, setup = 0.0;
  double total() const { return gemm + grouped + collectives + contention + power + setup; }
};
PlanEstimate estimate_plan(const Plan& plan, const models::Profile& reference);
// The --dry-run text: every group of measurements, their counts and the estimate.
std::string describe_plan(const Plan& plan, const PlanEstimate& estimate);

}  // namespace moesim::calibrate
