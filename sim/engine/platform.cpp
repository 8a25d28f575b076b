#include "sim/engine/platform.hpp"

#include <simgrid/kernel/resource/NetworkModelIntf.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

namespace moesim::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;

// A link with no latency gets this much, so that a route's latency can always be stretched by a
// factor (send()); 1 ps is below anything the engine reports.
constexpr double kMinLinkLatency = 1e-12;

}  // namespace

Platform::Platform(const Fabric& fabric, LatencyFactor latency_factor)
    : fabric_(fabric), latency_factor_(std::move(latency_factor)) {
  auto* zone = sg4::create_full_zone("cluster");
  std::vector<double> speeds(kMaxSlowdownIndex + 1);
  for (int i = 0; i <= kMaxSlowdownIndex; ++i) speeds[static_cast<std::size_t>(i)] = kHostSpeed / (1.0 + i * kSlowdownStep);
  const int n = fabric.gpus();
  hosts_.resize(static_cast<std::size_t>(n));
  state_.assign(static_cast<std::size_t>(n), GpuState{});
  for (int g = 0; g < n; ++g) {
    auto* h = zone->create_host("gpu" + std::to_string(g), speeds);
    h->seal();
    hosts_[static_cast<std::size_t>(g)] = h;
  }
  const auto& links = fabric.links();
  duplex_.assign(links.size(), nullptr);
  shared_.assign(links.size(), nullptr);
  for (std::size_t i = 0; i < links.size(); ++i) {
    const FabricLink& l = links[i];
    if (l.shared) {
      shared_[i] = zone->create_link(l.name, l.bandwidth);
      shared_[i]->set_latency(std::max(l.latency, kMinLinkLatency));
      shared_[i]->seal();
    } else {
      duplex_[i] = zone->create_split_duplex_link(l.name, l.bandwidth);
      duplex_[i]->set_latency(std::max(l.latency, kMinLinkLatency));
      duplex_[i]->seal();
    }
  }
  std::vector<Hop> hops;
  std::vector<sg4::LinkInRoute> route;
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      route.clear();
      fabric.route_into(a, b, hops);
      for (const Hop& h : hops) {
        const auto i = static_cast<std::size_t>(h.link);
        if (shared_[i])
          route.emplace_back(shared_[i]);
        else
          route.emplace_back(duplex_[i], h.up ? Dir::UP : Dir::DOWN);
      }
      zone->add_route(hosts_[static_cast<std::size_t>(a)]->get_netpoint(), hosts_[static_cast<std::size_t>(b)]->get_netpoint(),
                      nullptr, nullptr, route, false);
    }
  zone->seal();
  zone_ = zone;
  if (!latency_factor_.is_identity()) install_latency_callback();
}

// A transfer's latency is its route's (times a study's latency factor), stretched to the one send()
// asks for: SimGrid computes it while the transfer starts, inside Comm::start(), so the factor
// applies to that transfer alone. Installed only once some transfer needs it: with a callback,
// SimGrid builds the route's link list and zone set for every transfer it starts (about 4% of the
// engine's instructions where no transfer has a latency of its own).
void Platform::install_latency_callback() {
  if (latency_callback_) return;
  latency_callback_ = true;
  zone_->get_network_model()->set_lat_factor_cb(
      [this](double size, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& crossed,
             const std::unordered_set<sg4::NetZone*>&) {
        double own = 0.0;
        if (next_latency_ > 0.0)
          for (const sg4::Link* l : crossed) own += l->get_latency();
        return latency_factor_.callback_factor(size, own, next_latency_);
      });
}

sg4::CommPtr Platform::send(int src, int dst, double bytes, double latency, void* data) {
  sg4::CommPtr comm = sg4::Comm::sendto_init(host(src), host(dst));
  comm->set_payload_size(static_cast<std::uint64_t>(std::llround(bytes)));
  if (data != nullptr) comm->set_data(data);
  if (latency > 0.0) install_latency_callback();
  next_latency_ = latency;
  comm->start();
  next_latency_ = 0.0;
  return comm;
}

sg4::Link* Platform::link(const Hop& hop) const {
  const auto i = static_cast<std::size_t>(hop.link);
  if (shared_[i]) return shared_[i];
  return hop.up ? duplex_[i]->get_link_up() : duplex_[i]->get_link_down();
}

void Platform::set_compute_slowdown(int gpu, double factor) {
  long index = std::lround((std::max(factor, 1.0) - 1.0) / kSlowdownStep);
  if (index > kMaxSlowdownIndex) index = kMaxSlowdownIndex;
  auto& s = state_[static_cast<std::size_t>(gpu)];
  if (s.pstate == index) return;
  s.pstate = index;
  hosts_[static_cast<std::size_t>(gpu)]->set_pstate(static_cast<unsigned long>(index));
}

void Platform::set_port_bandwidth(int link, double bandwidth) {
  auto* d = duplex_[static_cast<std::size_t>(link)];
  d->get_link_up()->set_bandwidth(bandwidth);
  d->get_link_down()->set_bandwidth(bandwidth);
}

void Platform::set_comm_slowdown(int gpu, double factor) {
  auto& s = state_[static_cast<std::size_t>(gpu)];
  factor = std::max(factor, 1.0);
  if (factor == s.factor) return;
  s.factor = factor;
  const auto& links = fabric_.links();
  const int port = fabric_.port(gpu), net = fabric_.net_port(gpu);
  set_port_bandwidth(port, links[static_cast<std::size_t>(port)].bandwidth / factor);
  if (net >= 0) set_port_bandwidth(net, links[static_cast<std::size_t>(net)].bandwidth / factor);
}

}  // namespace moesim::sim
