// pdkv_hostile_peer: a stranger on the network of a pdkv cluster, the attacker of the
// hostile-peer suite (the trust boundaries of docs/SECURITY.md). One sub-command per
// attack; it speaks the documented protocols with the project's own codecs and prints
// ONE JSON line saying what it observed, e.g.
//   {"attack":"raw_write","refused":true,"stage":"write","status":"OutOfRange: ..."}
// Whether the victims were hurt is checked on the victims (python/tests/
// test_hostile_peers.py, `pdkv chaos --hostile`). It holds no cluster secret unless
// --secret-file gives it one of its own (never the victims').
//
//   pdkv_hostile_peer raw-write --engine 127.0.0.1:4000 --dst 0x7f.. --length 4096
//   pdkv_hostile_peer forged-status --control tcp://127.0.0.1:5000 --room 7 --state success
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>

#include "robustness/hostile/bootstrap_attacks.h"
#include "robustness/hostile/control_attacks.h"
#include "robustness/hostile/engine_attacks.h"

namespace {

using pdkv::hostile::AttackOptions;
using Attack = std::function<nlohmann::json(const AttackOptions&)>;

struct AttackEntry {
  const char* name;
  const char* help;
  Attack run;
};

const AttackEntry kAttacks[] = {
    {"forged-pong", "Pongs claiming a prefill (--as) restarted, to a decode (--control)",
     pdkv::hostile::forged_pong},
    {"forged-abort", "Aborts of --room claiming to come from --as", pdkv::hostile::forged_abort},
    {"forged-status", "TransferStatus{--state} of --room to a decode",
     pdkv::hostile::forged_status},
    {"hijack-registration", "a registration naming the decode at --as, to a prefill",
     pdkv::hostile::hijack_registration},
    {"whole-pool", "register, then pre-allocate --room reading every KV buffer whole",
     pdkv::hostile::whole_pool},
    {"ping-flood", "--count Pings with closed reply ports", pdkv::hostile::ping_flood},
    {"abort-flood", "--count Aborts of rooms nobody opened", pdkv::hostile::abort_flood},
    {"pre-allocation-flood", "register, then pre-allocate --count rooms nobody opened",
     pdkv::hostile::pre_allocation_flood},
    {"registration-flood", "--count registrations from made-up decode endpoints",
     pdkv::hostile::registration_flood},
    {"garbage-flood", "--count messages that are no pdkv message", pdkv::hostile::garbage_flood},
    {"raw-write", "write --count x --length bytes at --dst under --grant",
     pdkv::hostile::raw_write},
    {"probe", "one hand-made PART at --dst, the ACK read as it is", pdkv::hostile::probe},
    {"idle-connections", "--count data connections that never speak",
     pdkv::hostile::idle_connections},
    {"hold-slots", "keep --count silent connections open for --hold-ms from --source",
     pdkv::hostile::hold_slots},
    {"huge-header", "--count connections sending a PART header of --entries entries, then nothing",
     pdkv::hostile::huge_header},
    {"route-poison", "re-point, mangle and delete engine_rank 0's route",
     pdkv::hostile::route_poison},
    {"signed-put", "a member's signed PUT /route (--member-secret-file), printed for replay",
     [](const AttackOptions& o) { return pdkv::hostile::signed_request(o, "PUT"); }},
    {"signed-get", "a member's signed GET of the layout (--member-secret-file), printed for replay",
     [](const AttackOptions& o) { return pdkv::hostile::signed_request(o, "GET"); }},
    {"http-flood", "--count unauthenticated PUT /route while probing /health",
     pdkv::hostile::http_flood},
};

}  // namespace

int main(int argc, char** argv) {
  // The attacker's own warnings (refused handshakes, full queues) are expected noise.
  setenv("PDKV_LOG_LEVEL", "error", 0);
  CLI::App app{"pdkv_hostile_peer: tries one attack on a pdkv cluster and prints what it saw"};
  app.require_subcommand(1);
  app.fallthrough();
  AttackOptions o;
  std::string secret_file;
  std::string member_secret_file;
  app.add_option("--control", o.control, "victim's control endpoint tcp://host:port");
  app.add_option("--as", o.as, "endpoint the forged messages claim to come from");
  app.add_option("--engine", o.engine, "victim's engine host:port");
  app.add_option("--as-engine", o.as_engine,
                 "engine endpoint the stranger's registration names (another rank's)");
  app.add_option("--bootstrap", o.bootstrap, "bootstrap server host:port");
  app.add_option("--secret-file", secret_file,
                 "a secret of the attacker's own (not the cluster's)");
  app.add_option("--member-secret-file", member_secret_file,
                 "signed-put/get: the cluster's own secret (they play a member)");
  app.add_option("--room", o.rooms, "room(s) the forged messages name");
  app.add_option("--count", o.count, "messages, connections or requests")->capture_default_str();
  app.add_option("--dst", o.dst, "first destination address (0x... accepted)");
  app.add_option("--length", o.length, "bytes per write")->capture_default_str();
  app.add_option("--grant", o.grant, "write grant named (0 = none)")->capture_default_str();
  app.add_option("--entries", o.entries, "entries a huge header declares")->capture_default_str();
  app.add_option("--state", o.state, "forged status: failed or success")
      ->check(CLI::IsMember({"failed", "success"}));
  app.add_option("--ranges", o.ranges, "forged status: checksum ranges it names")
      ->capture_default_str();
  app.add_option("--range-addr", o.range_addr, "forged status: address of each range");
  app.add_option("--range-length", o.range_length, "forged status: bytes of each range");
  app.add_option("--source", o.source, "hold-slots: local address to connect from");
  app.add_option("--threads", o.threads, "concurrent HTTP clients")->capture_default_str();
  app.add_option("--hold-ms", o.hold_ms, "how long to watch the victim's reaction")
      ->capture_default_str();
  app.add_option("--first-port", o.first_port, "first made-up port")->capture_default_str();
  app.add_flag("--honest", o.honest, "whole-pool: ask for --count pages of the room instead");
  app.add_flag("--malformed-only", o.malformed_only, "route-poison: only malformed routes");
  app.add_option("--layers", o.shape.layers, "victims' KV layers")->capture_default_str();
  app.add_option("--heads", o.shape.heads, "victims' KV heads per rank")->capture_default_str();
  app.add_option("--head-dim", o.shape.head_dim)->capture_default_str();
  app.add_option("--dtype-bytes", o.shape.dtype_bytes)->capture_default_str();
  app.add_option("--page-size", o.shape.page_size)->capture_default_str();
  app.add_option("--pages", o.shape.pages, "pages per KV buffer of the victims")
      ->capture_default_str();
  std::map<CLI::App*, const AttackEntry*> commands;
  for (const AttackEntry& a : kAttacks) commands[app.add_subcommand(a.name, a.help)] = &a;
  CLI11_PARSE(app, argc, argv);
  if (!secret_file.empty() || !member_secret_file.empty()) {
    auto key = pdkv::ClusterKey::from_file(secret_file.empty() ? member_secret_file : secret_file);
    if (!key.ok()) {
      std::fprintf(stderr, "pdkv_hostile_peer: %s\n", key.status().to_string().c_str());
      return 2;
    }
    o.key = *key;
  }
  for (const auto& [cmd, attack] : commands) {
    if (!cmd->parsed()) continue;
    const nlohmann::json report = attack->run(o);
    std::printf("%s\n", report.dump().c_str());
    std::fflush(stdout);
    return report.contains("error") ? 1 : 0;
  }
  return 2;
}
