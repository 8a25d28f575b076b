#include "sim/study/study_file.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/yaml.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "sim/placement/placement.hpp"
#include "sim/placement/policy.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UsageError;
using moesim::sim::DispatchMode;
using moesim::sim::load_study;
using moesim::sim::OverlapPolicy;
using moesim::sim::Scenario;
using moesim::sim::Study;
using moesim::sim::Timelines;
using moesim::sim::WorkloadMode;

namespace fs = std::filesystem;

namespace {

fs::path studies() { return moesim::testing::test_data_dir() / "studies"; }
fs::path study(const std::string& name) { return studies() / (name + ".yaml"); }


std::vector<std::string> names_of(const Study& s) {
  std::vector<std::string> out;
  for (const auto& v : s.variants) out.push_back(v.name);
  return out;
}

const moesim::sim::Variant& variant(const Study& s, const std::string& name) {
  for (const auto& v : s.variants)
    if (v.name == name) return v;
  FAIL("no variant " << name);
  return s.variants.front();
}

std::string tiny_arch() { return (moesim::testing::test_data_dir() / "placements/models/tiny-moe.yaml").string(); }

// A synthetic study on a dense model: no trace needed, so tests can sweep anything quickly.
std::string synthetic_study(const std::string& tail) {
  return "schema_version: 1\nkind: study\nbase:\n  architecture: gpt3-13b\n  cluster: h100-sxm-8gpu\n"
         "  workload: {mode: synthetic, steps: 2}\n" +
         tail;
}

}  // namespace

TEST_CASE("study: the shipped default study loads with 4 variants") {
  const fs::path file = moesim::testing::source_dir() / "configs/studies/default.yaml";
  const Study s = load_study(file.string());
  CHECK(s.name == "default");
  CHECK(s.sha256.size() == 64);
  CHECK(fs::path(s.source_file).is_absolute());
  CHECK(names_of(s) == std::vector<std::string>{"contiguous-sequential", "contiguous-overlapped",
                                                "round_robin-sequential", "round_robin-overlapped"});
  CHECK(s.baseline == "contiguous-sequential");
  for (const auto& v : s.variants) {
    CAPTURE(v.name);
    const Scenario& sc = v.scenario;
    CHECK(sc.architecture == "deepseek-v2-lite");
    CHECK(sc.cluster == "h100-sxm-8gpu");
    CHECK(sc.profile == "h100-sxm");
    CHECK(fs::path(sc.trace).is_absolute());
    CHECK(fs::equivalent(sc.trace, moesim::testing::source_dir() / "traces/data/deepseek-v2-lite-intent.mtr"));
    CHECK(sc.tp == 1);
    CHECK(sc.ep == 8);
    CHECK(sc.workload.mode == WorkloadMode::kDecode);
    CHECK(sc.workload.batch_sequences == 64);
    CHECK(sc.workload.steps == 100);
    CHECK(sc.power_cap == 0.0);
    CHECK(sc.dispatch == DispatchMode::kFlat);
    REQUIRE(v.assignments.size() == 2);
    CHECK(v.assignments[0].first == "placement.policy");
    CHECK(v.assignments[1].first == "overlap.policy");
    CHECK(sc.placement.policy == v.assignments[0].second);
    CHECK(moesim::sim::overlap_policy_name(sc.overlap.policy) == v.assignments[1].second);
    CHECK(v.name == v.assignments[0].second + "-" + v.assignments[1].second);
  }
}

TEST_CASE("study: a sweep is the cartesian product, less what exclude drops, in nested-loop order") {
  const Study s = load_study(study("good_sweep").string());
  // 2 policies x 3 overlaps x 2 EP sizes = 12; round_robin+ideal (2) and ep2+overlapped (2) are dropped.
  CHECK(names_of(s) == std::vector<std::string>{"contiguous-sequential-ep4", "contiguous-sequential-ep2",
                                                "contiguous-overlapped-ep4", "contiguous-ideal-ep4",
                                                "contiguous-ideal-ep2", "round_robin-sequential-ep4",
                                                "round_robin-sequential-ep2", "round_robin-overlapped-ep4"});
  CHECK(s.baseline == "round_robin-sequential-ep2");
  for (const auto& v : s.variants) {
    CAPTURE(v.name);
    const Scenario& sc = v.scenario;
    CHECK_FALSE((sc.placement.policy == "round_robin" && sc.overlap.policy == OverlapPolicy::kIdeal));
    CHECK_FALSE((sc.ep == 2 && sc.overlap.policy == OverlapPolicy::kOverlapped));
    CHECK(sc.ep == (v.name.ends_with("ep4") ? 4 : 2));
    CHECK(sc.architecture == fs::path(tiny_arch()).lexically_normal().string());
    CHECK(sc.trace == (studies() / "tiny.trace").lexically_normal().string());
    CHECK(sc.overlap.chunks == 2);  // from the base
  }
}

