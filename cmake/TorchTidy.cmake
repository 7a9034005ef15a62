# TorchTidy.cmake: torch-tidy's checks on a CMake project's C++ sources as
# they compile, through CMake's CXX_CLANG_TIDY support (CMake >= 3.6): each
# compile first runs clang-tidy-19 with the torch-tidy plugin, and the
# findings appear in the build output.
#
#   include(/path/to/torch-tidy/cmake/TorchTidy.cmake)
#   torch_tidy_enable()                    # targets defined after this call
#   torch_tidy_enable(TARGETS app core)    # or just these targets
#
# torch_tidy_enable() arguments, all optional:
#   TARGETS <target>...          check these targets (else: every C++ target
#                                created after the call, in this directory and
#                                below)
#   CHECKS <globs>               default "-*,torch-*"
#   WARNINGS_AS_ERRORS <globs>   findings of these checks fail the build
#   CONFIG_FILE <path>           use this .clang-tidy instead of the search
#                                above each source file
#   EXTRA_ARGS <arg>...          more clang-tidy arguments
#
# Cache variables (set them with -D when the defaults do not fit):
#   TORCH_TIDY_CLANG_TIDY  clang-tidy 19, which the plugin was built for
#   TORCH_TIDY_PLUGIN      libTorchTidy.so (default: the torch-tidy build or
#                          installation this file belongs to)

cmake_minimum_required(VERSION 3.20)
include_guard(GLOBAL)

find_program(TORCH_TIDY_CLANG_TIDY NAMES clang-tidy-19 clang-tidy
             HINTS /usr/lib/llvm-19/bin
             DOC "clang-tidy 19, the host of the torch-tidy plugin")
# cmake/ in a source tree next to build/lib, or share/torch-tidy/cmake in an
# installation next to lib/.
find_file(TORCH_TIDY_PLUGIN libTorchTidy.so
          HINTS ${CMAKE_CURRENT_LIST_DIR}/../build/lib
                ${CMAKE_CURRENT_LIST_DIR}/../../../lib
          NO_DEFAULT_PATH
          DOC "The torch-tidy clang-tidy plugin, libTorchTidy.so")

function(torch_tidy_enable)
  cmake_parse_arguments(PARSE_ARGV 0 ARG ""
    "CHECKS;WARNINGS_AS_ERRORS;CONFIG_FILE" "TARGETS;EXTRA_ARGS")
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "torch_tidy_enable: unknown arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT TORCH_TIDY_CLANG_TIDY)
    message(FATAL_ERROR "torch_tidy_enable: clang-tidy-19 not found; set "
                        "-DTORCH_TIDY_CLANG_TIDY=/path/to/clang-tidy-19")
  endif()
  if(NOT TORCH_TIDY_PLUGIN OR NOT EXISTS "${TORCH_TIDY_PLUGIN}")
    message(FATAL_ERROR "torch_tidy_enable: the torch-tidy plugin was not "
                        "found (TORCH_TIDY_PLUGIN='${TORCH_TIDY_PLUGIN}'); "
                        "build torch-tidy and set "
                        "-DTORCH_TIDY_PLUGIN=/abs/path/to/libTorchTidy.so")
  endif()
  if(NOT DEFINED ARG_CHECKS)
    set(ARG_CHECKS "-*,torch-*")
  endif()

  set(command ${TORCH_TIDY_CLANG_TIDY} "--load=${TORCH_TIDY_PLUGIN}"
              "--checks=${ARG_CHECKS}")
  if(DEFINED ARG_WARNINGS_AS_ERRORS)
    list(APPEND command "--warnings-as-errors=${ARG_WARNINGS_AS_ERRORS}")
  endif()
  if(DEFINED ARG_CONFIG_FILE)
    get_filename_component(config "${ARG_CONFIG_FILE}" ABSOLUTE)
    if(NOT EXISTS "${config}")
      message(FATAL_ERROR "torch_tidy_enable: CONFIG_FILE '${config}' does not exist")
    endif()
    list(APPEND command "--config-file=${config}")
  endif()
  list(APPEND command ${ARG_EXTRA_ARGS})

  if(ARG_TARGETS)
    foreach(target IN LISTS ARG_TARGETS)
      if(NOT TARGET ${target})
        message(FATAL_ERROR "torch_tidy_enable: no target '${target}'")
      endif()
      set_property(TARGET ${target} PROPERTY CXX_CLANG_TIDY "${command}")
    endforeach()
  else()
    # Targets copy CMAKE_CXX_CLANG_TIDY when they are created.
    set(CMAKE_CXX_CLANG_TIDY "${command}" PARENT_SCOPE)
  endif()
endfunction()
