// Helpers shared by the test suites: data locations (compile definitions, never the working
// directory), the real-data skip rule, temporary folders, and running the moesim executable.
#pragma once

#include <filesystem>
#include <string>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "common/error.hpp"

namespace moesim::testing {

std::filesystem::path source_dir();     // the repository root
std::filesystem::path test_data_dir();  // tests/data
std::filesystem::path reference_dir();  // models/reference: the published data shipped with the project
// ../shared/data beside the checkout, if present.
bool shared_data_available();
std::filesystem::path shared_data_dir();
// Called at the top of a test that needs ../shared/data: where it is absent, under CTest the process
// exits with 77 (CTest reports the test as skipped); run by hand the test returns early with a message.
bool skip_without_shared_data();
#define MOESIM_REQUIRE_SHARED_DATA()                 \
  do {                                               \
    if (::moesim::testing::skip_without_shared_data()) \
      return;                                        \
  } while (0)

// A fresh empty folder, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The message `f` throws as an InputError, "usage: " + the message of a UsageError, or "" if it
// throws neither.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const common::InputError& e) {
    return e.what();
  } catch (const common::UsageError& e) {
    return std::string("usage: ") + e.what();
  }
  return "";
}

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
// Runs the built moesim executable ($MOESIM_BIN, else the build tree's) with `args`, capturing output.
CliResult run_moesim(const std::vector<std::string>& args);
// Runs any program by path the same way.
CliResult run_program(const std::string& program, const std::vector<std::string>& args);

std::string read_text(const std::filesystem::path& path);
void write_text(const std::filesystem::path& path, const std::string& text);

// The non-blank lines between `<!-- papers:NAME:begin -->` and `<!-- papers:NAME:end -->` in `text`
// (docs/validation.md's generated tables); a test failure when either marker is missing.
std::vector<std::string> marked_lines(const std::string& text, const std::string& name);

}  // namespace moesim::testing