TEST_CASE("study: explicit variants, nested keys, and an explicit baseline") {
  const Study s = load_study(study("good_variants").string());
  CHECK(names_of(s) == std::vector<std::string>{"megatron", "from-file", "rr-overlapped"});
  CHECK(s.baseline == "rr-overlapped");
  CHECK(variant(s, "megatron").scenario.placement.policy == "contiguous");
  CHECK(variant(s, "megatron").scenario.placement.file.empty());
  const Scenario& file = variant(s, "from-file").scenario;
  CHECK(file.placement.file ==
        (moesim::testing::test_data_dir() / "placements/good_contiguous.yaml").lexically_normal().string());
  const auto& rr = variant(s, "rr-overlapped");
  CHECK(rr.scenario.placement.policy == "round_robin");
  CHECK(rr.scenario.overlap.policy == OverlapPolicy::kOverlapped);
  CHECK(rr.scenario.simgrid_cfg == std::vector<std::string>{"network/model:CM02", "network/TCP-gamma:0"});
  REQUIRE(rr.assignments.size() == 3);
  CHECK(rr.assignments[0] == std::pair<std::string, std::string>{"placement.policy", "round_robin"});
  CHECK(rr.assignments[2].first == "simgrid");
  CHECK(rr.assignments[2].second == "[network/model:CM02, --cfg=network/TCP-gamma:0]");
  // Variants change only what they assign.
  CHECK(variant(s, "megatron").scenario.overlap.policy == OverlapPolicy::kSequential);
}

TEST_CASE("study: no sweep is one variant named base; every scenario key is read") {
  const Study s = load_study(study("good_single").string());
  CHECK(s.name == "single");
  CHECK(names_of(s) == std::vector<std::string>{"base"});
  CHECK(s.baseline == "base");
  const Scenario& sc = s.variants[0].scenario;
  CHECK(sc.profile == "h100-sxm");
  CHECK(sc.dispatch == DispatchMode::kHierarchical);
  CHECK(sc.power_cap == doctest::Approx(450.0));
  CHECK(sc.seed == 42);
  CHECK(sc.workload.warmup_steps == 2);
  CHECK(sc.workload.batch_sequences == 4);
  CHECK(sc.workload.steps == 3);
  CHECK(sc.overlap.chunks == 4);
  CHECK(sc.overlap.timelines == Timelines::kRequested);
  CHECK(sc.simgrid_cfg == std::vector<std::string>{"network/model:CM02"});
}

TEST_CASE("study: the baseline defaults to the first variant; nested sweep keys and unit values") {
  const Study s = load_study(study("good_synthetic").string());
  CHECK(names_of(s) == std::vector<std::string>{"a2a_bytes1MiB-none", "a2a_bytes1MiB-power_cap450W",
                                                "a2a_bytes8MiB-none", "a2a_bytes8MiB-power_cap450W",
                                                "a2a_bytes64MiB-none", "a2a_bytes64MiB-power_cap450W"});
  CHECK(s.baseline == "a2a_bytes1MiB-none");
  const Scenario& big = variant(s, "a2a_bytes64MiB-power_cap450W").scenario;
  CHECK(big.workload.synthetic_a2a_bytes == 64.0 * 1024 * 1024);
  CHECK(big.power_cap == 450.0);
  CHECK(big.trace.empty());
  CHECK(big.workload.synthetic_layers == 4);
  CHECK(big.workload.synthetic_overlap);
  CHECK(big.workload.synthetic_compute == doctest::Approx(300e-6));
  CHECK(big.ep == 8);  // default: GPUs / TP
  CHECK(variant(s, "a2a_bytes1MiB-none").scenario.power_cap == 0.0);
}

