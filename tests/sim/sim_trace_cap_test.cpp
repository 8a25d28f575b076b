// The Chrome trace's size bound (sim::chrome_trace_json, kMaxTraceEvents): whole steps are kept, in
// order, while the events stay within the bound; the first step is kept whatever its size; what is
// left out is counted in otherData, never cut in the middle of a step.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstddef>
#include <set>
#include <vector>

#include "sim/engine/result.hpp"

using moesim::sim::chrome_trace_json;
using moesim::sim::kMaxTraceEvents;
using moesim::sim::TimelineEvent;

namespace {

// `per_step[s]` compute events in step s, on GPU 0, back to back.
std::vector<TimelineEvent> steps_of(const std::vector<std::size_t>& per_step) {
  std::vector<TimelineEvent> events;
  double t = 0.0;
  for (std::size_t s = 0; s < per_step.size(); ++s)
    for (std::size_t i = 0; i < per_step[s]; ++i) {
      TimelineEvent e;
      e.category = 0;
      e.stream = 0;
      e.layer = static_cast<std::int32_t>(i % 4);
      e.step = static_cast<std::int32_t>(s);
      e.begin = t;
      e.end = t += 1e-6;
      events.push_back(e);
    }
  return events;
}

// The steps of the complete events in the trace, and how many there are.
std::set<int> slice_steps(const nlohmann::json& trace, std::size_t& slices) {
  std::set<int> steps;
  slices = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      ++slices;
      steps.insert(e["args"]["step"].get<int>());
    }
  return steps;
}

}  // namespace

TEST_CASE("chrome trace: whole steps while they fit under kMaxTraceEvents, the rest counted as left out") {
  const std::size_t third = kMaxTraceEvents * 2 / 5;  // two steps fit, the third would pass the bound
  const auto trace = nlohmann::json::parse(chrome_trace_json(steps_of({third, third, third, 10}), 1));
  CHECK(trace["otherData"]["steps"] == nlohmann::json::array({0, 1}));
  // Step 3 alone would fit, but a trace is a prefix of whole steps: it is left out with step 2.
  CHECK(trace["otherData"]["steps_left_out"] == 2);
  std::size_t slices = 0;
  CHECK(slice_steps(trace, slices) == std::set<int>{0, 1});
  CHECK(slices == 2 * third);
  CHECK(slices <= kMaxTraceEvents);
}

TEST_CASE("chrome trace: a first step larger than the bound is kept alone; a trace within it is whole") {
  const auto big = nlohmann::json::parse(chrome_trace_json(steps_of({kMaxTraceEvents + 5, 3}), 1));
  CHECK(big["otherData"]["steps"] == nlohmann::json::array({0}));
  CHECK(big["otherData"]["steps_left_out"] == 1);
  std::size_t slices = 0;
  CHECK(slice_steps(big, slices) == std::set<int>{0});
  CHECK(slices == kMaxTraceEvents + 5);

  const auto exact = nlohmann::json::parse(chrome_trace_json(steps_of({kMaxTraceEvents - 7, 7}), 1));
  CHECK(exact["otherData"]["steps"] == nlohmann::json::array({0, 1}));
  CHECK(exact["otherData"]["steps_left_out"] == 0);
  CHECK(slice_steps(exact, slices) == std::set<int>{0, 1});
  CHECK(slices == kMaxTraceEvents);
}
