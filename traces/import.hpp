// Importers: turn routing recorded by other tools into a moesim trace (input formats and rules in
// traces/FORMAT.md "Importers"). Each streams its input into a TraceWriter obtained from
// `make_writer` once the metadata is known, calls finish() only after the whole input was read and
// checked, and throws common::InputError naming the input file and line, record or byte offset on
// the first bad input, so a failed import leaves no output. Memory: esft holds one sequence (one line
// of every layer file), jsonl one sequence's records, npy one chunk of tokens.
// `counts` is apart: it reads per-step expert counts (load only, no per-token routes) and writes a
// load-only trace (traces/load_trace.hpp) through import_counts; import_trace refuses it. So is
// `sglang-stat` (SGLang's stat-mode expert distribution, per-pass counts) and `vllm-eplb` (vLLM's EPLB
// expert load window) and `trtllm-expert-statistic` (TensorRT-LLM's per-iteration expert counts):
// is_load_only_format.
// Engine formats (FORMAT.md "Serving-engine formats"): `sglang-routed` (the per-request routed experts an
// SGLang server returns), `sglang-per-token` (its per_token expert-distribution dump) and
// `megatron-router-trace` (Megatron-Core's --moe-routing-trace-path JSONL) give routes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "traces/load_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::traces {

enum class ImportFormat { kEsft, kJsonl, kNpy, kCounts, kSglangRouted, kSglangPerToken, kSglangStat,
                          kMegatronRouterTrace, kVllmEplb,
                          kTrtllmExpertStatistic };

// "esft", "jsonl", "npy", "counts", "sglang-routed", "sglang-per-token", "sglang-stat", "megatron-router-trace",
// "vllm-eplb", "trtllm-expert-statistic"
const std::vector<std::string>& import_format_names();
// Formats whose input is per-step counts, imported into a load-only trace (import_load_only).
bool is_load_only_format(ImportFormat format);
// Throws UsageError listing the valid names.
ImportFormat parse_import_format(std::string_view name);
std::string_view import_format_name(ImportFormat format);

struct ImportOptions {
  bool strict = false;                // jsonl: a token missing some layers is an error, not dropped
  std::uint64_t sequence_length = 0;  // npy: cut the tokens into sequences of this many (0: one sequence)
  std::string sequence_lengths_path;  // npy: a 1-D integer .npy of sequence lengths summing to the tokens
  int decoder_layers = 0;             // engine formats: the model's decoder layers (Architecture::num_layers)
  std::string expert_map_path;        // sglang-routed: JSON physical -> logical expert map (redundant experts)
};

struct ImportReport {
  std::uint64_t tokens = 0;     // written
  std::uint64_t sequences = 0;  // written
  std::uint64_t dropped_tokens = 0;
  std::vector<std::pair<std::string, std::uint64_t>> dropped_by_reason;  // why, how many tokens
  std::vector<std::string> notes;  // facts the user should know (e.g. "top-1 of a top-6 model")
  TraceMeta meta;                  // of the trace written (counts filled in)
};

using WriterFactory = std::function<std::unique_ptr<TraceWriter>(const TraceMeta&)>;

// `shape` is the architecture's routing shape (Architecture::trace_shape()).
ImportReport import_esft(const std::string& dir, const TraceShape& shape, const WriterFactory& make_writer,
                         const ImportOptions& options = {});
ImportReport import_jsonl(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                          const ImportOptions& options = {});
ImportReport import_npy(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                        const ImportOptions& options = {});
ImportReport import_trace(ImportFormat format, const std::string& input, const TraceShape& shape,
                          const WriterFactory& make_writer, const ImportOptions& options = {});

// A factory writing `path` in `encoding` (create_trace_writer).
WriterFactory file_writer_factory(const std::string& path, Encoding encoding, bool overwrite);

// Per-step expert counts, iterations x layers x experts, from a .npy, .json or .csv file (chosen by
// the extension; FORMAT.md "counts"). The layer axis must be the architecture's MoE layers and the
// expert axis its experts; every iteration must be top-k consistent. Errors name the input file and
// the entry (iteration, layer, expert). Memory: npy and csv hold one iteration, json the whole file.
struct CountsImportReport {
  std::uint64_t iterations = 0;
  std::uint64_t tokens = 0;              // over all iterations
  std::uint64_t min_tokens = 0;          // per iteration
  std::uint64_t max_tokens = 0;
  std::string input_kind;                // "npy", "json" or "csv"; an engine format's name
  std::vector<std::string> notes;        // facts the user should know
  LoadTraceMeta meta;                    // of the trace written (counts filled in)
};
using LoadWriterFactory = std::function<std::unique_ptr<LoadTraceWriter>(const LoadTraceMeta&)>;
CountsImportReport import_counts(const std::string& path, const TraceShape& shape,
                                 const LoadWriterFactory& make_writer);
// SGLang's stat-mode dump (`logical_count`, passes x layers x experts) converted to JSON (FORMAT.md
// "sglang-stat"), through the counts importer's checks. `decoder_layers` as in ImportOptions.
CountsImportReport import_sglang_stat(const std::string& path, const TraceShape& shape, int decoder_layers,
                                      const LoadWriterFactory& make_writer);
ImportReport import_sglang_routed(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                                  const ImportOptions& options);
ImportReport import_sglang_per_token(const std::string& path, const TraceShape& shape,
                                     const WriterFactory& make_writer, const ImportOptions& options);
// vLLM's EPLB load window saved as JSON (FORMAT.md "vllm-eplb"), folded to logical experts through
// its physical_to_logical_map or options.expert_map_path.
CountsImportReport import_vllm_eplb(const std::string& path, const TraceShape& shape, const ImportOptions& options,
                                    const LoadWriterFactory& make_writer);
// TensorRT-LLM's EXPERT_STATISTIC_PATH folder (or one rank{R}.safetensors) (FORMAT.md
// "trtllm-expert-statistic"); load-balancer slots fold through options.expert_map_path.
CountsImportReport import_trtllm_expert_statistic(const std::string& path, const TraceShape& shape,
                                                  const ImportOptions& options, const LoadWriterFactory& make_writer);
ImportReport import_megatron_router_trace(const std::string& path, const TraceShape& shape,
                                          const WriterFactory& make_writer, const ImportOptions& options);
// A load-only format (is_load_only_format) by name; throws UsageError for a route format.
CountsImportReport import_load_only(ImportFormat format, const std::string& path, const TraceShape& shape,
                                    const ImportOptions& options, const LoadWriterFactory& make_writer);

// A factory writing a load-only trace to `path` (create_load_trace_writer).
LoadWriterFactory load_file_writer_factory(const std::string& path, bool overwrite);

}  // namespace moesim::traces
