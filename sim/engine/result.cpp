#include "sim/engine/result.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <tuple>

#include "sim/engine/step_graph.hpp"

namespace moesim::sim {

namespace {

void append_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace

nlohmann::json to_json(const SimResult& r) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& l : r.layers)
    layers.push_back({{"layer", l.layer},
                      {"moe", l.moe},
                      {"chunks", l.chunks},
                      {"token_tail_s", l.token_tail},
                      {"token_avg_s", l.token_avg},
                      {"a2a_tail_s", l.a2a_tail},
                      {"a2a_avg_s", l.a2a_avg},
                      {"span_s", l.span},
                      {"rank_tokens", l.rank_tokens}});
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : r.gpus)
    gpus.push_back({{"energy_J", g.energy},
                    {"compute_busy_s", g.compute_busy},
                    {"comm_busy_s", g.comm_busy},
                    {"both_busy_s", g.both_busy},
                    {"peak_power_W", g.peak_power}});
  nlohmann::json out = {{"label", r.label},
          {"step_latency_s", r.step_latency},
          {"layers", layers},
          {"gpus", gpus},
          {"traffic_bytes", r.traffic},
          {"measured_time_s", r.measured_time},
          {"compute_actual_s", r.compute_actual},
          {"compute_alone_s", r.compute_alone},
          {"tokens", r.tokens},
          {"activities", r.activities},
          {"aggregated_flows", r.aggregated_flows},
          {"fluid_flows", r.fluid_flows},
          {"port_activities", r.port_activities},
          {"network_tolerance", r.network_tolerance},
          {"trace_repeated", r.trace_repeated},
          {"wall_s", r.wall_seconds}};
  // Only with online rebalancing: results without it keep their form.
  if (!r.rebalances.empty()) {
    nlohmann::json moves = nlohmann::json::array();
    for (const auto& e : r.rebalances)
      moves.push_back({{"step", e.step},
                       {"experts_moved", e.experts_moved},
                       {"bytes", e.bytes},
                       {"seconds", e.seconds},
                       {"step_latency_s", e.step_latency}});
    out["rebalances"] = std::move(moves);
  }
  // Only where tokens were routed (MoE inference and training), and the context where it is replicated.
  if (r.token_layers > 0) {
    out["token_sends"] = r.token_sends;
    out["token_layers"] = r.token_layers;
  }
  if (r.context_bytes > 0.0) out["replicated_context_bytes"] = r.context_bytes;
  if (r.coherence_bytes > 0.0) out["coherence_bytes"] = r.coherence_bytes;
  if (r.token_layers > 0) out["token_inter_node_bytes"] = r.token_inter_node_bytes;
  return out;
}

SimResult sim_result_from_json(const nlohmann::json& j) {
  SimResult r;
  r.label = j.at("label").get<std::string>();
  r.step_latency = j.at("step_latency_s").get<std::vector<double>>();
  for (const auto& l : j.at("layers")) {
    LayerResult x;
    x.layer = l.at("layer").get<int>();
    x.moe = l.at("moe").get<bool>();
    x.chunks = l.at("chunks").get<int>();
    x.token_tail = l.at("token_tail_s").get<double>();
    x.token_avg = l.at("token_avg_s").get<double>();
    x.a2a_tail = l.at("a2a_tail_s").get<double>();
    x.a2a_avg = l.at("a2a_avg_s").get<double>();
    x.span = l.at("span_s").get<double>();
    x.rank_tokens = l.at("rank_tokens").get<std::vector<double>>();
    r.layers.push_back(std::move(x));
  }
  for (const auto& g : j.at("gpus")) {
    GpuResult x;
    x.energy = g.at("energy_J").get<double>();
    x.compute_busy = g.at("compute_busy_s").get<double>();
    x.comm_busy = g.at("comm_busy_s").get<double>();
    x.both_busy = g.at("both_busy_s").get<double>();
    x.peak_power = g.at("peak_power_W").get<double>();
    r.gpus.push_back(x);
  }
  r.traffic = j.at("traffic_bytes").get<std::vector<std::vector<double>>>();
  r.measured_time = j.at("measured_time_s").get<double>();
  r.compute_actual = j.at("compute_actual_s").get<double>();
  r.compute_alone = j.at("compute_alone_s").get<double>();
  r.tokens = j.at("tokens").get<std::uint64_t>();
  r.activities = j.at("activities").get<std::uint64_t>();
  r.aggregated_flows = j.at("aggregated_flows").get<std::uint64_t>();
  r.fluid_flows = j.value("fluid_flows", std::uint64_t{0});
  r.port_activities = j.value("port_activities", std::uint64_t{0});
  r.network_tolerance = j.value("network_tolerance", 0.0);
  r.trace_repeated = j.at("trace_repeated").get<bool>();
  r.wall_seconds = j.at("wall_s").get<double>();
  r.token_sends = j.value("token_sends", std::uint64_t{0});
  r.token_layers = j.value("token_layers", std::uint64_t{0});
  r.context_bytes = j.value("replicated_context_bytes", 0.0);
  r.coherence_bytes = j.value("coherence_bytes", 0.0);
  r.token_inter_node_bytes = j.value("token_inter_node_bytes", 0.0);
  if (j.contains("rebalances"))
    for (const auto& e : j.at("rebalances"))
      r.rebalances.push_back({e.at("step").get<int>(), e.at("experts_moved").get<int>(), e.at("bytes").get<double>(),
                              e.at("seconds").get<double>(), e.at("step_latency_s").get<double>()});
  return r;
}

