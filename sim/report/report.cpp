#include "sim/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "sim/report/report_css.hpp"
#include "sim/report/report_js.hpp"
#include "sim/study/results.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kChartCount = 7;
constexpr double kActivityTicks = 20000.0;  // the timeline chart's time resolution, per step

// Reads one JSON file of a results folder and checks the fields the report needs; every complaint
// names the file, the JSON path, what was expected and what was found.
class Reader {
 public:
  explicit Reader(fs::path file) : file_(std::move(file)) {}

  const fs::path& file() const { return file_; }

  json parse(const std::string& missing_hint) const {
    std::error_code ec;
    if (!fs::exists(file_, ec))
      throw common::InputError(file_.string() + ": missing; " + missing_hint + ". " + fix());
    const std::string text = common::read_file(file_);
    try {
      return json::parse(text);
    } catch (const json::parse_error& e) {
      const std::size_t upto = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
      const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(upto), '\n');
      const auto last_nl = text.rfind('\n', upto == 0 ? 0 : upto - 1);
      const std::size_t col = last_nl == std::string::npos || upto == 0 ? upto + 1 : upto - last_nl;
      throw common::InputError(file_.string() + ":" + std::to_string(line) + ":" + std::to_string(col) +
                               ": expected JSON, found a syntax error (" + e.what() + "). " + fix());
    } catch (const json::out_of_range& e) {  // a number too large for a double
      throw common::InputError(file_.string() + ": a number out of range (" + e.what() + "). " + fix());
    }
  }

  [[noreturn]] void fail(const std::string& path, const std::string& expected, const json* found) const {
    throw common::InputError(file_.string() + ": " + path + ": expected " + expected + ", found " +
                             (found ? describe(*found) : std::string("nothing (the key is missing)")) + ". " + fix());
  }

  const json& field(const json& object, const std::string& path, const std::string& key) const {
    if (!object.is_object()) fail(path, "an object", &object);
    const auto it = object.find(key);
    if (it == object.end()) fail(join(path, key), "a value", nullptr);
    return *it;
  }
  const json& object(const json& parent, const std::string& path, const std::string& key) const {
    const json& j = field(parent, path, key);
    if (!j.is_object()) fail(join(path, key), "an object", &j);
    return j;
  }
  const json& array(const json& parent, const std::string& path, const std::string& key) const {
    const json& j = field(parent, path, key);
    if (!j.is_array()) fail(join(path, key), "an array", &j);
    return j;
  }
  double number(const json& parent, const std::string& path, const std::string& key) const {
    const json& j = field(parent, path, key);
    if (!j.is_number()) fail(join(path, key), "a number", &j);
    return j.get<double>();
  }
  // Statistics of empty samples are written as null.
  json number_or_null(const json& parent, const std::string& path, const std::string& key) const {
    const json& j = field(parent, path, key);
    if (!j.is_number() && !j.is_null()) fail(join(path, key), "a number or null", &j);
    return j;
  }
  std::string string(const json& parent, const std::string& path, const std::string& key) const {
    const json& j = field(parent, path, key);
    if (!j.is_string()) fail(join(path, key), "a string", &j);
    return j.get<std::string>();
  }
  std::vector<double> numbers(const json& parent, const std::string& path, const std::string& key) const {
    const json& a = array(parent, path, key);
    std::vector<double> out;
    out.reserve(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!a[i].is_number()) fail(join(path, key) + "[" + std::to_string(i) + "]", "a number", &a[i]);
      out.push_back(a[i].get<double>());
    }
    return out;
  }

  static std::string join(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

 private:
  static std::string describe(const json& j) {
    std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.size() > 60) text = text.substr(0, 57) + "...";
    return std::string(j.type_name()) + " " + text;
  }
  static std::string fix() {
    return "The report reads what `moesim run STUDY.yaml -o DIR` writes; rerun it (with --force) to regenerate the "
           "results folder";
  }
  fs::path file_;
};

