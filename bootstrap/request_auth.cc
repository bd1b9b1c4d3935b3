#include "bootstrap/request_auth.h"

#include <sodium.h>

#include <array>
#include <string>
#include <vector>

namespace pdkv::bootstrap {
namespace {

constexpr std::string_view kLabel = "pdkv-bootstrap-v1";
constexpr size_t kNonceBytes = 16;

std::string to_hex(std::span<const uint8_t> bytes) {
  std::string out(bytes.size() * 2 + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes.data(), bytes.size());
  out.pop_back();
  return out;
}

// Exactly `n` bytes from 2n hex digits, or false.
bool from_hex(std::string_view hex, uint8_t* out, size_t n) {
  if (hex.size() != 2 * n) return false;
  size_t got = 0;
  return sodium_hex2bin(out, n, hex.data(), hex.size(), nullptr, &got, nullptr) == 0 && got == n;
}

ClusterKey::Mac request_mac(const ClusterKey& key, std::string_view method, std::string_view target,
                            std::string_view time, std::span<const uint8_t> nonce,
                            std::string_view body) {
  return key.mac(KeyUse::kBootstrap, {as_bytes(kLabel), as_bytes(method), as_bytes(target),
                                      as_bytes(time), nonce, as_bytes(body)});
}

}  // namespace

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string sign_request(const ClusterKey& key, std::string_view method, std::string_view target,
                         std::string_view body, int64_t unix_ms) {
  const ClusterKey::Nonce random = ClusterKey::random_nonce();
  std::span<const uint8_t> nonce(random.data(), kNonceBytes);
  const std::string time = std::to_string(unix_ms);
  const ClusterKey::Mac mac = request_mac(key, method, target, time, nonce, body);
  return "v1 " + time + " " + to_hex(nonce) + " " + to_hex(mac);
}

Status RequestVerifier::verify(const ClusterKey& key, std::string_view header,
                               std::string_view method, std::string_view target,
                               std::string_view body, int64_t now_unix_ms) {
  if (header.empty()) return unauthenticated("missing X-Pdkv-Auth: this server requires it");
  // Split "v1 <time> <nonce> <mac>" into exactly four words.
  std::array<std::string_view, 4> words;
  size_t n = 0, pos = 0;
  while (pos <= header.size() && n < words.size()) {
    size_t space = header.find(' ', pos);
    if (space == std::string_view::npos) space = header.size();
    words[n++] = header.substr(pos, space - pos);
    pos = space + 1;
  }
  if (n != 4 || pos <= header.size() || words[0] != "v1") {
    return unauthenticated("malformed X-Pdkv-Auth");
  }
  int64_t sent_ms = 0;
  if (words[1].empty() || words[1].size() > 16) return unauthenticated("malformed X-Pdkv-Auth");
  for (char c : words[1]) {
    if (c < '0' || c > '9') return unauthenticated("malformed X-Pdkv-Auth");
    sent_ms = sent_ms * 10 + (c - '0');
  }
  uint8_t nonce[kNonceBytes];
  uint8_t mac[ClusterKey::kMacBytes];
  if (!from_hex(words[2], nonce, sizeof nonce) || !from_hex(words[3], mac, sizeof mac)) {
    return unauthenticated("malformed X-Pdkv-Auth");
  }
  const int64_t skew = kMaxClockSkew.count();
  if (sent_ms < now_unix_ms - skew || sent_ms > now_unix_ms + skew) {
    return unauthenticated(
        "X-Pdkv-Auth is stale or from the future (clocks more than 30 s apart?)");
  }
  // The same MAC sign_request computes, compared in constant time.
  const ClusterKey::Mac expected = request_mac(key, method, target, words[1],
                                               std::span<const uint8_t>(nonce, sizeof nonce), body);
  if (crypto_verify_32(expected.data(), mac) != 0) {
    return unauthenticated("X-Pdkv-Auth does not verify");
  }
  MutexLock lock(mu_);
  while (!by_expiry_.empty() && by_expiry_.begin()->first < now_unix_ms) forget_oldest();
  std::string nonce_key(words[2]);
  if (seen_.count(nonce_key) != 0) return unauthenticated("X-Pdkv-Auth replayed");
  while (seen_.size() >= max_nonces_ && !by_expiry_.empty()) forget_oldest();
  const int64_t expiry = sent_ms + skew;
  seen_.emplace(nonce_key, expiry);
  by_expiry_.emplace(expiry, std::move(nonce_key));
  return Status();
}

void RequestVerifier::forget_oldest() {
  seen_.erase(by_expiry_.begin()->second);
  by_expiry_.erase(by_expiry_.begin());
}

}  // namespace pdkv::bootstrap
