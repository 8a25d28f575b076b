// moesim-replay DUMP: replays a `moesim run --dump-activities` file (bench/replay/FORMAT.md) with
// nothing but SimGrid: the same platform, the same tasks started lazily from completion callbacks,
// and prints the simulated time and the wall time. It measures what the engine alone costs for
// moesim's workload: moesim's wall time against this program's is the overhead moesim adds.
// Exit codes: 0 ok, 1 the replay did not finish every step, 2 bad usage or a bad file.
#include <xbt/log.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u.hpp>

#include "sim/engine/latency_factor.hpp"
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace sg4 = simgrid::s4u;

namespace {

constexpr int kFormatVersion = 3;

struct BadInput : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Kind : std::uint8_t { kExec, kComm, kJoin };

struct HostSpec {
  std::string name;
  double speed = 0;
  int cores = 1;
};
struct LinkSpec {
  std::string name;
  double bandwidth = 0, latency = 0;
  bool fatpipe = false;
};
struct Route {
  std::uint32_t src = 0, dst = 0;
  std::vector<std::uint32_t> links;
};
struct Step {
  std::uint64_t index = 0, first = 0, count = 0, end = 0;
  bool measured = false;
};

// The whole DAG in flat arrays: a few tens of bytes per task.
struct Dump {
  bool contention = false;
  std::vector<std::string> cfg;
  std::vector<HostSpec> hosts;
  std::vector<LinkSpec> links;
  std::vector<Route> routes;
  std::vector<Step> steps;
  std::vector<Kind> kind;
  std::vector<std::uint32_t> src, dst;  // exec: host in src
  std::vector<double> amount;           // flops or bytes
  std::vector<double> latency;          // comm: s before its first byte moves
  std::vector<std::uint64_t> dep_begin{0};
  std::vector<std::uint64_t> deps;
  std::uint64_t declared_tasks = 0, declared_activities = 0;
};

// Reads one record at a time; every error names the file and line.
class Reader {
 public:
  Reader(std::string path, std::string text) : path_(std::move(path)), text_(std::move(text)) {}
  bool next_line() {
    while (pos_ < text_.size()) {
      const auto nl = text_.find('\n', pos_);
      const auto stop = nl == std::string::npos ? text_.size() : nl;
      line_ = std::string_view(text_).substr(pos_, stop - pos_);
      pos_ = stop + 1;
      ++line_no_;
      if (!line_.empty() && line_.front() != '#') return true;
    }
    return false;
  }
  std::string_view word(const char* what) {
    while (!line_.empty() && line_.front() == ' ') line_.remove_prefix(1);
    const auto sp = line_.find(' ');
    const auto w = line_.substr(0, sp);
    line_.remove_prefix(sp == std::string_view::npos ? line_.size() : sp);
    if (w.empty()) fail(std::string("expected ") + what + ", got the end of the line");
    return w;
  }
  template <class T>
  T number(const char* what) {
    const auto w = word(what);
    T v{};
    const auto r = std::from_chars(w.data(), w.data() + w.size(), v);
    if (r.ec != std::errc{} || r.ptr != w.data() + w.size())
      fail(std::string("expected ") + what + ", got \"" + std::string(w) + "\"");
    return v;
  }
  void end_of_line() {
    while (!line_.empty() && line_.front() == ' ') line_.remove_prefix(1);
    if (!line_.empty()) fail("expected the end of the line, got \"" + std::string(line_) + "\"");
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw BadInput(path_ + ":" + std::to_string(line_no_) + ": " + msg);
  }

