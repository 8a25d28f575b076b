#include "sim/engine/graph_builder.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>

#include "common/error.hpp"
#include "common/units.hpp"
#include "sim/engine/collectives.hpp"
#include "sim/placement/routing_rule.hpp"

namespace moesim::sim {

namespace {

using models::CollectiveOp;

// [token][layer][K] ids to [layer][token][K]; K a compile-time constant, so that a token's ids at
// one layer move as one fixed-size copy.
template <std::size_t K>
void to_layer_major_k(const std::uint16_t* from, std::uint16_t* to, std::size_t n, std::size_t layers) {
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t l = 0; l < layers; ++l, from += K) std::memcpy(to + (l * n + i) * K, from, K * sizeof(std::uint16_t));
}

void to_layer_major(const std::uint16_t* from, std::uint16_t* to, std::size_t n, std::size_t layers, std::size_t k) {
  switch (k) {
    case 1: return to_layer_major_k<1>(from, to, n, layers);
    case 2: return to_layer_major_k<2>(from, to, n, layers);
    case 4: return to_layer_major_k<4>(from, to, n, layers);
    case 6: return to_layer_major_k<6>(from, to, n, layers);
    case 8: return to_layer_major_k<8>(from, to, n, layers);
    default:
      // Any other top-k: an element loop, not a library copy call per (token, layer).
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t l = 0; l < layers; ++l, from += k) {
          std::uint16_t* dst = to + (l * n + i) * k;
          for (std::size_t j = 0; j < k; ++j) dst[j] = from[j];
        }
  }
}

void reset_lists(std::vector<std::vector<std::uint32_t>>& v, std::size_t outer) {
  if (v.size() < outer) v.resize(outer);
  for (std::size_t i = 0; i < outer; ++i) v[i].clear();
}

// Per home rank, the tokens whose logits the LM head computes: a prefill step's prompts that end in
// it (one each), every token where the batch does not say (decode).
std::vector<long> head_rows(const StepBatch& batch, const std::vector<long>& home_tokens) {
  std::vector<long> rows = home_tokens;
  for (std::size_t r = 0; r < rows.size() && r < batch.logits.size(); ++r)
    if (!batch.logits[r].empty()) rows[r] = std::count(batch.logits[r].begin(), batch.logits[r].end(), 1);
  return rows;
}

std::vector<long> tokens_per_home(const StepBatch& batch, int ep) {
  std::vector<long> home_tokens(static_cast<std::size_t>(ep), 0);
  for (int h : batch.home) ++home_tokens[static_cast<std::size_t>(h)];
  return home_tokens;
}

}  // namespace

LayerTable make_layer_table(const EngineInput& input) {
  LayerTable t;
  if (input.workload->mode == WorkloadMode::kSynthetic) {
    for (int l = 0; l < input.workload->synthetic_layers; ++l) {
      t.ids.push_back(l);
      t.moe.push_back(1);
    }
    return t;
  }
  const auto& arch = *input.arch;
  std::size_t li = 0;
  for (int d = 0; d < arch.num_layers; ++d) {
    t.ids.push_back(d);
    const bool moe = li < arch.moe_layers.size() && arch.moe_layers[li] == d;
    t.moe.push_back(moe ? 1 : 0);
    if (moe) ++li;
  }
  return t;
}

GraphBuilder::GraphBuilder(const EngineInput& input, const LayerTable& layers, const Fabric& fabric,
                           double clock_speed)
    : input_(input), arch_(*input.arch), cluster_(*input.cluster), profile_(*input.profile), layers_(layers),
      fabric_(fabric), clock_speed_(clock_speed),
      dtype_bytes_(models::dtype_bytes(input.arch->dtype)),
      dispatch_bytes_(models::dispatch_element_bytes(input.arch->dtype)),
      combine_bytes_(models::combine_element_bytes(input.arch->dtype)) {
  rank_node_ = rank_nodes(cluster_, input.ep, input.tp);
  a2a_one_node_ = input.ep * input.tp <= cluster_.gpus_per_node;
  a2a_floor_ = alltoall_floor(profile_, input.ep, a2a_one_node_);
  low_latency_ = input.options.dispatch == DispatchMode::kLowLatency;
  residence_ = input.options.dispatch == DispatchMode::kResidence;
  // Low-latency kernels hold no SM while their data moves (DeepEP's receive hook), unless the study
  // says otherwise.
  dispatch_sms_ = static_cast<std::int16_t>(input.options.dispatch_sms >= 0 ? input.options.dispatch_sms
                                            : low_latency_                 ? 0
                                                                           : -1);
  const int n = input.ep * input.tp, p = cluster_.gpus_per_node;
  for (int g = 0; g < n; ++g) {
    // A peer across this GPU's first hop: another GPU of its node, or the same local index next node.
    const int peer = a2a_one_node_ ? (p > 1 ? (g / p) * p + (g % p + 1) % p : g) : (g + p) % cluster_.total_gpus();
    a2a_port_.push_back(peer == g ? RouteFigures{0.0, 1e30} : fabric_.figures(g, peer));
  }
  // Across nodes, the normal kernels move every NVLink byte through their forwarders: tokens for the
  // sender's own node too go through its local receive buffer first (DeepEP's internode kernels).
  if (input.options.dispatch == DispatchMode::kHierarchical && !a2a_one_node_ &&
      models::has_source(profile_.normal.provenance)) {
    dispatch_forward_rate_ =
        profile_.normal.dispatch_forward_rate(static_cast<double>(arch_.hidden_size) * dispatch_bytes_ / input.tp);
    combine_forward_rate_ = profile_.normal.combine_forward_bandwidth;
  }
  if (input.placement) router_ = std::make_unique<LayerRouter>(*input.placement, rank_node_, arch_.num_experts, arch_.top_k);
  if (residence_) {
    // What a GPU holds besides the replicated context: every layer's own parameters, the embedding and
    // the LM head, and the routed experts of its rank (the rank that holds the most).
    for (int d = 0; d < arch_.num_layers; ++d) weight_bytes_ += layer_param_bytes(d);
    weight_bytes_ += 2.0 * static_cast<double>(arch_.vocab_size) * arch_.hidden_size * dtype_bytes_ / input.tp;
    std::vector<double> copies(static_cast<std::size_t>(input.ep), 0.0);
    if (input.placement)
      for (const auto& layer : input.placement->ranks)
        for (const auto& holders : layer)
          for (int r : holders) copies[static_cast<std::size_t>(r)] += 1.0;
    weight_bytes_ += *std::max_element(copies.begin(), copies.end()) * models::expert_weight_bytes(arch_) / input.tp;
  }
  const bool inference = input.workload && (input.workload->mode == WorkloadMode::kPrefill ||
                                            input.workload->mode == WorkloadMode::kDecode);
  if (input.options.rebalance.every_steps > 0 && input.placement && inference) {
    // The run's first placement is the caller's; the rebalancer keeps it alive no longer than the caller.
    routed_placement_ = std::shared_ptr<const Placement>(input.placement, [](const Placement*) {});
    rebalancer_ = std::make_unique<Rebalancer>(input, routed_placement_, rank_node_,
                                               input.options.warmup_steps + input.options.steps);
  }
}

void GraphBuilder::use_placement(std::shared_ptr<const Placement> placement) {
  router_ = std::make_unique<LayerRouter>(*placement, rank_node_, arch_.num_experts, arch_.top_k);
  routed_placement_ = std::move(placement);
}

std::optional<MigrationPlan> GraphBuilder::draw_inference_step() {
  std::optional<MigrationPlan> plan = rebalancer_ ? rebalancer_->before(step_) : std::nullopt;
  if (!input_.steps->next(batch_)) throw common::RunError("the workload ran out of steps");
  if (rebalancer_) rebalancer_->observe(step_, batch_);
  if (plan && input_.options.rebalance.migration != MigrationMode::kBackground) use_placement(plan->placement);
  ++step_;
  return plan;
}

void GraphBuilder::finish_inference_step(std::optional<MigrationPlan> plan) {
  // Background: the moved copies serve from the next step on.
  if (plan && input_.options.rebalance.migration == MigrationMode::kBackground) use_placement(plan->placement);
}

std::uint32_t GraphBuilder::add_migration(StepGraph& g, std::uint32_t root) {
  if (!migration_) return root;
  const MigrationPlan& plan = *migration_;
  const double copy_bytes = models::expert_weight_bytes(arch_);
  g.moved_step = plan.step;
  g.moved_experts = static_cast<int>(plan.moves.size());
  g.moved_bytes = copy_bytes * static_cast<double>(plan.moves.size());
  const MigrationMode mode = input_.options.rebalance.migration;
  if (mode == MigrationMode::kFree || plan.moves.empty()) return root;
  // Each TP shard of a copy moves between the same TP index of the two ranks; the copies between
  // one pair of GPUs move as one batched send (as engines post them: a batch of point-to-point ops).
  std::map<std::pair<int, int>, double> pair_bytes;
  for (const ExpertMove& m : plan.moves)
    for (int t = 0; t < input_.tp; ++t) pair_bytes[{gpu_of(m.from, t), gpu_of(m.to, t)}] += copy_bytes / input_.tp;
  const std::uint32_t done = mode == MigrationMode::kBlocking ? g.add(Task{}) : root;
  for (const auto& [pair, bytes] : pair_bytes) {
    const auto x = add_transfer(g, pair.first, pair.second, bytes, Category::kMigration, bytes, -1);
    g.tasks[x].comm_op = models::CollectiveOp::kSendRecv;
    g.edge(root, x);
    if (mode == MigrationMode::kBlocking)
      g.edge(x, done);
    else
      end_waits_.push_back(x);
  }
  return done;
}

