// The note a prefill's data batch carries to the decode (engine/batch_note.h): the
// Success statuses of the rooms whose last bytes are in that batch, so the decode learns
// each room is complete from the data connection itself, after its bytes landed, instead
// of from a ZeroMQ message sent after the acknowledgement came back (that leg was about
// half of a small request's latency, P5).
//
// Layout: one or more records of {u32 little-endian length, that many bytes of one
// control message in its flat form (proto::encode_flat)}; at most engine::kMaxNoteBytes
// in all. Only Success statuses may appear; the decode checks each exactly as a status
// from ZeroMQ (room, target prefill rank, the room's ticket).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "common/status.h"
#include "proto/messages.h"

namespace pdkv::kv {

// Appends `status` (flat) to `note` if the note stays within engine::kMaxNoteBytes;
// false (note unchanged) otherwise.
bool append_status(std::string* note, const proto::TransferStatus& status);

// Calls `each` for every status of `note`, in order. DataLoss (naming the record) at the
// first malformed record, a record that is not a TransferStatus, or one that is not
// Success; the records before it were handed over.
Status for_each_status(std::span<const uint8_t> note,
                       const std::function<void(const proto::TransferStatus&)>& each);

}  // namespace pdkv::kv
