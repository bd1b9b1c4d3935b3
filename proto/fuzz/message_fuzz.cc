// libFuzzer target: decode_message (header dispatch to every decoder) on arbitrary frames.
#include "proto/fuzz/fuzz_frames.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pdkv::proto::fuzz::check_decoder<pdkv::proto::Message>(data, size,
                                                                pdkv::proto::decode_message);
}
