// The NumPy importer: a .npy integer array [tokens, layers] (top-1) or [tokens, layers, k], C order
// (FORMAT.md "npy"). The header is parsed here (no NumPy); the data is read in chunks of tokens.
// The whole array is one sequence unless ImportOptions cuts it (fixed length or a lengths array).
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"
#include "traces/import.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces {

namespace {

constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

struct NpyArray {
  std::string path;
  std::string descr;
  bool is_signed = false;
  std::size_t item_bytes = 0;
  std::vector<std::uint64_t> shape;
  std::uint64_t data_offset = 0;
  std::uint64_t elements = 0;
};

class FileCloser {
 public:
  explicit FileCloser(std::FILE* f) : f_(f) {}
  FileCloser(const FileCloser&) = delete;
  FileCloser& operator=(const FileCloser&) = delete;
  ~FileCloser() {
    if (f_ != nullptr) std::fclose(f_);
  }
  std::FILE* get() const { return f_; }

 private:
  std::FILE* f_;
};

// The Python dict literal of a .npy header: {'descr': '<i8', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& where) : s_(text), where_(where) {}

  void parse(NpyArray& a) {
    bool have_descr = false, have_order = false, have_shape = false;
    expect('{');
    for (;;) {
      skip();
      if (peek() == '}') break;
      const std::string key = string();
      expect(':');
      skip();
      if (key == "descr") {
        a.descr = string();
        have_descr = true;
      } else if (key == "fortran_order") {
        const std::string word = identifier();
        if (word != "True" && word != "False") fail("fortran_order: expected True or False, got " + common::quoted(word));
        if (word == "True")
          fail("fortran_order is True: the array is stored in Fortran (column-major) order; save it in C order "
               "(numpy.ascontiguousarray) and import again");
        have_order = true;
      } else if (key == "shape") {
        a.shape = tuple();
        have_shape = true;
      } else {
        fail("unknown header key " + common::quoted(key) + " (expected descr, fortran_order, shape)");
      }
      skip();
      if (peek() == ',') ++i_;
    }
    if (!have_descr || !have_order || !have_shape) fail("the header lacks one of descr, fortran_order, shape");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw common::InputError(where_ + ": npy header: " + what); }
  void skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n')) ++i_;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void expect(char c) {
    skip();
    if (peek() != c) fail(std::string("expected '") + c + "' at header byte " + std::to_string(i_));
    ++i_;
  }
  std::string string() {
    skip();
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a quoted string at header byte " + std::to_string(i_));
    const std::size_t e = s_.find(q, i_ + 1);
    if (e == std::string_view::npos) fail("unterminated string");
    std::string out(s_.substr(i_ + 1, e - i_ - 1));
    i_ = e + 1;
    return out;
  }
  std::string identifier() {
    const std::size_t b = i_;
    while (i_ < s_.size() && std::isalpha(static_cast<unsigned char>(s_[i_]))) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }
  std::vector<std::uint64_t> tuple() {
    expect('(');
    std::vector<std::uint64_t> dims;
    for (;;) {
      skip();
      if (peek() == ')') {
        ++i_;
        return dims;
      }
      const std::size_t b = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      std::string why;
      auto v = detail::parse_int(s_.substr(b, i_ - b), why);
      if (!v || *v < 0) fail("shape: expected a dimension, got " + why);
      if (peek() == 'L') ++i_;  // Python 2 long literal
      dims.push_back(static_cast<std::uint64_t>(*v));
      skip();
      if (peek() == ',') ++i_;
      else if (peek() != ')') fail("shape: expected ',' or ')' at header byte " + std::to_string(i_));
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
  const std::string& where_;
};

NpyArray read_npy_header(const std::string& path, std::FILE* f) {
  NpyArray a;
  a.path = path;
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw common::InputError(path + ": cannot read the file size: " + ec.message());
  if (size == 0) throw common::InputError(path + ": empty file, expected a NumPy .npy array");
  unsigned char head[12] = {};
  const std::size_t got = std::fread(head, 1, sizeof head, f);
  if (got < 10 || std::memcmp(head, kNpyMagic, 6) != 0)
    throw common::InputError(path + ": byte offset 0: not a NumPy .npy file (expected the magic \"\\x93NUMPY\")");
  const int major = head[6];
  std::uint64_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = static_cast<std::uint64_t>(head[8]) | (static_cast<std::uint64_t>(head[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (got < 12) throw common::InputError(path + ": byte offset 8: truncated npy header");
    std::uint32_t len = 0;
    std::memcpy(&len, head + 8, 4);
    header_len = len;
    header_start = 12;
  } else {
    throw common::InputError(path + ": byte offset 6: npy format version " + std::to_string(major) +
                             " is not supported (expected 1, 2 or 3)");
  }
  if (header_start + header_len > size || header_len > (1u << 20))
    throw common::InputError(path + ": byte offset 8: npy header length " + std::to_string(header_len) +
                             " runs past the end of the file (" + std::to_string(size) + " bytes): truncated?");
  std::string text(header_len, '\0');
  if (fseeko(f, static_cast<off_t>(header_start), SEEK_SET) != 0 ||
      std::fread(text.data(), 1, header_len, f) != header_len)
    throw common::InputError(path + ": cannot read the npy header");
  HeaderParser(text, path).parse(a);
  a.data_offset = header_start + header_len;

  const std::string& d = a.descr;
  const std::string supported = "<i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8 (|i1 and |u1 too)";
  if (d.size() != 3 || (d[1] != 'i' && d[1] != 'u') || (d[2] != '1' && d[2] != '2' && d[2] != '4' && d[2] != '8'))
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " is not an integer type; expert ids must be "
                             "integers, one of " + supported + " (numpy: arr.astype('<i4'))");
  a.item_bytes = static_cast<std::size_t>(d[2] - '0');
  if (d[0] == '>' && a.item_bytes > 1)
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " is big-endian; supported: " + supported +
                             " (numpy: arr.astype('<i4'))");
  if (d[0] != '<' && d[0] != '|' && d[0] != '=' && d[0] != '>')
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " has an unknown byte order");
  a.is_signed = d[1] == 'i';
  a.elements = 1;
  for (auto dim : a.shape) {
    if (dim != 0 && a.elements > UINT64_MAX / dim)
      throw common::InputError(path + ": npy shape is too large");
    a.elements *= dim;
  }
  const std::uint64_t want = a.elements * a.item_bytes;
  const std::uint64_t have = size - a.data_offset;
  if (have != want)
    throw common::InputError(path + ": byte offset " + std::to_string(a.data_offset) + ": the data holds " +
                             std::to_string(have) + " bytes, expected " + std::to_string(want) + " for " +
                             std::to_string(a.elements) + " elements of " + d +
                             (have < want ? " (truncated?)" : " (trailing bytes)"));
  return a;
}

