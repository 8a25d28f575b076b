// Output files are written to a temporary file in the target's folder and renamed into place, so a
// failure never leaves a half-written result or destroys an old one; an existing file is replaced
// only when the caller allows it (`--force`). Config names resolve under the configs/ folder.
#pragma once

#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

#include "common/interrupt.hpp"

namespace moesim::common {

// Throws UsageError naming the file and `--force` when `path` exists and !overwrite.
void check_can_write(const std::filesystem::path& path, bool overwrite);

// An output stream over a file descriptor that remembers the first write error's errno, so that a
// failure can name its OS reason ("No space left on device") however late it is noticed.
class FdStreamBuf : public std::streambuf {
 public:
  FdStreamBuf();
  FdStreamBuf(const FdStreamBuf&) = delete;
  FdStreamBuf& operator=(const FdStreamBuf&) = delete;
  ~FdStreamBuf() override;
  bool open(const std::filesystem::path& path);  // creates a new file (O_EXCL); false + error() if not
  bool close();  // flushes and closes; false + error() on a failure
  int error() const { return error_; }

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override;
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override;
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override;

 private:
  bool drain();
  bool write_all(const char* data, std::size_t size);
  int fd_ = -1;
  int error_ = 0;
  std::unique_ptr<char[]> buffer_;
};

// A file being written: stream into `stream()`, then `commit()` renames it into place. Destroying it
// uncommitted removes the temporary file and leaves any old file untouched; so does SIGINT/SIGTERM
// (the temporary is registered with common/interrupt.hpp while it exists).
class AtomicFile {
 public:
  AtomicFile(std::filesystem::path target, bool overwrite, bool binary = false);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  std::ostream& stream() { return out_; }
  // Throws RunError naming the file and the OS reason if a write has failed so far.
  void check() const;
  void commit();  // throws RunError on an I/O failure, naming the file and the OS reason
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  FdStreamBuf buf_;
  std::ostream out_{&buf_};
  TempRegistration registration_;
  bool committed_ = false;
};

// Removes the temporaries (".NAME.tmp-PID-N") that a killed writer left under `dir` (kill -9 allows
// no cleanup); call only while holding dir's FolderLock (common/folder_lock.hpp). Returns the count.
std::size_t remove_stale_temporaries(const std::filesystem::path& dir);

void write_file_atomic(const std::filesystem::path& path, std::string_view content, bool overwrite);
std::string read_file(const std::filesystem::path& path);  // throws InputError if unreadable

// The configs/ folder: $MOESIM_CONFIG_DIR if set, else the source tree's (a compile definition).
std::filesystem::path config_root();
// `name_or_path` is a path when it contains '/' or ends in .yaml and exists; else a name under
// configs/<kind>/ (e.g. kind "architectures", name "mixtral-8x7b"). An unknown name is an
// InputError listing the valid names.
std::filesystem::path resolve_config(std::string_view kind, std::string_view name_or_path);
std::vector<std::string> config_names(std::string_view kind);

}  // namespace moesim::common
