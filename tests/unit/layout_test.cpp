// The layout's arrows (docs/architecture.md): every #include of a project header points at the same
// room or one below it, common <- traces <- models <- sim/placement <- sim/engine <- sim/study <-
// sim/report <- sim/cli, with calibrate/ beside sim/ (it may use common, traces and models, never
// sim); SimGrid only in sim/engine, GLPK only in one file of sim/placement, CUDA only in calibrate/.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;

namespace {

// The rank of a room; a file may include rooms of a rank up to its own. calibrate/ ranks with the
// simulator's top but may not include sim/ at all (checked separately).
const std::vector<std::pair<std::string, int>> kRooms{
    {"common/", 0},      {"traces/", 1},    {"models/", 2},  {"sim/placement/", 3}, {"sim/engine/", 4},
    {"sim/study/", 5},   {"sim/report/", 6}, {"sim/cli/", 7}, {"sim/main.cpp", 8},   {"calibrate/", 8}};

int rank_of(const std::string& path) {
  for (const auto& [prefix, rank] : kRooms)
    if (path.starts_with(prefix)) return rank;
  return -1;
}

struct Include {
  std::string file, target;
  int line;
};

std::vector<Include> scan(const fs::path& root) {
  std::vector<Include> out;
  const std::regex re(R"(^\s*#\s*include\s*[<"]([^>"]+)[>"])");
  for (const char* top : {"common", "traces", "models", "sim", "calibrate"})
    for (const auto& e : fs::recursive_directory_iterator(root / top)) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".hpp" && ext != ".cu" && ext != ".in")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      std::ifstream in(e.path());
      std::string text;
      int n = 0;
      while (std::getline(in, text)) {
        ++n;
        std::smatch m;
        if (std::regex_search(text, m, re)) out.push_back({rel, m[1].str(), n});
      }
    }
  return out;
}

}  // namespace

TEST_CASE("layout: no room includes a room above it") {
  const auto includes = scan(moesim::testing::source_dir());
  CHECK(includes.size() > 500);
  int project = 0;
  for (const auto& inc : includes) {
    const int target = rank_of(inc.target);
    if (target < 0) continue;  // a system or library header
    ++project;
    INFO(inc.file << ":" << inc.line << " includes " << inc.target);
    CHECK(target <= rank_of(inc.file));
    if (inc.file.starts_with("calibrate/")) CHECK_FALSE(inc.target.starts_with("sim/"));
  }
  CHECK(project > 200);
}

TEST_CASE("layout: SimGrid only in the engine, GLPK in one placement file, CUDA only in calibrate") {
  std::set<std::string> glpk;
  for (const auto& inc : scan(moesim::testing::source_dir())) {
    INFO(inc.file << ":" << inc.line << " includes " << inc.target);
    if (inc.target.starts_with("simgrid/") || inc.target.starts_with("xbt/")) CHECK(inc.file.starts_with("sim/engine/"));
    if (inc.target == "glpk.h") {
      CHECK(inc.file.starts_with("sim/placement/"));
      glpk.insert(inc.file);
    }
    if (inc.target.starts_with("cuda") || inc.target.starts_with("cublas") || inc.target == "nccl.h")
      CHECK(inc.file.starts_with("calibrate/cuda/"));
  }
  CHECK(glpk.size() == 1);
}
