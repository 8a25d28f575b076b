#include "sim/cli/study_args.hpp"

#include <filesystem>

#include "common/error.hpp"

namespace moesim::cli {

void add_study_options(po::options_description& opts, StudyArgs& args) {
  opts.add_options()("study", po::value(&args.study_path)->required(), "the study file (YAML)")(
      "output,o", po::value(&args.out_dir), "output folder (required unless --check)")(
      "set", po::value(&args.sets)->composing(), "override a study key: --set base.workload.steps=20 (repeatable)")(
      "cfg", po::value(&args.cfgs)->composing(),
      "a SimGrid setting for every variant, as SimGrid's --cfg takes it: --cfg network/model:CM02 (repeatable; after "
      "the study's simgrid list)")(
      "only", po::value(&args.only)->composing(),
      "run only the variants whose name matches this regular expression (searched anywhere in the name, as "
      "--benchmark_filter; repeatable: any may match), e.g. --only 'overlapped$'");
}

sim::Study load_study_args(const StudyArgs& args) {
  check_option_lengths("--set", args.sets);
  check_option_lengths("--cfg", args.cfgs);
  check_option_lengths("--only", args.only);
  sim::Study study = sim::load_study(args.study_path, args.sets);
  sim::add_simgrid_settings(study, args.cfgs);
  return study;
}

void check_output_folder(const std::string& out_dir, bool keep_going) {
  if (out_dir.empty()) return;
  std::error_code ec;
  const std::filesystem::path dir(out_dir);
  if (!std::filesystem::exists(dir, ec)) return;
  if (!std::filesystem::is_directory(dir, ec))
    throw common::UsageError(out_dir + " exists and is not a folder; choose another -o");
  if (!keep_going && !std::filesystem::is_empty(dir, ec))
    throw common::UsageError(out_dir + " is not empty; the run would refuse it without --resume or --force (see "
                             "--help), or choose another -o");
}

}  // namespace moesim::cli
