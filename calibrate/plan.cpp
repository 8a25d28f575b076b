#include "calibrate/plan.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "models/architecture.hpp"
#include "models/costs.hpp"

namespace moesim::calibrate {

using common::UsageError;
using models::CollectiveOp;
using models::Dtype;

double work_flops(const GemmWork& work) {
  double flops = 0.0;
  for (const GemmOp& op : work) flops += 2.0 * static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.k);
  return flops;
}

std::string traffic_label(const Traffic& t) {
  std::ostringstream s;
  if (t.kind == "nccl") {
    s << (t.op ? models::collective_op_name(*t.op) : std::string()) << " x" << t.ranks;
    if (!t.traffic_matrix.empty()) s << " (matrix)";
  } else {
    s << t.kind;
  }
  if (t.ctas > 0) s << " ctas=" << t.ctas;
  return s.str();
}

PlanKind parse_plan_kind(std::string_view text) {
  if (text == "quick") return PlanKind::kQuick;
  if (text == "full") return PlanKind::kFull;
  throw UsageError("--plan: expected quick or full, got " + common::quoted(text) +
                   common::did_you_mean(text, {"quick", "full"}));
}

std::string plan_kind_name(PlanKind kind) { return kind == PlanKind::kQuick ? "quick" : "full"; }

double parse_size(std::string_view text, std::string_view option) {
  std::string_view digits = text;
  double scale = 1.0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': scale = 1024.0; break;
      case 'M': case 'm': scale = 1048576.0; break;
      case 'G': case 'g': scale = 1073741824.0; break;
      case 'T': case 't': scale = 1099511627776.0; break;
      default: break;
    }
    if (scale != 1.0) digits.remove_suffix(1);
  }
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || !std::isfinite(value) ||
      value <= 0.0)
    throw UsageError(std::string(option) + ": expected a positive size such as 1024, 64K, 16M or 1G, got " +
                     common::quoted(text));
  return value * scale;
}

std::vector<double> expand_sizes(const SizeRange& r) {
  if (r.factor <= 1.0)
    throw UsageError("-f/--stepfactor: expected a factor above 1, got " + std::to_string(r.factor));
  if (r.begin > r.end)
    throw UsageError("-b/--minbytes (" + std::to_string(static_cast<long long>(r.begin)) +
                     ") is larger than -e/--maxbytes (" + std::to_string(static_cast<long long>(r.end)) + ")");
  std::vector<double> sizes;
  // The relative tolerance keeps 1K..1G by 2 from losing its last point to rounding.
  for (double s = r.begin; s <= r.end * (1.0 + 1e-9); s *= r.factor) sizes.push_back(std::round(s));
  return sizes;
}

