#include "engine/backends/ucx/packed_rkey.h"

#include <cstdint>
#include <cstring>

namespace pdkv::engine::ucx {

Status check_packed_rkey(std::string_view packed) {
  if (packed.size() < kRkeyHeaderBytes) {
    return data_loss("packed rkey of " + std::to_string(packed.size()) +
                     " bytes, shorter than its header (" + std::to_string(kRkeyHeaderBytes) + ")");
  }
  uint64_t md_map = 0;
  std::memcpy(&md_map, packed.data(), sizeof md_map);  // host order, as UCX reads it
  size_t at = kRkeyHeaderBytes;
  for (int md = 0; md < 64; ++md) {
    if ((md_map >> md & 1) == 0) continue;
    if (at >= packed.size()) {
      return data_loss("packed rkey of " + std::to_string(packed.size()) +
                       " bytes ends before the key of memory domain " + std::to_string(md));
    }
    const size_t size = static_cast<uint8_t>(packed[at]);
    if (size > packed.size() - at - 1) {
      return data_loss("packed rkey of " + std::to_string(packed.size()) +
                       " bytes: the key of memory domain " + std::to_string(md) + " declares " +
                       std::to_string(size) + " bytes past its end");
    }
    at += 1 + size;
  }
  return Status();
}

std::string padded_rkey(std::string_view packed) {
  std::string out(packed);
  out.append(kRkeyReadSlack, '\0');
  return out;
}

}  // namespace pdkv::engine::ucx
