#include "engine/path/locality.h"

#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace pdkv::engine {
namespace {

uint64_t ns_inode(const char* path) {
  struct stat st {};
  return ::stat(path, &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

}  // namespace

Locality local_locality() {
  Locality l;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, l.boot_id);
  l.net_ns = ns_inode("/proc/self/ns/net");
  l.pid_ns = ns_inode("/proc/self/ns/pid");
  l.pid = static_cast<uint32_t>(::getpid());
  return l;
}

LocalityVerdict prove_locality(const Locality& mine, const Locality& peer, uint64_t proof_addr,
                               const LocalityChallenge& challenge) {
  LocalityVerdict v;
  if (peer.boot_id.empty() || peer.boot_id != mine.boot_id) {
    v.why_not = "different hosts (the peer's boot id differs)";
    return v;
  }
  const std::string other_net = "another network namespace on this host (treated as another host)";
  LocalityChallenge seen{};
  iovec local{seen.data(), seen.size()};
  iovec remote{reinterpret_cast<void*>(proof_addr), seen.size()};
  const ssize_t n = ::process_vm_readv(static_cast<pid_t>(peer.pid), &local, 1, &remote, 1, 0);
  if (n < 0 && (errno == EPERM || errno == EACCES)) {
    // This process may not touch the peer's memory (nor read its namespaces): the claim
    // stands unproven, and shm is impossible either way.
    const int err = errno;
    if (peer.net_ns != mine.net_ns) {
      v.why_not = other_net;
      return v;
    }
    v.same_host = peer.pid_ns == mine.pid_ns;
    v.why_not = "no ptrace rights over pid " + std::to_string(peer.pid) + " (" +
                std::strerror(err) +
                ": same uid and kernel.yama.ptrace_scope, or CAP_SYS_PTRACE, are needed)";
    return v;
  }
  if (n != static_cast<ssize_t>(seen.size()) || seen != challenge) {
    v.why_not = "the peer claims this host but its proof failed (pid " + std::to_string(peer.pid) +
                " does not hold this handshake's challenge): treated as another host";
    return v;
  }
  // The pid is the peer: its namespaces are read here, not taken from its claim.
  const std::string proc = "/proc/" + std::to_string(peer.pid) + "/ns/";
  if (ns_inode((proc + "net").c_str()) != mine.net_ns || mine.net_ns == 0) {
    v.why_not = other_net;
    return v;
  }
  if (ns_inode((proc + "pid").c_str()) != mine.pid_ns || peer.pid_ns != mine.pid_ns) {
    v.why_not = "another pid namespace on this host (its pids differ from ours)";
    return v;
  }
  v.same_host = true;
  v.ptrace = true;
  return v;
}

}  // namespace pdkv::engine
