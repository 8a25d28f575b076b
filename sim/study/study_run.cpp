#include "sim/study/study_run.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <limits>
#include <map>
#include <ostream>
#include <regex>
#include <sstream>
#include <utility>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/folder_lock.hpp"
#include "common/interrupt.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"

namespace moesim::sim {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr const char* kStateFile = "study.json";
constexpr const char* kStateKind = "study_folder";
// Variant folders are written here first and renamed into variants/ when whole.
constexpr const char* kPartialDir = ".partial";

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

nlohmann::json assignments_json(const Variant& v) {
  nlohmann::json a = nlohmann::json::object();
  for (const auto& [k, val] : v.assignments) a[k] = val;
  return a;
}

nlohmann::json variant_list(const Study& study) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& v : study.variants) list.push_back({{"name", v.name}, {"assignments", assignments_json(v)}});
  return list;
}

// The context block of every file a study run writes: moesim run's, plus what identifies the run.
nlohmann::json study_context(const Study& study, const std::vector<std::string>& overrides) {
  nlohmann::json c = context_block(study);
  c["overrides"] = overrides;
  c["study_with_overrides_sha256"] = study_with_overrides_sha256(study, overrides);
  return c;
}

std::string shard_text(const nlohmann::json& shard) {
  if (shard.is_null()) return "all variants (not sharded)";
  return "shard " + std::to_string(shard.at("index").get<int>()) + "/" + std::to_string(shard.at("count").get<int>());
}

nlohmann::json read_json(const fs::path& path) {
  const std::string text = common::read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw common::InputError(path.string() + ": expected JSON, got a parse error (" + e.what() + ")");
  } catch (const nlohmann::json::out_of_range& e) {  // a number too large for a double
    throw common::InputError(path.string() + ": a number out of range (" + e.what() + ")");
  }
}

// DIR/study.json: the study a folder holds and the variants it runs.
struct FolderState {
  fs::path dir;
  nlohmann::json json;
  std::string identity() const { return json.at("study_with_overrides_sha256").get<std::string>(); }
};

FolderState read_state(const fs::path& dir) {
  const fs::path file = dir / kStateFile;
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw common::InputError(
        file.string() + ": not found, so " + dir.string() +
        " is not a folder written by moesim study (moesim run folders cannot be resumed or merged)");
  FolderState s{dir, read_json(file)};
  const auto& j = s.json;
  const bool ok = j.is_object() && j.value("kind", "") == kStateKind && j.value("schema_version", 0) == 1 &&
                  j.contains("study_with_overrides_sha256") && j["study_with_overrides_sha256"].is_string() &&
                  j.contains("variants") && j["variants"].is_array() && j.contains("shard_variants") &&
                  j["shard_variants"].is_array() && j.contains("shard") && j.contains("study") &&
                  j.contains("source_file") && j.contains("overrides") && j["overrides"].is_array() &&
                  j.contains("baseline");
  if (!ok)
    throw common::InputError(file.string() + ": expected the study state moesim study writes (kind " + kStateKind +
                             ", schema_version 1, study_with_overrides_sha256, variants, shard, shard_variants), got " +
                             "something else; was it edited? Run the study into a fresh folder");
  return s;
}

nlohmann::json make_state(const Study& study, const std::vector<std::string>& overrides,
                          const std::optional<Shard>& shard, const std::vector<std::size_t>& indices) {
  nlohmann::json names = nlohmann::json::array();
  for (std::size_t i : indices) names.push_back(study.variants[i].name);
  return {{"schema_version", 1},
          {"kind", kStateKind},
          {"study", study.name},
          {"source_file", study.source_file},
          {"study_sha256", study.sha256},
          {"overrides", overrides},
          {"study_with_overrides_sha256", study_with_overrides_sha256(study, overrides)},
          {"baseline", study.baseline},
          {"variants", variant_list(study)},
          {"shard", shard ? nlohmann::json{{"index", shard->index}, {"count", shard->count}} : nlohmann::json(nullptr)},
          {"shard_variants", names}};
}

