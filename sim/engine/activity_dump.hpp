// The activities of one simulation written as text for moesim-replay (bench/replay/FORMAT.md): the
// SimGrid configuration and platform as built, then every task of every step with its dependencies.
// Written as the steps are built (buffered, a step at a time), so memory stays flat; the file appears
// atomically at finish(). Units: flops (host speed in flops/s), bytes, bytes/s, seconds.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/files.hpp"
#include "sim/engine/platform.hpp"

namespace moesim::sim {

inline constexpr int kActivityDumpVersion = 3;

class ActivityDump {
 public:
  // Replaces an existing file at `path` (the CLI checks --force before the run starts).
  ActivityDump(const std::string& path, bool contention, const std::vector<std::string>& simgrid_cfg);
  // Every host of the platform, the links its routes use (split-duplex links as their two
  // directional halves) and the route of every ordered host pair.
  void write_platform(const Platform& platform);
  void begin_step(int index, bool measured, std::uint64_t first_id, std::uint64_t tasks, std::uint64_t end_id);
  void exec(std::uint64_t id, int host, double flops, std::span<const std::uint64_t> deps);
  void comm(std::uint64_t id, int src, int dst, std::uint64_t bytes, double latency,
            std::span<const std::uint64_t> deps);
  void join(std::uint64_t id, std::span<const std::uint64_t> deps);
  // Writes the trailer and renames the file into place; throws RunError on an I/O failure.
  void finish(std::uint64_t tasks, std::uint64_t activities);

 private:
  void put(std::uint64_t v);
  void put(double v);
  void put_list(std::span<const std::uint64_t> values);  // count, values, end of line
  void flush_if_full();

  common::AtomicFile file_;
  std::string buf_;
};

}  // namespace moesim::sim
