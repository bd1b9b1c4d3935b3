// ClusterKey: the secret every member of one pdkv cluster shares, and the keys derived
// from it (docs/SECURITY.md).
//
// Every rank and the bootstrap server of a cluster are given the same secret: a file of at
// least 32 bytes (PDKV_SECRET_FILE, readable by its owner only) or bytes handed in by
// code. The secret never leaves the process and is never logged; this class has no way
// to print it. libsodium derives one independent 32-byte key per use from it (BLAKE2b of
// the secret, then crypto_kdf_derive_from_key), so a key exposed through one mechanism
// tells nothing about another:
//   kDataPlane   HMAC-SHA-512/256 of the TCP backend's session handshake
//   kLeaseChannel  the same for the lease channel of the shm and ucx backends (its own
//                key, so a transcript of one channel never answers the other)
//   kBootstrap   HMAC-SHA-512/256 of route writes to the bootstrap server
//   kEtcdRoute   the same for route entries kept in etcd (kv/registry/etcd_route_seal.h):
//                its own key, so a signed bootstrap request never passes for an etcd
//                entry or the other way round
//   kCurveServer / kCurveClient  seeds of the ZeroMQ CURVE key pairs of the control plane
//   kTransferParams  HMAC-SHA-512/256 of the transfer parameters a vLLM prefill hands its
//                decode through the client's proxy (room, bootstrap address, page count):
//                its own key, so no other signed message passes for them
// pdkv writes no cryptography: every primitive here is libsodium's.
//
// Without a secret pdkv still runs (development, tests) but nothing is authenticated;
// warn_unauthenticated() says so loudly, once per process and component.
//
// Thread safety: a ClusterKey is immutable after construction; every const method may be
// called from any thread. Share it as std::shared_ptr<const ClusterKey>.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "common/config.h"
#include "common/status.h"

namespace pdkv {

enum class KeyUse : uint64_t {
  kDataPlane = 1,
  kBootstrap = 2,
  kCurveServer = 3,
  kCurveClient = 4,
  kLeaseChannel = 5,
  kEtcdRoute = 6,
  kTransferParams = 7,
};

class ClusterKey {
 public:
  static constexpr size_t kMinSecretBytes = 32;
  static constexpr size_t kMaxSecretBytes = 4096;
  static constexpr size_t kMacBytes = 32;
  static constexpr size_t kNonceBytes = 32;
  static constexpr size_t kCurveKeyBytes = 32;
  using Mac = std::array<uint8_t, kMacBytes>;
  using Nonce = std::array<uint8_t, kNonceBytes>;

  // InvalidArgument if the secret is shorter than kMinSecretBytes or longer than
  // kMaxSecretBytes; Internal if libsodium cannot start.
  static Result<std::shared_ptr<const ClusterKey>> from_secret(std::span<const uint8_t> secret);
  // The secret in a file: a text secret (every byte before a trailing run of '\n' and
  // '\r' printable ASCII, e.g. `openssl rand -hex 32 > f`) without its line ending, any
  // other file's bytes exactly as they are (raw bytes: `head -c 32 /dev/urandom`).
  // InvalidArgument if the file cannot be read, is not a regular file (a FIFO is refused
  // without waiting for a writer), is readable or writable by group or others, or holds
  // too few or too many bytes (the message says how many).
  static Result<std::shared_ptr<const ClusterKey>> from_file(const std::string& path);
  // PDKV_SECRET_FILE (from `settings` if set there, else the environment) if set (errors
  // of from_file), else null: run unauthenticated.
  static Result<std::shared_ptr<const ClusterKey>> from(const config::Settings& settings);
  static Result<std::shared_ptr<const ClusterKey>> from_env() { return from(config::Settings()); }

  ~ClusterKey();
  ClusterKey(const ClusterKey&) = delete;
  ClusterKey& operator=(const ClusterKey&) = delete;

  // HMAC of `parts` under the key of `use`. Each part is length-prefixed before it is
  // hashed, so ("ab","c") and ("a","bc") differ.
  Mac mac(KeyUse use, std::initializer_list<std::span<const uint8_t>> parts) const;
  // Constant-time comparison with mac(use, parts).
  bool verify(KeyUse use, std::span<const uint8_t> mac,
              std::initializer_list<std::span<const uint8_t>> parts) const;

  // A CURVE key pair (raw 32-byte keys, as ZMQ_CURVE_PUBLICKEY/SECRETKEY accept them)
  // derived from the secret: every member computes the same pair for the same use.
  struct CurvePair {
    std::array<uint8_t, kCurveKeyBytes> public_key{};
    std::array<uint8_t, kCurveKeyBytes> secret_key{};
  };
  CurvePair curve_pair(KeyUse use) const;

  // 32 bytes from the operating system's CSPRNG (randombytes_buf).
  static Nonce random_nonce();
  // A random 64-bit number (room ids, incarnations).
  static uint64_t random_u64();

 private:
  ClusterKey() = default;
  std::array<uint8_t, 32> derived(KeyUse use) const;

  std::array<uint8_t, 32> master_{};
};

// Logs, once per process and component, a warning that `component` runs without a cluster
// secret: anyone who can reach its ports can read or write what it serves.
void warn_unauthenticated(std::string_view component);

// The bytes of a string, for ClusterKey::mac parts.
inline std::span<const uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace pdkv
