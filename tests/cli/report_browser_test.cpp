// `moesim report` as a user meets it: the page opened in a real browser (headless chromium), its
// charts drawn from the data they are meant to show, a screenshot to look at, and the command's
// refusals. The page and the screenshot stay in the build tree under test-artifacts/.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::run_moesim;
using moesim::testing::run_program;
using moesim::testing::TempDir;
using moesim::testing::test_data_dir;
using nlohmann::json;

namespace {

constexpr int kCharts = 7;

std::string chromium() {
  const char* env = std::getenv("MOESIM_CHROMIUM");
  return env && *env ? env : "/usr/bin/chromium";
}

fs::path artifacts_dir() {
  const fs::path dir = fs::path(MOESIM_BINARY_DIR) / "test-artifacts";
  fs::create_directories(dir);
  return dir;
}

// Headless chromium with the flags a closed machine needs, limited in time.
moesim::testing::CliResult run_browser(const TempDir& profile, const std::vector<std::string>& extra, const fs::path& page) {
  std::vector<std::string> args = {"120", chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                                   "--no-first-run", "--disable-background-networking", "--disable-component-update",
                                   "--disable-sync", "--user-data-dir=" + (profile / "profile").string(),
                                   "--run-all-compositor-stages-before-draw", "--virtual-time-budget=5000"};
  args.insert(args.end(), extra.begin(), extra.end());
  args.push_back("file://" + fs::absolute(page).string());
  return run_program("/usr/bin/timeout", args);
}

using Attributes = std::map<std::string, std::string>;

// name="value" pairs of a tag's inside (the DOM chromium dumps always quotes with ").
Attributes attributes_of(const std::string& tag) {
  Attributes out;
  std::size_t p = 0;
  while ((p = tag.find("=\"", p)) != std::string::npos) {
    std::size_t name_start = p;
    while (name_start > 0 && tag[name_start - 1] != ' ' && tag[name_start - 1] != '\n') --name_start;
    const std::size_t value_end = tag.find('"', p + 2);
    if (value_end == std::string::npos) break;
    out[tag.substr(name_start, p - name_start)] = tag.substr(p + 2, value_end - p - 2);
    p = value_end + 1;
  }
  return out;
}

// Every `<NAME ...>` opening tag's inside, in document order.
std::vector<std::string> tags_named(const std::string& dom, const std::string& name) {
  std::vector<std::string> out;
  const std::string open = "<" + name;
  for (std::size_t p = dom.find(open); p != std::string::npos; p = dom.find(open, p + 1)) {
    const std::size_t after = p + open.size();
    if (after >= dom.size() || (dom[after] != ' ' && dom[after] != '>')) continue;
    const std::size_t end = dom.find('>', after);
    if (end == std::string::npos) break;
    out.push_back(dom.substr(after, end - after));
  }
  return out;
}

// The <body> and each chart's <svg data-chart=...> of the dumped DOM, by chart id.
struct Dom {
  Attributes body;
  std::map<std::string, Attributes> charts;
  std::string text;
};

Dom parse_dom(const std::string& dom) {
  Dom d;
  d.text = dom;
  const auto bodies = tags_named(dom, "body");
  if (!bodies.empty()) d.body = attributes_of(bodies.front());
  for (const auto& tag : tags_named(dom, "svg")) {
    auto a = attributes_of(tag);
    if (a.count("data-chart")) d.charts[a["data-chart"]] = a;
  }
  return d;
}

Dom open_in_browser(const fs::path& page) {
  TempDir profile;
  const auto r = run_browser(profile, {"--dump-dom"}, page);
  INFO("chromium stderr: " << r.err.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  return parse_dom(r.out);
}

void require_browser() {
  if (!fs::exists(chromium())) FAIL("no browser at " << chromium() << ": install chromium (sh tools/setup.sh --test)");
}

// Runs a study from tests/data/studies and builds its report; returns the results folder.
fs::path run_and_report(const TempDir& tmp, const std::string& study, const std::vector<std::string>& sets) {
  const fs::path out = tmp / "out";
  std::vector<std::string> args = {"run", (test_data_dir() / "studies" / study).string(), "-o", out.string(), "-q"};
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  const auto run = run_moesim(args);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const auto report = run_moesim({"report", out.string()});
  INFO(report.err);
  REQUIRE(report.exit_code == 0);
  CHECK(report.out.find((out / "report.html").string()) != std::string::npos);
  REQUIRE(fs::exists(out / "report.html"));
  return out;
}

int marks(const Dom& d, const std::string& chart) { return std::stoi(d.charts.at(chart).at("data-marks")); }

// Variants on the lower-left front of (p99, energy per token), from results.json.
std::vector<std::string> pareto_front(const json& results) {
  std::vector<std::string> front;
  const auto& rows = results["variants"];
  for (const auto& a : rows) {
    const double ax = a["step_latency_s"]["p99"], ay = a["energy_per_token_J"];
    const bool dominated = std::any_of(rows.begin(), rows.end(), [&](const json& b) {
      const double bx = b["step_latency_s"]["p99"], by = b["energy_per_token_J"];
      return bx <= ax && by <= ay && (bx < ax || by < ay);
    });
    if (!dominated) front.push_back(a["name"]);
  }
  std::sort(front.begin(), front.end());
  return front;
}

std::vector<std::string> split_sorted(const std::string& list) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : list + ",") {
    if (ch != ',') {
      cur += ch;
    } else if (!cur.empty()) {
      out.push_back(cur);
      cur.clear();
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("report: a real browser draws every chart of a MoE study from its data, and a screenshot is kept") {
  require_browser();
  TempDir tmp;
  const fs::path out = run_and_report(tmp, "good_variants.yaml", {"base.workload.steps=4"});
  const fs::path page = artifacts_dir() / "report.html";
  fs::copy_file(out / "report.html", page, fs::copy_options::overwrite_existing);

  const Dom dom = open_in_browser(page);
  CHECK(dom.body.at("data-charts") == std::to_string(kCharts));
  CHECK(dom.body.at("data-rendered") == std::to_string(kCharts));
  REQUIRE(dom.charts.size() == kCharts);
  for (const auto& chart : dom.charts) {
    const auto& a = chart.second;
    INFO("chart " << chart.first);
    CHECK(a.at("data-status") == "ok");
    CHECK(std::stoi(a.at("data-marks")) > 0);
  }
  // Each chart's error line stays empty (the message text itself is in the page's code).
  const std::string error_open = "<div class=\"error\">";
  int error_lines = 0;
  for (std::size_t p = dom.text.find(error_open); p != std::string::npos; p = dom.text.find(error_open, p + 1)) {
    ++error_lines;
    const std::size_t start = p + error_open.size();
    CHECK(dom.text.compare(start, 6, "</div>") == 0);
  }
  CHECK(error_lines == kCharts);

  // What the data implies, read from the results folder itself.
  const json results = json::parse(read_text(out / "results.json"));
  const auto& rows = results["variants"];
  const int variants = static_cast<int>(rows.size());
  REQUIRE(variants == 3);
  CHECK(marks(dom, "latency") == 2 * variants);  // p50 and p99 bars
  CHECK(marks(dom, "cdf") == variants);          // one line per variant
  CHECK(marks(dom, "steps") == variants);        // one line per variant, no rebalance to mark
  CHECK(marks(dom, "layers") == 2 * variants);   // token and all-to-all tail lines
  CHECK(marks(dom, "pareto") == variants);
  CHECK(split_sorted(dom.charts.at("pareto").at("data-front")) == pareto_front(results));

  // The heatmap shows the baseline: routed MoE layers x EP ranks of its requested timeline.
  const std::string baseline = results["baseline"];
  const json detail = json::parse(read_text(out / "variants" / baseline / "result.json"));
  int rows_expected = 0, ranks = 0;
  for (const auto& l : detail["variant"]["timelines"][0]["layers"]) {
    const auto tokens = l["rank_tokens"].get<std::vector<double>>();
    if (l["moe"].get<bool>() && std::any_of(tokens.begin(), tokens.end(), [](double n) { return n > 0; })) {
      ++rows_expected;
      ranks = std::max(ranks, static_cast<int>(tokens.size()));
    }
  }
  REQUIRE(rows_expected > 0);
  CHECK(ranks == 4);
  const auto& heat = dom.charts.at("heatmap");
  CHECK(heat.at("data-variant") == baseline);
  CHECK(std::stoi(heat.at("data-rows")) == rows_expected);
  CHECK(std::stoi(heat.at("data-cols")) == ranks);
  CHECK(marks(dom, "heatmap") == rows_expected * ranks);

  // The timeline chart shows the baseline: one step of each timeline that ran, every GPU's merged
  // compute and communication intervals from its result.json.
  const auto& tl = dom.charts.at("timelines");
  CHECK(tl.at("data-variant") == baseline);
  std::vector<std::string> policies;
  int intervals = 0, gpus = 0;
  for (const char* k : {"sequential", "overlapped", "ideal"})
    for (const auto& t : detail["variant"]["timelines"])
      if (t["label"] == k && t["step_activity"].is_object()) {
        policies.push_back(k);
        gpus = std::max(gpus, static_cast<int>(t["step_activity"]["gpus"].size()));
        for (const auto& g : t["step_activity"]["gpus"])
          intervals += static_cast<int>(g["compute"].size() + g["comm"].size());
      }
  CHECK(policies.size() == 3);
  std::string joined;
  for (const auto& p : policies) joined += (joined.empty() ? "" : ",") + p;
  CHECK(tl.at("data-policies") == joined);
  CHECK(std::stoi(tl.at("data-gpus")) == gpus);
  CHECK(marks(dom, "timelines") == intervals);
  // A link per variant to its trace, relative to the page's folder.
  const auto links = tags_named(dom.text, "a");
  int trace_links = 0;
  for (const auto& tag : links) {
    auto a = attributes_of(tag);
    if (a["class"] != "trace") continue;
    ++trace_links;
    CHECK(a["href"] == "variants/" + a["data-variant"] + "/timeline.json");
    CHECK(fs::exists(out / a["href"]));
  }
  CHECK(trace_links == variants);
  CHECK(dom.text.find("ui.perfetto.dev") != std::string::npos);

  // A chart that throws shows its error and leaves the others drawn: break one variant's steps.
  std::string broken = read_text(page);
  const auto steps_at = broken.find("\"steps\":[");
  REQUIRE(steps_at != std::string::npos);
  broken.replace(steps_at, 9, "\"steps\":null,\"unused\":[");
  const fs::path broken_page = artifacts_dir() / "report-broken.html";
  moesim::testing::write_text(broken_page, broken);
  const Dom bad = open_in_browser(broken_page);
  // The CDF and the steps over time both read the broken steps.
  CHECK(bad.body.at("data-rendered") == std::to_string(kCharts - 2));
  for (const char* id : {"cdf", "steps"}) {
    INFO(id);
    CHECK(bad.charts.at(id).at("data-status") == "error");
    CHECK(bad.charts.at(id).at("data-marks") == "0");
  }
  for (const char* id : {"latency", "layers", "heatmap", "pareto", "timelines"}) {
    INFO(id);
    CHECK(bad.charts.at(id).at("data-status") == "ok");
  }
  CHECK(bad.text.find("<div class=\"error\">This chart could not be drawn: ") != std::string::npos);

  // A screenshot to look at; a blank page of this size is about 25 KB, a drawn one several hundred.
  const fs::path png = artifacts_dir() / "report.png";
  fs::remove(png);
  TempDir profile;
  const auto shot = run_browser(profile, {"--hide-scrollbars", "--screenshot=" + png.string(), "--window-size=1400,4000"}, page);
  INFO(shot.err.substr(0, 2000));
  CHECK(shot.exit_code == 0);
  REQUIRE(fs::exists(png));
  const std::string image = read_text(png);
  CHECK(image.rfind("\x89PNG\r\n\x1a\n", 0) == 0);
  CHECK(fs::file_size(png) > 100 * 1024);
}

TEST_CASE("report: a synthetic study's page draws its charts and says there are no MoE layers") {
  require_browser();
  TempDir tmp;
  const fs::path out = run_and_report(tmp, "good_synthetic.yaml", {"base.workload.steps=2"});
  const fs::path page = artifacts_dir() / "report-synthetic.html";
  fs::copy_file(out / "report.html", page, fs::copy_options::overwrite_existing);
  const Dom dom = open_in_browser(page);
  CHECK(dom.body.at("data-rendered") == std::to_string(kCharts));
  REQUIRE(dom.charts.size() == kCharts);
  const json results = json::parse(read_text(out / "results.json"));
  const int variants = static_cast<int>(results["variants"].size());
  CHECK(dom.charts.at("cdf").at("data-status") == "ok");
  CHECK(marks(dom, "cdf") == variants);
  CHECK(marks(dom, "latency") == 2 * variants);
  for (const char* id : {"layers", "heatmap"}) {
    INFO(id);
    CHECK(dom.charts.at(id).at("data-status") == "empty");
    CHECK(marks(dom, id) == 0);
  }
  CHECK(dom.text.find("no MoE layers") != std::string::npos);
  // No tokens, so no energy per token: the chart says so instead of drawing nonsense.
  CHECK(dom.charts.at("pareto").at("data-status") == "empty");
}

TEST_CASE("report: the command refuses to replace another file without --force and names a missing result") {
  TempDir tmp;
  const fs::path out = tmp / "out";
  const auto run = run_moesim({"run", (test_data_dir() / "studies" / "good_single.yaml").string(), "-o", out.string(), "-q"});
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  // DIR/report.html is the command's own and is rebuilt without --force.
  REQUIRE(run_moesim({"report", out.string()}).exit_code == 0);
  REQUIRE(run_moesim({"report", out.string()}).exit_code == 0);

  const fs::path mine = tmp / "mine.html";
  moesim::testing::write_text(mine, "mine");
  auto r = run_moesim({"report", out.string(), "-o", mine.string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--force") != std::string::npos);
  CHECK(read_text(mine) == "mine");
  r = run_moesim({"report", out.string(), "-o", mine.string(), "--force"});
  CHECK(r.exit_code == 0);
  CHECK(read_text(mine).rfind("<!DOCTYPE html>", 0) == 0);

  fs::remove(out / "variants" / "base" / "result.json");
  r = run_moesim({"report", out.string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find((out / "variants" / "base" / "result.json").string() + ": missing") != std::string::npos);

  r = run_moesim({"report"});
  CHECK(r.exit_code == 2);
  r = run_moesim({"report", (tmp / "nowhere").string()});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("expected a results folder") != std::string::npos);
}
