#include "models/profile.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/yaml.hpp"
#include "models/architecture.hpp"
#include "models/costs.hpp"
#include "tests/support/test_support.hpp"

using moesim::testing::error_of;

using moesim::common::InputError;
using moesim::common::UsageError;
using moesim::common::YamlDocument;
using moesim::models::CollectiveOp;
using moesim::models::Dtype;
using moesim::models::load_profile;
using moesim::models::parse_profile;
using moesim::models::Profile;
using moesim::models::profile_to_yaml;
using moesim::models::SourceKind;

namespace fs = std::filesystem;

namespace {

fs::path profile_data(const std::string& name) { return moesim::testing::test_data_dir() / "profiles" / name; }


bool close(double a, double b, double rel = 1e-12) {
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b));
}

struct BadCase {
  std::string file;      // under tests/data/profiles, without .yaml
  std::string position;  // line:col
  std::string key_path;
  std::string fragment;
};

// One file per mistake: the message must start with `file:line:col: key.path: `.
const std::vector<BadCase> kBadProfiles = {
    {"bad_profile_unknown_key", "23:1", "colectives", "unknown key (did you mean \"collectives\"?)"},
    {"bad_profile_wrong_kind", "3:7", "kind", "expected \"profile\""},
    {"bad_profile_schema_version", "2:17", "schema_version", "expected schema version 1"},
    {"bad_profile_missing_source", "14:5", "gemm[0].source", "required key \"source\" is missing"},
    {"bad_profile_source_detail_key", "17:38", "gemm[0].source.reference",
     "expected \"derivation\" for a source of kind model"},
    {"bad_profile_source_kind", "12:18", "device.source.kind", "got \"guessed\""},
    {"bad_profile_m_unsorted", "18:17", "gemm[0].m[2]", "expected m values in increasing order, got 16 after 256"},
    {"bad_profile_time_decreasing", "20:48", "gemm[0].shapes[0].time_us[3]",
     "expected times that do not decrease with m, got 10 us at m 4096, less than 20 us at 256"},
    {"bad_profile_size_mismatch", "21:37", "gemm[0].shapes[1].time_us",
     "expected 4 values (one per entry of m), got 3"},
    {"bad_profile_nonpositive", "20:38", "gemm[0].shapes[0].time_us[0]", "expected a positive number, got \"0\""},
    {"bad_profile_faster_than_peak", "20:56", "gemm[0].shapes[0].time_s[3]",
     "no shorter than the work at peak_tflops (85.9 us at m=4096), got 20 us (is the unit in the key right?)"},
    {"bad_profile_two_time_keys", "20:37", "gemm[0].shapes[0].time_us",
     "expected only one of time_s, time_ms, time_us"},
    {"bad_profile_no_time_key", "20:9", "gemm[0].shapes[0]", "expected one of time_s, time_ms, time_us, got none"},
    {"bad_profile_unknown_dtype", "14:12", "gemm[0].dtype", "got \"bf8\" (did you mean \"bf16\"?)"},
    {"bad_profile_grouped_rule", "17:14", "gemm[0].grouped", "got \"fused\""},
    {"bad_profile_forward_unit", "23:31", "normal_kernels.dispatch_forward_bandwidth", "expected a bandwidth with a unit"},
    {"bad_profile_duplicate_dtype", "23:12", "gemm[1].dtype", "expected one GEMM table per dtype, got bf16 again"},
    {"bad_profile_duplicate_shape", "22:9", "gemm[0].shapes[2]", "got n=4096 k=1024 again"},
    {"bad_profile_launch_floor", "16:19", "gemm[0].launch_floor",
     "no longer than the shortest time in the table (4 us in gemm[0].shapes[0] (n=1024 k=1024)), got 5 us"},
    {"bad_profile_wrong_unit_kind", "9:18", "device.hbm_bandwidth", "expected a bandwidth with a unit"},
    {"bad_profile_missing_unit", "10:13", "device.sm_clock",
     "expected a frequency with a unit (e.g. \"1980MHz\"), got \"1000\""},
    {"bad_profile_unknown_op", "24:9", "collectives[0].op", "got \"allreduce\" (did you mean \"all_reduce\"?)"},
    {"bad_profile_send_recv_ranks", "37:12", "collectives[2].ranks", "expected 2 for send_recv"},
    {"bad_profile_bytes_unsorted", "28:22", "collectives[0].bytes[1]", "expected sizes in increasing order"},
    {"bad_profile_busbw_time_decreasing", "29:23", "collectives[0].busbw_GBps[1]",
     "got 12.23 us at bytes 1048576, less than 17.92 us at 1024 (from busbw_GBps)"},
    {"bad_profile_slowdown_below_one", "51:32", "contention.grids[0].compute_slowdown[0][1]",
     "expected a slowdown of at least 1"},
    {"bad_profile_contention_rows", "52:22", "contention.grids[0].comm_slowdown",
     "expected 2 rows (one per entry of comm_bytes), got 1"},
    {"bad_profile_contention_columns", "51:39", "contention.grids[0].compute_slowdown[1]",
     "expected 2 values (one per entry of gemm_flop), got 1"},
    {"bad_profile_cap_curve_order", "68:30", "power.cap_curve.cap_fraction[2]",
     "expected cap fractions in increasing order"},
    {"bad_profile_cap_speed_decreasing", "69:33", "power.cap_curve.speed_fraction[2]",
     "expected speeds that do not decrease as the cap rises"},
    {"bad_profile_power_below_idle", "63:19", "power.compute.bf16", "expected at least the idle power (50 W)"},
    {"bad_profile_overlapped_dtype_missing", "65:15", "power.overlapped", "got none for fp16"},
    {"bad_profile_efficiency_range", "43:34", "links.nvlink.bandwidth_efficiency", "expected a number between 0 and 1"},
    {"bad_profile_unknown_link", "43:3", "links.nvlnk", "unknown key (did you mean \"nvlink\"?)"},
    {"bad_profile_missing_gemm", "2:1", "(top level)", "expected a gemm section, got none"},
    {"bad_profile_zero_bandwidth", "9:18", "device.hbm_bandwidth",
     "expected a bandwidth of at least 1 B/s, got \"0GBps\""},
    {"bad_profile_nan_bandwidth", "9:18", "device.hbm_bandwidth", "expected a bandwidth with a unit"},
    {"bad_profile_zero_flops", "15:18", "gemm[0].peak_tflops", "expected a positive number, got \"0\""},
    {"bad_profile_missing_base", "5:7", "base", "unknown profile \"no-such-gpu\""},
    {"bad_profile_base_file_missing", "5:7", "base", "expected an existing base profile file, got \"./absent.yaml\""},
    // The cycle closes in the second file, whichever is loaded first.
    {"bad_profile_base_cycle_a", "", "",
     "base: expected a base chain without cycles, got bad_profile_base_cycle_a.yaml "
     "-> bad_profile_base_cycle_b.yaml -> bad_profile_base_cycle_a.yaml"},
    {"bad_profile_base_cycle_b", "", "",
     "base: expected a base chain without cycles, got bad_profile_base_cycle_b.yaml "
     "-> bad_profile_base_cycle_a.yaml -> bad_profile_base_cycle_b.yaml"},
};

