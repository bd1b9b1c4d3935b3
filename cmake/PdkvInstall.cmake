# Install and export: `cmake --install build --prefix P` gives
#   P/bin/pdkv                              the CLI (finds its Python package relative to itself)
#   P/lib*/libpdkv.so.<major> (+ .so link)  every library layer in one shared library
#   P/include/pdkv/<layer>/*.h, pdkv/version.h
#   P/lib*/cmake/pdkv/pdkvConfig.cmake      find_package(pdkv) -> pdkv::pdkv
#   P/lib*/pkgconfig/pdkv.pc
#   P/${PDKV_INSTALL_PYTHONDIR}/pdkv        the Python package, its native modules and the
#                                           CLI's driver scripts (pdkv/_tools)
# Included last by the top-level CMakeLists.txt, once every layer's targets exist. The
# static per-layer libraries stay: tests and the CLI link them.
if(NOT PDKV_SANITIZE STREQUAL "")
  return()  # sanitizer builds are for tests, never installed
endif()
foreach(t pdkv_common pdkv_plan pdkv_engine_base pdkv_engine_lease pdkv_engine_shm pdkv_engine
          pdkv_proto pdkv_http pdkv_bootstrap pdkv_kv pdkv_kv_bootstrap pdkv)
  if(NOT TARGET ${t})
    message(STATUS "pdkv: ${t} is not built (PDKV_LAYERS), so nothing is installed")
    return()
  endif()
endforeach()

include(CMakePackageConfigHelpers)  # GNUInstallDirs and PDKV_INSTALL_PYTHONDIR: PdkvDrivers.cmake
set(PDKV_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/pdkv)

