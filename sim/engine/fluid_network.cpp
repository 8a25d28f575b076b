#include "sim/engine/fluid_network.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

namespace moesim::sim {

namespace {

// A restart level is lowered by this fraction, so that rounding never leaves out of a fill a flow
// whose rate equals the level.
constexpr double kLevelMargin = 1e-9;

}  // namespace

FluidNetwork::FluidNetwork(std::vector<double> capacities, bool incremental)
    : incremental_(incremental), cap_(std::move(capacities)) {
  const std::size_t n = cap_.size();
  for (std::size_t i = 0; i < n; ++i)
    if (!(cap_[i] > 0.0) || !std::isfinite(cap_[i]))
      throw std::invalid_argument("fluid network: link " + std::to_string(i) + " has capacity " +
                                  std::to_string(cap_[i]) + " B/s (must be positive and finite)");
  load_.assign(n, 0.0);
  on_link_.resize(n);
  rc_.assign(n, 0.0);
  unfrozen_.assign(n, 0);
  link_version_.assign(n, 0);
  link_mark_.assign(n, 0);
  first_.assign(n, 0);
  fill_.assign(n, 0);
}

void FluidNetwork::set_capacity(int link, double capacity, double now) {
  if (link < 0 || static_cast<std::size_t>(link) >= cap_.size() || !(capacity > 0.0) || !std::isfinite(capacity))
    throw std::invalid_argument("fluid network: capacity " + std::to_string(capacity) + " B/s for link " +
                                std::to_string(link));
  catch_up(now);
  const auto l = static_cast<std::size_t>(link);
  if (capacity == cap_[l]) return;
  const auto& on = on_link_[l];
  if (!on.empty()) {
    // Below both the level at which the link saturated (the highest rate on it, at least the
    // lowest) and the level at which it saturates now (at least capacity / flows), nothing moves.
    double level = capacity / static_cast<double>(on.size());
    for (const std::uint32_t f : on)
      if (flows_[f].rate > 0.0) level = std::min(level, flows_[f].rate);
    lower_restart(level);
  }
  cap_[l] = capacity;
}

void FluidNetwork::start(double now, double latency, double bytes, std::span<const int> route, std::uint64_t token) {
  if (route.empty() || route.size() > static_cast<std::size_t>(kMaxHops))
    throw std::invalid_argument("fluid network: a route of " + std::to_string(route.size()) + " links (1 to " +
                                std::to_string(kMaxHops) + ")");
  if (!(bytes >= 0.0) || !std::isfinite(bytes) || !(latency >= 0.0) || !std::isfinite(latency))
    throw std::invalid_argument("fluid network: a flow of " + std::to_string(bytes) + " B after " +
                                std::to_string(latency) + " s");
  for (const int l : route)
    if (l < 0 || static_cast<std::size_t>(l) >= cap_.size())
      throw std::invalid_argument("fluid network: route through unknown link " + std::to_string(l));
  catch_up(now);
  std::uint32_t f;
  if (!free_.empty()) {
    f = free_.back();
    free_.pop_back();
  } else {
    f = static_cast<std::uint32_t>(flows_.size());
    flows_.emplace_back();
  }
  Flow& x = flows_[f];
  x.token = token;
  x.rem = bytes;
  x.rate = 0.0;
  x.since = now;
  x.hops = static_cast<std::uint8_t>(route.size());
  std::copy(route.begin(), route.end(), x.link.begin());
  x.state = State::kWaiting;
  ++x.version;
  ++live_;
  waiting_.push(Event{now + latency, f, x.version});
}

double FluidNetwork::next_event() {
  solve_if_needed();
  return next_time();
}

void FluidNetwork::advance(double now, std::vector<std::uint64_t>& done) {
  catch_up(now);
  solve_if_needed();
  done.insert(done.end(), ready_.begin(), ready_.end());
  ready_.clear();
}

double FluidNetwork::rate(std::uint64_t token) {
  solve_if_needed();
  for (const Flow& x : flows_)
    if (x.state == State::kActive && x.token == token) return x.rate;
  return 0.0;
}

double FluidNetwork::next_time() {
  while (!finish_.empty()) {
    const Event& e = finish_.top();
    const Flow& x = flows_[e.flow];
    if (x.state == State::kActive && x.version == e.version) break;
    finish_.pop();
  }
  double t = finish_.empty() ? kNever : finish_.top().time;
  if (!waiting_.empty()) t = std::min(t, waiting_.top().time);
  return t;
}

// Processes, in time order, every completion and every end of a latency due by `now`, solving
// again after each instant that changed something.
void FluidNetwork::catch_up(double now) {
  for (;;) {
    solve_if_needed();
    const double t = next_time();
    if (!(t <= now * (1.0 + kTimeTolerance))) break;
    if (t > time_) time_ = t;
    const double horizon = time_ * (1.0 + kTimeTolerance);
    while (!finish_.empty()) {
      const Event e = finish_.top();
      const Flow& x = flows_[e.flow];
      if (x.state != State::kActive || x.version != e.version) {
        finish_.pop();
        continue;
      }
      if (e.time > horizon) break;
      finish_.pop();
      complete(e.flow);
    }
    while (!waiting_.empty() && waiting_.top().time <= horizon) {
      const std::uint32_t f = waiting_.top().flow;
      waiting_.pop();
      activate(f);
    }
  }
  if (now > time_) time_ = now;
}

void FluidNetwork::complete(std::uint32_t f) {
  Flow& x = flows_[f];
  lower_restart(x.rate);
  for (int h = 0; h < x.hops; ++h) {
    const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
    load_[l] -= x.rate;
    auto& on = on_link_[l];
    const std::uint32_t p = x.pos[static_cast<std::size_t>(h)];
    const std::uint32_t moved = on.back();
    on[p] = moved;
    on.pop_back();
    if (moved != f) {
      Flow& y = flows_[moved];
      for (int k = 0; k < y.hops; ++k)
        if (static_cast<std::size_t>(y.link[static_cast<std::size_t>(k)]) == l) y.pos[static_cast<std::size_t>(k)] = p;
    }
  }
  x.state = State::kFree;
  ++x.version;
  --live_;
  free_.push_back(f);
  ready_.push_back(x.token);
}

void FluidNetwork::activate(std::uint32_t f) {
  Flow& x = flows_[f];
  if (x.rem <= 0.0) {  // no byte to move: done when its latency is
    x.state = State::kFree;
    ++x.version;
    --live_;
    free_.push_back(f);
    ready_.push_back(x.token);
    return;
  }
  x.state = State::kActive;
  x.since = time_;
  x.rate = 0.0;
  for (int h = 0; h < x.hops; ++h) {
    auto& on = on_link_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])];
    x.pos[static_cast<std::size_t>(h)] = static_cast<std::uint32_t>(on.size());
    on.push_back(f);
  }
  fresh_.push_back(f);
}

