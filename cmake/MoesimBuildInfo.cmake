# The source revision at configure time (with a fallback when there is no git) and the version,
# written to generated/common/build_info.hpp for reports' context blocks.
set(MOESIM_GIT_REVISION "unknown (no git)")
find_program(GIT_EXECUTABLE git)
if(GIT_EXECUTABLE AND EXISTS "${PROJECT_SOURCE_DIR}/.git")
  execute_process(COMMAND ${GIT_EXECUTABLE} -C ${PROJECT_SOURCE_DIR} rev-parse --short=12 HEAD
    OUTPUT_VARIABLE _rev OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0 AND _rev)
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${PROJECT_SOURCE_DIR} status --porcelain --untracked-files=no
      OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    if(_dirty)
      set(_rev "${_rev}-dirty")
    endif()
    set(MOESIM_GIT_REVISION "${_rev}")
  endif()
endif()
configure_file(${PROJECT_SOURCE_DIR}/common/build_info.hpp.in ${PROJECT_BINARY_DIR}/generated/common/build_info.hpp @ONLY)
