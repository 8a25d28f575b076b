// Small string helpers used in messages: closest-name suggestions, quoting, joining.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::common {

std::size_t edit_distance(std::string_view a, std::string_view b);
// The candidate closest to `word` if it is close enough to be a plausible typo, else nullopt.
std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates);
// " (did you mean "x"?)" or "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
// An ascending list as ranges, for messages: {0, 2, 5, 6, 7} -> "0, 2, 5..7".
std::string describe_ranges(const std::vector<int>& values);
// Quotes for messages, escaping control characters and cutting long values. Call it qualified
// (common::quoted): unqualified calls on std::string arguments find std::quoted by ADL.
std::string quoted(std::string_view text, std::size_t max_len = 60);

}  // namespace moesim::common
