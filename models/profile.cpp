#include "models/profile.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <tuple>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "models/config_header.hpp"

namespace moesim::models {

namespace {

using common::UnitKind;
using common::YamlNode;

const std::vector<std::string> kScopes{"intra_node", "inter_node"};
const std::vector<std::string> kLinkClasses{"nvlink", "pcie", "nic"};
// The contention grid for the ops without a grid of their own (ContentionPoint::comm_op nullopt).
constexpr const char* kAnyOp = "any";
constexpr int kMaxBaseDepth = 16;
constexpr std::int64_t kMaxDim = std::int64_t{1} << 30;
constexpr std::int64_t kMaxRanks = std::int64_t{1} << 20;
// A tabulated GEMM may beat the datasheet peak by this much (boost clocks) before it is a unit mistake.
constexpr double kPeakTolerance = 1.05;

// A list key whose unit is in its name ("time_us") and the factor to SI.
struct ScaledKey {
  std::string_view key;
  double scale;
};
const std::vector<ScaledKey> kTimeKeys{{"time_s", 1.0}, {"time_ms", 1e-3}, {"time_us", 1e-6}};
const std::vector<ScaledKey> kCollectiveKeys{
    {"time_s", 1.0}, {"time_ms", 1e-3}, {"time_us", 1e-6}, {"busbw_GBps", 1e9}, {"algbw_GBps", 1e9}};

std::vector<std::string> key_names(const std::vector<ScaledKey>& keys) {
  std::vector<std::string> names;
  for (const auto& k : keys) names.emplace_back(k.key);
  return names;
}

std::string number(double v) {
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, ptr) : std::to_string(v);
}

std::string seconds_text(double s) { return common::format_unit(s, UnitKind::kTime); }

// `source:` of a section. The detail's key says what it is: the reference of a published value, the
// derivation of a model value, the method (tool, date) of a measured one.
const std::vector<std::pair<std::string, std::string>> kSourceDetailKeys{
    {"measured", "method"}, {"published", "reference"}, {"model", "derivation"}};

Provenance parse_source_node(const YamlNode& node) {
  node.expect_map();
  std::vector<std::string> kinds;
  for (const auto& [kind, key] : kSourceDetailKeys) kinds.push_back(kind);
  const std::string kind = node.at("kind").as_enum(kinds);
  std::string detail_key;
  for (const auto& [k, key] : kSourceDetailKeys)
    if (k == kind) detail_key = key;
  for (const std::string& key : node.keys()) {
    if (key == "kind" || key == detail_key) continue;
    for (const auto& [other_kind, other_key] : kSourceDetailKeys)
      if (key == other_key)
        node.at(key).fail("expected \"" + detail_key + "\" for a source of kind " + kind + ", got \"" + key +
                          "\" (which belongs to kind " + other_kind + ")");
  }
  node.allow_keys({"kind", detail_key});
  Provenance p;
  p.kind = kind == "measured"    ? SourceKind::kMeasured
           : kind == "published" ? SourceKind::kPublished
                                 : SourceKind::kModel;
  p.detail = node.at(detail_key).as_string();
  return p;
}

Provenance parse_source(const YamlNode& parent, std::string_view key = "source") {
  return parse_source_node(parent.at(key));
}

double positive_double(const YamlNode& node, double max = std::numeric_limits<double>::infinity()) {
  const double v = node.as_double(0.0, max);
  if (!(v > 0.0)) node.fail_expected("a positive number");
  return v;
}

struct NumberList {
  std::optional<YamlNode> node;  // the list itself
  std::vector<YamlNode> items;
  std::vector<double> values;  // SI
  std::string key;
};

NumberList read_numbers(const YamlNode& node, double scale, double max = std::numeric_limits<double>::infinity()) {
  NumberList out;
  out.node = node;
  out.items = node.items();
  if (out.items.empty()) node.fail_expected("a non-empty list of numbers");
  out.values.reserve(out.items.size());
  for (const YamlNode& item : out.items) out.values.push_back(positive_double(item, max) * scale);
  return out;
}

// Exactly one of `keys` must be present in `map`.
NumberList read_one_of(const YamlNode& map, const std::vector<ScaledKey>& keys) {
  std::optional<NumberList> found;
  for (const ScaledKey& k : keys) {
    auto child = map.find(k.key);
    if (!child) continue;
    if (found)
      child->fail("expected only one of " + common::join(key_names(keys), ", ") + ", got both " + found->key + " and " +
                  std::string(k.key) + " (keep one)");
    found = read_numbers(*child, k.scale);
    found->key = k.key;
  }
  if (!found) map.fail("expected one of " + common::join(key_names(keys), ", ") + ", got none");
  return *found;
}

void check_increasing(const NumberList& list, std::string_view what) {
  for (std::size_t i = 1; i < list.values.size(); ++i)
    if (!(list.values[i] > list.values[i - 1]))
      list.items[i].fail("expected " + std::string(what) + " in increasing order, got " + list.items[i].as_string() +
                         " after " + list.items[i - 1].as_string() +
                         " (sort the list, and its matching values with it)");
}

void check_same_size(const NumberList& list, const NumberList& axis, const std::string& axis_name) {
  if (list.values.size() != axis.values.size())
    list.node->fail("expected " + std::to_string(axis.values.size()) + " values (one per entry of " + axis_name +
                    "), got " + std::to_string(list.values.size()));
}

// Times over an increasing size never decrease (a larger operation is never faster). A dip within
// kMonotoneTolerance is rounding in a printed table (busbw to a few digits): it is lifted to the
// previous time, so that the costs stay monotone.
constexpr double kMonotoneTolerance = 1e-3;

void check_times_monotone(NumberList& times, const std::vector<double>& sizes, std::string_view size_name) {
  for (std::size_t i = 1; i < times.values.size(); ++i) {
    if (times.values[i] >= times.values[i - 1]) continue;
    if (times.values[i] >= times.values[i - 1] * (1.0 - kMonotoneTolerance)) {
      times.values[i] = times.values[i - 1];
      continue;
    }
    times.items[i].fail("expected times that do not decrease with " + std::string(size_name) + ", got " +
                        seconds_text(times.values[i]) + " at " + std::string(size_name) + " " + number(sizes[i]) +
                        ", less than " + seconds_text(times.values[i - 1]) + " at " + number(sizes[i - 1]) +
                        (times.key.starts_with("time") ? std::string() : " (from " + times.key + ")"));
  }
}

DeviceContext parse_device(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"name", "sm_count", "memory", "hbm_bandwidth", "sm_clock", "extra", "source"});
  DeviceContext d;
  d.name = node.at("name").as_string();
  d.sm_count = static_cast<int>(node.at("sm_count").as_int(1, 1 << 20));
  d.memory = node.at("memory").as_unit(UnitKind::kBytes, 1.0);
  d.hbm_bandwidth = node.at("hbm_bandwidth").as_unit(UnitKind::kBandwidth, 1.0);
  d.sm_clock = node.at("sm_clock").as_unit(UnitKind::kFrequency, 1.0);
  if (auto extra = node.find("extra")) {
    extra->expect_map();
    for (const std::string& key : extra->keys()) d.extra[key] = extra->at(key).as_string();
  }
  d.provenance = parse_source(node);
  return d;
}

