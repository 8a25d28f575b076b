#include "sim/placement/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"
#include "common/units.hpp"
#include "models/costs.hpp"
#include "sim/placement/routing_counts.hpp"
#include "sim/placement/routing_rule.hpp"
#include "sim/placement/traffic.hpp"
#include "traces/trace.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using common::InputError;

double expert_bytes_per_gpu(const models::Architecture& arch, int tp) {
  return static_cast<double>(arch.ffn_projections) * arch.hidden_size * arch.expert_ffn_size *
         models::dtype_bytes(arch.dtype) / std::max(1, tp);
}

CheckedPlacement load_checked_placement(const std::string& path, const PlacementOverrides& overrides) {
  CheckedPlacement c;
  c.path = fs::absolute(path).lexically_normal().string();
  c.placement = load_placement(path);
  Placement& p = c.placement;
  // A placement names its configs by shipped name or absolute path (relative ones against its folder).
  auto resolve = [&](const std::string& ref) {
    const bool is_path = ref.find('/') != std::string::npos || ref.ends_with(".yaml") || ref.ends_with(".yml");
    if (!is_path || fs::path(ref).is_absolute()) return ref;
    return (fs::absolute(path).parent_path() / ref).lexically_normal().string();
  };
  c.arch = models::load_architecture(overrides.architecture.empty() ? resolve(p.architecture) : overrides.architecture);
  c.cluster = models::load_cluster(overrides.cluster.empty() ? resolve(p.cluster) : overrides.cluster);
  validate_placement(p, c.arch, path);
  const long gpus = static_cast<long>(p.ep) * p.tp;
  if (gpus > c.cluster.total_gpus() || c.cluster.total_gpus() % gpus != 0 || c.cluster.gpus_per_node % p.tp != 0)
    throw InputError(path + ": ep x tp = " + std::to_string(p.ep) + " x " + std::to_string(p.tp) +
                     " GPUs does not divide cluster " + c.cluster.name + " (" + std::to_string(c.cluster.total_gpus()) +
                     " GPUs, " + std::to_string(c.cluster.gpus_per_node) + " per node)");
  // Memory: the routed experts a rank holds over all layers, per GPU of its TP group.
  const double per_expert = expert_bytes_per_gpu(c.arch, p.tp);
  for (int r = 0; r < p.ep; ++r) {
    std::size_t n = 0;
    for (std::size_t l = 0; l < p.layers.size(); ++l) n += p.experts_on(l, r).size();
    const double bytes = per_expert * static_cast<double>(n);
    if (bytes > c.cluster.gpu_memory)
      throw InputError(path + ": rank " + std::to_string(r) + " holds " + std::to_string(n) +
                       " routed experts over all layers, " + common::format_unit(bytes, common::UnitKind::kBytes) +
                       " of weights per GPU (tp " + std::to_string(p.tp) + "), more than the " +
                       common::format_unit(c.cluster.gpu_memory, common::UnitKind::kBytes) + " of a " +
                       c.cluster.gpu_kind + " GPU of cluster " + c.cluster.name +
                       "; spread the experts over more ranks or use fewer replicas");
  }
  return c;
}

