# Sanitizer and fuzzer builds (scripts/sanitize.sh and scripts/fuzz.sh drive them; CI runs both).
#   -DMOE_SANITIZE=address  AddressSanitizer + UndefinedBehaviorSanitizer, halting on the first error
#   -DMOE_SANITIZE=thread   ThreadSanitizer
#   -DMOE_FUZZ=ON           clang only: libFuzzer coverage on every target (implies address) and the fuzzers
#                           of tests/fuzz (one per parser)
# Everything is compiled with the flags, so a report points into our code, not at an uninstrumented edge.
set(MOE_SANITIZE "" CACHE STRING "Sanitizers: address (ASan + UBSan), thread (TSan), or empty")
set_property(CACHE MOE_SANITIZE PROPERTY STRINGS "" address thread)
option(MOE_FUZZ "Build the libFuzzer fuzzers of tests/fuzz (clang; implies MOE_SANITIZE=address)" OFF)

if(MOE_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "MOE_FUZZ=ON needs clang (libFuzzer): configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(MOE_SANITIZE STREQUAL "thread")
    message(FATAL_ERROR "MOE_FUZZ=ON runs under AddressSanitizer: drop -DMOE_SANITIZE=thread")
  endif()
  set(MOE_SANITIZE address)
endif()

set(moe_sanitize_flags "")
if(MOE_SANITIZE STREQUAL "address")
  # NOTE: float-cast-overflow is not part of GCC's -fsanitize=undefined; a forged config's 1e300 where an
  # integer is expected is exactly that bug, so it is asked for by name.
  set(moe_sanitize_flags -fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all)
elseif(MOE_SANITIZE STREQUAL "thread")
  set(moe_sanitize_flags -fsanitize=thread)
elseif(NOT MOE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "MOE_SANITIZE='${MOE_SANITIZE}': use address, thread or leave it empty")
endif()

if(moe_sanitize_flags)
  if(MOE_WITH_CUDA)
    message(FATAL_ERROR "MOE_SANITIZE needs -DMOE_CUDA=OFF (the GPU code runs under compute-sanitizer instead: "
                        "scripts/device/run.sh sanitizer)")
  endif()
  list(APPEND moe_sanitize_flags -fno-omit-frame-pointer -g1)
  # NOTE: -O1 (after the build type's -O3, so it wins) is what the sanitizers recommend, and it compiles
  # several times faster than -O3 with UBSan's checks, which keeps CI's sanitizer jobs short.
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${moe_sanitize_flags};-O1>")
  add_link_options(${moe_sanitize_flags})
  message(STATUS "moe: sanitizers ${MOE_SANITIZE}")
endif()
if(MOE_FUZZ)
  # Coverage for libFuzzer in every object; only the fuzzers link libFuzzer's main (-fsanitize=fuzzer).
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>")
  message(STATUS "moe: libFuzzer fuzzers (tests/fuzz)")
endif()

# moe_clang_target_pragmas(): clang ignores `#pragma GCC target(...)`, which the CPU kernels use to compile
# AVX2/AVX-512 code in an otherwise generic build. Under clang (the fuzz build), each file of `dirs` that
# uses the pragma gets the union of its targets on its command line instead. NOTE: a file with a generic part
# may then use those instructions outside its cpuid checks, so such a file marks its kernels with
# __attribute__((target(...))) instead (fast_router.cpp), which both compilers honour per function.
function(moe_clang_target_pragmas)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    return()
  endif()
  foreach(dir ${ARGN})
    file(GLOB sources ${PROJECT_SOURCE_DIR}/${dir}/*.cpp)
    foreach(source ${sources})
      file(STRINGS ${source} pragmas REGEX "^#pragma GCC target\\(")
      set(flags)
      foreach(pragma ${pragmas})
        string(REGEX MATCH "\"([^\"]*)\"" unused "${pragma}")
        string(REPLACE "," ";" features "${CMAKE_MATCH_1}")
        foreach(feature ${features})
          list(APPEND flags -m${feature})
        endforeach()
      endforeach()
      if(flags)
        list(REMOVE_DUPLICATES flags)
        set_property(SOURCE ${source} DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} APPEND PROPERTY COMPILE_OPTIONS ${flags})
      endif()
    endforeach()
  endforeach()
endfunction()

# moe_tsan_exclusions(): under TSan, the bench-only ceiling probes (src/cpu/ceilings.cpp) are left
# uninstrumented: their target_clones ifunc resolver runs before TSan's runtime is up and crashes every
# binary that links moe_cpu. (fast_router.cpp drops its clones under TSan instead: it runs on the pool.)
function(moe_tsan_exclusions)
  if(MOE_SANITIZE STREQUAL "thread")
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/cpu/ceilings.cpp DIRECTORY ${PROJECT_SOURCE_DIR}/src/cpu APPEND
                 PROPERTY COMPILE_OPTIONS -fno-sanitize=thread)
  endif()
endfunction()
