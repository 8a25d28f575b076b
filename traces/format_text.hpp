// The text trace encoding (traces/FORMAT.md "Text encoding"), for interchange and inspection: a header
// line with magic and version, one line of JSON metadata, one line per token, and an end line with
// the token and sequence counts (so truncation is detected). Errors name "file:line".
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "traces/trace.hpp"

namespace moesim::traces {

inline constexpr std::string_view kTextMagic = "#moesim-trace";

bool has_text_magic(const void* data, std::size_t size);

std::unique_ptr<TraceReader> open_text_trace(const std::string& path);
std::unique_ptr<TraceWriter> create_text_writer(const std::string& path, const TraceMeta& meta, bool overwrite);

}  // namespace moesim::traces
