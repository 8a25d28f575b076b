// moesim-ptask-phase: one all-to-all dispatch phase simulated four ways, to compare candidate fast
// paths with exact max-min sharing (docs/simulator.md, "Scale"; bench/ptask_bench.sh runs it).
//
//   moesim-ptask-phase MODEL GPUS TOKENS_PER_GPU ZIPF SEED OUT
//
// The phase: GPUS GPUs in nodes of 8 (NVLink inside a node, one NIC per GPU between nodes, a
// non-blocking network), DeepSeek-V3's shape (256 experts placed contiguously, top-8, 7,392-byte FP8
// tokens), tokens routed by a Zipf popularity of exponent ZIPF over the experts (0: uniform), one
// transfer per (source, destination GPU) carrying the tokens that chose an expert there, all ready
// at time 0, no latency. Each GPU has an NVLink port (0.82 x 450 GB/s per direction) and a NIC port
// (0.97 x 50 GB/s per direction); a transfer inside a node crosses the source's NVLink up and the
// destination's NVLink down, one across nodes the two NIC ports.
//
// MODEL:
//   flows       SimGrid, one communication per transfer (max-min sharing; what network.fidelity:
//               flow runs);
//   fluid       moesim's own exact max-min network (sim/engine/fluid_network.hpp; what fluid runs);
//   ptask-rows  SimGrid's parallel-task model (host/model:ptask_L07), one parallel task per source
//               GPU holding its row of the bytes matrix: a task's transfers all move at one rate;
//   ptask-phase the same, one parallel task for the whole phase.
// OUT gets one line per destination GPU: when its last byte arrived (s). Standard output: the model,
// transfers, CPU s of the simulation (after the phase is built) and the phase's end.
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sim/engine/fluid_network.hpp"

namespace sg4 = simgrid::s4u;

namespace {

constexpr int kPerNode = 8;
constexpr int kExperts = 256;
constexpr int kTopK = 8;
constexpr double kToken = 7168.0 * (1.0 + 4.0 / 128.0);
constexpr double kNvlink = 450e9 * 0.82;
constexpr double kNic = 50e9 * 0.97;

struct Transfer {
  int src = 0, dst = 0;
  double bytes = 0.0;
};

std::vector<Transfer> routing(int gpus, int tokens, double zipf, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> pop(kExperts);
  for (int e = 0; e < kExperts; ++e) pop[static_cast<std::size_t>(e)] = 1.0 / std::pow(e + 1.0, zipf);
  std::shuffle(pop.begin(), pop.end(), rng);
  std::vector<double> count(static_cast<std::size_t>(gpus) * static_cast<std::size_t>(gpus), 0.0);
  const int per_gpu = std::max(1, kExperts / gpus);
  for (int s = 0; s < gpus; ++s)
    for (int t = 0; t < tokens; ++t) {
      std::vector<double> w = pop;
      std::vector<char> hit(static_cast<std::size_t>(gpus), 0);
      for (int k = 0; k < kTopK; ++k) {  // top-8 without replacement, by popularity
        std::discrete_distribution<int> pick(w.begin(), w.end());
        const int e = pick(rng);
        w[static_cast<std::size_t>(e)] = 0.0;
        const int d = std::min(gpus - 1, e / per_gpu);
        if (d != s && !hit[static_cast<std::size_t>(d)]) {
          hit[static_cast<std::size_t>(d)] = 1;
          count[static_cast<std::size_t>(s) * static_cast<std::size_t>(gpus) + static_cast<std::size_t>(d)] += 1.0;
        }
      }
    }
  std::vector<Transfer> out;
  for (int s = 0; s < gpus; ++s)
    for (int d = 0; d < gpus; ++d) {
      const double c = count[static_cast<std::size_t>(s) * static_cast<std::size_t>(gpus) + static_cast<std::size_t>(d)];
      if (c > 0.0) out.push_back({s, d, c * kToken});
    }
  return out;
}

bool same_node(int a, int b) { return a / kPerNode == b / kPerNode; }

double cpu_seconds() { return static_cast<double>(std::clock()) / CLOCKS_PER_SEC; }

std::vector<double> run_fluid(int gpus, const std::vector<Transfer>& xs, double& cpu) {
  // Links: NVLink up, NVLink down, NIC up, NIC down of each GPU.
  std::vector<double> cap;
  for (int g = 0; g < gpus; ++g) cap.insert(cap.end(), {kNvlink, kNvlink, kNic, kNic});
  const double start = cpu_seconds();
  moesim::sim::FluidNetwork net(cap);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Transfer& x = xs[i];
    const int off = same_node(x.src, x.dst) ? 0 : 2;
    const int route[2] = {4 * x.src + off, 4 * x.dst + off + 1};
    net.start(0.0, 0.0, x.bytes, route, i);
  }
  std::vector<double> arrival(static_cast<std::size_t>(gpus), 0.0);
  std::vector<std::uint64_t> done;
  for (double t = net.next_event(); t < moesim::sim::FluidNetwork::kNever; t = net.next_event()) {
    done.clear();
    net.advance(t, done);
    for (const std::uint64_t i : done) {
      double& a = arrival[static_cast<std::size_t>(xs[i].dst)];
      a = std::max(a, t);
    }
  }
  cpu = cpu_seconds() - start;
  return arrival;
}

