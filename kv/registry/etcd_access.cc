#include "kv/registry/etcd_access.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace pdkv::kv {
namespace {

Result<std::string> read_password_file(const std::string& path) {
  const std::string what = "PDKV_ETCD_PASSWORD_FILE '" + path + "': ";
  // O_NONBLOCK: a FIFO opens at once (and is refused below) instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return invalid_argument(what + std::strerror(errno));
  struct stat st {};
  std::string error;
  if (::fstat(fd, &st) != 0) {
    error = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    error = "not a regular file";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = std::string("is accessible by group or others (mode ") + mode +
            "); make it private with chmod 600";
  }
  std::string password;
  if (error.empty()) {
    // One byte more than allowed tells a file too long, even one growing while read.
    password.resize(kMaxEtcdPasswordBytes + 3);
    size_t have = 0;
    while (have < password.size()) {
      const ssize_t n = ::read(fd, password.data() + have, password.size() - have);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) error = std::strerror(errno);
      if (n <= 0) break;
      have += static_cast<size_t>(n);
    }
    password.resize(have);
  }
  ::close(fd);
  if (!error.empty()) return invalid_argument(what + error);
  while (!password.empty() && (password.back() == '\n' || password.back() == '\r'))
    password.pop_back();
  if (password.empty() || password.size() > kMaxEtcdPasswordBytes)
    return invalid_argument(what + "a password is 1 to " + std::to_string(kMaxEtcdPasswordBytes) +
                            " bytes");
  return password;
}

}  // namespace

Result<EtcdAccess> etcd_access_from(const EtcdAccessSettings& o) {
  EtcdAccess access;
  access.ca_file = o.ca_file;
  access.cert_file = o.cert_file;
  access.key_file = o.key_file;
  access.user = o.user;
  if (access.cert_file.empty() != access.key_file.empty())
    return invalid_argument(
        "PDKV_ETCD_CERT_FILE and PDKV_ETCD_KEY_FILE: a client certificate needs its key");
  if (!access.cert_file.empty() && access.ca_file.empty())
    return invalid_argument(
        "PDKV_ETCD_CERT_FILE: a client certificate is shown over TLS only; set "
        "PDKV_ETCD_CA_FILE to the members' CA");
  if (access.user.empty() != o.password_file.empty())
    return invalid_argument(
        "PDKV_ETCD_USER and PDKV_ETCD_PASSWORD_FILE: a user needs its password file");
  if (access.user.size() > 256) return invalid_argument("PDKV_ETCD_USER: at most 256 bytes");
  if (!o.password_file.empty()) {
    PDKV_ASSIGN_OR_RETURN(access.password, read_password_file(o.password_file));
  }
  return access;
}

}  // namespace pdkv::kv
