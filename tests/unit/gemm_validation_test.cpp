// FP8 GEMM times of the h100-sxm profile against DeepGEMM's published H800 measurements
// (models/reference/deepgemm/README_at_327ec92.md; H800 SXM has the H100's SMs, clocks and HBM3).
// The profile's FP8 table is DeepGEMM's persistent-tile kernel (tools/build_profiles.py), fitted to the
// 18 dense points, so their errors are fit residuals (its held-out errors, each shape or M left out in
// turn, are printed by `tools/build_profiles.py --tile-model`); the 10 grouped points (contiguous and
// masked layouts) were not fitted: the table's grouped rule (`grouped: persistent`,
// models::grouped_gemm_time) is checked on them. The tables it prints are docs/validation.md's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "models/costs.hpp"
#include "models/profile.hpp"
#include "tests/support/test_support.hpp"

namespace {

using namespace moesim::models;

struct Row {
  double groups = 1, m = 0, n = 0, k = 0, tflops = 0;
};

// The rows of the Markdown table that follows `heading` (cells: [groups,] M, N, K, "X TFLOPS", ...).
std::vector<Row> table_after(const std::string& text, const std::string& heading, bool grouped) {
  const auto at = text.find(heading);
  REQUIRE_MESSAGE(at != std::string::npos, "no table headed ", heading);
  std::istringstream in(text.substr(at));
  std::string line;
  std::getline(in, line);  // the heading
  std::vector<Row> rows;
  const std::regex cell(R"(\|\s*([0-9.]+)\s*(TFLOPS)?\s*)");
  bool in_table = false;
  while (std::getline(in, line)) {
    if (line.rfind('|', 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    std::vector<double> v;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), cell); it != std::sregex_iterator(); ++it)
      v.push_back(std::stod((*it)[1]));
    const std::size_t need = grouped ? 5 : 4;
    if (v.size() < need) continue;  // the header and separator rows
    Row r;
    std::size_t i = 0;
    if (grouped) r.groups = v[i++];
    r.m = v[i++], r.n = v[i++], r.k = v[i++], r.tflops = v[i];
    rows.push_back(r);
  }
  return rows;
}

struct Errors {
  double sum = 0.0, worst = 0.0;
  int n = 0;
  double mean() const { return sum / n; }
};

Errors compare(const Profile& p, const std::vector<Row>& rows, const char* title) {
  Errors e;
  std::printf("%s\n%7s %6s %6s %6s %12s %12s %8s\n", title, "groups", "M", "N", "K", "published", "model", "error");
  for (const Row& r : rows) {
    // The profile's grouped rule (the table's `grouped`, models::grouped_gemm_time); one group is one GEMM.
    const double t = grouped_gemm_time(p, Dtype::kFp8, std::vector<double>(static_cast<std::size_t>(r.groups), r.m), r.n, r.k);
    const double model = r.groups * gemm_flops(r.m, r.n, r.k) / t / 1e12;
    const double err = model / r.tflops - 1.0;
    std::printf("%7.0f %6.0f %6.0f %6.0f %12.0f %12.0f %+7.1f%%\n", r.groups, r.m, r.n, r.k, r.tflops, model, 100 * err);
    e.sum += std::fabs(err);
    e.worst = std::max(e.worst, std::fabs(err));
    ++e.n;
  }
  std::printf("mean |error| %.1f%%, worst %.1f%%\n\n", 100 * e.mean(), 100 * e.worst);
  return e;
}

}  // namespace

TEST_CASE("gemm: h100-sxm FP8 against DeepGEMM's H800 dense (fitted) and grouped (not fitted) measurements") {
  const Profile p = load_profile("h100-sxm");
  REQUIRE(p.gemm_table(Dtype::kFp8) != nullptr);
  const std::string text =
      moesim::testing::read_text(moesim::testing::reference_dir() / "deepgemm/README_at_327ec92.md");
  const std::vector<Row> dense = table_after(text, "### Normal GEMMs for dense models", false);
  const std::vector<Row> contiguous = table_after(text, "### Grouped GEMMs for MoE models (contiguous layout)", true);
  const std::vector<Row> masked = table_after(text, "### Grouped GEMMs for MoE models (masked layout)", true);
  REQUIRE(dense.size() == 18);
  REQUIRE(contiguous.size() == 4);
  REQUIRE(masked.size() == 6);
  const Errors d = compare(p, dense, "dense (fit residuals)");
  std::vector<Row> grouped = contiguous;
  grouped.insert(grouped.end(), masked.begin(), masked.end());
  const Errors g = compare(p, grouped, "grouped, contiguous then masked (not fitted)");
  // The bounds of the validation plan, 10% mean and 20% worst. Measured here: grouped (not fitted)
  // 7.6% / 15.6%; dense (fit residuals) 4.2% / 11.0%.
  CHECK(g.mean() < 0.10);
  CHECK(g.worst < 0.20);
  CHECK(d.mean() < 0.10);
  CHECK(d.worst < 0.20);
}