namespace {
constexpr std::uint32_t kNoTask = std::numeric_limits<std::uint32_t>::max();
}  // namespace

TransferSizing GraphBuilder::forwarding(TransferSizing sizing, int from, int to, double rate) const {
  if (!(rate > 0.0)) return sizing;
  // The route's own rate, slowed to the kernels' forwarding rate: each byte holds the route as long
  // as forwarding it takes, so a GPU's forwarded transfers together move at most `rate` when they are
  // alone on its port.
  const double bandwidth = fabric_.figures(from, to).bandwidth;
  if (bandwidth > rate) sizing.scale = std::max(sizing.scale, bandwidth / rate);
  return sizing;
}

int GraphBuilder::pieces_for(int from, int to, double bytes, int most) const {
  if (most <= 1) return 1;
  const RouteFigures f = fabric_.figures(from, to);
  if (!(f.bandwidth > 0.0) || !(f.latency > 0.0)) return most;
  // A piece is worth its own transfer while moving it takes at least the route's latency.
  const double fit = std::floor(bytes / (f.bandwidth * f.latency));
  return static_cast<int>(std::clamp(fit, 1.0, static_cast<double>(most)));
}

TransferSizing GraphBuilder::phase_sizing(int gpu, double op_bytes, double ll_latency) const {
  if (low_latency_) return {1.0, ll_latency};
  return alltoall_sizing(profile_, input_.ep, a2a_one_node_, op_bytes, a2a_port_[static_cast<std::size_t>(gpu)],
                         a2a_floor_);
}

int GraphBuilder::gateway(int node, int gpu) const {
  return std::min(cluster_.total_gpus() - 1, node * cluster_.gpus_per_node + cluster_.local_index(gpu));
}

const std::uint16_t* GraphBuilder::layer_major(const StepBatch& batch, std::size_t layers) {
  if (layer_major_of_ != &batch) {
    const std::size_t n = batch.size(), k = static_cast<std::size_t>(arch_.top_k);
    layer_major_ids_.resize(n * layers * k);
    to_layer_major(batch.experts.data(), layer_major_ids_.data(), n, layers, k);
    layer_major_of_ = &batch;
  }
  return layer_major_ids_.data();
}

std::uint32_t GraphBuilder::add_compute(StepGraph& g, int gpu, Category cat, int slot, const models::ExpertWork& w,
                                        Streams& s, std::initializer_list<std::uint32_t> deps) {
  Task t;
  t.kind = TaskKind::kCompute;
  t.category = cat;
  t.gpu = gpu;
  t.layer = slot;
  t.flops = w.flops * compute_scale_;
  t.compute_class = models::compute_class(profile_, arch_.dtype, w.flops, w.bytes);
  t.power = models::kernel_power(profile_, arch_.dtype, t.compute_class);
  t.power_with_comm = models::kernel_power_with_comm(profile_, arch_.dtype, t.power);
  const double cap = input_.options.power_cap;
  const double speed =
      cap > 0.0 ? std::min(clock_speed_, models::cap_speed_factor(profile_, cap, arch_.dtype, t.power)) : clock_speed_;
  t.amount = w.time * compute_scale_ / speed;
  const auto id = g.add(t);
  auto& last = s.compute[static_cast<std::size_t>(gpu)];
  g.edge(last, id);
  for (auto d : deps)
    if (d != last) g.edge(d, id);
  last = id;
  return id;
}

std::uint32_t GraphBuilder::add_transfer(StepGraph& g, int src, int dst, double bytes, Category cat, double op_bytes,
                                         int slot, TransferSizing sizing) {
  Task x;
  x.kind = TaskKind::kTransfer;
  x.category = cat;
  x.gpu = src;
  x.dst = dst;
  x.amount = bytes * sizing.scale;
  x.latency = sizing.latency;
  x.payload = bytes;
  x.op_bytes = op_bytes;
  x.layer = slot;
  if (cat == Category::kDispatch || cat == Category::kCombine) {
    x.comm_sms = dispatch_sms_;
    if (src / cluster_.gpus_per_node != dst / cluster_.gpus_per_node) g.token_inter_node_bytes += bytes;
  }
  return g.add(x);
}

std::uint32_t GraphBuilder::add_piece(StepGraph& g, int src, int dst, double bytes, Category cat, double op_bytes,
                                      int slot, TransferSizing sizing, std::uint32_t after, bool first) {
  if (!first) sizing.latency = 0.0;  // the operation's fixed cost is paid once, by its first piece
  const auto x = add_transfer(g, src, dst, bytes, cat, op_bytes, slot, sizing);
  if (!first) {
    // Posted right behind the previous piece: its route latency runs under that piece's transfer,
    // so it is taken off the wire amount (the payload stays).
    const RouteFigures f = fabric_.figures(src, dst);
    double& amount = g.tasks[x].amount;
    amount = std::max(0.0, amount - f.latency * f.bandwidth);
  }
  g.edge(after, x);
  return x;
}

std::pair<std::uint32_t, std::uint32_t> GraphBuilder::add_stream_op(StepGraph& g, int gpu, std::uint32_t dep,
                                                                    Category cat, int slot, Streams& s) {
  Task j;
  j.kind = TaskKind::kJoin;
  j.category = cat;
  j.gpu = gpu;
  j.layer = slot;
  j.timeline = true;
  auto& last = (cat == Category::kCombine ? s.combine : s.comm)[static_cast<std::size_t>(gpu)];
  const auto start = g.add(Task{});  // gate: previous op done and data ready
  g.edge(last, start);
  g.edge(dep, start);
  const auto id = g.add(j);
  g.edge(start, id);
  last = id;
  g.tasks[id].gate = start;
  return {start, id};
}

std::uint32_t GraphBuilder::add_tp_collective(StepGraph& g, int rank, CollectiveOp op, double bytes, int slot,
                                              const std::vector<std::uint32_t>& deps_per_gpu) {
  std::vector<int> group;
  for (int t = 0; t < input_.tp; ++t) group.push_back(gpu_of(rank, t));
  return add_ring_collective(g, group, op, bytes, slot, deps_per_gpu, Category::kTpCollective);
}

std::uint32_t GraphBuilder::add_ring_collective(StepGraph& g, const std::vector<int>& group, CollectiveOp op,
                                                double bytes, int slot, const std::vector<std::uint32_t>& deps_per_gpu,
                                                Category cat) {
  Task join;
  join.kind = TaskKind::kJoin;
  join.category = cat;
  join.gpu = group.front();
  join.layer = slot;
  const auto j = g.add(join);
  const SizedCollective ring = ring_collective(fabric_, profile_, op, group, bytes);
  for (const SizedTransfer& x : ring.transfers) {
    const int src = x.src;
    const auto id = add_transfer(g, x.src, x.dst, x.bytes, cat, bytes, slot, {1.0, x.latency});
    g.tasks[id].comm_op = op;
    g.edge(deps_per_gpu[static_cast<std::size_t>(src)], id);
    g.edge(id, j);
  }
  return j;
}

void GraphBuilder::route_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_tokens,
                                   std::size_t moe_index, int chunks, int slot) {
  const auto k = static_cast<std::size_t>(arch_.top_k);
  const std::size_t L = batch.experts.size() / std::max<std::size_t>(1, batch.size() * k);
  if (chunks_of_ != &batch) {
    for (auto& v : token_chunk_) v.clear();
    chunks_of_ = &batch;
  }
  const auto C = static_cast<std::size_t>(chunks);
  if (token_chunk_.size() <= C) token_chunk_.resize(C + 1);
  auto& chunk = token_chunk_[C];
  if (chunk.size() != batch.size()) token_chunks(batch.home, home_tokens, chunks, chunk);
  const LayerTokens tokens{layer_major(batch, L) + moe_index * batch.size() * k, batch.home, batch.token_index, chunk};
  router_->route(moe_index, tokens, chunks, moe_.counts);
  if (low_latency_) router_->count_pairs(moe_index, tokens, moe_.counts);
  count_rank_tokens(g, C, slot);
  count_sends(g, C, batch.size());
}

void GraphBuilder::count_sends(StepGraph& g, std::size_t chunks, std::size_t tokens) const {
  // A token's hidden state goes out to each other rank of its experts, and their results come back
  // (flat: to where it was sent from; residence: to its owner, LayerCounts::returns).
  const auto& counts = moe_.counts;
  const int ep = input_.ep;
  for (std::size_t c = 0; c < chunks; ++c)
    for (int h = 0; h < ep; ++h)
      for (int r = 0; r < ep; ++r)
        if (r != h)
          g.token_sends += static_cast<std::uint64_t>(counts.send(c, h, r) +
                                                      (residence_ ? counts.returned(c, h, r) : counts.send(c, h, r)));
  g.token_layers += tokens;
}

