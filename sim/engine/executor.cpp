#include "sim/engine/executor.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "common/error.hpp"
#include "sim/engine/step_source.hpp"

namespace moesim::sim {

namespace sg4 = simgrid::s4u;

std::size_t Executor::ContentionHash::operator()(const ContentionKey& k) const {
  const std::size_t a = static_cast<std::size_t>(k.op) + 8 * static_cast<std::size_t>(k.cls) +
                        16 * static_cast<std::size_t>(k.sms + 1);
  const std::size_t b = std::hash<double>{}(k.bytes), c = std::hash<double>{}(k.flops);
  return a ^ (b * 0x9e3779b97f4a7c15ULL) ^ (c * 0xc2b2ae3d27d4eb4fULL + (b >> 7));
}

Executor::Executor(const EngineInput& input, const LayerTable& layers, Platform& platform, StepBuilder& builder,
                   ActivityDump* dump, const ExecutorSetup& setup)
    : in_(input), profile_(*input.profile), layers_(layers), platform_(platform), builder_(builder), dump_(dump),
      setup_(setup), step_index_(setup.first_step) {
  const int gpus = in_.ep * in_.tp;
  const std::size_t cells = static_cast<std::size_t>(gpus) * layers_.size();
  track_.assign(static_cast<std::size_t>(gpus), GpuTrack{});
  for (auto& tr : track_) tr.watts = setup_.idle_watts;
  result_.label = in_.options.label;
  result_.gpus.assign(static_cast<std::size_t>(gpus), GpuResult{});
  result_.traffic.assign(static_cast<std::size_t>(gpus), std::vector<double>(static_cast<std::size_t>(gpus), 0.0));
  token_time_.assign(cells, 0.0);
  a2a_time_.assign(cells, 0.0);
  a2a_since_.assign(cells, 0.0);
  a2a_active_.assign(cells, 0);
  rank_token_sums_.assign(layers_.size() * static_cast<std::size_t>(in_.ep), 0.0);
  timeline_bytes_.assign(static_cast<std::size_t>(gpus) * 2, 0.0);
  layer_sums_.assign(layers_.size() * kLayerSums, 0.0);
  layer_first_.assign(layers_.size(), 0.0);
  layer_last_.assign(layers_.size(), -1.0);
}

void Executor::start() {
  sg4::Activity::on_completion_cb([this](const sg4::Activity& a) {
    auto* data = a.get_data<void>();
    if (data == nullptr) return;
    activity_done(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(data) - 1));
  });
  platform_.on_transfer_done(
      [this](void* data) { activity_done(static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(data) - 1)); });
  start_step();
}

void Executor::account_state(int gpu) {
  auto& tr = track_[static_cast<std::size_t>(gpu)];
  const double now = sg4::Engine::get_clock();
  const double dt = now - tr.state_since;
  if (measuring_ && dt > 0) {
    auto& gr = result_.gpus[static_cast<std::size_t>(gpu)];
    const double p = tr.watts;
    gr.energy += p * dt;
    gr.peak_power = std::max(gr.peak_power, p);
    if (tr.state == models::GpuState::kCompute || tr.state == models::GpuState::kBoth) gr.compute_busy += dt;
    if (tr.state == models::GpuState::kComm || tr.state == models::GpuState::kBoth) gr.comm_busy += dt;
    if (tr.state == models::GpuState::kBoth) gr.both_busy += dt;
  }
  tr.state_since = now;
  const bool c = tr.compute != nullptr, m = tr.comm_active > 0;
  tr.state = c && m ? models::GpuState::kBoth : c ? models::GpuState::kCompute : m ? models::GpuState::kComm : models::GpuState::kIdle;
  const double before = tr.watts;
  if (c) {
    const double w = (m ? tr.compute->power_with_comm : tr.compute->power) * setup_.power_factor;
    tr.watts = setup_.power_cap > 0.0 ? std::min(w, setup_.power_cap) : w;
  } else {
    tr.watts = m ? setup_.comm_watts : setup_.idle_watts;
  }
  if (tr.watts != before && in_timeline()) record_power(gpu, now);
}

void Executor::record_power(int gpu, double at) {
  TimelineEvent ev;
  ev.category = kPowerCategory;
  ev.stream = kPowerStream;
  ev.gpu = gpu;
  ev.step = step_index_ - 1;
  ev.begin = ev.end = at;
  ev.watts = track_[static_cast<std::size_t>(gpu)].watts;
  result_.timeline.push_back(ev);
}

