#include "kv/prefill/prefill_metadata_store.h"

namespace pdkv::kv {

void PrefillMetadataStore::open(uint64_t room) {
  MutexLock lock(mu_);
  rooms_.try_emplace(room);
}

void PrefillMetadataStore::close(uint64_t room) {
  MutexLock lock(mu_);
  if (rooms_.erase(room) > 0) published_.notify_all();
}

bool PrefillMetadataStore::publish(uint64_t room, PrefillMetadata metadata) {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end() || it->second.value.has_value()) return false;
  it->second.value = std::move(metadata);
  published_.notify_all();
  return true;
}

std::optional<PrefillMetadata> PrefillMetadataStore::wait(uint64_t room, TimePoint deadline) {
  MutexLock lock(mu_);
  published_.wait_until(mu_, deadline, [&]() PDKV_REQUIRES(mu_) {
    auto it = rooms_.find(room);
    return it == rooms_.end() || it->second.value.has_value();
  });
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return std::nullopt;
  return it->second.value;
}

std::optional<PrefillMetadata> PrefillMetadataStore::peek(uint64_t room) const {
  MutexLock lock(mu_);
  auto it = rooms_.find(room);
  if (it == rooms_.end()) return std::nullopt;
  return it->second.value;
}

size_t PrefillMetadataStore::size() const {
  MutexLock lock(mu_);
  return rooms_.size();
}

}  // namespace pdkv::kv
