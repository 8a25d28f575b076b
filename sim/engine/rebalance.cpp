#include "sim/engine/rebalance.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "models/architecture.hpp"

namespace moesim::sim {

std::vector<ExpertMove> expert_moves(const Placement& before, const Placement& after, const std::vector<int>& rank_node) {
  std::vector<ExpertMove> moves;
  std::vector<int> sent(static_cast<std::size_t>(std::max(before.ep, 1)), 0);
  for (std::size_t l = 0; l < after.ranks.size() && l < before.ranks.size(); ++l)
    for (std::size_t e = 0; e < after.ranks[l].size() && e < before.ranks[l].size(); ++e) {
      const auto& old_holders = before.ranks[l][e];
      for (const int to : after.ranks[l][e]) {
        if (std::find(old_holders.begin(), old_holders.end(), to) != old_holders.end()) continue;
        int from = -1;
        bool from_near = false;
        for (const int h : old_holders) {
          const bool near = rank_node[static_cast<std::size_t>(h)] == rank_node[static_cast<std::size_t>(to)];
          const bool better = from < 0 || (near && !from_near) ||
                              (near == from_near && (sent[static_cast<std::size_t>(h)] < sent[static_cast<std::size_t>(from)] ||
                                                     (sent[static_cast<std::size_t>(h)] == sent[static_cast<std::size_t>(from)] && h < from)));
          if (better) {
            from = h;
            from_near = near;
          }
        }
        ++sent[static_cast<std::size_t>(from)];
        moves.push_back({static_cast<int>(l), static_cast<int>(e), from, to});
      }
    }
  return moves;
}

Rebalancer::Rebalancer(const EngineInput& input, std::shared_ptr<const Placement> initial, std::vector<int> rank_node,
                       int total_steps)
    : input_(input),
      current_(std::move(initial)),
      rank_node_(std::move(rank_node)),
      every_(input.options.rebalance.every_steps),
      window_(input.options.rebalance.window_steps > 0
                  ? input.options.rebalance.window_steps
                  : std::min(input.options.rebalance.every_steps, input.options.warmup_steps + input.options.steps)),
      total_(total_steps),
      layers_(input.arch->moe_layers.size()),
      experts_(static_cast<std::size_t>(input.arch->num_experts)),
      k_(static_cast<std::size_t>(input.arch->top_k)) {
  if (every_ < 1) throw common::InputError("online rebalancing needs every_steps >= 1");
  if (window_ < 1 || window_ > total_)
    throw common::InputError("placement.rebalance.window_steps " + std::to_string(window_) +
                             " is not within the run's " + std::to_string(total_) +
                             " steps (warmup included): choose a window of 1 to " + std::to_string(total_) + " steps");
  if (!input_.resolve) throw common::InputError("online rebalancing needs a placement policy to solve again");
}

RoutingCounts Rebalancer::empty_counts() const {
  RoutingCounts c;
  c.layers = input_.arch->moe_layers;
  c.num_experts = static_cast<int>(experts_);
  c.top_k = static_cast<int>(k_);
  c.trace_sha256 = "";
  c.load.assign(layers_, std::vector<double>(experts_, 0.0));
  c.next.assign(layers_ > 0 ? layers_ - 1 : 0, std::vector<double>(input_.resolve_pairs ? experts_ * experts_ : 0, 0.0));
  c.next_owner = c.next;
  return c;
}

void Rebalancer::observe(int step, const StepBatch& batch) {
  // The rebalances whose window holds this step: at R (a multiple of every_ below the run's end)
  // with R - window_ <= step < R.
  const int first = (step / every_ + 1) * every_;
  for (int at = first; at <= step + window_ && at < total_; at += every_)
    if (!windows_.count(at)) windows_.emplace(at, empty_counts());
  const std::size_t per = layers_ * k_;
  for (auto& [at, c] : windows_) {
    if (step >= at || step < at - window_) continue;
    c.tokens += batch.size();
    for (std::size_t t = 0; t < batch.size(); ++t) {
      const std::uint16_t* ids = batch.experts.data() + t * per;
      for (std::size_t l = 0; l < layers_; ++l)
        for (std::size_t j = 0; j < k_; ++j) c.load[l][ids[l * k_ + j]] += 1.0;
      if (!input_.resolve_pairs) continue;
      for (std::size_t l = 0; l + 1 < layers_; ++l)
        for (std::size_t b = 0; b < k_; ++b) {
          const std::size_t to = ids[(l + 1) * k_ + b];
          for (std::size_t a = 0; a < k_; ++a) c.next[l][ids[l * k_ + a] * experts_ + to] += 1.0;
          c.next_owner[l][ids[l * k_] * experts_ + to] += 1.0;  // from the top-1 expert (RoutingCounts)
        }
    }
  }
}

std::optional<MigrationPlan> Rebalancer::before(int step) {
  if (step <= 0 || step % every_ != 0 || step >= total_) return std::nullopt;
  auto it = windows_.find(step);
  RoutingCounts counts = it != windows_.end() ? std::move(it->second) : empty_counts();
  if (it != windows_.end()) windows_.erase(it);
  MigrationPlan plan;
  plan.step = step;
  auto solved = std::make_shared<Placement>(input_.resolve(counts));
  if (solved->ep != current_->ep || solved->tp != current_->tp || solved->ranks.size() != current_->ranks.size())
    throw common::RunError("the placement solved again at step " + std::to_string(step) +
                           " does not have the run's parallelism or layers");
  plan.moves = expert_moves(*current_, *solved, rank_node_);
  current_ = solved;
  plan.placement = std::move(solved);
  return plan;
}

}  // namespace moesim::sim