// Structural equality, numbers within a relative 1e-12 (the writer shows times in us, bandwidths in GB/s).
void check_same(const Profile& a, const Profile& b) {
  auto same_list = [](const std::vector<double>& x, const std::vector<double>& y) {
    REQUIRE(x.size() == y.size());
    for (std::size_t i = 0; i < x.size(); ++i) CHECK_MESSAGE(close(x[i], y[i]), i << ": " << x[i] << " vs " << y[i]);
  };
  auto same_source = [](const moesim::models::Provenance& x, const moesim::models::Provenance& y) {
    CHECK(x.kind == y.kind);
    CHECK(x.detail == y.detail);
  };
  CHECK(a.base == b.base);
  CHECK(a.description == b.description);
  CHECK(a.device.name == b.device.name);
  CHECK(a.device.sm_count == b.device.sm_count);
  CHECK(close(a.device.memory, b.device.memory));
  CHECK(close(a.device.hbm_bandwidth, b.device.hbm_bandwidth));
  CHECK(close(a.device.sm_clock, b.device.sm_clock));
  CHECK(a.device.extra == b.device.extra);
  same_source(a.device.provenance, b.device.provenance);
  REQUIRE(a.gemm.size() == b.gemm.size());
  for (std::size_t i = 0; i < a.gemm.size(); ++i) {
    CHECK(a.gemm[i].dtype == b.gemm[i].dtype);
    CHECK(close(a.gemm[i].peak_flops, b.gemm[i].peak_flops));
    CHECK(close(a.gemm[i].launch_floor, b.gemm[i].launch_floor));
    CHECK(a.gemm[i].grouped == b.gemm[i].grouped);
    same_source(a.gemm[i].provenance, b.gemm[i].provenance);
    REQUIRE(a.gemm[i].curves.size() == b.gemm[i].curves.size());
    for (std::size_t c = 0; c < a.gemm[i].curves.size(); ++c) {
      CHECK(a.gemm[i].curves[c].n == b.gemm[i].curves[c].n);
      CHECK(a.gemm[i].curves[c].k == b.gemm[i].curves[c].k);
      same_list(a.gemm[i].curves[c].m, b.gemm[i].curves[c].m);
      same_list(a.gemm[i].curves[c].time, b.gemm[i].curves[c].time);
    }
  }
  REQUIRE(a.collectives.size() == b.collectives.size());
  for (std::size_t i = 0; i < a.collectives.size(); ++i) {
    CHECK(a.collectives[i].op == b.collectives[i].op);
    CHECK(a.collectives[i].ranks == b.collectives[i].ranks);
    CHECK(a.collectives[i].scope == b.collectives[i].scope);
    same_source(a.collectives[i].provenance, b.collectives[i].provenance);
    same_list(a.collectives[i].bytes, b.collectives[i].bytes);
    same_list(a.collectives[i].time, b.collectives[i].time);
  }
  for (auto link : {&Profile::nvlink, &Profile::pcie, &Profile::nic}) {
    CHECK(close((a.*link).bandwidth_efficiency, (b.*link).bandwidth_efficiency));
    CHECK(close((a.*link).latency, (b.*link).latency));
    same_source((a.*link).provenance, (b.*link).provenance);
  }
  CHECK(close(a.low_latency.dispatch_latency, b.low_latency.dispatch_latency));
  CHECK(close(a.low_latency.combine_latency, b.low_latency.combine_latency));
  same_source(a.low_latency.provenance, b.low_latency.provenance);
  CHECK(close(a.normal.dispatch_forward_bandwidth, b.normal.dispatch_forward_bandwidth));
  CHECK(close(a.normal.dispatch_forward_per_token, b.normal.dispatch_forward_per_token));
  CHECK(close(a.normal.combine_forward_bandwidth, b.normal.combine_forward_bandwidth));
  same_source(a.normal.provenance, b.normal.provenance);
  same_source(a.contention.provenance, b.contention.provenance);
  same_source(a.contention.comm_provenance, b.contention.comm_provenance);
  REQUIRE(a.contention.points.size() == b.contention.points.size());
  for (std::size_t i = 0; i < a.contention.points.size(); ++i) {
    const auto& x = a.contention.points[i];
    const auto& y = b.contention.points[i];
    CHECK(x.comm_op == y.comm_op);
    CHECK(close(x.comm_bytes, y.comm_bytes));
    CHECK(close(x.gemm_flops, y.gemm_flops));
    CHECK(close(x.compute_slowdown, y.compute_slowdown));
    CHECK(close(x.comm_slowdown, y.comm_slowdown));
  }
  const auto& p = a.power;
  const auto& q = b.power;
  same_source(p.provenance, q.provenance);
  same_source(p.cap_provenance, q.cap_provenance);
  same_source(p.clock_provenance, q.clock_provenance);
  for (auto field : {&moesim::models::PowerModel::idle, &moesim::models::PowerModel::communication,
                     &moesim::models::PowerModel::max_power, &moesim::models::PowerModel::min_power_limit})
    CHECK(close(p.*field, q.*field));
  REQUIRE(p.compute.size() == q.compute.size());
  for (const auto& [dtype, w] : p.compute) CHECK(close(w, q.compute.at(dtype)));
  for (const auto& [dtype, w] : p.overlapped) CHECK(close(w, q.overlapped.at(dtype)));
  same_list(p.cap_fraction, q.cap_fraction);
  same_list(p.speed_fraction, q.speed_fraction);
  same_list(p.clock_fraction, q.clock_fraction);
  same_list(p.clock_speed_fraction, q.clock_speed_fraction);
  same_list(p.clock_power_fraction, q.clock_power_fraction);
  CHECK(close(a.attention.flops_efficiency, b.attention.flops_efficiency));
  same_source(a.attention.provenance, b.attention.provenance);
}

