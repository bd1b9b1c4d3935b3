// The timer thread's loop, the same on both managers: room deadlines, the manager's own
// timed work, and a heartbeat.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "kv/room/failure_cause.h"
#include "kv/room/room_status_board.h"
#include "kv/runtime/manager_runtime.h"

namespace pdkv::kv {

// What a manager's timer does each round.
struct TimerRounds {
  // A room whose deadline passed: the board failed it already with the deadline's cause and
  // reason (given here); this tells the room's peers and drops it from the tables.
  std::function<void(uint64_t room, FailureCause cause, const std::string& reason)> overdue;
  // Every tick, after the overdue rooms: the manager's own timed work (resends, expiries).
  std::function<void()> tick;
  // Once every heartbeat_interval, after the tick: pings and the liveness check.
  std::function<void()> heartbeat;
};

// Runs on the manager's timer thread until the manager stops (runtime.sleep_for): a tick
// every heartbeat_interval, or every 100 ms if that is shorter, so deadlines fire within
// a tick of their time; the first heartbeat on the first tick.
void run_manager_timer(ManagerRuntime& runtime, RoomStatusBoard& board,
                       std::chrono::milliseconds heartbeat_interval, const TimerRounds& rounds);

}  // namespace pdkv::kv
