#include "sim/engine/platform.hpp"

#include <simgrid/kernel/Timer.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <span>
#include <unordered_set>
#include <utility>
#include <vector>

namespace moesim::sim {

namespace {

using Dir = sg4::LinkInRoute::Direction;

// SimGrid's CM02 model shares a link between flows in inverse proportion to their routes' latency
// sums (its RTT weighting, the flows' "sharing penalty"). The engine shares equally (max-min, as a
// NIC or an NVLink port serves its queues): in SimGrid every route is its two end ports, each with
// this latency, and nothing else has one, so every route's sum is the same; a transfer's real
// latency (the fabric route's, or its operation's fixed cost) is set by the latency callback.
constexpr double kPortLatency = 0.5e-6;
// The shortest latency a transfer waits, so that each one takes the latency phase in which SimGrid
// gives it its sharing penalty (a transfer without one would share with weight 1 instead).
constexpr double kMinTransferLatency = 1e-15;
constexpr std::uint8_t kUnsetEnd = 0xff;  // Platform::end_hops_: no route seen yet

// Links that can never limit a transfer, left out of the SimGrid routes. Never a GPU port (ports are
// slowed by contention) and never a shared link (SimGrid's results move by about 1e-5 without an
// unlimited shared one in the routes: kept, to change nothing). A split-duplex link is left out
// when, in each direction that routes use, either every GPU that sends across it, at its own first
// hop's (port's) bandwidth, cannot fill it, or every route across it also crosses one same GPU port
// of no more bandwidth (a NIC of its own behind a GPU's network port). Max-min sharing never
// saturates such a link, so it changes no rate; its latency stays the route's (Platform::send). The
// same holds from the receiving side (every GPU that receives across it, at its last hop's).
std::vector<char> idle_links(const Fabric& fabric) {
  const auto& links = fabric.links();
  const int n = fabric.gpus();
  constexpr int kUnset = -1, kMixed = -2;
  std::vector<int> first_port(2 * links.size(), kUnset), last_port(2 * links.size(), kUnset);
  auto common = [](int& slot, int port) { slot = slot == kUnset || slot == port ? port : kMixed; };
  std::vector<Hop> hops;
  std::vector<int> last(2 * links.size(), kUnset);
  // Per link and direction, the most that the GPUs at one end of its routes could put on it: each
  // GPU (counted once per link, and once per port: its NVLink and its network port are two) at its
  // own port's bandwidth. `senders`: the routes' first hops, else their last hops (receivers).
  auto most = [&](bool senders) {
    std::vector<double> sum(2 * links.size(), 0.0);
    std::fill(last.begin(), last.end(), kUnset);
    for (int x = 0; x < n; ++x)
      for (int y = 0; y < n; ++y) {
        if (x == y) continue;
        const int a = senders ? x : y, b = senders ? y : x;
        fabric.route_into(a, b, hops);
        const int in = hops.front().link, out = hops.back().link;
        const int port = senders ? in : out;
        const int end = 2 * x + (port == fabric.port(x) ? 0 : 1);
        for (const Hop& h : hops) {
          const std::size_t key = 2 * static_cast<std::size_t>(h.link) + (h.up ? 0 : 1);
          if (senders) {
            common(first_port[key], in);
            common(last_port[key], out);
          }
          if (last[key] == end) continue;  // this end is counted on this link already
          last[key] = end;
          sum[key] += links[static_cast<std::size_t>(port)].bandwidth;
        }
      }
    return sum;
  };
  const std::vector<double> load = most(true), inflow = most(false);
  auto covered = [&](std::size_t key, double bandwidth) {
    if (last[key] == kUnset) return true;  // no route crosses it this way
    if (load[key] <= bandwidth || inflow[key] <= bandwidth) return true;
    for (const int p : {first_port[key], last_port[key]})
      if (p >= 0 && links[static_cast<std::size_t>(p)].bandwidth <= bandwidth) return true;
    return false;
  };
  std::vector<char> idle(links.size(), 0);
  for (std::size_t i = 0; i < links.size(); ++i)
    idle[i] = !links[i].port && !links[i].shared && covered(2 * i, links[i].bandwidth) &&
              covered(2 * i + 1, links[i].bandwidth);
  return idle;
}

}  // namespace

Platform::Platform(const Fabric& fabric, LatencyFactor latency_factor, bool prune, Transfers transfers,
                   bool simgrid_routes)
    : fabric_(fabric), latency_factor_(std::move(latency_factor)) {
  const bool fluid = transfers == Transfers::kFluid;
  if (!fluid) simgrid_routes = true;
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
    const double latency = l.port ? kPortLatency : 0.0;
    if (l.shared) {
      shared_[i] = zone->create_link(l.name, l.bandwidth);
      shared_[i]->set_latency(latency);
      shared_[i]->seal();
    } else {
      duplex_[i] = zone->create_split_duplex_link(l.name, l.bandwidth);
      duplex_[i]->set_latency(latency);
      duplex_[i]->seal();
    }
  }
  std::vector<char> idle = prune ? idle_links(fabric) : std::vector<char>(links.size(), 0);
  std::vector<Hop> hops;
  std::vector<sg4::LinkInRoute> route;
  const std::size_t pairs = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  route_latency_.assign(pairs, 0.0);
  if (fluid) {
    // One fluid link per shared link, two per split-duplex one (one per direction).
    std::vector<double> capacity;
    fluid_link_.assign(2 * links.size(), -1);
    for (std::size_t i = 0; i < links.size(); ++i) {
      fluid_link_[2 * i] = static_cast<int>(capacity.size());
      capacity.push_back(links[i].bandwidth);
      if (links[i].shared) {
        fluid_link_[2 * i + 1] = fluid_link_[2 * i];
      } else {
        fluid_link_[2 * i + 1] = static_cast<int>(capacity.size());
        capacity.push_back(links[i].bandwidth);
      }
    }
    fluid_ = std::make_unique<FluidNetwork>(std::move(capacity));
    route_first_.assign(pairs + 1, 0);
    end_links_.assign(4 * static_cast<std::size_t>(n), {-1, -1});
    end_hops_.assign(4 * static_cast<std::size_t>(n), kUnsetEnd);
  }
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b) {
      const std::size_t pair = static_cast<std::size_t>(a) * static_cast<std::size_t>(n) + static_cast<std::size_t>(b);
      if (fluid) route_first_[pair] = static_cast<std::uint32_t>(route_links_.size());
      if (a == b) continue;
      route.clear();
      fabric.route_into(a, b, hops);
      if (!links[static_cast<std::size_t>(hops.front().link)].port || !links[static_cast<std::size_t>(hops.back().link)].port)
        throw std::logic_error("fabric route " + std::to_string(a) + " -> " + std::to_string(b) +
                               " does not start and end at GPU ports");
      double full = 0.0;
      // The route's ends: its leading and trailing GPU ports and NICs; what lies between must never
      // limit a transfer for port phases to fit.
      std::size_t head = 0, tail = hops.size();
      auto end_link = [&](std::size_t k, bool up) {
        const FabricLink& l = links[static_cast<std::size_t>(hops[k].link)];
        return (l.port || l.nic) && !l.shared && hops[k].up == up;
      };
      while (head < hops.size() && end_link(head, true)) ++head;
      while (tail > head && end_link(tail - 1, false)) --tail;
      for (std::size_t k = head; k < tail; ++k) {
        const auto i = static_cast<std::size_t>(hops[k].link);
        if (!idle[i] && links[i].bandwidth < kUnlimitedBandwidth) port_phases_fit_ = false;
      }
      if (fluid) {
        const bool across = fabric.node_of(a) != fabric.node_of(b);
        auto keep = [&](int gpu, bool receiving, std::size_t from, std::size_t to) {
          const std::size_t slot = end_slot(gpu, across, receiving);
          if (end_hops_[slot] != kUnsetEnd) return;
          std::uint8_t count = 0;
          for (std::size_t k = from; k < to; ++k) {
            const auto i = static_cast<std::size_t>(hops[k].link);
            if (idle[i]) continue;
            if (count == end_links_[slot].size())
              throw std::logic_error("fabric route " + std::to_string(a) + " -> " + std::to_string(b) +
                                     " has more than two links at one end");
            end_links_[slot][count++] = fluid_link_[2 * i + (hops[k].up ? 0 : 1)];
          }
          end_hops_[slot] = count;
        };
        keep(a, false, 0, head);
        keep(b, true, tail, hops.size());
      }
      for (const Hop& h : hops) {
        const auto i = static_cast<std::size_t>(h.link);
        full += links[i].latency;
        if (idle[i]) continue;
        if (fluid) route_links_.push_back(fluid_link_[2 * i + (h.up ? 0 : 1)]);
        if (shared_[i])
          route.emplace_back(shared_[i]);
        else
          route.emplace_back(duplex_[i], h.up ? Dir::UP : Dir::DOWN);
      }
      if (fluid && route_links_.size() - route_first_[pair] > static_cast<std::size_t>(FluidNetwork::kMaxHops))
        throw std::logic_error("fabric route " + std::to_string(a) + " -> " + std::to_string(b) + " crosses more than " +
                               std::to_string(FluidNetwork::kMaxHops) + " links that can limit it");
      if (simgrid_routes)
        zone->add_route(hosts_[static_cast<std::size_t>(a)]->get_netpoint(),
                        hosts_[static_cast<std::size_t>(b)]->get_netpoint(), nullptr, nullptr, route, false);
      route_latency_[pair] = full;
    }
  if (fluid) route_first_[pairs] = static_cast<std::uint32_t>(route_links_.size());
  for (char i : idle) pruned_ += i;
  zone->seal();
  // Every transfer's latency comes from the callback: SimGrid calls it while the transfer starts,
  // inside Comm::start(), so the factor applies to that transfer alone.
  zone->get_network_model()->set_lat_factor_cb(
      [this](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& crossed,
             const std::unordered_set<sg4::NetZone*>&) {
        double own = 0.0;
        for (const sg4::Link* l : crossed) own += l->get_latency();
        return own > 0.0 ? next_latency_ / own : 1.0;
      });
}

