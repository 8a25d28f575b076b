// `moesim place` (solve a placement), `place evaluate`, `place compare` (score placements on held-out
// traffic) and `place export` (vLLM / SGLang / Megatron expert maps). See docs/placement.md.
#pragma once

#include <vector>

#include "sim/cli/cli.hpp"

namespace moesim::cli {

void register_place_commands(std::vector<Command>& commands);

}  // namespace moesim::cli
