#include "models/costs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"
#include "common/strings.hpp"

namespace moesim::models {

namespace {

const GemmTable& require_table(const Profile& profile, Dtype dtype) {
  if (const GemmTable* t = profile.gemm_table(dtype)) return *t;
  std::vector<std::string> have;
  for (const auto& t : profile.gemm) have.push_back(dtype_name(t.dtype));
  throw common::InputError("profile " + profile.name + " (" + profile.source_file + "): no GEMM table for dtype " +
                           dtype_name(dtype) + "; it has " + common::join(have, ", ") +
                           " (run the model in one of those, e.g. --set dtype=" + (have.empty() ? "bf16" : have[0]) +
                           ", or use a profile of a GPU that supports " + dtype_name(dtype) + ")");
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
      // The query's and the KV's down-projections read the same input: serving engines run them as
      // one GEMM (SGLang's fused_qkv_a_proj_with_mqa, python/sglang/srt/models/deepseek_v2.py).
      s.push_back({static_cast<double>(a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim), hidden});
      s.push_back({heads * qk, static_cast<double>(a.q_lora_rank)});
    } else {
      s.push_back({heads * qk, hidden});
      s.push_back({static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim), hidden});
    }
    s.push_back({heads * (a.qk_nope_head_dim + a.v_head_dim), static_cast<double>(a.kv_lora_rank)});
    s.push_back({hidden, heads * a.v_head_dim});
    return s;
  }
  const auto kv = static_cast<double>(ceil_div(a.num_kv_heads, tp));
  const double d = a.head_dim;
  return {{(heads + 2.0 * kv) * d, hidden}, {hidden, heads * d}};
}

