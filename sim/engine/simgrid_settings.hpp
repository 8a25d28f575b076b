// SimGrid settings ("name:value", as SimGrid's --cfg takes them) checked against SimGrid's own
// configuration before anything runs: each is applied to a throwaway engine with a one-host platform
// in a child process (SimGrid keeps its configuration per process, and refuses some values by
// aborting), on top of the engine's own settings, as simulate() applies them.
#pragma once

#include <string>

namespace moesim::sim {

// "" when SimGrid accepts `setting`, else SimGrid's reason (one line). Throws RunError when the
// child process cannot be started.
std::string simgrid_setting_problem(const std::string& setting);

}  // namespace moesim::sim
