// Builds the graph of each step (docs/simulator.md, "Steps" and "One MoE layer"): draws the step's
// batch from the step source, routes its tokens through the placement and turns the layers into
// compute tasks (costed by the models) and transfers (sized in bytes), in stream order. It touches no
// SimGrid object, so it may run on a worker thread while the executor simulates the step before.
// Compute amounts are seconds at full speed already divided by the power-cap speed factor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <vector>

#include "models/architecture.hpp"
#include "models/cluster.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"
#include "sim/engine/engine_input.hpp"
#include "sim/engine/collectives.hpp"
#include "sim/engine/fabric.hpp"
#include "sim/engine/rebalance.hpp"
#include "sim/engine/routing.hpp"
#include "sim/engine/step_graph.hpp"
#include "sim/engine/step_source.hpp"

namespace moesim::sim {

// The layer table of an input: decoder layers (MoE marked), or the synthetic workload's layers.
LayerTable make_layer_table(const EngineInput& input);

class GraphBuilder {
 public:
  // `clock_speed` (<= 1): compute runs at this fraction of full speed under the clock limit. A power
  // cap (input.options.power_cap) slows each compute task by what it draws (models::kernel_power,
  // models::cap_speed_factor); the slower of the two binds.
  GraphBuilder(const EngineInput& input, const LayerTable& layers, const Fabric& fabric, double clock_speed);

  // The next step's graph (finalized), its batch drawn from the step source.
  void build_next(StepGraph& g);
  // Draws the batches of `steps` steps without building them (a later step range starts there).
  void skip(int steps);
  // Port phases (docs/simulator.md, "Port phases"): every flat or low-latency dispatch and combine
  // moves as one activity per GPU over its own ports out (Task::Side::kEgress) and one into each
  // receiving GPU (kIngress), instead of one transfer per GPU pair. Hierarchical phases keep their
  // transfers (`on` does nothing there). Set before the first step is built.
  void set_port_phases(bool on) {
    port_phases_ = on && input_.options.dispatch != DispatchMode::kHierarchical && !residence_;
  }

 private:
  // Where each GPU's streams stand while a step is built: the task after which the GPU's data is
  // ready, the last task of its compute stream, of its communication stream (dispatch, and the
  // training collectives) and of its combine stream. Dispatch and combine have streams of their
  // own, as real engines run them, so that a chunk's dispatch never waits for an earlier chunk's
  // combine.
  struct Streams {
    std::vector<std::uint32_t> ready, compute, comm, combine;
    Streams(std::size_t gpus, std::uint32_t root)
        : ready(gpus, root), compute(gpus, root), comm(gpus, root), combine(gpus, root) {}
  };
  // One of the two micro-batches of a step run with two-batch overlap (EngineOptions::micro_batches):
  // its tokens per home rank, its attention per home rank, and where its data stands per GPU.
  struct MicroBatch {
    std::vector<long> home_tokens;
    std::vector<long> head_rows;  // per home rank: tokens whose logits the LM head computes
    std::vector<models::AttentionBatch> attention;
    std::vector<std::uint32_t> ready;
  };

