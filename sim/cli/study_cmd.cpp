// `moesim study STUDY.yaml -o DIR`: `moesim run` with resumable output folders, shards, a progress
// line and a placement cache; `moesim study merge DIR... -o OUT` joins the shards' folders.
#include <sys/ioctl.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "common/error.hpp"
#include "sim/cli/cli.hpp"
#include "sim/cli/study_args.hpp"
#include "sim/report/report.hpp"
#include "sim/study/runner.hpp"
#include "sim/study/study_file.hpp"
#include "sim/study/study_run.hpp"

namespace moesim::cli {

namespace fs = std::filesystem;

namespace {

// The progress line is redrawn only where stderr is the user's terminal.
bool err_is_terminal(const Context& ctx) { return &ctx.err == &std::cerr && isatty(STDERR_FILENO) == 1; }

std::size_t terminal_width() {
  winsize w{};
  if (ioctl(STDERR_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0) return w.ws_col;
  return 100;
}

// The table, where the results are, then the report, whose path comes last.
// A quiet shard (a batch job's log) leaves its partial table out: the files hold it, the merge prints it whole.
void print_outcome(const sim::StudyOutcome& outcome, const std::string& dir, bool no_table, Context& ctx) {
  if (!no_table) ctx.out << sim::results_table(outcome.rows, outcome.baseline);
  ctx.out << "Results: " << (fs::path(dir) / "results.csv").string() << ", "
          << (fs::path(dir) / "results.json").string() << "; per variant: " << (fs::path(dir) / "variants").string()
          << "/NAME/ (timeline.json opens in Perfetto)\n";
  if (outcome.rows.empty()) {
    ctx.err << "moesim: warning: no report written: " << dir << " holds no variants\n";
    return;
  }
  std::string report;
  try {
    report = sim::write_report(dir);
  } catch (const common::RunError& e) {
    // Until the report writer lands, a missing report is a warning, not a failed study.
    ctx.err << "moesim: warning: no report written: " << e.what() << "\n";
    return;
  }
  ctx.out << "Report: " << report << "\n";
}

int study_command(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  StudyArgs a;
  std::string shard_text, shared_placements;
  add_study_options(opts, a);
  opts.add_options()("check", po::bool_switch(), "validate the study and every variant (of the shard), then exit")(
      "resume", po::bool_switch(), "continue the study in a non-empty DIR: finished variants are not run again")(
      "force", po::bool_switch(), "write into a non-empty output folder and run every variant again")(
      "shard", po::value(&shard_text), "run shard i of N (1-based): variants i-1, i-1+N, ... in study order")(
      "placements", po::value(&shared_placements),
      "a placement folder shared by the shards: each placement is solved there once (the others wait and "
      "read it) and copied into DIR/placements/")(
      "quiet,q", po::bool_switch(), "no progress (with --shard, no table either)");
  po::positional_options_description pos;
  pos.add("study", 1);
  auto vm = parse_options(args, opts, pos,
                          "moesim study STUDY.yaml -o DIR [--set key.path=value ...] [--cfg name:value ...] [--check] [--resume] [--force]"
                          " [--only PATTERN] [--shard i/N] [--placements FOLDER] [--quiet]",
                          "Runs a study like moesim run (same output layout), with a progress line, placements solved\n"
                          "once per distinct input into DIR/placements/, --resume after an interruption, and --shard\n"
                          "to split the variants over processes or machines; moesim study merge joins the shards.\n"
                          "See docs/study-format.md, \"moesim study: resume, shards, merge\".",
                          ctx);
  if (!vm) return common::kExitOk;
  std::optional<sim::Shard> shard;
  if (vm->count("shard")) shard = sim::parse_shard(shard_text);
  const sim::Study study = load_study_args(a);
  const auto indices =
      sim::select_variants(study, sim::shard_variants(study.variants.size(), shard.value_or(sim::Shard{})), a.only);
  sim::parallel_jobs();  // a bad MOESIM_JOBS is refused before anything runs or is written
  if ((*vm)["check"].as<bool>()) {
    // --resume continues only a folder that holds a study run (its study.json).
    std::error_code ec;
    const bool resumable = (*vm)["resume"].as<bool>() && fs::exists(fs::path(a.out_dir) / "study.json", ec);
    check_output_folder(a.out_dir, resumable || (*vm)["force"].as<bool>());
    ctx.out << "ok: study " << study.name << " (" << study.source_file << "): " << study.variants.size()
            << " variants, baseline " << study.baseline;
    if (shard) ctx.out << "; shard " << shard->index << "/" << shard->count;
    if (shard || !a.only.empty()) ctx.out << (shard ? " runs " : "; runs ") << indices.size();
    ctx.out << "\n";
    for (std::size_t i : indices) ctx.out << "  " << study.variants[i].name << "\n";
    return common::kExitOk;
  }
  if (a.out_dir.empty()) throw common::UsageError("missing -o DIR (the output folder); see moesim study --help");
  if (indices.empty())
    ctx.err << "moesim: warning: shard " << shard->index << "/" << shard->count << " of study " << study.name
            << " has no variants (" << study.variants.size() << " variants in all)\n";
  sim::StudyRunOptions options;
  options.out_dir = a.out_dir;
  options.overrides = a.sets;
  // --cfg changes what runs, so it is part of the study's identity for --resume and merge.
  for (const auto& c : a.cfgs) options.overrides.push_back("--cfg=" + c);
  options.shard = shard;
  options.shared_placements = shared_placements;
  options.only = a.only;
  options.resume = (*vm)["resume"].as<bool>();
  options.force = (*vm)["force"].as<bool>();
  const bool terminal = err_is_terminal(ctx);
  sim::StudyProgress progress(ctx.err, terminal, (*vm)["quiet"].as<bool>(), indices.size(),
                              terminal ? terminal_width() : 100);
  const sim::StudyOutcome outcome = sim::run_study(study, options, progress);
  print_outcome(outcome, a.out_dir, shard && (*vm)["quiet"].as<bool>(), ctx);
  return common::kExitOk;
}

int merge_command(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  std::vector<std::string> dirs;
  std::string out_dir;
  opts.add_options()("dirs", po::value(&dirs)->composing(), "the shard folders (moesim study -o DIR --shard i/N)")(
      "output,o", po::value(&out_dir)->required(), "the merged output folder")("force", po::bool_switch(),
                                                                               "write into a non-empty output folder");
  po::positional_options_description pos;
  pos.add("dirs", -1);
  auto vm = parse_options(args, opts, pos, "moesim study merge DIR... -o OUT [--force]",
                          "Merges the shard folders of one study (same study file and --set options) into OUT: checks\n"
                          "that they cover every variant and agree where they overlap, copies variants/ and\n"
                          "placements/, and writes results.csv, results.json and the report as an unsharded run does.",
                          ctx);
  if (!vm) return common::kExitOk;
  if (dirs.empty()) throw common::UsageError("no folders to merge; usage: moesim study merge DIR... -o OUT [--force]");
  const sim::StudyOutcome outcome = sim::merge_studies(dirs, out_dir, (*vm)["force"].as<bool>());
  ctx.err << "merged " << dirs.size() << " folders: " << outcome.rows.size() << " variants\n";
  print_outcome(outcome, out_dir, false, ctx);
  return common::kExitOk;
}

}  // namespace

void register_study_commands(std::vector<Command>& commands) {
  commands.push_back({"study", "run a study with resume, shards, progress and a placement cache", study_command});
  commands.push_back({"study merge", "merge the shard folders of one study", merge_command});
}

}  // namespace moesim::cli
