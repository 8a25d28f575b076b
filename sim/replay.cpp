#include "sim/replay.hpp"

#include <simgrid/s4u.hpp>
#include <sys/wait.h>
#include <unistd.h>
#include <xbt/log.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <thread>
#include <unordered_map>

#include "common/error.hpp"
#include "models/costs.hpp"
#include "sim/activity_dump.hpp"
#include "sim/platform.hpp"

namespace moesim::sim {

namespace {

namespace sg4 = simgrid::s4u;

enum class TaskKind : std::uint8_t { kCompute, kTransfer, kJoin };
enum class Category : std::uint8_t { kAttention, kDense, kShared, kExpert, kHead, kSynthetic, kDispatch, kCombine, kTpCollective, kGradient, kOther };

const char* category_name(Category c) {
  switch (c) {
    case Category::kAttention: return "attention";
    case Category::kDense: return "dense_ffn";
    case Category::kShared: return "shared_experts";
    case Category::kExpert: return "experts";
    case Category::kHead: return "lm_head";
    case Category::kSynthetic: return "compute";
    case Category::kDispatch: return "dispatch";
    case Category::kCombine: return "combine";
    case Category::kTpCollective: return "tp_collective";
    case Category::kGradient: return "dp_collective";
    case Category::kOther: return "other";
  }
  return "other";
}

struct Task {
  TaskKind kind = TaskKind::kJoin;
  Category category = Category::kOther;
  bool timeline = false;  // join: a stream operation worth drawing
  int gpu = -1;         // compute: host; transfer: source
  int dst = -1;         // transfer: destination
  int layer = -1;       // index into the step's layer table, -1 for none
  double merged_part = 0.0;  // transfer: > 0 when it stands for its source's whole uniform all-to-all
                             // (this many bytes to every other GPU; see build_synthetic_step)
  double amount = 0.0;  // compute: seconds at full speed; transfer: bytes
  double flops = 0.0;   // compute: FLOP, for the contention lookup
  double op_bytes = 0.0;  // transfer: bytes of the whole operation it belongs to (contention lookup)
  const char* comm_op = "all_to_all";
  int pending = 0;
  double start = -1.0, end = -1.0;
  std::uint32_t gate = 0;  // join of a stream operation: the task that opened it
};

class Replay;

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

// One MoE layer's tokens routed where every expert has a single holder and there are at most 8 EP
// ranks (the common case, kept apart so that its loop holds its state in registers): per token,
// count (rank, expert) in its chunk's table and its set of destination ranks per home.
// slot[e] = holder * E + e, bit[e] = 1 << holder; chunk[i] is token i's chunk.
[[gnu::noinline]] void route_single_holders(const std::uint16_t* ids, std::size_t n, std::size_t k, const int* home,
                                            const std::uint8_t* chunk, const std::int32_t* slot,
                                            const std::uint8_t* bit, long* const* tokens, long* const* sets,
                                            int set_bits) {
  for (std::size_t i = 0; i < n; ++i, ids += k) {
    const std::size_t c = chunk[i];
    long* t = tokens[c];
    unsigned ranks = 0;
    for (std::size_t j = 0; j < k; ++j) {
      ++t[slot[ids[j]]];
      ranks |= bit[ids[j]];
    }
    ++sets[c][(static_cast<std::size_t>(home[i]) << set_bits) + ranks];
  }
}

// The graph of one step, built up front, started lazily. Edges are collected as (from, to) pairs
// while building and turned into flat successor lists (in insertion order) by finalize(): no
// per-task containers. The object is reused from step to step, keeping its capacity.
struct StepGraph {
  std::vector<Task> tasks;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
  std::vector<std::uint32_t> succ_begin, succ;
  // Started by the engine's thread, released there (kept alive until two steps later): a graph
  // goes back to the builder only with this emptied.
  std::vector<sg4::ActivityPtr> activities;
  std::uint32_t end_task = 0;          // the task whose completion ends the step
  std::size_t tokens = 0;              // tokens the step processes
  std::vector<double> rank_tokens;     // [layer slot * ep + rank]: tokens routed to each EP rank
  std::exception_ptr error;            // building failed (the step's batch could not be drawn, ...)
  std::uint32_t add(const Task& t) {
    tasks.push_back(t);
    return static_cast<std::uint32_t>(tasks.size() - 1);
  }
  void edge(std::uint32_t from, std::uint32_t to) {
    edges.emplace_back(from, to);
    ++tasks[to].pending;
  }
  void clear() {
    tasks.clear();
    edges.clear();
    succ_begin.clear();
    succ.clear();
    end_task = 0;
    tokens = 0;
    error = nullptr;
  }
  void finalize() {
    const std::size_t n = tasks.size();
    succ_begin.assign(n + 1, 0);
    for (const auto& e : edges) ++succ_begin[e.first + 1];
    for (std::size_t i = 0; i < n; ++i) succ_begin[i + 1] += succ_begin[i];
    succ.resize(edges.size());
    // A stable counting sort: each task's successors keep the order in which edges were added.
    std::vector<std::uint32_t>& fill = fill_;
    fill.assign(succ_begin.begin(), succ_begin.end() - 1);
    for (const auto& e : edges) succ[fill[e.first]++] = e.second;
  }
  std::span<const std::uint32_t> successors(std::uint32_t id) const {
    return {succ.data() + succ_begin[id], succ_begin[id + 1] - succ_begin[id]};
  }

 private:
  std::vector<std::uint32_t> fill_;
};

// Step graphs, built one or two steps ahead on a worker thread while the engine runs (the builder
// touches no SimGrid object: it reads the trace, routes tokens and evaluates the cost models), or in
// the caller's thread when not ahead. Graphs come back in step order; a building error travels in
// its step's graph and is rethrown when that step is taken, so the steps before it still run.
class StepBuilder {
 public:
  StepBuilder(std::function<void(StepGraph&)> build, int steps, bool ahead) : build_(std::move(build)), remaining_(steps) {
    for (int i = 0; i < kGraphs; ++i) free_.push_back(std::make_unique<StepGraph>());
    if (ahead && steps > 1) worker_ = std::thread([this] { loop(); });
  }
  StepBuilder(const StepBuilder&) = delete;
  StepBuilder& operator=(const StepBuilder&) = delete;
  ~StepBuilder() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  // The next step's graph; rethrows the error that building it raised.
  std::unique_ptr<StepGraph> next() {
    std::unique_ptr<StepGraph> g;
    if (!worker_.joinable()) {
      g = take_free();
      build_one(*g);
    } else {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return !ready_.empty(); });
      g = std::move(ready_.front());
      ready_.pop_front();
      lock.unlock();
      cv_.notify_all();
    }
    if (g->error) std::rethrow_exception(g->error);
    return g;
  }
  // A graph whose activities the engine no longer references (activities already released).
  void recycle(std::unique_ptr<StepGraph> g) {
    {
      std::lock_guard lock(mu_);
      free_.push_back(std::move(g));
    }
    cv_.notify_all();
  }

 private:
  // Three graphs: the step before the running one (its activities may still be referenced from the
  // completion callback that starts the next step), the running one, and the next one.
  static constexpr int kGraphs = 3;
  std::unique_ptr<StepGraph> take_free() {
    std::lock_guard lock(mu_);
    auto g = std::move(free_.back());
    free_.pop_back();
    return g;
  }
  void build_one(StepGraph& g) {
    g.clear();
    try {
      build_(g);
    } catch (...) {
      g.error = std::current_exception();
    }
  }
  void loop() {
    for (; remaining_ > 0; --remaining_) {
      std::unique_ptr<StepGraph> g;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        if (stop_) return;
        g = std::move(free_.back());
        free_.pop_back();
      }
      build_one(*g);
      const bool failed = g->error != nullptr;
      {
        std::lock_guard lock(mu_);
        ready_.push_back(std::move(g));
      }
      cv_.notify_all();
      if (failed) return;
    }
  }

  std::function<void(StepGraph&)> build_;
  int remaining_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<StepGraph>> free_;
  std::deque<std::unique_ptr<StepGraph>> ready_;
  bool stop_ = false;
  std::thread worker_;
};

struct GpuTrack {
  int comm_active = 0;                 // transfers in flight touching this GPU
  const Task* compute = nullptr;       // the running compute task
  const Task* last_comm = nullptr;     // the most recent transfer started here (contention lookup)
  double state_since = 0.0;
  models::GpuState state = models::GpuState::kIdle;
  // The last contention lookup: the same operation against the same GEMM recurs many times in a row.
  const char* cached_op = nullptr;
  double cached_bytes = -1.0, cached_flops = -1.0;
  models::Slowdown cached;
};

class Replay {
 public:
  explicit Replay(const SimInput& in) : in_(in), arch_(*in.arch), cluster_(*in.cluster), profile_(*in.profile) {}

  SimResult run();