void GraphBuilder::count_rank_tokens(StepGraph& g, std::size_t chunks, int slot) const {
  const auto& counts = moe_.counts;
  const int ep = input_.ep, experts = arch_.num_experts;
  for (int r = 0; r < ep; ++r) {
    long total = 0;
    for (std::size_t c = 0; c < chunks; ++c)
      for (int e = 0; e < experts; ++e) total += counts.expert_tokens[c][static_cast<std::size_t>(r * experts + e)];
    g.rank_tokens[static_cast<std::size_t>(slot * ep + r)] += static_cast<double>(total);
  }
}

void GraphBuilder::add_shared_experts(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s) {
  MoeScratch& m = moe_;
  m.shared_done.assign(static_cast<std::size_t>(gpus()), 0);
  if (arch_.num_shared_experts == 0) return;
  for (int gpu = 0; gpu < gpus(); ++gpu)
    m.shared_done[static_cast<std::size_t>(gpu)] =
        add_compute(g, gpu, Category::kShared, slot, shared_expert_work(home_tokens[static_cast<std::size_t>(gpu / input_.tp)]),
                    s, {s.ready[static_cast<std::size_t>(gpu)]});
}

// The shared experts of `tokens` tokens on one GPU (TP-sharded), with their activation and the sum of
// their output into the routed experts'.
models::ExpertWork GraphBuilder::shared_expert_work(long tokens) const {
  const int tp = input_.tp;
  const long ffn = static_cast<long>(arch_.num_shared_experts) * arch_.shared_expert_ffn_size;
  const auto rows = static_cast<double>(tokens);
  return models::dense_ffn_time(profile_, arch_, tokens, ffn, tp) +
         models::elementwise_time(profile_, models::activation_elementwise(arch_, rows, ffn, tp)) +
         models::elementwise_time(profile_, models::moe_sum_elementwise(arch_, rows));
}

void GraphBuilder::end_moe_layer(StepGraph& g, const std::vector<std::uint32_t>& wait, Streams& s) {
  MoeScratch& m = moe_;
  const bool have_shared = arch_.num_shared_experts > 0;
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const auto id = g.add(Task{});
    for (auto x : m.arrivals[static_cast<std::size_t>(gpu)]) g.edge(x, id);
    g.edge(wait[static_cast<std::size_t>(gpu)], id);
    if (have_shared) g.edge(m.shared_done[static_cast<std::size_t>(gpu)], id);
    s.ready[static_cast<std::size_t>(gpu)] = id;
  }
}

void GraphBuilder::build_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_tokens,
                                   std::size_t moe_index, int chunks, int slot, Streams& s) {
  route_moe_layer(g, batch, home_tokens, moe_index, chunks, slot);
  MoeScratch& m = moe_;
  // The layer's input is ready on each home GPU: shared experts start on the compute stream.
  m.attn_done = s.ready;
  add_shared_experts(g, home_tokens, slot, s);
  add_moe_chunks(g, static_cast<std::size_t>(chunks), slot, s);
}

void GraphBuilder::add_moe_chunks(StepGraph& g, std::size_t chunks, int slot, Streams& s) {
  MoeScratch& m = moe_;
  reset_lists(m.arrivals, static_cast<std::size_t>(gpus()));
  for (std::size_t c = 0; c < chunks; ++c) {
    add_dispatch(g, c, slot, s);
    add_expert_compute(g, c, slot, s);
    if (residence_) add_owner_shared_experts(g, c, slot, s);
    add_combine(g, c, slot, s);
  }
  for (int gpu = 0; gpu < gpus(); ++gpu)
    m.arrivals[static_cast<std::size_t>(gpu)].push_back(m.compute_done[static_cast<std::size_t>(gpu)]);
  // The layer ends on a GPU when the results of its tokens are in (flat: back home; residence: the
  // partial outputs of the tokens it owns), its own expert work and shared experts done.
  end_moe_layer(g, s.compute, s);
}

// Dispatch of chunk c: one stream operation per source GPU. Hierarchical: one inter-node batch per
// destination node to the GPU of the same local index there (tokens deduplicated), then NVLink
// forwarding inside the node, pipelined: the batch moves in `forward_pieces` pieces one after the
// other, and each piece is forwarded as soon as it has arrived.
void GraphBuilder::add_dispatch(StepGraph& g, std::size_t c, int slot, Streams& s) {
  if (port_phases_) {
    add_port_phase(g, c, slot, s, false);
    return;
  }
  MoeScratch& m = moe_;
  const LayerCounts& counts = m.counts;
  const int ep = input_.ep, tp = input_.tp, nodes = counts.nodes;
  const double token_bytes = static_cast<double>(arch_.hidden_size) * dispatch_bytes_ / tp;
  const bool hier = input_.options.dispatch == DispatchMode::kHierarchical;
  const int pieces = hier ? std::max(1, input_.options.forward_pieces) : 1;
  reset_lists(m.into, static_cast<std::size_t>(gpus()));
  for (int h = 0; h < ep; ++h) {
    for (int t = 0; t < tp; ++t) {
      const int src = gpu_of(h, t);
      double op_bytes = 0.0;
      for (int r = 0; r < ep; ++r)
        if (r != h) op_bytes += static_cast<double>(exchanged(counts, c, h, r)) * token_bytes;
      if (op_bytes <= 0.0) continue;
      // Low latency: one copy per (token, expert), straight to the expert's GPU.
      const TransferSizing sizing = phase_sizing(src, op_bytes, profile_.low_latency.dispatch_latency);
      // Forwarding inside the destination node is part of the same kernels: route latency only, and
      // no faster than the kernels' SMs forward (the profile's normal_kernels).
      const TransferSizing forward{sizing.scale, 0.0};
      auto [gate, op] = add_stream_op(g, src, m.attn_done[static_cast<std::size_t>(src)], Category::kDispatch, slot, s);
      m.gateway_arrival.assign(static_cast<std::size_t>(nodes * pieces), 0);
      m.gateway_pieces.assign(static_cast<std::size_t>(nodes), 0);
      for (int r = 0; r < ep; ++r) {
        const long n = exchanged(counts, c, h, r);
        if (r == h || n == 0) continue;
        const int dst = gpu_of(r, t);
        const int dn = rank_node_[static_cast<std::size_t>(r)];
        const double bytes = static_cast<double>(n) * token_bytes;
        if (!hier || dn == rank_node_[static_cast<std::size_t>(h)]) {
          const auto x = add_transfer(g, src, dst, bytes, Category::kDispatch, op_bytes, slot,
                                      forwarding(sizing, src, dst, dispatch_forward_rate_));
          g.edge(gate, x);
          g.edge(x, op);
          m.into[static_cast<std::size_t>(dst)].push_back(x);
          continue;
        }
        const int gw = gateway(dn, src);
        const auto first_piece = static_cast<std::size_t>(dn * pieces);
        if (!m.gateway_pieces[static_cast<std::size_t>(dn)]) {
          const double b = static_cast<double>(counts.node_send(c, h, dn)) * token_bytes;
          const int split = m.gateway_pieces[static_cast<std::size_t>(dn)] = static_cast<char>(pieces_for(src, gw, b, pieces));
          std::uint32_t prev = gate;
          for (int i = 0; i < split; ++i)
            m.gateway_arrival[first_piece + static_cast<std::size_t>(i)] = prev =
                add_piece(g, src, gw, b / split, Category::kDispatch, op_bytes, slot, sizing, prev, i == 0);
          g.edge(prev, op);
        }
        const int n_pieces = m.gateway_pieces[static_cast<std::size_t>(dn)];
        if (dst == gw) {
          m.into[static_cast<std::size_t>(dst)].push_back(m.gateway_arrival[first_piece + static_cast<std::size_t>(n_pieces - 1)]);
          continue;
        }
        std::uint32_t prev = 0;
        const TransferSizing to_dst = forwarding(forward, gw, dst, dispatch_forward_rate_);
        for (int i = 0; i < n_pieces; ++i) {
          const auto arrived = m.gateway_arrival[first_piece + static_cast<std::size_t>(i)];
          const auto f = add_piece(g, gw, dst, bytes / n_pieces, Category::kDispatch, op_bytes, slot, to_dst, arrived, i == 0);
          if (i > 0) g.edge(prev, f);
          prev = f;
        }
        g.edge(prev, op);
        m.into[static_cast<std::size_t>(dst)].push_back(prev);
      }
    }
  }
}

