#include "sim/placement.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "common/yaml.hpp"
#include "models/config_header.hpp"
#include "sim/placement_solvers.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using common::InputError;
using common::YamlNode;

namespace {

constexpr std::int64_t kMaxRanks = 1 << 20;
constexpr std::int64_t kMaxTp = 1024;

bool is_power_of_two(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".yaml") || s.ends_with(".yml");
}


// What a placement file stores for its architecture or cluster: the name when the config is a shipped
// one (it resolves by name to the same file), else the absolute path of the file it was loaded from.
std::string config_reference(std::string_view kind, const std::string& name, const std::string& source_file) {
  if (source_file.empty()) return name;
  std::error_code ec;
  try {
    const fs::path by_name = common::resolve_config(kind, name);
    if (fs::equivalent(by_name, source_file, ec)) return name;
  } catch (const InputError&) {
    // Not a shipped name: keep the path.
  }
  return fs::weakly_canonical(fs::absolute(source_file), ec).string();
}

// A config named in a placement file: names resolve under configs/, relative paths against the file.
std::string resolve_reference(const YamlNode& node, const fs::path& dir) {
  const std::string text = node.as_string();
  if (!looks_like_path(text)) return text;
  fs::path p(text);
  if (p.is_relative()) p = dir / p;
  return p.lexically_normal().string();
}

// A YAML value written out as a YAML flow scalar: plain where YAML reads it back as the same string,
// else double-quoted (JSON escapes are valid YAML escapes).
std::string yaml_string(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == '/' || c == '+';
  });
  const bool reserved = s == "true" || s == "false" || s == "null" || s == "~" || s.front() == '-' ||
                        s.front() == '.' || (s.front() >= '0' && s.front() <= '9');
  if (plain && !reserved) return s;
  return nlohmann::json(s).dump();
}

// JSON as a one-line YAML flow collection. Keys are quoted; ": " and ", " keep yaml-cpp's flow parser happy.
std::string json_to_flow(const nlohmann::json& j) {
  if (j.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : j.items()) {
      if (!first) out += ", ";
      first = false;
      out += nlohmann::json(k).dump() + ": " + json_to_flow(v);
    }
    return out + "}";
  }
  if (j.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + json_to_flow(j[i]);
    return out + "]";
  }
  return j.dump();
}

// The inverse of json_to_flow over a YAML tree: quoted scalars are strings, plain ones are read as
// null, booleans, integers or numbers when they look like one.
nlohmann::json yaml_to_json(const YamlNode& node) {
  const YAML::Node& raw = node.raw();
  if (raw.IsMap()) {
    nlohmann::json out = nlohmann::json::object();
    for (const std::string& k : node.keys()) out[k] = yaml_to_json(node.at(k));
    return out;
  }
  if (raw.IsSequence()) {
    nlohmann::json out = nlohmann::json::array();
    for (const YamlNode& item : node.items()) out.push_back(yaml_to_json(item));
    return out;
  }
  if (raw.IsNull()) return nullptr;
  const std::string& s = raw.Scalar();
  if (raw.Tag() == "!") return s;  // quoted
  if (s == "null" || s == "~") return nullptr;
  if (s == "true") return true;
  if (s == "false") return false;
  const char* end = s.data() + s.size();
  if (!s.empty() && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))) {
    std::int64_t i = 0;
    if (auto [p, ec] = std::from_chars(s.data(), end, i); ec == std::errc() && p == end) return i;
    std::uint64_t u = 0;
    if (auto [p, ec] = std::from_chars(s.data(), end, u); ec == std::errc() && p == end) return u;
    double d = 0.0;
    if (auto [p, ec] = std::from_chars(s.data(), end, d); ec == std::errc() && p == end) return d;
  }
  return s;
}

bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

