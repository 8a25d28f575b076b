#include "traces/format_binary.hpp"

#include <fcntl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/hash.hpp"
#include "common/strings.hpp"
#include "traces/format_common.hpp"

namespace moesim::traces {

// The payload arrays are copied straight between memory and the file; the format is little-endian.
static_assert(std::endian::native == std::endian::little, "the binary trace code assumes a little-endian host");

namespace {

constexpr std::array<char, 4> kBlockTag = {'T', 'B', 'L', 'K'};
constexpr std::array<char, 4> kTrailerTag = {'T', 'E', 'N', 'D'};


std::uint32_t flags_for(const TraceMeta& meta) {
  std::uint32_t flags = 0;
  if (meta.has_weights) flags |= kFlagWeights;
  if (meta.shape.num_experts > 256) flags |= kFlagWideIds;
  return flags;
}

std::size_t bytes_per_token(const TraceMeta& meta) {
  const std::size_t ids = ids_per_token(meta.shape);
  return 8 + ids * (meta.shape.num_experts > 256 ? 2 : 1) + (meta.has_weights ? ids * 4 : 0);
}

// Header bytes [0, 20) and the metadata JSON, under one CRC.
std::uint32_t header_crc(const unsigned char* fixed, const std::string& json) {
  return common::crc32(json.data(), json.size(), common::crc32(fixed, 20));
}

// A span of memory that one read fills; a read takes several, filled in file order.
struct Piece {
  void* data;
  std::size_t size;
};

// Positioned reads (no seek state) into several buffers at once: a block's fields land in their
// own vectors with one system call.
class File {
 public:
  explicit File(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() { ::close(fd_); }
  void read_at(std::uint64_t offset, void* data, std::size_t size, const char* what) {
    read_at(offset, std::array<Piece, 1>{Piece{data, size}}, what);
  }
  // Fills the pieces (some may be empty) with the bytes from `offset` on. The last `optional` bytes
  // may be missing (returns false then); the others are `what`, named in the truncation message.
  template <std::size_t N>
  bool read_at(std::uint64_t offset, const std::array<Piece, N>& pieces, const char* what, std::size_t optional = 0) {
    std::array<iovec, N> iov;
    std::size_t size = 0;
    for (std::size_t i = 0; i < N; ++i) {
      iov[i] = iovec{pieces[i].data, pieces[i].size};
      size += pieces[i].size;
    }
    std::size_t got = 0, first = 0;
    while (got < size) {
      const ssize_t r =
          ::preadv(fd_, iov.data() + first, static_cast<int>(N - first), static_cast<off_t>(offset + got));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      // A short read (a signal, a file that shrank): go on after the bytes that did arrive.
      auto left = static_cast<std::size_t>(r);
      got += left;
      while (first < N && left >= iov[first].iov_len) left -= iov[first++].iov_len;
      if (left > 0) {
        iov[first].iov_base = static_cast<unsigned char*>(iov[first].iov_base) + left;
        iov[first].iov_len -= left;
      }
    }
    const std::size_t required = size - optional;
    if (got < required)
      throw common::InputError(path_ + ": byte offset " + std::to_string(offset) + ": " + what + ": expected " +
                               std::to_string(required) + " bytes, the file ends after " + std::to_string(got) +
                               " (truncated?)");
    return got == size;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

class BinaryReader final : public TraceReader {
 public:
  explicit BinaryReader(const std::string& path) : path_(path), file_(path) {
    std::error_code ec;
    size_ = std::filesystem::file_size(path, ec);
    if (ec) throw common::InputError(path + ": cannot read the file size: " + ec.message());
    if (size_ == 0) throw common::InputError(path + ": empty file, expected a moesim binary trace");
    if (size_ < kBinaryHeaderBytes)
      throw common::InputError(path + ": " + std::to_string(size_) + " bytes, too short for a moesim binary trace (" +
                               std::to_string(kBinaryHeaderBytes + kTrailerBytes) + " bytes at least): truncated?");
    read_header();
    read_trailer();
    meta_.token_count = trailer_tokens_;
    meta_.sequence_count = trailer_sequences_;
    checker_.emplace(meta_.shape, meta_.has_weights);
    rewind();
  }

  const TraceMeta& meta() const override { return meta_; }

  bool next(TokenBlock& block, std::size_t max_tokens) override {
    block.clear();
    if (max_tokens == 0) return false;
    if (cursor_ >= current_.size()) {
      if (!load_block()) return false;
    }
    const std::size_t n = current_.size();
    if (cursor_ == 0 && n <= max_tokens) {
      std::swap(block, current_);
      cursor_ = block.size();
      current_.clear();
      return true;
    }
    const std::size_t count = std::min(max_tokens, n - cursor_);
    slice(block, count);
    cursor_ += count;
    return true;
  }

  void rewind() override {
    offset_ = blocks_begin_;
    block_index_ = 0;
    tokens_read_ = 0;
    chain_crc_ = 0;
    current_.clear();
    cursor_ = 0;
    checker_->reset();
  }

 private:
  [[noreturn]] void fail_at(std::uint64_t offset, const std::string& what) const {
    throw common::InputError(path_ + ": byte offset " + std::to_string(offset) + ": " + what);
  }

  void read_header() {
    unsigned char h[kBinaryHeaderBytes];
    file_.read_at(0, h, sizeof h, "file header");
    if (!has_binary_magic(h, sizeof h)) fail_at(0, "not a moesim binary trace (wrong magic bytes)");
    const std::uint32_t version = get_u32(h + 8);
    if (version != static_cast<std::uint32_t>(kFormatVersion))
      fail_at(8, "format version " + std::to_string(version) + ", this moesim reads version " +
                     std::to_string(kFormatVersion) + " (convert the trace with the moesim that wrote it)");
    flags_ = get_u32(h + 12);
    if ((flags_ & ~(kFlagWeights | kFlagWideIds)) != 0) fail_at(12, "unknown flags " + hex32(flags_));
    const std::uint32_t meta_len = get_u32(h + 16);
    if (meta_len == 0 || meta_len > kMaxMetadataBytes || kBinaryHeaderBytes + meta_len + kTrailerBytes > size_)
      fail_at(16, "metadata length " + std::to_string(meta_len) + " does not fit a file of " + std::to_string(size_) +
                      " bytes (truncated or corrupt)");
    std::string json(meta_len, '\0');
    file_.read_at(kBinaryHeaderBytes, json.data(), meta_len, "metadata");
    const std::uint32_t stored = get_u32(h + 20);
    const std::uint32_t computed = header_crc(h, json);
    if (stored != computed)
      fail_at(0, "header CRC-32 mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                     "): the header or metadata is corrupt");
    nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
    if (parsed.is_discarded()) fail_at(kBinaryHeaderBytes, "metadata is not valid JSON");
    meta_ = meta_from_json(parsed, path_ + ": byte offset " + std::to_string(kBinaryHeaderBytes));
    if (flags_ != flags_for(meta_))
      fail_at(12, "flags " + hex32(flags_) + " disagree with the metadata (expected " + hex32(flags_for(meta_)) + ")");
    wide_ = (flags_ & kFlagWideIds) != 0;
    per_ = ids_per_token(meta_.shape);
    token_bytes_ = bytes_per_token(meta_);
    blocks_begin_ = kBinaryHeaderBytes + meta_len;
  }

  void read_trailer() {
    const std::uint64_t at = size_ - kTrailerBytes;
    unsigned char t[kTrailerBytes];
    file_.read_at(at, t, sizeof t, "trailer");
    if (std::memcmp(t, kTrailerTag.data(), 4) != 0)
      fail_at(at, "no trailer at the end of the file: the trace is truncated or was not finished");
    const std::uint32_t stored = get_u32(t + 28);
    const std::uint32_t computed = common::crc32(t, 28);
    if (stored != computed)
      fail_at(at, "trailer CRC-32 mismatch (stored " + hex32(stored) + ", computed " + hex32(computed) +
                      "): the trailer is corrupt");
    trailer_blocks_ = get_u32(t + 4);
    trailer_tokens_ = get_u64(t + 8);
    trailer_sequences_ = get_u64(t + 16);
    trailer_chain_ = get_u32(t + 24);
    blocks_end_ = at;
    const std::uint64_t region = blocks_end_ - blocks_begin_;
    if (trailer_tokens_ > region / std::max<std::size_t>(token_bytes_, 1) ||
        trailer_blocks_ > region / kBlockHeaderBytes || trailer_sequences_ > trailer_tokens_ ||
        (trailer_blocks_ == 0) != (trailer_tokens_ == 0))
      fail_at(at, "trailer counts (" + std::to_string(trailer_tokens_) + " tokens, " +
                      std::to_string(trailer_sequences_) + " sequences, " + std::to_string(trailer_blocks_) +
                      " blocks) do not fit the file: it is truncated or corrupt");
  }

  bool load_block() {
    cursor_ = 0;
    if (offset_ == blocks_end_) {
      current_.clear();
      finish_checks();
      return false;
    }
    const std::uint64_t at = offset_;
    if (at + kBlockHeaderBytes > blocks_end_)
      fail_at(at, block_name() + ": " + std::to_string(blocks_end_ - at) +
                      " stray bytes before the trailer, expected a block header (corrupt file)");
    unsigned char h[kBlockHeaderBytes];
    if (ahead_at_ == at)
      std::memcpy(h, ahead_.data(), sizeof h);
    else
      file_.read_at(at, h, sizeof h, "block header");
    if (std::memcmp(h, kBlockTag.data(), 4) != 0) fail_at(at, block_name() + ": bad block tag (corrupt file)");
    const std::uint32_t n = get_u32(h + 4);
    const std::uint32_t payload_len = get_u32(h + 8);
    const std::uint32_t stored = get_u32(h + 12);
    const std::uint64_t remaining = trailer_tokens_ - tokens_read_;
    if (n == 0 || n > remaining)
      fail_at(at + 4, block_name() + ": token count " + std::to_string(n) + ", expected 1.." +
                          std::to_string(remaining) + " (tokens left per the trailer): corrupt block header");
    const std::uint64_t want = static_cast<std::uint64_t>(n) * token_bytes_;
    if (payload_len != want)
      fail_at(at + 8, block_name() + ": payload length " + std::to_string(payload_len) + ", expected " +
                          std::to_string(want) + " for " + std::to_string(n) + " tokens: corrupt block header");
    const std::uint64_t end = at + kBlockHeaderBytes + payload_len;
    if (end > blocks_end_)
      fail_at(at, block_name() + ": payload of " + std::to_string(payload_len) + " bytes runs past the trailer");
    try {
      read_payload(n, at, stored, end);
      widen_and_check(n, at, stored);
    } catch (...) {
      current_.clear();  // a block that failed a check is never handed out
      throw;
    }
    unsigned char crc_bytes[4];
    put_u32(crc_bytes, stored);
    chain_crc_ = common::crc32(crc_bytes, 4, chain_crc_);
    offset_ = end;
    ++block_index_;
    tokens_read_ += n;
    return true;
  }

  std::string block_name() const { return "block " + std::to_string(block_index_); }

  // The payload's fields go straight into current_ (narrow ids into narrow_), with the next block's
  // header read ahead in the same call; the CRC runs over the fields in file order. The vectors keep
  // their size from block to block, so equal blocks cost no reallocation and no zero fill.
  void read_payload(std::uint32_t n, std::uint64_t at, std::uint32_t stored, std::uint64_t end) {
    const std::size_t ids = static_cast<std::size_t>(n) * per_;
    current_.sequence.resize(n);
    current_.position.resize(n);
    current_.experts.resize(ids);
    if (meta_.has_weights) current_.weights.resize(ids);
    if (!wide_) narrow_.resize(ids);
    const bool ahead = end + kBlockHeaderBytes <= blocks_end_;
    const std::array<Piece, 5> pieces = {{
        {current_.sequence.data(), n * 4u},
        {current_.position.data(), n * 4u},
        wide_ ? Piece{current_.experts.data(), ids * 2} : Piece{narrow_.data(), ids},
        {current_.weights.data(), meta_.has_weights ? ids * 4 : 0},
        {ahead_.data(), ahead ? kBlockHeaderBytes : 0},
    }};
    ahead_at_ = kNoAhead;
    if (file_.read_at(at + kBlockHeaderBytes, pieces, "block payload", pieces[4].size) && ahead) ahead_at_ = end;
    std::uint32_t computed = 0;
    for (std::size_t i = 0; i < 4; ++i) computed = common::crc32(pieces[i].data, pieces[i].size, computed);
    if (computed != stored)
      fail_at(at, block_name() + " (payload bytes " + std::to_string(at + kBlockHeaderBytes) + ".." +
                      std::to_string(end - 1) + "): CRC-32 mismatch (stored " + hex32(stored) + ", computed " +
                      hex32(computed) + "): the block is corrupt");
  }

  // After a whole reading whose every block passed the token checks and whose trailer agreed, a
  // block read again with the same CRC as then holds the bytes that were checked: its tokens are not
  // checked again (a decode batch larger than its trace reads it many times). A block whose CRC
  // differs from the first reading's means the file changed under the run.
  void widen_and_check(std::uint32_t n, std::uint64_t at, std::uint32_t stored) {
    if (!wide_) {
      const unsigned char* p = narrow_.data();
      std::uint16_t* out = current_.experts.data();
      const std::size_t ids = static_cast<std::size_t>(n) * per_;
      for (std::size_t i = 0; i < ids; ++i) out[i] = p[i];
    }
    if (verified_) {
      if (block_index_ < checked_crc_.size() && checked_crc_[block_index_] == stored) return;
      fail_at(at, block_name() + ": differs from the first reading of the file (CRC-32 " + hex32(stored) +
                      ", was " + hex32(block_index_ < checked_crc_.size() ? checked_crc_[block_index_] : 0) +
                      "): the trace changed while it was being read; run again on a file nothing writes to");
    }
    if (auto problem = checker_->check_block(current_)) {
      const std::size_t t = problem->token;
      fail_at(at, "block " + std::to_string(block_index_) + ", token " + std::to_string(t) + " of the block, trace " +
                      describe_token(tokens_read_ + t, current_.sequence[t], current_.position[t]) + ": " +
                      problem->what);
    }
    if (block_index_ == checked_crc_.size()) checked_crc_.push_back(stored);
  }

  void finish_checks() {
    if (block_index_ != trailer_blocks_ || tokens_read_ != trailer_tokens_ ||
        (!verified_ && checker_->sequences() != trailer_sequences_) || chain_crc_ != trailer_chain_)
      fail_at(blocks_end_, "the trailer (" + std::to_string(trailer_blocks_) + " blocks, " +
                               std::to_string(trailer_tokens_) + " tokens, " + std::to_string(trailer_sequences_) +
                               " sequences) disagrees with the blocks read (" + std::to_string(block_index_) +
                               " blocks, " + std::to_string(tokens_read_) + " tokens, " +
                               std::to_string(checker_->sequences()) + " sequences): blocks are missing or corrupt");
    verified_ = checked_crc_.size() == trailer_blocks_;
  }

  void slice(TokenBlock& block, std::size_t count) {
    const auto b = static_cast<std::ptrdiff_t>(cursor_);
    const auto e = static_cast<std::ptrdiff_t>(cursor_ + count);
    block.sequence.assign(current_.sequence.begin() + b, current_.sequence.begin() + e);
    block.position.assign(current_.position.begin() + b, current_.position.begin() + e);
    const auto ib = static_cast<std::ptrdiff_t>(cursor_ * per_);
    const auto ie = static_cast<std::ptrdiff_t>((cursor_ + count) * per_);
    block.experts.assign(current_.experts.begin() + ib, current_.experts.begin() + ie);
    if (meta_.has_weights) block.weights.assign(current_.weights.begin() + ib, current_.weights.begin() + ie);
  }

  std::string path_;
  File file_;
  std::uint64_t size_ = 0;
  TraceMeta meta_;
  std::uint32_t flags_ = 0;
  bool wide_ = false;
  std::size_t per_ = 0;
  std::size_t token_bytes_ = 0;
  std::uint64_t blocks_begin_ = 0;
  std::uint64_t blocks_end_ = 0;
  std::uint32_t trailer_blocks_ = 0;
  std::uint64_t trailer_tokens_ = 0;
  std::uint64_t trailer_sequences_ = 0;
  std::uint32_t trailer_chain_ = 0;
  std::optional<TokenChecker> checker_;
  std::uint64_t offset_ = 0;
  std::uint32_t block_index_ = 0;
  std::uint64_t tokens_read_ = 0;
  std::uint32_t chain_crc_ = 0;
  // The CRC of each block whose tokens passed the checks, by index (filled by the first reading).
  std::vector<std::uint32_t> checked_crc_;
  bool verified_ = false;  // a whole reading passed every check
  std::vector<unsigned char> narrow_;  // one byte per expert id, before widening
  static constexpr std::uint64_t kNoAhead = ~std::uint64_t{0};
  std::array<unsigned char, kBlockHeaderBytes> ahead_{};
  std::uint64_t ahead_at_ = kNoAhead;  // the file offset whose block header ahead_ holds
  TokenBlock current_;
  std::size_t cursor_ = 0;
};

class BinaryWriter final : public TraceWriter {
 public:
  BinaryWriter(const std::string& path, const TraceMeta& meta, bool overwrite)
      : path_(path), meta_(meta), checker_(checked(meta.shape, path), meta.has_weights), file_(path, overwrite, true) {
    per_ = ids_per_token(meta_.shape);
    wide_ = meta_.shape.num_experts > 256;
    block_tokens_ = std::clamp<std::size_t>(kTargetBlockBytes / bytes_per_token(meta_), 1, kMaxBlockTokens);
    const std::string json = meta_to_json(meta_).dump();
    unsigned char h[kBinaryHeaderBytes];
    std::memcpy(h, kBinaryMagic.data(), 8);
    put_u32(h + 8, static_cast<std::uint32_t>(kFormatVersion));
    put_u32(h + 12, flags_for(meta_));
    put_u32(h + 16, static_cast<std::uint32_t>(json.size()));
    put_u32(h + 20, header_crc(h, json));
    out().write(reinterpret_cast<const char*>(h), sizeof h);
    out().write(json.data(), static_cast<std::streamsize>(json.size()));
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
    written_ += block.size();
    std::size_t first = 0;
    while (first < block.size()) {
      const std::size_t count = std::min(block_tokens_ - pending_.size(), block.size() - first);
      append(block, first, count);
      first += count;
      if (pending_.size() == block_tokens_) flush();
    }
  }

  void finish() override {
    if (finished_) return;
    if (!pending_.sequence.empty()) flush();
    unsigned char t[kTrailerBytes];
    std::memcpy(t, kTrailerTag.data(), 4);
    put_u32(t + 4, blocks_);
    put_u64(t + 8, written_);
    put_u64(t + 16, checker_.sequences());
    put_u32(t + 24, chain_crc_);
    put_u32(t + 28, common::crc32(t, 28));
    out().write(reinterpret_cast<const char*>(t), sizeof t);
    file_.commit();
    finished_ = true;
  }

 private:
  static const TraceShape& checked(const TraceShape& shape, const std::string& path) {
    validate_shape(shape, path);
    return shape;
  }
  std::ostream& out() { return file_.stream(); }

  struct Pending {
    std::vector<std::uint32_t> sequence, position;
    std::vector<std::uint16_t> experts;
    std::vector<float> weights;
    std::size_t size() const { return sequence.size(); }
  };

  void append(const TokenBlock& b, std::size_t first, std::size_t count) {
    auto f = static_cast<std::ptrdiff_t>(first), l = static_cast<std::ptrdiff_t>(first + count);
    pending_.sequence.insert(pending_.sequence.end(), b.sequence.begin() + f, b.sequence.begin() + l);
    pending_.position.insert(pending_.position.end(), b.position.begin() + f, b.position.begin() + l);
    auto fi = static_cast<std::ptrdiff_t>(first * per_), li = static_cast<std::ptrdiff_t>((first + count) * per_);
    pending_.experts.insert(pending_.experts.end(), b.experts.begin() + fi, b.experts.begin() + li);
    if (meta_.has_weights) pending_.weights.insert(pending_.weights.end(), b.weights.begin() + fi, b.weights.begin() + li);
  }

  void flush() {
    const std::size_t n = pending_.size();
    const std::size_t ids = n * per_;
    payload_.resize(n * bytes_per_token(meta_));
    unsigned char* p = payload_.data();
    std::memcpy(p, pending_.sequence.data(), n * 4);
    p += n * 4;
    std::memcpy(p, pending_.position.data(), n * 4);
    p += n * 4;
    if (wide_) {
      std::memcpy(p, pending_.experts.data(), ids * 2);
      p += ids * 2;
    } else {
      for (std::size_t i = 0; i < ids; ++i) p[i] = static_cast<unsigned char>(pending_.experts[i]);
      p += ids;
    }
    if (meta_.has_weights) std::memcpy(p, pending_.weights.data(), ids * 4);
    const std::uint32_t crc = common::crc32(payload_.data(), payload_.size());
    unsigned char h[kBlockHeaderBytes];
    std::memcpy(h, kBlockTag.data(), 4);
    put_u32(h + 4, static_cast<std::uint32_t>(n));
    put_u32(h + 8, static_cast<std::uint32_t>(payload_.size()));
    put_u32(h + 12, crc);
    out().write(reinterpret_cast<const char*>(h), sizeof h);
    out().write(reinterpret_cast<const char*>(payload_.data()), static_cast<std::streamsize>(payload_.size()));
    file_.check();  // names the file and the OS reason (disk full, ...)
    unsigned char crc_bytes[4];
    put_u32(crc_bytes, crc);
    chain_crc_ = common::crc32(crc_bytes, 4, chain_crc_);
    ++blocks_;
    pending_.sequence.clear();
    pending_.position.clear();
    pending_.experts.clear();
    pending_.weights.clear();
  }

  std::string path_;
  TraceMeta meta_;
  TokenChecker checker_;
  common::AtomicFile file_;
  std::size_t per_ = 0;
  bool wide_ = false;
  std::size_t block_tokens_ = 1;
  Pending pending_;
  std::vector<unsigned char> payload_;
  std::uint64_t written_ = 0;
  std::uint32_t blocks_ = 0;
  std::uint32_t chain_crc_ = 0;
  bool finished_ = false;
};

}  // namespace

bool has_binary_magic(const void* data, std::size_t size) {
  return size >= kBinaryMagic.size() && std::memcmp(data, kBinaryMagic.data(), kBinaryMagic.size()) == 0;
}

std::unique_ptr<TraceReader> open_binary_trace(const std::string& path) { return std::make_unique<BinaryReader>(path); }

std::unique_ptr<TraceWriter> create_binary_writer(const std::string& path, const TraceMeta& meta, bool overwrite) {
  return std::make_unique<BinaryWriter>(path, meta, overwrite);
}

}  // namespace moesim::traces
