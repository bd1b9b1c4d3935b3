// libFuzzer target: decode_pre_allocation on arbitrary frames (see fuzz_frames.h).
#include "proto/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pdkv::proto::fuzz::check_decoder<pdkv::proto::PreAllocation>(
      data, size, pdkv::proto::decode_pre_allocation);
}
