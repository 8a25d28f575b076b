# moesim_target_defaults(target): warnings, optional -Werror and sanitizers for every project target.
add_library(moesim_options INTERFACE)
target_compile_options(moesim_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion
  -Wnon-virtual-dtor -Wold-style-cast -Woverloaded-virtual -Wimplicit-fallthrough>)
if(MOESIM_WERROR)
  target_compile_options(moesim_options INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
if(MOESIM_SANITIZE)
  target_compile_options(moesim_options INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  target_link_options(moesim_options INTERFACE -fsanitize=address,undefined)
endif()
if(MOESIM_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "MOESIM_FUZZ needs Clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(MOESIM_SANITIZE OR MOESIM_TSAN)
    message(FATAL_ERROR "MOESIM_FUZZ brings its own sanitizers: leave MOESIM_SANITIZE and MOESIM_TSAN off")
  endif()
  target_compile_options(moesim_options INTERFACE -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  target_link_options(moesim_options INTERFACE -fsanitize=address,undefined)
endif()
if(MOESIM_TSAN)
  if(MOESIM_SANITIZE)
    message(FATAL_ERROR "MOESIM_TSAN and MOESIM_SANITIZE cannot be combined: configure one build directory for each")
  endif()
  target_compile_options(moesim_options INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(moesim_options INTERFACE -fsanitize=thread)
endif()
target_include_directories(moesim_options INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}/generated)

# moesim_library(name SOURCES file... DEPENDS target...): a static library of the listed sources
# (relative to the calling folder), with the project's warnings and options.
function(moesim_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPENDS" ${ARGN})
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "moesim_library(${name}): no SOURCES listed")
  endif()
  add_library(${name} STATIC ${ARG_SOURCES})
  target_link_libraries(${name} PUBLIC moesim_options ${ARG_DEPENDS})
endfunction()
