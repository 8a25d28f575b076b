// Output files are written to a temporary file in the target's folder and renamed into place, so a
// failure never leaves a half-written result or destroys an old one; an existing file is replaced
// only when the caller allows it (`--force`). Config names resolve under the configs/ folder.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::common {

// Throws UsageError naming the file and `--force` when `path` exists and !overwrite.
void check_can_write(const std::filesystem::path& path, bool overwrite);

// A file being written: stream into `stream()`, then `commit()` renames it into place. Destroying it
// uncommitted removes the temporary file and leaves any old file untouched.
class AtomicFile {
 public:
  AtomicFile(std::filesystem::path target, bool overwrite, bool binary = false);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  std::ostream& stream() { return out_; }
  void commit();  // throws RunError on an I/O failure
  const std::filesystem::path& target() const { return target_; }

 private:
  std::filesystem::path target_;
  std::filesystem::path temp_;
  std::ofstream out_;
  bool committed_ = false;
};

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