 private:
  // Graph building.
  void build_step(StepGraph& g, const StepBatch* batch);
  void build_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_count, std::size_t li,
                       int chunks, int layer_slot, std::vector<std::uint32_t>& ready, std::vector<std::uint32_t>& last_compute,
                       std::vector<std::uint32_t>& last_comm);
  std::uint32_t add_compute(StepGraph& g, int gpu, Category cat, int layer_slot, const models::ExpertWork& w,
                            std::vector<std::uint32_t>& last_compute, std::initializer_list<std::uint32_t> deps);
  // A TP-group collective as ring transfers sized so that, alone, it takes the profile's time.
  std::uint32_t add_tp_collective(StepGraph& g, int rank, const char* op, double bytes, int layer_slot,
                                  const std::vector<std::uint32_t>& deps_per_gpu);
  // A collective over `group` (GPU ids) as ring transfers sized to the profile's time; returns its join.
  std::uint32_t add_ring_collective(StepGraph& g, const std::vector<int>& group, const char* op, double bytes,
                                    int layer_slot, const std::vector<std::uint32_t>& deps_per_gpu, Category cat);
  void build_training_step(StepGraph& g);
  // Attention, dense FFN or MoE layer d forward (scale 1) or backward (scale 2) on every GPU.
  void build_layer(StepGraph& g, const StepBatch& batch, int d, std::size_t& li, std::vector<long>& home_tokens,
                   std::vector<std::uint32_t>& ready, std::vector<std::uint32_t>& last_compute,
                   std::vector<std::uint32_t>& last_comm);
  double layer_param_bytes(int d) const;  // non-expert parameters of decoder layer d, in bytes
  void build_synthetic_step(StepGraph& g);

  // Execution.
  void build_next(StepGraph& g);
  void start_step();
  void start_task(std::uint32_t id);
  void complete(std::uint32_t id);
  void refresh_contention(int gpu);
  void skip_steps(int n);
  void account_state(int gpu);
  void dump_step(const StepGraph& g);
  int gpu_of(int rank, int t) const { return rank * in_.tp + t; }

  const SimInput& in_;
  const models::Architecture& arch_;
  const models::Cluster& cluster_;
  const models::Profile& profile_;
  std::unique_ptr<Platform> platform_;
  std::unique_ptr<ActivityDump> dump_;  // --dump-activities
  std::uint64_t dump_next_id_ = 0;      // global id of the current step's first task
  std::uint64_t dump_prev_end_ = 0;     // global id of the previous step's end task
  double speed_factor_ = 1.0;
  double dtype_bytes_ = 2.0;
  double power_factor_ = 1.0;   // state power under the clock limit, relative to unlimited
  double compute_scale_ = 1.0;  // 2 while building a backward pass (input and weight gradients)
  std::vector<StepBatch> micro_;  // training: the micro-batches of the current step

  std::unique_ptr<StepGraph> current_, previous_;
  std::vector<std::uint32_t> worklist_;
  bool draining_ = false;
  int step_index_ = 0;  // steps started so far
  int total_steps_ = 0;
  double step_start_ = 0.0;
  std::uint32_t step_end_task_ = 0;
  bool measuring_ = false;

  std::vector<GpuTrack> track_;
  // models::contention by (operation, operation bytes, GEMM FLOP): the same few pairs recur all run.
  struct ContentionKey {
    const char* op;
    double bytes, flops;
    bool operator==(const ContentionKey&) const = default;
  };
  struct ContentionHash {
    std::size_t operator()(const ContentionKey& k) const {
      const std::size_t a = std::hash<const void*>{}(k.op), b = std::hash<double>{}(k.bytes), c = std::hash<double>{}(k.flops);
      return a ^ (b * 0x9e3779b97f4a7c15ULL) ^ (c * 0xc2b2ae3d27d4eb4fULL + (b >> 7));
    }
  };
  std::unordered_map<ContentionKey, models::Slowdown, ContentionHash> contention_memo_;
  double state_power_[4] = {0, 0, 0, 0};  // W per models::GpuState, clock limit and cap applied
  // Per-step, per (gpu, layer slot) accumulators.
  std::vector<int> layer_ids_;  // decoder-layer index per layer slot
  std::vector<char> layer_moe_;
  std::vector<double> token_time_;   // [gpu * L + slot]
  std::vector<int> a2a_active_;
  std::vector<double> a2a_since_, a2a_time_;
  StepBatch batch_;
  std::size_t batch_tokens_ = 0;  // tokens of the current step
  std::vector<int> single_holder_;  // [MoE layer * E + expert]: its only holder rank, -1 if replicated
  // For route_single_holders: per MoE layer, whether every expert has one holder, and per
  // (layer, expert) holder * E + expert and the holder's bit (EP ranks <= kMaskRanks).
  std::vector<char> all_single_;
  std::vector<std::int32_t> holder_slot_;
  std::vector<std::uint8_t> holder_bit_;
  // Each token's chunk for a chunk count, per batch (the same for every MoE layer of a step).
  const StepBatch* chunks_of_ = nullptr;
  std::vector<std::vector<std::uint8_t>> token_chunk_;  // [chunks]: per token
  // The batch's expert ids by layer ([layer][token][k]) so that routing one layer reads them in
  // sequence instead of one cache line per token; rebuilt when the batch changes.
  const StepBatch* layer_major_of_ = nullptr;
  std::vector<std::uint16_t> layer_major_ids_;
  const std::uint16_t* layer_major(const StepBatch& batch, std::size_t layers) {
    if (layer_major_of_ != &batch) {
      const std::size_t n = batch.size(), k = static_cast<std::size_t>(arch_.top_k);
      layer_major_ids_.resize(n * layers * k);
      to_layer_major(batch.experts.data(), layer_major_ids_.data(), n, layers, k);
      layer_major_of_ = &batch;
    }
    return layer_major_ids_.data();
  }

  // build_moe_layer's working storage, kept across layers and steps so that building allocates
  // only while the arrays grow.
  struct MoeScratch {
    std::vector<long> home_seen, home_chunk;
    std::vector<int> rank_node;  // node of each EP rank
    std::vector<std::vector<long>> sends, expert_tokens, node_sends, mask_counts;
    std::vector<long*> chunk_rows, chunk_sets;
    std::vector<int> dests;
    // Membership marks: rank r is in the current token's dests (node n has had its deduplicated
    // send) when its stamp equals `tick`; one increment per token instead of a search per expert.
    std::vector<std::uint32_t> rank_stamp, node_stamp;
    std::uint32_t tick = 0;
    std::vector<std::uint32_t> attn_done, shared_done, compute_done, inputs_ready, gateway_arrival;
    std::vector<char> has_gateway, via_gateway;
    std::vector<long> per_expert;
    std::vector<std::vector<std::uint32_t>> arrivals, into, at_gateway;
  };
  MoeScratch moe_;
  static constexpr int kMaskRanks = 8;  // up to this many EP ranks, routing counts destination sets
  static void reset_lists(std::vector<std::vector<std::uint32_t>>& v, std::size_t outer) {
    if (v.size() < outer) v.resize(outer);
    for (std::size_t i = 0; i < outer; ++i) v[i].clear();
  }
  static void reset_counts(std::vector<std::vector<long>>& v, std::size_t outer, std::size_t inner) {
    if (v.size() < outer) v.resize(outer);
    for (std::size_t i = 0; i < outer; ++i) v[i].assign(inner, 0);
  }

  SimResult result_;
  std::vector<double> layer_sums_;  // [slot][4]
  std::vector<double> rank_token_sums_;
  // Last: destroyed first, so that its thread stops before the state it builds from goes.
  std::unique_ptr<StepBuilder> builder_;
};

std::uint32_t Replay::add_compute(StepGraph& g, int gpu, Category cat, int layer_slot, const models::ExpertWork& w,
                                  std::vector<std::uint32_t>& last_compute, std::initializer_list<std::uint32_t> deps) {
  Task t;
  t.kind = TaskKind::kCompute;
  t.category = cat;
  t.gpu = gpu;
  t.layer = layer_slot;
  t.amount = w.time * compute_scale_ / speed_factor_;
  t.flops = w.flops * compute_scale_;
  const auto id = g.add(std::move(t));
  g.edge(last_compute[static_cast<std::size_t>(gpu)], id);
  for (auto d : deps)
    if (d != last_compute[static_cast<std::size_t>(gpu)]) g.edge(d, id);
  last_compute[static_cast<std::size_t>(gpu)] = id;
  return id;
}

std::uint32_t Replay::add_tp_collective(StepGraph& g, int rank, const char* op, double bytes, int layer_slot,
                                        const std::vector<std::uint32_t>& deps_per_gpu) {
  std::vector<int> group;
  for (int t = 0; t < in_.tp; ++t) group.push_back(gpu_of(rank, t));
  return add_ring_collective(g, group, op, bytes, layer_slot, deps_per_gpu, Category::kTpCollective);
}

std::uint32_t Replay::add_ring_collective(StepGraph& g, const std::vector<int>& group, const char* op, double bytes,
                                          int layer_slot, const std::vector<std::uint32_t>& deps_per_gpu, Category cat) {
  Task join;
  join.kind = TaskKind::kJoin;
  join.category = cat;
  join.gpu = group.front();
  join.layer = layer_slot;
  const auto j = g.add(std::move(join));
  const int n = static_cast<int>(group.size());
  const int g0 = group[0];
  const int g1 = group[static_cast<std::size_t>(1 % n)];
  const double bw = platform_->port_bandwidth(g0);
  const double lat = cluster_.latency_between(g0, g1);
  const double t_table = models::collective_time(profile_, op, n, bytes, bw, lat);
  // Ring: every GPU sends one message to its neighbour, sized so that alone it lasts t_table.
  const double ring_bytes = std::max(0.0, (t_table - lat) * bw);
  for (int t = 0; t < n; ++t) {
    Task x;
    x.kind = TaskKind::kTransfer;
    x.category = cat;
    x.gpu = group[static_cast<std::size_t>(t)];
    x.dst = group[static_cast<std::size_t>((t + 1) % n)];
    x.amount = ring_bytes;
    x.op_bytes = bytes;
    x.comm_op = op;
    x.layer = layer_slot;
    const auto id = g.add(std::move(x));
    g.edge(deps_per_gpu[static_cast<std::size_t>(x.gpu)], id);
    g.edge(id, j);
  }
  return j;
}

