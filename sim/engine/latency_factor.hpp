// SimGrid's `network/latency-factor` setting, applied by moesim itself. The engine sets each
// transfer's latency through SimGrid's latency-factor callback (Platform::send), and SimGrid refuses
// the callback together with the setting, so a study's `--cfg=network/latency-factor:V` is taken out
// of SimGrid's arguments and its factor applied to the route's latency by the callback instead.
// Header-only (moesim-replay uses it too). V is SimGrid's form: one factor ("10"), or ranges
// "SIZE:FACTOR;SIZE:FACTOR;..." by increasing message size (a message takes the factor of the last
// range whose SIZE it reaches; below the first: 1).
#pragma once

#include <charconv>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moesim::sim {

class LatencyFactor {
 public:
  static constexpr std::string_view kSetting = "network/latency-factor";

  // nullopt when `value` is not in SimGrid's form (or a factor is negative).
  static std::optional<LatencyFactor> parse(std::string_view value) {
    LatencyFactor f;
    auto number = [](std::string_view s, double& out) {
      const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
      return r.ec == std::errc() && r.ptr == s.data() + s.size();
    };
    if (value.find(':') == std::string_view::npos) {
      double v = 0.0;
      if (!number(value, v) || v < 0.0) return std::nullopt;
      f.ranges_.emplace_back(0.0, v);
      return f;
    }
    while (!value.empty()) {
      const auto end = value.find(';');
      const std::string_view item = value.substr(0, end);
      const auto colon = item.find(':');
      double size = 0.0, v = 0.0;
      if (colon == std::string_view::npos || !number(item.substr(0, colon), size) ||
          !number(item.substr(colon + 1), v) || v < 0.0 || (!f.ranges_.empty() && size <= f.ranges_.back().first))
        return std::nullopt;
      f.ranges_.emplace_back(size, v);
      if (end == std::string_view::npos) break;
      value.remove_prefix(end + 1);
    }
    if (f.ranges_.empty()) return std::nullopt;
    return f;
  }

  bool is_identity() const { return ranges_.empty(); }  // no setting: every factor 1

  // The factor SimGrid's latency callback returns for a transfer of `size` bytes over a route of
  // `route_latency` s that asks for `wanted` s in all (0: none): the setting's factor, or more so
  // that the transfer waits `wanted` (never less than the factored route latency).
  double callback_factor(double size, double route_latency, double wanted) const {
    const double factor = at(size);
    if (wanted <= 0.0 || route_latency <= 0.0) return factor;
    return wanted > route_latency * factor ? wanted / route_latency : factor;
  }

  double at(double size) const {
    double v = 1.0;
    for (const auto& [from, factor] : ranges_)
      if (size >= from) v = factor;
    return v;
  }

  // Takes `--cfg=network/latency-factor:V` settings out of `args` (SimGrid's command line); the last
  // one wins, as in SimGrid. Throws std::invalid_argument naming the setting when V is not valid.
  static LatencyFactor take_from(std::vector<std::string>& args) {
    LatencyFactor out;
    const std::string prefix = "--cfg=" + std::string(kSetting) + ":";
    for (auto it = args.begin(); it != args.end();) {
      if (it->rfind(prefix, 0) != 0) {
        ++it;
        continue;
      }
      const std::string value = it->substr(prefix.size());
      auto f = parse(value);
      if (!f)
        throw std::invalid_argument("SimGrid setting " + std::string(kSetting) + ":" + value +
                                    ": expected a factor >= 0 or ranges \"SIZE:FACTOR;SIZE:FACTOR\" by increasing size");
      out = *f;
      it = args.erase(it);
    }
    return out;
  }

 private:
  std::vector<std::pair<double, double>> ranges_;  // (from size, factor), increasing sizes
};

}  // namespace moesim::sim