// Variant names come from study names already checked safe as folder names; the report builds paths
// from them, so it checks again rather than trust a hand-edited file.
bool is_folder_safe(const std::string& name) {
  if (name.empty() || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
           ch == '_' || ch == '+' || ch == '-';
  });
}

std::string kinds_text(const json& kinds, const std::string& sep) {
  std::string out;
  for (const auto& k : kinds) out += (out.empty() ? "" : sep) + k.get<std::string>();
  return out;
}

// The summary row of one variant in results.json: its inputs and statistics.
json variant_summary(const Reader& rows, const json& row, const std::string& at, const std::string& name,
                     const std::string& baseline) {
  const json& inputs = rows.object(row, at, "inputs");
  const std::string in = at + ".inputs";
  const json& lat = rows.object(row, at, "step_latency_s");
  const std::string lat_at = at + ".step_latency_s";
  const json& tl = rows.object(row, at, "timelines_p50_s");
  const std::string tl_at = at + ".timelines_p50_s";
  const json& kinds = rows.array(inputs, in, "profile_sources");
  for (std::size_t i = 0; i < kinds.size(); ++i)
    if (!kinds[i].is_string()) rows.fail(in + ".profile_sources[" + std::to_string(i) + "]", "a string", &kinds[i]);

  json table = json::array();
  for (const MetricColumn* c : table_columns()) {
    const auto value = column_value(row, *c);
    if (!value) rows.fail(at + "." + std::string(c->json_path), "a number or null", nullptr);
    table.push_back(format_metric(*c, *value));
  }
  return {{"name", name},
          {"baseline", name == baseline},
          {"table", table},
          {"profile", rows.string(inputs, in, "profile")},
          {"profile_sources", kinds},
          {"mode", rows.string(inputs, in, "mode")},
          {"overlap", rows.string(inputs, in, "overlap")},
          {"ep", rows.number(inputs, in, "ep")},
          {"tp", rows.number(inputs, in, "tp")},
          {"p50", rows.number_or_null(lat, lat_at, "p50")},
          {"p90", rows.number_or_null(lat, lat_at, "p90")},
          {"p99", rows.number_or_null(lat, lat_at, "p99")},
          {"max", rows.number_or_null(lat, lat_at, "max")},
          {"mean", rows.number_or_null(lat, lat_at, "mean")},
          {"throughput", rows.number(row, at, "throughput_tokens_per_s")},
          {"token_tail", rows.number(row, at, "token_tail_s")},
          {"a2a_tail", rows.number(row, at, "a2a_tail_s")},
          {"energy_per_token", rows.number_or_null(row, at, "energy_per_token_J")},
          {"avg_power", rows.number(row, at, "avg_power_W")},
          {"compute_slowdown", rows.number(row, at, "compute_slowdown")},
          {"timelines_p50",
           {{"ideal", rows.number_or_null(tl, tl_at, "ideal")},
            {"overlapped", rows.number_or_null(tl, tl_at, "overlapped")},
            {"sequential", rows.number_or_null(tl, tl_at, "sequential")}}}};
}

struct RoutedLayers {
  json layers = json::array();
  int moe_layers = 0;
};

// A timeline's MoE layers whose experts processed tokens (synthetic and dense layers have none). Every
// layer is checked, drawn or not, so that a malformed file fails the same way whatever it routes.
RoutedLayers routed_layers(const Reader& detail, const json& timeline, const std::string& t_at) {
  const json& layers = detail.array(timeline, t_at, "layers");
  RoutedLayers out;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string l_at = t_at + ".layers[" + std::to_string(i) + "]";
    const json& l = layers[i];
    const json& moe = detail.field(l, l_at, "moe");
    if (!moe.is_boolean()) detail.fail(l_at + ".moe", "true or false", &moe);
    const auto tokens = detail.numbers(l, l_at, "rank_tokens");
    const json x = {{"layer", detail.number(l, l_at, "layer")},
                    {"token_tail", detail.number(l, l_at, "token_tail_s")},
                    {"token_avg", detail.number(l, l_at, "token_avg_s")},
                    {"a2a_tail", detail.number(l, l_at, "a2a_tail_s")},
                    {"a2a_avg", detail.number(l, l_at, "a2a_avg_s")},
                    {"tokens", tokens}};
    if (!moe.get<bool>()) continue;
    ++out.moe_layers;
    const bool has_tokens = std::any_of(tokens.begin(), tokens.end(), [](double n) { return n > 0; });
    if (has_tokens) out.layers.push_back(x);
  }
  return out;
}

