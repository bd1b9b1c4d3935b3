# Every dependency comes from a Debian package (see .ci/run for the list); nothing is
# downloaded at build time.
find_package(Threads REQUIRED)
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(cppzmq REQUIRED)
find_package(CLI11 REQUIRED)
find_package(PkgConfig REQUIRED)
# cpp-httplib: the HTTP clients (bootstrap client, etcd's JSON gateway). libmicrohttpd: the
# HTTP servers (http/http_listener.h says why not cpp-httplib there).
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
pkg_check_modules(MHD REQUIRED IMPORTED_TARGET libmicrohttpd)
# libsodium: cluster authentication (common/cluster_key.h: keyed BLAKE2b, HMAC-SHA-512/256
# and the CURVE keys of ZeroMQ's own CURVE mechanism) and base64 of etcd's JSON gateway
# (kv/registry/).
pkg_check_modules(SODIUM REQUIRED IMPORTED_TARGET libsodium)
find_package(ucx QUIET)
if(PDKV_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(PDKV_BUILD_PYTHON)
  # Debian's interpreter: it is the one python3-numpy and pybind11-dev are built for.
  set(Python_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python used for the pdkv package")
  find_package(Python 3 REQUIRED COMPONENTS Interpreter Development.Module)
  find_package(pybind11 CONFIG REQUIRED)
endif()