void FluidNetwork::push_finish(std::uint32_t f) {
  Flow& x = flows_[f];
  ++x.version;
  finish_.push(Event{x.since + x.rem / x.rate, f, x.version});
  if (finish_.size() > 4 * live_ + 1024) {
    // Mostly stale entries (rates that changed since): keep the current one of each flow.
    std::vector<Event> keep;
    keep.reserve(live_);
    for (std::uint32_t g = 0; g < flows_.size(); ++g) {
      const Flow& y = flows_[g];
      if (y.state == State::kActive && y.rate > 0.0) keep.push_back(Event{y.since + y.rem / y.rate, g, y.version});
    }
    finish_ = EventHeap(std::greater<Event>(), std::move(keep));
  }
}

void FluidNetwork::solve_if_needed() {
  if (!fresh_.empty()) {
    // A link with `a` new flows next to `n` it had, loaded with S, saturates no lower than
    // max((capacity - S) / a, capacity / (n + a)): nothing below that moves.
    for (const std::uint32_t f : fresh_) {
      const Flow& x = flows_[f];
      for (int h = 0; h < x.hops; ++h) ++unfrozen_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])];
    }
    for (const std::uint32_t f : fresh_) {
      const Flow& x = flows_[f];
      for (int h = 0; h < x.hops; ++h) {
        const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
        const double a = unfrozen_[l];
        if (a == 0) continue;  // counted already
        const double n = static_cast<double>(on_link_[l].size()) - a;
        lower_restart(std::max((cap_[l] - load_[l]) / a, cap_[l] / (n + a)));
        unfrozen_[l] = 0;
      }
    }
  }
  if (restart_ == kNever) return;
  const double level = incremental_ ? std::max(0.0, restart_ * (1.0 - kLevelMargin)) : 0.0;
  restart_ = kNever;
  solve(level);
}