namespace {

// Rank loads per layer and dispatches as the simulator routes tokens: a token's home rank is its
// sequence's ordinal mod EP; an expert with copies is served by the home rank's copy, else a copy on
// the home node, else any copy (chosen by token number). Fills transfers, pair bytes and tokens.
struct Routed {
  std::vector<std::vector<double>> load;  // [layer][rank], token-expert assignments
  double off_gpu = 0, off_node = 0;       // dispatches leaving the home rank / node
};

Routed route_trace(const CheckedPlacement& c, traces::TraceReader& reader, const std::vector<int>& node,
                   PlacementEvaluation& e) {
  const Placement& p = c.placement;
  const auto& shape = reader.meta().shape;
  const std::size_t L = shape.layers.size();
  const auto k = static_cast<std::size_t>(shape.top_k);
  const auto G = static_cast<std::size_t>(p.ep);
  const double token_bytes = static_cast<double>(c.arch.hidden_size) * models::dtype_bytes(c.arch.dtype);
  const bool residence = e.residence;
  Routed out;
  out.load.assign(L, std::vector<double>(G, 0.0));
  e.pair_bytes.assign(G, std::vector<double>(G, 0.0));
  std::uint64_t index = 0, ordinal = 0;
  std::uint32_t last_seq = 0;
  bool first = true;
  traces::TokenBlock block;
  std::vector<int> chosen, dests;
  // One message from rank a to rank b (a != b): counted, and (residence) its bytes when it crosses nodes.
  auto send = [&](int a, int b) {
    out.off_gpu += 1.0;
    e.pair_bytes[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] += token_bytes;
    if (node[static_cast<std::size_t>(a)] == node[static_cast<std::size_t>(b)]) return;
    out.off_node += 1.0;
    if (residence) e.bytes_off_node += token_bytes;
  };
  while (reader.next(block)) {
    for (std::size_t t = 0; t < block.size(); ++t, ++index) {
      if (!first && block.sequence[t] != last_seq) ++ordinal;
      first = false;
      last_seq = block.sequence[t];
      // Flat: every layer's dispatch starts at the home rank. Residence (routing_rule.hpp): the token
      // starts the step there; at each layer its copies are chosen from where it lives (replica_for
      // with that rank as home), the token goes to every chosen rank but that one, and every chosen
      // rank but the owner (owner_rank) sends its partial output to the owner, where the token lives
      // for the next layer. After the last MoE layer it stays there: no return is counted.
      int at = home_rank(ordinal, p.ep);
      for (std::size_t l = 0; l < L; ++l) {
        chosen.clear();
        dests.clear();
        for (std::size_t j = 0; j < k; ++j) {
          const int r = replica_for(p.ranks[l][block.experts[(t * L + l) * k + j]], at, index, node);
          chosen.push_back(r);  // top-k order, as owner_rank reads it
          out.load[l][static_cast<std::size_t>(r)] += 1.0;
          if (std::find(dests.begin(), dests.end(), r) == dests.end()) dests.push_back(r);
        }
        for (int r : dests) {
          e.transfers += 1.0;
          if (r != at) send(at, r);
        }
        if (!residence) continue;
        const int owner = owner_rank(chosen);
        for (int r : dests) {
          if (r == owner) continue;
          e.transfers += 1.0;
          send(r, owner);
        }
        at = owner;
      }
    }
  }
  e.tokens = index;
  if (residence) {
    e.sends = out.off_gpu;
    e.sends_off_node = out.off_node;
  }
  return out;
}

// Busiest rank over the mean, per layer and summarised.
void load_figures(const std::vector<std::vector<double>>& load, std::size_t G, PlacementEvaluation& e) {
  const std::size_t L = load.size();
  double ratio_sum = 0.0;
  for (std::size_t l = 0; l < L; ++l) {
    const double mx = *std::max_element(load[l].begin(), load[l].end());
    const double mean = std::accumulate(load[l].begin(), load[l].end(), 0.0) / static_cast<double>(G);
    e.layer_max.push_back(mx);
    e.layer_mean.push_back(mean);
    e.sum_layer_max += mx;
    const double ratio = mean > 0 ? mx / mean : 1.0;
    ratio_sum += ratio;
    e.worst_max_over_mean = std::max(e.worst_max_over_mean, ratio);
  }
  e.mean_max_over_mean = L ? ratio_sum / static_cast<double>(L) : 1.0;
}

// The stage-2 objective on the held-out counts and the share of cross-layer hops between nodes.
void cross_layer_figures(const CheckedPlacement& c, const std::string& trace, const std::vector<int>& node,
                         PlacementEvaluation& e) {
  const Placement& p = c.placement;
  const auto G = static_cast<std::size_t>(p.ep);
  auto again = traces::open_trace(trace);
  const RoutingCounts counted = count_routing(*again, "");
  // Residence: a token's hop to layer l+1 leaves from its layer-l owner, whose expert next_owner takes.
  const RoutingCounts counts = e.residence ? with_owner_pairs(counted) : counted;
  e.traffic_objective = placement_traffic_objective(p, counts, c.arch, c.cluster);
  double hops = 0.0, hops_off = 0.0;
  for (std::size_t l = 0; l + 1 < p.ranks.size() && l < counts.next.size(); ++l) {
    const std::vector<double> ranks = cross_layer_rank_traffic(p, counts, l);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      hops += ranks[i];
      if (node[i / G] != node[i % G]) hops_off += ranks[i];
    }
  }
  e.share_hops_off_node = hops > 0.0 ? hops_off / hops : 0.0;
}

