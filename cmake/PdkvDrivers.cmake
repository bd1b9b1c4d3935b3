# Where the Python package lives once installed, relative to the prefix. Debian's
# interpreter looks in /usr/lib/python3/dist-packages; another prefix needs PYTHONPATH for
# `import pdkv` (the installed CLI finds the package without it, see cli/python_tool.h).
include(GNUInstallDirs)
set(PDKV_INSTALL_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "Where the pdkv Python package is installed, relative to the prefix")

# pdkv_add_python_driver(): ships the Python driver scripts of a CLI sub-command (`pdkv
# demo`, `pdkv bench e2e`, `pdkv chaos`) inside the Python package, at
# pdkv/_tools/<path of the calling directory in the source tree>/, e.g.
# build/python/pdkv/_tools/bench/e2e/main.py. The CLI runs them from there
# (cli/python_tool.cc), so a build tree, an install prefix, a wheel and the .deb all carry
# the same layout and none needs the source tree. *_test.py files stay behind; EXTRA names
# other files to ship (e.g. a C source a driver compiles).
#   pdkv_add_python_driver([EXTRA file...])
function(pdkv_add_python_driver)
  cmake_parse_arguments(ARG "" "" "EXTRA" ${ARGN})
  file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  file(GLOB scripts CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.py)
  list(FILTER scripts EXCLUDE REGEX "_test\\.py$")
  foreach(extra ${ARG_EXTRA})
    list(APPEND scripts ${CMAKE_CURRENT_SOURCE_DIR}/${extra})
  endforeach()
  set(dest ${PDKV_PYTHON_DIR}/pdkv/_tools/${rel})
  set(outputs "")
  foreach(src ${scripts})
    get_filename_component(name ${src} NAME)
    add_custom_command(OUTPUT ${dest}/${name}
                       COMMAND ${CMAKE_COMMAND} -E copy_if_different ${src} ${dest}/${name}
                       DEPENDS ${src}
                       COMMENT "pdkv driver: ${rel}/${name}")
    list(APPEND outputs ${dest}/${name})
  endforeach()
  string(REPLACE "/" "_" target_suffix ${rel})
  add_custom_target(pdkv_driver_${target_suffix} ALL DEPENDS ${outputs})
endfunction()