void Replay::build_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_count, std::size_t li,
                             int chunks, int slot, std::vector<std::uint32_t>& ready, std::vector<std::uint32_t>& last_compute,
                             std::vector<std::uint32_t>& last_comm) {
  const int ep = in_.ep, tp = in_.tp, k = arch_.top_k;
  const int experts = arch_.num_experts;
  const std::size_t L = batch.experts.size() / std::max<std::size_t>(1, batch.size() * static_cast<std::size_t>(k));
  const Placement& pl = *in_.placement;
  const double token_bytes = static_cast<double>(arch_.hidden_size) * dtype_bytes_ / tp;
  const int ranks_per_node = std::max(1, cluster_.gpus_per_node / tp);
  auto& rank_node = moe_.rank_node;
  if (static_cast<int>(rank_node.size()) != ep) {
    rank_node.resize(static_cast<std::size_t>(ep));
    for (int r = 0; r < ep; ++r) rank_node[static_cast<std::size_t>(r)] = r / ranks_per_node;
  }
  auto node_of_rank = [&](int r) { return rank_node[static_cast<std::size_t>(r)]; };

  // Position of each token among its home rank's tokens (home_count of them, counted once per
  // batch by the caller): chunk = position * chunks / count.
  MoeScratch& m = moe_;
  auto& home_seen = m.home_seen;
  home_seen.assign(static_cast<std::size_t>(ep), 0);
  auto& home_chunk = m.home_chunk;
  home_chunk.assign(static_cast<std::size_t>(ep), 0);

  // sends[c][h * ep + r]: tokens from home rank h to rank r in chunk c; expert_tokens[c][r * E + e].
  // Count arrays per chunk, reused from layer to layer: routing a token allocates nothing.
  const std::size_t C = static_cast<std::size_t>(chunks);
  const int nodes = (ep + ranks_per_node - 1) / ranks_per_node;
  reset_counts(m.sends, C, static_cast<std::size_t>(ep * ep));
  reset_counts(m.expert_tokens, C, static_cast<std::size_t>(ep * experts));
  // Hierarchical dispatch: tokens from home rank h to node n, deduplicated: [c][h * nodes + n].
  reset_counts(m.node_sends, C, static_cast<std::size_t>(ep * nodes));
  auto& sends = m.sends;
  auto& expert_tokens = m.expert_tokens;
  auto& node_sends = m.node_sends;
  // An expert with a single holder goes there whatever the token's home: one load, no search.
  const int* single = single_holder_.data() + li * static_cast<std::size_t>(experts);
  auto& dests = m.dests;
  const std::uint16_t* layer_ids = layer_major(batch, L) + li * batch.size() * static_cast<std::size_t>(k);
  // A replicated expert: the copy on the home rank, else on the home node round-robin by token
  // index (counted, then picked: no allocation), else round-robin over all copies.
  auto replica_rank = [&](std::size_t layer, std::uint16_t expert, int h, std::size_t token_index) {
    const auto& holders = pl.ranks[layer][expert];
    for (int r : holders)
      if (r == h) return r;
    std::size_t same_node = 0;
    for (int r : holders) same_node += node_of_rank(r) == node_of_rank(h) ? 1 : 0;
    if (same_node > 0) {
      std::size_t pick = token_index % same_node;
      for (int r : holders)
        if (node_of_rank(r) == node_of_rank(h) && pick-- == 0) return r;
    }
    return holders[token_index % holders.size()];
  };
  // Beyond 64 ranks (no 64-bit set): membership marks.
  auto& rank_stamp = m.rank_stamp;
  auto& node_stamp = m.node_stamp;
  if (rank_stamp.size() != static_cast<std::size_t>(ep)) rank_stamp.assign(static_cast<std::size_t>(ep), 0);
  if (node_stamp.size() != static_cast<std::size_t>(nodes)) node_stamp.assign(static_cast<std::size_t>(nodes), 0);
  // ep <= kMaskRanks: [c][(h << kMaskRanks) + set of destination ranks]: tokens.
  auto& mask_counts = m.mask_counts;
  if (ep <= kMaskRanks) reset_counts(mask_counts, C, static_cast<std::size_t>(ep) << kMaskRanks);
  const bool single_holders = ep <= kMaskRanks && li < all_single_.size() && all_single_[li] && chunks <= 255;
  if (single_holders) {
    // Token i's chunk: its position among its home rank's tokens * chunks / their count, the same
    // for every MoE layer of the step with this chunk count (a running quotient, no division).
    if (chunks_of_ != &batch) {
      for (auto& v : token_chunk_) v.clear();
      chunks_of_ = &batch;
    }
    if (token_chunk_.size() <= C) token_chunk_.resize(C + 1);
    auto& chunk = token_chunk_[C];
    if (chunk.size() != batch.size()) {
      chunk.assign(batch.size(), 0);
      if (chunks > 1)
        for (std::size_t i = 0; i < batch.size(); ++i) {
          const auto hs = static_cast<std::size_t>(batch.home[i]);
          const long scaled = home_seen[hs]++ * chunks;
          long& q = home_chunk[hs];
          while (scaled >= (q + 1) * home_count[hs]) ++q;
          chunk[i] = static_cast<std::uint8_t>(q);
        }
    }
    std::vector<long*>& tokens = m.chunk_rows;
    std::vector<long*>& sets = m.chunk_sets;
    tokens.resize(C);
    sets.resize(C);
    for (std::size_t c = 0; c < C; ++c) {
      tokens[c] = expert_tokens[c].data();
      sets[c] = mask_counts[c].data();
    }
    const std::size_t off = li * static_cast<std::size_t>(experts);
    route_single_holders(layer_ids, batch.size(), static_cast<std::size_t>(k), batch.home.data(), chunk.data(),
                         holder_slot_.data() + off, holder_bit_.data() + off, tokens.data(), sets.data(), kMaskRanks);
  }
  // The general loop: replicated experts, or more than kMaskRanks ranks.
  const std::size_t general_tokens = single_holders ? 0 : batch.size();
  for (std::size_t i = 0; i < general_tokens; ++i) {
    const int h = batch.home[i];
    // c = position * chunks / count, kept as a running quotient (no division per token).
    std::size_t c = 0;
    if (chunks > 1) {
      const auto hs = static_cast<std::size_t>(h);
      const long scaled = home_seen[hs]++ * chunks;
      long& q = home_chunk[hs];
      while (scaled >= (q + 1) * home_count[hs]) ++q;
      c = static_cast<std::size_t>(q);
    }
    const auto* e = layer_ids + i * static_cast<std::size_t>(k);
    long* tokens_c = expert_tokens[c].data();
    long* sends_row = sends[c].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep);
    const int home_node = node_of_rank(h);
    if (ep <= kMaskRanks) {
      // Up to 8 ranks: the token's set of destination ranks is counted as a whole; the sends it
      // makes are added up per distinct set after the loop (a handful of sets, 256 at most).
      unsigned ranks = 0;
      for (int j = 0; j < k; ++j) {
        int chosen = single[e[j]];
        if (chosen < 0) chosen = replica_rank(li, e[j], h, batch.token_index[i]);
        ++tokens_c[chosen * experts + e[j]];
        ranks |= 1u << chosen;
      }
      ++mask_counts[c][(static_cast<std::size_t>(h) << kMaskRanks) + ranks];
      continue;
    }
    if (ep <= 64) {
      // Destination ranks as a bit set: one OR per expert, then one pass over the set bits.
      std::uint64_t ranks = 0;
      for (int j = 0; j < k; ++j) {
        int chosen = single[e[j]];
        if (chosen < 0) chosen = replica_rank(li, e[j], h, batch.token_index[i]);
        ++tokens_c[chosen * experts + e[j]];
        ranks |= std::uint64_t{1} << chosen;
      }
      std::uint64_t far_nodes = 0;
      while (ranks != 0) {
        const int r = std::countr_zero(ranks);
        ranks &= ranks - 1;
        ++sends_row[r];
        const int n = node_of_rank(r);
        if (n != home_node) far_nodes |= std::uint64_t{1} << n;
      }
      while (far_nodes != 0) {
        const int n = std::countr_zero(far_nodes);
        far_nodes &= far_nodes - 1;
        ++node_sends[c][static_cast<std::size_t>(h * nodes + n)];
      }
      continue;
    }
    if (++m.tick == 0) {  // wrapped: clear the marks of 2^32 tokens ago
      std::fill(rank_stamp.begin(), rank_stamp.end(), 0);
      std::fill(node_stamp.begin(), node_stamp.end(), 0);
      m.tick = 1;
    }
    const std::uint32_t tick = m.tick;
    dests.clear();
    for (int j = 0; j < k; ++j) {
      int chosen = single[e[j]];
      if (chosen < 0) chosen = replica_rank(li, e[j], h, batch.token_index[i]);
      ++tokens_c[chosen * experts + e[j]];
      if (rank_stamp[static_cast<std::size_t>(chosen)] != tick) {
        rank_stamp[static_cast<std::size_t>(chosen)] = tick;
        dests.push_back(chosen);
      }
    }
    for (int r : dests) {
      ++sends_row[r];
      const int n = node_of_rank(r);
      if (n != home_node && node_stamp[static_cast<std::size_t>(n)] != tick) {
        node_stamp[static_cast<std::size_t>(n)] = tick;
        ++node_sends[c][static_cast<std::size_t>(h * nodes + n)];
      }
    }
  }
  if (ep <= kMaskRanks) {
    // Each home's destination sets: a token is sent once to every rank of its set and, for
    // hierarchical dispatch, once to every other node the set reaches.
    for (std::size_t c = 0; c < C; ++c)
      for (int h = 0; h < ep; ++h) {
        const long* counts = mask_counts[c].data() + (static_cast<std::size_t>(h) << kMaskRanks);
        long* sends_row = sends[c].data() + static_cast<std::size_t>(h) * static_cast<std::size_t>(ep);
        const int home_node = node_of_rank(h);
        for (unsigned set = 1; set < (1u << ep); ++set) {
          const long n = counts[set];
          if (n == 0) continue;
          std::uint64_t far_nodes = 0;
          for (unsigned rest = set; rest != 0; rest &= rest - 1) {
            const int r = std::countr_zero(rest);
            sends_row[r] += n;
            if (node_of_rank(r) != home_node) far_nodes |= std::uint64_t{1} << node_of_rank(r);
          }
          for (; far_nodes != 0; far_nodes &= far_nodes - 1)
            node_sends[c][static_cast<std::size_t>(h * nodes + std::countr_zero(far_nodes))] += n;
        }
      }
  }
  for (int r = 0; r < ep; ++r) {
    long total = 0;
    for (std::size_t c = 0; c < C; ++c)
      for (int e = 0; e < experts; ++e) total += expert_tokens[c][static_cast<std::size_t>(r * experts + e)];
    g.rank_tokens[static_cast<std::size_t>(slot * ep + r)] += static_cast<double>(total);
  }

  const int gpus = ep * tp;
  // The layer's input is ready on each home GPU: shared experts start on the compute stream.
  auto& attn_done = m.attn_done;
  attn_done = ready;
  auto& shared_done = m.shared_done;
  shared_done.assign(static_cast<std::size_t>(gpus), 0);
  bool have_shared = arch_.num_shared_experts > 0;
  if (have_shared)
    for (int gpu = 0; gpu < gpus; ++gpu) {
      const long tokens = home_count[static_cast<std::size_t>(gpu / tp)];
      shared_done[static_cast<std::size_t>(gpu)] =
          add_compute(g, gpu, Category::kShared, slot,
                      models::dense_ffn_time(profile_, arch_, tokens,
                                             static_cast<long>(arch_.num_shared_experts) * arch_.shared_expert_ffn_size, tp),
                      last_compute, {ready[static_cast<std::size_t>(gpu)]});
    }

  auto new_transfer = [&](int src, int dst, double bytes, Category cat, double op_bytes) {
    Task x;
    x.kind = TaskKind::kTransfer;
    x.category = cat;
    x.gpu = src;
    x.dst = dst;
    x.amount = bytes;
    x.op_bytes = op_bytes;
    x.layer = slot;
    return g.add(std::move(x));
  };
  // A stream operation on `gpu`'s communication stream: starts after the previous one and `dep`.
  auto new_op = [&](int gpu, std::uint32_t dep, Category cat) {
    Task j;
    j.kind = TaskKind::kJoin;
    j.category = cat;
    j.gpu = gpu;
    j.layer = slot;
    j.timeline = true;
    const auto start = g.add(Task{});  // gate: previous op done and data ready
    g.edge(last_comm[static_cast<std::size_t>(gpu)], start);
    g.edge(dep, start);
    const auto id = g.add(std::move(j));
    g.edge(start, id);
    last_comm[static_cast<std::size_t>(gpu)] = id;
    g.tasks[id].gate = start;
    return std::pair<std::uint32_t, std::uint32_t>{start, id};
  };

  auto& arrivals = m.arrivals;  // combine arrivals per home GPU
  reset_lists(arrivals, static_cast<std::size_t>(gpus));
  for (std::size_t c = 0; c < C; ++c) {
    // Dispatch of chunk c: one operation per source GPU.
    auto& into = m.into;
    reset_lists(into, static_cast<std::size_t>(gpus));
    for (int h = 0; h < ep; ++h) {
      for (int t = 0; t < tp; ++t) {
        const int src = gpu_of(h, t);
        double op_bytes = 0.0;
        for (int r = 0; r < ep; ++r)
          if (r != h) op_bytes += static_cast<double>(sends[c][static_cast<std::size_t>(h * ep + r)]) * token_bytes;
        if (op_bytes <= 0.0) continue;
        auto [gate, op] = new_op(src, attn_done[static_cast<std::size_t>(src)], Category::kDispatch);
        const bool hier = in_.options.dispatch == DispatchMode::kHierarchical;
        auto& gateway_arrival = m.gateway_arrival;
        gateway_arrival.assign(static_cast<std::size_t>(nodes), 0);
        auto& has_gateway = m.has_gateway;
        has_gateway.assign(static_cast<std::size_t>(nodes), 0);
        for (int r = 0; r < ep; ++r) {
          const long n = sends[c][static_cast<std::size_t>(h * ep + r)];
          if (r == h || n == 0) continue;
          const int dst = gpu_of(r, t);
          const int dn = node_of_rank(r);
          if (hier && dn != node_of_rank(h)) {
            // One inter-node transfer per destination node to the GPU of the same local index there
            // (tokens deduplicated), then NVLink forwarding inside the node.
            const int gateway = std::min(cluster_.total_gpus() - 1, dn * cluster_.gpus_per_node + cluster_.local_index(src));
            if (!has_gateway[static_cast<std::size_t>(dn)]) {
              has_gateway[static_cast<std::size_t>(dn)] = 1;
              const double b = static_cast<double>(node_sends[c][static_cast<std::size_t>(h * nodes + dn)]) * token_bytes;
              const auto x = new_transfer(src, gateway, b, Category::kDispatch, op_bytes);
              g.edge(gate, x);
              g.edge(x, op);
              gateway_arrival[static_cast<std::size_t>(dn)] = x;
            }
            const auto arrive = gateway_arrival[static_cast<std::size_t>(dn)];
            if (dst == gateway) {
              into[static_cast<std::size_t>(dst)].push_back(arrive);
            } else {
              const auto f = new_transfer(gateway, dst, static_cast<double>(n) * token_bytes, Category::kDispatch, op_bytes);
              g.edge(arrive, f);
              g.edge(f, op);
              into[static_cast<std::size_t>(dst)].push_back(f);
            }
          } else {
            const auto x = new_transfer(src, dst, static_cast<double>(n) * token_bytes, Category::kDispatch, op_bytes);
            g.edge(gate, x);
            g.edge(x, op);
            into[static_cast<std::size_t>(dst)].push_back(x);
          }
        }
      }
    }
    // Expert compute of chunk c on every GPU of every rank (TP: all-gather before, reduce-scatter after).
    auto& compute_done = m.compute_done;
    compute_done.assign(static_cast<std::size_t>(gpus), 0);
    for (int r = 0; r < ep; ++r) {
      auto& per_expert = m.per_expert;
      per_expert.clear();
      long received = 0;
      for (int e = 0; e < experts; ++e) {
        const long n = expert_tokens[c][static_cast<std::size_t>(r * experts + e)];
        if (n > 0) per_expert.push_back(n);
        received += n;
      }
      auto& inputs_ready = m.inputs_ready;
      inputs_ready.assign(static_cast<std::size_t>(gpus), 0);
      for (int t = 0; t < tp; ++t) {
        const int gpu = gpu_of(r, t);
        Task gate;
        const auto gid = g.add(std::move(gate));
        g.edge(attn_done[static_cast<std::size_t>(gpu)], gid);
        for (auto x : into[static_cast<std::size_t>(gpu)]) g.edge(x, gid);
        inputs_ready[static_cast<std::size_t>(gpu)] = gid;
      }
      std::uint32_t ag = 0;
      if (tp > 1 && received > 0)
        ag = add_tp_collective(g, r, "all_gather", static_cast<double>(received) * arch_.hidden_size * dtype_bytes_, slot,
                               inputs_ready);
      for (int t = 0; t < tp; ++t) {
        const int gpu = gpu_of(r, t);
        const auto dep = tp > 1 && received > 0 ? ag : inputs_ready[static_cast<std::size_t>(gpu)];
        if (per_expert.empty()) {
          compute_done[static_cast<std::size_t>(gpu)] = dep;
          continue;
        }
        compute_done[static_cast<std::size_t>(gpu)] =
            add_compute(g, gpu, Category::kExpert, slot, models::grouped_expert_time(profile_, arch_, per_expert, tp),
                        last_compute, {dep});
      }
      if (tp > 1 && received > 0) {
        const auto rs = add_tp_collective(g, r, "reduce_scatter",
                                          static_cast<double>(received) * arch_.hidden_size * dtype_bytes_, slot,
                                          compute_done);
        for (int t = 0; t < tp; ++t) compute_done[static_cast<std::size_t>(gpu_of(r, t))] = rs;
      }
    }
    // Combine of chunk c: the reverse transfers, one operation per expert GPU. Hierarchical: results
    // for a home GPU in another node go over NVLink to the gateway of this node (the GPU with the home
    // GPU's local index), which sends them, reduced per token, in one inter-node transfer.
    const bool hier = in_.options.dispatch == DispatchMode::kHierarchical;
    auto& at_gateway = m.at_gateway;  // [home * nodes + node]
    reset_lists(at_gateway, static_cast<std::size_t>(gpus * nodes));
    auto& via_gateway = m.via_gateway;
    via_gateway.assign(static_cast<std::size_t>(gpus * nodes), 0);
    for (int r = 0; r < ep; ++r) {
      for (int t = 0; t < tp; ++t) {
        const int src = gpu_of(r, t);
        double op_bytes = 0.0;
        for (int h = 0; h < ep; ++h)
          if (h != r) op_bytes += static_cast<double>(sends[c][static_cast<std::size_t>(h * ep + r)]) * token_bytes;
        if (op_bytes <= 0.0) continue;
        auto [gate, op] = new_op(src, compute_done[static_cast<std::size_t>(src)], Category::kCombine);
        const int sn = node_of_rank(r);
        for (int h = 0; h < ep; ++h) {
          const long n = sends[c][static_cast<std::size_t>(h * ep + r)];
          if (h == r || n == 0) continue;
          const int home = gpu_of(h, t);
          const double bytes = static_cast<double>(n) * token_bytes;
          if (hier && sn != node_of_rank(h)) {
            const std::size_t key = static_cast<std::size_t>(home * nodes + sn);
            via_gateway[key] = 1;
            const int gateway = std::min(cluster_.total_gpus() - 1, sn * cluster_.gpus_per_node + cluster_.local_index(home));
            if (src == gateway) {
              at_gateway[key].push_back(gate);
            } else {
              const auto x = new_transfer(src, gateway, bytes, Category::kCombine, op_bytes);
              g.edge(gate, x);
              g.edge(x, op);
              at_gateway[key].push_back(x);
            }
          } else {
            const auto x = new_transfer(src, home, bytes, Category::kCombine, op_bytes);
            g.edge(gate, x);
            g.edge(x, op);
            arrivals[static_cast<std::size_t>(home)].push_back(x);
          }
        }
      }
    }
    for (int home = 0; home < gpus; ++home) {
      for (int sn = 0; sn < nodes; ++sn) {
        const std::size_t key = static_cast<std::size_t>(home * nodes + sn);
        if (!via_gateway[key]) continue;
        const int gateway = std::min(cluster_.total_gpus() - 1, sn * cluster_.gpus_per_node + cluster_.local_index(home));
        const double bytes = static_cast<double>(node_sends[c][static_cast<std::size_t>((home / tp) * nodes + sn)]) * token_bytes;
        const auto x = new_transfer(gateway, home, bytes, Category::kCombine, bytes);
        for (auto d : at_gateway[key]) g.edge(d, x);
        arrivals[static_cast<std::size_t>(home)].push_back(x);
      }
    }
    if (c + 1 == C)
      for (int gpu = 0; gpu < gpus; ++gpu) arrivals[static_cast<std::size_t>(gpu)].push_back(compute_done[static_cast<std::size_t>(gpu)]);
  }
  // The layer ends on a home GPU when its tokens are back, its own expert work and shared experts done.
  for (int gpu = 0; gpu < gpus; ++gpu) {
    Task end;
    const auto id = g.add(std::move(end));
    for (auto x : arrivals[static_cast<std::size_t>(gpu)]) g.edge(x, id);
    g.edge(last_compute[static_cast<std::size_t>(gpu)], id);
    if (have_shared) g.edge(shared_done[static_cast<std::size_t>(gpu)], id);
    ready[static_cast<std::size_t>(gpu)] = id;
  }
}