// A finished variant as its folder holds it.
struct DoneVariant {
  nlohmann::json variant;  // result.json's "variant"
  VariantResult result;    // what the tables read from it
  double wall_s = kNaN;    // run_info.json, when present
};

// The variant folder `vdir` if it is complete and was made by the study `identity` for a variant of
// this name and these assignments; nullopt otherwise (it is then run again, or reported missing).
std::optional<DoneVariant> read_done(const fs::path& vdir, const std::string& identity, const std::string& name,
                                     const nlohmann::json& assignments) {
  std::error_code ec;
  const fs::path file = vdir / "result.json";
  if (!fs::exists(file, ec) || !fs::exists(vdir / "timeline.json", ec) || !fs::exists(vdir / "scenario.yaml", ec))
    return std::nullopt;
  nlohmann::json j;
  try {
    j = read_json(file);
  } catch (const common::InputError&) {
    return std::nullopt;
  }
  if (!j.is_object() || j.value("schema_version", 0) != 1 || !j.contains("context") || !j.contains("variant") ||
      !j["context"].is_object() || j["context"].value("study_with_overrides_sha256", "") != identity ||
      !j["variant"].is_object() || j["variant"].value("name", "") != name || !j["variant"].contains("assignments") ||
      j["variant"]["assignments"] != assignments)
    return std::nullopt;
  DoneVariant d;
  try {
    d.result = variant_result_from_json(j["variant"], file.string());
  } catch (const common::InputError&) {
    return std::nullopt;
  }
  d.variant = j["variant"];
  if (fs::exists(vdir / "run_info.json", ec)) {
    try {
      const auto info = read_json(vdir / "run_info.json");
      if (info.is_object() && info.contains("wall_s") && info["wall_s"].is_number())
        d.wall_s = info["wall_s"].get<double>();
    } catch (const common::InputError&) {
    }
  }
  return d;
}

// Moves a whole variant folder into DIR/variants/NAME, replacing an older one. Each step is a
// rename, so DIR/variants only ever holds whole folders.
void install_variant(const fs::path& dir, const fs::path& staged, const std::string& name) {
  const fs::path variants = dir / "variants";
  const fs::path target = variants / name;
  const fs::path old = dir / kPartialDir / (name + ".old");
  std::error_code ec;
  fs::create_directories(variants, ec);
  if (ec) throw common::RunError("cannot create " + variants.string() + ": " + ec.message());
  fs::remove_all(old, ec);
  if (fs::exists(target, ec)) {
    fs::rename(target, old, ec);
    if (ec) throw common::RunError("cannot move the older " + target.string() + " aside: " + ec.message());
  }
  fs::rename(staged, target, ec);
  if (ec) throw common::RunError("cannot move " + staged.string() + " to " + target.string() + ": " + ec.message());
  fs::remove_all(old, ec);
}

fs::path fresh_stage(const fs::path& dir, const std::string& name) {
  const fs::path staged = dir / kPartialDir / name;
  std::error_code ec;
  fs::remove_all(staged, ec);
  fs::create_directories(staged, ec);
  if (ec) throw common::RunError("cannot create " + staged.string() + ": " + ec.message());
  return staged;
}

// The one writer of DIR/results.csv and DIR/results.json, from the variant folders on disk, for a
// plain run, a resumed run and a merge alike. Rows follow `done`'s order (study order).
std::vector<VariantResult> write_tables(const fs::path& dir, const nlohmann::json& context, const std::string& baseline,
                                        const std::vector<const DoneVariant*>& done, nlohmann::json run_info) {
  std::vector<VariantResult> results;
  const DoneVariant* base = nullptr;
  for (const DoneVariant* d : done) {
    results.push_back(d->result);
    if (d->result.name == baseline) base = d;
  }
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json walls = nlohmann::json::object();
  for (const DoneVariant* d : done) {
    rows.push_back(results_row(d->variant, d->result, base ? &base->result : nullptr));
    walls[d->result.name] = std::isnan(d->wall_s) ? nlohmann::json(nullptr) : nlohmann::json(d->wall_s);
  }
  run_info["variant_wall_s"] = walls;
  const nlohmann::json doc = {{"schema_version", kResultSchemaVersion},  {"context", context},
                              {"baseline", baseline}, {"baseline_in_results", base != nullptr},
                              {"variants", rows},     {"run_info", run_info}};
  common::write_file_atomic(dir / "results.csv", results_csv(results, baseline), true);
  common::write_file_atomic(dir / "results.json", doc.dump(2) + "\n", true);
  return results;
}