double Platform::transfer_latency(int src, int dst, double bytes, double latency) const {
  const double route =
      route_latency_[static_cast<std::size_t>(src) * hosts_.size() + static_cast<std::size_t>(dst)];
  return std::max({latency, route * latency_factor_.at(bytes), kMinTransferLatency});
}

Platform::~Platform() {
  if (timer_ != nullptr) timer_->remove();
}

void Platform::send_end(int src, int dst, bool destination_end, double bytes, double latency, void* data) {
  if (!fluid_) throw std::logic_error("a transfer over one end of its route needs the fluid network");
  const auto payload = static_cast<std::uint64_t>(std::llround(bytes));
  const double wait = transfer_latency(src, dst, static_cast<double>(payload), latency);
  const int gpu = destination_end ? dst : src;
  const std::size_t slot = end_slot(gpu, fabric_.node_of(src) != fabric_.node_of(dst), destination_end);
  if (end_hops_[slot] == kUnsetEnd)
    throw std::logic_error("no route end of GPU " + std::to_string(gpu) + " for " + std::to_string(src) + " -> " +
                           std::to_string(dst));
  fluid_->start(sg4::Engine::get_clock(), wait, static_cast<double>(payload),
                std::span<const int>(end_links_[slot].data(), end_hops_[slot]),
                static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(data)));
  flush_soon();
}

