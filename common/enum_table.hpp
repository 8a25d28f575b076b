// One table of (value, name) per enum: the single home of its names, read by the config parsers,
// the result writers and readers, and the messages that list the valid names.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::common {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

// The name of `value` ("?" for a value missing from the table, which a test rules out).
template <typename E>
std::string enum_name(std::span<const EnumName<E>> table, E value) {
  for (const auto& e : table)
    if (e.value == value) return e.name;
  return "?";
}

template <typename E>
std::optional<E> enum_from_name(std::span<const EnumName<E>> table, std::string_view name) {
  for (const auto& e : table)
    if (name == e.name) return e.value;
  return std::nullopt;
}

template <typename E>
std::vector<std::string> enum_names(std::span<const EnumName<E>> table) {
  std::vector<std::string> out;
  for (const auto& e : table) out.emplace_back(e.name);
  return out;
}

}  // namespace moesim::common