std::string shell_quote(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) ||
           std::string_view("-_./=+:,@%").find(c) != std::string_view::npos;
  });
  if (plain) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Shard parse_shard(const std::string& text) {
  auto bad = [&](const std::string& why) {
    return common::UsageError("--shard " + text + ": expected i/N with 1 <= i <= N (for example --shard 2/4), " + why);
  };
  const auto slash = text.find('/');
  if (slash == std::string::npos) throw bad("got no '/'");
  auto parse = [&](std::string_view part) {
    int v = 0;
    const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (part.empty() || ec != std::errc() || p != part.data() + part.size())
      throw bad("got \"" + std::string(part) + "\", which is not a whole number");
    return v;
  };
  const std::string_view all(text);
  Shard s{parse(all.substr(0, slash)), parse(all.substr(slash + 1))};
  if (s.count < 1) throw bad("got N = " + std::to_string(s.count));
  if (s.index < 1 || s.index > s.count)
    throw bad("got i = " + std::to_string(s.index) + " for N = " + std::to_string(s.count));
  return s;
}

std::vector<std::size_t> shard_variants(std::size_t variants, const Shard& shard) {
  std::vector<std::size_t> out;
  for (auto i = static_cast<std::size_t>(shard.index - 1); i < variants; i += static_cast<std::size_t>(shard.count))
    out.push_back(i);
  return out;
}