 private:
  std::string path_, text_;
  std::size_t pos_ = 0;
  std::size_t line_no_ = 0;
  std::string_view line_;
};

Dump load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw BadInput(path + ": cannot open the file");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Reader r(path, std::move(text));
  Dump d;
  if (!r.next_line() || r.word("the header") != "moesim-activities")
    r.fail("expected the header \"moesim-activities " + std::to_string(kFormatVersion) +
           "\"; is this a file written by moesim run --dump-activities?");
  if (const int v = r.number<int>("the format version"); v != kFormatVersion)
    r.fail("expected format version " + std::to_string(kFormatVersion) + ", got " + std::to_string(v) +
           "; replay it with the moesim-replay of the same moesim version");
  bool ended = false;
  auto read_deps = [&](std::uint64_t id) {
    const auto n = r.number<std::uint64_t>("a dependency count");
    for (std::uint64_t i = 0; i < n; ++i) {
      const auto dep = r.number<std::uint64_t>("a dependency id");
      if (dep == id) r.fail("expected dependencies on other tasks, got the task itself");
      d.deps.push_back(dep);
    }
    d.dep_begin.push_back(d.deps.size());
  };
  auto host_index = [&](const char* what) {
    const auto h = r.number<std::uint32_t>(what);
    if (h >= d.hosts.size())
      r.fail(std::string("expected ") + what + " below " + std::to_string(d.hosts.size()) + ", got " +
             std::to_string(h));
    return h;
  };
  auto task_id = [&]() {
    const auto id = r.number<std::uint64_t>("a task id");
    if (id != d.kind.size())
      r.fail("expected task id " + std::to_string(d.kind.size()) + " (ids are consecutive), got " + std::to_string(id));
    return id;
  };
  while (r.next_line()) {
    if (ended) r.fail("expected nothing after the end record");
    const auto rec = r.word("a record");
    if (rec == "E") {
      const auto id = task_id();
      d.kind.push_back(Kind::kExec);
      d.src.push_back(host_index("a host index"));
      d.dst.push_back(0);
      d.amount.push_back(r.number<double>("flops"));
      d.latency.push_back(0);
      read_deps(id);
    } else if (rec == "C") {
      const auto id = task_id();
      d.kind.push_back(Kind::kComm);
      d.src.push_back(host_index("a source host index"));
      d.dst.push_back(host_index("a destination host index"));
      d.amount.push_back(static_cast<double>(r.number<std::uint64_t>("bytes")));
      const auto lat = r.number<double>("a latency in s");
      if (!(lat >= 0.0)) r.fail("expected a latency >= 0, got " + std::to_string(lat));
      d.latency.push_back(lat);
      read_deps(id);
    } else if (rec == "J") {
      const auto id = task_id();
      d.kind.push_back(Kind::kJoin);
      d.src.push_back(0);
      d.dst.push_back(0);
      d.amount.push_back(0);
      d.latency.push_back(0);
      read_deps(id);
    } else if (rec == "step") {
      Step s;
      s.index = r.number<std::uint64_t>("a step index");
      s.measured = r.number<int>("0 or 1 (measured)") != 0;
      s.first = r.number<std::uint64_t>("the step's first task id");
      s.count = r.number<std::uint64_t>("the step's task count");
      s.end = r.number<std::uint64_t>("the step's end task id");
      if (s.first != d.kind.size()) r.fail("expected the step to start at task " + std::to_string(d.kind.size()));
      if (s.end < s.first || s.end >= s.first + s.count) r.fail("expected the end task inside the step");
      d.steps.push_back(s);
    } else if (rec == "host") {
      HostSpec h;
      h.name = std::string(r.word("a host name"));
      h.speed = r.number<double>("a speed in flops/s");
      h.cores = r.number<int>("a core count");
      d.hosts.push_back(std::move(h));
    } else if (rec == "link") {
      LinkSpec l;
      l.name = std::string(r.word("a link name"));
      l.bandwidth = r.number<double>("a bandwidth in bytes/s");
      l.latency = r.number<double>("a latency in s");
      const auto policy = r.word("shared or fatpipe");
      if (policy != "shared" && policy != "fatpipe")
        r.fail("expected shared or fatpipe, got \"" + std::string(policy) + "\"");
      l.fatpipe = policy == "fatpipe";
      d.links.push_back(std::move(l));
    } else if (rec == "route") {
      Route rt;
      rt.src = host_index("a source host index");
      rt.dst = host_index("a destination host index");
      const auto n = r.number<std::uint32_t>("a link count");
      for (std::uint32_t i = 0; i < n; ++i) {
        const auto l = r.number<std::uint32_t>("a link index");
        if (l >= d.links.size())
          r.fail("expected a link index below " + std::to_string(d.links.size()) + ", got " + std::to_string(l));
        rt.links.push_back(l);
      }
      d.routes.push_back(std::move(rt));
    } else if (rec == "cfg") {
      d.cfg.emplace_back(r.word("a SimGrid setting"));
    } else if (rec == "contention") {
      d.contention = r.number<int>("0 or 1") != 0;
    } else if (rec == "end") {
      d.declared_tasks = r.number<std::uint64_t>("the task count");
      d.declared_activities = r.number<std::uint64_t>("the activity count");
      if (d.declared_tasks != d.kind.size())
        r.fail("expected " + std::to_string(d.kind.size()) + " tasks (as read), got " +
               std::to_string(d.declared_tasks));
      ended = true;
    } else {
      r.fail("expected a record (host, link, route, step, E, C, J, cfg, contention, end), got \"" + std::string(rec) +
             "\"");
    }
    r.end_of_line();
  }
  if (!ended) r.fail("expected the end record; the file is truncated");
  for (const auto dep : d.deps)
    if (dep >= d.kind.size())
      r.fail("expected dependency ids below " + std::to_string(d.kind.size()) + ", got " + std::to_string(dep));
  return d;
}

