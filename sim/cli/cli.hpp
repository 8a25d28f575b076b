// Subcommand plumbing of the moesim executable. A command is registered under its words ("trace
// import") by an explicit register_* function; it parses its own options with Boost.Program_options
// through parse_options (unknown options and bad values become UsageError, `--help` prints the
// command's usage), runs, and returns an exit code. Errors are thrown as common:: errors; only main()
// turns them into exit codes.
#pragma once

#include <functional>
#include <iosfwd>
#include <optional>
#include <cstddef>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

namespace moesim::cli {

namespace po = boost::program_options;

struct Context {
  std::ostream& out;
  std::ostream& err;
  bool out_is_terminal = false;
};

using Args = std::vector<std::string>;  // the arguments after the command's words

struct Command {
  std::string words;    // "trace import"
  std::string summary;  // one line for the parent's --help
  std::function<int(const Args&, Context&)> run;
};

// Parses `args` against `options` (plus a built-in --help) and positionals. Returns nullopt after
// printing help when --help was given. `usage` is the synopsis ("moesim trace stats [options] TRACE"),
// several forms separated by '\n' where a command has several ("moesim trace import"). These calls are
// the one declaration of a command's interface: `--help`, `moesim help --markdown` (docs/cli.md) and
// `moesim help --synopsis` (the README's synopsis blocks, checked by a test) all print from them.
std::optional<po::variables_map> parse_options(const Args& args, const po::options_description& options,
                                               const po::positional_options_description& positionals,
                                               const std::string& usage, const std::string& description,
                                               Context& ctx);

// The registry: every built-in command, in the order --help lists them.
// The longest --set or --cfg option accepted (key and value): a longer one is a UsageError that
// quotes its start, never the whole text.
constexpr std::size_t kMaxOptionText = 4096;
void check_option_lengths(const std::string& option, const std::vector<std::string>& values);

std::vector<Command> builtin_commands();

// Registration functions, one per command file.
void register_trace_import_commands(std::vector<Command>& commands);  // import, convert, split
void register_trace_stats_commands(std::vector<Command>& commands);   // stats, generate
void register_config_commands(std::vector<Command>& commands);        // config check
void register_run_commands(std::vector<Command>& commands);           // run
void register_place_commands(std::vector<Command>& commands);         // place, place evaluate/compare/export
void register_study_commands(std::vector<Command>& commands);         // study, study merge
void register_report_commands(std::vector<Command>& commands);        // report
void register_collective_commands(std::vector<Command>& commands);    // collective

// The reference of every command, generated from each command's own --help: Markdown (docs/cli.md)
// or the synopsis lines alone, one usage form per line.
std::string markdown_reference(const std::vector<Command>& commands);
std::string synopsis_lines(const std::vector<Command>& commands);

// Runs the command line (argv without the program name); the whole CLI, for main() and tests.
int run_cli(const Args& argv, Context& ctx);

}  // namespace moesim::cli
