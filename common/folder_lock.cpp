#include "common/folder_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "common/error.hpp"

namespace moesim::common {

namespace fs = std::filesystem;

namespace {

// The holder writes its pid just after taking the lock: wait a moment for it rather than say "unknown".
std::string holder_pid(int fd) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    char buf[32] = {};
    const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    std::string text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    if (!text.empty()) return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "unknown";
}

[[noreturn]] void refuse(const fs::path& dir, const fs::path& file, int fd) {
  const std::string pid = holder_pid(fd);
  close(fd);
  throw UsageError(dir.string() + " is in use by another moesim process (pid " + pid + ", lock file " + file.string() +
                   "); wait for it to finish (or stop it), or choose another output folder");
}

// Opens and locks `file` (flock LOCK_EX, plus LOCK_NB unless `wait`), retrying when the previous holder
// removed the file between our open and flock, so the lock is always on the file that is there now.
// Returns the descriptor, or -1 when `wait` is false and another process holds it (fd_held set).
int lock_file(const fs::path& file, bool wait, int* fd_held) {
  for (;;) {
    const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw RunError("cannot create the lock file " + file.string() + ": " + std::strerror(errno));
    int rc = 0;
    do rc = flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
      const int err = errno;
      if (err == EWOULDBLOCK && !wait) {
        *fd_held = fd;
        return -1;
      }
      close(fd);
      throw RunError("cannot lock " + file.string() + ": " + std::strerror(err));
    }
    struct stat held {
    }, now{};
    if (fstat(fd, &held) == 0 && stat(file.c_str(), &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
      return fd;
    close(fd);
  }
}

}  // namespace

FolderLock::FolderLock(const fs::path& dir) : file_(dir / kFolderLockName) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw UsageError(dir.string() + " exists and is not a folder; choose another -o");
  fs::create_directories(dir, ec);
  if (ec) throw RunError("cannot create " + dir.string() + ": " + ec.message());
  int held = -1;
  fd_ = lock_file(file_, false, &held);
  if (fd_ < 0) refuse(dir, file_, held);
  registration_ = TempRegistration(file_);
  const std::string pid = std::to_string(getpid()) + "\n";
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    registration_.release();
    unlink(file_.c_str());
    close(fd_);
    throw RunError("cannot write " + file_.string() + ": " + std::strerror(err));
  }
}

FolderLock::~FolderLock() {
  registration_.release();
  unlink(file_.c_str());
  close(fd_);
}

WaitingLock::WaitingLock(const fs::path& file) : file_(file) {
  fd_ = lock_file(file_, true, nullptr);
  registration_ = TempRegistration(file_);
}

WaitingLock::~WaitingLock() {
  registration_.release();
  unlink(file_.c_str());
  close(fd_);
}

void check_folder_unlocked(const fs::path& dir) {
  const fs::path file = dir / kFolderLockName;
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) refuse(dir, file, fd);
  close(fd);
}

bool folder_is_empty(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename() != kFolderLockName) return false;
  return true;
}

}  // namespace moesim::common
