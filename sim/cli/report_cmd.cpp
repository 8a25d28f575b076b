// `moesim report`: placeholder until the report command lands.
#include "sim/cli/cli.hpp"

namespace moesim::cli {

void register_report_commands(std::vector<Command>&) {}

}  // namespace moesim::cli