std::vector<std::size_t> select_variants(const Study& study, std::vector<std::size_t> indices,
                                         const std::vector<std::string>& patterns) {
  if (patterns.empty()) return indices;
  std::vector<std::regex> res;
  for (const std::string& p : patterns) {
    try {
      res.emplace_back(p, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw common::UsageError("--only " + common::quoted(p, 80) + ": not a regular expression (" + e.what() +
                               "); for example --only 'overlapped$' or --only '^eplb-'");
    }
  }
  std::vector<std::size_t> out;
  for (std::size_t i : indices)
    if (std::any_of(res.begin(), res.end(), [&](const std::regex& r) { return std::regex_search(study.variants[i].name, r); }))
      out.push_back(i);
  if (out.empty()) {
    std::vector<std::string> names;
    for (std::size_t i : indices) names.push_back(study.variants[i].name);
    throw common::UsageError("--only " + common::join(patterns, ", --only ") + " matches no variant" +
                             (indices.size() < study.variants.size() ? " of this shard" : "") + " of study " +
                             study.name + "; its variants: " + common::join(names, ", "));
  }
  return out;
}

std::string study_with_overrides_sha256(const Study& study, const std::vector<std::string>& overrides) {
  std::string text = "moesim study\n" + study.sha256 + "\n";
  for (const auto& o : overrides) text += "--set " + o + "\n";
  return common::sha256_hex(text);
}

std::string format_duration(double seconds) {
  if (std::isnan(seconds) || seconds < 0) return "?";
  std::ostringstream ss;
  if (seconds < 60.0) {
    ss << std::fixed << std::setprecision(1) << seconds << " s";
    return ss.str();
  }
  const auto total = static_cast<long>(std::lround(seconds));
  const long h = total / 3600, m = (total % 3600) / 60, s = total % 60;
  if (h > 0)
    ss << h << ":" << std::setw(2) << std::setfill('0') << m;
  else
    ss << m;
  ss << ":" << std::setw(2) << std::setfill('0') << s;
  return ss.str();
}

std::string progress_line(std::size_t done, std::size_t total, const std::string& current, double elapsed_s,
                          double left_s, std::size_t width) {
  constexpr std::size_t kBar = 20;
  const std::size_t filled = total ? std::min(kBar, done * kBar / total) : kBar;
  const std::string head = "[" + std::string(filled, '#') + std::string(kBar - filled, '.') + "] " +
                           std::to_string(done) + "/" + std::to_string(total) + " variants";
  const std::string tail =
      format_duration(elapsed_s) + " elapsed" +
      (std::isnan(left_s) || done >= total ? std::string() : ", ~" + format_duration(left_s) + " left");
  std::string name = current;
  const std::size_t fixed = head.size() + tail.size() + 4;
  if (fixed + name.size() > width) {
    const std::size_t room = width > fixed + 3 ? width - fixed : 0;
    name = room > 3 ? name.substr(0, room - 3) + "..." : "";
  }
  std::string line = head + "  " + (name.empty() ? "" : name + "  ") + tail;
  if (line.size() > width) line.resize(width);
  return line;
}

StudyProgress::StudyProgress(std::ostream& out, bool terminal, bool quiet, std::size_t total, std::size_t width)
    : out_(out),
      terminal_(terminal),
      quiet_(quiet),
      total_(total),
      width_(std::max<std::size_t>(width, 20)),
      start_(now_s()) {}

double StudyProgress::elapsed() const { return now_s() - start_; }

double StudyProgress::left() const {
  if (timed_ == 0) return kNaN;
  return timed_seconds_ / static_cast<double>(timed_) * static_cast<double>(total_ - done_);
}

void StudyProgress::redraw() {
  // \r returns to the line's start, ESC[K clears what a longer earlier line left behind.
  out_ << "\r" << progress_line(done_, total_, current_, elapsed(), left(), width_ - 1) << "\033[K" << std::flush;
  drawn_ = true;
}

void StudyProgress::skipped(const std::string& name, const std::string& why) {
  ++done_;
  if (quiet_) return;
  if (terminal_) return redraw();
  out_ << "[" << done_ << "/" << total_ << "] " << name << ": skipped, " << why << "\n" << std::flush;
}

void StudyProgress::started(const std::string& name) {
  current_ = name;
  if (quiet_) return;
  if (terminal_) return redraw();
  out_ << "[" << done_ + 1 << "/" << total_ << "] " << name << ": started\n" << std::flush;
}

void StudyProgress::note(const std::string& text) {
  if (quiet_ || terminal_) return;
  out_ << "    " << text << "\n" << std::flush;
}

void StudyProgress::finished(const std::string& name, double seconds) {
  ++done_;
  ++timed_;
  timed_seconds_ += seconds;
  if (quiet_) return;
  if (terminal_) return redraw();
  out_ << "[" << done_ << "/" << total_ << "] " << name << ": finished in " << format_duration(seconds) << " (elapsed "
       << format_duration(elapsed());
  if (done_ < total_) out_ << ", about " << format_duration(left()) << " left";
  out_ << ")\n" << std::flush;
}

void StudyProgress::end() {
  if (quiet_ || !terminal_ || !drawn_) return;
  current_.clear();
  redraw();
  out_ << "\n" << std::flush;
  drawn_ = false;
}

std::string run_date_utc() {
  const std::time_t t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string run_host() {
  char host[256] = "unknown";
  gethostname(host, sizeof host - 1);
  return host;
}

namespace {

// Destroyed by an exception (a failed solve or simulation, an interruption is a signal and exits
// elsewhere) with no variant finished in a folder that was missing or empty: removes everything the
// run wrote in it but the lock file, which the lock removes itself.
class TakeBackOnFailure {
 public:
  TakeBackOnFailure(fs::path dir, bool fresh, const StudyOutcome& outcome)
      : dir_(std::move(dir)), fresh_(fresh), outcome_(outcome), exceptions_(std::uncaught_exceptions()) {}
  TakeBackOnFailure(const TakeBackOnFailure&) = delete;
  TakeBackOnFailure& operator=(const TakeBackOnFailure&) = delete;
  ~TakeBackOnFailure() {
    if (!fresh_ || outcome_.ran > 0 || std::uncaught_exceptions() <= exceptions_) return;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir_, ec))
      if (entry.path().filename() != common::kFolderLockName) fs::remove_all(entry.path(), ec);
  }

 private:
  fs::path dir_;
  bool fresh_;
  const StudyOutcome& outcome_;
  int exceptions_;
};

}  // namespace

