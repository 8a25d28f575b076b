#include "sim/engine/fabric.hpp"

#include <algorithm>
#include <limits>

#include "common/error.hpp"

namespace moesim::sim {

FabricFigures fabric_figures(const models::Cluster& c, const models::Profile& profile) {
  const bool pcie = c.intra_node.kind == models::FabricKind::kPcie;
  FabricFigures f;
  f.intra_bw = c.intra_node.bandwidth * (pcie ? profile.pcie.bandwidth_efficiency : profile.nvlink.bandwidth_efficiency);
  f.intra_lat = c.intra_node.latency + (pcie ? profile.pcie.latency : profile.nvlink.latency);
  f.nic_bw = c.nics.bandwidth * profile.nic.bandwidth_efficiency;
  f.nic_lat = c.nics.latency + profile.nic.latency / 2.0;
  return f;
}

bool private_star(const models::Cluster& c, int n) {
  const bool mesh = c.intra_node.kind == models::FabricKind::kNvlinkMesh && c.gpus_per_node > 1;
  return !mesh && n >= 1 && n <= std::min(c.total_gpus(), c.gpus_per_node);
}

int Fabric::add(std::string name, double bandwidth, double latency, bool shared, bool port) {
  links_.push_back({std::move(name), bandwidth, latency, shared, port});
  return static_cast<int>(links_.size() - 1);
}

Fabric::Fabric(const models::Cluster& c, const models::Profile& profile)
    : cluster_(c), figures_(fabric_figures(c, profile)) {
  if (c.total_gpus() < 1) throw common::InputError(c.source_file + ": the cluster has no GPUs");
  const int n = c.total_gpus(), p = c.gpus_per_node;
  port_.assign(static_cast<std::size_t>(n), -1);
  net_port_.assign(static_cast<std::size_t>(n), -1);
  for (int g = 0; g < n; ++g) {
    // The route's latency is the sum over its links: each port carries half the fabric latency.
    port_[static_cast<std::size_t>(g)] =
        add("gpu" + std::to_string(g) + "-port", figures_.intra_bw, figures_.intra_lat / 2.0, false, true);
    if (c.num_nodes > 1)
      net_port_[static_cast<std::size_t>(g)] = add("gpu" + std::to_string(g) + "-netport", figures_.nic_bw, 0.0, false, true);
  }
  // NVLink mesh: one direct link per GPU pair, carrying the GPU's bandwidth split over its peers.
  if (c.intra_node.kind == models::FabricKind::kNvlinkMesh && p > 1) {
    mesh_.assign(static_cast<std::size_t>(n * p), -1);
    for (int node = 0; node < c.num_nodes; ++node)
      for (int a = 0; a < p; ++a)
        for (int b = a + 1; b < p; ++b)
          mesh_[static_cast<std::size_t>(node * p * p + a * p + b)] =
              add("node" + std::to_string(node) + "-nvl" + std::to_string(a) + "-" + std::to_string(b),
                  figures_.intra_bw / (p - 1), 0.0);
  }
  if (c.num_nodes > 1) add_network();
}

void Fabric::add_network() {
  const auto& c = cluster_;
  const auto& net = c.inter_node;
  const int nics_per_node = c.nics.per_node;
  for (int node = 0; node < c.num_nodes; ++node)
    for (int k = 0; k < nics_per_node; ++k) {
      nics_.push_back(add("node" + std::to_string(node) + "-nic" + std::to_string(k), figures_.nic_bw, figures_.nic_lat));
      links_.back().nic = true;
    }
  switch (net.topology) {
    case models::TopologyKind::kSingleSwitch:
      backbone_ = add("switch", net.switch_bandwidth > 0 ? net.switch_bandwidth : kUnlimitedBandwidth,
                      net.switch_latency, true);
      break;
    case models::TopologyKind::kRailOptimized:
      for (int k = 0; k < nics_per_node; ++k) {
        rails_.push_back(add("rail" + std::to_string(k), kUnlimitedBandwidth, net.switch_latency));
        rail_uplinks_.push_back(add("rail" + std::to_string(k) + "-spine",
                                    net.spine_bandwidth > 0 ? net.spine_bandwidth : kUnlimitedBandwidth, 0.0));
      }
      spine_ = add("spine", kUnlimitedBandwidth, net.spine_latency, true);
      break;
    case models::TopologyKind::kFatTree: {
      // One aggregated uplink per switch and level (bandwidth = links x parallel links x rate).
      long span = 1;
      const long leaves = static_cast<long>(c.num_nodes) * nics_per_node;
      for (int level = 0; level < net.levels; ++level) {
        span *= net.down[static_cast<std::size_t>(level)];
        tree_span_.push_back(span);
        if (level + 1 == net.levels) break;  // the top level has no uplinks
        const long switches = (leaves + span - 1) / span;
        std::vector<int> ups;
        const double bw =
            net.link_bandwidth * net.up[static_cast<std::size_t>(level)] * net.parallel_links[static_cast<std::size_t>(level)];
        for (long s = 0; s < switches; ++s)
          ups.push_back(add("ft-l" + std::to_string(level) + "-s" + std::to_string(s) + "-up", bw, net.link_latency));
        tree_up_.push_back(std::move(ups));
      }
      break;
    }
  }
}

void Fabric::inter_node_hops(int a, int b, std::vector<Hop>& hops) const {
  const auto& c = cluster_;
  const int ka = c.nic_of(a), kb = c.nic_of(b);
  const long leaf_a = static_cast<long>(c.node_of(a)) * c.nics.per_node + ka;
  const long leaf_b = static_cast<long>(c.node_of(b)) * c.nics.per_node + kb;
  hops.push_back({net_port(a), true});
  hops.push_back({nics_[static_cast<std::size_t>(leaf_a)], true});
  if (backbone_ >= 0) hops.push_back({backbone_, true});
  if (!rails_.empty()) {
    hops.push_back({rails_[static_cast<std::size_t>(ka)], true});
    if (ka != kb) {
      hops.push_back({rail_uplinks_[static_cast<std::size_t>(ka)], true});
      hops.push_back({spine_, true});
      hops.push_back({rail_uplinks_[static_cast<std::size_t>(kb)], false});
      hops.push_back({rails_[static_cast<std::size_t>(kb)], false});
    }
  }
  if (!tree_span_.empty()) {
    // Up to the lowest level whose switch holds both leaves, then down.
    std::size_t top = 0;
    while (top < tree_span_.size() && leaf_a / tree_span_[top] != leaf_b / tree_span_[top]) ++top;
    for (std::size_t level = 0; level < top && level < tree_up_.size(); ++level)
      hops.push_back({tree_up_[level][static_cast<std::size_t>(leaf_a / tree_span_[level])], true});
    for (std::size_t level = std::min(top, tree_up_.size()); level-- > 0;)
      hops.push_back({tree_up_[level][static_cast<std::size_t>(leaf_b / tree_span_[level])], false});
  }
  hops.push_back({nics_[static_cast<std::size_t>(leaf_b)], false});
  hops.push_back({net_port(b), false});
}

std::vector<Hop> Fabric::route(int a, int b) const {
  std::vector<Hop> hops;
  route_into(a, b, hops);
  return hops;
}

void Fabric::route_into(int a, int b, std::vector<Hop>& hops) const {
  hops.clear();
  const auto& c = cluster_;
  if (c.node_of(a) != c.node_of(b)) {
    inter_node_hops(a, b, hops);
    return;
  }
  hops.push_back({port(a), true});
  if (!mesh_.empty()) {
    const int p = c.gpus_per_node;
    int la = c.local_index(a), lb = c.local_index(b);
    const bool up = la < lb;
    if (la > lb) std::swap(la, lb);
    hops.push_back({mesh_[static_cast<std::size_t>(c.node_of(a) * p * p + la * p + lb)], up});
  }
  hops.push_back({port(b), false});
}

RouteFigures Fabric::figures(int a, int b) const {
  RouteFigures f{0.0, std::numeric_limits<double>::infinity()};
  for (const Hop& h : route(a, b)) {
    const FabricLink& l = links_[static_cast<std::size_t>(h.link)];
    f.latency += l.latency;
    f.bandwidth = std::min(f.bandwidth, l.bandwidth);
  }
  return f;
}

}  // namespace moesim::sim
