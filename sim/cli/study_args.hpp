// The options `moesim run` and `moesim study` share: the study file (positional), -o DIR, --set
// overrides and --cfg SimGrid settings, declared once, and the study they load.
#pragma once

#include <string>
#include <vector>

#include "sim/cli/cli.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::cli {

struct StudyArgs {
  std::string study_path;
  std::string out_dir;
  std::vector<std::string> sets;  // --set key.path=value
  std::vector<std::string> cfgs;  // --cfg name:value
  std::vector<std::string> only;  // --only PATTERN (sim::select_variants)
};

// Adds study, output,o, set, cfg and only to `opts`, bound to `args`; the caller makes "study" positional.
void add_study_options(po::options_description& opts, StudyArgs& args);
// The study with its --set overrides applied and its --cfg settings appended to every variant.
sim::Study load_study_args(const StudyArgs& args);
// --check with -o: the folder rules the run applies first (sim::run_study), so that a check passes
// only where the run would start: an existing file is refused, and so is a non-empty folder unless
// `keep_going` (--resume or --force) says what to do with it. "" (no -o) passes.
void check_output_folder(const std::string& out_dir, bool keep_going);

}  // namespace moesim::cli
