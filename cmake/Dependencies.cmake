# Every external dependency, found once. Debian 12 packages only (scripts/setup installs them).
find_package(Threads REQUIRED)
# Not "EXACT 1.81": BoostConfigVersion wants 1.81.0 for EXACT.
find_package(Boost 1.81 REQUIRED CONFIG COMPONENTS json url)
find_package(simdjson 3 REQUIRED CONFIG)
find_package(OpenSSL 3 REQUIRED)
find_package(spdlog REQUIRED CONFIG)
find_package(fmt REQUIRED CONFIG)
find_package(PkgConfig REQUIRED)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
# libxxhash's runtime-dispatched XXH3 (AVX2 / AVX-512 where the CPU has them): Debian 12's shared
# library is built with DISPATCH=1 on amd64; a build without it (its static archive, another
# architecture) keeps the plain entry points. request/prepare's fingerprint chain uses it if it links.
include(CheckSymbolExists)
set(CMAKE_REQUIRED_INCLUDES ${XXHASH_INCLUDE_DIRS})
set(CMAKE_REQUIRED_LIBRARIES ${XXHASH_LINK_LIBRARIES})
check_symbol_exists(XXH3_64bits_update_dispatch "xxh_x86dispatch.h" RAMJET_XXH3_DISPATCH)
unset(CMAKE_REQUIRED_INCLUDES)
unset(CMAKE_REQUIRED_LIBRARIES)
if(RAMJET_BUILD_TESTS)
  find_package(GTest REQUIRED CONFIG)
  include(GoogleTest)
endif()
if(RAMJET_BUILD_BENCH)
  find_package(benchmark REQUIRED CONFIG)
endif()
# ZeroMQ (KV events) and MessagePack (msgpuck: the one Debian msgpack that coexists with Boost 1.81).
find_package(cppzmq REQUIRED CONFIG)   # target `cppzmq` (finds libzmq through pkg-config)
find_path(MSGPUCK_INCLUDE_DIR msgpuck.h REQUIRED)
find_library(MSGPUCK_LIBRARY NAMES libmsgpuck.a msgpuck REQUIRED)
if(NOT TARGET msgpuck::msgpuck)
  add_library(msgpuck::msgpuck STATIC IMPORTED)
  set_target_properties(msgpuck::msgpuck PROPERTIES
    IMPORTED_LOCATION "${MSGPUCK_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${MSGPUCK_INCLUDE_DIR}")
endif()
# Tokenizer (src/render/tokenize): PCRE2 with JIT for the pre-tokenizer regexes (no CMake config
# in 10.42), utf8proc for NFC and Unicode categories.
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
pkg_check_modules(UTF8PROC REQUIRED IMPORTED_TARGET libutf8proc)
