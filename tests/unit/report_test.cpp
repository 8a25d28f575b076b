// The study report writer without a browser: escaping, the data it extracts from a results folder,
// the chart code and styles it embeds, its errors for missing and malformed result files, and when it
// may replace a file.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "common/error.hpp"
#include "sim/report/report.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::error_of;
using moesim::testing::read_text;
using moesim::testing::TempDir;
using moesim::testing::write_text;
using nlohmann::json;

namespace {

json layer(int index, bool moe, std::vector<double> tokens, double token_tail, double a2a_tail) {
  return {{"layer", index},          {"moe", moe},
          {"chunks", 1},             {"token_tail_s", token_tail},
          {"token_avg_s", token_tail / 2}, {"a2a_tail_s", a2a_tail},
          {"a2a_avg_s", a2a_tail / 2}, {"rank_tokens", tokens}};
}

json row(const std::string& name, double p50, double p99, double energy_per_token) {
  return {{"name", name},
          {"inputs",
           {{"profile", "h100-sxm"}, {"profile_sources", {"published", "model"}}, {"mode", "decode"},
            {"overlap", "sequential"}, {"ep", 2}, {"tp", 1}}},
          {"step_latency_s", {{"p50", p50}, {"p90", p99}, {"p99", p99}, {"max", p99}, {"mean", p50}}},
          {"throughput_tokens_per_s", 1000.0},
          {"token_tail_s", 1e-5},
          {"a2a_tail_s", 2e-5},
          {"energy_per_token_J", energy_per_token},
          {"avg_power_W", 500.0},
          {"compute_slowdown", 0.05},
          {"timelines_p50_s", {{"sequential", p50}, {"overlapped", nullptr}, {"ideal", p50 * 0.9}}}};
}

json detail(const std::string& name, std::vector<double> steps) {
  json t = {{"label", "sequential"},
            {"step_latency_s", steps},
            {"gpus", json::array({json::object(), json::object()})},
            {"layers",
             {layer(0, false, {0, 0}, 0, 0),                 // dense layer
              layer(1, true, {30, 10}, 3e-5, 4e-5),          // routed
              layer(2, true, {0, 0}, 0, 1e-5),               // MoE, but no routed tokens
              layer(3, true, {25, 15}, 2.5e-5, 4.5e-5)}}};  // routed
  return {{"schema_version", 1}, {"variant", {{"name", name}, {"timelines", {t}}}}};
}

// A results folder as `moesim run` lays it out, with the fields the report reads.
void write_folder(const fs::path& dir, const std::string& description) {
  fs::create_directories(dir / "variants" / "fast");
  fs::create_directories(dir / "variants" / "slow");
  const json results = {{"schema_version", 1},
                        {"context",
                         {{"study", "unit-study"}, {"version", "0.1.0"}, {"git_revision", "abc123"},
                          {"simgrid_version", "3.32"}, {"build_type", "Debug"}, {"study_sha256", "ff00"},
                          {"description", description}}},
                        {"baseline", "slow"},
                        {"variants", {row("fast", 0.002, 0.002, 0.1), row("slow", 0.003, 0.004, 0.2)}},
                        {"run_info", {{"date", "2026-12-01T00:00:00Z"}}}};
  write_text(dir / "results.json", results.dump(2));
  write_text(dir / "variants" / "fast" / "result.json", detail("fast", {0.001, 0.002, 0.002}).dump(2));
  write_text(dir / "variants" / "slow" / "result.json", detail("slow", {0.003, 0.004}).dump(2));
}

// The JSON inside <script type="application/json" id="report-data">.
json embedded_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"report-data\">";
  const auto from = page.find(open);
  REQUIRE(from != std::string::npos);
  const auto begin = from + open.size();
  const auto end = page.find("</script>", begin);
  REQUIRE(end != std::string::npos);
  return json::parse(page.substr(begin, end - begin));
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("report: html_escape turns markup characters into entities and leaves other text alone") {
  using moesim::sim::html_escape;
  CHECK(html_escape("<a href=\"x\">Tom & Jerry's</a>") == "&lt;a href=&quot;x&quot;&gt;Tom &amp; Jerry&#39;s&lt;/a&gt;");
  CHECK(html_escape("p99 3.9 ms \xc2\xb5s") == "p99 3.9 ms \xc2\xb5s");
  CHECK(html_escape("") == "");
}

TEST_CASE("report: script_json cannot close its script element and parses back to the same value") {
  const json value = {{"description", "</script><script>alert(1)</script><!-- & -->"}, {"n", {1, 2.5}}};
  const std::string text = moesim::sim::script_json(value);
  CHECK(text.find('<') == std::string::npos);
  CHECK(text.find('>') == std::string::npos);
  CHECK(json::parse(text) == value);
  // Invalid UTF-8 is replaced rather than thrown.
  const std::string bad = moesim::sim::script_json(json(std::string("ok \xff")));
  CHECK(json::parse(bad).get<std::string>().rfind("ok ", 0) == 0);
}

TEST_CASE("report: a results folder becomes one page with its data, the results table and six chart shells") {
  TempDir tmp;
  const std::string description = "contiguous vs </script><b>bold</b> & 'quoted'";
  write_folder(tmp.path(), description);
  const std::string path = moesim::sim::write_report(tmp.path().string());
  CHECK(path == (tmp / "report.html").string());
  const std::string page = read_text(path);

  // The free-text description appears only escaped; the data block and the code are the page's only scripts.
  CHECK(page.find("contiguous vs &lt;/script&gt;&lt;b&gt;bold&lt;/b&gt; &amp; &#39;quoted&#39;") != std::string::npos);
  CHECK(page.find("<b>bold") == std::string::npos);
  CHECK(count(page, "</script>") == 2);
  CHECK(count(page, "<script") == 2);
  // Self-contained: nothing loaded from elsewhere.
  CHECK(page.find("<link") == std::string::npos);
  CHECK(page.find(" src=") == std::string::npos);
  CHECK(page.find("@import") == std::string::npos);
  CHECK(count(page, "data-chart=\"") == 7);
  CHECK(page.find("data-charts=\"7\"") != std::string::npos);

  const json data = embedded_data(page);
  CHECK(data["description"] == description);
  CHECK(data["study"] == "unit-study");
  CHECK(data["sources"] == json::array({"profile h100-sxm (published + model values)"}));
  REQUIRE(data["variants"].size() == 2);
  const json& fast = data["variants"][0];
  CHECK(fast["name"] == "fast");
  CHECK_FALSE(fast["baseline"].get<bool>());
  CHECK(data["variants"][1]["baseline"].get<bool>());
  CHECK(fast["steps"].size() == 3);
  CHECK(fast["gpus"] == 2);
  CHECK(fast["moe_layers"] == 3);
  // Only MoE layers whose experts processed tokens are drawn: layers 1 and 3.
  REQUIRE(fast["layers"].size() == 2);
  CHECK(fast["layers"][0]["layer"] == 1);
  CHECK(fast["layers"][1]["layer"] == 3);
  CHECK(fast["layers"][1]["tokens"] == json::array({25.0, 15.0}));
  CHECK(fast["timelines_p50"]["overlapped"].is_null());

  // The table: the console's columns, p99 against the baseline's (2 ms vs 4 ms).
  CHECK(page.find("<td>fast</td><td>2.000</td><td>2.000</td>") != std::string::npos);
  CHECK(page.find("<td>-50.0%</td>") != std::string::npos);
  CHECK(page.find("<tr class=\"baseline\"><td>slow *</td>") != std::string::npos);
}

// The chart code and styles are built in from sim/report/report.js and report.css; a build that kept an
// older copy of either (a lost dependency of the generated header, say) would ship a page that no longer
// matches the files a reader edits and reviews.
TEST_CASE("report: the page carries sim/report/report.js and report.css byte for byte") {
  const fs::path assets = fs::path(MOESIM_SOURCE_DIR) / "sim" / "report";
  const std::string script = read_text(assets / "report.js");
  const std::string style = read_text(assets / "report.css");
  REQUIRE(script.size() > 1000);
  REQUIRE(style.size() > 100);
  TempDir tmp;
  write_folder(tmp.path(), "");
  const std::string page = moesim::sim::render_report(moesim::sim::load_report_data(tmp.path().string()));
  CHECK(count(page, "<style>\n" + style + "</style>\n") == 1);
  CHECK(count(page, "<script>\n" + script + "</script>\n") == 1);
}

TEST_CASE("report: a missing results.json or variant result is an InputError naming the file") {
  TempDir tmp;
  const std::string dir = tmp.path().string();
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); }).find((tmp / "results.json").string() + ": missing") !=
        std::string::npos);
  CHECK(error_of([&] { moesim::sim::load_report_data((tmp / "nothing").string()); }).find("expected a results folder") !=
        std::string::npos);

  write_folder(tmp.path(), "");
  fs::remove(tmp / "variants" / "slow" / "result.json");
  const std::string msg = error_of([&] { moesim::sim::write_report(dir); });
  INFO(msg);
  CHECK(msg.find((tmp / "variants" / "slow" / "result.json").string() + ": missing") != std::string::npos);
  CHECK(msg.find("results.json lists variant slow") != std::string::npos);
  CHECK(msg.find("moesim run") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp / "report.html"));
}

