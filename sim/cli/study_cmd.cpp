// `moesim study`: placeholder until the study command lands.
#include "sim/cli/cli.hpp"

namespace moesim::cli {

void register_study_commands(std::vector<Command>&) {}

}  // namespace moesim::cli
