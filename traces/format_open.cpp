// open_trace / create_trace_writer: the one entry point to both encodings (traces/trace.hpp).
#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/error.hpp"
#include "common/strings.hpp"
#include "traces/format_binary.hpp"
#include "traces/format_text.hpp"
#include "traces/load_trace.hpp"
#include "traces/trace.hpp"

namespace moesim::traces {

std::unique_ptr<TraceReader> open_trace(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw common::InputError(path + ": is a folder, expected a trace file (.mtr or text)");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw common::InputError(path + ": cannot open: " + std::strerror(errno));
  unsigned char head[16] = {};
  const std::size_t got = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  if (got == 0) throw common::InputError(path + ": empty file, expected a moesim trace");
  if (has_binary_magic(head, got)) return open_binary_trace(path);
  if (has_text_magic(head, got)) return open_text_trace(path);
  if (got >= kLoadMagic.size() && std::memcmp(head, kLoadMagic.data(), kLoadMagic.size()) == 0)
    throw common::InputError(path + ": a load-only trace (per-step expert token counts, no per-token routes), not a "
                             "routing trace: it can be used as a study's trace: and by \"moesim trace stats\"; "
                             "commands that need each token's experts cannot read it");
  std::string shown;
  for (std::size_t i = 0; i < std::min<std::size_t>(got, 12); ++i) {
    const unsigned char c = head[i];
    if (c >= 0x20 && c < 0x7f) {
      shown += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      shown += hex;
    }
  }
  throw common::InputError(path + ": byte offset 0: not a moesim trace: expected the binary magic \"\\x89MTR\" or the "
                           "text header \"#moesim-trace\", got \"" + shown + "\"" +
                           " (to read another format, use \"moesim trace import\")");
}

std::unique_ptr<TraceWriter> create_trace_writer(const std::string& path, const TraceMeta& meta, Encoding encoding,
                                                 bool overwrite) {
  if (encoding == Encoding::kText) return create_text_writer(path, meta, overwrite);
  return create_binary_writer(path, meta, overwrite);
}

Encoding encoding_for_path(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".txt" || ext == ".trace") return Encoding::kText;
  return Encoding::kBinary;
}

}  // namespace moesim::traces
