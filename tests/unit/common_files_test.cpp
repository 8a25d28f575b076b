#include <doctest/doctest.h>

#include "common/error.hpp"
#include "common/files.hpp"
#include "tests/support/test_support.hpp"

namespace fs = std::filesystem;
using moesim::testing::read_text;
using moesim::testing::TempDir;
using moesim::testing::write_text;

TEST_CASE("files: an atomic file appears only on commit and never replaces a file silently") {
  TempDir dir;
  const fs::path target = dir / "out.txt";
  {
    moesim::common::AtomicFile f(target, false);
    f.stream() << "half";
    CHECK_FALSE(fs::exists(target));
  }  // destroyed uncommitted: nothing left behind
  CHECK_FALSE(fs::exists(target));
  CHECK(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()) == 0);

  moesim::common::write_file_atomic(target, "first", false);
  CHECK(read_text(target) == "first");
  CHECK_THROWS_AS(moesim::common::write_file_atomic(target, "second", false), moesim::common::UsageError);
  CHECK(read_text(target) == "first");
  moesim::common::write_file_atomic(target, "second", true);
  CHECK(read_text(target) == "second");
  CHECK_THROWS_AS(moesim::common::write_file_atomic(dir / "no" / "such" / "dir.txt", "x", false),
                  moesim::common::UsageError);
}

TEST_CASE("files: config names resolve under configs/, unknown names list the valid ones") {
  TempDir dir;
  fs::create_directories(dir / "architectures");
  write_text(dir / "architectures" / "mixtral-8x7b.yaml", "kind: architecture\n");
  setenv("MOESIM_CONFIG_DIR", dir.path().c_str(), 1);
  CHECK(moesim::common::resolve_config("architectures", "mixtral-8x7b") == dir / "architectures" / "mixtral-8x7b.yaml");
  try {
    moesim::common::resolve_config("architectures", "mixtral-8x7");
    FAIL("expected an error");
  } catch (const moesim::common::InputError& e) {
    const std::string m = e.what();
    CHECK(m.find("unknown architecture \"mixtral-8x7\" (did you mean \"mixtral-8x7b\"?)") != std::string::npos);
    CHECK(m.find("valid names: mixtral-8x7b") != std::string::npos);
  }
  CHECK_THROWS_AS(moesim::common::resolve_config("architectures", "./nope.yaml"), moesim::common::InputError);
  unsetenv("MOESIM_CONFIG_DIR");
}
