// Fuzz target: the study parser (sim/study/study_file.cpp) on a file: every scenario validated. The
// study is written to SCRATCH/studies/, beside links to the test trace and placements, so that the seeds'
// relative paths (tiny.trace, ../placements/...) resolve as they do under tests/data and the fuzzer gets
// past them.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

#include "sim/study/study_file.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

void link_test_files() {
  namespace fs = std::filesystem;
  const fs::path data = MOESIM_FUZZ_DATA_DIR;
  const fs::path scratch = moesim::fuzz::scratch_dir();
  fs::create_directories(scratch / "studies");
  std::error_code ec;
  fs::create_symlink(data / "studies" / "tiny.trace", scratch / "studies" / "tiny.trace", ec);
  fs::create_directory_symlink(data / "placements", scratch / "placements", ec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moesim;
  static const bool linked = (link_test_files(), true);
  (void)linked;
  const std::string path = fuzz::write_input("studies/study.yaml", data, size);
  fuzz::expect_clean([&] { (void)sim::load_study(path); });
  return 0;
}
