#include "common/interrupt.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>

namespace moesim::common {

namespace {

// Fixed-size tables, so that the handler neither allocates nor locks. A temp slot is claimed
// (kFree -> kFilling), filled, then published (kLive); the handler reads only kLive slots.
constexpr int kTempSlots = 128;
constexpr int kChildSlots = 256;
constexpr int kFree = 0, kFilling = 1, kLive = 2;

struct TempSlot {
  std::atomic<int> state{kFree};
  char path[PATH_MAX];
};
TempSlot g_temps[kTempSlots];
std::atomic<pid_t> g_children[kChildSlots];
char g_note[2048];
std::atomic<bool> g_note_on{false};
std::atomic<bool> g_silent{false};  // a worker process: its parent speaks

static_assert(std::atomic<int>::is_always_lock_free && std::atomic<pid_t>::is_always_lock_free &&
              std::atomic<bool>::is_always_lock_free);

void put(const char* s) {
  std::size_t n = std::strlen(s);  // strlen is async-signal-safe in practice (POSIX.1-2016 lists it)
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<std::size_t>(w);
  }
}

void on_interrupt(int sig) {
  const int saved = errno;
  for (auto& t : g_temps)
    if (t.state.load() == kLive) ::unlink(t.path);
  pid_t stopped[kChildSlots];
  int n = 0;
  for (auto& c : g_children)
    if (const pid_t pid = c.exchange(0); pid > 0) {
      ::kill(pid, SIGTERM);
      stopped[n++] = pid;
    }
  for (int i = 0; i < n; ++i)
    while (::waitpid(stopped[i], nullptr, 0) < 0 && errno == EINTR) {
    }
  if (!g_silent.load()) {
    put("moesim: interrupted by ");
    put(sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "SIGHUP");
    if (g_note_on.load()) {
      put("; ");
      put(g_note);
    }
    put("\n");
  }
  errno = saved;
  // The default action, delivered when the handler returns (the signal is blocked until then).
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, s);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    // A signal ignored by whoever started us (nohup, `cmd &` in a non-interactive shell) stays ignored.
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(s, &sa, nullptr);
  }
}

TempRegistration::TempRegistration(const std::filesystem::path& path) {
  std::error_code ec;
  const std::string abs = std::filesystem::absolute(path, ec).string();
  if (ec || abs.size() >= PATH_MAX) return;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = kFree;
    if (g_temps[i].state.compare_exchange_strong(expected, kFilling)) {
      std::memcpy(g_temps[i].path, abs.c_str(), abs.size() + 1);
      g_temps[i].state.store(kLive);
      slot_ = i;
      return;
    }
  }
}

TempRegistration& TempRegistration::operator=(TempRegistration&& other) noexcept {
  if (this != &other) {
    release();
    slot_ = other.slot_;
    other.slot_ = -1;
  }
  return *this;
}

void TempRegistration::release() {
  if (slot_ >= 0) g_temps[slot_].state.store(kFree);
  slot_ = -1;
}

DeferInterrupts::DeferInterrupts() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, &old_);
}

void DeferInterrupts::restore() const {
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

int registered_temp_count() {
  int n = 0;
  for (const auto& t : g_temps) n += t.state.load() == kLive;
  return n;
}

void register_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t expected = 0;
    if (c.compare_exchange_strong(expected, pid)) return;
  }
}

void unregister_child(pid_t pid) {
  for (auto& c : g_children) {
    pid_t expected = pid;
    if (c.compare_exchange_strong(expected, 0)) return;
  }
}

void forget_after_fork() {
  for (auto& c : g_children) c.store(0);
  for (auto& t : g_temps) t.state.store(kFree);
  g_note_on.store(false);
  g_silent.store(true);
}

InterruptNote::InterruptNote(const std::string& text) {
  g_note_on.store(false);
  const std::size_t n = std::min(text.size(), sizeof g_note - 1);
  std::memcpy(g_note, text.data(), n);
  g_note[n] = '\0';
  g_note_on.store(true);
}

InterruptNote::~InterruptNote() {
  g_note_on.store(false);
}

}  // namespace moesim::common