std::vector<double> run_simgrid(const std::string& model, int gpus, const std::vector<Transfer>& xs, double& cpu,
                                int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  // The engine's settings (sim/engine/engine.cpp): no bandwidth or latency factors, no TCP window,
  // no cross traffic.
  if (model == "flows")
    args.insert(args.end(), {"--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0"});
  else
    args.insert(args.end(), {"--cfg=host/model:ptask_L07", "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0"});
  args.emplace_back("--log=root.thres:critical");
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  int n = static_cast<int>(cargs.size());
  sg4::Engine engine(&n, cargs.data());
  auto* zone = sg4::create_full_zone("phase");
  std::vector<sg4::Host*> hosts;
  std::vector<sg4::Link*> nvl, nic;
  for (int g = 0; g < gpus; ++g) {
    hosts.push_back(zone->create_host("gpu" + std::to_string(g), 1e12)->seal());
    nvl.push_back(zone->create_split_duplex_link("nvl" + std::to_string(g), kNvlink)->seal());
    nic.push_back(zone->create_split_duplex_link("nic" + std::to_string(g), kNic)->seal());
  }
  using Dir = sg4::LinkInRoute::Direction;
  for (int a = 0; a < gpus; ++a)
    for (int b = 0; b < gpus; ++b) {
      if (a == b) continue;
      const auto& l = same_node(a, b) ? nvl : nic;
      const std::vector<sg4::LinkInRoute> route{{l[static_cast<std::size_t>(a)], Dir::UP},
                                                {l[static_cast<std::size_t>(b)], Dir::DOWN}};
      zone->add_route(hosts[static_cast<std::size_t>(a)]->get_netpoint(), hosts[static_cast<std::size_t>(b)]->get_netpoint(),
                      nullptr, nullptr, route, false);
    }
  zone->seal();
  std::vector<double> arrival(static_cast<std::size_t>(gpus), 0.0);
  double start = 0.0;
  sg4::Actor::create("driver", hosts[0], [&] {
    start = cpu_seconds();
    if (model == "flows") {
      std::vector<sg4::CommPtr> comms;
      for (const Transfer& x : xs)
        comms.push_back(sg4::Comm::sendto_async(hosts[static_cast<std::size_t>(x.src)], hosts[static_cast<std::size_t>(x.dst)],
                                                static_cast<std::uint64_t>(x.bytes)));
      std::vector<int> dst_of;
      for (const Transfer& x : xs) dst_of.push_back(x.dst);
      while (!comms.empty()) {
        const auto i = static_cast<std::size_t>(sg4::Comm::wait_any(comms));
        double& a = arrival[static_cast<std::size_t>(dst_of[i])];
        a = std::max(a, sg4::Engine::get_clock());
        comms.erase(comms.begin() + static_cast<std::ptrdiff_t>(i));
        dst_of.erase(dst_of.begin() + static_cast<std::ptrdiff_t>(i));
      }
      return;
    }
    // Parallel tasks: one per source row (ptask-rows) or one for the phase; each over the hosts it
    // touches, its bytes matrix in their order.
    std::vector<std::vector<Transfer>> groups;
    if (model == "ptask-rows") {
      groups.resize(static_cast<std::size_t>(gpus));
      for (const Transfer& x : xs) groups[static_cast<std::size_t>(x.src)].push_back(x);
    } else {
      groups.push_back(xs);
    }
    std::vector<sg4::ExecPtr> execs;
    std::vector<std::vector<int>> receivers;
    for (const auto& grp : groups) {
      if (grp.empty()) continue;
      std::vector<int> members;
      for (const Transfer& x : grp) members.insert(members.end(), {x.src, x.dst});
      std::sort(members.begin(), members.end());
      members.erase(std::unique(members.begin(), members.end()), members.end());
      const std::size_t m = members.size();
      auto index = [&](int g) { return static_cast<std::size_t>(std::lower_bound(members.begin(), members.end(), g) - members.begin()); };
      std::vector<sg4::Host*> hs;
      for (int g : members) hs.push_back(hosts[static_cast<std::size_t>(g)]);
      std::vector<double> bytes(m * m, 0.0);
      std::vector<int> to;
      for (const Transfer& x : grp) {
        bytes[index(x.src) * m + index(x.dst)] += x.bytes;
        to.push_back(x.dst);
      }
      execs.push_back(sg4::this_actor::exec_init(hs, std::vector<double>(m, 0.0), bytes));
      execs.back()->start();
      receivers.push_back(std::move(to));
    }
    while (!execs.empty()) {
      const auto i = static_cast<std::size_t>(sg4::Exec::wait_any(execs));
      for (int d : receivers[i]) {
        double& a = arrival[static_cast<std::size_t>(d)];
        a = std::max(a, sg4::Engine::get_clock());
      }
      execs.erase(execs.begin() + static_cast<std::ptrdiff_t>(i));
      receivers.erase(receivers.begin() + static_cast<std::ptrdiff_t>(i));
    }
  });
  engine.run();
  cpu = cpu_seconds() - start;
  return arrival;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: moesim-ptask-phase flows|fluid|ptask-rows|ptask-phase GPUS TOKENS_PER_GPU ZIPF SEED OUT\n";
    return 2;
  }
  const std::string model = argv[1];
  const int gpus = std::stoi(argv[2]);
  const int tokens = std::stoi(argv[3]);
  const double zipf = std::stod(argv[4]);
  const auto seed = static_cast<unsigned>(std::stoul(argv[5]));
  if (gpus < 2 || gpus % kPerNode != 0 || tokens < 1 ||
      (model != "flows" && model != "fluid" && model != "ptask-rows" && model != "ptask-phase")) {
    std::cerr << "moesim-ptask-phase: expected a model of flows, fluid, ptask-rows, ptask-phase, GPUS a multiple of 8 "
                 "and at least one token per GPU\n";
    return 2;
  }
  const std::vector<Transfer> xs = routing(gpus, tokens, zipf, seed);
  double cpu = 0.0;
  const std::vector<double> arrival =
      model == "fluid" ? run_fluid(gpus, xs, cpu) : run_simgrid(model, gpus, xs, cpu, 1, argv);
  std::ofstream out(argv[6]);
  out.precision(17);
  for (double a : arrival) out << a << "\n";
  if (!out) {
    std::cerr << "moesim-ptask-phase: cannot write " << argv[6] << "\n";
    return 1;
  }
  std::printf("%s %zu %.3f %.9g\n", model.c_str(), xs.size(), cpu, *std::max_element(arrival.begin(), arrival.end()));
  return 0;
}
