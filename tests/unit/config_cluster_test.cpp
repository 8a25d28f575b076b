#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/yaml.hpp"
#include "models/cluster.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UsageError;
using moesim::common::YamlDocument;
using moesim::models::Cluster;
using moesim::models::FabricKind;
using moesim::models::load_cluster;
using moesim::models::parse_cluster;
using moesim::models::TopologyKind;

namespace fs = std::filesystem;

namespace {


Cluster parse(const std::string& text) {
  auto doc = YamlDocument::load_string(text, "c.yaml");
  return parse_cluster(doc.root(), "c");
}

std::string parse_error(const std::string& text) {
  return error_of([&] { parse(text); });
}

std::string replace(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  return text.replace(at, from.size(), to);
}

// Two nodes of 8 GPUs, 2 NICs per node (gpu_nic left to the default), one switch.
const std::string kCluster = R"(schema_version: 1
kind: cluster
nodes: 2
gpus_per_node: 8
gpu:
  kind: h200-sxm
  memory: 141GiB
intra_node:
  fabric: nvswitch
  bandwidth: 450GBps
  latency: 1us
nics:
  per_node: 2
  bandwidth: 400Gbps
  latency: 2us
inter_node:
  topology: single_switch
  switch_latency: 500ns
)";

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

fs::path bad(const std::string& name) { return moesim::testing::test_data_dir() / "configs" / (name + ".yaml"); }

struct BadCase {
  std::string file;
  std::string position;
  std::string key_path;
  std::string fragment;
};

const std::vector<BadCase> kBadClusters = {
    {"bad_cluster_unknown_key", "5:1", "gpus_per_nod", "unknown key (did you mean \"gpus_per_node\"?)"},
    {"bad_cluster_nested_unknown_key", "11:3", "intra_node.bandwith", "unknown key (did you mean \"bandwidth\"?)"},
    {"bad_cluster_missing_key", "14:3", "nics.bandwidth", "required key \"bandwidth\" is missing in nics"},
    {"bad_cluster_wrong_type", "6:6", "gpu", "expected a map of keys, got \"h200-sxm\""},
    {"bad_cluster_out_of_range", "5:16", "gpus_per_node", "expected an integer between 1 and 1024, got \"0\""},
    {"bad_cluster_bad_unit", "11:14", "intra_node.bandwidth",
     "expected a bandwidth with a unit (e.g. \"450GBps\"), got \"450GBs\""},
    {"bad_cluster_missing_unit", "15:14", "nics.bandwidth",
     "expected a bandwidth with a unit (e.g. \"450GBps\"), got \"400\""},
    {"bad_cluster_wrong_unit_kind", "12:12", "intra_node.latency",
     "expected a time with a unit (e.g. \"2us\"), got \"1GBps\""},
    {"bad_cluster_bad_enum", "10:11", "intra_node.fabric", "got \"nvswich\" (did you mean \"nvswitch\"?)"},
    {"bad_cluster_gpu_nic_short", "17:12", "nics.gpu_nic",
     "expected one NIC index per GPU of a node (8 entries), got 7"},
    {"bad_cluster_nic_index", "17:34", "nics.gpu_nic[7]", "expected an integer between 0 and 7, got \"8\""},
    {"bad_cluster_unused_nic", "17:12", "nics.gpu_nic", "got no GPU on NIC 7"},
    {"bad_cluster_topology_key", "21:3", "inter_node.spine_latency", "unknown key"},
    {"bad_cluster_fat_tree_leaves", "21:9", "inter_node.down", "(nodes x nics.per_node = 16), got 8 leaves"},
    {"bad_cluster_fat_tree_levels", "21:9", "inter_node.down", "expected one entry per fat-tree level (2), got 1"},
    {"bad_cluster_wrong_kind", "3:7", "kind", "expected \"cluster\""},
};

}  // namespace