GemmTable parse_gemm_table(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"dtype", "peak_tflops", "launch_floor", "grouped", "source", "m", "shapes"});
  GemmTable t;
  t.dtype = node.at("dtype").as_enum<Dtype>(kDtypes);
  t.peak_flops = positive_double(node.at("peak_tflops"), 1e6) * 1e12;
  t.provenance = parse_source(node);
  std::optional<YamlNode> floor_node = node.find("launch_floor");
  if (floor_node) t.launch_floor = floor_node->as_unit(UnitKind::kTime, 0.0, 1.0);
  if (auto grouped = node.find("grouped")) t.grouped = grouped->as_enum<GroupedGemm>(kGroupedGemms);

  std::optional<NumberList> table_m;
  if (auto m = node.find("m")) {
    table_m = read_numbers(*m, 1.0);
    check_increasing(*table_m, "m values");
  }
  const YamlNode shapes = node.at("shapes");
  const std::vector<YamlNode> items = shapes.items();
  if (items.empty()) shapes.fail_expected("at least one shape");
  std::set<std::pair<long, long>> seen;
  double shortest = std::numeric_limits<double>::infinity();
  std::string shortest_where;
  for (const YamlNode& shape : items) {
    shape.expect_map();
    std::vector<std::string> allowed{"n", "k", "m"};
    for (const auto& k : kTimeKeys) allowed.emplace_back(k.key);
    shape.allow_keys(allowed);
    GemmCurve c;
    c.n = static_cast<long>(shape.at("n").as_int(1, kMaxDim));
    c.k = static_cast<long>(shape.at("k").as_int(1, kMaxDim));
    if (!seen.insert({c.n, c.k}).second)
      shape.fail("expected each (n, k) shape once per dtype, got n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + " again");
    NumberList m;
    if (auto own = shape.find("m")) {
      m = read_numbers(*own, 1.0);
      check_increasing(m, "m values");
    } else if (table_m) {
      m = *table_m;
    } else {
      shape.fail("expected an m list (here or for the whole table), got none");
    }
    for (std::size_t i = 0; i < m.values.size(); ++i)
      if (m.values[i] < 1.0) m.items[i].fail_expected("an m of at least 1 (m counts tokens)");
    NumberList time = read_one_of(shape, kTimeKeys);
    check_same_size(time, m, "m");
    check_times_monotone(time, m.values, "m");
    for (std::size_t i = 0; i < time.values.size(); ++i) {
      const double at_peak = 2.0 * m.values[i] * static_cast<double>(c.n) * static_cast<double>(c.k) / t.peak_flops;
      if (time.values[i] * kPeakTolerance < at_peak)
        time.items[i].fail("expected a time no shorter than the work at peak_tflops (" + seconds_text(at_peak) +
                           " at m=" + number(m.values[i]) + "), got " + seconds_text(time.values[i]) +
                           " (is the unit in the key right?)");
    }
    if (time.values.front() < shortest) {
      shortest = time.values.front();
      shortest_where = shape.path() + " (n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + ")";
    }
    c.m = m.values;
    c.time = time.values;
    t.curves.push_back(std::move(c));
  }
  if (floor_node && t.launch_floor > shortest)
    floor_node->fail("expected a launch floor no longer than the shortest time in the table (" +
                     seconds_text(shortest) + " in " + shortest_where + "), got " + seconds_text(t.launch_floor));
  return t;
}

