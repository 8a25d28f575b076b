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
  on_link_.resize(n);
  rc_.assign(n, 0.0);
  unfrozen_.assign(n, 0);
  solved_cap_ = cap_;
  changed_flag_.assign(n, 0);
  fresh_count_.assign(n, 0);
  link_mark_.assign(n, 0);
  first_.assign(n, 0);
  fill_.assign(n, 0);
  load_.assign(n, 0.0);
  pending_on_.assign(n, 0);
}

void FluidNetwork::set_tolerance(double tolerance) {
  if (!(tolerance >= 0.0) || !(tolerance < 1.0))
    throw std::invalid_argument("fluid network: tolerance " + std::to_string(tolerance) + " (0 <= t < 1)");
  if (live_ > 0) throw std::logic_error("fluid network: the tolerance is set before the first flow starts");
  tolerance_ = tolerance;
}

// A completion, a start or a capacity change: the network is solved again once more of them than
// `tolerance` x the flows in flight have happened since the last solve.
void FluidNetwork::count_change() {
  if (static_cast<double>(++changes_) > tolerance_ * static_cast<double>(live_)) must_solve_ = true;
}

void FluidNetwork::set_capacity(int link, double capacity, double now) {
  if (link < 0 || static_cast<std::size_t>(link) >= cap_.size() || !(capacity > 0.0) || !std::isfinite(capacity))
    throw std::invalid_argument("fluid network: capacity " + std::to_string(capacity) + " B/s for link " +
                                std::to_string(link));
  catch_up(now);
  const auto l = static_cast<std::size_t>(link);
  if (capacity == cap_[l]) return;
  if (on_link_[l].empty()) {
    cap_[l] = capacity;
    solved_cap_[l] = capacity;
    return;
  }
  // Where it first matters is worked out when the network is next solved, against the capacity
  // it was last solved with (a link can change several times in one instant).
  mark_changed(l);
  if (tolerance_ > 0.0) count_change();
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

// A flow keeps one finish entry while its rates only fall: an entry is put right when it reaches
// the top (then it is the flow's true finish, or it goes back at that), and a new one is pushed only
// when a rate rises (version: the older goes stale).
void FluidNetwork::settle_finish() {
  while (!finish_.empty()) {
    const Event e = finish_.top();
    Flow& x = flows_[e.flow];
    if (x.state != State::kActive || x.version != e.version) {
      finish_.pop();
      continue;
    }
    const double actual = x.since + x.rem / x.rate;
    if (actual <= e.time) break;
    finish_.pop();
    x.queued = actual;
    finish_.push(Event{actual, e.flow, e.version});
  }
}

double FluidNetwork::next_time() {
  settle_finish();
  double t = finish_.empty() ? kNever : finish_.top().time;
  if (!waiting_.empty()) t = std::min(t, waiting_.top().time);
  return std::min(t, solve_by_);
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
    if (solve_by_ <= horizon) must_solve_ = true;
    for (;;) {
      settle_finish();
      if (finish_.empty() || finish_.top().time > horizon) break;
      const std::uint32_t f = finish_.top().flow;
      finish_.pop();
      complete(f);
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
  if (tolerance_ > 0.0) {
    in_use_ = std::max(0.0, in_use_ - x.rate);
    if (in_use_ <= 0.0) must_solve_ = true;
    count_change();
  } else {
    lower_restart(x.rate);
  }
  for (int h = 0; h < x.hops; ++h) {
    const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
    if (tolerance_ > 0.0) load_[l] = std::max(0.0, load_[l] - x.rate);
    seed(l);  // (in epochs, kept until the next solve)
    auto& on = on_link_[l];
    const std::uint32_t p = x.pos[static_cast<std::size_t>(h)];
    const std::uint32_t moved = on.back().flow;
    on[p] = on.back();
    on.pop_back();
    if (moved != f) {
      Flow& y = flows_[moved];
      for (int k = 0; k < y.hops; ++k)
        if (static_cast<std::size_t>(y.link[static_cast<std::size_t>(k)]) == l) y.pos[static_cast<std::size_t>(k)] = p;
    }
  }
  release(f);
}

void FluidNetwork::release(std::uint32_t f) {
  Flow& x = flows_[f];
  x.state = State::kFree;
  ++x.version;
  --live_;
  free_.push_back(f);
  ready_.push_back(x.token);
}

void FluidNetwork::activate(std::uint32_t f) {
  Flow& x = flows_[f];
  if (x.rem <= 0.0) {  // no byte to move: done when its latency is
    release(f);
    return;
  }
  x.state = State::kActive;
  x.since = time_;
  x.rate = 0.0;
  x.queued = kNever;
  for (int h = 0; h < x.hops; ++h) {
    auto& on = on_link_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])];
    x.pos[static_cast<std::size_t>(h)] = static_cast<std::uint32_t>(on.size());
    on.push_back(Member{f, kFreshRate});
  }
  fresh_.push_back(f);
  if (tolerance_ > 0.0) {
    pending_.push_back(f);
    if (in_use_ <= 0.0) must_solve_ = true;
    // A flow whose links carry only flows that started since the last solve cannot move the others'
    // rates (its part of the network is apart from theirs): filling the new flows is exact there.
    bool apart = true;
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
      const bool only_new = on_link_[l].size() == ++pending_on_[l];  // counted on every link
      apart = apart && only_new;
    }
    if (!apart) count_change();
  }
}

