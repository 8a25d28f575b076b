#include "sim/engine/lone_collective.hpp"

#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <cmath>
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "sim/engine/collectives.hpp"
#include "sim/engine/platform.hpp"

namespace moesim::sim {

SimResult simulate_lone_collective(const models::Cluster& cluster, const models::Profile& profile,
                                   models::CollectiveOp op, int gpus, const std::vector<double>& sizes) {
  if (gpus < 2 || gpus > cluster.total_gpus())
    throw common::InputError("a collective needs 2 to " + std::to_string(cluster.total_gpus()) + " GPUs of cluster " +
                             cluster.name + ", got " + std::to_string(gpus));
  xbt_log_control_set("root.thres:critical");
  // The engine's network model (sim/engine/engine.cpp): exact latency + bytes / bandwidth.
  std::vector<std::string> args{"moesim", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                                "--cfg=network/crosstraffic:0"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  sg4::Engine engine(&argc, argv.data());
  const Fabric fabric(cluster, profile);
  Platform platform(fabric);
  std::vector<int> group(static_cast<std::size_t>(gpus));
  std::iota(group.begin(), group.end(), 0);

  SimResult r;
  r.label = models::collective_op_name(op);
  for (double size : sizes) {
    const SizedCollective c = op == models::CollectiveOp::kAllToAll
                                  ? uniform_alltoall(fabric, profile, group, size)
                                  : ring_collective(fabric, profile, op, group, size);
    const double start = sg4::Engine::get_clock();
    std::vector<sg4::CommPtr> comms;
    for (const SizedTransfer& x : c.transfers) {
      comms.push_back(platform.send(x.src, x.dst, x.bytes, x.latency));
    }
    engine.run();
    r.step_latency.push_back(sg4::Engine::get_clock() - start);
  }
  r.measured_time = std::accumulate(r.step_latency.begin(), r.step_latency.end(), 0.0);
  return r;
}

}  // namespace moesim::sim
