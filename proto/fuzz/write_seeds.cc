// proto_fuzz_seeds <dir>: writes the seed corpus of every proto fuzzer into
// <dir>/<target>/ (sample, minimal and pseudo-random messages of the target's type; the
// message fuzzer gets all of them).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "proto/fuzz/fuzz_frames.h"
#include "proto/test_messages.h"

namespace fs = std::filesystem;
using namespace pdkv::proto;  // NOLINT: small tool

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: proto_fuzz_seeds <dir>\n");
    return 2;
  }
  static const char* kTargets[] = {"buffer_registration_fuzz",
                                   "pre_allocation_fuzz",
                                   "transfer_status_fuzz",
                                   "abort_fuzz",
                                   "registration_result_fuzz",
                                   "ping_fuzz",
                                   "pong_fuzz"};
  std::vector<Message> all = testing::sample_messages();
  for (const Message& m : testing::minimal_messages()) all.push_back(m);
  for (uint64_t seed = 0; seed < 70; ++seed) all.push_back(testing::random_message(seed));
  int n = 0;
  for (const Message& m : all) {
    std::string bytes = fuzz::write_fuzz_input(encode_message(m));
    for (const char* target : {kTargets[m.index()], "message_fuzz"}) {
      fs::path dir = fs::path(argv[1]) / target;
      fs::create_directories(dir);
      std::ofstream(dir / ("seed_" + std::to_string(n)), std::ios::binary) << bytes;
    }
    ++n;
  }
  std::printf("wrote %d seeds\n", n);
  return 0;
}