const char* timeline_category_name(int category) {
  if (category < 0 || category > static_cast<int>(Category::kCoherence)) return "other";
  return category_name(static_cast<Category>(category));
}

namespace {

// JSON string contents: quotes, backslashes and control characters escaped (variant names are
// folder-safe already; this keeps the file valid whatever a caller passes).
void append_escaped(std::string& out, std::string_view text) {
  for (char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(ch));
      out += buf;
    } else {
      out += ch;
    }
  }
}

bool is_power(const TimelineEvent& e) { return e.stream == kPowerStream; }

// The steps the trace keeps: whole steps, in order, while the events stay within kMaxTraceEvents
// (the first step whatever its size).
std::set<std::int32_t> kept_steps(const std::vector<TimelineEvent>& events, std::size_t& dropped) {
  std::map<std::int32_t, std::size_t> per_step;
  for (const auto& e : events) ++per_step[e.step];
  std::set<std::int32_t> kept;
  std::size_t total = 0;
  dropped = 0;
  for (const auto& [step, n] : per_step) {
    if (!kept.empty() && (dropped > 0 || total + n > kMaxTraceEvents)) {
      ++dropped;
      continue;
    }
    kept.insert(step);
    total += n;
  }
  return kept;
}

}  // namespace

// The Trace Event Format (JSON Object Format with "traceEvents", "displayTimeUnit" and "otherData"):
// catapult-project/catapult docs/trace-event-format.md (the format's definition) and, for how
// Perfetto reads it, google/perfetto docs/getting-started/other-formats.md. Complete events ("X"),
// counter events ("C"), flow events ("s"/"f", the second with "bp":"e" so that it binds to the
// enclosing slice) and metadata events ("M": process_name, process_sort_index, thread_name).
std::string chrome_trace_json(const std::vector<TimelineEvent>& events, std::size_t gpus, const TraceInfo& info) {
  std::size_t dropped = 0;
  const std::set<std::int32_t> steps = kept_steps(events, dropped);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"variant\":\"";
  append_escaped(out, info.variant);
  out += "\",\"timeline\":\"";
  append_escaped(out, info.timeline);
  out += "\",\"steps\":[";
  for (auto it = steps.begin(); it != steps.end(); ++it) {
    if (it != steps.begin()) out += ',';
    out += std::to_string(*it);
  }
  out += "],\"steps_left_out\":" + std::to_string(dropped) + ",\"time_unit\":\"us\"},\"traceEvents\":[";
  out.reserve(out.size() + 220 * events.size() + 400 * gpus);
  bool first = true;
  auto open = [&] {
    if (!first) out += ',';
    first = false;
  };
  // Per (step, GPU, layer): the dispatch, expert and combine slices, for the flows.
  struct Chain {
    std::vector<const TimelineEvent*> dispatch, experts, combine;
  };
  std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t>, Chain> chains;
  // Of a GPU's power samples at one instant (a state left and another entered at once), the last.
  std::vector<char> superseded(events.size(), 0);
  std::map<std::int32_t, std::size_t> last_sample;
  std::map<std::int32_t, double> written_watts;
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (!is_power(events[i])) continue;
    const auto [it, fresh] = last_sample.try_emplace(events[i].gpu, i);
    if (!fresh && events[it->second].begin == events[i].begin) superseded[it->second] = 1;
    it->second = i;
  }
  for (std::size_t i = 0; i < events.size(); ++i) {
    const TimelineEvent& e = events[i];
    if (!steps.count(e.step) || superseded[i]) continue;
    const std::string pid = std::to_string(e.gpu);
    if (is_power(e)) {
      // A counter holds its value: a sample equal to the GPU's previous one says nothing.
      const auto [w, fresh] = written_watts.try_emplace(e.gpu, e.watts);
      if (!fresh && w->second == e.watts) continue;
      w->second = e.watts;
      open();
      out += "{\"name\":\"power\",\"cat\":\"power\",\"ph\":\"C\",\"ts\":";
      append_number(out, e.begin * 1e6);
      out += ",\"pid\":" + pid + ",\"args\":{\"W\":";
      append_number(out, e.watts);
      out += "}}";
      continue;
    }
    const char* cat = timeline_category_name(e.category);
    open();
    out += "{\"name\":\"";
    out += cat;
    if (e.layer >= 0) {
      out += " L";
      out += std::to_string(e.layer);
    }
    out += "\",\"cat\":\"";
    out += cat;
    out += "\",\"ph\":\"X\",\"ts\":";
    append_number(out, e.begin * 1e6);
    out += ",\"dur\":";
    append_number(out, (e.end - e.begin) * 1e6);
    out += ",\"pid\":" + pid + ",\"tid\":" + std::to_string(e.stream) + ",\"args\":{\"step\":" + std::to_string(e.step);
    if (e.layer >= 0) out += ",\"layer\":" + std::to_string(e.layer);
    out += ",\"bytes\":";
    append_number(out, e.bytes);
    out += ",\"tokens\":";
    append_number(out, e.tokens);
    out += "}}";
    if (e.layer < 0) continue;
    const auto c = static_cast<Category>(e.category);
    if (c != Category::kDispatch && c != Category::kExpert && c != Category::kCombine) continue;
    Chain& ch = chains[{e.step, e.gpu, e.layer}];
    (c == Category::kDispatch ? ch.dispatch : c == Category::kExpert ? ch.experts : ch.combine).push_back(&e);
  }
  // Flows: per GPU and MoE layer, the i-th dispatch (in start order) to the i-th expert compute to the
  // i-th combine (one of each per chunk). Both ends sit at their slice's start, on its GPU and lane.
  std::uint64_t id = 0;
  auto flow = [&](const TimelineEvent& from, const TimelineEvent& to, const char* name) {
    ++id;
    for (const TimelineEvent* e : {&from, &to}) {
      open();
      out += "{\"name\":\"";
      out += name;
      out += "\",\"cat\":\"moe_layer\",\"ph\":\"";
      out += e == &from ? "s" : "f\",\"bp\":\"e";
      out += "\",\"id\":" + std::to_string(id) + ",\"ts\":";
      append_number(out, e->begin * 1e6);
      out += ",\"pid\":" + std::to_string(e->gpu) + ",\"tid\":" + std::to_string(e->stream) + "}";
    }
  };
  auto by_start = [](const TimelineEvent* a, const TimelineEvent* b) { return a->begin < b->begin; };
  for (auto& [key, ch] : chains) {
    std::sort(ch.dispatch.begin(), ch.dispatch.end(), by_start);
    std::sort(ch.experts.begin(), ch.experts.end(), by_start);
    std::sort(ch.combine.begin(), ch.combine.end(), by_start);
    for (std::size_t i = 0; i < ch.experts.size(); ++i) {
      if (i < ch.dispatch.size()) flow(*ch.dispatch[i], *ch.experts[i], "dispatch -> experts");
      if (i < ch.combine.size()) flow(*ch.experts[i], *ch.combine[i], "experts -> combine");
    }
  }
  for (std::size_t g = 0; g < gpus; ++g) {
    const std::string pid = std::to_string(g);
    open();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"";
    append_escaped(out, info.variant.empty() ? "GPU " + pid : info.variant + " GPU " + pid);
    if (!info.timeline.empty()) {
      out += " (";
      append_escaped(out, info.timeline);
      out += ")";
    }
    out += "\"}}";
    out += ",{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"sort_index\":" + pid + "}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":2,\"args\":{\"name\":\"combine\"}}";
  }
  out += "]}\n";
  return out;
}

