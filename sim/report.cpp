#include "sim/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kChartCount = 6;

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

// The per-variant part of the data: the summary row plus the requested timeline's steps and the
// routed MoE layers (layers whose experts processed tokens; synthetic and dense layers have none).
json variant_data(const Reader& rows, const json& row, const std::string& at, const fs::path& root,
                  const std::string& baseline) {
  const std::string name = rows.string(row, at, "name");
  if (!is_folder_safe(name))
    rows.fail(at + ".name", "a variant name safe as a folder name (letters, digits, '.', '_', '+', '-')", &row["name"]);
  const json& inputs = rows.object(row, at, "inputs");
  const std::string in = at + ".inputs";
  const json& lat = rows.object(row, at, "step_latency_s");
  const std::string lat_at = at + ".step_latency_s";
  const json& tl = rows.object(row, at, "timelines_p50_s");
  const std::string tl_at = at + ".timelines_p50_s";
  const json& kinds = rows.array(inputs, in, "profile_sources");
  for (std::size_t i = 0; i < kinds.size(); ++i)
    if (!kinds[i].is_string()) rows.fail(in + ".profile_sources[" + std::to_string(i) + "]", "a string", &kinds[i]);

  json v = {{"name", name},
            {"baseline", name == baseline},
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
  v["gpus"] = detail.array(t, t_at, "gpus").size();
  const json& layers = detail.array(t, t_at, "layers");
  json routed = json::array();
  int moe_layers = 0;
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
    ++moe_layers;
    const bool has_tokens = std::any_of(tokens.begin(), tokens.end(), [](double n) { return n > 0; });
    if (has_tokens) routed.push_back(x);
  }
  v["moe_layers"] = moe_layers;
  v["layers"] = routed;
  return v;
}

