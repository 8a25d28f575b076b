#include "traces/npy.hpp"

#include <cctype>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/import_common.hpp"

namespace moesim::traces::detail {

namespace {

constexpr unsigned char kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

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
        if (word != "True" && word != "False")
          fail("fortran_order: expected True or False, got " + common::quoted(word));
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

}  // namespace

NpyArray read_npy_header(const std::string& path, std::FILE* f, NpyValues values) {
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
  const bool numbers = values == NpyValues::kNumbers;
  const std::string supported = numbers ? "<i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8 (|i1 and |u1 too), <f4 <f8"
                                        : "<i1 <i2 <i4 <i8 <u1 <u2 <u4 <u8 (|i1 and |u1 too)";
  const bool integer = d.size() == 3 && (d[1] == 'i' || d[1] == 'u') &&
                       (d[2] == '1' || d[2] == '2' || d[2] == '4' || d[2] == '8');
  const bool floating = numbers && d.size() == 3 && d[1] == 'f' && (d[2] == '4' || d[2] == '8');
  if (!integer && !floating) {
    if (numbers)
      throw common::InputError(path + ": npy dtype " + common::quoted(d) + " is not supported; expected one of " +
                               supported + " (numpy: arr.astype('<i8'))");
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " is not an integer type; expert ids must be "
                             "integers, one of " + supported + " (numpy: arr.astype('<i4'))");
  }
  a.item_bytes = static_cast<std::size_t>(d[2] - '0');
  if (d[0] == '>' && a.item_bytes > 1)
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " is big-endian; supported: " + supported +
                             " (numpy: arr.astype('<i4'))");
  if (d[0] != '<' && d[0] != '|' && d[0] != '=' && d[0] != '>')
    throw common::InputError(path + ": npy dtype " + common::quoted(d) + " has an unknown byte order");
  a.kind = d[1];
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

std::int64_t npy_integer(const unsigned char* p, const NpyArray& a) {
  switch (a.item_bytes) {
    case 1: return (a.kind == 'i') ? static_cast<std::int64_t>(static_cast<std::int8_t>(p[0])) : p[0];
    case 2: {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      return (a.kind == 'i') ? static_cast<std::int16_t>(v) : v;
    }
    case 4: {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      return (a.kind == 'i') ? static_cast<std::int32_t>(v) : static_cast<std::int64_t>(v);
    }
    default: {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      if (!(a.kind == 'i') && v > static_cast<std::uint64_t>(INT64_MAX)) return INT64_MAX;  // out of range anyway
      return static_cast<std::int64_t>(v);
    }
  }
}

std::string npy_shape_text(const std::vector<std::uint64_t>& shape) {
  std::vector<std::string> parts;
  for (auto d : shape) parts.push_back(std::to_string(d));
  // Built piecewise: GCC 12 warns (-Wrestrict, a false positive) on "(" + string + ... here.
  std::string out("(");
  out += common::join(parts, ", ");
  out += ')';
  return out;
}


double npy_number(const unsigned char* p, const NpyArray& a) {
  if (a.kind != 'f') {
    if (a.kind == 'u' && a.item_bytes == 8) {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    return static_cast<double>(npy_integer(p, a));
  }
  if (a.item_bytes == 4) {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  double v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace moesim::traces::detail
