# cmake -P script (PdkvInstall.cmake): copies the headers listed in HEADER_LIST (a file,
# one path relative to SOURCE_DIR per line) to
# DEST_DIR, rewriting `#include "<layer>/x.h"` to `#include "pdkv/<layer>/x.h"` for the
# layers in LAYERS ("common|plan|..."), so installed headers find each other under
# include/pdkv/.
file(STRINGS ${HEADER_LIST} headers)
foreach(h ${headers})
  file(READ ${SOURCE_DIR}/${h} text)
  string(REGEX REPLACE "#include \"(${LAYERS})/" "#include \"pdkv/\\1/" text "${text}")
  file(WRITE ${DEST_DIR}/${h} "${text}")
endforeach()