CollectiveCurve parse_collective(const YamlNode& node) {
  node.expect_map();
  std::vector<std::string> allowed{"op", "ranks", "scope", "source", "bytes"};
  for (const auto& k : kCollectiveKeys) allowed.emplace_back(k.key);
  node.allow_keys(allowed);
  CollectiveCurve c;
  c.op = node.at("op").as_enum<CollectiveOp>(kCollectiveOps);
  const YamlNode ranks = node.at("ranks");
  c.ranks = static_cast<int>(ranks.as_int(2, kMaxRanks));
  if (c.op == CollectiveOp::kSendRecv && c.ranks != 2)
    ranks.fail_expected("2 for send_recv (one sender, one receiver)");
  c.scope = node.at("scope").as_enum(kScopes);
  c.provenance = parse_source(node);
  NumberList bytes = read_numbers(node.at("bytes"), 1.0);
  check_increasing(bytes, "sizes");
  NumberList values = read_one_of(node, kCollectiveKeys);
  check_same_size(values, bytes, "bytes");
  // nccl-tests: algbw = bytes / time, busbw = algbw * factor(op, ranks).
  double factor = 1.0;
  if (c.op == CollectiveOp::kAllReduce)
    factor = 2.0 * (c.ranks - 1) / c.ranks;
  else if (c.op != CollectiveOp::kSendRecv)
    factor = static_cast<double>(c.ranks - 1) / c.ranks;
  NumberList times = values;
  for (std::size_t i = 0; i < values.values.size(); ++i) {
    if (values.key == "busbw_GBps")
      times.values[i] = bytes.values[i] * factor / values.values[i];
    else if (values.key == "algbw_GBps")
      times.values[i] = bytes.values[i] / values.values[i];
  }
  check_times_monotone(times, bytes.values, "bytes");
  c.bytes = bytes.values;
  c.time = times.values;
  return c;
}

LinkFigures parse_link(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"bandwidth_efficiency", "latency", "source"});
  LinkFigures l;
  l.bandwidth_efficiency = positive_double(node.at("bandwidth_efficiency"), 1.0);
  l.latency = node.at("latency").as_unit(UnitKind::kTime, 0.0, 1.0);
  l.provenance = parse_source(node);
  return l;
}

ContentionTable parse_contention(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"source", "comm_source", "comm_sms", "comm_sms_source", "grids"});
  ContentionTable t;
  t.provenance = parse_source(node);
  t.comm_provenance = node.has("comm_source") ? parse_source(node, "comm_source") : t.provenance;
  if (auto sms = node.find("comm_sms")) {
    t.comm_sms = static_cast<int>(sms->as_int(0, 4096));
    if (!node.has("comm_sms_source")) sms->fail("expected comm_sms_source beside comm_sms (where the SM count comes from)");
    t.sms_provenance = parse_source(node, "comm_sms_source");
  }
  const YamlNode grids = node.at("grids");
  const std::vector<YamlNode> items = grids.items();
  if (items.empty()) grids.fail_expected("at least one grid");
  std::vector<std::string> ops = common::enum_names<CollectiveOp>(kCollectiveOps);
  ops.emplace_back(kAnyOp);
  std::set<std::string> seen;
  for (const YamlNode& grid : items) {
    grid.expect_map();
    grid.allow_keys({"comm_op", "compute", "comm_sms", "comm_bytes", "gemm_flop", "compute_slowdown", "comm_slowdown"});
    const YamlNode op_node = grid.at("comm_op");
    const std::string op = op_node.as_enum(ops);
    // kAnyOp, the one name outside the table, reads as nullopt.
    const std::optional<CollectiveOp> comm_op = common::enum_from_name<CollectiveOp>(kCollectiveOps, op);
    std::optional<ComputeClass> compute;
    std::string compute_name = kAnyOp;
    if (auto c = grid.find("compute")) {
      std::vector<std::string> classes = common::enum_names<ComputeClass>(kComputeClasses);
      classes.emplace_back(kAnyOp);
      compute_name = c->as_enum(classes);
      compute = common::enum_from_name<ComputeClass>(kComputeClasses, compute_name);
    }
    int comm_sms = -1;
    if (auto s = grid.find("comm_sms")) comm_sms = static_cast<int>(s->as_int(0, 4096));
    const std::string key = op + "/" + compute_name + "/" + std::to_string(comm_sms);
    if (!seen.insert(key).second)
      op_node.fail("expected one grid per (comm_op, compute, comm_sms), got comm_op " + op + ", compute " + compute_name +
                   ", comm_sms " + (comm_sms < 0 ? std::string(kAnyOp) : std::to_string(comm_sms)) + " again");
    NumberList bytes = read_numbers(grid.at("comm_bytes"), 1.0);
    check_increasing(bytes, "sizes");
    NumberList flops = read_numbers(grid.at("gemm_flop"), 1.0);
    check_increasing(flops, "FLOP counts");
    auto read_matrix = [&](std::string_view field) {
      const YamlNode matrix = grid.at(field);
      const std::vector<YamlNode> rows = matrix.items();
      if (rows.size() != bytes.values.size())
        matrix.fail("expected " + std::to_string(bytes.values.size()) + " rows (one per entry of comm_bytes), got " +
                    std::to_string(rows.size()));
      std::vector<std::vector<double>> out;
      for (const YamlNode& row : rows) {
        NumberList values = read_numbers(row, 1.0, 1000.0);
        check_same_size(values, flops, "gemm_flop");
        for (std::size_t j = 0; j < values.values.size(); ++j)
          if (values.values[j] < 1.0)
            values.items[j].fail_expected("a slowdown of at least 1 (time overlapped / time alone)");
        out.push_back(values.values);
      }
      return out;
    };
    const auto compute_slow = read_matrix("compute_slowdown");
    const auto comm = read_matrix("comm_slowdown");
    for (std::size_t i = 0; i < bytes.values.size(); ++i)
      for (std::size_t j = 0; j < flops.values.size(); ++j)
        t.points.push_back({comm_op, compute, comm_sms, bytes.values[i], flops.values[j], compute_slow[i][j], comm[i][j]});
  }
  return t;
}