// Per timeline label (sequential, overlapped, ideal, ideal-1-chunk): the one step result.json's
// step_activity holds (sim/engine/result.hpp, step_activity_json), with the timeline's chunk count
// (the most over its MoE layers). Folders written before step_activity existed give none.
json timeline_activity(const Reader& detail, const json& timelines) {
  json out = json::object();
  for (std::size_t i = 0; i < timelines.size(); ++i) {
    const std::string at = "variant.timelines[" + std::to_string(i) + "]";
    const json& t = timelines[i];
    const std::string label = detail.string(t, at, "label");
    if (label != "sequential" && label != "overlapped" && label != "ideal" && label != "ideal-1-chunk") continue;
    if (!t.contains("step_activity") || t["step_activity"].is_null()) continue;
    const json& a = detail.object(t, at, "step_activity");
    const std::string a_at = at + ".step_activity";
    // The page draws intervals in ticks of kActivityTicks per step (finer than a pixel), as integers: a
    // tenth of the bytes of full-precision seconds. ideal-1-chunk gives only its span (the chunking cost).
    const double span = detail.number(a, a_at, "span_s");
    const double tick = span > 0.0 ? span / kActivityTicks : 1.0;
    json gpus = json::array();
    const json& rows = detail.array(a, a_at, "gpus");
    for (std::size_t g = 0; g < rows.size(); ++g) {
      const std::string g_at = a_at + ".gpus[" + std::to_string(g) + "]";
      json row = json::object();
      for (const char* lane : {"compute", "comm"}) {
        const json& iv = detail.array(rows[g], g_at, lane);
        json ticks = json::array();
        for (std::size_t k = 0; k < iv.size(); ++k) {
          if (!iv[k].is_array() || iv[k].size() != 2 || !iv[k][0].is_number() || !iv[k][1].is_number())
            detail.fail(g_at + "." + lane + "[" + std::to_string(k) + "]", "a [begin, end] pair of numbers", &iv[k]);
          ticks.push_back({std::llround(iv[k][0].get<double>() / tick), std::llround(iv[k][1].get<double>() / tick)});
        }
        row[lane] = std::move(ticks);
      }
      if (label != "ideal-1-chunk") gpus.push_back(std::move(row));
    }
    int chunks = 1;
    for (const auto& l : detail.array(t, at, "layers"))
      if (l.is_object() && l.value("moe", false) && l.contains("chunks") && l["chunks"].is_number_integer())
        chunks = std::max(chunks, l["chunks"].get<int>());
    out[label] = {{"step", detail.number(a, a_at, "step")},
                  {"span", span},
                  {"tick", tick},
                  {"gpus_total", detail.number(a, a_at, "gpus_total")},
                  {"chunks", chunks},
                  {"gpus", std::move(gpus)}};
  }
  return out;
}