# --- Public headers ------------------------------------------------------------------
# In the tree, headers include each other as "common/status.h" (the source root is on the
# include path). Installed, they live under include/pdkv/ so they cannot collide with a
# consumer's own "common/" directory; the copy in build/include rewrites those includes to
# "pdkv/common/status.h", so one -I P/include serves both the consumer and the headers.
# Tests, fuzzers, test helpers and backend internals (engine/backends: reached only through
# engine/backend.h) are not part of the interface.
set(pdkv_header_layers common plan engine proto http bootstrap kv)
set(pdkv_public_headers "")
foreach(layer ${pdkv_header_layers})
  file(GLOB_RECURSE found CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}
       ${PROJECT_SOURCE_DIR}/${layer}/*.h)
  list(APPEND pdkv_public_headers ${found})
endforeach()
list(FILTER pdkv_public_headers EXCLUDE REGEX
     "(_test|_fuzzer|test_util|test_messages)\\.h$|/(testing|fuzz|conformance)/|^engine/backends/")
set(PDKV_STAGED_INCLUDE_DIR ${CMAKE_BINARY_DIR}/include)
set(staged "")
set(sources "")
foreach(h ${pdkv_public_headers})
  list(APPEND staged ${PDKV_STAGED_INCLUDE_DIR}/pdkv/${h})
  list(APPEND sources ${PROJECT_SOURCE_DIR}/${h})
endforeach()
string(REPLACE ";" "|" layer_alternatives "${pdkv_header_layers}")
string(REPLACE ";" "\n" header_lines "${pdkv_public_headers}")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/packaging/public_headers.txt CONTENT "${header_lines}\n")
add_custom_command(
  OUTPUT ${staged} ${PDKV_STAGED_INCLUDE_DIR}/pdkv/version.h
  COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR}
          -DDEST_DIR=${PDKV_STAGED_INCLUDE_DIR}/pdkv
          -DHEADER_LIST=${CMAKE_BINARY_DIR}/packaging/public_headers.txt
          -DLAYERS=${layer_alternatives}
          -P ${PROJECT_SOURCE_DIR}/cmake/PdkvStageHeaders.cmake
  COMMAND ${CMAKE_COMMAND} -E copy_if_different ${PDKV_GENERATED_INCLUDE_DIR}/pdkv/version.h
          ${PDKV_STAGED_INCLUDE_DIR}/pdkv/version.h
  DEPENDS ${sources} ${PDKV_GENERATED_INCLUDE_DIR}/pdkv/version.h
          ${CMAKE_BINARY_DIR}/packaging/public_headers.txt
          ${PROJECT_SOURCE_DIR}/cmake/PdkvStageHeaders.cmake
  COMMENT "pdkv: staging the public headers in build/include/pdkv"
  VERBATIM)
add_custom_target(pdkv_public_headers ALL DEPENDS ${staged})

# --- libpdkv.so ----------------------------------------------------------------------
# The layers' objects (built once, position independent) in one shared library. The static
# layers are also linked privately: the linker takes nothing from them (every symbol is
# already defined by the objects) but they bring their own dependencies (zmq, httplib, microhttpd, ucx).
set(pdkv_layer_libs pdkv_common pdkv_plan pdkv_engine_base pdkv_engine_lease pdkv_engine_shm
    pdkv_engine pdkv_proto pdkv_http pdkv_bootstrap pdkv_kv pdkv_kv_bootstrap)
if(TARGET pdkv_engine_ucx)
  list(APPEND pdkv_layer_libs pdkv_engine_ucx)
endif()
# The etcd registry and the manager factory above it: a C++ user starts a manager from
# settings as the Python binding does (kv/manager_factory.h).
foreach(lib pdkv_kv_registry pdkv_kv_factory)
  if(TARGET ${lib})
    list(APPEND pdkv_layer_libs ${lib})
  endif()
endforeach()
set(pdkv_objects "")
foreach(lib ${pdkv_layer_libs})
  list(APPEND pdkv_objects $<TARGET_OBJECTS:${lib}>)
endforeach()
add_library(pdkv_shared SHARED ${pdkv_objects})
add_library(pdkv::pdkv ALIAS pdkv_shared)
set_target_properties(pdkv_shared PROPERTIES
  OUTPUT_NAME pdkv
  EXPORT_NAME pdkv
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
add_dependencies(pdkv_shared pdkv_public_headers)
target_link_libraries(pdkv_shared
  PUBLIC Threads::Threads fmt::fmt spdlog::spdlog cppzmq
  PRIVATE ${pdkv_layer_libs})
target_include_directories(pdkv_shared INTERFACE
  $<BUILD_INTERFACE:${PDKV_STAGED_INCLUDE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(pdkv_shared INTERFACE cxx_std_20)

install(TARGETS pdkv_shared EXPORT pdkvTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT pdkv NAMELINK_COMPONENT pdkv)
install(DIRECTORY ${PDKV_STAGED_INCLUDE_DIR}/pdkv DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT pdkv)

# --- find_package(pdkv) --------------------------------------------------------------
install(EXPORT pdkvTargets NAMESPACE pdkv:: DESTINATION ${PDKV_INSTALL_CMAKEDIR}
        COMPONENT pdkv)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/templates/pdkvConfig.cmake.in
  ${CMAKE_BINARY_DIR}/packaging/pdkvConfig.cmake
  INSTALL_DESTINATION ${PDKV_INSTALL_CMAKEDIR})
# Before 1.0 a minor release may break the API, so SameMinorVersion; from 1.0 on
# SameMajorVersion (the SONAME follows the major version).
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(pdkv_compat SameMinorVersion)
else()
  set(pdkv_compat SameMajorVersion)
endif()
write_basic_package_version_file(${CMAKE_BINARY_DIR}/packaging/pdkvConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${pdkv_compat})
install(FILES ${CMAKE_BINARY_DIR}/packaging/pdkvConfig.cmake
              ${CMAKE_BINARY_DIR}/packaging/pdkvConfigVersion.cmake
        DESTINATION ${PDKV_INSTALL_CMAKEDIR} COMPONENT pdkv)

# --- pkg-config -----------------------------------------------------------------------
# ${pcfiledir} makes the file relocatable: the prefix is found from where pdkv.pc lies.
file(RELATIVE_PATH PDKV_PC_PREFIX_FROM_PCDIR /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/pdkv.pc.in
               ${CMAKE_BINARY_DIR}/packaging/pdkv.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/packaging/pdkv.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT pdkv)

# --- The CLI and the Python package ----------------------------------------------------
install(TARGETS pdkv RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pdkv)
# The receiving peer `pdkv bench engine` (and so `pdkv demo`) starts from the CLI's own
# directory.
if(TARGET pdkv_engine_peer)
  install(TARGETS pdkv_engine_peer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pdkv)
endif()
# The attacker of `pdkv chaos --hostile` (robustness/hostile), found the same way.
if(TARGET pdkv_hostile_peer)
  install(TARGETS pdkv_hostile_peer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT pdkv)
endif()
if(PDKV_BUILD_PYTHON AND TARGET pdkv_native_py)
  # The native modules and the fault shim as targets (so `cmake --install --strip` and the
  # .deb strip them), the rest of the package as files.
  set(pydest ${PDKV_INSTALL_PYTHONDIR}/pdkv)
  install(TARGETS pdkv_native_py pdkv_plan_py LIBRARY DESTINATION ${pydest} COMPONENT pdkv)
  if(TARGET pdkv_fault_shim)
    install(TARGETS pdkv_fault_shim LIBRARY DESTINATION ${pydest}/_tools/robustness/chaos
            COMPONENT pdkv)
  endif()
  install(DIRECTORY ${PDKV_PYTHON_DIR}/pdkv DESTINATION ${PDKV_INSTALL_PYTHONDIR}
          COMPONENT pdkv
          PATTERN __pycache__ EXCLUDE PATTERN "*.pyc" EXCLUDE PATTERN "*.so" EXCLUDE
          PATTERN _bin EXCLUDE)
  # Distribution metadata beside the package, as pip writes it for the wheel: Python finds
  # entry points only there, and sglang loads its plugins (the backend name `pdkv`) from
  # the entry-point group sglang.srt.plugins.
  set(distinfo ${CMAKE_BINARY_DIR}/packaging/pdkv-${PROJECT_VERSION}.dist-info)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/dist-info/METADATA.in
                 ${distinfo}/METADATA @ONLY)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/dist-info/entry_points.txt
                 ${distinfo}/entry_points.txt COPYONLY)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/dist-info/INSTALLER
                 ${distinfo}/INSTALLER COPYONLY)
  install(DIRECTORY ${distinfo} DESTINATION ${PDKV_INSTALL_PYTHONDIR} COMPONENT pdkv)
  # Run at every interpreter start: the backend name `pdkv` in sglang processes that never
  # load plugins (a spawned bootstrap-server child); see pdkv/integrations/sglang/install.py.
  install(FILES ${PROJECT_SOURCE_DIR}/python/packaging/pdkv-sglang.pth
          DESTINATION ${PDKV_INSTALL_PYTHONDIR} COMPONENT pdkv)
endif()
include(${PROJECT_SOURCE_DIR}/cmake/PdkvPackaging.cmake)
