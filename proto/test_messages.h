// Sample messages for tests, the fuzz seed corpus and the cross-process test peer.
// Deterministic: the same seed gives the same messages in every process.
#pragma once

#include <cstdint>
#include <vector>

#include "proto/messages.h"

namespace pdkv::proto::testing {

RankIdentity sample_identity(Role role, uint32_t rank);
// One message of every type, fields filled (optionals present, arrays non-empty).
std::vector<Message> sample_messages(uint64_t seed = 1);
// Variants with empty arrays and absent optionals.
std::vector<Message> minimal_messages();
// Pseudo-random messages of every type for round-trip property tests.
Message random_message(uint64_t seed);

}  // namespace pdkv::proto::testing
