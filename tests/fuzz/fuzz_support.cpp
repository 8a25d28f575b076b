#include "tests/fuzz/fuzz_support.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <system_error>

#include "common/error.hpp"

namespace moesim::fuzz {

namespace {

struct Scratch {
  std::filesystem::path dir;
  Scratch() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/moesim-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("moesim fuzz: cannot create a scratch folder");
      std::abort();
    }
    dir = pattern;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const Scratch scratch;
  return scratch.dir;
}

std::string write_input(std::string_view name, const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path path = scratch_dir() / std::filesystem::path(name);
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "moesim fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path.string();
}

void expect_clean(const std::function<void()>& body) {
  try {
    body();
  } catch (const common::InputError&) {
  } catch (const common::UsageError&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moesim fuzz: unexpected exception (not a clear input error): %s\n", e.what());
    std::abort();
  }
}

std::vector<std::string_view> split_input(const std::uint8_t* data, std::size_t size, char separator,
                                          std::size_t max_parts) {
  std::vector<std::string_view> parts;
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  std::size_t start = 0;
  while (parts.size() + 1 < max_parts) {
    const std::size_t at = all.find(separator, start);
    if (at == std::string_view::npos) break;
    parts.push_back(all.substr(start, at - start));
    start = at + 1;
  }
  parts.push_back(all.substr(start));
  return parts;
}

}  // namespace moesim::fuzz