void check_parallel_shape(const YamlNode* ep_node, const YamlNode* tp_node, int ep, int tp,
                          const models::Cluster& cluster, const std::string& where) {
  auto fail = [&](const YamlNode* node, const std::string& what) {
    if (node) node->fail(what);
    throw InputError(where + ": " + what);
  };
  if (!is_power_of_two(tp) || cluster.gpus_per_node % tp != 0)
    fail(tp_node, "expected tp to be a power of two dividing the " + std::to_string(cluster.gpus_per_node) +
                      " GPUs per node of cluster " + cluster.name + " (a TP group stays inside a node), got " +
                      std::to_string(tp));
  const long group = static_cast<long>(ep) * tp;
  if (group > cluster.total_gpus() || cluster.total_gpus() % group != 0)
    fail(ep_node, "expected ep x tp (" + std::to_string(ep) + " x " + std::to_string(tp) + " = " +
                      std::to_string(group) + " GPUs) to divide the " + std::to_string(cluster.total_gpus()) +
                      " GPUs of cluster " + cluster.name + " (for example ep " +
                      std::to_string(cluster.total_gpus() / tp) + " with tp " + std::to_string(tp) + ")");
}

// Checks that hold for any placement, whatever the architecture: sizes and ranks in range.
void check_structure(const Placement& p, const std::string& file) {
  auto fail = [&](const std::string& what) { throw InputError(file + ": " + what); };
  if (p.ep < 1) fail("ep must be at least 1, got " + std::to_string(p.ep));
  if (p.tp < 1) fail("tp must be at least 1, got " + std::to_string(p.tp));
  if (p.ranks.size() != p.layers.size())
    fail("the placement has " + std::to_string(p.layers.size()) + " layers but rank lists for " +
         std::to_string(p.ranks.size()));
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    for (std::size_t e = 0; e < p.ranks[l].size(); ++e) {
      const auto& ranks = p.ranks[l][e];
      const std::string at = "layer " + std::to_string(p.layers[l]) + ", expert " + std::to_string(e);
      if (ranks.empty()) fail(at + ": expected the expert on at least one EP rank, got none");
      std::set<int> seen;
      for (int r : ranks) {
        if (r < 0 || r >= p.ep)
          fail(at + ": expected EP ranks 0.." + std::to_string(p.ep - 1) + " (ep " + std::to_string(p.ep) + "), got " +
               std::to_string(r));
        if (!seen.insert(r).second) fail(at + ": rank " + std::to_string(r) + " is listed twice for one expert");
      }
    }
  }
}

class ContiguousPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "contiguous"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override;
};

class RoundRobinPolicy final : public PlacementPolicy {
 public:
  std::string name() const override { return "round_robin"; }
  bool needs_routing() const override { return false; }
  Placement place(const PlacementInput& input) const override;
};

// The parts every policy fills the same way, after checking the input; ranks sized [layer][expert].
Placement start_placement(const PlacementInput& input, const std::string& policy) {
  const std::string where = "placement policy " + policy;
  if (!input.arch.is_moe())
    throw InputError(where + ": architecture " + input.arch.name + " is dense: it has no experts to place");
  if (input.ep < 1) throw InputError(where + ": ep must be at least 1, got " + std::to_string(input.ep));
  check_parallel_shape(nullptr, nullptr, input.ep, input.tp, input.cluster, where);
  Placement p;
  p.architecture = config_reference("architectures", input.arch.name, input.arch.source_file);
  p.cluster = config_reference("clusters", input.cluster.name, input.cluster.source_file);
  p.ep = input.ep;
  p.tp = input.tp;
  p.policy = policy;
  p.trace_sha256 = input.routing ? input.routing->trace_sha256 : "";
  p.layers = input.arch.moe_layers;
  p.ranks.assign(p.layers.size(), std::vector<std::vector<int>>(static_cast<std::size_t>(input.arch.num_experts)));
  return p;
}

