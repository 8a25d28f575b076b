// `moesim trace stats` (routing statistics of a trace, as a table or JSON) and `moesim trace generate`
// (a synthetic trace for an architecture's shape, or a trace fitted to a real one and scaled to any
// length). Parameter rules live in the library (check_synthetic_params, check_fit_options); this file
// maps them to the options that set them.
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"
#include "models/architecture.hpp"
#include "sim/cli/cli.hpp"
#include "traces/fit.hpp"
#include "traces/generate.hpp"
#include "traces/load_stats.hpp"
#include "traces/load_trace.hpp"
#include "traces/stats.hpp"
#include "traces/stats_report.hpp"
#include "traces/trace.hpp"

namespace moesim::cli {

namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kMaxGeneratedTokens = 0xFFFFFFFFull;

// "1000", "250k", "10M", "2G" (decimal multiples).
std::uint64_t parse_count(const std::string& text, const std::string& option) {
  std::uint64_t multiplier = 1;
  std::string digits = text;
  if (!digits.empty()) {
    const char last = digits.back();
    if (last == 'k' || last == 'K') multiplier = 1000;
    if (last == 'M') multiplier = 1000 * 1000;
    if (last == 'G') multiplier = 1000 * 1000 * 1000;
    if (multiplier != 1) digits.pop_back();
  }
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw common::UsageError(option + ": expected a whole number of tokens such as 100000 or 10M, got " +
                             common::quoted(text));
  return std::stoull(digits) * multiplier;
}

std::uint64_t parse_uint(const std::string& text, const std::string& option) {
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    throw common::UsageError(option + ": expected a non-negative whole number, got " + common::quoted(text));
  return std::stoull(text);
}

void throw_problems(const std::vector<traces::ParamProblem>& problems) {
  if (problems.empty()) return;
  std::string message;
  for (const auto& p : problems) message += (message.empty() ? "--" : "; --") + p.param + ": " + p.problem;
  throw common::UsageError(message);
}

traces::Encoding encoding_option(const po::variables_map& vm, const std::string& path) {
  if (!vm.count("encoding")) return traces::encoding_for_path(path);
  const std::string e = vm["encoding"].as<std::string>();
  if (e == "binary") return traces::Encoding::kBinary;
  if (e == "text") return traces::Encoding::kText;
  throw common::UsageError("--encoding " + common::quoted(e) + ": expected text or binary" +
                           common::did_you_mean(e, {"text", "binary"}));
}

int run_stats(const Args& args, Context& ctx) {
  po::options_description opts("Options");
  opts.add_options()("json", po::bool_switch(), "print one JSON document (full precision) instead of the table")(
      "top", po::value<std::string>()->default_value("20"), "how many of the strongest pairs to list")(
      "min-together", po::value<std::string>()->default_value("50"),
      "a pair gets a lift only when seen together at least this many times");
  po::options_description hidden;
  hidden.add_options()("trace", po::value<std::string>()->required(), "the trace");
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description pos;
  pos.add("trace", 1);
  auto vm = parse_options(
      args, all, pos, "moesim trace stats [--json] [--top N] [--min-together 50] TRACE",
      "Routing statistics computed from TRACE in one streaming pass: per MoE layer the expert loads,\n"
      "max/mean imbalance, entropy of the expert shares, the hottest expert, the strongest adjacent-layer\n"
      "pair by lift, and the drift between the first and second half of the tokens; then summaries.\n"
      "lift(e1, e2) = P(e1 at l and e2 at l+1) / (P(e1 at l) P(e2 at l+1)), over tokens.\n"
      "On a load-only trace (moesim trace import --format counts): the per-layer loads, max/mean, the\n"
      "per-step max/mean, entropy, hottest expert and drift, and tokens per iteration; no pair figures.",
      ctx);
  if (!vm) return common::kExitOk;
  traces::StatsOptions options;
  options.top_pairs = static_cast<std::size_t>(parse_uint((*vm)["top"].as<std::string>(), "--top"));
  options.min_together = parse_uint((*vm)["min-together"].as<std::string>(), "--min-together");
  if (options.min_together < 1) throw common::UsageError("--min-together: expected at least 1, got 0");
  if (options.top_pairs > 1000000) throw common::UsageError("--top: expected at most 1000000");
  const std::string path = (*vm)["trace"].as<std::string>();
  if (traces::is_load_trace(path)) {
    auto load_reader = traces::open_load_trace(path);
    const traces::LoadTraceStats load_stats = traces::compute_load_stats(*load_reader);
    traces::StatsReportInput load_input{path, ""};
    if ((*vm)["json"].as<bool>()) {
      load_input.trace_sha256 = common::sha256_file(path);
      ctx.out << traces::load_stats_to_json(load_stats, load_input).dump(2) << "\n";
    } else {
      traces::print_load_stats_table(ctx.out, load_stats, load_input);
    }
    return common::kExitOk;
  }
  auto reader = traces::open_trace(path);
  const traces::TraceStats stats = traces::compute_stats(*reader, options);
  traces::StatsReportInput input{path, ""};
  if ((*vm)["json"].as<bool>()) {
    input.trace_sha256 = common::sha256_file(path);
    ctx.out << traces::stats_to_json(stats, input).dump(2) << "\n";
  } else {
    traces::print_stats_table(ctx.out, stats, input);
  }
  return common::kExitOk;
}

// Options that shape a synthetic trace; with --fit or --model they have no meaning.
const std::vector<std::string> kSyntheticOnly = {"zipf",          "hot-experts",   "hot-share",      "affinity",
                                                 "seq-len",       "seq-len-range", "expert-counts", "popularity-seed"};
const std::vector<std::string> kFitOnly = {"fit-jump", "fit-mutation", "fit-max-tokens", "save-model"};

void parse_seq_len(const po::variables_map& vm, traces::SyntheticParams& p) {
  if (vm.count("seq-len") && vm.count("seq-len-range"))
    throw common::UsageError("--seq-len and --seq-len-range both given: choose a fixed length or a range");
  if (vm.count("seq-len")) {
    const auto v = parse_uint(vm["seq-len"].as<std::string>(), "--seq-len");
    if (v < 1 || v > 0x7FFFFFFF) throw common::UsageError("--seq-len: expected 1 to 2147483647 tokens, got " + std::to_string(v));
    p.seq_len_min = p.seq_len_max = static_cast<int>(v);
  }
  if (vm.count("seq-len-range")) {
    const std::string text = vm["seq-len-range"].as<std::string>();
    const auto colon = text.find(':');
    if (colon == std::string::npos)
      throw common::UsageError("--seq-len-range: expected MIN:MAX such as 128:2048, got " + common::quoted(text));
    const auto lo = parse_uint(text.substr(0, colon), "--seq-len-range (MIN)");
    const auto hi = parse_uint(text.substr(colon + 1), "--seq-len-range (MAX)");
    if (lo < 1 || hi < lo || hi > 0x7FFFFFFF)
      throw common::UsageError("--seq-len-range: expected 1 <= MIN <= MAX <= 2147483647, got " + common::quoted(text));
    p.seq_len_min = static_cast<int>(lo);
    p.seq_len_max = static_cast<int>(hi);
  }
}

std::string with_commas(std::uintmax_t v) {
  std::string s = std::to_string(v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<std::size_t>(i), ",");
  return s;
}

// Counts tokens and sequences on their way to the real writer, for the closing line.
class CountingWriter : public traces::TraceWriter {
 public:
  explicit CountingWriter(traces::TraceWriter& inner) : inner_(inner) {}
  void write(const traces::TokenBlock& block) override {
    for (std::size_t i = 0; i < block.size(); ++i) {
      if (tokens_ == 0 || block.sequence[i] != last_sequence_) ++sequences_;
      last_sequence_ = block.sequence[i];
      ++tokens_;
    }
    inner_.write(block);
  }
  void finish() override { inner_.finish(); }
  std::uint64_t tokens() const { return tokens_; }
  std::uint64_t sequences() const { return sequences_; }

