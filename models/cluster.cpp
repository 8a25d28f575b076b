#include "models/cluster.hpp"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <stdexcept>
#include <string>

#include "common/files.hpp"
#include "models/config_header.hpp"

namespace moesim::models {

namespace {

using common::UnitKind;
using common::YamlNode;

// Caps that only reject certain typos: a 1 s link latency or a 1 PB/s link is not a GPU cluster.
constexpr double kMaxLatency = 1.0;
constexpr double kMaxBandwidth = 1e15;
constexpr double kMinBandwidth = 1.0;
constexpr std::int64_t kMaxNodes = 1 << 20;  // with kMaxGpusPerNode, GPU indices fit an int
constexpr std::int64_t kMaxGpusPerNode = 1024;
constexpr std::int64_t kMaxFatTreeLevels = 8;
constexpr std::int64_t kMaxFatTreeWidth = 1 << 16;

int read_int(const YamlNode& node, std::int64_t min, std::int64_t max) {
  return static_cast<int>(node.as_int(min, max));
}

double read_bandwidth(const YamlNode& node) { return node.as_unit(UnitKind::kBandwidth, kMinBandwidth, kMaxBandwidth); }
double read_latency(const YamlNode& node) { return node.as_unit(UnitKind::kTime, 0.0, kMaxLatency); }

void parse_gpu(const YamlNode& node, Cluster& c) {
  node.expect_map();
  node.allow_keys({"kind", "memory"});
  const YamlNode kind = node.at("kind");
  c.gpu_kind = kind.as_string();
  const bool valid_name = std::all_of(c.gpu_kind.begin(), c.gpu_kind.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' || ch == '_';
  });
  if (!valid_name) kind.fail_expected("a GPU profile name of lower-case letters, digits, '-' and '_' (e.g. h100-sxm)");
  c.gpu_memory = node.at("memory").as_unit(UnitKind::kBytes, 1 << 20, 1e15);
}

void parse_intra_node(const YamlNode& node, Cluster& c) {
  node.expect_map();
  node.allow_keys({"fabric", "bandwidth", "latency"});
  const std::string fabric = node.at("fabric").as_enum({"nvswitch", "nvlink_mesh", "pcie"});
  c.intra_node.kind = fabric == "nvswitch"      ? FabricKind::kNvswitch
                      : fabric == "nvlink_mesh" ? FabricKind::kNvlinkMesh
                                                : FabricKind::kPcie;
  c.intra_node.bandwidth = read_bandwidth(node.at("bandwidth"));
  c.intra_node.latency = read_latency(node.at("latency"));
}

void parse_nics(const YamlNode& node, Cluster& c) {
  node.expect_map();
  node.allow_keys({"per_node", "bandwidth", "latency", "gpu_nic"});
  const YamlNode per_node = node.at("per_node");
  c.nics.per_node = read_int(per_node, 1, c.gpus_per_node);
  c.nics.bandwidth = read_bandwidth(node.at("bandwidth"));
  c.nics.latency = read_latency(node.at("latency"));

  if (auto map = node.find("gpu_nic")) {
    const std::vector<YamlNode> items = map->items();
    if (static_cast<int>(items.size()) != c.gpus_per_node)
      map->fail("expected one NIC index per GPU of a node (" + std::to_string(c.gpus_per_node) + " entries), got " +
                std::to_string(items.size()));
    for (const YamlNode& item : items) c.nics.gpu_nic.push_back(read_int(item, 0, c.nics.per_node - 1));
    for (int nic = 0; nic < c.nics.per_node; ++nic)
      if (std::find(c.nics.gpu_nic.begin(), c.nics.gpu_nic.end(), nic) == c.nics.gpu_nic.end())
        map->fail("expected every NIC of a node to be used by some GPU, got no GPU on NIC " + std::to_string(nic) +
                  " (lower nics.per_node, or map a GPU to it)");
  } else {
    if (c.gpus_per_node % c.nics.per_node != 0)
      node.fail("expected gpu_nic (the NIC of each GPU), got none; it may be left out only when nics.per_node (" +
                std::to_string(c.nics.per_node) + ") divides gpus_per_node (" + std::to_string(c.gpus_per_node) + ")");
    // Consecutive GPUs share a NIC, the usual PCIe-switch wiring: GPUs 0-3 on NIC 0 when 2 NICs serve 8 GPUs.
    const int group = c.gpus_per_node / c.nics.per_node;
    for (int gpu = 0; gpu < c.gpus_per_node; ++gpu) c.nics.gpu_nic.push_back(gpu / group);
  }
}

std::vector<int> read_level_list(const YamlNode& node, int levels) {
  const std::vector<YamlNode> items = node.items();
  if (static_cast<int>(items.size()) != levels)
    node.fail("expected one entry per fat-tree level (" + std::to_string(levels) + "), got " +
              std::to_string(items.size()));
  std::vector<int> values;
  for (const YamlNode& item : items) values.push_back(read_int(item, 1, kMaxFatTreeWidth));
  return values;
}

void parse_inter_node(const YamlNode& node, Cluster& c) {
  node.expect_map();
  InterNodeNetwork& net = c.inter_node;
  const std::string topology = node.at("topology").as_enum({"single_switch", "fat_tree", "rail_optimized"});
  if (topology == "single_switch") {
    net.topology = TopologyKind::kSingleSwitch;
    node.allow_keys({"topology", "switch_latency", "switch_bandwidth"});
    net.switch_latency = read_latency(node.at("switch_latency"));
    if (auto bw = node.find("switch_bandwidth")) net.switch_bandwidth = read_bandwidth(*bw);
  } else if (topology == "fat_tree") {
    net.topology = TopologyKind::kFatTree;
    node.allow_keys({"topology", "levels", "down", "up", "parallel_links", "link_bandwidth", "link_latency"});
    net.levels = read_int(node.at("levels"), 1, kMaxFatTreeLevels);
    const YamlNode down = node.at("down");
    net.down = read_level_list(down, net.levels);
    net.up = read_level_list(node.at("up"), net.levels);
    if (auto links = node.find("parallel_links")) {
      net.parallel_links = read_level_list(*links, net.levels);
    } else {
      net.parallel_links.assign(static_cast<std::size_t>(net.levels), 1);
    }
    double leaves = 1.0;
    for (int d : net.down) leaves *= d;
    const double nics = static_cast<double>(c.num_nodes) * c.nics.per_node;
    if (leaves < nics)
      down.fail("expected at least one fat-tree leaf per NIC (nodes x nics.per_node = " +
                std::to_string(c.num_nodes * c.nics.per_node) + "), got " + std::to_string(static_cast<long>(leaves)) +
                " leaves (the product of down)");
    net.link_bandwidth = read_bandwidth(node.at("link_bandwidth"));
    net.link_latency = read_latency(node.at("link_latency"));
  } else {
    net.topology = TopologyKind::kRailOptimized;
    node.allow_keys({"topology", "switch_latency", "spine_bandwidth", "spine_latency"});
    net.switch_latency = read_latency(node.at("switch_latency"));
    net.spine_bandwidth = read_bandwidth(node.at("spine_bandwidth"));
    net.spine_latency = read_latency(node.at("spine_latency"));
  }
}

}  // namespace

