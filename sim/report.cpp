#include "sim/report.hpp"

#include "common/error.hpp"

namespace moesim::sim {

std::string write_report(const std::string& dir) {
  throw common::RunError("the report writer is not built yet (" + dir + ")");
}

}  // namespace moesim::sim
