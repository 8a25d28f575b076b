#include "sim/engine/result.hpp"

#include <charconv>
#include <cmath>

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

std::string chrome_trace_json(const std::vector<TimelineEvent>& events, std::size_t gpus) {
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  out.reserve(160 * (events.size() + 3 * gpus));
  bool first = true;
  auto open = [&] {
    if (!first) out += ',';
    first = false;
  };
  for (const auto& e : events) {
    open();
    const char* cat = timeline_category_name(e.category);
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
    out += ",\"pid\":" + std::to_string(e.gpu) + ",\"tid\":" + std::to_string(e.stream) +
           ",\"args\":{\"step\":" + std::to_string(e.step) + "}}";
  }
  for (std::size_t g = 0; g < gpus; ++g) {
    const std::string pid = std::to_string(g);
    open();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"args\":{\"name\":\"GPU " + pid + "\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":0,\"args\":{\"name\":\"compute\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":1,\"args\":{\"name\":\"communication\"}}";
    out += ",{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + pid + ",\"tid\":2,\"args\":{\"name\":\"combine\"}}";
  }
  out += "]}\n";
  return out;
}

}  // namespace moesim::sim