// Runs the DAG: a task starts when its last dependency completes, as moesim's engine does.
class Replayer {
 public:
  explicit Replayer(const Dump& d) : d_(d) {
    const std::size_t n = d.kind.size();
    pending_.resize(n);
    succ_begin_.assign(n + 1, 0);
    for (std::size_t i = 0; i < n; ++i) {
      pending_[i] = static_cast<std::uint32_t>(d.dep_begin[i + 1] - d.dep_begin[i]);
      for (auto k = d.dep_begin[i]; k < d.dep_begin[i + 1]; ++k) ++succ_begin_[d.deps[k] + 1];
    }
    for (std::size_t i = 0; i < n; ++i) succ_begin_[i + 1] += succ_begin_[i];
    succ_.resize(succ_begin_[n]);
    std::vector<std::uint64_t> fill(succ_begin_.begin(), succ_begin_.end() - 1);
    for (std::size_t i = 0; i < n; ++i)
      for (auto k = d.dep_begin[i]; k < d.dep_begin[i + 1]; ++k) succ_[fill[d.deps[k]]++] = i;
    step_end_time_.assign(d.steps.size(), -1.0);
    alive_.resize(d.steps.size());
  }

  void build_platform() {
    auto* zone = sg4::create_full_zone("cluster");
    for (const auto& h : d_.hosts) {
      auto* host = zone->create_host(h.name, h.speed);
      host->set_core_count(h.cores);
      host->seal();
      hosts_.push_back(host);
    }
    std::vector<sg4::Link*> links;
    for (const auto& l : d_.links) {
      auto* link = zone->create_link(l.name, l.bandwidth);
      link->set_latency(l.latency);
      if (l.fatpipe) link->set_sharing_policy(sg4::Link::SharingPolicy::FATPIPE);
      link->seal();
      links.push_back(link);
    }
    for (const auto& rt : d_.routes) {
      std::vector<sg4::LinkInRoute> route;
      for (auto l : rt.links) route.emplace_back(links[l]);
      zone->add_route(hosts_[rt.src]->get_netpoint(), hosts_[rt.dst]->get_netpoint(), nullptr, nullptr, route, false);
    }
    zone->seal();
    // As moesim's platform (sim/engine/platform.cpp): every transfer waits the latency its record
    // gives (the study's latency factor included), its route's latency stretched by the callback.
    zone->get_network_model()->set_lat_factor_cb(
        [this](double, const sg4::Host*, const sg4::Host*, const std::vector<sg4::Link*>& route,
               const std::unordered_set<sg4::NetZone*>&) {
          double sum = 0.0;
          for (const sg4::Link* l : route) sum += l->get_latency();
          return next_latency_ > 0.0 && sum > 0.0 ? next_latency_ / sum : 1.0;
        });
  }

  void start() {
    sg4::Activity::on_completion_cb([this](const sg4::Activity& a) {
      auto* data = a.get_data<void>();
      if (data == nullptr) return;
      complete(reinterpret_cast<std::uintptr_t>(data) - 1);
    });
    draining_ = true;
    for (std::uint64_t i = 0; i < d_.kind.size(); ++i)
      if (pending_[i] == 0) start_task(i);
    draining_ = false;
    if (!worklist_.empty()) {
      const auto first = worklist_.back();
      worklist_.pop_back();
      complete(first);
    }
  }

  std::uint64_t activities() const { return activities_; }
  const std::vector<double>& step_end_times() const { return step_end_time_; }

 private:
  std::size_t step_of(std::uint64_t id) const {
    const auto it = std::upper_bound(d_.steps.begin(), d_.steps.end(), id,
                                     [](std::uint64_t v, const Step& s) { return v < s.first; });
    return static_cast<std::size_t>(it - d_.steps.begin()) - 1;
  }