void Replay::build_layer(StepGraph& g, const StepBatch& batch, int d, std::size_t& li, std::vector<long>& home_tokens,
                         std::vector<std::uint32_t>& ready, std::vector<std::uint32_t>& last_compute,
                         std::vector<std::uint32_t>& last_comm) {
  const int gpus = in_.ep * in_.tp;
  const int tp = in_.tp;
  const int slot = d;
  const bool moe = li < arch_.moe_layers.size() && arch_.moe_layers[li] == d;
  auto tp_all_reduce = [&] {
    if (tp == 1) return;
    for (int r = 0; r < in_.ep; ++r)
      if (home_tokens[static_cast<std::size_t>(r)] > 0) {
        const auto j = add_tp_collective(
            g, r, "all_reduce", static_cast<double>(home_tokens[static_cast<std::size_t>(r)]) * arch_.hidden_size * dtype_bytes_,
            slot, ready);
        for (int t = 0; t < tp; ++t) ready[static_cast<std::size_t>(gpu_of(r, t))] = j;
      }
  };
  // Attention on every GPU of each home group (heads split by TP), then the TP all-reduce.
  for (int gpu = 0; gpu < gpus; ++gpu) {
    const auto& a = batch.attention[static_cast<std::size_t>(gpu / tp)];
    if (a.new_tokens.empty()) continue;
    add_compute(g, gpu, Category::kAttention, slot, models::attention_time(profile_, arch_, a, tp), last_compute,
                {ready[static_cast<std::size_t>(gpu)]});
    ready[static_cast<std::size_t>(gpu)] = last_compute[static_cast<std::size_t>(gpu)];
  }
  tp_all_reduce();
  if (moe) {
    build_moe_layer(g, batch, home_tokens, li,
                    in_.options.layer_chunks.empty() ? 1 : in_.options.layer_chunks[static_cast<std::size_t>(d)], slot, ready,
                    last_compute, last_comm);
    ++li;
    return;
  }
  for (int gpu = 0; gpu < gpus; ++gpu) {
    const long tokens = home_tokens[static_cast<std::size_t>(gpu / tp)];
    if (tokens == 0) continue;
    add_compute(g, gpu, Category::kDense, slot, models::dense_ffn_time(profile_, arch_, tokens, arch_.dense_ffn_size, tp),
                last_compute, {ready[static_cast<std::size_t>(gpu)]});
    ready[static_cast<std::size_t>(gpu)] = last_compute[static_cast<std::size_t>(gpu)];
  }
  tp_all_reduce();
}

