// Attacks on a rank's TCP transfer engine: writes into its registered memory, probing
// for its layout, idle connections, and frame headers that declare huge entry tables. Each returns
// what the attacker observed as one JSON object.
#pragma once

#include <nlohmann/json.hpp>

#include "robustness/hostile/attack_options.h"

namespace pdkv::hostile {

// `count` blocks of `length` bytes at dst, dst + length, ... naming write grant `grant`,
// through a TransferEngine of our own: "refused" and the engine's status.
nlohmann::json raw_write(const AttackOptions& o);
// One PART frame writing [dst, dst + length) under `grant`, sent by hand so the ACK is
// read as it is: its code, entry index, first bad address and message, and whether any
// address the refusal names lies outside the write's own range ("leaks").
nlohmann::json probe(const AttackOptions& o);
// `count` connections that never send a byte, watched for `hold_ms`: how many the victim
// closed at once (its connection cap), later (its first-byte timeout), or never.
nlohmann::json idle_connections(const AttackOptions& o);
// `count` connections each sending one PART header that declares `entries` entries, then
// nothing: watched like idle connections (the victim must allocate nothing meanwhile).
nlohmann::json huge_header(const AttackOptions& o);

// Keeps `count` connections to `engine` open for `hold_ms` without ever speaking, from
// local address `source` ("" = any), opening a new one for each the victim closes (at
// most every 50 ms): a stranger trying to hold every connection slot. Reports how many
// it held at most and at the end, and how many it opened in all.
nlohmann::json hold_slots(const AttackOptions& o);

}  // namespace pdkv::hostile
