// An advisory lock on an output folder: flock(2) on DIR/.moesim.lock, which holds the holder's pid.
// Two processes never write one results folder at once; the second is refused with a UsageError
// (exit 2) naming the holder's pid. The lock file is removed when the lock is released (also on
// SIGINT/SIGTERM, common/interrupt.hpp), so finished folders hold no trace of it; one left by a
// killed process (kill -9) is stale: flock is released by the kernel, and the next run takes it over.
#pragma once

#include <filesystem>

#include "common/interrupt.hpp"

namespace moesim::common {

inline constexpr const char* kFolderLockName = ".moesim.lock";

class FolderLock {
 public:
  // Creates `dir` if missing (UsageError if it exists and is not a folder), then takes its lock.
  explicit FolderLock(const std::filesystem::path& dir);
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;
  ~FolderLock();  // removes the lock file, then releases the lock

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  TempRegistration registration_;
};

// An exclusive lock on one file that waits for the holder (flock(2), blocking): serializes work that
// several processes may otherwise do twice, such as solving one placement into a shared folder. The
// file is created, and removed when the lock is released, so a waiter re-checks what it waited for.
class WaitingLock {
 public:
  explicit WaitingLock(const std::filesystem::path& file);  // RunError if it cannot be created or locked
  WaitingLock(const WaitingLock&) = delete;
  WaitingLock& operator=(const WaitingLock&) = delete;
  ~WaitingLock();

 private:
  std::filesystem::path file_;
  int fd_ = -1;
  TempRegistration registration_;
};

// Throws UsageError naming the holder's pid when another process holds `dir`'s lock (a folder being
// written must not be read as finished); never creates the lock file.
void check_folder_unlocked(const std::filesystem::path& dir);

// True when `dir` holds nothing but (possibly) its lock file.
bool folder_is_empty(const std::filesystem::path& dir);

}  // namespace moesim::common
