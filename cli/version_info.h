// The text `pdkv --version` prints: the library release and, beside it, the wire
// protocol versions a peer must share (a release can keep or change them).
//
// Thread safety: pure function.
#pragma once

#include <string>

namespace pdkv::cli {

// e.g. "pdkv 0.1.0 (control protocol 3, lease wire 1)".
std::string version_text();

}  // namespace pdkv::cli
