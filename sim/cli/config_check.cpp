#include "sim/cli/config_check.hpp"

#include <algorithm>
#include <ostream>
#include <string>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "common/units.hpp"
#include "common/yaml.hpp"
#include "models/architecture.hpp"
#include "models/cluster.hpp"

namespace moesim::cli {

namespace {

const std::vector<std::string> kKinds = {"architecture", "cluster"};

bool looks_like_path(const std::string& s) {
  return s.find('/') != std::string::npos || s.ends_with(".yaml") || s.ends_with(".yml");
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A path's kind is its `kind:` key; a name's kind is the configs/ folder that holds it.
std::string detect_kind(const std::string& config) {
  if (looks_like_path(config)) {
    const common::YamlDocument doc = common::YamlDocument::load_file(config);
    return doc.root().at("kind").as_enum(kKinds);
  }
  const auto architectures = common::config_names("architectures");
  const auto clusters = common::config_names("clusters");
  const bool is_architecture = contains(architectures, config);
  const bool is_cluster = contains(clusters, config);
  if (is_architecture && is_cluster)
    throw common::UsageError("\"" + config + "\" names both an architecture and a cluster; say which with --kind");
  if (is_architecture) return "architecture";
  if (is_cluster) return "cluster";
  std::vector<std::string> all = architectures;
  all.insert(all.end(), clusters.begin(), clusters.end());
  throw common::InputError("unknown config \"" + config + "\"" + common::did_you_mean(config, all) +
                           "; architectures: " + common::join(architectures, ", ") +
                           "; clusters: " + common::join(clusters, ", ") + "; or give a path to a .yaml file");
}

std::string bandwidth(double bytes_per_second) {
  return common::format_unit(bytes_per_second, common::UnitKind::kBandwidth);
}

void describe(const models::Architecture& a, std::ostream& out) {
  out << "ok: architecture " << a.name << " (" << a.source_file << "): " << a.num_layers << " layers";
  if (a.is_moe()) {
    out << ", " << a.moe_layers.size() << " MoE of " << a.num_experts << " experts, top-" << a.top_k;
    if (a.num_shared_experts > 0) out << " + " << a.num_shared_experts << " shared";
    if (a.routing_groups > 1) out << " (" << a.topk_groups << " of " << a.routing_groups << " groups)";
  } else {
    out << ", dense";
  }
  out << ", hidden " << a.hidden_size << ", " << a.attention.kind << " attention, " << a.activation << ", "
      << models::dtype_name(a.dtype) << "\n";
}

void describe(const models::Cluster& c, std::ostream& out) {
  out << "ok: cluster " << c.name << " (" << c.source_file << "): " << c.num_nodes << " x " << c.gpus_per_node << " "
      << c.gpu_kind << " (" << common::format_unit(c.gpu_memory, common::UnitKind::kBytes) << "), "
      << models::fabric_kind_name(c.intra_node.kind) << " " << bandwidth(c.intra_node.bandwidth) << " per GPU, "
      << c.nics.per_node << " x " << bandwidth(c.nics.bandwidth) << " NICs per node, "
      << models::topology_kind_name(c.inter_node.topology) << " (bandwidths per direction)\n";
}

int run_config_check(const Args& args, Context& ctx) {
  po::options_description options("Options");
  std::string kind;
  std::vector<std::string> overrides;
  std::vector<std::string> configs;
  options.add_options()(
      "kind", po::value(&kind),
      "architecture or cluster: how to read the configs (default: a path's `kind:` key, a name's configs/ folder)")(
      "set", po::value(&overrides)->composing(), "key.path=value: override a value before validation (repeatable)")(
      "config", po::value(&configs)->required(), "a config name (mixtral-8x7b) or path (./my.yaml); repeatable");
  po::positional_options_description positionals;
  positionals.add("config", -1);
  const auto vm = parse_options(args, options, positionals, "moesim config check [options] CONFIG...",
                                "Loads and validates architecture and cluster configs, with --set overrides, and "
                                "prints a summary of each.\nExit code 0 when all are valid, 2 at the first error "
                                "(reported as file:line:col: key.path: ...).",
                                ctx);
  if (!vm) return common::kExitOk;
  check_option_lengths("--set", overrides);
  if (!kind.empty() && !contains(kKinds, kind))
    throw common::UsageError("--kind " + kind + ": expected one of " + common::join(kKinds, ", ") +
                             common::did_you_mean(kind, kKinds));
  for (const std::string& config : configs) {
    const std::string k = kind.empty() ? detect_kind(config) : kind;
    if (k == "architecture") {
      describe(models::load_architecture(config, overrides), ctx.out);
    } else {
      describe(models::load_cluster(config, overrides), ctx.out);
    }
  }
  return common::kExitOk;
}

}  // namespace

void register_config_commands(std::vector<Command>& commands) {
  commands.push_back(Command{"config check", "validate architecture and cluster configs", run_config_check});
}

}  // namespace moesim::cli
