// The counts importer (FORMAT.md "counts"): per-step expert token counts, iterations x layers x
// experts, from a .npy array, a JSON nested array (or {"counts": ...}) or a CSV of one row per
// (iteration, layer), into a load-only trace. Every value is checked (a whole number, 0..2^32-1) and
// every iteration is top-k consistent before it is written; errors name the file and the entry.
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"
#include "traces/npy.hpp"

namespace moesim::traces {

namespace {

// The shortest text that reads back as the same double.
std::string number_text(double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

constexpr const char* kConsistencyFix =
    " (each token counts once at each of its top_k experts, at every MoE layer: check that the array is "
    "iterations x layers x experts and that the architecture's top_k is the model's)";

// Collects one iteration at a time, checks it and hands it to the writer; counts the report.
class CountsSink {
 public:
  CountsSink(const std::string& path, const TraceShape& shape, const LoadWriterFactory& make_writer,
             const std::string& input_kind, const std::string& source = {})
      : path_(path), shape_(shape), layers_(shape.layers.size()),
        experts_(static_cast<std::size_t>(shape.num_experts)) {
    report_.input_kind = input_kind;
    report_.meta.shape = shape;
    report_.meta.source = !source.empty() ? source
                                          : "counts import of " + detail::short_name(path) +
                                                " (moesim trace import --format counts)";
    writer_ = make_writer(report_.meta);
    counts_.assign(layers_ * experts_, 0);
  }

  std::size_t layers() const { return layers_; }
  std::size_t experts() const { return experts_; }

  // "[3, 1, 7] (iteration 3, MoE layer 2, expert 7)": an element of the input's three axes.
  std::string entry(std::uint64_t iteration, std::size_t l, std::size_t e) const {
    // Built piecewise: GCC 12 warns (-Wrestrict, a false positive) on "[" + string + ... here.
    std::string out("[");
    out += std::to_string(iteration) + ", " + std::to_string(l) + ", " + std::to_string(e);
    out += "] (iteration " + std::to_string(iteration) + ", MoE layer " + std::to_string(shape_.layers[l]) +
           ", expert " + std::to_string(e) + ")";
    return out;
  }

  // Stores a value read as a number; `where()` gives the message prefix naming the file and entry
  // (built only for a message).
  template <typename Where>
  void set(std::size_t l, std::size_t e, double value, const Where& where) {
    if (!std::isfinite(value)) throw common::InputError(where() + ": the count is not a finite number");
    if (value < 0)
      throw common::InputError(where() + ": count " + number_text(value) +
                               " is negative; a count is the tokens routed to the expert, >= 0");
    if (value != std::floor(value))
      throw common::InputError(where() + ": count " + number_text(value) +
                               " is not a whole number; counts are tokens (round or cast the array to integers)");
    if (value > static_cast<double>(std::numeric_limits<std::uint32_t>::max()))
      throw common::InputError(where() + ": count " + number_text(value) + " is out of range, expected 0..4294967295");
    counts_[l * experts_ + e] = static_cast<std::uint32_t>(value);
  }
  template <typename Where>
  void set_integer(std::size_t l, std::size_t e, std::int64_t value, const Where& where) {
    if (value < 0)
      throw common::InputError(where() + ": count " + std::to_string(value) +
                               " is negative; a count is the tokens routed to the expert, >= 0");
    if (value > static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max()))
      throw common::InputError(where() + ": count " + std::to_string(value) +
                               " is out of range, expected 0..4294967295");
    counts_[l * experts_ + e] = static_cast<std::uint32_t>(value);
  }

  // The iteration's counts, [layer][expert], to fill whole (engine importers).
  std::vector<std::uint32_t>& counts() { return counts_; }

  // The iteration is complete: check it (`where` names the file and iteration) and write it.
  void end_iteration(const std::string& where) {
    std::uint64_t tokens = 0;
    if (std::string problem = load_problem(shape_, counts_, tokens); !problem.empty())
      throw common::InputError(where + ": " + problem + kConsistencyFix);
    writer_->write(counts_);
    report_.min_tokens = report_.iterations == 0 ? tokens : std::min(report_.min_tokens, tokens);
    report_.max_tokens = std::max(report_.max_tokens, tokens);
    report_.tokens += tokens;
    ++report_.iterations;
    std::fill(counts_.begin(), counts_.end(), 0);
  }

  CountsImportReport finish() {
    if (report_.iterations == 0) throw common::InputError(path_ + ": no iterations: the counts are empty");
    writer_->finish();
    report_.meta.iterations = report_.iterations;
    report_.meta.total_tokens = report_.tokens;
    return report_;
  }

 private:
  std::string path_;
  TraceShape shape_;
  std::size_t layers_;
  std::size_t experts_;
  std::vector<std::uint32_t> counts_;
  std::unique_ptr<LoadTraceWriter> writer_;
  CountsImportReport report_;
};

std::string axes_text(const TraceShape& shape) {
  return std::to_string(shape.layers.size()) + " MoE layers (" + detail::layers_text(shape.layers) + ") x " +
         std::to_string(shape.num_experts) + " experts";
}

CountsImportReport import_counts_npy(const std::string& path, const TraceShape& shape,
                                     const LoadWriterFactory& make_writer) {
  detail::FileCloser f(std::fopen(path.c_str(), "rb"));
  if (f.get() == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  const detail::NpyArray a = detail::read_npy_header(path, f.get(), detail::NpyValues::kNumbers);
  const std::string shown = detail::npy_shape_text(a.shape);
  if (a.shape.size() != 3)
    throw common::InputError(path + ": npy shape " + shown + ": expected [iterations, layers, experts], 3-D");
  if (a.shape[0] == 0 || a.elements == 0)
    throw common::InputError(path + ": npy shape " + shown + ": the array is empty; expected at least one iteration");
  if (a.shape[1] != shape.layers.size() || a.shape[2] != static_cast<std::uint64_t>(shape.num_experts))
    throw common::InputError(path + ": npy shape " + shown + ": " + std::to_string(a.shape[1]) + " layers x " +
                             std::to_string(a.shape[2]) + " experts, but " + shape.architecture + " has " +
                             axes_text(shape) + "; pass the architecture the counts were recorded on");
  CountsSink sink(path, shape, make_writer, "npy");
  const std::size_t per = sink.layers() * sink.experts();
  std::vector<unsigned char> data(per * a.item_bytes);
  if (fseeko(f.get(), static_cast<off_t>(a.data_offset), SEEK_SET) != 0)
    throw common::InputError(path + ": cannot seek to the data");
  for (std::uint64_t i = 0; i < a.shape[0]; ++i) {
    if (std::fread(data.data(), 1, data.size(), f.get()) != data.size())
      throw common::InputError(path + ": read error in the data of iteration " + std::to_string(i));
    for (std::size_t l = 0; l < sink.layers(); ++l)
      for (std::size_t e = 0; e < sink.experts(); ++e) {
        const std::size_t at = (l * sink.experts() + e) * a.item_bytes;
        auto where = [&] {
          return path + ": byte offset " + std::to_string(a.data_offset + i * per * a.item_bytes + at) +
                 ": element " + sink.entry(i, l, e);
        };
        if (a.kind == 'f') sink.set(l, e, detail::npy_number(data.data() + at, a), where);
        else sink.set_integer(l, e, detail::npy_integer(data.data() + at, a), where);
      }
    sink.end_iteration(path + ": iteration " + std::to_string(i) + " (elements [" + std::to_string(i) + ", :, :])");
  }
  return sink.finish();
}

CountsImportReport import_counts_json(const std::string& path, const TraceShape& shape,
                                      const LoadWriterFactory& make_writer) {
  const std::string text = common::read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    throw common::InputError(path + ": empty file, expected a JSON array of counts");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw common::InputError(path + ": not valid JSON: " + e.what());
  } catch (const nlohmann::json::out_of_range& e) {  // a number too large for a double
    throw common::InputError(path + ": a number out of range: " + e.what() + "; counts must be finite");
  }
  const nlohmann::json* counts = &doc;
  if (doc.is_object()) {
    if (!doc.contains("counts"))
      throw common::InputError(path + ": the JSON object has no key \"counts\"; expected {\"counts\": "
                               "[[[...]]]} or a bare array iterations x layers x experts");
    counts = &doc["counts"];
  }
  if (!counts->is_array())
    throw common::InputError(path + ": expected an array iterations x layers x experts, got " + json_shown(*counts));
  if (counts->empty()) throw common::InputError(path + ": the array is empty; expected at least one iteration");
  CountsSink sink(path, shape, make_writer, "json");
  for (std::size_t i = 0; i < counts->size(); ++i) {
    const auto& it = (*counts)[i];
    const std::string at_i = path + ": [" + std::to_string(i) + "] (iteration " + std::to_string(i) + ")";
    if (!it.is_array() || it.size() != sink.layers())
      throw common::InputError(at_i + ": expected an array of " + std::to_string(sink.layers()) + " layers (" +
                               shape.architecture + " has " + axes_text(shape) + "), got " +
                               (it.is_array() ? std::to_string(it.size()) + " entries" : json_shown(it)));
    for (std::size_t l = 0; l < sink.layers(); ++l) {
      const auto& row = it[l];
      if (!row.is_array() || row.size() != sink.experts())
        throw common::InputError(path + ": [" + std::to_string(i) + "][" + std::to_string(l) + "] (iteration " +
                                 std::to_string(i) + ", MoE layer " + std::to_string(shape.layers[l]) +
                                 "): expected an array of " + std::to_string(sink.experts()) + " counts (" +
                                 shape.architecture + " has " + std::to_string(sink.experts()) + " experts), got " +
                                 (row.is_array() ? std::to_string(row.size()) + " entries" : json_shown(row)));
      for (std::size_t e = 0; e < sink.experts(); ++e) {
        const auto& v = row[e];
        auto where = [&] { return path + ": entry " + sink.entry(i, l, e); };
        if (v.is_number_unsigned()) {
          const auto u = v.get<std::uint64_t>();
          sink.set_integer(l, e, u > static_cast<std::uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<std::int64_t>(u),
                           where);
        } else if (v.is_number_integer()) {
          sink.set_integer(l, e, v.get<std::int64_t>(), where);
        } else if (v.is_number_float()) {
          sink.set(l, e, v.get<double>(), where);
        } else {
          throw common::InputError(where() + ": expected a count (a whole number), got " + json_shown(v));
        }
      }
    }
    sink.end_iteration(at_i);
  }
  return sink.finish();
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// A CSV field as a number: an integer, or a decimal/exponent form (checked whole by the sink).
std::optional<double> parse_number(std::string_view text) {
  double v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

CountsImportReport import_counts_csv(const std::string& path, const TraceShape& shape,
                                     const LoadWriterFactory& make_writer) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  std::optional<CountsSink> sink;
  const std::size_t layers = shape.layers.size();
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const std::size_t want_fields = 2 + experts;
  std::string line;
  std::size_t line_no = 0, first_line = 0;  // first_line: the current iteration's first row
  std::int64_t iteration = -1;
  std::vector<std::size_t> layer_line;  // per layer: the line that gave it in this iteration, 0 if none
  bool any_row = false;
  auto close_iteration = [&] {
    for (std::size_t l = 0; l < layers; ++l)
      if (layer_line[l] == 0)
        throw common::InputError(path + ":" + std::to_string(first_line) + ": iteration " +
                                 std::to_string(iteration) + " has no row for layer " + std::to_string(l) +
                                 " (MoE layer " + std::to_string(shape.layers[l]) + "); every iteration needs one row "
                                 "per layer 0.." + std::to_string(layers - 1) + ", its rows together");
    sink->end_iteration(path + ":" + std::to_string(first_line) + ": iteration " + std::to_string(iteration));
  };
  std::vector<std::string_view> fields;
  while (std::getline(in, line)) {
    ++line_no;
    const std::string_view whole = trim(line);
    if (whole.empty()) continue;
    fields.clear();
    for (std::size_t b = 0;;) {
      const std::size_t c = whole.find(',', b);
      fields.push_back(trim(whole.substr(b, c == std::string_view::npos ? std::string_view::npos : c - b)));
      if (c == std::string_view::npos) break;
      b = c + 1;
    }
    const std::string at = path + ":" + std::to_string(line_no);
    std::string why;
    auto it_value = detail::parse_int(fields[0], why);
    if (!any_row && !it_value) {  // an optional header line: its first field is not a number
      any_row = true;
      continue;
    }
    any_row = true;
    if (fields.size() != want_fields)
      throw common::InputError(at + ": " + std::to_string(fields.size()) + " fields, expected " +
                               std::to_string(want_fields) + ": iteration, layer and " + std::to_string(experts) +
                               " counts (" + shape.architecture + " has " + std::to_string(experts) + " experts)");
    if (!it_value || *it_value < 0)
      throw common::InputError(at + ": field 1 (iteration): expected a non-negative integer, got " +
                               (it_value ? std::to_string(*it_value) : why));
    auto layer_value = detail::parse_int(fields[1], why);
    if (!layer_value || *layer_value < 0 || *layer_value >= static_cast<std::int64_t>(layers))
      throw common::InputError(at + ": field 2 (layer): expected a layer index 0.." + std::to_string(layers - 1) +
                               " (the position in " + shape.architecture + "'s MoE layers " +
                               detail::layers_text(shape.layers) + "), got " +
                               (layer_value ? std::to_string(*layer_value) : why));
    if (!sink) {
      sink.emplace(path, shape, make_writer, "csv");
      layer_line.assign(layers, 0);
    }
    if (*it_value != iteration) {
      if (iteration >= 0) {
        if (*it_value < iteration)
          throw common::InputError(at + ": iteration " + std::to_string(*it_value) + " after iteration " +
                                   std::to_string(iteration) + ": rows must come grouped by iteration, in "
                                   "increasing order");
        close_iteration();
      }
      iteration = *it_value;
      first_line = line_no;
      std::fill(layer_line.begin(), layer_line.end(), 0);
    }
    const auto l = static_cast<std::size_t>(*layer_value);
    if (layer_line[l] != 0)
      throw common::InputError(at + ": iteration " + std::to_string(iteration) + ", layer " + std::to_string(l) +
                               " again (first on line " + std::to_string(layer_line[l]) +
                               "); each iteration has one row per layer");
    layer_line[l] = line_no;
    for (std::size_t e = 0; e < experts; ++e) {
      auto where = [&] {
        return at + ": field " + std::to_string(e + 3) + " (iteration " + std::to_string(iteration) + ", layer " +
               std::to_string(l) + ", MoE layer " + std::to_string(shape.layers[l]) + ", expert " +
               std::to_string(e) + ")";
      };
      const std::string_view f = fields[e + 2];
      if (auto v = detail::parse_int(f, why)) {
        sink->set_integer(l, e, *v, where);
      } else if (auto d = parse_number(f)) {
        sink->set(l, e, *d, where);
      } else {
        throw common::InputError(where() + ": expected a count (a whole number), got " + common::quoted(f));
      }
    }
  }
  if (in.bad()) throw common::InputError(path + ": read error");
  if (!sink) throw common::InputError(path + ": no data rows; expected one row per (iteration, layer)");
  close_iteration();
  return sink->finish();
}

}  // namespace

namespace detail {

CountsImportReport write_count_iterations(
    const std::string& path, const TraceShape& shape, const LoadWriterFactory& make_writer,
    const std::string& input_kind, const std::string& source,
    const std::function<bool(std::vector<std::uint32_t>& counts, std::string& where)>& next,
    std::uint64_t* skipped_empty) {
  CountsSink sink(path, shape, make_writer, input_kind, source);
  std::string where;
  std::uint64_t skipped = 0;
  while (next(sink.counts(), where)) {
    if (std::all_of(sink.counts().begin(), sink.counts().end(), [](std::uint32_t c) { return c == 0; })) {
      ++skipped;
      continue;
    }
    sink.end_iteration(where);
  }
  if (skipped_empty != nullptr) *skipped_empty = skipped;
  return sink.finish();
}

}  // namespace detail

CountsImportReport import_counts(const std::string& path, const TraceShape& shape,
                                 const LoadWriterFactory& make_writer) {
  validate_shape(shape, "architecture " + shape.architecture);
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw common::InputError(path + ": is a folder, expected a .npy, .json or .csv file of counts");
  if (!std::filesystem::exists(path, ec)) throw common::InputError(path + ": no such file");
  std::string ext = std::filesystem::path(path).extension().string();
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (ext == ".npy") return import_counts_npy(path, shape, make_writer);
  if (ext == ".json") return import_counts_json(path, shape, make_writer);
  if (ext == ".csv") return import_counts_csv(path, shape, make_writer);
  throw common::InputError(path + ": unknown counts file type " + common::quoted(ext) +
                           "; expected .npy (iterations x layers x experts), .json or .csv (traces/FORMAT.md, "
                           "\"counts\")");
}

}  // namespace moesim::traces