// Port phases (docs/simulator.md, "Port phases"). Each GPU's operation moves everything it sends in
// the phase as one activity over its own end of its routes per class (its node; other nodes), and
// each GPU receives everything sent to it as one activity over its own end, per class. Receiving
// starts as the first GPU of the phase starts its operation; a GPU has its data when its receiving
// activities and every GPU's sending activities have ended (the latest of what its own ports and the
// senders' ports take). A GPU communicates until it has its data and until the receiver it sends to
// that takes longest to receive has its bytes: its transfer into that receiver would last as long.
void GraphBuilder::add_port_phase(StepGraph& g, std::size_t c, int slot, Streams& s, bool combine) {
  MoeScratch& m = moe_;
  const LayerCounts& counts = m.counts;
  const int ep = input_.ep, tp = input_.tp, n_gpus = gpus();
  const double token_bytes = static_cast<double>(arch_.hidden_size) * (combine ? combine_bytes_ : dispatch_bytes_) / tp;
  const Category cat = combine ? Category::kCombine : Category::kDispatch;
  const double ll_latency = combine ? profile_.low_latency.combine_latency : profile_.low_latency.dispatch_latency;
  const auto ends = 2 * static_cast<std::size_t>(n_gpus);
  if (g.pair_bytes.empty()) g.pair_bytes.assign(static_cast<std::size_t>(n_gpus) * static_cast<std::size_t>(n_gpus), 0.0);
  m.port_in.assign(ends, MoeScratch::PortLoad{});
  m.port_senders.clear();
  m.port_out.clear();
  if (!combine) reset_lists(m.into, static_cast<std::size_t>(n_gpus));
  // What rank a sends to rank b in this phase (dispatch: home to expert rank; combine: back).
  auto moved = [&](int a, int b) { return combine ? exchanged(counts, c, b, a) : exchanged(counts, c, a, b); };
  for (int a = 0; a < ep; ++a) {
    for (int t = 0; t < tp; ++t) {
      const int src = gpu_of(a, t);
      double op_bytes = 0.0;
      for (int b = 0; b < ep; ++b)
        if (b != a) op_bytes += static_cast<double>(moved(a, b)) * token_bytes;
      if (op_bytes <= 0.0) continue;
      const TransferSizing sizing = phase_sizing(src, op_bytes, ll_latency);
      const auto dep = (combine ? m.compute_done : m.attn_done)[static_cast<std::size_t>(src)];
      auto [gate, op] = add_stream_op(g, src, dep, cat, slot, s);
      MoeScratch::PortLoad out[2];
      const int sn = cluster_.node_of(src);
      for (int b = 0; b < ep; ++b) {
        const long n = moved(a, b);
        if (b == a || n == 0) continue;
        const int dst = gpu_of(b, t);
        const double bytes = static_cast<double>(n) * token_bytes;
        const int across = cluster_.node_of(dst) != sn ? 1 : 0;
        out[across].add(bytes, bytes * sizing.scale, sizing.latency, dst);
        m.port_in[2 * static_cast<std::size_t>(dst) + static_cast<std::size_t>(across)].add(bytes, bytes * sizing.scale,
                                                                                            sizing.latency, src);
        g.pair_bytes[static_cast<std::size_t>(src) * static_cast<std::size_t>(n_gpus) + static_cast<std::size_t>(dst)] +=
            bytes;
      }
      MoeScratch::PortSender sender{a, t, gate, op, static_cast<std::uint32_t>(m.port_out.size()), 0};
      for (const auto& o : out) {
        if (o.peer < 0) continue;
        const auto x = add_transfer(g, src, o.peer, o.payload, cat, op_bytes, slot, {1.0, o.latency});
        g.tasks[x].amount = o.amount;
        g.tasks[x].side = Task::Side::kEgress;
        g.tasks[x].held = true;
        g.edge(gate, x);
        m.port_out.push_back(x);
      }
      sender.out_end = static_cast<std::uint32_t>(m.port_out.size());
      m.port_senders.push_back(sender);
    }
  }
  if (m.port_senders.empty()) return;
  // The phase's receiving starts with its first sender, as its first transfer would (a GPU that
  // still computes while data arrives shares its SMs with the transfer).
  Task first;
  first.any_of = true;
  const auto started = g.add(first);
  for (const auto& snd : m.port_senders) g.edge(snd.gate, started);
  const auto sent = g.add(Task{});
  for (auto x : m.port_out) g.edge(x, sent);
  auto& ready = combine ? m.arrivals : m.into;
  m.port_in_task.assign(ends, kNoTask);
  m.port_in_time.assign(ends, 0.0);
  for (int dst = 0; dst < n_gpus; ++dst) {
    Task has;  // dst has its data; it communicates until then
    has.held_begin = static_cast<std::uint32_t>(g.held.size());
    for (std::size_t across = 0; across < 2; ++across) {
      const std::size_t e = 2 * static_cast<std::size_t>(dst) + across;
      const auto& in = m.port_in[e];
      if (in.peer < 0) continue;
      const auto y = add_transfer(g, in.peer, dst, in.payload, cat, in.payload, slot, {1.0, in.latency});
      g.tasks[y].amount = in.amount;
      g.tasks[y].side = Task::Side::kIngress;
      g.tasks[y].held = true;
      g.edge(started, y);
      g.held.push_back(y);
      m.port_in_task[e] = y;
      // How long its own end alone takes to receive it: which receiver a sender waits for longest.
      m.port_in_time[e] = in.amount / fabric_.figures(in.peer, dst).bandwidth;
    }
    has.held_end = static_cast<std::uint32_t>(g.held.size());
    if (has.held_end == has.held_begin) continue;
    const auto got = g.add(has);
    for (std::uint32_t i = has.held_begin; i < has.held_end; ++i) g.edge(g.held[i], got);
    g.edge(sent, got);
    ready[static_cast<std::size_t>(dst)].push_back(got);
  }
  // Each sender's operation ends, and the sender stops communicating, when its own bytes have left
  // and its slowest receiver has received everything.
  for (const auto& snd : m.port_senders) {
    const int src = gpu_of(snd.rank, snd.tp);
    const int sn = cluster_.node_of(src);
    std::uint32_t slowest = kNoTask;
    double longest = -1.0;
    for (int b = 0; b < ep; ++b) {
      if (b == snd.rank || moved(snd.rank, b) == 0) continue;
      const int dst = gpu_of(b, snd.tp);
      const std::size_t e = 2 * static_cast<std::size_t>(dst) + (cluster_.node_of(dst) != sn ? 1 : 0);
      if (m.port_in_time[e] > longest) {
        longest = m.port_in_time[e];
        slowest = m.port_in_task[e];
      }
    }
    Task done;
    done.held_begin = static_cast<std::uint32_t>(g.held.size());
    g.held.insert(g.held.end(), m.port_out.begin() + snd.out_begin, m.port_out.begin() + snd.out_end);
    done.held_end = static_cast<std::uint32_t>(g.held.size());
    const auto fin = g.add(done);
    for (std::uint32_t i = done.held_begin; i < done.held_end; ++i) g.edge(g.held[i], fin);
    if (slowest != kNoTask) g.edge(slowest, fin);
    g.edge(fin, snd.op);
  }
}

// Expert compute of chunk c on every GPU of every rank (TP: all-gather before, reduce-scatter after).
void GraphBuilder::add_expert_compute(StepGraph& g, std::size_t c, int slot, Streams& s) {
  MoeScratch& m = moe_;
  const LayerCounts& counts = m.counts;
  const int ep = input_.ep, tp = input_.tp, experts = arch_.num_experts;
  m.compute_done.assign(static_cast<std::size_t>(gpus()), 0);
  for (int r = 0; r < ep; ++r) {
    m.per_expert.clear();
    long received = 0;
    for (int e = 0; e < experts; ++e) {
      const long n = counts.expert_tokens[c][static_cast<std::size_t>(r * experts + e)];
      if (n > 0) m.per_expert.push_back(n);
      received += n;
    }
    m.inputs_ready.assign(static_cast<std::size_t>(gpus()), 0);
    for (int t = 0; t < tp; ++t) {
      const int gpu = gpu_of(r, t);
      const auto gid = g.add(Task{});
      g.edge(m.attn_done[static_cast<std::size_t>(gpu)], gid);
      for (auto x : m.into[static_cast<std::size_t>(gpu)]) g.edge(x, gid);
      m.inputs_ready[static_cast<std::size_t>(gpu)] = gid;
    }
    const bool tp_collectives = tp > 1 && received > 0;
    const double gathered_bytes = static_cast<double>(received) * arch_.hidden_size * dispatch_bytes_;
    std::uint32_t ag = 0;
    if (tp_collectives) ag = add_tp_collective(g, r, CollectiveOp::kAllGather, gathered_bytes, slot, m.inputs_ready);
    for (int t = 0; t < tp; ++t) {
      const int gpu = gpu_of(r, t);
      const auto dep = tp_collectives ? ag : m.inputs_ready[static_cast<std::size_t>(gpu)];
      if (m.per_expert.empty()) {
        m.compute_done[static_cast<std::size_t>(gpu)] = dep;
        continue;
      }
      m.compute_done[static_cast<std::size_t>(gpu)] =
          add_compute(g, gpu, Category::kExpert, slot, expert_work(m.per_expert, tp), s, {dep});
    }
    if (tp_collectives) {
      const auto rs = add_tp_collective(g, r, CollectiveOp::kReduceScatter, gathered_bytes, slot, m.compute_done);
      for (int t = 0; t < tp; ++t) m.compute_done[static_cast<std::size_t>(gpu_of(r, t))] = rs;
    }
  }
}