double Replay::layer_param_bytes(int d) const {
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
  return (attn + ffn) * dtype_bytes_ / in_.tp;
}

void Replay::build_training_step(StepGraph& g) {
  const auto root = g.add(Task{});
  const int gpus = in_.ep * in_.tp;
  const Workload& w = *in_.workload;
  const bool overlap = !in_.options.layer_chunks.empty() &&
                       *std::max_element(in_.options.layer_chunks.begin(), in_.options.layer_chunks.end()) > 1;
  const bool fsdp = w.gradient == GradientSync::kFsdp;
  std::vector<std::uint32_t> ready(static_cast<std::size_t>(gpus), root), last_compute(static_cast<std::size_t>(gpus), root),
      last_comm(static_cast<std::size_t>(gpus), root);
  // The data-parallel group of each TP index: the GPUs holding the same parameter shard.
  std::vector<std::vector<int>> dp_groups(static_cast<std::size_t>(in_.tp));
  for (int gpu = 0; gpu < gpus; ++gpu) dp_groups[static_cast<std::size_t>(gpu % in_.tp)].push_back(gpu);

  // A gradient or parameter collective of layer d on every DP group, on the communication stream.
  // Overlapped: it waits only for its data and the stream; sequential: compute waits for it too.
  auto layer_collective = [&](const char* op, int d, Category cat, bool blocks_compute) {
    if (dp_groups.front().size() < 2) return;
    const double bytes = layer_param_bytes(d);
    std::vector<std::uint32_t> deps(static_cast<std::size_t>(gpus));
    for (int gpu = 0; gpu < gpus; ++gpu) {
      Task gate;
      const auto id = g.add(std::move(gate));
      g.edge(last_comm[static_cast<std::size_t>(gpu)], id);
      // A parameter gather runs ahead of compute when overlapped; gradients wait for their layer.
      if (std::string_view(op) != "all_gather" || !overlap) g.edge(ready[static_cast<std::size_t>(gpu)], id);
      deps[static_cast<std::size_t>(gpu)] = id;
    }
    for (const auto& group : dp_groups) {
      const auto j = add_ring_collective(g, group, op, bytes, d, deps, cat);
      g.tasks[j].timeline = true;
      g.tasks[j].gate = deps[static_cast<std::size_t>(group.front())];
      for (int gpu : group) {
        last_comm[static_cast<std::size_t>(gpu)] = j;
        if (blocks_compute || !overlap) ready[static_cast<std::size_t>(gpu)] = j;
      }
    }
  };

  const long per_micro_sequences = std::max(1, w.batch / std::max(1, w.micro_batches));
  for (int m = 0; m < w.micro_batches; ++m) {
    StepBatch dense;
    const StepBatch* batch = nullptr;
    if (arch_.is_moe()) {
      batch = &micro_[static_cast<std::size_t>(m)];
    } else {
      dense.attention.resize(static_cast<std::size_t>(in_.ep));
      for (int r = 0; r < in_.ep; ++r) {
        for (long sq = 0; sq < per_micro_sequences; ++sq) {
          dense.attention[static_cast<std::size_t>(r)].new_tokens.push_back(w.sequence_length);
          dense.attention[static_cast<std::size_t>(r)].context.push_back(0);
        }
        dense.home.insert(dense.home.end(), static_cast<std::size_t>(per_micro_sequences * w.sequence_length), r);
      }
      batch = &dense;
    }
    g.tokens += batch->size();
    std::vector<long> home_tokens(static_cast<std::size_t>(in_.ep), 0);
    for (int h : batch->home) ++home_tokens[static_cast<std::size_t>(h)];
    // Forward (FSDP gathers each layer's parameters first; overlapped, the gather runs ahead).
    compute_scale_ = 1.0;
    std::size_t li = 0;
    for (int d = 0; d < arch_.num_layers; ++d) {
      if (fsdp) layer_collective("all_gather", d, Category::kGradient, true);
      build_layer(g, *batch, d, li, home_tokens, ready, last_compute, last_comm);
    }
    // Loss: the vocabulary projection forward and its two gradient GEMMs.
    for (int gpu = 0; gpu < gpus; ++gpu) {
      const long tokens = home_tokens[static_cast<std::size_t>(gpu / in_.tp)];
      if (tokens == 0) continue;
      const double n = static_cast<double>(arch_.vocab_size) / in_.tp;
      models::ExpertWork head{3 * models::gemm_time(profile_, arch_.dtype, static_cast<double>(tokens), n, arch_.hidden_size),
                              3 * models::gemm_flops(static_cast<double>(tokens), n, arch_.hidden_size)};
      add_compute(g, gpu, Category::kHead, -1, head, last_compute, {ready[static_cast<std::size_t>(gpu)]});
      ready[static_cast<std::size_t>(gpu)] = last_compute[static_cast<std::size_t>(gpu)];
    }
    // Backward, last layer first: twice the forward GEMMs, the reverse all-to-alls; gradients of the
    // last micro-batch are reduced layer by layer (all-reduce, or FSDP's reduce-scatter).
    compute_scale_ = 2.0;
    for (int d = arch_.num_layers; d-- > 0;) {
      if (fsdp) layer_collective("all_gather", d, Category::kGradient, true);
      // build_layer treats d as MoE when the cursor points at it in the MoE layer list.
      std::size_t cursor = static_cast<std::size_t>(
          std::find(arch_.moe_layers.begin(), arch_.moe_layers.end(), d) - arch_.moe_layers.begin());
      build_layer(g, *batch, d, cursor, home_tokens, ready, last_compute, last_comm);
      if (m + 1 == w.micro_batches) layer_collective(fsdp ? "reduce_scatter" : "all_reduce", d, Category::kGradient, false);
    }
    compute_scale_ = 1.0;
  }
  const auto end = g.add(Task{});
  for (int gpu = 0; gpu < gpus; ++gpu) {
    g.edge(ready[static_cast<std::size_t>(gpu)], end);
    g.edge(last_compute[static_cast<std::size_t>(gpu)], end);
    g.edge(last_comm[static_cast<std::size_t>(gpu)], end);
  }
  g.end_task = end;
}

