// The engine's own flow-level network (docs/simulator.md, "Network fidelity"): transfers that share
// links max-min fairly, every flow on a link counting alike, the same sharing SimGrid's flows get on
// the platform (Platform), solved without SimGrid's general solver. A change re-solves only the
// flows it can affect: in progressive filling, nothing below the level at which the change first
// matters moves (a completed flow's rate; for new flows or a new capacity, the level at which their
// link saturates now or saturated before), so only flows at or above that level, connected to a
// changed link, are filled again. No SimGrid here: times in s, bytes in B, capacities in B/s; the
// caller says when "now" is.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <queue>
#include <span>
#include <vector>

namespace moesim::sim {

class FluidNetwork {
 public:
  static constexpr int kMaxHops = 16;
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  // Flows whose completions fall within this fraction of the time of an event (a few rounding
  // steps) complete with it.
  static constexpr double kTimeTolerance = 1e-15;

  // `capacities`: B/s of each link (> 0). `incremental` false fills every flow again at every
  // change: the reference the incremental solver is tested against.
  explicit FluidNetwork(std::vector<double> capacities, bool incremental = true);

  // Tolerance (docs/simulator.md, "Solving in epochs"), set before the first flow starts: 0 (the
  // default) solves the network at every change, exactly. t in (0, 1) solves it in epochs: between
  // solves flows keep their rates, flows that start share among themselves what the others leave
  // of their links (fill_fresh), a new capacity applies from the next solve. The next solve comes
  // once more than t x (the flows in flight) starts, completions and capacity changes have happened
  // since the last (a start apart from every older flow does not count), once a flow that started
  // since with less than (1 - t) of its fair share has run t of its moving time at that share, or at
  // once when nothing moves; it fills again, from zero, every flow connected to a change.
  void set_tolerance(double tolerance);
  double tolerance() const { return tolerance_; }

  std::size_t links() const { return cap_.size(); }
  double capacity(int link) const { return cap_[static_cast<std::size_t>(link)]; }
  // From `now` on, `link` carries `capacity` B/s (> 0).
  void set_capacity(int link, double capacity, double now);
  // A flow of `bytes` (>= 0; 0 completes when its latency ends) over `route` (link indices, each at most once, at most kMaxHops) that
  // holds no bandwidth until now + latency, then shares its links. `token` comes back from
  // advance() when the flow completes.
  void start(double now, double latency, double bytes, std::span<const int> route, std::uint64_t token);
  // When a flow next starts moving bytes or completes (kNever: nothing in flight).
  double next_event();
  // Runs the network to `now` (no earlier than any earlier call's now) and appends the tokens of
  // the flows that completed by then, in order of completion.
  void advance(double now, std::vector<std::uint64_t>& done);
  std::size_t in_flight() const { return live_; }
  // B/s of the flow holding `token` now, 0 while in its latency or unknown (tests).
  double rate(std::uint64_t token);
  // Solves run and flows filled in them, over the network's life (benchmarks).
  std::uint64_t solves() const { return solves_; }
  std::uint64_t flows_filled() const { return filled_; }

 private:
  enum class State : std::uint8_t { kFree, kWaiting, kActive };
  // What a solve reads first (mark, hops, the links, the new rate), then the rest: a flow with up to
  // eight links is read from one cache line while it is searched and filled.
  struct alignas(64) Flow {
    std::uint32_t mark = 0;  // solve stamp: in the current fill (unfrozen) or filled
    std::uint8_t hops = 0;
    State state = State::kFree;
    std::array<std::int32_t, kMaxHops> link{};
    double next_rate = 0.0;  // the rate a running solve gives it
    double rate = 0.0;       // B/s
    double rem = 0.0;        // bytes left at `since`
    double since = 0.0;      // s
    double queued = kNever;  // the time of its finish entry
    std::uint64_t token = 0;
    std::uint32_t version = 0;  // changes whenever a heap entry of this slot goes stale
    std::array<std::uint32_t, kMaxHops> pos{};  // index in on_link_[link]
  };
  struct Event {
    double time;
    std::uint32_t flow, version;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : flow > o.flow; }
  };
  using EventHeap = std::priority_queue<Event, std::vector<Event>, std::greater<Event>>;

  void catch_up(double now);
  void solve_if_needed();
  void solve(double level);
  void fill_fresh();
  std::uint32_t next_stamp();
  void raise_together(std::uint32_t open, std::uint32_t filled, double level);
  void complete(std::uint32_t f);
  void activate(std::uint32_t f);
  void release(std::uint32_t f);  // the flow is done: its slot is free, its token ready
  void push_finish(std::uint32_t f);
  void lower_restart(double level) {
    if (level < restart_) restart_ = level;
  }
  void seed(std::size_t link) { seeds_.push_back(static_cast<std::uint32_t>(link)); }
  void mark_changed(std::size_t link);
  static double water_level(const std::vector<double>& rates, std::uint32_t fresh, double capacity);
  double next_time();
  void settle_finish();

  bool incremental_;
  std::vector<double> cap_;         // per link
  std::vector<double> solved_cap_;  // per link: its capacity when the network was last solved
  std::vector<char> changed_flag_;
  std::vector<std::uint32_t> fresh_count_, changed_links_;  // links with new flows or capacities
  std::vector<double> rates_;
  // Epochs (tolerance_ > 0).
  double tolerance_ = 0.0;
  double in_use_ = 0.0;       // B/s of the rates of the flows moving now
  double solve_by_ = kNever;  // a flow started since the last solve has waited long enough then
  std::size_t changes_ = 0;   // completions, starts and capacity changes since the last solve
  void count_change();
  bool must_solve_ = false;
  // The flows on each link with their rates (kFreshRate: activated since the last solve), so that
  // a solve reads a link without reading its flows.
  struct Member {
    std::uint32_t flow;
    double rate;
  };
  static constexpr double kFreshRate = -1.0;
  std::vector<std::vector<Member>> on_link_;
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_;
  std::vector<std::uint32_t> fresh_;  // activated since the last solve
  // Epochs: activated since the last solve or fill of new flows (fill_fresh), and per link the sum
  // of its flows' rates.
  std::vector<std::uint32_t> pending_;
  std::vector<std::uint32_t> pending_on_;  // per link: how many of its flows are in pending_
  std::vector<double> load_;  // kept in epochs only
  void clear_pending();
  EventHeap finish_, waiting_;
  std::vector<std::uint64_t> ready_;  // completed, not yet returned by advance()
  double time_ = 0.0;
  double restart_ = kNever;  // the level the next solve fills from (kNever: no solve needed)
  std::size_t live_ = 0;
  std::uint32_t stamp_ = 0;
  std::uint64_t solves_ = 0, filled_ = 0;
  // Scratch of a solve, per link.
  std::vector<double> rc_;
  std::vector<std::uint32_t> unfrozen_, link_mark_, first_, fill_;
  std::vector<std::uint32_t> touched_, members_, moving_;
  std::vector<std::uint32_t> seeds_;  // links changed since the last solve
  struct Share {
    double share;
    std::uint32_t link;
    bool operator>(const Share& o) const { return share != o.share ? share > o.share : link > o.link; }
  };
  std::vector<Share> heap_;
};

}  // namespace moesim::sim
