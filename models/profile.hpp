// A GPU profile (configs/profiles/*.yaml, format in docs/profile-format.md): what one kind of GPU costs.
// GEMM time tables, collective tables (nccl-tests' algbw/busbw terms), link figures, the mutual
// slowdown of compute and communication when they overlap, and power by state with the effect of a
// power cap. Every table carries its provenance: measured, published (with the reference) or model
// (with the derivation). A profile may name a `base` profile that supplies the tables it lacks.
// Units are SI: seconds, bytes, bytes per second, watts, FLOP.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/yaml.hpp"
#include "models/collective_op.hpp"
#include "models/dtype.hpp"

namespace moesim::models {

enum class SourceKind { kMeasured, kPublished, kModel };
std::string source_kind_name(SourceKind kind);  // "measured", "published", "model"

struct Provenance {
  SourceKind kind = SourceKind::kModel;
  std::string detail;  // the reference (published), the derivation (model) or the tool and date (measured)
};

// GEMM times for one dtype and one (N, K) shape, over increasing M (tokens). C[M,N] = A[M,K] B[K,N].
struct GemmCurve {
  long n = 0;
  long k = 0;
  std::vector<double> m;     // strictly increasing, >= 1
  std::vector<double> time;  // s, same length, non-decreasing
};

// How a grouped GEMM (one per expert, same N and K, its own rows each) runs on the GPU:
// - kLaunches: every group's GEMM as the table times it, issued together (one CUDA graph, as
//   moesim-calibrate measures cuBLASLt): the sum of the groups' times, the launch floor paid once;
// - kPersistent: one persistent kernel over every group's rows (DeepGEMM's grouped kernels): the
//   table's GEMM of all rows at once, plus every further group's weights read from HBM.
enum class GroupedGemm { kLaunches, kPersistent };
inline constexpr std::array<common::EnumName<GroupedGemm>, 2> kGroupedGemms{
    {{GroupedGemm::kLaunches, "launches"}, {GroupedGemm::kPersistent, "persistent"}}};

struct GemmTable {
  Dtype dtype = Dtype::kBf16;
  Provenance provenance;
  double peak_flops = 0.0;  // FLOP/s the table's efficiencies are relative to (datasheet dense peak)
  // s: the fixed cost of one kernel launch, included once in every tabulated time; a grouped GEMM
  // pays it once for the whole group (either `grouped` rule). No longer than any time in the table.
  double launch_floor = 0.0;
  GroupedGemm grouped = GroupedGemm::kLaunches;
  std::vector<GemmCurve> curves;
};

// Collective time by message size for one operation and rank count (nccl-tests semantics: `bytes` is
// the per-rank buffer size; algbw = bytes / time; busbw = algbw * factor(op, ranks)).
struct CollectiveCurve {
  CollectiveOp op = CollectiveOp::kAllReduce;
  int ranks = 0;
  std::string scope;  // "intra_node" or "inter_node"
  Provenance provenance;
  std::vector<double> bytes;  // increasing
  std::vector<double> time;   // s
};

// Achievable point-to-point figures of a link class, as measured or published (the cluster file gives
// the nominal ones; the simulator uses efficiency * nominal bandwidth and the latency here).
struct LinkFigures {
  double bandwidth_efficiency = 1.0;  // achieved / nominal
  double latency = 0.0;               // s, per transfer, on top of the cluster's link latencies
  Provenance provenance;
};

// What limits a compute kernel (by the roofline: its FLOP per byte of HBM traffic against the GPU's
// peak FLOP/s per byte/s): the SMs, or memory bandwidth (decode GEMMs, decode attention).
enum class ComputeClass { kComputeBound, kMemoryBound };
inline constexpr std::array<common::EnumName<ComputeClass>, 2> kComputeClasses{
    {{ComputeClass::kComputeBound, "compute_bound"}, {ComputeClass::kMemoryBound, "memory_bound"}}};

// Slowdown factors (>= 1: time with overlap / time alone) at grid points; interpolated log-linearly
// in the communication bytes and the GEMM FLOP between grid points, clamped outside. A grid is for
// one communication op (or any), one compute class (or any) and the SMs the communication's kernels
// hold (or any; 0: a copy engine or RDMA, which takes no SM).
struct ContentionPoint {
  std::optional<CollectiveOp> comm_op;  // the communication that overlaps; nullopt: "any"
  std::optional<ComputeClass> compute;  // the kind of kernel slowed; nullopt: "any"
  int comm_sms = -1;                    // SMs the communication holds; -1: "any"
  double comm_bytes = 0.0;
  double gemm_flops = 0.0;
  double compute_slowdown = 1.0;  // GEMM time overlapped / alone
  double comm_slowdown = 1.0;     // communication time overlapped / alone
};

// Points come as full grids: for each (comm_op, compute, comm_sms), every (comm_bytes, gemm_flops)
// pair of its axes, in order (grid, then comm_bytes, then gemm_flops, each increasing). "any" applies
// where no grid is more specific (models::contention says how one is chosen).
struct ContentionTable {
  Provenance provenance;       // of compute_slowdown
  Provenance comm_provenance;  // of comm_slowdown
  std::vector<ContentionPoint> points;
  // SMs a collective's kernels hold when the scenario does not say (NCCL's channels), and its source.
  int comm_sms = -1;  // -1: not given (only grids without SMs apply)
  Provenance sms_provenance;
};
std::string contention_op_name(const std::optional<CollectiveOp>& comm_op);  // the op's name, or "any"

// Power by state, and what a power cap does.
struct PowerModel {
  Provenance provenance;
  double idle = 0.0;                         // W
  std::map<Dtype, double> compute;           // W while computing, by dtype
  double communication = 0.0;                // W while only communicating
  std::map<Dtype, double> overlapped;        // W while both, by dtype
  // Optional: W while running a memory-bound kernel (below the roofline ridge), by dtype; empty: the
  // compute figure applies to every kernel (models::kernel_power).
  std::map<Dtype, double> memory_bound;
  double max_power = 0.0;                    // W, the default power limit (TDP)
  double min_power_limit = 0.0;              // W, the lowest cap the GPU accepts
  // Compute speed under a power cap, as (cap / max_power, speed / uncapped speed) points, increasing.
  std::vector<double> cap_fraction;
  std::vector<double> speed_fraction;
  Provenance cap_provenance;
  // Optional: an SM clock limit, as (clock / device.sm_clock) -> (speed, power) relative to unlimited.
  std::vector<double> clock_fraction;        // increasing, empty when the profile has no clock curve
  std::vector<double> clock_speed_fraction;  // non-decreasing
  std::vector<double> clock_power_fraction;  // non-decreasing
  Provenance clock_provenance;
};

// The attention core (softmax(QK^T)V) runs at this fraction of the GEMM table's peak FLOP/s.
struct AttentionFigures {
  double flops_efficiency = 0.5;
  Provenance provenance;  // detail empty: the profile gives none and the default applies
};

// Low-latency expert-parallel kernels (DeepEP's low-latency dispatch and combine): every (token,
// expert) pair is its own copy, written straight into the destination GPU's buffer over NVLink
// inside a node and RDMA between nodes, with no SM held while the data moves. `dispatch_latency` and
// `combine_latency` are each kernel's fixed cost (launch, the per-expert count exchange and the
// receiver's wait), s; the bytes move at the links' achievable rates (docs/simulator.md).
struct LowLatencyKernels {
  double dispatch_latency = 0.0;
  double combine_latency = 0.0;
  Provenance provenance;  // detail empty: the profile has none
};

// Normal (high-throughput) expert-parallel kernels (DeepEP's normal dispatch and combine, the
// engine's hierarchical dispatch): the rate at which a GPU forwards tokens between the inter-node and
// the NVLink hop is bound by the kernel's SMs, not by NVLink. Dispatch forwards a token of b bytes
// in `dispatch_forward_per_token` + b / `dispatch_forward_bandwidth` s; combine's NVLink hop towards
// the gateway moves at most `combine_forward_bandwidth` B/s out of each GPU.
struct NormalKernels {
  double dispatch_forward_bandwidth = 0.0;  // B/s
  double dispatch_forward_per_token = 0.0;  // s
  double combine_forward_bandwidth = 0.0;   // B/s
  Provenance provenance;                    // detail empty: the profile has none
  double dispatch_forward_rate(double token_bytes) const {  // B/s for tokens of `token_bytes`
    return token_bytes / (dispatch_forward_per_token + token_bytes / dispatch_forward_bandwidth);
  }
};

// Memory-bound elementwise kernels between the GEMMs (norms, residual adds, activations, FP8
// quantisation, token permutation; docs/simulator.md, "Elementwise kernels"): each costs
// `launch_floor` s, then moves its bytes at the device's hbm_bandwidth. Absent (provenance detail
// empty): the simulator runs none.
struct ElementwiseFigures {
  double launch_floor = 0.0;  // s per kernel
  Provenance provenance;
};

struct DeviceContext {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int sm_count = 0;
  double memory = 0.0;         // bytes
  double hbm_bandwidth = 0.0;  // B/s achievable
  double sm_clock = 0.0;       // Hz under load
  std::map<std::string, std::string> extra;  // driver, CUDA, cuBLAS, NCCL versions, host (measured profiles)
  Provenance provenance;
};

struct Profile {
  std::string name;
  std::string source_file;
  std::string base;  // name of the base profile, "" for none (already merged in by load_profile)
  std::string description;
  DeviceContext device;
  std::vector<GemmTable> gemm;
  std::vector<CollectiveCurve> collectives;
  LinkFigures nvlink;
  LinkFigures pcie;
  LinkFigures nic;
  ContentionTable contention;
  PowerModel power;
  AttentionFigures attention;
  LowLatencyKernels low_latency;
  NormalKernels normal;
  ElementwiseFigures elementwise;
  // Which kinds of values this profile's tables are (for reports): e.g. {"published", "model"}.
  std::vector<std::string> source_kinds() const;
  const GemmTable* gemm_table(Dtype dtype) const;  // nullptr if absent
};

// Sections a profile may lack (then they are absent: provenance detail empty) are links, contention,
// attention, low_latency_kernels, normal_kernels, elementwise and collectives; device, gemm and power are required once any base is merged in.
bool has_source(const Provenance& provenance);  // the section was given (its detail is never empty)

Profile parse_profile(const common::YamlNode& root, const std::string& name);
// By name (configs/profiles/NAME.yaml) or path, `--set` overrides applied; a `base` is loaded and
// merged (tables the profile lacks come from the base; cycles are errors).
Profile load_profile(const std::string& name_or_path, const std::vector<std::string>& overrides = {});
// Writes a profile as YAML (used by moesim-calibrate and the reference-profile converter).
std::string profile_to_yaml(const Profile& profile);

}  // namespace moesim::models
