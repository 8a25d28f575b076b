// Bad input found by the code that reads it: a trace of one sequence replayed by decode through the
// study's reader (a file, cached after its first reading) wraps and reuses that sequence, whole,
// and never reads on forever; $MOESIM_JOBS is a whole number or an error.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "sim/engine/step_source.hpp"
#include "sim/study/runner.hpp"
#include "tests/support/test_support.hpp"
#include "traces/cached_reader.hpp"
#include "traces/memory_trace.hpp"
#include "traces/trace.hpp"

using namespace moesim;

namespace {

// One sequence of `length` tokens, token t routed to expert t mod 8 (one MoE layer, top-1).
traces::MemoryTrace one_sequence(int length) {
  traces::MemoryTrace m;
  m.meta.shape = {"toy", {1}, 8, 1};
  m.meta.source = "test";
  for (int t = 0; t < length; ++t) {
    m.tokens.sequence.push_back(7);
    m.tokens.position.push_back(static_cast<std::uint32_t>(t));
    m.tokens.experts.push_back(static_cast<std::uint16_t>(t % 8));
  }
  m.meta.token_count = m.tokens.size();
  m.meta.sequence_count = 1;
  return m;
}

}  // namespace

TEST_CASE("validation: decode of a one-sequence trace file wraps and reuses the sequence, whole, every time") {
  moesim::testing::TempDir tmp;
  // Longer than a block (4096 tokens), so that the sequence straddles blocks of the file and of the cache.
  for (int length : {1, 5, 9000}) {
    CAPTURE(length);
    const std::string path = (tmp / ("one_" + std::to_string(length) + ".mtr")).string();
    traces::save_trace(one_sequence(length), path, traces::Encoding::kBinary, true);
    traces::CachingTraceReader reader(traces::open_trace(path));
    sim::SequenceCursor cursor(reader);
    for (int i = 0; i < 6; ++i) {
      CAPTURE(i);
      sim::TraceSequence seq;
      cursor.next(seq);
      REQUIRE(seq.tokens == static_cast<std::size_t>(length));
      CHECK(seq.ordinal == static_cast<std::uint64_t>(i));
      CHECK(*seq.token(seq.tokens - 1, 1) == (length - 1) % 8);
    }
    CHECK(cursor.wrapped());
    // A batch of 3 over more steps than the trace has tokens: every step has its 3 tokens, at positions
    // that stay inside the sequence.
    traces::CachingTraceReader again(traces::open_trace(path));
    auto source = sim::make_decode_source(again, 1, 3);
    sim::StepBatch step;
    for (int s = 0; s < 2 * length + 10; ++s) {
      REQUIRE(source->next(step));
      REQUIRE(step.size() == 3);
      for (long c : step.attention[0].context) CHECK(c < length);
    }
    CHECK(source->repeated());  // more steps than tokens: the trace was read again
  }
}

TEST_CASE("validation: MOESIM_JOBS is a whole number of processes, or a UsageError naming it") {
  struct Restore {
    ~Restore() { unsetenv("MOESIM_JOBS"); }
  } restore;
  for (const char* bad : {"abc", "0", "-1", "2.5", "4x", " 3", "99999999999"}) {
    CAPTURE(bad);
    setenv("MOESIM_JOBS", bad, 1);
    const std::string e = moesim::testing::error_of([] { sim::parallel_jobs(); });
    CHECK_MESSAGE(e.starts_with("usage: MOESIM_JOBS=\"" + std::string(bad) + "\": expected a whole number"), e);
  }
  setenv("MOESIM_JOBS", "3", 1);
  CHECK(sim::parallel_jobs() == 3);
  unsetenv("MOESIM_JOBS");
  CHECK(sim::parallel_jobs() == sim::usable_cpus());
}
