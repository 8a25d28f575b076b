// moesim-calibrate: a thin main over calibrate/cli.hpp. Signals only set a flag: the runner stops at
// the next measurement and the device's destructor restores any power limit or clock it changed. In a
// cluster run a step blocked by a dead peer even after its communication was aborted ends the process.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "calibrate/cli.hpp"

namespace moesim::calibrate {
CliEnvironment default_environment(std::function<bool()> interrupted) {
  return {[](const DeviceRequest& r) { return open_device(r); },
          [] { return list_devices(); },
          std::move(interrupted),
          build_description(),
          process_environment(),
          [](int code) { std::_Exit(code); }};
}
}  // namespace moesim::calibrate

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }
}  // namespace

int main(int argc, char** argv) {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  std::signal(SIGHUP, on_signal);
  const std::vector<std::string> args(argv + 1, argv + argc);
  return moesim::calibrate::calibrate_main(args, std::cout, std::cerr,
                                           moesim::calibrate::default_environment([] { return g_signal != 0; }));
}
