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
#include "models/profile.hpp"
#include "sim/placement/placement.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::cli {

namespace {

// Every YAML file kind moesim reads (each opens with `kind:`).
const std::vector<std::string> kKinds = {"architecture", "cluster", "profile", "study", "placement"};
// The kinds a bare name can mean: the configs/ folder that holds NAME.yaml.
const std::vector<std::pair<std::string, std::string>> kNamedKinds = {
    {"architecture", "architectures"}, {"cluster", "clusters"}, {"profile", "profiles"}};

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
  std::vector<std::string> kinds, all, listing;
  for (const auto& [kind, folder] : kNamedKinds) {
    const auto names = common::config_names(folder);
    if (contains(names, config)) kinds.push_back(kind);
    all.insert(all.end(), names.begin(), names.end());
    listing.push_back(folder + ": " + common::join(names, ", "));
  }
  if (kinds.size() > 1)
    throw common::UsageError("\"" + config + "\" names a config of several kinds (" + common::join(kinds, ", ") +
                             "); say which with --kind");
  if (kinds.size() == 1) return kinds.front();
  throw common::InputError("unknown config \"" + config + "\"" + common::did_you_mean(config, all) + "; " +
                           common::join(listing, "; ") + "; or give a path to a .yaml file (a study or placement "
                           "file is always given by path)");
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

void describe(const models::Profile& p, std::ostream& out) {
  std::size_t points = 0;
  for (const auto& c : p.collectives) points += c.bytes.size();
  out << "ok: profile " << p.name << " (" << p.source_file << "): " << p.device.name << ", " << p.gemm.size()
      << " GEMM table(s), " << p.collectives.size() << " collective curve(s) (" << points << " points)";
  if (!p.base.empty()) out << ", base " << p.base;
  out << "; values: " << common::join(p.source_kinds(), ", ") << "\n";
}

void describe(const sim::Study& s, std::ostream& out) {
  out << "ok: study " << s.name << " (" << s.source_file << "): " << s.variants.size() << " variants, baseline "
      << s.baseline << " (every variant's architecture, cluster, profile and trace checked)\n";
}

void describe(const sim::Placement& p, const std::string& file, std::ostream& out) {
  int copies = 0;
  for (const auto& layer : p.ranks)
    for (const auto& holders : layer) copies += static_cast<int>(holders.size());
  out << "ok: placement " << file << ": " << p.policy << " for " << p.architecture << " on " << p.cluster << ", ep "
      << p.ep << ", tp " << p.tp << ", " << p.layers.size() << " MoE layers, " << copies << " expert copies "
      << "(checked against architecture " << p.architecture << ")\n";
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
      "architecture, cluster, profile, study or placement: how to read the files (default: a path's `kind:` key, "
      "a name's configs/ folder)")(
      "set", po::value(&overrides)->composing(), "key.path=value: override a value before validation (repeatable)")(
      "config", po::value(&configs)->required(), "a config name (mixtral-8x7b, h100-sxm) or path (./my.yaml); repeatable");
  po::positional_options_description positionals;
  positionals.add("config", -1);
  const auto vm = parse_options(args, options, positionals,
                                "moesim config check [--kind architecture|cluster|profile|study|placement] "
                                "[--set key.path=value ...] CONFIG...",
                                "Loads and validates architecture, cluster, profile, study and placement files, with\n"
                                "--set overrides, and prints a summary of each. Exit code 0 when all are valid, 2 at\n"
                                "the first error (reported as file:line:col: key.path: ...).",
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
    } else if (k == "cluster") {
      describe(models::load_cluster(config, overrides), ctx.out);
    } else if (k == "profile") {
      describe(models::load_profile(config, overrides), ctx.out);
    } else if (k == "study") {
      describe(sim::load_study(config, overrides), ctx.out);
    } else {
      if (!overrides.empty())
        throw common::UsageError("--set does not apply to placement files (" + config +
                                 "); edit the file, or solve it again with moesim place");
      const sim::Placement p = sim::load_placement(config);
      sim::validate_placement(p, models::load_architecture(p.architecture), config);
      describe(p, config, ctx.out);
    }
  }
  return common::kExitOk;
}

}  // namespace

void register_config_commands(std::vector<Command>& commands) {
  commands.push_back(Command{"config check", "validate architecture, cluster, profile, study and placement files",
                             run_config_check});
}

}  // namespace moesim::cli
