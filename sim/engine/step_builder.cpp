#include "sim/engine/step_builder.hpp"

namespace moesim::sim {

StepBuilder::StepBuilder(std::function<void(StepGraph&)> build, int steps, bool ahead)
    : build_(std::move(build)), remaining_(steps) {
  for (int i = 0; i < kGraphs; ++i) free_.push_back(std::make_unique<StepGraph>());
  if (ahead && steps > 1) worker_ = std::thread([this] { loop(); });
}

StepBuilder::~StepBuilder() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

std::unique_ptr<StepGraph> StepBuilder::next() {
  std::unique_ptr<StepGraph> g;
  if (!worker_.joinable()) {
    g = take_free();
    build_one(*g);
  } else {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty(); });
    g = std::move(ready_.front());
    ready_.pop_front();
    lock.unlock();
    cv_.notify_all();
  }
  if (g->error) std::rethrow_exception(g->error);
  return g;
}

void StepBuilder::recycle(std::unique_ptr<StepGraph> g) {
  {
    std::lock_guard lock(mu_);
    free_.push_back(std::move(g));
  }
  cv_.notify_all();
}

std::unique_ptr<StepGraph> StepBuilder::take_free() {
  std::lock_guard lock(mu_);
  auto g = std::move(free_.back());
  free_.pop_back();
  return g;
}

void StepBuilder::build_one(StepGraph& g) {
  g.clear();
  try {
    build_(g);
  } catch (...) {
    g.error = std::current_exception();
  }
}

void StepBuilder::loop() {
  for (; remaining_ > 0; --remaining_) {
    std::unique_ptr<StepGraph> g;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
      if (stop_) return;
      g = std::move(free_.back());
      free_.pop_back();
    }
    build_one(*g);
    const bool failed = g->error != nullptr;
    {
      std::lock_guard lock(mu_);
      ready_.push_back(std::move(g));
    }
    cv_.notify_all();
    if (failed) return;
  }
}

}  // namespace moesim::sim
