# Packages built from the install rules (PdkvInstall.cmake), and the tests that install
# them the way a user would.
#   cmake --build build --target pdkv_wheel   -> build/dist/pdkv-<version>-cp311-...whl
#   cmake --build build --target package      -> build/pdkv_<version>_amd64.deb
# Both offline: Debian's python3-build/-setuptools/-wheel, CPack with dpkg-shlibdeps.

# --- Wheel ------------------------------------------------------------------------------
add_custom_target(pdkv_wheel
  COMMAND ${Python_EXECUTABLE} ${PROJECT_SOURCE_DIR}/python/packaging/build_wheel.py
          --build-dir ${CMAKE_BINARY_DIR} --out-dir ${CMAKE_BINARY_DIR}/dist
  DEPENDS pdkv pdkv_native_py pdkv_plan_py
  COMMENT "pdkv: building the wheel into build/dist"
  VERBATIM)

# --- Debian package ---------------------------------------------------------------------
# One package (library, headers, CMake and pkg-config files, CLI, Python package), as the
# wheel is one. dpkg-shlibdeps derives Depends from what the binaries link (libzmq5,
# libspdlog1.10, libucx0, ...); the interpreter, numpy and what the driver scripts run
# are added by hand.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME pdkv)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "KV-cache transfer for prefill/decode disaggregated LLM serving")
set(CPACK_PACKAGE_CONTACT "pdkv maintainers <pdkv@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # pdkv_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# The native modules are built for this interpreter's minor version only.
math(EXPR pdkv_next_python_minor "${Python_VERSION_MINOR} + 1")
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "python3 (>= 3.${Python_VERSION_MINOR}), python3 (<< 3.${pdkv_next_python_minor}), python3-numpy")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3-tqdm, iperf3")
# pdkv.metrics.register() (pdkv's figures in an engine's prometheus_client registry).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS
    "libspdlog-dev, libfmt-dev, cppzmq-dev, libzmq3-dev, pkg-config, iproute2, python3-prometheus-client")
set(CPACK_DEBIAN_COMPRESSION_TYPE gzip)  # fastest to build; the test builds it
include(CPack)

# --- Tests --------------------------------------------------------------------------------
if(PDKV_BUILD_TESTS)
  set(clean_env "PYTHONDONTWRITEBYTECODE=1")
  add_test(NAME install_consumers
           COMMAND env -u PYTHONPATH -u PDKV_BIN_DIR
                   ${PROJECT_SOURCE_DIR}/tests/install/install_consumers_test.sh
                   ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
  add_test(NAME wheel_install
           COMMAND ${PROJECT_SOURCE_DIR}/tests/install/wheel_test.sh
                   ${PROJECT_SOURCE_DIR} ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
  add_test(NAME deb_package
           COMMAND env -u PYTHONPATH -u PDKV_BIN_DIR
                   ${PROJECT_SOURCE_DIR}/tests/install/deb_test.sh
                   ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
  set_tests_properties(install_consumers wheel_install deb_package PROPERTIES
                       TIMEOUT 300 LABELS packaging ENVIRONMENT "${clean_env}")
endif()
