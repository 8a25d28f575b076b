#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "common/error.hpp"
#include "common/files.hpp"
#include "common/folder_lock.hpp"
#include "common/interrupt.hpp"
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

namespace {
std::size_t entries(const fs::path& dir) {
  return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}
}  // namespace

TEST_CASE("files: a failed write names the file and the OS reason, and leaves no temporary") {
  TempDir dir;
  const fs::path target = dir / "big.bin";
  // A file size limit makes write(2) fail with EFBIG, as a full disk fails with ENOSPC.
  struct rlimit old {};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  struct rlimit small = old;
  small.rlim_cur = 1 << 16;
  auto* old_handler = signal(SIGXFSZ, SIG_IGN);
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  {
    moesim::common::AtomicFile f(target, false, true);
    const std::string chunk(1 << 12, 'x');
    for (int i = 0; i < 64; ++i) f.stream() << chunk;
    try {
      f.commit();
    } catch (const moesim::common::RunError& e) {
      message = e.what();
    }
  }
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, old_handler);
  CHECK(message == "writing " + target.string() + " failed: " + std::strerror(EFBIG));
  CHECK(entries(dir.path()) == 0);
}

TEST_CASE("files: temporaries are registered while they exist and removed when the process is interrupted") {
  TempDir dir;
  const int before = moesim::common::registered_temp_count();
  {
    moesim::common::AtomicFile f(dir / "a.txt", false);
    CHECK(moesim::common::registered_temp_count() == before + 1);
    f.stream() << "done";
    f.commit();
    CHECK(moesim::common::registered_temp_count() == before);
  }
  for (int sig : {SIGINT, SIGTERM}) {
    CAPTURE(sig);
    int ready[2];
    REQUIRE(pipe(ready) == 0);
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);  // whatever the test runner set (an ignored signal stays ignored)
      signal(SIGTERM, SIG_DFL);
      moesim::common::install_interrupt_handlers();
      moesim::common::AtomicFile f(dir / "b.txt", false);
      f.stream() << std::string(1 << 20, 'x');
      f.stream().flush();
      const moesim::common::InterruptNote note("kept nothing");
      (void)!write(ready[1], "r", 1);
      for (;;) pause();
    }
    close(ready[1]);
    char c = 0;
    REQUIRE(read(ready[0], &c, 1) == 1);
    close(ready[0]);
    CHECK(entries(dir.path()) == 2);  // a.txt and b.txt's temporary
    kill(pid, sig);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);  // the exit status is the signal's
    CHECK(entries(dir.path()) == 1);  // only a.txt
    CHECK(fs::exists(dir / "a.txt"));
  }
}

TEST_CASE("files: a locked folder refuses a second writer naming the holder's pid, and its lock file goes with it") {
  TempDir dir;
  const fs::path out = dir / "out";
  {
    const moesim::common::FolderLock lock(out);  // creates the folder
    CHECK(fs::is_directory(out));
    CHECK(moesim::common::folder_is_empty(out));
    CHECK(read_text(out / moesim::common::kFolderLockName) == std::to_string(getpid()) + "\n");
    const std::string want = "is in use by another moesim process (pid " + std::to_string(getpid()) + ",";
    try {
      const moesim::common::FolderLock second(out);  // another open file: flock conflicts
      FAIL("the second lock was granted");
    } catch (const moesim::common::UsageError& e) {
      CHECK(std::string(e.what()).find(want) != std::string::npos);
    }
    CHECK_THROWS_AS(moesim::common::check_folder_unlocked(out), moesim::common::UsageError);
    write_text(out / "x", "1");
    CHECK_FALSE(moesim::common::folder_is_empty(out));
  }
  CHECK_FALSE(fs::exists(out / moesim::common::kFolderLockName));
  CHECK_NOTHROW(moesim::common::check_folder_unlocked(out));
  // A stale lock file (its holder was killed) is taken over.
  write_text(out / moesim::common::kFolderLockName, "999999\n");
  CHECK_NOTHROW(moesim::common::FolderLock{out});
  write_text(dir / "file", "x");
  CHECK_THROWS_AS(moesim::common::FolderLock{dir / "file"}, moesim::common::UsageError);
}

TEST_CASE("files: the temporaries a killed writer left are removed, nothing else") {
  TempDir dir;
  fs::create_directories(dir / "variants" / "a");
  write_text(dir / ".results.csv.tmp-123-456", "half");
  write_text(dir / "variants" / "a" / ".result.json.tmp-1-2", "half");
  write_text(dir / "results.csv", "whole");
  write_text(dir / ".hidden", "user's");
  CHECK(moesim::common::remove_stale_temporaries(dir.path()) == 2);
  CHECK(fs::exists(dir / "results.csv"));
  CHECK(fs::exists(dir / ".hidden"));
  CHECK(entries(dir / "variants" / "a") == 0);
}
