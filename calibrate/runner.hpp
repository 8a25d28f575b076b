// Runs a plan on a device: every measurement in the plan's order, printing each console row as it
// completes, into one Measurements record. Stops with RunError when `interrupted` says so (checked
// between measurements), after which the device's destructor restores any limit it changed.
#pragma once

#include <functional>
#include <ostream>

#include "calibrate/measurements.hpp"
#include "calibrate/plan.hpp"

namespace moesim::calibrate {

Measurements run_plan(Device& device, const Plan& plan, std::ostream& log, const std::function<bool()>& interrupted);

}  // namespace moesim::calibrate