void analyse_trace(const CheckedPlacement& c, const std::string& trace, PlacementEvaluation& e) {
  const Placement& p = c.placement;
  auto reader = traces::open_trace(trace);
  if (const std::string mismatch = models::trace_shape_mismatch(reader->meta().shape, c.arch); !mismatch.empty())
    throw InputError(trace + ": " + mismatch + " (the placement's architecture)");
  const std::vector<int> node = rank_nodes(c.cluster, p.ep, p.tp);
  const Routed routed = route_trace(c, *reader, node, e);
  if (e.tokens == 0) throw InputError(trace + ": the trace has no tokens");
  e.share_off_gpu = e.transfers > 0 ? routed.off_gpu / e.transfers : 0.0;
  e.share_off_node = e.transfers > 0 ? routed.off_node / e.transfers : 0.0;
  load_figures(routed.load, static_cast<std::size_t>(p.ep), e);
  cross_layer_figures(c, trace, node, e);
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string pad(const std::string& s, std::size_t width) {
  return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' ');
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace

PlacementEvaluation evaluate_placement(const CheckedPlacement& c, const std::string& heldout_trace, bool residence) {
  PlacementEvaluation e;
  e.residence = residence;
  e.label = fs::path(c.path).filename().string();
  e.policy = c.placement.policy;
  e.ep = c.placement.ep;
  e.tp = c.placement.tp;
  e.architecture = c.arch.name;
  e.cluster = c.cluster.name;
  e.layers = c.placement.layers;
  e.report = c.placement.report;
  for (int r = 0; r < c.placement.ep; ++r) {
    int n = 0;
    for (std::size_t l = 0; l < c.placement.layers.size(); ++l)
      n += static_cast<int>(c.placement.experts_on(l, r).size());
    e.experts_per_rank_max = std::max(e.experts_per_rank_max, n);
  }
  analyse_trace(c, heldout_trace, e);
  return e;
}

nlohmann::json PlacementEvaluation::to_json() const {
  nlohmann::json layers_j = nlohmann::json::array();
  for (std::size_t l = 0; l < layers.size(); ++l) {
    nlohmann::json j = {{"layer", layers[l]},
                        {"max_rank_load", layer_max[l]},
                        {"mean_rank_load", layer_mean[l]},
                        {"max_over_mean", layer_mean[l] > 0 ? layer_max[l] / layer_mean[l] : 1.0}};
    if (simulated && l < layer_token_tail.size()) {
      j["token_tail_s"] = layer_token_tail[l];
      j["a2a_tail_s"] = layer_a2a_tail[l];
    }
    layers_j.push_back(j);
  }
  nlohmann::json j = {{"placement", label},
                      {"policy", policy},
                      {"architecture", architecture},
                      {"cluster", cluster},
                      {"ep", ep},
                      {"tp", tp},
                      {"dispatch", residence ? "residence" : "flat"},
                      {"heldout_tokens", tokens},
                      {"mean_max_over_mean", mean_max_over_mean},
                      {"worst_max_over_mean", worst_max_over_mean},
                      {"sum_layer_max_load", sum_layer_max},
                      {"dispatches", transfers},
                      {"share_off_gpu", share_off_gpu},
                      {"share_off_node", share_off_node},
                      {"pair_bytes", pair_bytes},
                      {"traffic_objective_s", traffic_objective},
                      {"share_hops_off_node", share_hops_off_node},
                      {"experts_per_rank_max", experts_per_rank_max},
                      {"layers", layers_j},
                      {"solver_report", report}};
  if (residence) {
    j["sends"] = sends;
    j["sends_off_node"] = sends_off_node;
    j["bytes_off_node"] = bytes_off_node;
  }
  if (simulated)
    j["simulated"] = {{"study", study},
                      {"step_p50_s", step_p50},
                      {"step_p99_s", step_p99},
                      {"energy_per_step_J", energy_per_step},
                      {"energy_per_token_J", energy_per_token}};
  return j;
}

std::string evaluation_table(const PlacementEvaluation& e) {
  std::ostringstream out;
  out << e.label << " (policy " << e.policy << ", " << e.architecture << " on " << e.cluster << ", ep " << e.ep
      << ", tp " << e.tp << "), held-out " << e.tokens << " tokens, " << (e.residence ? "residence" : "flat")
      << " dispatch\n";
  out << pad("layer", 7) << pad("max load", 10) << pad("mean", 10) << pad("max/mean", 10);
  if (e.simulated) out << pad("token tail us", 15) << pad("a2a tail us", 13);
  out << "\n";
  for (std::size_t l = 0; l < e.layers.size(); ++l) {
    out << pad(std::to_string(e.layers[l]), 7) << pad(fixed(e.layer_max[l], 0), 10)
        << pad(fixed(e.layer_mean[l], 1), 10)
        << pad(fixed(e.layer_mean[l] > 0 ? e.layer_max[l] / e.layer_mean[l] : 1.0, 3), 10);
    if (e.simulated && l < e.layer_token_tail.size())
      out << pad(fixed(e.layer_token_tail[l] * 1e6, 1), 15) << pad(fixed(e.layer_a2a_tail[l] * 1e6, 1), 13);
    out << "\n";
  }
  out << "max/mean load: mean " << fixed(e.mean_max_over_mean, 3) << ", worst " << fixed(e.worst_max_over_mean, 3)
      << "; dispatches leaving the GPU " << fixed(100 * e.share_off_gpu, 1) << "%, leaving the node "
      << fixed(100 * e.share_off_node, 1) << "%; cross-layer hops leaving the node "
      << fixed(100 * e.share_hops_off_node, 1) << "%; cross-layer traffic objective " << std::setprecision(4)
      << e.traffic_objective << " s\n";
  if (e.residence)
    out << "residence dispatch: " << fixed(e.sends, 0) << " sends (dispatch and combine), "
        << fixed(e.sends_off_node, 0) << " between nodes, "
        << common::format_unit(e.bytes_off_node, common::UnitKind::kBytes) << " between nodes\n";
  if (e.simulated)
    out << "simulated (" << e.study << " study): step p50 " << fixed(e.step_p50 * 1e3, 3) << " ms, p99 "
        << fixed(e.step_p99 * 1e3, 3) << " ms, energy " << fixed(e.energy_per_step, 2) << " J/step\n";
  return out.str();
}

std::string comparison_table(const std::vector<PlacementEvaluation>& all) {
  std::ostringstream out;
  const bool sim = std::any_of(all.begin(), all.end(), [](const PlacementEvaluation& e) { return e.simulated; });
  const bool residence = std::any_of(all.begin(), all.end(), [](const PlacementEvaluation& e) { return e.residence; });
  std::size_t w = 11;
  std::size_t pw = 16;  // moetuner_replicated is 19 characters
  for (const auto& e : all) w = std::max(w, e.label.size() + 2), pw = std::max(pw, e.policy.size() + 2);
  out << pad("placement", w) << pad("policy", pw) << pad("max/mean", 10) << pad("worst", 8) << pad("off GPU", 9)
      << pad("off node", 10) << pad("hops off", 10) << pad("traffic s", 11);
  if (residence) out << pad("node sends", 12) << pad("node GB", 10);
  if (sim) out << pad("tail us", 9) << pad("p50 ms", 9) << pad("p99 ms", 9) << pad("J/step", 8);
  out << "\n";
  for (const auto& e : all) {
    std::ostringstream obj;
    obj << std::setprecision(4) << e.traffic_objective;
    out << pad(e.label, w) << pad(e.policy, pw) << pad(fixed(e.mean_max_over_mean, 3), 10)
        << pad(fixed(e.worst_max_over_mean, 3), 8) << pad(fixed(100 * e.share_off_gpu, 1) + "%", 9)
        << pad(fixed(100 * e.share_off_node, 1) + "%", 10) << pad(fixed(100 * e.share_hops_off_node, 1) + "%", 10)
        << pad(obj.str(), 11);
    if (residence) out << pad(fixed(e.sends_off_node, 0), 12) << pad(fixed(e.bytes_off_node / 1e9, 3), 10);
    if (e.simulated)
      out << pad(fixed(mean_of(e.layer_token_tail) * 1e6, 1), 9) << pad(fixed(e.step_p50 * 1e3, 3), 9)
          << pad(fixed(e.step_p99 * 1e3, 3), 9) << pad(fixed(e.energy_per_step, 2), 8);
    out << "\n";
  }
  out << "max/mean: busiest rank's load over the mean, averaged over layers (worst: the worst layer); off GPU/node:\n"
         "share of token dispatches leaving the home rank / node; hops off: share of cross-layer hops (a token's\n"
         "layer-l expert to its layer-(l+1) expert) between nodes; traffic: the stage-2 objective on the held-out "
         "trace";
  if (sim) out << ";\ntail: per-layer token-processing tail, mean over layers (simulated)";
  if (residence)
    out << ";\nresidence dispatch: off GPU/node are shares of dispatch and combine messages (from the rank the\n"
           "token lives on, and to its new owner); node sends / GB: those messages between nodes and their bytes;\n"
           "hops and traffic use the owner pairs";
  out << "\n" << (residence ? "dispatch: residence\n" : "dispatch: flat\n");
  return out.str();
}

}  // namespace moesim::sim
