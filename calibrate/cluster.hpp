// Calibrating a cluster: one moesim-calibrate per GPU, started by a launcher (Slurm's srun, Open MPI's
// mpirun, torchrun or anything that sets RANK/WORLD_SIZE). `detect_launch` reads who this process is
// from the launcher's variables; `Cluster` joins the processes over plain TCP (rank 0 listens on
// MASTER_ADDR:MASTER_PORT, every other rank connects to it) and carries barriers, NCCL's unique ids,
// the ranks' results and aborts. Every connect and every receive has a deadline (seconds): a rank that
// dies, hangs or never starts makes the others stop with a message naming it, never wait forever.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.hpp"

namespace moesim::calibrate {

// Where a process sits in the job. launcher: "env" (RANK/WORLD_SIZE, as torchrun sets them),
// "openmpi", "slurm", or "none" (a single process: world 1).
struct LaunchInfo {
  std::string launcher = "none";
  int rank = 0;
  int world = 1;
  int local_rank = 0;  // picks the GPU when the process sees several
  std::string node;    // node identity (SLURM_NODEID, GROUP_RANK), empty: the host name
  std::string master_addr;
  int master_port = 0;
  std::string master_from;  // the variable(s) the address came from, for messages
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_environment();
// `launcher`: "auto" (RANK/WORLD_SIZE, then OMPI_COMM_WORLD_*, then SLURM_PROCID/SLURM_NTASKS, else
// none) or one of env, openmpi, slurm, none. UsageError (exit 2) for a missing or malformed variable:
// WORLD_SIZE=0, RANK >= WORLD_SIZE, no MASTER_ADDR where one is needed, a port outside 1..65535.
LaunchInfo detect_launch(const EnvLookup& env, std::string_view launcher);
// The first host of a Slurm host list: "gpu[07-09,12],login1" -> "gpu07".
std::string first_slurm_host(std::string_view nodelist);

// Another rank died, hung or failed, or this one could not join. exit_code: what this process should
// return (1, or the failing rank's own code when it reported one, e.g. 2 for its bad input).
class ClusterError : public common::RunError {
 public:
  ClusterError(const std::string& message, int exit_code = common::kExitRunFailure)
      : common::RunError(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

struct RankInfo {
  int rank = 0;
  int local_rank = 0;
  std::string node;  // node identity: the launcher's, else the host name
  std::string host;
  long pid = 0;
};

class Cluster {
 public:
  // Joins the job: rank 0 accepts the other world-1 ranks, the others connect (retrying until the
  // deadline). `fingerprint` (the options that shape the plan) must be equal on every rank.
  // `timeout`: seconds for connecting and for each wait on another rank; the other ranks wait twice as
  // long for rank 0, so that rank 0, which sees everyone, names the culprit.
  static std::unique_ptr<Cluster> join(const LaunchInfo& launch, double timeout, const std::string& fingerprint);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  int rank() const { return rank_; }
  int world() const { return static_cast<int>(ranks_.size()); }
  const std::vector<RankInfo>& ranks() const { return ranks_; }
  // Nodes numbered by first appearance in rank order (rank 0's node is 0).
  std::vector<int> node_of_rank() const;
  int node_count() const;
  double timeout() const { return timeout_; }
  std::string where(int rank) const;  // "rank 2 (host h, pid 123)"

  // Every rank reaches `label`; ranks at different labels run different plans: an error naming them.
  void barrier(const std::string& label);
  // Rank 0's bytes on every rank.
  std::string broadcast(const std::string& from_rank0);
  // The largest value over the ranks, on every rank.
  double max(double value);
  // Rank 0: every rank's bytes, by rank (its own included). Others: empty.
  std::vector<std::string> gather(const std::string& mine);
  // Rank 0 tells the others the run succeeded; the others wait for it.
  void finish();
  // Tells the others this run stops (best effort, never throws): rank 0 tells every rank, another rank
  // tells rank 0, which passes it on.
  void abort(int exit_code, const std::string& message) noexcept;

 private:
  Cluster() = default;
  struct Message;
  void send(int peer, int type, const std::string& payload);
  Message receive(int peer, double seconds, const std::string& doing);
  std::vector<std::string> collect(int type, const std::string& mine, const std::string& doing);
  void send_all(int type, const std::string& payload);

  int rank_ = 0;
  double timeout_ = 300.0;
  std::vector<RankInfo> ranks_;
  std::vector<int> fds_;  // rank 0: one socket per rank (-1 for itself); others: fds_[0] to rank 0
  bool aborted_ = false;
  bool abort_received_ = false;
};

// Bounds a step that waits on other ranks inside the device (an NCCL call): when a step lasts longer
// than `timeout` seconds, `on_expire(step)` runs on the watchdog's thread (it aborts the
// communication, which makes the device call fail), and `last_resort(step)` after `grace` more.
class StepWatchdog {
 public:
  StepWatchdog(double timeout, double grace, std::function<void(const std::string&)> on_expire,
               std::function<void(const std::string&)> last_resort);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;
  void arm(const std::string& step);
  void disarm();
  bool expired() const;
  std::string expired_step() const;

 private:
  void loop();
  double timeout_, grace_;
  std::function<void(const std::string&)> on_expire_, last_resort_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::string step_;
  bool armed_ = false, stop_ = false, expired_ = false;
  unsigned long generation_ = 0;
  std::string expired_step_;
  std::thread thread_;
};

}  // namespace moesim::calibrate
