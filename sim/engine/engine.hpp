// One simulation: a workload replayed on a cluster's SimGrid platform under one overlap schedule
// (docs/simulator.md). Each step becomes a graph of compute tasks (SimGrid Execs on the GPU's host,
// in stream order) and transfers (SimGrid Comms between GPU hosts) started lazily as their
// predecessors complete. Contention lives in the engine: while a transfer touches a GPU that is
// computing, that GPU's compute runs at the profile's slowed rate (host pstate) and its ports carry
// the slowed bandwidth, and both recover the moment the overlap ends.
// simulate() creates a SimGrid engine: call it once per process (run_isolated() forks for that).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/placement/placement.hpp"
#include "sim/engine/engine_input.hpp"
#include "sim/engine/isolate.hpp"
#include "sim/engine/result.hpp"
#include "sim/engine/step_source.hpp"

namespace moesim::sim {

SimResult simulate(const EngineInput& input);

// The SimGrid version the engine was built with ("3.32"), for result files' context blocks.
std::string simgrid_version();

}  // namespace moesim::sim
