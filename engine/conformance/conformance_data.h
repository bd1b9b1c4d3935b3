// What the conformance suites share: the backends they run over, random data and blocks,
// and the check of a receiver's region (by hash, canaries included).
//
// Thread safety: pure functions, except expect_region (one thread per BackendPeerProcess).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/conformance/backend_peer_process.h"
#include "engine/write_block.h"

namespace pdkv::engine::testing {

// "shm", and "ucx:<UCX transports>" (PDKV_UCX_TLS for both processes) when UCX is built.
std::vector<std::string> backends_under_test();
// The backend's name in such a parameter ("ucx" of "ucx:tcp").
std::string backend_of(const std::string& param);
// Sets PDKV_UCX_TLS from the parameter, if it names transports.
void apply_transports(const std::string& param);
// A GoogleTest-safe name for the parameter.
std::string param_name(const std::string& param);

// Random block sizes tiling a region, shuffled destinations; returns blocks whose
// sources live in `src` and applies them to `model` (the expected region image).
std::vector<WriteBlock> random_blocks(uint64_t seed, const std::vector<uint8_t>& src,
                                      uint64_t dst_base, std::vector<uint8_t>* model);
std::vector<uint8_t> random_bytes(uint64_t n, uint64_t seed);

// GoogleTest expectations: the peer's region equals `model` and its canaries are intact.
void expect_region(BackendPeerProcess& p, const std::vector<uint8_t>& model);

}  // namespace pdkv::engine::testing
