// PendingRoomBudget: what decode ranks can make a prefill rank hold for rooms whose
// KVSender does not exist yet (a decode may pre-allocate, or abort, a room before the
// prefill's engine opens it).
//
// Three bounds, each refused with a reason naming its setting: rooms in all
// (PDKV_MAX_PENDING_ROOMS), rooms one decode rank opened (PDKV_MAX_PENDING_ROOMS_PER_DECODE)
// and the bytes of the pre-allocations one decode rank has waiting
// (PDKV_MAX_PENDING_BYTES_PER_DECODE). The per-rank bounds keep one decode (or a stranger
// registered as one, without a cluster secret) from taking the whole budget of the others.
// A room is charged to the decode whose message made the prefill hold it; each decode
// with a pre-allocation waiting in it is charged that pre-allocation's bytes.
// Thread safety: none (guarded by the owning manager's lock).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>

#include "common/status.h"
#include "proto/messages.h"

namespace pdkv::kv {

struct PendingRoomLimits {
  size_t max_rooms = 65536;
  size_t max_rooms_per_decode = 8192;
  uint64_t max_bytes_per_decode = uint64_t{1} << 28;
};

class PendingRoomBudget {
 public:
  explicit PendingRoomBudget(PendingRoomLimits limits) : limits_(limits) {}

  // Charges `decode` for holding `room` with `bytes` of its pre-allocation waiting there
  // (replacing what it was charged for this room before: a resend is not counted twice).
  // The first charge of a room counts it against the room bounds, for the decode that
  // made it. FailedPrecondition naming the bound if one would be passed: nothing changes.
  Status charge(uint64_t room, const std::string& decode, uint64_t bytes);
  // The room's KVSender opened, or the room ended: every charge of it is released.
  // Unknown rooms are ignored.
  void release(uint64_t room);

  size_t rooms() const { return rooms_.size(); }
  size_t rooms_of(const std::string& decode) const;
  uint64_t bytes_of(const std::string& decode) const;

 private:
  struct RoomCharges {
    std::string opener;
    std::map<std::string, uint64_t> bytes;  // per decode with a pre-allocation waiting
  };
  struct DecodeUse {
    size_t rooms = 0;
    uint64_t bytes = 0;
  };
  void uncharge(const std::string& decode, size_t rooms, uint64_t bytes);

  PendingRoomLimits limits_;
  std::unordered_map<uint64_t, RoomCharges> rooms_;
  std::unordered_map<std::string, DecodeUse> decodes_;
};

// About what holding `pre` costs a prefill rank: its page, slot and fragment lists
// (without the fragments when `fragments_shared`: an earlier room's list is reused,
// destination_plan.h).
uint64_t pre_allocation_cost(const proto::PreAllocation& pre, bool fragments_shared = false);

}  // namespace pdkv::kv
