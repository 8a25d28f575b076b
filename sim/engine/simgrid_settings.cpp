#include "sim/engine/simgrid_settings.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <simgrid/s4u.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/interrupt.hpp"
#include "sim/engine/isolate.hpp"
#include "sim/engine/latency_factor.hpp"

namespace moesim::sim {

namespace {

namespace sg4 = simgrid::s4u;

constexpr const char* kMarker = "moesim-setting-refused: ";

std::string read_all(const char* path) {
  std::string text;
  if (FILE* f = std::fopen(path, "rb")) {
    char buf[1 << 14];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  return text;
}

// The line of the child's stderr that says why: ours (an exception), else SimGrid's critical log
// line, else the last line.
std::string reason(const std::string& text) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& l : lines)
    if (l.starts_with(kMarker)) return l.substr(std::strlen(kMarker));
  for (const auto& l : lines)
    if (const auto p = l.find("/CRITICAL] "); p != std::string::npos) return l.substr(p + 11);
  return lines.empty() ? std::string("SimGrid refused it") : lines.back();
}

[[noreturn]] void check_in_child(const std::string& setting) {
  try {
    std::vector<std::string> args{"moesim", "--cfg=network/model:CM02", "--cfg=network/TCP-gamma:0",
                                  "--cfg=network/crosstraffic:0", "--cfg=" + setting};
    LatencyFactor::take_from(args);  // the engine's own setting, read as simulate() reads it
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    int argc = static_cast<int>(argv.size());
    argv.push_back(nullptr);
    xbt_log_control_set("root.thres:critical");
    sg4::Engine engine(&argc, argv.data());
    // The models are chosen when the platform is made.
    auto* zone = sg4::create_full_zone("check");
    zone->create_host("h", 1e9);
    zone->seal();
  } catch (const std::exception& e) {
    std::cerr << kMarker << e.what() << std::endl;
    _exit(1);
  }
  std::cerr.flush();
  _exit(0);
}

}  // namespace

std::string simgrid_setting_problem(const std::string& setting) {
  ForkedChild forked = [] {
    const common::DeferInterrupts held;  // the file registered before any interruption can see it
    return fork_with_file("moesim-cfg");
  }();
  if (forked.pid == 0) {
    // SimGrid writes its complaints (and, for an unknown name, every setting it has) to stderr.
    dup2(forked.fd, STDOUT_FILENO);
    dup2(forked.fd, STDERR_FILENO);
    close(forked.fd);
    check_in_child(setting);
  }
  close(forked.fd);
  int status = 0;
  while (waitpid(forked.pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string text = read_all(forked.file.c_str());
  unlink(forked.file.c_str());
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
  return reason(text);
}

}  // namespace moesim::sim
