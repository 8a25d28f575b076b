// `moesim run STUDY.yaml -o DIR`: runs every variant of a study and writes the results layout.
#include <chrono>
#include <filesystem>
#include <iostream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "sim/cli/cli.hpp"
#include "sim/cli/study_args.hpp"
#include "sim/runner.hpp"
#include "sim/study.hpp"
#include "sim/study_run.hpp"

namespace moesim::cli {

namespace fs = std::filesystem;

namespace {

// Refuses a non-empty output folder unless --force; creates it.
void prepare_output_dir(const std::string& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) throw common::UsageError(dir + " exists and is not a folder; choose another -o");
    if (!fs::is_empty(dir, ec) && !force)
      throw common::UsageError(dir + " is not empty; pass --force to write into it, or choose another -o");
  }
  fs::create_directories(dir, ec);
  if (ec) throw common::RunError("cannot create " + dir + ": " + ec.message());
}

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
                          " [--dump-activities FILE]",
                          "Runs every variant of a study in the SimGrid simulator and writes DIR/results.csv,\n"
                          "DIR/results.json and DIR/variants/NAME/ (result.json, timeline.json for Perfetto,\n"
                          "scenario.yaml). See docs/study-format.md.",
                          ctx);
  if (!vm) return common::kExitOk;
  const sim::Study study = load_study_args(a);
  if ((*vm)["check"].as<bool>()) {
    ctx.out << "ok: study " << study.name << " (" << study.source_file << "): " << study.variants.size() << " variants, baseline "
            << study.baseline << "\n";
    for (const auto& v : study.variants) ctx.out << "  " << v.name << "\n";
    return common::kExitOk;
  }
  if (a.out_dir.empty()) throw common::UsageError("missing -o DIR (the output folder); see moesim run --help");
  if (!dump_path.empty()) {
    if (study.variants.size() != 1)
      throw common::UsageError("--dump-activities records one simulation, but study " + study.name + " has " +
                               std::to_string(study.variants.size()) +
                               " variants; run a study without a sweep, or pin the swept key with --set");
    if (study.variants.front().scenario.overlap.timelines != sim::Timelines::kRequested)
      throw common::UsageError("--dump-activities records one simulation, but overlap.timelines is all; pass "
                               "--set base.overlap.timelines=requested");
    common::check_can_write(dump_path, (*vm)["force"].as<bool>());
  }
  prepare_output_dir(a.out_dir, (*vm)["force"].as<bool>());
  const bool quiet = (*vm)["quiet"].as<bool>();
  const auto wall0 = std::chrono::steady_clock::now();
  sim::RunOptions run_options;
  run_options.dump_activities = dump_path;
  std::vector<sim::VariantResult> results;
  nlohmann::json wall = nlohmann::json::object();
  for (std::size_t i = 0; i < study.variants.size(); ++i) {
    const auto& v = study.variants[i];
    const auto t0 = std::chrono::steady_clock::now();
    if (!quiet) ctx.err << "[" << i + 1 << "/" << study.variants.size() << "] " << v.name << "\n";
    results.push_back(sim::run_variant(
        v, [&](const std::string& what) {
          if (!quiet) ctx.err << "    simulated " << what << "\n";
        },
        run_options));
    wall[v.name] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  const nlohmann::json run_info = {
      {"date", sim::run_date_utc()},
      {"host", sim::run_host()},
      {"wall_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count()},
      {"variant_wall_s", wall}};
  sim::write_results(a.out_dir, study, results, run_info);
  ctx.out << sim::results_table(results, study.baseline);
  ctx.out << "Results: " << (fs::path(a.out_dir) / "results.csv").string() << ", " << (fs::path(a.out_dir) / "results.json").string()
          << "; per variant: " << (fs::path(a.out_dir) / "variants").string() << "/NAME/ (timeline.json opens in Perfetto)\n";
  return common::kExitOk;
}

}  // namespace

void register_run_commands(std::vector<Command>& commands) {
  commands.push_back({"run", "run a study's variants in the simulator and write results", run_command});
}

}  // namespace moesim::cli