void FluidNetwork::push_finish(std::uint32_t f) {
  Flow& x = flows_[f];
  const double t = x.since + x.rem / x.rate;
  if (t >= x.queued) return;  // its entry comes first and is put right then
  ++x.version;
  x.queued = t;
  finish_.push(Event{t, f, x.version});
  if (finish_.size() > 4 * live_ + 1024) {
    // Mostly stale entries (rates that changed since): keep the current one of each flow.
    std::vector<Event> keep;
    keep.reserve(live_);
    for (std::uint32_t g = 0; g < flows_.size(); ++g) {
      Flow& y = flows_[g];
      if (y.state != State::kActive || y.rate <= 0.0) continue;
      y.queued = y.since + y.rem / y.rate;
      keep.push_back(Event{y.queued, g, y.version});
    }
    finish_ = EventHeap(std::greater<Event>(), std::move(keep));
  }
}

// The lowest level at which a link holding flows of `rates` (ascending) and `fresh` new ones fills
// `capacity`: where sum(min(rate, level)) + fresh x level reaches it (kNever: it never does).
double FluidNetwork::water_level(const std::vector<double>& rates, std::uint32_t fresh, double capacity) {
  double below = 0.0;  // the rates under the level
  const std::size_t n = rates.size();
  for (std::size_t i = 0; i <= n; ++i) {
    const double count = static_cast<double>(n - i + fresh);
    if (count == 0.0) return kNever;
    const double level = (capacity - below) / count;
    if (i == n || level <= rates[i]) return level;
    below += rates[i];
  }
  return kNever;
}

void FluidNetwork::mark_changed(std::size_t link) {
  if (changed_flag_[link]) return;
  changed_flag_[link] = 1;
  changed_links_.push_back(static_cast<std::uint32_t>(link));
}

void FluidNetwork::solve_if_needed() {
  if (tolerance_ > 0.0) {
    if (!must_solve_) {
      if (!pending_.empty()) fill_fresh();
      return;
    }
    clear_pending();
    // An epoch: every flow connected to a change is filled again, from zero.
    must_solve_ = false;
    solve_by_ = kNever;
    changes_ = 0;
    for (const std::uint32_t f : fresh_) {
      const Flow& x = flows_[f];
      for (int h = 0; h < x.hops; ++h) seed(static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]));
    }
    fresh_.clear();
    for (const std::uint32_t l : changed_links_) {
      if (!on_link_[l].empty()) seed(l);
      solved_cap_[l] = cap_[l];
      changed_flag_[l] = 0;
    }
    changed_links_.clear();
    restart_ = kNever;
    if (seeds_.empty()) return;
    solve(0.0);
    return;
  }
  // Each link with new flows or a new capacity: below both the level at which it saturated before
  // (the highest rate on it, when it was full) and the level at which it saturates now (its water
  // level with the other flows' rates and the new flows), no link saturates differently, so no rate
  // moves.
  for (const std::uint32_t f : fresh_) {
    const Flow& x = flows_[f];
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
      ++fresh_count_[l];
      mark_changed(l);
    }
  }
  fresh_.clear();
  for (const std::uint32_t l : changed_links_) {
    rates_.clear();
    double load = 0.0;
    for (const Member& m : on_link_[l])
      if (m.rate != kFreshRate) {
        rates_.push_back(m.rate);
        load += m.rate;
      }
    std::sort(rates_.begin(), rates_.end());
    double level = water_level(rates_, fresh_count_[l], cap_[l]);
    if (!rates_.empty() && load >= solved_cap_[l] * (1.0 - kLevelMargin)) level = std::min(level, rates_.back());
    if (!on_link_[l].empty()) {
      lower_restart(level);
      seed(l);
    }
    solved_cap_[l] = cap_[l];
    fresh_count_[l] = 0;
    changed_flag_[l] = 0;
  }
  changed_links_.clear();
  if (restart_ == kNever) {
    seeds_.clear();
    return;
  }
  double level = std::max(0.0, restart_ * (1.0 - kLevelMargin));
  if (!incremental_) {
    // The reference: every flow filled again, from zero.
    level = 0.0;
    for (std::size_t l = 0; l < on_link_.size(); ++l)
      if (!on_link_[l].empty()) seed(l);
  }
  restart_ = kNever;
  solve(level);
}

