#include "models/costs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace moesim::models {

namespace {

const GemmTable& require_table(const Profile& profile, const std::string& dtype) {
  if (const GemmTable* t = profile.gemm_table(dtype)) return *t;
  std::vector<std::string> have;
  for (const auto& t : profile.gemm) have.push_back(t.dtype);
  throw common::InputError("profile " + profile.name + " (" + profile.source_file + "): no GEMM table for dtype " +
                           dtype + "; it has " + common::join(have, ", ") +
                           " (run the model in one of those, e.g. --set dtype=" + (have.empty() ? "bf16" : have[0]) +
                           ", or use a profile of a GPU that supports " + dtype + ")");
}

long ceil_div(long a, long b) { return (a + b - 1) / b; }

void check_tp(int tp) {
  if (tp < 1) throw std::invalid_argument("tensor-parallel degree must be >= 1, got " + std::to_string(tp));
}

struct Shape {
  double n;
  double k;
};

// The model's FFN projections for a TP shard of `ffn` (SwiGLU: gate and up, then down; GELU: up, down).
std::vector<Shape> ffn_shapes(const Architecture& arch, long ffn, int tp) {
  const auto shard = static_cast<double>(ceil_div(ffn, tp));
  const auto hidden = static_cast<double>(arch.hidden_size);
  std::vector<Shape> shapes;
  for (int p = 0; p + 1 < arch.ffn_projections; ++p) shapes.push_back({shard, hidden});
  shapes.push_back({hidden, shard});
  return shapes;
}

std::vector<Shape> attention_shapes(const Architecture& arch, int tp) {
  const AttentionShape& a = arch.attention;
  const auto hidden = static_cast<double>(arch.hidden_size);
  const auto heads = static_cast<double>(ceil_div(a.num_heads, tp));
  if (a.kind == "mla") {
    const double qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
    std::vector<Shape> s;
    if (a.q_lora_rank > 0) {
      s.push_back({static_cast<double>(a.q_lora_rank), hidden});
      s.push_back({heads * qk, static_cast<double>(a.q_lora_rank)});
    } else {
      s.push_back({heads * qk, hidden});
    }
    s.push_back({static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim), hidden});
    s.push_back({heads * (a.qk_nope_head_dim + a.v_head_dim), static_cast<double>(a.kv_lora_rank)});
    s.push_back({hidden, heads * a.v_head_dim});
    return s;
  }
  const auto kv = static_cast<double>(ceil_div(a.num_kv_heads, tp));
  const double d = a.head_dim;
  return {{(heads + 2.0 * kv) * d, hidden}, {hidden, heads * d}};
}

ExpertWork gemms_over(const Profile& profile, const std::string& dtype, double m, const std::vector<Shape>& shapes) {
  ExpertWork w;
  for (const Shape& s : shapes) {
    w.time += gemm_time(profile, dtype, m, s.n, s.k);
    w.flops += gemm_flops(m, s.n, s.k);
  }
  return w;
}

// Piecewise-linear over increasing x, with (1, 1) as the implied uncapped end.
double linear_to_one(const std::vector<double>& x, const std::vector<double>& y, double at, bool proportional_below) {
  if (x.empty() || at >= 1.0) return 1.0;
  if (at <= x.front()) return proportional_below ? y.front() * std::max(at, 0.0) / x.front() : y.front();
  for (std::size_t i = 0; i + 1 < x.size(); ++i)
    if (at <= x[i + 1]) return y[i] + (y[i + 1] - y[i]) * (at - x[i]) / (x[i + 1] - x[i]);
  if (x.back() >= 1.0) return y.back();
  return y.back() + (1.0 - y.back()) * (at - x.back()) / (1.0 - x.back());
}

// Position of `v` on an increasing axis for log-linear interpolation: the lower index and the
// fraction towards the next (0 when clamped).
std::pair<std::size_t, double> locate_log(const std::vector<double>& axis, double v) {
  if (axis.size() < 2 || v <= axis.front()) return {0, 0.0};
  if (v >= axis.back()) return {axis.size() - 1, 0.0};
  std::size_t i = static_cast<std::size_t>(std::upper_bound(axis.begin(), axis.end(), v) - axis.begin()) - 1;
  return {i, std::log(v / axis[i]) / std::log(axis[i + 1] / axis[i])};
}

}  // namespace

double dtype_bytes(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "fp16") return 2.0;
  if (dtype == "fp8") return 1.0;
  if (dtype == "fp32" || dtype == "tf32") return 4.0;
  throw std::invalid_argument("unknown dtype \"" + dtype + "\"");
}