Profile round_trip(const Profile& p) {
  const auto doc = YamlDocument::load_string(profile_to_yaml(p), "written.yaml");
  return parse_profile(doc.root(), p.name);
}

}  // namespace

TEST_CASE("profile: a complete file becomes the struct, units converted to SI") {
  const Profile p = load_profile(profile_data("tiny.yaml").string());
  CHECK(p.name == "tiny");
  CHECK(p.base.empty());
  CHECK(p.description == "test GPU");
  CHECK(p.device.name == "Test GPU");
  CHECK(p.device.sm_count == 100);
  CHECK(p.device.memory == 16.0 * 1073741824.0);
  CHECK(p.device.hbm_bandwidth == 1e12);
  CHECK(p.device.sm_clock == 1e9);
  CHECK(p.device.extra.at("driver") == "1.0");

  REQUIRE(p.gemm.size() == 1);
  const auto* bf16 = p.gemm_table(Dtype::kBf16);
  REQUIRE(bf16 != nullptr);
  CHECK(p.gemm_table(Dtype::kFp8) == nullptr);
  CHECK(bf16->peak_flops == 1e14);
  CHECK(close(bf16->launch_floor, 2e-6));
  REQUIRE(bf16->curves.size() == 3);
  CHECK(bf16->curves[1].n == 4096);
  CHECK(bf16->curves[1].k == 1024);
  CHECK(bf16->curves[1].m == std::vector<double>{1, 16, 256, 4096});  // the table's m, shared by every shape
  CHECK(close(bf16->curves[1].time[3], 700e-6));

  REQUIRE(p.collectives.size() == 3);
  const auto& ar = p.collectives[0];
  CHECK(ar.op == CollectiveOp::kAllReduce);
  CHECK(ar.ranks == 8);
  CHECK(ar.scope == "intra_node");
  CHECK(ar.provenance.kind == SourceKind::kPublished);
  CHECK(ar.provenance.detail == "made up for tests");
  // busbw = bytes / time * 2(n-1)/n.
  CHECK(close(ar.time[1], 1048576.0 * 1.75 / 50e9));
  CHECK(close(p.collectives[1].time[2], 5000e-6));               // given as time_us
  CHECK(close(p.collectives[2].time[1], 1073741824.0 / 100e9));  // algbw = bytes / time
  CHECK(p.collectives[2].provenance.kind == SourceKind::kMeasured);

  CHECK(p.nvlink.bandwidth_efficiency == 0.8);
  CHECK(close(p.nvlink.latency, 2e-6));
  CHECK_FALSE(moesim::models::has_source(p.pcie.provenance));  // absent: no figures, no source
  CHECK(p.contention.provenance.kind == SourceKind::kPublished);
  CHECK(p.contention.comm_provenance.kind == SourceKind::kModel);
  REQUIRE(p.contention.points.size() == 5);
  CHECK(p.contention.points[2].comm_op == CollectiveOp::kAllToAll);
  CHECK(p.contention.points[2].comm_bytes == 1e8);
  CHECK(p.contention.points[2].gemm_flops == 1e9);
  CHECK(p.contention.points[2].compute_slowdown == 1.5);
  CHECK(p.contention.points[2].comm_slowdown == 1.3);
  CHECK(p.contention.points[4].comm_op == std::nullopt);

  CHECK(p.power.max_power == 500.0);
  CHECK(p.power.min_power_limit == 100.0);
  CHECK(p.power.idle == 50.0);
  CHECK(p.power.compute.at(Dtype::kBf16) == 400.0);
  CHECK(p.power.overlapped.at(Dtype::kBf16) == 480.0);
  CHECK(p.power.cap_fraction == std::vector<double>{0.4, 0.6, 0.8, 1.0});
  CHECK(p.power.clock_power_fraction == std::vector<double>{0.5, 0.7, 1.0});
  CHECK(p.attention.flops_efficiency == 0.5);
  CHECK(p.source_kinds() == std::vector<std::string>{"measured", "published", "model"});
}