StudyOutcome run_study(const Study& study, const StudyRunOptions& options, StudyProgress& progress) {
  const fs::path dir(options.out_dir);
  const std::string identity = study_with_overrides_sha256(study, options.overrides);
  const auto indices =
      select_variants(study, shard_variants(study.variants.size(), options.shard.value_or(Shard{})), options.only);
  const nlohmann::json state = make_state(study, options.overrides, options.shard, indices);
  if (options.resume && options.force)
    throw common::UsageError("--resume keeps the finished variants of " + dir.string() +
                             ", --force runs every variant again: pass one of them");

  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw common::UsageError(dir.string() + " exists and is not a folder; choose another -o");
  // Taken before the folder is inspected, so that two runs never both find it empty; removed on return.
  const common::FolderLock lock(dir);
  const common::InterruptNote note("finished variants are kept in " + dir.string() +
                                   "; continue with --resume (moesim study) or rerun with --force (moesim run)");
  // A run into a missing or empty folder that fails before any variant finished takes back what it
  // wrote (study.json, solved placements, staged files), so that the corrected rerun needs no flag.
  const bool fresh = !fs::exists(dir, ec) || common::folder_is_empty(dir);
  if (fs::exists(dir, ec)) {
    if (!common::folder_is_empty(dir)) {
      if (!options.resume && !options.force)
        throw common::UsageError(
            dir.string() +
            " is not empty; pass --resume to continue the study it holds (finished "
            "variants are kept), --force to write into it and run every variant again, or choose another -o");
      if (options.resume) {
        if (!fs::exists(dir / kStateFile, ec))
          throw common::UsageError(
              dir.string() + " is not empty and has no " + kStateFile +
              ", so it holds no moesim study run to resume; choose another -o (or --force to write into it)");
        FolderState old = read_state(dir);
        if (old.identity() != identity || old.json["variants"] != state["variants"])
          throw common::UsageError(
              dir.string() + " holds another study: " + old.json["study"].get<std::string>() + " from " +
              old.json["source_file"].get<std::string>() + " (study SHA-256 with --set overrides " + old.identity() +
              ", overrides [" + common::join(old.json["overrides"].get<std::vector<std::string>>(), ", ") + "]), not " +
              study.name + " from " + study.source_file + " (" + identity + ", overrides [" +
              common::join(options.overrides, ", ") +
              "]); resume with the same study file and --set options, or choose another -o (or --force to replace it)");
        if (old.json["shard"] != state["shard"])
          throw common::UsageError(dir.string() + " holds " + shard_text(old.json["shard"]) + " of study " +
                                   study.name + ", but this run asks for " + shard_text(state["shard"]) +
                                   "; resume with the same --shard, or choose another -o");
      }
    }
  }
  fs::create_directories(dir, ec);
  if (ec) throw common::RunError("cannot create " + dir.string() + ": " + ec.message());
  StudyOutcome outcome;
  const TakeBackOnFailure take_back(dir, fresh, outcome);
  fs::remove_all(dir / kPartialDir, ec);
  common::remove_stale_temporaries(dir);  // left by a killed run (the folder is ours: checked above)
  common::write_file_atomic(dir / kStateFile, state.dump(2) + "\n", true);

  const nlohmann::json context = study_context(study, options.overrides);
  const double wall0 = now_s();
  nlohmann::json run_info = {
      {"date", run_date_utc()}, {"host", run_host()}, {"shard", state["shard"]}, {"resumed", options.resume}};
  std::map<std::size_t, DoneVariant> done;
  outcome.baseline = study.baseline;
  auto tables = [&] {
    std::vector<const DoneVariant*> rows;
    for (const auto& [i, d] : done) rows.push_back(&d);
    run_info["wall_s"] = now_s() - wall0;
    return write_tables(dir, context, study.baseline, rows, run_info);
  };
  if (options.resume)
    for (std::size_t i : indices) {
      const Variant& v = study.variants[i];
      if (auto d = read_done(dir / "variants" / v.name, identity, v.name, assignments_json(v))) {
        done.emplace(i, std::move(*d));
        progress.skipped(v.name, "complete in " + (dir / "variants" / v.name).string() + " (--resume)");
        ++outcome.skipped;
      }
    }
  RunOptions run_options;
  run_options.placement_cache =
      options.shared_placements.empty() ? (dir / "placements").string() : options.shared_placements;
  run_options.dump_activities = options.dump_activities;
  for (std::size_t i : indices) {
    if (done.count(i)) continue;
    const Variant& v = study.variants[i];
    progress.started(v.name);
    const double t0 = now_s();
    VariantResult r = run_variant(v, {}, run_options);
    if (!r.placement_file.empty()) {
      const std::string used = r.placement_file;
      if (!options.shared_placements.empty()) {
        // The folder keeps a copy of what its variants ran, so that it merges and reads on its own.
        const fs::path own = dir / "placements" / fs::path(used).filename();
        fs::create_directories(own.parent_path(), ec);
        common::write_file_atomic(own, common::read_file(used), true);
        r.placement_file = own.string();
      }
      r.placement_file = fs::path(r.placement_file).lexically_relative(dir).generic_string();
      progress.note(v.name + ": placement " + (r.placement_solved ? "solved into " : "reused from ") +
                    (options.shared_placements.empty() ? (dir / r.placement_file).string() : used));
    }
    const double wall = now_s() - t0;
    // Staged and installed whole: an interruption waits for the rename, so no .partial is left behind.
    const common::DeferInterrupts whole;
    const fs::path staged = fresh_stage(dir, v.name);
    common::write_file_atomic(
        staged / "run_info.json",
        nlohmann::json{{"date", run_date_utc()}, {"host", run_host()}, {"wall_s", wall}}.dump(2) + "\n", true);
    write_variant_files(staged.string(), context, r);
    install_variant(dir, staged, v.name);
    fs::remove(dir / kPartialDir, ec);
    auto d = read_done(dir / "variants" / v.name, identity, v.name, assignments_json(v));
    if (!d) throw common::RunError((dir / "variants" / v.name / "result.json").string() + ": written but unreadable");
    done.emplace(i, std::move(*d));
    ++outcome.ran;
    tables();
    progress.finished(v.name, wall);
  }
  progress.end();
  fs::remove_all(dir / kPartialDir, ec);
  outcome.rows = tables();
  return outcome;
}

