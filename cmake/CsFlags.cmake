# Compile and link flags of the house style, as interface targets so every flag is scoped to the
# targets that ask for it:
#   cs_warnings  strict warnings for every C target of ours (tests, fuzz, generated code)
#   cs_strict    cs_warnings plus -Wconversion, for src/ and helper/
# Ragel output gets per-file exemptions where it is compiled (see cs_ragel()).

add_library(cs_warnings INTERFACE)
target_compile_options(cs_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wformat=2
  -Wvla -Wswitch-enum -Wimplicit-fallthrough)
if(CS_WERROR)
  target_compile_options(cs_warnings INTERFACE -Werror)
endif()

add_library(cs_strict INTERFACE)
target_link_libraries(cs_strict INTERFACE cs_warnings)
target_compile_options(cs_strict INTERFACE -Wconversion)

# _GNU_SOURCE for the Linux interfaces we rely on (pidfd, openat2, signalfd, ...).
add_compile_definitions(_GNU_SOURCE)

if(CS_SANITIZE OR CS_FUZZ)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=all
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined -fno-sanitize-recover=all)
endif()

if(CS_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CS_FUZZ needs clang (cmake --preset fuzz)")
  endif()
  # Coverage instrumentation for everything the harnesses link; the harnesses themselves add
  # -fsanitize=fuzzer (fuzz/CMakeLists.txt).
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

if(CMAKE_BUILD_TYPE STREQUAL "Debug")
  add_compile_options(-Og -g3)
endif()

if(CS_HARDEN)
  # Fortify needs optimisation; it is only meaningful in the release preset.
  add_compile_options(-O2 -U_FORTIFY_SOURCE -D_FORTIFY_SOURCE=3 -fstack-protector-strong -fPIE)
  add_link_options(-pie -Wl,-z,relro,-z,now)
endif()

# assert() guards programmer errors and must never be compiled out (house style).
string(REPLACE "-DNDEBUG" "" CMAKE_C_FLAGS_RELEASE "${CMAKE_C_FLAGS_RELEASE}")
string(REPLACE "-DNDEBUG" "" CMAKE_C_FLAGS_RELWITHDEBINFO "${CMAKE_C_FLAGS_RELWITHDEBINFO}")