std::map<Dtype, double> parse_dtype_watts(const YamlNode& node, double max_power) {
  node.expect_map();
  node.allow_keys(common::enum_names<Dtype>(kDtypes));
  std::map<Dtype, double> out;
  for (const std::string& key : node.keys())
    out[*common::enum_from_name<Dtype>(kDtypes, key)] = node.at(key).as_unit(UnitKind::kPower, 0.0, max_power);
  if (out.empty()) node.fail_expected("watts for at least one dtype");
  return out;
}

std::string watts(double w) { return common::format_unit(w, UnitKind::kPower); }

// Watts by dtype in the order of the dtype names, the order in which profiles have always been
// checked and written (a map keyed by Dtype puts fp8 before fp32).
std::vector<std::pair<Dtype, double>> by_dtype_name(const std::map<Dtype, double>& watts_by_dtype) {
  std::vector<std::pair<Dtype, double>> out(watts_by_dtype.begin(), watts_by_dtype.end());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return dtype_name(a.first) < dtype_name(b.first); });
  return out;
}

PowerModel parse_power(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"source", "max_power", "min_power_limit", "idle", "compute", "memory_bound", "communication",
                   "overlapped", "cap_curve", "clock_curve"});
  PowerModel p;
  p.provenance = parse_source(node);
  p.max_power = node.at("max_power").as_unit(UnitKind::kPower, 1e-3);
  const YamlNode min_node = node.at("min_power_limit");
  p.min_power_limit = min_node.as_unit(UnitKind::kPower, 1e-3, p.max_power);
  const YamlNode idle = node.at("idle");
  p.idle = idle.as_unit(UnitKind::kPower, 0.0, p.max_power);
  const YamlNode compute = node.at("compute");
  p.compute = parse_dtype_watts(compute, p.max_power);
  const YamlNode comm = node.at("communication");
  p.communication = comm.as_unit(UnitKind::kPower, p.idle, p.max_power);
  const YamlNode overlapped = node.at("overlapped");
  p.overlapped = parse_dtype_watts(overlapped, p.max_power);
  for (const auto& [dtype, w] : by_dtype_name(p.compute)) {
    const std::string name = dtype_name(dtype);
    if (w < p.idle) compute.at(name).fail_expected("at least the idle power (" + watts(p.idle) + ")");
    auto both = p.overlapped.find(dtype);
    if (both == p.overlapped.end()) overlapped.fail("expected watts for every dtype of compute, got none for " + name);
    if (both->second < std::max(w, p.communication))
      overlapped.at(name).fail_expected("at least the compute (" + watts(w) + ") and communication (" +
                                        watts(p.communication) + ") powers");
  }
  for (const auto& [dtype, w] : by_dtype_name(p.overlapped))
    if (!p.compute.count(dtype))
      overlapped.at(dtype_name(dtype)).fail("expected only dtypes that compute gives, got " + dtype_name(dtype));
  if (auto mem = node.find("memory_bound")) {
    p.memory_bound = parse_dtype_watts(*mem, p.max_power);
    for (const auto& [dtype, w] : by_dtype_name(p.memory_bound)) {
      const std::string name = dtype_name(dtype);
      if (!p.compute.count(dtype)) mem->at(name).fail("expected only dtypes that compute gives, got " + name);
      if (w < p.idle) mem->at(name).fail_expected("at least the idle power (" + watts(p.idle) + ")");
    }
  }

  const YamlNode cap = node.at("cap_curve");
  cap.expect_map();
  cap.allow_keys({"source", "cap_fraction", "speed_fraction"});
  p.cap_provenance = parse_source(cap);
  NumberList cap_fraction = read_numbers(cap.at("cap_fraction"), 1.0, 1.0);
  check_increasing(cap_fraction, "cap fractions");
  NumberList speed = read_numbers(cap.at("speed_fraction"), 1.0, 1.0);
  check_same_size(speed, cap_fraction, "cap_fraction");
  for (std::size_t i = 1; i < speed.values.size(); ++i)
    if (speed.values[i] < speed.values[i - 1])
      speed.items[i].fail("expected speeds that do not decrease as the cap rises, got " + speed.items[i].as_string() +
                          " after " + speed.items[i - 1].as_string());
  p.cap_fraction = cap_fraction.values;
  p.speed_fraction = speed.values;

  if (auto clock = node.find("clock_curve")) {
    clock->expect_map();
    clock->allow_keys({"source", "clock_fraction", "speed_fraction", "power_fraction"});
    p.clock_provenance = parse_source(*clock);
    NumberList fraction = read_numbers(clock->at("clock_fraction"), 1.0, 1.0);
    check_increasing(fraction, "clock fractions");
    for (std::string_view key : {"speed_fraction", "power_fraction"}) {
      NumberList values = read_numbers(clock->at(key), 1.0, 1.0);
      check_same_size(values, fraction, "clock_fraction");
      for (std::size_t i = 1; i < values.values.size(); ++i)
        if (values.values[i] < values.values[i - 1])
          values.items[i].fail("expected values that do not decrease as the clock rises, got " +
                               values.items[i].as_string() + " after " + values.items[i - 1].as_string());
      (key == "speed_fraction" ? p.clock_speed_fraction : p.clock_power_fraction) = values.values;
    }
    p.clock_fraction = fraction.values;
  }
  return p;
}

