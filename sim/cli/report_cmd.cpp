// `moesim report DIR [-o FILE] [--force]`: (re)builds the study report of a results folder.
#include "common/error.hpp"
#include "sim/cli/cli.hpp"
#include "sim/report/report.hpp"

namespace moesim::cli {

namespace {

int report_command(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  std::string dir, file;
  opts.add_options()("dir", po::value(&dir)->required(), "the results folder `moesim run -o DIR` wrote")(
      "output,o", po::value(&file), "write the page here instead of DIR/report.html")(
      "force", po::bool_switch(), "replace an existing -o FILE");
  po::positional_options_description pos;
  pos.add("dir", 1);
  auto vm = parse_options(args, opts, pos, "moesim report DIR [-o FILE] [--force]",
                          "Builds DIR/report.html from DIR/results.json and DIR/variants/NAME/result.json: one\n"
                          "self-contained page (no network) with the results table and six charts (step latency,\n"
                          "its distribution, per-layer tails, per-rank token load, energy against p99 with the\n"
                          "Pareto front, the three timelines). DIR/report.html is replaced; an existing -o FILE\n"
                          "needs --force. See docs/report.md.",
                          ctx);
  if (!vm) return common::kExitOk;
  const std::string written = file.empty() ? sim::write_report(dir) : sim::write_report(dir, file, (*vm)["force"].as<bool>());
  ctx.out << "Report: " << written << " (open it in a browser; it needs no network)\n";
  return common::kExitOk;
}

}  // namespace

void register_report_commands(std::vector<Command>& commands) {
  commands.push_back({"report", "build the HTML report (charts and table) of a results folder", report_command});
}

}  // namespace moesim::cli