double interpolate_loglog(const std::vector<double>& x, const std::vector<double>& y, double at) {
  if (x.empty() || x.size() != y.size())
    throw std::invalid_argument("interpolate_loglog: needs equally long, non-empty x and y");
  if (at <= x.front()) return y.front();
  if (at >= x.back()) return y.back() * at / x.back();
  const auto i = static_cast<std::size_t>(std::upper_bound(x.begin(), x.end(), at) - x.begin()) - 1;
  if (at == x[i]) return y[i];
  if (!(y[i] > 0.0 && y[i + 1] > 0.0 && x[i] > 0.0))
    throw std::invalid_argument("interpolate_loglog: values must be positive");
  const double t = std::log(at / x[i]) / std::log(x[i + 1] / x[i]);
  // Clamped to the segment's ends so that rounding can never break monotonicity.
  const double v = std::exp(std::log(y[i]) + t * std::log(y[i + 1] / y[i]));
  return std::clamp(v, std::min(y[i], y[i + 1]), std::max(y[i], y[i + 1]));
}

double gemm_flops(double m, double n, double k) { return 2.0 * m * n * k; }

double gemm_time(const Profile& profile, const std::string& dtype, double m, double n, double k) {
  if (m <= 0.0 || n <= 0.0 || k <= 0.0) return 0.0;
  const GemmTable& table = require_table(profile, dtype);
  // The simulator asks for tabulated shapes almost always: find those without any logarithm.
  for (const GemmCurve& c : table.curves)
    if (static_cast<double>(c.n) == n && static_cast<double>(c.k) == k) return interpolate_loglog(c.m, c.time, m);
  const GemmCurve* best = nullptr;
  double best_size = std::numeric_limits<double>::infinity();
  double best_aspect = std::numeric_limits<double>::infinity();
  for (const GemmCurve& c : table.curves) {
    const auto cn = static_cast<double>(c.n);
    const auto ck = static_cast<double>(c.k);
    const double size = std::abs(std::log((n * k) / (cn * ck)));
    const double aspect = std::abs(std::log((n / k) / (cn / ck)));
    if (size < best_size || (size == best_size && aspect < best_aspect)) {
      best = &c;
      best_size = size;
      best_aspect = aspect;
    }
  }
  if (best == nullptr) throw common::InputError("profile " + profile.name + ": GEMM table " + dtype + " has no shapes");
  const double t = interpolate_loglog(best->m, best->time, m);
  const double scale = (n * k) / (static_cast<double>(best->n) * static_cast<double>(best->k));
  const double floor = std::min(table.launch_floor, t);
  return floor + (t - floor) * scale;
}

