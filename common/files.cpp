#include "common/files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
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

AtomicFile::AtomicFile(fs::path target, bool overwrite, bool binary) : target_(std::move(target)) {
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
  out_.open(temp_, binary ? std::ios::out | std::ios::binary | std::ios::trunc : std::ios::out | std::ios::trunc);
  if (!out_) throw RunError("cannot create " + temp_.string() + ": " + std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::error_code ec;
    fs::remove(temp_, ec);
  }
}

void AtomicFile::commit() {
  out_.flush();
  if (!out_) throw RunError("writing " + target_.string() + " failed (disk full?)");
  out_.close();
  if (out_.fail()) throw RunError("closing " + target_.string() + " failed");
  std::error_code ec;
  fs::rename(temp_, target_, ec);
  if (ec) throw RunError("cannot move " + temp_.string() + " to " + target_.string() + ": " + ec.message());
  committed_ = true;
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
