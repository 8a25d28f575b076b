// The study file (docs/study-format.md): a base scenario, an optional sweep (cartesian product of
// values per key path) with exclude filters, or an explicit variants list, and a baseline variant.
// Every variant is the base with `key.path=value` assignments applied, then validated as a scenario,
// so a variant can change anything a scenario holds. Paths inside a study are relative to its file.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/enum_table.hpp"
#include "common/yaml.hpp"
#include "sim/engine/engine_input.hpp"

namespace moesim::sim {

inline constexpr int kStudySchemaVersion = 1;

enum class OverlapPolicy { kSequential, kOverlapped, kIdeal, kAuto, kTbo };
enum class Timelines { kAll, kRequested };

inline constexpr std::array<common::EnumName<OverlapPolicy>, 5> kOverlapPolicies{
    {{OverlapPolicy::kSequential, "sequential"},
     {OverlapPolicy::kOverlapped, "overlapped"},
     {OverlapPolicy::kIdeal, "ideal"},
     {OverlapPolicy::kAuto, "auto"},
     {OverlapPolicy::kTbo, "tbo"}}};
inline constexpr std::array<common::EnumName<Timelines>, 2> kTimelines{
    {{Timelines::kAll, "all"}, {Timelines::kRequested, "requested"}}};

inline std::string overlap_policy_name(OverlapPolicy p) { return common::enum_name<OverlapPolicy>(kOverlapPolicies, p); }
inline std::string timelines_name(Timelines t) { return common::enum_name<Timelines>(kTimelines, t); }

struct PlacementChoice {
  std::string policy = "contiguous";  // a registered policy name
  std::string file;                   // a placement file (absolute after loading); wins over policy
  int replicas = 0;
  int groups = 0;
  RebalanceOptions rebalance;         // placement.rebalance (every_steps 0: static)
  bool operator==(const PlacementChoice&) const = default;
};

// A workload of several traces (docs/study-format.md, "trace"): phases one after the other, or a mix
// every sequence is drawn from by weight.
enum class TraceMix { kOne, kPhases, kMix };
struct TracePart {
  std::string path;     // absolute
  int steps = 0;        // phases: the steps the phase lasts
  double weight = 0.0;  // mix: its weight (> 0)
  bool operator==(const TracePart&) const = default;
};

struct OverlapChoice {
  OverlapPolicy policy = OverlapPolicy::kSequential;
  int chunks = 2;  // overlapped / ideal
  Timelines timelines = Timelines::kAll;
  bool operator==(const OverlapChoice&) const = default;
};

struct Scenario {
  std::string architecture;  // name or absolute path
  std::string cluster;
  std::string profile;       // "" = the cluster's GPU kind
  std::string trace;         // absolute path; "" for dense or synthetic workloads
  bool balanced_routing = false;  // trace: balanced (no recorded routing; docs/simulator.md)
  // trace: {phases: [...]} or {mix: [...]}: the parts (trace is the first part's path).
  TraceMix trace_mix = TraceMix::kOne;
  std::vector<TracePart> trace_parts;
  int tp = 1;
  int ep = 0;                // 0 = GPUs / TP (parse_scenario fills it in)
  Workload workload;
  PlacementChoice placement;
  OverlapChoice overlap;
  DispatchMode dispatch = DispatchMode::kFlat;
  int dispatch_sms = -1;
  int dispatch_pieces = 4;   // hierarchical: pieces of each inter-node batch, forwarded as they arrive     // SMs the dispatch/combine kernels hold; -1 = the profile's, 0 = none (RDMA, copy engine)
  double power_cap = 0.0;    // W, 0 = none
  double clock_limit = 0.0;  // Hz, SM clock limit, 0 = none
  std::uint64_t seed = 1;
  std::vector<std::string> simgrid_cfg;  // passed to SimGrid as --cfg=...
  NetworkFidelity fidelity = NetworkFidelity::kAuto;  // network.fidelity (docs/simulator.md)
  // network.tolerance: the fluid network's epochs (0: exact; kAutoTolerance: the engine's choice)
  double network_tolerance = kAutoTolerance;
  bool operator==(const Scenario&) const = default;
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
// A scenario as a YAML map that parse_scenario reads back to an equal Scenario (every default
// written out, numbers at full precision): a variant's scenario.yaml.
std::string scenario_to_yaml(const Scenario& s);
// A scenario changed in code (placement evaluation substitutes its inputs), validated again the one
// way every scenario is: written as YAML and parsed. `what` names it in error messages.
Scenario revalidate_scenario(const Scenario& s, const std::string& what);
// Loads a study: `overrides` (--set) apply to the study file itself before the variants are built.
// Every variant is validated here, so a bad sweep value is reported before anything runs.
Study load_study(const std::string& path, const std::vector<std::string>& overrides = {});
// Appends SimGrid settings given on the command line (`--cfg name:value`) to every variant, after
// the study's own `simgrid` list. A malformed setting is a UsageError.
void add_simgrid_settings(Study& study, const std::vector<std::string>& settings);

}  // namespace moesim::sim
