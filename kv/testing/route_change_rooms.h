// The two rooms a decode holds with a prefill rank whose route is about to change, as the
// route-change tests open them (kv/decode/decode_route_change_test.cc over the in-memory
// directory, kv/registry/etcd_decode_test.cc over real etcd): one still bootstrapping
// (resolved and registered, its engine holding send_metadata() back) and one handed over
// (its pre-allocation held by the prefill, whose KVSender is not open yet). When the route
// vanishes the first must fail at once and the second must still finish. Fails tests
// through GoogleTest; driven from the test's thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kv/kv_sender.h"
#include "kv/testing/room_pair.h"

namespace pdkv::kv::testing {

class RoomsAtARouteChange {
 public:
  explicit RoomsAtARouteChange(RoomSides sides) : sides_(sides) {}
  ~RoomsAtARouteChange();

  // Opens room `bootstrapping` and waits until it is WaitingForInput, then room
  // `handed_over` with `src` (filled with its pattern) for the decode's `dst`, and waits
  // until the prefill holds its pre-allocation (its only active room). ASSERTs: wrap in
  // ASSERT_NO_FATAL_FAILURE.
  void open(uint64_t bootstrapping, uint64_t handed_over, std::vector<int64_t> src,
            std::vector<int64_t> dst);
  // The live prefill opens the handed-over room's KVSender and sends its pages: the room
  // succeeds and its bytes land.
  void finish_handed_over();

  KVReceiver& bootstrapping() { return *bootstrapping_; }
  KVReceiver& handed_over() { return *handed_over_; }

 private:
  RoomSides sides_;
  uint64_t handed_over_room_ = 0;
  std::vector<int64_t> src_, dst_;
  std::unique_ptr<KVReceiver> bootstrapping_, handed_over_;
  std::unique_ptr<KVSender> sender_;
};

}  // namespace pdkv::kv::testing