 private:
  traces::TraceWriter& inner_;
  std::uint64_t tokens_ = 0;
  std::uint64_t sequences_ = 0;
  std::uint32_t last_sequence_ = 0;
};

int run_generate(const Args& args, Context& ctx) {
  po::options_description what("What to generate (one of)");
  what.add_options()("architecture", po::value<std::string>(),
                     "a synthetic trace for this architecture's shape (name in configs/architectures, or a YAML path)")(
      "fit", po::value<std::string>(), "a trace fitted to this source trace (its shape and statistics)")(
      "model", po::value<std::string>(), "a trace from a model saved by --save-model");
  po::options_description common_opts("Common options");
  common_opts.add_options()("tokens", po::value<std::string>()->required(), "tokens to generate: 100000, 250k, 10M")(
      "seed", po::value<std::string>()->default_value("1"), "the seed; the same seed and options give the same trace")(
      "output,o", po::value<std::string>()->required(), "output trace (.mtr binary, .txt text)")(
      "encoding", po::value<std::string>(), "output encoding: binary or text (default: from the output name)")(
      "force", po::bool_switch(), "replace existing output files");
  po::options_description synth("Synthetic traces (--architecture)");
  synth.add_options()("zipf", po::value<double>(), "Zipf exponent of expert popularity, 0..10 (default 1.0)")(
      "expert-counts", po::value<std::string>(),
      "per-layer expert shares from a count file (OLMoE format: {\"layer0\": {\"0\": n, ...}, ...}) instead of Zipf")(
      "popularity-seed", po::value<std::string>(),
      "seed of the experts' popularity ranking, independent of --seed (default 1)")(
      "hot-experts", po::value<int>(), "number of hot experts per layer (with --hot-share)")(
      "hot-share", po::value<double>(), "share of all assignments the hot experts receive, in (0, 1)")(
      "affinity", po::value<double>(), "cross-layer affinity, 0 (layers independent) .. 1 (default 0.5)")(
      "drift", po::value<double>(),
      "popularity rotation over the trace, fraction of the experts, 0..1 (default 0); also for --fit and --model")(
      "shift", po::value<int>(),
      "--fit, --model: every expert id e becomes (e + N) mod E, the whole trace (other experts hot; default 0)")(
      "seq-len", po::value<std::string>(), "fixed sequence length (default 512)")(
      "seq-len-range", po::value<std::string>(), "sequence lengths uniform in MIN:MAX")(
      "weights", po::bool_switch(), "emit gate weights");
  po::options_description fit("Fitted traces (--fit)");
  fit.add_options()("fit-jump", po::value<double>(),
                    "per-layer probability of backing off through a shared expert (default 0.03)")(
      "fit-mutation", po::value<double>(), "per-expert probability of a marginal replacement (default 0.01)")(
      "fit-max-tokens", po::value<std::string>(), "source tokens the model keeps at most (default 262144)")(
      "save-model", po::value<std::string>(), "also write the fitted model to this JSON file");
  po::options_description all;
  all.add(what).add(common_opts).add(synth).add(fit);
  const std::string usage =
      "moesim trace generate --architecture NAME --tokens N [--seed 1] [--popularity-seed 1] "
      "[--zipf 1.0 | --expert-counts COUNTS.json] [--affinity 0.5] [--drift D] [synthetic options] -o OUT [--force]\n"
      "moesim trace generate --fit SOURCE_TRACE --tokens N [--seed 1] [--drift D] [--shift K] [--save-model M.json] "
      "-o OUT [--force]\n"
      "moesim trace generate --model M.json --tokens N [--seed 1] [--drift D] [--shift K] -o OUT [--force]";
  auto vm = parse_options(
      args, all, po::positional_options_description(), usage,
      "Writes a routing trace. --architecture: a synthetic trace with tunable popularity (Zipf or given\n"
      "expert counts, hot experts), cross-layer affinity, drift and sequence lengths; --seed drives the\n"
      "sampling, --popularity-seed which experts are hot. --fit: learns a routing model from a\n"
      "real trace (per-layer expert shares and adjacent-layer pair statistics) and generates N tokens with\n"
      "the same statistics; --save-model keeps the model, --model reuses it. Deterministic: the same\n"
      "seed and options give a byte-identical trace. The models are described in docs/trace-generator.md.",
      ctx);
  if (!vm) return common::kExitOk;

  const int sources = static_cast<int>(vm->count("architecture") + vm->count("fit") + vm->count("model"));
  if (sources != 1)
    throw common::UsageError(std::string(sources == 0 ? "nothing to generate from" : "more than one of") +
                             ": give exactly one of --architecture NAME (synthetic), --fit SOURCE_TRACE or --model "
                             "M.json");
  const bool synthetic = vm->count("architecture") > 0;
  for (const auto& o : kSyntheticOnly)
    if (!synthetic && vm->count(o))
      throw common::UsageError("--" + o + " applies to synthetic traces (--architecture) only: a fitted trace takes "
                               "its popularity, affinity and sequence lengths from the source");
  if (!synthetic && (*vm)["weights"].as<bool>())
    throw common::UsageError("--weights applies to synthetic traces (--architecture) only: a fitted trace has gate "
                             "weights exactly when its source has them");
  if (synthetic && vm->count("shift"))
    throw common::UsageError("--shift applies to fitted traces (--fit, --model) only: a synthetic trace's hot experts "
                             "are chosen by --popularity-seed");
  for (const auto& o : kFitOnly)
    if (!vm->count("fit") && vm->count(o))
      throw common::UsageError("--" + o + " applies to --fit only");

  const std::uint64_t tokens = parse_count((*vm)["tokens"].as<std::string>(), "--tokens");
  if (tokens < 1 || tokens > kMaxGeneratedTokens)
    throw common::UsageError("--tokens: expected 1 to " + std::to_string(kMaxGeneratedTokens) + ", got " +
                             std::to_string(tokens));
  const std::uint64_t seed = parse_uint((*vm)["seed"].as<std::string>(), "--seed");
  const std::string output = (*vm)["output"].as<std::string>();
  const bool force = (*vm)["force"].as<bool>();
  const traces::Encoding encoding = encoding_option(*vm, output);
  common::check_can_write(output, force);
  std::optional<std::string> model_out;
  if (vm->count("save-model")) {
    model_out = (*vm)["save-model"].as<std::string>();
    if (fs::absolute(*model_out).lexically_normal() == fs::absolute(output).lexically_normal())
      throw common::UsageError("--save-model and --output name the same file " + output);
    common::check_can_write(*model_out, force);
  }

  std::string what_line;
  auto write_with = [&](const traces::TraceMeta& meta, const auto& generate) {
    auto writer = traces::create_trace_writer(output, meta, encoding, force);
    CountingWriter counting(*writer);
    generate(counting);
    counting.finish();
    std::error_code ec;
    const auto bytes = fs::file_size(output, ec);
    ctx.out << "wrote " << output << " (" << (encoding == traces::Encoding::kText ? "text" : "binary") << ", "
            << with_commas(ec ? 0 : bytes) << " bytes): " << with_commas(counting.tokens()) << " tokens in "
            << with_commas(counting.sequences()) << " sequences; " << what_line << "\n";
  };

  if (synthetic) {
    traces::SyntheticParams p;
    const auto arch = models::load_architecture((*vm)["architecture"].as<std::string>());
    if (!arch.is_moe())
      throw common::InputError(arch.source_file + ": architecture " + arch.name +
                               " has no MoE layers, so it has no routing to generate");
    p.shape = arch.trace_shape();
    p.tokens = tokens;
    p.seed = seed;
    if (vm->count("popularity-seed"))
      p.popularity_seed = parse_uint((*vm)["popularity-seed"].as<std::string>(), "--popularity-seed");
    if (vm->count("expert-counts")) {
      if (vm->count("zipf"))
        throw common::UsageError("--zipf and --expert-counts both given: the counts replace the Zipf law; drop one");
      if (vm->count("popularity-seed"))
        throw common::UsageError("--popularity-seed and --expert-counts both given: with counts the experts rank by "
                                 "their counts; drop --popularity-seed");
      const std::string counts = (*vm)["expert-counts"].as<std::string>();
      std::vector<int> counted;
      p.layer_shares = traces::load_expert_count_shares(counts, p.shape, &counted);
      std::string layers_text;
      for (int l : counted) layers_text += (layers_text.empty() ? "" : ", ") + std::to_string(l);
      // The file's name and digest, not its path: the same counts give the same trace anywhere.
      p.layer_shares_source = "expert counts " + fs::path(counts).filename().string() + " (sha256 " +
                              common::sha256_file(counts).substr(0, 16) + ", layers " + layers_text +
                              "; interpolated between, held after the last)";
    }
    if (vm->count("zipf")) p.zipf = (*vm)["zipf"].as<double>();
    if (vm->count("hot-experts")) p.hot_experts = (*vm)["hot-experts"].as<int>();
    if (vm->count("hot-share")) p.hot_share = (*vm)["hot-share"].as<double>();
    if (vm->count("affinity")) p.affinity = (*vm)["affinity"].as<double>();
    if (vm->count("drift")) p.drift = (*vm)["drift"].as<double>();
    parse_seq_len(*vm, p);
    p.weights = (*vm)["weights"].as<bool>();
    throw_problems(traces::check_synthetic_params(p));
    what_line = "synthetic " + arch.name + ", seed " + std::to_string(seed);
    write_with(traces::synthetic_meta(p), [&](traces::TraceWriter& w) { traces::generate_synthetic(p, w); });
    return common::kExitOk;
  }

  traces::FittedModel model;
  if (vm->count("fit")) {
    traces::FitOptions options;
    if (vm->count("fit-jump")) options.jump = (*vm)["fit-jump"].as<double>();
    if (vm->count("fit-mutation")) options.mutation = (*vm)["fit-mutation"].as<double>();
    if (vm->count("fit-max-tokens"))
      options.max_source_tokens = parse_count((*vm)["fit-max-tokens"].as<std::string>(), "--fit-max-tokens");
    throw_problems(traces::check_fit_options(options));
    const std::string source = (*vm)["fit"].as<std::string>();
    std::error_code ec;
    if (fs::exists(output, ec) && fs::equivalent(source, output, ec))
      throw common::UsageError("--output " + output + " is the source trace; choose another output name");
    auto reader = traces::open_trace(source);
    model = traces::fit_model(*reader, options);
    model.source_sha256 = common::sha256_file(source);
    if (model_out) {
      traces::save_model(model, *model_out, force);
      ctx.out << "wrote " << *model_out << ": routing model of " << with_commas(model.tokens()) << " tokens of "
              << source << "\n";
    }
    what_line = "fitted to " + source + ", seed " + std::to_string(seed);
  } else {
    const std::string path = (*vm)["model"].as<std::string>();
    model = traces::load_model(path);
    what_line = "from the model " + path + ", seed " + std::to_string(seed);
  }
  // Drift relabels the fitted experts as the trace advances (traces/fit.hpp).
  const double drift = vm->count("drift") ? (*vm)["drift"].as<double>() : 0.0;
  if (!(drift >= 0.0 && drift <= 1.0))
    throw common::UsageError("--drift: expected a fraction of the experts in [0, 1], got " + std::to_string(drift));
  const int shift = vm->count("shift") ? (*vm)["shift"].as<int>() : 0;
  if (shift < 0 || shift >= model.shape.num_experts)
    throw common::UsageError("--shift: expected 0 to " + std::to_string(model.shape.num_experts - 1) +
                             " (an expert count of the trace's " + std::to_string(model.shape.num_experts) + "), got " +
                             std::to_string(shift));
  if (drift > 0.0) what_line += ", drift " + std::to_string(drift);
  if (shift > 0) what_line += ", shift " + std::to_string(shift);
  write_with(traces::fitted_meta(model, tokens, seed, drift, shift),
             [&](traces::TraceWriter& w) { traces::generate_fitted(model, tokens, seed, w, drift, shift); });
  return common::kExitOk;
}

}  // namespace

void register_trace_stats_commands(std::vector<Command>& commands) {
  commands.push_back({"trace stats", "routing statistics of a trace: loads, imbalance, entropy, lift, drift",
                      run_stats});
  commands.push_back({"trace generate", "a synthetic trace for an architecture, or one fitted to a real trace",
                      run_generate});
}

}  // namespace moesim::cli
