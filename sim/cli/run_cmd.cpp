// `moesim run STUDY.yaml -o DIR`: runs every variant of a study and writes the results layout.
#include <filesystem>
#include <iostream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "sim/cli/cli.hpp"
#include "sim/cli/study_args.hpp"
#include "sim/study/runner.hpp"
#include "sim/study/study_file.hpp"
#include "sim/study/study_run.hpp"

namespace moesim::cli {

namespace fs = std::filesystem;

namespace {

int run_command(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  StudyArgs a;
  std::string dump_path;
  add_study_options(opts, a);
  opts.add_options()("check", po::bool_switch(), "validate the study and every variant, then exit")(
      "force", po::bool_switch(), "write into a non-empty output folder")(
      "quiet,q", po::bool_switch(), "no progress lines")(
      "dump-activities", po::value(&dump_path),
      "write every execution and transfer of the simulation to FILE, for moesim-replay (one variant, "
      "overlap.timelines: requested; see bench/replay/FORMAT.md)");
  po::positional_options_description pos;
  pos.add("study", 1);
  auto vm = parse_options(args, opts, pos,
                          "moesim run STUDY.yaml -o DIR [--set key.path=value ...] [--cfg name:value ...] [--check] [--force]"
                          " [--only PATTERN] [-q] [--dump-activities FILE]",
                          "Runs every variant of a study in the SimGrid simulator and writes DIR/results.csv,\n"
                          "DIR/results.json and DIR/variants/NAME/ (result.json, timeline.json for Perfetto,\n"
                          "scenario.yaml). See docs/study-format.md.",
                          ctx);
  if (!vm) return common::kExitOk;
  const sim::Study study = load_study_args(a);
  std::vector<std::size_t> all(study.variants.size());
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = i;
  const auto selected = sim::select_variants(study, all, a.only);
  sim::parallel_jobs();  // a bad MOESIM_JOBS is refused before anything runs or is written
  if ((*vm)["check"].as<bool>()) {
    check_output_folder(a.out_dir, (*vm)["force"].as<bool>());
    ctx.out << "ok: study " << study.name << " (" << study.source_file << "): " << study.variants.size() << " variants, baseline "
            << study.baseline;
    if (!a.only.empty()) ctx.out << "; runs " << selected.size();
    ctx.out << "\n";
    for (std::size_t i : selected) ctx.out << "  " << study.variants[i].name << "\n";
    return common::kExitOk;
  }
  if (a.out_dir.empty()) throw common::UsageError("missing -o DIR (the output folder); see moesim run --help");
  if (!dump_path.empty()) {
    if (selected.size() != 1)
      throw common::UsageError("--dump-activities records one simulation, but study " + study.name + " runs " +
                               std::to_string(selected.size()) +
                               " variants; pick one with --only NAME, run a study without a sweep, or pin the swept "
                               "key with --set");
    if (study.variants[selected.front()].scenario.overlap.timelines != sim::Timelines::kRequested)
      throw common::UsageError("--dump-activities records one simulation, but overlap.timelines is all; pass "
                               "--set base.overlap.timelines=requested");
    common::check_can_write(dump_path, (*vm)["force"].as<bool>());
  }
  // The same run as moesim study (one writer of the results folder), without the report and
  // resume: a non-empty folder needs --force.
  std::error_code ec;
  if (fs::exists(a.out_dir, ec) && fs::is_directory(a.out_dir, ec) && !fs::is_empty(a.out_dir, ec) &&
      !(*vm)["force"].as<bool>())
    throw common::UsageError(a.out_dir + " is not empty; pass --force to write into it, or choose another -o");
  sim::StudyRunOptions options;
  options.out_dir = a.out_dir;
  options.overrides = a.sets;
  for (const auto& c : a.cfgs) options.overrides.push_back("--cfg=" + c);
  options.force = (*vm)["force"].as<bool>();
  options.dump_activities = dump_path;
  options.only = a.only;
  sim::StudyProgress progress(ctx.err, false, (*vm)["quiet"].as<bool>(), selected.size());
  const sim::StudyOutcome outcome = sim::run_study(study, options, progress);
  ctx.out << sim::results_table(outcome.rows, outcome.baseline);
  ctx.out << "Results: " << (fs::path(a.out_dir) / "results.csv").string() << ", " << (fs::path(a.out_dir) / "results.json").string()
          << "; per variant: " << (fs::path(a.out_dir) / "variants").string() << "/NAME/ (timeline.json opens in Perfetto)\n";
  return common::kExitOk;
}

}  // namespace

void register_run_commands(std::vector<Command>& commands) {
  commands.push_back({"run", "run a study's variants in the simulator and write results", run_command});
}

}  // namespace moesim::cli
