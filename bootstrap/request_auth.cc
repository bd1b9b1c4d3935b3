#include "bootstrap/request_auth.h"

#include <sodium.h>

#include <array>
#include <string>
#include <vector>

namespace pdkv::bootstrap {
namespace {

constexpr std::string_view kLabel = "pdkv-bootstrap-v2";
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

ClusterKey::Mac request_mac(const ClusterKey& key, const ServerId& server, std::string_view method,
                            std::string_view target, std::string_view time,
                            std::span<const uint8_t> nonce, std::string_view body) {
  return key.mac(KeyUse::kBootstrap,
                 {as_bytes(kLabel), std::span<const uint8_t>(server), as_bytes(method),
                  as_bytes(target), as_bytes(time), nonce, as_bytes(body)});
}

}  // namespace

int64_t unix_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ServerId random_server_id() {
  ServerId id;
  randombytes_buf(id.data(), id.size());
  return id;
}

std::string server_id_text(const ServerId& id) { return to_hex(id); }

std::optional<ServerId> parse_server_id(std::string_view text) {
  ServerId id;
  if (!from_hex(text, id.data(), id.size())) return std::nullopt;
  return id;
}

std::string sign_request(const ClusterKey& key, const ServerId& server, std::string_view method,
                         std::string_view target, std::string_view body, int64_t unix_ms) {
  const ClusterKey::Nonce random = ClusterKey::random_nonce();
  std::span<const uint8_t> nonce(random.data(), kNonceBytes);
  const std::string time = std::to_string(unix_ms);
  const ClusterKey::Mac mac = request_mac(key, server, method, target, time, nonce, body);
  return "v2 " + time + " " + to_hex(nonce) + " " + server_id_text(server) + " " + to_hex(mac);
}

Status RequestVerifier::verify(const ClusterKey& key, std::string_view header,
                               std::string_view method, std::string_view target,
                               std::string_view body, int64_t now_unix_ms) {
  if (header.empty()) return unauthenticated("missing X-Pdkv-Auth: this server requires it");
  // Split "v2 <time> <nonce> <server id> <mac>" into exactly five words.
  std::array<std::string_view, 5> words;
  size_t n = 0, pos = 0;
  while (pos <= header.size() && n < words.size()) {
    size_t space = header.find(' ', pos);
    if (space == std::string_view::npos) space = header.size();
    words[n++] = header.substr(pos, space - pos);
    pos = space + 1;
  }
  if (n != words.size() || pos <= header.size() || words[0] != "v2") {
    return unauthenticated("malformed X-Pdkv-Auth (a client of another pdkv version?)");
  }
  int64_t sent_ms = 0;
  if (words[1].empty() || words[1].size() > 16) return unauthenticated("malformed X-Pdkv-Auth");
  for (char c : words[1]) {
    if (c < '0' || c > '9') return unauthenticated("malformed X-Pdkv-Auth");
    sent_ms = sent_ms * 10 + (c - '0');
  }
  uint8_t nonce[kNonceBytes];
  uint8_t mac[ClusterKey::kMacBytes];
  const std::optional<ServerId> server = parse_server_id(words[3]);
  if (!from_hex(words[2], nonce, sizeof nonce) || !server || !from_hex(words[4], mac, sizeof mac)) {
    return unauthenticated("malformed X-Pdkv-Auth");
  }
  if (*server != server_) {
    // Public information: the id is served by /health. Said plainly so a client whose
    // server restarted learns it (it then signs for the new id).
    return unauthenticated(
        "X-Pdkv-Auth is signed for another bootstrap server (another server of the cluster, "
        "or this one before it restarted)");
  }
  const int64_t skew = kMaxClockSkew.count();
  if (sent_ms < now_unix_ms - skew || sent_ms > now_unix_ms + skew) {
    return unauthenticated(
        "X-Pdkv-Auth is stale or from the future (clocks more than 30 s apart?)");
  }
  // The same MAC sign_request computes, compared in constant time.
  const ClusterKey::Mac expected = request_mac(key, server_, method, target, words[1],
                                               std::span<const uint8_t>(nonce, sizeof nonce), body);
  if (crypto_verify_32(expected.data(), mac) != 0) {
    return unauthenticated("X-Pdkv-Auth does not verify");
  }
  MutexLock lock(mu_);
  while (!by_expiry_.empty() && by_expiry_.begin()->first < now_unix_ms) forget_oldest();
  std::string nonce_key(reinterpret_cast<const char*>(nonce), sizeof nonce);
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
