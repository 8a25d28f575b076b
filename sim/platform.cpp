#include "sim/platform.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"

namespace moesim::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;
constexpr double kUnlimited = 1e15;  // B/s: a link that only adds latency

sg4::SplitDuplexLink* duplex(sg4::NetZone* zone, const std::string& name, double bw, double latency) {
  auto* l = zone->create_split_duplex_link(name, bw);
  l->set_latency(latency);
  l->seal();
  return l;
}

}  // namespace

Platform::Platform(const models::Cluster& c, const models::Profile& profile, double speed_factor) {
  if (c.total_gpus() < 1) throw common::InputError(c.source_file + ": the cluster has no GPUs");
  if (!(speed_factor > 0.0 && speed_factor <= 1.0)) throw common::InputError("power-cap speed factor out of range");
  auto* zone = sg4::create_full_zone("cluster");

  std::vector<double> speeds(kMaxSlowdownIndex + 1);
  for (int i = 0; i <= kMaxSlowdownIndex; ++i) speeds[static_cast<std::size_t>(i)] = kHostSpeed * speed_factor / (1.0 + i * kSlowdownStep);

  const int n = c.total_gpus();
  const int per_node = c.gpus_per_node;
  const double nvl_eff = profile.nvlink.bandwidth_efficiency;
  const double intra_bw = c.intra_node.bandwidth * (c.intra_node.kind == models::FabricKind::kPcie
                                                        ? profile.pcie.bandwidth_efficiency
                                                        : nvl_eff);
  const double intra_lat = c.intra_node.latency +
                           (c.intra_node.kind == models::FabricKind::kPcie ? profile.pcie.latency : profile.nvlink.latency);
  const double nic_bw = c.nics.bandwidth * profile.nic.bandwidth_efficiency;
  const double nic_lat = c.nics.latency + profile.nic.latency / 2.0;

  hosts_.resize(static_cast<std::size_t>(n));
  ports_.resize(static_cast<std::size_t>(n));
  for (int g = 0; g < n; ++g) {
    auto* h = zone->create_host("gpu" + std::to_string(g), speeds);
    h->seal();
    hosts_[static_cast<std::size_t>(g)] = h;
    auto& p = ports_[static_cast<std::size_t>(g)];
    // The route's latency is the sum over its links: each port carries half the fabric latency.
    p.intra = duplex(zone, "gpu" + std::to_string(g) + "-port", intra_bw, intra_lat / 2.0);
    p.intra_bw = intra_bw;
    if (c.num_nodes > 1) {
      p.net = duplex(zone, "gpu" + std::to_string(g) + "-netport", nic_bw, 0.0);
      p.net_bw = nic_bw;
    }
  }

  // NVLink mesh: one direct link per GPU pair, carrying the GPU's bandwidth split over its peers.
  std::vector<sg4::SplitDuplexLink*> mesh;
  if (c.intra_node.kind == models::FabricKind::kNvlinkMesh && per_node > 1) {
    mesh.resize(static_cast<std::size_t>(n * per_node), nullptr);
    for (int node = 0; node < c.num_nodes; ++node)
      for (int a = 0; a < per_node; ++a)
        for (int b = a + 1; b < per_node; ++b)
          mesh[static_cast<std::size_t>(node * per_node * per_node + a * per_node + b)] =
              duplex(zone, "node" + std::to_string(node) + "-nvl" + std::to_string(a) + "-" + std::to_string(b),
                     intra_bw / (per_node - 1), 0.0);
  }

  // NICs and the inter-node network.
  const auto& net = c.inter_node;
  std::vector<sg4::SplitDuplexLink*> nics;
  sg4::Link* backbone = nullptr;
  std::vector<sg4::SplitDuplexLink*> rails, rail_uplinks;
  sg4::Link* spine = nullptr;
  // Fat tree: one aggregated uplink per switch and level (bandwidth = links x parallel links x rate).
  std::vector<std::vector<sg4::SplitDuplexLink*>> tree_up;
  std::vector<long> tree_span;  // leaves under one switch of each level
  if (c.num_nodes > 1) {
    const int nics_per_node = c.nics.per_node;
    for (int node = 0; node < c.num_nodes; ++node)
      for (int k = 0; k < nics_per_node; ++k)
        nics.push_back(duplex(zone, "node" + std::to_string(node) + "-nic" + std::to_string(k), nic_bw, nic_lat));
    switch (net.topology) {
      case models::TopologyKind::kSingleSwitch: {
        const double bw = net.switch_bandwidth > 0 ? net.switch_bandwidth : kUnlimited;
        backbone = zone->create_link("switch", bw);
        backbone->set_latency(net.switch_latency);
        backbone->seal();
        break;
      }
      case models::TopologyKind::kRailOptimized: {
        for (int k = 0; k < nics_per_node; ++k) {
          rails.push_back(duplex(zone, "rail" + std::to_string(k), kUnlimited, net.switch_latency));
          rail_uplinks.push_back(duplex(zone, "rail" + std::to_string(k) + "-spine",
                                        net.spine_bandwidth > 0 ? net.spine_bandwidth : kUnlimited, 0.0));
        }
        spine = zone->create_link("spine", kUnlimited);
        spine->set_latency(net.spine_latency);
        spine->seal();
        break;
      }
      case models::TopologyKind::kFatTree: {
        long span = 1;
        const long leaves = static_cast<long>(c.num_nodes) * nics_per_node;
        for (int level = 0; level < net.levels; ++level) {
          span *= net.down[static_cast<std::size_t>(level)];
          tree_span.push_back(span);
          if (level + 1 == net.levels) break;  // the top level has no uplinks
          const long switches = (leaves + span - 1) / span;
          std::vector<sg4::SplitDuplexLink*> ups;
          const double bw = net.link_bandwidth * net.up[static_cast<std::size_t>(level)] *
                            net.parallel_links[static_cast<std::size_t>(level)];
          for (long s = 0; s < switches; ++s)
            ups.push_back(duplex(zone, "ft-l" + std::to_string(level) + "-s" + std::to_string(s) + "-up", bw,
                                 net.link_latency));
          tree_up.push_back(std::move(ups));
        }
        break;
      }
    }
  }

  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      std::vector<sg4::LinkInRoute> route;
      const int na = c.node_of(a), nb = c.node_of(b);
      const auto& pa = ports_[static_cast<std::size_t>(a)];
      const auto& pb = ports_[static_cast<std::size_t>(b)];
      if (na == nb) {
        route.emplace_back(pa.intra, Dir::UP);
        if (!mesh.empty()) {
          int la = c.local_index(a), lb = c.local_index(b);
          const Dir d = la < lb ? Dir::UP : Dir::DOWN;
          if (la > lb) std::swap(la, lb);
          route.emplace_back(mesh[static_cast<std::size_t>(na * per_node * per_node + la * per_node + lb)], d);
        }
        route.emplace_back(pb.intra, Dir::DOWN);
      } else {
        const int ka = c.nic_of(a), kb = c.nic_of(b);
        const long leaf_a = static_cast<long>(na) * c.nics.per_node + ka;
        const long leaf_b = static_cast<long>(nb) * c.nics.per_node + kb;
        route.emplace_back(pa.net, Dir::UP);
        route.emplace_back(nics[static_cast<std::size_t>(leaf_a)], Dir::UP);
        if (backbone) route.emplace_back(backbone);
        if (!rails.empty()) {
          route.emplace_back(rails[static_cast<std::size_t>(ka)], Dir::UP);
          if (ka != kb) {
            route.emplace_back(rail_uplinks[static_cast<std::size_t>(ka)], Dir::UP);
            route.emplace_back(spine);
            route.emplace_back(rail_uplinks[static_cast<std::size_t>(kb)], Dir::DOWN);
          }
          if (ka != kb) route.emplace_back(rails[static_cast<std::size_t>(kb)], Dir::DOWN);
        }
        if (!tree_span.empty()) {
          // Up to the lowest level whose switch holds both leaves, then down.
          std::size_t top = 0;
          while (top < tree_span.size() && leaf_a / tree_span[top] != leaf_b / tree_span[top]) ++top;
          for (std::size_t level = 0; level < top && level < tree_up.size(); ++level)
            route.emplace_back(tree_up[level][static_cast<std::size_t>(leaf_a / tree_span[level])], Dir::UP);
          for (std::size_t level = std::min(top, tree_up.size()); level-- > 0;)
            route.emplace_back(tree_up[level][static_cast<std::size_t>(leaf_b / tree_span[level])], Dir::DOWN);
        }
        route.emplace_back(nics[static_cast<std::size_t>(leaf_b)], Dir::DOWN);
        route.emplace_back(pb.net, Dir::DOWN);
      }
      zone->add_route(hosts_[static_cast<std::size_t>(a)]->get_netpoint(), hosts_[static_cast<std::size_t>(b)]->get_netpoint(),
                      nullptr, nullptr, route, false);
    }
  }
  zone->seal();
  // Node 0's GPUs reach each other over their two ports alone unless a mesh adds a pair link; every
  // port is built with the same bandwidth and latency.
  star_gpus_ = mesh.empty() ? std::min(n, per_node) : 0;
}

void Platform::set_compute_slowdown(int gpu, double factor) {
  long index = std::lround((std::max(factor, 1.0) - 1.0) / kSlowdownStep);
  if (index > kMaxSlowdownIndex) index = kMaxSlowdownIndex;
  auto& p = ports_[static_cast<std::size_t>(gpu)];
  if (p.pstate == index) return;
  p.pstate = index;
  hosts_[static_cast<std::size_t>(gpu)]->set_pstate(static_cast<unsigned long>(index));
}

void Platform::set_comm_slowdown(int gpu, double factor) {
  auto& p = ports_[static_cast<std::size_t>(gpu)];
  factor = std::max(factor, 1.0);
  if (factor == p.factor) return;
  p.factor = factor;
  p.intra->get_link_up()->set_bandwidth(p.intra_bw / factor);
  p.intra->get_link_down()->set_bandwidth(p.intra_bw / factor);
  if (p.net) {
    p.net->get_link_up()->set_bandwidth(p.net_bw / factor);
    p.net->get_link_down()->set_bandwidth(p.net_bw / factor);
  }
}

}  // namespace moesim::sim