const models::Slowdown& Executor::slowdown(GpuTrack& tr, const Task& m) {
  const Task& c = *tr.compute;
  if (m.comm_op != tr.cached_op || m.op_bytes != tr.cached_bytes || c.flops != tr.cached_flops ||
      c.compute_class != tr.cached_class || m.comm_sms != tr.cached_sms) {
    const ContentionKey key{m.comm_op, m.op_bytes, c.flops, c.compute_class, m.comm_sms};
    auto it = contention_memo_.find(key);
    if (it == contention_memo_.end())
      it = contention_memo_
               .emplace(key, models::contention(profile_, models::ContentionQuery{m.comm_op, m.op_bytes, c.flops,
                                                                                  c.compute_class, m.comm_sms}))
               .first;
    tr.cached = it->second;
    tr.cached_op = m.comm_op;
    tr.cached_bytes = m.op_bytes;
    tr.cached_flops = c.flops;
    tr.cached_class = c.compute_class;
    tr.cached_sms = m.comm_sms;
  }
  return tr.cached;
}

void Executor::refresh_contention(int gpu) {
  if (!in_.options.contention) return;
  auto& tr = track_[static_cast<std::size_t>(gpu)];
  // A host's speed matters only while an Exec runs on it and a port's bandwidth only while one of
  // this GPU's transfers crosses it (its private links carry nothing else), so a factor is changed
  // only where something runs; whatever starts next calls this first and gets the right one.
  if (tr.compute && tr.comm_active > 0 && tr.last_comm) {
    const models::Slowdown s = slowdown(tr, *tr.last_comm);
    platform_.set_compute_slowdown(gpu, s.compute);
    platform_.set_comm_slowdown(gpu, s.comm);
  } else {
    if (tr.compute) platform_.set_compute_slowdown(gpu, 1.0);
    if (tr.comm_active > 0) platform_.set_comm_slowdown(gpu, 1.0);
  }
}

void Executor::start_compute(Task& t, std::uint32_t id) {
  auto& tr = track_[static_cast<std::size_t>(t.gpu)];
  tr.compute = &t;
  account_state(t.gpu);
  refresh_contention(t.gpu);
  sg4::ExecPtr exec = sg4::Exec::init();
  exec->set_host(platform_.host(t.gpu));
  exec->set_flops_amount(t.amount * kHostSpeed);
  exec->set_data(reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1));
  exec->start();
  running_[id] = std::move(exec);
  ++result_.activities;
}

void Executor::start_transfer(Task& t, std::uint32_t id) {
  for (int gpu : ends(t)) {
    auto& tr = track_[static_cast<std::size_t>(gpu)];
    ++tr.comm_active;
    // The most recent transfer; of several started at one instant, the last in the step's task
    // order, so that the order in which the network reports simultaneous completions (which starts
    // their successors) does not choose the contention factor.
    if (tr.last_comm == nullptr || tr.last_comm->start != t.start || std::less<const Task*>{}(tr.last_comm, &t))
      tr.last_comm = &t;
    account_state(gpu);
    refresh_contention(gpu);
    if (t.layer >= 0 && measuring_) {
      const std::size_t k = gpu_layer(gpu, t.layer);
      if (a2a_active_[k]++ == 0) a2a_since_[k] = t.start;
    }
  }
  // The traffic matrix holds the workload's own traffic; a rebalance's moved bytes are reported apart.
  if (measuring_ && t.side == Task::Side::kRoute && t.category != Category::kMigration) {
    auto& row = result_.traffic[static_cast<std::size_t>(t.gpu)];
    if (t.merged_part > 0.0) {
      for (std::size_t d = 0; d < row.size(); ++d)
        if (d != static_cast<std::size_t>(t.gpu)) row[d] += t.merged_part;
    } else {
      row[static_cast<std::size_t>(t.dst)] += t.payload;
    }
  }
  if (t.merged_part > 0.0) ++result_.aggregated_flows;
  ++result_.activities;
  void* data = reinterpret_cast<void*>(static_cast<std::uintptr_t>(id) + 1);
  if (t.side != Task::Side::kRoute) {
    ++result_.port_activities;
    platform_.send_end(t.gpu, t.dst, t.side == Task::Side::kIngress, t.amount, t.latency, data);
    return;
  }
  if (platform_.fluid()) ++result_.fluid_flows;
  running_[id] = platform_.send(t.gpu, t.dst, t.amount, t.latency, data);
}