  void start_task(std::uint64_t id) {
    const std::size_t s = step_of(id);
    if (id == d_.steps[s].first && s >= 2) alive_[s - 2].clear();  // as moesim: two steps later
    switch (d_.kind[id]) {
      case Kind::kJoin: worklist_.push_back(id); return;
      case Kind::kExec: {
        sg4::ExecPtr exec = sg4::Exec::init();
        exec->set_host(hosts_[d_.src[id]]);
        exec->set_flops_amount(d_.amount[id]);
        exec->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1));
        exec->start();
        alive_[s].push_back(exec);
        break;
      }
      case Kind::kComm: {
        sg4::CommPtr comm = sg4::Comm::sendto_init(hosts_[d_.src[id]], hosts_[d_.dst[id]]);
        comm->set_payload_size(static_cast<std::uint64_t>(d_.amount[id]));
        comm->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1));
        next_latency_ = d_.latency[id];
        comm->start();
        next_latency_ = 0.0;
        alive_[s].push_back(comm);
        break;
      }
    }
    ++activities_;
  }

  void complete(std::uint64_t first) {
    worklist_.push_back(first);
    if (draining_) return;
    draining_ = true;
    while (!worklist_.empty()) {
      const auto id = worklist_.back();
      worklist_.pop_back();
      for (auto k = succ_begin_[id]; k < succ_begin_[id + 1]; ++k)
        if (--pending_[succ_[k]] == 0) start_task(succ_[k]);
      const std::size_t s = step_of(id);
      if (d_.steps[s].end == id) step_end_time_[s] = sg4::Engine::get_clock();
    }
    draining_ = false;
  }

  const Dump& d_;
  std::vector<sg4::Host*> hosts_;
  std::vector<std::uint32_t> pending_;
  std::vector<std::uint64_t> succ_begin_, succ_;
  std::vector<std::uint64_t> worklist_;
  std::vector<std::vector<sg4::ActivityPtr>> alive_;  // per step: activities the engine may still use
  std::vector<double> step_end_time_;
  std::uint64_t activities_ = 0;
  double next_latency_ = 0.0;  // the latency of the transfer being started
  bool draining_ = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int run(const std::string& path) {
  const auto t0 = std::chrono::steady_clock::now();
  const Dump d = load(path);
  const double parse_wall = seconds_since(t0);
  if (d.steps.empty()) throw BadInput(path + ": expected at least one step record, got none");
  if (d.contention)
    std::fprintf(stderr,
                 "moesim-replay: warning: %s was recorded with contention on; the replay runs the tasks without "
                 "the engine's mid-run slowdowns, so its times differ (dump the ideal timeline to compare)\n",
                 path.c_str());

  const auto t1 = std::chrono::steady_clock::now();
  const std::clock_t c1 = std::clock();
  xbt_log_control_set("root.thres:critical");
  std::vector<std::string> args{"moesim-replay"};
  for (const auto& c : d.cfg) args.push_back("--cfg=" + c);
  // As moesim: the latency-factor setting is not SimGrid's; each transfer's record has its latency.
  try {
    (void)moesim::sim::LatencyFactor::take_from(args);
  } catch (const std::invalid_argument& e) {
    throw BadInput(path + ": " + e.what());
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  sg4::Engine engine(&argc, argv.data());
  Replayer replayer(d);
  replayer.build_platform();
  replayer.start();
  engine.run();
  const double engine_wall = seconds_since(t1);
  // CPU seconds of this process in the engine part: on a shared machine, wall time measures the load.
  const double engine_cpu = static_cast<double>(std::clock() - c1) / CLOCKS_PER_SEC;

  double measured = 0.0, prev = 0.0;
  std::string latencies;
  char buf[64];
  for (std::size_t s = 0; s < d.steps.size(); ++s) {
    const double end = replayer.step_end_times()[s];
    if (end < 0) {
      std::fprintf(stderr, "moesim-replay: %s: step %zu never ended (a dependency was never met)\n", path.c_str(), s);
      return 1;
    }
    std::snprintf(buf, sizeof buf, " %.17g", end - prev);
    latencies += buf;
    if (d.steps[s].measured) measured += end - prev;
    prev = end;
  }
  std::printf("tasks %zu\nactivities %llu\nsteps %zu\n", d.kind.size(),
              static_cast<unsigned long long>(replayer.activities()), d.steps.size());
  std::printf("simulated_end_s %.17g\nmeasured_s %.17g\nstep_latency_s%s\n", sg4::Engine::get_clock(), measured,
              latencies.c_str());
  std::printf("parse_wall_s %.6f\nengine_wall_s %.6f\nengine_cpu_s %.6f\n", parse_wall, engine_wall, engine_cpu);
  if (replayer.activities() != d.declared_activities) {
    std::fprintf(stderr, "moesim-replay: %s: started %llu activities, the dump declares %llu\n", path.c_str(),
                 static_cast<unsigned long long>(replayer.activities()),
                 static_cast<unsigned long long>(d.declared_activities));
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::fprintf(argc == 2 ? stdout : stderr,
                 "usage: moesim-replay DUMP\n"
                 "Replays a file written by `moesim run --dump-activities DUMP` with SimGrid alone and prints\n"
                 "the simulated time (simulated_end_s, measured_s, step_latency_s) and the wall time\n"
                 "(parse_wall_s reading the file, engine_wall_s building the platform and running).\n");
    return argc == 2 ? 0 : 2;
  }
  try {
    return run(argv[1]);
  } catch (const BadInput& e) {
    std::fprintf(stderr, "moesim-replay: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moesim-replay: internal error: %s\n", e.what());
    return 3;
  }
}
