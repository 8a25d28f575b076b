// Runs a plan on a device: every measurement in the plan's order, printing each console row as it
// completes, into one Measurements record. Stops with RunError when `interrupted` says so (checked
// between measurements), after which the device's destructor restores any limit it changed.
// `with_peers(label, step)` wraps every step that communicates with other processes (NCCL collectives,
// contention and power states with NCCL traffic) in a cluster run: it meets the other ranks at
// `label` first and bounds the step's time (calibrate/cluster.hpp). Without it the step just runs.
#pragma once

#include <functional>
#include <ostream>

#include "calibrate/measurements.hpp"
#include "calibrate/plan.hpp"

namespace moesim::calibrate {

using PeerStep = std::function<void(const std::string& label, const std::function<void()>& step)>;
Measurements run_plan(Device& device, const Plan& plan, std::ostream& log, const std::function<bool()>& interrupted,
                      const PeerStep& with_peers = {});

}  // namespace moesim::calibrate