void Replay::build_step(StepGraph& g, const StepBatch* batch) {
  const auto root = g.add(Task{});
  const int gpus = in_.ep * in_.tp;
  std::vector<std::uint32_t> ready(static_cast<std::size_t>(gpus), root), last_compute(static_cast<std::size_t>(gpus), root),
      last_comm(static_cast<std::size_t>(gpus), root);
  const int tp = in_.tp;
  std::vector<long> home_tokens(static_cast<std::size_t>(in_.ep), 0);
  for (int h : batch->home) ++home_tokens[static_cast<std::size_t>(h)];

  std::size_t li = 0;  // index of the next MoE layer in the trace / placement
  for (int d = 0; d < arch_.num_layers; ++d) build_layer(g, *batch, d, li, home_tokens, ready, last_compute, last_comm);
  // The vocabulary projection of each rank's tokens (vocabulary split by TP).
  for (int gpu = 0; gpu < gpus; ++gpu) {
    const long tokens = home_tokens[static_cast<std::size_t>(gpu / tp)];
    if (tokens == 0) continue;
    const double n = static_cast<double>(arch_.vocab_size) / tp;
    models::ExpertWork w{models::gemm_time(profile_, arch_.dtype, static_cast<double>(tokens), n, arch_.hidden_size),
                         models::gemm_flops(static_cast<double>(tokens), n, arch_.hidden_size)};
    add_compute(g, gpu, Category::kHead, -1, w, last_compute, {ready[static_cast<std::size_t>(gpu)]});
    ready[static_cast<std::size_t>(gpu)] = last_compute[static_cast<std::size_t>(gpu)];
  }
  const auto end = g.add(Task{});
  for (int gpu = 0; gpu < gpus; ++gpu) {
    g.edge(ready[static_cast<std::size_t>(gpu)], end);
    g.edge(last_comm[static_cast<std::size_t>(gpu)], end);
  }
  g.end_task = end;
}

void Replay::build_synthetic_step(StepGraph& g) {
  const auto root = g.add(Task{});
  const Workload& w = *in_.workload;
  const int n = in_.ep * in_.tp;
  std::vector<std::uint32_t> ready(static_cast<std::size_t>(n), root), last_compute(static_cast<std::size_t>(n), root);
  std::uint32_t barrier = root;
  const double part = w.synthetic_a2a_bytes / n;
  // A synthetic compute phase counts, for the contention lookup, as a GEMM running at the dtype's peak.
  const auto* table = profile_.gemm_table(arch_.dtype);
  const double flops = w.synthetic_compute * (table && table->peak_flops > 0 ? table->peak_flops : 1e15);
  // Aggregation (docs/simulator.md, "Aggregated uniform all-to-all"): on a private star every port
  // carries n-1 equal flows that all start together, so max-min sharing gives each flow B/(n-1) and
  // all finish at latency + (n-1) part / B. One flow of the source's n-1 parts to the next GPU of a
  // ring loads every port with one flow of the same bytes and finishes at the same instant.
  const bool merge = in_.options.merge_uniform_all_to_all && n >= 3 && platform_->private_star(n) &&
                     in_.options.simgrid_cfg.empty();
  for (int layer = 0; layer < w.synthetic_layers; ++layer) {
    for (int phase = 0; phase < 2; ++phase) {
      for (int gpu = 0; gpu < n; ++gpu)
        add_compute(g, gpu, Category::kSynthetic, layer, models::ExpertWork{w.synthetic_compute, flops},
                    last_compute, {barrier});
      const auto next = g.add(Task{});
      for (int src = 0; src < n; ++src) {
        Task x;
        x.kind = TaskKind::kTransfer;
        x.category = phase == 0 ? Category::kDispatch : Category::kCombine;
        x.gpu = src;
        x.op_bytes = w.synthetic_a2a_bytes;
        x.layer = layer;
        const auto dep = w.synthetic_overlap ? barrier : last_compute[static_cast<std::size_t>(src)];
        // A message that rounds to no byte still costs the route's latency alone: not merged.
        if (merge && std::llround(part) > 0) {
          x.dst = (src + 1) % n;
          // The engine carries whole bytes: the sum of the n-1 messages as each would be sent.
          x.amount = static_cast<double>(n - 1) * static_cast<double>(std::llround(part));
          x.merged_part = part;
          const auto id = g.add(x);
          g.edge(dep, id);
          g.edge(id, next);
        } else {
          for (int dst = 0; dst < n; ++dst) {
            if (src == dst || part <= 0.0) continue;
            x.dst = dst;
            x.amount = part;
            const auto id = g.add(x);
            g.edge(dep, id);
            g.edge(id, next);
          }
        }
        g.edge(last_compute[static_cast<std::size_t>(src)], next);
      }
      barrier = next;
    }
  }
  g.end_task = g.add(Task{});
  g.edge(barrier, g.end_task);
}

void Replay::account_state(int gpu) {
  auto& tr = track_[static_cast<std::size_t>(gpu)];
  const double now = sg4::Engine::get_clock();
  const double dt = now - tr.state_since;
  if (measuring_ && dt > 0) {
    auto& gr = result_.gpus[static_cast<std::size_t>(gpu)];
    const double p = state_power_[static_cast<int>(tr.state)];
    gr.energy += p * dt;
    gr.peak_power = std::max(gr.peak_power, p);
    if (tr.state == models::GpuState::kCompute || tr.state == models::GpuState::kBoth) gr.compute_busy += dt;
    if (tr.state == models::GpuState::kComm || tr.state == models::GpuState::kBoth) gr.comm_busy += dt;
    if (tr.state == models::GpuState::kBoth) gr.both_busy += dt;
  }
  tr.state_since = now;
  const bool c = tr.compute != nullptr, m = tr.comm_active > 0;
  tr.state = c && m ? models::GpuState::kBoth : c ? models::GpuState::kCompute : m ? models::GpuState::kComm : models::GpuState::kIdle;
}

void Replay::refresh_contention(int gpu) {
  if (!in_.options.contention) return;
  auto& tr = track_[static_cast<std::size_t>(gpu)];
  // A host's speed matters only while an Exec runs on it and a port's bandwidth only while one of
  // this GPU's transfers crosses it (its private links carry nothing else), so a factor is changed
  // only where something runs; whatever starts next calls this first and gets the right one.
  if (tr.compute && tr.comm_active > 0 && tr.last_comm) {
    const Task& m = *tr.last_comm;
    if (m.comm_op != tr.cached_op || m.op_bytes != tr.cached_bytes || tr.compute->flops != tr.cached_flops) {
      const ContentionKey key{m.comm_op, m.op_bytes, tr.compute->flops};
      auto it = contention_memo_.find(key);
      if (it == contention_memo_.end())
        it = contention_memo_.emplace(key, models::contention(profile_, m.comm_op, m.op_bytes, tr.compute->flops)).first;
      tr.cached = it->second;
      tr.cached_op = m.comm_op;
      tr.cached_bytes = m.op_bytes;
      tr.cached_flops = tr.compute->flops;
    }
    const auto s = tr.cached;
    platform_->set_compute_slowdown(gpu, s.compute);
    platform_->set_comm_slowdown(gpu, s.comm);
  } else {
    if (tr.compute) platform_->set_compute_slowdown(gpu, 1.0);
    if (tr.comm_active > 0) platform_->set_comm_slowdown(gpu, 1.0);
  }
}

