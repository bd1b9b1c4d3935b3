// Attacks on the bootstrap HTTP server: route poisoning and a
// flood of unauthenticated writes. Each returns what the attacker observed as one JSON
// object. Slow clients and chunked bodies are left to the HTTP servers' own hardening.
#pragma once

#include <nlohmann/json.hpp>

#include "robustness/hostile/attack_options.h"

namespace pdkv::hostile {

// Reads the instance layout (reads are open unless --authenticate-reads), then tries to
// re-point engine_rank 0 of DP group 0 at 127.0.0.1:<first_port>, to register it at
// rank_ip "*", "127.0.0.1:1" and valid addresses followed by a NUL byte, and to delete
// it; reads the route back. `malformed_only`: only the routes the server must refuse
// even without a secret.
nlohmann::json route_poison(const AttackOptions& o);
// `count` unauthenticated PUT /route with a malformed body from `threads` clients while
// GET /health is probed every 20 ms: answers by status, and how /health fared.
nlohmann::json http_flood(const AttackOptions& o);

// Not an attack: a member's request, signed with the cluster secret (`key`, given on
// purpose) and sent once to `bootstrap`, reported in full ("method", "target", "body",
// "header", "status") as an eavesdropper would capture it, so a test can replay it.
// `method` "PUT": registers engine_rank 0 at 127.0.0.1:<first_port>; "GET": reads the layout.
nlohmann::json signed_request(const AttackOptions& o, const std::string& method);

}  // namespace pdkv::hostile
