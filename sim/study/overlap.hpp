// Overlap policies mapped onto the engine's mechanism (docs/simulator.md, "Overlap"): a policy is a
// number of chunks per decoder layer for the MoE all-to-all (1 = sequential) and contention on or off
// (ideal = off). A variant runs its requested timeline and, with `timelines: all`, the others that
// the overlap paper's vocabulary needs (sequential, overlapped, ideal, ideal with one chunk).
// `auto` chooses per MoE layer by simulating the candidate schedules themselves on the variant's
// first steps and keeping, per layer, the one whose layer ends soonest after it starts. `tbo` is
// two-batch overlap: the step in two micro-batches, one's attention, shared experts and dense parts
// under the other's dispatch and combine (one chunk each).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/engine/result.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::sim {

struct TimelinePlan {
  std::string label;        // "sequential", "overlapped", "ideal", "auto", "tbo", "ideal-1-chunk"
  std::vector<int> chunks;  // per decoder layer (synthetic: per layer)
  bool contention = true;
  int micro_batches = 1;    // 2: two-batch overlap (tbo)
};

// The timelines a variant simulates, the requested one first; `requested` holds its chunks.
std::vector<TimelinePlan> plan_timelines(const Scenario& s, int layers, const std::vector<int>& requested);

// Candidate chunk counts `auto` simulates.
inline const std::vector<int> kAutoCandidates{1, 2, 4};

// Simulates every plan over the first `steps` steps (after the scenario's warmup) and returns one
// result per plan, in order.
using SimulatePlans = std::function<std::vector<SimResult>(const std::vector<TimelinePlan>& plans, int steps)>;

// `auto`: per MoE layer (`moe_layers`, decoder-layer indices), the candidate whose simulated layer
// span (first task start to last task end over all GPUs, mean over steps) is smallest; ties go to
// fewer chunks. Fills `decisions` with each layer's spans and choice.
std::vector<int> choose_auto_chunks(const Scenario& s, int layers, const std::vector<int>& moe_layers,
                                    const SimulatePlans& simulate, nlohmann::json& decisions);

}  // namespace moesim::sim
