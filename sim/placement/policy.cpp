#include "sim/placement/policy.hpp"

#include <filesystem>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using common::InputError;

void PlacementRegistry::add(const std::string& name, const std::string& summary, Factory factory) {
  if (name.empty() || !factory) throw std::logic_error("PlacementRegistry::add: empty name or factory");
  for (const Entry& e : entries_)
    if (e.name == name) throw std::logic_error("placement policy \"" + name + "\" registered twice");
  entries_.push_back(Entry{name, summary, std::move(factory)});
}

std::vector<std::string> PlacementRegistry::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const Entry& e : entries_) out.push_back(e.name);
  return out;
}

namespace {

[[noreturn]] void unknown_policy(const std::string& name, const std::vector<std::string>& names) {
  throw InputError("unknown placement policy " + common::quoted(name) + common::did_you_mean(name, names) +
                   "; valid names: " + common::join(names, ", "));
}

}  // namespace

std::unique_ptr<PlacementPolicy> PlacementRegistry::create(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return e.factory();
  unknown_policy(name, names());
}

std::string PlacementRegistry::summary(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return e.summary;
  unknown_policy(name, names());
}

namespace detail {

std::string config_reference(std::string_view kind, const std::string& name, const std::string& source_file) {
  if (source_file.empty()) return name;
  std::error_code ec;
  try {
    if (fs::equivalent(common::resolve_config(kind, name), source_file, ec)) return name;
  } catch (const InputError&) {
    // not a shipped name
  }
  return fs::weakly_canonical(fs::absolute(source_file), ec).string();
}

Placement placement_skeleton(const PlacementInput& input, const std::string& policy, bool needs_routing) {
  const std::string where = "placement policy " + policy;
  const auto& arch = input.arch;
  if (!arch.is_moe()) throw InputError(where + ": architecture " + arch.name + " is dense: it has no experts to place");
  if (input.ep < 1) throw InputError(where + ": ep must be at least 1, got " + std::to_string(input.ep));
  const int tp = input.tp;
  const int per_node = input.cluster.gpus_per_node;
  if (tp < 1 || (tp & (tp - 1)) != 0 || per_node % tp != 0)
    throw InputError(where + ": expected --tp to be a power of two dividing the " + std::to_string(per_node) +
                     " GPUs per node of cluster " + input.cluster.name + ", got " + std::to_string(tp));
  const long group = static_cast<long>(input.ep) * tp;
  if (group > input.cluster.total_gpus() || input.cluster.total_gpus() % group != 0)
    throw InputError(where + ": expected ep x tp (" + std::to_string(input.ep) + " x " + std::to_string(tp) + " = " +
                     std::to_string(group) + " GPUs) to divide the " + std::to_string(input.cluster.total_gpus()) +
                     " GPUs of cluster " + input.cluster.name + " (for example --ep " +
                     std::to_string(input.cluster.total_gpus() / tp) + " with --tp " + std::to_string(tp) + ")");
  if (needs_routing) {
    if (!input.routing) throw InputError(where + " is solved on routing statistics: give a trace (--trace)");
    const RoutingCounts& r = *input.routing;
    const traces::TraceShape shape{"the profiled trace", r.layers, r.num_experts, r.top_k};
    if (const std::string mismatch = models::trace_shape_mismatch(shape, arch); !mismatch.empty())
      throw InputError(where + ": " + mismatch);
    if (r.tokens == 0) throw InputError(where + ": the trace has no tokens to profile");
  }
  Placement p;
  p.architecture = config_reference("architectures", arch.name, arch.source_file);
  p.cluster = config_reference("clusters", input.cluster.name, input.cluster.source_file);
  p.ep = input.ep;
  p.tp = tp;
  p.policy = policy;
  p.trace_sha256 = input.routing && needs_routing ? input.routing->trace_sha256 : "";
  p.layers = arch.moe_layers;
  p.ranks.assign(p.layers.size(), std::vector<std::vector<int>>(static_cast<std::size_t>(arch.num_experts)));
  return p;
}

}  // namespace detail

}  // namespace moesim::sim
