// `moesim trace import`, `trace convert`, `trace split`: bring routing recorded elsewhere into a
// moesim trace (or per-step expert counts into a load-only trace), change a trace's encoding, and cut
// a trace into profile and held-out parts by sequence. Outputs are written atomically and never
// replace a file without --force.
#include <filesystem>
#include <iostream>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "models/architecture.hpp"
#include "sim/cli/cli.hpp"
#include "traces/import.hpp"
#include "traces/split.hpp"
#include "traces/trace.hpp"

namespace moesim::cli {

namespace {

namespace fs = std::filesystem;
using traces::Encoding;

Encoding encoding_option(const po::variables_map& vm, const std::string& path) {
  if (!vm.count("encoding")) return traces::encoding_for_path(path);
  const std::string e = vm["encoding"].as<std::string>();
  if (e == "binary") return Encoding::kBinary;
  if (e == "text") return Encoding::kText;
  throw common::UsageError("--encoding " + common::quoted(e) + ": expected text or binary" +
                           common::did_you_mean(e, {"text", "binary"}));
}

std::string encoding_name(Encoding e) { return e == Encoding::kText ? "text" : "binary"; }

std::string with_commas(std::uintmax_t v) {
  // Built by appending: GCC 12 warns (-Wrestrict, a false positive) on std::string::insert here.
  const std::string digits = std::to_string(v);
  std::string s;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string shape_summary(const traces::TraceMeta& meta) {
  return std::to_string(meta.shape.layers.size()) + " MoE layers, top-" + std::to_string(meta.shape.top_k) + " of " +
         std::to_string(meta.shape.num_experts) + " experts" + (meta.has_weights ? ", gate weights" : ", no weights");
}

void check_distinct(const std::string& input, const std::string& output, const char* what) {
  std::error_code ec;
  if (fs::exists(output, ec) && fs::equivalent(input, output, ec))
    throw common::UsageError(std::string(what) + " " + output + " is the input file; choose another output name");
}

void print_written(Context& ctx, const std::string& path, Encoding encoding) {
  std::error_code ec;
  const auto bytes = fs::file_size(path, ec);
  ctx.out << "wrote " << path << " (" << encoding_name(encoding) << ", " << with_commas(ec ? 0 : bytes)
          << " bytes)\n";
}

models::Architecture import_architecture(const po::variables_map& vm) {
  models::Architecture arch = models::load_architecture(vm["architecture"].as<std::string>());
  if (!arch.is_moe())
    throw common::InputError(arch.source_file + ": architecture " + arch.name +
                             " has no MoE layers, so it has no routing to import");
  return arch;
}

// --format counts or sglang-stat: per-step expert counts into a load-only trace (one encoding, no sequences).
int run_import_load_only(const po::variables_map& vm, traces::ImportFormat format, const std::string& input,
                         const std::string& output, bool force, Context& ctx) {
  const std::string name(traces::import_format_name(format));
  const bool takes_map =
      format == traces::ImportFormat::kVllmEplb || format == traces::ImportFormat::kTrtllmExpertStatistic;
  for (const char* option : {"encoding", "sequence-length", "sequence-lengths", "expert-map"})
    if (vm.count(option) && !(std::string(option) == "expert-map" && takes_map))
      throw common::UsageError(std::string("--") + option + " does not apply to --format " + name +
                               ": a load-only trace has one encoding and no sequences" +
                               (std::string(option) == "expert-map" ? "; the counts are per logical expert" : ""));
  if (vm["strict"].as<bool>()) throw common::UsageError("--strict applies to --format jsonl only");
  common::check_can_write(output, force);
  check_distinct(input, output, "--output");
  const models::Architecture arch = import_architecture(vm);
  traces::ImportOptions options;
  options.decoder_layers = arch.num_layers;
  if (vm.count("expert-map")) options.expert_map_path = vm["expert-map"].as<std::string>();
  const auto report = traces::import_load_only(format, input, arch.trace_shape(), options,
                                               traces::load_file_writer_factory(output, force));
  const auto& shape = report.meta.shape;
  ctx.out << "imported " << with_commas(report.iterations) << " iterations, " << with_commas(report.tokens)
          << " tokens (" << with_commas(report.min_tokens) << " to " << with_commas(report.max_tokens)
          << " per iteration) from " << input << " (" << name
          << (report.input_kind != name ? ", " + report.input_kind : std::string()) << "; " << arch.name << ", "
          << shape.layers.size() << " MoE layers, top-" << shape.top_k << " of " << shape.num_experts
          << " experts)\n";
  for (const auto& note : report.notes) ctx.out << "note: " << note << "\n";
  ctx.out << "note: a load-only trace: per-step expert counts, no per-token routes (usable as a study's trace: "
             "and by moesim trace stats)\n";
  std::error_code ec;
  const auto bytes = fs::file_size(output, ec);
  ctx.out << "wrote " << output << " (load-only, " << with_commas(ec ? 0 : bytes) << " bytes)\n";
  return common::kExitOk;
}

int run_import(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("format", po::value<std::string>()->required(),
                     "input format: esft, jsonl, npy, sglang-routed, sglang-per-token, megatron-router-trace "
                     "(routes); counts, "
                     "sglang-stat, vllm-eplb, trtllm-expert-statistic (per-step expert counts)")(
      "architecture", po::value<std::string>()->required(),
      "architecture name (configs/architectures/NAME.yaml) or path to its YAML")(
      "output,o", po::value<std::string>()->required(),
      "output trace (.mtr binary, .txt text; counts: a load-only trace, .mlt)")(
      "encoding", po::value<std::string>(), "output encoding: binary or text (default: from the output name)")(
      "strict", po::bool_switch(), "jsonl: a token missing some MoE layers is an error instead of dropped")(
      "sequence-length", po::value<std::uint64_t>(), "npy: cut the tokens into sequences of N tokens")(
      "sequence-lengths", po::value<std::string>(), "npy: a 1-D integer .npy of sequence lengths")(
      "expert-map", po::value<std::string>(),
      "sglang-routed, sglang-per-token, vllm-eplb, trtllm-expert-statistic: JSON physical -> logical expert "
      "map (redundant experts)")(
      "force", po::bool_switch(), "replace an existing output file");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::string>()->required(), "the input (or give it as the first argument)");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("input", 1);
  const std::string usage =
      "moesim trace import --format esft|jsonl|npy --architecture NAME INPUT -o OUT.mtr [--encoding text|binary] "
      "[--strict] [--sequence-length N | --sequence-lengths L.npy] [--force]\n"
      "moesim trace import --format sglang-routed|sglang-per-token --architecture NAME DUMP [--expert-map MAP.json] "
      "-o OUT.mtr [--encoding text|binary] [--force]\n"
      "moesim trace import --format megatron-router-trace --architecture NAME DUMP -o OUT.mtr "
      "[--encoding text|binary] [--force]\n"
      "moesim trace import --format counts|sglang-stat --architecture NAME INPUT -o OUT.mlt [--force]\n"
      "moesim trace import --format vllm-eplb|trtllm-expert-statistic --architecture NAME DUMP "
      "[--expert-map MAP.json] -o OUT.mlt [--force]";
  auto vm = parse_options(args, all, pos, usage,
                          "Converts routing recorded by other tools into a moesim trace. INPUT is a folder of\n"
                          "expert_weights_N.txt files (esft), a JSON-lines file (jsonl) or a .npy array (npy);\n"
                          "--format counts reads per-step expert token counts (iterations x layers x experts, .npy,\n"
                          ".json or .csv) into a load-only trace. Serving-engine output: sglang-routed (JSON lines of\n"
                          "/generate responses with meta_info.routed_experts), sglang-per-token and sglang-stat\n"
                          "(/dump_expert_distribution_record dumps converted to JSON), megatron-router-trace\n"
                          "(router_trace_rankR.jsonl of --moe-routing-trace-path), vllm-eplb (vLLM's EPLB load window\n"
                          "saved as JSON), trtllm-expert-statistic (EXPERT_STATISTIC_PATH folder).\n"
                          "The formats are described in\n"
                          "traces/FORMAT.md.",
                          ctx);
  if (!vm) return common::kExitOk;
  const auto format = traces::parse_import_format((*vm)["format"].as<std::string>());
  const std::string input = (*vm)["input"].as<std::string>();
  const std::string output = (*vm)["output"].as<std::string>();
  const bool force = (*vm)["force"].as<bool>();
  if (traces::is_load_only_format(format)) return run_import_load_only(*vm, format, input, output, force, ctx);
  const Encoding encoding = encoding_option(*vm, output);
  traces::ImportOptions options;
  options.strict = (*vm)["strict"].as<bool>();
  if (vm->count("sequence-length")) {
    options.sequence_length = (*vm)["sequence-length"].as<std::uint64_t>();
    if (options.sequence_length == 0) throw common::UsageError("--sequence-length must be at least 1");
  }
  if (vm->count("sequence-lengths")) options.sequence_lengths_path = (*vm)["sequence-lengths"].as<std::string>();
  if (vm->count("expert-map")) {
    if (format != traces::ImportFormat::kSglangRouted && format != traces::ImportFormat::kSglangPerToken)
      throw common::UsageError("--expert-map applies to --format sglang-routed and sglang-per-token only");
    options.expert_map_path = (*vm)["expert-map"].as<std::string>();
  }
  if (options.strict && format != traces::ImportFormat::kJsonl)
    throw common::UsageError("--strict applies to --format jsonl only");
  common::check_can_write(output, force);
  check_distinct(input, output, "--output");
  const models::Architecture arch = import_architecture(*vm);
  options.decoder_layers = arch.num_layers;
  auto report = traces::import_trace(format, input, arch.trace_shape(),
                                     traces::file_writer_factory(output, encoding, force), options);
  ctx.out << "imported " << with_commas(report.tokens) << " tokens in " << with_commas(report.sequences)
          << " sequences from " << input << " (" << traces::import_format_name(format) << "; " << arch.name << ", "
          << shape_summary(report.meta) << ")\n";
  ctx.out << "dropped " << with_commas(report.dropped_tokens) << " tokens";
  for (const auto& [why, count] : report.dropped_by_reason) ctx.out << "; " << with_commas(count) << ": " << why;
  ctx.out << "\n";
  for (const auto& note : report.notes) ctx.out << "note: " << note << "\n";
  print_written(ctx, output, encoding);
  return common::kExitOk;
}

int run_convert(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("output,o", po::value<std::string>()->required(), "output trace (.mtr binary, .txt text)")(
      "encoding", po::value<std::string>(), "output encoding: binary or text (default: from the output name)")(
      "force", po::bool_switch(), "replace an existing output file");
  po::options_description hidden;
  hidden.add_options()("input", po::value<std::string>()->required(), "the input (or give it as the first argument)");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("input", 1);
  auto vm = parse_options(args, all, pos, "moesim trace convert INPUT -o OUT [--encoding text|binary] [--force]",
                          "Rewrites a trace in the other encoding (binary .mtr <-> text), checking every token.",
                          ctx);
  if (!vm) return common::kExitOk;
  const std::string input = (*vm)["input"].as<std::string>();
  const std::string output = (*vm)["output"].as<std::string>();
  const bool force = (*vm)["force"].as<bool>();
  const Encoding encoding = encoding_option(*vm, output);
  common::check_can_write(output, force);
  check_distinct(input, output, "--output");
  auto reader = traces::open_trace(input);
  auto writer = traces::create_trace_writer(output, reader->meta(), encoding, force);
  traces::TokenBlock block;
  while (reader->next(block, 1u << 16)) writer->write(block);
  writer->finish();
  ctx.out << "converted " << with_commas(reader->meta().token_count) << " tokens in "
          << with_commas(reader->meta().sequence_count) << " sequences (" << shape_summary(reader->meta()) << ")\n";
  print_written(ctx, output, encoding);
  return common::kExitOk;
}

int run_split(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("profile-out", po::value<std::string>()->required(), "output: the profile part")(
      "heldout-out", po::value<std::string>()->required(), "output: the held-out part")(
      "fraction", po::value<double>()->default_value(0.5, "0.5"), "share of the sequences in the profile part")(
      "seed", po::value<std::uint64_t>()->default_value(1), "seed of the shuffle; the same seed gives the same split")(
      "force", po::bool_switch(), "replace existing output files");
  po::options_description hidden;
  hidden.add_options()("trace", po::value<std::string>()->required(), "the trace to split (or give it as the first argument)");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("trace", 1);
  auto vm = parse_options(
      args, all, pos,
      "moesim trace split TRACE --profile-out A --heldout-out B [--fraction 0.5] [--seed N] [--force]",
      "Splits a trace by sequence into a profile part and a held-out part: round(fraction x sequences)\n"
      "sequences, chosen by a seeded shuffle, go to the profile part; a sequence is never split. Each\n"
      "output's encoding follows its name (.mtr binary, .txt text).",
      ctx);
  if (!vm) return common::kExitOk;
  const std::string input = (*vm)["trace"].as<std::string>();
  const std::string a = (*vm)["profile-out"].as<std::string>();
  const std::string b = (*vm)["heldout-out"].as<std::string>();
  const bool force = (*vm)["force"].as<bool>();
  if (fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal())
    throw common::UsageError("--profile-out and --heldout-out name the same file " + a);
  common::check_can_write(a, force);
  common::check_can_write(b, force);
  check_distinct(input, a, "--profile-out");
  check_distinct(input, b, "--heldout-out");
  traces::SplitOptions options;
  options.fraction = (*vm)["fraction"].as<double>();
  options.seed = (*vm)["seed"].as<std::uint64_t>();
  auto reader = traces::open_trace(input);
  auto report = traces::split_trace(*reader, traces::file_writer_factory(a, traces::encoding_for_path(a), force),
                                    traces::file_writer_factory(b, traces::encoding_for_path(b), force), options);
  ctx.out << "split " << with_commas(report.sequences) << " sequences (fraction " << options.fraction << ", seed "
          << options.seed << ")\n";
  ctx.out << "profile:  " << with_commas(report.profile_sequences) << " sequences, "
          << with_commas(report.profile_tokens) << " tokens -> " << a << "\n";
  ctx.out << "held-out: " << with_commas(report.heldout_sequences) << " sequences, "
          << with_commas(report.heldout_tokens) << " tokens -> " << b << "\n";
  return common::kExitOk;
}

}  // namespace

void register_trace_import_commands(std::vector<Command>& commands) {
  commands.push_back({"trace import",
                      "convert routing (esft, jsonl, npy, sglang-routed, sglang-per-token, megatron-router-trace) or "
                      "per-step expert "
                      "counts (counts, sglang-stat, vllm-eplb, trtllm-expert-statistic) recorded elsewhere",
                      run_import});
  commands.push_back({"trace convert", "rewrite a trace in the other encoding (binary <-> text)", run_convert});
  commands.push_back({"trace split", "split a trace by sequence into profile and held-out parts", run_split});
}

}  // namespace moesim::cli