  void build_inference_step(StepGraph& g, const StepBatch& batch);
  // Draws the next inference step's batch, with online rebalancing's decisions around it: returns the
  // migration planned before this step (if any) and switches the routing placement as its mode says
  // (blocking and free: before the step; background: after it, finish_inference_step).
  std::optional<MigrationPlan> draw_inference_step();
  void finish_inference_step(std::optional<MigrationPlan> plan);
  void use_placement(std::shared_ptr<const Placement> placement);
  // The moves of migration_ as transfers after `root` (docs/simulator.md, "Online rebalancing"):
  // returns the task the step's work starts after (blocking: the moves' end; else root).
  std::uint32_t add_migration(StepGraph& g, std::uint32_t root);
  // Two-batch overlap: the step's tokens split in two micro-batches by position on their home rank
  // (the first ceil(n/2) of a rank's n tokens, then the rest), each layer's attention, shared experts
  // and dense parts of one issued on the compute stream while the other's dispatch or combine runs.
  void build_two_batch_step(StepGraph& g, const StepBatch& batch, Streams& s, std::uint32_t root);
  std::vector<MicroBatch> split_micro_batches(const StepBatch& batch, const std::vector<long>& home_tokens,
                                              std::uint32_t root) const;
  void add_head(StepGraph& g, const std::vector<long>& rows, Streams& s);
  void end_step(StepGraph& g, const std::vector<const std::vector<std::uint32_t>*>& ready, const Streams& s,
                bool wait_compute);
  void build_training_step(StepGraph& g);
  void build_synthetic_step(StepGraph& g);
  // Residence dispatch (docs/simulator.md, "Residence dispatch"): tokens start the step on their home
  // rank and live, after each MoE layer, on its owner rank, where the next layer's attention runs.
  void build_residence_step(StepGraph& g, const StepBatch& batch, Streams& s);
  void build_residence_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& resident,
                                 std::size_t moe_index, int chunks, int slot, Streams& s);
  // Each token's sequence entry (its home's attention entries in order), position and whether the
  // LM head computes its logits.
  void map_tokens(const StepBatch& batch);
  // The attention of each rank's resident tokens: per sequence entry, the tokens it holds of it, with
  // the context that gives them their causal pairs (exact for one token).
  std::vector<models::AttentionBatch> resident_attention(const StepBatch& batch, int ep) const;
  bool entries_split() const;  // some sequence's tokens of this step live on more than one rank
  // The all-gather of the step's hidden states at a layer's input (every GPU then computes the keys
  // and values of the tokens it does not hold), or of the new tokens' KV cache at the step's end.
  void add_coherence_gather(StepGraph& g, double bytes_per_gpu_group, int slot, Streams& s);
  void add_kv_recompute(StepGraph& g, const std::vector<long>& resident, int slot, Streams& s);
  void add_owner_shared_experts(StepGraph& g, std::size_t c, int slot, Streams& s);
  models::ExpertWork shared_expert_work(long tokens) const;
  void count_rank_tokens(StepGraph& g, std::size_t chunks, int slot) const;
  void count_sends(StepGraph& g, std::size_t chunks, std::size_t tokens) const;  // StepGraph::token_sends
  // A MoE layer's chunks (dispatch, experts, combine) after its routing, and the layer's end.
  void add_moe_chunks(StepGraph& g, std::size_t chunks, int slot, Streams& s);
  // Attention and the dense FFN or MoE block of decoder layer d. `moe_index`: the layer's index
  // among the MoE layers when it is one, advanced past it.
  void build_layer(StepGraph& g, const StepBatch& batch, int d, std::size_t& moe_index,
                   const std::vector<long>& home_tokens, Streams& s);
  void build_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_tokens,
                       std::size_t moe_index, int chunks, int slot, Streams& s);
  void route_moe_layer(StepGraph& g, const StepBatch& batch, const std::vector<long>& home_tokens,
                       std::size_t moe_index, int chunks, int slot);
  void add_tp_all_reduce(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s);
  void add_attention(StepGraph& g, const std::vector<models::AttentionBatch>& attention,
                     const std::vector<long>& home_tokens, int slot, Streams& s);
  void add_dense(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s);
  void add_shared_experts(StepGraph& g, const std::vector<long>& home_tokens, int slot, Streams& s);
  void add_dispatch(StepGraph& g, std::size_t c, int slot, Streams& s);
  void add_expert_compute(StepGraph& g, std::size_t c, int slot, Streams& s);
  void add_combine(StepGraph& g, std::size_t c, int slot, Streams& s);
  // A flat or low-latency dispatch (or, `combine`, combine) of chunk c as port phases.
  void add_port_phase(StepGraph& g, std::size_t c, int slot, Streams& s, bool combine);

  std::uint32_t add_compute(StepGraph& g, int gpu, Category cat, int slot, const models::ExpertWork& w, Streams& s,
                            std::initializer_list<std::uint32_t> deps);
  // `sizing`: the transfer's wire bytes over its payload (its operation's achieved rate) and the
  // latency before its first byte moves (its operation's fixed cost), collectives.hpp.
  std::uint32_t add_transfer(StepGraph& g, int src, int dst, double bytes, Category cat, double op_bytes, int slot,
                             TransferSizing sizing = {});
  // A stream operation on `gpu`'s communication stream, started after the stream's previous
  // operation and `dep`: returns (gate, operation) for the transfers to hang between.
  std::pair<std::uint32_t, std::uint32_t> add_stream_op(StepGraph& g, int gpu, std::uint32_t dep, Category cat, int slot,
                                                        Streams& s);
  // A layer's end on each GPU for the data `arrivals` bring and `done` (local work) finishes.
  void end_moe_layer(StepGraph& g, const std::vector<std::uint32_t>& wait, Streams& s);
  // A TP-group collective of EP rank `rank`, and a collective over `group` (GPU ids), as ring
  // transfers sized so that alone they take the profile's time; each returns its join.
  std::uint32_t add_tp_collective(StepGraph& g, int rank, models::CollectiveOp op, double bytes, int slot,
                                  const std::vector<std::uint32_t>& deps_per_gpu);
  std::uint32_t add_ring_collective(StepGraph& g, const std::vector<int>& group, models::CollectiveOp op, double bytes,
                                    int slot, const std::vector<std::uint32_t>& deps_per_gpu, Category cat);
  double layer_param_bytes(int d) const;
  models::ExpertWork expert_work(const std::vector<long>& per_expert, int tp) const;  // non-expert parameters of decoder layer d on one GPU, bytes
  int gpu_of(int rank, int t) const { return rank * input_.tp + t; }
  int gpus() const { return input_.ep * input_.tp; }
  int gateway(int node, int gpu) const;  // the GPU of `gpu`'s local index in `node`
  // A transfer that follows `after` (a piece of a pipelined batch); a piece after the first waits
  // only its route's latency, and that is taken off its wire amount (it is posted while the
  // previous one moves).
  std::uint32_t add_piece(StepGraph& g, int src, int dst, double bytes, Category cat, double op_bytes, int slot,
                          TransferSizing sizing, std::uint32_t after, bool first);
  // Pieces (1 .. most) to pipeline `bytes` from `from` to `to` in: as many as keep each piece's
  // transfer time at the route's bandwidth no shorter than its latency.
  int pieces_for(int from, int to, double bytes, int most) const;
  // `sizing` for a forwarding hop from `from` to `to` (hierarchical dispatch and combine) when the
  // kernels forward at most `rate` B/s out of a GPU (0: no limit).
  TransferSizing forwarding(TransferSizing sizing, int from, int to, double rate) const;
  const std::uint16_t* layer_major(const StepBatch& batch, std::size_t layers);

  const EngineInput& input_;
  const models::Architecture& arch_;
  const models::Cluster& cluster_;
  const models::Profile& profile_;
  const LayerTable& layers_;
  const Fabric& fabric_;
  double clock_speed_ = 1.0;
  double dtype_bytes_ = 2.0;     // weights (gradient synchronisation)
  double dispatch_bytes_ = 2.0;  // per hidden element dispatched (models::dispatch_element_bytes)
  double combine_bytes_ = 2.0;   // per hidden element combined or reduced across TP
  double compute_scale_ = 1.0;    // 2 while building a backward pass (input and weight gradients)
  std::vector<StepBatch> micro_;  // training: the micro-batches of the current step
  StepBatch batch_;
  std::vector<int> rank_node_;
  // The EP group of one TP index lies on one node; per GPU, the port its all-to-all transfers leave
  // through (NVLink, or the network port when the group spans nodes), for alltoall_sizing.
  bool a2a_one_node_ = true;
  double a2a_floor_ = 0.0;  // the all-to-all's fixed cost (alltoall_floor)
  // Hierarchical dispatch: the kernels' forwarding rates, B/s (profile normal_kernels; 0: none).
  double dispatch_forward_rate_ = 0.0;
  double combine_forward_rate_ = 0.0;
  std::vector<RouteFigures> a2a_port_;
  // How the transfers of a dispatch or combine from `gpu` moving `op_bytes` off the GPU are sized:
  // from the all-to-all curve, or, in low-latency mode, at the links' rates after `ll_latency`.
  TransferSizing phase_sizing(int gpu, double op_bytes, double ll_latency) const;
  // What rank h and rank r exchange in chunk c: tokens, or (token, expert) copies in low-latency mode.
  long exchanged(const LayerCounts& counts, std::size_t c, int h, int r) const {
    return low_latency_ ? counts.pair_send(c, h, r) : counts.send(c, h, r);
  }
  // What rank r returns to rank h in chunk c's combine: what h sent it, or in residence mode the tokens
  // whose owner h is.
  long returned(const LayerCounts& counts, std::size_t c, int h, int r) const {
    return residence_ ? counts.returned(c, r, h) : exchanged(counts, c, h, r);
  }
  bool low_latency_ = false;     // dispatch.mode low_latency
  bool residence_ = false;       // dispatch.mode residence
  // Residence: per token of the step, the rank it lives on, its owner after the layer being built,
  // its chunk, sequence entry, position and LM-head flag; per chunk and rank, the tokens it owns.
  std::vector<int> residence_rank_, owner_;
  std::vector<std::uint8_t> residence_chunk_;
  std::vector<std::size_t> token_entry_;
  std::vector<long> token_position_;
  std::vector<char> token_head_;
  std::size_t entries_ = 0;  // the step's sequence entries (over every rank's attention)
  std::vector<std::vector<long>> owned_;
  double weight_bytes_ = 0.0;  // residence: the weights a GPU holds (the most of any GPU), bytes
  bool port_phases_ = false;
  std::int16_t dispatch_sms_ = -1;  // SMs a dispatch or combine transfer holds (Task::comm_sms)
  std::unique_ptr<LayerRouter> router_;
  // Online rebalancing: the decisions, the placement the router routes by, the plan of the step being
  // built, transfers the step's end waits for besides its streams (background moves), and the index
  // of the next step drawn (warmup included).
  std::unique_ptr<Rebalancer> rebalancer_;
  std::shared_ptr<const Placement> routed_placement_;
  std::optional<MigrationPlan> migration_;
  std::vector<std::uint32_t> end_waits_;
  int step_ = 0;

  // The batch's expert ids by layer ([layer][token][k]), so that routing one layer reads them in
  // sequence instead of one cache line per token; rebuilt when the batch changes.
  const StepBatch* layer_major_of_ = nullptr;
  std::vector<std::uint16_t> layer_major_ids_;
  // Each token's chunk for a chunk count, per batch (the same for every MoE layer of a step).
  const StepBatch* chunks_of_ = nullptr;
  std::vector<std::vector<std::uint8_t>> token_chunk_;  // [chunks]: per token

  // One MoE layer's working state, kept across layers and steps so that building allocates only
  // while the arrays grow.
  struct MoeScratch {
    LayerCounts counts;
    std::vector<std::uint32_t> attn_done, shared_done, compute_done, inputs_ready, gateway_arrival, combine_op;
    // Hierarchical: pieces of each inter-node batch (0: none yet), by destination node (dispatch)
    // and by (home GPU, expert node) (combine).
    std::vector<char> gateway_pieces, combine_pieces;
    std::vector<long> per_expert;
    std::vector<std::vector<std::uint32_t>> arrivals, into, at_gateway;
    // Port phases: what one phase moves into each GPU, [2 * gpu + (from another node)].
    struct PortLoad {
      double payload = 0.0, amount = 0.0, latency = 0.0;
      int peer = -1;  // the first GPU at the other end (the route whose latency it waits)
      void add(double bytes, double wire, double lat, int other) {
        payload += bytes;
        amount += wire;
        latency = std::max(latency, lat);
        if (peer < 0) peer = other;
      }
    };
    std::vector<PortLoad> port_in;
    // A sender of the phase: its rank and TP index, its stream operation, its sending activities
    // port_out[out_begin, out_end).
    struct PortSender {
      int rank = 0, tp = 0;
      std::uint32_t gate = 0, op = 0, out_begin = 0, out_end = 0;
    };
    std::vector<PortSender> port_senders;
    std::vector<std::uint32_t> port_out, port_in_task;  // port_in_task: receiving activity per [2 * gpu + class]
    std::vector<double> port_in_time;                    // s its end alone takes to receive, same index
  };
  MoeScratch moe_;
};

}  // namespace moesim::sim
