// The moesim-calibrate command line: measure (default), --list-devices, --dry-run, and `validate`.
// Everything here is host code; the device comes in through `CliEnvironment`, so tests drive the
// whole flow with a fake device. Exit codes: 0 ok, 1 run failure (no GPU included), 2 usage or
// input error (an existing output without --force included), 3 internal error.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "calibrate/cluster.hpp"
#include "calibrate/device.hpp"

namespace moesim::calibrate {

struct CliEnvironment {
  std::function<std::unique_ptr<Device>(const DeviceRequest&)> open_device;
  std::function<std::vector<std::string>()> list_devices;
  std::function<bool()> interrupted;  // a signal arrived
  std::string build = "unknown build";  // build_description()
  EnvLookup environment;                // the launcher's variables; empty: this process's environment
  // Ends the process when a step shared with other ranks stays blocked even after its communication
  // was aborted (main: _exit). Empty: the run waits for the step.
  std::function<void(int)> hard_exit;
};
// The real device entry points (defined beside main, as they need the CUDA or no-CUDA part).
CliEnvironment default_environment(std::function<bool()> interrupted);

// `args` excludes the program name.
int calibrate_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err, const CliEnvironment& env);

// The reference profile for a device name: h200, h100-sxm or a100-sxm (h100-sxm when unknown).
std::string base_profile_for(const std::string& device_name);
// A traffic matrix file: `ranks` rows of `ranks` non-negative numbers (commas or spaces); InputError
// naming the file and line otherwise.
std::vector<double> read_traffic_matrix(const std::string& path, int ranks);

}  // namespace moesim::calibrate
