// From measurements to a profile: GEMM curves per dtype and shape (medians, made non-decreasing),
// the launch floor from grouped vs single GEMMs, collective curves, link efficiencies, contention
// grids (slowdown factors both ways), power by state and the cap/clock curves. Every section built
// from measurements says `source: measured`; what was not measured is left out, so the `base`
// profile supplies it when the profile is loaded.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "calibrate/measurements.hpp"
#include "models/profile.hpp"

namespace moesim::calibrate {

struct FitOptions {
  std::string name;       // profile name (file stem)
  std::string base;       // the reference profile's name
  std::string method;     // provenance text: tool, version, date, libraries, sample counts
};

// `base` is the loaded reference profile: its peaks, nominal figures and, where the power-limit sweep
// was not allowed, its cap and clock curves (copied with their own provenance).
models::Profile fit_profile(const Measurements& m, const models::Profile& base, const FitOptions& options);

// Launch floor (s) of grouped GEMMs: with G GEMMs measured one by one (sum S) and grouped (T),
// floor = (S - T) / (G - 1); the median over groups, clamped to [0, min_time]. 0 without groups.
double fit_launch_floor(const std::vector<GroupedRecord>& grouped, models::Dtype dtype, double min_time);
// y made non-decreasing (running maximum): a timing dip at a larger size is noise, not speed-up.
std::vector<double> monotone(std::vector<double> y);

// Rate of one PCIe generation's lane in bytes/s (after encoding): 3 -> 0.985e9 ... 5 -> 3.938e9.
double pcie_lane_rate(int generation);

// The profile text (models::profile_to_yaml), checked by parsing it back before anything is written.
std::string profile_text(const models::Profile& profile, const std::filesystem::path& path);
// Writes the raw JSON and then the profile, each atomically; with !overwrite neither replaces an
// existing file (both are checked before either is written).
void write_outputs(const models::Profile& profile, const Measurements& m, const std::filesystem::path& profile_path,
                   const std::filesystem::path& raw_path, bool overwrite);
// The same with the raw JSON given (a cluster run's, which adds every rank's records and the spread).
void write_outputs(const models::Profile& profile, const nlohmann::json& raw, const std::filesystem::path& profile_path,
                   const std::filesystem::path& raw_path, bool overwrite);
std::filesystem::path default_raw_path(const std::filesystem::path& profile_path);  // x.yaml -> x.raw.json

}  // namespace moesim::calibrate
