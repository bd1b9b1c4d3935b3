# Warning flags shared by every pdkv target (pdkv_warnings is an INTERFACE target).
add_library(pdkv_warnings INTERFACE)
target_compile_options(pdkv_warnings INTERFACE -Wall -Wextra -Wpedantic -Wno-unused-parameter)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  # common/mutex.h annotates which mutex guards which field; clang checks it.
  target_compile_options(pdkv_warnings INTERFACE -Wthread-safety -Werror=thread-safety)
endif()
