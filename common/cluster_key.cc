#include "common/cluster_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "common/common_settings.h"
#include "common/config.h"
#include "common/logging.h"
#include "common/mutex.h"

namespace pdkv {
namespace {

// crypto_kdf's context: 8 bytes naming the application and the derivation's version.
constexpr char kKdfContext[crypto_kdf_CONTEXTBYTES + 1] = "pdkv-k01";
static_assert(crypto_auth_hmacsha512256_BYTES == ClusterKey::kMacBytes);
static_assert(crypto_box_SEEDBYTES == 32 && crypto_box_PUBLICKEYBYTES == 32 &&
              crypto_box_SECRETKEYBYTES == 32);

Status init_sodium() {
  // Idempotent and thread-safe (libsodium's own guarantee).
  if (sodium_init() < 0) return internal_error("libsodium failed to initialise");
  return Status();
}

void put_length(crypto_auth_hmacsha512256_state* st, size_t n) {
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t{n} >> (8 * i));
  crypto_auth_hmacsha512256_update(st, len, sizeof len);
}

// What kind of file `mode` is, for an error naming it.
const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

// How many of a secret file's bytes are the secret. A text secret (every byte before a
// trailing run of '\n' and '\r' is printable ASCII: `openssl rand -hex 32 > f`, base64)
// is read without its line ending. Anything else is taken exactly as it is: raw bytes
// (`head -c 32 /dev/urandom`) end in 0x0a or 0x0d one time in 128, and dropping it made
// such a secret one byte short, or not the bytes the operator provisioned.
size_t secret_length(std::span<const uint8_t> bytes) {
  size_t end = bytes.size();
  while (end > 0 && (bytes[end - 1] == '\n' || bytes[end - 1] == '\r')) --end;
  for (size_t i = 0; i < end; ++i) {
    if (bytes[i] < 0x20 || bytes[i] > 0x7e) return bytes.size();
  }
  return end;
}

}  // namespace

Result<std::shared_ptr<const ClusterKey>> ClusterKey::from_secret(std::span<const uint8_t> secret) {
  if (secret.size() < kMinSecretBytes || secret.size() > kMaxSecretBytes) {
    return invalid_argument("cluster secret: must hold " + std::to_string(kMinSecretBytes) +
                            " to " + std::to_string(kMaxSecretBytes) + " bytes, not " +
                            std::to_string(secret.size()) +
                            " (create one with `head -c 32 /dev/urandom > secret; chmod 600 "
                            "secret`)");
  }
  PDKV_RETURN_IF_ERROR(init_sodium());
  std::shared_ptr<ClusterKey> key(new ClusterKey());
  crypto_generichash(key->master_.data(), key->master_.size(), secret.data(), secret.size(),
                     nullptr, 0);
  return std::shared_ptr<const ClusterKey>(std::move(key));
}

Result<std::shared_ptr<const ClusterKey>> ClusterKey::from_file(const std::string& path) {
  const std::string what = "cluster secret file '" + path + "': ";
  // O_NONBLOCK: opening a FIFO waits for a writer, forever if none comes; this way it
  // opens at once and is refused below. A regular file's reads ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return invalid_argument(what + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return invalid_argument(what + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument(what + "is " + file_kind(st.st_mode) + ", not a regular file of " +
                            std::to_string(kMinSecretBytes) + " to " +
                            std::to_string(kMaxSecretBytes) + " bytes");
  }
  if ((st.st_mode & 077) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalid_argument(what + "is accessible by group or others (mode " + mode +
                            "); make it private with chmod 600");
  }
  // A text secret of kMaxSecretBytes may end in "\r\n"; one byte more tells a file too long.
  const size_t limit = kMaxSecretBytes + 2;
  if (static_cast<uint64_t>(st.st_size) > limit) {
    ::close(fd);
    return invalid_argument(what + "holds " + std::to_string(st.st_size) + " bytes; a secret is " +
                            std::to_string(kMinSecretBytes) + " to " +
                            std::to_string(kMaxSecretBytes) + " bytes");
  }
  std::vector<uint8_t> bytes(limit + 1);
  size_t have = 0;
  while (have < bytes.size()) {
    ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      sodium_memzero(bytes.data(), bytes.size());
      return invalid_argument(what + std::strerror(err));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  ::close(fd);
  if (have > limit) {  // it grew while being read
    sodium_memzero(bytes.data(), bytes.size());
    return invalid_argument(what + "holds more than " + std::to_string(limit) +
                            " bytes; a secret is " + std::to_string(kMinSecretBytes) + " to " +
                            std::to_string(kMaxSecretBytes) + " bytes");
  }
  have = secret_length(std::span<const uint8_t>(bytes.data(), have));
  auto key = from_secret(std::span<const uint8_t>(bytes.data(), have));
  sodium_memzero(bytes.data(), bytes.size());
  if (!key.ok()) return key.status().with_context("cluster secret file '" + path + "'");
  return key;
}

