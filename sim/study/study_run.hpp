// `moesim study`: runs a study's variants (all, or one shard i/N) into a results folder that an
// interrupted run resumes and that merges with the other shards' folders (docs/study-format.md,
// "moesim study: resume, shards, merge"). Each variant folder appears whole (written aside, then
// renamed into place); results.csv/results.json are rebuilt from the variant folders on disk after
// every variant, by one function for plain runs, resumed runs and merges.
#pragma once

#include <cstddef>
#include <functional>
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/study/runner.hpp"
#include "sim/study/study_file.hpp"

namespace moesim::sim {

// Shard i of N (1-based) runs the variants i-1, i-1+N, i-1+2N, ... in study order.
struct Shard {
  int index = 1;
  int count = 1;
};
// Parses "i/N"; anything else, or i outside 1..N, is a UsageError.
Shard parse_shard(const std::string& text);
std::vector<std::size_t> shard_variants(std::size_t variants, const Shard& shard);

// What makes two runs the same study: the study file's SHA-256 and the --set overrides, in order.
std::string study_with_overrides_sha256(const Study& study, const std::vector<std::string>& overrides);

// Progress of a run on `out`: on a terminal one redrawn line (bar, k/N variants, the current variant,
// elapsed, estimated time left); otherwise one plain line per variant start and finish. Quiet: none.
class StudyProgress {
 public:
  StudyProgress(std::ostream& out, bool terminal, bool quiet, std::size_t total, std::size_t width = 100);
  void skipped(const std::string& name, const std::string& why);  // counted as done, not timed
  void started(const std::string& name);
  void note(const std::string& text);  // a detail line (plain mode only)
  void finished(const std::string& name, double seconds);
  void end();  // ends the redrawn line

 private:
  void redraw();
  double elapsed() const;
  double left() const;  // NaN until a variant has finished
  std::ostream& out_;
  bool terminal_;
  bool quiet_;
  std::size_t total_;
  std::size_t width_;
  std::size_t done_ = 0;
  std::size_t timed_ = 0;
  double timed_seconds_ = 0.0;
  std::string current_;
  double start_;
  bool drawn_ = false;
};

// The redrawn line: "[#####.....] 3/8 variants  NAME  0:12 elapsed, ~0:20 left", cut to `width`.
// left_s NaN: not known yet.
std::string progress_line(std::size_t done, std::size_t total, const std::string& current, double elapsed_s,
                          double left_s, std::size_t width);
std::string format_duration(double seconds);  // "4.2 s", "3:07", "1:02:03"

struct StudyRunOptions {
  std::string out_dir;
  std::string dump_activities;  // moesim run --dump-activities: the one variant's requested timeline
  std::vector<std::string> overrides;  // the --set options the study was loaded with
  std::optional<Shard> shard;
  // --placements FOLDER: a placement cache shared by shards (solved there once, under a lock, and
  // copied into DIR/placements/ for the variants that use it); "" = DIR/placements/ itself.
  std::string shared_placements;
  std::vector<std::string> only;  // --only: run the variants whose name matches one (select_variants)
  bool resume = false;
  bool force = false;
};

struct StudyOutcome {
  std::vector<VariantResult> rows;  // read back from DIR/variants/NAME/result.json, in study order
  std::string baseline;
  std::size_t ran = 0, skipped = 0;
};

// --only: of `indices`, the variants whose name matches one of `patterns` (ECMAScript regular
// expressions searched anywhere in the name, as Google Benchmark's --benchmark_filter); all of
// them when `patterns` is empty. UsageError for a malformed pattern, or for patterns that select
// nothing (naming the variants there are).
std::vector<std::size_t> select_variants(const Study& study, std::vector<std::size_t> indices,
                                         const std::vector<std::string>& patterns);

// Runs the study (or its shard) into options.out_dir under the folder rules: a non-empty folder
// needs --resume (same study: finished variants are kept) or --force. Throws UsageError for a
// refused folder, InputError for a bad input, RunError for a failed simulation.
StudyOutcome run_study(const Study& study, const StudyRunOptions& options, StudyProgress& progress);

// Merges shard folders of one study into `out_dir`: the same study (SHA-256 with overrides, variant
// list), every variant covered (else an InputError naming the missing ones and the command that
// makes them), overlapping variants identical. Copies variants/ and placements/ and writes the
// results as an unsharded run does.
StudyOutcome merge_studies(const std::vector<std::string>& dirs, const std::string& out_dir, bool force);

// The run_info block's date (UTC, ISO 8601) and host name.
std::string run_date_utc();
std::string run_host();

}  // namespace moesim::sim