TEST_CASE("profile: each bad file reports file:line:col: key.path") {
  for (const BadCase& c : kBadProfiles) {
    CAPTURE(c.file);
    const std::string path = profile_data(c.file + ".yaml").string();
    const std::string message = error_of([&] { load_profile(path); });
    REQUIRE_MESSAGE(!message.empty(), "no error");
    CHECK_MESSAGE(message.rfind("usage: ", 0) != 0, message);  // an InputError: exit code 2
    if (!c.position.empty()) {
      const std::string prefix = path + ":" + c.position + ": " + c.key_path + ": ";
      CHECK_MESSAGE(message.rfind(prefix, 0) == 0, "expected prefix: " << prefix << "\n     got: " << message);
    } else {
      // The position is in the other file of the cycle: file:line:col all the same.
      CHECK_MESSAGE(std::regex_search(message, std::regex(R"(bad_profile_base_cycle_[ab]\.yaml:4:7: )")), message);
    }
    CHECK_MESSAGE(message.find(c.fragment) != std::string::npos,
                  "expected: " << c.fragment << "\n     got: " << message);
  }
}

TEST_CASE("profile: every bad_profile_ file has an expected message") {
  std::set<std::string> covered;
  for (const auto& c : kBadProfiles) covered.insert(c.file);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(moesim::testing::test_data_dir() / "profiles")) {
    const std::string stem = entry.path().stem().string();
    if (!stem.starts_with("bad_")) continue;
    ++files;
    CHECK_MESSAGE(covered.count(stem) == 1, stem << " has no expected message in this test");
  }
  CHECK(files == static_cast<int>(covered.size()));
}

