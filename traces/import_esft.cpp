// The ESFT importer: a folder of expert_weights_N.txt files, one per MoE layer N, line i of every
// file being sequence i (FORMAT.md "esft"). The files are read line by line in lockstep, so memory
// holds one sequence.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/format_lines.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPrefix = "expert_weights_";
constexpr std::string_view kSuffix = ".txt";

// One line of one layer file, split into its id and weight fields.
struct EsftLine {
  std::vector<std::string_view> ids;
  std::vector<std::string_view> weights;
};

void split_tabs(std::string_view text, std::vector<std::string_view>& out) {
  out.clear();
  std::size_t b = 0;
  for (;;) {
    std::size_t e = text.find('\t', b);
    if (e == std::string_view::npos) {
      out.push_back(text.substr(b));
      return;
    }
    out.push_back(text.substr(b, e - b));
    b = e + 1;
  }
}

void split_line(std::string_view line, const std::string& where, EsftLine& out) {
  if (line.empty())
    throw common::InputError(where + ": empty line, expected the expert ids of one sequence, two tabs, then the "
                             "gate weights");
  std::size_t sep = line.find("\t\t");
  if (sep == std::string_view::npos)
    throw common::InputError(where + ": no two-tab separator: expected the expert ids, two tabs, then the gate "
                             "weights");
  if (sep == 0)
    throw common::InputError(where + ": no expert ids before the two-tab separator: expected the expert ids of one "
                             "sequence, two tabs, then the gate weights");
  if (sep + 2 == line.size())
    throw common::InputError(where + ": no gate weights after the two-tab separator: expected the expert ids of one "
                             "sequence, two tabs, then the gate weights");
  split_tabs(line.substr(0, sep), out.ids);
  split_tabs(line.substr(sep + 2), out.weights);
}

}  // namespace