void Replay::start_task(std::uint32_t id) {
  StepGraph& g = *current_;
  Task& t = g.tasks[id];
  t.start = sg4::Engine::get_clock();
  switch (t.kind) {
    case TaskKind::kJoin:
      worklist_.push_back(id);  // completes at once
      return;
    case TaskKind::kCompute: {
      if (t.amount <= 0.0) {
        worklist_.push_back(id);
        return;
      }
      auto& tr = track_[static_cast<std::size_t>(t.gpu)];
      tr.compute = &t;
      account_state(t.gpu);
      refresh_contention(t.gpu);
      sg4::ExecPtr exec = sg4::Exec::init();
      exec->set_host(platform_->host(t.gpu));
      exec->set_flops_amount(t.amount * kHostSpeed);
      exec->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1));
      exec->start();
      g.activities.push_back(std::move(exec));
      ++result_.activities;
      return;
    }
    case TaskKind::kTransfer: {
      if (t.amount <= 0.0 || t.gpu == t.dst) {
        worklist_.push_back(id);
        return;
      }
      for (int gpu : {t.gpu, t.dst}) {
        auto& tr = track_[static_cast<std::size_t>(gpu)];
        ++tr.comm_active;
        tr.last_comm = &t;
        account_state(gpu);
        refresh_contention(gpu);
        if (t.layer >= 0 && measuring_) {
          const std::size_t k = static_cast<std::size_t>(gpu) * layer_ids_.size() + static_cast<std::size_t>(t.layer);
          if (a2a_active_[k]++ == 0) a2a_since_[k] = t.start;
        }
      }
      if (measuring_) {
        auto& row = result_.traffic[static_cast<std::size_t>(t.gpu)];
        if (t.merged_part > 0.0) {
          for (std::size_t d = 0; d < row.size(); ++d)
            if (d != static_cast<std::size_t>(t.gpu)) row[d] += t.merged_part;
        } else {
          row[static_cast<std::size_t>(t.dst)] += t.amount;
        }
      }
      sg4::CommPtr comm = sg4::Comm::sendto_init(platform_->host(t.gpu), platform_->host(t.dst));
      comm->set_payload_size(static_cast<std::uint64_t>(std::llround(t.amount)));
      comm->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1));
      comm->start();
      g.activities.push_back(std::move(comm));
      ++result_.activities;
      return;
    }
  }
}

void Replay::complete(std::uint32_t first) {
  worklist_.push_back(first);
  if (draining_) return;
  draining_ = true;
  while (!worklist_.empty()) {
    const std::uint32_t id = worklist_.back();
    worklist_.pop_back();
    StepGraph& g = *current_;
    Task& t = g.tasks[id];
    t.end = sg4::Engine::get_clock();
    if (t.kind == TaskKind::kCompute && t.amount > 0.0) {
      auto& tr = track_[static_cast<std::size_t>(t.gpu)];
      tr.compute = nullptr;
      account_state(t.gpu);
      refresh_contention(t.gpu);
      if (measuring_) {
        result_.compute_actual += t.end - t.start;
        result_.compute_alone += t.amount;
        if (t.category == Category::kExpert && t.layer >= 0)
          token_time_[static_cast<std::size_t>(t.gpu) * layer_ids_.size() + static_cast<std::size_t>(t.layer)] += t.end - t.start;
      }
    } else if (t.kind == TaskKind::kTransfer && t.amount > 0.0 && t.gpu != t.dst) {
      for (int gpu : {t.gpu, t.dst}) {
        auto& tr = track_[static_cast<std::size_t>(gpu)];
        --tr.comm_active;
        if (tr.last_comm == &t) tr.last_comm = nullptr;
        account_state(gpu);
        refresh_contention(gpu);
        if (t.layer >= 0 && measuring_) {
          const std::size_t k = static_cast<std::size_t>(gpu) * layer_ids_.size() + static_cast<std::size_t>(t.layer);
          if (--a2a_active_[k] == 0) a2a_time_[k] += t.end - a2a_since_[k];
        }
      }
    }
    if (measuring_ && step_index_ <= in_.options.warmup_steps + in_.options.timeline_steps &&
        ((t.kind == TaskKind::kCompute && t.amount > 0) || (t.kind == TaskKind::kJoin && t.timeline))) {
      const double begin = t.kind == TaskKind::kJoin ? g.tasks[t.gate].start : t.start;
      TimelineEvent ev;
      ev.category = static_cast<std::uint8_t>(t.category);
      ev.stream = t.kind == TaskKind::kCompute ? 0 : 1;
      ev.layer = t.layer >= 0 ? layer_ids_[static_cast<std::size_t>(t.layer)] : -1;
      ev.gpu = t.gpu;
      ev.step = step_index_ - 1;
      ev.begin = begin;
      ev.end = t.end;
      result_.timeline.push_back(ev);
    }
    for (auto s : g.successors(id))
      if (--g.tasks[s].pending == 0) start_task(s);
    if (id == step_end_task_) {
      const double latency = t.end - step_start_;
      if (measuring_) {
        result_.step_latency.push_back(latency);
        result_.tokens += batch_tokens_;
        const std::size_t L = layer_ids_.size();
        const int G = static_cast<int>(track_.size());
        for (std::size_t l = 0; l < L; ++l) {
          double tt = 0, ta = 0, at = 0, aa = 0;
          for (int gpu = 0; gpu < G; ++gpu) {
            const double tok = token_time_[static_cast<std::size_t>(gpu) * L + l];
            const double a2a = a2a_time_[static_cast<std::size_t>(gpu) * L + l];
            tt = std::max(tt, tok);
            ta += tok / G;
            at = std::max(at, a2a);
            aa += a2a / G;
          }
          layer_sums_[l * 4 + 0] += tt;
          layer_sums_[l * 4 + 1] += ta;
          layer_sums_[l * 4 + 2] += at;
          layer_sums_[l * 4 + 3] += aa;
        }
        const auto& rank_tokens = g.rank_tokens;
        for (std::size_t i = 0; i < rank_tokens.size(); ++i) rank_token_sums_[i] += rank_tokens[i];
      }
      if (step_index_ < total_steps_) start_step();
    }
  }
  draining_ = false;
}

// The step's tasks as the engine will run them: tasks that complete at once (joins, empty computes
// and transfers, transfers to self) as joins; the root depends on the previous step's end.
void Replay::dump_step(const StepGraph& g) {
  const std::size_t n = g.tasks.size();
  std::vector<std::uint32_t> offset(n + 1, 0);
  for (const auto& e : g.edges) ++offset[e.second + 1];
  for (std::size_t i = 0; i < n; ++i) offset[i + 1] += offset[i];
  std::vector<std::uint64_t> deps(offset[n]);
  std::vector<std::uint32_t> fill(offset.begin(), offset.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    for (auto s : g.successors(static_cast<std::uint32_t>(i))) deps[fill[s]++] = dump_next_id_ + i;
  const std::uint64_t base = dump_next_id_;
  dump_->begin_step(step_index_, measuring_, base, n, base + step_end_task_);
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = g.tasks[i];
    std::span<const std::uint64_t> d(deps.data() + offset[i], offset[i + 1] - offset[i]);
    if (i == 0 && step_index_ > 0) d = std::span<const std::uint64_t>(&dump_prev_end_, 1);
    if (t.kind == TaskKind::kCompute && t.amount > 0.0)
      dump_->exec(base + i, t.gpu, t.amount * kHostSpeed, d);
    else if (t.kind == TaskKind::kTransfer && t.amount > 0.0 && t.gpu != t.dst)
      dump_->comm(base + i, t.gpu, t.dst, static_cast<std::uint64_t>(std::llround(t.amount)), d);
    else
      dump_->join(base + i, d);
  }
  dump_prev_end_ = base + step_end_task_;
  dump_next_id_ = base + n;
}

// Draws the batches of the first `n` steps without simulating them (a later step range).
void Replay::skip_steps(int n) {
  for (; step_index_ < n; ++step_index_) {
    if (in_.workload->mode == WorkloadMode::kSynthetic) continue;
    if (in_.workload->mode == WorkloadMode::kTraining) {
      if (!arch_.is_moe()) continue;
      for (int m = 0; m < in_.workload->micro_batches; ++m)
        if (!in_.steps->next(batch_)) throw common::RunError("the workload ran out of steps");
    } else if (!in_.steps->next(batch_)) {
      throw common::RunError("the workload ran out of steps");
    }
  }
  batch_.clear();
}

// The graph of the next step: its batch drawn from the step source, its tokens routed (the
// builder's thread when building ahead; touches no engine state).
void Replay::build_next(StepGraph& g) {
  g.rank_tokens.assign(layer_ids_.size() * static_cast<std::size_t>(in_.ep), 0.0);
  layer_major_of_ = nullptr;  // batches are refilled in place
  chunks_of_ = nullptr;
  if (in_.workload->mode == WorkloadMode::kSynthetic) {
    batch_.clear();
    build_synthetic_step(g);
  } else if (in_.workload->mode == WorkloadMode::kTraining) {
    micro_.assign(arch_.is_moe() ? static_cast<std::size_t>(in_.workload->micro_batches) : 0, StepBatch{});
    for (auto& mb : micro_)
      if (!in_.steps->next(mb)) throw common::RunError("the workload ran out of steps");
    build_training_step(g);
    micro_.clear();
  } else {
    if (!in_.steps->next(batch_)) throw common::RunError("the workload ran out of steps");
    build_step(g, &batch_);
    g.tokens = batch_.size();
  }
  g.finalize();
}

