#include "sim/cli/cli.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"
#include "sim/engine/engine.hpp"

namespace moesim::cli {

namespace {

std::vector<std::string> split_words(const std::string& words) {
  std::vector<std::string> out;
  std::istringstream ss(words);
  for (std::string w; ss >> w;) out.push_back(w);
  return out;
}

void print_version(std::ostream& out) {
  out << "moesim " << common::kVersion << " (revision " << common::kGitRevision << ", " << common::kBuildType
      << " build; SimGrid " << sim::simgrid_version() << ")\n";
}

// Help for a group of commands sharing `prefix` ("" for the top level, "trace" for trace ...).
void print_group_help(std::ostream& out, const std::vector<Command>& commands, const std::vector<std::string>& prefix) {
  const std::string p = common::join(prefix, " ");
  out << "usage: moesim " << (p.empty() ? "" : p + " ") << "COMMAND [options]\n";
  if (prefix.empty())
    out << "\nmoesim predicts MoE step latency, tail, throughput and energy on GPU clusters by replaying\n"
           "routing traces in a SimGrid simulation calibrated by real GPU measurements.\n";
  out << "\ncommands:\n";
  for (const auto& c : commands) {
    auto w = split_words(c.words);
    if (w.size() <= prefix.size() || !std::equal(prefix.begin(), prefix.end(), w.begin())) continue;
    std::string shown = c.words;
    out << "  " << shown << std::string(shown.size() < 24 ? 24 - shown.size() : 1, ' ') << c.summary << "\n";
  }
  out << "\nRun \"moesim " << (p.empty() ? "" : p + " ") << "COMMAND --help\" for a command's options.\n";
  if (prefix.empty()) out << "Options: --help, --version. Exit codes: 0 ok, 1 run failure, 2 usage or input error, 3 internal error.\n";
}

}  // namespace

std::optional<po::variables_map> parse_options(const Args& args, const po::options_description& options,
                                               const po::positional_options_description& positionals,
                                               const std::string& usage, const std::string& description,
                                               Context& ctx) {
  po::options_description all;
  po::options_description help_opt("Help");
  help_opt.add_options()("help,h", "print this help and exit");
  all.add(options).add(help_opt);
  po::variables_map vm;
  try {
    auto parsed = po::command_line_parser(args).options(all).positional(positionals).run();
    po::store(parsed, vm);
    if (vm.count("help")) {
      ctx.out << "usage: " << usage << "\n\n" << description << "\n\n" << options << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::too_many_positional_options_error&) {
    throw common::UsageError("too many arguments; usage: " + usage);
  } catch (const po::error& e) {
    throw common::UsageError(std::string(e.what()) + "; usage: " + usage + " (see --help)");
  }
  return vm;
}

void check_option_lengths(const std::string& option, const std::vector<std::string>& values) {
  for (const std::string& v : values)
    if (v.size() > kMaxOptionText)
      throw common::UsageError(option + " " + common::quoted(v, 80) + ": expected at most " +
                               std::to_string(kMaxOptionText) + " characters, got " + std::to_string(v.size()));
}

std::vector<Command> builtin_commands() {
  std::vector<Command> commands;
  register_trace_import_commands(commands);
  register_trace_stats_commands(commands);
  register_config_commands(commands);
  register_run_commands(commands);
  register_place_commands(commands);
  register_study_commands(commands);
  register_report_commands(commands);
  register_collective_commands(commands);
  std::stable_sort(commands.begin(), commands.end(),
                   [](const Command& a, const Command& b) { return a.words < b.words; });
  return commands;
}

int run_cli(const Args& argv, Context& ctx) {
  const auto commands = builtin_commands();
  if (argv.empty()) {
    print_group_help(ctx.err, commands, {});
    return common::kExitInputError;
  }
  if (argv[0] == "--help" || argv[0] == "-h" || argv[0] == "help") {
    print_group_help(ctx.out, commands, {});
    return common::kExitOk;
  }
  if (argv[0] == "--version" || argv[0] == "-V") {
    print_version(ctx.out);
    return common::kExitOk;
  }
  // Longest match of the leading words against a command's words.
  const Command* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& c : commands) {
    auto w = split_words(c.words);
    if (w.size() <= argv.size() && std::equal(w.begin(), w.end(), argv.begin()) && w.size() > best_len) {
      best = &c;
      best_len = w.size();
    }
  }
  if (best) return best->run(Args(argv.begin() + static_cast<std::ptrdiff_t>(best_len), argv.end()), ctx);

  // A group word ("trace") alone or with --help, or an unknown command.
  std::vector<std::string> prefix;
  for (const auto& word : argv) {
    if (word.starts_with("-")) break;
    std::vector<std::string> candidate = prefix;
    candidate.push_back(word);
    bool is_group = std::any_of(commands.begin(), commands.end(), [&](const Command& c) {
      auto w = split_words(c.words);
      return w.size() > candidate.size() && std::equal(candidate.begin(), candidate.end(), w.begin());
    });
    if (!is_group) break;
    prefix = candidate;
  }
  const std::size_t next = prefix.size();
  if (!prefix.empty() && (next == argv.size() || argv[next] == "--help" || argv[next] == "-h")) {
    print_group_help(next == argv.size() ? ctx.err : ctx.out, commands, prefix);
    return next == argv.size() ? common::kExitInputError : common::kExitOk;
  }
  std::vector<std::string> names;
  for (const auto& c : commands) {
    auto w = split_words(c.words);
    if (w.size() > next && std::equal(prefix.begin(), prefix.end(), w.begin())) names.push_back(w[next]);
  }
  names.erase(std::unique(names.begin(), names.end()), names.end());
  const std::string word = next < argv.size() ? argv[next] : "";
  const std::string where = prefix.empty() ? "moesim" : "moesim " + common::join(prefix, " ");
  throw common::UsageError("unknown command \"" + word + "\" for " + where + common::did_you_mean(word, names) +
                           "; commands: " + common::join(names, ", ") + " (see " + where + " --help)");
}

}  // namespace moesim::cli