TEST_CASE("study: --set overrides apply to the study file before the variants are built") {
  const std::string file = (moesim::testing::source_dir() / "configs/studies/default.yaml").string();
  const Study s = load_study(file, {"base.workload.steps=7", "baseline=round_robin-overlapped"});
  CHECK(s.baseline == "round_robin-overlapped");
  for (const auto& v : s.variants) CHECK(v.scenario.workload.steps == 7);
  // An override of a swept value would be replaced in every variant: refused.
  CHECK(error_of([&] {
          load_study(file, {"base.placement.policy=round_robin"});
        }).find("usage: --set base.placement.policy=round_robin: placement.policy is assigned by the study's sweep") ==
        0);
  CHECK(error_of([&] { load_study(file, {"base.placement={policy: round_robin}"}); }).find("usage: ") == 0);
  // A bad override is reported as such.
  CHECK(error_of([&] {
          load_study(file, {"base.workload.steps=0"});
        }).find("--set base.workload.steps=0: base.workload.steps: expected an integer between 1 and") == 0);
  // A sweep dimension spelled with dots is replaced by --set (not duplicated as a nested key); so is a
  // nested one.
  const Study dotted = load_study(file, {"sweep.overlap.policy=[ideal]", "baseline=round_robin-ideal"});
  for (const auto& v : dotted.variants) CHECK(v.scenario.overlap.policy == OverlapPolicy::kIdeal);
  CHECK(dotted.variants.size() == s.variants.size() / 2);
  const Study nested = load_study(study("good_synthetic").string(), {"sweep.workload.synthetic.a2a_bytes=[2MiB]"});
  CHECK(names_of(nested) == std::vector<std::string>{"a2a_bytes2MiB-none", "a2a_bytes2MiB-power_cap450W"});
}

TEST_CASE("study: relative paths are relative to the study's folder; names stay names") {
  moesim::testing::TempDir dir;
  fs::create_directories(dir / "studies");
  fs::create_directories(dir / "data/a");
  fs::create_directories(dir / "data/b");
  fs::copy_file(studies() / "tiny.trace", dir / "data/t.trace");
  fs::copy_file(tiny_arch(), dir / "data/tiny-moe.yaml");
  // Two placement files with the same stem: the variant names are made unique.
  const auto arch = moesim::models::load_architecture((dir / "data/tiny-moe.yaml").string());
  const auto cluster = moesim::models::load_cluster("h100-sxm-4gpu");
  const auto registry = moesim::sim::default_placement_registry();
  moesim::sim::save_placement(registry.create("contiguous")->place({arch, cluster, 4, 1, nullptr, {}}),
                              (dir / "data/a/p.yaml").string(), false);
  moesim::sim::save_placement(registry.create("round_robin")->place({arch, cluster, 4, 1, nullptr, {}}),
                              (dir / "data/b/p.yaml").string(), false);
  moesim::testing::write_text(dir / "studies/s.yaml", R"(schema_version: 1
kind: study
base:
  architecture: ../data/tiny-moe.yaml
  cluster: h100-sxm-4gpu
  trace: ../data/t.trace
  workload: {mode: prefill, tokens_per_step: 16}
sweep:
  placement.file: [../data/a/p.yaml, ../data/b/p.yaml]
  simgrid: [["network/model:CM02"], ["network/model:LV08", "network/TCP-gamma:0"]]
)");
  const Study s = load_study((dir / "studies/s.yaml").string());
  CHECK(names_of(s) == std::vector<std::string>{"p-network_model_CM02", "p-network_model_LV08_network_TCP-gamma_0",
                                                "p_2-network_model_CM02",
                                                "p_2-network_model_LV08_network_TCP-gamma_0"});
  const Scenario& sc = s.variants.front().scenario;
  CHECK(sc.architecture == (dir / "data/tiny-moe.yaml").string());
  CHECK(sc.cluster == "h100-sxm-4gpu");
  CHECK(sc.trace == (dir / "data/t.trace").string());
  CHECK(sc.placement.file == (dir / "data/a/p.yaml").string());
  CHECK(s.variants[2].scenario.placement.file == (dir / "data/b/p.yaml").string());
  CHECK(sc.workload.mode == WorkloadMode::kPrefill);
  CHECK(sc.workload.tokens_per_step == 16);
  // A relative path given with --set is relative to the working directory, not to the study.
  const fs::path from_cwd = fs::relative(dir / "data/t.trace", fs::current_path());
  REQUIRE(from_cwd.is_relative());
  const Study set = load_study((dir / "studies/s.yaml").string(), {"base.trace=" + from_cwd.string()});
  CHECK(fs::equivalent(set.variants.front().scenario.trace, dir / "data/t.trace"));
  const std::string e = error_of([&] { load_study((dir / "studies/s.yaml").string(), {"base.trace=t.trace"}); });
  CHECK(e.find("--set base.trace=t.trace: base.trace: expected an existing file") == 0);
  CHECK(e.find("relative to the working directory") != std::string::npos);
  for (const auto& v : s.variants) {
    CHECK(v.name.find('/') == std::string::npos);
    CHECK(v.name.find(':') == std::string::npos);
  }
}