std::vector<GemmShape> gemm_shapes(const Architecture& arch, int tp) {
  check_tp(tp);
  std::vector<long> ffns;
  if (arch.is_moe()) ffns.push_back(arch.expert_ffn_size);
  if (arch.num_shared_experts > 0) {
    ffns.push_back(arch.shared_expert_ffn_size);
    ffns.push_back(static_cast<long>(arch.num_shared_experts) * arch.shared_expert_ffn_size);
  }
  if (arch.dense_ffn_size > 0) ffns.push_back(arch.dense_ffn_size);
  std::vector<Shape> all;
  for (const long ffn : ffns)
    for (const Shape& s : ffn_shapes(arch, ffn, tp)) all.push_back(s);
  for (const Shape& s : attention_shapes(arch, tp)) all.push_back(s);
  all.push_back({static_cast<double>(ceil_div(arch.vocab_size, tp)), static_cast<double>(arch.hidden_size)});
  std::vector<GemmShape> out;
  for (const Shape& s : all) out.push_back({static_cast<long>(s.n), static_cast<long>(s.k)});
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ExpertWork grouped_expert_time(const Profile& profile, const Architecture& arch,
                               const std::vector<long>& tokens_per_expert, int tp) {
  check_tp(tp);
  const GemmTable& table = require_table(profile, arch.dtype);
  const std::vector<Shape> shapes = ffn_shapes(arch, arch.expert_ffn_size, tp);
  ExpertWork w;
  bool any = false;
  for (const long tokens : tokens_per_expert) {
    if (tokens < 0) throw std::invalid_argument("grouped_expert_time: negative token count");
    if (tokens == 0) continue;
    any = true;
    const auto m = static_cast<double>(tokens);
    for (const Shape& s : shapes) {
      w.time += gemm_time(profile, arch.dtype, m, s.n, s.k) - table.launch_floor;
      w.flops += gemm_flops(m, s.n, s.k);
    }
  }
  // One launch per projection for the whole group.
  if (any) w.time += table.launch_floor * static_cast<double>(shapes.size());
  return w;
}

ExpertWork dense_ffn_time(const Profile& profile, const Architecture& arch, long tokens, long ffn_size, int tp) {
  check_tp(tp);
  if (tokens <= 0) return {};
  return gemms_over(profile, arch.dtype, static_cast<double>(tokens), ffn_shapes(arch, ffn_size, tp));
}

ExpertWork attention_core_time(const Profile& profile, const Architecture& arch, const AttentionBatch& batch, int tp) {
  check_tp(tp);
  if (batch.new_tokens.size() != batch.context.size())
    throw std::invalid_argument("attention: new_tokens and context differ in length");
  const std::string dtype = arch.dtype == "fp8" && profile.gemm_table("bf16") ? "bf16" : arch.dtype;
  const GemmTable& table = require_table(profile, dtype);
  const double elem = dtype_bytes(dtype);
  const AttentionShape& a = arch.attention;
  const auto heads = static_cast<double>(ceil_div(a.num_heads, tp));
  const bool mla = a.kind == "mla";
  const double kv_per_position = mla ? (a.kv_lora_rank + a.qk_rope_head_dim) * elem
                                     : 2.0 * static_cast<double>(ceil_div(a.num_kv_heads, tp)) * a.head_dim * elem;
  double flops = 0.0;
  double bytes = 0.0;
  for (std::size_t i = 0; i < batch.new_tokens.size(); ++i) {
    const auto n = static_cast<double>(batch.new_tokens[i]);
    const auto c = static_cast<double>(batch.context[i]);
    if (n < 0.0 || c < 0.0) throw std::invalid_argument("attention: negative token count");
    if (n == 0.0) continue;
    double qk_dim = a.head_dim;
    double v_dim = a.head_dim;
    if (mla && n > 1.0) {
      qk_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
      v_dim = a.v_head_dim;
    } else if (mla) {
      qk_dim = a.kv_lora_rank + a.qk_rope_head_dim;
      v_dim = a.kv_lora_rank;
    }
    const double pairs = n * c + n * (n + 1.0) / 2.0;
    flops += pairs * heads * (2.0 * qk_dim + 2.0 * v_dim);
    bytes += (c + n) * kv_per_position + n * heads * (qk_dim + v_dim) * elem;
  }
  if (flops == 0.0) return {};
  const double rate = table.peak_flops * profile.attention.flops_efficiency;
  return {table.launch_floor + std::max(flops / rate, bytes / profile.device.hbm_bandwidth), flops};
}

ExpertWork attention_time(const Profile& profile, const Architecture& arch, const AttentionBatch& batch, int tp) {
  ExpertWork core = attention_core_time(profile, arch, batch, tp);
  long tokens = 0;
  for (const long n : batch.new_tokens) tokens += n;
  if (tokens <= 0) return core;
  const ExpertWork proj = gemms_over(profile, arch.dtype, static_cast<double>(tokens), attention_shapes(arch, tp));
  return {core.time + proj.time, core.flops + proj.flops};
}

double busbw_factor(const std::string& op, int ranks) {
  if (ranks < 1) throw std::invalid_argument("busbw_factor: ranks must be >= 1");
  const double n = ranks;
  if (op == "all_reduce") return 2.0 * (n - 1.0) / n;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") return (n - 1.0) / n;
  if (op == "send_recv") return 1.0;
  throw std::invalid_argument("unknown collective \"" + op + "\"");
}

double collective_time(const Profile& profile, const std::string& op, int ranks, double bytes, double link_bandwidth,
                       double link_latency) {
  const double factor = busbw_factor(op, std::max(ranks, 1));
  if (ranks <= 1 || bytes <= 0.0) return 0.0;
  const CollectiveCurve* best = nullptr;
  auto better = [&](const CollectiveCurve& c) {
    if (best == nullptr) return true;
    const double d = std::abs(std::log(static_cast<double>(c.ranks) / ranks));
    const double bd = std::abs(std::log(static_cast<double>(best->ranks) / ranks));
    if (d != bd) return d < bd;
    if ((c.scope == "intra_node") != (best->scope == "intra_node")) return c.scope == "intra_node";
    return c.ranks < best->ranks;
  };
  for (const CollectiveCurve& c : profile.collectives)
    if (c.op == op && better(c)) best = &c;
  if (best != nullptr) {
    const double t = interpolate_loglog(best->bytes, best->time, bytes);
    // Another rank count: the curve's bus bandwidth at this size, with this count's factor.
    return best->ranks == ranks ? t : t * factor / busbw_factor(op, best->ranks);
  }
  if (!(link_bandwidth > 0.0))
    throw std::invalid_argument("collective_time: no " + op + " curve in profile " + profile.name +
                                " and no link bandwidth to model it");
  double steps = ranks - 1.0;
  if (op == "all_reduce") steps = 2.0 * (ranks - 1.0);
  if (op == "send_recv") steps = 1.0;
  return steps * link_latency + bytes * factor / link_bandwidth;
}

Slowdown contention(const Profile& profile, const std::string& comm_op, double comm_bytes, double gemm_flops_count) {
  if (comm_bytes <= 0.0 || gemm_flops_count <= 0.0) return {};
  const auto& points = profile.contention.points;
  auto grid_of = [&](const std::string& op) {
    std::vector<const ContentionPoint*> grid;
    for (const auto& p : points)
      if (p.comm_op == op) grid.push_back(&p);
    return grid;
  };
  std::vector<const ContentionPoint*> grid = grid_of(comm_op);
  if (grid.empty()) grid = grid_of("any");
  if (grid.empty()) return {};
  std::vector<double> bytes_axis;
  std::vector<double> flops_axis;
  for (const ContentionPoint* p : grid) {
    if (bytes_axis.empty() || p->comm_bytes > bytes_axis.back()) bytes_axis.push_back(p->comm_bytes);
    if (bytes_axis.size() == 1) flops_axis.push_back(p->gemm_flops);
  }
  if (bytes_axis.size() * flops_axis.size() != grid.size())
    throw std::invalid_argument("contention: the " + grid.front()->comm_op + " points of profile " + profile.name +
                                " are not a full grid");
  const auto [i, fi] = locate_log(bytes_axis, comm_bytes);
  const auto [j, fj] = locate_log(flops_axis, gemm_flops_count);
  const std::size_t cols = flops_axis.size();
  auto at = [&](std::size_t r, std::size_t c) {
    return grid[std::min(r, bytes_axis.size() - 1) * cols + std::min(c, cols - 1)];
  };
  auto blend = [&](double ContentionPoint::*field) {
    const double top = (1.0 - fj) * at(i, j)->*field + fj * at(i, j + 1)->*field;
    const double bottom = (1.0 - fj) * at(i + 1, j)->*field + fj * at(i + 1, j + 1)->*field;
    return std::max(1.0, (1.0 - fi) * top + fi * bottom);
  };
  return {blend(&ContentionPoint::compute_slowdown), blend(&ContentionPoint::comm_slowdown)};
}

double state_power(const Profile& profile, GpuState state, const std::string& dtype, double power_cap) {
  const PowerModel& p = profile.power;
  auto by_dtype = [&](const std::map<std::string, double>& m) {
    if (auto it = m.find(dtype); it != m.end()) return it->second;
    double highest = p.idle;
    for (const auto& [d, w] : m) highest = std::max(highest, w);
    return highest;
  };
  double w = p.idle;
  switch (state) {
    case GpuState::kIdle:
      w = p.idle;
      break;
    case GpuState::kCompute:
      w = by_dtype(p.compute);
      break;
    case GpuState::kComm:
      w = p.communication;
      break;
    case GpuState::kBoth:
      w = by_dtype(p.overlapped);
      break;
  }
  return power_cap > 0.0 ? std::min(w, power_cap) : w;
}

double cap_speed_factor(const Profile& profile, double power_cap) {
  const PowerModel& p = profile.power;
  if (power_cap <= 0.0 || p.max_power <= 0.0) return 1.0;
  return linear_to_one(p.cap_fraction, p.speed_fraction, power_cap / p.max_power, true);
}

double clock_speed_factor(const Profile& profile, double sm_clock_limit) {
  if (sm_clock_limit <= 0.0 || profile.device.sm_clock <= 0.0) return 1.0;
  return linear_to_one(profile.power.clock_fraction, profile.power.clock_speed_fraction,
                       sm_clock_limit / profile.device.sm_clock, true);
}

double clock_power_factor(const Profile& profile, double sm_clock_limit) {
  if (sm_clock_limit <= 0.0 || profile.device.sm_clock <= 0.0) return 1.0;
  return linear_to_one(profile.power.clock_fraction, profile.power.clock_power_fraction,
                       sm_clock_limit / profile.device.sm_clock, false);
}

}  // namespace moesim::models
