#include "sim/cli/cli.hpp"

#include <algorithm>
#include <iostream>
#include <sstream>
#include <stdexcept>

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
  if (prefix.empty())
    out << "Options: --help, --version. \"moesim help --markdown\" prints the reference of every command\n"
           "(docs/cli.md). Exit codes: 0 ok, 1 run failure, 2 usage or input error, 3 internal error.\n";
}

std::vector<std::string> usage_forms(const std::string& usage) {
  std::vector<std::string> forms;
  std::istringstream ss(usage);
  for (std::string line; std::getline(ss, line);)
    if (!line.empty()) forms.push_back(line);
  return forms;
}

// The command's words at the start of a usage form: "moesim trace import --format ..." -> "moesim trace import".
std::string usage_words(const std::string& form) {
  std::vector<std::string> words;
  for (const auto& w : split_words(form)) {
    if (w.empty() || w[0] < 'a' || w[0] > 'z' ||
        !std::all_of(w.begin(), w.end(), [](char c) { return (c >= 'a' && c <= 'z') || c == '-'; }))
      break;
    words.push_back(w);
  }
  return common::join(words, " ");
}

// The help a command prints for --help, captured; the single source of every generated reference.
std::string command_help(const Command& c) {
  std::ostringstream out, err;
  Context sub{out, err, false};
  const int rc = c.run({"--help"}, sub);
  const std::string text = out.str();
  if (rc != common::kExitOk || !text.starts_with("usage: moesim " + c.words))
    throw std::logic_error("moesim " + c.words + " --help does not print its usage first (exit " + std::to_string(rc) +
                           ")");
  return text;
}

// The usage forms at the top of a help text ("usage: A" then "   or: B" lines).
std::vector<std::string> help_forms(const std::string& help) {
  std::vector<std::string> forms;
  std::istringstream ss(help);
  for (std::string line; std::getline(ss, line);) {
    if (line.starts_with("usage: "))
      forms.push_back(line.substr(7));
    else if (line.starts_with("   or: "))
      forms.push_back(line.substr(7));
    else
      break;
  }
  return forms;
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
      const auto forms = usage_forms(usage);
      for (std::size_t i = 0; i < forms.size(); ++i) ctx.out << (i == 0 ? "usage: " : "   or: ") << forms[i] << "\n";
      ctx.out << "\n" << description << "\n\n" << options << "\n";
      return std::nullopt;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    // One form is quoted whole; a command with several forms points to its --help, which lists them.
    const auto forms = usage_forms(usage);
    const std::string hint = forms.size() == 1 ? "usage: " + forms.front() + " (see --help)"
                                               : "see " + usage_words(forms.front()) + " --help for its usage";
    if (dynamic_cast<const po::too_many_positional_options_error*>(&e))
      throw common::UsageError("too many arguments; " + hint);
    throw common::UsageError(std::string(e.what()) + "; " + hint);
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

std::string markdown_reference(const std::vector<Command>& commands) {
  std::ostringstream md;
  md << "# Command-line reference\n\n"
        "<!-- Generated by `moesim help --markdown`; do not edit. -->\n"
        "Generated by `moesim help --markdown` from the declaration each command parses its options with, the\n"
        "same one its `--help` prints: a test fails when this file and the program disagree. Regenerate it with\n"
        "`build/sim/moesim help --markdown > docs/cli.md`. `moesim help COMMAND` is `moesim COMMAND --help`.\n\n"
        "Exit codes of every command: 0 ok, 1 run failure, 2 usage or input error (the message names the\n"
        "option, file, line or record), 3 internal error. The calibration binary, `moesim-calibrate`, has its\n"
        "own `--help`; see docs/calibration.md.\n\n"
        "| Command | What it does |\n| --- | --- |\n";
  for (const auto& c : commands) {
    std::string anchor = "moesim-" + c.words;
    std::replace(anchor.begin(), anchor.end(), ' ', '-');
    md << "| [`moesim " << c.words << "`](#" << anchor << ") | " << c.summary << " |\n";
  }
  for (const auto& c : commands) {
    std::string sentence = c.summary;
    if (!sentence.empty() && sentence[0] >= 'a' && sentence[0] <= 'z') sentence[0] = static_cast<char>(sentence[0] - 32);
    md << "\n## moesim " << c.words << "\n\n" << sentence << ".\n\n```text\n" << command_help(c) << "```\n";
  }
  return md.str();
}

std::string synopsis_lines(const std::vector<Command>& commands) {
  std::string out;
  for (const auto& c : commands)
    for (const auto& form : help_forms(command_help(c))) out += form + "\n";
  return out;
}

int run_cli(const Args& argv, Context& ctx) {
  const auto commands = builtin_commands();
  if (argv.empty()) {
    print_group_help(ctx.err, commands, {});
    return common::kExitInputError;
  }
  if (argv[0] == "--help" || argv[0] == "-h" || (argv[0] == "help" && argv.size() == 1)) {
    print_group_help(ctx.out, commands, {});
    return common::kExitOk;
  }
  if (argv[0] == "help") {
    // moesim help --markdown | --synopsis | COMMAND...
    if (argv.size() == 2 && argv[1] == "--markdown") {
      ctx.out << markdown_reference(commands);
      return common::kExitOk;
    }
    if (argv.size() == 2 && argv[1] == "--synopsis") {
      ctx.out << synopsis_lines(commands);
      return common::kExitOk;
    }
    if (argv[1].starts_with("-"))
      throw common::UsageError("moesim help: unknown option " + common::quoted(argv[1], 40) +
                               "; usage: moesim help [--markdown | --synopsis | COMMAND...]");
    Args words(argv.begin() + 1, argv.end());
    words.push_back("--help");
    return run_cli(words, ctx);
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
