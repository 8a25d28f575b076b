// Shared by the fuzz targets: where an input is written when the code under test reads files, and
// the rule every target applies. A parser given any bytes must either accept them or throw
// common::InputError / common::UsageError (a clear message for the user); any other exception, a
// crash, a hang or a sanitizer report is a bug. The targets are built two ways (tests/fuzz/CMakeLists.txt):
// with libFuzzer under Clang (MOESIM_FUZZ=ON), and with replay_main.cpp, which runs the seeds and the
// regression inputs under tests/data/fuzz/ through the same entry point in every test build.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace moesim::fuzz {

// A private folder for this process's inputs (created once, under $TMPDIR or /tmp, removed at exit).
const std::filesystem::path& scratch_dir();
// Writes `data` to scratch_dir()/name (replacing it) and returns the path.
std::string write_input(std::string_view name, const std::uint8_t* data, std::size_t size);
// Runs `body`; InputError and UsageError are the expected rejections. Anything else aborts with the
// exception's message, so that the fuzzer records the input.
void expect_clean(const std::function<void()>& body);
// The input split at `separator` bytes into at most `max_parts` pieces (the last keeps the rest).
std::vector<std::string_view> split_input(const std::uint8_t* data, std::size_t size, char separator,
                                          std::size_t max_parts);

}  // namespace moesim::fuzz