std::int64_t element(const unsigned char* p, const NpyArray& a) {
  switch (a.item_bytes) {
    case 1: return a.is_signed ? static_cast<std::int64_t>(static_cast<std::int8_t>(p[0])) : p[0];
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return a.is_signed ? static_cast<std::int16_t>(v) : v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return a.is_signed ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      if (!a.is_signed && v > static_cast<std::uint64_t>(INT64_MAX)) return INT64_MAX;  // out of range anyway
      return static_cast<std::int64_t>(v);
    }
  }
}

std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  return "(" + common::join(parts, ", ") + ")";
}

// Sequence lengths from a 1-D integer .npy.
std::vector<std::uint64_t> read_lengths(const std::string& path, std::uint64_t tokens) {
  FileCloser f(std::fopen(path.c_str(), "rb"));
  if (f.get() == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  NpyArray a = read_npy_header(path, f.get());
  if (a.shape.size() != 1)
    throw common::InputError(path + ": sequence lengths must be a 1-D array, got shape " + shape_text(a.shape));
  std::vector<unsigned char> data(a.elements * a.item_bytes);
  if (fseeko(f.get(), static_cast<off_t>(a.data_offset), SEEK_SET) != 0 ||
      std::fread(data.data(), 1, data.size(), f.get()) != data.size())
    throw common::InputError(path + ": cannot read the data");
  std::vector<std::uint64_t> lengths;
  std::uint64_t sum = 0;
  for (std::uint64_t i = 0; i < a.elements; ++i) {
    const std::int64_t v = element(data.data() + i * a.item_bytes, a);
    if (v < 1 || v > UINT32_MAX)
      throw common::InputError(path + ": byte offset " + std::to_string(a.data_offset + i * a.item_bytes) +
                               ": element " + std::to_string(i) + ": sequence length " + std::to_string(v) +
                               ", expected 1.." + std::to_string(UINT32_MAX));
    sum += static_cast<std::uint64_t>(v);
    lengths.push_back(static_cast<std::uint64_t>(v));
  }
  if (sum != tokens)
    throw common::InputError(path + ": the sequence lengths sum to " + std::to_string(sum) + ", but the routing array "
                             "holds " + std::to_string(tokens) + " tokens");
  return lengths;
}

}  // namespace