std::string fixed(const json& value, int decimals, double scale = 1.0) {
  if (!value.is_number()) return "n/a";
  const double x = value.get<double>() * scale;
  if (!std::isfinite(x)) return "n/a";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

// The console table's columns (sim/runner.cpp results_table), as HTML.
std::string results_table_html(const json& data) {
  const json* base = nullptr;
  for (const auto& v : data["variants"])
    if (v["baseline"].get<bool>()) base = &v;
  std::ostringstream h;
  h << "<table class=\"results\">\n<thead><tr><th>variant</th><th>p50<br>ms</th><th>p99<br>ms</th><th>tok/s</th>"
       "<th>a2a tail<br>ms/layer</th><th>tok tail<br>ms/layer</th><th>mJ/token</th><th>avg W<br>per GPU</th>"
       "<th>slowdown<br>compute</th><th>vs base<br>p99</th></tr></thead>\n<tbody>\n";
  for (const auto& v : data["variants"]) {
    const bool is_base = v["baseline"].get<bool>();
    std::string delta;
    if (is_base) {
      delta = "base";
    } else if (base && v["p99"].is_number() && (*base)["p99"].is_number() && (*base)["p99"].get<double>() > 0) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%+.1f%%", 100.0 * (v["p99"].get<double>() / (*base)["p99"].get<double>() - 1.0));
      delta = buf;
    }
    h << "<tr" << (is_base ? " class=\"baseline\"" : "") << "><td>" << html_escape(v["name"].get<std::string>())
      << (is_base ? " *" : "") << "</td><td>" << fixed(v["p50"], 3, 1e3) << "</td><td>" << fixed(v["p99"], 3, 1e3)
      << "</td><td>" << fixed(v["throughput"], 0) << "</td><td>" << fixed(v["a2a_tail"], 4, 1e3) << "</td><td>"
      << fixed(v["token_tail"], 4, 1e3) << "</td><td>" << fixed(v["energy_per_token"], 3, 1e3) << "</td><td>"
      << fixed(v["avg_power"], 0) << "</td><td>" << fixed(v["compute_slowdown"], 1, 100.0) << "%</td><td>" << delta
      << "</td></tr>\n";
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
    {"timelines", "6. Ideal, overlapped and sequential timelines",
     "p50 step latency of each variant simulated three ways: ideal (no contention), overlapped (chunked all-to-all "
     "under contention), sequential; the outlined bar is the variant's requested policy.",
     false},
};

constexpr const char* kStyle = R"CSS(
:root { --fg: #1d2430; --muted: #5b6675; --line: #d7dce3; --bg: #ffffff; --panel: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1400px; padding: 16px 20px 40px; color: var(--fg); background: var(--bg);
  font: 14px/1.45 "DejaVu Sans", "Liberation Sans", Arial, sans-serif; }
h1 { font-size: 22px; margin: 4px 0 6px; }
h2 { font-size: 16px; margin: 0 0 4px; }
header { border-bottom: 1px solid var(--line); padding-bottom: 10px; margin-bottom: 14px; }
.description { margin: 4px 0 8px; white-space: pre-wrap; }
.description.none { color: var(--muted); font-style: italic; }
dl.context { display: grid; grid-template-columns: max-content 1fr max-content 1fr; gap: 2px 14px; margin: 6px 0;
  font-size: 13px; }
dl.context dt { color: var(--muted); }
dl.context dd { margin: 0; font-family: "DejaVu Sans Mono", monospace; overflow-wrap: anywhere; }
.source { color: var(--muted); font-size: 12.5px; margin: 2px 0 6px; }
table.results { border-collapse: collapse; font-size: 13px; margin: 6px 0 2px; }
table.results th, table.results td { padding: 3px 9px; border-bottom: 1px solid var(--line); text-align: right; }
table.results th:first-child, table.results td:first-child { text-align: left; font-family: "DejaVu Sans Mono", monospace; }
table.results thead th { font-weight: 600; vertical-align: bottom; background: var(--panel); }
table.results tr.baseline td { font-weight: 700; background: #fff8e1; }
.note { color: var(--muted); font-size: 12.5px; margin: 4px 0; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(600px, 1fr)); gap: 18px; margin-top: 18px; }
figure.chart { margin: 0; padding: 12px 14px; border: 1px solid var(--line); border-radius: 6px; background: #fff; min-width: 0; }
figure.chart.wide { grid-column: 1 / -1; }
figure.chart svg { width: 100%; height: auto; display: block; }
.controls { font-size: 12.5px; margin: 4px 0; }
.controls label { margin-right: 12px; white-space: nowrap; }
.controls select { font: inherit; }
.legend { font-size: 12.5px; margin: 4px 0 2px; }
.legend span.item { display: inline-block; margin-right: 14px; white-space: nowrap; }
.legend i { display: inline-block; width: 14px; height: 10px; margin-right: 5px; vertical-align: -1px; border-radius: 2px; }
.legend i.line { height: 0; border-top: 2.5px solid; border-radius: 0; vertical-align: 3px; width: 22px; }
.legend i.dashed { border-top-style: dashed; }
.legend i.outline { background: #fff; border: 2px solid #111; }
.legend i.ring { width: 12px; height: 12px; border-radius: 50%; background: #fff; border: 1.5px solid #222; }
.legend i.diamond { width: 9px; height: 9px; transform: rotate(45deg); margin: 0 7px 0 3px; border-radius: 0; }
.error { color: #b00020; font-weight: 600; font-size: 13px; }
.error:empty { display: none; }
svg text { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; fill: #1d2430; }
svg .axis line, svg .axis path { stroke: #6b7380; }
svg .grid line { stroke: #e6e9ee; }
svg .tick { font-size: 11px; fill: #4a5462; }
svg .axis-label { font-size: 12px; fill: #1d2430; }
svg .empty-msg { font-size: 14px; fill: #5b6675; }
ul.front { margin: 4px 0; padding-left: 20px; font-size: 12.5px; }
)CSS";

// The chart code: plain DOM and SVG, no libraries. Data strings reach the page only through
// textContent and setAttribute, never as markup.
constexpr const char* kScript = R"JS(
(function () {
  'use strict';
  const NS = 'http://www.w3.org/2000/svg';
  const MU = '\u00b5';
  const DATA = JSON.parse(document.getElementById('report-data').textContent);
  const VARIANTS = DATA.variants;
  const PALETTE = ['#0072b2', '#e69f00', '#009e73', '#d55e00', '#cc79a7', '#56b4e9', '#8c6d1f', '#3f3f3f',
                   '#9467bd', '#17becf'];
  const colour = (i) => i < PALETTE.length ? PALETTE[i] : 'hsl(' + Math.round((i * 137.508) % 360) + ',55%,42%)';
  const colourOf = (v) => colour(VARIANTS.indexOf(v));
  const isNum = (x) => typeof x === 'number' && isFinite(x);
  // Loops rather than Math.max(...a): a long run's step list can exceed the engine's argument limit.
  const maxOf = (a) => a.reduce((m, x) => (x > m ? x : m), -Infinity);
  const minOf = (a) => a.reduce((m, x) => (x < m ? x : m), Infinity);
  const baseline = VARIANTS.find((v) => v.baseline);

  function el(parent, tag, attrs) {
    const e = document.createElementNS(NS, tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, str, attrs) {
    const t = el(parent, 'text', Object.assign({ x: x, y: y }, attrs || {}));
    t.textContent = str;
    return t;
  }
  function tip(e, str) { el(e, 'title').textContent = str; return e; }
  function html(parent, tag, attrs, str) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) e.setAttribute(k, String(attrs[k]));
    if (str !== undefined) e.textContent = str;
    if (parent) parent.appendChild(e);
    return e;
  }
  function clear(node) { while (node && node.firstChild) node.removeChild(node.firstChild); }
  function fmt(x, digits) {
    if (!isNum(x)) return 'n/a';
    const d = digits || 4;
    if (x === 0) return '0';
    const a = Math.abs(x);
    if (a >= 1e5) return Math.round(x).toLocaleString('en-US');
    return Number(x.toPrecision(d)).toString();
  }
  function pct(x) { return (x >= 0 ? '+' : '') + (100 * x).toFixed(1) + '%'; }
  function timeUnit(maxS) {
    if (maxS >= 1) return { f: 1, u: 's' };
    if (maxS >= 1e-3) return { f: 1e3, u: 'ms' };
    return { f: 1e6, u: MU + 's' };
  }
  function energyUnit(maxJ) { return maxJ >= 1 ? { f: 1, u: 'J' } : { f: 1e3, u: 'mJ' }; }

  // Ticks at 1, 2 or 5 times a power of ten, covering [lo, hi].
  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) {
      const pad = lo === 0 ? 1 : Math.abs(lo) * 0.05;
      lo -= pad; hi += pad;
    }
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / mag;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
    const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
    const decimals = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const ticks = [];
    for (let i = first; i <= last; ++i) ticks.push(i * step);
    return { lo: first * step, hi: last * step, ticks: ticks, label: (v) => v.toFixed(decimals) };
  }

  // Axes, grid and labels. opts.x is {bands: [names]} or {lo, hi}; opts.y is {lo, hi}.
  function frame(svg, opts) {
    const m = opts.margin, W = opts.width, H = opts.height;
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const g = el(svg, 'g', { transform: 'translate(' + m.l + ',' + m.t + ')' });
    const f = { g: g, pw: pw, ph: ph };
    const yt = opts.y.ticks ? { lo: opts.y.lo, hi: opts.y.hi, ticks: opts.y.ticks, label: opts.y.label }
                            : niceTicks(opts.y.lo, opts.y.hi, opts.yCount || 6);
    f.y = (v) => ph - (v - yt.lo) / (yt.hi - yt.lo) * ph;
    const grid = el(g, 'g', { class: 'grid' });
    const axis = el(g, 'g', { class: 'axis' });
    for (const v of yt.ticks) {
      el(grid, 'line', { x1: 0, x2: pw, y1: f.y(v), y2: f.y(v) });
      text(axis, -6, f.y(v) + 4, yt.label(v), { class: 'tick', 'text-anchor': 'end' });
    }
    if (opts.x.bands) {
      const n = opts.x.bands.length;
      f.band = pw / n;
      f.xBand = (i) => i * f.band;
      const lab = opts.x.labels;
      opts.x.bands.forEach((name, i) => {
        const cx = (i + 0.5) * f.band;
        const attrs = { class: 'tick' };
        if (opts.x.bold && opts.x.bold(i)) attrs['font-weight'] = 700;
        if (lab.rotate) {
          attrs['text-anchor'] = 'end';
          attrs.transform = 'rotate(-40 ' + cx + ' ' + (ph + 12) + ')';
          text(axis, cx, ph + 12, name, attrs);
        } else {
          attrs['text-anchor'] = 'middle';
          lab.lines[i].forEach((line, k) => text(axis, cx, ph + 15 + 13 * k, line, attrs));
        }
      });
    } else {
      const xt = niceTicks(opts.x.lo, opts.x.hi, opts.xCount || 8);
      f.x = (v) => (v - xt.lo) / (xt.hi - xt.lo) * pw;
      f.xLo = xt.lo; f.xHi = xt.hi;
      for (const v of xt.ticks) {
        el(grid, 'line', { x1: f.x(v), x2: f.x(v), y1: 0, y2: ph });
        text(axis, f.x(v), ph + 16, opts.x.label ? opts.x.label(v) : xt.label(v), { class: 'tick', 'text-anchor': 'middle' });
      }
    }
    el(axis, 'line', { x1: 0, x2: pw, y1: ph, y2: ph });
    el(axis, 'line', { x1: 0, x2: 0, y1: 0, y2: ph });
    text(axis, pw / 2, ph + m.b - 8, opts.xLabel, { class: 'axis-label', 'text-anchor': 'middle' });
    text(axis, 0, 0, opts.yLabel, { class: 'axis-label', 'text-anchor': 'middle',
      transform: 'translate(' + (14 - m.l) + ',' + ph / 2 + ') rotate(-90)' });
    return f;
  }

  function legendItem(c, col, label, kind) {
    const s = html(c.legend, 'span', { class: 'item' });
    const i = html(s, 'i', { class: kind || '' });
    if (kind && kind.indexOf('line') >= 0) i.style.borderTopColor = col; else i.style.background = col;
    s.appendChild(document.createTextNode(label));
  }
  function variantLegend(c, vs) {
    for (const v of vs) legendItem(c, colourOf(v), v.name + (v.baseline ? ' (baseline)' : ''));
  }
  function empty(c, message) {
    const W = c.wide ? 1320 : 660;
    c.svg.setAttribute('viewBox', '0 0 ' + W + ' 70');
    text(c.svg, W / 2, 40, message, { class: 'empty-msg', 'text-anchor': 'middle' });
    return { marks: 0, status: 'empty' };
  }
  function noMoeMessage() {
    const modes = Array.from(new Set(VARIANTS.map((v) => v.mode))).join(', ');
    return 'no MoE layers with routed tokens (workload mode ' + modes + ': no routing to show)';
  }
  // Labels under a band axis: wrapped after '-', '_' or ' ' into at most three lines when that fits
  // the band, else rotated; returns the room they need below the axis and left of it.
  const CHAR_W = 6.6;
  function bandLabels(names, width) {
    const band = width / names.length, perLine = Math.max(4, Math.floor(band / CHAR_W));
    const wrapped = names.map((name) => {
      const lines = [];
      let cur = '';
      for (const t of name.split(/(?<=[-_ ])/)) {
        if (cur && (cur + t).trim().length > perLine) { lines.push(cur.trim()); cur = t; } else cur += t;
      }
      if (cur) lines.push(cur.trim());
      return lines;
    });
    if (wrapped.every((ls) => ls.length <= 3 && ls.every((l) => l.length <= perLine)))
      return { lines: wrapped, space: 10 + 13 * maxOf(wrapped.map((l) => l.length)), left: 0 };
    const longest = maxOf(names.map((n) => n.length));
    const ang = 40 * Math.PI / 180;
    return { rotate: true, space: Math.min(210, 24 + longest * CHAR_W * Math.sin(ang)),
             left: Math.max(0, Math.min(170, names[0].length * CHAR_W * Math.cos(ang) - band / 2 - 50)) };
  }

  function drawLatency(c) {
    const vs = VARIANTS.filter((v) => isNum(v.p50) || isNum(v.p99));
    if (!vs.length) return empty(c, 'no variant has measured steps');
    const tu = timeUnit(maxOf(vs.map((v) => Math.max(v.p50 || 0, v.p99 || 0))));
    const names = vs.map((v) => v.name + (v.baseline ? ' (baseline)' : ''));
    const lab = bandLabels(names, 580);
    const top = maxOf(vs.map((v) => Math.max(v.p50 || 0, v.p99 || 0))) * tu.f * 1.1;
    const f = frame(c.svg, { width: 660 + lab.left, height: 330 + lab.space,
      margin: { l: 66 + lab.left, r: 14, t: 16, b: 30 + lab.space },
      x: { bands: names, labels: lab, bold: (i) => vs[i].baseline }, y: { lo: 0, hi: top },
      xLabel: 'variant', yLabel: 'step latency (' + tu.u + ')' });
    let marks = 0;
    vs.forEach((v, i) => {
      const col = colourOf(v);
      const bw = f.band * 0.36;
      const x0 = f.xBand(i) + f.band * 0.14;
      [['p50', v.p50, 0.45], ['p99', v.p99, 1]].forEach(([k, val, op], j) => {
        if (!isNum(val)) return;
        const y = f.y(val * tu.f);
        const r = el(f.g, 'rect', { x: x0 + j * bw, y: y, width: Math.max(1, bw - 2), height: Math.max(0, f.ph - y),
          fill: col, 'fill-opacity': op, stroke: col, 'data-mark': 1 });
        const base = baseline && isNum(baseline[k]) && !v.baseline ? ', ' + pct(val / baseline[k] - 1) + ' vs baseline' : '';
        tip(r, v.name + ': ' + k + ' ' + fmt(val * tu.f) + ' ' + tu.u + base);
        if (bw >= 30) text(f.g, x0 + j * bw + (bw - 2) / 2, y - 4, fmt(val * tu.f, 3), { class: 'tick', 'text-anchor': 'middle' });
        ++marks;
      });
    });
    if (baseline && isNum(baseline.p99)) {
      const y = f.y(baseline.p99 * tu.f);
      el(f.g, 'line', { x1: 0, x2: f.pw, y1: y, y2: y, stroke: '#333', 'stroke-dasharray': '5,4', 'stroke-width': 1.2 });
    }
    legendItem(c, 'rgba(80,90,100,0.45)', 'p50 (light)');
    legendItem(c, 'rgb(80,90,100)', 'p99 (solid)');
    if (baseline && isNum(baseline.p99))
      legendItem(c, '#333', 'baseline p99 (' + fmt(baseline.p99 * tu.f) + ' ' + tu.u + ')', 'line dashed');
    c.legend.appendChild(document.createTextNode(' \u00b7 colour = variant, as in every chart'));
    return { marks: marks };
  }

  function drawCdf(c) {
    const vs = VARIANTS.filter((v) => v.steps.length);
    if (!vs.length) return empty(c, 'no variant has measured steps');
    const all = [].concat.apply([], vs.map((v) => v.steps));
    const lo = minOf(all), hi = maxOf(all);
    const tu = timeUnit(hi);
    const pad = (hi - lo) * 0.03;
    const f = frame(c.svg, { width: 660, height: 380, margin: { l: 66, r: 18, t: 14, b: 46 },
      x: { lo: (lo - pad) * tu.f, hi: (hi + pad) * tu.f }, y: { lo: 0, hi: 1 }, yCount: 5,
      xLabel: 'step latency (' + tu.u + ')', yLabel: 'fraction of measured steps' });
    for (const q of [0.5, 0.99]) {
      el(f.g, 'line', { x1: 0, x2: f.pw, y1: f.y(q), y2: f.y(q), stroke: '#999', 'stroke-dasharray': '2,3' });
      text(f.g, 4, f.y(q) + 12, q === 0.5 ? 'p50' : 'p99', { class: 'tick' });
    }
    let marks = 0;
    for (const v of vs) {
      const s = v.steps.slice().sort((a, b) => a - b);
      const n = s.length;
      let d = 'M' + f.x(s[0] * tu.f).toFixed(2) + ',' + f.y(0).toFixed(2);
      s.forEach((x, i) => {
        const px = f.x(x * tu.f).toFixed(2);
        d += 'L' + px + ',' + f.y(i / n).toFixed(2) + 'L' + px + ',' + f.y((i + 1) / n).toFixed(2);
      });
      d += 'L' + f.pw.toFixed(2) + ',' + f.y(1).toFixed(2);
      const p = el(f.g, 'path', { d: d, fill: 'none', stroke: colourOf(v), 'stroke-width': v.baseline ? 2.6 : 1.8,
        'data-mark': 1 });
      tip(p, v.name + ': ' + n + ' steps, min ' + fmt(s[0] * tu.f) + ', p50 ' + fmt(v.p50 * tu.f) + ', p99 ' +
        fmt(v.p99 * tu.f) + ', max ' + fmt(s[n - 1] * tu.f) + ' ' + tu.u);
      ++marks;
    }
    variantLegend(c, vs);
    return { marks: marks };
  }

  function drawLayers(c) {
    const all = VARIANTS.filter((v) => v.layers.length);
    if (!all.length) return empty(c, noMoeMessage());
    if (!c.selected) {
      c.selected = new Set(all.map((v) => v.name));
      const ctl = html(c.controls, 'span', {}, 'variants: ');
      for (const v of all) {
        const l = html(ctl, 'label', {});
        const box = html(l, 'input', { type: 'checkbox', 'data-variant': v.name });
        box.checked = true;
        box.addEventListener('change', () => {
          if (box.checked) c.selected.add(v.name); else c.selected.delete(v.name);
          c.repaint();
        });
        const sw = html(l, 'span', {}, ' ' + v.name);
        sw.style.color = colourOf(v);
      }
    }
    const vs = all.filter((v) => c.selected.has(v.name));
    if (!vs.length) return empty(c, 'no variant selected: tick one above');
    const vals = [].concat.apply([], vs.map((v) => v.layers.map((l) => Math.max(l.token_tail, l.a2a_tail))));
    const tu = timeUnit(maxOf(vals));
    const lmin = minOf(vs.map((v) => v.layers[0].layer));
    const lmax = maxOf(vs.map((v) => v.layers[v.layers.length - 1].layer));
    const top = maxOf(vals) * tu.f * 1.08;
    c.svg.setAttribute('viewBox', '0 0 1320 380');
    let marks = 0;
    const panels = [['token_tail', 'token_avg', 'token-processing tail (slowest GPU)', ''],
                    ['a2a_tail', 'a2a_avg', 'all-to-all tail (slowest GPU)', '6,4']];
    panels.forEach(([key, avgKey, title, dash], pi) => {
      const g = el(c.svg, 'svg', { x: pi * 660, y: 0, width: 660, height: 380 });
      const f = frame(g, { width: 660, height: 380, margin: { l: 66, r: 16, t: 26, b: 46 },
        x: { lo: lmin, hi: lmax, label: (v) => v.toFixed(0) }, xCount: Math.min(12, Math.max(1, lmax - lmin)),
        y: { lo: 0, hi: top }, xLabel: 'decoder layer index (MoE layers)', yLabel: title.split(' (')[0] + ' (' + tu.u + ')' });
      text(g, 66, 16, title, { class: 'axis-label', 'font-weight': 700 });
      for (const v of vs) {
        const col = colourOf(v);
        const d = v.layers.map((l, i) => (i ? 'L' : 'M') + f.x(l.layer).toFixed(2) + ',' + f.y(l[key] * tu.f).toFixed(2)).join('');
        const p = el(f.g, 'path', { d: d, fill: 'none', stroke: col, 'stroke-width': v.baseline ? 2.4 : 1.6,
          'stroke-dasharray': dash, 'data-mark': 1 });
        const worst = v.layers.reduce((a, b) => (b[key] > a[key] ? b : a));
        tip(p, v.name + ': ' + title + ', mean over layers ' + fmt(v.layers.reduce((s, l) => s + l[key], 0) /
          v.layers.length * tu.f) + ' ' + tu.u + ', worst layer ' + worst.layer + ' (' + fmt(worst[key] * tu.f) + ' ' + tu.u + ')');
        ++marks;
        if (v.layers.length <= 80) {
          for (const l of v.layers) {
            const dot = el(f.g, 'circle', { cx: f.x(l.layer), cy: f.y(l[key] * tu.f), r: 2.6, fill: dash ? '#fff' : col,
              stroke: col, 'stroke-width': 1.2 });
            tip(dot, v.name + ', layer ' + l.layer + ': ' + title.split(' (')[0] + ' ' + fmt(l[key] * tu.f) + ' ' + tu.u +
              ' (mean over GPUs ' + fmt(l[avgKey] * tu.f) + ' ' + tu.u + ')');
          }
        }
      }
    });
    variantLegend(c, vs);
    legendItem(c, '#333', 'token-processing tail', 'line');
    legendItem(c, '#333', 'all-to-all tail', 'line dashed');
    return { marks: marks };
  }

  const VIRIDIS = ['#440154', '#482878', '#3e4989', '#31688e', '#26828e', '#1f9e89', '#35b779', '#6ece58', '#b5de2b', '#fde725'];
  function viridis(t) {
    const x = Math.min(1, Math.max(0, t)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(x)), u = x - i;
    const a = VIRIDIS[i], b = VIRIDIS[i + 1];
    const ch = (h, k) => parseInt(h.substr(1 + 2 * k, 2), 16);
    const mix = [0, 1, 2].map((k) => Math.round(ch(a, k) + (ch(b, k) - ch(a, k)) * u));
    return 'rgb(' + mix.join(',') + ')';
  }

  function drawHeatmap(c) {
    const all = VARIANTS.filter((v) => v.layers.length);
    if (!all.length) return empty(c, noMoeMessage());
    if (!c.select) {
      const l = html(c.controls, 'label', {}, 'variant: ');
      c.select = html(l, 'select', {});
      for (const v of all) html(c.select, 'option', { value: v.name }, v.name + (v.baseline ? ' (baseline)' : ''));
      c.select.value = (baseline && baseline.layers.length ? baseline : all[0]).name;
      c.select.addEventListener('change', () => c.repaint());
    }
    const v = all.find((x) => x.name === c.select.value) || all[0];
    let vmax = 0;
    for (const x of all) for (const l of x.layers) for (const n of l.tokens) vmax = Math.max(vmax, n);
    const rows = v.layers.length;
    const cols = maxOf(v.layers.map((l) => l.tokens.length));
    const m = { l: 70, t: 30, r: 190, b: 52 };
    const cw = Math.min(80, (1320 - m.l - m.r) / cols);
    const rh = Math.max(5, Math.min(24, 620 / rows));
    const lh = Math.max(140, Math.min(rows * rh, 300));
    const W = 1320, H = m.t + Math.max(rows * rh, lh) + m.b;
    c.svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    const g = el(c.svg, 'g', { transform: 'translate(' + m.l + ',' + m.t + ')' });
    const axis = el(g, 'g', { class: 'axis' });
    let marks = 0;
    const rowEvery = Math.ceil(12 / rh), colEvery = Math.ceil(26 / cw);
    v.layers.forEach((l, r) => {
      const mean = l.tokens.reduce((s, n) => s + n, 0) / l.tokens.length;
      l.tokens.forEach((n, k) => {
        const cell = el(g, 'rect', { x: k * cw, y: r * rh, width: Math.max(0.5, cw - 1), height: Math.max(0.5, rh - 1),
          fill: viridis(vmax > 0 ? n / vmax : 0), 'data-mark': 1 });
        tip(cell, v.name + ', layer ' + l.layer + ', EP rank ' + k + ': ' + fmt(n) + ' tokens/step (' +
          (mean > 0 ? fmt(n / mean, 3) : 'n/a') + ' x layer mean)');
        ++marks;
      });
      if (r % rowEvery === 0) text(axis, -6, r * rh + rh / 2 + 4, String(l.layer), { class: 'tick', 'text-anchor': 'end' });
      const ratio = mean > 0 ? maxOf(l.tokens) / mean : NaN;
      if (r % rowEvery === 0)
        text(axis, cols * cw + 8, r * rh + rh / 2 + 4, isNum(ratio) ? ratio.toFixed(2) : 'n/a',
          { class: 'tick', fill: ratio > 1.5 ? '#b00020' : '#4a5462' });
    });
    for (let k = 0; k < cols; k += colEvery) text(axis, k * cw + cw / 2, rows * rh + 14, String(k), { class: 'tick', 'text-anchor': 'middle' });
    text(axis, cols * cw / 2, rows * rh + 38, 'EP rank', { class: 'axis-label', 'text-anchor': 'middle' });
    text(axis, -6, -10, 'MoE layer', { class: 'axis-label', 'text-anchor': 'end' });
    text(axis, cols * cw + 8, -10, 'max/mean', { class: 'tick', 'font-weight': 700 });
    // The colour scale.
    const lx = cols * cw + 90;
    const defs = el(c.svg, 'defs');
    const grad = el(defs, 'linearGradient', { id: 'heat-scale', x1: 0, y1: 1, x2: 0, y2: 0 });
    VIRIDIS.forEach((col, i) => el(grad, 'stop', { offset: (i / (VIRIDIS.length - 1)).toFixed(3), 'stop-color': col }));
    el(g, 'rect', { x: lx, y: 0, width: 16, height: lh, fill: 'url(#heat-scale)', stroke: '#999' });
    const lt = niceTicks(0, vmax > 0 ? vmax : 1, 5);
    for (const t of lt.ticks) {
      if (t > vmax && vmax > 0) continue;
      const y = lh - (vmax > 0 ? t / vmax : 0) * lh;
      el(axis, 'line', { x1: lx + 16, x2: lx + 20, y1: y, y2: y });
      text(axis, lx + 23, y + 4, lt.label(t), { class: 'tick' });
    }
    text(axis, lx - 4, -10, 'tokens/step', { class: 'tick', 'font-weight': 700 });
    c.svg.setAttribute('data-rows', String(rows));
    c.svg.setAttribute('data-cols', String(cols));
    c.svg.setAttribute('data-variant', v.name);
    const worst = v.layers.map((l) => ({ l: l.layer, r: maxOf(l.tokens) / (l.tokens.reduce((s, n) => s + n, 0) / l.tokens.length) }))
      .reduce((a, b) => (b.r > a.r ? b : a));
    html(c.note, 'span', {}, v.name + ': ' + rows + ' MoE layers x ' + cols + ' EP ranks; most imbalanced layer ' + worst.l +
      ' (max/mean ' + fmt(worst.r, 3) + '); colour scale 0..' + fmt(vmax) + ' tokens/step, shared by all variants.');
    return { marks: marks };
  }

  function drawPareto(c) {
    const vs = VARIANTS.filter((v) => isNum(v.p99) && isNum(v.energy_per_token));
    if (!vs.length) return empty(c, 'no variant has an energy per token (synthetic workloads process no tokens)');
    const tu = timeUnit(maxOf(vs.map((v) => v.p99)));
    const eu = energyUnit(maxOf(vs.map((v) => v.energy_per_token)));
    const xs = vs.map((v) => v.p99 * tu.f), ys = vs.map((v) => v.energy_per_token * eu.f);
    const span = (a) => { const lo = minOf(a), hi = maxOf(a); const p = (hi - lo) * 0.12 || Math.abs(hi) * 0.05 || 1; return [lo - p, hi + p]; };
    const [x0, x1] = span(xs), [y0, y1] = span(ys);
    const f = frame(c.svg, { width: 660, height: 400, margin: { l: 70, r: 18, t: 14, b: 46 }, x: { lo: x0, hi: x1 },
      y: { lo: y0, hi: y1 }, xLabel: 'p99 step latency (' + tu.u + ')', yLabel: 'energy per token (' + eu.u + ', all GPUs)' });
    const dominates = (a, b) => a.p99 <= b.p99 && a.energy_per_token <= b.energy_per_token &&
      (a.p99 < b.p99 || a.energy_per_token < b.energy_per_token);
    const front = vs.filter((p) => !vs.some((q) => dominates(q, p))).sort((a, b) => a.p99 - b.p99 || a.energy_per_token - b.energy_per_token);
    let d = '';
    front.forEach((p, i) => {
      const px = f.x(p.p99 * tu.f).toFixed(2), py = f.y(p.energy_per_token * eu.f).toFixed(2);
      d += i === 0 ? 'M' + px + ',0L' + px + ',' + py : 'H' + px + 'V' + py;
    });
    d += 'H' + f.pw;
    el(f.g, 'path', { d: d, fill: 'none', stroke: '#555', 'stroke-dasharray': '5,4', 'stroke-width': 1.3 });
    let marks = 0;
    const placed = [];
    // A label beside its point, moved up or down until it overlaps no earlier one; none if no room.
    const placeLabel = (cx, cy, str) => {
      const w = str.length * CHAR_W;
      const x = cx + 12 + w <= f.pw ? cx + 11 : cx - 11 - w;
      for (const dy of [-7, 15, -19, 27, -31, 39, -43, 51]) {
        const box = { x: x, y: cy + dy - 10, w: w, h: 12 };
        if (box.y < -4 || box.y + box.h > f.ph + 4) continue;
        if (placed.some((b) => b.x < box.x + box.w && box.x < b.x + b.w && b.y < box.y + box.h && box.y < b.y + b.h)) continue;
        placed.push(box);
        text(f.g, x, cy + dy, str, { class: 'tick' });
        return;
      }
    };
    const order = vs.filter((v) => !v.baseline).concat(vs.filter((v) => v.baseline));
    for (const v of order) {
      const cx = f.x(v.p99 * tu.f), cy = f.y(v.energy_per_token * eu.f);
      const onFront = front.indexOf(v) >= 0;
      if (onFront) el(f.g, 'circle', { cx: cx, cy: cy, r: 10, fill: 'none', stroke: '#222', 'stroke-width': 1.5 });
      const dot = el(f.g, v.baseline ? 'rect' : 'circle', v.baseline
        ? { x: cx - 6, y: cy - 6, width: 12, height: 12, fill: colourOf(v), stroke: '#222', transform: 'rotate(45 ' + cx + ' ' + cy + ')', 'data-mark': 1 }
        : { cx: cx, cy: cy, r: 6, fill: colourOf(v), stroke: '#fff', 'data-mark': 1 });
      tip(dot, v.name + (v.baseline ? ' (baseline)' : '') + ': p99 ' + fmt(v.p99 * tu.f) + ' ' + tu.u + ', ' +
        fmt(v.energy_per_token * eu.f) + ' ' + eu.u + '/token' + (onFront ? ', on the Pareto front' : ''));
      if (vs.length <= 16) placeLabel(cx, cy, v.name);
      ++marks;
    }
    c.svg.setAttribute('data-front', front.map((v) => v.name).join(','));
    variantLegend(c, vs);
    legendItem(c, '#fff', 'ringed: on the Pareto front', 'ring');
    legendItem(c, '#888', 'diamond: baseline', 'diamond');
    html(c.note, 'span', {}, 'Pareto front (lower left is better on both axes): ');
    const ul = html(c.note, 'ul', { class: 'front' });
    for (const v of front)
      html(ul, 'li', {}, v.name + (v.baseline ? ' (baseline)' : '') + ': p99 ' + fmt(v.p99 * tu.f) + ' ' + tu.u + ', ' +
        fmt(v.energy_per_token * eu.f) + ' ' + eu.u + '/token');
    return { marks: marks };
  }

  function drawTimelines(c) {
    const KINDS = [['ideal', '#009e73'], ['overlapped', '#e69f00'], ['sequential', '#0072b2']];
    const vs = VARIANTS.filter((v) => KINDS.some(([k]) => isNum(v.timelines_p50[k])));
    if (!vs.length) return empty(c, 'no timeline has measured steps');
    const vals = [].concat.apply([], vs.map((v) => KINDS.map(([k]) => v.timelines_p50[k]).filter(isNum)));
    const tu = timeUnit(maxOf(vals));
    const names = vs.map((v) => v.name + (v.baseline ? ' (baseline)' : ''));
    const lab = bandLabels(names, 580);
    const f = frame(c.svg, { width: 660 + lab.left, height: 330 + lab.space,
      margin: { l: 66 + lab.left, r: 14, t: 16, b: 30 + lab.space },
      x: { bands: names, labels: lab, bold: (i) => vs[i].baseline }, y: { lo: 0, hi: maxOf(vals) * tu.f * 1.1 },
      xLabel: 'variant', yLabel: 'p50 step latency (' + tu.u + ')' });
    let marks = 0;
    const missing = {};
    vs.forEach((v, i) => {
      const bw = f.band * 0.76 / KINDS.length;
      KINDS.forEach(([k, col], j) => {
        const val = v.timelines_p50[k];
        if (!isNum(val)) { (missing[k] = missing[k] || []).push(v.name); return; }
        const y = f.y(val * tu.f);
        const requested = v.overlap === k;
        const r = el(f.g, 'rect', { x: f.xBand(i) + f.band * 0.12 + j * bw, y: y, width: Math.max(1, bw - 2),
          height: Math.max(0, f.ph - y), fill: col, stroke: requested ? '#111' : col, 'stroke-width': requested ? 2 : 1,
          'data-mark': 1 });
        const seq = v.timelines_p50.sequential;
        tip(r, v.name + ': ' + k + ' p50 ' + fmt(val * tu.f) + ' ' + tu.u + (requested ? ' (requested)' : '') +
          (isNum(seq) && k !== 'sequential' && seq > 0 ? ', ' + pct(val / seq - 1) + ' vs sequential' : ''));
        ++marks;
      });
    });
    for (const v of VARIANTS) if (vs.indexOf(v) < 0) (missing.all = missing.all || []).push(v.name);
    for (const [k, col] of KINDS) legendItem(c, col, k);
    legendItem(c, '#fff', 'outlined: requested policy', 'outline');
    const gaps = Object.keys(missing);
    html(c.note, 'span', {}, gaps.length
      ? 'Not run (skipped): ' + gaps.map((k) => k + ' for ' + missing[k].join(', ')).join('; ') +
        ' (overlap.timelines: requested runs only the requested policy).'
      : 'All three timelines ran for every variant.');
    return { marks: marks };
  }

  const CHARTS = { latency: drawLatency, cdf: drawCdf, layers: drawLayers, heatmap: drawHeatmap, pareto: drawPareto,
                   timelines: drawTimelines };
  let drawn = 0;
  const figures = document.querySelectorAll('figure.chart');
  for (const fig of figures) {
    const svg = fig.querySelector('svg');
    const c = { svg: svg, controls: fig.querySelector('.controls'), legend: fig.querySelector('.legend'),
                note: fig.querySelector('.note'), error: fig.querySelector('.error'), wide: fig.classList.contains('wide') };
    const draw = CHARTS[svg.getAttribute('data-chart')];
    const paint = () => {
      clear(svg); clear(c.legend); clear(c.note); clear(c.error);
      try {
        if (!draw) throw new Error('unknown chart ' + svg.getAttribute('data-chart'));
        const r = draw(c);
        svg.setAttribute('data-marks', String(r.marks));
        svg.setAttribute('data-status', r.status || (r.marks > 0 ? 'ok' : 'empty'));
        return true;
      } catch (e) {
        clear(svg);
        svg.setAttribute('viewBox', '0 0 660 8');
        svg.setAttribute('data-marks', '0');
        svg.setAttribute('data-status', 'error');
        c.error.textContent = 'This chart could not be drawn: ' + (e && e.message ? e.message : String(e));
        return false;
      }
    };
    c.repaint = paint;
    if (paint()) ++drawn;
  }
  document.body.dataset.rendered = String(drawn);
})();
)JS";

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
  std::string description;
  if (doc.contains("description") && doc["description"].is_string()) description = doc["description"].get<std::string>();
  else if (context.contains("description") && context["description"].is_string())
    description = context["description"].get<std::string>();

  json ctx = json::object();
  for (const char* k : {"version", "git_revision", "simgrid_version", "build_type", "study_sha256"})
    ctx[k] = context.contains(k) && context[k].is_string() ? context[k].get<std::string>() : std::string("unknown");
  std::string date;
  if (doc.contains("run_info") && doc["run_info"].is_object() && doc["run_info"].contains("date") &&
      doc["run_info"]["date"].is_string())
    date = doc["run_info"]["date"].get<std::string>();

  json out = {{"schema_version", 1},
              {"folder", dir},
              {"study", rows.string(context, "context", "study")},
              {"description", description},
              {"baseline", baseline},
              {"context", ctx},
              {"run_date", date},
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
  const std::string study = data["study"].get<std::string>();
  std::vector<std::string> sources;
  for (const auto& s : data["sources"]) sources.push_back(s.get<std::string>());
  const std::string source_line = "Predicted by the moesim simulator (model) with " + common::join(sources, "; ") + "; " +
                                  steps_text(data) + ".";
  std::set<std::string> mode_set;
  for (const auto& v : data["variants"]) mode_set.insert(v["mode"].get<std::string>());
  const std::vector<std::string> modes(mode_set.begin(), mode_set.end());
  const auto& ctx = data["context"];

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>moesim report: " << html_escape(study) << "</title>\n<style>" << kStyle << "</style>\n</head>\n"
    << "<body data-rendered=\"0\" data-charts=\"" << kChartCount << "\">\n<header>\n<h1>Study " << html_escape(study)
    << "</h1>\n";
  const std::string description = data["description"].get<std::string>();
  if (description.empty())
    h << "<p class=\"description none\">No description recorded in results.json.</p>\n";
  else
    h << "<p class=\"description\">" << html_escape(description) << "</p>\n";
  auto item = [&](const std::string& term, const std::string& value) {
    h << "<dt>" << html_escape(term) << "</dt><dd>" << html_escape(value) << "</dd>";
  };
  h << "<dl class=\"context\">";
  item("variants", std::to_string(data["variants"].size()));
  item("baseline", data["baseline"].get<std::string>());
  item("workload mode", common::join(modes, ", "));
  item("profile", common::join(sources, "; "));
  item("tool version", "moesim " + ctx["version"].get<std::string>() + " (" + ctx["build_type"].get<std::string>() + " build)");
  item("git revision", ctx["git_revision"].get<std::string>());
  item("SimGrid version", ctx["simgrid_version"].get<std::string>());
  item("run date", data["run_date"].get<std::string>().empty() ? "unknown" : data["run_date"].get<std::string>());
  item("study SHA-256", ctx["study_sha256"].get<std::string>());
  item("results folder", data["folder"].get<std::string>());
  h << "</dl>\n<p class=\"source\">" << html_escape(source_line)
    << " Regenerate this page with <code>moesim report " << html_escape(data["folder"].get<std::string>())
    << "</code>.</p>\n</header>\n<section>\n<h2>Results</h2>\n"
    << results_table_html(data) << "</section>\n<section class=\"charts\">\n";
  for (const auto& c : kCharts) {
    h << "<figure class=\"chart" << (c.wide ? " wide" : "") << "\" id=\"fig-" << c.id << "\">\n<h2>" << c.title
      << "</h2>\n<p class=\"source\">" << html_escape(source_line) << " " << c.detail << "</p>\n"
      << "<div class=\"controls\"></div>\n<svg id=\"chart-" << c.id << "\" data-chart=\"" << c.id
      << "\" data-status=\"pending\" data-marks=\"0\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\""
      << html_escape(c.title) << "\"></svg>\n<div class=\"legend\"></div>\n<div class=\"note\"></div>\n"
      << "<div class=\"error\"></div>\n</figure>\n";
  }
  h << "</section>\n<script type=\"application/json\" id=\"report-data\">" << script_json(data) << "</script>\n<script>"
    << kScript << "</script>\n</body>\n</html>\n";
  return h.str();
}

std::string write_report(const std::string& dir, const std::string& file, bool overwrite) {
  common::check_can_write(file, overwrite);
  const std::string page = render_report(load_report_data(dir));
  common::write_file_atomic(file, page, overwrite);
  return file;
}

std::string write_report(const std::string& dir) {
  return write_report(dir, (fs::path(dir) / "report.html").string(), true);
}

}  // namespace moesim::sim
