// Collective operations as transfers on the fabric (docs/simulator.md, "Collectives"), sized so
// that an operation alone takes the profile's time for its kind, rank count and size: the engine
// reproduces its own profile (self-consistency, tests/sim/sim_collective_test.cpp).
//   Every operation has a fixed cost F: its curve's time at the smallest tabulated size (kernel
//   launch and synchronisation, next to no bytes). A transfer waits L = max(route latency, F)
//   before its first byte moves and holds no bandwidth meanwhile (Platform::send), so concurrent
//   small operations do not share bandwidth they do not use; the bytes carry the rest, T - L.
//   Ring collectives (all_reduce, all_gather, reduce_scatter) and send_recv: every rank sends one
//   transfer to the next rank of the group; each is sized by the route the engine gives it,
//   bytes = (T - L) x bandwidth, so all of them end at T (ring hops share no link). The
//   table is the truth the transfers are sized to, whatever the fabric: it holds what the
//   collective's algorithm achieves there (multi-path, NVLS), which one route alone cannot show.
//   All-to-all: a rank's transfers to the others leave through its port together; the curve's
//   time T at the operation's size sets the rate they achieve, so every transfer's bytes are scaled
//   by (T - L) x port bandwidth / (the rank's bytes to the others). A dispatch or combine of
//   any traffic matrix is sized the same way from the all-to-all curve at its own size.
// No SimGrid here: the graph builder and the lone-collective command use it.
#pragma once

#include <vector>

#include "models/profile.hpp"
#include "sim/engine/fabric.hpp"

namespace moesim::sim {

struct SizedTransfer {
  int src = 0, dst = 0;
  double bytes = 0.0;  // on the wire, as the engine carries it
  double latency = 0.0;  // s before its first byte moves (Platform::send)
};

struct SizedCollective {
  double target = 0.0;  // s: the profile's time for the operation alone
  std::vector<SizedTransfer> transfers;
};

// The profile's time of `op` over `group` (GPU ids) for `bytes` (nccl-tests' size: the per-rank
// buffer), from its curve for this scope (one node, or several) or, without one, a ring over the
// group's slowest hop.
double collective_target(const Fabric& fabric, const models::Profile& profile, models::CollectiveOp op,
                         const std::vector<int>& group, double bytes);

// Ring collectives and send_recv: one transfer per rank to the next, sized as above.
SizedCollective ring_collective(const Fabric& fabric, const models::Profile& profile, models::CollectiveOp op,
                                const std::vector<int>& group, double bytes);

// The fixed cost F of `op` over `group` (0 without a curve of its scope).
double collective_floor(const Fabric& fabric, const models::Profile& profile, models::CollectiveOp op,
                        const std::vector<int>& group);
// The fixed cost F of an all-to-all on `ranks` ranks of one scope (0 without a curve), for
// alltoall_sizing; it depends on neither size nor traffic, so callers compute it once.
double alltoall_floor(const models::Profile& profile, int ranks, bool one_node);

// How a rank's all-to-all transfers are sized when it sends `off_bytes` in all to the other
// `ranks - 1` ranks of its group (nccl-tests size off_bytes x ranks / (ranks - 1)), over a port of
// `port` figures: each waits `latency` = max(port latency, F = `floor`, alltoall_floor) and its bytes are scaled by
// (T - latency) x bandwidth / off_bytes. The scale is below 1 where the table is faster than one
// port (NCCL's multi-path and NVLS algorithms), above where it is slower; {1, 0} (the links alone,
// at their efficiency, and their latency) where the profile has no all-to-all table for the scope.
struct TransferSizing {
  double scale = 1.0;    // wire bytes per payload byte
  double latency = 0.0;  // s before the first byte moves (0: the route's)
};
TransferSizing alltoall_sizing(const models::Profile& profile, int ranks, bool one_node, double off_bytes,
                               const RouteFigures& port, double floor);

// A uniform all-to-all of `bytes` per rank over `group`: every rank sends bytes / n to each other.
SizedCollective uniform_alltoall(const Fabric& fabric, const models::Profile& profile, const std::vector<int>& group,
                                 double bytes);

}  // namespace moesim::sim