TEST_CASE("report: malformed result files are InputErrors with the file, line, JSON path and what was found") {
  TempDir tmp;
  const std::string dir = tmp.path().string();
  write_folder(tmp.path(), "");
  const fs::path fast = tmp / "variants" / "fast" / "result.json";

  write_text(fast, "{\n  \"variant\": {\n    \"name\": \"fast\",,\n");
  std::string msg = error_of([&] { moesim::sim::load_report_data(dir); });
  INFO(msg);
  CHECK(msg.find(fast.string() + ":3:") != std::string::npos);
  CHECK(msg.find("expected JSON") != std::string::npos);

  json d = detail("fast", {0.001});
  d["variant"]["timelines"][0]["layers"][1]["rank_tokens"] = "many";
  write_text(fast, d.dump());
  msg = error_of([&] { moesim::sim::load_report_data(dir); });
  CHECK(msg.find(fast.string() + ": variant.timelines[0].layers[1].rank_tokens: expected an array, found string \"many\"") !=
        std::string::npos);

  d = detail("other", {0.001});
  write_text(fast, d.dump());
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); }).find("variant.name: expected \"fast\"") != std::string::npos);

  d = detail("fast", {0.001});
  d["variant"]["timelines"][0].erase("step_latency_s");
  write_text(fast, d.dump());
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); })
            .find("variant.timelines[0].step_latency_s: expected a value, found nothing (the key is missing)") !=
        std::string::npos);

  // A row whose name would lead out of variants/.
  write_text(fast, detail("fast", {0.001}).dump());
  auto results = json::parse(read_text(tmp / "results.json"));
  results["variants"][0]["name"] = "../fast";
  write_text(tmp / "results.json", results.dump());
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); }).find("variants[0].name: expected a variant name safe as a folder name") !=
        std::string::npos);
  results["variants"][0]["name"] = "fast";
  results["variants"][1]["step_latency_s"]["p99"] = "slow";
  write_text(tmp / "results.json", results.dump());
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); }).find("variants[1].step_latency_s.p99: expected a number or null") !=
        std::string::npos);
  results["schema_version"] = 2;
  write_text(tmp / "results.json", results.dump());
  CHECK(error_of([&] { moesim::sim::load_report_data(dir); }).find("schema_version: expected 1, found number 2") !=
        std::string::npos);
}

TEST_CASE("report: DIR/report.html is always rebuilt, another file is replaced only when allowed") {
  TempDir tmp;
  write_folder(tmp.path(), "");
  const std::string dir = tmp.path().string();
  write_text(tmp / "report.html", "old");
  moesim::sim::write_report(dir);
  CHECK(read_text(tmp / "report.html").rfind("<!DOCTYPE html>", 0) == 0);

  const fs::path other = tmp / "mine.html";
  write_text(other, "keep me");
  CHECK(error_of([&] { moesim::sim::write_report(dir, other.string(), false); }).find("--force") != std::string::npos);
  CHECK(read_text(other) == "keep me");
  CHECK(moesim::sim::write_report(dir, other.string(), true) == other.string());
  CHECK(read_text(other) == read_text(tmp / "report.html"));
}