// Two fresh marks (open, filled) for flows and links; every mark is cleared when they would wrap.
std::uint32_t FluidNetwork::next_stamp() {
  if (stamp_ > 0xfffffff0U) {
    stamp_ = 0;
    for (Flow& x : flows_) x.mark = 0;
    std::fill(link_mark_.begin(), link_mark_.end(), 0U);
  }
  stamp_ += 2;
  return stamp_;
}

// Progressive filling of the flows a change can move: those at or above `level` (and every new
// one) connected to a changed link through links they share; every other flow keeps its rate (in
// its connected part nothing changed, so filling it again would give it the same). All of them rise
// together from `level`; the link whose share (capacity left by the others, over its unfixed flows)
// is lowest saturates next and fixes its flows at that share.
void FluidNetwork::solve(double level) {
  ++solves_;
  const std::uint32_t open = next_stamp(), filled = open + 1;
  // Search from the changed links. Each link reached is read whole: the flows it holds that move
  // join the fill (and their links the search), the others leave their rates out of its capacity.
  moving_.clear();
  touched_.clear();
  members_.clear();
  for (const std::uint32_t l : seeds_)
    if (link_mark_[l] != open) {
      link_mark_[l] = open;
      touched_.push_back(l);
    }
  seeds_.clear();
  for (std::size_t q = 0; q < touched_.size(); ++q) {
    const std::uint32_t l = touched_[q];
    double rc = cap_[l];
    first_[l] = static_cast<std::uint32_t>(members_.size());
    for (const Member& on : on_link_[l]) {
      if (on.rate != kFreshRate && on.rate < level) {  // keeps its rate
        rc -= on.rate;
        continue;
      }
      const std::uint32_t f = on.flow;
      members_.push_back(f);
      Flow& x = flows_[f];
      if (x.mark == open) continue;
      x.mark = open;
      moving_.push_back(f);
      for (int h = 0; h < x.hops; ++h) {
        const auto m = static_cast<std::uint32_t>(x.link[static_cast<std::size_t>(h)]);
        if (link_mark_[m] != open) {
          link_mark_[m] = open;
          touched_.push_back(m);
        }
      }
    }
    fill_[l] = static_cast<std::uint32_t>(members_.size());
    rc_[l] = rc;
    unfrozen_[l] = fill_[l] - first_[l];
  }
  raise_together(open, filled, level);

  for (const std::uint32_t f : moving_) {
    Flow& x = flows_[f];
    ++filled_;
    const double r = x.next_rate;
    if (r == x.rate) continue;  // its completion stands
    x.rem = std::max(0.0, x.rem - x.rate * (time_ - x.since));
    x.since = time_;
    in_use_ += r - x.rate;
    x.rate = r;
    for (int h = 0; h < x.hops; ++h)
      on_link_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])][x.pos[static_cast<std::size_t>(h)]].rate = r;
    push_finish(f);
  }
  // Epochs solve from zero: every flow on a reached link is in the fill, so a link's load (what
  // fill_fresh leaves to new flows) is what the fill took of its capacity.
  if (tolerance_ > 0.0)
    for (const std::uint32_t l : touched_) load_[l] = std::max(0.0, cap_[l] - rc_[l]);
}

