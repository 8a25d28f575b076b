// The element types of a model's weights and activations and of a profile's GEMM tables. Their names
// are the config and profile files' spellings; an architecture takes every one but tf32 (a GEMM mode
// of fp32 data, not a storage type).
#pragma once

#include <array>
#include <string>

#include "common/enum_table.hpp"

namespace moesim::models {

enum class Dtype { kBf16, kFp16, kFp8, kFp32, kTf32 };
inline constexpr std::array<common::EnumName<Dtype>, 5> kDtypes{
    {{Dtype::kBf16, "bf16"},
     {Dtype::kFp16, "fp16"},
     {Dtype::kFp8, "fp8"},
     {Dtype::kFp32, "fp32"},
     {Dtype::kTf32, "tf32"}}};
inline std::string dtype_name(Dtype dtype) { return common::enum_name<Dtype>(kDtypes, dtype); }

}  // namespace moesim::models
