// The collective operations of nccl-tests: profile tables, contention grids, the simulator's
// transfers and moesim-calibrate's NCCL runs. Their names are the profile files' keys.
#pragma once

#include <array>
#include <string>

#include "common/enum_table.hpp"

namespace moesim::models {

enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv };
inline constexpr std::array<common::EnumName<CollectiveOp>, 5> kCollectiveOps{
    {{CollectiveOp::kAllReduce, "all_reduce"},
     {CollectiveOp::kAllGather, "all_gather"},
     {CollectiveOp::kReduceScatter, "reduce_scatter"},
     {CollectiveOp::kAllToAll, "all_to_all"},
     {CollectiveOp::kSendRecv, "send_recv"}}};
inline std::string collective_op_name(CollectiveOp op) { return common::enum_name<CollectiveOp>(kCollectiveOps, op); }

}  // namespace moesim::models
