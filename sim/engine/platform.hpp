// The SimGrid platform of a cluster, built from its Fabric (sim/engine/fabric.hpp): one host per
// GPU, one SimGrid link per fabric link (split duplex, bandwidths per direction, or shared), and the
// fabric's route for every ordered GPU pair (docs/simulator.md, "Platform"). Each GPU has private
// port links (its NVLink/PCIe port and its network port) so that one GPU's communication can be
// slowed without touching others'; each host has pstates so that its compute can be slowed by a
// contention factor. Must be built after the network model is configured and before the simulation.
#pragma once

#include <simgrid/s4u.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "sim/engine/fabric.hpp"
#include "sim/engine/fluid_network.hpp"
#include "sim/engine/latency_factor.hpp"

namespace moesim::sim {

namespace sg4 = simgrid::s4u;

inline constexpr double kHostSpeed = 1e12;        // work units per second at full speed: 1 unit = 1 ps
inline constexpr double kSlowdownStep = 0.0005;   // pstate i runs at speed / (1 + i * step)
inline constexpr int kMaxSlowdownIndex = 8000;    // slowdown factors up to 5.0

// Who moves the bytes of a transfer (docs/simulator.md, "Network fidelity"): SimGrid's flows, or the
// engine's fluid network (FluidNetwork), which shares the same links the same way, driven by SimGrid
// timers.
enum class Transfers { kSimGrid, kFluid };

class Platform {
 public:
  // `latency_factor`: a study's network/latency-factor setting, applied to every route's latency
  // (latency_factor.hpp). `prune`: leave out of the SimGrid routes every link that can never limit a
  // transfer (docs/simulator.md, "Platform"); false keeps every fabric link (tests compare).
  // `transfers`: kFluid moves every transfer in the fluid network; `simgrid_routes` false then
  // leaves the SimGrid routes out (nothing crosses them; an activity dump reads them).
  explicit Platform(const Fabric& fabric, LatencyFactor latency_factor = {}, bool prune = true,
                    Transfers transfers = Transfers::kSimGrid, bool simgrid_routes = true);
  ~Platform();
  Platform(const Platform&) = delete;
  Platform& operator=(const Platform&) = delete;

  sg4::Host* host(int gpu) const { return hosts_[static_cast<std::size_t>(gpu)]; }
  int gpus() const { return static_cast<int>(hosts_.size()); }
  const Fabric& fabric() const { return fabric_; }
  // Compute of `gpu` runs at speed / factor from now on (factor >= 1, quantised to kSlowdownStep).
  void set_compute_slowdown(int gpu, double factor);
  // Communication through `gpu`'s private ports runs at bandwidth / factor from now on.
  void set_comm_slowdown(int gpu, double factor);
  // The SimGrid link of a fabric link, and of one direction of it (a shared link: itself).
  sg4::Link* link(const Hop& hop) const;
  // Starts a transfer of `bytes` from `src` to `dst` whose first byte moves transfer_latency() s
  // after it starts; during that time it holds no bandwidth (SimGrid's latency phase). In the fluid
  // network it returns null and its end is reported to on_transfer_done's callback, with `data`.
  sg4::CommPtr send(int src, int dst, double bytes, double latency, void* data = nullptr);
  bool fluid() const { return fluid_ != nullptr; }
  // The fluid network's tolerance (FluidNetwork::set_tolerance).
  void set_network_tolerance(double tolerance) { fluid_->set_tolerance(tolerance); }
  // Fluid transfers: called with a transfer's `data` as it completes (SimGrid's own transfers
  // report through Activity::on_completion). It may start transfers and change slowdowns.
  void on_transfer_done(std::function<void(void*)> callback) { done_callback_ = std::move(callback); }
  const FluidNetwork* fluid_network() const { return fluid_.get(); }
  // Port phases (docs/simulator.md, "Port phases"): whether every link of every route that is not
  // a GPU port or a NIC can never limit a transfer (pruned or unlimited), so that the links that
  // share a phase's transfers are the ends of their routes alone.
  bool port_phases_fit() const { return port_phases_fit_; }
  // The fluid network only: a transfer over one end of the route from `src` to `dst`: the source's
  // end (its port, and its NIC across nodes) or, `destination_end`, the destination's. Waits the
  // whole route's latency as send() does.
  void send_end(int src, int dst, bool destination_end, double bytes, double latency, void* data);
  // The s a transfer waits before its first byte moves: `latency` (its operation's fixed cost,
  // docs/simulator.md "Collectives"), or its fabric route's latency times the study's latency factor
  // when that is longer.
  double transfer_latency(int src, int dst, double bytes, double latency) const;
  // Fabric links left out of the SimGrid routes (they can never limit a transfer).
  int pruned_links() const { return pruned_; }

 private:
  struct GpuState {
    double factor = 1.0;
    long pstate = 0;  // the host's pstate as last set (asking SimGrid costs more than remembering)
  };
  void set_port_bandwidth(int link, double bandwidth);
  void flush_soon();  // the fluid network changed: solve it at this instant, once all changes are in
  void on_timer();
  const Fabric& fabric_;
  std::vector<sg4::Host*> hosts_;
  std::vector<sg4::SplitDuplexLink*> duplex_;  // per fabric link, null for shared links
  std::vector<sg4::Link*> shared_;             // per fabric link, null for split-duplex links
  std::vector<GpuState> state_;
  LatencyFactor latency_factor_;
  double next_latency_ = 0.0;  // the latency of the transfer send() is starting
  int pruned_ = 0;
  std::vector<double> route_latency_;  // [a * gpus + b]: the fabric route's latency, s
  // The fluid network: its link of each fabric link and direction ([2 * link + (up ? 0 : 1)]), the
  // route of every ordered pair ([a * gpus + b] into route_links_), the timer of its next event.
  std::unique_ptr<FluidNetwork> fluid_;
  std::vector<int> fluid_link_;
  std::vector<std::uint32_t> route_first_;
  std::vector<int> route_links_;
  // Per GPU, the fluid links of its end of its routes: [end_slot(...)].
  static std::size_t end_slot(int gpu, bool across, bool receiving) {
    return 4 * static_cast<std::size_t>(gpu) + (across ? 2 : 0) + (receiving ? 1 : 0);
  }
  std::vector<std::array<int, 2>> end_links_;
  std::vector<std::uint8_t> end_hops_;
  bool port_phases_fit_ = true;
  simgrid::kernel::timer::Timer* timer_ = nullptr;
  double timer_date_ = 0.0;
  std::function<void(void*)> done_callback_;
};

}  // namespace moesim::sim
