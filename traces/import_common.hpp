// Helpers shared by the importers (internal to traces/): layer-list text for messages, the input's
// short name for a trace's `source`, and strict integer and number parsing of text fields.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "traces/trace.hpp"

namespace moesim::traces::detail {

// "1..26" for a contiguous list, else "0, 3, 7".
std::string layers_text(const std::vector<int>& layers);
// The last component of a path, without a trailing slash ("deepseek-v2-lite-intent").
std::string short_name(const std::string& path);
// Index of decoder layer `layer` in `shape.layers`, or -1.
int layer_index(const TraceShape& shape, std::int64_t layer);

// A whole text field as an integer; nullopt with `why` set when it is not one (or out of int64).
std::optional<std::int64_t> parse_int(std::string_view text, std::string& why);
// A whole text field as a finite float; nullopt with `why` set otherwise.
std::optional<float> parse_weight(std::string_view text, std::string& why);

}  // namespace moesim::traces::detail