namespace {

// Every folder must hold the same study (file, --set overrides, variants).
void check_one_study(const std::vector<FolderState>& states) {
  const FolderState& first = states.front();
  for (const FolderState& s : states) {
    if (s.identity() != first.identity() || s.json["variants"] != first.json["variants"])
      throw common::InputError(
          (s.dir / kStateFile).string() + ": holds study " + s.json["study"].get<std::string>() +
          " (study SHA-256 with --set overrides " + s.identity() + ", " + std::to_string(s.json["variants"].size()) +
          " variants), but " + (first.dir / kStateFile).string() + " holds study " +
          first.json["study"].get<std::string>() + " (" + first.identity() + ", " +
          std::to_string(first.json["variants"].size()) +
          " variants); merge only shards of one study, run with the same study file and --set options");
  }
}

// The finished variants, each from the first folder holding it complete (every other copy must
// agree), the folder it comes from, and the indices of the variants no folder holds.
struct Collected {
  std::vector<DoneVariant> done;
  std::vector<fs::path> source;
  std::vector<std::size_t> missing;
};
Collected collect_variants(const std::vector<FolderState>& states) {
  const std::string identity = states.front().identity();
  const nlohmann::json& variants = states.front().json["variants"];
  Collected c;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    const std::string name = variants[i]["name"].get<std::string>();
    std::optional<DoneVariant> chosen;
    fs::path from;
    for (const FolderState& s : states) {
      auto d = read_done(s.dir / "variants" / name, identity, name, variants[i]["assignments"]);
      if (!d) continue;
      if (!chosen) {
        chosen = std::move(d);
        from = s.dir;
      } else if (d->variant != chosen->variant) {
        throw common::InputError((s.dir / "variants" / name / "result.json").string() + " differs from " +
                                 (from / "variants" / name / "result.json").string() +
                                 ": shards of one study give identical variants; rerun one of them (delete the variant "
                                 "folder and resume) before merging");
      }
    }
    if (chosen) {
      c.done.push_back(std::move(*chosen));
      c.source.push_back(from);
    } else {
      c.missing.push_back(i);
    }
  }
  return c;
}

