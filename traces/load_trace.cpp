// The load-only trace encoding (traces/FORMAT.md, "Load-only traces"): a 40-byte header (magic,
// version, metadata length, iteration and token counts, CRC-32 over the header and metadata), the
// metadata JSON, then one record per iteration: layers x experts uint32 counts and their CRC-32. The
// writer learns the counts last, so it patches the header in its temporary file before the rename.
#include "traces/load_trace.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"

namespace moesim::traces {

static_assert(std::endian::native == std::endian::little, "the load-trace code assumes a little-endian host");

namespace {

constexpr std::size_t kHeaderBytes = 40;
constexpr std::size_t kMaxMetaBytes = std::size_t{1} << 24;


const std::vector<std::string>& load_meta_keys() {
  static const std::vector<std::string> keys = {"format_version", "architecture", "layers", "num_experts", "top_k",
                                                "source"};
  return keys;
}

nlohmann::json load_meta_to_json(const LoadTraceMeta& meta) {
  nlohmann::json j;
  j["format_version"] = kLoadFormatVersion;
  shape_to_json(meta.shape, j);
  j["source"] = meta.source;
  return j;
}

// The metadata's shape and source, checked as the routing traces' metadata is (FORMAT.md, "Rules" 5).
LoadTraceMeta load_meta_from_json(const nlohmann::json& json, const std::string& where) {
  auto fail = [&](const std::string& what) { throw common::InputError(where + ": metadata: " + what); };
  if (!json.is_object()) fail("expected a JSON object, got " + json_shown(json));
  for (const auto& [key, value] : json.items())
    if (std::find(load_meta_keys().begin(), load_meta_keys().end(), key) == load_meta_keys().end())
      fail("unknown key " + common::quoted(key) + common::did_you_mean(key, load_meta_keys()));
  for (const auto& key : load_meta_keys())
    if (!json.contains(key)) fail("missing key " + common::quoted(key));
  auto integer = [&](const char* key) {
    const auto& v = json[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 1'000'000'000)
      fail(std::string("\"") + key + "\": expected a non-negative integer, got " + json_shown(v));
    return static_cast<int>(v.get<std::int64_t>());
  };
  if (integer("format_version") != kLoadFormatVersion)
    fail("format_version is " + json["format_version"].dump() + ", this moesim reads version " +
         std::to_string(kLoadFormatVersion));
  LoadTraceMeta meta;
  if (!json["architecture"].is_string()) fail("\"architecture\": expected a string");
  meta.shape.architecture = json["architecture"].get<std::string>();
  if (!json["layers"].is_array()) fail("\"layers\": expected an array of integers");
  for (const auto& l : json["layers"]) {
    if (!l.is_number_integer() || l.get<std::int64_t>() < 0 || l.get<std::int64_t>() > 1'000'000)
      fail("\"layers\": expected decoder-layer indices >= 0, got " + json_shown(l));
    meta.shape.layers.push_back(static_cast<int>(l.get<std::int64_t>()));
  }
  meta.shape.num_experts = integer("num_experts");
  meta.shape.top_k = integer("top_k");
  if (!json["source"].is_string()) fail("\"source\": expected a string");
  meta.source = json["source"].get<std::string>();
  if (std::string problem = shape_problem(meta.shape); !problem.empty()) fail(problem);
  return meta;
}

std::uint32_t header_crc(const unsigned char* fixed, const std::string& json) {
  return common::crc32(json.data(), json.size(), common::crc32(fixed, kHeaderBytes - 4));
}

std::size_t counts_per_iteration(const TraceShape& shape) {
  return shape.layers.size() * static_cast<std::size_t>(shape.num_experts);
}

class FileLoadReader final : public LoadTraceReader {
 public:
  explicit FileLoadReader(const std::string& path) : path_(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      throw common::InputError(path + ": is a folder, expected a load-only trace file");
    in_.open(path, std::ios::binary);
    if (!in_) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
    const std::uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw common::InputError(path + ": cannot read the file size: " + ec.message());
    if (size < kHeaderBytes)
      throw common::InputError(path + ": " + std::to_string(size) + " bytes, too short for a load-only trace (" +
                               std::to_string(kHeaderBytes) + "-byte header): truncated?");
    unsigned char h[kHeaderBytes];
    read_at(0, h, kHeaderBytes, "header");
    if (std::memcmp(h, kLoadMagic.data(), kLoadMagic.size()) != 0)
      fail_at(0, "not a load-only trace (expected the magic \"MOESIMLT\")");
    const std::uint32_t version = get_u32(h + 8);
    if (version != static_cast<std::uint32_t>(kLoadFormatVersion))
      fail_at(8, "load-only trace format version " + std::to_string(version) + ", this moesim reads version " +
                     std::to_string(kLoadFormatVersion));
    const std::uint32_t meta_len = get_u32(h + 12);
    if (meta_len == 0 || meta_len > kMaxMetaBytes || kHeaderBytes + meta_len > size)
      fail_at(12, "metadata length " + std::to_string(meta_len) + " does not fit a file of " + std::to_string(size) +
                      " bytes (truncated or corrupt)");
    if (get_u32(h + 32) != 0) fail_at(32, "unknown flags " + hex32(get_u32(h + 32)));
    std::string json(meta_len, '\0');
    read_at(kHeaderBytes, json.data(), meta_len, "metadata");
    const std::uint32_t stored = get_u32(h + 36), computed = header_crc(h, json);
    if (stored != computed)
      fail_at(0, "header CRC-32 mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                     "): the header or metadata is corrupt");
    const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
    if (parsed.is_discarded()) fail_at(kHeaderBytes, "metadata is not valid JSON");
    meta_ = load_meta_from_json(parsed, path_ + ": byte offset " + std::to_string(kHeaderBytes));
    meta_.iterations = get_u64(h + 16);
    meta_.total_tokens = get_u64(h + 24);
    per_ = counts_per_iteration(meta_.shape);
    record_bytes_ = per_ * 4 + 4;
    first_ = kHeaderBytes + meta_len;
    const std::uint64_t region = size - first_;
    if (meta_.iterations == 0) fail_at(16, "no iterations: a load-only trace holds at least one");
    if (region / record_bytes_ != meta_.iterations || region % record_bytes_ != 0)
      fail_at(first_, "the iteration records hold " + std::to_string(region) + " bytes, expected " +
                          std::to_string(meta_.iterations) + " iterations x " + std::to_string(record_bytes_) +
                          " bytes" +
                          (region < meta_.iterations * record_bytes_ ? " (truncated?)" : " (trailing bytes)"));
    record_.resize(record_bytes_);
  }

  const LoadTraceMeta& meta() const override { return meta_; }

  bool next(std::vector<std::uint32_t>& counts) override {
    if (index_ == meta_.iterations) {
      if (tokens_ != meta_.total_tokens)
        fail_at(24, "the header's token count " + std::to_string(meta_.total_tokens) + " disagrees with the " +
                        std::to_string(tokens_) + " tokens of the iterations: the file is corrupt");
      return false;
    }
    const std::uint64_t at = first_ + index_ * record_bytes_;
    read_at(at, record_.data(), record_bytes_, "iteration record");
    const std::uint32_t stored = get_u32(record_.data() + per_ * 4);
    const std::uint32_t computed = common::crc32(record_.data(), per_ * 4);
    if (stored != computed)
      fail_at(at, "iteration " + std::to_string(index_) + ": CRC-32 mismatch (stored " + hex32(stored) +
                      ", computed " + hex32(computed) + "): the record is corrupt");
    counts.resize(per_);
    std::memcpy(counts.data(), record_.data(), per_ * 4);
    std::uint64_t tokens = 0;
    if (std::string problem = load_problem(meta_.shape, counts, tokens); !problem.empty())
      fail_at(at, "iteration " + std::to_string(index_) + ": " + problem);
    tokens_ += tokens;
    ++index_;
    return true;
  }

  void rewind() override {
    index_ = 0;
    tokens_ = 0;
  }

 private:
  [[noreturn]] void fail_at(std::uint64_t offset, const std::string& what) const {
    throw common::InputError(path_ + ": byte offset " + std::to_string(offset) + ": " + what);
  }
  void read_at(std::uint64_t offset, void* data, std::size_t size, const char* what) {
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(static_cast<char*>(data), static_cast<std::streamsize>(size));
    if (static_cast<std::size_t>(in_.gcount()) != size)
      fail_at(offset, std::string(what) + ": expected " + std::to_string(size) + " bytes, the file ends after " +
                          std::to_string(in_.gcount()) + " (truncated?)");
  }

  std::string path_;
  std::ifstream in_;
  LoadTraceMeta meta_;
  std::size_t per_ = 0;
  std::size_t record_bytes_ = 0;
  std::uint64_t first_ = 0;  // byte offset of the first iteration record
  std::uint64_t index_ = 0;  // the next iteration
  std::uint64_t tokens_ = 0;
  std::vector<unsigned char> record_;
};

class FileLoadWriter final : public LoadTraceWriter {
 public:
  FileLoadWriter(const std::string& path, const LoadTraceMeta& meta, bool overwrite)
      : path_(path), meta_(checked(meta, path)), file_(path, overwrite, true) {
    json_ = load_meta_to_json(meta_).dump();
    per_ = counts_per_iteration(meta_.shape);
    write_header();
  }

  void write(const std::vector<std::uint32_t>& counts) override {
    if (finished_) throw common::RunError(path_ + ": write() after finish()");
    const std::string where = path_ + ": writing iteration " + std::to_string(meta_.iterations) + ": ";
    if (counts.size() != per_)
      throw common::InputError(where + std::to_string(counts.size()) + " counts, expected " +
                               std::to_string(meta_.shape.layers.size()) + " layers x " +
                               std::to_string(meta_.shape.num_experts) + " experts = " + std::to_string(per_));
    std::uint64_t tokens = 0;
    if (std::string problem = load_problem(meta_.shape, counts, tokens); !problem.empty())
      throw common::InputError(where + problem);
    const std::uint32_t crc = common::crc32(counts.data(), per_ * 4);
    unsigned char crc_bytes[4];
    put_u32(crc_bytes, crc);
    file_.stream().write(reinterpret_cast<const char*>(counts.data()), static_cast<std::streamsize>(per_ * 4));
    file_.stream().write(reinterpret_cast<const char*>(crc_bytes), 4);
    file_.check();  // names the file and the OS reason (disk full, ...)
    ++meta_.iterations;
    meta_.total_tokens += tokens;
  }

  void finish() override {
    if (finished_) return;
    if (meta_.iterations == 0)
      throw common::InputError(path_ + ": no iterations were written; a load-only trace holds at least one");
    file_.stream().seekp(0);
    write_header();
    file_.commit();
    finished_ = true;
  }

 private:
  static const LoadTraceMeta& checked(const LoadTraceMeta& meta, const std::string& path) {
    validate_shape(meta.shape, path);
    return meta;
  }

  // Written first with zero counts, again in finish() with the counts (the length never changes).
  void write_header() {
    unsigned char h[kHeaderBytes] = {};
    std::memcpy(h, kLoadMagic.data(), kLoadMagic.size());
    put_u32(h + 8, static_cast<std::uint32_t>(kLoadFormatVersion));
    put_u32(h + 12, static_cast<std::uint32_t>(json_.size()));
    put_u64(h + 16, meta_.iterations);
    put_u64(h + 24, meta_.total_tokens);
    put_u32(h + 32, 0);
    put_u32(h + 36, header_crc(h, json_));
    file_.stream().write(reinterpret_cast<const char*>(h), kHeaderBytes);
    file_.stream().write(json_.data(), static_cast<std::streamsize>(json_.size()));
    file_.check();  // names the file and the OS reason (disk full, ...)
  }

  std::string path_;
  LoadTraceMeta meta_;
  common::AtomicFile file_;
  std::string json_;
  std::size_t per_ = 0;
  bool finished_ = false;
};

}  // namespace

bool is_load_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::array<char, 8> head{};
  in.read(head.data(), head.size());
  return in.gcount() == static_cast<std::streamsize>(head.size()) &&
         std::memcmp(head.data(), kLoadMagic.data(), kLoadMagic.size()) == 0;
}

std::unique_ptr<LoadTraceReader> open_load_trace(const std::string& path) {
  return std::make_unique<FileLoadReader>(path);
}

std::unique_ptr<LoadTraceWriter> create_load_trace_writer(const std::string& path, const LoadTraceMeta& meta,
                                                          bool overwrite) {
  return std::make_unique<FileLoadWriter>(path, meta, overwrite);
}

std::string load_problem(const TraceShape& shape, const std::vector<std::uint32_t>& counts, std::uint64_t& tokens) {
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  const auto k = static_cast<std::uint64_t>(shape.top_k);
  if (counts.size() != shape.layers.size() * experts)
    return std::to_string(counts.size()) + " counts, expected " + std::to_string(shape.layers.size()) +
           " layers x " + std::to_string(experts) + " experts";
  // Named by decoder-layer index and by position on the layer axis, as an input file counts it.
  auto layer_name = [&](std::size_t l) {
    return "MoE layer " + std::to_string(shape.layers[l]) + " (layer index " + std::to_string(l) + ")";
  };
  std::uint64_t first = 0;
  for (std::size_t e = 0; e < experts; ++e) first += counts[e];
  const std::string first_layer = layer_name(0);
  if (first % k != 0)
    return first_layer + ": the counts sum to " + std::to_string(first) + ", not a multiple of top_k = " +
           std::to_string(k) + " (each token is counted once at each of its top_k experts)";
  tokens = first / k;
  if (tokens == 0) return first_layer + ": every count is 0: an iteration needs at least one token";
  for (std::size_t l = 0; l < shape.layers.size(); ++l) {
    const std::uint32_t* row = counts.data() + l * experts;
    std::uint64_t sum = 0;
    for (std::size_t e = 0; e < experts; ++e) {
      if (row[e] > tokens)
        return layer_name(l) + ", expert " + std::to_string(e) + ": " +
               std::to_string(row[e]) + " tokens, more than the iteration's " + std::to_string(tokens) +
               " (a token counts at most once per expert)";
      sum += row[e];
    }
    if (sum != tokens * k)
      return layer_name(l) + ": the counts sum to " + std::to_string(sum) +
             ", but " + first_layer + "'s sum to " + std::to_string(first) + " (" + std::to_string(tokens) +
             " tokens x top_k " + std::to_string(k) + "): every MoE layer routes the same tokens";
  }
  return {};
}

std::uint64_t load_tokens(const TraceShape& shape, const std::vector<std::uint32_t>& counts) {
  std::uint64_t sum = 0;
  const auto experts = static_cast<std::size_t>(shape.num_experts);
  for (std::size_t e = 0; e < experts && e < counts.size(); ++e) sum += counts[e];
  return sum / static_cast<std::uint64_t>(shape.top_k);
}

}  // namespace moesim::traces