TEST_CASE("study: limits on the number of variants and the shape of sweep values") {
  moesim::testing::TempDir dir;
  std::string seeds;
  std::string steps;
  for (int i = 0; i <= 100; ++i) seeds += (i ? ", " : "") + std::to_string(i);
  for (int i = 1; i <= 100; ++i) steps += (i > 1 ? ", " : "") + std::to_string(i);
  moesim::testing::write_text(dir / "big.yaml",
                              synthetic_study("sweep:\n  seed: [" + seeds + "]\n  workload.steps: [" + steps + "]\n"));
  CHECK(error_of([&] { load_study((dir / "big.yaml").string()); }).find("expected at most 10000 variants") !=
        std::string::npos);
  moesim::testing::write_text(dir / "list.yaml", synthetic_study("sweep:\n  seed: [[1, 2]]\n"));
  CHECK(error_of([&] {
          load_study((dir / "list.yaml").string());
        }).find("sweep.seed[0]: expected a single value for seed") != std::string::npos);
  moesim::testing::write_text(dir / "ok.yaml",
                              synthetic_study("sweep:\n  seed: [1, 2, 3]\n  workload.steps: [4, 5]\n"));
  const Study ok = load_study((dir / "ok.yaml").string());
  CHECK(ok.variants.size() == 6);
  CHECK(ok.variants[1].name == "seed1-steps5");
  CHECK(ok.variants[1].scenario.seed == 1);
  CHECK(ok.variants[1].scenario.workload.steps == 5);
}

TEST_CASE("study: parse_scenario fills the defaults") {
  auto doc = moesim::common::YamlDocument::load_string(
      "architecture: gpt3-13b\ncluster: h100-sxm-8gpu\nparallelism: {tp: 2}\nworkload: {mode: synthetic}\n", "s.yaml");
  const Scenario s = moesim::sim::parse_scenario(doc.root(), ".");
  CHECK(s.tp == 2);
  CHECK(s.ep == 4);  // 8 GPUs / tp 2
  CHECK(s.profile.empty());
  CHECK(s.trace.empty());
  CHECK(s.placement.policy == "contiguous");
  CHECK(s.overlap.policy == OverlapPolicy::kSequential);
  CHECK(s.overlap.chunks == 2);
  CHECK(s.overlap.timelines == Timelines::kAll);
  CHECK(s.dispatch == DispatchMode::kFlat);
  CHECK(s.power_cap == 0.0);
  CHECK(s.seed == 1);
  CHECK(s.workload.steps == 100);
  CHECK(moesim::sim::workload_mode_name(s.workload.mode) == "synthetic");
}

