#include "sim/engine/platform.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace moesim::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;

}  // namespace

Platform::Platform(const Fabric& fabric) : fabric_(fabric) {
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
      shared_[i]->set_latency(l.latency);
      shared_[i]->seal();
    } else {
      duplex_[i] = zone->create_split_duplex_link(l.name, l.bandwidth);
      duplex_[i]->set_latency(l.latency);
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
