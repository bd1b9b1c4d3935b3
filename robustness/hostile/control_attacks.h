// Attacks on a rank's ZeroMQ control socket, each sending the documented protocol
// (proto/codec.h), or garbage, from a real socket of its own. Each returns what the
// attacker could observe as one JSON object; whether a victim's rooms were hurt is for
// the caller (python/tests/test_hostile_peers.py) to check on the victim.
//
// Common fields: "attack", "sent" (messages queued), "handshake_refused" (the victim
// refused our ZeroMQ handshake: it has a cluster secret and we do not).
#pragma once

#include <nlohmann/json.hpp>

#include "robustness/hostile/attack_options.h"

namespace pdkv::hostile {

// Pongs claiming to come from `as` (a prefill the victim decode uses), with guessed
// probe numbers under a made-up incarnation: a "restart" that would fail its rooms.
nlohmann::json forged_pong(const AttackOptions& o);
// Aborts of `rooms`, claiming to come from `as` (default: the attacker itself).
nlohmann::json forged_abort(const AttackOptions& o);
// TransferStatus{state} of `rooms` for prefill TP rank 0, to a decode; with `ranges`, a
// checksum naming that many ranges [range_addr, +range_length).
nlohmann::json forged_status(const AttackOptions& o);
// A registration naming the decode at `as` under a new incarnation, with the attacker's
// engine as its data endpoint: to a prefill, "that decode restarted over here".
nlohmann::json hijack_registration(const AttackOptions& o);
// Registers as a decode of its own, then pre-allocates rooms[0] with fragments that read
// each whole KV buffer (src stride 0, bytes per page = the pool); "bytes_received" counts
// what reached the attacker's buffers. `honest`: an ordinary pre-allocation instead.
nlohmann::json whole_pool(const AttackOptions& o);
// `count` Pings whose reply addresses are closed ports (first_port, first_port + 1, ...).
nlohmann::json ping_flood(const AttackOptions& o);
// `count` Aborts of random rooms nobody opened.
nlohmann::json abort_flood(const AttackOptions& o);
// Registers as a decode, then pre-allocates `count` rooms nobody opened a sender for.
nlohmann::json pre_allocation_flood(const AttackOptions& o);
// `count` registrations from made-up decode endpoints.
nlohmann::json registration_flood(const AttackOptions& o);
// `count` messages that are no pdkv message at all (one frame of text each): each is
// dropped by the victim, which must not log a line for every one.
nlohmann::json garbage_flood(const AttackOptions& o);

}  // namespace pdkv::hostile