namespace {

struct BadCase {
  std::string file;
  std::string position;
  std::string fragment;
};

const std::vector<BadCase> kBadStudies = {
    {"bad_study_sweep_key", "21:20",
     "sweep.placement.polcy: unknown key path \"placement.polcy\" (did you mean "
     "\"placement.policy\"?)"},
    {"bad_study_sweep_section", "21:12", "sweep.overlap: expected key paths of values, got the section \"overlap\""},
    {"bad_study_sweep_value", "22:32",
     "base.overlap.policy: expected one of sequential, overlapped, ideal, auto, tbo, got "
     "\"overlaped\" (did you mean \"overlapped\"?) (in variant "
     "\"contiguous-overlaped\", made of sweep.placement.policy[0] = contiguous, "
     "sweep.overlap.policy[1] = overlaped)"},
    {"bad_study_sweep_range", "21:26",
     "base.overlap.chunks: expected an integer between 1 and 64, got \"65\" (in "
     "variant \"chunks65\", made of sweep.overlap.chunks[2] = 65)"},
    {"bad_study_sweep_duplicate_value", "21:26", "sweep.overlap.chunks[2]: expected distinct values, got \"2\" again"},
    {"bad_study_sweep_empty", "21:19", "sweep.overlap.chunks: expected at least one value to sweep"},
    {"bad_study_sweep_not_list", "21:19", "sweep.overlap.chunks: expected a list of values to sweep"},
    {"bad_study_sweep_twice", "24:13", "sweep.placement.policy: expected each key path once"},
    {"bad_study_sweep_and_variants", "24:3", "variants: expected either a sweep or a list of variants, got both"},
    {"bad_study_exclude_without_sweep", "21:3", "exclude: expected exclude filters only with a sweep"},
    {"bad_study_exclude_key", "24:53",
     "exclude[0].workload.steps: expected a swept key path (placement.policy, "
     "overlap.policy), got workload.steps"},
    {"bad_study_exclude_value", "24:24",
     "exclude[0].placement.policy: expected one of the sweep's values for "
     "placement.policy (contiguous, round_robin), got \"round-robin\""},
    {"bad_study_exclude_all", "24:3", "exclude: expected at least one variant left, got none"},
    {"bad_study_excluded_baseline", "25:11",
     "baseline: expected a variant that is run, got "
     "\"round_robin-overlapped\", which exclude[0] drops"},
    {"bad_study_unknown_baseline", "23:11",
     "baseline: expected the name of a variant, got \"contiguous-sequentail\" "
     "(did you mean \"contiguous-sequential\"?); variants: "
     "contiguous-sequential, contiguous-overlapped"},
    {"bad_study_duplicate_variant", "23:11", "variants[1].name: expected unique variant names, got \"a\" again"},
    {"bad_study_variant_name", "21:11", "variants[0].name: expected a name safe as a folder name"},
    {"bad_study_variant_key", "22:26",
     "variants[0].set.overlap.chunk: unknown key path \"overlap.chunk\" (did you "
     "mean \"overlap.chunks\"?)"},
    {"bad_study_variant_value", "22:27",
     "base.workload.steps: expected an integer between 1 and 10000000, got \"0\" "
     "(in variant \"a\", made of variants[0].set.workload.steps = 0)"},
    {"bad_study_unknown_key", "11:3", "base.worklod: unknown key (did you mean \"workload\"?)"},
    {"bad_study_missing_key", "5:3", "base.architecture: required key \"architecture\" is missing in base"},
    {"bad_study_wrong_kind", "3:7", "kind: expected \"study\""},
    {"bad_study_schema_version", "2:17", "schema_version: expected schema version 1"},
    {"bad_study_mode", "12:11",
     "base.workload.mode: expected one of prefill, decode, training, synthetic, got "
     "\"decoding\""},
    {"bad_study_steps", "14:12", "base.workload.steps: expected an integer between 1 and 10000000, got \"0\""},
    {"bad_study_chunks", "19:13", "base.overlap.chunks: expected an integer between 1 and 64, got \"0\""},
    {"bad_study_timelines", "20:16", "base.overlap.timelines: expected one of all, requested, got \"some\""},
    {"bad_study_tp_power_of_two", "9:9",
     "base.parallelism.tp: expected tp to be a power of two dividing the 4 GPUs "
     "per node of cluster h100-sxm-4gpu"},
    {"bad_study_tp_node", "9:9", "base.parallelism.tp: expected tp to be a power of two dividing the 4 GPUs per node"},
    {"bad_study_ep_gpus", "10:9",
     "base.parallelism.ep: expected ep x tp (3 x 1 = 3 GPUs) to divide the 4 GPUs of "
     "cluster h100-sxm-4gpu"},
    {"bad_study_missing_trace", "7:10", "base.trace: expected an existing file, got \"tiny-missing.trace\""},
    {"bad_study_no_trace", "5:3",
     "base: expected a trace (the routing to replay, or balanced for prefill and decode) for workload.mode decode of "
     "tiny-moe, an MoE model, got none"},
    {"bad_study_trace_shape", "7:10",
     "base.trace: expected a trace of tiny-moe's routing (MoE layers 1..3, 8 "
     "experts, top-2), got one of \"deepseek-v2-lite\" (MoE layers 1..26, 64 "
     "experts, top-6)"},
    {"bad_study_dense_trace", "7:10", "base.trace: expected no trace for llama2-13b, a dense model"},
    {"bad_study_synthetic_trace", "7:10", "base.trace: expected no trace for workload.mode synthetic"},
    {"bad_study_unknown_architecture", "5:17",
     "base.architecture: unknown architecture \"deepseek-v2-lit\" (did you "
     "mean \"deepseek-v2-lite\"?)"},
    {"bad_study_unknown_cluster", "6:12",
     "base.cluster: unknown cluster \"h100-sxm-8\" (did you mean "
     "\"h100-sxm-8gpu\"?)"},
    {"bad_study_unknown_profile", "7:12", "base.profile: unknown profile \"h100-sxn\" (did you mean \"h100-sxm\"?)"},
    {"bad_study_unknown_policy", "16:13", "base.placement.policy: expected one of contiguous, round_robin"},
    {"bad_study_placement_mismatch", "16:11",
     "base.placement.file: expected a placement for ep 2, tp 1 (this "
     "scenario's parallelism), got one for ep 4, tp 1"},
    {"bad_study_placement_file_missing", "16:11",
     "base.placement.file: expected an existing file, got "
     "\"placements/none.yaml\""},
    {"bad_study_groups", "17:13", "base.placement.groups: expected 0 or a divisor of num_experts (8), got \"3\""},
    {"bad_study_power_cap", "17:14",
     "base.power_cap: expected a power between 1 W and 100 kW with a unit (e.g. "
     "\"450W\"), or none, got \"450\""},
    {"bad_study_dispatch", "18:11", "base.dispatch.mode: expected one of flat, hierarchical, low_latency, residence, got \"tree\""},
    {"bad_study_simgrid", "17:13", "base.simgrid[0]: expected a SimGrid setting \"name:value\""},
    {"bad_study_simgrid_unknown", "17:13",
     "base.simgrid[0]: expected a SimGrid setting that SimGrid accepts, got \"nope/nope:1\", which SimGrid refuses: "
     "Bad config key: nope/nope"},
    {"bad_study_simgrid_model", "17:13", "got \"network/model:NOPE\", which SimGrid refuses: Model 'NOPE' is invalid"},
    {"bad_study_simgrid_value", "17:13", "got \"network/TCP-gamma:abc\", which SimGrid refuses: invalid double"},
    {"bad_study_empty_trace", "7:10", "base.trace: expected a trace with at least one token to replay, got "},
    {"bad_study_profile_zero_bandwidth", "7:12",
     "base.profile: cannot use it: " + (moesim::testing::test_data_dir() / "profiles").string() +
         "/bad_profile_zero_bandwidth.yaml:9:18: device.hbm_bandwidth: expected a bandwidth of at least 1 B/s"},
    {"bad_study_cluster_too_large", "6:12",
     "base.cluster: expected a cluster of at most 4096 GPUs (a study simulates every GPU of its cluster), got "
     "cluster_1m_gpus with 1000000"},
    {"bad_study_low_latency_profile", "18:20",
     "base.dispatch.mode: expected flat or hierarchical with profile tiny, which has no low_latency_kernels section"},
    {"bad_study_ep_above_experts", "10:9",
     "base.parallelism.ep: expected ep at most 8 (the 8 experts of tiny-moe: every EP rank holds at least one "
     "expert), got 128"},
};

}  // namespace

