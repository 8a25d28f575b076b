#include "sim/engine/engine.hpp"

#include <simgrid/s4u.hpp>
#include <simgrid/version.h>
#include <xbt/log.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>

#include "common/error.hpp"
#include "models/costs.hpp"
#include "sim/engine/activity_dump.hpp"
#include "sim/engine/executor.hpp"
#include "sim/engine/graph_builder.hpp"
#include "sim/engine/platform.hpp"
#include "sim/engine/step_builder.hpp"

namespace moesim::sim {

namespace {

namespace sg4 = simgrid::s4u;

// Exact "latency + bytes / bandwidth" transfers (TOOLCHAIN.md): CM02 without TCP's gamma and
// without cross-traffic, then the scenario's own settings.
std::vector<std::string> engine_args(const EngineOptions& options) {
  std::vector<std::string> args{"moesim", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                                "--cfg=network/crosstraffic:0"};
  for (const auto& c : options.simgrid_cfg) args.push_back("--cfg=" + c);
  return args;
}

ExecutorSetup executor_setup(const EngineInput& in) {
  ExecutorSetup setup;
  const auto& profile = *in.profile;
  setup.power_factor = models::clock_power_factor(profile, in.options.clock_limit);
  setup.power_cap = in.options.power_cap;
  auto watts = [&](models::GpuState st) {
    const double w = models::state_power(profile, st, in.arch->dtype, 0.0) * setup.power_factor;
    return setup.power_cap > 0 ? std::min(w, setup.power_cap) : w;
  };
  setup.idle_watts = watts(models::GpuState::kIdle);
  setup.comm_watts = watts(models::GpuState::kComm);
  const int all_steps = in.options.warmup_steps + in.options.steps;
  setup.total_steps = in.options.end_step < 0 ? all_steps : std::min(in.options.end_step, all_steps);
  setup.first_step = std::clamp(in.options.first_step, 0, setup.total_steps);
  return setup;
}

}  // namespace

std::string simgrid_version() {
  return std::to_string(SIMGRID_VERSION_MAJOR) + "." + std::to_string(SIMGRID_VERSION_MINOR);
}

SimResult simulate(const EngineInput& in) {
  const auto wall0 = std::chrono::steady_clock::now();
  xbt_log_control_set("root.thres:critical");
  std::vector<std::string> args = engine_args(in.options);
  LatencyFactor latency_factor;
  try {
    latency_factor = LatencyFactor::take_from(args);
  } catch (const std::invalid_argument& e) {
    throw common::InputError(std::string(e.what()) + " (--cfg or the study's simgrid list)");
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  argv.push_back(nullptr);
  sg4::Engine engine(&argc, argv.data());

  const int gpus = in.ep * in.tp;
  if (gpus > in.cluster->total_gpus())
    throw common::InputError("EP x TP = " + std::to_string(gpus) + " GPUs, but cluster " + in.cluster->name + " has " +
                             std::to_string(in.cluster->total_gpus()));
  if (in.options.dispatch == DispatchMode::kLowLatency && !models::has_source(in.profile->low_latency.provenance))
    throw common::InputError("dispatch.mode low_latency needs the fixed costs of the low-latency kernels, and profile " +
                             in.profile->name +
                             " has no low_latency_kernels section: add one (docs/profile-format.md) or choose "
                             "dispatch.mode flat or hierarchical");
  if (in.options.dispatch == DispatchMode::kResidence) {
    const WorkloadMode mode = in.workload ? in.workload->mode : WorkloadMode::kSynthetic;
    if (mode != WorkloadMode::kPrefill && mode != WorkloadMode::kDecode)
      throw common::InputError("dispatch.mode residence keeps each token on the GPU of its experts between the layers "
                               "of an inference step, and workload.mode is " + workload_mode_name(mode) +
                               ": choose dispatch.mode flat, hierarchical or low_latency, or workload.mode prefill or "
                               "decode");
    if (in.options.micro_batches > 1)
      throw common::InputError("dispatch.mode residence moves each token's attention to the GPU of its experts, which "
                               "two-batch overlap (overlap.policy tbo) does not model: choose another overlap.policy "
                               "or dispatch.mode");
  }
  const ExecutorSetup setup = executor_setup(in);
  const int measured_steps = setup.total_steps - std::max(setup.first_step, in.options.warmup_steps);
  if (setup.first_step >= setup.total_steps || measured_steps <= 0)
    throw common::RunError("step range [" + std::to_string(in.options.first_step) + ", " +
                           std::to_string(setup.total_steps) + ") holds no measured step");
  // A power cap and a clock limit both slow compute; the slower of the two binds, the cap's per task
  // by what the task draws (GraphBuilder). They scale task amounts, not the hosts' speed.
  const double clock_speed = models::clock_speed_factor(*in.profile, in.options.clock_limit);
  const Fabric fabric(*in.cluster, *in.profile);
  // The fluid network shares links as SimGrid's flows do under the engine's own settings; any other
  // SimGrid setting of the study keeps SimGrid's flows (docs/simulator.md, "Network fidelity").
  const std::size_t own_settings = engine_args(EngineOptions{}).size();
  const bool own_settings_only = args.size() == own_settings;
  const bool own_network =
      in.options.fidelity == NetworkFidelity::kFluid || in.options.fidelity == NetworkFidelity::kPorts;
  if (own_network && !own_settings_only) {
    std::string settings;
    for (std::size_t i = own_settings; i < args.size(); ++i)
      settings += (settings.empty() ? "" : ", ") + args[i].substr(6);
    throw common::InputError("network.fidelity " + network_fidelity_name(in.options.fidelity) +
                             " moves transfers in the engine's fluid network, which reads "
                             "no SimGrid setting (got " + settings +
                             "): remove them from simgrid, or choose network.fidelity flow (SimGrid's flows) or auto");
  }
  const Transfers transfers =
      own_network || (in.options.fidelity == NetworkFidelity::kAuto && own_settings_only)
          ? Transfers::kFluid
          : Transfers::kSimGrid;
  const bool dumping = !in.options.dump_activities.empty();
  Platform platform(fabric, latency_factor, in.options.prune_routes, transfers, dumping);
  // Port phases: asked for, or chosen by auto where they fit (docs/simulator.md, "Port phases").
  bool port_phases = false;
  if (in.options.fidelity == NetworkFidelity::kPorts) {
    if (in.options.dispatch == DispatchMode::kHierarchical || in.options.dispatch == DispatchMode::kResidence)
      throw common::InputError("network.fidelity ports moves flat and low-latency all-to-alls as port phases, and "
                               "dispatch.mode is " + dispatch_mode_name(in.options.dispatch) +
                               " (its transfers are kept): choose network.fidelity auto or fluid, or dispatch.mode "
                               "flat or low_latency");
    if (!platform.port_phases_fit())
      throw common::InputError("network.fidelity ports needs a cluster whose routes are limited only at their ends (GPU "
                               "ports and NICs), and cluster " + in.cluster->name +
                               " has a link between them that can limit a transfer (an NVLink mesh, or a switch, "
                               "spine or fat-tree uplink of finite bandwidth): choose network.fidelity auto or fluid");
    if (dumping)
      throw common::InputError("the activity dump records every transfer of a step, and network.fidelity ports moves "
                               "all-to-alls as port phases: dump with network.fidelity fluid or flow");
    port_phases = true;
  } else if (in.options.fidelity == NetworkFidelity::kAuto && platform.fluid() && !dumping &&
             platform.port_phases_fit()) {
    port_phases = auto_port_phases(in.options.dispatch, in.ep * in.tp);
  }
  double tolerance = 0.0;  // SimGrid's flows are exact
  if (platform.fluid()) {
    // Port phases leave the network few flows, one per GPU end: nothing for epochs to gain.
    tolerance = in.options.network_tolerance != kAutoTolerance ? in.options.network_tolerance
                : port_phases                                  ? 0.0
                                                               : auto_network_tolerance(in.options.dispatch, in.ep * in.tp);
    platform.set_network_tolerance(tolerance);
  }
  std::unique_ptr<ActivityDump> dump;
  if (dumping) {
    std::vector<std::string> cfg(args.begin() + 1, args.end());
    for (auto& c : cfg) c.erase(0, 6);  // "--cfg="
    dump = std::make_unique<ActivityDump>(in.options.dump_activities, in.options.contention, cfg);
    dump->write_platform(platform);
  }

  const LayerTable layers = make_layer_table(in);
  GraphBuilder graphs(in, layers, fabric, clock_speed);
  graphs.set_port_phases(port_phases);
  graphs.skip(setup.first_step);
  // Declared after the graph builder: destroyed first, so that its thread stops before the state it
  // builds from goes.
  StepBuilder builder([&graphs](StepGraph& g) { graphs.build_next(g); }, setup.total_steps - setup.first_step,
                      in.options.build_ahead);
  Executor executor(in, layers, platform, builder, dump.get(), setup);
  executor.start();
  engine.run();
  SimResult result = executor.finish(measured_steps);
  result.network_tolerance = tolerance;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  return result;
}

bool auto_port_phases(DispatchMode dispatch, int ep_ranks) {
  return (dispatch == DispatchMode::kFlat || dispatch == DispatchMode::kLowLatency) && ep_ranks >= kAutoPortRanks;
}

double auto_network_tolerance(DispatchMode dispatch, int ep_ranks) {
  const bool one_part = dispatch == DispatchMode::kFlat || dispatch == DispatchMode::kLowLatency ||
                        dispatch == DispatchMode::kResidence;
  return one_part && ep_ranks >= kAutoEpochRanks ? kAutoEpochTolerance : 0.0;
}

}  // namespace moesim::sim