TEST_CASE("cluster: a valid file becomes the struct, in SI units") {
  const Cluster c = parse(kCluster);
  CHECK(c.name == "c");
  CHECK(c.num_nodes == 2);
  CHECK(c.gpus_per_node == 8);
  CHECK(c.total_gpus() == 16);
  CHECK(c.gpu_kind == "h200-sxm");
  CHECK(c.gpu_memory == doctest::Approx(141 * kGiB));
  CHECK(c.intra_node.kind == FabricKind::kNvswitch);
  CHECK(c.intra_node.bandwidth == doctest::Approx(450e9));
  CHECK(c.intra_node.latency == doctest::Approx(1e-6));
  CHECK(c.nics.per_node == 2);
  CHECK(c.nics.bandwidth == doctest::Approx(50e9));  // 400 Gb/s
  CHECK(c.nics.latency == doctest::Approx(2e-6));
  // Without gpu_nic, consecutive GPUs share a NIC.
  CHECK(c.nics.gpu_nic == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(c.inter_node.topology == TopologyKind::kSingleSwitch);
  CHECK(c.inter_node.switch_latency == doctest::Approx(0.5e-6));
  CHECK(c.inter_node.switch_bandwidth == 0.0);  // non-blocking
}

TEST_CASE("cluster: GPU, node and NIC helpers") {
  const Cluster c = parse(kCluster);
  CHECK(c.node_of(0) == 0);
  CHECK(c.node_of(7) == 0);
  CHECK(c.node_of(8) == 1);
  CHECK(c.local_index(13) == 5);
  CHECK(c.nic_of(3) == 0);
  CHECK(c.nic_of(12) == 1);
  CHECK(c.gpus_on_nic(1) == 4);
  CHECK(c.nic_share(12) == doctest::Approx(50e9 / 4));
  CHECK_THROWS_AS(c.node_of(16), std::out_of_range);
  CHECK_THROWS_AS(c.node_of(-1), std::out_of_range);
  CHECK_THROWS_AS(c.gpus_on_nic(2), std::out_of_range);

  CHECK(std::isinf(c.bandwidth_between(3, 3)));
  CHECK(c.bandwidth_between(0, 7) == doctest::Approx(450e9));
  CHECK(c.bandwidth_between(0, 8) == doctest::Approx(12.5e9));
  CHECK(c.bandwidth_between(8, 0) == c.bandwidth_between(0, 8));
  CHECK(c.latency_between(3, 3) == 0.0);
  CHECK(c.latency_between(0, 7) == doctest::Approx(1e-6));
  CHECK(c.latency_between(0, 15) == doctest::Approx(2 * 2e-6 + 0.5e-6));

  // Uneven NIC sharing: the inter-node bandwidth is the smaller of the two GPUs' shares.
  const Cluster uneven =
      parse(replace(kCluster, "  latency: 2us\n", "  latency: 2us\n  gpu_nic: [0, 1, 1, 1, 1, 1, 1, 1]\n"));
  CHECK(uneven.nic_share(0) == doctest::Approx(50e9));
  CHECK(uneven.nic_share(1) == doctest::Approx(50e9 / 7));
  CHECK(uneven.bandwidth_between(0, 8) == doctest::Approx(50e9));
  CHECK(uneven.bandwidth_between(0, 9) == doctest::Approx(50e9 / 7));
}

TEST_CASE("cluster: fabrics and topologies") {
  const Cluster mesh =
      parse(replace(replace(kCluster, "nvswitch", "nvlink_mesh"), "gpus_per_node: 8", "gpus_per_node: 4"));
  CHECK(mesh.intra_node.kind == FabricKind::kNvlinkMesh);
  CHECK(mesh.bandwidth_between(0, 1) == doctest::Approx(450e9 / 3));  // split over 3 peers
  CHECK(mesh.nics.gpu_nic == std::vector<int>{0, 0, 1, 1});

  const Cluster pcie = parse(replace(kCluster, "nvswitch", "pcie"));
  CHECK(pcie.bandwidth_between(0, 1) == doctest::Approx(450e9));

  const std::string fat_tree = replace(kCluster, "  topology: single_switch\n  switch_latency: 500ns\n",
                                       "  topology: fat_tree\n  levels: 2\n  down: [2, 2]\n  up: [1, 2]\n"
                                       "  link_bandwidth: 400Gbps\n  link_latency: 100ns\n");
  const Cluster ft = parse(fat_tree);
  CHECK(ft.inter_node.topology == TopologyKind::kFatTree);
  CHECK(ft.inter_node.levels == 2);
  CHECK(ft.inter_node.down == std::vector<int>{2, 2});
  CHECK(ft.inter_node.up == std::vector<int>{1, 2});
  CHECK(ft.inter_node.parallel_links == std::vector<int>{1, 1});  // default: one link
  CHECK(ft.inter_node.link_bandwidth == doctest::Approx(50e9));
  CHECK(ft.latency_between(0, 8) == doctest::Approx(2 * 2e-6 + 4 * 100e-9));
  CHECK(parse_error(replace(fat_tree, "down: [2, 2]", "down: [3, 1]")).rfind("c.yaml:19:9: inter_node.down: ", 0) == 0);
  CHECK(parse_error(replace(fat_tree, "up: [1, 2]", "up: [1, 0]")).rfind("c.yaml:20:11: inter_node.up[1]: ", 0) == 0);

  const std::string rails = replace(kCluster, "  topology: single_switch\n  switch_latency: 500ns\n",
                                    "  topology: rail_optimized\n  switch_latency: 500ns\n  spine_bandwidth: 800Gbps\n"
                                    "  spine_latency: 1us\n");
  const Cluster r = parse(rails);
  CHECK(r.inter_node.topology == TopologyKind::kRailOptimized);
  CHECK(r.inter_node.spine_bandwidth == doctest::Approx(100e9));
  CHECK(r.latency_between(0, 8) == doctest::Approx(2 * 2e-6 + 0.5e-6));              // same rail
  CHECK(r.latency_between(0, 12) == doctest::Approx(2 * 2e-6 + 2 * 0.5e-6 + 1e-6));  // across the spine
  CHECK(parse_error(replace(rails, "  spine_latency: 1us\n", "")).find("inter_node.spine_latency: required key") !=
        std::string::npos);
}

TEST_CASE("cluster: consistency checks") {
  // 3 NICs cannot be shared evenly by 8 GPUs: the mapping must be given.
  CHECK(parse_error(replace(kCluster, "per_node: 2", "per_node: 3"))
            .rfind("c.yaml:13:3: nics: expected gpu_nic (the NIC of each GPU), got none", 0) == 0);
  CHECK(parse_error(replace(kCluster, "per_node: 2", "per_node: 9"))
            .rfind("c.yaml:13:13: nics.per_node: expected an integer between 1 and 8, got \"9\"", 0) == 0);
  CHECK(parse_error(replace(kCluster, "kind: h200-sxm", "kind: H200 SXM"))
            .rfind("c.yaml:6:9: gpu.kind: expected a GPU profile name", 0) == 0);
  CHECK(parse_error(replace(kCluster, "memory: 141GiB", "memory: 141GBps"))
            .rfind("c.yaml:7:11: gpu.memory: expected a size with a unit", 0) == 0);
  CHECK(parse_error(replace(kCluster, "bandwidth: 450GBps", "bandwidth: 0GBps"))
            .rfind("c.yaml:10:14: intra_node.bandwidth: expected a bandwidth between", 0) == 0);
  CHECK(parse_error(replace(kCluster, "topology: single_switch", "topology: torus"))
            .rfind("c.yaml:17:13: inter_node.topology: expected one of single_switch, fat_tree, rail_optimized", 0) ==
        0);
}

TEST_CASE("cluster: each bad file reports file:line:col: key.path") {
  for (const BadCase& c : kBadClusters) {
    CAPTURE(c.file);
    const std::string path = bad(c.file).string();
    const std::string message = error_of([&] { load_cluster(path); });
    const std::string prefix = path + ":" + c.position + ": " + c.key_path + ": ";
    CHECK_MESSAGE(message.rfind(prefix, 0) == 0, "expected prefix: " << prefix << "\n     got: " << message);
    CHECK_MESSAGE(message.find(c.fragment) != std::string::npos,
                  "expected: " << c.fragment << "\n     got: " << message);
  }
  std::set<std::string> covered;
  for (const auto& c : kBadClusters) covered.insert(c.file);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(moesim::testing::test_data_dir() / "configs")) {
    const std::string stem = entry.path().stem().string();
    if (!stem.starts_with("bad_cluster_")) continue;
    ++files;
    CHECK_MESSAGE(covered.count(stem) == 1, stem << " has no expected message in this test");
  }
  CHECK(files == static_cast<int>(covered.size()));
}

TEST_CASE("cluster: --set overrides change values and are named in errors") {
  const Cluster two = load_cluster("h100-sxm-8gpu", {"nodes=2", "nics.bandwidth=200Gbps"});
  CHECK(two.total_gpus() == 16);
  CHECK(two.bandwidth_between(0, 8) == doctest::Approx(25e9));
  CHECK(error_of([] { load_cluster("h100-sxm-8gpu", {"bogus=1"}); }).rfind("--set bogus=1: bogus: unknown key", 0) ==
        0);
  CHECK(error_of([] { load_cluster("h100-sxm-8gpu", {"intra_node.bandwidth=fast"}); }) ==
        "--set intra_node.bandwidth=fast: intra_node.bandwidth: expected a bandwidth with a unit (e.g. \"450GBps\"), "
        "got \"fast\"");
  CHECK(error_of([] {
          load_cluster("h100-sxm-8gpu", {"gpus_per_node=4"});
        }).find("nics.per_node: expected an integer between 1 and 4, got \"8\"") != std::string::npos);
}
