#include "kv/testing/route_change_rooms.h"

#include <gtest/gtest.h>

namespace pdkv::kv::testing {

RoomsAtARouteChange::~RoomsAtARouteChange() {
  sender_.reset();
  handed_over_.reset();
  bootstrapping_.reset();
}

void RoomsAtARouteChange::open(uint64_t bootstrapping, uint64_t handed_over,
                               std::vector<int64_t> src, std::vector<int64_t> dst) {
  bootstrapping_ = std::make_unique<KVReceiver>(sides_.decode, bootstrapping);
  ASSERT_TRUE(bootstrapping_->init().ok());
  ASSERT_TRUE(eventually([&] { return bootstrapping_->poll() == RoomState::kWaitingForInput; }));
  handed_over_room_ = handed_over;
  src_ = std::move(src);
  dst_ = std::move(dst);
  sides_.prefill_buffers.fill_request(src_);
  handed_over_ = std::make_unique<KVReceiver>(sides_.decode, handed_over);
  ASSERT_TRUE(handed_over_->init().ok());
  ASSERT_TRUE(handed_over_->send_metadata({dst_, 0, {}, 0, std::nullopt}).ok());
  ASSERT_TRUE(eventually([&] { return sides_.prefill.active_rooms() == 1; }));
}

void RoomsAtARouteChange::finish_handed_over() {
  ASSERT_TRUE(handed_over_) << "the rooms are not open";
  sender_ = std::make_unique<KVSender>(sides_.prefill, handed_over_room_);
  ASSERT_TRUE(sender_->init(static_cast<int64_t>(src_.size()), 0).ok());
  ASSERT_TRUE(sender_->send(src_).ok());
  ASSERT_TRUE(eventually([&] { return handed_over_->poll() == RoomState::kSuccess; }))
      << handed_over_->failure().to_string();
  EXPECT_TRUE(sides_.decode_buffers.holds_request(dst_));
}

}  // namespace pdkv::kv::testing