AttentionFigures parse_attention_figures(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"flops_efficiency", "source"});
  AttentionFigures a;
  a.flops_efficiency = positive_double(node.at("flops_efficiency"), 1.0);
  a.provenance = parse_source(node);
  return a;
}

LowLatencyKernels parse_low_latency(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"dispatch_latency", "combine_latency", "source"});
  LowLatencyKernels k;
  k.dispatch_latency = node.at("dispatch_latency").as_unit(UnitKind::kTime, 0.0, 1.0);
  k.combine_latency = node.at("combine_latency").as_unit(UnitKind::kTime, 0.0, 1.0);
  k.provenance = parse_source(node);
  return k;
}

ElementwiseFigures parse_elementwise(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"launch_floor", "source"});
  ElementwiseFigures e;
  e.launch_floor = node.at("launch_floor").as_unit(UnitKind::kTime, 0.0, 1.0);
  e.provenance = parse_source(node);
  return e;
}

NormalKernels parse_normal_kernels(const YamlNode& node) {
  node.expect_map();
  node.allow_keys({"dispatch_forward_bandwidth", "dispatch_forward_per_token", "combine_forward_bandwidth", "source"});
  NormalKernels k;
  k.dispatch_forward_bandwidth = node.at("dispatch_forward_bandwidth").as_unit(UnitKind::kBandwidth, 1.0);
  k.dispatch_forward_per_token = node.at("dispatch_forward_per_token").as_unit(UnitKind::kTime, 0.0, 1e-3);
  k.combine_forward_bandwidth = node.at("combine_forward_bandwidth").as_unit(UnitKind::kBandwidth, 1.0);
  k.provenance = parse_source(node);
  return k;
}

// Required once the base chain is merged: reported at the top of the file that lacks them.
void check_complete(const Profile& p, const YamlNode& root) {
  const std::string hint = p.base.empty() ? " (or name a base profile that has one)"
                                          : " (neither this profile nor its base \"" + p.base + "\" has one)";
  if (!has_source(p.device.provenance)) root.fail("expected a device section, got none" + hint);
  if (p.gemm.empty()) root.fail("expected a gemm section, got none" + hint);
  if (!has_source(p.power.provenance)) root.fail("expected a power section, got none" + hint);
}

void merge_base(Profile& p, const Profile& base) {
  if (!has_source(p.device.provenance)) p.device = base.device;
  for (const GemmTable& t : base.gemm)
    if (!p.gemm_table(t.dtype)) p.gemm.push_back(t);
  for (const CollectiveCurve& c : base.collectives) {
    const bool have = std::any_of(p.collectives.begin(), p.collectives.end(), [&](const CollectiveCurve& o) {
      return o.op == c.op && o.ranks == c.ranks && o.scope == c.scope;
    });
    if (!have) p.collectives.push_back(c);
  }
  for (auto member : {&Profile::nvlink, &Profile::pcie, &Profile::nic})
    if (!has_source((p.*member).provenance)) p.*member = base.*member;
  if (!has_source(p.contention.provenance)) p.contention = base.contention;
  if (!has_source(p.power.provenance)) p.power = base.power;
  if (!has_source(p.attention.provenance)) p.attention = base.attention;
  if (!has_source(p.low_latency.provenance)) p.low_latency = base.low_latency;
  if (!has_source(p.normal.provenance)) p.normal = base.normal;
  if (!has_source(p.elementwise.provenance)) p.elementwise = base.elementwise;
  if (p.description.empty()) p.description = base.description;
}

