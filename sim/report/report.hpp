// The study report: DIR/report.html, one self-contained page (no network; data, styles and the
// chart code inline) built from a results folder's results.json and variants/NAME/result.json
// (docs/report.md). The page embeds the data it draws as JSON and draws six SVG charts itself; every
// string from the data is escaped. Files are written atomically.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace moesim::sim {

// Reads DIR/results.json and DIR/variants/*/result.json and writes DIR/report.html atomically
// (replacing an older report). Throws common::InputError naming the file for a missing or malformed
// result. Returns the report's path.
std::string write_report(const std::string& dir);
// The same, written to `file`; an existing `file` is replaced only when `overwrite` (else UsageError).
std::string write_report(const std::string& dir, const std::string& file, bool overwrite);

// The numbers the page draws, read and checked from a results folder (InputError naming the file,
// the JSON path, what was expected and what was found). Times in s, energy in J.
nlohmann::json load_report_data(const std::string& dir);
// The whole page for data from load_report_data.
std::string render_report(const nlohmann::json& data);

// Text safe inside HTML elements and quoted attributes (& < > " ' as entities).
std::string html_escape(std::string_view text);
// JSON safe inside <script type="application/json">: '<', '>' and '&' as \u escapes, so that no
// string can close the element; invalid UTF-8 is replaced.
std::string script_json(const nlohmann::json& value);

}  // namespace moesim::sim