std::vector<Dtype> parse_dtypes(std::string_view text) {
  std::vector<std::string> names;
  for (const Dtype d : kAllDtypes) names.push_back(models::dtype_name(d));
  std::vector<Dtype> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item = text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::optional<Dtype> dtype = common::enum_from_name<Dtype>(models::kDtypes, item);
    if (!dtype)
      throw UsageError("--dtypes: unknown dtype " + common::quoted(item) + common::did_you_mean(item, names) +
                       "; valid: " + common::join(names, ", "));
    if (std::find(out.begin(), out.end(), *dtype) != out.end())
      throw UsageError("--dtypes: " + common::quoted(item) + " is given twice");
    out.push_back(*dtype);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::size_t Plan::gemm_count() const {
  std::size_t n = 0;
  for (const GemmCurveCase& c : gemms) n += c.m.size();
  return n;
}

namespace {

std::vector<long> powers(long from, long to, long step) {
  std::vector<long> out;
  for (long v = from; v <= to; v *= step) out.push_back(v);
  return out;
}

// Token counts of `experts` experts summing to about `tokens`, skewed as routers are (weights 1/(i+1)).
std::vector<long> skewed_tokens(int experts, long tokens) {
  double total = 0.0;
  for (int i = 0; i < experts; ++i) total += 1.0 / (i + 1);
  std::vector<long> m;
  for (int i = 0; i < experts; ++i)
    m.push_back(std::max(1L, std::lround(static_cast<double>(tokens) / (i + 1) / total)));
  return m;
}

// A skewed all-to-all matrix: rank r sends to (r + d) mod n with weight 1/(1+d), as hot experts do.
std::vector<double> default_matrix(int n) {
  std::vector<double> w(static_cast<std::size_t>(n) * n, 0.0);
  for (int r = 0; r < n; ++r)
    for (int d = 0; d < n; ++d) w[static_cast<std::size_t>(r) * n + (r + d) % n] = 1.0 / (1.0 + d);
  return w;
}

}  // namespace

Plan make_plan(const PlanOptions& o) {
  if (o.gpus < 1) throw UsageError("--gpus: expected at least 1, got " + std::to_string(o.gpus));
  const bool quick = o.kind == PlanKind::kQuick;
  Plan plan;
  plan.kind = o.kind;
  plan.gpus = o.gpus;
  plan.dtypes = o.dtypes;
  if (plan.dtypes.empty()) {
    plan.dtypes = quick ? std::vector<Dtype>{Dtype::kBf16, Dtype::kFp16, Dtype::kFp8} : kAllDtypes;
    if (!o.fp8_supported) std::erase(plan.dtypes, Dtype::kFp8);
  } else if (!o.fp8_supported && std::find(plan.dtypes.begin(), plan.dtypes.end(), Dtype::kFp8) != plan.dtypes.end()) {
    throw UsageError("--dtypes: fp8 was asked for, but this GPU has no fp8 GEMMs (compute capability 8.9 or newer)");
  }
  plan.gemm_timing = quick ? Timing{3, 10, 0, 50e-6} : Timing{3, 15, 0, 100e-6};
  plan.comm_timing = quick ? Timing{2, 5, 10, 0.0} : Timing{5, 20, 20, 0.0};

  std::vector<std::string> archs = o.architectures;
  if (archs.empty()) archs = common::config_names("architectures");
  std::set<std::pair<long, long>> shapes{{4096, 4096}, {8192, 8192}};
  std::set<std::pair<long, long>> tp1_shapes = shapes;
  std::vector<models::Architecture> loaded;
  for (const std::string& name : archs) {
    loaded.push_back(models::load_architecture(name));
    for (int tp : quick ? std::vector<int>{1} : std::vector<int>{1, 2, 4})
      for (const models::GemmShape& s : models::gemm_shapes(loaded.back(), tp)) {
        shapes.insert({s.n, s.k});
        if (tp == 1) tp1_shapes.insert({s.n, s.k});
      }
  }
  const std::vector<long> m_all = powers(1, 65536, 2);
  for (const Dtype dtype : plan.dtypes) {
    // 4-byte GEMMs at 65536 tokens take 100+ ms each: the table's linear extrapolation covers them.
    std::vector<long> m = m_all;
    if (dtype == Dtype::kFp32 || dtype == Dtype::kTf32) std::erase_if(m, [](long v) { return v > 16384; });
    // Full: 4-byte dtypes cover the TP-1 shapes only (the 16- and 8-bit tables cover TP 1, 2 and 4).
    const auto& dshapes = (dtype == Dtype::kFp32 || dtype == Dtype::kTf32) ? tp1_shapes : shapes;
    for (const auto& [n, k] : dshapes) plan.gemms.push_back({dtype, n, k, m});
  }

  const Dtype group_dtype =
      plan.dtypes.front() == Dtype::kFp32 && plan.dtypes.size() > 1 ? plan.dtypes[1] : plan.dtypes.front();
  for (const models::Architecture& a : loaded) {
    if (a.num_experts == 0) continue;
    const int experts = std::min(a.num_experts, 8);
    for (long tokens : quick ? std::vector<long>{4096} : std::vector<long>{512, 4096, 32768}) {
      GroupedCase g{group_dtype, a.name + " gate x" + std::to_string(experts) + " T=" + std::to_string(tokens), {}};
      for (long m : skewed_tokens(experts, tokens)) g.work.push_back({group_dtype, m, a.expert_ffn_size, a.hidden_size});
      plan.grouped.push_back(std::move(g));
    }
  }

  SizeRange range = o.sizes ? *o.sizes : (quick ? SizeRange{1024.0, 268435456.0, 4.0} : SizeRange{1024.0, 1073741824.0, 2.0});
  const std::vector<double> sizes = expand_sizes(range);
  if (!o.node_of_rank.empty() && o.node_of_rank.size() != static_cast<std::size_t>(o.gpus))
    throw UsageError("the cluster layout names " + std::to_string(o.node_of_rank.size()) + " ranks for " +
                     std::to_string(o.gpus) + " GPUs");
  if (o.gpus >= 2) {
    const bool inter = std::set<int>(o.node_of_rank.begin(), o.node_of_rank.end()).size() > 1;
    for (CollectiveOp op :
         {CollectiveOp::kAllReduce, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter, CollectiveOp::kAllToAll})
      plan.collectives.push_back({Traffic{"nccl", op, sizes.front(), o.gpus, 0, {}, 1}, sizes, "uniform", inter});
    std::vector<double> matrix = o.traffic_matrix.empty() ? default_matrix(o.gpus) : o.traffic_matrix;
    plan.collectives.push_back(
        {Traffic{"nccl", CollectiveOp::kAllToAll, sizes.front(), o.gpus, 0, matrix, 1}, sizes, "matrix", inter});
    auto send_recv = [&](int peer, bool across) {
      plan.collectives.push_back(
          {Traffic{"nccl", CollectiveOp::kSendRecv, sizes.front(), 2, 0, {}, peer}, sizes, "uniform", across});
    };
    if (o.node_of_rank.empty()) {
      send_recv(1, false);
    } else {
      for (int r = 1; r < o.gpus; ++r)
        if (o.node_of_rank[static_cast<std::size_t>(r)] == o.node_of_rank[0]) {
          send_recv(r, false);
          break;
        }
      for (int r = 1; r < o.gpus; ++r)
        if (o.node_of_rank[static_cast<std::size_t>(r)] != o.node_of_rank[0]) {
          send_recv(r, true);
          break;
        }
    }
  }
  plan.single_gpu_traffic.push_back({"copy_kernel", std::nullopt, 1073741824.0, 1, 0, {}, 1});
  plan.single_gpu_traffic.push_back({"copy_engine", std::nullopt, 268435456.0, 1, 0, {}, 1});

  // Contention grid: GEMMs of about 1e10..1e12 FLOP against traffic of a few MB to 256 MB.
  const Dtype cdtype = group_dtype;
  const std::vector<long> gemm_m = quick ? std::vector<long>{512, 16384} : std::vector<long>{256, 2048, 16384};
  const std::vector<double> comm_bytes =
      quick ? std::vector<double>{16777216.0, 268435456.0} : std::vector<double>{4194304.0, 33554432.0, 268435456.0};
  const std::vector<int> ctas = quick ? std::vector<int>{16} : std::vector<int>{16, 8, 32};
  auto add_point = [&](const Traffic& t, bool in_grid, std::optional<CollectiveOp> grid_op) {
    for (long m : gemm_m) plan.contention.push_back({{GemmOp{cdtype, m, 4096, 4096}}, cdtype, t, in_grid, grid_op});
  };
  for (int c : ctas)
    for (double b : comm_bytes) {
      // Every CTA count is a grid of its own (the SMs the communication holds); the profile's default
      // is NCCL's usual 16 channels.
      if (o.gpus >= 2) {
        for (CollectiveOp op : {CollectiveOp::kAllToAll, CollectiveOp::kAllGather, CollectiveOp::kReduceScatter})
          add_point(Traffic{"nccl", op, b, o.gpus, c, {}, 1}, true, op);
      } else {
        add_point(Traffic{"copy_kernel", std::nullopt, b, 1, c, {}, 1}, true, std::nullopt);
      }
    }
  // The copy engine holds no SM: its grid is the zero-SM class.
  if (o.gpus == 1 && !quick)
    for (double b : comm_bytes) add_point(Traffic{"copy_engine", std::nullopt, b, 1, 0, {}, 1}, true, std::nullopt);
  // The dtype sweep (raw JSON): the same GEMMs in the other tensor-core dtypes against the middle size.
  if (!quick) {
    const Traffic mid = o.gpus >= 2 ? Traffic{"nccl", CollectiveOp::kAllToAll, comm_bytes[1], o.gpus, 16, {}, 1}
                                    : Traffic{"copy_kernel", std::nullopt, comm_bytes[1], 1, 16, {}, 1};
    for (const Dtype d : plan.dtypes)
      if (d != cdtype && d != Dtype::kFp32)
        for (long m : gemm_m) plan.contention.push_back({{GemmOp{d, m, 4096, 4096}}, d, mid, false, std::nullopt});
  }

  const Traffic comm_state = o.gpus >= 2 ? Traffic{"nccl", CollectiveOp::kAllReduce, 268435456.0, o.gpus, 0, {}, 1}
                                         : Traffic{"copy_kernel", std::nullopt, 268435456.0, 1, 16, {}, 1};
  plan.power_state_seconds = 1.0;
  plan.power.push_back({"idle", std::nullopt, {}, {}, plan.power_state_seconds});
  plan.power.push_back({"communication", std::nullopt, {}, comm_state, plan.power_state_seconds});
  for (const Dtype dtype : plan.dtypes) {
    const long s = dtype == Dtype::kFp32 || dtype == Dtype::kTf32 ? 4096 : 8192;
    const GemmWork big{GemmOp{dtype, s, s, s}};
    plan.power.push_back({"compute", dtype, big, {}, plan.power_state_seconds});
    plan.power.push_back({"overlapped", dtype, big, comm_state, plan.power_state_seconds});
    // Memory-bound: 16 rows against an 8192 x 8192 weight (128 MiB in 16 bits, past any L2) is 16
    // FLOP per weight byte in 16 bits, far below every GPU's ridge: it streams HBM.
    const GemmWork thin{GemmOp{dtype, 16, 8192, 8192}};
    plan.power.push_back({"memory_bound", dtype, thin, {}, plan.power_state_seconds});
  }
  if (o.allow_set_power_limit) plan.power_limit_fractions = {1.0, 0.85, 0.7, 0.55, 0.4};
  if (o.allow_set_clocks) plan.clock_fractions = {1.0, 0.85, 0.7, 0.55};
  return plan;
}

namespace {

constexpr double kPerMeasurement = 1.5e-3;  // s: heuristic query, events, synchronisation
constexpr double kPerCurve = 25e-3;         // s: allocation and random initialisation of one shape
constexpr double kSetup = 3.0;              // s: context, cuBLASLt and NCCL loading
constexpr double kPerCommunicator = 2.0;    // s: NCCL communicator creation

double predicted_gemm(const models::Profile& ref, const GemmOp& op) {
  // A dtype the reference lacks runs at the 16-bit table's speed scaled by the peak ratio.
  static const std::map<Dtype, double> slower = {
      {Dtype::kFp32, 14.8}, {Dtype::kTf32, 2.0}, {Dtype::kFp16, 1.0}, {Dtype::kFp8, 0.5}};
  const double m = static_cast<double>(op.m), n = static_cast<double>(op.n), k = static_cast<double>(op.k);
  if (ref.gemm_table(op.dtype)) return models::gemm_time(ref, op.dtype, m, n, k);
  const auto it = slower.find(op.dtype);
  return models::gemm_time(ref, Dtype::kBf16, m, n, k) * (it == slower.end() ? 1.0 : it->second);
}

double predicted_work(const models::Profile& ref, const GemmWork& work) {
  double t = 0.0;
  for (const GemmOp& op : work) t += predicted_gemm(ref, op);
  return t;
}

double predicted_traffic(const models::Profile& ref, const Traffic& t) {
  if (t.kind == "nccl") return models::collective_time(ref, t.op.value(), t.ranks, t.bytes, 450e9, 2e-6);
  if (t.kind == "copy_engine") return 5e-6 + t.bytes / 50e9;
  const double hbm = ref.device.hbm_bandwidth > 0 ? ref.device.hbm_bandwidth : 2e12;
  const double share = t.ctas > 0 && ref.device.sm_count > 0 ? std::min(1.0, 4.0 * t.ctas / ref.device.sm_count) : 1.0;
  return 4e-6 + 2.0 * t.bytes / (hbm * share);
}

double sample_cost(const Timing& timing, double op_time) {
  const double inner = timing.inner > 0 ? timing.inner : std::max(1.0, std::ceil(timing.min_sample / op_time));
  return (timing.warmup + timing.repetitions) * inner * op_time + kPerMeasurement;
}

}  // namespace

PlanEstimate estimate_plan(const Plan& plan, const models::Profile& ref) {
  PlanEstimate e;
  e.setup = kSetup;
  for (const GemmCurveCase& c : plan.gemms) {
    e.gemm += kPerCurve;
    for (long m : c.m) e.gemm += sample_cost(plan.gemm_timing, predicted_gemm(ref, {c.dtype, m, c.n, c.k}));
  }
  for (const GroupedCase& g : plan.grouped) {
    e.grouped += kPerCurve + sample_cost(plan.gemm_timing, predicted_work(ref, g.work));
    for (const GemmOp& op : g.work) e.grouped += sample_cost(plan.gemm_timing, predicted_gemm(ref, op));
  }
  std::set<std::pair<int, int>> communicators;
  for (const CollectiveCase& c : plan.collectives) {
    communicators.insert({c.traffic.ranks, c.traffic.ctas});
    for (double b : c.sizes) {
      Traffic t = c.traffic;
      t.bytes = b;
      e.collectives += sample_cost(plan.comm_timing, predicted_traffic(ref, t)) + 2.0 * predicted_traffic(ref, t);
    }
  }
  for (const Traffic& t : plan.single_gpu_traffic) e.contention += sample_cost(plan.gemm_timing, predicted_traffic(ref, t));
  for (const ContentionCase& c : plan.contention) {
    if (c.traffic.kind == "nccl") communicators.insert({c.traffic.ranks, c.traffic.ctas});
    const double g = predicted_work(ref, c.gemm), t = predicted_traffic(ref, c.traffic);
    // Alone: both sides once; overlapped: each side measured while the other covers it (1.5x).
    e.contention += sample_cost(plan.gemm_timing, g) + sample_cost(plan.gemm_timing, t) +
                    1.5 * (sample_cost(plan.gemm_timing, std::max(g, t)) * 2.0) + kPerCurve;
  }
  e.setup += kPerCommunicator * static_cast<double>(communicators.size());
  for (const PowerState& p : plan.power) e.power += p.seconds + 0.3;
  e.power += static_cast<double>(plan.power_limit_fractions.size() + plan.clock_fractions.size()) *
             (plan.power_state_seconds + 1.3);
  return e;
}

std::string describe_plan(const Plan& plan, const PlanEstimate& e) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1);
  s << "# moesim-calibrate --plan " << plan_kind_name(plan.kind) << " on " << plan.gpus << " GPU"
    << (plan.gpus > 1 ? "s" : "") << " (dry run: nothing is measured)\n";
  s << "# dtypes:";
  for (const Dtype d : plan.dtypes) s << ' ' << models::dtype_name(d);
  s << "\n#\n# part          measurements  estimate\n";
  std::set<std::pair<long, long>> shapes;
  for (const GemmCurveCase& c : plan.gemms) shapes.insert({c.n, c.k});
  auto row = [&](const char* name, std::size_t count, double seconds, const std::string& what) {
    s << "  " << std::left << std::setw(14) << name << std::right << std::setw(12) << count << std::setw(9) << seconds
      << " s   " << what << "\n";
  };
  row("gemm", plan.gemm_count(), e.gemm,
      std::to_string(shapes.size()) + " shapes (n, k) x " + std::to_string(plan.dtypes.size()) + " dtypes, m from " +
          std::to_string(plan.gemms.empty() ? 0 : plan.gemms.front().m.front()) + " to " +
          std::to_string(plan.gemms.empty() ? 0 : plan.gemms.front().m.back()) + ", " +
          std::to_string(plan.gemm_timing.warmup) + " warm-up + " + std::to_string(plan.gemm_timing.repetitions) +
          " samples");
  row("grouped gemm", plan.grouped.size(), e.grouped, "expert groups with skewed token counts, vs their GEMMs one by one");
  std::size_t coll = 0;
  for (const CollectiveCase& c : plan.collectives) coll += c.sizes.size();
  row("collectives", coll, e.collectives,
      plan.collectives.empty()
          ? std::string("none on one GPU: the profile's base supplies them")
          : std::to_string(plan.collectives.size()) + " ops x " + std::to_string(plan.collectives.front().sizes.size()) +
                " sizes, " + std::to_string(plan.comm_timing.repetitions) + " samples of " +
                std::to_string(plan.comm_timing.inner) + " iterations, #wrong checked");
  row("contention", plan.contention.size() + plan.single_gpu_traffic.size(), e.contention,
      plan.gpus > 1 ? "GEMM x NCCL collective on two streams, both ways, overlap checked"
                    : "GEMM x copy kernel (CTA sweep) and copy engine, both ways, overlap checked");
  row("power", plan.power.size() + plan.power_limit_fractions.size() + plan.clock_fractions.size(), e.power,
      "NVML energy over ~" + std::to_string(static_cast<int>(plan.power_state_seconds)) + " s per state" +
          (plan.power_limit_fractions.empty() ? std::string(", no power-limit sweep (--allow-set-power-limit)")
                                              : std::string(", power-limit sweep")) +
          (plan.clock_fractions.empty() ? std::string(", no clock sweep (--allow-set-clocks)") : std::string(", clock sweep")));
  row("setup", 0, e.setup, "CUDA context, library loading, NCCL communicators");
  s << "# estimated total: " << e.total() << " s (" << e.total() / 60.0 << " min)\n";
  return s.str();
}

}  // namespace moesim::calibrate
