# Helpers: one library per folder of src/, warnings as errors on our targets only.

function(ramjet_target_options target)
  target_compile_options(${target} PRIVATE -Wall -Wextra)
  # Warnings fail every build but a profile-guided one, whose inlining (and so its flow
  # warnings) follows a training run, not the source alone.
  if(NOT RAMJET_PGO STREQUAL "use")
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 false positive on Asio's coroutine-frame operator new/delete pair at -O2.
    target_compile_options(${target} PRIVATE -Wno-mismatched-new-delete)
  endif()
  if(RAMJET_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer
                                             -fno-sanitize-recover=undefined)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
  if(RAMJET_TSAN)
    # GCC 12 warns (-Wtsan) that TSan does not model the std::atomic_thread_fence inside
    # Boost.Asio; that warning is about Asio, not our code, and must not fail the build.
    target_compile_options(${target} PRIVATE -fsanitize=thread -fno-omit-frame-pointer
                           $<$<CXX_COMPILER_ID:GNU>:-Wno-tsan>)
    target_link_options(${target} PRIVATE -fsanitize=thread)
  endif()
endfunction()

# ramjet_library(<name> SOURCES ... DEPS ...) -> target ramjet_<name>, includes rooted at src/
function(ramjet_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ramjet_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ramjet_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(ramjet_${name} PUBLIC ${ARG_DEPS})
  # No BOOST_BEAST_USE_STD_STRING_VIEW: since Boost 1.81 beast::string_view is always
  # boost::core::string_view (it converts to and from std::string_view), and the macro only makes
  # every Beast include print a deprecation note.
  target_compile_definitions(ramjet_${name} PUBLIC BOOST_ASIO_NO_DEPRECATED)
  ramjet_target_options(ramjet_${name})
endfunction()

# ramjet_test(<name> SOURCES ... DEPS ...) -> gtest binary registered with ctest
function(ramjet_test name)
  if(NOT RAMJET_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest_main GTest::gmock)
  ramjet_target_options(${name})
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS unit)
endfunction()

function(ramjet_executable name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  ramjet_target_options(${name})
endfunction()
