# Turns one file into a C++ header holding its bytes, so the report's .js and .css stay files of their own
# language and still ship inside the library. Run as
#   cmake -DINPUT=file -DOUTPUT=header.hpp -DSYMBOL=kName -DNAMESPACE=ns -P embed_asset.cmake
# The header defines `inline constexpr std::string_view SYMBOL` in NAMESPACE with the file's exact bytes.
foreach(var INPUT OUTPUT SYMBOL NAMESPACE)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "embed_asset.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT SYMBOL MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
  message(FATAL_ERROR "embed_asset.cmake: SYMBOL \"${SYMBOL}\" is not a C++ identifier")
endif()
if(NOT EXISTS "${INPUT}")
  message(FATAL_ERROR "embed_asset.cmake: ${INPUT}: no such file")
endif()

# Every byte becomes a \xNN escape: no content can end the literal early, NUL bytes included, and a
# \x escape always meets the next backslash or the closing quote, so no digit after it is swallowed.
file(READ "${INPUT}" hex HEX)
file(SIZE "${INPUT}" size)
string(REPEAT "[0-9a-f]" 64 line_of_32_bytes)
string(REGEX REPLACE "(${line_of_32_bytes})" "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" escaped "${hex}")
string(REGEX REPLACE "\n$" "" escaped "${escaped}")
string(REPLACE "\n" "\"\n    \"" escaped "${escaped}")

get_filename_component(input_name "${INPUT}" NAME)
set(text "// Generated from ${input_name} by embed_asset.cmake at build time; edit ${input_name}, not this file.
#pragma once

#include <cstddef>
#include <string_view>

namespace ${NAMESPACE} {

// The literal's own terminating NUL is not part of the file.
inline constexpr char ${SYMBOL}Bytes[] =
    \"${escaped}\";
static_assert(sizeof ${SYMBOL}Bytes == std::size_t{${size}} + 1, \"${input_name}: embedded size differs from the file\");
inline constexpr std::string_view ${SYMBOL}{${SYMBOL}Bytes, sizeof ${SYMBOL}Bytes - 1};

}  // namespace ${NAMESPACE}
")

# Written aside and renamed, so an interrupted build never leaves half a header behind.
file(WRITE "${OUTPUT}.tmp" "${text}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
