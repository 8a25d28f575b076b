// Step graphs, built one or two steps ahead on a worker thread while the engine runs
// (docs/simulator.md, "Building ahead"), or in the caller's thread when not ahead. Graphs come back
// in step order; a building error travels in its step's graph and is rethrown when that step is
// taken, so the steps before it still run. The build function must touch no SimGrid object.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "sim/engine/step_graph.hpp"

namespace moesim::sim {

class StepBuilder {
 public:
  StepBuilder(std::function<void(StepGraph&)> build, int steps, bool ahead);
  StepBuilder(const StepBuilder&) = delete;
  StepBuilder& operator=(const StepBuilder&) = delete;
  ~StepBuilder();
  // The next step's graph; rethrows the error that building it raised.
  std::unique_ptr<StepGraph> next();
  // A graph whose activities the engine no longer references.
  void recycle(std::unique_ptr<StepGraph> g);

 private:
  // Three graphs: the step before the running one (its activities may still be referenced from the
  // completion callback that starts the next step), the running one, and the next one.
  static constexpr int kGraphs = 3;
  std::unique_ptr<StepGraph> take_free();
  void build_one(StepGraph& g);
  void loop();

  std::function<void(StepGraph&)> build_;
  int remaining_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<StepGraph>> free_;
  std::deque<std::unique_ptr<StepGraph>> ready_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace moesim::sim