ExpertWork gemms_over(const Profile& profile, Dtype dtype, double m, const std::vector<Shape>& shapes) {
  ExpertWork w;
  for (const Shape& s : shapes) {
    w.time += gemm_time(profile, dtype, m, s.n, s.k);
    w.flops += gemm_flops(m, s.n, s.k);
    w.bytes += gemm_bytes(dtype, m, s.n, s.k);
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

double dtype_bytes(Dtype dtype) {
  switch (dtype) {
    case Dtype::kBf16:
    case Dtype::kFp16:
      return 2.0;
    case Dtype::kFp8:
      return 1.0;
    case Dtype::kFp32:
    case Dtype::kTf32:
      return 4.0;
  }
  // Only a value cast from outside the enum gets here.
  throw std::invalid_argument("unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

double kv_projection_width(const Architecture& arch, int tp) {
  check_tp(tp);
  const AttentionShape& a = arch.attention;
  if (a.kind == "mla") return static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim);
  return 2.0 * static_cast<double>(ceil_div(a.num_kv_heads, tp)) * a.head_dim;
}

double kv_bytes_per_token_layer(const Architecture& arch, int tp) {
  const double elem = arch.dtype == Dtype::kFp8 ? 2.0 : dtype_bytes(arch.dtype);
  return kv_projection_width(arch, tp) * elem;
}

double expert_weight_bytes(const Architecture& arch) {
  return static_cast<double>(arch.ffn_projections) * arch.hidden_size * static_cast<double>(arch.expert_ffn_size) *
         dtype_bytes(arch.dtype);
}

double dispatch_element_bytes(Dtype dtype) { return dtype == Dtype::kFp8 ? 1.0 + 4.0 / 128.0 : dtype_bytes(dtype); }

double combine_element_bytes(Dtype dtype) { return dtype == Dtype::kFp8 ? 2.0 : dtype_bytes(dtype); }

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

double gemm_bytes(Dtype dtype, double m, double n, double k) {
  const double in = dtype_bytes(dtype), out = dtype == Dtype::kFp8 ? 2.0 : in;
  return in * (m * k + k * n) + out * m * n;
}

double gemm_flops(double m, double n, double k) { return 2.0 * m * n * k; }

double gemm_time(const Profile& profile, Dtype dtype, double m, double n, double k) {
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
  if (best == nullptr)
    throw common::InputError("profile " + profile.name + ": GEMM table " + dtype_name(dtype) + " has no shapes");
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

double grouped_gemm_time(const Profile& profile, Dtype dtype, const std::vector<double>& rows, double n, double k) {
  const GemmTable& table = require_table(profile, dtype);
  double time = 0.0;
  double all_rows = 0.0;
  long groups = 0;
  for (const double m : rows) {
    if (m < 0.0) throw std::invalid_argument("grouped_gemm_time: negative row count");
    if (m == 0.0) continue;
    ++groups;
    all_rows += m;
    if (table.grouped == GroupedGemm::kLaunches) time += gemm_time(profile, dtype, m, n, k) - table.launch_floor;
  }
  if (groups == 0) return 0.0;
  // kLaunches: the launch floor once for the whole group.
  if (table.grouped == GroupedGemm::kLaunches) return time + table.launch_floor;
  // kPersistent: the tiles of all rows share the SMs as one GEMM's do; each group past the first
  // brings its own weights, which the GEMM of all rows reads only once.
  return gemm_time(profile, dtype, all_rows, n, k) +
         static_cast<double>(groups - 1) * dtype_bytes(dtype) * n * k / profile.device.hbm_bandwidth;
}

ExpertWork grouped_expert_time(const Profile& profile, const Architecture& arch,
                               const std::vector<long>& tokens_per_expert, int tp) {
  check_tp(tp);
  require_table(profile, arch.dtype);
  const std::vector<Shape> shapes = ffn_shapes(arch, arch.expert_ffn_size, tp);
  ExpertWork w;
  std::vector<double> rows;
  rows.reserve(tokens_per_expert.size());
  for (const long tokens : tokens_per_expert) {
    if (tokens < 0) throw std::invalid_argument("grouped_expert_time: negative token count");
    if (tokens == 0) continue;
    const auto m = static_cast<double>(tokens);
    rows.push_back(m);
    for (const Shape& s : shapes) {
      w.flops += gemm_flops(m, s.n, s.k);
      w.bytes += gemm_bytes(arch.dtype, m, s.n, s.k);
    }
  }
  if (rows.empty()) return w;
  for (const Shape& s : shapes) w.time += grouped_gemm_time(profile, arch.dtype, rows, s.n, s.k);
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
  const Dtype dtype = arch.dtype == Dtype::kFp8 && profile.gemm_table(Dtype::kBf16) ? Dtype::kBf16 : arch.dtype;
  const GemmTable& table = require_table(profile, dtype);
  const double elem = dtype_bytes(dtype);
  const AttentionShape& a = arch.attention;
  const auto heads = static_cast<double>(ceil_div(a.num_heads, tp));
  const bool mla = a.kind == "mla";
  const double kv_per_position = kv_projection_width(arch, tp) * elem;
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
  return {table.launch_floor + std::max(flops / rate, bytes / profile.device.hbm_bandwidth), flops, bytes};
}

ExpertWork attention_time(const Profile& profile, const Architecture& arch, const AttentionBatch& batch, int tp) {
  ExpertWork core = attention_core_time(profile, arch, batch, tp);
  long tokens = 0;
  for (const long n : batch.new_tokens) tokens += n;
  if (tokens <= 0) return core;
  const ExpertWork proj = gemms_over(profile, arch.dtype, static_cast<double>(tokens), attention_shapes(arch, tp));
  return {core.time + proj.time, core.flops + proj.flops, core.bytes + proj.bytes};
}

namespace {

double activation_bytes(const Architecture& arch) { return std::max(2.0, dtype_bytes(arch.dtype)); }
// What a GEMM input is written in: FP8 with its scales for an FP8 model, else the activations' width.
double gemm_input_bytes(const Architecture& arch) {
  return arch.dtype == Dtype::kFp8 ? dispatch_element_bytes(arch.dtype) : activation_bytes(arch);
}

}  // namespace

ExpertWork elementwise_time(const Profile& profile, const Elementwise& work) {
  if (!has_source(profile.elementwise.provenance) || work.kernels == 0) return {};
  return {work.kernels * profile.elementwise.launch_floor + work.bytes / profile.device.hbm_bandwidth, 0.0, work.bytes};
}

Elementwise layer_elementwise(const Architecture& arch, double tokens) {
  const double h = arch.hidden_size;
  const double a = activation_bytes(arch);
  Elementwise e{2.0 * 4.0 * a * h * tokens, 2};
  if (arch.dtype == Dtype::kFp8) {
    e.bytes += 2.0 * (a + gemm_input_bytes(arch)) * h * tokens;
    e.kernels += 2;
  }
  return e;
}

Elementwise activation_elementwise(const Architecture& arch, double rows, long ffn, int tp) {
  check_tp(tp);
  const auto shard = static_cast<double>(ceil_div(ffn, tp));
  const double a = activation_bytes(arch);
  const double read = (arch.ffn_projections >= 3 ? 2.0 : 1.0) * a * shard;
  return {(read + gemm_input_bytes(arch) * shard) * rows, 1};
}

Elementwise permute_elementwise(const Architecture& arch, double rows) {
  const double h = arch.hidden_size;
  return {2.0 * (dispatch_element_bytes(arch.dtype) + combine_element_bytes(arch.dtype)) * h * rows, 2};
}

Elementwise moe_sum_elementwise(const Architecture& arch, double tokens) {
  return {3.0 * activation_bytes(arch) * arch.hidden_size * tokens, 1};
}

ExpertWork operator+(ExpertWork a, const ExpertWork& b) {
  a.time += b.time;
  a.flops += b.flops;
  a.bytes += b.bytes;
  return a;
}

double busbw_factor(CollectiveOp op, int ranks) {
  if (ranks < 1) throw std::invalid_argument("busbw_factor: ranks must be >= 1");
  const double n = ranks;
  switch (op) {
    case CollectiveOp::kAllReduce:
      return 2.0 * (n - 1.0) / n;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllToAll:
      return (n - 1.0) / n;
    case CollectiveOp::kSendRecv:
      return 1.0;
  }
  // Only a value cast from outside the enum gets here.
  throw std::invalid_argument("unknown collective " + std::to_string(static_cast<int>(op)));
}

long nccl_tests_count(CollectiveOp op, int ranks, double bytes, int type_size) {
  busbw_factor(op, ranks);  // rejects a rank count below 1
  const long elements = static_cast<long>(bytes) / type_size;
  if (op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter) return elements / ranks;
  if (op == CollectiveOp::kAllToAll) return (elements / ranks) * ranks;
  return elements;
}

double collective_time(const Profile& profile, CollectiveOp op, int ranks, double bytes, double link_bandwidth,
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
    throw std::invalid_argument("collective_time: no " + collective_op_name(op) + " curve in profile " + profile.name +
                                " and no link bandwidth to model it");
  double steps = ranks - 1.0;
  if (op == CollectiveOp::kAllReduce) steps = 2.0 * (ranks - 1.0);
  if (op == CollectiveOp::kSendRecv) steps = 1.0;
  return steps * link_latency + bytes * factor / link_bandwidth;
}

namespace {

// One grid of the contention table: its points (a full bytes x FLOP grid) and axes.
struct ContentionGrid {
  std::vector<const ContentionPoint*> points;
  std::vector<double> bytes_axis, flops_axis;
};

ContentionGrid grid_of(const Profile& profile, const ContentionPoint& key) {
  ContentionGrid g;
  for (const auto& p : profile.contention.points)
    if (p.comm_op == key.comm_op && p.compute == key.compute && p.comm_sms == key.comm_sms) g.points.push_back(&p);
  for (const ContentionPoint* p : g.points) {
    if (g.bytes_axis.empty() || p->comm_bytes > g.bytes_axis.back()) g.bytes_axis.push_back(p->comm_bytes);
    if (g.bytes_axis.size() == 1) g.flops_axis.push_back(p->gemm_flops);
  }
  if (g.bytes_axis.size() * g.flops_axis.size() != g.points.size())
    throw std::invalid_argument("contention: the " + contention_op_name(key.comm_op) + " points of profile " +
                                profile.name + " are not a full grid");
  return g;
}

// Log-linear in bytes and FLOP within the grid, clamped outside.
Slowdown blend(const ContentionGrid& g, double comm_bytes, double gemm_flops) {
  const auto bytes_at = locate_log(g.bytes_axis, comm_bytes);
  const auto flops_at = locate_log(g.flops_axis, gemm_flops);
  const std::size_t i = bytes_at.first, j = flops_at.first;
  const double fi = bytes_at.second, fj = flops_at.second;
  const std::size_t cols = g.flops_axis.size();
  auto at = [&](std::size_t r, std::size_t c) {
    return g.points[std::min(r, g.bytes_axis.size() - 1) * cols + std::min(c, cols - 1)];
  };
  auto mix = [&](double ContentionPoint::*field) {
    const double top = (1.0 - fj) * at(i, j)->*field + fj * at(i, j + 1)->*field;
    const double bottom = (1.0 - fj) * at(i + 1, j)->*field + fj * at(i + 1, j + 1)->*field;
    return std::max(1.0, (1.0 - fi) * top + fi * bottom);
  };
  return {mix(&ContentionPoint::compute_slowdown), mix(&ContentionPoint::comm_slowdown)};
}

// The most specific (op, class) pair that has grids: this op before "any", this class before "any".
std::optional<std::pair<std::optional<CollectiveOp>, std::optional<ComputeClass>>> grid_family(
    const Profile& profile, const ContentionQuery& q) {
  for (const std::optional<CollectiveOp> op : {std::optional<CollectiveOp>(q.comm_op), std::optional<CollectiveOp>()})
    for (const std::optional<ComputeClass> cls : {std::optional<ComputeClass>(q.compute), std::optional<ComputeClass>()})
      for (const auto& p : profile.contention.points)
        if (p.comm_op == op && p.compute == cls) return std::make_pair(op, cls);
  return std::nullopt;
}

}  // namespace

ComputeClass compute_class(const Profile& profile, Dtype dtype, double flops, double bytes) {
  const GemmTable* table = profile.gemm_table(dtype);
  if (!table || !(table->peak_flops > 0.0) || !(profile.device.hbm_bandwidth > 0.0) || !(bytes > 0.0))
    return ComputeClass::kComputeBound;
  const double ridge = table->peak_flops / profile.device.hbm_bandwidth;
  return flops / bytes < ridge ? ComputeClass::kMemoryBound : ComputeClass::kComputeBound;
}

Slowdown contention(const Profile& profile, const ContentionQuery& q) {
  if (q.comm_bytes <= 0.0 || q.gemm_flops <= 0.0) return {};
  const auto family = grid_family(profile, q);
  if (!family) return {};
  const int sms = q.comm_sms >= 0 ? q.comm_sms : profile.contention.comm_sms;
  // The SM counts this family has grids for (-1: "any").
  std::vector<int> counts;
  for (const auto& p : profile.contention.points)
    if (p.comm_op == family->first && p.compute == family->second &&
        std::find(counts.begin(), counts.end(), p.comm_sms) == counts.end())
      counts.push_back(p.comm_sms);
  std::sort(counts.begin(), counts.end());
  auto at = [&](int c) {
    ContentionPoint key;
    key.comm_op = family->first;
    key.compute = family->second;
    key.comm_sms = c;
    return blend(grid_of(profile, key), q.comm_bytes, q.gemm_flops);
  };
  const bool any = counts.front() == -1;
  if (sms >= 0 && std::find(counts.begin(), counts.end(), sms) != counts.end()) return at(sms);
  if (sms == 0) return {};  // no SM held and no grid for it: nothing slows
  // Bracketed by two counts: linear in SMs.
  int below = -1, above = -1;
  for (int c : counts) {
    if (c >= 0 && c < sms) below = c;
    if (c > sms && above < 0) above = c;
  }
  if (sms > 0 && below >= 0 && above > 0) {
    const Slowdown lo = at(below), hi = at(above);
    const double f = static_cast<double>(sms - below) / (above - below);
    return {lo.compute + f * (hi.compute - lo.compute), lo.comm + f * (hi.comm - lo.comm)};
  }
  if (any) return at(-1);
  // Outside the counts measured: the nearest (or, SMs unknown, the largest count).
  if (sms < 0) return at(counts.back());
  return at(below >= 0 ? (above > 0 && above - sms < sms - below ? above : below) : above);
}

Slowdown contention(const Profile& profile, CollectiveOp comm_op, double comm_bytes, double gemm_flops_count) {
  return contention(profile, ContentionQuery{comm_op, comm_bytes, gemm_flops_count, ComputeClass::kComputeBound, -1});
}

namespace {
// The watts `by_dtype` gives `dtype`, else the highest it gives (at least idle).
double dtype_watts(const PowerModel& p, const std::map<Dtype, double>& by_dtype, Dtype dtype) {
  if (auto it = by_dtype.find(dtype); it != by_dtype.end()) return it->second;
  double highest = p.idle;
  for (const auto& [d, w] : by_dtype) highest = std::max(highest, w);
  return highest;
}
}  // namespace

double state_power(const Profile& profile, GpuState state, Dtype dtype, double power_cap) {
  const PowerModel& p = profile.power;
  double w = p.idle;
  switch (state) {
    case GpuState::kIdle:
      w = p.idle;
      break;
    case GpuState::kCompute:
      w = dtype_watts(p, p.compute, dtype);
      break;
    case GpuState::kComm:
      w = p.communication;
      break;
    case GpuState::kBoth:
      w = dtype_watts(p, p.overlapped, dtype);
      break;
  }
  return power_cap > 0.0 ? std::min(w, power_cap) : w;
}

double kernel_power(const Profile& profile, Dtype dtype, ComputeClass cls) {
  const PowerModel& p = profile.power;
  if (cls == ComputeClass::kMemoryBound) {
    if (auto it = p.memory_bound.find(dtype); it != p.memory_bound.end()) return it->second;
  }
  return dtype_watts(p, p.compute, dtype);
}

double kernel_power_with_comm(const Profile& profile, Dtype dtype, double kernel_w) {
  const PowerModel& p = profile.power;
  const double both = state_power(profile, GpuState::kBoth, dtype, 0.0);
  return std::min(both, kernel_w + std::max(0.0, p.communication - p.idle));
}

double cap_speed_factor(const Profile& profile, double power_cap, Dtype dtype, double kernel_w) {
  const PowerModel& p = profile.power;
  if (power_cap <= 0.0 || p.max_power <= 0.0) return 1.0;
  const double full = dtype_watts(p, p.compute, dtype);
  const double raised = kernel_w > 0.0 && kernel_w < full ? power_cap * full / kernel_w : power_cap;
  return cap_speed_factor(profile, std::min(raised, p.max_power));
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