ImportReport import_esft(const std::string& dir, const TraceShape& shape, const WriterFactory& make_writer,
                         const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 || !options.sequence_lengths_path.empty())
    throw common::UsageError("--sequence-length and --sequence-lengths apply to --format npy only");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw common::InputError(dir + ": " + (fs::exists(dir, ec) ? "is not a folder" : "does not exist") +
                             ", expected a folder of expert_weights_N.txt files (one per MoE layer)");

  // Layer files present, by layer.
  std::map<int, fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    std::string_view number(name);
    number = number.substr(kPrefix.size(), number.size() - kPrefix.size() - kSuffix.size());
    std::string why;
    auto layer = detail::parse_int(number, why);
    if (!layer || *layer < 0 || *layer > 1'000'000)
      throw common::InputError(entry.path().string() + ": expected a layer file named expert_weights_N.txt with N "
                               "a decoder-layer index, got " + common::quoted(name));
    if (detail::layer_index(shape, *layer) < 0)
      throw common::InputError(entry.path().string() + ": layer " + std::to_string(*layer) +
                               " is not an MoE layer of " + shape.architecture + " (its MoE layers are " +
                               detail::layers_text(shape.layers) + ")");
    files[static_cast<int>(*layer)] = entry.path();
  }
  std::vector<int> missing;
  for (int l : shape.layers)
    if (!files.count(l)) missing.push_back(l);
  if (!missing.empty())
    throw common::InputError(dir + ": missing the layer file" + (missing.size() > 1 ? "s" : "") + " for MoE layer" +
                             (missing.size() > 1 ? "s " : " ") + detail::layers_text(missing) + " (expected " +
                             std::string(kPrefix) + std::to_string(missing.front()) + std::string(kSuffix) +
                             "; " + shape.architecture + " has MoE layers " + detail::layers_text(shape.layers) + ")");

  const std::size_t num_layers = shape.layers.size();
  const std::size_t k = static_cast<std::size_t>(shape.top_k);
  const std::size_t per = ids_per_token(shape);
  std::vector<std::unique_ptr<LineReader>> readers;
  for (int l : shape.layers) readers.push_back(std::make_unique<LineReader>(files[l].string()));

  TraceMeta meta;
  meta.shape = shape;
  meta.has_weights = true;
  meta.source = "esft import of " + detail::short_name(dir) + "/ (moesim trace import --format esft)";
  std::unique_ptr<TraceWriter> writer = make_writer(meta);

  TokenChecker checker(shape, true);
  std::vector<EsftLine> lines(num_layers);
  std::vector<std::string> wheres(num_layers);
  TokenBlock block;
  std::vector<std::uint16_t> ids(k);
  std::vector<float> weights(k);
  ImportReport report;
  std::uint32_t sequence = 0;
  for (;;) {
    std::size_t present = 0;
    for (std::size_t l = 0; l < num_layers; ++l) {
      std::string_view line;
      if (readers[l]->next(line)) {
        ++present;
        wheres[l] = readers[l]->where();
        split_line(line, wheres[l], lines[l]);
      }
    }
    if (present == 0) break;
    if (present != num_layers) {
      // Some files ended: name one that ended and one that did not.
      std::size_t ended = 0, going = 0;
      for (std::size_t l = 0; l < num_layers; ++l) {
        if (readers[l]->line_number() == sequence) ended = l;
        else going = l;
      }
      throw common::InputError(readers[ended]->path() + ": ends after " + std::to_string(sequence) + " lines, but " +
                               readers[going]->path() + " has a line " + std::to_string(sequence + 1) +
                               ": every layer file must have one line per sequence, the same number of lines");
    }
    // Token count of this sequence, from the first layer; every layer must agree.
    std::size_t tokens = 0;
    for (std::size_t l = 0; l < num_layers; ++l) {
      const auto& ln = lines[l];
      if (ln.ids.size() % k != 0)
        throw common::InputError(wheres[l] + ": " + std::to_string(ln.ids.size()) + " expert ids, expected a multiple "
                                 "of top_k = " + std::to_string(k) + " (" + std::to_string(k) + " per token)");
      if (ln.weights.size() != ln.ids.size())
        throw common::InputError(wheres[l] + ": " + std::to_string(ln.ids.size()) + " expert ids but " +
                                 std::to_string(ln.weights.size()) + " gate weights, expected one weight per id");
      const std::size_t t = ln.ids.size() / k;
      if (l == 0) {
        tokens = t;
      } else if (t != tokens) {
        throw common::InputError(wheres[l] + ": " + std::to_string(t) + " tokens (" + std::to_string(ln.ids.size()) +
                                 " ids), but " + wheres[0] + " has " + std::to_string(tokens) +
                                 " tokens: line i of every layer file is the same sequence and must hold as many "
                                 "tokens");
      }
    }
    if (sequence == UINT32_MAX) throw common::InputError(dir + ": more than 2^32-1 sequences");
    block.clear();
    block.experts.resize(tokens * per);
    block.weights.resize(tokens * per);
    for (std::size_t l = 0; l < num_layers; ++l) {
      const auto& ln = lines[l];
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t j = 0; j < k; ++j) {
          const std::size_t field = t * k + j;
          std::string why;
          auto id = detail::parse_int(ln.ids[field], why);
          auto field_name = [&] {
            return "field " + std::to_string(field + 1) + " (token " + std::to_string(t) + ", expert " +
                   std::to_string(j + 1) + " of " + std::to_string(k) + ")";
          };
          if (!id)
            throw common::InputError(wheres[l] + ": " + field_name() + ": expected an expert id 0.." +
                                     std::to_string(shape.num_experts - 1) + ", got " + why);
          if (*id < 0 || *id >= shape.num_experts)
            throw common::InputError(wheres[l] + ": " + field_name() + ": expert id " + std::to_string(*id) +
                                     " is out of range, expected 0.." + std::to_string(shape.num_experts - 1));
          auto w = detail::parse_weight(ln.weights[field], why);
          if (!w)
            throw common::InputError(wheres[l] + ": gate weight " + std::to_string(field + 1) + " (token " +
                                     std::to_string(t) + "): expected a finite number, got " + why);
          ids[j] = static_cast<std::uint16_t>(*id);
          weights[j] = *w;
        }
        std::string problem = checker.layer_problem(ids.data(), weights.data());
        if (!problem.empty())
          throw common::InputError(wheres[l] + ": token " + std::to_string(t) + " (fields " +
                                   std::to_string(t * k + 1) + ".." + std::to_string(t * k + k) + "): " + problem);
        const std::size_t off = t * per + l * k;
        std::copy(ids.begin(), ids.end(), block.experts.begin() + static_cast<std::ptrdiff_t>(off));
        std::copy(weights.begin(), weights.end(), block.weights.begin() + static_cast<std::ptrdiff_t>(off));
      }
    }
    for (std::size_t t = 0; t < tokens; ++t) {
      block.sequence.push_back(sequence);
      block.position.push_back(static_cast<std::uint32_t>(t));
    }
    writer->write(block);
    report.tokens += tokens;
    ++report.sequences;
    ++sequence;
  }
  if (report.tokens == 0)
    throw common::InputError(dir + ": the layer files hold no sequences (every file is empty)");
  writer->finish();
  report.meta = meta;
  report.meta.token_count = report.tokens;
  report.meta.sequence_count = report.sequences;
  return report;
}

}  // namespace moesim::traces