Profile parse_sections(const YamlNode& root, const std::string& name) {
  check_config_kind(root, "profile");
  root.allow_keys({"schema_version", "kind", "description", "base", "device", "gemm", "collectives", "links",
                   "contention", "power", "attention", "low_latency_kernels", "normal_kernels",
                   "elementwise"});
  check_config_header(root, "profile");
  Profile p;
  p.name = name;
  if (auto d = root.find("description")) p.description = d->as_string();
  if (auto b = root.find("base")) p.base = b->as_string();
  if (auto d = root.find("device")) p.device = parse_device(*d);
  if (auto g = root.find("gemm")) {
    const std::vector<YamlNode> tables = g->items();
    if (tables.empty()) g->fail_expected("at least one GEMM table");
    for (const YamlNode& t : tables) {
      GemmTable table = parse_gemm_table(t);
      if (p.gemm_table(table.dtype))
        t.at("dtype").fail("expected one GEMM table per dtype, got " + dtype_name(table.dtype) + " again");
      p.gemm.push_back(std::move(table));
    }
  }
  if (auto c = root.find("collectives")) {
    for (const YamlNode& item : c->items()) {
      CollectiveCurve curve = parse_collective(item);
      for (const CollectiveCurve& o : p.collectives)
        if (o.op == curve.op && o.ranks == curve.ranks && o.scope == curve.scope)
          item.fail("expected one curve per (op, ranks, scope), got " + collective_op_name(curve.op) + " on " +
                    std::to_string(curve.ranks) + " ranks " + curve.scope + " again");
      p.collectives.push_back(std::move(curve));
    }
  }
  if (auto links = root.find("links")) {
    links->allow_keys(kLinkClasses);
    if (auto l = links->find("nvlink")) p.nvlink = parse_link(*l);
    if (auto l = links->find("pcie")) p.pcie = parse_link(*l);
    if (auto l = links->find("nic")) p.nic = parse_link(*l);
  }
  if (auto c = root.find("contention")) p.contention = parse_contention(*c);
  if (auto pw = root.find("power")) p.power = parse_power(*pw);
  if (auto a = root.find("attention")) p.attention = parse_attention_figures(*a);
  if (auto k = root.find("low_latency_kernels")) p.low_latency = parse_low_latency(*k);
  if (auto k = root.find("normal_kernels")) p.normal = parse_normal_kernels(*k);
  if (auto e = root.find("elementwise")) p.elementwise = parse_elementwise(*e);
  return p;
}

// The file a `base:` names: a path (relative to the naming file's folder) when it has a '/' or ends in
// .yaml, else a profile name under configs/profiles/.
std::filesystem::path resolve_base(const YamlNode& base_node, const std::filesystem::path& from) {
  const std::string base = base_node.as_string();
  if (base.find('/') != std::string::npos || base.ends_with(".yaml")) {
    std::filesystem::path path(base);
    if (path.is_relative()) path = (from.parent_path() / path).lexically_normal();
    if (!std::filesystem::exists(path))
      base_node.fail("expected an existing base profile file, got " + common::quoted(base) + " (looked for " +
                     path.string() + ")");
    return path;
  }
  try {
    return common::resolve_config("profiles", base);
  } catch (const common::InputError& e) {
    base_node.fail(std::string("expected a known base profile: ") + e.what());
  }
}

Profile load_chain(const std::filesystem::path& path, const std::vector<std::string>& overrides,
                   std::vector<std::filesystem::path>& chain) {
  common::YamlDocument doc = common::YamlDocument::load_file(path.string());
  doc.apply_overrides(overrides);
  const YamlNode root = doc.root();
  Profile p = parse_sections(root, path.stem().string());
  p.source_file = path.string();
  if (!p.base.empty()) {
    const YamlNode base_node = root.at("base");
    const std::filesystem::path base_path = resolve_base(base_node, path);
    const std::filesystem::path canonical = std::filesystem::weakly_canonical(base_path);
    if (std::find(chain.begin(), chain.end(), canonical) != chain.end()) {
      std::string cycle;
      for (const auto& c : chain) cycle += c.filename().string() + " -> ";
      base_node.fail("expected a base chain without cycles, got " + cycle + canonical.filename().string());
    }
    if (static_cast<int>(chain.size()) >= kMaxBaseDepth)
      base_node.fail("expected at most " + std::to_string(kMaxBaseDepth) + " levels of base profiles, got more");
    chain.push_back(canonical);
    const Profile base = load_chain(base_path, {}, chain);
    merge_base(p, base);
  }
  check_complete(p, root);
  return p;
}

// --- writing -----------------------------------------------------------------------------------------

std::string yaml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c == 0x7f) {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// A value shown in a scaled unit (us, GB/s): 15 significant digits, so that the scaling's rounding
// (250e-6 / 1e-6 = 250.00000000000003) does not show.
std::string scaled(double v, double scale) {
  if (scale == 1.0) return number(v);
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v / scale, std::chars_format::general, 15);
  return ec == std::errc() ? std::string(buf, ptr) : number(v / scale);
}

std::string flow(const std::vector<double>& values, double scale = 1.0) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? ", " : "") + scaled(values[i], scale);
  return out + "]";
}

std::string source_yaml(const Provenance& p) {
  std::string kind = source_kind_name(p.kind);
  std::string key;
  for (const auto& [k, detail_key] : kSourceDetailKeys)
    if (k == kind) key = detail_key;
  return "{kind: " + kind + ", " + key + ": " + yaml_string(p.detail) + "}";
}

std::string unit_value(double v, std::string_view unit, double scale) { return scaled(v, scale) + std::string(unit); }

}  // namespace

std::string source_kind_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::kMeasured:
      return "measured";
    case SourceKind::kPublished:
      return "published";
    case SourceKind::kModel:
      return "model";
  }
  return "model";
}

bool has_source(const Provenance& provenance) { return !provenance.detail.empty(); }

std::string contention_op_name(const std::optional<CollectiveOp>& comm_op) {
  return comm_op ? collective_op_name(*comm_op) : kAnyOp;
}

