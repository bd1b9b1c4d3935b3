// EtcdAccess: how pdkv proves itself to etcd, the way etcd is run in production (its own
// access control, docs/SECURITY.md): client TLS (the members' CA, and a client certificate
// where etcd asks for one) and an etcd user whose password is read from a private file.
// All empty: plain HTTP, no user (etcd without auth, e.g. on loopback in tests).
//
// Thread safety: plain values and a pure function.
#pragma once

#include <string>

#include "common/status.h"

namespace pdkv::kv {

inline constexpr size_t kMaxEtcdPasswordBytes = 4096;

struct EtcdAccess {
  std::string ca_file;    // set: every endpoint over TLS, verified against it
  std::string cert_file;  // client certificate (with key_file)
  std::string key_file;
  std::string user;  // set: authenticate as this user
  std::string password;

  bool tls() const { return !ca_file.empty(); }
};

// The access settings as given (PDKV_ETCD_CA_FILE, _CERT_FILE, _KEY_FILE, _USER,
// _PASSWORD_FILE; registry_options.h reads them).
struct EtcdAccessSettings {
  std::string ca_file, cert_file, key_file, user, password_file;
};

// The access `settings` ask for, the password read from its file: a regular file, not
// accessible by group or others, at most kMaxEtcdPasswordBytes, without its trailing line
// end. kInvalidArgument naming the setting for an incomplete combination (a certificate
// without its key or without a CA, a user without a password file or the reverse) or a
// file that cannot be used.
Result<EtcdAccess> etcd_access_from(const EtcdAccessSettings& settings);

}  // namespace pdkv::kv
