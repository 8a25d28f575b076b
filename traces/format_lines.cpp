#include "traces/format_lines.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"

namespace moesim::traces {

namespace {
constexpr std::size_t kChunk = std::size_t{1} << 20;
}

LineReader::LineReader(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  if (std::filesystem::is_directory(path_, ec))
    throw common::InputError(path_ + ": is a folder, expected a file");
  file_ = std::fopen(path_.c_str(), "rb");
  if (file_ == nullptr) throw common::InputError(path_ + ": cannot open: " + std::strerror(errno));
  auto size = std::filesystem::file_size(path_, ec);
  size_ = ec ? 0 : size;
  buf_.resize(kChunk);
}

LineReader::~LineReader() {
  if (file_ != nullptr) std::fclose(file_);
}

bool LineReader::fill() {
  if (eof_) return false;
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) {
    if (buf_.size() >= kMaxLineBytes)
      throw common::InputError(path_ + ":" + std::to_string(line_ + 1) + ": line longer than " +
                               std::to_string(kMaxLineBytes) + " bytes");
    buf_.resize(buf_.size() * 2);
  }
  std::size_t got = std::fread(buf_.data() + end_, 1, buf_.size() - end_, file_);
  if (got == 0) {
    if (std::ferror(file_)) throw common::InputError(path_ + ": read error: " + std::strerror(errno));
    eof_ = true;
    return false;
  }
  end_ += got;
  return true;
}

bool LineReader::next(std::string_view& line) {
  std::size_t scanned = begin_;
  for (;;) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(buf_.data() + scanned, '\n', end_ - scanned);
    if (nl != nullptr) {
      std::size_t len = static_cast<std::size_t>(static_cast<const char*>(nl) - start);
      line_start_ = consumed_;
      consumed_ += len + 1;
      begin_ += len + 1;
      ++line_;
      last_newline_ = true;
      if (len > 0 && start[len - 1] == '\r') --len;
      line = std::string_view(start, len);
      return true;
    }
    std::size_t have = end_ - begin_;
    if (!fill()) {
      if (have == 0) return false;
      start = buf_.data() + begin_;
      line_start_ = consumed_;
      consumed_ += have;
      begin_ = end_;
      ++line_;
      last_newline_ = false;
      if (start[have - 1] == '\r') --have;
      line = std::string_view(start, have);
      return true;
    }
    scanned = begin_ + have;  // fill() moved the unread data to the front
  }
}

void LineReader::seek(std::uint64_t offset, std::uint64_t line_number) {
  if (fseeko(file_, static_cast<off_t>(offset), SEEK_SET) != 0)
    throw common::InputError(path_ + ": cannot seek to byte " + std::to_string(offset));
  begin_ = end_ = 0;
  eof_ = false;
  consumed_ = offset;
  line_ = line_number;
}

std::string LineReader::where() const { return path_ + ":" + std::to_string(line_); }

}  // namespace moesim::traces
