// Encoding and decoding of the control-plane messages (messages.h) to ZeroMQ multipart.
//
// encode(x) returns the frames of one message: [header, body]. Each decode_* checks, in
// this order and before reading any field: the frame count (exactly 2), the header
// (wire.h: exact length, magic, version, type, flags), that the header's body length
// equals frame 1's size, then every field (counts x sizes against the bytes left, enum
// ranges, bool bytes, string and array limits, equal-length buffer arrays) and finally
// that the body is consumed exactly. Any failure is kDataLoss with a message naming the
// message and the field. A decoder never reads out of bounds and never allocates more
// than the input's size justifies, whatever the input (fuzzed: proto/fuzz/).
//
// Thread safety: pure functions.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "proto/messages.h"
#include "proto/wire.h"

namespace pdkv::proto {

using Multipart = std::vector<std::string>;
// Views over received frames (e.g. zmq::message_t data); must outlive the decode call.
using FrameViews = std::span<const std::string_view>;

Multipart encode(const BufferRegistration& msg);
Multipart encode(const PreAllocation& msg);
Multipart encode(const TransferStatus& msg);
Multipart encode(const Abort& msg);
Multipart encode(const RegistrationResult& msg);
Multipart encode(const Ping& msg);
Multipart encode(const Pong& msg);
Multipart encode_message(const Message& msg);

Result<BufferRegistration> decode_buffer_registration(FrameViews frames);
Result<PreAllocation> decode_pre_allocation(FrameViews frames);
Result<TransferStatus> decode_transfer_status(FrameViews frames);
Result<Abort> decode_abort(FrameViews frames);
Result<RegistrationResult> decode_registration_result(FrameViews frames);
Result<Ping> decode_ping(FrameViews frames);
Result<Pong> decode_pong(FrameViews frames);
// Dispatches on the header's type.
Result<Message> decode_message(FrameViews frames);

// One message as a single byte string, header then body: how a control message rides a
// data batch as its note (engine/batch_note.h; the prefill's Success status on the
// room's last batch). decode_flat splits at the fixed header size and checks everything
// decode_message checks, and that the header's body length matches what follows.
std::string encode_flat(const Message& msg);
Result<Message> decode_flat(std::string_view bytes);

// Views over owned frames, for tests and in-process use.
std::vector<std::string_view> views_of(const Multipart& frames);

MessageType type_of(const Message& msg);

}  // namespace pdkv::proto
