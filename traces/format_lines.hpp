// A buffered reader of text lines for the text trace and the importers: hands out each line without
// its "\n" (a trailing "\r" is removed too) as a view valid until the next call, and knows the
// 1-based number and byte offset of every line, so that errors can name "file:line".
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::traces {

inline constexpr std::size_t kMaxLineBytes = std::size_t{1} << 28;  // longer lines are refused

class LineReader {
 public:
  explicit LineReader(std::string path);  // throws InputError when the file cannot be opened
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // The next line, or false at the end of the file. Throws InputError on a read failure or a line
  // longer than kMaxLineBytes.
  bool next(std::string_view& line);
  std::uint64_t line_number() const { return line_; }        // of the line last returned
  std::uint64_t line_offset() const { return line_start_; }  // byte offset where it starts
  std::uint64_t offset() const { return consumed_; }         // byte offset of the next line
  bool last_had_newline() const { return last_newline_; }
  // Continues from byte `offset`, which starts line `line_number` + 1.
  void seek(std::uint64_t offset, std::uint64_t line_number);
  std::uint64_t file_size() const { return size_; }
  const std::string& path() const { return path_; }
  // "path:line" of the line last returned.
  std::string where() const;

 private:
  bool fill();
  std::string path_;
  std::FILE* file_ = nullptr;
  std::uint64_t size_ = 0;
  std::vector<char> buf_;
  std::size_t begin_ = 0;  // unread data is buf_[begin_, end_)
  std::size_t end_ = 0;
  bool eof_ = false;
  std::uint64_t consumed_ = 0;
  std::uint64_t line_start_ = 0;
  std::uint64_t line_ = 0;
  bool last_newline_ = false;
};

}  // namespace moesim::traces
