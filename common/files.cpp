#include "common/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "common/build_info.hpp"
#include "common/error.hpp"
#include "common/strings.hpp"

namespace moesim::common {

namespace fs = std::filesystem;

void check_can_write(const fs::path& path, bool overwrite) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UsageError(path.string() + " is a folder; give a file name for the output");
  if (!overwrite && fs::exists(path, ec))
    throw UsageError(path.string() + " already exists; pass --force to replace it, or choose another output name");
}

namespace {
constexpr std::size_t kBufferBytes = 1 << 16;
}

FdStreamBuf::FdStreamBuf() : buffer_(new char[kBufferBytes]) { setp(buffer_.get(), buffer_.get() + kBufferBytes); }

FdStreamBuf::~FdStreamBuf() {
  if (fd_ >= 0) ::close(fd_);
}

bool FdStreamBuf::open(const fs::path& path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd_ < 0) error_ = errno;
  return fd_ >= 0;
}

bool FdStreamBuf::write_all(const char* data, std::size_t size) {
  if (error_ != 0 || fd_ < 0) return false;
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error_ = n < 0 ? errno : EIO;
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

bool FdStreamBuf::drain() {
  const auto n = static_cast<std::size_t>(pptr() - pbase());
  setp(buffer_.get(), buffer_.get() + kBufferBytes);
  return write_all(buffer_.get(), n);
}

FdStreamBuf::int_type FdStreamBuf::overflow(int_type ch) {
  if (!drain()) return traits_type::eof();
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  *pptr() = traits_type::to_char_type(ch);
  pbump(1);
  return ch;
}

std::streamsize FdStreamBuf::xsputn(const char* s, std::streamsize n) {
  const auto size = static_cast<std::size_t>(n);
  if (size <= static_cast<std::size_t>(epptr() - pptr())) {
    std::memcpy(pptr(), s, size);
    pbump(static_cast<int>(size));
    return n;
  }
  // Large writes skip the buffer.
  if (!drain() || !write_all(s, size)) return 0;
  return n;
}

int FdStreamBuf::sync() { return drain() ? 0 : -1; }

FdStreamBuf::pos_type FdStreamBuf::seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) {
  if (!(which & std::ios_base::out) || !drain()) return pos_type(off_type(-1));
  const int whence = dir == std::ios_base::beg ? SEEK_SET : dir == std::ios_base::cur ? SEEK_CUR : SEEK_END;
  const off_t at = ::lseek(fd_, static_cast<off_t>(off), whence);
  return at < 0 ? pos_type(off_type(-1)) : pos_type(static_cast<off_type>(at));
}

FdStreamBuf::pos_type FdStreamBuf::seekpos(pos_type pos, std::ios_base::openmode which) {
  return seekoff(off_type(pos), std::ios_base::beg, which);
}

bool FdStreamBuf::close() {
  bool ok = drain();
  if (fd_ >= 0 && ::close(fd_) != 0 && ok) {
    error_ = errno;
    ok = false;
  }
  fd_ = -1;
  return ok;
}

AtomicFile::AtomicFile(fs::path target, bool overwrite, bool /*binary*/) : target_(std::move(target)) {
  check_can_write(target_, overwrite);
  fs::path dir = target_.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw UsageError("cannot write " + target_.string() + ": folder " + dir.string() + " does not exist");
  std::random_device rd;
  // Built piecewise: GCC 12 warns (-Wrestrict, a false positive) on "." + string + ... here.
  std::string name(".");
  name += target_.filename().string();
  name += ".tmp-";
  name += std::to_string(getpid());
  name += '-';
  name += std::to_string(rd());
  temp_ = dir / name;
  // Registered before it exists, so that no moment leaves it behind on SIGINT.
  registration_ = TempRegistration(temp_);
  if (!buf_.open(temp_))
    throw RunError("cannot create " + temp_.string() + " (to write " + target_.string() +
                   "): " + std::strerror(buf_.error()));
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    buf_.close();
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::check() const {
  if (buf_.error() != 0 || !out_)
    throw RunError("writing " + target_.string() + " failed: " +
                   (buf_.error() != 0 ? std::strerror(buf_.error()) : "stream error"));
}

void AtomicFile::commit() {
  out_.flush();
  check();
  if (!buf_.close()) throw RunError("writing " + target_.string() + " failed: " + std::strerror(buf_.error()));
  std::error_code ec;
  fs::rename(temp_, target_, ec);
  if (ec) throw RunError("cannot move " + temp_.string() + " to " + target_.string() + ": " + ec.message());
  committed_ = true;
  registration_.release();
}

std::size_t remove_stale_temporaries(const fs::path& dir) {
  std::vector<fs::path> stale;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > 1 && name[0] == '.' && name.find(".tmp-") != std::string::npos && it->is_regular_file(ec))
      stale.push_back(it->path());
  }
  std::size_t removed = 0;
  for (const auto& p : stale) removed += fs::remove(p, ec) ? 1 : 0;
  return removed;
}

void write_file_atomic(const fs::path& path, std::string_view content, bool overwrite) {
  AtomicFile f(path, overwrite, true);
  f.stream().write(content.data(), static_cast<std::streamsize>(content.size()));
  f.commit();
}

std::string read_file(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw InputError(path.string() + ": is a folder, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path.string() + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(path.string() + ": read error");
  return ss.str();
}

fs::path config_root() {
  if (const char* env = std::getenv("MOESIM_CONFIG_DIR"); env && *env) return env;
  return kSourceConfigDir;
}

std::vector<std::string> config_names(std::string_view kind) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(config_root() / kind, ec))
    if (entry.path().extension() == ".yaml") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

fs::path resolve_config(std::string_view kind, std::string_view name_or_path) {
  const std::string s(name_or_path);
  std::error_code ec;
  const bool looks_like_path = s.find('/') != std::string::npos || s.ends_with(".yaml") || s.ends_with(".yml");
  if (looks_like_path) {
    if (!fs::exists(s, ec)) throw InputError(s + ": no such file");
    return s;
  }
  fs::path candidate = config_root() / kind / (s + ".yaml");
  if (fs::exists(candidate, ec)) return candidate;
  auto names = config_names(kind);
  std::string singular(kind);
  if (singular.ends_with("s")) singular.pop_back();
  throw InputError("unknown " + singular + " \"" + s + "\"" + did_you_mean(s, names) + "; valid names: " +
                   (names.empty() ? std::string("(none found under ") + (config_root() / kind).string() + ")"
                                  : join(names, ", ")) +
                   "; or give a path to a .yaml file");
}

}  // namespace moesim::common
