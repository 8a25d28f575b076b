// NumPy .npy reading shared by the importers (internal to traces/): the header (format versions 1,
// 2 and 3; the Python dict literal is parsed here, no NumPy needed), its dtype and shape checked, and
// the data length matched to the shape. Values are read element by element from the caller's buffer.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace moesim::traces::detail {

// Which dtypes a caller accepts: integers only (expert ids), or integers and float32/float64 (counts
// saved as floats, whose values the caller checks are whole numbers).
enum class NpyValues { kIntegers, kNumbers };

struct NpyArray {
  std::string path;
  std::string descr;
  char kind = 'i';  // 'i' signed, 'u' unsigned, 'f' float
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

// Reads and checks the header of the open file `f` (named `path` in messages), leaving `f` at the
// data. Throws InputError naming the file and byte offset.
NpyArray read_npy_header(const std::string& path, std::FILE* f, NpyValues values = NpyValues::kIntegers);
// One element of an integer array (an unsigned value beyond int64 reads as INT64_MAX).
std::int64_t npy_integer(const unsigned char* p, const NpyArray& a);
// One element of any accepted array, as a double (exact for integers up to 2^53).
double npy_number(const unsigned char* p, const NpyArray& a);
// "(3, 4, 5)".
std::string npy_shape_text(const std::vector<std::uint64_t>& shape);

}  // namespace moesim::traces::detail
