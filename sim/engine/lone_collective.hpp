// A collective operation alone on a cluster, as nccl-tests measures it (docs/simulator.md,
// "Collectives"): the transfers the engine uses for it (sim/engine/collectives.hpp) on the platform
// the engine builds, one size after another, each timed from its start to its last transfer's end.
// Creates a SimGrid engine: call it once per process (run_isolated()).
#pragma once

#include <vector>

#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/engine/result.hpp"

namespace moesim::sim {

// The first `gpus` GPUs of the cluster (node-major, so a group larger than a node spans nodes)
// run `op` at each of `sizes` (bytes, nccl-tests' size); step_latency of the result holds the
// simulated time of each size, in order.
SimResult simulate_lone_collective(const models::Cluster& cluster, const models::Profile& profile,
                                   models::CollectiveOp op, int gpus, const std::vector<double>& sizes);

}  // namespace moesim::sim