// The per-variant part of the data: the summary row plus the requested timeline's steps and the
// routed MoE layers, read from variants/NAME/result.json.
json variant_data(const Reader& rows, const json& row, const std::string& at, const fs::path& root,
                  const std::string& baseline) {
  const std::string name = rows.string(row, at, "name");
  if (!is_folder_safe(name))
    rows.fail(at + ".name", "a variant name safe as a folder name (letters, digits, '.', '_', '+', '-')", &row["name"]);
  json v = variant_summary(rows, row, at, name, baseline);

  const Reader detail(root / "variants" / name / "result.json");
  const json doc = detail.parse("results.json lists variant " + name + " but its result file is not there");
  const json& var = detail.object(doc, "", "variant");
  const std::string detail_name = detail.string(var, "variant", "name");
  if (detail_name != name) detail.fail("variant.name", "\"" + name + "\" (the folder's variant)", &var["name"]);
  const json& timelines = detail.array(var, "variant", "timelines");
  if (timelines.empty()) detail.fail("variant.timelines", "at least one timeline (the requested one first)", &timelines);
  const json& t = timelines.front();
  const std::string t_at = "variant.timelines[0]";
  v["timeline"] = detail.string(t, t_at, "label");
  v["steps"] = detail.numbers(t, t_at, "step_latency_s");
  // Online rebalancing: the measured steps a rebalance came before (none without it).
  json rebalanced = json::array();
  if (var.contains("rebalance") && var["rebalance"].is_object() && var["rebalance"].contains("events") &&
      var["rebalance"]["events"].is_array())
    for (const auto& e : var["rebalance"]["events"])
      if (e.is_object() && e.contains("measured_step") && e["measured_step"].is_number_integer())
        rebalanced.push_back(e["measured_step"]);
  v["rebalances"] = std::move(rebalanced);
  v["gpus"] = detail.array(t, t_at, "gpus").size();
  v["activity"] = timeline_activity(detail, timelines);
  std::error_code ec;
  const fs::path trace = root / "variants" / name / "timeline.json";
  v["trace"] = fs::exists(trace, ec) ? "variants/" + name + "/timeline.json" : "";
  RoutedLayers routed = routed_layers(detail, t, t_at);
  v["moe_layers"] = routed.moe_layers;
  v["layers"] = std::move(routed.layers);
  return v;
}

// The console table's columns (sim/study/results.hpp, table_columns), as HTML: the same labels,
// units, scales and decimals, read from each variant's row.
std::string results_table_html(const json& data) {
  const json* base = nullptr;
  for (const auto& v : data["variants"])
    if (v["baseline"].get<bool>()) base = &v;
  const auto columns = table_columns();
  std::ostringstream h;
  h << "<table class=\"results\">\n<thead><tr><th>variant</th>";
  for (const MetricColumn* c : columns)
    h << "<th>" << html_escape(c->label) << (c->unit.empty() ? "" : "<br>" + html_escape(c->unit)) << "</th>";
  h << "<th>vs base<br>p99</th></tr></thead>\n<tbody>\n";
  for (const auto& v : data["variants"]) {
    const bool is_base = v["baseline"].get<bool>();
    std::string delta = is_base ? "base" : "";
    if (!is_base && base && v["p99"].is_number() && (*base)["p99"].is_number() && (*base)["p99"].get<double>() > 0)
      delta = format_change(v["p99"].get<double>() / (*base)["p99"].get<double>() - 1.0);
    h << "<tr" << (is_base ? " class=\"baseline\"" : "") << "><td>" << html_escape(v["name"].get<std::string>())
      << (is_base ? " *" : "") << "</td>";
    for (const auto& cell : v["table"]) h << "<td>" << html_escape(cell.get<std::string>()) << "</td>";
    h << "<td>" << delta << "</td></tr>\n";
  }
  h << "</tbody>\n</table>\n<p class=\"note\">* baseline (" << html_escape(data["baseline"].get<std::string>())
    << "); a2a and token tails: mean over MoE layers of the slowest GPU per layer; p50/p99 of the requested "
       "timeline's step latencies.</p>\n";
  return h.str();
}

std::string steps_text(const json& data) {
  std::set<std::size_t> counts;
  for (const auto& v : data["variants"]) counts.insert(v["steps"].size());
  std::vector<std::string> parts;
  for (auto n : counts) parts.push_back(std::to_string(n));
  return common::join(parts, " or ") + " measured steps per variant";
}

struct ChartShell {
  const char* id;
  const char* title;
  const char* detail;  // what the numbers are, after the source line
  bool wide;
};

