#include "traces/format_text.hpp"

#include <charconv>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/format_lines.hpp"

namespace moesim::traces {

namespace {

constexpr std::string_view kEndTag = "#end";

std::string header_line() { return std::string(kTextMagic) + " " + std::to_string(kFormatVersion); }

bool is_space(char c) { return c == ' ' || c == '\t'; }

// A cursor over one line; every failure names the line and what was expected there.
class Fields {
 public:
  // `where()` gives "file:line" for messages, built only on failure.
  Fields(std::string_view line, std::function<std::string()> where) : s_(line), where_(std::move(where)) {}

  void skip() {
    while (i_ < s_.size() && is_space(s_[i_])) ++i_;
  }
  bool at_end() {
    skip();
    return i_ >= s_.size();
  }
  std::string_view word() {
    skip();
    std::size_t b = i_;
    while (i_ < s_.size() && !is_space(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }
  // `what()` describes the field for a message; it is called only on failure (the hot path builds
  // no strings).
  template <class What>
  void expect(char c, const What& what) {
    std::string_view w = word();
    if (w.size() != 1 || w[0] != c)
      fail(what() + ": expected \"" + std::string(1, c) + "\", got " +
           (w.empty() ? std::string("the end of the line") : common::quoted(w)));
  }
  template <class What>
  std::uint64_t uint(const What& what, std::uint64_t max) {
    std::string_view w = word();
    if (w.empty()) fail(what() + ": expected an integer, got the end of the line");
    std::uint64_t v = 0;
    auto r = std::from_chars(w.data(), w.data() + w.size(), v);
    if (r.ec == std::errc::result_out_of_range || (r.ec == std::errc() && r.ptr == w.data() + w.size() && v > max))
      fail(what() + ": " + common::quoted(w) + " is out of range, expected 0.." + std::to_string(max));
    if (r.ec != std::errc() || r.ptr != w.data() + w.size())
      fail(what() + ": expected a non-negative integer, got " + common::quoted(w));
    return v;
  }
  template <class What>
  float real(const What& what) {
    std::string_view w = word();
    if (w.empty()) fail(what() + ": expected a number, got the end of the line");
    float v = 0;
    auto r = std::from_chars(w.data(), w.data() + w.size(), v);
    if (r.ec != std::errc() || r.ptr != w.data() + w.size())
      fail(what() + ": expected a finite number, got " + common::quoted(w));
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const { throw common::InputError(where_() + ": " + what); }

 private:
  std::string_view s_;
  std::size_t i_ = 0;
  std::function<std::string()> where_;
};

struct EndLine {
  std::uint64_t tokens = 0;
  std::uint64_t sequences = 0;
};

std::optional<EndLine> parse_end_line(std::string_view line, const std::string& where) {
  if (!line.starts_with(kEndTag)) return std::nullopt;
  Fields f(line.substr(kEndTag.size()), [&where] { return where; });
  EndLine end;
  end.tokens = f.uint([] { return std::string("end line: token count"); }, UINT64_MAX);
  end.sequences = f.uint([] { return std::string("end line: sequence count"); }, UINT64_MAX);
  if (!f.at_end()) f.fail("end line: unexpected text after \"#end TOKENS SEQUENCES\"");
  return end;
}

class TextReader final : public TraceReader {
 public:
  explicit TextReader(const std::string& path) : path_(path), lines_(path) {
    if (lines_.file_size() == 0) throw common::InputError(path + ": empty file, expected a moesim text trace");
    std::string_view line;
    lines_.next(line);
    const std::string where1 = lines_.where();
    if (!line.starts_with(kTextMagic))
      throw common::InputError(where1 + ": not a moesim text trace: expected the header \"" + header_line() +
                               "\", got " + common::quoted(line));
    Fields h(line.substr(kTextMagic.size()), [&where1] { return where1; });
    const std::uint64_t version = h.uint([] { return std::string("header: format version"); }, 1'000'000);
    if (version != static_cast<std::uint64_t>(kFormatVersion))
      h.fail("header: format version " + std::to_string(version) + ", this moesim reads version " +
             std::to_string(kFormatVersion));
    if (!h.at_end()) h.fail("header: unexpected text after the version");
    if (!lines_.next(line))
      throw common::InputError(path + ":2: expected a line of JSON metadata, the file ends (truncated?)");
    const std::string where2 = lines_.where();
    nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    if (parsed.is_discarded()) throw common::InputError(where2 + ": metadata: not valid JSON");
    meta_ = meta_from_json(parsed, where2);
    data_offset_ = lines_.offset();
    data_line_ = lines_.line_number();
    end_ = read_end_line();
    // The shortest token line ("0 0 | 1 2 ...") bounds how many tokens the file can hold; a larger
    // count in the end line is corrupt and must not drive allocations.
    const std::uint64_t min_line = 4 + meta_.shape.layers.size() * (2 + 2 * static_cast<std::uint64_t>(meta_.shape.top_k));
    if (end_.tokens > lines_.file_size() / min_line || end_.sequences > end_.tokens)
      throw common::InputError(path_ + ": the end line announces " + std::to_string(end_.tokens) + " tokens in " +
                               std::to_string(end_.sequences) + " sequences, which a file of " +
                               std::to_string(lines_.file_size()) + " bytes cannot hold: the end line is corrupt");
    meta_.token_count = end_.tokens;
    meta_.sequence_count = end_.sequences;
    checker_.emplace(meta_.shape, meta_.has_weights);
    ids_.resize(static_cast<std::size_t>(meta_.shape.top_k));
    weights_.resize(static_cast<std::size_t>(meta_.shape.top_k));
  }

  const TraceMeta& meta() const override { return meta_; }

  bool next(TokenBlock& block, std::size_t max_tokens) override {
    block.clear();
    if (done_ || max_tokens == 0) return false;
    std::string_view line;
    while (block.size() < max_tokens) {
      if (!lines_.next(line))
        throw common::InputError(path_ + ":" + std::to_string(lines_.line_number()) +
                                 ": the file ends without the end line (truncated?)");
      if (line.starts_with("#")) {
        finish(line);
        break;
      }
      parse_token(line, block);
    }
    return !block.sequence.empty();
  }

  void rewind() override {
    lines_.seek(data_offset_, data_line_);
    checker_->reset();
    done_ = false;
  }

 private:
  EndLine read_end_line() {
    std::FILE* f = std::fopen(path_.c_str(), "rb");
    if (f == nullptr) throw common::InputError(path_ + ": cannot open: " + std::strerror(errno));
    const std::uint64_t size = lines_.file_size();
    const std::uint64_t tail = std::min<std::uint64_t>(size, 256);
    std::string buf(tail, '\0');
    bool ok = fseeko(f, static_cast<off_t>(size - tail), SEEK_SET) == 0 && std::fread(buf.data(), 1, tail, f) == tail;
    std::fclose(f);
    if (!ok) throw common::InputError(path_ + ": cannot read the end of the file");
    while (!buf.empty() && (buf.back() == '\n' || buf.back() == '\r')) buf.pop_back();
    std::size_t nl = buf.rfind('\n');
    std::string last = nl == std::string::npos ? buf : buf.substr(nl + 1);
    auto end = parse_end_line(last, path_ + ": last line");
    if (!end)
      throw common::InputError(path_ + ": the last line is not the end line \"#end TOKENS SEQUENCES\": the trace is "
                               "truncated or was not finished");
    return *end;
  }

  void finish(std::string_view line) {
    const std::string where = lines_.where();
    auto end = parse_end_line(line, where);
    if (!end)
      throw common::InputError(where + ": expected a token line or the end line \"#end TOKENS SEQUENCES\", got " +
                               common::quoted(line));
    if (end->tokens != checker_->tokens() || end->sequences != checker_->sequences())
      throw common::InputError(where + ": end line says " + std::to_string(end->tokens) + " tokens, " +
                               std::to_string(end->sequences) + " sequences, but the file holds " +
                               std::to_string(checker_->tokens()) + " tokens, " +
                               std::to_string(checker_->sequences()) + " sequences");
    std::string_view extra;
    if (lines_.next(extra))
      throw common::InputError(lines_.where() + ": text after the end line (the end line must be the last line)");
    done_ = true;
  }

  void parse_token(std::string_view line, TokenBlock& block) {
    if (line.empty()) throw common::InputError(lines_.where() + ": empty line, expected a token line");
    Fields f(line, [this] { return lines_.where(); });
    const auto seq = static_cast<std::uint32_t>(f.uint([] { return std::string("sequence id"); }, UINT32_MAX));
    const auto pos = static_cast<std::uint32_t>(f.uint([] { return std::string("position"); }, UINT32_MAX));
    const std::size_t k = ids_.size();
    const auto max_id = static_cast<std::uint64_t>(meta_.shape.num_experts - 1);
    for (std::size_t l = 0; l < meta_.shape.layers.size(); ++l) {
      auto layer = [&] { return "layer " + std::to_string(meta_.shape.layers[l]); };
      f.expect('|', layer);
      for (std::size_t j = 0; j < k; ++j)
        ids_[j] = static_cast<std::uint16_t>(f.uint(
            [&] { return layer() + ": expert id " + std::to_string(j + 1) + " of " + std::to_string(k); }, max_id));
      if (meta_.has_weights) {
        f.expect(':', [&] { return layer() + ": after " + std::to_string(k) + " expert ids"; });
        for (std::size_t j = 0; j < k; ++j)
          weights_[j] =
              f.real([&] { return layer() + ": gate weight " + std::to_string(j + 1) + " of " + std::to_string(k); });
      }
      std::string p = checker_->layer_problem(ids_.data(), meta_.has_weights ? weights_.data() : nullptr);
      if (!p.empty()) f.fail(layer() + ": " + p);
      block.experts.insert(block.experts.end(), ids_.begin(), ids_.end());
      if (meta_.has_weights) block.weights.insert(block.weights.end(), weights_.begin(), weights_.end());
    }
    if (!f.at_end())
      f.fail("unexpected text after " + std::to_string(meta_.shape.layers.size()) + " layers (expected " +
             std::to_string(meta_.shape.layers.size()) + " groups of " + std::to_string(k) + " ids)");
    std::string p = checker_->order_problem(seq, pos);
    if (!p.empty()) f.fail(p);
    if (checker_->tokens() > end_.tokens)
      f.fail("more tokens than the end line announces (" + std::to_string(end_.tokens) + ")");
    block.sequence.push_back(seq);
    block.position.push_back(pos);
  }

  std::string path_;
  LineReader lines_;
  TraceMeta meta_;
  std::uint64_t data_offset_ = 0;
  std::uint64_t data_line_ = 0;
  EndLine end_;
  std::optional<TokenChecker> checker_;
  std::vector<std::uint16_t> ids_;
  std::vector<float> weights_;
  bool done_ = false;
};

class TextWriter final : public TraceWriter {
 public:
  TextWriter(const std::string& path, const TraceMeta& meta, bool overwrite)
      : path_(path), meta_(meta), checker_(checked(meta.shape, path), meta.has_weights), file_(path, overwrite, false) {
    per_ = ids_per_token(meta_.shape);
    buf_ = header_line() + "\n" + meta_to_json(meta_).dump() + "\n";
  }

  void write(const TokenBlock& block) override {
    if (finished_) throw common::RunError(path_ + ": write() after finish()");
    if (auto problem = checker_.check_block(block)) {
      const std::size_t t = problem->token;
      std::string at = t < block.sequence.size() && t < block.position.size()
                           ? describe_token(written_ + t, block.sequence[t], block.position[t]) + ": "
                           : std::string();
      throw common::InputError(path_ + ": writing " + at + problem->what);
    }
    const std::size_t k = static_cast<std::size_t>(meta_.shape.top_k);
    const std::size_t layers = meta_.shape.layers.size();
    for (std::size_t t = 0; t < block.size(); ++t) {
      append_uint(buf_, block.sequence[t]);
      buf_ += ' ';
      append_uint(buf_, block.position[t]);
      for (std::size_t l = 0; l < layers; ++l) {
        const std::size_t off = t * per_ + l * k;
        buf_ += " |";
        for (std::size_t j = 0; j < k; ++j) {
          buf_ += ' ';
          append_uint(buf_, block.experts[off + j]);
        }
        if (meta_.has_weights) {
          buf_ += " :";
          for (std::size_t j = 0; j < k; ++j) {
            buf_ += ' ';
            append_float(buf_, block.weights[off + j]);
          }
        }
      }
      buf_ += '\n';
      if (buf_.size() >= (1u << 20)) flush();
    }
    written_ += block.size();
  }

  void finish() override {
    if (finished_) return;
    buf_ += std::string(kEndTag) + " " + std::to_string(written_) + " " + std::to_string(checker_.sequences()) + "\n";
    flush();
    file_.commit();
    finished_ = true;
  }

 private:
  static const TraceShape& checked(const TraceShape& shape, const std::string& path) {
    validate_shape(shape, path);
    return shape;
  }
  void flush() {
    file_.stream().write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    file_.check();  // names the file and the OS reason (disk full, ...)
    buf_.clear();
  }

  std::string path_;
  TraceMeta meta_;
  TokenChecker checker_;
  common::AtomicFile file_;
  std::size_t per_ = 0;
  std::string buf_;
  std::uint64_t written_ = 0;
  bool finished_ = false;
};

}  // namespace

bool has_text_magic(const void* data, std::size_t size) {
  return size >= kTextMagic.size() && std::memcmp(data, kTextMagic.data(), kTextMagic.size()) == 0;
}

std::unique_ptr<TraceReader> open_text_trace(const std::string& path) { return std::make_unique<TextReader>(path); }

std::unique_ptr<TraceWriter> create_text_writer(const std::string& path, const TraceMeta& meta, bool overwrite) {
  return std::make_unique<TextWriter>(path, meta, overwrite);
}

}  // namespace moesim::traces
