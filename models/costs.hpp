// Cost models: pure functions from a profile (and architecture) to seconds, bytes and watts. They
// never schedule events; the simulator asks them for the cost of one operation at a time.
// Interpolation rule for tables: log-log linear between points, monotone (times never decrease with
// size); below the smallest measured size the smallest point's time (a launch-bound floor); above the
// largest, the largest point's throughput (time scales linearly with work).
#pragma once

#include <compare>
#include <string>
#include <vector>

#include "models/architecture.hpp"
#include "models/profile.hpp"

namespace moesim::models {

// Log-log monotone interpolation over (x, y) with the extrapolation rule above.
double interpolate_loglog(const std::vector<double>& x, const std::vector<double>& y, double at);

// Time of one GEMM [m x k] x [k x n] in `dtype`; 0 for m <= 0. An (n, k) shape not in the table takes
// the efficiency curve (FLOP/s over m) of the nearest tabulated shape (by log distance of n*k, then of
// n/k): its time above the table's launch floor is scaled by (n*k) / (n'*k'), the floor kept.
// Throws InputError when the profile has no table for `dtype`.
double gemm_time(const Profile& profile, Dtype dtype, double m, double n, double k);
double gemm_flops(double m, double n, double k);  // 2 m n k
// HBM bytes of one GEMM: operands read in `dtype`, the result written (FP8 GEMMs write BF16).
double gemm_bytes(Dtype dtype, double m, double n, double k);

// Every (n, k) GEMM shape the functions below ask for, for `arch` at tensor-parallel degree `tp`:
// routed experts, shared experts (one and all fused), the dense FFN, the attention projections, and
// the LM head [T x hidden]x[hidden x vocab/tp] for callers that cost it with gemm_time. Sorted, unique:
// the shapes a profile should tabulate (and moesim-calibrate measure).
struct GemmShape {
  long n = 0;
  long k = 0;
  auto operator<=>(const GemmShape&) const = default;
};
std::vector<GemmShape> gemm_shapes(const Architecture& arch, int tp);

// One grouped GEMM: `rows[i]` rows (tokens) for group i, every group [rows x k]x[k x n] with its own
// weights, run as the dtype's table says (GemmTable::grouped). Groups of 0 rows cost nothing.
double grouped_gemm_time(const Profile& profile, Dtype dtype, const std::vector<double>& rows, double n, double k);

// One MoE layer's routed experts on one GPU: `tokens_per_expert[i]` tokens for each local expert;
// each expert runs `projections` GEMMs (SwiGLU: gate and up [t x hidden]x[hidden x ffn/tp], down
// [t x ffn/tp]x[ffn/tp x hidden]) as a grouped GEMM, one per projection, run as the table's `grouped`
// says: kLaunches sums each expert's GEMM and pays the launch floor once per projection; kPersistent
// takes the GEMM of all the experts' rows and adds every further expert's weights read from HBM.
// Experts without tokens cost nothing. flops and bytes are the experts' own GEMMs either way.
struct ExpertWork {
  double time = 0.0;   // s
  double flops = 0.0;  // FLOP
  double bytes = 0.0;  // HBM traffic: operands read and results written (GEMMs), KV cache and activations (attention)
};
ExpertWork grouped_expert_time(const Profile& profile, const Architecture& arch, const std::vector<long>& tokens_per_expert,
                               int tp);

// Attention of one layer for a batch on one GPU of a TP group (heads split by tp): the projection
// GEMMs plus the core. Projections over the batch's new tokens T: MHA/GQA a fused QKV
// [T x hidden]x[hidden x (h + 2 kv) d] and O [T x h d]x[h d x hidden], with h = ceil(heads/tp) and
// kv = ceil(kv_heads/tp) per GPU; MLA q (or q_a [hidden -> q_lora] and q_b [q_lora -> h (nope+rope)]),
// kv_a [hidden -> kv_lora + rope], kv_b [kv_lora -> h (nope + v)] and O [h v -> hidden].
// Core rule: a sequence with n new tokens after c cached positions attends over
// pairs = n c + n (n + 1) / 2 (causal: quadratic in prefill, linear in the context in decode), at
// FLOP per pair and head 4 d (MHA/GQA), 2 (nope + rope) + 2 v (MLA, n > 1) or 2 (kv_lora + rope) +
// 2 kv_lora (MLA decode, weights absorbed); it reads (c + n) cached positions (2 kv d elements each,
// MLA: kv_lora + rope) and reads/writes its n queries and outputs. Over the whole batch, core time =
// launch floor + max(FLOP / (peak * attention.flops_efficiency), bytes / hbm_bandwidth), in the
// model's dtype (fp8 models attend in bf16).
struct AttentionBatch {
  std::vector<long> new_tokens;  // per sequence: tokens processed this step
  std::vector<long> context;     // per sequence: positions already in the KV cache before this step
};
ExpertWork attention_time(const Profile& profile, const Architecture& arch, const AttentionBatch& batch, int tp);
ExpertWork attention_core_time(const Profile& profile, const Architecture& arch, const AttentionBatch& batch, int tp);
// A dense FFN (dense layers, shared experts) over `tokens` tokens, TP-sharded.
ExpertWork dense_ffn_time(const Profile& profile, const Architecture& arch, long tokens, long ffn_size, int tp);

// Memory-bound elementwise kernels between the GEMMs (docs/simulator.md, "Elementwise kernels"). A
// count of kernels and the HBM bytes they read and write; their time on a GPU whose profile has an
// `elementwise` section is kernels x launch_floor + bytes / hbm_bandwidth (zero without the section).
// Activations are 16-bit (the model's dtype if wider); an FP8 model's GEMM inputs are quantised to
// FP8 with one FP32 scale per 128 elements (dispatch_element_bytes).
struct Elementwise {
  double bytes = 0.0;
  int kernels = 0;
};
ExpertWork elementwise_time(const Profile& profile, const Elementwise& work);
// Per token of a decoder layer on each GPU of its home group (the norms run on the whole hidden
// state): the residual add and RMSNorm before attention and before the FFN (each reads the hidden
// state and the residual and writes both), and for an FP8 model the quantisation of both normed
// inputs (read 16-bit, write FP8).
Elementwise layer_elementwise(const Architecture& arch, double tokens);
// Per row of an FFN of `ffn` (a dense layer, the shared experts, a routed expert), TP-sharded: the
// activation (SwiGLU reads gate and up and writes their product; GELU reads and writes), written in
// FP8 for an FP8 model's down projection. One kernel for all of a task's rows.
Elementwise activation_elementwise(const Architecture& arch, double rows, long ffn, int tp);
// The routed experts' rows of a normal dispatch (not low-latency kernels, which write and read the
// experts' layout directly): gathered into expert order before the GEMMs (read and write each row's
// dispatched bytes) and back after them (read and write each row's combine bytes).
Elementwise permute_elementwise(const Architecture& arch, double rows);
// The shared experts' output added to the routed experts' (read both, write the sum), per token.
Elementwise moe_sum_elementwise(const Architecture& arch, double tokens);
ExpertWork operator+(ExpertWork a, const ExpertWork& b);

// Collective time from the profile's tables (nearest rank count, interpolated in bytes); falls back
// to a ring model over `link_bandwidth` when the profile has no curve for `op`.
double collective_time(const Profile& profile, CollectiveOp op, int ranks, double bytes, double link_bandwidth,
                       double link_latency);
// nccl-tests bus-bandwidth factor: all_reduce 2(n-1)/n, all_gather/reduce_scatter/all_to_all (n-1)/n, send_recv 1.
double busbw_factor(CollectiveOp op, int ranks);
// Elements nccl-tests prints as `count` for a size of `bytes` (all-gather / reduce-scatter: the
// per-rank chunk; all-to-all: the whole send buffer, rounded down to a multiple of ranks; others the
// buffer). Throws std::invalid_argument for ranks < 1.
long nccl_tests_count(CollectiveOp op, int ranks, double bytes, int type_size);

// Contention slowdowns (>= 1) for a compute kernel of `gemm_flops` and class `compute` overlapping
// `comm_bytes` of `comm_op` whose kernels hold `comm_sms` SMs (-1: the profile's comm_sms).
// The grid: of this op, else "any"; of this class, else "any"; of these SMs, else the two grids of
// the nearest SM counts above and below (linear in SMs), else "any", else the nearest. Communication
// that holds no SM (a copy engine, RDMA: comm_sms 0) slows nothing unless a grid for 0 SMs says so.
struct Slowdown {
  double compute = 1.0;
  double comm = 1.0;
};
struct ContentionQuery {
  CollectiveOp comm_op = CollectiveOp::kAllToAll;
  double comm_bytes = 0.0;
  double gemm_flops = 0.0;
  ComputeClass compute = ComputeClass::kComputeBound;
  int comm_sms = -1;
};
Slowdown contention(const Profile& profile, const ContentionQuery& query);
// The same for a compute-bound kernel and the profile's SM count.
Slowdown contention(const Profile& profile, CollectiveOp comm_op, double comm_bytes, double gemm_flops);
// The roofline class of a kernel doing `flops` over `bytes` of HBM traffic in `dtype`: memory-bound
// below the ridge peak FLOP/s / HBM bytes/s (compute-bound when the profile gives neither figure).
ComputeClass compute_class(const Profile& profile, Dtype dtype, double flops, double bytes);

enum class GpuState { kIdle, kCompute, kComm, kBoth };
// Power in `state` under a power cap (0 = none): never above the cap. A dtype the profile gives no
// watts for takes the highest compute (or overlapped) figure it has.
double state_power(const Profile& profile, GpuState state, Dtype dtype, double power_cap);
// Compute speed factor (<= 1) under a power cap (0 = none), from the profile's cap curve: linear
// between points, 1 at the uncapped end, and below the lowest point speed proportional to the cap.
double cap_speed_factor(const Profile& profile, double power_cap);

// Power by kernel class, uncapped, at the full clock. A compute-bound kernel draws the profile's
// compute figure for its dtype; a memory-bound one its memory_bound figure, or the compute figure
// where the profile has none (a GPU streaming HBM keeps every SM clocked and issuing: Splitwise's
// measured A100 decode power supports that within 8%, docs/validation.md, "Power"). Attention is
// classed by its own roofline like any kernel.
double kernel_power(const Profile& profile, Dtype dtype, ComputeClass cls);
// Power of a GPU running a kernel that draws `kernel_w` alone while communicating: the kernel's
// power plus what communication adds to an idle GPU (communication - idle), never above the
// profile's overlapped figure for the dtype (what a compute-bound kernel draws under communication).
double kernel_power_with_comm(const Profile& profile, Dtype dtype, double kernel_w);
// Speed factor (<= 1) under a power cap of a kernel that draws `kernel_w` uncapped. The cap curve was
// measured on work that draws the profile's compute figure uncapped; a kernel that draws less is
// slowed as that work would be under a cap raised by their ratio (cap x compute / kernel_w), so a cap
// above what the kernel draws costs it (almost) nothing.
double cap_speed_factor(const Profile& profile, double power_cap, Dtype dtype, double kernel_w);
// Under an SM clock limit (Hz, 0 = none), from the profile's clock curve (1 where it has none): speed
// is linear between points and proportional to the clock below them; power is linear between points
// and held at the lowest point's below them (static power does not scale with the clock).
double clock_speed_factor(const Profile& profile, double sm_clock_limit);
double clock_power_factor(const Profile& profile, double sm_clock_limit);

double dtype_bytes(Dtype dtype);  // bf16/fp16 2, fp8 1, fp32/tf32 4
// The weights of one routed expert, bytes: its FFN projections (hidden x expert FFN each) in the
// model's dtype; what an online rebalance moves per expert copy (block scales of fp8 left out).
double expert_weight_bytes(const Architecture& arch);
// The KV cache one token adds per decoder layer on one GPU of a TP group, bytes: MHA/GQA keys and
// values of ceil(kv_heads / tp) heads (2 x heads x head_dim elements), MLA the compressed latent and
// the rope key (kv_lora + rope elements, whole on every GPU of the group), in the dtype attention runs
// in (FP8 models: BF16), as attention_time reads the cache.
double kv_bytes_per_token_layer(const Architecture& arch, int tp);
// The width of the projection that makes those keys and values from a hidden state (elements per GPU).
double kv_projection_width(const Architecture& arch, int tp);
// Bytes per hidden element of a token an expert-parallel dispatch sends for a model in `dtype`: FP8
// models dispatch FP8 with one FP32 scale per 128 elements (1 + 4/128, as DeepSeek-V3 and DeepEP
// do); others their dtype.
double dispatch_element_bytes(Dtype dtype);
// ... and a combine (and a TP all-reduce of expert outputs): FP8 models combine in BF16 (2); others
// in their dtype.
double combine_element_bytes(Dtype dtype);

}  // namespace moesim::models