Result<std::shared_ptr<const ClusterKey>> ClusterKey::from(const config::Settings& settings) {
  PDKV_ASSIGN_OR_RETURN(std::string path, config::read<config::kSecretFile>(settings));
  if (path.empty()) return std::shared_ptr<const ClusterKey>();
  auto key = from_file(path);
  if (!key.ok()) return key.status().with_context(std::string(config::kSecretFile.name));
  return key;
}

ClusterKey::~ClusterKey() { sodium_memzero(master_.data(), master_.size()); }

std::array<uint8_t, 32> ClusterKey::derived(KeyUse use) const {
  std::array<uint8_t, 32> out{};
  crypto_kdf_derive_from_key(out.data(), out.size(), static_cast<uint64_t>(use), kKdfContext,
                             master_.data());
  return out;
}

ClusterKey::Mac ClusterKey::mac(KeyUse use,
                                std::initializer_list<std::span<const uint8_t>> parts) const {
  std::array<uint8_t, 32> key = derived(use);
  crypto_auth_hmacsha512256_state st;
  crypto_auth_hmacsha512256_init(&st, key.data(), key.size());
  put_length(&st, parts.size());
  for (std::span<const uint8_t> part : parts) {
    put_length(&st, part.size());
    crypto_auth_hmacsha512256_update(&st, part.data(), part.size());
  }
  Mac out{};
  crypto_auth_hmacsha512256_final(&st, out.data());
  sodium_memzero(key.data(), key.size());
  sodium_memzero(&st, sizeof st);
  return out;
}

bool ClusterKey::verify(KeyUse use, std::span<const uint8_t> mac,
                        std::initializer_list<std::span<const uint8_t>> parts) const {
  if (mac.size() != kMacBytes) return false;
  Mac expected = this->mac(use, parts);
  return crypto_verify_32(expected.data(), mac.data()) == 0;
}

ClusterKey::CurvePair ClusterKey::curve_pair(KeyUse use) const {
  std::array<uint8_t, 32> seed = derived(use);
  CurvePair pair;
  crypto_box_seed_keypair(pair.public_key.data(), pair.secret_key.data(), seed.data());
  sodium_memzero(seed.data(), seed.size());
  return pair;
}

ClusterKey::Nonce ClusterKey::random_nonce() {
  (void)init_sodium();
  Nonce n{};
  randombytes_buf(n.data(), n.size());
  return n;
}

uint64_t ClusterKey::random_u64() {
  (void)init_sodium();
  uint64_t v = 0;
  randombytes_buf(&v, sizeof v);
  return v;
}

void warn_unauthenticated(std::string_view component) {
  static Mutex mu;
  static std::set<std::string, std::less<>> warned;
  {
    MutexLock lock(mu);
    if (!warned.emplace(component).second) return;
  }
  PDKV_LOG_WARN(
      "{}: NO CLUSTER SECRET (PDKV_SECRET_FILE unset): this process is UNAUTHENTICATED; anyone "
      "who can reach its ports can read and write the KV memory it serves. Fine for "
      "development on a trusted host; see docs/SECURITY.md to provision a secret.",
      component);
}

}  // namespace pdkv
