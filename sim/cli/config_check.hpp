// `moesim config check`: loads and validates architecture and cluster configs (by name or path, with
// `--set` overrides) and prints one summary line each; the first invalid one is an InputError (exit 2).
// Registered by builtin_commands() through register_config_commands.
#pragma once

#include <vector>

#include "sim/cli/cli.hpp"

namespace moesim::cli {

void register_config_commands(std::vector<Command>& commands);  // config check

}  // namespace moesim::cli
