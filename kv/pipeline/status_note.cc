#include "kv/pipeline/status_note.h"

#include <variant>

#include "engine/batch_note.h"
#include "proto/codec.h"

namespace pdkv::kv {
namespace {

constexpr size_t kLengthBytes = 4;

}  // namespace

bool append_status(std::string* note, const proto::TransferStatus& status) {
  const std::string flat = proto::encode_flat(proto::Message(status));
  if (note->size() + kLengthBytes + flat.size() > engine::kMaxNoteBytes) return false;
  const auto n = static_cast<uint32_t>(flat.size());
  for (size_t i = 0; i < kLengthBytes; ++i) note->push_back(static_cast<char>(n >> (8 * i)));
  note->append(flat);
  return true;
}

Status for_each_status(std::span<const uint8_t> note,
                       const std::function<void(const proto::TransferStatus&)>& each) {
  size_t at = 0;
  for (int record = 0; at < note.size(); ++record) {
    if (note.size() - at < kLengthBytes) {
      return data_loss("status note: record " + std::to_string(record) + " has no length");
    }
    uint32_t n = 0;
    for (size_t i = 0; i < kLengthBytes; ++i) n |= uint32_t{note[at + i]} << (8 * i);
    at += kLengthBytes;
    if (n > note.size() - at) {
      return data_loss("status note: record " + std::to_string(record) + " claims " +
                       std::to_string(n) + " bytes, " + std::to_string(note.size() - at) + " left");
    }
    Result<proto::Message> message =
        proto::decode_flat({reinterpret_cast<const char*>(note.data() + at), n});
    at += n;
    if (!message.ok()) {
      return data_loss("status note: record " + std::to_string(record) + ": " +
                       message.status().message());
    }
    const auto* status = std::get_if<proto::TransferStatus>(&*message);
    if (status == nullptr || status->state != proto::TransferState::kSuccess) {
      return data_loss("status note: record " + std::to_string(record) +
                       " is not a Success status");
    }
    each(*status);
  }
  return Status();
}

}  // namespace pdkv::kv
