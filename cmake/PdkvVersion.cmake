# The one version of pdkv: project(VERSION) in the top-level CMakeLists.txt. This file
# turns it into the C++ header <pdkv/version.h> (PDKV_VERSION_* macros), the Python
# module pdkv/_version.py (pdkv.__version__) and, through PdkvInstall.cmake, the CMake
# package version file, pdkv.pc and the wheel and .deb versions.
#
# The wire protocol versions are not restated here: they stay in proto/wire.h
# (kProtocolVersion) and engine/lease/wire.h (kWireVersion), read at configure time so
# `pdkv --version` and pdkv.PROTOCOL_VERSION report them; cli/version_info.cc
# static_asserts the copies against the constants, so they cannot drift.

function(pdkv_read_constant out file name)
  file(STRINGS ${PROJECT_SOURCE_DIR}/${file} line REGEX "constexpr [a-z0-9_]+ ${name} = [0-9]+;")
  if(NOT line MATCHES "${name} = ([0-9]+)")
    message(FATAL_ERROR "pdkv: cannot read ${name} from ${file}")
  endif()
  set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               ${PROJECT_SOURCE_DIR}/${file})
endfunction()

pdkv_read_constant(PDKV_PROTOCOL_VERSION proto/wire.h kProtocolVersion)
pdkv_read_constant(PDKV_LEASE_WIRE_VERSION engine/lease/wire.h kWireVersion)
pdkv_read_constant(PDKV_TCP_WIRE_VERSION engine/backends/tcp/tcp_frame.h kVersion)

set(PDKV_GENERATED_INCLUDE_DIR ${CMAKE_BINARY_DIR}/generated)
configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/version.h.in
               ${PDKV_GENERATED_INCLUDE_DIR}/pdkv/version.h @ONLY)
configure_file(${PROJECT_SOURCE_DIR}/cmake/templates/_version.py.in
               ${PDKV_PYTHON_DIR}/pdkv/_version.py @ONLY)

# Header-only target for <pdkv/version.h> inside the build tree.
add_library(pdkv_version INTERFACE)
target_include_directories(pdkv_version INTERFACE ${PDKV_GENERATED_INCLUDE_DIR})
