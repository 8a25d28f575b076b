// The SimGrid platform of a cluster: one host per GPU, full-duplex links with per-direction
// bandwidths, explicit routes (docs/simulator.md, "Platform"). Each GPU has private port links (its
// NVLink/PCIe port and its network port) so that one GPU's communication can be slowed without
// touching others'; each host has pstates so that its compute can be slowed by a contention factor.
// Must be built after the network model is configured and before the simulation runs.
#pragma once

#include <simgrid/s4u.hpp>

#include <vector>

#include "models/cluster.hpp"
#include "models/profile.hpp"

namespace moesim::sim {

namespace sg4 = simgrid::s4u;

inline constexpr double kHostSpeed = 1e12;        // work units per second at full speed: 1 unit = 1 ps
inline constexpr double kSlowdownStep = 0.0005;   // pstate i runs at speed / (1 + i * step)
inline constexpr int kMaxSlowdownIndex = 8000;    // slowdown factors up to 5.0

class Platform {
 public:
  // `speed_factor` (<= 1) scales every GPU's compute speed (a power cap). Throws InputError when the
  // cluster cannot be represented (reported with the cluster file's name).
  Platform(const models::Cluster& cluster, const models::Profile& profile, double speed_factor);

  sg4::Host* host(int gpu) const { return hosts_[static_cast<std::size_t>(gpu)]; }
  int gpus() const { return static_cast<int>(hosts_.size()); }
  // Compute of `gpu` runs at speed / factor from now on (factor >= 1, quantised to kSlowdownStep).
  void set_compute_slowdown(int gpu, double factor);
  // Communication through `gpu`'s private ports runs at bandwidth / factor from now on.
  void set_comm_slowdown(int gpu, double factor);
  // Effective per-direction bandwidth of the GPU's NVLink/PCIe port and of its network port.
  double port_bandwidth(int gpu) const { return ports_[static_cast<std::size_t>(gpu)].intra_bw; }
  // True when every route between two of GPUs 0..n-1 is exactly the source's port link (up) then
  // the destination's port link (down), all ports alike: no other link is shared. The condition of
  // the aggregated uniform all-to-all (docs/simulator.md, "Aggregated uniform all-to-all").
  bool private_star(int n) const { return n >= 1 && n <= star_gpus_; }

 private:
  struct Ports {
    sg4::SplitDuplexLink* intra = nullptr;
    sg4::SplitDuplexLink* net = nullptr;
    double intra_bw = 0.0;
    double net_bw = 0.0;
    double factor = 1.0;
    long pstate = 0;  // the host's pstate as last set (asking SimGrid costs more than remembering)
  };
  std::vector<sg4::Host*> hosts_;
  std::vector<Ports> ports_;
  int star_gpus_ = 0;  // GPUs 0..star_gpus_-1 form a private star (see private_star)
};

}  // namespace moesim::sim