sg4::CommPtr Platform::send(int src, int dst, double bytes, double latency, void* data) {
  const auto payload = static_cast<std::uint64_t>(std::llround(bytes));
  const double wait = transfer_latency(src, dst, static_cast<double>(payload), latency);
  if (fluid_) {
    const std::size_t pair = static_cast<std::size_t>(src) * hosts_.size() + static_cast<std::size_t>(dst);
    const std::span<const int> route(route_links_.data() + route_first_[pair],
                                     route_first_[pair + 1] - route_first_[pair]);
    fluid_->start(sg4::Engine::get_clock(), wait, static_cast<double>(payload), route,
                  static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(data)));
    flush_soon();
    return nullptr;
  }
  sg4::CommPtr comm = sg4::Comm::sendto_init(host(src), host(dst));
  comm->set_payload_size(payload);
  if (data != nullptr) comm->set_data(data);
  next_latency_ = wait;
  comm->start();
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

// The fluid network is solved once per instant, after every change of that instant (a timer at
// the current date runs after SimGrid's completions of the instant and before time moves on), then
// wakes SimGrid again at its next event.
void Platform::flush_soon() {
  const double now = sg4::Engine::get_clock();
  if (timer_ != nullptr) {
    if (timer_date_ <= now) return;
    timer_->remove();
  }
  timer_date_ = now;
  timer_ = simgrid::kernel::timer::Timer::set(now, [this] { on_timer(); });
}

void Platform::on_timer() {
  timer_ = nullptr;  // SimGrid deletes a timer once it has run
  const double now = sg4::Engine::get_clock();
  std::vector<std::uint64_t> done;
  fluid_->advance(now, done);
  for (const std::uint64_t token : done) done_callback_(reinterpret_cast<void*>(static_cast<std::uintptr_t>(token)));
  if (timer_ != nullptr) return;  // a completion changed the network: it is solved again at once
  const double next = fluid_->next_event();
  if (next == FluidNetwork::kNever) return;
  timer_date_ = std::max(next, now);
  timer_ = simgrid::kernel::timer::Timer::set(timer_date_, [this] { on_timer(); });
}

void Platform::set_port_bandwidth(int link, double bandwidth) {
  if (fluid_) {
    const double now = sg4::Engine::get_clock();
    for (const int d : {0, 1})
      fluid_->set_capacity(fluid_link_[2 * static_cast<std::size_t>(link) + static_cast<std::size_t>(d)], bandwidth, now);
    flush_soon();
    return;
  }
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
