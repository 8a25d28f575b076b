#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace moesim::testing {

namespace fs = std::filesystem;

fs::path source_dir() { return MOESIM_SOURCE_DIR; }
fs::path reference_dir() { return source_dir() / "models" / "reference"; }
fs::path test_data_dir() { return MOESIM_TEST_DATA_DIR; }
fs::path shared_data_dir() { return fs::weakly_canonical(fs::path(MOESIM_SHARED_DATA_DIR)); }
bool shared_data_available() { return fs::is_directory(shared_data_dir() / "routing"); }

bool skip_without_shared_data() {
  if (shared_data_available()) return false;
  if (std::getenv("MOESIM_CTEST") != nullptr) {
    std::cout << "SKIPPED: " << shared_data_dir() << " not found (real-data test)\n" << std::flush;
    std::_Exit(77);
  }
  MESSAGE("skipped: ../shared/data not found");
  return true;
}

TempDir::TempDir() {
  std::random_device rd;
  for (int attempt = 0; attempt < 100; ++attempt) {
    fs::path p = fs::temp_directory_path() / ("moesim-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    if (fs::create_directory(p)) {
      path_ = p;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary folder");
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

static std::string slurp_fd(int fd) {
  std::string s;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) s.append(buf, static_cast<size_t>(n));
  return s;
}

CliResult run_program(const std::string& program, const std::vector<std::string>& args) {
  TempDir tmp;
  fs::path out_path = tmp / "stdout";
  fs::path err_path = tmp / "stderr";
  std::cout.flush();
  std::cerr.flush();
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int in = open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) _exit(127);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(program.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  int fd = open(out_path.c_str(), O_RDONLY);
  if (fd >= 0) {
    r.out = slurp_fd(fd);
    close(fd);
  }
  fd = open(err_path.c_str(), O_RDONLY);
  if (fd >= 0) {
    r.err = slurp_fd(fd);
    close(fd);
  }
  return r;
}

CliResult run_moesim(const std::vector<std::string>& args) {
  const char* bin = std::getenv("MOESIM_BIN");
  std::string program = bin ? bin : (std::string(MOESIM_BINARY_DIR) + "/sim/moesim");
  return run_program(program, args);
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::vector<std::string> marked_lines(const std::string& text, const std::string& name) {
  const std::string begin = "<!-- papers:" + name + ":begin -->";
  const std::string end = "<!-- papers:" + name + ":end -->";
  const auto b = text.find(begin);
  const auto e = text.find(end);
  REQUIRE_MESSAGE(b != std::string::npos, "no " << begin);
  REQUIRE_MESSAGE(e != std::string::npos, "no " << end);
  REQUIRE(b < e);
  std::vector<std::string> out;
  std::stringstream body(text.substr(b + begin.size(), e - b - begin.size()));
  for (std::string line; std::getline(body, line);)
    if (line.find_first_not_of(' ') != std::string::npos) out.push_back(line);
  return out;
}

}  // namespace moesim::testing
