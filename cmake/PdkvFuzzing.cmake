# libFuzzer targets (R5). With PDKV_BUILD_FUZZERS=ON and clang, every target of the build
# is compiled with -fsanitize=fuzzer-no-link,address,undefined (so the libraries under test
# carry coverage instrumentation, not only the fuzzer's own file), and
#   pdkv_add_fuzzer(<name> SOURCES <files...> LIBS <targets...>)
# links a fuzzer binary into build*/bin with -fsanitize=fuzzer. Without the option the
# function is not defined and layers skip their fuzz/ directories. bench/fuzz drives it.
if(NOT PDKV_BUILD_FUZZERS)
  return()
endif()
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "PDKV_BUILD_FUZZERS=ON needs clang (-DCMAKE_CXX_COMPILER=clang++-14)")
endif()
if(NOT PDKV_SANITIZE STREQUAL "")
  message(FATAL_ERROR "PDKV_BUILD_FUZZERS=ON already enables ASan+UBSan; leave PDKV_SANITIZE empty")
endif()

add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
add_custom_target(pdkv_fuzzers)

function(pdkv_add_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_LIBS} pdkv_warnings)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  add_dependencies(pdkv_fuzzers ${name})
endfunction()
