// The study report: DIR/report.html, one self-contained page (no network; data, styles and the
// chart code inline) built from a results folder's results.json and variants/NAME/result.json.
#pragma once

#include <string>

namespace moesim::sim {

// Reads DIR/results.json and DIR/variants/*/result.json and writes DIR/report.html atomically
// (replacing an older report). Throws common::InputError naming the file for a missing or malformed
// result. Returns the report's path.
std::string write_report(const std::string& dir);

}  // namespace moesim::sim