void Executor::start_task(std::uint32_t id) {
  Task& t = current_->tasks[id];
  t.start = sg4::Engine::get_clock();
  if (!t.runs()) {
    worklist_.push_back(id);  // completes at once
    return;
  }
  if (t.kind == TaskKind::kCompute)
    start_compute(t, id);
  else
    start_transfer(t, id);
}

// Bookkeeping of a task that ran (a compute or a transfer) as it ends.
void Executor::finish_task(Task& t) {
  const bool ran = t.runs();
  if (ran && t.layer >= 0) {
    const auto l = static_cast<std::size_t>(t.layer);
    if (layer_last_[l] < 0.0 || t.start < layer_first_[l]) layer_first_[l] = t.start;
    layer_last_[l] = std::max(layer_last_[l], t.end);
  }
  if (ran && t.kind == TaskKind::kCompute) {
    track_[static_cast<std::size_t>(t.gpu)].compute = nullptr;
    account_state(t.gpu);
    refresh_contention(t.gpu);
    if (measuring_) {
      result_.compute_actual += t.end - t.start;
      result_.compute_alone += t.amount;
      if (t.category == Category::kExpert && t.layer >= 0) token_time_[gpu_layer(t.gpu, t.layer)] += t.end - t.start;
    }
  } else if (ran && !t.held) {
    end_comm(t, t.end);
  }
  // A port phase ends: its GPUs stop communicating (their activities ended earlier).
  for (std::uint32_t i = t.held_begin; i < t.held_end; ++i) {
    const Task& h = current_->tasks[current_->held[i]];
    if (h.runs()) end_comm(h, t.end);
  }
}

void Executor::end_comm(const Task& t, double at) {
  for (int gpu : ends(t)) {
    auto& tr = track_[static_cast<std::size_t>(gpu)];
    --tr.comm_active;
    if (tr.last_comm == &t) tr.last_comm = nullptr;
    account_state(gpu);
    refresh_contention(gpu);
    if (t.layer >= 0 && measuring_) {
      const std::size_t k = gpu_layer(gpu, t.layer);
      if (--a2a_active_[k] == 0) a2a_time_[k] += at - a2a_since_[k];
    }
  }
}

bool Executor::in_timeline() const {
  return measuring_ && step_index_ <= in_.options.warmup_steps + in_.options.timeline_steps;
}

void Executor::record_timeline(const StepGraph& g, const Task& t) {
  if (!in_timeline()) return;
  const std::uint8_t stream = t.kind == TaskKind::kCompute ? 0 : t.category == Category::kCombine ? 2 : 1;
  // A transfer's payload counts toward its source GPU's next stream operation of the same lane (a
  // port phase's, once: on its egress side).
  if (t.kind == TaskKind::kTransfer && t.runs() && t.side != Task::Side::kIngress && stream > 0) {
    timeline_bytes_[static_cast<std::size_t>(t.gpu) * 2 + stream - 1] += t.payload;
    return;
  }
  if (!((t.kind == TaskKind::kCompute && t.amount > 0) || (t.kind == TaskKind::kJoin && t.timeline))) return;
  TimelineEvent ev;
  ev.category = static_cast<std::uint8_t>(t.category);
  ev.stream = stream;
  ev.layer = t.layer >= 0 ? layers_.ids[static_cast<std::size_t>(t.layer)] : -1;
  ev.gpu = t.gpu;
  ev.step = step_index_ - 1;
  ev.begin = t.kind == TaskKind::kJoin ? g.tasks[t.gate].start : t.start;
  ev.end = t.end;
  if (stream > 0) std::swap(ev.bytes, timeline_bytes_[static_cast<std::size_t>(t.gpu) * 2 + stream - 1]);
  const auto slot = static_cast<std::size_t>(t.layer * in_.ep + t.gpu / std::max(1, in_.tp));
  const bool moe = t.layer >= 0 && layers_.moe[static_cast<std::size_t>(t.layer)] != 0 && slot < g.rank_tokens.size();
  ev.tokens = moe ? g.rank_tokens[slot] : static_cast<double>(g.tokens);
  result_.timeline.push_back(ev);
}