// Throws the error for missing variants, with the command that makes each: the given shard folder
// that should hold it (resumed), else a new shard folder of the folders' shard count.
[[noreturn]] void throw_missing(const std::vector<FolderState>& states, const std::vector<std::size_t>& missing,
                                std::size_t done) {
  const FolderState& first = states.front();
  const nlohmann::json& variants = first.json["variants"];
  std::vector<std::string> names;
  std::map<std::string, std::vector<std::string>> commands;
  int count = 1;
  for (const FolderState& s : states)
    if (!s.json["shard"].is_null()) count = std::max(count, s.json["shard"]["count"].get<int>());
  std::string base = "moesim study " + shell_quote(first.json["source_file"].get<std::string>());
  for (const auto& o : first.json["overrides"]) base += " --set " + shell_quote(o.get<std::string>());
  for (std::size_t i : missing) {
    names.push_back(variants[i]["name"].get<std::string>());
    std::string cmd;
    for (const FolderState& s : states) {
      const auto& sh = s.json["shard"];
      const int n = sh.is_null() ? 1 : sh["count"].get<int>();
      const int k = sh.is_null() ? 1 : sh["index"].get<int>();
      if (static_cast<int>(i % static_cast<std::size_t>(n)) == k - 1) {
        cmd = base + " -o " + shell_quote(s.dir.string()) +
              (sh.is_null() ? "" : " --shard " + std::to_string(k) + "/" + std::to_string(n)) + " --resume";
        break;
      }
    }
    if (cmd.empty()) {
      const int k = static_cast<int>(i % static_cast<std::size_t>(count)) + 1;
      cmd = base + " -o DIR" + std::to_string(k) + " --shard " + std::to_string(k) + "/" + std::to_string(count) +
            " (then merge DIR" + std::to_string(k) + " too)";
    }
    commands[cmd].push_back(names.back());
  }
  std::string how;
  for (const auto& [cmd, which] : commands) how += "; for " + common::join(which, ", ") + ": " + cmd;
  throw common::InputError("the folders hold " + std::to_string(done) + " of the " + std::to_string(variants.size()) +
                           " variants of study " + first.json["study"].get<std::string>() +
                           "; missing: " + common::join(names, ", ") + how);
}

// Placements: the same name is the same input, so its files must be the same, byte for byte.
// File name -> (content, the file it was read from).
std::map<std::string, std::pair<std::string, fs::path>> collect_placements(const std::vector<FolderState>& states) {
  std::map<std::string, std::pair<std::string, fs::path>> placements;
  std::error_code ec;
  for (const FolderState& s : states) {
    const fs::path pdir = s.dir / "placements";
    if (!fs::is_directory(pdir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(pdir)) {
      const std::string fname = e.path().filename().string();
      if (e.is_regular_file() && !fname.starts_with(".") && e.path().extension() == ".yaml") files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string content = common::read_file(f);
      const std::string fname = f.filename().string();
      auto it = placements.find(fname);
      if (it == placements.end())
        placements.emplace(fname, std::make_pair(content, f));
      else if (it->second.first != content)
        throw common::InputError(f.string() + " differs from " + it->second.second.string() +
                                 ": one placement input must give one placement; delete both and rerun their shards");
    }
  }
  return placements;
}

}  // namespace

