#include "common/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

namespace moesim::common {

namespace {

struct UnitSpelling {
  std::string_view name;
  double factor;
};

// Case matters: "b" is a bit, "B" a byte, "m" milli, "M" mega.
constexpr std::array kTimeUnits{UnitSpelling{"s", 1.0}, UnitSpelling{"ms", 1e-3}, UnitSpelling{"us", 1e-6},
                                UnitSpelling{"ns", 1e-9}, UnitSpelling{"min", 60.0}, UnitSpelling{"h", 3600.0}};
constexpr std::array kPowerUnits{UnitSpelling{"W", 1.0}, UnitSpelling{"kW", 1e3}, UnitSpelling{"mW", 1e-3}};
constexpr std::array kFrequencyUnits{UnitSpelling{"Hz", 1.0}, UnitSpelling{"kHz", 1e3}, UnitSpelling{"MHz", 1e6},
                                     UnitSpelling{"GHz", 1e9}};

// Byte-size prefixes: decimal and binary.
constexpr std::array kBytePrefixes{UnitSpelling{"", 1.0},          UnitSpelling{"K", 1e3},
                                   UnitSpelling{"k", 1e3},         UnitSpelling{"M", 1e6},
                                   UnitSpelling{"G", 1e9},         UnitSpelling{"T", 1e12},
                                   UnitSpelling{"Ki", 1024.0},     UnitSpelling{"Mi", 1048576.0},
                                   UnitSpelling{"Gi", 1073741824.0}, UnitSpelling{"Ti", 1099511627776.0}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

template <std::size_t N>
std::optional<double> match(std::string_view unit, const std::array<UnitSpelling, N>& table) {
  for (const auto& u : table)
    if (unit == u.name) return u.factor;
  return std::nullopt;
}

// "GiB", "KB", "B" -> bytes factor.
std::optional<double> byte_factor(std::string_view unit) {
  if (unit.empty() || unit.back() != 'B') return std::nullopt;
  unit.remove_suffix(1);
  return match(unit, kBytePrefixes);
}

// "GBps", "GB/s", "Gbps", "Gb/s", "GiBps" -> bytes per second factor.
std::optional<double> bandwidth_factor(std::string_view unit) {
  std::string_view stem;
  if (unit.ends_with("ps")) {
    stem = unit.substr(0, unit.size() - 2);
  } else if (unit.ends_with("/s")) {
    stem = unit.substr(0, unit.size() - 2);
  } else {
    return std::nullopt;
  }
  if (stem.empty()) return std::nullopt;
  const char last = stem.back();
  if (last != 'B' && last != 'b') return std::nullopt;
  stem.remove_suffix(1);
  auto prefix = match(stem, kBytePrefixes);
  if (!prefix) return std::nullopt;
  return last == 'B' ? *prefix : *prefix / 8.0;
}

}  // namespace

std::string_view unit_kind_name(UnitKind kind) {
  switch (kind) {
    case UnitKind::kTime:
      return "a time";
    case UnitKind::kBytes:
      return "a size";
    case UnitKind::kBandwidth:
      return "a bandwidth";
    case UnitKind::kPower:
      return "a power";
    case UnitKind::kFrequency:
      return "a frequency";
  }
  return "a value";
}

std::string_view unit_kind_example(UnitKind kind) {
  switch (kind) {
    case UnitKind::kTime:
      return "2us";
    case UnitKind::kBytes:
      return "141GiB";
    case UnitKind::kBandwidth:
      return "450GBps";
    case UnitKind::kPower:
      return "700W";
    case UnitKind::kFrequency:
      return "1980MHz";
  }
  return "";
}

std::optional<double> parse_unit(std::string_view text, UnitKind kind) {
  text = trim(text);
  // Split the leading number (decimal or scientific) from the unit.
  std::size_t i = 0;
  if (i < text.size() && text[i] == '+') ++i;
  const std::size_t number_start = i;
  bool digits = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, digits = true;
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i, digits = true;
  }
  if (!digits) return std::nullopt;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    std::size_t j = i + 1;
    if (j < text.size() && (text[j] == '+' || text[j] == '-')) ++j;
    std::size_t exp_start = j;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    if (j > exp_start) i = j;  // else the 'e' belongs to the unit (none of ours starts with e)
  }
  const std::string number(text.substr(number_start, i - number_start));
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (ec != std::errc() || ptr != number.data() + number.size() || !std::isfinite(value)) return std::nullopt;
  const std::string_view unit = trim(text.substr(i));
  if (unit.empty()) return std::nullopt;  // a unit is always required: "450" is ambiguous
  std::optional<double> factor;
  switch (kind) {
    case UnitKind::kTime:
      factor = match(unit, kTimeUnits);
      break;
    case UnitKind::kBytes:
      factor = byte_factor(unit);
      break;
    case UnitKind::kBandwidth:
      factor = bandwidth_factor(unit);
      break;
    case UnitKind::kPower:
      factor = match(unit, kPowerUnits);
      break;
    case UnitKind::kFrequency:
      factor = match(unit, kFrequencyUnits);
      break;
  }
  if (!factor) return std::nullopt;
  const double si = value * *factor;
  if (!std::isfinite(si)) return std::nullopt;
  return si;
}

std::string format_unit(double value, UnitKind kind) {
  struct Step {
    double scale;
    const char* name;
  };
  auto pick = [&](std::initializer_list<Step> steps) {
    const Step* best = steps.begin();
    for (const Step& s : steps)
      if (std::fabs(value) >= s.scale) best = &s;
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g %s", value / best->scale, best->name);
    return std::string(buf);
  };
  switch (kind) {
    case UnitKind::kTime:
      return pick({{1e-9, "ns"}, {1e-6, "us"}, {1e-3, "ms"}, {1.0, "s"}});
    case UnitKind::kBytes:
      return pick({{1.0, "B"}, {1024.0, "KiB"}, {1048576.0, "MiB"}, {1073741824.0, "GiB"}, {1099511627776.0, "TiB"}});
    case UnitKind::kBandwidth:
      return pick({{1.0, "B/s"}, {1e3, "KB/s"}, {1e6, "MB/s"}, {1e9, "GB/s"}, {1e12, "TB/s"}});
    case UnitKind::kPower:
      return pick({{1e-3, "mW"}, {1.0, "W"}, {1e3, "kW"}});
    case UnitKind::kFrequency:
      return pick({{1.0, "Hz"}, {1e3, "kHz"}, {1e6, "MHz"}, {1e9, "GHz"}});
  }
  return std::to_string(value);
}

}  // namespace moesim::common