Placement ContiguousPolicy::place(const PlacementInput& input) const {
  Placement p = start_placement(input, name());
  const int experts = input.arch.num_experts;
  const int base = experts / input.ep;
  const int extra = experts % input.ep;  // the first `extra` ranks hold one expert more
  std::vector<int> rank_of(static_cast<std::size_t>(experts));
  int e = 0;
  for (int r = 0; r < input.ep; ++r)
    for (int i = 0; i < base + (r < extra ? 1 : 0); ++i) rank_of[static_cast<std::size_t>(e++)] = r;
  for (auto& layer : p.ranks)
    for (std::size_t x = 0; x < layer.size(); ++x) layer[x] = {rank_of[x]};
  return p;
}

Placement RoundRobinPolicy::place(const PlacementInput& input) const {
  Placement p = start_placement(input, name());
  for (auto& layer : p.ranks)
    for (std::size_t x = 0; x < layer.size(); ++x) layer[x] = {static_cast<int>(x) % input.ep};
  return p;
}

}  // namespace

std::vector<int> Placement::experts_on(std::size_t l, int rank) const {
  std::vector<int> out;
  const auto& layer = ranks.at(l);
  for (std::size_t e = 0; e < layer.size(); ++e)
    if (std::find(layer[e].begin(), layer[e].end(), rank) != layer[e].end()) out.push_back(static_cast<int>(e));
  return out;
}

void validate_placement(const Placement& placement, const models::Architecture& arch, const std::string& file) {
  auto fail = [&](const std::string& what) { throw InputError(file + ": " + what); };
  if (!arch.is_moe()) fail("architecture " + arch.name + " is dense: a placement needs an MoE architecture");
  if (placement.layers != arch.moe_layers)
    fail("expected the MoE layers of " + arch.name + " (" + common::describe_ranges(arch.moe_layers) + "), got layers " +
         common::describe_ranges(placement.layers));
  check_structure(placement, file);
  for (std::size_t l = 0; l < placement.ranks.size(); ++l)
    if (placement.ranks[l].size() != static_cast<std::size_t>(arch.num_experts))
      fail("layer " + std::to_string(placement.layers[l]) + ": expected " + std::to_string(arch.num_experts) +
           " experts (" + arch.name + "), got " + std::to_string(placement.ranks[l].size()));
}

