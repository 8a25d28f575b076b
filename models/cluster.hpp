// A GPU cluster as the simulator sees it (configs/clusters/*.yaml, documented in
// docs/config-reference.md): identical nodes of identical GPUs, one intra-node fabric, NICs shared by
// fixed groups of GPUs, and one inter-node topology. Units are SI: bytes, seconds, bytes per second.
// Every bandwidth is per direction (links are full duplex): NVLink4 is 450 GB/s each way per GPU.
#pragma once

#include <string>
#include <vector>

#include "common/yaml.hpp"

namespace moesim::models {

enum class FabricKind {
  kNvswitch,    // every GPU has one port of `bandwidth` into a non-blocking switch
  kNvlinkMesh,  // every GPU pair has a direct link; a GPU's `bandwidth` is split evenly over its peers
  kPcie,        // every GPU has one PCIe link of `bandwidth` into a shared switch
};

enum class TopologyKind {
  kSingleSwitch,   // every NIC on one switch
  kFatTree,        // NICs are the leaves of a SimGrid-style fat tree
  kRailOptimized,  // NIC k of every node on rail switch k; rails joined by a spine
};

std::string fabric_kind_name(FabricKind kind);      // "nvswitch", "nvlink_mesh", "pcie"
std::string topology_kind_name(TopologyKind kind);  // "single_switch", "fat_tree", "rail_optimized"

struct IntraNodeFabric {
  FabricKind kind = FabricKind::kNvswitch;
  double bandwidth = 0.0;  // B/s per direction, per GPU (the GPU's total over all its links)
  double latency = 0.0;    // s, one GPU-to-GPU transfer
};

struct NicConfig {
  int per_node = 0;
  double bandwidth = 0.0;    // B/s per direction, per NIC
  double latency = 0.0;      // s, NIC to switch (paid at each end of a transfer)
  std::vector<int> gpu_nic;  // per local GPU index: the node-local NIC it uses (size gpus_per_node)
};

struct InterNodeNetwork {
  TopologyKind topology = TopologyKind::kSingleSwitch;
  // single_switch and rail_optimized: the latency through one switch.
  double switch_latency = 0.0;
  // single_switch: the switch's aggregate backbone bandwidth per direction; 0 = non-blocking.
  double switch_bandwidth = 0.0;
  // fat_tree (SimGrid's FatTreeParams): per level, bottom up. The leaves (product of `down`) are the
  // NICs, node-major: leaf n * nics_per_node + k is NIC k of node n; extra leaves stay empty.
  int levels = 0;
  std::vector<int> down;
  std::vector<int> up;
  std::vector<int> parallel_links;
  double link_bandwidth = 0.0;  // B/s per direction, every switch-to-switch and leaf link
  double link_latency = 0.0;    // s, per link
  // rail_optimized: traffic between different rails crosses the spine.
  double spine_bandwidth = 0.0;  // B/s per direction, per rail switch uplink
  double spine_latency = 0.0;    // s, through the spine
};

struct Cluster {
  std::string name;         // file stem, e.g. "h100-sxm-8gpu"
  std::string source_file;  // where it was loaded from
  int num_nodes = 0;
  int gpus_per_node = 0;
  std::string gpu_kind;     // names a GPU profile, e.g. "h100-sxm"
  double gpu_memory = 0.0;  // bytes
  IntraNodeFabric intra_node;
  NicConfig nics;
  InterNodeNetwork inter_node;

  // GPUs are numbered node-major: GPU g is local GPU g % gpus_per_node of node g / gpus_per_node.
  // Helpers taking a GPU index throw std::out_of_range outside [0, total_gpus()).
  int total_gpus() const { return num_nodes * gpus_per_node; }
  int node_of(int gpu) const;
  int local_index(int gpu) const;
  int nic_of(int gpu) const;        // node-local NIC index
  int gpus_on_nic(int nic) const;   // GPUs of one node that use node-local NIC `nic`
  double nic_share(int gpu) const;  // the NIC's bandwidth divided by the GPUs that share it
  // Peak bandwidth per direction from `a` to `b`, for cost models that need one number per pair:
  // the same GPU: infinity (local data does not move); same node: the fabric's per-GPU bandwidth
  // (nvlink_mesh: divided by the peers, gpus_per_node - 1); different nodes: the smaller of the two
  // GPUs' NIC shares, i.e. every GPU sending at once. Switch limits are left to the simulator.
  double bandwidth_between(int a, int b) const;
  // One-way latency estimate from `a` to `b`: 0 on one GPU; the fabric latency in a node; otherwise
  // both NICs' latencies plus the switches on the way (fat_tree: every link up to the root and back).
  double latency_between(int a, int b) const;
};

// Validates every field; errors name the file, line and key path.
Cluster parse_cluster(const common::YamlNode& root, const std::string& name);
// By name (configs/clusters/NAME.yaml) or path, with `--set` overrides applied first.
Cluster load_cluster(const std::string& name_or_path, const std::vector<std::string>& overrides = {});

}  // namespace moesim::models
