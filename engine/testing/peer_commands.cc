#include "engine/testing/peer_commands.h"

#include <algorithm>
#include <charconv>
#include <vector>

namespace pdkv::engine::testing {
namespace {

struct VerbInfo {
  std::string_view word;
  PeerVerb verb;
  size_t args;
};
constexpr VerbInfo kVerbs[] = {
    {"PING", PeerVerb::kPing, 0},        {"HASH", PeerVerb::kHash, 0},
    {"UNREG", PeerVerb::kUnregister, 0}, {"GRANT", PeerVerb::kGrant, 3},
    {"REVOKE", PeerVerb::kRevoke, 1},    {"PUSH", PeerVerb::kPush, 4},
    {"UPLOAD", PeerVerb::kUpload, 0},    {"DOWNLOAD", PeerVerb::kDownload, 0},
    {"QUIT", PeerVerb::kQuit, 0},        {"EXIT", PeerVerb::kQuit, 0},
};

std::vector<std::string_view> words_of(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    if (line[i] == ' ') {
      ++i;
      continue;
    }
    const size_t end = std::min(line.find(' ', i), line.size());
    words.push_back(line.substr(i, end - i));
    i = end;
  }
  return words;
}

Result<uint64_t> number(std::string_view line, std::string_view word) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size()) {
    return invalid_argument("peer command '" + std::string(line) + "': '" + std::string(word) +
                            "' is not a decimal uint64");
  }
  return value;
}

}  // namespace

Result<PeerCommand> parse_peer_command(std::string_view line) {
  const std::vector<std::string_view> words = words_of(line);
  if (words.empty()) return invalid_argument("empty peer command");
  for (const VerbInfo& v : kVerbs) {
    if (words[0] != v.word) continue;
    if (words.size() != v.args + 1) {
      return invalid_argument("peer command '" + std::string(line) + "': " + std::string(v.word) +
                              " takes " + std::to_string(v.args) + " argument(s)");
    }
    PeerCommand c;
    c.verb = v.verb;
    if (v.verb == PeerVerb::kPush) {
      c.endpoint = std::string(words[1]);
      PDKV_ASSIGN_OR_RETURN(c.dst, number(line, words[2]));
      PDKV_ASSIGN_OR_RETURN(c.length, number(line, words[3]));
      PDKV_ASSIGN_OR_RETURN(c.rounds, number(line, words[4]));
      return c;
    }
    if (v.args >= 1) {
      PDKV_ASSIGN_OR_RETURN(c.id, number(line, words[1]));
    }
    if (v.args >= 3) {
      PDKV_ASSIGN_OR_RETURN(c.offset, number(line, words[2]));
      PDKV_ASSIGN_OR_RETURN(c.length, number(line, words[3]));
    }
    return c;
  }
  return invalid_argument("unknown peer command '" + std::string(line) + "'");
}

std::string format_peer_command(const PeerCommand& c) {
  switch (c.verb) {
    case PeerVerb::kPing: return "PING";
    case PeerVerb::kHash: return "HASH";
    case PeerVerb::kUnregister: return "UNREG";
    case PeerVerb::kGrant:
      return "GRANT " + std::to_string(c.id) + " " + std::to_string(c.offset) + " " +
             std::to_string(c.length);
    case PeerVerb::kRevoke: return "REVOKE " + std::to_string(c.id);
    case PeerVerb::kPush:
      return "PUSH " + c.endpoint + " " + std::to_string(c.dst) + " " + std::to_string(c.length) +
             " " + std::to_string(c.rounds);
    case PeerVerb::kUpload: return "UPLOAD";
    case PeerVerb::kDownload: return "DOWNLOAD";
    case PeerVerb::kQuit: return "QUIT";
  }
  return "";
}

}  // namespace pdkv::engine::testing