ImportReport import_npy(const std::string& path, const TraceShape& shape, const WriterFactory& make_writer,
                        const ImportOptions& options) {
  validate_shape(shape, "architecture " + shape.architecture);
  if (options.sequence_length != 0 && !options.sequence_lengths_path.empty())
    throw common::UsageError("give --sequence-length or --sequence-lengths, not both");
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw common::InputError(path + ": is a folder, expected a .npy file");
  FileCloser f(std::fopen(path.c_str(), "rb"));
  if (f.get() == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  const NpyArray a = read_npy_header(path, f.get());
  if (a.shape.size() != 2 && a.shape.size() != 3)
    throw common::InputError(path + ": npy shape " + shape_text(a.shape) +
                             ": expected [tokens, layers] (top-1) or [tokens, layers, k]");
  const std::uint64_t tokens = a.shape[0];
  const std::size_t layers = shape.layers.size();
  const std::uint64_t k = a.shape.size() == 3 ? a.shape[2] : 1;
  if (a.shape[1] != layers)
    throw common::InputError(path + ": npy shape " + shape_text(a.shape) + ": " + std::to_string(a.shape[1]) +
                             " layers, but " + shape.architecture + " has " + std::to_string(layers) +
                             " MoE layers (" + detail::layers_text(shape.layers) + ")");
  if (k == 0 || k > static_cast<std::uint64_t>(shape.top_k))
    throw common::InputError(path + ": npy shape " + shape_text(a.shape) + ": k = " + std::to_string(k) +
                             ", expected 1.." + std::to_string(shape.top_k) + " (top_k of " + shape.architecture + ")");
  if (tokens == 0) throw common::InputError(path + ": npy shape " + shape_text(a.shape) + ": no tokens");
  if (options.sequence_length > UINT32_MAX) throw common::UsageError("--sequence-length is too large");
  std::vector<std::uint64_t> lengths;
  if (!options.sequence_lengths_path.empty()) lengths = read_lengths(options.sequence_lengths_path, tokens);
  else if (options.sequence_length == 0 && tokens > UINT32_MAX)
    throw common::InputError(path + ": more than 2^32-1 tokens in one sequence; cut it with --sequence-length");

  TraceMeta meta;
  meta.shape = shape;
  meta.shape.top_k = static_cast<int>(k);
  meta.has_weights = false;
  meta.source = "npy import of " + detail::short_name(path) + " (moesim trace import --format npy)";
  ImportReport report;
  if (k < static_cast<std::uint64_t>(shape.top_k))
    report.notes.push_back("the array holds top-" + std::to_string(k) + " routing of a top-" +
                           std::to_string(shape.top_k) + " model: the trace has top_k = " + std::to_string(k));
  std::unique_ptr<TraceWriter> writer = make_writer(meta);

  TokenChecker checker(meta.shape, false);
  const std::size_t per = layers * k;
  const std::size_t chunk = std::max<std::size_t>(1, (std::size_t{1} << 20) / (per * a.item_bytes));
  std::vector<unsigned char> data;
  TokenBlock block;
  std::vector<std::uint16_t> ids(k);
  std::uint64_t sequence = 0, position = 0;
  std::size_t length_index = 0;
  if (fseeko(f.get(), static_cast<off_t>(a.data_offset), SEEK_SET) != 0)
    throw common::InputError(path + ": cannot seek to the data");
  for (std::uint64_t first = 0; first < tokens; first += chunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, tokens - first));
    data.resize(n * per * a.item_bytes);
    if (std::fread(data.data(), 1, data.size(), f.get()) != data.size())
      throw common::InputError(path + ": read error in the data");
    block.clear();
    block.experts.resize(n * per);
    for (std::size_t t = 0; t < n; ++t) {
      const std::uint64_t token = first + t;
      for (std::size_t l = 0; l < layers; ++l) {
        for (std::size_t j = 0; j < k; ++j) {
          const std::size_t e = (t * layers + l) * k + j;
          const std::int64_t v = element(data.data() + e * a.item_bytes, a);
          if (v < 0 || v >= shape.num_experts)
            throw common::InputError(
                path + ": byte offset " + std::to_string(a.data_offset + ((token * layers + l) * k + j) * a.item_bytes) +
                ": element [" + std::to_string(token) + ", " + std::to_string(l) +
                (a.shape.size() == 3 ? ", " + std::to_string(j) : std::string()) + "] (token " +
                std::to_string(token) + ", MoE layer " + std::to_string(shape.layers[l]) + "): expert id " +
                std::to_string(v) + " is out of range, expected 0.." + std::to_string(shape.num_experts - 1));
          ids[j] = static_cast<std::uint16_t>(v);
        }
        std::string problem = checker.layer_problem(ids.data(), nullptr);
        if (!problem.empty())
          throw common::InputError(path + ": byte offset " +
                                   std::to_string(a.data_offset + (token * layers + l) * k * a.item_bytes) +
                                   ": elements [" + std::to_string(token) + ", " + std::to_string(l) + ", :] (token " +
                                   std::to_string(token) + ", MoE layer " + std::to_string(shape.layers[l]) +
                                   "): " + problem);
        std::copy(ids.begin(), ids.end(), block.experts.begin() + static_cast<std::ptrdiff_t>(t * per + l * k));
      }
      block.sequence.push_back(static_cast<std::uint32_t>(sequence));
      block.position.push_back(static_cast<std::uint32_t>(position));
      ++position;
      const bool end_of_sequence = !lengths.empty() ? position == lengths[length_index]
                                   : options.sequence_length != 0 ? position == options.sequence_length
                                                                  : false;
      if (end_of_sequence) {
        ++sequence;
        ++length_index;
        position = 0;
      }
    }
    writer->write(block);
  }
  writer->finish();
  report.tokens = tokens;
  report.sequences = position == 0 ? sequence : sequence + 1;
  report.meta = meta;
  report.meta.token_count = report.tokens;
  report.meta.sequence_count = report.sequences;
  return report;
}

}  // namespace moesim::traces
