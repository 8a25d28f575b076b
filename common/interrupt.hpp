// What an interrupted process (SIGINT, SIGTERM, SIGHUP) cleans up before it dies: the temporary files
// still being written (AtomicFile, the simulation processes' result files, a folder's lock file),
// the worker processes it started, and one line saying what was kept. The handler is
// async-signal-safe (fixed-size tables, unlink(2), kill(2), waitpid(2), write(2)); it then restores
// the default action and re-raises, so the exit status is the signal's (130 for SIGINT, 143 for SIGTERM).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <string>

namespace moesim::common {

// Installs the handler for SIGINT, SIGTERM and SIGHUP; called once by main().
void install_interrupt_handlers();

// A temporary file removed if the process is interrupted while this object lives. Paths are made
// absolute here; a path too long for the table, or a full table, is simply not registered.
class TempRegistration {
 public:
  TempRegistration() = default;
  explicit TempRegistration(const std::filesystem::path& path);
  TempRegistration(TempRegistration&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  TempRegistration& operator=(TempRegistration&& other) noexcept;
  TempRegistration(const TempRegistration&) = delete;
  TempRegistration& operator=(const TempRegistration&) = delete;
  ~TempRegistration() { release(); }
  void release();  // the file is no longer temporary (renamed into place, or removed)
  bool registered() const { return slot_ >= 0; }

 private:
  int slot_ = -1;
};

// Worker processes: sent SIGTERM and waited for when this process is interrupted.
void register_child(pid_t pid);
void unregister_child(pid_t pid);
// In a freshly forked worker: it has no workers of its own, prints nothing when interrupted (its
// parent speaks), and forgets the parent's temporaries (the parent removes those, and the worker's
// own result file, which the parent registered).
void forget_after_fork();

// While it lives, an interruption prints "moesim: interrupted by SIGINT; <text>" (else just
// "moesim: interrupted by SIGINT").
class InterruptNote {
 public:
  explicit InterruptNote(const std::string& text);
  InterruptNote(const InterruptNote&) = delete;
  InterruptNote& operator=(const InterruptNote&) = delete;
  ~InterruptNote();
};

// Holds SIGINT/SIGTERM/SIGHUP back (in the calling thread) while it lives: a short step that must
// happen whole or not at all (fork a worker and register it; stage a variant folder and rename it
// into place) is never cut in the middle. A signal that arrives meanwhile is handled at the end.
class DeferInterrupts {
 public:
  DeferInterrupts();
  DeferInterrupts(const DeferInterrupts&) = delete;
  DeferInterrupts& operator=(const DeferInterrupts&) = delete;
  ~DeferInterrupts() { restore(); }
  void restore() const;  // also for a forked child, which never runs the destructor

 private:
  sigset_t old_;
};

// Temporaries currently registered (tests).
int registered_temp_count();

}  // namespace moesim::common
