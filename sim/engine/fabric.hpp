// A cluster's network as the engine simulates it, without SimGrid (docs/simulator.md, "Platform"):
// every link with its achievable bandwidth (the cluster file's nominal figure times the profile's
// efficiency) and latency (the cluster's plus the profile's), and the route between every two GPUs
// as a list of links and directions. The platform builds its SimGrid links and routes from this
// description, and the graph builder sizes transfers with the same routes' figures, so that both
// always agree. Bandwidths in B/s per direction (a shared link: both directions together), s.
#pragma once

#include <string>
#include <vector>

#include "models/cluster.hpp"
#include "models/profile.hpp"

namespace moesim::sim {

inline constexpr double kUnlimitedBandwidth = 1e15;  // B/s: a link that only adds latency

struct FabricFigures {
  double intra_bw = 0.0;   // B/s per direction of a GPU's NVLink/PCIe port
  double intra_lat = 0.0;  // s, GPU to GPU inside a node (the two ports together)
  double nic_bw = 0.0;     // B/s per direction of a NIC
  double nic_lat = 0.0;    // s, added by each NIC on an inter-node route
};

FabricFigures fabric_figures(const models::Cluster& cluster, const models::Profile& profile);

struct FabricLink {
  std::string name;
  double bandwidth = 0.0;
  double latency = 0.0;
  bool shared = false;  // one capacity for both directions (a switch backbone); else split duplex
  bool port = false;    // a GPU's private port (slowed while that GPU computes and communicates)
  bool nic = false;     // a node's NIC (with the GPU ports, the ends of an inter-node route)
};

struct Hop {
  int link = 0;
  bool up = true;  // the direction on a split-duplex link
};

// What a route costs a transfer that has it to itself: the sum of its links' latencies and the
// smallest of their bandwidths.
struct RouteFigures {
  double latency = 0.0;
  double bandwidth = 0.0;
};

class Fabric {
 public:
  Fabric(const models::Cluster& cluster, const models::Profile& profile);
  const std::vector<FabricLink>& links() const { return links_; }
  // The hops from GPU a to GPU b (a != b), in order; route_into replaces `hops` (no allocation once
  // it has grown: the platform asks for every ordered pair).
  std::vector<Hop> route(int a, int b) const;
  void route_into(int a, int b, std::vector<Hop>& hops) const;
  RouteFigures figures(int a, int b) const;
  int gpus() const { return cluster_.total_gpus(); }
  int node_of(int gpu) const { return cluster_.node_of(gpu); }
  int port(int gpu) const { return port_[static_cast<std::size_t>(gpu)]; }
  int net_port(int gpu) const { return net_port_[static_cast<std::size_t>(gpu)]; }  // -1 on one node
  const FabricFigures& nominal() const { return figures_; }

 private:
  int add(std::string name, double bandwidth, double latency, bool shared = false, bool port = false);
  void add_network();
  void inter_node_hops(int a, int b, std::vector<Hop>& hops) const;

  models::Cluster cluster_;
  FabricFigures figures_;
  std::vector<FabricLink> links_;
  std::vector<int> port_, net_port_;
  std::vector<int> mesh_;  // [node * p * p + a * p + b], a < b: the pair link
  std::vector<int> nics_;  // [node * nics_per_node + k]
  int backbone_ = -1, spine_ = -1;
  std::vector<int> rails_, rail_uplinks_;
  std::vector<std::vector<int>> tree_up_;  // [level][switch]
  std::vector<long> tree_span_;            // leaves under one switch of each level
};

// True when every route between two of GPUs 0..n-1 is exactly the source's port link (up) then the
// destination's port link (down), all ports alike: no other link is shared (one node, no NVLink
// mesh). The condition of the aggregated uniform all-to-all (docs/simulator.md).
bool private_star(const models::Cluster& cluster, int n);

}  // namespace moesim::sim
