#include "sim/engine/activity_dump.hpp"

#include <charconv>
#include <ostream>
#include <unordered_map>

#include "common/error.hpp"

namespace moesim::sim {

namespace {

constexpr std::size_t kFlushBytes = 1 << 20;

const char* policy_name(sg4::Link::SharingPolicy p) {
  switch (p) {
    case sg4::Link::SharingPolicy::FATPIPE: return "fatpipe";
    case sg4::Link::SharingPolicy::SHARED: return "shared";
    default: return nullptr;
  }
}

}  // namespace

ActivityDump::ActivityDump(const std::string& path, bool contention, const std::vector<std::string>& simgrid_cfg)
    : file_(path, true) {
  buf_.reserve(kFlushBytes + 4096);
  buf_ += "moesim-activities " + std::to_string(kActivityDumpVersion) + "\n";
  buf_ += "contention " + std::string(contention ? "1" : "0") + "\n";
  for (const auto& c : simgrid_cfg) buf_ += "cfg " + c + "\n";
}

void ActivityDump::put(std::uint64_t v) {
  char tmp[24];
  const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  buf_ += ' ';
  buf_.append(tmp, r.ptr);
}

// Shortest text that reads back as the same double: the replay gets the engine's exact amounts.
void ActivityDump::put(double v) {
  char tmp[32];
  const auto r = std::to_chars(tmp, tmp + sizeof tmp, v);
  buf_ += ' ';
  buf_.append(tmp, r.ptr);
}

void ActivityDump::put_list(std::span<const std::uint64_t> values) {
  put(static_cast<std::uint64_t>(values.size()));
  for (auto v : values) put(v);
  buf_ += '\n';
  flush_if_full();
}

void ActivityDump::flush_if_full() {
  if (buf_.size() < kFlushBytes) return;
  file_.stream().write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  buf_.clear();
}

void ActivityDump::write_platform(const Platform& platform) {
  const int n = platform.gpus();
  for (int g = 0; g < n; ++g) {
    const sg4::Host* h = platform.host(g);
    buf_ += "host " + h->get_name();
    put(h->get_speed());
    put(static_cast<std::uint64_t>(h->get_core_count()));
    buf_ += '\n';
  }
  // Links in order of first use, each declared before the routes; a route lists link indices in the
  // order a message crosses them.
  std::unordered_map<const sg4::Link*, std::uint64_t> index;
  std::vector<const sg4::Link*> used;
  std::vector<std::vector<std::uint64_t>> routes;
  std::vector<sg4::Link*> links;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      links.clear();
      double latency = 0.0;
      platform.host(a)->route_to(platform.host(b), links, &latency);
      auto& r = routes.emplace_back();
      for (const sg4::Link* l : links) {
        auto [it, fresh] = index.try_emplace(l, used.size());
        if (fresh) used.push_back(l);
        r.push_back(it->second);
      }
    }
  }
  for (const sg4::Link* l : used) {
    const char* policy = policy_name(l->get_sharing_policy());
    if (policy == nullptr)
      throw common::RunError("activity dump: link " + l->get_name() + " has a sharing policy the dump cannot describe");
    buf_ += "link " + l->get_name();
    put(l->get_bandwidth());
    put(l->get_latency());
    buf_ += ' ';
    buf_ += policy;
    buf_ += '\n';
    flush_if_full();
  }
  std::size_t k = 0;
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      if (a == b) continue;
      buf_ += "route";
      put(static_cast<std::uint64_t>(a));
      put(static_cast<std::uint64_t>(b));
      put_list(routes[k++]);
    }
  }
}

void ActivityDump::begin_step(int index, bool measured, std::uint64_t first_id, std::uint64_t tasks,
                              std::uint64_t end_id) {
  buf_ += "step";
  put(static_cast<std::uint64_t>(index));
  put(static_cast<std::uint64_t>(measured ? 1 : 0));
  put(first_id);
  put(tasks);
  put(end_id);
  buf_ += '\n';
}

void ActivityDump::exec(std::uint64_t id, int host, double flops, std::span<const std::uint64_t> deps) {
  buf_ += 'E';
  put(id);
  put(static_cast<std::uint64_t>(host));
  put(flops);
  put_list(deps);
}

void ActivityDump::comm(std::uint64_t id, int src, int dst, std::uint64_t bytes, double latency,
                        std::span<const std::uint64_t> deps) {
  buf_ += 'C';
  put(id);
  put(static_cast<std::uint64_t>(src));
  put(static_cast<std::uint64_t>(dst));
  put(bytes);
  put(latency);
  put_list(deps);
}

void ActivityDump::join(std::uint64_t id, std::span<const std::uint64_t> deps) {
  buf_ += 'J';
  put(id);
  put_list(deps);
}

void ActivityDump::finish(std::uint64_t tasks, std::uint64_t activities) {
  buf_ += "end";
  put(tasks);
  put(activities);
  buf_ += '\n';
  file_.stream().write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
  buf_.clear();
  file_.commit();
}

}  // namespace moesim::sim