// Combine of chunk c: the reverse transfers, one stream operation per expert GPU. Hierarchical:
// results for a home GPU in another node go over NVLink to the gateway of this node (the GPU with
// the home GPU's local index), which sends them, reduced per token, in one inter-node batch;
// pipelined in `forward_pieces` pieces: piece i leaves the gateway once piece i of every sender has
// arrived there.
void GraphBuilder::add_combine(StepGraph& g, std::size_t c, int slot, Streams& s) {
  if (port_phases_) {
    add_port_phase(g, c, slot, s, true);
    return;
  }
  MoeScratch& m = moe_;
  const LayerCounts& counts = m.counts;
  const int ep = input_.ep, tp = input_.tp, nodes = counts.nodes, n_gpus = gpus();
  const double token_bytes = static_cast<double>(arch_.hidden_size) * combine_bytes_ / tp;
  const bool hier = input_.options.dispatch == DispatchMode::kHierarchical;
  const int pieces = hier ? std::max(1, input_.options.forward_pieces) : 1;
  reset_lists(m.at_gateway, static_cast<std::size_t>(n_gpus * nodes * pieces));
  m.combine_pieces.assign(static_cast<std::size_t>(n_gpus * nodes), 0);
  m.combine_op.assign(static_cast<std::size_t>(n_gpus), kNoTask);
  for (int r = 0; r < ep; ++r) {
    for (int t = 0; t < tp; ++t) {
      const int src = gpu_of(r, t);
      double op_bytes = 0.0;
      for (int h = 0; h < ep; ++h)
        if (h != r) op_bytes += static_cast<double>(returned(counts, c, h, r)) * token_bytes;
      if (op_bytes <= 0.0) continue;
      const TransferSizing sizing = phase_sizing(src, op_bytes, profile_.low_latency.combine_latency);
      auto [gate, op] = add_stream_op(g, src, m.compute_done[static_cast<std::size_t>(src)], Category::kCombine, slot, s);
      m.combine_op[static_cast<std::size_t>(src)] = op;
      const int sn = rank_node_[static_cast<std::size_t>(r)];
      for (int h = 0; h < ep; ++h) {
        const long n = returned(counts, c, h, r);
        if (h == r || n == 0) continue;
        const int home = gpu_of(h, t);
        const double bytes = static_cast<double>(n) * token_bytes;
        if (!hier || sn == rank_node_[static_cast<std::size_t>(h)]) {
          const auto x = add_transfer(g, src, home, bytes, Category::kCombine, op_bytes, slot,
                                      forwarding(sizing, src, home, combine_forward_rate_));
          g.edge(gate, x);
          g.edge(x, op);
          m.arrivals[static_cast<std::size_t>(home)].push_back(x);
          continue;
        }
        const auto key = static_cast<std::size_t>(home * nodes + sn);
        const auto first_piece = key * static_cast<std::size_t>(pieces);
        const int gw = gateway(sn, home);
        if (!m.combine_pieces[key])  // the gateway's batch, split once for all its senders
          m.combine_pieces[key] = static_cast<char>(
              pieces_for(gw, home, static_cast<double>(counts.node_send(c, home / tp, sn)) * token_bytes, pieces));
        const int n_pieces = m.combine_pieces[key];
        if (src == gw) {
          for (int i = 0; i < n_pieces; ++i) m.at_gateway[first_piece + static_cast<std::size_t>(i)].push_back(gate);
          continue;
        }
        std::uint32_t prev = gate;
        const TransferSizing to_gateway = forwarding(sizing, src, gw, combine_forward_rate_);
        for (int i = 0; i < n_pieces; ++i) {
          prev = add_piece(g, src, gw, bytes / n_pieces, Category::kCombine, op_bytes, slot, to_gateway, prev, i == 0);
          m.at_gateway[first_piece + static_cast<std::size_t>(i)].push_back(prev);
        }
        g.edge(prev, op);
      }
    }
  }
  for (int home = 0; home < n_gpus; ++home)
    for (int sn = 0; sn < nodes; ++sn) {
      const auto key = static_cast<std::size_t>(home * nodes + sn);
      const int n_pieces = m.combine_pieces[key];
      if (n_pieces == 0) continue;
      const double bytes = static_cast<double>(counts.node_send(c, home / tp, sn)) * token_bytes;
      std::uint32_t prev = 0;
      for (int i = 0; i < n_pieces; ++i) {
        const auto& ready = m.at_gateway[key * static_cast<std::size_t>(pieces) + static_cast<std::size_t>(i)];
        const auto x = add_piece(g, gateway(sn, home), home, bytes / n_pieces, Category::kCombine, bytes, slot, {},
                                 i == 0 ? ready.front() : prev, i == 0);
        for (std::size_t d = i == 0 ? 1 : 0; d < ready.size(); ++d) g.edge(ready[d], x);
        prev = x;
      }
      // The gateway's combine operation ends once it has sent what it gathered (DeepEP's combine
      // kernel forwards), when the gateway has one.
      if (const auto op = m.combine_op[static_cast<std::size_t>(gateway(sn, home))]; op != kNoTask) g.edge(prev, op);
      m.arrivals[static_cast<std::size_t>(home)].push_back(prev);
    }
}

void GraphBuilder::add_tp_all_reduce(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s) {
  const int tp = input_.tp;
  if (tp == 1) return;
  for (int r = 0; r < input_.ep; ++r) {
    const long tokens = home_tokens[static_cast<std::size_t>(r)];
    if (tokens == 0) continue;
    const double bytes = static_cast<double>(tokens) * arch_.hidden_size * combine_bytes_;
    const auto j = add_tp_collective(g, r, CollectiveOp::kAllReduce, bytes, slot, s.ready);
    for (int t = 0; t < tp; ++t) s.ready[static_cast<std::size_t>(gpu_of(r, t))] = j;
  }
}

// Attention on every GPU of each home group (heads split by TP), then the TP all-reduce.
void GraphBuilder::add_attention(StepGraph& g, const std::vector<models::AttentionBatch>& attention,
                                 const std::vector<long>& home_tokens, int slot, Streams& s) {
  const int tp = input_.tp;
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const auto& a = attention[static_cast<std::size_t>(gpu / tp)];
    if (a.new_tokens.empty()) continue;
    // The layer's norms (and FP8 quantisation) run with its attention, on every GPU of the group.
    const auto tokens = static_cast<double>(home_tokens[static_cast<std::size_t>(gpu / tp)]);
    const models::ExpertWork w = models::attention_time(profile_, arch_, a, tp) +
                                 models::elementwise_time(profile_, models::layer_elementwise(arch_, tokens));
    s.ready[static_cast<std::size_t>(gpu)] =
        add_compute(g, gpu, Category::kAttention, slot, w, s, {s.ready[static_cast<std::size_t>(gpu)]});
  }
  add_tp_all_reduce(g, home_tokens, slot, s);
}

// A dense layer's FFN on every GPU, then the TP all-reduce.
void GraphBuilder::add_dense(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s) {
  const int tp = input_.tp;
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const long tokens = home_tokens[static_cast<std::size_t>(gpu / tp)];
    if (tokens == 0) continue;
    const auto rows = static_cast<double>(tokens);
    const models::ExpertWork w =
        models::dense_ffn_time(profile_, arch_, tokens, arch_.dense_ffn_size, tp) +
        models::elementwise_time(profile_, models::activation_elementwise(arch_, rows, arch_.dense_ffn_size, tp));
    s.ready[static_cast<std::size_t>(gpu)] =
        add_compute(g, gpu, Category::kDense, slot, w, s, {s.ready[static_cast<std::size_t>(gpu)]});
  }
  add_tp_all_reduce(g, home_tokens, slot, s);
}

void GraphBuilder::build_layer(StepGraph& g, const StepBatch& batch, int d, std::size_t& moe_index,
                               const std::vector<long>& home_tokens, Streams& s) {
  const bool moe = moe_index < arch_.moe_layers.size() && arch_.moe_layers[moe_index] == d;
  add_attention(g, batch.attention, home_tokens, d, s);
  if (!moe) {
    add_dense(g, home_tokens, d, s);
    return;
  }
  const auto& chunks = input_.options.layer_chunks;
  build_moe_layer(g, batch, home_tokens, moe_index, chunks.empty() ? 1 : chunks[static_cast<std::size_t>(d)], d, s);
  ++moe_index;
}

// A GPU's routed experts: their grouped GEMMs, the activation over their rows and, for a normal
// dispatch, the rows' permutation into expert order and back (low-latency kernels need none).
models::ExpertWork GraphBuilder::expert_work(const std::vector<long>& per_expert, int tp) const {
  double rows = 0.0;
  for (const long n : per_expert) rows += static_cast<double>(n);
  const models::Elementwise act = models::activation_elementwise(arch_, rows, arch_.expert_ffn_size, tp);
  models::ExpertWork w =
      models::grouped_expert_time(profile_, arch_, per_expert, tp) + models::elementwise_time(profile_, act);
  if (input_.options.dispatch != DispatchMode::kLowLatency)
    w = w + models::elementwise_time(profile_, models::permute_elementwise(arch_, rows));
  return w;
}

double GraphBuilder::layer_param_bytes(int d) const {
  const double h = arch_.hidden_size;
  const auto& at = arch_.attention;
  double attn = 0.0;
  if (at.kind == "mla") {
    const double qk = at.qk_nope_head_dim + at.qk_rope_head_dim;
    attn += at.q_lora_rank > 0 ? h * at.q_lora_rank + static_cast<double>(at.q_lora_rank) * at.num_heads * qk
                               : h * at.num_heads * qk;
    attn += h * (at.kv_lora_rank + at.qk_rope_head_dim) +
            static_cast<double>(at.kv_lora_rank) * at.num_heads * (at.qk_nope_head_dim + at.v_head_dim);
    attn += static_cast<double>(at.num_heads) * at.v_head_dim * h;
  } else {
    attn = h * at.num_heads * at.head_dim * 2 + h * at.num_kv_heads * at.head_dim * 2;
  }
  const bool moe = std::find(arch_.moe_layers.begin(), arch_.moe_layers.end(), d) != arch_.moe_layers.end();
  double ffn = 0.0;
  if (moe) {
    ffn = h * arch_.num_experts +  // router
          static_cast<double>(arch_.num_shared_experts) * arch_.ffn_projections * h * arch_.shared_expert_ffn_size;
  } else {
    ffn = static_cast<double>(arch_.ffn_projections) * h * arch_.dense_ffn_size;
  }
  return (attn + ffn) * dtype_bytes_ / input_.tp;
}

