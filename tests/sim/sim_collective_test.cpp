// Self-consistency (docs/validation.md, rung 1): a collective simulated alone on a cluster, with
// the transfers the engine uses for it, takes the time of the profile table it comes from, within
// 1%, at every size of every table of every shipped profile on every shipped cluster where the
// table's ranks fit (one node for intra-node tables; switch, NVLink mesh and multi-node clusters).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>

#include "models/cluster.hpp"
#include "models/profile.hpp"
#include "sim/engine/isolate.hpp"
#include "sim/engine/lone_collective.hpp"
#include "tests/support/test_support.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> shipped(const char* kind) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(testing::source_dir() / "configs" / kind))
    if (e.path().extension() == ".yaml") out.push_back(e.path().stem().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("collectives: every shipped profile's tables are reproduced alone within 1% on every shipped cluster") {
  int checked = 0;
  for (const auto& profile_name : shipped("profiles")) {
    const models::Profile profile = models::load_profile(profile_name);
    for (const auto& cluster_name : shipped("clusters")) {
      const models::Cluster cluster = models::load_cluster(cluster_name);
      for (const auto& curve : profile.collectives) {
        const bool intra = curve.scope == "intra_node";
        const bool fits = intra ? curve.ranks <= cluster.gpus_per_node
                                : curve.ranks > cluster.gpus_per_node && curve.ranks <= cluster.total_gpus();
        if (!fits || curve.ranks < 2) continue;
        const sim::SimResult r = sim::run_isolated(
            [&] { return sim::simulate_lone_collective(cluster, profile, curve.op, curve.ranks, curve.bytes); });
        REQUIRE(r.step_latency.size() == curve.bytes.size());
        for (std::size_t i = 0; i < curve.bytes.size(); ++i) {
          INFO(profile_name << " on " << cluster_name << ": " << models::collective_op_name(curve.op) << " x " << curve.ranks << " at "
                            << curve.bytes[i] << " B: simulated " << r.step_latency[i] << " s, table " << curve.time[i]);
          CHECK(r.step_latency[i] / curve.time[i] == doctest::Approx(1.0).epsilon(0.01));
          ++checked;
        }
      }
    }
  }
  CHECK(checked > 1000);
}

TEST_CASE("collectives: 8-GPU all-reduce bus bandwidth within 5% of Azure's nccl-tests tables (A100, H100, H200)") {
  const models::Cluster node = models::load_cluster("h100-sxm-8gpu");  // one 8-GPU NVSwitch node, as Azure's ND
  const std::vector<std::pair<std::string, std::string>> gpus{
      {"a100-sxm", "ND_A100_v4_results.md"}, {"h100-sxm", "ND_H100_v5_results.md"}, {"h200", "ND_H200_v5_results.md"}};
  for (const auto& entry : gpus) {
    CAPTURE(entry.first);
    std::vector<double> sizes, published;
    std::ifstream in(testing::reference_dir() / "azure" / entry.second);
    const std::regex row(R"(^\|\s*(\d+)([KMG])\s*\|\s*([\d.]+)\s*\|)");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (!std::regex_search(line, m, row)) continue;
      // Azure's labels are rounded powers of two (1K ... 65K = 2^16, 132K = 2^17 ... 8G = 2^33).
      sizes.push_back(std::ldexp(1.0, 10 + static_cast<int>(sizes.size())));
      published.push_back(std::stod(m[3]));
    }
    REQUIRE(sizes.size() == 24);
    const models::Profile profile = models::load_profile(entry.first);
    const sim::SimResult r = sim::run_isolated(
        [&] { return sim::simulate_lone_collective(node, profile, models::CollectiveOp::kAllReduce, 8, sizes); });
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      const double busbw = sizes[i] / r.step_latency[i] / 1e9 * 2.0 * 7.0 / 8.0;
      INFO(sizes[i] << " B: simulated " << busbw << " GB/s, Azure " << published[i]);
      CHECK(std::abs(busbw / published[i] - 1.0) <= 0.05);
    }
  }
}
