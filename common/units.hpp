// Values with units, parsed in one place into SI doubles: seconds, bytes, bytes per second, watts,
// hertz. Accepted forms are a number, optional spaces and a unit, e.g. "900GBps", "450 GB/s",
// "400Gbps", "2us", "1.5ms", "700W", "141GiB", "1980MHz". Decimal prefixes (K, M, G, T) are powers of
// 1000, binary ones (Ki, Mi, Gi, Ti) powers of 1024; a lower-case "b" in a rate means bits.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace moesim::common {

enum class UnitKind { kTime, kBytes, kBandwidth, kPower, kFrequency };

// The name used in messages ("a time", "a bandwidth") and an example value ("2us").
std::string_view unit_kind_name(UnitKind kind);
std::string_view unit_kind_example(UnitKind kind);

// Parses `text` as a value of `kind`; returns std::nullopt (never throws) when it is not one,
// including negative, NaN or infinite values and a missing unit.
std::optional<double> parse_unit(std::string_view text, UnitKind kind);

// Formats an SI value with a readable unit ("450 GB/s", "2 us"); for messages and tables only.
std::string format_unit(double value, UnitKind kind);

}  // namespace moesim::common
