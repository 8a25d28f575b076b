// The study file (docs/study-format.md): a base scenario, an optional sweep (cartesian product of
// values per key path) with exclude filters, or an explicit variants list, and a baseline variant.
// Every variant is the base with `key.path=value` assignments applied, then validated as a scenario,
// so a variant can change anything a scenario holds. Paths inside a study are relative to its file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/yaml.hpp"

namespace moesim::sim {

inline constexpr int kStudySchemaVersion = 1;

enum class WorkloadMode { kPrefill, kDecode, kTraining, kSynthetic };
enum class OverlapPolicy { kSequential, kOverlapped, kIdeal, kAuto };
enum class DispatchMode { kFlat, kHierarchical };
enum class Timelines { kAll, kRequested };
enum class GradientSync { kAllReduce, kFsdp };

std::string workload_mode_name(WorkloadMode m);
std::string overlap_policy_name(OverlapPolicy p);
std::string dispatch_mode_name(DispatchMode m);
std::string timelines_name(Timelines t);
std::string gradient_sync_name(GradientSync g);

struct Workload {
  WorkloadMode mode = WorkloadMode::kDecode;
  long tokens_per_step = 4096;  // prefill, training: tokens per step (micro-batch)
  int batch_sequences = 64;     // decode: sequences active at once
  int steps = 100;              // measured steps
  int warmup_steps = 0;         // simulated but not counted
  // training
  int micro_batches = 1;
  GradientSync gradient = GradientSync::kAllReduce;
  // dense training (no trace): sequences of `sequence_length` tokens, `batch` sequences per GPU
  int batch = 8;
  long sequence_length = 2048;
  // synthetic: per layer compute, all-to-all, compute, all-to-all, strictly in sequence
  double synthetic_compute = 300e-6;       // s per compute phase
  double synthetic_a2a_bytes = 8388608.0;  // bytes per GPU per all-to-all, split evenly over GPUs
  int synthetic_layers = 58;
  // false: compute, all-to-all, compute, all-to-all strictly in sequence; true: each all-to-all runs
  // concurrently with the compute phase before it (a fully overlapped pattern).
  bool synthetic_overlap = false;
};

struct PlacementChoice {
  std::string policy = "contiguous";  // a registered policy name
  std::string file;                   // a placement file (absolute after loading); wins over policy
  int replicas = 0;
  int groups = 0;
};

struct OverlapChoice {
  OverlapPolicy policy = OverlapPolicy::kSequential;
  int chunks = 2;  // overlapped / ideal
  Timelines timelines = Timelines::kAll;
};

struct Scenario {
  std::string architecture;  // name or absolute path
  std::string cluster;
  std::string profile;       // "" = the cluster's GPU kind
  std::string trace;         // absolute path; "" for dense or synthetic workloads
  int tp = 1;
  int ep = 0;                // 0 = GPUs / TP (parse_scenario fills it in)
  Workload workload;
  PlacementChoice placement;
  OverlapChoice overlap;
  DispatchMode dispatch = DispatchMode::kFlat;
  double power_cap = 0.0;    // W, 0 = none
  double clock_limit = 0.0;  // Hz, SM clock limit, 0 = none
  std::uint64_t seed = 1;
  std::vector<std::string> simgrid_cfg;  // passed to SimGrid as --cfg=...
};

struct Variant {
  std::string name;
  std::vector<std::pair<std::string, std::string>> assignments;  // key path -> value, applied to base
  Scenario scenario;
};

struct Study {
  std::string name;
  std::string description;  // free text, "" when none
  std::string source_file;
  std::string sha256;
  std::vector<Variant> variants;  // in run order
  std::string baseline;           // a variant name
};

// Parses and validates one scenario (the `base` map, or a variant's resolved map). `dir` resolves
// relative paths.
Scenario parse_scenario(const common::YamlNode& node, const std::string& dir);
// Loads a study: `overrides` (--set) apply to the study file itself before the variants are built.
// Every variant is validated here, so a bad sweep value is reported before anything runs.
Study load_study(const std::string& path, const std::vector<std::string>& overrides = {});
// Appends SimGrid settings given on the command line (`--cfg name:value`) to every variant, after
// the study's own `simgrid` list. A malformed setting is a UsageError.
void add_simgrid_settings(Study& study, const std::vector<std::string>& settings);

}  // namespace moesim::sim
