// The SimGrid platform of a cluster, built from its Fabric (sim/engine/fabric.hpp): one host per
// GPU, one SimGrid link per fabric link (split duplex, bandwidths per direction, or shared), and the
// fabric's route for every ordered GPU pair (docs/simulator.md, "Platform"). Each GPU has private
// port links (its NVLink/PCIe port and its network port) so that one GPU's communication can be
// slowed without touching others'; each host has pstates so that its compute can be slowed by a
// contention factor. Must be built after the network model is configured and before the simulation.
#pragma once

#include <simgrid/s4u.hpp>

#include <vector>

#include "sim/engine/fabric.hpp"
#include "sim/engine/latency_factor.hpp"

namespace moesim::sim {

namespace sg4 = simgrid::s4u;

inline constexpr double kHostSpeed = 1e12;        // work units per second at full speed: 1 unit = 1 ps
inline constexpr double kSlowdownStep = 0.0005;   // pstate i runs at speed / (1 + i * step)
inline constexpr int kMaxSlowdownIndex = 8000;    // slowdown factors up to 5.0

class Platform {
 public:
  // `latency_factor`: a study's network/latency-factor setting, applied to every route's latency
  // (latency_factor.hpp). `prune`: leave out of the SimGrid routes every link that can never limit a
  // transfer (docs/simulator.md, "Platform"); false keeps every fabric link (tests compare).
  explicit Platform(const Fabric& fabric, LatencyFactor latency_factor = {}, bool prune = true);

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
  // after it starts; during that time it holds no bandwidth (SimGrid's latency phase).
  sg4::CommPtr send(int src, int dst, double bytes, double latency, void* data = nullptr);
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
  const Fabric& fabric_;
  std::vector<sg4::Host*> hosts_;
  std::vector<sg4::SplitDuplexLink*> duplex_;  // per fabric link, null for shared links
  std::vector<sg4::Link*> shared_;             // per fabric link, null for split-duplex links
  std::vector<GpuState> state_;
  LatencyFactor latency_factor_;
  double next_latency_ = 0.0;  // the latency of the transfer send() is starting
  int pruned_ = 0;
  std::vector<double> route_latency_;  // [a * gpus + b]: the fabric route's latency, s
};

}  // namespace moesim::sim
