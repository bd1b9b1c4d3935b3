// engine_fuzz_seeds <dir>: writes valid frames as seeds into <dir>/tcp_frame_fuzzer/ and
// <dir>/lease_wire_fuzzer/ (bench/fuzz). Random bytes almost never pass a magic, version
// and type check, so without these the fuzzers would spend their time on the header.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/backends/tcp/tcp_frame.h"
#include "engine/lease/messages.h"
#include "engine/lease/wire.h"
#include "engine/path/path_messages.h"

namespace fs = std::filesystem;
namespace tcp = pdkv::engine::tcp;
namespace lease = pdkv::engine::lease;

namespace {

int write_seeds(const fs::path& dir, const std::vector<std::vector<uint8_t>>& seeds) {
  fs::create_directories(dir);
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(dir / ("seed_" + std::to_string(i)), std::ios::binary)
        .write(reinterpret_cast<const char*>(seeds[i].data()),
               static_cast<std::streamsize>(seeds[i].size()));
  }
  return static_cast<int>(seeds.size());
}

// Header + entry table of a PART (the fuzzer decodes no further than the table).
std::vector<uint8_t> tcp_part(uint64_t part_id, const std::vector<tcp::WireEntry>& entries) {
  tcp::FrameHeader h;
  h.type = tcp::FrameType::kPart;
  h.part_id = part_id;
  h.count = static_cast<uint32_t>(entries.size());
  for (const auto& e : entries) h.payload_bytes += e.bytes();
  std::vector<uint8_t> out(tcp::kHeaderSize + entries.size() * tcp::kEntrySize);
  tcp::encode_header(h, out.data());
  for (size_t i = 0; i < entries.size(); ++i) {
    tcp::encode_entry(entries[i], out.data() + tcp::kHeaderSize + i * tcp::kEntrySize);
  }
  return out;
}

std::vector<std::vector<uint8_t>> tcp_seeds() {
  std::vector<std::vector<uint8_t>> s;
  for (auto type : {tcp::FrameType::kHello, tcp::FrameType::kHelloAck}) {
    tcp::FrameHeader h;
    h.type = type;
    h.aux = 3;  // stream index
    s.emplace_back(tcp::kHeaderSize);
    tcp::encode_header(h, s.back().data());
  }
  s.push_back(tcp_part(1, {{0x10000, 4096, 1, 0}}));
  // A page of a head-split KV buffer: 16 blocks of 512 B, 4 KiB apart, as one run.
  s.push_back(tcp_part(2, {{0x200000, 512, 16, 4096, 0x5eed}, {0x400000, 65536, 1, 0, 0x5eed}}));
  s.push_back(tcp_part(3, {{0x1000, 1, 1, 0}, {0x2000, 8, 3, 8}, {0x3000, 32, 2, 64}}));
  s.push_back(tcp::encode_ack(4, 1 << 20, pdkv::Status(), 0, 0));
  s.push_back(tcp::encode_ack(5, 0, pdkv::out_of_range("block 7 outside registered memory"), 7,
                              0xdead0000));
  return s;
}

std::vector<uint8_t> lease_frame(lease::MsgType type, const std::vector<uint8_t>& payload) {
  std::vector<uint8_t> out(lease::kFrameHeaderBytes);
  lease::encode_frame_header(type, static_cast<uint32_t>(payload.size()), out.data());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

std::vector<std::vector<uint8_t>> lease_seeds() {
  using lease::MsgType;
  std::vector<std::vector<uint8_t>> s;
  std::vector<uint8_t> p;
  auto add = [&](MsgType type) {
    s.push_back(lease_frame(type, p));
    p.clear();
  };
  lease::encode_hello({"shm", "0c4f8a2e-boot-id/4026531836"}, &p);
  add(MsgType::kHello);
  lease::encode_hello_ack({true, "", 4242, "0c4f8a2e-boot-id/4026531836", 5000, "probe"}, &p);
  add(MsgType::kHelloAck);
  lease::encode_hello_ack({false, "this endpoint runs the 'ucx' backend", 7, "id", 100, ""}, &p);
  add(MsgType::kHelloAck);
  const uint64_t ranges[] = {0x10000, 4096,    7,     0x20000, 512,
                             7,       0x30000, 65536, 0};  // dst, length, grant
  lease::encode_lease(9, ranges, &p);
  add(MsgType::kLease);
  lease::encode_lease(10, {}, &p);
  add(MsgType::kLease);
  lease::encode_grant({9, true, 0, 0, 3, ""}, &p);
  add(MsgType::kGrant);
  lease::encode_grant({10, false, 2, 0x30000, 3, "destination not registered"}, &p);
  add(MsgType::kGrant);
  lease::encode_part_id(9, &p);
  add(MsgType::kDone);
  lease::encode_part_id(9, &p);
  add(MsgType::kDoneAck);
  add(MsgType::kRegionsReq);
  lease::encode_regions({4, {{0x10000, 1 << 20, "rkey-a"}, {0x800000, 4096, "rkey-bb"}}}, &p);
  add(MsgType::kRegions);
  p.assign(32, 0x5a);
  add(MsgType::kAuthHello);
  p.assign(64, 0xa5);
  add(MsgType::kAuthChallenge);
  p.assign(32, 0x3c);
  add(MsgType::kAuthProof);
  lease::encode_auth_refused("this endpoint admits cluster members only", &p);
  add(MsgType::kAuthRefused);
  // The path channel shares these frames (engine/path/path_messages.h).
  pdkv::engine::PathHello hello;
  hello.endpoint = "10.0.0.1:5000";
  hello.locality = {"0c4f8a2e-boot-id", 4026531840, 4026531836, 4242};
  hello.challenge.fill(0x77);
  hello.proof_addr = 0x7ffd0000;
  hello.offers = {{"tcp", "10.0.0.1:5001", true}, {"shm", "10.0.0.1:5002", false}};
  pdkv::engine::encode_path_hello(hello, &p);
  add(MsgType::kPathHello);
  pdkv::engine::encode_path_choice({pdkv::engine::PathKind::kTcp, "shm: different hosts"}, &p);
  add(MsgType::kPathChoice);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: engine_fuzz_seeds <dir>\n");
    return 2;
  }
  int n = write_seeds(fs::path(argv[1]) / "tcp_frame_fuzzer", tcp_seeds());
  n += write_seeds(fs::path(argv[1]) / "lease_wire_fuzzer", lease_seeds());
  std::printf("wrote %d seeds\n", n);
  return 0;
}
