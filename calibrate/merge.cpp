#include "calibrate/merge.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

#include "calibrate/stats.hpp"
#include "common/stats.hpp"

namespace moesim::calibrate {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double median_of(std::vector<double> v) {
  return v.empty() ? 0.0 : common::percentile(std::move(v), 0.5);
}

// Records of every rank grouped by key, in rank 0's order (then by first appearance).
template <typename R>
struct Group {
  std::string key;
  std::vector<std::pair<int, const R*>> members;  // (rank, record)
};
template <typename R>
std::vector<Group<R>> group_records(const std::vector<RankMeasurements>& ranks, std::vector<R> Measurements::*field,
                                    const std::function<std::string(const R&)>& key) {
  std::vector<Group<R>> groups;
  std::map<std::string, std::size_t> index;
  for (const RankMeasurements& rm : ranks)
    for (const R& r : rm.m.*field) {
      const std::string k = key(r);
      auto [it, added] = index.emplace(k, groups.size());
      if (added) groups.push_back({k, {}});
      groups[it->second].members.emplace_back(rm.rank, &r);
    }
  return groups;
}

std::string gemm_key(const GemmOp& op) {
  return models::dtype_name(op.dtype) + " m=" + std::to_string(op.m) + " n=" + std::to_string(op.n) +
         " k=" + std::to_string(op.k);
}
std::string bytes_text(double b) {
  return std::to_string(static_cast<long long>(b)) + " B";
}
std::string collective_key(const CollectiveRecord& r) {
  std::string k = traffic_label(r.traffic) + " " + r.label + " " + bytes_text(r.traffic.bytes);
  if (r.traffic.op == models::CollectiveOp::kSendRecv) k += " (ranks 0 and " + std::to_string(r.traffic.peer) + ")";
  return k;
}
std::string traffic_key(const TrafficRecord& r) {
  return traffic_label(r.traffic) + " " + bytes_text(r.traffic.bytes);
}
std::string contention_key(const ContentionRecord& r) {
  std::string k;
  for (const GemmOp& op : r.gemm) k += gemm_key(op) + " ";
  return k + "x " + traffic_label(r.traffic) + " " + bytes_text(r.traffic.bytes) + (r.in_grid ? "" : " (sweep)");
}
std::string power_key(const PowerRecord& r) {
  std::ostringstream s;
  s << r.state.state;
  if (r.state.dtype) s << " " << models::dtype_name(*r.state.dtype);
  if (r.power_limit > 0) s << " limit " << r.power_limit << " W";
  if (r.clock_limit > 0) s << " clock " << r.clock_limit / 1e6 << " MHz";
  return s.str();
}

// A send/recv involves rank 0 and its peer only; the other ranks' timers measured nothing.
bool took_part(const CollectiveRecord& r, int rank) {
  return r.traffic.op != models::CollectiveOp::kSendRecv || rank == 0 || rank == r.traffic.peer;
}

template <typename R>
std::vector<double> medians(const Group<R>& g, const std::function<double(const R&)>& value) {
  std::vector<double> v;
  for (const auto& [rank, r] : g.members) v.push_back(value(*r));
  return v;
}

PowerRun merge_power(const std::vector<const PowerRecord*>& rs) {
  auto med = [&](double PowerRun::*f) {
    std::vector<double> v;
    for (const PowerRecord* r : rs) v.push_back(r->run.*f);
    return median_of(v);
  };
  PowerRun p;
  p.seconds = med(&PowerRun::seconds);
  p.energy = med(&PowerRun::energy);
  p.average_power = med(&PowerRun::average_power);
  p.sampled_power = med(&PowerRun::sampled_power);
  p.sm_clock = med(&PowerRun::sm_clock);
  p.mem_clock = med(&PowerRun::mem_clock);
  p.temperature = med(&PowerRun::temperature);
  p.work_rate = med(&PowerRun::work_rate);
  p.energy_counter = std::all_of(rs.begin(), rs.end(), [](const PowerRecord* r) { return r->run.energy_counter; });
  return p;
}

std::vector<PowerRecord> merge_power_records(const std::vector<RankMeasurements>& ranks,
                                             std::vector<PowerRecord> Measurements::*field) {
  std::vector<PowerRecord> out;
  for (const auto& g : group_records<PowerRecord>(ranks, field, power_key)) {
    std::vector<const PowerRecord*> rs;
    for (const auto& [rank, r] : g.members) rs.push_back(r);
    PowerRecord p = *rs.front();
    p.run = merge_power(rs);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

Measurements merge_measurements(const std::vector<RankMeasurements>& ranks, int nodes) {
  if (ranks.empty()) return {};
  Measurements m;
  const Measurements& first = ranks.front().m;
  m.device = first.device;
  m.device.gpu_count = static_cast<int>(ranks.size());
  m.plan = first.plan;
  m.started = first.started;
  m.finished = first.finished;
  for (const RankMeasurements& r : ranks) {
    m.started = std::min(m.started, r.m.started);
    m.finished = std::max(m.finished, r.m.finished);
  }
  m.ranks = static_cast<int>(ranks.size());
  m.nodes = nodes;

  for (const auto& g :
       group_records<GemmRecord>(ranks, &Measurements::gemms, [](const GemmRecord& r) { return gemm_key(r.op); })) {
    GemmRecord r = *g.members.front().second;
    r.samples = medians<GemmRecord>(g, [](const GemmRecord& x) { return x.time.median; });
    r.time = summarize(r.samples);
    m.gemms.push_back(std::move(r));
  }
  for (const auto& g :
       group_records<GroupedRecord>(ranks, &Measurements::grouped, [](const GroupedRecord& r) { return r.label; })) {
    GroupedRecord r = *g.members.front().second;
    r.samples = medians<GroupedRecord>(g, [](const GroupedRecord& x) { return x.time.median; });
    r.time = summarize(r.samples);
    r.singles_sum = median_of(medians<GroupedRecord>(g, [](const GroupedRecord& x) { return x.singles_sum; }));
    m.grouped.push_back(std::move(r));
  }
  for (const auto& g : group_records<CollectiveRecord>(ranks, &Measurements::collectives, collective_key)) {
    CollectiveRecord r = *g.members.front().second;
    r.samples.clear();
    r.wrong = 0;
    for (const auto& [rank, x] : g.members)
      if (took_part(*x, rank)) {
        r.samples.push_back(x->time.median);
        r.wrong += x->wrong;
      }
    if (r.samples.empty()) continue;
    r.time = summarize(r.samples);
    m.collectives.push_back(std::move(r));
  }
  for (const auto& g : group_records<TrafficRecord>(ranks, &Measurements::traffic, traffic_key)) {
    TrafficRecord r = *g.members.front().second;
    r.samples = medians<TrafficRecord>(g, [](const TrafficRecord& x) { return x.time.median; });
    r.time = summarize(r.samples);
    m.traffic.push_back(std::move(r));
  }
  for (const auto& g : group_records<ContentionRecord>(ranks, &Measurements::contention, contention_key)) {
    ContentionRecord r = *g.members.front().second;
    r.run.gemm_alone = medians<ContentionRecord>(g, [](const ContentionRecord& x) { return x.gemm_alone.median; });
    r.run.comm_alone = medians<ContentionRecord>(g, [](const ContentionRecord& x) { return x.comm_alone.median; });
    r.run.gemm_overlapped =
        medians<ContentionRecord>(g, [](const ContentionRecord& x) { return x.gemm_overlapped.median; });
    r.run.comm_overlapped =
        medians<ContentionRecord>(g, [](const ContentionRecord& x) { return x.comm_overlapped.median; });
    for (const auto& [rank, x] : g.members) {
      r.run.gemm_overlap = std::min(r.run.gemm_overlap, x->run.gemm_overlap);
      r.run.comm_overlap = std::min(r.run.comm_overlap, x->run.comm_overlap);
    }
    r.gemm_alone = summarize(r.run.gemm_alone);
    r.comm_alone = summarize(r.run.comm_alone);
    r.gemm_overlapped = summarize(r.run.gemm_overlapped);
    r.comm_overlapped = summarize(r.run.comm_overlapped);
    m.contention.push_back(std::move(r));
  }
  m.power = merge_power_records(ranks, &Measurements::power);
  m.power_sweep = merge_power_records(ranks, &Measurements::power_sweep);
  return m;
}

namespace {

template <typename R>
void add_items(Spread& s, const std::string& part, const std::vector<RankMeasurements>& ranks,
               std::vector<R> Measurements::*field, const std::function<std::string(const R&)>& key,
               const std::vector<R>& merged, const std::string& what, const std::function<double(const R&)>& value,
               const std::function<bool(const R&, int)>& counts) {
  std::map<std::string, const R*> merged_by_key;
  for (const R& r : merged) merged_by_key.emplace(key(r), &r);
  bool any = false;
  for (const auto& g : group_records<R>(ranks, field, key)) {
    auto it = merged_by_key.find(g.key);
    if (it == merged_by_key.end()) continue;
    SpreadItem item;
    item.part = part;
    item.quantity = g.key + " " + what;
    item.merged = value(*it->second);
    item.by_rank.assign(ranks.size(), kNaN);
    int counted = 0;
    for (const auto& [rank, r] : g.members) {
      if (counts && !counts(*r, rank)) continue;
      if (rank >= 0 && rank < static_cast<int>(ranks.size())) item.by_rank[static_cast<std::size_t>(rank)] = value(*r);
      ++counted;
    }
    if (counted < 2 || item.merged == 0.0) continue;
    for (std::size_t i = 0; i < item.by_rank.size(); ++i) {
      if (std::isnan(item.by_rank[i])) continue;
      const double dev = item.by_rank[i] / item.merged - 1.0;
      if (std::fabs(dev) > std::fabs(item.worst_deviation) || (item.worst_deviation == 0.0 && i == 0)) {
        item.worst_deviation = dev;
        item.worst_rank = static_cast<int>(i);
      }
    }
    s.items.push_back(std::move(item));
    any = true;
  }
  if (any && std::find(s.parts.begin(), s.parts.end(), part) == s.parts.end()) s.parts.push_back(part);
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", x * 100.0);
  return buf;
}

}  // namespace

Spread gpu_spread(const std::vector<RankMeasurements>& ranks, const Measurements& merged) {
  Spread s;
  add_items<GemmRecord>(
      s, "gemm", ranks, &Measurements::gemms, [](const GemmRecord& r) { return gemm_key(r.op); }, merged.gemms, "time",
      [](const GemmRecord& r) { return r.time.median; }, {});
  add_items<GroupedRecord>(
      s, "grouped_gemm", ranks, &Measurements::grouped, [](const GroupedRecord& r) { return r.label; }, merged.grouped,
      "time", [](const GroupedRecord& r) { return r.time.median; }, {});
  add_items<CollectiveRecord>(
      s, "collectives", ranks, &Measurements::collectives, collective_key, merged.collectives, "time",
      [](const CollectiveRecord& r) { return r.time.median; }, took_part);
  add_items<TrafficRecord>(s, "copy_traffic", ranks, &Measurements::traffic, traffic_key, merged.traffic, "time",
                           [](const TrafficRecord& r) { return r.time.median; }, {});
  add_items<ContentionRecord>(s, "contention", ranks, &Measurements::contention, contention_key, merged.contention,
                              "compute_slowdown", [](const ContentionRecord& r) { return r.compute_slowdown(); }, {});
  add_items<ContentionRecord>(s, "contention", ranks, &Measurements::contention, contention_key, merged.contention,
                              "comm_slowdown", [](const ContentionRecord& r) { return r.comm_slowdown(); }, {});
  add_items<PowerRecord>(s, "power", ranks, &Measurements::power, power_key, merged.power, "average_power",
                         [](const PowerRecord& r) { return r.run.average_power; }, {});
  return s;
}

void print_spread(std::ostream& out, const Spread& s, const std::vector<RankMeasurements>& ranks) {
  out << "#\n# Per-GPU spread: rank value / merged value - 1 (merged = median over the ranks of each rank's median)\n"
      << "# part           quantities  worst GPU   median worst  worst quantity\n";
  char buf[512];
  for (const std::string& part : s.parts) {
    const SpreadItem* worst = nullptr;
    std::vector<double> worsts;
    std::size_t count = 0;
    for (const SpreadItem& i : s.items)
      if (i.part == part) {
        ++count;
        worsts.push_back(std::fabs(i.worst_deviation));
        if (!worst || std::fabs(i.worst_deviation) > std::fabs(worst->worst_deviation)) worst = &i;
      }
    if (!worst) continue;
    std::snprintf(buf, sizeof buf, "  %-14s %10zu  %-8s %7s %12s  %s\n", part.c_str(), count,
                  ("rank " + std::to_string(worst->worst_rank)).c_str(), percent(worst->worst_deviation).c_str(),
                  percent(median_of(worsts)).c_str(), worst->quantity.c_str());
    out << buf;
  }
  out << "#\n# Per rank: median deviation over each part's quantities\n# rank  host/node                ";
  for (const std::string& part : s.parts) {
    std::snprintf(buf, sizeof buf, " %13s", part.c_str());
    out << buf;
  }
  out << "\n";
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const std::string where = ranks[r].host + (ranks[r].node != ranks[r].host ? " (" + ranks[r].node + ")" : "");
    std::snprintf(buf, sizeof buf, "  %4zu  %-24s", r, where.c_str());
    out << buf;
    for (const std::string& part : s.parts) {
      std::vector<double> devs;
      for (const SpreadItem& i : s.items)
        if (i.part == part && r < i.by_rank.size() && !std::isnan(i.by_rank[r]))
          devs.push_back(i.by_rank[r] / i.merged - 1.0);
      std::snprintf(buf, sizeof buf, " %13s", devs.empty() ? "-" : percent(median_of(devs)).c_str());
      out << buf;
    }
    out << "\n";
  }
  out << std::flush;
}

nlohmann::json spread_to_json(const Spread& s) {
  nlohmann::json items = nlohmann::json::array();
  for (const SpreadItem& i : s.items) {
    nlohmann::json by_rank = nlohmann::json::array();
    for (double v : i.by_rank) by_rank.push_back(std::isnan(v) ? nlohmann::json() : nlohmann::json(v));
    items.push_back({{"part", i.part},
                     {"quantity", i.quantity},
                     {"merged", i.merged},
                     {"by_rank", by_rank},
                     {"worst_rank", i.worst_rank},
                     {"worst_deviation", i.worst_deviation}});
  }
  return {{"rule",
           "merged = median over the ranks of each rank's median; deviation = rank / merged - 1; send/recv "
           "over the two ranks that took part"},
          {"items", items}};
}

}  // namespace moesim::calibrate