void GraphBuilder::build_training_step(StepGraph& g) {
  const auto root = g.add(Task{});
  const int n_gpus = gpus();
  const Workload& w = *input_.workload;
  const auto& chunks = input_.options.layer_chunks;
  const bool overlap = !chunks.empty() && *std::max_element(chunks.begin(), chunks.end()) > 1;
  const bool fsdp = w.gradient == GradientSync::kFsdp;
  Streams s(static_cast<std::size_t>(n_gpus), root);
  // The data-parallel group of each TP index: the GPUs holding the same parameter shard.
  std::vector<std::vector<int>> dp_groups(static_cast<std::size_t>(input_.tp));
  for (int gpu = 0; gpu < n_gpus; ++gpu) dp_groups[static_cast<std::size_t>(gpu % input_.tp)].push_back(gpu);

  // A gradient or parameter collective of layer d on every DP group, on the communication stream.
  // Overlapped: it waits only for its data and the stream; sequential: compute waits for it too.
  auto layer_collective = [&](CollectiveOp op, int d, bool blocks_compute) {
    if (dp_groups.front().size() < 2) return;
    const double bytes = layer_param_bytes(d);
    std::vector<std::uint32_t> deps(static_cast<std::size_t>(n_gpus));
    for (int gpu = 0; gpu < n_gpus; ++gpu) {
      const auto id = g.add(Task{});
      g.edge(s.comm[static_cast<std::size_t>(gpu)], id);
      // A parameter gather runs ahead of compute when overlapped; gradients wait for their layer.
      if (op != CollectiveOp::kAllGather || !overlap) g.edge(s.ready[static_cast<std::size_t>(gpu)], id);
      deps[static_cast<std::size_t>(gpu)] = id;
    }
    for (const auto& group : dp_groups) {
      const auto j = add_ring_collective(g, group, op, bytes, d, deps, Category::kGradient);
      g.tasks[j].timeline = true;
      g.tasks[j].gate = deps[static_cast<std::size_t>(group.front())];
      for (int gpu : group) {
        s.comm[static_cast<std::size_t>(gpu)] = j;
        if (blocks_compute || !overlap) s.ready[static_cast<std::size_t>(gpu)] = j;
      }
    }
  };

  const long per_micro_sequences = std::max(1, w.batch / std::max(1, w.micro_batches));
  for (int mb = 0; mb < w.micro_batches; ++mb) {
    StepBatch dense;
    const StepBatch* batch = nullptr;
    if (arch_.is_moe()) {
      batch = &micro_[static_cast<std::size_t>(mb)];
    } else {
      dense.attention.resize(static_cast<std::size_t>(input_.ep));
      for (int r = 0; r < input_.ep; ++r) {
        for (long sq = 0; sq < per_micro_sequences; ++sq) {
          dense.attention[static_cast<std::size_t>(r)].new_tokens.push_back(w.sequence_length);
          dense.attention[static_cast<std::size_t>(r)].context.push_back(0);
        }
        dense.home.insert(dense.home.end(), static_cast<std::size_t>(per_micro_sequences * w.sequence_length), r);
      }
      batch = &dense;
    }
    g.tokens += batch->size();
    const std::vector<long> home_tokens = tokens_per_home(*batch, input_.ep);
    // Forward (FSDP gathers each layer's parameters first; overlapped, the gather runs ahead).
    compute_scale_ = 1.0;
    std::size_t li = 0;
    for (int d = 0; d < arch_.num_layers; ++d) {
      if (fsdp) layer_collective(CollectiveOp::kAllGather, d, true);
      build_layer(g, *batch, d, li, home_tokens, s);
    }
    // Loss: the vocabulary projection forward and its two gradient GEMMs.
    for (int gpu = 0; gpu < n_gpus; ++gpu) {
      const long tokens = home_tokens[static_cast<std::size_t>(gpu / input_.tp)];
      if (tokens == 0) continue;
      const double n = static_cast<double>(arch_.vocab_size) / input_.tp;
      const double m = static_cast<double>(tokens);
      const models::ExpertWork head{3 * models::gemm_time(profile_, arch_.dtype, m, n, arch_.hidden_size),
                                    3 * models::gemm_flops(m, n, arch_.hidden_size),
                                    3 * models::gemm_bytes(arch_.dtype, m, n, arch_.hidden_size)};
      s.ready[static_cast<std::size_t>(gpu)] =
          add_compute(g, gpu, Category::kHead, -1, head, s, {s.ready[static_cast<std::size_t>(gpu)]});
    }
    // Backward, last layer first: twice the forward GEMMs, the reverse all-to-alls; gradients of the
    // last micro-batch are reduced layer by layer (all-reduce, or FSDP's reduce-scatter).
    compute_scale_ = 2.0;
    for (int d = arch_.num_layers; d-- > 0;) {
      if (fsdp) layer_collective(CollectiveOp::kAllGather, d, true);
      // build_layer treats d as MoE when the cursor points at it in the MoE layer list.
      auto cursor = static_cast<std::size_t>(std::find(arch_.moe_layers.begin(), arch_.moe_layers.end(), d) -
                                             arch_.moe_layers.begin());
      build_layer(g, *batch, d, cursor, home_tokens, s);
      if (mb + 1 == w.micro_batches)
        layer_collective(fsdp ? CollectiveOp::kReduceScatter : CollectiveOp::kAllReduce, d, false);
    }
    compute_scale_ = 1.0;
  }
  end_step(g, {&s.ready}, s, true);
}

// The vocabulary projection of each rank's `rows` (the tokens that need logits; vocabulary split by TP).
void GraphBuilder::add_head(StepGraph& g, const std::vector<long>& rows, Streams& s) {
  const int tp = input_.tp;
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const long tokens = rows[static_cast<std::size_t>(gpu / tp)];
    if (tokens == 0) continue;
    const double n = static_cast<double>(arch_.vocab_size) / tp;
    const double m = static_cast<double>(tokens);
    const models::ExpertWork w{models::gemm_time(profile_, arch_.dtype, m, n, arch_.hidden_size),
                               models::gemm_flops(m, n, arch_.hidden_size),
                               models::gemm_bytes(arch_.dtype, m, n, arch_.hidden_size)};
    s.ready[static_cast<std::size_t>(gpu)] =
        add_compute(g, gpu, Category::kHead, -1, w, s, {s.ready[static_cast<std::size_t>(gpu)]});
  }
}

void GraphBuilder::end_step(StepGraph& g, const std::vector<const std::vector<std::uint32_t>*>& ready, const Streams& s,
                            bool wait_compute) {
  const auto end = g.add(Task{});
  for (const auto x : end_waits_) g.edge(x, end);
  end_waits_.clear();
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const auto i = static_cast<std::size_t>(gpu);
    for (const auto* r : ready) g.edge((*r)[i], end);
    if (wait_compute) g.edge(s.compute[i], end);
    g.edge(s.comm[i], end);
    g.edge(s.combine[i], end);
  }
  g.end_task = end;
}

void GraphBuilder::build_inference_step(StepGraph& g, const StepBatch& batch) {
  const auto root = g.add(Task{});
  const auto start = add_migration(g, root);
  Streams s(static_cast<std::size_t>(gpus()), start);
  if (input_.options.micro_batches > 1) return build_two_batch_step(g, batch, s, start);
  if (residence_) return build_residence_step(g, batch, s);
  const std::vector<long> home_tokens = tokens_per_home(batch, input_.ep);
  std::size_t li = 0;  // index of the next MoE layer in the trace / placement
  for (int d = 0; d < arch_.num_layers; ++d) build_layer(g, batch, d, li, home_tokens, s);
  add_head(g, head_rows(batch, home_tokens), s);
  end_step(g, {&s.ready}, s, false);
}

// Residence dispatch (docs/simulator.md, "Residence dispatch").
void GraphBuilder::map_tokens(const StepBatch& batch) {
  const std::size_t T = batch.size(), ranks = batch.attention.size();
  token_entry_.assign(T, 0);
  token_position_.assign(T, 0);
  token_head_.assign(T, 0);
  std::vector<std::size_t> first(ranks, 0), entry(ranks, 0);
  std::vector<long> used(ranks, 0);
  std::size_t entries = 0;
  for (std::size_t r = 0; r < ranks; ++r) {
    first[r] = entries;
    entries += batch.attention[r].new_tokens.size();
  }
  entries_ = entries;
  for (std::size_t i = 0; i < T; ++i) {
    const auto h = static_cast<std::size_t>(batch.home[i]);
    const auto& a = batch.attention.at(h);
    while (entry[h] < a.new_tokens.size() && used[h] >= a.new_tokens[entry[h]]) {
      ++entry[h];
      used[h] = 0;
    }
    if (entry[h] >= a.new_tokens.size())
      throw common::RunError("a step holds more tokens of rank " + std::to_string(h) + " than its attention entries");
    const std::size_t q = entry[h];
    token_entry_[i] = first[h] + q;
    token_position_[i] = a.context[q] + used[h];
    const bool flagged = h < batch.logits.size() && !batch.logits[h].empty();
    token_head_[i] = !flagged || (batch.logits[h][q] != 0 && used[h] + 1 == a.new_tokens[q]);
    ++used[h];
  }
}

