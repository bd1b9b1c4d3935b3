// An installed pdkv's consumer (tests/install): two transfer engines in this process move
// a page pattern over TCP from registered memory to registered memory, a write outside the
// destination's registered region is refused, and the headers' version is the library's.
// Usage: pdkv_consumer <expected version>. Exit 0 when all of it holds.
#include <pdkv/engine/transfer_engine.h>
#include <pdkv/version.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int fail(const char* what, const pdkv::Status& status) {
  std::fprintf(stderr, "pdkv_consumer: %s: %s\n", what, status.to_string().c_str());
  return 1;
}

uint64_t addr_of(std::vector<uint8_t>& v) { return reinterpret_cast<uintptr_t>(v.data()); }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::string(argv[1]) != PDKV_VERSION_STRING) {
    std::fprintf(stderr, "pdkv_consumer: headers say %s, expected %s\n", PDKV_VERSION_STRING,
                 argc == 2 ? argv[1] : "(none)");
    return 1;
  }
  pdkv::engine::EngineOptions options;  // tcp on 127.0.0.1, an ephemeral port
  auto sender = pdkv::engine::TransferEngine::create(options);
  auto receiver = pdkv::engine::TransferEngine::create(options);
  if (!sender.ok()) return fail("sender", sender.status());
  if (!receiver.ok()) return fail("receiver", receiver.status());

  constexpr uint64_t kPage = 4096, kPages = 64;
  std::vector<uint8_t> src(kPage * kPages), dst(kPage * kPages, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + i / kPage);
  if (auto s = (*sender)->register_memory(addr_of(src), src.size()); !s.ok())
    return fail("register src", s);
  if (auto s = (*receiver)->register_memory(addr_of(dst), dst.size()); !s.ok())
    return fail("register dst", s);
  auto session = (*sender)->open_session((*receiver)->endpoint());
  if (!session.ok()) return fail("open_session", session.status());

  // Pages in reverse order: page i of src lands in page kPages-1-i of dst.
  std::vector<pdkv::engine::WriteBlock> blocks;
  for (uint64_t i = 0; i < kPages; ++i) {
    blocks.push_back({addr_of(src) + i * kPage, addr_of(dst) + (kPages - 1 - i) * kPage, kPage});
  }
  if (auto s = (*sender)->transfer(*session, blocks); !s.ok()) return fail("transfer", s);
  for (uint64_t i = 0; i < kPages; ++i) {
    if (std::memcmp(&src[i * kPage], &dst[(kPages - 1 - i) * kPage], kPage) != 0) {
      std::fprintf(stderr, "pdkv_consumer: page %llu arrived wrong\n",
                   static_cast<unsigned long long>(i));
      return 1;
    }
  }
  // One byte past the registered destination: the receiver must refuse it.
  const pdkv::engine::WriteBlock outside{addr_of(src), addr_of(dst) + dst.size() - kPage + 1,
                                         kPage};
  const pdkv::Status refused = (*sender)->transfer(*session, {&outside, 1});
  if (refused.code() != pdkv::StatusCode::kOutOfRange) return fail("out-of-range write", refused);
  std::printf("pdkv_consumer: pdkv %s moved %llu bytes between two engines; %s refused\n",
              PDKV_VERSION_STRING, static_cast<unsigned long long>(src.size()),
              refused.to_string().c_str());
  return 0;
}
