// Decode starts staggered: the first batch's sequences join at positions spread over their lengths
// (context = the tokens already cached), so a trace whose sequences all route their t-th token alike
// (a shared prompt) does not route in lock-step; `aligned` keeps every sequence at its first token.
#include <doctest/doctest.h>

#include <set>

#include "sim/engine/step_source.hpp"
#include "tests/sim/sim_fixtures.hpp"
#include "traces/trace.hpp"

using namespace moesim;
using moesim::testing::toy_arch;
using moesim::testing::toy_trace;

namespace {

// Every sequence's token t goes to expert t mod 8: lock-step routing when positions are aligned.
traces::MemoryTrace lockstep_trace(const models::Architecture& a) {
  return toy_trace(a, 8, 16, [](int, int t) { return std::vector<int>{t % 8}; });
}

}  // namespace

TEST_CASE("decode: staggered starts spread the first batch over positions; aligned starts at 0") {
  const auto arch = toy_arch(8, 1);
  const auto trace = lockstep_trace(arch);
  for (bool staggered : {true, false}) {
    CAPTURE(staggered);
    auto reader = traces::read_memory_trace(trace);
    auto source = sim::make_decode_source(*reader, 2, 4, staggered);
    sim::StepBatch step;
    REQUIRE(source->next(step));
    REQUIRE(step.size() == 4);
    std::set<int> experts(step.experts.begin(), step.experts.end());
    std::vector<long> contexts;
    for (const auto& a : step.attention) contexts.insert(contexts.end(), a.context.begin(), a.context.end());
    std::sort(contexts.begin(), contexts.end());
    if (staggered) {
      // Slot i of 4 at position i x 16 / 4: 0, 4, 8, 12 (experts 0, 4, 0, 4 under t mod 8).
      CHECK(contexts == std::vector<long>{0, 4, 8, 12});
      CHECK(experts.size() == 2);
    } else {
      CHECK(contexts == std::vector<long>{0, 0, 0, 0});
      CHECK(experts.size() == 1);
    }
    // The next step advances every slot by one position.
    REQUIRE(source->next(step));
    std::vector<long> next;
    for (const auto& a : step.attention) next.insert(next.end(), a.context.begin(), a.context.end());
    std::sort(next.begin(), next.end());
    for (std::size_t i = 0; i < next.size(); ++i) CHECK(next[i] == contexts[i] + 1);
  }
}

TEST_CASE("decode: a trace of one sequence serves every slot, again and again (no endless sequence)") {
  // Every sequence after the first restarts the trace, whose only sequence has the same id as the one
  // just read: each must still end at the trace's end (this hung, growing without bound).
  const auto arch = toy_arch(8, 1);
  const auto trace = toy_trace(arch, 1, 16, [](int, int t) { return std::vector<int>{t % 8}; });
  auto reader = traces::read_memory_trace(trace);
  auto source = sim::make_decode_source(*reader, 2, 3, /*staggered=*/false);
  sim::StepBatch step;
  for (int s = 0; s < 40; ++s) {  // 40 steps of 3 slots: each slot goes through the sequence 2.5 times
    CAPTURE(s);
    REQUIRE(source->next(step));
    REQUIRE(step.size() == 3);
    for (const auto& a : step.attention)
      for (long c : a.context) CHECK(c == s % 16);  // every slot at the same position of its copy
  }
  CHECK(source->repeated());
}

TEST_CASE("decode: a sequence read again while its earlier reading is held shares it; released, it is read anew") {
  // Three sequences of different routings: sequence q's token t goes to expert (q + t) mod 8.
  const auto arch = toy_arch(8, 1);
  const auto trace = toy_trace(arch, 3, 5, [](int q, int t) { return std::vector<int>{(q + t) % 8}; });
  auto reader = traces::read_memory_trace(trace);
  sim::SequenceCursor cursor(*reader);
  std::vector<sim::TraceSequence> first(3), second(3);
  for (auto& s : first) cursor.next(s);  // the first reading (ending it looks past the trace's end)
  for (auto& s : second) cursor.next(s);
  CHECK(cursor.wrapped());
  for (std::size_t q = 0; q < 3; ++q) {
    CAPTURE(q);
    CHECK(second[q].ordinal == first[q].ordinal + 3);
    CHECK(second[q].tokens == first[q].tokens);
    CHECK(second[q].experts.get() == first[q].experts.get());  // one copy, held twice
    CHECK(first[q].experts.use_count() == 2);
    for (std::size_t t = 0; t < first[q].tokens; ++t)
      CHECK(*second[q].token(t, cursor.ids_per_token()) == static_cast<std::uint16_t>((q + t) % 8));
  }
  // Once no reading of sequence 0 is held, the next reading is its own, with the same routing.
  const std::vector<std::uint16_t> routing0 = *first[0].experts;
  first[0] = {};
  second[0] = {};
  sim::TraceSequence third;
  cursor.next(third);  // sequence 0 of the third reading
  REQUIRE(third.experts);
  CHECK(third.experts.use_count() == 1);
  CHECK(*third.experts == routing0);
  sim::TraceSequence fourth;
  cursor.next(fourth);  // sequence 1, still held by first[1] and second[1]
  CHECK(fourth.experts.get() == first[1].experts.get());
}