std::vector<std::string> Profile::source_kinds() const {
  std::set<std::string> kinds;
  auto add = [&](const Provenance& p) {
    if (has_source(p)) kinds.insert(source_kind_name(p.kind));
  };
  add(device.provenance);
  for (const auto& t : gemm) add(t.provenance);
  for (const auto& c : collectives) add(c.provenance);
  add(nvlink.provenance);
  add(pcie.provenance);
  add(nic.provenance);
  add(contention.provenance);
  add(contention.comm_provenance);
  add(power.provenance);
  add(power.cap_provenance);
  add(power.clock_provenance);
  add(attention.provenance);
  add(low_latency.provenance);
  add(normal.provenance);
  add(elementwise.provenance);
  std::vector<std::string> out;
  for (const char* k : {"measured", "published", "model"})
    if (kinds.count(k)) out.emplace_back(k);
  return out;
}

const GemmTable* Profile::gemm_table(Dtype dtype) const {
  for (const auto& t : gemm)
    if (t.dtype == dtype) return &t;
  return nullptr;
}

Profile parse_profile(const YamlNode& root, const std::string& name) {
  Profile p = parse_sections(root, name);
  if (p.base.empty()) check_complete(p, root);
  return p;
}

Profile load_profile(const std::string& name_or_path, const std::vector<std::string>& overrides) {
  const std::filesystem::path path = common::resolve_config("profiles", name_or_path);
  std::vector<std::filesystem::path> chain{std::filesystem::weakly_canonical(path)};
  return load_chain(path, overrides, chain);
}

