# PDKV_SANITIZE=address -> ASan + UBSan; PDKV_SANITIZE=thread -> TSan.
# Applied globally so that every library, test and helper process is instrumented.
if(PDKV_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
elseif(PDKV_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT PDKV_SANITIZE STREQUAL "")
  message(FATAL_ERROR "PDKV_SANITIZE must be '', 'address' or 'thread', not '${PDKV_SANITIZE}'")
endif()