Placement load_placement(const std::string& path) {
  const common::YamlDocument doc = common::YamlDocument::load_file(path);
  const YamlNode root = doc.root();
  models::check_config_kind(root, "placement");
  root.allow_keys(
      {"schema_version", "kind", "architecture", "cluster", "ep", "tp", "policy", "trace_sha256", "report", "layers"});
  models::check_config_header(root, "placement");
  const fs::path dir = fs::absolute(path).parent_path();

  auto load_config = [&](const YamlNode& node, auto loader) {
    const std::string ref = resolve_reference(node, dir);
    try {
      return std::make_pair(ref, loader(ref));
    } catch (const InputError& e) {
      node.fail(e.what());
    }
  };
  Placement p;
  const YamlNode arch_node = root.at("architecture");
  auto [arch_ref, arch] = load_config(arch_node, [](const std::string& ref) { return models::load_architecture(ref); });
  if (!arch.is_moe())
    arch_node.fail("expected an MoE architecture, got " + arch.name + ", a dense model (it has no experts to place)");
  const YamlNode cluster_node = root.at("cluster");
  auto [cluster_ref, cluster] =
      load_config(cluster_node, [](const std::string& ref) { return models::load_cluster(ref); });
  p.architecture = arch_ref;
  p.cluster = cluster_ref;

  const YamlNode ep_node = root.at("ep");
  p.ep = static_cast<int>(ep_node.as_int(1, kMaxRanks));
  std::optional<YamlNode> tp_node = root.find("tp");
  p.tp = tp_node ? static_cast<int>(tp_node->as_int(1, kMaxTp)) : 1;
  check_parallel_shape(&ep_node, tp_node ? &*tp_node : &ep_node, p.ep, p.tp, cluster, path);

  p.policy = root.at("policy").as_string();
  if (auto sha = root.find("trace_sha256")) {
    p.trace_sha256 = sha->as_string();
    if (!is_sha256_hex(p.trace_sha256))
      sha->fail_expected("a SHA-256 as 64 lower-case hex digits (omit the key when no trace was used)");
  }
  if (auto report = root.find("report")) {
    report->expect_map();
    p.report = yaml_to_json(*report);
  }

  const YamlNode layers_node = root.at("layers");
  const std::vector<YamlNode> entries = layers_node.items();
  const auto experts = static_cast<std::size_t>(arch.num_experts);
  std::map<int, std::vector<std::vector<int>>> by_layer;
  std::map<int, std::string> listed_at;
  for (const YamlNode& entry : entries) {
    entry.expect_map();
    entry.allow_keys({"layer", "ranks"});
    const YamlNode layer_node = entry.at("layer");
    const int layer = static_cast<int>(layer_node.as_int(0, arch.num_layers - 1));
    if (!std::binary_search(arch.moe_layers.begin(), arch.moe_layers.end(), layer))
      layer_node.fail("expected an MoE layer of " + arch.name + " (" + common::describe_ranges(arch.moe_layers) +
                      "), got layer " + std::to_string(layer) + ", a dense layer");
    if (auto [it, inserted] = listed_at.emplace(layer, layer_node.location()); !inserted)
      layer_node.fail("expected each layer once, got layer " + std::to_string(layer) + " again (first at " +
                      it->second + ")");

    const YamlNode ranks_node = entry.at("ranks");
    ranks_node.expect_map();
    std::vector<std::vector<int>> holders(experts);
    for (const std::string& key : ranks_node.keys()) {
      const YamlNode list = ranks_node.at(key);
      int rank = -1;
      auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), rank);
      if (ec != std::errc() || ptr != key.data() + key.size() || key.empty())
        list.fail("expected an EP rank number as the key (0.." + std::to_string(p.ep - 1) + "), got " +
                  common::quoted(key));
      if (rank < 0 || rank >= p.ep)
        list.fail("expected EP ranks 0.." + std::to_string(p.ep - 1) + " (ep: " + std::to_string(p.ep) +
                  "), got rank " + std::to_string(rank));
      std::set<int> on_rank;
      for (const YamlNode& item : list.items()) {
        const int expert = static_cast<int>(item.as_int(0, arch.num_experts - 1));
        if (!on_rank.insert(expert).second)
          item.fail("expected each expert once per rank, got expert " + std::to_string(expert) + " twice on rank " +
                    std::to_string(rank) + " (a replica must be on another rank)");
        holders[static_cast<std::size_t>(expert)].push_back(rank);
      }
    }
    for (std::size_t e = 0; e < experts; ++e) {
      if (holders[e].empty())
        ranks_node.fail("expected every expert 0.." + std::to_string(arch.num_experts - 1) +
                        " on at least one rank, got expert " + std::to_string(e) + " on none in layer " +
                        std::to_string(layer));
      std::sort(holders[e].begin(), holders[e].end());
    }
    by_layer.emplace(layer, std::move(holders));
  }
  for (int layer : arch.moe_layers) {
    auto it = by_layer.find(layer);
    if (it == by_layer.end())
      layers_node.fail("expected an entry for every MoE layer of " + arch.name + " (" +
                       common::describe_ranges(arch.moe_layers) + "), got none for layer " + std::to_string(layer));
    p.layers.push_back(layer);
    p.ranks.push_back(std::move(it->second));
  }
  validate_placement(p, arch, path);
  return p;
}

