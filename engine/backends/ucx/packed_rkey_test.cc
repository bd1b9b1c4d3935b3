// The bounds put on a peer's packed rkeys before ucp_ep_rkey_unpack() (packed_rkey.h):
// rkeys UCX itself packs pass for every transport set the conformance suite uses; every
// truncation that cuts into a transport's key, and an rkey whose header promises keys it
// does not carry, is DataLoss.
#include "engine/backends/ucx/packed_rkey.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "engine/backends/ucx/ucx_context.h"

namespace pdkv::engine::ucx {
namespace {

// An rkey for a small buffer, packed by UCX over `tls`.
std::string real_rkey(const std::string& tls, std::vector<uint8_t>& buffer) {
  auto context = UcxContext::create(tls, 2);
  EXPECT_TRUE(context.ok()) << context.status().to_string();
  if (!context.ok()) return "";
  ucp_context_h ctx = (*context)->get();
  std::string packed;
  ucp_mem_map_params_t p{};
  p.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  p.address = buffer.data();
  p.length = buffer.size();
  ucp_mem_h memh = nullptr;
  if (ucp_mem_map(ctx, &p, &memh) != UCS_OK) return "";
  void* rkey = nullptr;
  size_t size = 0;
  if (ucp_rkey_pack(ctx, memh, &rkey, &size) == UCS_OK) {
    packed.assign(static_cast<const char*>(rkey), size);
    ucp_rkey_buffer_release(rkey);
  }
  ucp_mem_unmap(ctx, memh);
  return packed;
}

// Where the per-transport keys of a well-formed rkey end (its layout, packed_rkey.h).
size_t keys_end(const std::string& packed) {
  uint64_t md_map = 0;
  std::memcpy(&md_map, packed.data(), 8);
  size_t at = kRkeyHeaderBytes;
  for (int md = 0; md < 64; ++md) {
    if (md_map >> md & 1) at += 1 + static_cast<uint8_t>(packed[at]);
  }
  return at;
}

TEST(PackedRkey, RkeysUcxPacksPassAndTheirTruncationsDoNot) {
  std::vector<uint8_t> buffer(1 << 16);
  for (const char* tls : {"tcp", "posix,sysv,cma,self"}) {
    const std::string packed = real_rkey(tls, buffer);
    ASSERT_GE(packed.size(), kRkeyHeaderBytes) << tls;
    EXPECT_TRUE(check_packed_rkey(packed).ok())
        << tls << ": " << check_packed_rkey(packed).to_string();
    const size_t end = keys_end(packed);
    ASSERT_LE(end, packed.size()) << tls;
    for (size_t n = 0; n < end; ++n) {
      EXPECT_EQ(check_packed_rkey(std::string_view(packed).substr(0, n)).code(),
                StatusCode::kDataLoss)
          << tls << ": truncated to " << n << " of " << packed.size() << " bytes";
    }
    EXPECT_EQ(padded_rkey(packed).size(), packed.size() + kRkeyReadSlack);
    EXPECT_EQ(padded_rkey(packed).substr(0, packed.size()), packed);
  }
}

TEST(PackedRkey, AHeaderPromisingKeysItDoesNotCarryIsDataLoss) {
  std::string packed(kRkeyHeaderBytes, '\0');
  EXPECT_TRUE(check_packed_rkey(packed).ok());  // no memory domain: an empty key
  packed[0] = 0x03;                             // two memory domains...
  packed += '\x02';                             // ...the first declares 2 bytes
  packed += "ab";
  EXPECT_EQ(check_packed_rkey(packed).code(), StatusCode::kDataLoss);  // second missing
  packed += '\xff';  // the second declares 255 bytes and carries none
  EXPECT_EQ(check_packed_rkey(packed).code(), StatusCode::kDataLoss);
  packed[0] = static_cast<char>(0x80);  // the highest bit of the first byte: md 7 only
  packed.resize(kRkeyHeaderBytes);
  EXPECT_EQ(check_packed_rkey(packed).code(), StatusCode::kDataLoss);
}

}  // namespace
}  // namespace pdkv::engine::ucx