TEST_CASE("profile: a base supplies the tables a profile lacks - the profile's own win") {
  const Profile base = load_profile(profile_data("tiny.yaml").string());
  const Profile p = load_profile(profile_data("tiny_derived.yaml").string());
  CHECK(p.name == "tiny_derived");
  CHECK(p.base == "tiny.yaml");
  // Own GEMM tables: bf16 replaced as a whole (one shape, its times), fp16 added.
  REQUIRE(p.gemm.size() == 2);
  REQUIRE(p.gemm_table(Dtype::kBf16) != nullptr);
  CHECK(p.gemm_table(Dtype::kBf16)->curves.size() == 1);
  CHECK(close(p.gemm_table(Dtype::kBf16)->curves[0].time[0], 3e-6));
  CHECK(p.gemm_table(Dtype::kBf16)->provenance.kind == SourceKind::kMeasured);
  CHECK(p.gemm_table(Dtype::kFp16) != nullptr);
  // Collectives merge per (op, ranks, scope): the own all_reduce, the base's all_to_all and send_recv.
  REQUIRE(p.collectives.size() == 3);
  CHECK(p.collectives[0].op == CollectiveOp::kAllReduce);
  CHECK(p.collectives[0].provenance.kind == SourceKind::kMeasured);
  CHECK(p.collectives[0].bytes.size() == 2);
  CHECK(p.collectives[1].op == CollectiveOp::kAllToAll);
  CHECK(p.collectives[2].op == CollectiveOp::kSendRecv);
  // Sections it does not give at all come whole from the base.
  CHECK(p.device.name == base.device.name);
  CHECK(p.power.compute == base.power.compute);
  CHECK(p.power.cap_fraction == base.power.cap_fraction);
  CHECK(p.contention.points.size() == base.contention.points.size());
  CHECK(p.nvlink.latency == base.nvlink.latency);
  CHECK(p.attention.flops_efficiency == base.attention.flops_efficiency);
  CHECK(p.description == base.description);
  CHECK(p.source_kinds() == std::vector<std::string>{"measured", "published", "model"});

  // Without loading the base, the derived file alone lacks the required sections only once merged:
  // parse_profile accepts it as it stands.
  const auto doc = YamlDocument::load_file(profile_data("tiny_derived.yaml").string());
  const Profile alone = parse_profile(doc.root(), "tiny_derived");
  CHECK(alone.device.name.empty());
  CHECK(alone.gemm.size() == 2);
}