std::string profile_to_yaml(const Profile& p) {
  std::ostringstream y;
  y << "# moesim GPU profile (format: docs/profile-format.md).\n";
  y << "schema_version: " << kConfigSchemaVersion << "\nkind: profile\n";
  if (!p.description.empty()) y << "description: " << yaml_string(p.description) << "\n";
  if (!p.base.empty()) y << "base: " << yaml_string(p.base) << "\n";

  if (has_source(p.device.provenance)) {
    const DeviceContext& d = p.device;
    y << "device:\n  name: " << yaml_string(d.name) << "\n  sm_count: " << d.sm_count
      << "\n  memory: " << unit_value(d.memory, "GiB", 1073741824.0)
      << "\n  hbm_bandwidth: " << unit_value(d.hbm_bandwidth, "GBps", 1e9)
      << "\n  sm_clock: " << unit_value(d.sm_clock, "MHz", 1e6) << "\n";
    if (!d.extra.empty()) {
      y << "  extra:\n";
      for (const auto& [k, v] : d.extra) y << "    " << k << ": " << yaml_string(v) << "\n";
    }
    y << "  source: " << source_yaml(d.provenance) << "\n";
  }

  if (!p.gemm.empty()) {
    y << "gemm:\n";
    for (const GemmTable& t : p.gemm) {
      y << "  - dtype: " << dtype_name(t.dtype) << "\n    peak_tflops: " << number(t.peak_flops / 1e12)
        << "\n    launch_floor: " << unit_value(t.launch_floor, "us", 1e-6);
      if (t.grouped != GroupedGemm::kLaunches)
        y << "\n    grouped: " << common::enum_name<GroupedGemm>(kGroupedGemms, t.grouped);
      y << "\n    source: " << source_yaml(t.provenance) << "\n";
      const bool shared_m =
          std::all_of(t.curves.begin(), t.curves.end(), [&](const GemmCurve& c) { return c.m == t.curves.front().m; });
      if (shared_m && !t.curves.empty()) y << "    m: " << flow(t.curves.front().m) << "\n";
      y << "    shapes:\n";
      for (const GemmCurve& c : t.curves) {
        y << "      - {n: " << c.n << ", k: " << c.k;
        if (!shared_m) y << ", m: " << flow(c.m);
        y << ", time_us: " << flow(c.time, 1e-6) << "}\n";
      }
    }
  }

  if (!p.collectives.empty()) {
    y << "collectives:\n";
    for (const CollectiveCurve& c : p.collectives) {
      double factor = 1.0;
      if (c.op == CollectiveOp::kAllReduce)
        factor = 2.0 * (c.ranks - 1) / c.ranks;
      else if (c.op != CollectiveOp::kSendRecv)
        factor = static_cast<double>(c.ranks - 1) / c.ranks;
      std::vector<double> busbw;
      for (std::size_t i = 0; i < c.bytes.size(); ++i) busbw.push_back(c.bytes[i] * factor / c.time[i]);
      y << "  - op: " << collective_op_name(c.op) << "\n    ranks: " << c.ranks << "\n    scope: " << c.scope
        << "\n    source: " << source_yaml(c.provenance) << "\n    bytes: " << flow(c.bytes)
        << "\n    busbw_GBps: " << flow(busbw, 1e9) << "\n";
    }
  }

  if (has_source(p.nvlink.provenance) || has_source(p.pcie.provenance) || has_source(p.nic.provenance)) {
    y << "links:\n";
    const std::vector<std::pair<std::string, const LinkFigures*>> links{
        {"nvlink", &p.nvlink}, {"pcie", &p.pcie}, {"nic", &p.nic}};
    for (const auto& [name, l] : links) {
      if (!has_source(l->provenance)) continue;
      y << "  " << name << ": {bandwidth_efficiency: " << number(l->bandwidth_efficiency)
        << ", latency: " << unit_value(l->latency, "us", 1e-6) << ", source: " << source_yaml(l->provenance) << "}\n";
    }
  }

  if (has_source(p.contention.provenance)) {
    const ContentionTable& c = p.contention;
    y << "contention:\n  source: " << source_yaml(c.provenance) << "\n  comm_source: " << source_yaml(c.comm_provenance)
      << "\n";
    if (c.comm_sms >= 0)
      y << "  comm_sms: " << c.comm_sms << "\n  comm_sms_source: " << source_yaml(c.sms_provenance) << "\n";
    y << "  grids:\n";
    std::size_t i = 0;
    auto same_grid = [](const ContentionPoint& a, const ContentionPoint& b) {
      return a.comm_op == b.comm_op && a.compute == b.compute && a.comm_sms == b.comm_sms;
    };
    while (i < c.points.size()) {
      const std::optional<CollectiveOp> op = c.points[i].comm_op;
      std::size_t end = i;
      while (end < c.points.size() && same_grid(c.points[end], c.points[i])) ++end;
      std::vector<double> bytes;
      std::vector<double> flops;
      for (std::size_t j = i; j < end; ++j) {
        if (std::find(bytes.begin(), bytes.end(), c.points[j].comm_bytes) == bytes.end())
          bytes.push_back(c.points[j].comm_bytes);
        if (std::find(flops.begin(), flops.end(), c.points[j].gemm_flops) == flops.end())
          flops.push_back(c.points[j].gemm_flops);
      }
      y << "    - comm_op: " << contention_op_name(op) << "\n";
      if (c.points[i].compute)
        y << "      compute: " << common::enum_name<ComputeClass>(kComputeClasses, *c.points[i].compute) << "\n";
      if (c.points[i].comm_sms >= 0) y << "      comm_sms: " << c.points[i].comm_sms << "\n";
      y << "      comm_bytes: " << flow(bytes)
        << "\n      gemm_flop: " << flow(flops) << "\n";
      for (const char* key : {"compute_slowdown", "comm_slowdown"}) {
        y << "      " << key << ": [";
        for (std::size_t r = 0; r < bytes.size(); ++r) {
          std::vector<double> row;
          for (std::size_t col = 0; col < flops.size(); ++col) {
            const ContentionPoint& pt = c.points[i + r * flops.size() + col];
            row.push_back(std::string_view(key) == "compute_slowdown" ? pt.compute_slowdown : pt.comm_slowdown);
          }
          y << (r ? ", " : "") << flow(row);
        }
        y << "]\n";
      }
      i = end;
    }
  }

  if (has_source(p.power.provenance)) {
    const PowerModel& w = p.power;
    auto dtype_map = [&](const std::map<Dtype, double>& m) {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : by_dtype_name(m)) {
        out += (first ? "" : ", ") + dtype_name(k) + ": " + unit_value(v, "W", 1.0);
        first = false;
      }
      return out + "}";
    };
    y << "power:\n  source: " << source_yaml(w.provenance) << "\n  max_power: " << unit_value(w.max_power, "W", 1.0)
      << "\n  min_power_limit: " << unit_value(w.min_power_limit, "W", 1.0)
      << "\n  idle: " << unit_value(w.idle, "W", 1.0) << "\n  compute: " << dtype_map(w.compute)
      << (w.memory_bound.empty() ? std::string() : "\n  memory_bound: " + dtype_map(w.memory_bound))
      << "\n  communication: " << unit_value(w.communication, "W", 1.0) << "\n  overlapped: " << dtype_map(w.overlapped)
      << "\n  cap_curve:\n    source: " << source_yaml(w.cap_provenance)
      << "\n    cap_fraction: " << flow(w.cap_fraction) << "\n    speed_fraction: " << flow(w.speed_fraction) << "\n";
    if (!w.clock_fraction.empty())
      y << "  clock_curve:\n    source: " << source_yaml(w.clock_provenance)
        << "\n    clock_fraction: " << flow(w.clock_fraction)
        << "\n    speed_fraction: " << flow(w.clock_speed_fraction)
        << "\n    power_fraction: " << flow(w.clock_power_fraction) << "\n";
  }

  if (has_source(p.attention.provenance))
    y << "attention:\n  flops_efficiency: " << number(p.attention.flops_efficiency)
      << "\n  source: " << source_yaml(p.attention.provenance) << "\n";
  if (has_source(p.low_latency.provenance))
    y << "low_latency_kernels:\n  dispatch_latency: " << unit_value(p.low_latency.dispatch_latency, "us", 1e-6)
      << "\n  combine_latency: " << unit_value(p.low_latency.combine_latency, "us", 1e-6)
      << "\n  source: " << source_yaml(p.low_latency.provenance) << "\n";
  if (has_source(p.normal.provenance))
    y << "normal_kernels:\n  dispatch_forward_bandwidth: " << unit_value(p.normal.dispatch_forward_bandwidth, "GBps", 1e9)
      << "\n  dispatch_forward_per_token: " << unit_value(p.normal.dispatch_forward_per_token, "ns", 1e-9)
      << "\n  combine_forward_bandwidth: " << unit_value(p.normal.combine_forward_bandwidth, "GBps", 1e9)
      << "\n  source: " << source_yaml(p.normal.provenance) << "\n";
  if (has_source(p.elementwise.provenance))
    y << "elementwise:\n  launch_floor: " << unit_value(p.elementwise.launch_floor, "us", 1e-6)
      << "\n  source: " << source_yaml(p.elementwise.provenance) << "\n";
  return y.str();
}

}  // namespace moesim::models