TEST_CASE("study: each bad file is an InputError naming file:line:col and the key path") {
  for (const BadCase& c : kBadStudies) {
    CAPTURE(c.file);
    const fs::path file = study(c.file);
    REQUIRE(fs::exists(file));
    const std::string e = error_of([&] { load_study(file.string()); });
    CHECK_MESSAGE(e.rfind(file.string() + ":" + c.position + ": ", 0) == 0, e);
    CHECK_MESSAGE(e.find(c.fragment) != std::string::npos, e);
  }
  std::set<std::string> listed;
  for (const BadCase& c : kBadStudies) listed.insert(c.file);
  for (const auto& entry : fs::directory_iterator(studies()))
    if (entry.path().stem().string().starts_with("bad_"))
      CHECK_MESSAGE(listed.count(entry.path().stem().string()), entry.path());
}

TEST_CASE("study: every shipped study under configs/studies loads") {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(moesim::testing::source_dir() / "configs/studies")) {
    if (entry.path().extension() != ".yaml") continue;
    // Its second phase replays a trace tools/rebalance-traces.sh writes (not shipped): the shipped
    // configs test loads it with one generated.
    if (entry.path().filename() == "rebalance.yaml") continue;
    CAPTURE(entry.path());
    const Study s = load_study(entry.path().string());
    CHECK_FALSE(s.variants.empty());
    CHECK(std::count_if(s.variants.begin(), s.variants.end(), [&](const auto& v) { return v.name == s.baseline; }) ==
          1);
    ++count;
  }
  CHECK(count >= 1);
}