std::string fabric_kind_name(FabricKind kind) {
  switch (kind) {
    case FabricKind::kNvswitch:
      return "nvswitch";
    case FabricKind::kNvlinkMesh:
      return "nvlink_mesh";
    case FabricKind::kPcie:
      return "pcie";
  }
  return "?";
}

std::string topology_kind_name(TopologyKind kind) {
  switch (kind) {
    case TopologyKind::kSingleSwitch:
      return "single_switch";
    case TopologyKind::kFatTree:
      return "fat_tree";
    case TopologyKind::kRailOptimized:
      return "rail_optimized";
  }
  return "?";
}

int Cluster::node_of(int gpu) const {
  if (gpu < 0 || gpu >= total_gpus())
    throw std::out_of_range("GPU " + std::to_string(gpu) + " is not in cluster " + name + " (" +
                            std::to_string(total_gpus()) + " GPUs)");
  return gpu / gpus_per_node;
}

int Cluster::local_index(int gpu) const { return gpu - node_of(gpu) * gpus_per_node; }

int Cluster::nic_of(int gpu) const { return nics.gpu_nic.at(static_cast<std::size_t>(local_index(gpu))); }

int Cluster::gpus_on_nic(int nic) const {
  if (nic < 0 || nic >= nics.per_node)
    throw std::out_of_range("NIC " + std::to_string(nic) + " is not in cluster " + name + " (" +
                            std::to_string(nics.per_node) + " NICs per node)");
  return static_cast<int>(std::count(nics.gpu_nic.begin(), nics.gpu_nic.end(), nic));
}

double Cluster::nic_share(int gpu) const { return nics.bandwidth / gpus_on_nic(nic_of(gpu)); }

double Cluster::bandwidth_between(int a, int b) const {
  const int node_a = node_of(a);
  const int node_b = node_of(b);
  if (a == b) return std::numeric_limits<double>::infinity();
  if (node_a == node_b) {
    if (intra_node.kind == FabricKind::kNvlinkMesh) return intra_node.bandwidth / (gpus_per_node - 1);
    return intra_node.bandwidth;
  }
  return std::min(nic_share(a), nic_share(b));
}

double Cluster::latency_between(int a, int b) const {
  const int node_a = node_of(a);
  const int node_b = node_of(b);
  if (a == b) return 0.0;
  if (node_a == node_b) return intra_node.latency;
  double network = 0.0;
  switch (inter_node.topology) {
    case TopologyKind::kSingleSwitch:
      network = inter_node.switch_latency;
      break;
    case TopologyKind::kFatTree:
      network = 2.0 * inter_node.levels * inter_node.link_latency;
      break;
    case TopologyKind::kRailOptimized:
      network = nic_of(a) == nic_of(b) ? inter_node.switch_latency
                                       : 2.0 * inter_node.switch_latency + inter_node.spine_latency;
      break;
  }
  return 2.0 * nics.latency + network;
}

Cluster parse_cluster(const YamlNode& root, const std::string& name) {
  check_config_kind(root, "cluster");
  root.allow_keys({"schema_version", "kind", "nodes", "gpus_per_node", "gpu", "intra_node", "nics", "inter_node"});
  check_config_header(root, "cluster");

  Cluster c;
  c.name = name;
  c.num_nodes = read_int(root.at("nodes"), 1, kMaxNodes);
  c.gpus_per_node = read_int(root.at("gpus_per_node"), 1, kMaxGpusPerNode);
  parse_gpu(root.at("gpu"), c);
  parse_intra_node(root.at("intra_node"), c);
  parse_nics(root.at("nics"), c);
  parse_inter_node(root.at("inter_node"), c);
  return c;
}

Cluster load_cluster(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  const std::filesystem::path path = common::resolve_config("clusters", name_or_path);
  common::YamlDocument doc = common::YamlDocument::load_file(path.string());
  doc.apply_overrides(overrides);
  Cluster c = parse_cluster(doc.root(), path.stem().string());
  c.source_file = path.string();
  return c;
}

}  // namespace moesim::models
