// How many simulations run at once and whether each builds its steps ahead follow the CPUs the
// process may use (its affinity mask: taskset, cpusets), not the machine's count; the environment
// overrides both.
#include <doctest/doctest.h>

#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "sim/study/runner.hpp"

using namespace moesim;

namespace {

// Runs `check` in a forked child pinned to CPU `cpu`; the child's exit code is the number of
// failed expectations.
int in_child_on_one_cpu(int (*check)()) {
  const pid_t pid = fork();
  if (pid == 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    cpu_set_t all;
    CPU_ZERO(&all);
    if (sched_getaffinity(0, sizeof all, &all) != 0) _exit(100);
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; ++c)
      if (CPU_ISSET(c, &all)) first = c;
    CPU_SET(first, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) _exit(101);
    _exit(check());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 102;
}

}  // namespace

TEST_CASE("runner: the CPUs of the affinity mask set the simulations at once and building ahead") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  CHECK(sim::usable_cpus() == CPU_COUNT(&set));
  CHECK(in_child_on_one_cpu([] {
          unsetenv("MOESIM_JOBS");
          unsetenv("MOESIM_BUILD_AHEAD");
          int failed = 0;
          failed += sim::usable_cpus() != 1;
          failed += sim::parallel_jobs() != 1;
          failed += sim::build_ahead(1);  // no spare CPU for a builder
          setenv("MOESIM_BUILD_AHEAD", "1", 1);
          failed += !sim::build_ahead(1);
          setenv("MOESIM_JOBS", "3", 1);
          failed += sim::parallel_jobs() != 3;
          return failed;
        }) == 0);
  CHECK(in_child_on_one_cpu([] {
          setenv("MOESIM_BUILD_AHEAD", "0", 1);
          return static_cast<int>(sim::build_ahead(1));
        }) == 0);
  if (CPU_COUNT(&set) >= 2) {
    unsetenv("MOESIM_BUILD_AHEAD");
    CHECK(sim::build_ahead(CPU_COUNT(&set) / 2));
    CHECK_FALSE(sim::build_ahead(CPU_COUNT(&set) / 2 + 1));
  }
}
