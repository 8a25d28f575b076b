#include "sim/placement/placement.hpp"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "common/yaml.hpp"
#include "models/config_header.hpp"

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

// The EP rank a key of a layer's `ranks` map names.
int rank_key(const YamlNode& list, const std::string& key, int ep) {
  int rank = -1;
  auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), rank);
  if (ec != std::errc() || ptr != key.data() + key.size() || key.empty())
    list.fail("expected an EP rank number as the key (0.." + std::to_string(ep - 1) + "), got " + common::quoted(key));
  if (rank < 0 || rank >= ep)
    list.fail("expected EP ranks 0.." + std::to_string(ep - 1) + " (ep: " + std::to_string(ep) + "), got rank " +
              std::to_string(rank));
  return rank;
}

// One layer's `ranks` map (rank: [experts]) turned round: the sorted ranks holding each expert.
std::vector<std::vector<int>> read_holders(const YamlNode& ranks_node, const models::Architecture& arch, int ep,
                                           int layer) {
  ranks_node.expect_map();
  const auto experts = static_cast<std::size_t>(arch.num_experts);
  std::vector<std::vector<int>> holders(experts);
  for (const std::string& key : ranks_node.keys()) {
    const YamlNode list = ranks_node.at(key);
    const int rank = rank_key(list, key, ep);
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
  return holders;
}

// The `layers` list: each entry an MoE layer of the architecture, listed once.
std::map<int, std::vector<std::vector<int>>> read_layers(const YamlNode& layers_node, const models::Architecture& arch,
                                                         int ep) {
  std::map<int, std::vector<std::vector<int>>> by_layer;
  std::map<int, std::string> listed_at;
  for (const YamlNode& entry : layers_node.items()) {
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
    by_layer.emplace(layer, read_holders(entry.at("ranks"), arch, ep, layer));
  }
  return by_layer;
}

// A config the file names, loaded; its errors re-reported at the node.
template <class Loader>
auto load_config(const YamlNode& node, const fs::path& dir, Loader loader) {
  const std::string ref = resolve_reference(node, dir);
  try {
    return std::make_pair(ref, loader(ref));
  } catch (const InputError& e) {
    node.fail(e.what());
  }
}

// Everything above `layers`: configs, parallel shape, policy, trace hash, report. Returns the
// architecture the layers are read against.
models::Architecture read_header(const YamlNode& root, const std::string& path, Placement& p) {
  const fs::path dir = fs::absolute(path).parent_path();
  const YamlNode arch_node = root.at("architecture");
  auto [arch_ref, arch] =
      load_config(arch_node, dir, [](const std::string& ref) { return models::load_architecture(ref); });
  if (!arch.is_moe())
    arch_node.fail("expected an MoE architecture, got " + arch.name + ", a dense model (it has no experts to place)");
  const YamlNode cluster_node = root.at("cluster");
  auto [cluster_ref, cluster] =
      load_config(cluster_node, dir, [](const std::string& ref) { return models::load_cluster(ref); });
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
  return arch;
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
    fail("expected the MoE layers of " + arch.name + " (" + common::describe_ranges(arch.moe_layers) +
         "), got layers " + common::describe_ranges(placement.layers));
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
  Placement p;
  const models::Architecture arch = read_header(root, path, p);
  const YamlNode layers_node = root.at("layers");
  std::map<int, std::vector<std::vector<int>>> by_layer = read_layers(layers_node, arch, p.ep);
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

void check_parallel_shape(int ep, int tp, const models::Cluster& cluster, const std::string& where) {
  check_parallel_shape(nullptr, nullptr, ep, tp, cluster, where);
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

}  // namespace moesim::sim
