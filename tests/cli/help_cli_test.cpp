// The command-line reference as a user reads it: docs/cli.md, the README's synopsis blocks and
// `moesim COMMAND --help` all come from one declaration per command (the options and usage each
// command parses with), so they cannot disagree. `moesim help --markdown` regenerates docs/cli.md.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::source_dir;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// The command words listed under "commands:" by `moesim --help`: an independent listing of the registry.
std::vector<std::string> listed_commands() {
  const auto r = run_moesim({"--help"});
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> words;
  bool in_list = false;
  for (const auto& line : lines_of(r.out)) {
    if (line == "commands:") {
      in_list = true;
      continue;
    }
    if (in_list && line.empty()) break;
    if (in_list) {
      // "  trace import            summary": the words are separated by one space, the summary by several.
      const std::string body = line.substr(2);
      words.push_back(body.substr(0, body.find("  ")));
    }
  }
  return words;
}

}  // namespace

TEST_CASE("cli help: docs/cli.md is exactly what moesim help --markdown prints") {
  const auto r = run_moesim({"help", "--markdown"});
  REQUIRE(r.exit_code == 0);
  const std::string shipped = read_text(source_dir() / "docs" / "cli.md");
  CHECK_MESSAGE(r.out == shipped, "docs/cli.md is stale: regenerate it with build/sim/moesim help --markdown > docs/cli.md");
  // Every command of the registry has its section, with its own --help verbatim.
  const auto commands = listed_commands();
  REQUIRE(commands.size() >= 15);
  for (const auto& words : commands) {
    CAPTURE(words);
    CHECK(r.out.find("\n## moesim " + words + "\n") != std::string::npos);
    std::vector<std::string> args;
    std::istringstream ss(words);
    for (std::string w; ss >> w;) args.push_back(w);
    args.push_back("--help");
    const auto help = run_moesim(args);
    REQUIRE(help.exit_code == 0);
    CHECK(help.out.rfind("usage: moesim " + words, 0) == 0);
    CHECK(r.out.find("```text\n" + help.out + "```\n") != std::string::npos);
  }
}

TEST_CASE("cli help: moesim help COMMAND is COMMAND --help; bad help requests exit 2") {
  const auto a = run_moesim({"help", "trace", "generate"});
  const auto b = run_moesim({"trace", "generate", "--help"});
  REQUIRE(a.exit_code == 0);
  CHECK(a.out == b.out);
  // Three usage forms, one per source of the trace.
  CHECK(a.out.rfind("usage: moesim trace generate --architecture NAME", 0) == 0);
  CHECK(a.out.find("\n   or: moesim trace generate --fit SOURCE_TRACE") != std::string::npos);
  CHECK(a.out.find("\n   or: moesim trace generate --model M.json") != std::string::npos);
  CHECK(run_moesim({"help"}).out == run_moesim({"--help"}).out);

  const auto bad = run_moesim({"help", "--html"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("moesim help: unknown option \"--html\"") != std::string::npos);
  const auto unknown = run_moesim({"help", "trace", "imprt"});
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.err.find("did you mean") != std::string::npos);
}

TEST_CASE("cli help: the README's synopsis blocks are lines of moesim help --synopsis") {
  const auto r = run_moesim({"help", "--synopsis"});
  REQUIRE(r.exit_code == 0);
  const auto synopsis_lines = lines_of(r.out);
  const std::set<std::string> synopsis(synopsis_lines.begin(), synopsis_lines.end());
  // One line per usage form, each starting with its command's words.
  for (const auto& line : synopsis_lines) CHECK(line.rfind("moesim ", 0) == 0);
  CHECK(std::count_if(synopsis_lines.begin(), synopsis_lines.end(),
                      [](const std::string& l) { return l.rfind("moesim trace import ", 0) == 0; }) == 5);

  const auto readme = lines_of(read_text(source_dir() / "README.md"));
  int blocks = 0, checked = 0;
  for (std::size_t i = 0; i < readme.size(); ++i) {
    if (readme[i].rfind("<!-- synopsis:", 0) != 0) continue;
    ++blocks;
    REQUIRE(i + 1 < readme.size());
    REQUIRE(readme[i + 1] == "```");
    for (std::size_t j = i + 2; j < readme.size() && readme[j] != "```"; ++j, ++checked) {
      CAPTURE(j + 1);  // the README's line number
      CHECK_MESSAGE(synopsis.count(readme[j]) == 1,
                    "README.md:" << j + 1 << " is not a usage line of moesim help --synopsis: " << readme[j]);
    }
  }
  CHECK(blocks >= 3);  // study/run, placement, traces
  CHECK(checked >= 15);
}
