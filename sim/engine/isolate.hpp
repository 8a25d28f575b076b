// Simulations in child processes (SimGrid keeps global state per process, so every simulation runs
// in its own), and the step ranges a long simulation is split into to run in parallel
// (docs/simulator.md, "Steps in parallel").
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/interrupt.hpp"
#include "sim/engine/result.hpp"

namespace moesim::sim {

// The step ranges one simulation is split into (each simulated in its own process, in parallel):
// a fixed function of the step counts, never of the machine, so results are the same everywhere.
// The first range also holds the warmup steps and the timeline's steps.
struct StepRange {
  int first = 0, end = 0;  // [first, end) of the warmup + measured sequence
};
std::vector<StepRange> step_ranges(int warmup_steps, int steps);
// One result from the results of consecutive step ranges, in order: step latencies and the
// timeline concatenated, totals summed, per-step means weighted by measured steps, peaks maxed.
SimResult merge_step_ranges(const std::vector<SimResult>& parts);
// Runs `fn` in a forked child (one SimGrid engine per process) and returns its result; a child that
// fails reports its error message, rethrown here as the same error class.
SimResult run_isolated(const std::function<SimResult()>& fn);
// Runs several in parallel, at most `jobs` children at once; results in the order of `fns`. The
// first failure is rethrown after every started child has ended. `meanwhile`, when given, runs once
// in this process while the first children simulate (work the results need but the children do
// not, such as hashing an input); its error is rethrown the same way.
std::vector<SimResult> run_isolated_all(const std::vector<std::function<SimResult()>>& fns, int jobs,
                                        const std::function<void()>& meanwhile = {});

// A forked child and a fresh temporary file ($TMPDIR/STEM-XXXXXX, default /tmp) for what it writes
// back, registered so that an interruption removes it. Call with interrupts deferred
// (common::DeferInterrupts), so that no moment leaves the file or the child unregistered. In the
// child (pid 0) the interrupt tables are already cleared; it writes to `fd` and ends with _exit.
// Throws RunError where the file or the fork cannot be made.
struct ForkedChild {
  pid_t pid = -1;
  int fd = -1;
  std::string file;
  common::TempRegistration temp;
};
ForkedChild fork_with_file(std::string_view stem);

}  // namespace moesim::sim