TEST_CASE("profile: a base by name resolves under configs/profiles") {
  moesim::testing::TempDir tmp;
  moesim::testing::write_text(tmp / "mine.yaml",
                              "schema_version: 1\nkind: profile\nbase: h100-sxm\n"
                              "attention: {flops_efficiency: 0.6, source: {kind: measured, method: \"test\"}}\n");
  const Profile h100 = load_profile("h100-sxm");
  const Profile mine = load_profile((tmp / "mine.yaml").string());
  CHECK(mine.name == "mine");
  CHECK(mine.base == "h100-sxm");
  CHECK(mine.attention.flops_efficiency == 0.6);
  CHECK(mine.gemm.size() == h100.gemm.size());
  CHECK(mine.device.name == h100.device.name);
  CHECK(mine.source_kinds().front() == "measured");
}

TEST_CASE("profile: --set overrides change values and are named in errors") {
  const std::string path = profile_data("tiny.yaml").string();
  const Profile p = load_profile(path, {"power.idle=60W", "attention.flops_efficiency=0.25"});
  CHECK(p.power.idle == 60.0);
  CHECK(p.attention.flops_efficiency == 0.25);
  const std::string too_high = error_of([&] { load_profile(path, {"power.idle=600W"}); });
  CHECK(too_high.rfind("--set power.idle=600W: power.idle: expected a power between ", 0) == 0);
  CHECK(too_high.find("and 500 W, got \"600W\"") != std::string::npos);
  CHECK(error_of([&] {
          load_profile(path, {"power.idl=60W"});
        }).rfind("--set power.idl=60W: power.idl: unknown key", 0) == 0);
}

TEST_CASE("profile: the profile round-trips through profile_to_yaml and parse_profile") {
  for (const std::string file : {"tiny.yaml", "tiny_derived.yaml"}) {
    CAPTURE(file);
    const Profile p = load_profile(profile_data(file).string());
    check_same(p, round_trip(p));
  }
  for (const std::string& name : moesim::common::config_names("profiles")) {
    CAPTURE(name);
    const Profile p = load_profile(name);
    const Profile q = round_trip(p);
    check_same(p, q);
    CHECK(profile_to_yaml(q) == profile_to_yaml(p));  // writing is stable once written
  }
}

TEST_CASE("profile: every shipped profile loads and tabulates every shipped architecture's shapes") {
  const std::vector<std::string> names = moesim::common::config_names("profiles");
  CHECK(names == std::vector<std::string>{"a100-sxm", "h100-sxm", "h200", "h800"});
  for (const std::string& name : names) {
    CAPTURE(name);
    const Profile p = load_profile(name);
    CHECK(p.source_file == (moesim::common::config_root() / "profiles" / (name + ".yaml")).string());
    // Reference profiles: published values and models, nothing claimed as measured.
    CHECK(p.source_kinds() == std::vector<std::string>{"published", "model"});
    CHECK(moesim::models::has_source(p.nvlink.provenance));
    CHECK(moesim::models::has_source(p.contention.provenance));
    CHECK(!p.power.clock_fraction.empty());
    std::vector<Dtype> dtypes{Dtype::kBf16, Dtype::kFp16, Dtype::kFp32, Dtype::kTf32};
    if (name != "a100-sxm") dtypes.push_back(Dtype::kFp8);
    for (const Dtype dtype : dtypes) CHECK_MESSAGE(p.gemm_table(dtype) != nullptr, moesim::models::dtype_name(dtype));
    for (const CollectiveOp op :
         {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll})
      for (const int ranks : {2, 4, 8}) {
        const bool have = std::any_of(p.collectives.begin(), p.collectives.end(), [&](const auto& c) {
          return c.op == op && c.ranks == ranks && c.scope == "intra_node";
        });
        CHECK_MESSAGE(have, moesim::models::collective_op_name(op) << " on " << ranks << " ranks");
      }
    // The tables respect both rooflines: never above the peak FLOP rate, never below reading the
    // weights once from HBM; large GEMMs run near the peak.
    for (const auto& table : p.gemm) {
      const double elem = moesim::models::dtype_bytes(table.dtype);
      for (const auto& c : table.curves) {
        const auto nk = static_cast<double>(c.n) * static_cast<double>(c.k);
        CHECK(c.time.front() >= nk * elem / p.device.hbm_bandwidth);
        for (std::size_t i = 0; i < c.m.size(); ++i) CHECK(2.0 * c.m[i] * nk / c.time[i] <= table.peak_flops);
        if (c.n >= 4096 && c.k >= 4096) CHECK(2.0 * c.m.back() * nk / c.time.back() >= 0.6 * table.peak_flops);
      }
    }
    for (const std::string& arch_name : moesim::common::config_names("architectures")) {
      const auto arch = moesim::models::load_architecture(arch_name);
      for (const int tp : {1, 2, 4})
        for (const auto& shape : moesim::models::gemm_shapes(arch, tp))
          for (const auto& table : p.gemm) {
            const bool tabulated = std::any_of(table.curves.begin(), table.curves.end(), [&](const auto& c) {
              return c.n == shape.n && c.k == shape.k && c.m.front() <= 1.0 && c.m.back() >= 65536.0;
            });
            CHECK_MESSAGE(tabulated, arch_name << " tp " << tp << " " << moesim::models::dtype_name(table.dtype)
                                               << " n=" << shape.n << " k=" << shape.k);
          }
    }
  }
}