constexpr ChartShell kCharts[kChartCount] = {
    {"latency", "1. Step latency p50 and p99 per variant",
     "p50 and p99 of each variant's requested timeline; the dashed line is the baseline's p99.", false},
    {"cdf", "2. Step-latency distribution (CDF)",
     "Every measured step of each variant's requested timeline, one line per variant.", false},
    {"layers", "3. Per-layer tail latency",
     "Per MoE layer, mean over measured steps of the slowest GPU: time computing routed experts (token-processing "
     "tail) and time with that layer's all-to-all in flight (all-to-all tail).",
     true},
    {"heatmap", "4. Token load per EP rank and MoE layer",
     "Mean tokens each EP rank's experts processed per step, from the replayed routing trace under the variant's "
     "placement; one colour scale for all variants; max/mean per layer at the right.",
     true},
    {"pareto", "5. Energy per token against p99 latency",
     "All GPUs' energy over the measured steps divided by the tokens processed, against p99 step latency; ringed "
     "points form the Pareto front (no other variant is both faster and cheaper).",
     false},
    {"timelines", "6. One step of the sequential, overlapped and ideal timelines",
     "The variant's first measured step simulated three ways, one row per GPU: its compute lane (solid) over its "
     "communication lane (light, hatched: dispatch, combine, collectives), time from the step's first event. "
     "Sequential: one chunk, dispatch, experts and combine in order. Overlapped: the MoE layer cut into chunks so that "
     "one chunk's all-to-all runs while another computes, under contention. Ideal: the overlapped schedule with "
     "contention switched off (docs/simulator.md, \"Overlap policies\"). Ideal still pays every per-chunk cost: each "
     "chunk's dispatch and combine wait their operation's fixed cost (launch, protocol setup, synchronisation) and "
     "each chunk's expert GEMMs run on fewer tokens, so ideal can end later than sequential where those costs "
     "outweigh the hidden communication; the note gives the cost of chunking, ideal(N chunks) / ideal(1 chunk) - 1.",
     true},
    {"steps", "7. Step latency over time",
     "Every measured step of each variant's requested timeline in run order; a ring marks a step an online "
     "rebalance came before (placement.rebalance; a blocking migration's time is in that step).",
     true},
};

// The profiles the variants' numbers come from, as load_report_data phrased them.
std::vector<std::string> profile_sources(const json& data) {
  std::vector<std::string> sources;
  for (const auto& s : data["sources"]) sources.push_back(s.get<std::string>());
  return sources;
}

// The line under every heading that says where the numbers come from.
std::string source_line(const json& data) {
  return "Predicted by the moesim simulator (model) with " + common::join(profile_sources(data), "; ") + "; " +
         steps_text(data) + ".";
}

// The context block: what was run, with which tool and inputs, so that a page read alone can be traced
// back to its study and results folder.
std::string context_html(const json& data) {
  std::set<std::string> mode_set;
  for (const auto& v : data["variants"]) mode_set.insert(v["mode"].get<std::string>());
  const std::vector<std::string> modes(mode_set.begin(), mode_set.end());
  const auto& ctx = data["context"];
  const std::string run_date = data["run_date"].get<std::string>();

  std::ostringstream h;
  auto item = [&](const std::string& term, const std::string& value) {
    h << "<dt>" << html_escape(term) << "</dt><dd>" << html_escape(value) << "</dd>";
  };
  h << "<dl class=\"context\">";
  item("variants", std::to_string(data["variants"].size()));
  item("baseline", data["baseline"].get<std::string>());
  item("workload mode", common::join(modes, ", "));
  item("profile", common::join(profile_sources(data), "; "));
  item("tool version", "moesim " + ctx["version"].get<std::string>() + " (" + ctx["build_type"].get<std::string>() + " build)");
  item("git revision", ctx["git_revision"].get<std::string>());
  item("SimGrid version", ctx["simgrid_version"].get<std::string>());
  item("run date", run_date.empty() ? "unknown" : run_date);
  item("study SHA-256", ctx["study_sha256"].get<std::string>());
  item("results folder", data["folder"].get<std::string>());
  h << "</dl>\n";
  return h.str();
}

