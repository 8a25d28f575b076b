#include "common/strings.hpp"

#include <algorithm>
#include <cstdio>

namespace moesim::common {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::optional<std::string> closest_match(std::string_view word, const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const auto& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (!best || d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  // A plausible typo: at most a third of the word's letters changed (at least 2 allowed), or a prefix.
  if (best) {
    const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
    const bool prefix = word.size() >= 3 && best->starts_with(word);
    if (best_distance > limit && !prefix) return std::nullopt;
  }
  return best;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  auto m = closest_match(word, candidates);
  return m ? " (did you mean \"" + *m + "\"?)" : std::string();
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string describe_ranges(const std::vector<int>& values) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < values.size();) {
    std::size_t j = i;
    while (j + 1 < values.size() && values[j + 1] == values[j] + 1) ++j;
    parts.push_back(j == i ? std::to_string(values[i]) : std::to_string(values[i]) + ".." + std::to_string(values[j]));
    i = j + 1;
  }
  return join(parts, ", ");
}

std::string quoted(std::string_view text, std::size_t max_len) {
  std::string out = "\"";
  std::size_t n = 0;
  for (char ch : text) {
    if (n++ >= max_len) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  out += '"';
  return out;
}

}  // namespace moesim::common