TEST_CASE("profile: the reference all-reduce curves are Azure's, point for point") {
  // h800 is not here: no H800 curve is published, its curves are the H100's moved to its NVLink (checked below).
  const std::vector<std::pair<std::string, std::string>> files{
      {"h100-sxm", "ND_H100_v5_results.md"}, {"h200", "ND_H200_v5_results.md"}, {"a100-sxm", "ND_A100_v4_results.md"}};
  for (const auto& entry : files) {
    const std::string& name = entry.first;
    const std::string& file = entry.second;
    CAPTURE(name);
    std::vector<double> published;
    std::ifstream in(moesim::testing::reference_dir() / "azure" / file);
    const std::regex row(R"(^\|\s*\d+[KMG]\s*\|\s*([\d.]+)\s*\|)");
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (std::regex_search(line, m, row)) published.push_back(std::stod(m[1]) * 1e9);
    }
    REQUIRE(published.size() == 24);
    const Profile p = load_profile(name);
    const auto it = std::find_if(p.collectives.begin(), p.collectives.end(),
                                 [](const auto& c) { return c.op == CollectiveOp::kAllReduce && c.ranks == 8; });
    REQUIRE(it != p.collectives.end());
    CHECK(it->provenance.kind == SourceKind::kPublished);
    REQUIRE(it->bytes.size() == 24);
    // Where a published time fell below the previous size's (noise in the latency-bound range), the
    // converter replaced the violating run by the least-squares monotone fit in log time (pool
    // adjacent violators): each block of pooled points takes the geometric mean of its times.
    std::vector<std::pair<double, int>> blocks;  // (sum of log times, count)
    for (std::size_t i = 0; i < 24; ++i) {
      blocks.push_back({std::log(it->bytes[i] * 1.75 / published[i]), 1});
      while (blocks.size() > 1 && blocks[blocks.size() - 2].first / blocks[blocks.size() - 2].second >
                                      blocks.back().first / blocks.back().second) {
        blocks[blocks.size() - 2].first += blocks.back().first;
        blocks[blocks.size() - 2].second += blocks.back().second;
        blocks.pop_back();
      }
    }
    std::vector<double> expected;
    for (const auto& [sum, n] : blocks) expected.insert(expected.end(), static_cast<std::size_t>(n), std::exp(sum / n));
    REQUIRE(expected.size() == 24);
    for (std::size_t i = 0; i < 24; ++i) {
      CHECK(it->bytes[i] == std::ldexp(1.0, 10 + static_cast<int>(i)));
      CHECK_MESSAGE(close(it->time[i], expected[i], 1e-5), i);
      // Every point stays within 5% of the published bus bandwidth.
      CHECK(std::abs(it->bytes[i] * 1.75 / it->time[i] / published[i] - 1.0) <= 0.05);
    }
    CHECK(it->provenance.detail.find("pool adjacent violators") != std::string::npos);
  }
}