std::vector<models::AttentionBatch> GraphBuilder::resident_attention(const StepBatch& batch, int ep) const {
  bool home = true;
  for (std::size_t i = 0; i < residence_rank_.size() && home; ++i) home = residence_rank_[i] == batch.home[i];
  if (home) return batch.attention;
  // Per rank, the entries in the order their tokens arrive; a sequence's tokens with positions P
  // attend over sum(p + 1) pairs, which n new tokens after c cached positions match when
  // n c + n (n + 1) / 2 = sum(p + 1).
  std::vector<models::AttentionBatch> out(static_cast<std::size_t>(ep));
  std::vector<std::vector<long>> pairs(static_cast<std::size_t>(ep));
  std::vector<std::size_t> last(static_cast<std::size_t>(ep), static_cast<std::size_t>(-1));
  for (std::size_t i = 0; i < residence_rank_.size(); ++i) {
    const auto r = static_cast<std::size_t>(residence_rank_[i]);
    if (last[r] != token_entry_[i]) {
      last[r] = token_entry_[i];
      out[r].new_tokens.push_back(0);
      pairs[r].push_back(0);
    }
    ++out[r].new_tokens.back();
    pairs[r].back() += token_position_[i] + 1;
  }
  for (std::size_t r = 0; r < out.size(); ++r)
    for (std::size_t q = 0; q < out[r].new_tokens.size(); ++q) {
      const long n = out[r].new_tokens[q];
      out[r].context.push_back(std::max(0L, (pairs[r][q] - n * (n + 1) / 2) / n));
    }
  return out;
}

bool GraphBuilder::entries_split() const {
  std::vector<int> rank_of(entries_, -1);
  for (std::size_t i = 0; i < residence_rank_.size(); ++i) {
    int& r = rank_of[token_entry_[i]];
    if (r >= 0 && r != residence_rank_[i]) return true;
    r = residence_rank_[i];
  }
  return false;
}

// One ring all-gather per TP index over the EP ranks (each GPU of a rank's TP group gathers its share
// from the same index of every other rank), that the GPUs' next work waits for.
void GraphBuilder::add_coherence_gather(StepGraph& g, double bytes, int slot, Streams& s) {
  if (input_.ep < 2 || bytes <= 0.0) return;
  g.coherence_bytes += bytes * input_.tp;
  for (int t = 0; t < input_.tp; ++t) {
    std::vector<int> group;
    for (int r = 0; r < input_.ep; ++r) group.push_back(gpu_of(r, t));
    const auto j = add_ring_collective(g, group, CollectiveOp::kAllGather, bytes, slot, s.ready, Category::kCoherence);
    g.tasks[j].timeline = true;
    g.tasks[j].gate = s.ready[static_cast<std::size_t>(group.front())];
    for (int gpu : group) {
      s.ready[static_cast<std::size_t>(gpu)] = j;
      s.comm[static_cast<std::size_t>(gpu)] = j;
    }
  }
}

// After a layer's hidden-state gather each GPU makes the keys and values of the tokens it does not
// hold, so that its cache stays whole.
void GraphBuilder::add_kv_recompute(StepGraph& g, const std::vector<long>& resident, int slot, Streams& s) {
  long total = 0;
  for (long n : resident) total += n;
  const double width = models::kv_projection_width(arch_, input_.tp);
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const double m = static_cast<double>(total - resident[static_cast<std::size_t>(gpu / input_.tp)]);
    if (m <= 0.0) continue;
    const models::ExpertWork w{models::gemm_time(profile_, arch_.dtype, m, width, arch_.hidden_size),
                               models::gemm_flops(m, width, arch_.hidden_size),
                               models::gemm_bytes(arch_.dtype, m, width, arch_.hidden_size)};
    s.ready[static_cast<std::size_t>(gpu)] =
        add_compute(g, gpu, Category::kAttention, slot, w, s, {s.ready[static_cast<std::size_t>(gpu)]});
  }
}

// The shared experts of the tokens a rank owns after the layer run there, once their dispatch has
// arrived (the owner is one of the ranks the token was sent to).
void GraphBuilder::add_owner_shared_experts(StepGraph& g, std::size_t c, int slot, Streams& s) {
  MoeScratch& m = moe_;
  if (arch_.num_shared_experts == 0) return;
  for (int gpu = 0; gpu < gpus(); ++gpu) {
    const long tokens = owned_[c][static_cast<std::size_t>(gpu / input_.tp)];
    if (tokens == 0) continue;
    const models::ExpertWork w = shared_expert_work(tokens);
    const auto arrived = g.add(Task{});
    g.edge(m.attn_done[static_cast<std::size_t>(gpu)], arrived);
    for (auto x : m.into[static_cast<std::size_t>(gpu)]) g.edge(x, arrived);
    m.shared_done[static_cast<std::size_t>(gpu)] = add_compute(g, gpu, Category::kShared, slot, w, s, {arrived});
  }
}

void GraphBuilder::build_residence_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& resident,
                                             std::size_t moe_index, int chunks, int slot, Streams& s) {
  const auto k = static_cast<std::size_t>(arch_.top_k);
  const std::size_t T = batch.size(), L = batch.experts.size() / std::max<std::size_t>(1, T * k);
  const auto C = static_cast<std::size_t>(chunks);
  token_chunks(residence_rank_, resident, chunks, residence_chunk_);
  const LayerTokens tokens{layer_major(batch, L) + moe_index * T * k, residence_rank_, batch.token_index,
                           residence_chunk_};
  route_residence_layer(router_->placement(), rank_node_, moe_index, arch_.num_experts, arch_.top_k, tokens, chunks,
                        moe_.counts, owner_);
  count_rank_tokens(g, C, slot);
  count_sends(g, C, T);
  const int ep = input_.ep;
  owned_.assign(C, std::vector<long>(static_cast<std::size_t>(ep), 0));
  for (std::size_t i = 0; i < T; ++i) ++owned_[residence_chunk_[i]][static_cast<std::size_t>(owner_[i])];

  MoeScratch& m = moe_;
  m.attn_done = s.ready;
  m.shared_done = s.ready;
  add_moe_chunks(g, C, slot, s);
  residence_rank_.swap(owner_);
}

void GraphBuilder::build_residence_step(StepGraph& g, const StepBatch& batch, Streams& s) {
  const int ep = input_.ep;
  map_tokens(batch);
  residence_rank_.assign(batch.home.begin(), batch.home.end());
  const double kv = models::kv_bytes_per_token_layer(arch_, input_.tp);
  // Every GPU holds the whole context of every sequence of the batch, this step's tokens included.
  double positions = 0.0;
  for (const auto& a : batch.attention)
    for (std::size_t q = 0; q < a.new_tokens.size(); ++q) positions += static_cast<double>(a.context[q] + a.new_tokens[q]);
  g.context_bytes = positions * arch_.num_layers * kv;
  if (g.context_bytes + weight_bytes_ > cluster_.gpu_memory) {
    const bool decode = input_.workload->mode == WorkloadMode::kDecode;
    throw common::InputError(
        "dispatch.mode residence: every GPU holds the context of every sequence of the batch, and step " +
        std::to_string(step_ - 1) + "'s is " + common::format_unit(g.context_bytes, common::UnitKind::kBytes) +
        " of KV cache beside " + common::format_unit(weight_bytes_, common::UnitKind::kBytes) +
        " of weights, more than the " + common::format_unit(cluster_.gpu_memory, common::UnitKind::kBytes) + " of a " +
        cluster_.gpu_kind + " GPU of cluster " + cluster_.name + ": lower " +
        (decode ? "workload.batch_sequences" : "workload.tokens_per_step") +
        ", spread the experts over more GPUs, or choose dispatch.mode flat");
  }
  const auto T = static_cast<double>(batch.size());
  int kv_layers = 0;  // layers whose new keys and values still have to reach every GPU
  std::size_t li = 0;
  for (int d = 0; d < arch_.num_layers; ++d) {
    std::vector<long> resident(static_cast<std::size_t>(ep), 0);
    for (int r : residence_rank_) ++resident[static_cast<std::size_t>(r)];
    // A sequence whose tokens of this step live on several ranks (prefill) needs all of them at this
    // layer's attention: the hidden states at the layer's input are gathered first, and every GPU
    // makes the keys and values of the ones it does not hold (which also keeps its cache whole).
    if (entries_split()) {
      add_coherence_gather(g, T * arch_.hidden_size * combine_bytes_ / input_.tp, d, s);
      if (input_.tp > 1)
        for (int r = 0; r < ep; ++r) {
          const auto j = add_tp_collective(g, r, CollectiveOp::kAllGather, T * arch_.hidden_size * combine_bytes_, d,
                                           s.ready);
          for (int t = 0; t < input_.tp; ++t) s.ready[static_cast<std::size_t>(gpu_of(r, t))] = j;
        }
      add_kv_recompute(g, resident, d, s);
    } else {
      ++kv_layers;
    }
    add_attention(g, resident_attention(batch, ep), resident, d, s);
    const bool moe = li < arch_.moe_layers.size() && arch_.moe_layers[li] == d;
    if (!moe) {
      add_dense(g, resident, d, s);
      continue;
    }
    const auto& chunks = input_.options.layer_chunks;
    build_residence_moe_layer(g, batch, resident, li, chunks.empty() ? 1 : chunks[static_cast<std::size_t>(d)], d, s);
    ++li;
  }
  // The LM head runs where each token is; the new tokens' keys and values of the layers not gathered
  // yet, and each sampled token id (4 bytes), then reach every GPU: the sequence's owner among them.
  std::vector<long> rows(static_cast<std::size_t>(ep), 0);
  for (std::size_t i = 0; i < residence_rank_.size(); ++i)
    if (token_head_[i]) ++rows[static_cast<std::size_t>(residence_rank_[i])];
  add_head(g, rows, s);
  add_coherence_gather(g, T * (kv_layers * kv + 4.0), -1, s);
  end_step(g, {&s.ready}, s, false);
}

