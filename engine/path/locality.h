// Locality: where an engine runs, as its peers need it to pick a path, and the proof that
// a peer claiming to share this host really does.
//
// An engine advertises its kernel's boot id, the inodes of its network and pid namespaces,
// its pid, and the address of a proof slot in its own memory into which it copies the
// challenge its peer sent for this handshake. The peer then reads that slot with
// process_vm_readv: the read succeeds and returns its own fresh challenge only if the
// advertiser is a process of this kernel and pid namespace, at that pid, and the reader
// has ptrace rights over it, which is exactly what a shm (CMA) write needs. A peer that
// lies about its boot id or namespaces cannot pass: on another host the pid names some
// other process (or none) and the slot does not hold the challenge. Once the pid is proven
// to be the peer, its namespaces are read from /proc/<pid>/ns, not taken from its claim.
// Same host here means
// the same boot id, network namespace and pid namespace: an engine in another network
// namespace (a container, a test's "remote" host) is treated as another host even though
// the kernel is shared, since its operator separated it on purpose.
//
// Thread safety: pure functions; prove_locality does one syscall.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace pdkv::engine {

inline constexpr size_t kLocalityChallengeBytes = 32;
using LocalityChallenge = std::array<uint8_t, kLocalityChallengeBytes>;

struct Locality {
  std::string boot_id;  // /proc/sys/kernel/random/boot_id
  uint64_t net_ns = 0;  // inode of /proc/self/ns/net
  uint64_t pid_ns = 0;  // inode of /proc/self/ns/pid
  uint32_t pid = 0;
  bool operator==(const Locality&) const = default;
};

// This process's locality (read from /proc each call: namespaces can change).
Locality local_locality();

// What a sender learned about a peer from its locality and proof.
struct LocalityVerdict {
  bool same_host = false;  // same boot id and namespaces, proven by the read
  bool ptrace = false;     // this process may read (and so write) the peer's memory
  std::string why_not;     // when either is false: the reason, for logs and reports
};

// Compares boot ids; only when they match, reads kLocalityChallengeBytes at `proof_addr`
// in process `peer.pid`, compares them with `challenge` (the one this side sent), then
// compares the proven process's namespaces with ours. EPERM gives the claim (same_host
// when the claimed namespaces match) without ptrace.
LocalityVerdict prove_locality(const Locality& mine, const Locality& peer, uint64_t proof_addr,
                               const LocalityChallenge& challenge);

}  // namespace pdkv::engine