void Executor::end_step(double end) {
  const double latency = end - step_start_;
  if (measuring_) {
    result_.step_latency.push_back(latency);
    result_.tokens += current_->tokens;
    result_.token_sends += current_->token_sends;
    result_.token_layers += current_->token_layers;
    result_.context_bytes = std::max(result_.context_bytes, current_->context_bytes);
    result_.coherence_bytes += current_->coherence_bytes;
    result_.token_inter_node_bytes += current_->token_inter_node_bytes;
    const std::size_t L = layers_.size();
    const int G = static_cast<int>(track_.size());
    for (std::size_t l = 0; l < L; ++l) {
      double tt = 0, ta = 0, at = 0, aa = 0;
      for (int gpu = 0; gpu < G; ++gpu) {
        const double tok = token_time_[gpu_layer(gpu, static_cast<int>(l))];
        const double a2a = a2a_time_[gpu_layer(gpu, static_cast<int>(l))];
        tt = std::max(tt, tok);
        ta += tok / G;
        at = std::max(at, a2a);
        aa += a2a / G;
      }
      double* sums = &layer_sums_[l * kLayerSums];
      sums[0] += tt;
      sums[1] += ta;
      sums[2] += at;
      sums[3] += aa;
      if (layer_last_[l] >= 0.0) sums[4] += layer_last_[l] - layer_first_[l];
    }
    const auto& rank_tokens = current_->rank_tokens;
    for (std::size_t i = 0; i < rank_tokens.size(); ++i) rank_token_sums_[i] += rank_tokens[i];
    if (current_->moved_step >= 0) {
      RebalanceEvent ev{current_->moved_step, current_->moved_experts, current_->moved_bytes, 0.0, latency};
      double first = std::numeric_limits<double>::infinity(), last = -first;
      for (const Task& t : current_->tasks)
        if (t.category == Category::kMigration && t.runs()) {
          first = std::min(first, t.start);
          last = std::max(last, t.end);
        }
      if (last >= first) ev.seconds = last - first;
      result_.rebalances.push_back(ev);
    }
  }
  if (step_index_ < setup_.total_steps) start_step();
}

// A task's activity finished (SimGrid's completion callback). Activities that finished in earlier
// callbacks are released now: SimGrid no longer touches them once their callback has returned.
void Executor::activity_done(std::uint32_t id) {
  finished_.clear();
  if (id < running_.size() && running_[id]) finished_.push_back(std::move(running_[id]));
  complete(id);
}

void Executor::complete(std::uint32_t first) {
  worklist_.push_back(first);
  if (draining_) return;
  draining_ = true;
  while (!worklist_.empty()) {
    const std::uint32_t id = worklist_.back();
    worklist_.pop_back();
    StepGraph& g = *current_;
    Task& t = g.tasks[id];
    t.end = sg4::Engine::get_clock();
    finish_task(t);
    record_timeline(g, t);
    for (auto s : g.successors(id)) {
      Task& next = g.tasks[s];
      if (next.any_of) {
        if (next.pending > 0) {
          next.pending = 0;  // later predecessors no longer count
          start_task(s);
        }
      } else if (--next.pending == 0) {
        start_task(s);
      }
    }
    if (id == g.end_task) end_step(t.end);
  }
  draining_ = false;
}

// The step's tasks as the engine will run them: tasks that complete at once (joins, empty computes
// and transfers, transfers to self) as joins; the root depends on the previous step's end.
void Executor::dump_step(const StepGraph& g) {
  const std::size_t n = g.tasks.size();
  std::vector<std::uint32_t> offset(n + 1, 0);
  for (const auto& e : g.edges) ++offset[e.second + 1];
  for (std::size_t i = 0; i < n; ++i) offset[i + 1] += offset[i];
  std::vector<std::uint64_t> deps(offset[n]);
  std::vector<std::uint32_t> fill(offset.begin(), offset.end() - 1);
  for (std::size_t i = 0; i < n; ++i)
    for (auto s : g.successors(static_cast<std::uint32_t>(i))) deps[fill[s]++] = dump_next_id_ + i;
  const std::uint64_t base = dump_next_id_;
  dump_->begin_step(step_index_, measuring_, base, n, base + g.end_task);
  for (std::size_t i = 0; i < n; ++i) {
    const Task& t = g.tasks[i];
    std::span<const std::uint64_t> d(deps.data() + offset[i], offset[i + 1] - offset[i]);
    if (i == 0 && step_index_ > 0) d = std::span<const std::uint64_t>(&dump_prev_end_, 1);
    if (t.runs() && t.kind == TaskKind::kCompute)
      dump_->exec(base + i, t.gpu, t.amount * kHostSpeed, d);
    else if (t.runs()) {
      const auto bytes = static_cast<std::uint64_t>(std::llround(t.amount));
      dump_->comm(base + i, t.gpu, t.dst, bytes,
                  platform_.transfer_latency(t.gpu, t.dst, static_cast<double>(bytes), t.latency), d);
    }
    else
      dump_->join(base + i, d);
  }
  dump_prev_end_ = base + g.end_task;
  dump_next_id_ = base + n;
}