StudyOutcome merge_studies(const std::vector<std::string>& dirs, const std::string& out_dir, bool force) {
  if (dirs.empty())
    throw common::UsageError("moesim study merge needs the shard folders to merge: DIR1 DIR2 ... -o OUT");
  std::vector<FolderState> states;
  const fs::path out(out_dir);
  std::error_code ec;
  for (const auto& d : dirs) {
    if (fs::exists(out, ec) && fs::exists(d, ec) && fs::equivalent(d, out, ec))
      throw common::UsageError("-o " + out_dir + " is one of the folders to merge; choose another output folder");
    common::check_folder_unlocked(d);  // a folder still being written is not merged
    states.push_back(read_state(d));
  }
  check_one_study(states);
  const FolderState& first = states.front();
  const nlohmann::json& variants = first.json["variants"];
  Collected collected = collect_variants(states);
  if (!collected.missing.empty()) throw_missing(states, collected.missing, collected.done.size());
  const std::vector<DoneVariant>& done = collected.done;
  const std::vector<fs::path>& source = collected.source;
  const auto placements = collect_placements(states);

  if (fs::exists(out, ec) && !fs::is_directory(out, ec))
    throw common::UsageError(out_dir + " exists and is not a folder; choose another -o");
  const common::FolderLock lock(out);
  const common::InterruptNote note("the merge into " + out_dir + " is incomplete; run it again with --force");
  if (fs::exists(out, ec)) {
    if (!common::folder_is_empty(out) && !force)
      throw common::UsageError(out_dir + " is not empty; pass --force to write into it, or choose another -o");
  }
  fs::create_directories(out, ec);
  if (ec) throw common::RunError("cannot create " + out_dir + ": " + ec.message());
  fs::remove_all(out / kPartialDir, ec);
  nlohmann::json state = first.json;
  state["shard"] = nullptr;
  nlohmann::json all = nlohmann::json::array();
  for (const auto& v : variants) all.push_back(v["name"]);
  state["shard_variants"] = all;
  nlohmann::json merged = nlohmann::json::array();
  for (const FolderState& s : states) merged.push_back(fs::absolute(s.dir).lexically_normal().string());
  state["merged_from"] = merged;
  common::write_file_atomic(out / kStateFile, state.dump(2) + "\n", true);
  if (!placements.empty()) {
    fs::create_directories(out / "placements", ec);
    for (const auto& [fname, entry] : placements)
      common::write_file_atomic(out / "placements" / fname, entry.first, true);
  }
  for (std::size_t i = 0; i < done.size(); ++i) {
    const std::string name = done[i].result.name;
    const fs::path staged = fresh_stage(out, name);
    fs::copy(source[i] / "variants" / name, staged, fs::copy_options::recursive | fs::copy_options::overwrite_existing,
             ec);
    if (ec) throw common::RunError("cannot copy " + (source[i] / "variants" / name).string() + ": " + ec.message());
    install_variant(out, staged, name);
  }
  fs::remove_all(out / kPartialDir, ec);

  // The context of the variants' own files, so that the merged tables equal an unsharded run's.
  const nlohmann::json context =
      read_json(source.front() / "variants" / done.front().result.name / "result.json").at("context");
  std::vector<const DoneVariant*> rows;
  for (const auto& d : done) rows.push_back(&d);
  const nlohmann::json run_info = {{"date", run_date_utc()}, {"host", run_host()}, {"merged_from", merged}};
  StudyOutcome outcome;
  outcome.baseline = first.json["baseline"].get<std::string>();
  outcome.rows = write_tables(out, context, outcome.baseline, rows, run_info);
  return outcome;
}

}  // namespace moesim::sim
