// Batch notes: a few bytes a batch carries to the peer engine, delivered there only after
// every byte of the batch landed (NIXL calls these notifications).
//
// Why: a receiver that learns "this batch's bytes are in place" from the data connection
// itself needs no second message on another channel after the sender's acknowledgement
// (for the KV managers: the room's Success status riding its last batch instead of a
// ZeroMQ message after the ACK: about half of a small request's latency, P5).
//
// Semantics (TransferEngine::submit_async with a note, set_note_handler):
//  * The receiving engine hands the note to its handler after the batch's last byte
//    landed in its memory and before it acknowledges the batch; so a batch that
//    succeeded at the sender had its note handled. A batch the receiver rejected
//    (OutOfRange) never delivers its note.
//  * A batch that failed at the sender (connection lost) may or may not have delivered
//    it: the receiver may have handled it just before the connection broke.
//  * Notes are opaque bytes, 1 to kMaxNoteBytes; the receiver's handler must treat them
//    as hostile input (validate, then act).
//  * Only backends whose capabilities say carries_notes deliver them (tcp); the others
//    refuse a note with FailedPrecondition and callers send the information another way.
#pragma once

#include <cstddef>

namespace pdkv::engine {

inline constexpr size_t kMaxNoteBytes = 64 * 1024;

}  // namespace pdkv::engine