void Executor::start_step() {
  // Every activity of the step that ends here has finished (steps meet at a barrier); the one whose
  // callback got here is in finished_, released at the next callback.
  if (previous_) builder_.recycle(std::move(previous_));
  previous_ = std::move(current_);
  current_ = builder_.next();
  running_.clear();
  running_.resize(current_->tasks.size());
  for (int gpu = 0; gpu < static_cast<int>(track_.size()); ++gpu) account_state(gpu);
  measuring_ = step_index_ >= in_.options.warmup_steps;
  std::fill(token_time_.begin(), token_time_.end(), 0.0);
  std::fill(a2a_time_.begin(), a2a_time_.end(), 0.0);
  std::fill(a2a_active_.begin(), a2a_active_.end(), 0);
  std::fill(layer_last_.begin(), layer_last_.end(), -1.0);
  std::fill(timeline_bytes_.begin(), timeline_bytes_.end(), 0.0);
  if (dump_) dump_step(*current_);
  if (measuring_ && !current_->pair_bytes.empty()) {
    // The port phases' traffic, pair by pair as routing counted it (no transfer carries it).
    const std::size_t n = result_.traffic.size();
    for (std::size_t a = 0; a < n; ++a)
      for (std::size_t b = 0; b < n; ++b) result_.traffic[a][b] += current_->pair_bytes[a * n + b];
  }
  ++step_index_;
  step_start_ = sg4::Engine::get_clock();
  // The timeline's first step: every GPU's power as it starts (later samples only where it changes).
  if (measuring_ && step_index_ - 1 == in_.options.warmup_steps && in_.options.timeline_steps > 0)
    for (int gpu = 0; gpu < static_cast<int>(track_.size()); ++gpu) record_power(gpu, step_start_);
  // The root has no predecessors.
  worklist_.clear();
  start_task(0);
  if (!draining_) {
    // Outside a completion callback (the first step): drain here.
    const auto first = worklist_.back();
    worklist_.pop_back();
    complete(first);
  }
}

SimResult Executor::finish(int measured_steps) {
  if (static_cast<int>(result_.step_latency.size()) != measured_steps)
    throw common::RunError("the simulation ended after " + std::to_string(result_.step_latency.size()) + " of " +
                           std::to_string(measured_steps) + " measured steps (a dependency was never met)");
  for (int gpu = 0; gpu < static_cast<int>(track_.size()); ++gpu) account_state(gpu);
  if (dump_) dump_->finish(dump_next_id_, result_.activities);
  const double steps = measured_steps;
  const auto& chunks = in_.options.layer_chunks;
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    LayerResult lr;
    lr.layer = layers_.ids[l];
    lr.moe = layers_.moe[l] != 0;
    lr.chunks = chunks.empty() ? 1 : chunks[std::min(l, chunks.size() - 1)];
    const double* sums = &layer_sums_[l * kLayerSums];
    lr.token_tail = sums[0] / steps;
    lr.token_avg = sums[1] / steps;
    lr.a2a_tail = sums[2] / steps;
    lr.a2a_avg = sums[3] / steps;
    lr.span = sums[4] / steps;
    for (int r = 0; r < in_.ep; ++r)
      lr.rank_tokens.push_back(rank_token_sums_[l * static_cast<std::size_t>(in_.ep) + static_cast<std::size_t>(r)] / steps);
    result_.layers.push_back(std::move(lr));
  }
  double measured = 0.0;
  for (double x : result_.step_latency) measured += x;
  result_.measured_time = measured;
  result_.trace_repeated = in_.steps != nullptr && in_.steps->repeated();
  return std::move(result_);
}

}  // namespace moesim::sim