std::string placement_to_yaml(const Placement& placement) {
  check_structure(placement, "placement");
  std::ostringstream out;
  out << "# Expert placement (docs/placement-format.md): per MoE layer, the routed experts each EP rank holds.\n"
      << "schema_version: " << kPlacementSchemaVersion << "\n"
      << "kind: placement\n"
      << "architecture: " << yaml_string(placement.architecture) << "\n"
      << "cluster: " << yaml_string(placement.cluster) << "\n"
      << "ep: " << placement.ep << "\n"
      << "tp: " << placement.tp << "\n"
      << "policy: " << yaml_string(placement.policy) << "\n";
  if (!placement.trace_sha256.empty()) out << "trace_sha256: " << yaml_string(placement.trace_sha256) << "\n";
  if (placement.report.is_object() && !placement.report.empty())
    out << "report: " << json_to_flow(placement.report) << "\n";
  out << "layers:\n";
  for (std::size_t l = 0; l < placement.layers.size(); ++l) {
    out << "  - layer: " << placement.layers[l] << "\n    ranks:\n";
    for (int r = 0; r < placement.ep; ++r) {
      out << "      " << r << ": [";
      const std::vector<int> experts = placement.experts_on(l, r);
      for (std::size_t i = 0; i < experts.size(); ++i) out << (i ? ", " : "") << experts[i];
      out << "]\n";
    }
  }
  return out.str();
}

void save_placement(const Placement& placement, const std::string& path, bool overwrite) {
  common::write_file_atomic(path, placement_to_yaml(placement), overwrite);
}

RoutingCounts count_routing(traces::TraceReader& reader, const std::string& trace_sha256) {
  const traces::TraceShape& shape = reader.meta().shape;
  RoutingCounts c;
  c.layers = shape.layers;
  c.num_experts = shape.num_experts;
  c.top_k = shape.top_k;
  c.trace_sha256 = trace_sha256;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const auto k = static_cast<std::size_t>(shape.top_k);
  c.load.assign(layers, std::vector<double>(experts, 0.0));
  c.next.assign(layers > 0 ? layers - 1 : 0, std::vector<double>(experts * experts, 0.0));

  reader.rewind();  // the counts describe the whole trace, whatever was read before
  traces::TokenBlock block;
  while (reader.next(block)) {
    const std::size_t tokens = block.size();
    if (block.experts.size() != tokens * layers * k)
      throw common::RunError("trace reader handed out a block of " + std::to_string(block.experts.size()) +
                             " expert ids for " + std::to_string(tokens) + " tokens (expected " +
                             std::to_string(tokens * layers * k) + ")");
    for (std::size_t t = 0; t < tokens; ++t) {
      const std::uint16_t* token = block.experts.data() + t * layers * k;
      for (std::size_t l = 0; l < layers; ++l) {
        const std::uint16_t* here = token + l * k;
        for (std::size_t i = 0; i < k; ++i) {
          if (here[i] >= experts)
            throw InputError("trace: token " + std::to_string(c.tokens + t) + ", layer " +
                             std::to_string(shape.layers[l]) + ": expert " + std::to_string(here[i]) +
                             " is out of range (num_experts " + std::to_string(experts) + ")");
          c.load[l][here[i]] += 1.0;
        }
        if (l + 1 == layers) continue;
        const std::uint16_t* there = here + k;
        std::vector<double>& pairs = c.next[l];
        for (std::size_t i = 0; i < k; ++i)
          for (std::size_t j = 0; j < k; ++j)
            if (there[j] < experts) pairs[static_cast<std::size_t>(here[i]) * experts + there[j]] += 1.0;
      }
    }
    c.tokens += tokens;
  }
  return c;
}

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

void register_builtin_placements(PlacementRegistry& registry) {
  registry.add("contiguous",
               "Megatron's layout: experts 0..E/EP-1 on rank 0, the next E/EP on rank 1, ...; when EP does not "
               "divide E the first E % EP ranks hold one expert more",
               [] { return std::make_unique<ContiguousPolicy>(); });
  registry.add("round_robin", "expert e on rank e % EP", [] { return std::make_unique<RoundRobinPolicy>(); });
  register_solver_placements(registry);  // random, greedy, eplb, moetuner (sim/placement_solvers.hpp)
}

PlacementRegistry default_placement_registry() {
  PlacementRegistry registry;
  register_builtin_placements(registry);
  return registry;
}

}  // namespace moesim::sim
