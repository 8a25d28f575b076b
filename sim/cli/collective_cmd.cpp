// `moesim collective`: one collective alone on a cluster, simulated and printed as nccl-tests prints
// it; --compare reads an nccl-tests output file measured on a real cluster and adds the error per
// size (docs/simulator.md, "Collectives").
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "common/units.hpp"
#include "models/cluster.hpp"
#include "models/costs.hpp"
#include "models/profile.hpp"
#include "sim/cli/cli.hpp"
#include "sim/engine/isolate.hpp"
#include "sim/engine/lone_collective.hpp"

namespace moesim::cli {

namespace {

constexpr double kMinBytes = 1.0;
constexpr double kMaxBytes = 64.0 * 1024 * 1024 * 1024;  // 64 GiB

// nccl-tests' op names and moesim's: all_reduce_perf's "all_reduce", alltoall_perf's "alltoall".
models::CollectiveOp parse_op(const std::string& text) {
  static const std::map<std::string, models::CollectiveOp> aliases{{"alltoall", models::CollectiveOp::kAllToAll},
                                                                   {"sendrecv", models::CollectiveOp::kSendRecv}};
  if (auto it = aliases.find(text); it != aliases.end()) return it->second;
  if (auto op = common::enum_from_name<models::CollectiveOp>(models::kCollectiveOps, text)) return *op;
  throw common::UsageError("--op " + common::quoted(text) + ": expected one of " +
                           common::join(common::enum_names<models::CollectiveOp>(models::kCollectiveOps), ", ") +
                           " (alltoall and sendrecv, nccl-tests' names, work too)");
}

// nccl-tests' sizes: a number with K, M or G (powers of 1024, as its -b and -e read them), or a
// size with a unit ("64KiB", "1MB").
double parse_size(const std::string& option, const std::string& text) {
  double v = -1.0;
  if (!text.empty()) {
    char* end = nullptr;
    const double n = std::strtod(text.c_str(), &end);
    const std::string suffix(end);
    if (end != text.c_str() && (suffix.empty() || suffix == "K" || suffix == "M" || suffix == "G"))
      v = n * (suffix == "K" ? 1024.0 : suffix == "M" ? 1048576.0 : suffix == "G" ? 1073741824.0 : 1.0);
    else if (auto b = common::parse_unit(text, common::UnitKind::kBytes))
      v = *b;
  }
  if (!(v >= kMinBytes && v <= kMaxBytes))
    throw common::UsageError(option + " " + common::quoted(text) + ": expected a size from 1 B to 64 GiB (e.g. 8, 1K, 64M, 8G, 1MiB)");
  return v;
}

std::vector<double> size_list(double begin, double end, double factor) {
  if (end < begin) throw common::UsageError("-e must not be below -b");
  if (!(factor > 1.0) && begin != end) throw common::UsageError("-f must be above 1 (the size factor between rows)");
  std::vector<double> sizes;
  for (double s = begin; s <= end * (1 + 1e-12) && sizes.size() < 10000; s *= factor) {
    sizes.push_back(std::round(s));
    if (begin == end) break;
  }
  return sizes;
}

struct Measured {
  double bytes = 0.0;
  double time_us = 0.0;
  double busbw = 0.0;
};

bool is_integer(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

double number_at(const std::vector<std::string>& tokens, std::size_t i, const std::string& where, const std::string& what) {
  if (i >= tokens.size()) throw common::InputError(where + ": expected " + what + " after the type, found the line's end");
  char* end = nullptr;
  const double v = std::strtod(tokens[i].c_str(), &end);
  if (end == tokens[i].c_str() || *end != '\0' || !std::isfinite(v) || v < 0)
    throw common::InputError(where + ": expected " + what + " (a number), got " + common::quoted(tokens[i]));
  return v;
}

// The result lines of an nccl-tests output file: size, count, type, [redop, root,] then the
// out-of-place time, algbw, busbw. Other lines (comments, NCCL's log) are skipped.
std::vector<Measured> read_nccl_tests(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw common::InputError(path + ": cannot read it (does it exist?)");
  std::vector<Measured> rows;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream ss(line);
    std::vector<std::string> t;
    for (std::string w; ss >> w;) t.push_back(w);
    if (t.empty() || t[0][0] == '#' || !is_integer(t[0])) continue;
    const std::string where = path + ":" + std::to_string(n);
    if (t.size() < 3 || !is_integer(t[1]))
      throw common::InputError(where + ": expected an nccl-tests result line (size, count, type, ..., time, algbw, busbw), got " +
                               common::quoted(line, 80));
    std::size_t i = 3;
    // all_reduce and friends print a reduction and a root before the times.
    if (i < t.size() && !std::isdigit(static_cast<unsigned char>(t[i][0]))) i += 2;
    Measured m;
    m.bytes = std::stod(t[0]);
    m.time_us = number_at(t, i, where, "the out-of-place time in us");
    number_at(t, i + 1, where, "the algorithm bandwidth");
    m.busbw = number_at(t, i + 2, where, "the bus bandwidth");
    rows.push_back(m);
  }
  if (rows.empty())
    throw common::InputError(path + ": no nccl-tests result line in it (expected lines like \"    1048576   262144  float  sum  "
                             "-1  25.31  41.43  72.50  0 ...\" as all_reduce_perf prints them); is it nccl-tests output?");
  return rows;
}

std::string fixed(double v, int width, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%*.*f", width, decimals, v);
  return buf;
}

int collective_command(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  std::string cluster_name, profile_name, op_text, begin = "1K", end = "8G", compare;
  double factor = 2.0;
  int gpus = 0;
  opts.add_options()("cluster", po::value(&cluster_name)->required(), "configs/clusters/NAME.yaml, or a path")(
      "profile", po::value(&profile_name), "the GPU profile (default: the cluster's GPU kind)")(
      "op", po::value(&op_text)->required(), "all_reduce, all_gather, reduce_scatter, all_to_all (alltoall), send_recv (sendrecv)")(
      "gpus,g", po::value(&gpus), "GPUs taking part, the first of the cluster (default: all)")(
      "minbytes,b", po::value(&begin), "smallest size (nccl-tests -b: 8, 1K, 64M; default 1K)")(
      "maxbytes,e", po::value(&end), "largest size (default 8G)")(
      "stepfactor,f", po::value(&factor), "size factor between rows (default 2)")(
      "compare", po::value(&compare), "an nccl-tests output file: add the measured time and the error per size")(
      "json", po::bool_switch(), "print JSON instead of the table");
  auto vm = parse_options(
      args, opts, po::positional_options_description(),
      "moesim collective --cluster C [--profile P] --op OP [-g GPUS] [-b 1K -e 8G -f 2] [--compare LOG] [--json]",
      "Simulates one collective alone on a cluster, with the transfers and sizes the simulator uses for it,\n"
      "and prints it as nccl-tests does: size, count, type, time, algbw and busbw (busbw with nccl-tests'\n"
      "factors). --compare LOG adds, per size, the time an nccl-tests run measured and the error.",
      ctx);
  if (!vm) return common::kExitOk;
  const models::CollectiveOp op = parse_op(op_text);
  const models::Cluster cluster = models::load_cluster(cluster_name);
  const models::Profile profile = models::load_profile(profile_name.empty() ? cluster.gpu_kind : profile_name);
  if (gpus == 0) gpus = cluster.total_gpus();
  if (gpus < 2 || gpus > cluster.total_gpus())
    throw common::UsageError("-g " + std::to_string(gpus) + ": expected 2 to " + std::to_string(cluster.total_gpus()) +
                             " (the GPUs of cluster " + cluster.name + ")");
  std::vector<Measured> measured;
  std::vector<double> sizes;
  if (!compare.empty()) {
    measured = read_nccl_tests(compare);
    for (const auto& m : measured) {
      if (!(m.bytes >= kMinBytes && m.bytes <= kMaxBytes))
        throw common::InputError(compare + ": size " + std::to_string(m.bytes) + " is outside 1 B .. 64 GiB");
      sizes.push_back(m.bytes);
    }
  } else {
    sizes = size_list(parse_size("-b", begin), parse_size("-e", end), factor);
  }
  const sim::SimResult r =
      sim::run_isolated([&] { return sim::simulate_lone_collective(cluster, profile, op, gpus, sizes); });
  const std::string name = models::collective_op_name(op);
  nlohmann::json rows = nlohmann::json::array();
  std::ostringstream table;
  const std::string kinds = common::join(profile.source_kinds(), " + ");
  table << "# moesim collective: " << name << " on " << gpus << " GPUs of cluster " << cluster.name << ", profile "
        << profile.name << " (" << kinds << " values)\n"
        << "# simulated by the moesim engine (model): the transfers the simulator runs for this operation\n#\n"
        << "#       size         count      type      time     algbw     busbw" << (measured.empty() ? "" : "  measured     error")
        << "\n#        (B)    (elements)                (us)    (GB/s)    (GB/s)" << (measured.empty() ? "" : "      (us)          ")
        << "\n";
  double busbw_sum = 0.0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double t = r.step_latency[i];
    const double algbw = sizes[i] / t / 1e9;
    const double busbw = algbw * models::busbw_factor(op, gpus);
    busbw_sum += busbw;
    nlohmann::json row = {{"bytes", sizes[i]}, {"time_us", t * 1e6}, {"algbw_GBps", algbw}, {"busbw_GBps", busbw}};
    char line[160];
    std::snprintf(line, sizeof line, "%12.0f  %12ld  %8s  %8.2f  %8.2f  %8.2f", sizes[i],
                  models::nccl_tests_count(op, gpus, sizes[i], 4), "float", t * 1e6, algbw, busbw);
    table << line;
    if (!measured.empty()) {
      const double err = t * 1e6 / measured[i].time_us - 1.0;
      row["measured_time_us"] = measured[i].time_us;
      row["measured_busbw_GBps"] = measured[i].busbw;
      row["error"] = err;
      table << "  " << fixed(measured[i].time_us, 8, 2) << "  " << fixed(100.0 * err, 7, 1) << "%";
    }
    table << "\n";
    rows.push_back(row);
  }
  table << "# Avg bus bandwidth    : " << fixed(busbw_sum / static_cast<double>(sizes.size()), 0, 3) << "\n";
  if ((*vm)["json"].as<bool>()) {
    const nlohmann::json doc = {{"schema_version", 1},
                                {"op", name},
                                {"gpus", gpus},
                                {"cluster", cluster.name},
                                {"profile", profile.name},
                                {"source", "simulated by the moesim engine (model) from profile " + profile.name + " (" + kinds + " values)"},
                                {"rows", rows}};
    ctx.out << doc.dump(2) << "\n";
  } else {
    ctx.out << table.str();
  }
  return common::kExitOk;
}

}  // namespace

void register_collective_commands(std::vector<Command>& commands) {
  commands.push_back({"collective", "simulate one collective alone, printed as nccl-tests prints it", collective_command});
}

}  // namespace moesim::cli