nlohmann::json step_activity_json(const std::vector<TimelineEvent>& events, std::size_t gpus) {
  std::int32_t step = std::numeric_limits<std::int32_t>::max();
  for (const auto& e : events)
    if (!is_power(e)) step = std::min(step, e.step);
  if (step == std::numeric_limits<std::int32_t>::max()) return nullptr;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;
  for (const auto& e : events)
    if (!is_power(e) && e.step == step) {
      t0 = std::min(t0, e.begin);
      t1 = std::max(t1, e.end);
    }
  const std::size_t shown = std::min(gpus, kStepActivityGpus);
  // [gpu][0 compute, 1 communication]: intervals, sorted then merged where they touch or overlap.
  std::vector<std::array<std::vector<std::pair<double, double>>, 2>> lanes(shown);
  for (const auto& e : events)
    if (!is_power(e) && e.step == step && e.gpu >= 0 && static_cast<std::size_t>(e.gpu) < shown)
      lanes[static_cast<std::size_t>(e.gpu)][e.stream == 0 ? 0 : 1].emplace_back(e.begin - t0, e.end - t0);
  nlohmann::json rows = nlohmann::json::array();
  for (auto& gpu : lanes) {
    nlohmann::json row = nlohmann::json::object();
    for (int k = 0; k < 2; ++k) {
      auto& v = gpu[static_cast<std::size_t>(k)];
      std::sort(v.begin(), v.end());
      nlohmann::json merged = nlohmann::json::array();
      double b = 0.0, e = -1.0;
      for (const auto& [x, y] : v) {
        if (e >= 0.0 && x <= e) {
          e = std::max(e, y);
          continue;
        }
        if (e >= 0.0) merged.push_back({b, e});
        b = x;
        e = y;
      }
      if (e >= 0.0) merged.push_back({b, e});
      row[k == 0 ? "compute" : "comm"] = std::move(merged);
    }
    rows.push_back(std::move(row));
  }
  return {{"step", step}, {"span_s", t1 - t0}, {"gpus_total", gpus}, {"gpus", std::move(rows)}};
}

}  // namespace moesim::sim