TEST_CASE("profile: h800 is h100-sxm with NVLink cut to 160 of 200 GB/s achievable per direction") {
  const Profile h800 = load_profile("h800");
  const Profile h100 = load_profile("h100-sxm");
  CHECK(h800.device.name == "NVIDIA H800 80GB HBM3");
  CHECK(h800.device.sm_count == h100.device.sm_count);
  CHECK(h800.device.hbm_bandwidth == h100.device.hbm_bandwidth);
  // Same die, SMs, clocks and HBM3: the same GEMM times (DeepGEMM's FP8 points are H800 measurements).
  for (const Dtype dtype : {Dtype::kFp8, Dtype::kBf16}) {
    CAPTURE(moesim::models::dtype_name(dtype));
    for (const double m : {1.0, 128.0, 4096.0, 65536.0}) {
      CHECK(close(moesim::models::gemm_time(h800, dtype, m, 7168, 2048),
                  moesim::models::gemm_time(h100, dtype, m, 7168, 2048)));
      CHECK(close(moesim::models::gemm_time(h800, dtype, m, 4096, 7168),
                  moesim::models::gemm_time(h100, dtype, m, 4096, 7168)));
    }
  }
  // DeepEP's ~160 GB/s achievable NVLink on H800 over its 200 GB/s per direction.
  CHECK(std::abs(h800.nvlink.bandwidth_efficiency - 160.0 / 200.0) <= 1e-3);
  CHECK(h800.nvlink.provenance.kind == SourceKind::kPublished);
  // The 8-rank all-reduce: the H100's latency-bound start, its bandwidth-bound end at the H800's link
  // rate, i.e. lower by 160 / 370 (the H100's achievable one-direction rate).
  const auto all_reduce8 = [](const Profile& p) {
    const auto it = std::find_if(p.collectives.begin(), p.collectives.end(),
                                 [](const auto& c) { return c.op == CollectiveOp::kAllReduce && c.ranks == 8; });
    REQUIRE(it != p.collectives.end());
    return *it;
  };
  const auto a = all_reduce8(h800);
  const auto b = all_reduce8(h100);
  REQUIRE(a.bytes == b.bytes);
  const auto busbw = [](const moesim::models::CollectiveCurve& c, std::size_t i) {
    return c.bytes[i] * 1.75 / c.time[i];
  };
  const std::size_t last = a.bytes.size() - 1;
  CHECK(std::abs(busbw(a, last) / busbw(b, last) / (160.0 / 370.0) - 1.0) <= 0.02);
  CHECK(std::abs(busbw(a, 0) / busbw(b, 0) - 1.0) <= 0.05);
  CHECK(a.provenance.kind == SourceKind::kModel);
  // DeepEP's low-latency kernels were measured on H800: the same fixed costs as the h100-sxm's.
  CHECK(h800.low_latency.dispatch_latency == h100.low_latency.dispatch_latency);
  CHECK(h800.low_latency.combine_latency == h100.low_latency.combine_latency);
  CHECK(h800.low_latency.dispatch_latency > 0.0);
  CHECK(h800.low_latency.combine_latency > 0.0);
}

TEST_CASE("profile: the committed reference profiles are the converter's output") {
  const fs::path python = "/usr/bin/python3";
  if (!fs::exists(python)) {
    MESSAGE("skipped: no /usr/bin/python3");
    return;
  }
  const auto r = moesim::testing::run_program(
      python.string(), {(moesim::testing::source_dir() / "tools" / "build_profiles.py").string(), "--check",
                        "--reference", moesim::testing::reference_dir().string()});
  CHECK_MESSAGE(r.exit_code == 0, r.out << r.err);
}

TEST_CASE("profile: power.memory_bound is optional, per dtype, at least idle, and round-trips") {
  const std::string path = profile_data("tiny.yaml").string();
  CHECK(load_profile(path).power.memory_bound.empty());
  const Profile p = load_profile(path, {"power.memory_bound.bf16=250W"});
  REQUIRE(p.power.memory_bound.size() == 1);
  CHECK(p.power.memory_bound.at(moesim::models::Dtype::kBf16) == 250.0);
  CHECK(profile_to_yaml(round_trip(p)) == profile_to_yaml(p));
  CHECK(profile_to_yaml(p).find("memory_bound: {bf16: 250W}") != std::string::npos);
  const std::string low = error_of([&] { load_profile(path, {"power.memory_bound.bf16=10W"}); });
  CHECK(low.find("power.memory_bound.bf16: expected at least the idle power") != std::string::npos);
}
