#include "kv/runtime/manager_timer.h"

#include <algorithm>

#include "common/clock.h"

namespace pdkv::kv {

void run_manager_timer(ManagerRuntime& runtime, RoomStatusBoard& board,
                       std::chrono::milliseconds heartbeat_interval, const TimerRounds& rounds) {
  const auto tick =
      std::min<std::chrono::milliseconds>(heartbeat_interval, std::chrono::milliseconds(100));
  TimePoint next_heartbeat = now();
  while (runtime.sleep_for(tick)) {
    for (uint64_t room : board.expire_overdue(now())) {
      // The board failed it already with the deadline's cause; this tells the peers.
      std::optional<RoomStatus> status = board.get(room);
      rounds.overdue(room, status ? status->failure_cause : FailureCause::kInternal,
                     status ? status->failure_reason : "timeout");
    }
    if (rounds.tick) rounds.tick();
    if (now() >= next_heartbeat) {
      rounds.heartbeat();
      next_heartbeat = now() + heartbeat_interval;
    }
  }
}

}  // namespace pdkv::kv