std::string header_html(const json& data, const std::string& source) {
  std::ostringstream h;
  h << "<header>\n<h1>Study " << html_escape(data["study"].get<std::string>()) << "</h1>\n";
  const std::string description = data["description"].get<std::string>();
  if (description.empty())
    h << "<p class=\"description none\">No description recorded in results.json.</p>\n";
  else
    h << "<p class=\"description\">" << html_escape(description) << "</p>\n";
  h << context_html(data) << "<p class=\"source\">" << html_escape(source)
    << " Regenerate this page with <code>moesim report " << html_escape(data["folder"].get<std::string>())
    << "</code>.</p>\n</header>\n";
  return h.str();
}

// A link per variant to its Chrome-trace timeline, relative to the page, and how to open one.
std::string traces_html(const json& data) {
  const std::string base = data.value("link_base", std::string());
  std::ostringstream h;
  h << "<section class=\"traces\" id=\"traces\">\n<h2>Timeline traces</h2>\n<p class=\"perfetto\">Each variant's "
       "requested timeline, its first measured steps event by event, as a Chrome trace (Trace Event Format JSON): one "
       "process per GPU named after the variant, compute, communication and combine lanes, a power counter per GPU, "
       "flow arrows dispatch &rarr; experts &rarr; combine per MoE layer, and bytes and tokens in each slice's "
       "arguments. To open one, go to <a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a>, choose "
       "<b>Open trace file</b> and pick the file (the page cannot hand a local file to Perfetto itself); "
       "<code>chrome://tracing</code> (<b>Load</b>) opens it too.</p>\n<ul class=\"traces\">\n";
  for (const auto& v : data["variants"]) {
    const std::string trace = v.value("trace", std::string());
    const std::string name = v["name"].get<std::string>();
    if (trace.empty()) {
      h << "<li>" << html_escape(name) << ": no timeline.json in the results folder</li>\n";
      continue;
    }
    h << "<li><a class=\"trace\" data-variant=\"" << html_escape(name) << "\" href=\"" << html_escape(base + trace)
      << "\">" << html_escape(name) << ": " << html_escape(trace) << "</a> (timeline "
      << html_escape(v.value("timeline", std::string())) << ")</li>\n";
  }
  h << "</ul>\n</section>\n";
  return h.str();
}

// Empty figures that the script fills; each reports data-status and data-marks for the browser test.
std::string chart_shells_html(const std::string& source) {
  std::ostringstream h;
  for (const auto& c : kCharts) {
    h << "<figure class=\"chart" << (c.wide ? " wide" : "") << "\" id=\"fig-" << c.id << "\">\n<h2>" << c.title
      << "</h2>\n<p class=\"source\">" << html_escape(source) << " " << c.detail << "</p>\n"
      << "<div class=\"controls\"></div>\n<svg id=\"chart-" << c.id << "\" data-chart=\"" << c.id
      << "\" data-status=\"pending\" data-marks=\"0\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\""
      << html_escape(c.title) << "\"></svg>\n<div class=\"legend\"></div>\n<div class=\"note\"></div>\n"
      << "<div class=\"error\"></div>\n</figure>\n";
  }
  return h.str();
}

// results.json's free-text description, from the top level or (older folders) the context block.
std::string description_of(const json& doc, const json& context) {
  if (doc.contains("description") && doc["description"].is_string()) return doc["description"].get<std::string>();
  if (context.contains("description") && context["description"].is_string())
    return context["description"].get<std::string>();
  return "";
}

// The context fields the page shows; a folder written by an older tool may lack some.
json context_of(const json& context) {
  json ctx = json::object();
  for (const char* k : {"version", "git_revision", "simgrid_version", "build_type", "study_sha256"})
    ctx[k] = context.contains(k) && context[k].is_string() ? context[k].get<std::string>() : std::string("unknown");
  return ctx;
}

std::string run_date_of(const json& doc) {
  if (doc.contains("run_info") && doc["run_info"].is_object() && doc["run_info"].contains("date") &&
      doc["run_info"]["date"].is_string())
    return doc["run_info"]["date"].get<std::string>();
  return "";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char ch : text) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += ch;
    }
  }
  return out;
}

