// The paper tables of docs/validation.md are current: re-runs the smallest paper study (the overlap
// paper's FSDP study narrowed to the 4 x H100 node) through the real `moesim run` and requires every
// row of the doc's `overlap-h100` table to equal what tools/paper-tables.sh prints from this run, at
// the table's precision, and the table to hold exactly the run's variants.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::source_dir;
using moesim::testing::TempDir;

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, sep)) out.push_back(cell);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  const auto e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// The body rows of the markdown table between `<!-- papers:NAME:begin -->` and `...:end -->`, as cells.
std::vector<std::vector<std::string>> marked_table(const std::string& doc, const std::string& name) {
  std::vector<std::vector<std::string>> rows;
  const auto lines = moesim::testing::marked_lines(doc, name);
  for (std::size_t i = 2; i < lines.size(); ++i) {  // after the header and the --- row
    auto cells = split(lines[i], '|');
    REQUIRE(cells.size() >= 3);
    std::vector<std::string> row;
    for (std::size_t c = 1; c + 1 < cells.size(); ++c) row.push_back(trim(cells[c]));
    rows.push_back(row);
  }
  return rows;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * x);
  return buf;
}

// A variant's assigned value as the table prints it (the result keeps it as written in the study).
std::string as_text(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

std::string join(const std::vector<std::string>& cells) {
  std::string s;
  for (const auto& c : cells) s += "| " + c + " ";
  return s + "|";
}

}  // namespace

TEST_CASE("papers: the overlap-h100 table of docs/validation.md is what the shipped study gives now") {
  TempDir dir;
  const fs::path out = dir / "out";
  const auto study = (source_dir() / "configs" / "papers" / "overlap-fsdp.yaml").string();
  const auto r = run_moesim({"run", study, "-o", out.string(), "-q", "--set", "sweep.cluster=[h100-sxm-4gpu]"});
  CAPTURE(r.err);
  REQUIRE(r.exit_code == 0);

  // The run's rows, formatted as tools/paper-tables.sh formats them.
  const auto lines = split(read_text(out / "results.csv"), '\n');
  REQUIRE(lines.size() >= 2);
  const auto header = split(lines[0], ',');
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* c : {"variant", "architecture", "sequential_p50_s", "overlapped_p50_s", "ideal_p50_s", "compute_slowdown"})
    REQUIRE_MESSAGE(col.count(c), c);
  std::vector<std::vector<std::string>> expected;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    const auto cells = split(lines[i], ',');
    auto at = [&](const char* c) { return cells.at(col[c]); };
    const auto result = nlohmann::json::parse(read_text(out / "variants" / at("variant") / "result.json"));
    const double s = std::stod(at("sequential_p50_s"));
    const double o = std::stod(at("overlapped_p50_s"));
    const double ideal = std::stod(at("ideal_p50_s"));
    const double slowdown = std::stod(at("compute_slowdown"));
    // The physics the table rests on, before its digits.
    CHECK(ideal <= o);
    CHECK(o < s);
    CHECK(slowdown > 0.0);
    const auto& assigned = result["variant"]["assignments"];
    expected.push_back({at("architecture"), as_text(assigned.at("workload.sequence_length")),
                        as_text(assigned.at("workload.batch")),
                        fixed(o, 3), fixed(ideal, 3), fixed(s, 3), pct(slowdown), pct(s / o - 1.0), pct(o / ideal - 1.0)});
  }
  REQUIRE(expected.size() == 16);  // two models x two sequence lengths x four batch sizes

  const auto doc = read_text(source_dir() / "docs" / "validation.md");
  const auto table = marked_table(doc, "overlap-h100");
  CHECK_MESSAGE(table.size() == expected.size(),
                "regenerate the table: sh tools/paper-tables.sh overlap OUT (see docs/validation.md)");
  for (const auto& row : expected) {
    CAPTURE(join(row));
    bool found = false;
    for (const auto& t : table)
      if (t.size() >= 3 && t[0] == row[0] && t[1] == row[1] && t[2] == row[2]) {
        found = true;
        CHECK(join(t) == join(row));
      }
    CHECK_MESSAGE(found, "no row for this model, sequence length and batch in docs/validation.md's overlap-h100 table");
  }
}