// Progressive filling of every flow whose rate is at least `level` (and every new one), the others
// keeping theirs: all of them rise together from `level`; the link whose share (capacity left over
// its unfilled flows) is lowest saturates next and fixes its flows at that share.
void FluidNetwork::solve(double level) {
  ++solves_;
  if (stamp_ > 0xfffffff0U) {
    stamp_ = 0;
    for (Flow& x : flows_) x.mark = 0;
    std::fill(link_mark_.begin(), link_mark_.end(), 0U);
  }
  stamp_ += 2;
  const std::uint32_t open = stamp_, filled = stamp_ + 1;
  std::size_t cut = 0;
  if (level > 0.0)
    cut = static_cast<std::size_t>(std::lower_bound(order_.begin(), order_.end(), level,
                                                    [this](std::uint32_t f, double v) { return flows_[f].rate < v; }) -
                                   order_.begin());
  const bool full = cut == 0;
  suffix_.clear();
  for (std::size_t i = cut; i < order_.size(); ++i)
    if (flows_[order_[i]].state == State::kActive) suffix_.push_back(order_[i]);
  order_.resize(cut);
  for (const std::uint32_t f : fresh_)
    if (flows_[f].state == State::kActive) suffix_.push_back(f);
  fresh_.clear();
  if (full) std::fill(load_.begin(), load_.end(), 0.0);
  if (suffix_.empty()) return;

  // Each touched link: the capacity its flows outside the fill leave, its flows in the fill.
  touched_.clear();
  for (const std::uint32_t f : suffix_) {
    Flow& x = flows_[f];
    x.mark = open;
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
      if (link_mark_[l] != open) {
        link_mark_[l] = open;
        touched_.push_back(static_cast<std::uint32_t>(l));
        rc_[l] = cap_[l] - load_[l];
        unfrozen_[l] = 0;
      }
      if (!full) rc_[l] += x.rate;
      ++unfrozen_[l];
    }
  }
  std::uint32_t total = 0;
  for (const std::uint32_t l : touched_) {
    first_[l] = total;
    fill_[l] = total;
    total += unfrozen_[l];
  }
  members_.resize(total);
  for (const std::uint32_t f : suffix_) {
    const Flow& x = flows_[f];
    for (int h = 0; h < x.hops; ++h) members_[fill_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])]++] = f;
  }
  heap_.clear();
  for (const std::uint32_t l : touched_) {
    ++link_version_[l];
    heap_.push_back(Share{std::max(rc_[l], 0.0) / unfrozen_[l], l, link_version_[l]});
  }
  std::make_heap(heap_.begin(), heap_.end(), std::greater<Share>());
  double lv = level;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Share>());
    const Share s = heap_.back();
    heap_.pop_back();
    if (s.version != link_version_[s.link] || unfrozen_[s.link] == 0) continue;
    lv = std::max(lv, s.share);
    for (std::uint32_t i = first_[s.link]; i < fill_[s.link]; ++i) {
      Flow& x = flows_[members_[i]];
      if (x.mark != open) continue;
      x.mark = filled;
      x.next_rate = lv;
      for (int h = 0; h < x.hops; ++h) {
        const auto m = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
        rc_[m] -= lv;
        if (--unfrozen_[m] > 0 && m != s.link) {
          ++link_version_[m];
          heap_.push_back(Share{std::max(rc_[m], 0.0) / unfrozen_[m], static_cast<std::uint32_t>(m), link_version_[m]});
          std::push_heap(heap_.begin(), heap_.end(), std::greater<Share>());
        }
      }
    }
  }

  for (const std::uint32_t f : suffix_) {
    Flow& x = flows_[f];
    ++filled_;
    const double r = x.next_rate;
    if (full)
      for (int h = 0; h < x.hops; ++h) load_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])] += r;
    if (r == x.rate) continue;  // its completion stands
    x.rem = std::max(0.0, x.rem - x.rate * (time_ - x.since));
    x.since = time_;
    if (!full)
      for (int h = 0; h < x.hops; ++h) load_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])] += r - x.rate;
    x.rate = r;
    push_finish(f);
  }
  std::sort(suffix_.begin(), suffix_.end(), [this](std::uint32_t a, std::uint32_t b) {
    const double ra = flows_[a].rate, rb = flows_[b].rate;
    return ra != rb ? ra < rb : a < b;
  });
  order_.insert(order_.end(), suffix_.begin(), suffix_.end());
}

}  // namespace moesim::sim
