#include "sim/engine/collectives.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "models/costs.hpp"

namespace moesim::sim {

namespace {

using models::CollectiveOp;

bool on_one_node(const Fabric& fabric, const std::vector<int>& group) {
  for (int g : group)
    if (fabric.node_of(g) != fabric.node_of(group.front())) return false;
  return true;
}

// The profile's time for `op` on `ranks` ranks of one scope, from its curve of that scope (the
// nearest rank count, its bus bandwidth carried to this count); nullopt without such a curve.
std::optional<double> curve_time(const models::Profile& profile, CollectiveOp op, int ranks, double bytes, bool one_node) {
  const std::string scope = one_node ? "intra_node" : "inter_node";
  const models::CollectiveCurve* best = nullptr;
  for (const auto& c : profile.collectives) {
    if (c.op != op || c.scope != scope) continue;
    const double d = std::abs(std::log(static_cast<double>(c.ranks) / ranks));
    if (!best || d < std::abs(std::log(static_cast<double>(best->ranks) / ranks)) ||
        (d == std::abs(std::log(static_cast<double>(best->ranks) / ranks)) && c.ranks < best->ranks))
      best = &c;
  }
  if (!best) return std::nullopt;
  const double t = models::interpolate_loglog(best->bytes, best->time, bytes);
  if (best->ranks == ranks) return t;
  return t * models::busbw_factor(op, ranks) / models::busbw_factor(op, best->ranks);
}

// The fixed cost of `op` on `ranks` ranks of one scope: the profile's time at the smallest size it
// tabulates (launch and synchronisation; the bytes are next to none), carried to this rank count as
// curve_time carries every size, so that no size of the curve takes less. 0 without a curve.
double curve_floor(const models::Profile& profile, CollectiveOp op, int ranks, bool one_node) {
  const std::string scope = one_node ? "intra_node" : "inter_node";
  double smallest = std::numeric_limits<double>::infinity();
  for (const auto& c : profile.collectives)
    if (c.op == op && c.scope == scope && !c.bytes.empty()) smallest = std::min(smallest, c.bytes.front());
  if (!std::isfinite(smallest)) return 0.0;
  return curve_time(profile, op, ranks, smallest, one_node).value_or(0.0);
}

RouteFigures slowest_hop(const Fabric& fabric, const std::vector<int>& group) {
  RouteFigures slowest{0.0, std::numeric_limits<double>::infinity()};
  const std::size_t n = group.size();
  for (std::size_t i = 0; i < n; ++i) {
    const RouteFigures f = fabric.figures(group[i], group[(i + 1) % n]);
    slowest.latency = std::max(slowest.latency, f.latency);
    slowest.bandwidth = std::min(slowest.bandwidth, f.bandwidth);
  }
  return slowest;
}

}  // namespace

double collective_target(const Fabric& fabric, const models::Profile& profile, CollectiveOp op,
                         const std::vector<int>& group, double bytes) {
  const int n = static_cast<int>(group.size());
  if (n <= 1 || bytes <= 0.0) return 0.0;
  if (auto t = curve_time(profile, op, n, bytes, on_one_node(fabric, group))) return *t;
  // No curve of this scope: a ring over the group's slowest hop.
  const RouteFigures hop = slowest_hop(fabric, group);
  double steps = n - 1.0;
  if (op == CollectiveOp::kAllReduce) steps = 2.0 * (n - 1.0);
  if (op == CollectiveOp::kSendRecv) steps = 1.0;
  return steps * hop.latency + bytes * models::busbw_factor(op, n) / hop.bandwidth;
}

double collective_floor(const Fabric& fabric, const models::Profile& profile, CollectiveOp op,
                        const std::vector<int>& group) {
  const int n = static_cast<int>(group.size());
  if (n <= 1) return 0.0;
  return curve_floor(profile, op, n, on_one_node(fabric, group));
}

SizedCollective ring_collective(const Fabric& fabric, const models::Profile& profile, CollectiveOp op,
                                const std::vector<int>& group, double bytes) {
  SizedCollective out;
  out.target = collective_target(fabric, profile, op, group, bytes);
  const double floor = std::min(collective_floor(fabric, profile, op, group), out.target);
  const std::size_t n = group.size();
  for (std::size_t i = 0; i < n && n > 1; ++i) {
    const int src = group[i], dst = group[(i + 1) % n];
    const RouteFigures hop = fabric.figures(src, dst);
    const double latency = std::max(hop.latency, floor);
    out.transfers.push_back({src, dst, std::max(0.0, (out.target - latency) * hop.bandwidth), latency});
  }
  return out;
}

double alltoall_floor(const models::Profile& profile, int ranks, bool one_node) {
  return ranks <= 1 ? 0.0 : curve_floor(profile, CollectiveOp::kAllToAll, ranks, one_node);
}

TransferSizing alltoall_sizing(const models::Profile& profile, int ranks, bool one_node, double off_bytes,
                               const RouteFigures& port, double floor) {
  if (ranks <= 1 || off_bytes <= 0.0) return {};
  const double size = off_bytes * ranks / (ranks - 1.0);
  const auto t = curve_time(profile, CollectiveOp::kAllToAll, ranks, size, one_node);
  if (!t) return {};
  const double latency = std::max(port.latency, std::min(floor, *t));
  return {std::max(0.0, (*t - latency) * port.bandwidth / off_bytes), latency};
}

SizedCollective uniform_alltoall(const Fabric& fabric, const models::Profile& profile, const std::vector<int>& group,
                                 double bytes) {
  SizedCollective out;
  const std::size_t n = group.size();
  if (n <= 1 || bytes <= 0.0) return out;
  out.target = collective_target(fabric, profile, CollectiveOp::kAllToAll, group, bytes);
  const double floor = std::min(collective_floor(fabric, profile, CollectiveOp::kAllToAll, group), out.target);
  // Each transfer's share of its busiest link when every rank sends to every other at once.
  std::map<std::pair<int, bool>, int> load;
  std::vector<std::vector<Hop>> routes;
  for (int src : group)
    for (int dst : group) {
      if (src == dst) continue;
      routes.push_back(fabric.route(src, dst));
      for (const Hop& h : routes.back()) ++load[{h.link, fabric.links()[static_cast<std::size_t>(h.link)].shared || h.up}];
    }
  std::size_t r = 0;
  for (int src : group)
    for (int dst : group) {
      if (src == dst) continue;
      double latency = 0.0, rate = std::numeric_limits<double>::infinity();
      for (const Hop& h : routes[r]) {
        const FabricLink& l = fabric.links()[static_cast<std::size_t>(h.link)];
        latency += l.latency;
        rate = std::min(rate, l.bandwidth / load[{h.link, l.shared || h.up}]);
      }
      ++r;
      latency = std::max(latency, floor);
      out.transfers.push_back({src, dst, std::max(0.0, (out.target - latency) * rate), latency});
    }
  return out;
}

}  // namespace moesim::sim