// Progressive filling over the links in touched_ (each with its capacity left, rc_, its unfixed
// flows, unfrozen_, and its flows in members_[first_, fill_)): the flows marked `open` rise
// together from `level`; the link whose share (capacity left over unfixed flows) is lowest
// saturates next and fixes its open flows at that share (next_rate, marked `filled`). One heap
// entry per link: a link's share only rises as flows elsewhere are fixed (they leave it at most its
// share each), so an entry is brought up to date only when it reaches the top.
void FluidNetwork::raise_together(std::uint32_t open, std::uint32_t filled, double level) {
  heap_.clear();
  for (const std::uint32_t l : touched_)
    if (unfrozen_[l] > 0) heap_.push_back(Share{std::max(rc_[l], 0.0) / unfrozen_[l], l});
  std::make_heap(heap_.begin(), heap_.end(), std::greater<Share>());
  double lv = level;
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<Share>());
    Share s = heap_.back();
    if (unfrozen_[s.link] == 0) {
      heap_.pop_back();
      continue;
    }
    const double now_share = std::max(rc_[s.link], 0.0) / unfrozen_[s.link];
    if (now_share > s.share) {
      heap_.back().share = now_share;
      std::push_heap(heap_.begin(), heap_.end(), std::greater<Share>());
      continue;
    }
    heap_.pop_back();
    lv = std::max(lv, s.share);
    for (std::uint32_t i = first_[s.link]; i < fill_[s.link]; ++i) {
      Flow& x = flows_[members_[i]];
      if (x.mark != open) continue;
      x.mark = filled;
      x.next_rate = lv;
      for (int h = 0; h < x.hops; ++h) {
        const auto m = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
        rc_[m] -= lv;
        --unfrozen_[m];
      }
    }
  }
}

// Epochs: the flows that started since the last solve share, max-min fairly among themselves, the
// capacity the others leave on their links (the others keep their rates until the next solve). A
// flow given less than (1 - t) of its fair share (its most crowded link's capacity over the flows
// on it) brings the next solve at the latest t of its moving time at that share later.
void FluidNetwork::fill_fresh() {
  const std::uint32_t open = next_stamp(), filled = open + 1;
  touched_.clear();
  // Count the new flows per link, then lay them out per link in members_.
  for (const std::uint32_t f : pending_) {
    Flow& x = flows_[f];
    x.mark = open;
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::uint32_t>(x.link[static_cast<std::size_t>(h)]);
      if (link_mark_[l] != open) {
        link_mark_[l] = open;
        touched_.push_back(l);
        unfrozen_[l] = 0;
        rc_[l] = std::max(0.0, (cap_[l] < solved_cap_[l] ? cap_[l] : solved_cap_[l]) - load_[l]);
      }
      ++unfrozen_[l];
    }
  }
  std::uint32_t at = 0;
  for (const std::uint32_t l : touched_) {
    first_[l] = fill_[l] = at;
    at += unfrozen_[l];
  }
  members_.resize(at);
  for (const std::uint32_t f : pending_) {
    const Flow& x = flows_[f];
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
      members_[fill_[l]++] = f;
    }
  }
  raise_together(open, filled, 0.0);
  for (const std::uint32_t f : pending_) {
    Flow& x = flows_[f];
    const double r = x.next_rate;
    double fair = kNever;
    for (int h = 0; h < x.hops; ++h) {
      const auto l = static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)]);
      fair = std::min(fair, cap_[l] / static_cast<double>(on_link_[l].size()));
      if (r > 0.0) {
        on_link_[l][x.pos[static_cast<std::size_t>(h)]].rate = r;
        load_[l] += r;
      }
    }
    if (r < (1.0 - tolerance_) * fair) solve_by_ = std::min(solve_by_, time_ + tolerance_ * x.rem / fair);
    if (r <= 0.0) continue;
    x.since = time_;
    x.rate = r;
    in_use_ += r;
    push_finish(f);
  }
  clear_pending();
}

void FluidNetwork::clear_pending() {
  for (const std::uint32_t f : pending_) {
    const Flow& x = flows_[f];
    for (int h = 0; h < x.hops; ++h) pending_on_[static_cast<std::size_t>(x.link[static_cast<std::size_t>(h)])] = 0;
  }
  pending_.clear();
}

}  // namespace moesim::sim