void Replay::start_step() {
  // Activities of the step before the previous one are no longer referenced by the engine: released
  // here, in the engine's thread, before their graph goes back to the builder.
  if (previous_) {
    previous_->activities.clear();
    builder_->recycle(std::move(previous_));
  }
  previous_ = std::move(current_);
  current_ = builder_->next();
  for (int gpu = 0; gpu < static_cast<int>(track_.size()); ++gpu) account_state(gpu);
  measuring_ = step_index_ >= in_.options.warmup_steps;
  std::fill(token_time_.begin(), token_time_.end(), 0.0);
  std::fill(a2a_time_.begin(), a2a_time_.end(), 0.0);
  std::fill(a2a_active_.begin(), a2a_active_.end(), 0);
  batch_tokens_ = current_->tokens;
  step_end_task_ = current_->end_task;
  if (dump_) dump_step(*current_);
  ++step_index_;
  step_start_ = sg4::Engine::get_clock();
  // The root has no predecessors.
  worklist_.clear();
  start_task(0);
  if (!draining_) {
    // Outside a completion callback (the first step): drain here.
    const auto first = worklist_.back();
    worklist_.pop_back();
    complete(first);
  }
}

SimResult Replay::run() {
  const auto wall0 = std::chrono::steady_clock::now();
  xbt_log_control_set("root.thres:critical");
  std::vector<std::string> args{"moesim", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                                "--cfg=network/crosstraffic:0"};
  for (const auto& c : in_.options.simgrid_cfg) args.push_back("--cfg=" + c);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  sg4::Engine engine(&argc, argv.data());

  // A power cap and a clock limit both slow compute; the slower of the two binds.
  speed_factor_ = std::min(models::cap_speed_factor(profile_, in_.options.power_cap),
                           models::clock_speed_factor(profile_, in_.options.clock_limit));
  power_factor_ = models::clock_power_factor(profile_, in_.options.clock_limit);
  dtype_bytes_ = models::dtype_bytes(arch_.dtype);
  for (const auto st : {models::GpuState::kIdle, models::GpuState::kCompute, models::GpuState::kComm, models::GpuState::kBoth}) {
    double p = models::state_power(profile_, st, arch_.dtype, 0.0) * power_factor_;
    if (in_.options.power_cap > 0) p = std::min(p, in_.options.power_cap);
    state_power_[static_cast<int>(st)] = p;
  }
  platform_ = std::make_unique<Platform>(cluster_, profile_, 1.0);  // the cap scales task amounts instead
  if (!in_.options.dump_activities.empty()) {
    std::vector<std::string> cfg(args.begin() + 1, args.end());
    for (auto& c : cfg) c.erase(0, 6);  // "--cfg="
    dump_ = std::make_unique<ActivityDump>(in_.options.dump_activities, in_.options.contention, cfg);
    dump_->write_platform(*platform_);
  }

  const int gpus = in_.ep * in_.tp;
  if (gpus > cluster_.total_gpus())
    throw common::InputError("EP x TP = " + std::to_string(gpus) + " GPUs, but cluster " + cluster_.name + " has " +
                             std::to_string(cluster_.total_gpus()));
  track_.assign(static_cast<std::size_t>(gpus), GpuTrack{});
  result_ = SimResult{};
  result_.label = in_.options.label;
  result_.gpus.assign(static_cast<std::size_t>(gpus), GpuResult{});
  result_.traffic.assign(static_cast<std::size_t>(gpus), std::vector<double>(static_cast<std::size_t>(gpus), 0.0));
  if (in_.workload->mode == WorkloadMode::kSynthetic) {
    for (int l = 0; l < in_.workload->synthetic_layers; ++l) {
      layer_ids_.push_back(l);
      layer_moe_.push_back(1);
    }
  } else {
    std::size_t li = 0;
    for (int d = 0; d < arch_.num_layers; ++d) {
      layer_ids_.push_back(d);
      const bool moe = li < arch_.moe_layers.size() && arch_.moe_layers[li] == d;
      layer_moe_.push_back(moe ? 1 : 0);
      if (moe) ++li;
    }
  }
  if (in_.placement) {
    const auto E = static_cast<std::size_t>(arch_.num_experts);
    single_holder_.assign(in_.placement->ranks.size() * E, -1);
    for (std::size_t l = 0; l < in_.placement->ranks.size(); ++l)
      for (std::size_t e = 0; e < E && e < in_.placement->ranks[l].size(); ++e)
        if (in_.placement->ranks[l][e].size() == 1) single_holder_[l * E + e] = in_.placement->ranks[l][e][0];
    const std::size_t layers = in_.placement->ranks.size();
    all_single_.assign(layers, 0);
    holder_slot_.assign(layers * E, 0);
    holder_bit_.assign(layers * E, 0);
    if (in_.ep <= kMaskRanks && E > 0)
      for (std::size_t l = 0; l < layers; ++l) {
        bool all = true;
        for (std::size_t e = 0; e < E; ++e) {
          const int r = single_holder_[l * E + e];
          if (r < 0) {
            all = false;
            continue;
          }
          holder_slot_[l * E + e] = static_cast<std::int32_t>(static_cast<std::size_t>(r) * E + e);
          holder_bit_[l * E + e] = static_cast<std::uint8_t>(1u << r);
        }
        all_single_[l] = all ? 1 : 0;
      }
  }
  const std::size_t L = layer_ids_.size();
  token_time_.assign(static_cast<std::size_t>(gpus) * L, 0.0);
  a2a_time_.assign(static_cast<std::size_t>(gpus) * L, 0.0);
  a2a_since_.assign(static_cast<std::size_t>(gpus) * L, 0.0);
  a2a_active_.assign(static_cast<std::size_t>(gpus) * L, 0);
  rank_token_sums_.assign(L * static_cast<std::size_t>(in_.ep), 0.0);
  layer_sums_.assign(L * 4, 0.0);
  const int all_steps = in_.options.warmup_steps + in_.options.steps;
  total_steps_ = in_.options.end_step < 0 ? all_steps : std::min(in_.options.end_step, all_steps);
  const int first_step = std::clamp(in_.options.first_step, 0, total_steps_);
  const int measured_steps = total_steps_ - std::max(first_step, in_.options.warmup_steps);
  if (first_step >= total_steps_ || measured_steps <= 0)
    throw common::RunError("step range [" + std::to_string(in_.options.first_step) + ", " + std::to_string(total_steps_) +
                           ") holds no measured step");
  skip_steps(first_step);
  builder_ = std::make_unique<StepBuilder>([this](StepGraph& g) { build_next(g); }, total_steps_ - first_step,
                                           in_.options.build_ahead);

  sg4::Activity::on_completion_cb([this](const sg4::Activity& a) {
    auto* data = a.get_data<void>();
    if (data == nullptr) return;
    complete(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(data) - 1));
  });
  start_step();
  engine.run();
  builder_.reset();
  if (static_cast<int>(result_.step_latency.size()) != measured_steps)
    throw common::RunError("the simulation ended after " + std::to_string(result_.step_latency.size()) + " of " +
                           std::to_string(measured_steps) + " measured steps (a dependency was never met)");
  for (int gpu = 0; gpu < gpus; ++gpu) account_state(gpu);
  if (dump_) dump_->finish(dump_next_id_, result_.activities);

  const double steps = measured_steps;
  for (std::size_t l = 0; l < L; ++l) {
    LayerResult lr;
    lr.layer = layer_ids_[l];
    lr.moe = layer_moe_[l] != 0;
    lr.chunks = in_.options.layer_chunks.empty() ? 1 : in_.options.layer_chunks[std::min(l, in_.options.layer_chunks.size() - 1)];
    lr.token_tail = layer_sums_[l * 4 + 0] / steps;
    lr.token_avg = layer_sums_[l * 4 + 1] / steps;
    lr.a2a_tail = layer_sums_[l * 4 + 2] / steps;
    lr.a2a_avg = layer_sums_[l * 4 + 3] / steps;
    for (int r = 0; r < in_.ep; ++r) lr.rank_tokens.push_back(rank_token_sums_[l * static_cast<std::size_t>(in_.ep) + static_cast<std::size_t>(r)] / steps);
    result_.layers.push_back(std::move(lr));
  }
  result_.measured_time = std::accumulate(result_.step_latency.begin(), result_.step_latency.end(), 0.0);
  result_.trace_repeated = in_.steps != nullptr && in_.steps->repeated();
  result_.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return std::move(result_);
}

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

const char* timeline_category_name(int category) {
  if (category < 0 || category > static_cast<int>(Category::kOther)) return "other";
  return category_name(static_cast<Category>(category));
}

std::string chrome_trace_json(const std::vector<TimelineEvent>& events, std::size_t gpus) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out.reserve(160 * (events.size() + 3 * gpus));
  bool first = true;
  auto open = [&] {
    if (!first) out += ',';
    first = false;
  };
  for (const auto& e : events) {
    open();
    const char* cat = timeline_category_name(e.category);
    out += "{\"name\":\"";
    out += cat;
    if (e.layer >= 0) {
      out += " L";
      out += std::to_string(e.layer);
    }
    out += "\",\"cat\":\"";
    out += cat;
    out += "\",\"ph\":\"X\",\"ts\":";
    append_number(out, e.begin * 1e6);
    out += ",\"dur\":";
    append_number(out, (e.end - e.begin) * 1e6);
    out += ",\"pid\":" + std::to_string(e.gpu) + ",\"tid\":" + std::to_string(e.stream) +
           ",\"args\":{\"step\":" + std::to_string(e.step) + "}}";
  }
  for (std::size_t g = 0; g < gpus; ++g) {
    const std::string pid = std::to_string(g);
    open();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"GPU " + pid + "\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
  }
  out += "]}\n";
  return out;
}

SimResult simulate(const SimInput& input) {
  Replay replay(input);
  return replay.run();
}

}  // namespace moesim::sim
