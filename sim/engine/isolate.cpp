// The fork wrapper: SimGrid keeps global state per process, so every simulation runs in its own child.
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <algorithm>
#include <string>
#include <type_traits>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "sim/engine/isolate.hpp"

namespace moesim::sim {

namespace {

struct Child {
  pid_t pid = -1;
  std::string file;
  std::size_t index = 0;
  common::TempRegistration temp;  // `file`, removed if this process is interrupted
};

// Forks a child that runs `fn` and leaves its result (or error) as JSON in a temporary file.
Child start_child(const std::function<SimResult()>& fn, std::size_t index) {
  // No moment between creating the file or the child and registering it (no orphan, no stray file).
  const common::DeferInterrupts held;
  ForkedChild forked = fork_with_file("moesim-sim");
  const int fd = forked.fd;
  if (forked.pid == 0) {
    held.restore();
    // The message: the JSON text (result or error), a NUL, then the timeline's events as raw values
    // (parent and child are the same program).
    nlohmann::json out;
    std::vector<TimelineEvent> timeline;
    try {
      SimResult r = fn();
      timeline = std::move(r.timeline);
      out = nlohmann::json::object();
      out["ok"] = to_json(r);
      out["ok"]["timeline_events"] = timeline.size();
    } catch (const common::InputError& e) {
      out = {{"error", {{"class", "input"}, {"message", e.what()}}}};
    } catch (const common::RunError& e) {
      out = {{"error", {{"class", "run"}, {"message", e.what()}}}};
    } catch (const std::exception& e) {
      out = {{"error", {{"class", "internal"}, {"message", e.what()}}}};
    }
    const std::string text = out.dump();
    auto put = [fd](const char* data, std::size_t size) {
      std::size_t off = 0;
      while (off < size) {
        const ssize_t n = write(fd, data + off, size - off);
        if (n <= 0) _exit(3);
        off += static_cast<std::size_t>(n);
      }
    };
    put(text.c_str(), text.size() + 1);
    put(reinterpret_cast<const char*>(timeline.data()), timeline.size() * sizeof(TimelineEvent));
    close(fd);
    _exit(0);
  }
  close(fd);
  common::register_child(forked.pid);
  return Child{forked.pid, forked.file, index, std::move(forked.temp)};
}

SimResult finish_child(const Child& c, int status) {
  std::string text;
  if (FILE* f = std::fopen(c.file.c_str(), "rb")) {
    char buf[1 << 16];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  unlink(c.file.c_str());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty())
    throw std::runtime_error("the simulation process died (" +
                             std::string(WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "no result") + ")");
  const std::size_t nul = text.find('\0');
  if (nul == std::string::npos) throw std::runtime_error("the simulation process left an incomplete result");
  auto j = nlohmann::json::parse(std::string_view(text).substr(0, nul));
  if (j.contains("error")) {
    const auto cls = j["error"]["class"].get<std::string>();
    const auto msg = j["error"]["message"].get<std::string>();
    if (cls == "input") throw common::InputError(msg);
    if (cls == "run") throw common::RunError(msg);
    throw std::runtime_error(msg);
  }
  const auto& ok = j.at("ok");
  SimResult r = sim_result_from_json(ok);
  const auto events = ok.at("timeline_events").get<std::size_t>();
  if (text.size() - nul - 1 != events * sizeof(TimelineEvent))
    throw std::runtime_error("the simulation process left an incomplete timeline");
  static_assert(std::is_trivially_copyable_v<TimelineEvent>);
  r.timeline.resize(events);
  if (events > 0) std::memcpy(r.timeline.data(), text.data() + nul + 1, events * sizeof(TimelineEvent));
  return r;
}

}  // namespace

SimResult run_isolated(const std::function<SimResult()>& fn) { return run_isolated_all({fn}, 1).front(); }

std::vector<SimResult> run_isolated_all(const std::vector<std::function<SimResult()>>& fns, int jobs,
                                        const std::function<void()>& meanwhile) {
  std::vector<SimResult> results(fns.size());
  std::vector<Child> running;
  std::size_t next = 0;
  std::exception_ptr first_error;
  bool meanwhile_done = false;
  jobs = std::max(1, jobs);
  while (next < fns.size() || !running.empty()) {
    while (!first_error && next < fns.size() && static_cast<int>(running.size()) < jobs) {
      running.push_back(start_child(fns[next], next));
      ++next;
    }
    if (meanwhile && !meanwhile_done) {
      meanwhile_done = true;
      try {
        meanwhile();
      } catch (...) {
        if (!first_error) first_error = std::current_exception();
      }
    }
    if (running.empty()) break;
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      throw common::RunError(std::string("waitpid failed: ") + std::strerror(errno));
    }
    auto it = std::find_if(running.begin(), running.end(), [&](const Child& c) { return c.pid == pid; });
    if (it == running.end()) continue;
    common::unregister_child(pid);
    const Child c = std::move(*it);
    running.erase(it);
    try {
      results[c.index] = finish_child(c, status);
    } catch (...) {
      if (!first_error) first_error = std::current_exception();
    }
  }
  if (meanwhile && !meanwhile_done) meanwhile();  // no children at all
  if (first_error) std::rethrow_exception(first_error);
  return results;
}

ForkedChild fork_with_file(std::string_view stem) {
  const char* tmpdir = std::getenv("TMPDIR");
  std::string name = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/" + std::string(stem) + "-XXXXXX";
  const int fd = mkstemp(name.data());
  if (fd < 0) throw common::RunError(std::string("cannot create a temporary file: ") + std::strerror(errno));
  ForkedChild c{-1, fd, name, common::TempRegistration(name)};
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  c.pid = fork();
  if (c.pid < 0) {
    close(fd);
    unlink(name.c_str());
    throw common::RunError(std::string("fork failed: ") + std::strerror(errno));
  }
  if (c.pid == 0) {
    common::forget_after_fork();
    c.temp.release();
  }
  return c;
}

}  // namespace moesim::sim
