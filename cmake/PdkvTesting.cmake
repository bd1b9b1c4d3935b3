# The one TSan suppression list (common/testing/tsan_suppressions.cc): test binaries that use
# real ZeroMQ, libsodium, cpp-httplib or libmicrohttpd list it among their sources.
set(PDKV_TSAN_SUPPRESSIONS ${PROJECT_SOURCE_DIR}/common/testing/tsan_suppressions.cc)

# pdkv_add_test(<name> SOURCES <files...> LIBS <targets...> [TIMEOUT <s>] [SERIAL])
# Builds a GoogleTest binary in build/bin and registers each of its tests with CTest.
# Tests that start processes find them in build/bin through PDKV_BIN_DIR.
# SERIAL marks tests that measure time or load the machine (run alone under ctest -j).
function(pdkv_add_test name)
  cmake_parse_arguments(ARG "SERIAL" "TIMEOUT" "SOURCES;LIBS" ${ARGN})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} GTest::gtest GTest::gtest_main pdkv_warnings)
  set(props ENVIRONMENT "PDKV_BIN_DIR=${CMAKE_BINARY_DIR}/bin" TIMEOUT ${ARG_TIMEOUT})
  if(ARG_SERIAL)
    list(APPEND props RUN_SERIAL TRUE)
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES ${props})
endfunction()
