#include "kv/testing/manager_pair_fixture.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <span>

#include "kv/kv_sender.h"

namespace pdkv::kv::testing {

std::vector<int64_t> shuffled_pages(int64_t count, int64_t capacity, uint32_t seed) {
  std::vector<int64_t> all(static_cast<size_t>(capacity));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(static_cast<size_t>(count));
  return all;
}

void KvManagerTest::move_head_sliced_room(uint64_t room, const std::vector<int64_t>& src,
                                          const std::vector<int64_t>& dst0,
                                          const std::vector<int64_t>& dst1, size_t chunk_pages,
                                          const KvManagerOptions& options) {
  RankBuffers pbuf(shape_, 1, 0, 16), d0(shape_, 2, 0, 16), d1(shape_, 2, 1, 16);
  auto prefill = maker_.prefill(pbuf.args(0), options);
  auto dec0 = maker_.decode(d0.args(0), options);
  auto dec1 = maker_.decode(d1.args(1), options);
  ASSERT_TRUE(prefill && dec0 && dec1);
  pbuf.fill_request(src);
  KVSender sender(*prefill, room);
  ASSERT_TRUE(sender.init(static_cast<int64_t>(src.size()), 0).ok());
  KVReceiver r0(*dec0, room), r1(*dec1, room);
  ASSERT_TRUE(r0.init().ok());
  ASSERT_TRUE(r1.init().ok());
  ASSERT_TRUE(r0.send_metadata({dst0, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(r1.send_metadata({dst1, 0, {}, 0, std::nullopt}).ok());
  std::span<const int64_t> all(src);
  for (size_t at = 0; at < all.size(); at += chunk_pages) {
    ASSERT_TRUE(sender.send(all.subspan(at, std::min(chunk_pages, all.size() - at))).ok());
  }
  ASSERT_TRUE(eventually([&] {
    return r0.poll() == RoomState::kSuccess && r1.poll() == RoomState::kSuccess;
  })) << r0.failure().to_string()
      << " / " << r1.failure().to_string();
  EXPECT_TRUE(d0.holds_request(dst0));
  EXPECT_TRUE(d1.holds_request(dst1));
  EXPECT_TRUE(eventually([&] { return prefill->active_rooms() == 0; }));
}

}  // namespace pdkv::kv::testing