std::vector<GraphBuilder::MicroBatch> GraphBuilder::split_micro_batches(const StepBatch& batch,
                                                                        const std::vector<long>& home_tokens,
                                                                        std::uint32_t root) const {
  std::vector<MicroBatch> mbs(2);
  for (auto& mb : mbs) {
    mb.home_tokens.assign(home_tokens.size(), 0);
    mb.head_rows.assign(home_tokens.size(), 0);
    mb.attention.resize(home_tokens.size());
    mb.ready.assign(static_cast<std::size_t>(gpus()), root);
  }
  for (std::size_t r = 0; r < home_tokens.size(); ++r) {
    // token_chunks' rule with two chunks: position p goes to micro-batch floor(2p / n).
    long first = (home_tokens[r] + 1) / 2;
    mbs[0].home_tokens[r] = first;
    mbs[1].home_tokens[r] = home_tokens[r] - first;
    const auto& a = batch.attention[r];
    const bool flagged = r < batch.logits.size() && !batch.logits[r].empty();
    if (!flagged) {
      mbs[0].head_rows[r] = mbs[0].home_tokens[r];
      mbs[1].head_rows[r] = mbs[1].home_tokens[r];
    }
    for (std::size_t q = 0; q < a.new_tokens.size(); ++q) {
      const long k = a.new_tokens[q], c = a.context[q];
      const long head = std::min(first, k);
      // The entry's last token, and its logits, are in the second micro-batch if the entry is split.
      if (flagged && batch.logits[r][q]) ++mbs[k > head ? 1 : 0].head_rows[r];
      if (head > 0) {
        mbs[0].attention[r].new_tokens.push_back(head);
        mbs[0].attention[r].context.push_back(c);
      }
      if (k > head) {
        mbs[1].attention[r].new_tokens.push_back(k - head);
        mbs[1].attention[r].context.push_back(c + head);
      }
      first -= head;
    }
  }
  return mbs;
}

void GraphBuilder::build_two_batch_step(StepGraph& g, const StepBatch& batch, Streams& s, std::uint32_t root) {
  const std::vector<long> home_tokens = tokens_per_home(batch, input_.ep);
  std::vector<MicroBatch> mbs = split_micro_batches(batch, home_tokens, root);
  MoeScratch& m = moe_;
  // Each micro-batch's position swapped into s.ready while one of its parts is built, so that the
  // parts take their inputs from their own micro-batch and issue on the shared streams in order.
  auto with = [&](MicroBatch& mb, auto&& build) {
    std::swap(s.ready, mb.ready);
    build();
    std::swap(s.ready, mb.ready);
  };
  std::size_t li = 0;
  for (int d = 0; d < arch_.num_layers; ++d) {
    for (auto& mb : mbs) with(mb, [&] { add_attention(g, mb.attention, mb.home_tokens, d, s); });
    const bool moe = li < arch_.moe_layers.size() && arch_.moe_layers[li] == d;
    if (!moe) {
      for (auto& mb : mbs) with(mb, [&] { add_dense(g, mb.home_tokens, d, s); });
      continue;
    }
    // One routing for the step: a token's chunk is its micro-batch.
    route_moe_layer(g, batch, home_tokens, li, 2, d);
    for (std::size_t c = 0; c < mbs.size(); ++c)
      with(mbs[c], [&] {
        m.attn_done = s.ready;
        add_shared_experts(g, mbs[c].home_tokens, d, s);
        reset_lists(m.arrivals, static_cast<std::size_t>(gpus()));
        add_dispatch(g, c, d, s);
        add_expert_compute(g, c, d, s);
        add_combine(g, c, d, s);
        // This micro-batch's layer ends on its own work, not on the other's issued after it.
        end_moe_layer(g, m.compute_done, s);
      });
    ++li;
  }
  for (auto& mb : mbs) with(mb, [&] { add_head(g, mb.head_rows, s); });
  end_step(g, {&mbs[0].ready, &mbs[1].ready}, s, false);
}

void GraphBuilder::build_synthetic_step(StepGraph& g) {
  const auto root = g.add(Task{});
  const Workload& w = *input_.workload;
  const int n = gpus();
  Streams s(static_cast<std::size_t>(n), root);
  std::uint32_t barrier = root;
  const double part = w.synthetic_a2a_bytes / n;
  // A synthetic compute phase counts, for the contention lookup, as a GEMM running at the dtype's peak.
  const auto* table = profile_.gemm_table(arch_.dtype);
  const double flops = w.synthetic_compute * (table && table->peak_flops > 0 ? table->peak_flops : 1e15);
  // Aggregation (docs/simulator.md, "Aggregated uniform all-to-all"): on a private star every port
  // carries n-1 equal flows that all start together, so max-min sharing gives each flow B/(n-1) and
  // all finish at latency + (n-1) part / B. One flow of the source's n-1 parts to the next GPU of a
  // ring loads every port with one flow of the same bytes and finishes at the same instant.
  const bool merge = input_.options.fidelity == NetworkFidelity::kAuto && n >= 3 && private_star(cluster_, n) &&
                     input_.options.simgrid_cfg.empty();
  for (int layer = 0; layer < w.synthetic_layers; ++layer) {
    for (int phase = 0; phase < 2; ++phase) {
      for (int gpu = 0; gpu < n; ++gpu)
        add_compute(g, gpu, Category::kSynthetic, layer, models::ExpertWork{w.synthetic_compute, flops}, s, {barrier});
      const auto next = g.add(Task{});
      const Category cat = phase == 0 ? Category::kDispatch : Category::kCombine;
      for (int src = 0; src < n; ++src) {
        const auto dep = w.synthetic_overlap ? barrier : s.compute[static_cast<std::size_t>(src)];
        // A message that rounds to no byte still costs the route's latency alone: not merged.
        if (merge && std::llround(part) > 0) {
          // The engine carries whole bytes: the sum of the n-1 messages as each would be sent.
          const double bytes = static_cast<double>(n - 1) * static_cast<double>(std::llround(part));
          const auto id = add_transfer(g, src, (src + 1) % n, bytes, cat, w.synthetic_a2a_bytes, layer);
          g.tasks[id].merged_part = part;
          g.edge(dep, id);
          g.edge(id, next);
        } else {
          for (int dst = 0; dst < n; ++dst) {
            if (src == dst || part <= 0.0) continue;
            const auto id = add_transfer(g, src, dst, part, cat, w.synthetic_a2a_bytes, layer);
            g.edge(dep, id);
            g.edge(id, next);
          }
        }
        g.edge(s.compute[static_cast<std::size_t>(src)], next);
      }
      barrier = next;
    }
  }
  g.end_task = g.add(Task{});
  g.edge(barrier, g.end_task);
}

void GraphBuilder::skip(int steps) {
  for (int i = 0; i < steps; ++i) {
    const WorkloadMode mode = input_.workload->mode;
    if (mode == WorkloadMode::kPrefill || mode == WorkloadMode::kDecode) {
      // The skipped steps' rebalances are decided as in a run that simulates them.
      finish_inference_step(draw_inference_step());
      continue;
    }
    ++step_;
    if (mode == WorkloadMode::kTraining && arch_.is_moe())
      for (int m = 0; m < input_.workload->micro_batches; ++m)
        if (!input_.steps->next(batch_)) throw common::RunError("the workload ran out of steps");
  }
  batch_.clear();
}

void GraphBuilder::build_next(StepGraph& g) {
  g.rank_tokens.assign(layers_.size() * static_cast<std::size_t>(input_.ep), 0.0);
  layer_major_of_ = nullptr;  // batches are refilled in place
  chunks_of_ = nullptr;
  if (input_.workload->mode == WorkloadMode::kSynthetic) {
    ++step_;
    batch_.clear();
    build_synthetic_step(g);
  } else if (input_.workload->mode == WorkloadMode::kTraining) {
    micro_.assign(arch_.is_moe() ? static_cast<std::size_t>(input_.workload->micro_batches) : 0, StepBatch{});
    for (auto& mb : micro_)
      if (!input_.steps->next(mb)) throw common::RunError("the workload ran out of steps");
    ++step_;
    build_training_step(g);
    micro_.clear();
  } else {
    migration_ = draw_inference_step();
    build_inference_step(g, batch_);
    finish_inference_step(std::move(migration_));
    migration_.reset();
    g.tokens = batch_.size();
  }
  g.finalize();
}

}  // namespace moesim::sim
