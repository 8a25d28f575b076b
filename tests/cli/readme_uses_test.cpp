// The README's uses 2 and 3 run as written: every `$ moesim ...` and `$ moesim-calibrate ...` line of
// the sections "2. Calibrating on a new GPU cluster" and "3. Comparing placement strategies offline"
// runs, in order, in a fresh folder that sees the repository's traces/, tests/ and configs/ as a
// clone does, and prints the lines the README shows under it. Solver times ("0.24 s,") are the only
// text masked (and trailing blanks). Commands for the GPU machine (a profile that only calibration there writes) are left
// out. Use 1 (the default study) is the README's first command, which CI runs whole.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_program;
using moesim::testing::source_dir;
using moesim::testing::TempDir;

namespace {

struct Shown {
  std::size_t line = 0;  // in README.md, 1-based
  std::string command;   // without "$ " and a trailing "# comment"
  std::vector<std::string> output;
};

std::vector<Shown> shown_commands(const std::string& readme, const std::string& from, const std::string& to) {
  const auto b = readme.find(from), e = readme.find(to);
  REQUIRE(b != std::string::npos);
  REQUIRE(e != std::string::npos);
  REQUIRE(b < e);
  std::size_t line_no = static_cast<std::size_t>(std::count(readme.begin(), readme.begin() + static_cast<long>(b), '\n'));
  std::istringstream ss(readme.substr(b, e - b));
  std::vector<Shown> out;
  bool in_block = false;
  for (std::string line; std::getline(ss, line);) {
    ++line_no;
    if (line.rfind("```", 0) == 0) {
      in_block = !in_block;
      // A block's end ends the output of its last command: later blocks show other things.
      if (!out.empty() && !in_block && (out.back().output.empty() || out.back().output.back() != "<end>"))
        out.back().output.push_back("<end>");
      continue;
    }
    if (!in_block) continue;
    if (line.rfind("$ ", 0) == 0) {
      std::string cmd = line.substr(2);
      if (const auto hash = cmd.find(" #"); hash != std::string::npos) cmd = cmd.substr(0, hash);
      while (!cmd.empty() && cmd.back() == ' ') cmd.pop_back();
      out.push_back({line_no, cmd, {}});
    } else if (!out.empty() && (out.back().output.empty() || out.back().output.back() != "<end>")) {
      out.back().output.push_back(line);
    }
  }
  for (auto& s : out)
    if (!s.output.empty() && s.output.back() == "<end>") s.output.pop_back();
  return out;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) out.push_back(line);
  return out;
}

// Solver times masked, trailing blanks (which a table pads with and a README cannot keep) dropped.
std::string masked(const std::string& line) {
  static const std::regex seconds("[0-9]+\\.[0-9]+ s,");
  std::string out = std::regex_replace(line, seconds, "T s,");
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("readme: uses 2 and 3 run as written and print what the README shows") {
  const std::string readme = read_text(source_dir() / "README.md");
  const auto shown = shown_commands(readme, "### 2. Calibrating on a new GPU cluster", "## Routing traces");
  TempDir dir;
  for (const char* folder : {"traces", "tests", "configs"}) fs::create_directory_symlink(source_dir() / folder, dir / folder);
  const char* moesim_env = std::getenv("MOESIM_BIN");
  const char* calibrate_env = std::getenv("MOESIM_CALIBRATE_BIN");
  const std::string moesim = moesim_env ? moesim_env : std::string(MOESIM_BINARY_DIR) + "/sim/moesim";
  const std::string calibrate = calibrate_env ? calibrate_env : MOESIM_CALIBRATE_BIN;

  int ran = 0, compared = 0;
  for (const auto& s : shown) {
    CAPTURE(s.line);
    CAPTURE(s.command);
    if (s.command.find("my-h200") != std::string::npos) continue;  // needs the profile a GPU calibration writes
    REQUIRE(s.command.find_first_of("'\"\\|&;<>$`") == std::string::npos);  // words split on spaces, no shell
    std::vector<std::string> words;
    std::istringstream ws(s.command);
    for (std::string w; ws >> w;) words.push_back(w);
    REQUIRE(!words.empty());
    std::string program;
    if (words[0] == "moesim")
      program = moesim;
    else if (words[0] == "moesim-calibrate")
      program = calibrate;
    else
      FAIL("README.md:" << s.line << ": not a moesim command: " << s.command);
    std::vector<std::string> args = {"-c", "cd \"$1\" && shift && exec \"$@\"", "sh", dir.path().string(), program};
    args.insert(args.end(), words.begin() + 1, words.end());
    const auto r = run_program("/bin/sh", args);
    CHECK_MESSAGE(r.exit_code == 0, "README.md:" << s.line << " exits " << r.exit_code << ": " << r.err);
    ++ran;
    const auto got = lines_of(r.out);
    // The README shows the output's first lines (all of it for these commands), masked alike.
    REQUIRE_MESSAGE(got.size() >= s.output.size(), "README.md:" << s.line << " shows more lines than it prints:\n"
                                                                    << r.out);
    for (std::size_t i = 0; i < s.output.size(); ++i, ++compared)
      CHECK_MESSAGE(masked(got[i]) == masked(s.output[i]), "README.md:" << s.line + 1 + i << " shows\n  "
                                                                         << s.output[i] << "\nthe program prints\n  "
                                                                         << got[i]);
  }
  CHECK(ran >= 11);       // dry run, collective, split, five placements, compare, two exports
  CHECK(compared >= 30);  // the dry-run plan, the collective table, the solve lines, the comparison
}