std::string script_json(const json& value) {
  const std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  std::string out;
  out.reserve(text.size());
  // '<', '>' and '&' occur in JSON only inside strings, where \u escapes mean the same characters.
  for (char ch : text) {
    switch (ch) {
      case '<': out += "\\u003c"; break;
      case '>': out += "\\u003e"; break;
      case '&': out += "\\u0026"; break;
      default: out += ch;
    }
  }
  return out;
}

json load_report_data(const std::string& dir) {
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw common::InputError(dir + ": expected a results folder (what `moesim run STUDY.yaml -o DIR` writes), found " +
                             (fs::exists(root, ec) ? "a file" : "nothing") + "; give the folder that holds results.json");
  const Reader rows(root / "results.json");
  const json doc = rows.parse("expected the results folder of `moesim run`, with results.json and variants/NAME/result.json");
  const json& version = rows.field(doc, "", "schema_version");
  if (!version.is_number_integer() || version.get<int>() != 1) rows.fail("schema_version", "1", &version);
  const json& context = rows.object(doc, "", "context");
  const json& variants = rows.array(doc, "", "variants");
  if (variants.empty()) rows.fail("variants", "at least one variant", &variants);
  const std::string baseline = rows.string(doc, "", "baseline");

  json out = {{"schema_version", 1},
              {"folder", dir},
              {"study", rows.string(context, "context", "study")},
              {"description", description_of(doc, context)},
              {"baseline", baseline},
              {"context", context_of(context)},
              {"run_date", run_date_of(doc)},
              {"variants", json::array()}};
  std::set<std::string> names;
  std::vector<std::string> sources;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    json v = variant_data(rows, variants[i], "variants[" + std::to_string(i) + "]", root, baseline);
    if (!names.insert(v["name"].get<std::string>()).second)
      rows.fail("variants[" + std::to_string(i) + "].name", "a name not used by an earlier variant", &variants[i]["name"]);
    const std::string source = "profile " + v["profile"].get<std::string>() + " (" + kinds_text(v["profile_sources"], " + ") + " values)";
    if (std::find(sources.begin(), sources.end(), source) == sources.end()) sources.push_back(source);
    out["variants"].push_back(std::move(v));
  }
  out["sources"] = sources;
  return out;
}

std::string render_report(const json& data) {
  const std::string source = source_line(data);
  std::ostringstream h;
  // The style and script elements open with a line break: the assets' first line starts a line of the page.
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>moesim report: " << html_escape(data["study"].get<std::string>()) << "</title>\n<style>\n"
    << assets::kReportStyle << "</style>\n</head>\n"
    << "<body data-rendered=\"0\" data-charts=\"" << kChartCount << "\">\n"
    << header_html(data, source) << "<section>\n<h2>Results</h2>\n" << results_table_html(data)
    << "</section>\n" << traces_html(data) << "<section class=\"charts\">\n" << chart_shells_html(source)
    << "</section>\n";
  // The chart code is plain DOM and SVG with no libraries; it puts data strings on the page only through
  // textContent and setAttribute, never as markup.
  h << "<script type=\"application/json\" id=\"report-data\">" << script_json(data) << "</script>\n<script>\n"
    << assets::kReportScript << "</script>\n</body>\n</html>\n";
  return h.str();
}

std::string write_report(const std::string& dir, const std::string& file, bool overwrite) {
  common::check_can_write(file, overwrite);
  json data = load_report_data(dir);
  // Links to the folder's files are relative to the page: from the page's folder to the results folder.
  std::error_code ec;
  const fs::path page_dir = fs::absolute(fs::path(file), ec).parent_path();
  const fs::path results_dir = fs::absolute(fs::path(dir), ec).lexically_normal();
  const fs::path rel = results_dir.lexically_relative(page_dir.lexically_normal());
  data["link_base"] = rel.empty() || rel == "." ? std::string() : rel.generic_string() + "/";
  const std::string page = render_report(data);
  common::write_file_atomic(file, page, overwrite);
  return file;
}

std::string write_report(const std::string& dir) {
  return write_report(dir, (fs::path(dir) / "report.html").string(), true);
}

}  // namespace moesim::sim
